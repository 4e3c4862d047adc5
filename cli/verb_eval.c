/* `fleet eval RUN_DIR|CHECKPOINT`: plays episodes with a trained agent's epsilon-greedy
 * policy and prints their statistics (or one JSON object with --json); --record FILE
 * records episode 0 as a GIF, an MP4 or a PNG strip (cli/recorder.h).
 *
 * The argument is a run folder or a learner checkpoint, resolved by cli/agent.h: the
 * config is the run's config.ini (or --config FILE), with --set overrides applied after
 * it, so the env can be varied (e.g. --set env.sticky_actions=0); env, wrappers and
 * model come from it. The defaults of the options are the config's eval.* keys and
 * run.seed.
 *
 * Phases: split the argument off argv and put the found config.ini in front as
 * --config (fl_cli_parse then applies the defaults, the file and the --set overrides in
 * that order), check the options, find the checkpoint, open the agent, play (through the
 * recorder with --record), print.
 * Exit codes: 0 done; 1 a runtime failure (the evaluation, the recording, MP4 without
 * ffmpeg); 2 usage and configuration errors (options, no run folder, no config or
 * checkpoint found, a checkpoint of another model). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "cli/agent.h"
#include "cli/cli.h"
#include "cli/recorder.h"
#include "cli/verbs.h"

#define UNSET INT64_MIN
#define MAX_ARGS 256

/* The options, as fl_cli_parse fills them (UNSET / "": not given). */
typedef struct eval_opts {
    int64_t episodes, seed, max_steps, parallel, scale, frames, columns, delay;
    char epsilon[256], record[256], progress[64];
    int json, final;
    /* from the split */
    const char *target; /* RUN_DIR or CHECKPOINT */
    char config[4096];  /* the config file used: --config's, or the one found */
    int given_config, sets;
} eval_opts_t;

/* Does a takes a value as its next argument (a value-taking option without "=")? */
static int takes_value(const char *a, const fl_opt_t *opts, int nopts) {
    if (strcmp(a, "--config") == 0 || strcmp(a, "--set") == 0) return 1;
    for (int k = 0; k < nopts; k++)
        if (strcmp(a, opts[k].name) == 0) return opts[k].kind != FL_OPT_FLAG;
    return 0;
}

/* Copies argv into out without the one positional argument (into o->target), counting
 * --set overrides and noting --config. Returns 0, or 2 after printing what was wrong. */
static int split_args(int argc, char **argv, const fl_opt_t *opts, int nopts, eval_opts_t *o, char **out, int *n) {
    if (argc > MAX_ARGS - 3) {
        fprintf(stderr, "fleet eval: too many arguments (%d)\n", argc);
        return 2;
    }
    *n = 0;
    out[(*n)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-') {
            if (strcmp(a, "--config") == 0 || strncmp(a, "--config=", 9) == 0) {
                o->given_config = 1;
                snprintf(o->config, sizeof o->config, "%s", a[8] == '=' ? a + 9 : i + 1 < argc ? argv[i + 1] : "");
            }
            o->sets += strcmp(a, "--set") == 0 || strncmp(a, "--set=", 6) == 0;
            out[(*n)++] = argv[i];
            if (takes_value(a, opts, nopts) && i + 1 < argc) out[(*n)++] = argv[++i];
            continue;
        }
        if (o->target) {
            fprintf(stderr, "fleet eval: one RUN_DIR or CHECKPOINT expected, got '%s' and '%s'\n", o->target, a);
            return 2;
        }
        o->target = a;
    }
    if (!o->target) {
        fprintf(stderr,
                "fleet eval: missing RUN_DIR or CHECKPOINT (a run folder such as runs/NAME, or its "
                "checkpoints/" FL_AGENT_CHECKPOINT ")\n");
        return 2;
    }
    return 0;
}

/* argv with the run's config.ini put in front as --config (unless --config was given),
 * parsed by fl_cli_parse into cfg and o. Returns 0 or 2. */
