/* agent: a trained agent from a run folder or a checkpoint (see agent.h). */
#include "cli/agent.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/safetensors.h"
#include "launcher/launch.h"
#include "learner/learner.h"
#include "launcher/options.h"

struct fl_agent {
    fl_agent_settings_t s;
    fl_env_factory_opts_t factory;       /* strings borrowed from the config (but wrappers) */
    char wrappers[FL_CONFIG_STRING_MAX]; /* env.wrappers without the training-only ones */
    fl_env_options_t inst;
    fl_wrapped_env_t *env;
    fl_qnet_t *net;
    fl_evaluation_t *ev;
    float *returns, *returns2; /* (episodes): the first play's, a replay's */
    uint32_t *lengths, *lengths2;
    fl_eval_stats_t stats;
    int played;             /* the first play is done */
    uint64_t learner_steps; /* the checkpoint's learner.steps */
    char origin[160];       /* what the checkpoint is: the learner's, or an evaluator's best */
    /* progress (settings.progress_every_s): episodes begun, steps, when last said */
    int begun;
    uint64_t steps_so_far;
    double play_t0, said_at;
    uint8_t *rgb; /* one render of the inner env (NULL: it cannot render) */
};

/* ---- finding the files ----------------------------------------------------------- */

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

fl_status fl_agent_is_dir(const char *path, int *is_dir, fl_err_t *err) {
    struct stat st;
    if (stat(path, &st) != 0)
        return fl_err_set(err, FL_NOT_FOUND,
                          "%s: %s (expected a run folder such as runs/NAME or a checkpoint "
                          "such as runs/NAME/checkpoints/" FL_AGENT_CHECKPOINT ")",
                          path, strerror(errno));
    *is_dir = S_ISDIR(st.st_mode);
    return FL_OK;
}

/* The folder of a file path ("." for a bare name). */
static void folder_of(const char *path, char *out, size_t len) {
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    snprintf(out, len, "%s", dirname(copy));
}

/* The folder above dir: "b" for "b/checkpoints", "../.." for "..". */
static void folder_above(const char *dir, char *out, size_t len) {
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", dir);
    const char *base = basename(copy);
    if (strcmp(dir, ".") == 0)
        snprintf(out, len, "..");
    else if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        snprintf(out, len, "%s/..", dir);
    else
        folder_of(dir, out, len);
}

static fl_status check_checkpoint(const char *path, uint64_t *steps, char *origin, size_t origin_len, fl_err_t *err);

fl_status fl_agent_find_config(const char *arg, char *out, size_t len, fl_err_t *err) {
    int dir = 0;
    FL_TRY(fl_agent_is_dir(arg, &dir, err));
    char runs[256];
    if (dir && fl_launch_suite_runs(arg, runs, sizeof runs) > 0) {
        char first[32] = "seed-1";
        sscanf(runs, "%31[^,]", first);
        return fl_err_set(err, FL_NOT_FOUND,
                          "%s is a suite folder (`fleet suite`): it holds one run per seed (%s); "
                          "evaluate one of them, e.g. `fleet eval %s%s%s`",
                          arg, runs, arg, arg[0] && arg[strlen(arg) - 1] == '/' ? "" : "/", first);
    }
    if (dir) {
        snprintf(out, len, "%s/config.ini", arg);
        if (is_file(out)) return FL_OK;
        return fl_err_set(err, FL_NOT_FOUND,
                          "%s is not a run folder: it has no config.ini (a run folder is "
                          "runs/NAME/ of `fleet run`; --config FILE names the run's config)",
                          arg);
    }
    /* a file: a checkpoint at all, before its config is looked for */
    uint64_t steps;
    char origin[160];
    FL_TRY(check_checkpoint(arg, &steps, origin, sizeof origin, err));
    char here[PATH_MAX], above[PATH_MAX + 8];
    folder_of(arg, here, sizeof here);
    snprintf(out, len, "%s/config.ini", here);
    if (is_file(out)) return FL_OK;
    folder_above(here, above, sizeof above);
    snprintf(out, len, "%s/config.ini", above);
    if (is_file(out)) return FL_OK;
    return fl_err_set(err, FL_NOT_FOUND,
                      "no config.ini for checkpoint %s: looked in %s and %s; name the run's "
                      "config with --config FILE",
                      arg, here, above);
}

