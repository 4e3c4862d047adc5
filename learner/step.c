/* step: what every mode does after an update (priorities, counters, the target copy, the
 * checkpoint, publishing) and the first publish of a run (learner_internal.h). Calls
 * services.c, checkpoint.c and state.c; only the modes and learner.c call it. */
#include <stdint.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/log.h"
#include "learner/learner_internal.h"

/* A lone apex learner started without a checkpoint of its own onto a parameter server
 * that holds parameters already (it was restarted before its first checkpoint): it takes
 * them (online and target; the optimizer starts afresh) instead of publishing random
 * ones to every actor. 1 when it took them; 0 when there were none, or they could not be
 * fetched (the publish that follows retries through an outage and says why a version of
 * 2^64 - 1 leaves none newer); -1 with *st and err when the backend could not take them. */
static int adopt_held(fl_learner_t *l, fl_err_t *err, fl_status *st) {
    *st = FL_OK;
    const size_t n = fl_qnet_num_params(l->online);
    float *held = malloc(n * sizeof *held);
    if (!held) return 0;
    fl_err_t e;
    fl_err_init(&e);
    uint64_t v = 0;
    int updated = 0;
    fl_status fs = fl_param_fetch(l->params, &v, held, n, &updated, FL_LEARNER_RPC_TIMEOUT_MS, &e);
    const int take = fs == FL_OK && updated && v > 0 && v < UINT64_MAX;
    if (take) fl_qnet_set_params(l->online, held, n, &e);
    free(held);
    if (!take) return 0;
    fl_qnet_copy_params(l->target, l->online);
    l->st.param_version = v;
    if ((*st = fl__learner_push(l, 0, err)) != FL_OK) return -1; /* a GPU took the random ones at create */
    l->st.adopted_version = v;
    FL_WARN(
        "no checkpoint of this learner: continuing from the parameter server's version %llu (its optimizer "
        "state starts afresh)",
        (unsigned long long)v);
    return 1;
}

fl_status fl__learner_publish_first(fl_learner_t *l, fl_err_t *err) {
    if (l->index != 0) return FL_OK;
    if (!l->resumed && !l->reduce) {
        fl_status st;
        int a = adopt_held(l, err, &st);
        if (a < 0) return st;
        if (a > 0) return FL_OK;
    }
    fl_status s = fl__learner_publish(l, 1, err);
    if (s == FL_OK)
        FL_INFO("published the initial parameters as version %llu", (unsigned long long)l->st.param_version);
    return s;
}

/* Apex learner 0, every learner.publish_every steps: publishes l->online, or, with a
 * backend that takes snapshots, starts one (copied while training goes on) and
 * publishes it once it has landed. */
static fl_status publish_due(fl_learner_t *l, fl_err_t *err) {
    const fl__learner_backend_t *be = l->be;
    const int due = l->st.steps % (uint64_t)l->o.publish_every == 0;
    if (!be->snapshot_begin) {
        if (!due) return FL_OK;
        fl_status s = fl__learner_publish(l, 1, err);
        return s == FL_CANCELLED ? FL_OK : s;
    }
    if (l->snapshot_pending) {
        int ready = 0;
        FL_TRY(be->snapshot_poll(l, &ready, err));
        if (ready) {
            l->snapshot_pending = 0;
            fl_status s = fl__learner_publish(l, 1, err);
            if (s == FL_CANCELLED) return FL_OK;
            if (s != FL_OK) return s;
        }
    }
    if (due && !l->snapshot_pending) {
        FL_TRY(be->snapshot_begin(l, err));
        l->snapshot_pending = 1;
    }
    return FL_OK;
}

fl_status fl__learner_after_step(fl_learner_t *l, size_t n, double loss, fl_err_t *err) {
    FL_TRY(fl__learner_send_priorities(l, n, err));
    l->st.steps++;
    atomic_store_explicit(&l->watch_steps, l->st.steps, memory_order_relaxed);
    l->st.samples += n;
    l->st.last_loss = loss;
    l->win_loss_sum += loss;
    l->win_steps++;
    if (l->st.steps % (uint64_t)l->o.target_update == 0) {
        if (l->be->sync_target) FL_TRY(l->be->sync_target(l, err));
        fl_qnet_copy_params(l->target, l->online);
        l->st.target_updates++;
    }
    if (l->index == 0 && l->ckpt_path &&
        ((l->o.checkpoint_every > 0 && l->st.steps % (uint64_t)l->o.checkpoint_every == 0) ||
         (l->o.checkpoint_every_s > 0 && fl_clock_sec() - l->last_ckpt_t >= l->o.checkpoint_every_s)))
        fl__learner_checkpoint(l);
    /* Deterministic rounds publish once per round (mode_apex.c). */
    return l->publisher && !l->o.deterministic ? publish_due(l, err) : FL_OK;
}

fl_status fl__learner_updated(fl_learner_t *l, fl_status s, const fl_err_t *e, const char *what, float loss,
                              fl_err_t *err) {
    if (s == FL_OUT_OF_RANGE) {
        fl__learner_skipped(l, e->msg);
        return FL_OK;
    }
    if (s != FL_OK) return fl_err_set(err, s, "learner: %s: %s", what, e->msg);
    return fl__learner_after_step(l, l->cur->count, loss, err);
}
