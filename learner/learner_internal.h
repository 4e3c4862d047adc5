/* learner_internal: the learner's state (struct fl_learner) and the helpers its files
 * share. Not part of the learner's API. The files:
 *   learner.c      create / run / stop / destroy;
 *   step.c         the bookkeeping after each update (priorities, counters, target
 *                  copy, checkpoint, publish) and the first publish;
 *   state.c        the helpers every file uses: stopping, the reporting window, an
 *                  interruptible sleep, a skipped batch, the backend's pull and push;
 *   services.c     the calls to replay and the parameter servers (Sample,
 *                  UpdatePriorities, Publish), retried through outages;
 *   checkpoint.c   safetensors checkpoints: save, resume, the periodic file;
 *   backend.h      where updates run: backend_cpu.c (the host), backend_cuda.c (a GPU);
 *   mode.h         what one training step is: mode_apex.c (one learner), mode_group.c
 *                  (apex learners under the ring all-reduce), mode_gorila.c (gradients
 *                  pushed to the parameter servers).
 * Calls go one way: learner.c -> mode_*.c -> step.c -> services.c, checkpoint.c ->
 * state.c (a backend calls state.c only).
 * Ownership, failure behaviour and thread-safety are learner.h's: one owner thread
 * (fl_learner_stop and fl_learner_counters excepted), everything allocated at create. */
#ifndef FL_LEARNER_LEARNER_INTERNAL_H
#define FL_LEARNER_LEARNER_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/control.h"
#include "common/retry.h"
#include "kernels/optim.h"
#include "kernels/qnet.h"
#include "learner/backend.h"
#include "learner/dqn.h"
#include "learner/learner.h"
#include "learner/mode.h"
#include "paramserver/client.h"
#include "replay/prefetch.h"

/* How long one Sample may wait for the shard to fill (and for its batch). */
#define FL__LEARNER_SAMPLE_TIMEOUT_MS 2000

/* One service's outage: logged once when it starts, reminded every few seconds, and
 * when it ends; the backoff grows while it lasts. */
typedef struct fl__learner_outage {
    const char *what;
    int active;
    double since, last_log;
    fl_backoff_t backoff;
} fl__learner_outage_t;

struct fl_learner {
    fl_learner_opts_t o; /* as given; model_spec points to the learner's copy, the other strings are NULL */
    int index;
    int resumed; /* created from a checkpoint of its own (learner.resume) */
    char *replay_addr, *param_addr, *model_spec;
    char *ckpt_path;    /* checkpoint_dir/learner-<index>.safetensors, or NULL without checkpoint_dir */
    double last_ckpt_t; /* fl_clock_sec() of the last checkpoint (or of the run's start) */
    fl_obs_spec_t obs;
    size_t obs_count, obs_bytes;
    int num_actions, batch_size;

    /* The networks and optimizer: trained here by the CPU backend; copies that a GPU
     * backend refreshes (pull) for checkpoints and publishes. */
    fl_qnet_t *online, *target;
    fl_optim_t *opt;
    fl_dqn_t *dqn;
    const fl__learner_backend_t *be; /* where updates run */
    void *be_state;                  /* the backend's own state (NULL for the CPU) */
    const fl__learner_mode_t *mode;  /* what a step is */
    int publisher;                   /* this learner publishes the parameters (apex learner 0) */
    int pipelined;                   /* the backend pipelines updates (launch/finish): a lone apex
                                        learner on a GPU with learner.prefetch > 0 */

    fl_replay_sharded_t *replay; /* every replay shard (one client per shard) */
    fl_param_client_t *params;
    fl_reporter_t *rep;
    fl_reduce_t *reduce;      /* apex with several learners (borrowed), else NULL */
    float *rbuf;              /* reduce: (num_params + 2): the gradient, "wants to stop", the loss */
    uint64_t fetched_version; /* gorila: the parameters' version (minimum over shards) */

    fl_replay_batch_t batch;          /* learner.prefetch = 0: sampled into here */
    fl_replay_prefetch_t *prefetch;   /* learner.prefetch > 0: that many Sample calls in flight */
    fl_replay_prefetched_t *taken;    /* the prefetched batch being trained on, or NULL */
    fl_replay_batch_t *cur;           /* the batch being trained on */
    size_t prio_n;                    /* prefetch: priorities of l->taken's rows to send with it */
    float *obs_f;                     /* (batch_size, obs_count) */
    float *next_f;                    /* (batch_size, obs_count) */
    fl_dqn_batch_t view;              /* the CPU backend's float view of l->cur (obs_f, next_f) */
    float *priorities;                /* (batch_size) */
    fl_replay_prefetched_t *inflight; /* pipeline: the launched update's batch, or NULL */
    fl_replay_batch_t *inflight_batch;
    int snapshot_pending; /* a parameter snapshot for the next publish is in flight (backends with snapshots) */
    int trained;          /* replay was ready once (logged) */

