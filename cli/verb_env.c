/* `fleet env`: list and benchmark environments, built-in or a plugin's (--plugin PATH);
 * `check`, `play` and `record` are in cli/env_check.c and cli/env_show.c.
 *
 * `fleet env list` prints the built-ins with their spaces, or with --plugin PATH the
 * plugin's env alone (with env.plugin set, env.name can name no other).
 *
 * `fleet env bench` measures raw environment throughput on one core: random actions
 * (fleet's rng), every observation written, episodes reset at termination and at the
 * env's own step limit. Each env runs twice: a loop over one instance, and an fl_vecenv
 * of K instances (auto-reset, final observations and episode stats included, as an
 * actor uses it). Figures are printed as a table, or with --json one object per line in
 * the bench format of docs/benchmarks.md (`{"bench":"env","case":...,"value":...,"unit":"steps/s",
 * "cores":N}`). The core count is the number online; the bench itself uses one. With no
 * name it benches one env of each family (classic, MinAtar, three Atari games), each case
 * for at most 3 s; --all benches every registered env (104 Atari games: hours). With
 * --plugin PATH the plugin's env is benched as a named env is, beside any built-ins named. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/dtype.h"
#include "common/rng.h"
#include "envs/core/plugin.h"
#include "envs/registry.h"
#include "envs/core/vecenv.h"
#include "cli/verbs.h"

#define BENCH_SEED 20240601u
#define BENCH_MAX_ENVS 65536

static void print_env(const fl_env_def_t *d) {
    char shape[64] = "";
    size_t n = 0;
    for (int i = 0; i < d->obs.rank; i++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%d", i ? "x" : "", d->obs.shape[i]);
    printf("  %-26s obs %-8s %-10s actions %-2d limit %-4d %s\n", d->name, fl_dtype_name(d->obs.dtype), shape,
           d->num_actions, d->max_episode_steps, d->description ? d->description : "");
}

/* The [env] options of the bench: no sticky actions, no difficulty ramping, no args. */
static const fl_env_options_t bench_opts = {
    .sticky_prob = 0.0f, .difficulty_ramping = 0, .reference_rng = 0, .args = ""};

/* Steps one instance `steps` times, or until max_s seconds passed (0: no limit; looked at
 * every 256 steps); *rate receives steps per second. */
fl_status fl_env_bench_single(const fl_env_def_t *def, const fl_env_options_t *opts, int64_t steps, double max_s,
                              double *rate, fl_err_t *err) {
    fl_status st = FL_OK;
    size_t ss = def->state_size ? (def->state_size + 63) / 64 * 64 : 64;
    void *state = aligned_alloc(64, ss);
    void *obs = malloc(fl_env_obs_size(def));
    if (state) memset(state, 0, ss);
    if (!state || !obs) {
        st = fl_err_set(err, FL_NO_MEMORY, "env '%s': out of memory", def->name);
        goto done;
    }
    st = fl_env_configure(def, state, opts, 0, err);
    if (st != FL_OK) goto done;
    fl_rng_t env_rng, act_rng;
    fl_rng_init_stream(&env_rng, BENCH_SEED, 0);
    fl_rng_init_stream(&act_rng, BENCH_SEED, 1u << 20);
    const uint64_t na = (uint64_t)def->num_actions;
    const int limit = def->max_episode_steps;
    double t0 = fl_clock_sec();
    def->reset(state, &env_rng, obs);
    int elapsed = 0;
    int64_t done_steps = 0;
    for (int64_t i = 0; i < steps; i++) {
        if (max_s > 0 && (i & 255) == 0 && i > 0 && fl_clock_sec() - t0 >= max_s) break;
        done_steps++;
        float r;
        int term = 0;
        def->step(state, &env_rng, (int)fl_rng_below(&act_rng, na), obs, &r, &term);
        if (term || (limit > 0 && ++elapsed >= limit)) {
            def->reset(state, &env_rng, obs);
            elapsed = 0;
        }
    }
    double dt = fl_clock_sec() - t0;
    *rate = dt > 0 ? (double)done_steps / dt : 0.0;
done:
    if (state) fl_env_close(def, state);
    free(state);
    free(obs);
    return st;
}

/* Steps an fl_vecenv of k instances until at least `steps` env steps, or max_s seconds
 * (0: no limit); *rate: env steps/s. */
