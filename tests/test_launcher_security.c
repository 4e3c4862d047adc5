/* Tests of launcher/security: the credentials maker (fl_security_make, what `fleet certs`
 * runs: the folder and its files with their modes, the certificate's subjectAltNames as
 * `openssl x509 -text` prints them, its signature by the CA and its validity, the refusal
 * to overwrite, the refusal of bad arguments, a clear error without openssl); loading a
 * folder (the learner token only where asked for); and the rule for binding without TLS
 * (the check itself: nothing here binds a non-loopback address). `fleet certs` itself
 * (its arguments, exit codes) is tests/test_cli_security.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/rpc.h"
#include "launcher/security.h"
#include "tests/proc_util.h"

static char g_tmp[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-certs-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

static int mode_of(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0 ? (int)(st.st_mode & 0777) : -1;
}

/* The output of a command (malloc'd). */
static char *output_of(const char *cmd) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = calloc(cap, 1);
    assert_non_null(buf);
    size_t k;
    while ((k = fread(buf + n, 1, cap - 1 - n, p)) > 0) n += k;
    pclose(p);
    return buf;
}

static void assert_hex_token(const char *dir, const char *name, char *out) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *t = read_file(path);
    assert_non_null(t);
    assert_int_equal(strlen(t), 65);
    assert_int_equal(t[64], '\n');
    for (int i = 0; i < 64; i++) assert_non_null(strchr("0123456789abcdef", t[i]));
    memcpy(out, t, 64);
    out[64] = '\0';
    free(t);
}

static void test_make_makes_the_folder(void **state) {
    (void)state;
    char dir[128], why[1024];
    snprintf(dir, sizeof dir, "%s/a/creds", g_tmp);
    const char *hosts[] = {"node01", "10.1.2.3", "fd00::7"};
    if (fl_security_make(dir, hosts, 3, 3, why, sizeof why) != 0) fail_msg("make: %s", why);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(mode_of(dir, FL_TLS_CA_KEY), 0600);
    assert_int_equal(mode_of(dir, FL_TLS_KEY), 0600);
    assert_int_equal(mode_of(dir, FL_TLS_TOKEN), 0600);
    assert_int_equal(mode_of(dir, FL_TLS_LEARNER_TOKEN), 0600);
    assert_int_equal(mode_of(dir, FL_TLS_CA), 0644);
    assert_int_equal(mode_of(dir, FL_TLS_CERT), 0644);
    /* Nothing else is left in the folder. */
    assert_int_equal(mode_of(dir, ".fleet.csr"), -1);
    assert_int_equal(mode_of(dir, ".fleet.ext"), -1);
    char run[65], learner[65];
    assert_hex_token(dir, FL_TLS_TOKEN, run);
    assert_hex_token(dir, FL_TLS_LEARNER_TOKEN, learner);
    assert_string_not_equal(run, learner);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "openssl x509 -in %s/fleet.pem -noout -text 2>&1", dir);
    char *text = output_of(cmd);
    char host[256] = "", want[300];
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "DNS:%s", host);
    const char *sans[] = {"IP Address:127.0.0.1", "IP Address:0:0:0:0:0:0:0:1",   "DNS:localhost", want, "DNS:node01",
                          "IP Address:10.1.2.3",  "IP Address:FD00:0:0:0:0:0:0:7"};
    for (size_t i = 0; i < sizeof sans / sizeof sans[0]; i++)
        if (!strstr(text, sans[i])) fail_msg("no %s in the certificate:\n%s", sans[i], text);
    assert_non_null(strstr(text, "CA:FALSE"));
    assert_non_null(strstr(text, "TLS Web Server Authentication"));
    free(text);
    snprintf(cmd, sizeof cmd, "openssl x509 -in %s/ca.pem -noout -text 2>&1", dir);
    text = output_of(cmd);
    assert_non_null(strstr(text, "CA:TRUE"));
    free(text);
    snprintf(cmd, sizeof cmd, "openssl verify -CAfile %s/ca.pem %s/fleet.pem 2>&1", dir, dir);
    text = output_of(cmd);
    assert_non_null(strstr(text, ": OK"));
    free(text);
    /* Valid for the days asked for (3: it expires within 4 days, not within 2). */
    snprintf(cmd, sizeof cmd, "openssl x509 -in %s/fleet.pem -noout -checkend %d >/dev/null && echo valid", dir,
             2 * 86400);
    text = output_of(cmd);
    assert_non_null(strstr(text, "valid"));
    free(text);
    snprintf(cmd, sizeof cmd, "openssl x509 -in %s/fleet.pem -noout -checkend %d >/dev/null || echo expires", dir,
             4 * 86400);
    text = output_of(cmd);
    assert_non_null(strstr(text, "expires"));
    free(text);
}

static void test_make_refuses_to_overwrite(void **state) {
    (void)state;
    char dir[128], path[256], why[1024];
    snprintf(dir, sizeof dir, "%s/b", g_tmp);
    if (fl_security_make(dir, NULL, 0, 1, why, sizeof why) != 0) fail_msg("make: %s", why);
    snprintf(path, sizeof path, "%s/token", dir);
    char *before = read_file(path);
    assert_int_equal(fl_security_make(dir, NULL, 0, 1, why, sizeof why), -1);
    assert_non_null(strstr(why, "refusing to overwrite"));
    char *after = read_file(path);
    assert_string_equal(before, after);
    free(before);
    free(after);
    /* One file of the set is enough to refuse. */
    char only[128];
    snprintf(only, sizeof only, "%s/c", g_tmp);
    mkdir(only, 0755);
    snprintf(path, sizeof path, "%s/learner.token", only);
    FILE *f = fopen(path, "w");
    fputs("x\n", f);
    fclose(f);
    assert_int_equal(fl_security_make(only, NULL, 0, 1, why, sizeof why), -1);
    assert_non_null(strstr(why, "refusing to overwrite"));
    assert_int_equal(mode_of(only, "ca.pem"), -1);
}

