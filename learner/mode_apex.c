/* mode_apex: one Ape-X learner (see learner.h). Learner 0 publishes its initial
 * parameters (version 1, or past what the server holds) at the start; each step samples
 * a batch, takes one update on the backend and does the bookkeeping (priorities, target
 * copy, checkpoint, publish every learner.publish_every steps).
 *
 * A backend that pipelines (upload / launch / finish: a GPU with learner.prefetch > 0)
 * runs the pipeline instead: batch k+1 is sampled and its copy to the device runs while
 * update k computes; then update k is finished (its priorities go back with its batch)
 * and k+1 launched. Two prefetched batches are held at a time (l->inflight is the
 * launched one); end finishes the last.
 * Thread-safety: the learner's owner thread. */
#include <string.h>

#include "common/clock.h"
#include "common/control.h"
#include "common/log.h"
#include "common/retry.h"
#include "learner/learner_internal.h"

/* run.deterministic: milliseconds of one wait for a round's commit. */
#define ROUND_WAIT_MS 1000

/* Waits for the launched update of l->cur's batch; then its bookkeeping. */
static fl_status pipeline_finish(fl_learner_t *l, fl_err_t *err) {
    float loss = 0;
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = l->be->finish(l, &loss, &e);
    return fl__learner_updated(l, s, &e, l->be->update_what, loss, err);
}

/* Finishes the update in flight (it becomes the current batch) and releases its batch. */
static fl_status finish_inflight(fl_learner_t *l, fl_err_t *fe) {
    l->taken = l->inflight;
    l->cur = l->inflight_batch;
    l->inflight = NULL;
    fl_err_init(fe);
    fl_status fs = pipeline_finish(l, fe);
    fl__learner_release_batch(l);
    return fs;
}

fl_status fl__learner_pipeline_step(fl_learner_t *l, int *done, fl_err_t *err) {
    const fl__learner_backend_t *be = l->be;
    if (fl__learner_stopping(l)) {
        *done = 1;
        return FL_OK;
    }
    fl_status s = fl__learner_sample(l, err); /* into l->taken / l->cur */
    if (s != FL_OK) return s;
    fl__learner_ready(l, be->where);
    int stage = -1;
    s = be->prepare(l, err);
    if (s == FL_OK) s = be->upload(l, &stage, err);
    fl_replay_prefetched_t *next = l->taken;
    fl_replay_batch_t *next_batch = l->cur;
    if (l->inflight) { /* update k: finished while k+1's copy runs */
        fl_err_t fe;
        fl_status fs = finish_inflight(l, &fe);
        if (s == FL_OK && fs != FL_OK) {
            s = fs;
            *err = fe;
        }
    }
    l->taken = next;
    l->cur = next_batch;
    if (s == FL_OK) s = be->launch(l, stage, err);
    if (s != FL_OK) {
        fl__learner_release_batch(l);
        return s;
    }
    l->inflight = l->taken;
    l->inflight_batch = l->cur;
    l->taken = NULL;
    l->cur = &l->batch;
    fl__learner_report(l, 0);
    return FL_OK;
}

fl_status fl__learner_pipeline_end(fl_learner_t *l, fl_status s, fl_err_t *err) {
    if (!l->inflight) return s;
    fl_err_t fe;
    fl_status fs = finish_inflight(l, &fe);
    if ((s == FL_OK || s == FL_CANCELLED) && fs != FL_OK) {
        s = fs;
        *err = fe;
    }
    return s;
}

/* One update of the sampled batch on the backend. */
static fl_status update(fl_learner_t *l, fl_err_t *err) {
    FL_TRY(l->be->prepare(l, err));
    float loss = 0;
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = l->be->step(l, &loss, &e);
    return fl__learner_updated(l, s, &e, l->be->update_what, loss, err);
}

/* run.deterministic: waits for the replay shard's commit of `round` (every actor's and
 * evaluator's part of it); *a receives the shard's answer then. FL_CANCELLED when the
 * learner is stopped meanwhile. */
