/* server: the fleet.Replay service of one shard (see server.h): Sample, UpdatePriorities,
 * Info, checkpoints and the service's lifetime. Insert and the rate limiter's waits are
 * in replay/server_insert.c, the stream records in replay/server_stream.c, how the table
 * comes to be at create (empty, restored, or recovered from the write-ahead log) and the
 * log's rotation at a checkpoint in replay/server_recovery.c, the deterministic rounds
 * in replay/server_round.c; what they share is replay/server_internal.h.
 *
 * State beyond the table: a hash map stream_id -> per-stream record (last applied
 * sequence, the writer's key and the first keys of its recent batches), each record with
 * its own mutex held across "check key and sequence, insert, record sequence" so that two
 * calls of the same stream can never both apply one batch. A record counts the calls
 * bound to it (under the map's mutex); one with none for replay.stream_idle_s is freed
 * when the map needs room (at most replay.max_streams records). A mutex + condition
 * variable on which Sample
 * waits for the table to fill, signalled after every applied insert; and atomic
 * counters for what the table does not count itself. Lock order: a stream record, then
 * the table (inside fl_table_*), released before the service mutex is taken.
 *
 * Write-ahead log (replay.wal, replay/wal.h): the insert mutex wal_mu is held across
 * "append the InsertRequest to the log, insert into the table, record the sequence"
 * (inside a stream record's lock), so the log's order is the table's insertion order and
 * replaying it through the same fl__replay_apply_insert gives the same keys. With the log on, stream
 * records are only changed under wal_mu, so a checkpoint reads them under wal_mu alone.
 * Lock order: a stream record, wal_mu, the streams map, the table. */
#include "replay/server.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/methods.h"
#include "common/procmem.h"
#include "common/rng.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "replay/ratelimit.h"
#include "replay/selector.h"
#include "replay/server_internal.h"
#include "replay/wal.h"

/* Reserve for everything but the observations in a sample response. */
#define SAMPLE_MSG_SLACK (1u << 20)

/* ------------------------------------------------------------- Sample ---- */

/* The waiting-place entry of client `peer` (s->mu held): its own, else a free one (one
 * is free whenever fewer than FL_REPLAY_MAX_SAMPLE_WAITERS calls wait). */
static fl__sample_waiter_t *waiter_entry(fl_replay_service_t *s, const char *peer) {
    fl__sample_waiter_t *free_one = NULL;
    for (int i = 0; i < FL_REPLAY_MAX_SAMPLE_WAITERS; i++) {
        fl__sample_waiter_t *w = &s->waiting[i];
        if (w->n > 0 && strncmp(w->peer, peer, sizeof w->peer - 1) == 0) return w;
        if (w->n == 0 && !free_one) free_one = w;
    }
    if (free_one) snprintf(free_one->peer, sizeof free_one->peer, "%s", peer);
    return free_one;
}

/* Waits (up to timeout_ms) until B items may be sampled: the table holds min_size items
 * and the rate limiter allows it. On success the B samples are counted by the limiter
 * (the caller then draws them). peer: the calling client, which may have at most
 * FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT calls waiting. */
static fl_status wait_for_data(fl_replay_service_t *s, size_t B, uint32_t timeout_ms, const char *peer,
                               fl_rpc_reply_t *reply) {
    pthread_mutex_lock(&s->mu);
    uint64_t size = fl__replay_table_size(s);
    if (fl_ratelimit_can_sample(&s->rl, B, size)) goto allowed;
    fl__sample_waiter_t *mine =
        timeout_ms == 0 || s->waiters >= FL_REPLAY_MAX_SAMPLE_WAITERS ? NULL : waiter_entry(s, peer);
    if (!mine || mine->n >= FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT) {
        char why[160] = "";
        if (mine)
            snprintf(why, sizeof why,
                     "; not waiting: this client already has %d Sample calls waiting (at most %d per client)", mine->n,
                     FL_REPLAY_MAX_SAMPLE_WAITERS_PER_CLIENT);
        else if (timeout_ms)
            snprintf(why, sizeof why, "; not waiting: %d Sample calls already wait (at most %d at once)", s->waiters,
                     FL_REPLAY_MAX_SAMPLE_WAITERS);
        pthread_mutex_unlock(&s->mu);
        if (size < s->min_size)
            return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                      "replay holds %" PRIu64 " of the %" PRIu64 " transitions needed to sample%s",
                                      size, s->min_size, why);
        return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                  "rate limited: %g samples per insert allows no more samples until actors insert "
                                  "more%s",
                                  s->rl.spi, why);
    }
    mine->n++;
    s->waiters++;
    double t0 = fl_clock_sec();
    struct timespec until;
    fl__replay_deadline_in(&until, timeout_ms / 1000.0);
    int timed_out = 0;
    while (!s->stopping && !fl_ratelimit_can_sample(&s->rl, B, size = fl__replay_table_size(s))) {
        if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT) {
            size = fl__replay_table_size(s);
            timed_out = !fl_ratelimit_can_sample(&s->rl, B, size);
            break;
        }
    }
    s->waiters--;
    mine->n--;
    s->sample_blocked_s += fl_clock_sec() - t0;
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return fl_rpc_reply_error(reply, FL_UNAVAILABLE, "replay shard %d is shutting down", s->shard);
    }
    if (timed_out) {
        pthread_mutex_unlock(&s->mu);
        if (size < s->min_size)
            return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                      "replay holds %" PRIu64 " of the %" PRIu64
                                      " transitions needed to sample (waited %" PRIu32 " ms)",
                                      size, s->min_size, timeout_ms);
        return fl_rpc_reply_error(reply, FL_FAILED_PRECONDITION,
                                  "rate limited: waited %" PRIu32 " ms for actors to insert (%g samples per insert)",
                                  timeout_ms, s->rl.spi);
    }
