/* paramserver client: publish, fetch and push the flat parameter vector over gRPC, to
 * one parameter-server shard or to P of them.
 *
 * Shards: the client is given one address or a comma-separated list, in shard order
 * ("h:1,h:2,h:3": P = 3). Shard s holds slice s of the vector as cut by
 * fl_param_shard_range (paramserver/shard.h); every call below takes the whole vector
 * (n elements) and cuts it. With P > 1 the per-shard calls run in parallel on a small
 * pool of P - 1 threads owned by the client (plus the calling thread); every shard is
 * attempted, and an error names the first failing shard (index and address) and how
 * many failed.
 *
 * Versions: the client keeps a record of the version of each shard's slice that its
 * caller holds, i.e. what the last successful fetch delivered (publishes do not change
 * it). A fetch asks shard s for values newer than its record; the version it reports
 * in *version is the MINIMUM over shards of the records, so "version v" means "every
 * slice is at version v or newer". Passing *version == 0 resets the records (fetch
 * everything). With one shard the client behaves exactly as a single-server client:
 * the shard is asked for values newer than *version itself, and *version is left alone
 * when nothing was newer (in apex mode all shards carry the publisher's version, so the
 * minimum is that version). Pushes name, per shard, the recorded version as the version
 * their gradients were computed from, so a pusher fetches before computing gradients.
 *
 * Failure: calls return the gRPC status mapped to fl_status with the server's message,
 * prefixed with the shard when P > 1. A failed fetch writes nothing to dst and leaves
 * *version and the records alone (all shards or nothing). A failed publish or push may
 * have reached some shards: the error says which failed; publishing the same version
 * again is refused by the shards that have it (FAILED_PRECONDITION), so retry with a
 * newer one.
 *
 * Thread-safety: a client may be shared by threads. The version records are per client:
 * threads that fetch into different buffers through one client should pass
 * *version == 0 or use one client each. Pushes through one quantizing client are
 * serialized (they share the error-feedback residual). */
#ifndef FL_PARAMSERVER_CLIENT_H
#define FL_PARAMSERVER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "paramserver/shard.h"
#include "paramserver/staleness.h"

typedef struct fl_param_client fl_param_client_t;

typedef struct fl_param_client_opts {
    int bf16;         /* fetch values as DTYPE_BFLOAT16 (half the bytes) and widen them to float */
    int quantize;     /* pushes: 0 = float32, 1 = 1-bit with error feedback (paramserver/quantize.h) */
    uint32_t learner; /* pushes: this pusher's learner index, in [0, learner.count) */
} fl_param_client_opts_t;

/* addr: "host:port", "unix:/path", or a comma-separated list of them in shard order
 * (at most 256). Default options (float32 fetches and pushes, learner 0). */
fl_status fl_param_client_create(const char *addr, fl_param_client_t **out, fl_err_t *err);
/* The same with options (opts may be NULL: defaults). */
fl_status fl_param_client_create_opts(const char *addrs, const fl_param_client_opts_t *opts, fl_param_client_t **out,
                                      fl_err_t *err);
void fl_param_client_destroy(fl_param_client_t *c); /* NULL is a no-op */

/* P, the number of shard addresses. */
int fl_param_num_shards(const fl_param_client_t *c);

/* Publishes params[0..n) as `version` (must exceed every shard's held version): shard s
 * gets its slice. */
fl_status fl_param_publish(fl_param_client_t *c, uint64_t version, const float *params, size_t n, int64_t timeout_ms,
                           fl_err_t *err);
/* Fetches every slice newer than the caller's (see Versions above) into dst (n
 * elements; a size mismatch with the servers' vector is FL_INVALID_ARGUMENT naming both
 * sizes). Updated slices are written to dst; *updated = 1 if any slice changed (else 0,
 * dst untouched); *version = the minimum version over shards. */
fl_status fl_param_fetch(fl_param_client_t *c, uint64_t *version, float *dst, size_t n, int *updated,
                         int64_t timeout_ms, fl_err_t *err);

typedef struct fl_param_push_result {
    int applied;            /* shards that applied their slice */
    int dropped;            /* shards that dropped it as too stale */
    int waited;             /* shards that held the reply for slower learners (stale_policy = wait) */
    int wait_timed_out;     /* ... and gave up waiting (paramserver.wait_timeout_s) */
    uint64_t max_staleness; /* largest staleness over the shards that answered */
    uint64_t bytes_sent;    /* serialized request bytes, all shards */
} fl_param_push_result_t;

/* Gorila: sends shard s the gradient slice s of grads (n), from this client's learner,
 * based on the shard's recorded version (the last fetch). Gradients must be finite
 * (FL_INVALID_ARGUMENT naming the index, nothing sent). With opts.quantize the slices
 * go as 1-bit codes with error feedback; when a shard's call fails, the whole of that
 * slice's value stays in the residual (nothing is lost); a dropped slice is not
 * resent. res (may be NULL) is filled for the shards that answered. A push whose reply
 * a shard holds back (stale_policy = wait) ends FL_CANCELLED within ~0.1 s once the
 * process is asked to stop (common/stop.h): a stopping learner does not wait out
 * paramserver.wait_timeout_s for a learner that has already gone. */
fl_status fl_param_push(fl_param_client_t *c, const float *grads, size_t n, fl_param_push_result_t *res,
                        int64_t timeout_ms, fl_err_t *err);

typedef struct fl_param_info {
    uint32_t shard_id;
    uint64_t version, offset, size, total, publishes, fetches, fetches_with_params;
    double uptime_s;
    uint32_t num_shards; /* the server's paramserver.shards */
    int gorila;          /* the server's learner.mode is gorila */
    uint64_t pushes_applied, pushes_dropped, waits, wait_timeouts;
    uint64_t staleness_hist[FL_PARAM_STALENESS_BUCKETS]; /* pushes by staleness (paramserver/staleness.h) */
    uint64_t fetches_bf16, push_bytes;
    uint64_t rss_bytes, private_bytes; /* the shard process's resident and private memory */
    double cpu_s;                      /* its CPU seconds so far */
} fl_param_info_t;

/* Info of shard 0 (with one shard, of the server). */
fl_status fl_param_info(fl_param_client_t *c, int64_t timeout_ms, fl_param_info_t *out, fl_err_t *err);
/* Info of shard s in [0, P). */
fl_status fl_param_info_shard(fl_param_client_t *c, int s, int64_t timeout_ms, fl_param_info_t *out, fl_err_t *err);

/* Bytes this client has sent (serialized requests) and received (serialized responses)
 * over all calls and shards. Either pointer may be NULL. */
void fl_param_client_bytes(const fl_param_client_t *c, uint64_t *sent, uint64_t *received);

#endif
