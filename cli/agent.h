/* agent: a trained agent out of a run folder or a learner checkpoint, as `fleet eval` and
 * `fleet env record --checkpoint` find, build and play it.
 *
 * Finding the files of ARG (a run folder RUN_DIR, or a checkpoint file):
 *   config      RUN_DIR/config.ini; for a file, config.ini in the file's folder, else in
 *               the folder above (RUN_DIR/checkpoints/x.safetensors -> RUN_DIR/config.ini).
 *               The verbs let --config FILE replace it and apply --set after it.
 *   checkpoint  the best of RUN_DIR/checkpoints/best-<i>.safetensors, the parameters of
 *               the best evaluation of each evaluator (eval/evaluator.h; the highest
 *               eval.return_mean), unless `final` or there is none; then
 *               RUN_DIR/checkpoints/learner-0.safetensors (the learner's last), else
 *               <learner.checkpoint_dir of the config>/learner-0.safetensors (a relative
 *               learner.checkpoint_dir is relative to the working directory, as the run
 *               had it); a file is the checkpoint itself.
 *
 * The agent (fl_agent_open): the config's env (env.*: name, plugin, wrappers, sticky
 * actions, ...), model.spec's Q-network for its observations and actions with
 * model.input_scale, the online network of the checkpoint loaded into it
 * (fl_learner_load_network), and an evaluation (eval/evaluate.h) of `parallel` instances.
 * fl_agent_play plays the settings' episodes (episode k on stream k of the seed, with
 * epsilon-greedy exploration) and keeps their statistics; it is a recorder play function
 * (cli/recorder.h) that hands episode 0's frames (the inner env's renders) to a recorder.
 * Called again, it replays the same episodes and checks that episode 0 came out the same
 * (the PNG strip's second pass), keeping the first call's statistics.
 *
 * Failure: resolution answers FL_NOT_FOUND with a message saying where it looked (a
 * `fleet suite` folder is named as one, with its seed-S/ runs to choose from);
 * open answers the env's errors (naming env.*), FL_INVALID_ARGUMENT for a file that is
 * not a learner checkpoint (saying so, and what it is when it can tell), a model.spec
 * that does not build and the checkpoint loader's errors (a checkpoint of another model
 * names both specs), FL_NO_MEMORY. The verbs exit 2 for FL_NOT_FOUND and
 * FL_INVALID_ARGUMENT (usage and configuration) and 1 for the rest.
 * Ownership: the agent owns its env, network and evaluation; the config passed to open
 * must outlive it (env.args is borrowed). One owner thread. */
#ifndef FL_CLI_AGENT_H
#define FL_CLI_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/status.h"
#include "eval/evaluate.h"
#include "cli/recorder.h"

#define FL_AGENT_CHECKPOINT "learner-0.safetensors"

/* 1 when path is a folder, 0 when it is something else that exists; FL_NOT_FOUND naming
 * it (a run folder or a checkpoint was expected) when it does not exist. */
fl_status fl_agent_is_dir(const char *path, int *is_dir, fl_err_t *err);

/* The config.ini of arg (see above) into out. FL_NOT_FOUND saying where it looked and
 * that --config FILE names one. */
fl_status fl_agent_find_config(const char *arg, char *out, size_t len, fl_err_t *err);

/* The checkpoint of arg under the config cfg (see above) into out. FL_NOT_FOUND saying
 * where it looked and why the run has none (run.checkpoints off, or none written yet). */
fl_status fl_agent_find_checkpoint(const char *arg, const fl_config_t *cfg, int final, char *out, size_t len,
                                   fl_err_t *err);

typedef struct fl_agent_settings {
    int episodes;            /* >= 1 */
    double epsilon;          /* in [0, 1] */
    uint64_t seed;           /* episode k plays on stream k of it */
    int64_t max_steps;       /* agent steps per episode at most (0 = the env's own limits) */
    int parallel;            /* instances side by side, >= 1 (at most episodes are used) */
    double progress_every_s; /* a progress line on stderr this often during a play (0 = none) */
} fl_agent_settings_t;

typedef struct fl_agent fl_agent_t;

fl_status fl_agent_open(const fl_config_t *cfg, const char *checkpoint, const fl_agent_settings_t *s, fl_agent_t **out,
                        fl_err_t *err);
void fl_agent_close(fl_agent_t *a); /* NULL is a no-op */

/* A fl_record_play_fn (user = the agent): plays the episodes, rec (may be NULL) gets
 * episode 0's frames; *length = episode 0's length. A second call replays them (see
 * above): FL_INTERNAL when episode 0's length or return differs. Errors: the
 * evaluation's, the recorder's, FL_FAILED_PRECONDITION when rec is given and the env
 * cannot render. */
fl_status fl_agent_play(void *agent, fl_recorder_t *rec, int64_t *length, fl_err_t *err);

/* After a play: the statistics, and each episode's return and length (episodes slots). */
const fl_eval_stats_t *fl_agent_stats(const fl_agent_t *a);
/* The checkpoint's learner steps (its metadata learner.steps): 0 for the untrained network. */
uint64_t fl_agent_learner_steps(const fl_agent_t *a);
/* What the checkpoint is: "the learner's checkpoint", or "the evaluator's best: return R
 * over N episodes, parameter version V". */
const char *fl_agent_origin(const fl_agent_t *a);
const float *fl_agent_returns(const fl_agent_t *a);
const uint32_t *fl_agent_lengths(const fl_agent_t *a);
/* The env as the agent plays it, e.g. for its name ("cartpole[framestack(4)]"). */
const fl_env_def_t *fl_agent_env(const fl_agent_t *a);
/* The size of the inner env's renders; 0 when it has no render function. */
int fl_agent_frame_size(const fl_agent_t *a, int *width, int *height);

#endif