allowed:
    fl_ratelimit_sampled(&s->rl, B);
    /* held inserts wake when the first of them may go */
    if (s->insert_head && fl__replay_may_insert(s, s->insert_head->n)) pthread_cond_broadcast(&s->insert_cv);
    pthread_mutex_unlock(&s->mu);
    return FL_OK;
}

/* The table's smallest positive sampling priority q_min when a batch was drawn, from the
 * batch itself: w_j = (q_min / q_j)^beta and q_j = P(j) * total, so
 * q_min = P(j) * total * w_j^(1/beta). The item with the largest weight is used (the
 * one least affected by float rounding, never clamped to FLT_MIN unless all are). The
 * relative error, ~1e-7 / beta, shrinks back by beta when a client raises a ratio of
 * such minima to beta. total is read right after drawing: exact unless an insert or
 * update landed in between. 0 when beta is 0 (all weights are 1 and carry nothing). */
static double min_priority_of(size_t B, double beta, const double *probs, const float *weights, double total) {
    if (!(beta > 0.0) || B == 0) return 0.0;
    size_t jm = 0;
    for (size_t j = 1; j < B; j++)
        if (weights[j] > weights[jm]) jm = j;
    double q = probs[jm] * total * pow((double)weights[jm], 1.0 / beta);
    return isfinite(q) && q > 0.0 ? q : 0.0;
}

/* Checks and applies priority updates (keys and priorities of one request, named by
 * field): equal lengths, every priority finite, >= 0 and <= replay.max_priority, else FL_INVALID_ARGUMENT in e and
 * nothing applied. *applied receives the updates applied (the rest were stale). Shared by
 * UpdatePriorities and the updates that ride on a Sample request. */
static fl_status apply_updates(fl_replay_service_t *s, const char *field, size_t n_keys, const uint64_t *keys,
                               size_t n_prio, const float *prio, size_t *applied, fl_err_t *e) {
    *applied = 0;
    if (n_prio != n_keys)
        return fl_err_set(e, FL_INVALID_ARGUMENT, "%s: got %zu values, expected %zu (one per key)", field, n_prio,
                          n_keys);
    FL_TRY(fl_wire_check_priorities_max(field, n_prio, prio, s->sig.max_priority, e));
    return fl_table_update_priorities(s->table, n_keys, keys, prio, applied, e);
}

