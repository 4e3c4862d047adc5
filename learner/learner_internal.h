/* learner_internal: the learner's state (struct fl_learner) and the helpers its files
 * share: learner.c (create, run, the bookkeeping of a step, the services) and
 * checkpoint.c (safetensors checkpoints). Not part of the learner's API.
 * Ownership, failure behaviour and thread-safety are those of learner.h: one owner
 * thread, everything allocated at create. */
#ifndef FL_LEARNER_LEARNER_INTERNAL_H
#define FL_LEARNER_LEARNER_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/control.h"
#include "common/retry.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"
#include "learner/dqn.h"
#include "learner/learner.h"
#include "paramserver/client.h"
#include "replay/prefetch.h"
#ifdef FLEET_HAVE_CUDA
#include "learner/dqn_cuda.h"
#endif

/* How long one Sample may wait for the shard to fill (and for its batch). */
#define SAMPLE_TIMEOUT_MS 2000
/* Slice of an interruptible sleep. */
#define IDLE_SLICE_S 0.05
/* Stream of run.seed that initialises learner i's network. */
#define INIT_STREAM 0x6c6561726e6572ULL
/* Replay batches a GPU learner page-locks at most (the prefetcher's, and its own). */
#define FL_LEARNER_MAX_PINNED 70
/* Stream of run.seed that splits learner i's batches across replay shards. */
#define SPLIT_STREAM 0x73706c6974000000ULL

/* One service's outage: logged once when it starts, reminded every few seconds, and
 * when it ends; the backoff grows while it lasts. */
typedef struct outage {
    const char *what;
    int active;
    double since, last_log;
    fl_backoff_t backoff;
} outage_t;

struct fl_learner {
    fl_learner_options_t o; /* as given; model_spec points to the learner's copy, the other strings are NULL */
    int index;
    char *replay_addr, *param_addr, *model_spec;
    char *ckpt_path; /* checkpoint_dir/learner-<index>.safetensors, or NULL without checkpoint_dir */
    fl_obs_spec_t obs;
    size_t obs_count, obs_bytes;
    int num_actions, batch_size;

    fl_qnet_t *online, *target;
    fl_optim_t *opt;
    fl_dqn_t *dqn;
    fl_replay_sharded_t *replay; /* every replay shard (one client per shard) */
    fl_param_client_t *params;
    fl_reporter_t *rep;
    int gorila;          /* learner.mode = gorila */
    fl_reduce_t *reduce; /* apex with several learners (borrowed), else NULL */
    float *rbuf;         /* reduce: (num_params + 2): the gradient, "wants to stop", the loss */
    uint64_t fetched_version; /* gorila: the parameters' version (minimum over shards) */
#ifdef FLEET_HAVE_CUDA
    fl_cuda_dqn_t *gpu; /* learner.device = cuda (or auto with a GPU): the update runs there */
    int gpu_slot;       /* the pinned input slot the next batch goes into */
    int snapshot_pending; /* a parameter snapshot for the next publish is in flight */
    void *pinned[FL_LEARNER_MAX_PINNED]; /* replay batches page-locked for the GPU */
    int n_pinned, pin_failed;
#endif

    fl_replay_batch_t batch;         /* learner.prefetch = 0: sampled into here */
    fl_replay_prefetch_t *prefetch;  /* learner.prefetch > 0: that many Sample calls in flight */
    fl_replay_prefetched_t *taken;   /* the prefetched batch being trained on, or NULL */
    fl_replay_batch_t *cur;          /* the batch being trained on */
    size_t prio_n;                   /* prefetch: priorities of l->taken's rows to send with it */
    float *obs_f;      /* (batch_size, obs_count) */
    float *next_f;     /* (batch_size, obs_count) */
    float *priorities; /* (batch_size) */

    fl_learner_stats_t st;
    _Atomic uint64_t watch_steps, watch_retries; /* copies for fl_learner_counters */
    outage_t replay_out, param_out;
    uint64_t steps_at_publish;

    /* reporting window */
    double t_start, win_start, win_sample_s, win_loss_sum, last_mean_loss;
    uint64_t win_steps;
};

/* checkpoint.c: loads a checkpoint of fl_learner_save into l (networks, optimizer,
 * counters) after checking it was written for the same model, observations, actions
 * and optimizer; changes nothing on failure. */
fl_status fl__learner_resume(fl_learner_t *l, const char *path, fl_err_t *err);
/* checkpoint.c: writes the checkpoint file of learner.checkpoint_dir, if any; logs a
 * failure. */
void fl__learner_checkpoint(fl_learner_t *l);
/* learner.c: the CPU copies of the networks and the optimizer state brought up to date
 * from where training runs (before a checkpoint or the final publish). */
fl_status fl__learner_pull(fl_learner_t *l, fl_err_t *err);

#endif