    fl_learner_stats_t st;
    _Atomic uint64_t watch_steps, watch_retries; /* copies for fl_learner_counters */
    atomic_int stop;                             /* fl_learner_stop */
    fl__learner_outage_t replay_out, param_out;
    uint64_t steps_at_publish;
    double version_jump_logged;  /* fl_clock_sec() of the last "the server already holds ..." warning */
    uint64_t priorities_clamped; /* priorities sent as replay.max_priority instead of their value */

    /* reporting window */
    double t_start, win_start, win_sample_s, win_loss_sum, last_mean_loss;
    uint64_t win_steps;
};

/* ---- state.c ------------------------------------------------------------------------ */

/* 1 when the learner should stop: fl_learner_stop, the process-wide stop flag, the
 * launcher's request, or learner.max_steps reached. */
int fl__learner_stopping(const fl_learner_t *l);
/* A report when the window is over (or force); then a new window. */
void fl__learner_report(fl_learner_t *l, int force);
/* Sleeps up to sec seconds in short slices, reporting meanwhile; returns early on a stop. */
void fl__learner_idle(fl_learner_t *l, double sec);
/* Logs the first batch of the run, once: "replay ready (N transitions); training", and
 * " on <where>" when where is not NULL. */
void fl__learner_ready(fl_learner_t *l, const char *where);
/* The sampled batch's observations are this learner's size (FL_DATA_LOSS otherwise). */
fl_status fl__learner_check_obs_bytes(const fl_learner_t *l, fl_err_t *err);
/* A skipped update: counted, logged at powers of two. */
void fl__learner_skipped(fl_learner_t *l, const char *why);
/* The backend's pull / push, when it has them (the CPU backend has nothing to move):
 * pull refreshes the CPU networks and optimizer state from where training runs (before
 * a checkpoint or the final publish); push sends the CPU networks (and with_optim the
 * optimizer state) there after they were changed on the host. */
fl_status fl__learner_pull(fl_learner_t *l, fl_err_t *err);
fl_status fl__learner_push(fl_learner_t *l, int with_optim, fl_err_t *err);

/* ---- step.c --------------------------------------------------------------------------- */

/* After an update was taken: priorities, counters, target copy, checkpoint, publish. */
fl_status fl__learner_after_step(fl_learner_t *l, size_t n, double loss, fl_err_t *err);
/* The outcome s of one of the backend's update calls on l->cur (e its message, loss its
 * loss): FL_OUT_OF_RANGE skips the batch, another error comes back as
 * "learner: <what>: <message>", FL_OK goes on to fl__learner_after_step. */
fl_status fl__learner_updated(fl_learner_t *l, fl_status s, const fl_err_t *e, const char *what, float loss,
                              fl_err_t *err);
/* Apex learner 0 publishes its initial parameters (retrying until the server is up). */
fl_status fl__learner_publish_first(fl_learner_t *l, fl_err_t *err);

/* ---- services.c ----------------------------------------------------------------------- */

/* A service call failed with a transient status: counted, logged per outage, backoff. */
void fl__learner_outage_fail(fl_learner_t *l, fl__learner_outage_t *o, const fl_err_t *e, fl_status s);
void fl__learner_outage_ok(fl__learner_outage_t *o);
/* Publishes the online parameters as the next version. retry: keep trying through an
 * outage until stopped (FL_CANCELLED then). A server that holds a newer version (this
 * learner was restarted) moves the version past it. */
fl_status fl__learner_publish(fl_learner_t *l, int retry, fl_err_t *err);
/* Samples one batch into l->cur. FL_OK with a batch, FL_CANCELLED when stopped while
 * waiting for data or for the shard to come back, another status for a real error. */
fl_status fl__learner_sample(fl_learner_t *l, fl_err_t *err);
/* Gives a prefetched batch back to its sampler thread, with the new priorities of its
 * rows when the step produced them (they go out with that thread's next Sample). */
void fl__learner_release_batch(fl_learner_t *l);
/* Sends the priorities of the batch just trained on; retries through an outage until
 * stopped (then the update is dropped: FL_OK). */
fl_status fl__learner_send_priorities(fl_learner_t *l, size_t n, fl_err_t *err);

/* ---- checkpoint.c --------------------------------------------------------------------- */

/* Loads a checkpoint of fl_learner_save into l (networks, optimizer, counters) after
 * checking it was written for the same model, observations, actions and optimizer;
 * changes nothing on failure. */
fl_status fl__learner_resume(fl_learner_t *l, const char *path, fl_err_t *err);
/* Writes learner.checkpoint_dir's file, if any (pulling the state first); logs a failure. */
void fl__learner_checkpoint(fl_learner_t *l);

#endif