static fl_status sample_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    Fleet__SampleRequest *req = fleet__sample_request__unpack(NULL, len, msg);
    if (!req)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "SampleRequest: %zu bytes that do not parse as a fleet.SampleRequest", len);
    size_t B = req->batch_size;
    double beta = req->beta;
    uint32_t timeout_ms = req->timeout_ms;
    /* Piggybacked priority updates go in first, whatever happens to the sample. */
    size_t upd_applied = 0, upd_n = req->n_update_keys;
    if (req->n_update_keys || req->n_update_priorities) {
        fl_err_t ue;
        fl_err_init(&ue);
        fl_status ust = apply_updates(s, "update_priorities", req->n_update_keys, req->update_keys,
                                      req->n_update_priorities, req->update_priorities, &upd_applied, &ue);
        if (ust != FL_OK) {
            fleet__sample_request__free_unpacked(req, NULL);
            return fl_rpc_reply_error(reply, ust, "%s", ue.msg);
        }
    }
    fleet__sample_request__free_unpacked(req, NULL);

    size_t row = 2 * s->obs_bytes + sizeof(uint64_t) + sizeof(float) * 4 + sizeof(double) + sizeof(int32_t);
    size_t max_b = (FL_RPC_DEFAULT_MAX_MESSAGE - SAMPLE_MSG_SLACK) / row;
    if (max_b > FL_REPLAY_MAX_SAMPLE) max_b = FL_REPLAY_MAX_SAMPLE;
    if (B == 0) return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "batch_size: got 0, expected >= 1");
    if (B > max_b)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "batch_size: got %zu, expected at most %zu (observations of %zu bytes)", B, max_b,
                                  s->obs_bytes);
    if (!(beta >= 0.0 && beta <= 1.0))
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "beta: got %g, expected a value in [0, 1]", beta);
    FL_TRY(wait_for_data(s, B, timeout_ms, fl_rpc_reply_peer(reply), reply));

    /* The observations are drawn straight into the reply (fl_wire_sample_reply_t); the
     * other columns into one block: 8-byte columns first, then 4-byte ones. */
    fl_wire_sample_reply_t out = {0};
    uint8_t *block = malloc(B * (2 * sizeof(uint64_t) + 4 * sizeof(float)));
    uint64_t *keys = (uint64_t *)block;
    double *probs = (double *)(keys + B);
    float *weights = (float *)(probs + B);
    int32_t *actions = (int32_t *)(weights + B);
    float *rewards = (float *)(actions + B);
    float *discounts = rewards + B;
    fl_status st;
    fl_err_t e;
    fl_err_init(&e);
    if (!block || fl_wire_sample_reply_begin(&out, &s->sig.obs, B, &e) != FL_OK) {
        st = fl_rpc_reply_error(reply, FL_RESOURCE_EXHAUSTED, "replay shard out of memory for a batch of %zu", B);
        goto done;
    }
    st = fl_table_sample(s->table, B, beta, keys, probs, weights, out.obs, actions, rewards, discounts, out.next_obs,
                         &e);
    if (st != FL_OK) {
        st = fl_rpc_reply_error(reply, st, "%s", e.msg);
        goto done;
    }
    fl_table_info_t ti;
    fl_table_info(s->table, &ti);

    Fleet__SampleResponse resp = FLEET__SAMPLE_RESPONSE__INIT;
    resp.n_keys = B;
    resp.keys = keys;
    resp.n_weights = B;
    resp.weights = weights;
    resp.n_probabilities = B;
    resp.probabilities = probs;
    resp.table_size = ti.size;
    resp.total_priority = ti.total_priority;
    int prioritized = fl_selector_ops(fl_table_config(s->table)->selector)->prioritized;
    resp.min_priority = prioritized ? min_priority_of(B, beta, probs, weights, ti.total_priority) : 0.0;
    resp.shard_id = (uint32_t)s->shard;
    resp.sampling_mass = prioritized ? ti.total_priority : (double)ti.size;
    resp.updates_applied = upd_applied;
    resp.updates_stale = upd_n - upd_applied;
    size_t reply_len = 0;
    st = fl_wire_sample_reply_finish(&out, actions, rewards, discounts, &resp, &reply_len, &e);
    if (st != FL_OK) {
        st = fl_rpc_reply_error(reply, st, "%s", e.msg);
        goto done;
    }
    st = fl_rpc_reply_ref(reply, out.buf, reply_len, free, out.buf); /* the reply owns the buffer now */
    out.buf = NULL;
    if (st == FL_OK) atomic_fetch_add(&s->sample_calls, 1);
done:
    free(out.buf);
    free(block);
    return st;
}

/* --------------------------------------------------- UpdatePriorities ---- */

static fl_status update_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    Fleet__UpdatePrioritiesRequest *req = fleet__update_priorities_request__unpack(NULL, len, msg);
    if (!req)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "UpdatePrioritiesRequest: %zu bytes that do not parse as a "
                                  "fleet.UpdatePrioritiesRequest",
                                  len);
    fl_err_t e;
    fl_err_init(&e);
    size_t applied = 0;
    fl_status st =
        apply_updates(s, "priorities", req->n_keys, req->keys, req->n_priorities, req->priorities, &applied, &e);
    if (st != FL_OK) {
        st = fl_rpc_reply_error(reply, st, "%s", e.msg);
        goto done;
    }
    Fleet__UpdatePrioritiesResponse resp = FLEET__UPDATE_PRIORITIES_RESPONSE__INIT;
    resp.applied = applied;
    resp.stale = req->n_keys - applied;
    st = fl_rpc_reply_pb(reply, &resp.base);
done:
    fleet__update_priorities_request__free_unpacked(req, NULL);
    return st;
}

/* --------------------------------------------------------- Info etc. ---- */

void fl_replay_service_info(fl_replay_service_t *s, fl_replay_info_t *out) {
    fl_table_info_t ti;
    fl_table_info(s->table, &ti);
    const fl_table_config_t *tc = fl_table_config(s->table);
    memset(out, 0, sizeof *out);
    out->shard_id = (uint32_t)s->shard;
    out->size = ti.size;
    out->capacity = ti.capacity;
    out->inserted = ti.inserted;
    out->sampled = ti.sampled;
    out->insert_batches = atomic_load(&s->insert_batches);
    out->updates_applied = ti.updates_applied;
    out->updates_stale = ti.updates_stale;
    out->sample_calls = atomic_load(&s->sample_calls);
    out->rejected = atomic_load(&s->rejected);
    out->total_priority = ti.total_priority;
    int prioritized = fl_selector_ops(tc->selector)->prioritized;
    out->sampling_mass = prioritized ? ti.total_priority : (double)ti.size;
    out->min_priority = prioritized ? ti.min_priority : 0.0;
    out->storage_bytes = ti.storage_bytes;
    out->frames = ti.frames;
    /* The wire reports priorities as stored for sampling: (p + eps)^alpha. */
    out->max_priority = ti.inserted ? pow(ti.max_priority + tc->priority_eps, tc->alpha) : 0.0;
    out->uptime_s = s->started ? fl_clock_sec() - s->t_start : 0.0;
    pthread_mutex_lock(&s->mu);
    out->samples_per_insert = s->rl.spi;
    out->insert_blocked_s = s->insert_blocked_s;
    out->sample_blocked_s = s->sample_blocked_s;
    out->inserts_waiting = (uint32_t)s->insert_waiters;
    out->samples_waiting = (uint32_t)s->waiters;
    pthread_mutex_unlock(&s->mu);
}

