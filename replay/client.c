/* client: one replay shard's client (see client.h): the channel, sampled batches, and
 * the Sample, UpdatePriorities and Info calls. */
#include "replay/client.h"

#include <stdlib.h>
#include <string.h>

#include "common/methods.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/client_internal.h"
#include "replay/wire.h"

fl_status fl_replay_client_create(const char *addr, fl_replay_client_t **out, fl_err_t *err) {
    *out = NULL;
    fl_replay_client_t *c = calloc(1, sizeof *c);
    if (!c) return fl_err_set(err, FL_NO_MEMORY, "replay client: out of memory");
    c->timeout_ms = FL_REPLAY_CLIENT_TIMEOUT_MS;
    fl_status st = fl_rpc_channel_create(addr, 0, &c->ch, err);
    if (st != FL_OK) {
        free(c);
        return st;
    }
    *out = c;
    return FL_OK;
}

void fl_replay_client_destroy(fl_replay_client_t *c) {
    if (!c) return;
    fl_rpc_channel_destroy(c->ch);
    free(c);
}

void fl_replay_client_set_timeout(fl_replay_client_t *c, int64_t timeout_ms) {
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : FL_REPLAY_CLIENT_TIMEOUT_MS;
}

/* Bytes rounded up to the columns' alignment. */
static size_t col_bytes(size_t n) {
    return (n + 63) & ~(size_t)63;
}

fl_status fl_replay_batch_init(fl_replay_batch_t *b, size_t capacity, size_t obs_bytes) {
    memset(b, 0, sizeof *b);
    if (capacity == 0 || obs_bytes == 0) return FL_INVALID_ARGUMENT;
    if (capacity > SIZE_MAX / 64 || obs_bytes > (SIZE_MAX / 4) / capacity) return FL_INVALID_ARGUMENT;
    const size_t ob = col_bytes(capacity * obs_bytes), i4 = col_bytes(capacity * 4), i8 = col_bytes(capacity * 8);
    /* obs, next_obs; actions, rewards, discounts, weights (4 bytes); keys, probs (8) */
    /* whole pages, so that a GPU learner can page-lock the block (cudaHostRegister refuses
     * a range that ends inside a page on some drivers) */
    const size_t total = (2 * ob + 4 * i4 + 2 * i8 + 4095) & ~(size_t)4095;
    void *block = NULL;
    if (posix_memalign(&block, 4096, total) != 0) return FL_NO_MEMORY;
    uint8_t *p = block;
    b->block = p;
    b->block_bytes = total;
    b->capacity = capacity;
    b->obs_bytes = obs_bytes;
    b->obs = p;
    b->next_obs = p + ob;
    p += 2 * ob;
    b->actions = (int32_t *)p;
    b->rewards = (float *)(p + i4);
    b->discounts = (float *)(p + 2 * i4);
    b->weights = (float *)(p + 3 * i4);
    p += 4 * i4;
    b->keys = (uint64_t *)p;
    b->probs = (double *)(p + i8);
    return FL_OK;
}

void fl_replay_batch_free(fl_replay_batch_t *b) {
    if (!b) return;
    free(b->block);
    memset(b, 0, sizeof *b);
}

