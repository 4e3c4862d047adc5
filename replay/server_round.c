/* server_round: the shard's deterministic rounds (fleet.Replay/Round, run.deterministic;
 * see proto/fleet.proto and docs/design.md, "Deterministic mode").
 *
 * State (guarded by the service's mu): committed_round, and per participant p (1 ..
 * participants) the last round it finished (done[p]) and its batches of the rounds not yet
 * committed, held as copies of their RoundRequest messages in FL__ROUND_AHEAD slots
 * (slot round % FL__ROUND_AHEAD). A participant may send a batch for a round at most
 * FL__ROUND_AHEAD past the committed one, so the slots never collide and a shard holds at
 * most FL__ROUND_AHEAD messages per participant. Round r is committed once every
 * participant is done with it: its batches go into the table in participant order, under
 * mu (lock order: mu, then the table), and the waiters on cv are woken.
 *
 * A commit goes into the table without the write-ahead log: a deterministic run does not
 * survive a restart of its replay shard (the rounds' state is the process's), which the
 * participants then learn from the refusal of their next round. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "fleet.pb-c.h"
#include "replay/server_internal.h"

fl_status fl__replay_rounds_init(fl_replay_service_t *s, int64_t participants, fl_err_t *err) {
    if (participants <= 0) return FL_OK;
    if (participants > FL_REPLAY_MAX_ROUND_PARTICIPANTS)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "deterministic rounds: %" PRId64 " participants, expected 1 .. %d",
                          participants, FL_REPLAY_MAX_ROUND_PARTICIPANTS);
    s->participants = (int)participants;
    s->round_done = calloc((size_t)participants + 1, sizeof *s->round_done);
    s->staged = calloc(((size_t)participants + 1) * FL__ROUND_AHEAD, sizeof *s->staged);
    if (!s->round_done || !s->staged) return fl_err_set(err, FL_NO_MEMORY, "deterministic rounds: out of memory");
    return FL_OK;
}

void fl__replay_rounds_free(fl_replay_service_t *s) {
    if (s->staged)
        for (size_t i = 0; i < ((size_t)s->participants + 1) * FL__ROUND_AHEAD; i++) free(s->staged[i].msg);
    free(s->staged);
    free(s->round_done);
    s->staged = NULL;
    s->round_done = NULL;
}

static fl__staged_round_t *slot_of(fl_replay_service_t *s, int p, uint64_t round) {
    return &s->staged[(size_t)p * FL__ROUND_AHEAD + (size_t)(round % FL__ROUND_AHEAD)];
}

/* Inserts participant p's held batch of `round` (mu held), and frees it. A batch that was
 * checked when it came and that the table still refuses is logged and counted. */
static void commit_batch(fl_replay_service_t *s, int p, uint64_t round) {
    fl__staged_round_t *st = slot_of(s, p, round);
    if (!st->msg || st->round != round) return;
    fl_err_t e;
    fl_err_init(&e);
    Fleet__RoundRequest *req = fleet__round_request__unpack(NULL, st->len, st->msg);
    fl_wire_batch_t b;
    uint64_t *keys = NULL;
    fl_status rc = FL_NO_MEMORY;
    if (req &&
        fl_wire_decode_batch(req->batch, &s->sig, FL_WIRE_NEED_PRIORITIES | FL_WIRE_FINITE_OBS, &b, &e) == FL_OK &&
        (keys = malloc(b.count * sizeof *keys)) != NULL)
        rc = fl_table_insert(s->table, b.count, b.obs, b.actions, b.rewards, b.discounts, b.next_obs, b.priorities,
                             keys, &e);
    if (rc == FL_OK) {
        atomic_fetch_add(&s->insert_batches, 1);
    } else {
        atomic_fetch_add(&s->rejected, 1);
        FL_ERROR("round %" PRIu64 ": participant %d's batch not inserted: %s", round, p,
                 e.msg[0] ? e.msg : "out of memory");
    }
    free(keys);
    if (req) fleet__round_request__free_unpacked(req, NULL);
    free(st->msg);
    st->msg = NULL;
    st->len = 0;
}

/* Commits every round all participants are done with (mu held). */
static void commit_ready(fl_replay_service_t *s) {
    int moved = 0;
    for (;;) {
        const uint64_t r = s->committed_round + 1;
        for (int p = 1; p <= s->participants; p++)
            if (s->round_done[p] < r) goto out;
        for (int p = 1; p <= s->participants; p++) commit_batch(s, p, r);
        s->committed_round = r;
        if (!s->first_full_round) {
            fl_table_info_t ti;
            fl_table_info(s->table, &ti);
            if (ti.size >= s->min_size) s->first_full_round = r;
        }
        moved = 1;
    }
out:
    if (moved) pthread_cond_broadcast(&s->cv);
}

/* Participant p's part of a Round call (mu held): the order of its rounds, the window
 * of rounds it may send a batch for, and the batch held until its round commits. A
 * resent round (already finished) is accepted and changes nothing. */