/* The best of dir/checkpoints/best-<i>.safetensors (the evaluators' best policies) by
 * their eval.return_mean into out: 1, or 0 when there is none. */
static int best_policy(const char *dir, char *out, size_t len) {
    char folder[PATH_MAX];
    snprintf(folder, sizeof folder, "%s/checkpoints", dir);
    DIR *d = opendir(folder);
    if (!d) return 0;
    double best = -INFINITY;
    int found = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "best-", 5) != 0 || n < 17 || strcmp(e->d_name + n - 12, ".safetensors") != 0) continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        fl_safetensors_t *f = NULL;
        fl_err_t err;
        fl_err_init(&err);
        if (fl_safetensors_read(path, &f, &err) != FL_OK) continue;
        const char *r = fl_safetensors_meta(f, "eval.return_mean");
        const double v = r ? strtod(r, NULL) : -INFINITY;
        if (r && (!found || v > best)) {
            best = v;
            found = 1;
            snprintf(out, len, "%s", path);
        }
        fl_safetensors_free(f);
    }
    closedir(d);
    return found;
}

fl_status fl_agent_find_checkpoint(const char *arg, const fl_config_t *cfg, int final, char *out, size_t len,
                                   fl_err_t *err) {
    int dir = 0;
    FL_TRY(fl_agent_is_dir(arg, &dir, err));
    if (!dir) {
        snprintf(out, len, "%s", arg);
        return FL_OK;
    }
    if (!final && best_policy(arg, out, len)) return FL_OK;
    char first[PATH_MAX + 64], second[PATH_MAX + 64] = "";
    snprintf(first, sizeof first, "%s/checkpoints/" FL_AGENT_CHECKPOINT, arg);
    if (cfg->learner_checkpoint_dir[0])
        snprintf(second, sizeof second, "%s/" FL_AGENT_CHECKPOINT, cfg->learner_checkpoint_dir);
    const char *found = is_file(first) ? first : second[0] && is_file(second) ? second : NULL;
    if (found) {
        snprintf(out, len, "%s", found);
        return FL_OK;
    }
    char also[PATH_MAX + 128] = "";
    if (second[0]) snprintf(also, sizeof also, " and %s (learner.checkpoint_dir of the config)", second);
    if (!cfg->run_checkpoints && !cfg->learner_checkpoint_dir[0])
        return fl_err_set(err, FL_NOT_FOUND,
                          "no checkpoint in %s: looked for %s%s; this run had run.checkpoints = "
                          "false, so it wrote none (run it again with checkpoints on, the default)",
                          arg, first, also);
    return fl_err_set(err, FL_NOT_FOUND,
                      "no checkpoint in %s: looked for %s%s; a run writes its learner's checkpoint "
                      "there every run.checkpoint_every = %g s and when it stops, so this one ended (or was killed) "
                      "before its first, or is still starting",
                      arg, first, also, cfg->run_checkpoint_every);
}

/* ---- the agent ------------------------------------------------------------------- */

void fl_agent_close(fl_agent_t *a) {
    if (!a) return;
    fl_evaluation_destroy(a->ev);
    fl_qnet_destroy(a->net);
    fl_wrapped_env_destroy(a->env);
    free(a->returns);
    free(a->returns2);
    free(a->lengths);
    free(a->lengths2);
    free(a->rgb);
    free(a);
}

/* Whether path is a learner checkpoint at all (a safetensors file with format =
 * fleet.learner), before the loader checks that it fits the network; its learner.steps
 * into *steps. */
