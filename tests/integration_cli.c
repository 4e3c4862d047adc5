/* The `fleet` command's usage and configuration errors, and `fleet plot`, through the real
 * binary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <dirent.h>
#include <math.h>

#include "common/config.h"
#include "tests/proc_util.h"

static int fleet(char **out, const char *a1, const char *a2, const char *a3, const char *a4) {
    char *argv[] = {(char *)fleet_bin(), (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    return run_capture(argv, 60, out);
}

static void test_usage(void **state) {
    (void)state;
    char *out;
    assert_int_equal(fleet(&out, NULL, NULL, NULL, NULL), 2);
    assert_non_null(strstr(out, "usage: fleet VERB"));
    free(out);
    assert_int_equal(fleet(&out, "frobnicate", NULL, NULL, NULL), 2);
    assert_non_null(strstr(out, "unknown verb 'frobnicate'"));
    assert_null(strstr(out, "did you mean"));
    free(out);
    assert_int_equal(fleet(&out, "runn", NULL, NULL, NULL), 2);
    assert_non_null(strstr(out, "unknown verb 'runn' (did you mean 'run'?)"));
    free(out);
    assert_int_equal(fleet(&out, "version", NULL, NULL, NULL), 0);
    assert_non_null(strstr(out, "fleet "));
    free(out);
    const char *verbs[] = {"run", "replay", "paramserver", "actor", "learner", "env", "plot", "version", "help"};
    for (int i = 0; i < 9; i++) {
        assert_int_equal(fleet(&out, "help", verbs[i], NULL, NULL), 0);
        assert_non_null(strstr(out, "usage: fleet"));
        free(out);
    }
    assert_int_equal(fleet(&out, "help", "config", NULL, NULL), 0);
    assert_non_null(strstr(out, "learner.batch_size"));
    free(out);
    assert_int_equal(fleet(&out, "replay", "--bogus", NULL, NULL), 2);
    assert_non_null(strstr(out, "unknown option '--bogus'"));
    free(out);
    assert_int_equal(fleet(&out, "env", "list", NULL, NULL), 0);
    assert_non_null(strstr(out, "cartpole"));
    free(out);
}

/* Whether text names `section.key` words that are not configuration keys: the first one
 * into bad. Sections are the key table's; a word is a section's name after a character
 * that cannot be in a name, a '.', and [a-z0-9_]+. */
static int names_unknown_key(const char *text, char *bad, size_t len) {
    char sections[256];
    fl_config_sections(sections, sizeof sections);
    for (const char *p = text; *p; p++) {
        if (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '-' || p[-1] == '.' || p[-1] == '/'))
            continue;
        char sec[32];
        int n = 0;
        while (n < 31 && islower((unsigned char)p[n])) sec[n] = p[n], n++;
        sec[n] = '\0';
        if (!n || p[n] != '.') continue;
        char padded[40];
        snprintf(padded, sizeof padded, " %s ", sec);
        char all[300];
        snprintf(all, sizeof all, " %s ", sections);
        if (!strstr(all, padded)) continue;
        int k = n + 1;
        while (islower((unsigned char)p[k]) || isdigit((unsigned char)p[k]) || p[k] == '_') k++;
        if (k == n + 1) continue; /* "env.*" */
        static const char *const files[] = {"token", "state",       "ini",  "log", "csv",  "png",  "gif",
                                            "mp4",   "safetensors", "ckpt", "gp",  "lock", "addr", "txt"};
        int file = 0; /* a file's name, such as learner.token */
        for (size_t f = 0; f < sizeof files / sizeof files[0]; f++)
            file |= (size_t)(k - n - 1) == strlen(files[f]) && strncmp(p + n + 1, files[f], strlen(files[f])) == 0;
        if (file) continue;
        char name[80];
        snprintf(name, sizeof name, "%.*s", k, p);
        int found = 0;
        for (size_t i = 0; i < fl_config_key_count() && !found; i++) found = strcmp(fl_config_key_name(i), name) == 0;
        if (!found) {
            snprintf(bad, len, "%s", name);
            return 1;
        }
    }
    return 0;
}