static int parse(int argc, char **argv, fl_config_t *cfg, eval_opts_t *o) {
    const fl_opt_t opts[] = {
        {"--episodes", FL_OPT_INT, &o->episodes}, {"--epsilon", FL_OPT_STRING, o->epsilon},
        {"--seed", FL_OPT_INT, &o->seed},         {"--max-steps", FL_OPT_INT, &o->max_steps},
        {"--parallel", FL_OPT_INT, &o->parallel}, {"--record", FL_OPT_STRING, o->record},
        {"--scale", FL_OPT_INT, &o->scale},       {"--frames", FL_OPT_INT, &o->frames},
        {"--columns", FL_OPT_INT, &o->columns},   {"--delay", FL_OPT_INT, &o->delay},
        {"--json", FL_OPT_FLAG, &o->json},        {"--progress", FL_OPT_STRING, o->progress},
        {"--final", FL_OPT_FLAG, &o->final},
    };
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    char *split[MAX_ARGS], *args[MAX_ARGS];
    int n = 0;
    int rc = split_args(argc, argv, opts, nopts, o, split, &n);
    if (rc) return rc;
    fl_err_t err;
    fl_err_init(&err);
    int m = 0;
    args[m++] = split[0];
    if (!o->given_config) {
        if (fl_agent_find_config(o->target, o->config, sizeof o->config, &err) != FL_OK) {
            fprintf(stderr, "fleet eval: %s\n", err.msg);
            return 2;
        }
        args[m++] = "--config";
        args[m++] = o->config;
    }
    for (int i = 1; i < n; i++) args[m++] = split[i];
    args[m] = NULL;
    return fl_cli_parse("eval", m, args, cfg, opts, nopts, NULL, 0);
}

/* An option's value in [lo, hi], or the default when not given. Returns 0 or 2. */
static int check_int(const char *name, int64_t *v, int64_t lo, int64_t hi, int64_t dflt) {
    if (*v == UNSET) *v = dflt;
    if (*v >= lo && *v <= hi) return 0;
    fprintf(stderr, "fleet eval: %s %lld is out of range (expected an integer in [%lld, %lld])\n", name, (long long)*v,
            (long long)lo, (long long)hi);
    return 2;
}

/* Fills the defaults from cfg and checks every option. Returns 0, 1 (MP4 without
 * ffmpeg) or 2. */
static int check_opts(const fl_config_t *cfg, eval_opts_t *o, double *epsilon, double *progress) {
    if (check_int("--episodes", &o->episodes, 1, 100000, cfg->eval_episodes) ||
        check_int("--seed", &o->seed, 0, INT64_MAX, cfg->run_seed) ||
        check_int("--max-steps", &o->max_steps, 0, 1000000000, cfg->eval_max_episode_steps) ||
        check_int("--parallel", &o->parallel, 1, 1024, cfg->eval_parallel) ||
        check_int("--scale", &o->scale, 1, 8, 1) || check_int("--frames", &o->frames, 1, FL_RECORD_MAX_STRIP, 16) ||
        check_int("--columns", &o->columns, 1, 64, 8) || check_int("--delay", &o->delay, 0, 1000, 8))
        return 2;
    if (o->parallel > o->episodes) o->parallel = o->episodes; /* as the evaluation does */
    *epsilon = cfg->eval_epsilon;
    if (o->epsilon[0]) {
        char *end = NULL;
        errno = 0;
        *epsilon = strtod(o->epsilon, &end);
        if (errno || end == o->epsilon || *end || !(*epsilon >= 0 && *epsilon <= 1)) {
            fprintf(stderr, "fleet eval: --epsilon '%s' is not a probability (expected a number in [0, 1])\n",
                    o->epsilon);
            return 2;
        }
    }
    *progress = 10;
    if (o->progress[0]) {
        char *end = NULL;
        errno = 0;
        *progress = strtod(o->progress, &end);
        if (errno || end == o->progress || *end || !(*progress >= 0 && *progress <= 86400)) {
            fprintf(stderr,
                    "fleet eval: --progress '%s' is not a number of seconds (expected one in [0, 86400]; 0 "
                    "= no progress lines)\n",
                    o->progress);
            return 2;
        }
    }
    fl_err_t err;
    fl_err_init(&err);
    fl_status s = o->record[0] ? fl_record_check(o->record, &err) : FL_OK;
    if (s != FL_OK) {
        fprintf(stderr, "fleet eval: %s%s\n", s == FL_INVALID_ARGUMENT ? "--record " : "", err.msg);
        return s == FL_INVALID_ARGUMENT ? 2 : 1;
    }
    return 0;
}

