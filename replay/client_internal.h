/* client_internal: what replay/client.c shares with the writer (replay/writer.c) and the
 * sharded client (replay/sharded.c). Not for use outside replay/. */
#ifndef FL_REPLAY_CLIENT_INTERNAL_H
#define FL_REPLAY_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/rpc.h"
#include "common/status.h"
#include "replay/client.h"

struct fl_replay_client {
    fl_rpc_channel_t *ch;
    int64_t timeout_ms;
};

/* What a Sample response said besides its rows. */
typedef struct fl__sample_meta {
    size_t count;
    uint64_t table_size;
    double total, min_q, mass;
    uint32_t shard_id;
    uint64_t updates_applied; /* of the updates sent along */
} fl__sample_meta_t;

/* One Sample call whose rows land in out at rows [offset, offset + count). probe: the
 * shard answers at once (no wait for data or the rate limiter) within timeout_ms. upd
 * (may be NULL) rides along. */
fl_status fl__replay_sample_rows(fl_replay_client_t *c, size_t batch_size, double beta, int64_t timeout_ms, int probe,
                                 const fl_replay_updates_t *upd, fl_replay_batch_t *out, size_t offset,
                                 fl__sample_meta_t *meta, fl_err_t *err);

#endif
