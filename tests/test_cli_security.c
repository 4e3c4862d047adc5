/* Tests of `fleet certs` (cli/verb_certs.c): its arguments reach the maker (--hosts in
 * the certificate's subjectAltNames as `openssl x509 -text` prints them, --days in its
 * validity), its exit codes (0 made; 1 a folder that holds credentials, a bad host or no
 * openssl; 2 usage) with nothing made on a refusal; and the run path of the fleet binary
 * and of this test: no empty entry, which would make the loader look for their libraries
 * in whatever directory they are started from. What the maker makes, loading a folder and
 * the bind rule (launcher/security) are tests/test_launcher_security.c's. */
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

#include "cli/verbs.h"
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

static void test_certs_makes_the_folder(void **state) {
    (void)state;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/a/creds", g_tmp);
    assert_int_equal(certs(dir, "--hosts", "node01,10.1.2.3,fd00::7", "--days", "3"), 0);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    const char *files[] = {"ca.pem", "ca.key", "fleet.pem", "fleet.key", "token", "learner.token"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (mode_of(dir, files[i]) < 0) fail_msg("no %s in %s", files[i], dir);

    /* --hosts reaches the certificate... */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "openssl x509 -in %s/fleet.pem -noout -text 2>&1", dir);
    char *text = output_of(cmd);
    const char *sans[] = {"IP Address:127.0.0.1", "DNS:localhost", "DNS:node01", "IP Address:10.1.2.3",
                          "IP Address:FD00:0:0:0:0:0:0:7"};
    for (size_t i = 0; i < sizeof sans / sizeof sans[0]; i++)
        if (!strstr(text, sans[i])) fail_msg("no %s in the certificate:\n%s", sans[i], text);
    free(text);
    /* ... and --days its validity (3: it expires within 4 days, not within 2). */
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
    /* No openssl on PATH: exit status 1, and no files. */
    char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    setenv("PATH", g_tmp, 1);
    assert_int_equal(certs(dir, NULL, NULL, NULL, NULL), 1);
    if (path) setenv("PATH", path, 1);
    free(path);
    assert_int_equal(mode_of(dir, "ca.pem"), -1);
    assert_int_equal(mode_of(dir, "token"), -1);
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
        cmocka_unit_test(test_run_paths_have_no_empty_entry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
