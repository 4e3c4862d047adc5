/* actor: the Ape-X actor role. One actor steps a vector of environments with its own
 * epsilon-greedy policy over a local CPU copy of the Q-network, turns the steps into
 * n-step transitions, gives each an initial priority from the same network
 * (fl_actor_priorities) and streams them to one replay shard (replay/writer.h) in batches
 * of actor.local_buffer transitions; every actor.sync_every env steps it fetches the
 * parameters if the server holds a newer version. Its loop, locks, seeds, backlog and
 * stop are in docs/design.md, "An actor" and "An insert, from the actor to the table";
 * its state file in "State files"; joining a running fleet in docs/multi-host.md.
 *
 * Options: fl_actor_opts_t below; launcher/options.h (fl_options_actor) maps a run's
 * configuration onto them.
 *
 * At start the actor waits up to FL_ACTOR_PARAM_WAIT_S for the learner's first
 * parameters, then uses a locally initialised network (with a warning). It stops on
 * fl_stop_requested(), fl_actor_stop, the launcher's request (fl_reporter_should_stop) or
 * after actor.max_steps env steps: the complete transitions it holds are sent (partial
 * n-step windows are dropped), the writer is flushed for up to FL_ACTOR_FLUSH_TIMEOUT_MS,
 * and a final report carries the acknowledged count. With state_dir set it writes
 * state_dir/actor-<index>.state when it stops (after the flush) and every state_every
 * seconds; with resume it continues from that file (a missing one is a warning, one of
 * another env count is refused).
 *
 * Lifecycle: fl_actor_create (checks the arguments, opens the envs, builds the network
 * and connects the clients), fl_actor_run (blocks until the actor stops), fl_actor_stop
 * (any thread, any time), fl_actor_destroy.
 * Memory: everything is allocated by fl_actor_create; the step loop allocates nothing in
 * steady state. fl_actor_create sets OpenBLAS to one thread (an actor is one thread; many
 * run side by side). Not thread-safe apart from fl_actor_stop: one owner thread per
 * actor, and fl_actor_run also polls the process-wide stop flag. */
#ifndef FL_ACTORS_ACTOR_H
#define FL_ACTORS_ACTOR_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/rng.h"
#include "common/status.h"
#include "envs/factory.h"
#include "kernels/qnet.h"

/* Seconds the actor waits at start for the first published parameters. */
#define FL_ACTOR_PARAM_WAIT_S 60.0
/* Milliseconds of the final flush of the replay writer. */
#define FL_ACTOR_FLUSH_TIMEOUT_MS 10000
/* Batches streamed on one Insert call before the shard acknowledges them: as many as
 * make about FL_ACTOR_CALL_BYTES of observations, 1 .. FL_ACTOR_MAX_BATCHES_PER_CALL.
 * Each call costs the shard a call set-up and an acknowledgement, so small transitions
 * go many batches to a call (CartPole: 32), large ones one (Atari); the writer keeps a
 * call's batches until they are acknowledged, which bounds what a failure resends. */
#define FL_ACTOR_CALL_BYTES (1u << 20)
#define FL_ACTOR_MAX_BATCHES_PER_CALL 32
int fl_actor_batches_per_call(size_t obs_bytes, int64_t local_buffer);
/* Largest batch of the priority forwards (bigger buffers are processed in chunks). */
#define FL_ACTOR_MAX_PRIORITY_BATCH 1024

/* What an actor did (fl_actor_stats): final once fl_actor_run has returned (also on
 * failure, as far as it got). Caller-allocated. */
typedef struct fl_actor_stats {
    uint64_t env_steps;           /* env steps taken (all envs) */
    uint64_t episodes;            /* episodes finished */
    double return_sum;            /* sum of the finished episodes' returns */
    uint64_t transitions_sent;    /* transitions appended to the replay writer */
    uint64_t transitions_acked;   /* of those, acknowledged by the shard */
    uint64_t transitions_unacked; /* appended but not acknowledged when the actor stopped */
    uint64_t transitions_dropped; /* unacknowledged, dropped for actor.max_backlog_mb */
    uint64_t param_version;       /* parameter version in use at the end (0 = local init) */
    uint64_t param_updates;       /* fetches that brought new parameters */
    double epsilon;               /* this actor's exploration epsilon */
    uint64_t stream_id;           /* the replay writer's stream id */
} fl_actor_stats_t;

/* epsilon_i = eps_base^(1 + eps_alpha * index / (count - 1)); eps_base when count == 1.
 * (Ape-X: eps_base 0.4, eps_alpha 7.) index in [0, count), count >= 1. */
double fl_actor_epsilon(double eps_base, double eps_alpha, int index, int count);

/* Epsilon-greedy actions for B rows of Q-values q (B, A): with probability epsilon a
 * uniformly random action, else argmax_a q[b][a] with ties (and NaN rows) going to the
 * lowest index. Draws one uniform per row, plus one per random action. */
void fl_actor_select_actions(const float *q, int B, int A, double epsilon, fl_rng_t *rng, int32_t *actions);

/* Floats of scratch fl_actor_priorities needs for net: its max_batch * 2 * num_actions. */
size_t fl_actor_priority_scratch_floats(const fl_qnet_t *net);

