/* mode_gorila: Gorila learners (learner.mode = gorila; docs/design.md, "Two update
 * modes"): the parameter-server shards own the optimizer. Learner 0 adopts the
 * parameters a shard already holds (a restarted learner) or publishes its own as version
 * 1; the others wait for a version. Each step fetches the newest parameters every learner.fetch_every steps (and
 * pushes them to the backend when they changed), computes the gradient of its batch on
 * the backend, clips it (learner.grad_clip) and pushes it (fl_param_push) with the
 * versions it was computed from; the shards apply, drop or hold it by their staleness
 * rules. Fetch and Push are retried through an outage like the other services.
 * learner.slow_push_ms slows the last learner down on purpose (tests of the staleness
 * rules).
 * Thread-safety: the learner's owner thread. */
#include <string.h>

#include "common/log.h"
#include "common/retry.h"
#include "learner/learner_internal.h"

/* Fetches the newest parameters into the online network (retrying through an
 * outage; FL_CANCELLED when stopped). wait_first: until some version exists. */
static fl_status fetch_params(fl_learner_t *l, int wait_first, fl_err_t *err) {
    for (;;) {
        fl_err_t e;
        fl_err_init(&e);
        int updated = 0;
        uint64_t v = l->fetched_version;
        fl_status s = fl_param_fetch(l->params, &v, fl_qnet_params(l->online), fl_qnet_num_params(l->online), &updated,
                                     FL_LEARNER_RPC_TIMEOUT_MS, &e);
        if (s == FL_OK) {
            fl__learner_outage_ok(&l->param_out);
            if (updated) l->fetched_version = v;
            if (!wait_first || l->fetched_version > 0) return FL_OK;
            fl__learner_idle(l, 0.05);
            if (fl__learner_stopping(l))
                return fl_err_set(err, FL_CANCELLED, "learner: stopped while waiting for parameters");
            continue;
        }
        if (!fl_retry_transient(s)) return fl_err_set(err, s, "learner: fetch parameters: %s", e.msg);
        if (fl__learner_stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while fetching");
        fl__learner_outage_fail(l, &l->param_out, &e, s);
        if (fl__learner_stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while fetching");
    }
}

/* Pushes the online network's gradient; retries through an outage. */
static fl_status push_grads(fl_learner_t *l, fl_err_t *err) {
    for (;;) {
        fl_err_t e;
        fl_err_init(&e);
        fl_param_push_result_t res;
        memset(&res, 0, sizeof res);
        fl_status s = fl_param_push(l->params, fl_qnet_grads(l->online), fl_qnet_num_params(l->online), &res,
                                    FL_LEARNER_RPC_TIMEOUT_MS + (int64_t)(l->o.paramserver_wait_timeout_s * 1000), &e);
        if (s == FL_OK) {
            fl__learner_outage_ok(&l->param_out);
            l->st.pushes++;
            l->st.pushes_applied += (uint64_t)res.applied;
            l->st.pushes_dropped += (uint64_t)res.dropped;
            if (res.max_staleness > l->st.max_staleness) l->st.max_staleness = res.max_staleness;
            return FL_OK;
        }
        if (!fl_retry_transient(s)) return fl_err_set(err, s, "learner: push gradients: %s", e.msg);
        if (fl__learner_stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while pushing");
        fl__learner_outage_fail(l, &l->param_out, &e, s);
        if (fl__learner_stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while pushing");
    }
}

/* Fetch (every learner.fetch_every steps), gradient, clip, push, bookkeeping. */
static fl_status gorila_update(fl_learner_t *l, fl_err_t *err) {
    if (l->st.steps % (uint64_t)l->o.fetch_every == 0) {
        uint64_t before = l->fetched_version;
        FL_TRY(fetch_params(l, 0, err));
        if (l->fetched_version != before) FL_TRY(fl__learner_push(l, 0, err));
    }
    FL_TRY(l->be->prepare(l, err));
    float loss = 0;
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = l->be->gradient(l, &loss, &e);
    if (s == FL_OUT_OF_RANGE) {
        fl__learner_skipped(l, e.msg);
        return FL_OK;
    }
    if (s != FL_OK) return fl_err_set(err, s, "learner: update: %s", e.msg);
    fl_clip_grad_norm(fl_qnet_grads(l->online), fl_qnet_num_params(l->online), (float)l->o.grad_clip);
    if (l->o.slow_push_ms > 0 && l->index == l->o.count - 1) fl__learner_idle(l, (double)l->o.slow_push_ms / 1000.0);
    FL_TRY(push_grads(l, err));
    return fl__learner_after_step(l, l->cur->count, loss, err);
}

static fl_status gorila_start(fl_learner_t *l, fl_err_t *err) {
    if (l->index != 0) return fetch_params(l, 1, err);
    FL_TRY(fetch_params(l, 0, err));
    if (l->fetched_version == 0) {
        FL_TRY(fl__learner_publish(l, 1, err));
        l->fetched_version = l->st.param_version;
    } else {
        FL_INFO("the parameter servers already hold version %llu: training from it",
                (unsigned long long)l->fetched_version);
    }
    fl_qnet_copy_params(l->target, l->online);
    return FL_OK;
}

static fl_status gorila_step(fl_learner_t *l, int *done, fl_err_t *err) {
    if (fl__learner_stopping(l)) {
        *done = 1;
        return FL_OK;
    }
    FL_TRY(fl__learner_sample(l, err));
    fl__learner_ready(l, NULL);
    fl_status s = gorila_update(l, err);
    fl__learner_release_batch(l);
    fl__learner_report(l, 0);
    return s;
}

static fl_status gorila_end(fl_learner_t *l, fl_status s, fl_err_t *err) {
    (void)l;
    (void)err;
    return s;
}

const fl__learner_mode_t fl__learner_mode_gorila = {
    .name = "gorila",
    .publishes = 0,
    .start = gorila_start,
    .step = gorila_step,
    .end = gorila_end,
};