static fl_status info_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    Fleet__ReplayInfoRequest *req = fleet__replay_info_request__unpack(NULL, len, msg);
    if (!req)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "ReplayInfoRequest: %zu bytes that do not parse as a fleet.ReplayInfoRequest", len);
    fleet__replay_info_request__free_unpacked(req, NULL);
    fl_replay_info_t in;
    fl_replay_service_info(s, &in);
    int64_t shape[FL_OBS_MAX_RANK];
    for (int d = 0; d < s->sig.obs.rank; d++) shape[d] = s->sig.obs.shape[d];
    Fleet__ReplayInfo r = FLEET__REPLAY_INFO__INIT;
    r.shard_id = in.shard_id;
    r.size = in.size;
    r.capacity = in.capacity;
    r.inserted = in.inserted;
    r.sampled = in.sampled;
    r.insert_batches = in.insert_batches;
    r.updates_applied = in.updates_applied;
    r.updates_stale = in.updates_stale;
    r.total_priority = in.total_priority;
    r.max_priority = in.max_priority;
    r.obs_dtype = (Fleet__DType)s->sig.obs.dtype;
    r.n_obs_shape = (size_t)s->sig.obs.rank;
    r.obs_shape = shape;
    r.sample_calls = in.sample_calls;
    r.uptime_s = in.uptime_s;
    r.rejected = in.rejected;
    r.samples_per_insert = in.samples_per_insert;
    r.insert_blocked_s = in.insert_blocked_s;
    r.sample_blocked_s = in.sample_blocked_s;
    r.inserts_waiting = in.inserts_waiting;
    r.samples_waiting = in.samples_waiting;
    r.sampling_mass = in.sampling_mass;
    r.min_priority = in.min_priority;
    r.storage_bytes = in.storage_bytes;
    r.frames = in.frames;
    fl_procmem(&r.rss_bytes, &r.private_bytes);
    r.cpu_s = fl_proc_cpu_s();
    return fl_rpc_reply_pb(reply, &r.base);
}

fl_status fl_replay_service_checkpoint(fl_replay_service_t *s, const char *path, fl_table_save_info_t *info,
                                       char *path_out, size_t len, fl_err_t *err) {
    if (info) memset(info, 0, sizeof *info);
    if (!path || !*path) path = s->ckpt_default;
    if (!*path)
        return fl_err_set(err, FL_UNIMPLEMENTED,
                          "replay shard %d: checkpoints are not enabled (the request names no file and "
                          "replay.checkpoint_dir is empty)",
                          s->shard);
    if (path_out && len) snprintf(path_out, len, "%s", path);
    double t0 = fl_clock_sec();
    pthread_mutex_lock(&s->ckpt_mu);
    fl_table_save_info_t si;
    fl_status st = s->wal && strcmp(path, s->ckpt_default) == 0 ? fl__replay_wal_checkpoint(s, path, &si, err)
                                                                : fl_table_save(s->table, path, &si, err);
    pthread_mutex_unlock(&s->ckpt_mu);
    if (st != FL_OK) {
        fl_err_prefix(err, "replay shard %d", s->shard);
        return st;
    }
    FL_INFO("replay shard %d: checkpoint %s: %" PRIu64 " items, %" PRIu64 " bytes in %.3f s", s->shard, path, si.items,
            si.bytes, fl_clock_sec() - t0);
    if (info) *info = si;
    return FL_OK;
}

/* What is wrong with a Checkpoint call's file name, or NULL (see server.h,
 * fl_replay_service_checkpoint_path).
 * own: the shard's default file name. */
static const char *bad_name(const char *name, const char *own, char *why, size_t len) {
    size_t n = strlen(name);
    if (n > FL_REPLAY_CKPT_NAME_MAX) {
        snprintf(why, len, "%zu characters, expected at most %d", n, FL_REPLAY_CKPT_NAME_MAX);
        return why;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch == '/') {
            snprintf(why, len,
                     "'/' at character %zu: expected a file name without a folder (the file goes into "
                     "replay.checkpoint_dir)",
                     i);
            return why;
        }
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-')) {
            snprintf(why, len, "byte 0x%02x at character %zu: expected only A-Z, a-z, 0-9, '.', '_' and '-'", ch, i);
            return why;
        }
    }
    if (name[0] == '.') {
        snprintf(why, len, "\"%s\" starts with '.': expected a plain file name", name);
        return why;
    }
    if (strstr(name, "..")) {
        snprintf(why, len, "\"%s\" contains \"..\": expected a plain file name", name);
        return why;
    }
    if (n < 6 || strcmp(name + n - 5, ".ckpt") != 0) {
        snprintf(why, len, "\"%s\" does not end in \".ckpt\" (with a name before it)", name);
        return why;
    }
    if (strncmp(name, "shard-", 6) == 0 && strcmp(name, own) != 0) {
        snprintf(why, len,
                 "\"%s\": names starting with \"shard-\" belong to the shards' own files (checkpoints and logs); "
                 "expected %s or another name",
                 name, own);
        return why;
    }
    return NULL;
}