fl_status fl__replay_sample_rows(fl_replay_client_t *c, size_t batch_size, double beta, int64_t timeout_ms, int probe,
                                 const fl_replay_updates_t *upd, fl_replay_batch_t *out, size_t offset,
                                 fl__sample_meta_t *meta, fl_err_t *err) {
    /* The shard waits for data a little less than the call may take, so that running out
     * of time is answered by the shard (FAILED_PRECONDITION with its size), not by the
     * deadline, and the batch still has time to arrive. */
    int64_t wait_ms = 0, deadline_ms = c->timeout_ms;
    if (timeout_ms > 0) {
        int64_t margin = timeout_ms / 4 < 1000 ? timeout_ms / 4 : 1000;
        wait_ms = probe ? 0 : timeout_ms - margin;
        deadline_ms = timeout_ms;
    }
    Fleet__SampleRequest req = FLEET__SAMPLE_REQUEST__INIT;
    req.batch_size = (uint32_t)batch_size;
    req.beta = beta;
    req.timeout_ms = wait_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)wait_ms;
    if (upd && upd->n > 0) {
        req.n_update_keys = req.n_update_priorities = upd->n;
        req.update_keys = (uint64_t *)upd->keys;
        req.update_priorities = (float *)upd->priorities;
    }
    /* The reply stays in the segments it arrived in and is read from there: each
     * observation byte is copied once, into the batch. */
    size_t req_len = fleet__sample_request__get_packed_size(&req);
    uint8_t small[256], *req_buf = req_len <= sizeof small ? small : malloc(req_len);
    if (!req_buf) return fl_err_set(err, FL_NO_MEMORY, "replay sample: out of memory for a %zu-byte request", req_len);
    fleet__sample_request__pack(&req, req_buf);
    fl_rpc_segs_t resp;
    fl_status st = fl_rpc_unary_segs(c->ch, fl_method_path(FL_METHOD_REPLAY_SAMPLE), req_buf, req_len, deadline_ms,
                                     FL_RPC_WAIT_FOR_READY, &resp, err);
    if (req_buf != small) free(req_buf);
    if (st != FL_OK) return st;
    const fl_wire_sample_cols_t cols = {
        .room = out->capacity - offset,
        .obs_bytes = out->obs_bytes,
        .obs = out->obs + offset * out->obs_bytes,
        .next_obs = out->next_obs + offset * out->obs_bytes,
        .actions = out->actions + offset,
        .rewards = out->rewards + offset,
        .discounts = out->discounts + offset,
        .weights = out->weights + offset,
        .keys = out->keys + offset,
        .probs = out->probs + offset,
    };
    fl_wire_sample_info_t info;
    st = fl_wire_read_sample_reply(resp.seg, resp.n, &cols, &info, err);
    fl_rpc_segs_free(&resp);
    if (st != FL_OK) {
        fl_err_prefix(err, "replay sample: bad response");
        return st;
    }
    meta->count = info.count;
    meta->table_size = info.table_size;
    meta->total = info.total_priority;
    meta->min_q = info.min_priority;
    meta->shard_id = info.shard_id;
    meta->mass = info.sampling_mass;
    meta->updates_applied = info.updates_applied;
    return FL_OK;
}

fl_status fl_replay_sample(fl_replay_client_t *c, size_t batch_size, double beta, int64_t timeout_ms,
                           fl_replay_batch_t *out, fl_err_t *err) {
    return fl_replay_sample_updating(c, batch_size, beta, timeout_ms, NULL, out, err);
}

/* Checks updates to send along with a Sample (see fl_replay_updates_t). */
static fl_status check_updates(const fl_replay_updates_t *upd, fl_err_t *err) {
    if (!upd || upd->n == 0) return FL_OK;
    if (!upd->keys || !upd->priorities)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay sample: update %s is NULL for %zu items",
                          !upd->keys ? "keys" : "priorities", upd->n);
    return fl_wire_check_priorities("update priorities", upd->n, upd->priorities, err);
}

fl_status fl_replay_sample_updating(fl_replay_client_t *c, size_t batch_size, double beta, int64_t timeout_ms,
                                    fl_replay_updates_t *upd, fl_replay_batch_t *out, fl_err_t *err) {
    if (upd) upd->applied = 0;
    FL_TRY(check_updates(upd, err));
    if (batch_size == 0 || batch_size > out->capacity || batch_size > UINT32_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay sample: batch_size %zu, expected 1 .. %zu (the batch's capacity)", batch_size,
                          out->capacity);
    fl__sample_meta_t meta;
    memset(&meta, 0, sizeof meta);
    fl_status st = fl__replay_sample_rows(c, batch_size, beta, timeout_ms, 0, upd, out, 0, &meta, err);
    if (upd) upd->applied = meta.updates_applied;
    if (st != FL_OK) return st;
    out->count = meta.count;
    out->table_size = meta.table_size;
    out->total_priority = meta.total;
    out->min_priority = meta.min_q;
    return FL_OK;
}

fl_status fl_replay_update_priorities(fl_replay_client_t *c, size_t n, const uint64_t *keys, const float *priorities,
                                      uint64_t *applied, fl_err_t *err) {
    if (applied) *applied = 0;
    if (n == 0) return FL_OK;
    if (!keys || !priorities)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay update_priorities: %s is NULL for %zu items",
                          !keys ? "keys" : "priorities", n);
    Fleet__UpdatePrioritiesRequest req = FLEET__UPDATE_PRIORITIES_REQUEST__INIT;
    req.n_keys = n;
    req.keys = (uint64_t *)keys;
    req.n_priorities = n;
    req.priorities = (float *)priorities;
    ProtobufCMessage *m = NULL;
    FL_TRY(fl_rpc_unary_pb(c->ch, fl_method_path(FL_METHOD_REPLAY_UPDATE_PRIORITIES), &req.base,
                           &fleet__update_priorities_response__descriptor, &m, c->timeout_ms, FL_RPC_WAIT_FOR_READY,
                           err));
    Fleet__UpdatePrioritiesResponse *resp = (Fleet__UpdatePrioritiesResponse *)m;
    if (applied) *applied = resp->applied;
    fleet__update_priorities_response__free_unpacked(resp, NULL);
    return FL_OK;
}