static fl_status wait_round(fl_learner_t *l, uint64_t round, fl_replay_round_answer_t *a, fl_err_t *err) {
    fl_replay_client_t *c = fl_replay_sharded_client(l->replay, 0);
    double since = fl_clock_sec(), logged = since;
    for (;;) {
        if (fl__learner_stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while waiting for a round");
        fl_err_t e;
        fl_err_init(&e);
        fl_status s = fl_replay_round(c, 0, round, 0, NULL, NULL, ROUND_WAIT_MS, a, &e);
        const uint64_t committed = s == FL_OK ? a->committed_round : 0;
        if (s == FL_OK && committed >= round) {
            fl__learner_outage_ok(&l->replay_out);
            return FL_OK;
        }
        if (s == FL_OK) {
            fl__learner_report(l, 0);
            if (fl_clock_sec() - logged >= FL_LEARNER_LOG_EVERY_S) {
                logged = fl_clock_sec();
                FL_INFO("round %llu: waiting %.0f s for every actor's and evaluator's part (committed: %llu)",
                        (unsigned long long)round, logged - since, (unsigned long long)committed);
            }
            continue;
        }
        if (!fl_retry_transient(s))
            return fl_err_set(err, s, "learner: round %llu: %s", (unsigned long long)round, e.msg);
        fl__learner_outage_fail(l, &l->replay_out, &e, s);
    }
}

/* run.deterministic: the round's figures for the launcher's rounds.csv (forced). */
static void report_round(fl_learner_t *l, uint64_t round, uint64_t updates, double loss, uint64_t replay_size) {
    static const char *const names[] = {FL_REPORT_ROUND, FL_REPORT_ROUND_UPDATES, FL_REPORT_ROUND_LOSS,
                                        FL_REPORT_ROUND_REPLAY_SIZE};
    const double values[] = {(double)round, (double)updates, loss, (double)replay_size};
    fl_report_t r;
    memset(&r, 0, sizeof r);
    r.learner_steps = l->st.steps;
    r.samples = l->st.samples;
    r.param_version = l->st.param_version;
    r.loss = l->last_mean_loss;
    r.n_extra = 4;
    r.extra_names = names;
    r.extra_values = values;
    fl_reporter_tick(l->rep, &r, 1);
    fl__learner_report(l, 0);
}

/* run.deterministic, one round r (the version the actors stepped with): once the shard
 * committed it, learner.round_updates synchronous updates when the replay held
 * replay.min_size_to_sample at that commit (none before: the shard's first_full_round),
 * then parameter version r + 1. */
static fl_status apex_round(fl_learner_t *l, int *done, fl_err_t *err) {
    const uint64_t round = l->st.param_version;
    fl_replay_round_answer_t a;
    fl_status s = wait_round(l, round, &a, err);
    if (s == FL_CANCELLED) {
        *done = 1;
        return FL_OK;
    }
    FL_TRY(s);
    uint64_t updates = 0;
    double loss_sum = 0;
    if (a.first_full_round && a.first_full_round <= round) {
        for (int64_t k = 0; k < l->o.round_updates; k++) {
            if (fl__learner_stopping(l)) {
                *done = 1;
                return FL_OK;
            }
            FL_TRY(fl__learner_sample(l, err));
            fl__learner_ready(l, NULL);
            const uint64_t steps = l->st.steps;
            s = update(l, err);
            fl__learner_release_batch(l);
            FL_TRY(s);
            if (l->st.steps > steps) { /* not a skipped batch */
                updates++;
                loss_sum += l->st.last_loss;
            }
        }
    }
    report_round(l, round, updates, updates ? loss_sum / (double)updates : 0.0, a.table_size);
    s = fl__learner_publish(l, 1, err);
    if (s == FL_CANCELLED) *done = 1;
    return s == FL_CANCELLED ? FL_OK : s;
}

static fl_status apex_step(fl_learner_t *l, int *done, fl_err_t *err) {
    if (l->o.deterministic) return apex_round(l, done, err);
    if (l->pipelined) return fl__learner_pipeline_step(l, done, err);
    if (fl__learner_stopping(l)) {
        *done = 1;
        return FL_OK;
    }
    FL_TRY(fl__learner_sample(l, err));
    fl__learner_ready(l, NULL);
    fl_status s = update(l, err);
    fl__learner_release_batch(l);
    fl__learner_report(l, 0);
    return s;
}

static fl_status apex_end(fl_learner_t *l, fl_status s, fl_err_t *err) {
    return l->pipelined ? fl__learner_pipeline_end(l, s, err) : s;
}

const fl__learner_mode_t fl__learner_mode_apex = {
    .name = "apex",
    .publishes = 1,
    .start = fl__learner_publish_first,
    .step = apex_step,
    .end = apex_end,
};