/* Initial priorities of n transitions with the network's current parameters:
 *   priorities[k] = |rewards[k] + discounts[k] * max_a Q(next_obs[k], a) - Q(obs[k], actions[k])|
 *   obs, next_obs  (n, obs_dim) elements of obs_dtype (as fl_qnet_forward_obs takes them)
 *   actions, rewards, discounts, priorities  (n)
 * The forwards run in chunks of the network's max_batch. scratch holds
 * fl_actor_priority_scratch_floats(net) floats. Allocates nothing itself (the network
 * makes its conversion buffer once where fl_qnet_forward_obs needs one). A non-finite Q-value
 * gives a non-finite priority (the caller decides). FL_INVALID_ARGUMENT for an action
 * outside [0, num_actions) (naming the transition) or a dtype with no float conversion. */
fl_status fl_actor_priorities(fl_qnet_t *net, fl_dtype obs_dtype, size_t n, const void *obs, const int32_t *actions,
                              const float *rewards, const float *discounts, const void *next_obs, float *scratch,
                              float *priorities, fl_err_t *err);

/* What an actor reads (launcher/options.c fills it from a config). Strings are copied by
 * fl_actor_create. */
typedef struct fl_actor_opts {
    fl_env_factory_opts_t env;    /* env.*: the env the actor steps, env.num_envs instances of it */
    int count;                    /* actor.count: actors of the fleet (index < count; the epsilon schedule) */
    double eps_base;              /* actor.eps_base (fl_actor_epsilon) */
    double eps_alpha;             /* actor.eps_alpha */
    int64_t local_buffer;         /* actor.local_buffer: transitions per append to the replay writer */
    int64_t sync_every;           /* actor.sync_every: env steps between parameter fetches */
    int fetch_bf16;               /* actor.fetch_bf16: fetch parameters as bfloat16 */
    int64_t max_steps;            /* actor.max_steps: env steps after which it stops (0 = no limit) */
    int n_step;                   /* learner.n_step: steps of the multi-step return */
    double gamma;                 /* learner.gamma: discount per env step */
    const char *model_spec;       /* model.spec: the Q-network */
    double input_scale;           /* model.input_scale */
    fl_qnet_backend_kind backend; /* model.cpu_kernels: the network's kernels */
    int64_t replay_shards;        /* replay.shards: shards replay_addr should list (a warning otherwise) */
    double max_abs_reward;        /* replay.max_abs_reward: a larger n-step reward is the env's error */
    double max_priority;          /* replay.max_priority: larger initial priorities are sent as this */
    uint64_t seed;                /* run.seed */
    double progress_every;        /* run.progress_every: the reporter ticks every progress_every / 2 s */
    const char *state_dir;        /* run.checkpoint_dir: the actor keeps actor-<index>.state there ("" = none) */
    double state_every;           /* run.checkpoint_every: seconds between state files (0 = only at the stop) */
    int resume;                   /* start from state_dir's file (fleet run --resume) */
    double max_backlog_mb;        /* actor.max_backlog_mb: bound of the writer's unacknowledged backlog (0 = none) */
    int incarnation;              /* restarts of this actor so far (fleet run's supervision): mixed into its seeds
                                     so that a restarted actor does not repeat its predecessor's episodes */
    int joined;                   /* joined a running fleet (`fleet actor --join`): index may be >= count, and
                                     the launcher chose its epsilon */
    double epsilon;               /* with joined: its exploration epsilon, in [0, 1] */
    int deterministic;            /* run.deterministic: lockstep rounds (Round participant index + 1, one shard):
                                     round r steps sync_every env steps with parameter version r exactly, then
                                     sends the round's transitions in one Round call */
} fl_actor_opts_t;

/* The defaults of the keys above (those of a config with no file and no --set). */
void fl_actor_opts_init(fl_actor_opts_t *o);

typedef struct fl_actor fl_actor_t;

/* Makes actor `index` of opts->count: opens the envs, builds the network, connects the
 * replay writer, the parameter client and the reporter. replay_addr and param_addr:
 * "host:port" or "unix:/path" (required; replay_addr lists every replay shard);
 * control_addr: the launcher's Control service, NULL or "" to run without one.
 * Errors: FL_INVALID_ARGUMENT for a bad index or addresses; FL_NOT_FOUND for an unknown
 * env.name; errors from creating the network, the envs or the clients; each with a
 * message in err. *out is NULL on failure. */
fl_status fl_actor_create(const fl_actor_opts_t *opts, int index, const char *replay_addr, const char *param_addr,
                          const char *control_addr, fl_actor_t **out, fl_err_t *err);

/* Runs the actor until it stops (see the file comment); once per actor
 * (FL_FAILED_PRECONDITION the second time). FL_OK on a clean stop, even when some
 * transitions could not be acknowledged in time (counted in the stats and logged).
 * Errors: FL_INVALID_ARGUMENT for parameters of the wrong size on the server, errors of
 * the envs, the network or the replay writer; each with a message in err. */
fl_status fl_actor_run(fl_actor_t *a, fl_err_t *err);

/* Asks the actor to stop as on fl_stop_requested(): fl_actor_run sends what it holds,
 * flushes and returns. Thread-safe; before fl_actor_run, the run stops at once. */
void fl_actor_stop(fl_actor_t *a);

/* The actor's counters (see fl_actor_stats_t). Not concurrently with fl_actor_run. */
void fl_actor_stats(const fl_actor_t *a, fl_actor_stats_t *out);

/* Frees the actor. NULL is a no-op. */
void fl_actor_destroy(fl_actor_t *a);

#endif