static fl_status check_checkpoint(const char *path, uint64_t *steps, char *origin, size_t origin_len, fl_err_t *err) {
    static const char what[] = "a learner-<i>.safetensors of a run's checkpoints/ folder";
    fl_safetensors_t *f = NULL;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_safetensors_read(path, &f, &e) != FL_OK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "%s is not a learner checkpoint (%s): %s", path, what, e.msg);
    const char *format = fl_safetensors_meta(f, "format"), *st = fl_safetensors_meta(f, "learner.steps");
    fl_status s = FL_OK;
    const int policy = format && strcmp(format, FL_POLICY_FORMAT) == 0;
    if (policy) {
        const char *r = fl_safetensors_meta(f, "eval.return_mean"), *n = fl_safetensors_meta(f, "eval.episodes"),
                   *v = fl_safetensors_meta(f, "param_version");
        snprintf(origin, origin_len, "the evaluator's best: return %.2f over %s episodes, parameter version %s",
                 r ? strtod(r, NULL) : 0.0, n ? n : "?", v ? v : "?");
    } else {
        snprintf(origin, origin_len, "the learner's checkpoint");
    }
    if (!policy && (!format || strcmp(format, "fleet.learner") != 0))
        s = fl_err_set(err, FL_INVALID_ARGUMENT,
                       "%s is not a learner checkpoint (%s): a safetensors file whose "
                       "metadata format is %s%s%s, not \"fleet.learner\"%s",
                       path, what, format ? "\"" : "", format ? format : "missing", format ? "\"" : "",
                       format && strcmp(format, "fleet.paramserver") == 0 ? " (a parameter-server shard's)" : "");
    *steps = st ? strtoull(st, NULL, 10) : 0;
    fl_safetensors_free(f);
    return s;
}

/* The env, the network with the checkpoint's parameters, the evaluation. */
static fl_status build(fl_agent_t *a, const fl_config_t *cfg, const char *checkpoint, fl_err_t *err) {
    fl_options_env(cfg, &a->factory);
    /* Whole games, scored as the game scores them: no training-only wrappers. */
    fl_wrappers_for_evaluation(a->factory.wrappers, a->wrappers, sizeof a->wrappers);
    a->factory.wrappers = a->wrappers;
    fl_env_instance_options(&a->factory, &a->inst);
    FL_TRY(fl_env_create_wrapped(&a->factory, &a->env, err));
    const fl_env_def_t *def = fl_wrapped_env_info(a->env);
    fl_status s = fl_qnet_create_for_obs(cfg->model_spec, def->obs.rank, def->obs.shape, def->num_actions,
                                         a->s.parallel, &a->net, err);
    if (s != FL_OK) {
        fl_err_prefix(err, "model.spec");
        return s;
    }
    if ((s = fl_qnet_set_backend(a->net, fl_options_cpu_kernels(cfg), err)) != FL_OK) {
        fl_err_prefix(err, "model.cpu_kernels");
        return s;
    }
    fl_qnet_set_input_scale(a->net, (float)cfg->model_input_scale);
    FL_TRY(check_checkpoint(checkpoint, &a->learner_steps, a->origin, sizeof a->origin, err));
    FL_TRY(fl_learner_load_network(checkpoint, a->net, err));
    return fl_evaluation_create(a->env, &a->inst, a->s.parallel, &a->ev, err);
}

fl_status fl_agent_open(const fl_config_t *cfg, const char *checkpoint, const fl_agent_settings_t *s, fl_agent_t **out,
                        fl_err_t *err) {
    *out = NULL;
    if (s->episodes < 1 || s->parallel < 1 || !(s->epsilon >= 0 && s->epsilon <= 1) || s->max_steps < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "agent: episodes %d, parallel %d, epsilon %g, max steps %lld; "
                          "expected episodes and parallel >= 1, epsilon in [0, 1], max steps >= 0",
                          s->episodes, s->parallel, s->epsilon, (long long)s->max_steps);
    fl_agent_t *a = calloc(1, sizeof *a);
    if (!a) return fl_err_set(err, FL_NO_MEMORY, "agent: out of memory");
    a->s = *s;
    if (a->s.parallel > a->s.episodes) a->s.parallel = a->s.episodes;
    const size_t n = (size_t)s->episodes;
    a->returns = calloc(n, sizeof *a->returns);
    a->returns2 = calloc(n, sizeof *a->returns2);
    a->lengths = calloc(n, sizeof *a->lengths);
    a->lengths2 = calloc(n, sizeof *a->lengths2);
    fl_status st = a->returns && a->returns2 && a->lengths && a->lengths2
                       ? build(a, cfg, checkpoint, err)
                       : fl_err_set(err, FL_NO_MEMORY, "agent: out of memory for %d episodes", s->episodes);
    const fl_env_def_t *inner = st == FL_OK ? fl_wrapped_env_inner(a->env) : NULL;
    if (inner && inner->render && !(a->rgb = malloc((size_t)inner->render_width * (size_t)inner->render_height * 3)))
        st = fl_err_set(err, FL_NO_MEMORY, "agent: out of memory");
    if (st != FL_OK) {
        fl_agent_close(a);
        return st;
    }
    *out = a;
    return FL_OK;
}