fl_status fl_replay_service_checkpoint_path(const fl_replay_service_t *s, const char *name, char *path, size_t len,
                                            fl_err_t *err) {
    if (!s->ckpt_default[0])
        return fl_err_set(err, FL_UNIMPLEMENTED,
                          "replay shard %d: checkpoints are not enabled (replay.checkpoint_dir is empty; a Checkpoint "
                          "call writes only inside that folder)",
                          s->shard);
    if (!name || !*name) {
        snprintf(path, len, "%s", s->ckpt_default);
        return FL_OK;
    }
    char own[32], why[FL_ERR_MSG_MAX / 2];
    snprintf(own, sizeof own, "shard-%d.ckpt", s->shard);
    if (bad_name(name, own, why, sizeof why)) return fl_err_set(err, FL_INVALID_ARGUMENT, "name: %s", why);
    int n = snprintf(path, len, "%s/%s", s->wal_dir, name);
    if (n < 0 || (size_t)n >= len)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "name: \"%s\" does not fit a path of %zu bytes", name, len);
    return FL_OK;
}

/* The named checkpoints (*.ckpt not starting with "shard-") in dir other than `name`. */
static int named_checkpoints(const char *dir, const char *name) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".ckpt") == 0 && strncmp(e->d_name, "shard-", 6) != 0 &&
            e->d_name[0] != '.' && strcmp(e->d_name, name) != 0)
            n++;
    }
    closedir(d);
    return n;
}

static fl_status checkpoint_handler(void *user, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    fl_replay_service_t *s = user;
    Fleet__CheckpointRequest *req = fleet__checkpoint_request__unpack(NULL, len, msg);
    if (!req)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT,
                                  "CheckpointRequest: %zu bytes that do not parse as a fleet.CheckpointRequest", len);
    fl_err_t e;
    fl_err_init(&e);
    fl_table_save_info_t si;
    char path[FL_REPLAY_DIR_MAX + FL_REPLAY_CKPT_NAME_MAX + 8];
    fl_status st = fl_replay_service_checkpoint_path(s, req->name, path, sizeof path, &e);
    /* A named file: counted and written under named_mu, so that two calls cannot both
     * take the last place. */
    const int named = st == FL_OK && req->name && req->name[0] && strncmp(req->name, "shard-", 6) != 0;
    if (named) {
        pthread_mutex_lock(&s->named_mu);
        int held = named_checkpoints(s->wal_dir, req->name);
        if (held >= FL_REPLAY_MAX_NAMED_CKPTS)
            st = fl_err_set(&e, FL_RESOURCE_EXHAUSTED,
                            "name: \"%s\" would be a new named checkpoint, and %s already holds %d (at most %d, each "
                            "a copy of the whole table): remove one, or write one of those names again",
                            req->name, s->wal_dir, held, FL_REPLAY_MAX_NAMED_CKPTS);
    }
    if (st == FL_OK) st = fl_replay_service_checkpoint(s, path, &si, NULL, 0, &e);
    if (named) pthread_mutex_unlock(&s->named_mu);
    if (st != FL_OK) {
        st = fl_rpc_reply_error(reply, st, "%s", e.msg);
        goto done;
    }
    Fleet__CheckpointResponse resp = FLEET__CHECKPOINT_RESPONSE__INIT;
    resp.path = path;
    resp.items = si.items;
    resp.bytes = si.bytes;
    st = fl_rpc_reply_pb(reply, &resp.base);
done:
    fleet__checkpoint_request__free_unpacked(req, NULL);
    return st;
}

/* Housekeeping until the service stops: writes the default checkpoint every ckpt_every
 * seconds (when set), and every FL_REPLAY_TRIM_EVERY_S gives the heap's free pages back
 * to the system when rows were inserted since the last time (which, in a full table,
 * evicts as many) or a checkpoint's copy was freed. Frame chunks live until evicted and
 * are freed in FIFO order among short-lived gRPC buffers: without the trims the free
 * space between them grew a full shard's resident memory by tens of MB though the
 * bytes in use stayed flat (`fleet replay` also keeps the process to one malloc arena). */