/* s as a JSON string. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

typedef struct result {
    const char *checkpoint, *config;
    double epsilon;
    const fl_record_result_t *rec; /* NULL without --record */
} result_t;

static void print_json(const eval_opts_t *o, const fl_config_t *cfg, const fl_agent_t *a, const result_t *r) {
    const fl_eval_stats_t *st = fl_agent_stats(a);
    printf("{\"checkpoint\":");
    json_string(stdout, r->checkpoint);
    printf(",\"origin\":");
    json_string(stdout, fl_agent_origin(a));
    printf(",\"config\":");
    json_string(stdout, r->config);
    printf(",\"sets\":%d,\"env\":", o->sets);
    json_string(stdout, fl_agent_env(a)->name);
    printf(",\"model\":");
    json_string(stdout, cfg->model_spec);
    printf(",\"learner_steps\":%llu", (unsigned long long)fl_agent_learner_steps(a));
    printf(",\"episodes\":%d,\"epsilon\":%.17g,\"seed\":%lld,\"max_steps\":%lld,\"parallel\":%lld", st->episodes,
           r->epsilon, (long long)o->seed, (long long)o->max_steps, (long long)o->parallel);
    printf(
        ",\"return_mean\":%.17g,\"return_ci95\":%.17g,\"return_std\":%.17g,\"return_min\":%.17g,"
        "\"return_max\":%.17g,\"length_mean\":%.17g,\"length_min\":%.17g,\"length_max\":%.17g,\"truncated\":%d,"
        "\"steps\":%llu,\"seconds\":%.6f",
        st->return_mean, st->return_ci95, st->return_std, st->return_min, st->return_max, st->length_mean,
        st->length_min, st->length_max, st->truncated, (unsigned long long)st->steps, st->seconds);
    printf(",\"returns\":[");
    for (int k = 0; k < st->episodes; k++) printf("%s%.9g", k ? "," : "", (double)fl_agent_returns(a)[k]);
    printf("],\"lengths\":[");
    for (int k = 0; k < st->episodes; k++) printf("%s%u", k ? "," : "", fl_agent_lengths(a)[k]);
    printf("]");
    if (r->rec) {
        printf(",\"record\":{\"path\":");
        json_string(stdout, o->record);
        printf(",\"frames\":%d,\"width\":%d,\"height\":%d}", r->rec->frames, r->rec->width, r->rec->height);
    }
    printf("}\n");
}

static void print_text(const eval_opts_t *o, const fl_config_t *cfg, const fl_agent_t *a, const result_t *r) {
    const fl_eval_stats_t *st = fl_agent_stats(a);
    printf("fleet eval: checkpoint %s\n", r->checkpoint);
    printf("  which      %s%s\n", fl_agent_origin(a),
           strncmp(fl_agent_origin(a), "the evaluator's", 15) == 0 ? " (--final: the learner's last checkpoint)" : "");
    printf("  config     %s", r->config);
    if (o->sets) printf(" (then %d --set)", o->sets);
    printf("\n  env        %s, model %s\n", fl_agent_env(a)->name, cfg->model_spec);
    printf("  trained    %llu learner steps\n", (unsigned long long)fl_agent_learner_steps(a));
    printf("  episodes   %d, epsilon %g, seed %lld, max steps %lld, parallel %lld\n", st->episodes, r->epsilon,
           (long long)o->seed, (long long)o->max_steps, (long long)o->parallel);
    printf("  return     %.2f +- %.2f (95%% CI, t with %d df), std %.2f, min %g, max %g\n", st->return_mean,
           st->return_ci95, st->episodes - 1, st->return_std, st->return_min, st->return_max);
    printf("  length     mean %.1f, min %g, max %g; %d truncated\n", st->length_mean, st->length_min, st->length_max,
           st->truncated);
    printf("  steps      %llu agent steps in %.2f s\n", (unsigned long long)st->steps, st->seconds);
    if (r->rec)
        printf("  recorded   episode 0 (%lld steps, return %g) -> %s: %d frames of %d x %d\n",
               (long long)r->rec->length, (double)fl_agent_returns(a)[0], o->record, r->rec->frames, r->rec->width,
               r->rec->height);
}