/* ---- playing --------------------------------------------------------------------- */

typedef struct play_ctx {
    fl_agent_t *a;
    fl_recorder_t *rec;
    fl_status status; /* the recorder's error, which stopped the run */
    fl_err_t err;
} play_ctx_t;

/* The progress line on stderr, every progress_every_s of a play. */
static void progress(fl_agent_t *a, int episode, int64_t step) {
    if (step == 0 && episode + 1 > a->begun) a->begun = episode + 1;
    if (step > 0) a->steps_so_far++;
    if (a->s.progress_every_s <= 0 || (a->steps_so_far & 63) != 0) return;
    const double now = fl_clock_sec();
    if (now - a->said_at < a->s.progress_every_s) return;
    a->said_at = now;
    fprintf(stderr, "fleet eval: %.0f s: %d of %d episodes begun (%d at a time), %llu agent steps\n", now - a->play_t0,
            a->begun, a->s.episodes, a->s.parallel, (unsigned long long)a->steps_so_far);
    fflush(stderr);
}

static int on_step(void *user, int episode, const void *state, int64_t step, float reward) {
    (void)reward;
    play_ctx_t *c = user;
    progress(c->a, episode, step);
    if (!c->rec || episode != 0 || !fl_recorder_wants(c->rec, step)) return 0;
    const fl_env_def_t *inner = fl_wrapped_env_inner(c->a->env);
    inner->render(fl_wrapped_env_inner_state(c->a->env, (void *)state), c->a->rgb);
    c->status = fl_recorder_add(c->rec, step, c->a->rgb, &c->err);
    return c->status != FL_OK;
}

fl_status fl_agent_play(void *agent, fl_recorder_t *rec, int64_t *length, fl_err_t *err) {
    fl_agent_t *a = agent;
    if (rec && !a->rgb)
        return fl_err_set(err, FL_FAILED_PRECONDITION, "env '%s' has no render function, so it cannot be recorded",
                          fl_wrapped_env_inner(a->env)->name);
    play_ctx_t c = {.a = a, .rec = rec, .status = FL_OK};
    fl_err_init(&c.err);
    float *returns = a->played ? a->returns2 : a->returns;
    uint32_t *lengths = a->played ? a->lengths2 : a->lengths;
    fl_eval_stats_t stats;
    a->begun = 0;
    a->steps_so_far = 0;
    a->play_t0 = a->said_at = fl_clock_sec();
    fl_status s =
        fl_evaluation_run(a->ev, a->net, a->s.episodes, a->s.epsilon, a->s.seed, a->s.max_steps,
                          rec || a->s.progress_every_s > 0 ? on_step : NULL, &c, returns, lengths, &stats, err);
    if (c.status != FL_OK) {
        if (err) *err = c.err;
        return c.status;
    }
    if (s != FL_OK) return s;
    *length = lengths[0];
    if (!a->played) {
        a->stats = stats;
        a->played = 1;
        return FL_OK;
    }
    if (lengths[0] != a->lengths[0] || returns[0] != a->returns[0])
        return fl_err_set(err, FL_INTERNAL, "the replay of episode 0 differed: %u steps and return %g, then %u and %g",
                          a->lengths[0], (double)a->returns[0], lengths[0], (double)returns[0]);
    return FL_OK;
}

const fl_eval_stats_t *fl_agent_stats(const fl_agent_t *a) {
    return &a->stats;
}
uint64_t fl_agent_learner_steps(const fl_agent_t *a) {
    return a->learner_steps;
}
const char *fl_agent_origin(const fl_agent_t *a) {
    return a->origin;
}
const float *fl_agent_returns(const fl_agent_t *a) {
    return a->returns;
}
const uint32_t *fl_agent_lengths(const fl_agent_t *a) {
    return a->lengths;
}
const fl_env_def_t *fl_agent_env(const fl_agent_t *a) {
    return fl_wrapped_env_info(a->env);
}

int fl_agent_frame_size(const fl_agent_t *a, int *width, int *height) {
    const fl_env_def_t *inner = fl_wrapped_env_inner(a->env);
    *width = a->rgb ? inner->render_width : 0;
    *height = a->rgb ? inner->render_height : 0;
    return a->rgb != NULL;
}