static fl_status bench_vec(const fl_env_def_t *def, int k, int64_t steps, double max_s, double *rate, fl_err_t *err) {
    fl_vecenv_t *ve = NULL;
    fl_status st = fl_vecenv_create(def, k, BENCH_SEED, 0, &ve, err);
    if (st != FL_OK) return st;
    size_t os = fl_vecenv_obs_size(ve);
    unsigned char *obs = malloc(os * (size_t)k), *fin = malloc(os * (size_t)k);
    int32_t *act = malloc(sizeof *act * (size_t)k);
    float *rew = malloc(sizeof *rew * (size_t)k);
    uint8_t *te = malloc((size_t)k), *tr = malloc((size_t)k);
    fl_episode_stats_t *stats = malloc(sizeof *stats * (size_t)k);
    if (!obs || !fin || !act || !rew || !te || !tr || !stats) {
        st = fl_err_set(err, FL_NO_MEMORY, "env '%s': out of memory for %d instances", def->name, k);
        goto done;
    }
    st = fl_vecenv_configure(ve, &bench_opts, err);
    if (st != FL_OK) goto done;
    fl_rng_t act_rng;
    fl_rng_init_stream(&act_rng, BENCH_SEED, 1u << 20);
    const uint64_t na = (uint64_t)def->num_actions;
    const int64_t iters = (steps + k - 1) / k;
    fl_vecenv_reset(ve, obs); /* not timed: an emulator's load (Atari: ROM and reset) is not a step */
    double t0 = fl_clock_sec();
    int64_t it = 0;
    for (; it < iters; it++) {
        if (max_s > 0 && it > 0 && fl_clock_sec() - t0 >= max_s) break;
        for (int i = 0; i < k; i++) act[i] = (int32_t)fl_rng_below(&act_rng, na);
        st = fl_vecenv_step(ve, act, obs, rew, te, tr, fin, stats, err);
        if (st != FL_OK) goto done;
    }
    double dt = fl_clock_sec() - t0;
    *rate = dt > 0 ? (double)(it * k) / dt : 0.0;
done:
    free(obs);
    free(fin);
    free(act);
    free(rew);
    free(te);
    free(tr);
    free(stats);
    fl_vecenv_destroy(ve);
    return st;
}

/* `fleet env bench` with no name: one env of each family, each case for at most
 * BENCH_QUICK_S seconds, so that the whole takes well under a minute. */
static const char *const quick_set[] = {"cartpole", "minatar-breakout", "atari-pong", "atari-breakout",
                                        "atari-space_invaders"};
#define BENCH_QUICK_S 3.0

/* --plugin PATH of list and bench: the plugin's env into *def. Returns 0, or 2 after
 * printing why the plugin does not load. */
static int load_plugin(const char *verb, const char *path, const fl_env_def_t **def) {
    fl_err_t err;
    fl_err_init(&err);
    if (fl_env_load_plugin(path, NULL, def, &err) == FL_OK) return 0;
    fprintf(stderr, "fleet env %s: %s\n", verb, err.msg);
    return 2;
}

/* Finds --plugin PATH (or --plugin=PATH) in argv[2..]: NULL when absent, "" when its
 * value is missing. */
static const char *plugin_arg(int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--plugin") == 0) return i + 1 < argc ? argv[i + 1] : "";
        if (strncmp(argv[i], "--plugin=", 9) == 0) return argv[i] + 9;
    }
    return NULL;
}