/* Plays the episodes, through the recorder with --record. */
static fl_status play(fl_agent_t *a, const eval_opts_t *o, fl_record_result_t *rec, fl_err_t *err) {
    if (!o->record[0]) {
        int64_t len = 0;
        return fl_agent_play(a, NULL, &len, err);
    }
    fl_record_opts_t ro = {.path = o->record,
                           .scale = (int)o->scale,
                           .delay_cs = (int)o->delay,
                           .frames = (int)o->frames,
                           .columns = (int)o->columns};
    if (!fl_agent_frame_size(a, &ro.width, &ro.height))
        return fl_err_set(err, FL_FAILED_PRECONDITION, "env '%s' has no render function, so it cannot be recorded",
                          fl_agent_env(a)->name);
    return fl_record_episode(&ro, fl_agent_play, a, rec, err);
}

int fl_verb_eval(int argc, char **argv) {
    fl_config_t cfg;
    eval_opts_t o = {.episodes = UNSET,
                     .seed = UNSET,
                     .max_steps = UNSET,
                     .parallel = UNSET,
                     .scale = UNSET,
                     .frames = UNSET,
                     .columns = UNSET,
                     .delay = UNSET};
    double epsilon = 0, progress = 0;
    int rc = parse(argc, argv, &cfg, &o);
    if (!rc) rc = check_opts(&cfg, &o, &epsilon, &progress);
    if (rc) return rc;
    fl_cli_setup_logging(&cfg, "eval", 0);
    fl_err_t err;
    fl_err_init(&err);
    char checkpoint[4096 + 64];
    if (fl_agent_find_checkpoint(o.target, &cfg, o.final, checkpoint, sizeof checkpoint, &err) != FL_OK) {
        fprintf(stderr, "fleet eval: %s\n", err.msg);
        return 2;
    }
    fl_agent_settings_t s = {.episodes = (int)o.episodes,
                             .epsilon = epsilon,
                             .seed = (uint64_t)o.seed,
                             .max_steps = o.max_steps,
                             .parallel = (int)o.parallel,
                             .progress_every_s = progress};
    fl_agent_t *a = NULL;
    fl_status st = fl_agent_open(&cfg, checkpoint, &s, &a, &err);
    if (st != FL_OK) {
        fprintf(stderr, "fleet eval: %s\n", err.msg);
        return st == FL_INVALID_ARGUMENT || st == FL_NOT_FOUND ? 2 : 1;
    }
    if (fl_agent_learner_steps(a) == 0)
        fprintf(stderr,
                "fleet eval: warning: %s was written at learner step 0: its network is the untrained initial "
                "one (the run stopped before its learner trained), so this evaluates a random network\n",
                checkpoint);
    fl_record_result_t rec;
    st = play(a, &o, &rec, &err);
    if (st == FL_OK) {
        result_t r = {
            .checkpoint = checkpoint, .config = o.config, .epsilon = epsilon, .rec = o.record[0] ? &rec : NULL};
        if (o.json)
            print_json(&o, &cfg, a, &r);
        else
            print_text(&o, &cfg, a, &r);
    } else {
        fprintf(stderr, "fleet eval: %s\n", err.msg);
    }
    fl_agent_close(a);
    return st == FL_OK ? 0 : 1;
}
