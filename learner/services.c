/* services: the learner's calls to the replay shards (Sample, UpdatePriorities) and the
 * parameter servers (Publish), each retried through an outage of its service (common/
 * retry.h's transient statuses) with its backoff while the learner is not stopped,
 * logged once per outage (docs/design.md, "A learner"). Sampling goes through the prefetcher when
 * learner.prefetch > 0 (replay/prefetch.h): the batch being trained on is then one of
 * its buffers until fl__learner_release_batch gives it back with its new priorities.
 * Gorila's Fetch and Push are in mode_gorila.c.
 * Thread-safety: the learner's owner thread. */
#include <stdatomic.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/retry.h"
#include "learner/learner_internal.h"

void fl__learner_outage_fail(fl_learner_t *l, fl__learner_outage_t *o, const fl_err_t *e, fl_status s) {
    double now = fl_clock_sec();
    if (!o->active) {
        o->active = 1;
        o->since = o->last_log = now;
        fl_backoff_init(&o->backoff);
        FL_WARN("%s unreachable (%s: %s); retrying until it is back or the learner is stopped", o->what,
                fl_status_name(s), e->msg[0] ? e->msg : fl_status_str(s));
    } else if (now - o->last_log >= FL_LEARNER_LOG_EVERY_S) {
        o->last_log = now;
        FL_WARN("%s still unreachable after %.0f s (%s)", o->what, now - o->since, fl_status_name(s));
    }
    l->st.retries++;
    atomic_store_explicit(&l->watch_retries, l->st.retries, memory_order_relaxed);
    fl__learner_idle(l, fl_backoff_next(&o->backoff));
}

void fl__learner_outage_ok(fl__learner_outage_t *o) {
    if (!o->active) return;
    FL_INFO("%s is back after %.1f s", o->what, fl_clock_sec() - o->since);
    o->active = 0;
}

/* How often one publish may move its version past one the server holds (another
 * publisher keeps moving ahead) before it gives up. */
#define MAX_VERSION_JUMPS 4

/* Publishes the online parameters as the next version. retry: keep trying through an
 * outage until stopped (FL_CANCELLED then). A server that holds a newer version (this
 * learner was restarted) moves the version past it: logged at most once per
 * FL_LEARNER_LOG_EVERY_S, at most MAX_VERSION_JUMPS times per publish (then
 * FL_ABORTED), never past 2^64 - 1 (FL_OUT_OF_RANGE: no version can be newer). */