/* What the help says that the code can check: every section is listed where the
 * options name them, every `section.key` the help of every verb and of every key names
 * is a key, `fleet help config` filters, and the default experiment's file holds the
 * defaults and the epsilons its comment states. */
static void test_help_matches_code(void **state) {
    (void)state;
    char *out, bad[80] = "", sections[256];
    fl_config_sections(sections, sizeof sections);
    assert_int_equal(fleet(&out, "help", "run", NULL, NULL), 0);
    char *save = NULL, copy[256];
    snprintf(copy, sizeof copy, "%s", sections);
    for (char *s = strtok_r(copy, " ", &save); s; s = strtok_r(NULL, " ", &save)) {
        char want[40];
        snprintf(want, sizeof want, "[%s]", s);
        if (!strstr(out, want)) fail_msg("`fleet help run` does not list the section %s", want);
    }
    free(out);
    /* every verb's help */
    assert_int_equal(fleet(&out, "help", NULL, NULL, NULL), 0);
    char verbs[64][32];
    int nv = 0;
    const char *p = strstr(out, "verbs:\n");
    assert_non_null(p);
    for (p = strchr(p, '\n') + 1; *p == ' ' && nv < 64; p = strchr(p, '\n') + 1) {
        if (sscanf(p, " %31s", verbs[nv]) == 1) nv++;
        if (!strchr(p, '\n')) break;
    }
    free(out);
    assert_true(nv >= 10);
    for (int i = 0; i < nv; i++) {
        assert_int_equal(fleet(&out, "help", verbs[i], NULL, NULL), 0);
        if (names_unknown_key(out, bad, sizeof bad)) fail_msg("`fleet help %s` names %s, not a key", verbs[i], bad);
        free(out);
    }
    assert_int_equal(fleet(&out, "help", "config", NULL, NULL), 0);
    if (names_unknown_key(out, bad, sizeof bad)) fail_msg("`fleet help config` names %s, not a key", bad);
    free(out);
    /* the filter */
    assert_int_equal(fleet(&out, "help", "config", "eval", NULL), 0);
    assert_non_null(strstr(out, "eval.episodes"));
    assert_null(strstr(out, "learner.lr"));
    free(out);
    assert_int_equal(fleet(&out, "help", "config", "learner.lr", NULL), 0);
    assert_non_null(strstr(out, "learner.lr "));
    assert_null(strstr(out, "learner.lr_"));
    free(out);
    assert_int_equal(fleet(&out, "help", "config", "nosuchword", NULL), 2);
    assert_non_null(strstr(out, "no section or key matches 'nosuchword'"));
    free(out);
    /* configs/cartpole.ini: "the values below are fleet's defaults, but for the name" */
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/cartpole.ini", getenv("FLEET_SOURCE_DIR"));
    fl_config_t file, dflt;
    fl_config_defaults(&file);
    fl_config_defaults(&dflt);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_config_load_file(&file, path, &err), FL_OK);
    snprintf(file.run_name, sizeof file.run_name, "%s", dflt.run_name);
    assert_true(fl_config_equal(&file, &dflt));
    /* ... and its epsilons: "0.4 and E for two actors", E = eps_base^(1 + eps_alpha) */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    double e0 = -1, e1 = -1;
    while (fgets(line, sizeof line, f)) {
        char *c = strstr(line, "): ");
        if (strstr(line, "for two actors") && c) sscanf(c + 3, "%lf and %lf", &e0, &e1);
    }
    fclose(f);
    assert_true(e0 == dflt.actor_eps_base);
    const double want = pow(dflt.actor_eps_base, 1 + dflt.actor_eps_alpha);
    if (fabs(e1 - want) > 0.005 * want) fail_msg("cartpole.ini says %g for actor 1, the code gives %g", e1, want);
}

/* Names people type and plans that cannot work: Gymnasium's ids for the same envs are
 * taken, other libraries' Atari ids get fleet's name, an unreachable target and a dense
 * network on raw pixels are warned about in the plan. */