static fl_status take_part(fl_replay_service_t *s, const Fleet__RoundRequest *req, const uint8_t *msg, size_t len,
                           int has_batch, fl_err_t *e) {
    const int p = (int)req->participant;
    const uint64_t round = req->round, through = req->through ? req->through : req->round;
    if (round <= s->round_done[p]) return FL_OK; /* a resend */
    if (round != s->round_done[p] + 1)
        return fl_err_set(e, FL_FAILED_PRECONDITION,
                          "participant %d: round %" PRIu64 ", expected round %" PRIu64
                          " (one past the last it finished; a replay shard restarted mid-run has lost its rounds)",
                          p, round, s->round_done[p] + 1);
    if (has_batch && round > s->committed_round + FL__ROUND_AHEAD)
        return fl_err_set(e, FL_FAILED_PRECONDITION,
                          "participant %d: a batch for round %" PRIu64
                          ", more than %d past the committed round %" PRIu64,
                          p, round, FL__ROUND_AHEAD, s->committed_round);
    if (has_batch) {
        fl__staged_round_t *st = slot_of(s, p, round);
        uint8_t *copy = malloc(len);
        if (!copy) return fl_err_set(e, FL_RESOURCE_EXHAUSTED, "replay shard out of memory");
        memcpy(copy, msg, len);
        free(st->msg);
        st->msg = copy;
        st->len = len;
        st->round = round;
    }
    s->round_done[p] = through;
    commit_ready(s);
    return FL_OK;
}

/* Waits (mu held) up to wait_ms for `round` to be committed. */
static void wait_commit(fl_replay_service_t *s, uint64_t round, uint32_t wait_ms) {
    if (s->committed_round >= round || wait_ms == 0) return;
    struct timespec until;
    fl__replay_deadline_in(&until, wait_ms / 1000.0);
    while (!s->stopping && s->committed_round < round)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT) break;
}

fl_status fl__replay_round_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    if (!s->participants)
        return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                  "replay shard %d does not run deterministic rounds (run.deterministic is off)",
                                  s->shard);
    Fleet__RoundRequest *req = fleet__round_request__unpack(NULL, len, msg);
    if (!req)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "RoundRequest: %zu bytes that do not parse as a fleet.RoundRequest", len);
    fl_err_t e;
    fl_err_init(&e);
    fl_status st = FL_OK;
    fl_wire_batch_t b;
    const int has_batch = req->batch && req->batch->count > 0;
    if (req->round == 0) {
        st = fl_err_set(&e, FL_INVALID_ARGUMENT, "round: got 0, expected >= 1");
    } else if (req->participant > (uint32_t)s->participants) {
        st = fl_err_set(&e, FL_INVALID_ARGUMENT, "participant: got %" PRIu32 ", expected 0 .. %d (0: only wait)",
                        req->participant, s->participants);
    } else if (req->participant == 0 && (has_batch || req->through)) {
        st = fl_err_set(&e, FL_INVALID_ARGUMENT, "participant 0 only waits: it sends no batch and no `through`");
    } else if (req->through && req->through < req->round) {
        st = fl_err_set(&e, FL_INVALID_ARGUMENT, "through: got %" PRIu64 ", expected 0 or >= round %" PRIu64,
                        req->through, req->round);
    } else if (req->through && req->through - req->round > FL_REPLAY_MAX_ROUNDS_THROUGH) {
        st = fl_err_set(&e, FL_INVALID_ARGUMENT, "through: got %" PRIu64 ", expected at most round + %d", req->through,
                        FL_REPLAY_MAX_ROUNDS_THROUGH);
    } else if (has_batch) {
        st = fl_wire_decode_batch(req->batch, &s->sig, FL_WIRE_NEED_PRIORITIES | FL_WIRE_FINITE_OBS, &b, &e);
    }
    if (st != FL_OK) {
        atomic_fetch_add(&s->rejected, 1);
        fleet__round_request__free_unpacked(req, NULL);
        return fl_rpc_reply_error(reply, st, "Round: %s", e.msg);
    }
    Fleet__RoundResponse resp = FLEET__ROUND_RESPONSE__INIT;
    pthread_mutex_lock(&s->mu);
    if (req->participant > 0) st = take_part(s, req, msg, len, has_batch, &e);
    if (st == FL_OK) wait_commit(s, req->round, req->wait_ms);
    resp.committed_round = s->committed_round;
    resp.first_full_round = s->first_full_round;
    fl_table_info_t ti;
    fl_table_info(s->table, &ti); /* under mu: the size of that commit */
    resp.table_size = ti.size;
    pthread_mutex_unlock(&s->mu);
    fleet__round_request__free_unpacked(req, NULL);
    if (st != FL_OK) {
        atomic_fetch_add(&s->rejected, 1);
        return fl_rpc_reply_error(reply, st, "Round: %s", e.msg);
    }
    return fl_rpc_reply_pb(reply, &resp.base);
}
