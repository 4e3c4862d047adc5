/* verbs: the entry points of `fleet VERB`. Each takes argv starting at the verb's own
 * name and returns the process exit code (0 ok, 1 runtime failure, 2 usage/config). */
#ifndef FL_CLI_VERBS_H
#define FL_CLI_VERBS_H

#include <stdint.h>
#include <stdio.h>

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
/* Parses the value s of option opt of `fleet env VERB` as an integer in [lo, hi]; returns 0,
 * or -1 after printing what was wrong. */
int fl_env_opt_int(const char *verb, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif
