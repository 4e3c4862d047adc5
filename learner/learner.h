/* learner: the learner role (Ape-X or Gorila), training on the CPU or a GPU. It owns the
 * online and target Q-networks, the optimizer and the double-DQN update (learner/dqn.h on
 * the CPU, learner/dqn_cuda.h on a GPU), samples one batch across the replay shards
 * (replay/sharded.h), sends the new priorities back and publishes the parameters the
 * actors read. Its threads, locks, loop, stop and retries are in docs/design.md, "A
 * learner"; what a step is in each mode in "Two update modes" and docs/multi-host.md,
 * "Several learners"; the checkpoint's format in "The learner checkpoint". Inside, a mode
 * (learner/mode.h) says what a step is and a backend (learner/backend.h) where its update
 * runs; create picks both.
 *
 * Options: fl_learner_opts_t below, not the run's configuration; launcher/options.h
 * (fl_options_learner) maps the configuration onto them. The caller resolves env.name
 * (the verb does it with the env registry) and passes the observation signature and
 * the action count, so that this library does not depend on the environments.
 *
 * fl_learner_run, in order:
 *   1. publishes the initial parameters as version 1, retrying while the parameter server
 *      is not up; onto a server that already holds a newer version it publishes that
 *      version + 1, except a lone apex learner without resume_path, which takes the held
 *      parameters instead (online and target; the optimizer starts afresh;
 *      stats.adopted_version), so that it never sends random weights to the actors;
 *   2. waits while replay answers FAILED_PRECONDITION (too few transitions yet);
 *   3. trains: Sample (learner.batch_size, beta = replay.beta), one double-DQN step,
 *      priorities |y - q| back; a target copy every learner.target_update steps; apex:
 *      Publish of version + 1 every learner.publish_every steps; checkpoints (below);
 *      a report every run.progress_every;
 *   4. stops on fl_learner_stop, fl_stop_requested(), the launcher's request or after
 *      learner.max_steps steps (0 = no limit): publishes the final parameters (one
 *      attempt, bounded by FL_LEARNER_RPC_TIMEOUT_MS), forces a last report, returns FL_OK.
 * A call that fails because a service went away (common/retry.h: UNAVAILABLE,
 * DEADLINE_EXCEEDED, ...) is retried with its backoff while not stopped; the launcher
 * decides when the fleet ends. A step whose loss or gradient norm is not finite is
 * skipped (parameters untouched, no priorities sent; stats.skipped_steps).
 *
 * learner.device: cpu; cuda (at create FL_UNIMPLEMENTED when the GPU library cannot be
 * loaded, FL_NO_DEVICE without a GPU); auto (the GPU when there is one). On a GPU the CPU
 * networks and optimizer stay as copies for checkpoints and publishes.
 *
 * Memory: everything is allocated at create; the training loop allocates nothing beyond
 * what the RPC layer does per call. create sets OpenBLAS to learner.threads and,
 * with flush_denormals, the calling thread's floating-point mode (kernels/fpmode.h).
 * Thread-safety: one owner thread (fl_learner_stop and fl_learner_counters may be called
 * from any thread); fl_learner_run polls its stop flag and the process-wide one. */
#ifndef FL_LEARNER_LEARNER_H
#define FL_LEARNER_LEARNER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"
#include "learner/reduce.h"
#include "replay/client.h"

/* Deadline of one UpdatePriorities, Publish or Info call (and the slice of a Sample). */
#define FL_LEARNER_RPC_TIMEOUT_MS 5000
/* Seconds between "waiting for replay" lines and between outage reminders. */
#define FL_LEARNER_LOG_EVERY_S 5.0

typedef enum {
    FL_LEARNER_APEX,  /* learners own the optimizer (one learner, or a group under the all-reduce) */
    FL_LEARNER_GORILA /* the parameter-server shards own it; learners push gradients */
} fl_learner_mode;

typedef enum {
    FL_LEARNER_CPU,  /* train on the host */
    FL_LEARNER_CUDA, /* train on the GPU (refused at create without one) */
    FL_LEARNER_AUTO  /* the GPU when there is one, else the host */
} fl_learner_device;

/* Everything a learner reads. Two parts: this process's (filled by its caller) and the
 * run's settings, which launcher/options.h's fl_options_learner maps from the
 * configuration (the key each comes from is named in brackets). Strings are borrowed
 * until fl_learner_create returns; the learner keeps its own copies. */
typedef struct fl_learner_opts {
    /* this process */
    int index;                    /* this learner's index, 0 <= index < count */
    const char *replay_addr;      /* the replay shards' addresses, "host:port" or "unix:/path", comma-separated
                                     in shard order, or "@FILE" (see fl_replay_addrs_parse); one per
                                     replay shard; required */
    const char *paramserver_addr; /* required: one address per parameter-server shard, comma-separated in
                                     shard order (paramserver/client.h) */
    const char *control_addr;     /* the launcher's Control service; NULL or "" = no reports */
    fl_obs_spec_t obs;            /* env.name's observation signature */
    int num_actions;              /* env.name's action count */
    const char *resume_path;      /* a checkpoint of fl_learner_save to continue from; NULL or "" = none */
    fl_reduce_t *reduce;          /* apex mode with count > 1: this learner's member of the group of all
                                     learners (rank = index, size = count); borrowed. NULL otherwise. */

    /* the run's settings */
    int64_t count;                     /* [learner.count] learners in the run */
    fl_learner_mode mode;              /* [learner.mode] */
    fl_learner_device device;          /* [learner.device] */
    int threads;                       /* [learner.threads] threads of the CPU kernels (OpenBLAS, oneDNN) */
    int flush_denormals;               /* [learner.flush_denormals] the CPU kernels flush denormal floats to 0 */
    int tf32, cuda_graphs;             /* [learner.tf32, learner.cuda_graphs] GPU: TF32 tensor cores, CUDA graphs */
    int cudnn_benchmark;               /* [learner.cudnn_benchmark] GPU: convolution algorithms timed, not heuristic */
    int batch_size;                    /* [learner.batch_size] */
    fl_optim_settings_t optim;         /* [learner.optimizer, lr, momentum, adam_*, rmsprop_*] */
    double grad_clip;                  /* [learner.grad_clip] 0 = off */
    double huber_delta;                /* [learner.huber_delta] */
    int64_t target_update;             /* [learner.target_update] steps between target copies */
    int64_t publish_every;             /* [learner.publish_every] steps between publishes (apex) */
    const char *checkpoint_dir;        /* [learner.checkpoint_dir] "" = no checkpoints */
    int64_t checkpoint_every;          /* [learner.checkpoint_every] 0 = only when the learner stops */
    double checkpoint_every_s;         /* [run.checkpoint_every] seconds between checkpoints as well (0 = off) */
    int keep_checkpoints;              /* [run.keep_checkpoints] step-numbered copies kept (0 = none) */
    int64_t max_steps;                 /* [learner.max_steps] 0 = no limit */
    int prefetch;                      /* [learner.prefetch] Sample calls in flight, 0 = synchronous */
    int batches_per_call;              /* [learner.batches_per_call] batches per prefetched Sample call */
    int64_t fetch_every;               /* [learner.fetch_every] gorila: steps between fetches */
    int push_1bit;                     /* [learner.push_1bit] gorila: 1-bit pushes */
    int64_t slow_push_ms;              /* [learner.slow_push_ms] gorila: the last learner's delay before a push */
    const char *model_spec;            /* [model.spec] */
    double input_scale;                /* [model.input_scale] */
    fl_qnet_backend_kind backend;      /* [model.cpu_kernels] the CPU networks' kernels */
    double beta;                       /* [replay.beta] importance-sampling exponent */
    double max_priority;               /* [replay.max_priority] priorities sent back are clamped to it, as the
                                          shards refuse larger ones (0 = no clamp) */
    int64_t replay_shards;             /* [replay.shards] addresses expected in replay_addr */
    double paramserver_wait_timeout_s; /* [paramserver.wait_timeout_s] gorila: a push's extra deadline */
    uint64_t seed;                     /* [run.seed] */
    double progress_every;             /* [run.progress_every] seconds between reports */
    /* [run.deterministic] lockstep rounds: round r waits for the replay shard's commit of
     * round r, takes round_updates updates once the shard held replay.min_size_to_sample,
     * and publishes version r + 1 (publish_every and prefetch do not apply). */
    int deterministic;
    int64_t round_updates; /* fl_options_round_updates */
} fl_learner_opts_t;

/* Totals since create, readable at any time by the owner (and after run returns). */
typedef struct fl_learner_stats {
    uint64_t steps;              /* optimizer steps taken */
    uint64_t samples;            /* transitions trained on */
    uint64_t skipped_steps;      /* batches skipped for a non-finite loss or gradient */
    uint64_t param_version;      /* last version published (0 = none yet) */
    uint64_t adopted_version;    /* a lone apex learner started without a checkpoint of its own onto a
                                    parameter server that held parameters: the version it took (0 = none) */
    uint64_t publishes;          /* successful publishes */
    uint64_t target_updates;     /* target-network copies */
    uint64_t priorities_sent;    /* priorities sent with UpdatePriorities */
    uint64_t priorities_applied; /* of those, applied by the shard (the rest were stale) */
    uint64_t retries;            /* service calls retried after an outage */
    double last_loss;            /* loss of the last step */
    double sample_s, total_s;    /* seconds spent in Sample (waits and retries included), and in run */
    /* several learners */
    double reduce_s; /* apex group: seconds in fl_dqn_step_group (gradient and all-reduce) */
    uint64_t pushes, pushes_applied, pushes_dropped; /* gorila: pushes, and shard answers (P per push) */
    uint64_t max_staleness;                          /* gorila: the largest staleness a shard reported */
} fl_learner_stats_t;

typedef struct fl_learner fl_learner_t;

/* Validates the options, builds the networks (online initialised from the seed and the
 * index, target a copy), optimizer, buffers and clients. Nothing is sent yet.
 * FL_INVALID_ARGUMENT / FL_UNIMPLEMENTED with a message naming the key or option;
 * FL_NO_MEMORY. */
fl_status fl_learner_create(const fl_learner_opts_t *o, fl_learner_t **out, fl_err_t *err);
/* What fl_learner_create checks of o before it builds anything (mode, device and its
 * availability, index, addresses, observations, actions), for a launcher that checks
 * before any process starts. */
fl_status fl_learner_check_opts(const fl_learner_opts_t *o, fl_err_t *err);
/* Runs the role until a stop (see above). FL_OK on a clean stop; otherwise an error
 * that is not a service outage: a bad answer from a service (e.g. observations of the
 * wrong size), an input the update refuses, out of memory. */
fl_status fl_learner_run(fl_learner_t *l, fl_err_t *err);
/* Asks a running (or not yet started) fl_learner_run to stop, as fl_stop_request does for
 * the whole process: it finishes the step in progress, then publishes, checkpoints and
 * returns as on any other stop. Thread-safe; does not wait. NULL is a no-op. */
void fl_learner_stop(fl_learner_t *l);
/* Frees everything (after run has returned, or without run). NULL is a no-op. */
void fl_learner_destroy(fl_learner_t *l);

const fl_learner_stats_t *fl_learner_stats(const fl_learner_t *l);
/* For a watcher on another thread while run is going (thread-safe): optimizer steps
 * taken, and service calls that failed with an outage and were retried. Either may be
 * NULL. */
void fl_learner_counters(const fl_learner_t *l, uint64_t *steps, uint64_t *retries);
/* The online network (e.g. to read the initial parameters before run). */
fl_qnet_t *fl_learner_online(fl_learner_t *l);
fl_qnet_t *fl_learner_target(fl_learner_t *l);

/* Checkpoints (safetensors, common/safetensors.h; PyTorch / NumPy / JAX load them):
 * tensors "online.<view>" and "target.<view>" for every parameter view of the networks
 * (kernels/qnet.h names, e.g. "online.0.dense.weight"), "optimizer.<slot>" (n,) for
 * each optimizer state slot; metadata format = fleet.learner, format_version = 1,
 * model.spec, obs_dtype, obs_shape ("10,10,4"), num_actions, learner.optimizer,
 * learner.steps, optimizer.steps, learner.samples, param_version, target_updates,
 * last_loss. fl_learner_save writes one (atomically) any time between create and destroy
 * on the owner thread; with learner.checkpoint_dir set the learner writes
 * DIR/learner-<index>.safetensors every learner.checkpoint_every steps and every
 * checkpoint_every_s seconds (0 = neither: only at the end) and when it stops; with
 * keep_checkpoints = K > 0 each checkpoint is also linked as
 * DIR/learner-<index>.step-<steps>.safetensors and only the K newest of those are kept. options.resume_path continues
 * from one: create checks format, model, observations, actions and optimizer against its own configuration (naming the
 * mismatch), then takes both networks, the optimizer state and every counter, so that
 * training goes on from the same step (and the next publish is param_version + 1). */
fl_status fl_learner_save(fl_learner_t *l, const char *path, fl_err_t *err);

/* The online network of the checkpoint at path into net (built by the caller with the
 * run's model.spec, observations and actions; any max_batch), e.g. to evaluate or watch
 * a trained agent; path may also be an evaluator's best policy (format fleet.policy,
 * eval/evaluator.h), which holds only the online network. Checks, before anything is
 * copied: format = fleet.learner (or fleet.policy) and format_version = 1; for every view of net a tensor
 * "online.<view>" of F32 and the view's shape; no other "online." tensor; and the checkpoint's model.spec equal to
 * net's (up to whitespace). Nothing else of the file (the target network, the optimizer,
 * the counters) is read, and net's input scale is left as it is (model.input_scale is
 * not in the file). Errors: FL_NOT_FOUND for a missing file; FL_INVALID_ARGUMENT naming
 * the path and what was wrong: not a safetensors file, not a learner checkpoint, a
 * tensor missing, extra or of another shape (with both shapes and both model.specs);
 * net is unchanged then. */
fl_status fl_learner_load_network(const char *path, fl_qnet_t *net, fl_err_t *err);

#endif
