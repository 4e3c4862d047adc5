/* mode_group: apex learners in step (learner.count > 1, see learner.h): synchronous data
 * parallelism over the ring all-reduce of learner/reduce.h. At the start everyone takes
 * learner 0's networks, optimizer state and counters (so a resumed learner 0 resumes
 * all), and learner 0 publishes. Every learner calls step the same number of times: it
 * samples and prepares its batch (unless it wants to stop), then the backend's
 * group_update all-reduces [gradient, wants-to-stop, loss] and, unless some learner
 * wants to stop, applies the mean gradient, so that all networks stay identical. When
 * any learner wants to stop, no one steps and all leave together; a local failure is
 * returned after the reduce that tells the others.
 * Thread-safety: the learner's owner thread. */
#include <stdatomic.h>

#include "common/clock.h"
#include "common/log.h"
#include "learner/learner_internal.h"

static fl_status group_start(fl_learner_t *l, fl_err_t *err) {
    const size_t np = fl_qnet_num_params(l->online);
    uint64_t counters[5] = {l->st.steps, l->st.samples, l->st.param_version, l->st.target_updates,
                            (uint64_t)fl_optim_steps(l->opt)};
    FL_TRY(fl_reduce_broadcast(l->reduce, fl_qnet_params(l->online), np * sizeof(float), 0, err));
    FL_TRY(fl_reduce_broadcast(l->reduce, fl_qnet_params(l->target), np * sizeof(float), 0, err));
    FL_TRY(fl_reduce_broadcast(l->reduce, fl_optim_state(l->opt), fl_optim_state_size(l->opt) * sizeof(float), 0, err));
    FL_TRY(fl_reduce_broadcast(l->reduce, counters, sizeof counters, 0, err));
    l->st.steps = counters[0];
    l->st.samples = counters[1];
    l->st.param_version = counters[2];
    l->st.target_updates = counters[3];
    fl_optim_set_steps(l->opt, (int64_t)counters[4]);
    atomic_store(&l->watch_steps, l->st.steps);
    l->steps_at_publish = l->st.steps;
    FL_TRY(fl__learner_push(l, 1, err)); /* a GPU took this learner's own state at create */
    return fl__learner_publish_first(l, err);
}

/* One collective update; *stop = 1 when the group stops. */
static fl_status group_update(fl_learner_t *l, int *stop, fl_err_t *err) {
    fl_status result = FL_OK;
    int have = 0;
    if (!fl__learner_stopping(l)) {
        result = fl__learner_sample(l, err); /* FL_CANCELLED: stopped while waiting; else a real error */
        if (result == FL_OK) result = l->be->prepare(l, err);
        have = result == FL_OK;
    }
    float loss = 0;
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = l->be->group_update(l, have, stop, &loss, &e);
    if (result != FL_OK) { /* the others were told by the stop flag */
        *stop = 1;
        return result == FL_CANCELLED ? FL_OK : result;
    }
    if (s == FL_OUT_OF_RANGE) {
        fl__learner_skipped(l, e.msg);
        return FL_OK;
    }
    if (s != FL_OK) {
        *err = e;
        return s;
    }
    if (*stop) return FL_OK;
    return fl__learner_after_step(l, l->cur->count, loss, err);
}

static fl_status group_step(fl_learner_t *l, int *done, fl_err_t *err) {
    int stop = 0;
    fl_status s = group_update(l, &stop, err);
    if (s == FL_OK && !stop && !l->trained) {
        FL_INFO("replay ready; training with %d learners", fl_reduce_size(l->reduce));
        l->trained = 1;
    }
    fl__learner_release_batch(l);
    fl__learner_report(l, 0);
    if (stop) *done = 1;
    return s;
}

const fl__learner_mode_t fl__learner_mode_group = {
    .name = "apex group",
    .publishes = 1,
    .start = group_start,
    .step = group_step,
};
