/* Tests of launcher/security and `fleet certs`: the folder and its files with their modes, the
 * certificate's subjectAltNames as `openssl x509 -text` prints them, its signature by the
 * CA, the refusal to overwrite, a clear error without openssl; loading a folder (the
 * learner token only where asked for); the rule for binding without TLS (the check
 * itself: nothing here binds a non-loopback address); and the run path of the fleet
 * binary and of this test: no empty entry, which would make the loader look for their
 * libraries in whatever directory they are started from. */
#include <elf.h>
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

#include "launcher/security.h"
#include "cli/verbs.h"
#include "common/config.h"
#include "common/rpc.h"
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

static int certs(const char *dir, const char *a1, const char *a2, const char *a3, const char *a4) {
    char *argv[8] = {"certs", (char *)dir};
    int n = 2;
    const char *more[] = {a1, a2, a3, a4};
    for (int i = 0; i < 4 && more[i]; i++) argv[n++] = (char *)more[i];
    argv[n] = NULL;
    return fl_verb_certs(n, argv);
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

static void test_certs_makes_the_folder(void **state) {
    (void)state;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/a/creds", g_tmp);
    assert_int_equal(certs(dir, "--hosts", "node01,10.1.2.3,fd00::7", "--days", "3"), 0);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(mode_of(dir, "ca.key"), 0600);
    assert_int_equal(mode_of(dir, "fleet.key"), 0600);
    assert_int_equal(mode_of(dir, "token"), 0600);
    assert_int_equal(mode_of(dir, "learner.token"), 0600);
    assert_int_equal(mode_of(dir, "ca.pem"), 0644);
    assert_int_equal(mode_of(dir, "fleet.pem"), 0644);
    /* Nothing else is left in the folder. */
    assert_int_equal(mode_of(dir, ".fleet.csr"), -1);
    assert_int_equal(mode_of(dir, ".fleet.ext"), -1);
    char run[65], learner[65];
    assert_hex_token(dir, "token", run);
    assert_hex_token(dir, "learner.token", learner);
    assert_string_not_equal(run, learner);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "openssl x509 -in %s/fleet.pem -noout -text 2>&1", dir);
    char *text = output_of(cmd);
    char host[256] = "", want[300];
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "DNS:%s", host);
    const char *sans[] = {"IP Address:127.0.0.1", "IP Address:0:0:0:0:0:0:0:1", "DNS:localhost", want,
                          "DNS:node01",           "IP Address:10.1.2.3",        "IP Address:FD00:0:0:0:0:0:0:7"};
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

static void test_certs_refuses_to_overwrite(void **state) {
    (void)state;
    char dir[128], path[256];
    snprintf(dir, sizeof dir, "%s/b", g_tmp);
    assert_int_equal(certs(dir, NULL, NULL, NULL, NULL), 0);
    snprintf(path, sizeof path, "%s/token", dir);
    char *before = read_file(path);
    assert_int_equal(certs(dir, NULL, NULL, NULL, NULL), 1);
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
    char why[1024];
    assert_int_equal(fl_security_make(only, NULL, 0, 1, why, sizeof why), -1);
    assert_non_null(strstr(why, "refusing to overwrite"));
    assert_int_equal(mode_of(only, "ca.pem"), -1);
}

static void test_certs_usage_and_missing_openssl(void **state) {
    (void)state;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/d", g_tmp);
    char *argv0[] = {"certs", NULL};
    assert_int_equal(fl_verb_certs(1, argv0), 2);
    assert_int_equal(certs(dir, "--days", "0", NULL, NULL), 2);
    assert_int_equal(certs(dir, "--bogus", NULL, NULL, NULL), 2);
    assert_int_equal(certs(dir, "--hosts", "bad host;rm", NULL, NULL), 1);
    assert_int_equal(mode_of(dir, "ca.pem"), -1);
    /* No openssl on PATH: a message that says so, and no files. */
    char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    setenv("PATH", g_tmp, 1);
    char why[1024];
    assert_int_equal(fl_security_make(dir, NULL, 0, 1, why, sizeof why), -1);
    assert_non_null(strstr(why, "openssl command is not on PATH"));
    assert_non_null(strstr(why, "apt-get install openssl"));
    assert_int_equal(certs(dir, NULL, NULL, NULL, NULL), 1);
    if (path) setenv("PATH", path, 1);
    free(path);
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

/* The DT_RUNPATH and DT_RPATH strings of the ELF64 file at path, joined by '|' into out
 * ("" when it has none); 0 when the file cannot be read as one. */
static int run_paths(const char *path, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > (long)sizeof(Elf64_Ehdr) && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)size)) && fread(buf, 1, (size_t)size, f) != (size_t)size)
        size = -1;
    fclose(f);
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)buf;
    int ok = buf && size > 0 && memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
             eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) <= (size_t)size;
    for (int i = 0; ok && i < eh->e_shnum; i++) {
        const Elf64_Shdr *sh = (const Elf64_Shdr *)(buf + eh->e_shoff) + i;
        if (sh->sh_type != SHT_DYNAMIC || sh->sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr *str = (const Elf64_Shdr *)(buf + eh->e_shoff) + sh->sh_link;
        for (size_t k = 0; (k + 1) * sizeof(Elf64_Dyn) <= sh->sh_size; k++) {
            const Elf64_Dyn *d = (const Elf64_Dyn *)(buf + sh->sh_offset) + k;
            if (d->d_tag == DT_NULL) break;
            if ((d->d_tag == DT_RUNPATH || d->d_tag == DT_RPATH) && d->d_un.d_val < str->sh_size) {
                const size_t len = strlen(out);
                const char *v = (const char *)buf + str->sh_offset + d->d_un.d_val;
                snprintf(out + len, cap - len, "%s%s", len ? "|" : "", v);
            }
        }
    }
    free(buf);
    return ok;
}

/* An empty entry in a run path (a leading, trailing or doubled ':') is the current
 * directory to the loader: a library planted there would be loaded into fleet. */
static void test_run_paths_have_no_empty_entry(void **state) {
    (void)state;
    const char *fleet = getenv("FLEET_BIN");
    const char *bins[] = {"/proc/self/exe", fleet};
    for (size_t i = 0; i < sizeof bins / sizeof bins[0]; i++) {
        if (!bins[i]) continue;
        char rp[8192];
        assert_true(run_paths(bins[i], rp, sizeof rp));
        print_message("%s: run path \"%s\"\n", bins[i], rp);
        for (char *e = rp; *e; e++) {
            const int starts = e == rp || e[-1] == '|', ends = e[1] == 0 || e[1] == '|';
            if (*e == ':' && (starts || ends || e[1] == ':'))
                fail_msg("%s: an empty entry in its run path \"%s\"", bins[i], rp);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_certs_makes_the_folder),
        cmocka_unit_test(test_certs_refuses_to_overwrite),
        cmocka_unit_test(test_certs_usage_and_missing_openssl),
        cmocka_unit_test(test_load_and_setup),
        cmocka_unit_test(test_bind_rule),
        cmocka_unit_test(test_run_paths_have_no_empty_entry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