fl_status fl__learner_publish(fl_learner_t *l, int retry, fl_err_t *err) {
    if (l->st.param_version == UINT64_MAX)
        return fl_err_set(err, FL_OUT_OF_RANGE, "learner: publish: version %llu is the largest there is",
                          (unsigned long long)l->st.param_version);
    uint64_t version = l->st.param_version + 1;
    int jumps = 0;
    for (;;) {
        fl_err_t e;
        fl_err_init(&e);
        fl_status s = fl_param_publish(l->params, version, fl_qnet_params(l->online), fl_qnet_num_params(l->online),
                                       FL_LEARNER_RPC_TIMEOUT_MS, &e);
        if (s == FL_OK) {
            fl__learner_outage_ok(&l->param_out);
            l->st.param_version = version;
            l->st.publishes++;
            l->steps_at_publish = l->st.steps;
            return FL_OK;
        }
        if (s == FL_FAILED_PRECONDITION) {
            fl_param_info_t info;
            fl_err_t ie;
            fl_err_init(&ie);
            fl_status si = fl_param_info(l->params, FL_LEARNER_RPC_TIMEOUT_MS, &info, &ie);
            if (si == FL_OK && info.version >= version) {
                if (info.version == UINT64_MAX)
                    return fl_err_set(err, FL_OUT_OF_RANGE,
                                      "learner: publish: the parameter server holds version %llu, the largest there "
                                      "is, so no publish can be newer (restart the parameter server)",
                                      (unsigned long long)info.version);
                if (++jumps > MAX_VERSION_JUMPS)
                    return fl_err_set(err, FL_ABORTED,
                                      "learner: publish: the parameter server's version moved past ours %d times "
                                      "in one publish (now %llu): another process is publishing",
                                      MAX_VERSION_JUMPS, (unsigned long long)info.version);
                double now = fl_clock_sec();
                if (now - l->version_jump_logged >= FL_LEARNER_LOG_EVERY_S) {
                    l->version_jump_logged = now;
                    FL_WARN("the parameter server already holds version %llu; publishing as %llu",
                            (unsigned long long)info.version, (unsigned long long)(info.version + 1));
                }
                version = info.version + 1;
                continue;
            }
            if (si == FL_OK)
                return fl_err_set(err, s, "learner: publish version %llu: %s", (unsigned long long)version, e.msg);
            s = si, e = ie;
        }
        if (!fl_retry_transient(s) || !retry)
            return fl_err_set(err, s, "learner: publish version %llu: %s", (unsigned long long)version, e.msg);
        if (fl__learner_stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while publishing");
        fl__learner_outage_fail(l, &l->param_out, &e, s);
        if (fl__learner_stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while publishing");
    }
}

/* One Sample: synchronously into l->batch, or the next prefetched result (held in
 * l->taken until release_batch). */
static fl_status sample_once(fl_learner_t *l, fl_err_t *e) {
    if (!l->prefetch)
        return fl_replay_sharded_sample(l->replay, (size_t)l->batch_size, l->o.beta, FL__LEARNER_SAMPLE_TIMEOUT_MS,
                                        &l->batch, e);
    fl_replay_prefetched_t *r = NULL;
    while (!fl_replay_prefetch_next(l->prefetch, 200, &r))
        if (fl__learner_stopping(l)) return fl_err_set(e, FL_CANCELLED, "learner: stopped while sampling");
    l->taken = r;
    l->cur = r->batch;
    if (r->status != FL_OK) *e = r->err;
    return r->status;
}

/* Gives a prefetched batch back to its sampler thread, with the new priorities of its
 * rows when the step produced them (they go out with that thread's next Sample). */
void fl__learner_release_batch(fl_learner_t *l) {
    if (l->taken) fl_replay_prefetch_release_updating(l->prefetch, l->taken, l->prio_n, l->priorities);
    l->taken = NULL;
    l->prio_n = 0;
    l->cur = &l->batch;
}

/* Samples one batch into l->cur. FL_OK with a batch, FL_CANCELLED when stopped while
 * waiting for data or for the shard to come back, another status for a real error. */
fl_status fl__learner_sample(fl_learner_t *l, fl_err_t *err) {
    double t0 = fl_clock_sec(), last_wait_log = -1e9;
    fl_status result;
    for (;;) {
        if (fl__learner_stopping(l)) {
            result = fl_err_set(err, FL_CANCELLED, "learner: stopped while sampling");
            break;
        }
        fl_err_t e;
        fl_err_init(&e);
        double tc = fl_clock_sec();
        fl_status s = sample_once(l, &e);
        if (s == FL_OK && l->cur->count > 0) {
            fl__learner_outage_ok(&l->replay_out);
            result = FL_OK;
            break;
        }
        fl__learner_release_batch(l);                       /* a failed call's buffer goes back at once */
        if (s == FL_CANCELLED && fl__learner_stopping(l)) { /* our own stop (a shard's CANCELLED is an outage) */
            result = s;
            *err = e;
            break;
        }
        if (s == FL_OK || s == FL_FAILED_PRECONDITION) {
            /* Not enough data yet (or an empty answer): the shard has waited for us. */
            fl__learner_outage_ok(&l->replay_out);
            double now = fl_clock_sec();
            if (now - last_wait_log >= FL_LEARNER_LOG_EVERY_S) {
                FL_INFO("waiting for replay: %s", s == FL_OK ? "empty sample" : e.msg);
                last_wait_log = now;
            }
            fl__learner_idle(l, now - tc < 0.1 ? 0.1 : 0.0);
            continue;
        }
        if (!fl_retry_transient(s)) {
            result = fl_err_set(err, s, "learner: sample: %s", e.msg[0] ? e.msg : fl_status_str(s));
            break;
        }
        fl__learner_outage_fail(l, &l->replay_out, &e, s);
    }
    double dt = fl_clock_sec() - t0;
    l->st.sample_s += dt;
    l->win_sample_s += dt;
    return result;
}

/* Sends the priorities of the batch just trained on; retries through an outage until
 * stopped (then the update is dropped: FL_OK). */
fl_status fl__learner_send_priorities(fl_learner_t *l, size_t n, fl_err_t *err) {
    const float hi = l->o.max_priority > 0 ? (float)l->o.max_priority : 0.0f;
    for (size_t i = 0; hi > 0 && i < n; i++) {
        if (!(l->priorities[i] > hi)) continue;
        if (l->priorities_clamped++ == 0)
            FL_WARN(
                "a priority of %g (|TD error|) is above replay.max_priority = %g, which the replay refuses: "
                "sending %g instead (counted; diverging Q-values?)",
                (double)l->priorities[i], l->o.max_priority, (double)hi);
        l->priorities[i] = hi;
    }
    if (l->taken) { /* prefetching: they ride on the next Sample call */
        l->prio_n = n;
        l->st.priorities_sent += n;
        l->st.priorities_applied = fl_replay_prefetch_updates_applied(l->prefetch);
        return FL_OK;
    }
    for (;;) {
        fl_err_t e;
        fl_err_init(&e);
        uint64_t applied = 0;
        fl_status s = fl_replay_sharded_update_priorities(l->replay, n, l->cur->keys, l->priorities, &applied, &e);
        if (s == FL_OK) {
            fl__learner_outage_ok(&l->replay_out);
            l->st.priorities_sent += n;
            l->st.priorities_applied += applied;
            return FL_OK;
        }
        if (!fl_retry_transient(s))
            return fl_err_set(err, s, "learner: update priorities: %s", e.msg[0] ? e.msg : fl_status_str(s));
        if (fl__learner_stopping(l)) return FL_OK;
        fl__learner_outage_fail(l, &l->replay_out, &e, s);
        if (fl__learner_stopping(l)) return FL_OK;
    }
}