static void *housekeeping_loop(void *arg) {
    fl_replay_service_t *s = arg;
    const int checkpoints = s->ckpt_every > 0 && s->ckpt_default[0];
    uint64_t trimmed_at = 0; /* the table's inserted count at the last trim */
    pthread_mutex_lock(&s->mu);
    double now = fl_clock_sec();
    double next_ckpt = now + s->ckpt_every, next_trim = now + FL_REPLAY_TRIM_EVERY_S;
    while (!s->stopping) {
        now = fl_clock_sec();
        double next = checkpoints && next_ckpt < next_trim ? next_ckpt : next_trim;
        if (now < next) {
            struct timespec until;
            fl__replay_deadline_in(&until, next - now < 0.5 ? next - now : 0.5);
            pthread_cond_timedwait(&s->hk_cv, &s->mu, &until);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        int trim = 0;
        if (checkpoints && now >= next_ckpt) {
            fl_err_t e;
            fl_err_init(&e);
            if (fl_replay_service_checkpoint(s, NULL, NULL, NULL, 0, &e) != FL_OK)
                FL_WARN("periodic checkpoint failed: %s", e.msg);
            next_ckpt = fl_clock_sec() + s->ckpt_every;
            trim = 1;
        }
        if (now >= next_trim) {
            fl_table_info_t ti;
            fl_table_info(s->table, &ti);
            if (ti.inserted != trimmed_at) trim = 1;
            trimmed_at = ti.inserted;
            next_trim = fl_clock_sec() + FL_REPLAY_TRIM_EVERY_S;
        }
        if (trim) malloc_trim(0);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ----------------------------------------------------------- lifetime ---- */

void fl_replay_service_opts_init(fl_replay_service_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->shard = 0;
    o->shards = 1;
    o->obs.dtype = FL_DTYPE_INVALID;
    o->capacity = 1000000;
    o->alpha = 0.6;
    o->priority_eps = 1e-6;
    o->selector = FL_SELECTOR_PRIORITIZED;
    o->tree_rebuild_every = INT64_C(1) << 20;
    o->seed = 1;
    o->min_size_to_sample = 1000;
    o->samples_per_insert = 8;
    o->rate_error_buffer = 20000;
    o->actors = 2;
    o->max_abs_reward = 1e6;
    o->max_priority = 1e6;
    o->max_streams = 16384;
    o->stream_idle_s = 3600;
}

/* The options' own checks, before anything is built. */
static fl_status check_opts(const fl_replay_service_opts_t *o, fl_err_t *err) {
    const int shard = o->shard;
    const char *dir = o->checkpoint_dir ? o->checkpoint_dir : "";
    if (o->shards < 1 || o->shards > 256)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay.shards = %d: expected 1 .. 256", o->shards);
    if (o->round_participants < 0 || o->round_participants > FL_REPLAY_MAX_ROUND_PARTICIPANTS)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay shard %d: %" PRId64 " round participants, expected 0 .. %d",
                          shard, o->round_participants, FL_REPLAY_MAX_ROUND_PARTICIPANTS);
    if (o->round_participants > 0 && o->shards != 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "run.deterministic needs replay.shards = 1 (got %d): the rounds are one shard's", o->shards);
    if (shard < 0 || shard >= o->shards)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay shard %d: expected 0 .. %d (replay.shards = %d)", shard,
                          o->shards - 1, o->shards);
    if (o->capacity < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay.capacity = %" PRId64 ": expected >= 1", o->capacity);
    if (fl_obs_spec_bytes(&o->obs) == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay shard %d: invalid observation signature (dtype %d, rank %d)", shard,
                          (int)o->obs.dtype, o->obs.rank);
    if (o->num_actions < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay shard %d: num_actions %d, expected >= 0", shard,
                          o->num_actions);
    if (!(o->max_abs_reward > 0) || !(o->max_priority > 0) || !(o->stream_idle_s > 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay.max_abs_reward = %g, replay.max_priority = %g, replay.stream_idle_s = %g: expected "
                          "each > 0",
                          o->max_abs_reward, o->max_priority, o->stream_idle_s);
    if (o->max_streams < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay.max_streams = %" PRId64 ": expected >= 1", o->max_streams);
    if (strlen(dir) >= FL_REPLAY_DIR_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay.checkpoint_dir: %zu bytes, expected at most %d",
                          strlen(dir), FL_REPLAY_DIR_MAX - 1);
    if (o->checkpoint_every > 0 && !dir[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay.checkpoint_every = %g needs replay.checkpoint_dir (the folder to write to)",
                          o->checkpoint_every);
    if (o->wal && !dir[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay.wal needs replay.checkpoint_dir (the folder of the write-ahead log and the "
                          "checkpoints)");
    if (o->wal && o->restore_path && *o->restore_path)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay shard %d: restoring %s cannot be combined with replay.wal = 1: with the log the "
                          "shard recovers from %s/shard-%d.ckpt and its log segments by itself (copy the checkpoint "
                          "there instead)",
                          shard, o->restore_path, dir, shard);
    return FL_OK;
}

fl_status fl_replay_service_check_opts(const fl_replay_service_opts_t *opts, fl_err_t *err) {
    return check_opts(opts, err);
}

/* The shard's table: its share of the capacity, its id, a sampling seed derived from the
 * run's seed and the shard, and the options' signature and priorities. */
static fl_table_config_t shard_table_config(const fl_replay_service_opts_t *o) {
    uint64_t shards = (uint64_t)o->shards;
    fl_table_config_t tc;
    fl_table_config_init(&tc);
    tc.capacity = ((uint64_t)o->capacity + shards - 1) / shards;
    tc.obs = fl_obs_spec_make(o->obs.dtype, o->obs.rank, o->obs.shape);
    tc.alpha = o->alpha;
    tc.priority_eps = o->priority_eps;
    tc.selector = o->selector;
    tc.max_times_sampled = o->max_times_sampled;
    tc.rebuild_every = (uint64_t)o->tree_rebuild_every;
    tc.shard_id = o->shard;
    tc.frame_stack = o->frame_stack > 1 ? o->frame_stack : 1;
    tc.zstd_level = o->zstd_level;
    fl_rng_t rng;
    fl_rng_init_stream(&rng, o->seed, UINT64_C(0x7265706c61790000) + (uint64_t)o->shard);
    tc.seed = fl_rng_u64(&rng);
    return tc;
}

/* Everything of a new service but its table and its RPC server: the signature, locks,
 * counters, checkpoint and log settings. */
static void init_state(fl_replay_service_t *s, const fl_replay_service_opts_t *o) {
    const char *dir = o->checkpoint_dir ? o->checkpoint_dir : "";
    s->sig = (fl_wire_sig_t){fl_obs_spec_make(o->obs.dtype, o->obs.rank, o->obs.shape), o->num_actions,
                             o->max_abs_reward, o->max_priority};
    s->obs_bytes = fl_obs_spec_bytes(&o->obs);
    s->shard = o->shard;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_cond_init(&s->insert_cv, &ca);
    pthread_cond_init(&s->hk_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->streams_mu, NULL);
    s->max_streams = (size_t)o->max_streams;
    s->stream_idle_s = o->stream_idle_s;
    pthread_mutex_init(&s->ckpt_mu, NULL);
    pthread_mutex_init(&s->named_mu, NULL);
    pthread_mutex_init(&s->wal_mu, NULL);
    s->wal_lock_fd = -1;
    s->wal_fsync = o->wal_fsync;
    snprintf(s->wal_dir, sizeof s->wal_dir, "%s", dir);
    if (dir[0]) snprintf(s->ckpt_default, sizeof s->ckpt_default, "%s/shard-%d.ckpt", dir, o->shard);
    s->ckpt_every = o->checkpoint_every;
    s->ckpt_at_stop = o->checkpoint_at_stop && s->ckpt_default[0];
    atomic_init(&s->insert_batches, 0);
    atomic_init(&s->rejected, 0);
    atomic_init(&s->sample_calls, 0);
}

/* The shard's shares of the sampling threshold and of the rate limiter's error buffer,
 * and enough serving threads that every actor's stream may wait on the rate limiter
 * while samples, priority updates and Info are still served. */
static void init_limits(fl_replay_service_t *s, const fl_replay_service_opts_t *o, uint64_t capacity) {
    uint64_t shards = (uint64_t)o->shards;
    uint64_t need = o->min_size_to_sample > 0 ? (uint64_t)o->min_size_to_sample : 1;
    need = (need + shards - 1) / shards;
    s->min_size = need < capacity ? need : capacity;
    /* Deterministic rounds: the learner's fixed samples per round are the rate. */
    fl_ratelimit_init(&s->rl, o->round_participants > 0 ? 0.0 : o->samples_per_insert,
                      o->rate_error_buffer / (double)shards, s->min_size);
    const int64_t streams = o->round_participants > o->actors ? o->round_participants : o->actors;
    int want = (int)(streams / (int64_t)shards) + 1 + FL_REPLAY_MAX_SAMPLE_WAITERS + 3;
    s->threads = want < FL_REPLAY_SERVICE_THREADS ? FL_REPLAY_SERVICE_THREADS : want > 256 ? 256 : want;
    s->max_insert_waiters = s->threads - FL_REPLAY_MAX_SAMPLE_WAITERS - 2;
    s->n_insert_clients = s->max_insert_waiters + 2; /* at most one more place than that, and the newcomer */
    s->insert_clients = calloc((size_t)s->n_insert_clients, sizeof *s->insert_clients);
}

/* The RPC server, with the service's methods registered. */
static fl_status register_methods(fl_replay_service_t *s, fl_err_t *err) {
    fl_rpc_server_opts_t ro = {.threads = s->threads};
    fl_status st;
    FL_TRY(fl_rpc_server_create(&ro, &s->rpc, err));
    if ((st = fl_rpc_server_add_stream(s->rpc, fl_method_path(FL_METHOD_REPLAY_INSERT), &fl__replay_insert_handler,
                                       s)) != FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_SAMPLE), sample_handler, s)) != FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_UPDATE_PRIORITIES), update_handler, s)) !=
            FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_INFO), info_handler, s)) != FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_CHECKPOINT), checkpoint_handler, s)) !=
            FL_OK ||
        (st = fl_rpc_server_add_unary(s->rpc, fl_method_path(FL_METHOD_REPLAY_ROUND), fl__replay_round_handler, s)) !=
            FL_OK)
        return fl_err_set(err, st, "replay shard %d: cannot register its methods", s->shard);
    return FL_OK;
}