static void test_names_and_plan_warnings(void **state) {
    (void)state;
    char *out;
    assert_int_equal(fleet(&out, "run", "--set", "env.name=CartPole-v1", "--dry-run"), 0);
    assert_non_null(strstr(out, "env          cartpole: obs float32 4"));
    free(out);
    assert_int_equal(fleet(&out, "run", "--set", "env.name=MinAtar/Breakout-v1", "--dry-run"), 0);
    assert_non_null(strstr(out, "env          minatar-breakout-v1:"));
    free(out);
    assert_int_equal(fleet(&out, "run", "--set", "run.target_return=501", "--dry-run"), 0);
    assert_non_null(
        strstr(out, "run.target_return = 501 cannot be reached: an episode of cartpole returns at most 500"));
    free(out);
    assert_int_equal(fleet(&out, "run", "--set", "env.name=cartpol", "--dry-run"), 2);
    assert_non_null(strstr(out, "did you mean 'cartpole'?"));
    free(out);
#ifdef FLEET_HAVE_ALE
    assert_int_equal(fleet(&out, "run", "--set", "env.name=ALE/Pong-v5", "--dry-run"), 2);
    assert_non_null(strstr(out, "fleet's name for it is 'atari-pong'"));
    free(out);
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/configs/atari-pong.ini", getenv("FLEET_SOURCE_DIR"));
    char *argv[] = {(char *)fleet_bin(),
                    "run",
                    cfg,
                    "--set",
                    "run.target_return=475",
                    "--set",
                    "model.spec=dense(256) relu dueling",
                    "--dry-run",
                    NULL};
    assert_int_equal(run_capture(argv, 60, &out), 0);
    assert_non_null(
        strstr(out, "run.target_return = 475 cannot be reached: an episode of atari-pong returns at most 21"));
    assert_non_null(strstr(out, "model.spec has no convolution, on images of 84x84x4"));
    free(out);
    char *argv2[] = {(char *)fleet_bin(), "run", cfg, "--dry-run", NULL};
    assert_int_equal(run_capture(argv2, 60, &out), 0);
    assert_null(strstr(out, "  warning  ")); /* the preset itself is sound */
    free(out);
#endif
}

/* `fleet env bench` with no name benches one env of each family, not all 100-odd; --all
 * and names choose otherwise. */
static void test_env_bench_set(void **state) {
    (void)state;
    char *out;
    assert_int_equal(fleet(&out, "env", "bench", "--steps", "3000"), 0);
    assert_non_null(strstr(out, "one of each family"));
    assert_non_null(strstr(out, "fleet env bench --all"));
    assert_non_null(strstr(out, "cartpole "));
    assert_non_null(strstr(out, "minatar-breakout "));
    assert_null(strstr(out, "acrobot")); /* a classic env outside the set */
    int atari = strstr(out, "atari-pong ") != NULL;
    int rows = 0;
    for (const char *p = out; (p = strstr(p, "vec16")); p++) rows++;
    assert_int_equal(rows, atari ? 5 : 2); /* the Atari games where this build has ALE */
    free(out);
    assert_int_equal(fleet(&out, "env", "bench", "acrobot", "--json"), 0);
    assert_non_null(strstr(out, "\"case\":\"acrobot/single\""));
    assert_null(strstr(out, "cartpole"));
    free(out);
    assert_int_equal(fleet(&out, "env", "bench", "--bogus", NULL), 2);
    assert_non_null(strstr(out, "--all"));
    free(out);
}