fl_status fl_replay_info(fl_replay_client_t *c, int64_t timeout_ms, fl_replay_info_t *out, fl_err_t *err) {
    Fleet__ReplayInfoRequest req = FLEET__REPLAY_INFO_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    FL_TRY(fl_rpc_unary_pb(c->ch, fl_method_path(FL_METHOD_REPLAY_INFO), &req.base, &fleet__replay_info__descriptor, &m,
                           timeout_ms > 0 ? timeout_ms : c->timeout_ms, FL_RPC_WAIT_FOR_READY, err));
    Fleet__ReplayInfo *r = (Fleet__ReplayInfo *)m;
    memset(out, 0, sizeof *out);
    out->shard_id = r->shard_id;
    out->size = r->size;
    out->capacity = r->capacity;
    out->inserted = r->inserted;
    out->sampled = r->sampled;
    out->insert_batches = r->insert_batches;
    out->updates_applied = r->updates_applied;
    out->updates_stale = r->updates_stale;
    out->sample_calls = r->sample_calls;
    out->rejected = r->rejected;
    out->samples_per_insert = r->samples_per_insert;
    out->insert_blocked_s = r->insert_blocked_s;
    out->sample_blocked_s = r->sample_blocked_s;
    out->inserts_waiting = r->inserts_waiting;
    out->samples_waiting = r->samples_waiting;
    out->sampling_mass = r->sampling_mass;
    out->min_priority = r->min_priority;
    out->storage_bytes = r->storage_bytes;
    out->frames = r->frames;
    out->rss_bytes = r->rss_bytes;
    out->private_bytes = r->private_bytes;
    out->cpu_s = r->cpu_s;
    out->total_priority = r->total_priority;
    out->max_priority = r->max_priority;
    out->uptime_s = r->uptime_s;
    fleet__replay_info__free_unpacked(r, NULL);
    return FL_OK;
}

fl_status fl_replay_round(fl_replay_client_t *c, uint32_t participant, uint64_t round, uint64_t through,
                          const fl_obs_spec_t *obs, const fl_wire_batch_t *batch, uint32_t wait_ms,
                          fl_replay_round_answer_t *out, fl_err_t *err) {
    Fleet__RoundRequest req = FLEET__ROUND_REQUEST__INIT;
    req.participant = participant;
    req.round = round;
    req.through = through;
    req.wait_ms = wait_ms;
    fl_wire_batch_msg_t bm;
    if (batch && batch->count > 0) {
        fl_wire_encode_batch(&bm, obs, batch);
        req.batch = &bm.batch;
    }
    ProtobufCMessage *m = NULL;
    FL_TRY(fl_rpc_unary_pb(c->ch, fl_method_path(FL_METHOD_REPLAY_ROUND), &req.base, &fleet__round_response__descriptor,
                           &m, (int64_t)wait_ms + c->timeout_ms, FL_RPC_WAIT_FOR_READY, err));
    Fleet__RoundResponse *r = (Fleet__RoundResponse *)m;
    if (out) *out = (fl_replay_round_answer_t){r->committed_round, r->table_size, r->first_full_round};
    fleet__round_response__free_unpacked(r, NULL);
    return FL_OK;
}