static int env_bench(int argc, char **argv) {
    int64_t steps = 1000000, k = 16;
    int json = 0, all = 0, steps_given = 0;
    const fl_env_def_t **defs = calloc((size_t)argc + (size_t)fl_env_count() + 1, sizeof *defs);
    int ndefs = 0, rc = 0;
    if (!defs) {
        fprintf(stderr, "fleet env bench: out of memory\n");
        return 1;
    }
    /* --plugin PATH: its env is benched, and a name given that is its env's means it. */
    const char *plugin = plugin_arg(argc, argv);
    const fl_env_def_t *pdef = NULL;
    if (plugin && !plugin[0]) {
        fprintf(stderr, "fleet env bench: --plugin needs a path\n");
        goto usage;
    }
    if (plugin && load_plugin("bench", plugin, &pdef)) goto usage;
    int pdef_named = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (strncmp(a, "--steps", 7) == 0 && (a[7] == '\0' || a[7] == '=')) {
            val = a[7] == '=' ? a + 8 : (i + 1 < argc ? argv[++i] : NULL);
            if (fl_env_opt_int("bench", "--steps", val, 1, INT64_MAX / 2, &steps)) goto usage;
            steps_given = 1;
        } else if (strncmp(a, "--envs", 6) == 0 && (a[6] == '\0' || a[6] == '=')) {
            val = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
            if (fl_env_opt_int("bench", "--envs", val, 1, BENCH_MAX_ENVS, &k)) goto usage;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--all") == 0) {
            all = 1;
        } else if (strcmp(a, "--plugin") == 0) {
            i++; /* taken above */
        } else if (strncmp(a, "--plugin=", 9) == 0) {
            continue;
        } else if (a[0] == '-') {
            fprintf(stderr,
                    "fleet env bench: unknown option '%s' (expected --steps N, --envs K, --all, --json, "
                    "--plugin PATH)\n",
                    a);
            goto usage;
        } else if (pdef && strcmp(a, pdef->name) == 0) {
            if (!pdef_named) defs[ndefs++] = pdef;
            pdef_named = 1;
        } else {
            fl_err_t err;
            fl_err_init(&err);
            if (fl_env_lookup(a, &defs[ndefs], &err) != FL_OK) {
                fprintf(stderr, "fleet env bench: %s\n", err.msg);
                goto usage;
            }
            ndefs++;
        }
    }
    /* No name: the quick set (the Atari games where this build has them), each case capped
     * in time unless --steps was given; --all: every registered env, --steps each. */
    double max_s = 0;
    int quick = ndefs == 0 && !all && !pdef;
    if (ndefs == 0 && all)
        for (int i = 0; i < fl_env_count(); i++) defs[ndefs++] = fl_env_at(i);
    if (pdef && !pdef_named) defs[ndefs++] = pdef; /* benched like a named env */
    if (quick) {
        for (size_t i = 0; i < sizeof quick_set / sizeof quick_set[0]; i++) {
            fl_err_t err;
            fl_err_init(&err);
            if (fl_env_lookup(quick_set[i], &defs[ndefs], &err) == FL_OK) ndefs++;
        }
        if (!steps_given) max_s = BENCH_QUICK_S;
    }

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    if (!json) {
        if (quick) {
            char cap[32] = "";
            if (max_s > 0) snprintf(cap, sizeof cap, " or %.0f s", max_s);
            printf(
                "fleet env bench: %d envs, one of each family, %lld steps%s per case, random actions, 1 of %ld "
                "cores (`fleet env bench --all` benches all %d, `fleet env bench NAME...` chosen ones)\n",
                ndefs, (long long)steps, cap, cores, fl_env_count());
        } else
            printf("fleet env bench: %lld steps per case, random actions, 1 of %ld cores\n", (long long)steps, cores);
        printf("%-20s %-10s %14s\n", "env", "case", "steps/s");
    }
    for (int e = 0; e < ndefs; e++) {
        const fl_env_def_t *d = defs[e];
        for (int c = 0; c < 2; c++) {
            fl_err_t err;
            fl_err_init(&err);
            double rate = 0.0;
            char cname[32];
            fl_status st;
            if (c == 0) {
                snprintf(cname, sizeof cname, "single");
                st = fl_env_bench_single(d, &bench_opts, steps, max_s, &rate, &err);
            } else {
                snprintf(cname, sizeof cname, "vec%lld", (long long)k);
                st = bench_vec(d, (int)k, steps, max_s, &rate, &err);
            }
            if (st != FL_OK) {
                fprintf(stderr, "fleet env bench: %s/%s: %s\n", d->name, cname, err.msg);
                rc = 1;
                continue;
            }
            if (json)
                printf("{\"bench\":\"env\",\"case\":\"%s/%s\",\"value\":%.1f,\"unit\":\"steps/s\",\"cores\":%ld}\n",
                       d->name, cname, rate, cores);
            else
                printf("%-20s %-10s %14.0f\n", d->name, cname, rate);
            fflush(stdout);
        }
    }
    free(defs);
    return rc;
usage:
    free(defs);
    return 2;
}

/* `fleet env list`: the built-ins; with --plugin PATH the plugin's env only, the one env
 * a run with env.plugin = PATH can select. */
static int env_list(int argc, char **argv) {
    const char *plugin = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--plugin") == 0 && i + 1 < argc && !plugin) {
            plugin = argv[++i];
        } else if (strncmp(argv[i], "--plugin=", 9) == 0 && argv[i][9] && !plugin) {
            plugin = argv[i] + 9;
        } else if (strncmp(argv[i], "--plugin", 8) == 0) {
            fprintf(stderr, "fleet env list: --plugin takes one path (--plugin PATH)\n");
            return 2;
        } else {
            fprintf(stderr, "fleet env list: unexpected argument '%s' (expected nothing, or --plugin PATH)\n", argv[i]);
            return 2;
        }
    }
    if (plugin) {
        const fl_env_def_t *def = NULL;
        if (load_plugin("list", plugin, &def)) return 2;
        printf("plugin %s (1 environment; `fleet env list` without --plugin lists the built-ins):\n", plugin);
        print_env(def);
        return 0;
    }
    printf("built-in environments (%d):\n", fl_env_count());
    for (int i = 0; i < fl_env_count(); i++) print_env(fl_env_at(i));
    return 0;
}

int fl_verb_env(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "fleet env: missing subcommand (expected list, bench, check, play or record)\n");
        return 2;
    }
    if (strcmp(argv[1], "list") == 0) return env_list(argc, argv);
    if (strcmp(argv[1], "bench") == 0) return env_bench(argc, argv);
    if (strcmp(argv[1], "check") == 0) return fl_env_check(argc, argv);
    if (strcmp(argv[1], "play") == 0 || strcmp(argv[1], "record") == 0) return fl_env_show(argc, argv);
    fprintf(stderr, "fleet env: unknown subcommand '%s' (expected list, bench, check, play or record)\n", argv[1]);
    return 2;
}