fl_status fl_replay_service_create(const fl_replay_service_opts_t *opts, fl_replay_service_t **out, fl_err_t *err) {
    *out = NULL;
    FL_TRY(check_opts(opts, err));
    fl_replay_service_t *s = calloc(1, sizeof *s);
    if (!s) return fl_err_set(err, FL_NO_MEMORY, "replay shard %d: out of memory", opts->shard);
    init_state(s, opts);
    fl_table_config_t tc = shard_table_config(opts);
    init_limits(s, opts, tc.capacity);
    if (!s->insert_clients) {
        fl_replay_service_destroy(s);
        return fl_err_set(err, FL_NO_MEMORY, "replay shard %d: out of memory", opts->shard);
    }
    fl_status st = fl__replay_rounds_init(s, opts->round_participants, err);
    if (st == FL_OK) st = fl__replay_open_table(s, &tc, opts->restore_path, opts->wal && !s->participants, err);
    if (st != FL_OK) {
        fl_err_prefix(err, "replay shard %d", opts->shard);
        goto fail;
    }
    if ((st = register_methods(s, err)) != FL_OK) goto fail;
    *out = s;
    return FL_OK;
fail:
    fl_replay_service_destroy(s);
    return st;
}

fl_status fl_replay_service_start(fl_replay_service_t *s, const char *listen_addr, char *bound_addr_out, size_t len,
                                  fl_err_t *err) {
    if (s->started) return fl_err_set(err, FL_FAILED_PRECONDITION, "replay shard %d: already started", s->shard);
    if (!listen_addr || !*listen_addr)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay shard %d: empty listen address", s->shard);
    int port = 0;
    FL_TRY(fl_rpc_server_bind(s->rpc, listen_addr, &port, err));
    FL_TRY(fl_rpc_server_start(s->rpc, err));
    s->started = 1;
    s->t_start = fl_clock_sec();
    if (pthread_create(&s->housekeeping, NULL, housekeeping_loop, s) == 0)
        s->housekeeping_started = 1;
    else
        FL_WARN(
            "replay shard %d: cannot start the housekeeping thread (periodic checkpoints, giving memory "
            "back)",
            s->shard);
    if (bound_addr_out && len) {
        const char *colon = strrchr(listen_addr, ':');
        if (strncmp(listen_addr, "unix:", 5) == 0 || !colon)
            snprintf(bound_addr_out, len, "%s", listen_addr);
        else
            snprintf(bound_addr_out, len, "%.*s:%d", (int)(colon - listen_addr), listen_addr, port);
    }
    return FL_OK;
}

