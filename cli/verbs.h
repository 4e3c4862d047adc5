/* verbs: the entry points of `fleet VERB`. Each takes argv starting at the verb's own
 * name and returns the process exit code (0 ok, 1 runtime failure, 2 usage/config). */
#ifndef FL_CLI_VERBS_H
#define FL_CLI_VERBS_H

#include <stdint.h>
#include <stdio.h>

#include "envs/core/env.h"

int fl_verb_run(int argc, char **argv);
int fl_verb_replay(int argc, char **argv);
int fl_verb_paramserver(int argc, char **argv);
int fl_verb_actor(int argc, char **argv);
int fl_verb_learner(int argc, char **argv);
int fl_verb_evaluator(int argc, char **argv);
/* fleet learner with an all-reduce group (an MPI rank's learner; NULL = none). */
struct fl_reduce;
int fl_learner_main(int argc, char **argv, struct fl_reduce *reduce);
int fl_verb_env(int argc, char **argv);
/* `fleet suite CONFIG --seeds LIST`: one experiment over several seeds, its table and
 * curves (cli/verb_suite.c). */
int fl_verb_suite(int argc, char **argv);
/* `fleet plot RUN_DIR`: draws RUN_DIR/curve.png (launcher/curve.h). */
int fl_verb_plot(int argc, char **argv);
/* `fleet eval RUN_DIR|CHECKPOINT`: a trained agent's episodes and their statistics
 * (cli/verb_eval.c). */
int fl_verb_eval(int argc, char **argv);
/* `fleet certs DIR`: a fleet's TLS credentials and tokens (cli/verb_certs.c). */
int fl_verb_certs(int argc, char **argv);
/* `fleet env play` and `fleet env record` (argv[1] is "play" or "record"). */
int fl_env_show(int argc, char **argv);
/* `fleet env check NAME`: random episodes that check an env's contract (cli/env_check.c). */
int fl_env_check(int argc, char **argv);
/* Parses the value s of option opt of `fleet env VERB` as an integer in [lo, hi]; returns 0,
 * or -1 after printing what was wrong. */
int fl_env_opt_int(const char *verb, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);

/* The env options of `fleet env play`, `record` and `check` (cli/env_show.c): --plugin
 * PATH, --args TEXT, --seed N, --sticky P, --ramping 0|1, --rng fleet|reference. */
typedef struct fl_env_cli_opts {
    const char *plugin;   /* --plugin: a shared object that provides the env; NULL = built-in */
    fl_env_options_t env; /* --args, --sticky, --ramping, --rng: what the env's configure receives */
    uint64_t seed;        /* --seed */
    int seed_given;
} fl_env_cli_opts_t;
/* Takes option a with its value v into o: 0 when taken (*key, when key is not NULL, is then
 * the config key the option stands for, e.g. "env.args", or NULL for --seed), 1 when a is
 * not one of these options, 2 after printing what was wrong with v. */
int fl_env_cli_opt(const char *verb, const char *a, const char *v, fl_env_cli_opts_t *o, const char **key);
/* The env that o and name select (envs/factory.h's fl_env_resolve): the plugin's when
 * o->plugin is set (name may then be NULL: whatever env it provides), else the built-in. */
fl_status fl_env_cli_resolve(const fl_env_cli_opts_t *o, const char *name, const fl_env_def_t **def, fl_err_t *err);
/* Steps one instance of def (configured with opts) with random actions `steps` times or
 * for max_s seconds (0: no limit), resetting at termination and the env's own limit;
 * *rate receives steps per second (cli/verb_env.c, `fleet env bench`'s single case). */
fl_status fl_env_bench_single(const fl_env_def_t *def, const fl_env_options_t *opts, int64_t steps, double max_s,
                              double *rate, fl_err_t *err);

#endif