static void test_config_errors(void **state) {
    (void)state;
    char *out;
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "nosuch.key=1"), 2);
    assert_non_null(strstr(out, "nosuch"));
    free(out);
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "learner.batch_size=0"), 2);
    assert_non_null(strstr(out, "learner.batch_size"));
    assert_non_null(strstr(out, "[1, 65536]"));
    free(out);
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "replay.alpha=abc"), 2);
    assert_non_null(strstr(out, "replay.alpha"));
    free(out);
    char path[] = "/tmp/fleet-bad-XXXXXX.ini";
    int fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    const char *bad = "[run]\nname = x\nthis line is not ini\n";
    assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
    close(fd);
    assert_int_equal(fleet(&out, "run", path, "--dry-run", NULL), 2);
    assert_non_null(strstr(out, path));
    assert_non_null(strstr(out, ":3"));
    free(out);
    unlink(path);
    assert_int_equal(fleet(&out, "run", "/nonexistent/x.ini", "--dry-run", NULL), 2);
    assert_non_null(strstr(out, "/nonexistent/x.ini"));
    free(out);
    /* what a role would refuse is refused before any process starts: a network that does
     * not fit the env's observations, a misspelt env name (with a suggestion) */
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "model.spec=conv(16,3,1) relu flatten dueling"), 2);
    assert_non_null(strstr(out, "model.spec"));
    assert_non_null(strstr(out, "env cartpole"));
    free(out);
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "env.name=cartpol"), 2);
    assert_non_null(strstr(out, "did you mean 'cartpole'?"));
    free(out);
    /* settings a replay shard refuses: periodic checkpoints with nowhere to write them */
    char *argv[] = {(char *)fleet_bin(),         "run", "--dry-run", "--set", "run.checkpoints=false", "--set",
                    "replay.checkpoint_every=5", NULL};
    assert_int_equal(run_capture(argv, 60, &out), 2);
    assert_non_null(strstr(out, "replay shards would refuse"));
    assert_non_null(strstr(out, "replay.checkpoint_every = 5 needs replay.checkpoint_dir"));
    free(out);
    /* a bind address the real run refuses (not loopback, no TLS) */
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "run.bind_host=0.0.0.0"), 2);
    assert_non_null(strstr(out, "refusing to bind 0.0.0.0 without TLS"));
    free(out);
    /* a socket path is not a host (the real run would bind "unix:/tmp/x:0") */
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "run.bind_host=unix:/tmp/x"), 2);
    assert_non_null(strstr(out, "run.bind_host = unix:/tmp/x: expected a host name or an IP address"));
    free(out);
    /* a good dry run prints the plan and the effective config */
    assert_int_equal(fleet(&out, "run", "--dry-run", "--set", "actor.count=3"), 0);
    assert_non_null(strstr(out, "actors       3"));
    assert_non_null(strstr(out, "[learner]"));
    free(out);
}

/* With no config file, `fleet run` is the default experiment (CartPole with the settings
 * that solve it, docs/design.md "Algorithm defaults"), not the Ape-X Atari settings; and
 * every ready experiment in configs/ passes the checks a run makes before it starts (an
 * atari-* one only where this build has the Arcade Learning Environment). */
static void test_ready_configs(void **state) {
    (void)state;
    char *out;
    assert_int_equal(fleet(&out, "run", "--dry-run", NULL, NULL), 0);
    assert_non_null(strstr(out, "batch 128, adam lr 0.003"));
    assert_non_null(strstr(out, "target every 200"));
    assert_non_null(strstr(out, "env cartpole x 4 each"));
    free(out);
    assert_int_equal(fleet(&out, "env", "list", NULL, NULL), 0);
    const int atari = strstr(out, "atari-pong") != NULL;
    free(out);
    char dir[512], path[1024];
    snprintf(dir, sizeof dir, "%s/configs", fleet_source_dir());
    DIR *d = opendir(dir);
    assert_non_null(d);
    int checked = 0, apex = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".ini") != 0) continue;
        const int is_atari = strncmp(e->d_name, "atari-", 6) == 0 || strncmp(e->d_name, "apex-atari", 10) == 0;
        if (is_atari && !atari) {
            print_message("SKIP %s: this build has no ALE or no Atari ROMs\n", e->d_name);
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        const int rc = fleet(&out, "run", path, "--dry-run", NULL);
        if (rc != 0) fail_msg("fleet run %s --dry-run: exit %d\n%s", path, rc, out);
        if (is_atari) assert_non_null(strstr(out, "framestack(4)")); /* the Nature preset */
        if (strncmp(e->d_name, "apex-", 5) == 0) {                   /* the Ape-X paper's settings */
            assert_non_null(strstr(out, "batch 512, rmsprop lr 6.25e-05"));
            assert_non_null(strstr(out, "target every 2500"));
            assert_non_null(strstr(out, "sampling from 50000 transitions"));
            apex++;
        }
        free(out);
        checked++;
    }
    closedir(d);
    assert_true(checked >= 6); /* cartpole and the five MinAtar games at least */
    if (atari) assert_true(apex >= 1);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* `fleet plot RUN_DIR`: its usage and failures, and a picture of a synthetic run folder
 * (where gnuplot is installed; else the message that names the package). */
