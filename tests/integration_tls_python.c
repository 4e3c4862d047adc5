/* Interoperability of fleet's TLS and tokens with another gRPC implementation: a
 * `fleet replay` shard serving with run.tls_dir (credentials from `fleet certs`) on
 * 127.0.0.1, called by grpcio (tests/py/tls_interop.py: a generic unary call of
 * /fleet.Replay/Info on raw bytes). The right token is served; a wrong or missing token is
 * UNAUTHENTICATED; a plaintext channel fails.
 *
 * grpcio is installed from PyPI with pip into <build>/pydeps when the interpreter lacks
 * it (once); where that is impossible (no pip, no network) the test is skipped with a
 * message saying so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/py_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/proc_util.h"

static char g_dir[64];
static char g_env[2048]; /* "PYTHONPATH=... " prefix for commands */
static const char *g_python;

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fleet-tlspy-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_dir);
    return 0;
}

static void dump(const char *path) {
    char *text = read_file(path);
    if (text) fprintf(stderr, "---- %s ----\n%s\n", path, text);
    free(text);
}

/* Starts `fleet replay --listen 127.0.0.1:0 --set run.tls_dir=creds` (log in log) and
 * reads the address it writes to --ready-fd into addr. The pid. */
static pid_t start_replay(const char *creds, const char *log, char *addr, size_t len) {
    char fd_arg[16], tls[300];
    snprintf(tls, sizeof tls, "run.tls_dir=%s", creds);
    char *argv[] = {(char *)fleet_bin(),
                    "replay",
                    "--listen",
                    "127.0.0.1:0",
                    "--ready-fd",
                    fd_arg,
                    "--set",
                    tls,
                    "--set",
                    "replay.capacity=1000",
                    "--set",
                    "replay.min_size_to_sample=100",
                    NULL};
    pid_t pid = start_service_process(argv, fd_arg, log, 120, addr, len);
    assert_true(pid > 0);
    if (!addr[0]) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        dump(log);
        fail_msg("fleet replay with TLS did not report its address");
    }
    return pid;
}

static void test_grpcio_client(void **state) {
    (void)state;
    if (!py_find("grpc", "grpcio", g_env, sizeof g_env, &g_python)) {
        print_message("SKIP: no python3 with grpcio, and pip could not install it\n");
        skip();
    }
    char creds[128], cmd[4096], log[128], addr[300];
    snprintf(creds, sizeof creds, "%s/creds", g_dir);
    snprintf(cmd, sizeof cmd, "%s certs %s >/dev/null", fleet_bin(), creds);
    assert_int_equal(py_shell(cmd), 0);
    snprintf(log, sizeof log, "%s/replay.log", g_dir);
    pid_t pid = start_replay(creds, log, addr, sizeof addr);
    snprintf(cmd, sizeof cmd, "%s timeout 120 %s %s/tests/py/tls_interop.py %s %s/ca.pem %s/token", g_env, g_python,
             fleet_source_dir(), addr, creds, creds);
    int rc = py_shell(cmd);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    if (rc != 0) dump(log);
    assert_int_equal(rc, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* the shard logs the calls its token check refused (the wrong token, the missing one) */
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[1024];
    int refused = 0;
    while (fgets(line, sizeof line, f)) refused += strstr(line, "refused a call at the token check") != NULL;
    fclose(f);
    assert_true(refused >= 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_grpcio_client)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