void fl_replay_service_stop(fl_replay_service_t *s) {
    if (!s || s->stopped) return;
    s->stopped = 1;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_cond_broadcast(&s->insert_cv);
    pthread_cond_broadcast(&s->hk_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->housekeeping_started) {
        pthread_join(s->housekeeping, NULL);
        s->housekeeping_started = 0;
    }
    /* A server never started is torn down by fl_rpc_server_destroy alone. */
    if (s->started) fl_rpc_server_shutdown(s->rpc);
    /* No call runs any more: the table holds everything acknowledged. Only a shard that
     * served writes it: one whose recovery failed must not overwrite the checkpoint. */
    if (s->ckpt_at_stop && s->started) {
        fl_err_t e;
        fl_err_init(&e);
        if (fl_replay_service_checkpoint(s, NULL, NULL, NULL, 0, &e) != FL_OK)
            FL_WARN("replay shard %d: the last checkpoint failed: %s", s->shard, e.msg);
    }
}

void fl_replay_service_destroy(fl_replay_service_t *s) {
    if (!s) return;
    fl_replay_service_stop(s);
    fl_rpc_server_destroy(s->rpc);
    fl_wal_close(s->wal);
    if (s->wal_lock_fd >= 0) close(s->wal_lock_fd); /* releases the flock */
    fl_table_destroy(s->table);
    fl__replay_rounds_free(s);
    for (size_t i = 0; i < s->streams_cap; i++) {
        if (!s->streams[i]) continue;
        pthread_mutex_destroy(&s->streams[i]->mu);
        free(s->streams[i]);
    }
    free(s->streams);
    free(s->insert_clients);
    pthread_mutex_destroy(&s->streams_mu);
    pthread_mutex_destroy(&s->ckpt_mu);
    pthread_mutex_destroy(&s->named_mu);
    pthread_mutex_destroy(&s->wal_mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->insert_cv);
    pthread_cond_destroy(&s->hk_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

fl_table_t *fl_replay_service_table(fl_replay_service_t *s) {
    return s->table;
}

int fl_replay_service_sample_waiters(fl_replay_service_t *s) {
    pthread_mutex_lock(&s->mu);
    int w = s->waiters;
    pthread_mutex_unlock(&s->mu);
    return w;
}

uint64_t fl_replay_service_min_size(const fl_replay_service_t *s) {
    return s->min_size;
}
