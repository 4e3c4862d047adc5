/* state: the learner's helpers that every other file of learner/ may call and that call
 * none of them (the bottom of learner/'s files: learner.c -> mode_*.c -> step.c ->
 * services.c, checkpoint.c -> state.c): whether to stop, the report to the launcher, an
 * interruptible sleep, the first-update line, a skipped batch, and the backend's pull
 * and push. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/stop.h"
#include "learner/learner_internal.h"

/* Slice of an interruptible sleep. */
#define IDLE_SLICE_S 0.05

int fl__learner_stopping(const fl_learner_t *l) {
    if (atomic_load_explicit(&l->stop, memory_order_relaxed) || fl_stop_requested() || fl_reporter_should_stop(l->rep))
        return 1;
    return l->o.max_steps > 0 && l->st.steps >= (uint64_t)l->o.max_steps;
}

void fl__learner_report(fl_learner_t *l, int force) {
    double now = fl_clock_sec();
    double span = now - l->win_start;
    if (!force && span < l->o.progress_every) return;
    if (l->win_steps > 0) l->last_mean_loss = l->win_loss_sum / (double)l->win_steps;
    fl_report_t r;
    memset(&r, 0, sizeof r);
    r.learner_steps = l->st.steps;
    r.samples = l->st.samples;
    r.param_version = l->o.mode == FL_LEARNER_GORILA ? l->fetched_version : l->st.param_version;
    r.loss = l->last_mean_loss;
    r.wait_fraction = span > 0 ? fmin(1.0, l->win_sample_s / span) : 0.0;
    fl_reporter_tick(l->rep, &r, 1);
    l->win_start = now;
    l->win_sample_s = 0;
    l->win_loss_sum = 0;
    l->win_steps = 0;
}

void fl__learner_idle(fl_learner_t *l, double sec) {
    double end = fl_clock_sec() + sec;
    for (;;) {
        fl__learner_report(l, 0);
        if (fl__learner_stopping(l)) return;
        double left = end - fl_clock_sec();
        if (left <= 0) return;
        fl_sleep_sec(left < IDLE_SLICE_S ? left : IDLE_SLICE_S);
    }
}

void fl__learner_ready(fl_learner_t *l, const char *where) {
    if (l->trained) return;
    if (where)
        FL_INFO("replay ready (%llu transitions); training on %s", (unsigned long long)l->cur->table_size, where);
    else
        FL_INFO("replay ready (%llu transitions); training", (unsigned long long)l->cur->table_size);
    l->trained = 1;
}

fl_status fl__learner_check_obs_bytes(const fl_learner_t *l, fl_err_t *err) {
    if (l->cur->obs_bytes == l->obs_bytes) return FL_OK;
    return fl_err_set(err, FL_DATA_LOSS, "learner: sampled observations of %zu bytes (expected %zu)", l->cur->obs_bytes,
                      l->obs_bytes);
}

void fl__learner_skipped(fl_learner_t *l, const char *why) {
    l->st.skipped_steps++;
    if ((l->st.skipped_steps & (l->st.skipped_steps - 1)) == 0)
        FL_WARN("skipped a batch (%llu so far): %s", (unsigned long long)l->st.skipped_steps, why);
}

fl_status fl__learner_pull(fl_learner_t *l, fl_err_t *err) {
    return l->be->pull ? l->be->pull(l, err) : FL_OK;
}

fl_status fl__learner_push(fl_learner_t *l, int with_optim, fl_err_t *err) {
    return l->be->push ? l->be->push(l, with_optim, err) : FL_OK;
}
