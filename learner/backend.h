/* backend: where a learner's updates run, behind one table of operations: the host
 * (backend_cpu.c: learner/dqn.h's update on the CPU networks) or a GPU (backend_cuda.c:
 * learner/dqn_cuda.h). learner.c picks one from learner.device (its table of devices)
 * and the modes (mode.h) call the operations, never asking which backend runs them.
 *
 * State: every backend starts from the learner's CPU networks and optimizer (l->online,
 * l->target, l->opt, fresh or resumed). The CPU backend trains them in place. A backend
 * that trains elsewhere keeps them as copies: pull refreshes them (checkpoints, the
 * final publish), push sends them back after the host changed them (an apex group's
 * broadcast, Gorila's fetched parameters), and the publishes of apex learner 0 come from
 * asynchronous snapshots (snapshot_begin / snapshot_poll) instead of l->online.
 *
 * A batch: prepare makes the sampled batch l->cur ready for the backend; then one update
 * call reads it: step (one apex learner), upload / launch / finish (the same, pipelined:
 * batch k+1's copy overlaps update k), group_update (compute, the all-reduce of
 * fl_dqn_group_mean, apply) or gradient (Gorila: into fl_qnet_grads(l->online), not
 * clipped). They write l->priorities for l->cur's rows and *loss.
 *
 * Failure: the update calls answer FL_OUT_OF_RANGE when the loss or the gradient norm is
 * not finite (nothing was changed; e says why, for the log); step, finish and gradient
 * put the backend's own message in e for the caller to prefix ("learner: <update_what>"),
 * group_update its final message. The other operations set err as the learner returns
 * it. An operation a backend does not have is NULL: no pipeline (upload, launch, finish),
 * nothing to move (pull, push, sync_target), publishes straight from l->online (snapshot_*).
 * Thread-safety: the learner's owner thread. */
#ifndef FL_LEARNER_BACKEND_H
#define FL_LEARNER_BACKEND_H

#include "common/status.h"
#include "learner/learner.h"

typedef struct fl__learner_backend {
    const char *name;        /* "cpu", "cuda" */
    const char *where;       /* "the CPU", "the GPU": log lines */
    const char *update_what; /* "update", "GPU update": error messages */
    /* learner.device names this backend: what it refuses at create, before anything is built. */
    fl_status (*check)(const fl_learner_opts_t *o, fl_err_t *err);
    /* Takes over training from the CPU networks and optimizer; keeps its state in
     * l->be_state. required = 0 (learner.device = auto): *declined = 1 and FL_OK when it
     * cannot (no GPU), and the learner trains on the CPU. NULL: nothing to open. */
    fl_status (*open)(fl_learner_t *l, int required, int *declined, fl_err_t *err);
    /* Frees l->be_state (also after a failed open); before the replay batches go. */
    void (*close)(fl_learner_t *l);

    fl_status (*prepare)(fl_learner_t *l, fl_err_t *err);
    fl_status (*step)(fl_learner_t *l, float *loss, fl_err_t *e);
    fl_status (*upload)(fl_learner_t *l, int *stage, fl_err_t *err);
    fl_status (*launch)(fl_learner_t *l, int stage, fl_err_t *err);
    fl_status (*finish)(fl_learner_t *l, float *loss, fl_err_t *e);
    /* One collective step of an apex group (see fl_dqn_step_group): have = this learner
     * prepared a batch (else it contributes a stop). *stop = 1 when some learner stopped
     * (no one stepped); errors come after the all-reduce that told the others. */
    fl_status (*group_update)(fl_learner_t *l, int have, int *stop, float *loss, fl_err_t *e);
    fl_status (*gradient)(fl_learner_t *l, float *loss, fl_err_t *e);

    fl_status (*sync_target)(fl_learner_t *l, fl_err_t *err); /* target = online where training runs */
    fl_status (*snapshot_begin)(fl_learner_t *l, fl_err_t *err);
    /* *ready = 1 once the snapshot has landed, copied into fl_qnet_params(l->online). */
    fl_status (*snapshot_poll)(fl_learner_t *l, int *ready, fl_err_t *err);
    fl_status (*pull)(fl_learner_t *l, fl_err_t *err);
    fl_status (*push)(fl_learner_t *l, int with_optim, fl_err_t *err);
} fl__learner_backend_t;

extern const fl__learner_backend_t fl__learner_backend_cpu;
/* The GPU backend (backend_cuda.c) lives in its own shared library, libfleet_cuda.so,
 * built when fleet is built with CUDA (learner/CMakeLists.txt), so that only a learner
 * that trains on a GPU loads CUDA's libraries. fl__learner_backend_cuda_load loads it
 * once (backend_load.c: $FLEET_CUDA_LIB, else beside the program: ../lib/ from the
 * program's folder, the install's library folder, the folder itself, then the loader's
 * search path) and returns its fl__learner_backend_cuda; NULL with why (a line naming
 * what was tried) where fleet was built without CUDA or the library does not load. */
const fl__learner_backend_t *fl__learner_backend_cuda_load(char *why, size_t why_size);

#endif
