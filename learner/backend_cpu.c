/* backend_cpu: the learner's updates on the host (see backend.h): learner/dqn.h's
 * double-DQN update on the learner's own networks and optimizer, with OpenBLAS
 * (learner.threads). The batch goes in as replay gives it where the network can take it
 * (cpu_prepare), else converted to floats into the learner's obs_f/next_f.
 * Nothing to open, move or close: the CPU networks are the ones trained.
 * Thread-safety: the learner's owner thread. */

#include "common/clock.h"
#include "common/dtype.h"
#include "learner/learner_internal.h"

/* The batch being trained on (l->view): float32 observations as they are, uint8 ones as
 * they are for the oneDNN backend (it converts them on the way into its layout), others
 * converted to floats into obs_f and next_f. */
static fl_status cpu_prepare(fl_learner_t *l, fl_err_t *err) {
    const fl_replay_batch_t *cb = l->cur;
    const size_t n = cb->count;
    FL_TRY(fl__learner_check_obs_bytes(l, err));
    l->view = (fl_dqn_batch_t){.size = (int)n,
                               .obs = l->obs_f,
                               .actions = cb->actions,
                               .rewards = cb->rewards,
                               .discounts = cb->discounts,
                               .next_obs = l->next_f,
                               .weights = cb->weights};
    if (l->obs.dtype == FL_DTYPE_FLOAT32) {
        l->view.obs = (const float *)cb->obs;
        l->view.next_obs = (const float *)cb->next_obs;
    } else if (l->obs.dtype == FL_DTYPE_UINT8 && fl_qnet_backend(l->online) == FL_QNET_BACKEND_DNNL) {
        l->view.raw_dtype = FL_DTYPE_UINT8;
        l->view.obs_raw = cb->obs;
        l->view.next_raw = cb->next_obs;
    } else {
        fl_dtype_to_float(l->obs.dtype, cb->obs, n * l->obs_count, l->obs_f);
        fl_dtype_to_float(l->obs.dtype, cb->next_obs, n * l->obs_count, l->next_f);
    }
    return FL_OK;
}

static fl_status cpu_step(fl_learner_t *l, float *loss, fl_err_t *e) {
    fl_dqn_stats_t ds = {0};
    fl_status s = fl_dqn_step(l->dqn, l->online, l->target, l->opt, &l->view, l->priorities, &ds, e);
    *loss = ds.loss;
    return s;
}

/* fl_dqn_step_group: the gradient, the all-reduce and the step, all timed as reduce_s. */
static fl_status cpu_group_update(fl_learner_t *l, int have, int *stop, float *loss, fl_err_t *e) {
    fl_dqn_stats_t ds = {0};
    fl_err_t ge;
    fl_err_init(&ge);
    double t0 = fl_clock_sec();
    fl_status s = fl_dqn_step_group(l->dqn, l->online, l->target, l->opt, l->reduce, l->rbuf, have ? &l->view : NULL,
                                    !have, l->priorities, &ds, stop, &ge);
    l->st.reduce_s += fl_clock_sec() - t0;
    *loss = ds.loss;
    if (s == FL_OUT_OF_RANGE) {
        *e = ge;
        return s;
    }
    if (s != FL_OK) return fl_err_set(e, s, "learner: update: %s", ge.msg);
    return FL_OK;
}

static fl_status cpu_gradient(fl_learner_t *l, float *loss, fl_err_t *e) {
    fl_dqn_stats_t ds = {0};
    fl_status s = fl_dqn_compute(l->dqn, l->online, l->target, &l->view, l->priorities, &ds, e);
    *loss = ds.loss;
    return s;
}

const fl__learner_backend_t fl__learner_backend_cpu = {
    .name = "cpu",
    .where = "the CPU",
    .update_what = "update",
    .prepare = cpu_prepare,
    .step = cpu_step,
    .group_update = cpu_group_update,
    .gradient = cpu_gradient,
};
