/* dqn_cuda_state: the GPU update's parameters, optimizer state and learning rate (set,
 * get, the target copy) and its parameter snapshots, copied on the side stream while
 * training goes on (see dqn_cuda.h; the design is at the top of dqn_cuda.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "learner/dqn_cuda_internal.h"

fl_status fl_cuda_dqn_set_params(fl_cuda_dqn_t *d, const float *online, const float *target, size_t count,
                                 fl_err_t *err) {
    if (!d || !online) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL parameters");
    if (count != d->n)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: got %zu parameters, expected %zu", count, d->n);
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    const size_t bytes = d->n * sizeof(float);
    FL_TRY(cuda_check(cudaMemcpyAsync(d->d_params, online, bytes, cudaMemcpyHostToDevice, d->cs),
                      "cudaMemcpyAsync (parameters)", err));
    FL_TRY(cuda_check(cudaMemcpyAsync(d->d_target, target ? target : online, bytes, cudaMemcpyHostToDevice, d->cs),
                      "cudaMemcpyAsync (target parameters)", err));
    return sync_cs(d, err);
}

fl_status fl_cuda_dqn_get_params(fl_cuda_dqn_t *d, int target, float *dst, size_t count, fl_err_t *err) {
    if (!d || !dst) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL destination");
    if (count != d->n)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: room for %zu parameters, expected %zu", count, d->n);
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    FL_TRY(cuda_check(
        cudaMemcpyAsync(dst, target ? d->d_target : d->d_params, d->n * sizeof(float), cudaMemcpyDeviceToHost, d->cs),
        "cudaMemcpyAsync (parameters to host)", err));
    return sync_cs(d, err);
}

fl_status fl_cuda_dqn_sync_target(fl_cuda_dqn_t *d, fl_err_t *err) {
    if (!d) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object");
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    return cuda_check(cudaMemcpyAsync(d->d_target, d->d_params, d->n * sizeof(float), cudaMemcpyDeviceToDevice, d->cs),
                      "cudaMemcpyAsync (target = online)", err);
}

size_t fl_cuda_dqn_optim_state_size(const fl_cuda_dqn_t *d) {
    return (size_t)d->opt_slots * d->n;
}

fl_status fl_cuda_dqn_get_optim_state(fl_cuda_dqn_t *d, float *state, size_t count, int64_t *steps, fl_err_t *err) {
    if (!d || !state) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL state");
    if (count != fl_cuda_dqn_optim_state_size(d))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: optimizer state of %zu floats, expected %zu", count,
                          fl_cuda_dqn_optim_state_size(d));
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    FL_TRY(cuda_check(cudaMemcpyAsync(state, d->d_state, count * sizeof(float), cudaMemcpyDeviceToHost, d->cs),
                      "cudaMemcpyAsync (optimizer state)", err));
    FL_TRY(cuda_check(cudaMemcpyAsync(d->h_sc, d->d_sc, sizeof *d->h_sc, cudaMemcpyDeviceToHost, d->cs),
                      "cudaMemcpyAsync (step count)", err));
    FL_TRY(sync_cs(d, err));
    if (steps) *steps = (int64_t)d->h_sc->steps;
    return FL_OK;
}

fl_status fl_cuda_dqn_set_optim_state(fl_cuda_dqn_t *d, const float *state, size_t count, int64_t steps,
                                      fl_err_t *err) {
    if (!d || !state) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL state");
    if (count != fl_cuda_dqn_optim_state_size(d))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: optimizer state of %zu floats, expected %zu", count,
                          fl_cuda_dqn_optim_state_size(d));
    if (steps < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: step count %lld (expected >= 0)", (long long)steps);
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    const long long t = (long long)steps;
    FL_TRY(cuda_check(cudaMemcpyAsync(d->d_state, state, count * sizeof(float), cudaMemcpyHostToDevice, d->cs),
                      "cudaMemcpyAsync (optimizer state)", err));
    FL_TRY(cuda_check(cudaMemcpyAsync(&d->d_sc->steps, &t, sizeof t, cudaMemcpyHostToDevice, d->cs),
                      "cudaMemcpyAsync (step count)", err));
    return sync_cs(d, err); /* t and state must outlive the copies */
}

fl_status fl_cuda_dqn_set_lr(fl_cuda_dqn_t *d, float lr, fl_err_t *err) {
    if (!d) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object");
    if (!(lr >= 0) || lr > 3.0e38f)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: lr = %g (expected a finite value >= 0)", (double)lr);
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    d->hyper.lr = lr;
    d->cfg.optim.lr = lr;
    FL_TRY(cuda_check(cudaMemcpyAsync(d->d_hyper, &d->hyper, sizeof d->hyper, cudaMemcpyHostToDevice, d->cs),
                      "cudaMemcpyAsync (hyperparameters)", err));
    return sync_cs(d, err);
}

/* ---- snapshots ------------------------------------------------------------------------- */

fl_status fl_cuda_dqn_snapshot_begin(fl_cuda_dqn_t *d, fl_err_t *err) {
    if (!d) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL object");
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    const size_t bytes = d->n * sizeof(float);
    FL_TRY(cuda_check(cudaEventRecord(d->ev_params, d->cs), "cudaEventRecord", err));
    FL_TRY(cuda_check(cudaStreamWaitEvent(d->side, d->ev_params, 0), "cudaStreamWaitEvent", err));
    FL_TRY(cuda_check(cudaMemcpyAsync(d->d_shadow, d->d_params, bytes, cudaMemcpyDeviceToDevice, d->side),
                      "cudaMemcpyAsync (snapshot)", err));
    FL_TRY(cuda_check(cudaEventRecord(d->ev_shadow, d->side), "cudaEventRecord", err));
    /* the next update may change the parameters only once the shadow copy is taken */
    FL_TRY(cuda_check(cudaStreamWaitEvent(d->cs, d->ev_shadow, 0), "cudaStreamWaitEvent", err));
    FL_TRY(cuda_check(cudaMemcpyAsync(d->h_snap, d->d_shadow, bytes, cudaMemcpyDeviceToHost, d->side),
                      "cudaMemcpyAsync (snapshot to host)", err));
    FL_TRY(cuda_check(cudaEventRecord(d->ev_snap, d->side), "cudaEventRecord", err));
    d->snap_started = 1;
    return FL_OK;
}

fl_status fl_cuda_dqn_snapshot_poll(fl_cuda_dqn_t *d, const float **host, int *ready, fl_err_t *err) {
    if (!d || !host || !ready) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn_cuda: NULL argument");
    *host = NULL;
    *ready = 0;
    if (!d->snap_started) return fl_err_set(err, FL_FAILED_PRECONDITION, "dqn_cuda: no snapshot begun");
    FL_TRY(cuda_check(cudaSetDevice(d->cfg.device), "cudaSetDevice", err));
    cudaError_t e = cudaEventQuery(d->ev_snap);
    if (e == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: keep it out of the next launch check */
        return FL_OK;
    }
    FL_TRY(cuda_check(e, "cudaEventQuery (snapshot)", err));
    *host = d->h_snap;
    *ready = 1;
    return FL_OK;
}