/* Bad arguments are refused before anything is made; without openssl on PATH, a message
 * that says so, and no files. */
static void test_make_refusals(void **state) {
    (void)state;
    char dir[128], why[1024];
    snprintf(dir, sizeof dir, "%s/d", g_tmp);
    assert_int_equal(fl_security_make("", NULL, 0, 1, why, sizeof why), -1);
    assert_non_null(strstr(why, "no folder"));
    assert_int_equal(fl_security_make(dir, NULL, 0, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "at least one day"));
    const char *bad[] = {"bad host;rm"};
    assert_int_equal(fl_security_make(dir, bad, 1, 1, why, sizeof why), -1);
    assert_non_null(strstr(why, "'bad host;rm' is not a host name or address"));
    assert_int_equal(mode_of(dir, "ca.pem"), -1);
    char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    setenv("PATH", g_tmp, 1);
    assert_int_equal(fl_security_make(dir, NULL, 0, 1, why, sizeof why), -1);
    if (path) setenv("PATH", path, 1);
    free(path);
    assert_non_null(strstr(why, "openssl command is not on PATH"));
    assert_non_null(strstr(why, "apt-get install openssl"));
    assert_int_equal(mode_of(dir, "ca.pem"), -1);
    assert_int_equal(mode_of(dir, "token"), -1);
}

static void test_load_and_setup(void **state) {
    (void)state;
    char dir[128], path[256], why[1024];
    snprintf(dir, sizeof dir, "%s/e", g_tmp);
    assert_int_equal(fl_security_make(dir, NULL, 0, 1, why, sizeof why), 0);
    assert_int_equal(fl_security_load(dir, 1, why, sizeof why), 0);
    assert_true(fl_rpc_secure());
    fl_config_t cfg;
    fl_config_defaults(&cfg);
    assert_int_equal(fl_security_setup(&cfg, "actor"), 0); /* no run.tls_dir: plaintext */
    assert_false(fl_rpc_secure());
    snprintf(cfg.run_tls_dir, sizeof cfg.run_tls_dir, "%s", dir);
    /* Without learner.token only the learner and the parameter server fail. */
    snprintf(path, sizeof path, "%s/learner.token", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(fl_security_setup(&cfg, "actor"), 0);
    assert_true(fl_rpc_secure());
    assert_int_equal(fl_security_setup(&cfg, "replay"), 0);
    assert_int_equal(fl_security_setup(&cfg, "evaluator"), 0);
    assert_int_equal(fl_security_setup(&cfg, "run"), 0);
    assert_int_equal(fl_security_setup(&cfg, "learner"), 2);
    assert_int_equal(fl_security_setup(&cfg, "paramserver"), 2);
    assert_int_equal(fl_security_load(dir, 1, why, sizeof why), -1);
    assert_non_null(strstr(why, "learner.token"));
    /* A missing file is named. */
    snprintf(path, sizeof path, "%s/fleet.key", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(fl_security_load(dir, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "fleet.key"));
    fl_err_t err;
    fl_rpc_set_security(NULL, &err);
}

static void test_bind_rule(void **state) {
    (void)state;
    fl_err_t err;
    fl_rpc_set_security(NULL, &err);
    fl_config_t cfg;
    fl_config_defaults(&cfg);
    char why[1024];
    const char *loop[] = {"127.0.0.1:0", "127.0.0.1", "localhost:0", "[::1]:0", "unix:/tmp/x.sock", "127.1.2.3:9"};
    for (size_t i = 0; i < sizeof loop / sizeof loop[0]; i++) {
        assert_int_equal(fl_security_check_bind(&cfg, loop[i], why, sizeof why), 0);
        assert_int_equal(fl_security_bind_allowed(&cfg, "replay", loop[i]), 0);
    }
    const char *open_to_all[] = {"0.0.0.0", "0.0.0.0:0", "10.1.2.3:0", "[::]:0", "node01:5000"};
    for (size_t i = 0; i < sizeof open_to_all / sizeof open_to_all[0]; i++) {
        assert_int_equal(fl_security_check_bind(&cfg, open_to_all[i], why, sizeof why), -1);
        assert_non_null(strstr(why, open_to_all[i]));
        assert_non_null(strstr(why, "fleet certs"));
        assert_non_null(strstr(why, "run.tls_dir"));
        assert_non_null(strstr(why, "run.insecure"));
        assert_int_equal(fl_security_bind_allowed(&cfg, "run", open_to_all[i]), 2);
    }
    /* run.insecure: allowed, with a warning. */
    cfg.run_insecure = 1;
    assert_int_equal(fl_security_check_bind(&cfg, "0.0.0.0", why, sizeof why), 1);
    assert_non_null(strstr(why, "without TLS"));
    assert_int_equal(fl_security_bind_allowed(&cfg, "run", "0.0.0.0"), 0);
    /* run.tls_dir: allowed. */
    cfg.run_insecure = 0;
    snprintf(cfg.run_tls_dir, sizeof cfg.run_tls_dir, "%s", g_tmp);
    assert_int_equal(fl_security_check_bind(&cfg, "0.0.0.0:0", why, sizeof why), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_make_makes_the_folder),
        cmocka_unit_test(test_make_refuses_to_overwrite),
        cmocka_unit_test(test_make_refusals),
        cmocka_unit_test(test_load_and_setup),
        cmocka_unit_test(test_bind_rule),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