static void test_plot(void **state) {
    (void)state;
    char *out;
    assert_int_equal(fleet(&out, "plot", NULL, NULL, NULL), 2);
    assert_non_null(strstr(out, "missing RUN_DIR"));
    free(out);
    assert_int_equal(fleet(&out, "plot", "--bogus", NULL, NULL), 2);
    assert_non_null(strstr(out, "unknown option '--bogus'"));
    free(out);
    assert_int_equal(fleet(&out, "plot", "/nonexistent/run", NULL, NULL), 1);
    assert_non_null(strstr(out, "no such folder"));
    free(out);
    char tmpl[] = "/tmp/fleet-plot-XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    assert_int_equal(fleet(&out, "plot", dir, NULL, NULL), 1);
    assert_non_null(strstr(out, "neither evals.csv nor returns.csv"));
    free(out);
    int have_gnuplot = system("command -v gnuplot >/dev/null 2>&1") == 0;
    write_file(dir, "returns.csv", "time_s,env_steps,actor,epsilon,episodes,return_mean\n");
    assert_int_equal(fleet(&out, "plot", dir, NULL, NULL), 1);
    assert_non_null(strstr(out, have_gnuplot ? "nothing to plot yet" : "gnuplot-nox"));
    free(out);
    write_file(dir, "returns.csv",
               "time_s,env_steps,actor,epsilon,episodes,return_mean\n"
               "5.0,1000,0,0.4,3,12.5\n5.0,1000,1,0.01,2,20.0\n10.0,2500,0,0.4,7,15.0\n10.0,2500,1,0.01,5,31.5\n");
    write_file(dir, "evals.csv",
               "time_s,env_steps,learner_steps,param_version,episodes,epsilon,return_mean,return_std,return_min,"
               "return_max,return_ci95,length_mean,length_min,length_max\n"
               "6.0,1200,100,2,10,0,18.0,3.0,12.0,25.0,1.9,18.0,12,25\n"
               "11.0,2600,300,6,10,0,40.0,9.0,22.0,61.0,5.6,40.0,22,61\n");
    /* without gnuplot on PATH: the package to install */
    char *path = strdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    setenv("PATH", "/nonexistent", 1);
    assert_int_equal(fleet(&out, "plot", dir, NULL, NULL), 1);
    setenv("PATH", path, 1);
    free(path);
    assert_non_null(strstr(out, "gnuplot-nox"));
    free(out);
    char png[512];
    snprintf(png, sizeof png, "%s/curve.png", dir);
    if (have_gnuplot) {
        assert_int_equal(fleet(&out, "plot", dir, NULL, NULL), 0);
        assert_non_null(strstr(out, png));
        free(out);
        char *pic = read_file(png);
        assert_non_null(pic);
        assert_memory_equal(pic, "\x89PNG\r\n\x1a\n", 8);
        free(pic);
        char gp[512];
        snprintf(gp, sizeof gp, "%s/curve.gp", dir);
        char *script = read_file(gp);
        assert_non_null(script);
        assert_non_null(strstr(script, "actor 1 (eps 0.01)"));
        free(script);
    } else {
        print_message("gnuplot is not installed: `fleet plot` drew nothing\n");
    }
    rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_help_matches_code),
        cmocka_unit_test(test_names_and_plan_warnings),
        cmocka_unit_test(test_env_bench_set),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_ready_configs),
        cmocka_unit_test(test_plot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
