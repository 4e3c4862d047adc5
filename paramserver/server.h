/* server: the fleet.ParamServer gRPC service of one parameter-server shard. Its threads,
 * locks and stop are in docs/design.md, "A parameter-server shard"; the apex and gorila
 * semantics in "Two update modes" and paramserver/store.h; the limits on what a client
 * may do, with the messages it gets, in docs/security.md, "Parameter-server shards"; the
 * gorila checkpoint's format in docs/design.md, "The parameter-server checkpoint".
 * Options: fl_paramserver_service_opts_t below; launcher/options.h (fl_options_paramserver)
 * maps a run's configuration onto them.
 *
 * Shard s of P (paramserver.shards) owns slice s of the flat vector as cut by
 * fl_param_shard_range (paramserver/shard.h); with P == 1 the whole vector. It serves
 * the store (paramserver/store.h) over common/rpc:
 *   Publish        validates the request (float32 tensor of shape (n,), 4n data bytes,
 *                  finite values, this shard's slice, a version above the held one and at
 *                  most paramserver.max_version_step above it, the length fixed by the
 *                  first publish) and makes it the held version (gorila: only the first
 *                  publish, which sets the initial parameters); answers the version now
 *                  held. A version not above the held one is FAILED_PRECONDITION, one too
 *                  far above it INVALID_ARGUMENT, each naming the held version.
 *   Fetch          if_newer_than >= held version (or nothing published): version only,
 *                  has_params = false. Otherwise the held version's parameters, as dtype
 *                  float32 (or unset) or bfloat16 (rounded to nearest even, values beyond
 *                  the largest bfloat16 sent as the largest finite one of their sign);
 *                  another dtype is INVALID_ARGUMENT naming the accepted ones.
 *   PushGradients  gorila only (apex: FAILED_PRECONDITION explaining learner.mode):
 *                  float32 `grads` or 1-bit `quantized` gradients (paramserver/quantize.h)
 *                  for this shard's slice from learner `learner` (< learner.count),
 *                  computed from based_on_version. One optimizer step (learner.optimizer,
 *                  learner.lr, ...) per applied push; staleness bound and policy from
 *                  paramserver.max_staleness / stale_policy / staleness_lr /
 *                  wait_timeout_s. Non-finite gradients, or finite ones whose step
 *                  would make a parameter (or the optimizer's state) non-finite:
 *                  INVALID_ARGUMENT naming the index, nothing applied.
 *   Info           the shard's slice and counters: publishes, fetches (bf16 ones too),
 *                  pushes applied and dropped, waits and wait timeouts, and the staleness
 *                  histogram (0, 1, 2, 3-4, 5-8, 9-16, 17-32, 33+).
 * Publish and PushGradients are learner-only (fl_rpc_server_learner_only): with TLS
 * (run.tls_dir) they need the learner token, not just the run token (docs/security.md).
 * Malformed requests are answered INVALID_ARGUMENT naming the field; the service keeps
 * serving.
 *
 * A request of FL_PARAMSERVER_LARGE_MESSAGE bytes or more is handled only while it holds
 * one of paramserver.max_large_messages slots (under the wait policy at least
 * learner.count); one that finds none free within FL_PARAMSERVER_LARGE_WAIT_S is answered
 * RESOURCE_EXHAUSTED naming the limit (clients retry it).
 *
 * Lifecycle: create (registers the methods), start (binds and serves), stop (releases
 * held push replies, refuses new calls, drains the ones in flight), destroy. Thread-safe
 * after start; create, start, stop and destroy belong to one owner thread. */
#ifndef FL_PARAMSERVER_SERVER_H
#define FL_PARAMSERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/optim.h"
#include "paramserver/store.h"

typedef struct fl_paramserver_service fl_paramserver_service_t;

/* A request this large needs a large-message slot (see the file comment). */
#define FL_PARAMSERVER_LARGE_MESSAGE (16u << 20)
/* How long a large request waits for a slot. */
#define FL_PARAMSERVER_LARGE_WAIT_S 2.0

/* learner.mode: who owns the optimizer (paramserver/store.h). */
typedef enum fl_paramserver_mode {
    FL_PARAMSERVER_APEX = 0,   /* learners apply their optimizer and publish parameters */
    FL_PARAMSERVER_GORILA = 1, /* learners push gradients; the shards apply the optimizer */
} fl_paramserver_mode;

/* paramserver.stale_policy (gorila): what happens to pushes beyond max_staleness. */
typedef enum fl_paramserver_stale_policy {
    FL_PARAMSERVER_STALE_DROP = 0, /* they are dropped */
    FL_PARAMSERVER_STALE_WAIT = 1, /* the fast learner's reply waits for the slow ones */
} fl_paramserver_stale_policy;

/* What a shard service reads (launcher/options.c fills it from a config). The gorila fields
 * are ignored in apex mode. */
typedef struct fl_paramserver_service_opts {
    fl_paramserver_mode mode;                 /* learner.mode */
    int shards;                               /* paramserver.shards: the vector is cut into this many slices */
    fl_optim_config_t optim;                  /* gorila: learner.optimizer, learner.lr and its learner.* keys */
    int learners;                             /* gorila: learner.count */
    uint64_t max_staleness;                   /* gorila: paramserver.max_staleness (0 = no bound) */
    fl_paramserver_stale_policy stale_policy; /* gorila: paramserver.stale_policy */
    int staleness_lr;                         /* gorila: paramserver.staleness_lr */
    double wait_timeout_s;                    /* gorila, wait policy: paramserver.wait_timeout_s */
    uint64_t max_version_step;                /* paramserver.max_version_step (0 = no bound) */
    int max_large_messages;                   /* paramserver.max_large_messages, >= 1 */
    int threads;                              /* handler threads; 0 = max(2, min(8, cores)). Under the wait policy at
                                               * least learners + 2 either way (up to learners - 1 push replies may be
                                               * held at once). */
    const char *checkpoint_dir;               /* gorila: run.checkpoint_dir ("" or NULL = none), where the process
                                                 (`fleet paramserver`) writes paramserver-<shard>.safetensors */
    double checkpoint_every_s;                /* gorila: run.checkpoint_every (0 = only when it stops) */
} fl_paramserver_service_opts_t;

/* The defaults of the keys above: apex, one shard, Adam (lr 0.003, betas 0.9 and 0.999,
 * eps 1e-8), one learner, no staleness bound, drop, no staleness-scaled lr,
 * a 30 s wait timeout, max_version_step 2^32 (FL_PARAM_DEFAULT_MAX_VERSION_STEP),
 * max_large_messages 2, threads 0. */
void fl_paramserver_service_opts_init(fl_paramserver_service_opts_t *o);

/* opts may be NULL (the defaults of fl_paramserver_service_opts_init). shard must lie in
 * [0, opts->shards): FL_INVALID_ARGUMENT otherwise (the message names
 * paramserver.shards); so is max_large_messages < 1. */
fl_status fl_paramserver_service_create(const fl_paramserver_service_opts_t *opts, int shard,
                                        fl_paramserver_service_t **out, fl_err_t *err);
/* Binds listen_addr ("host:port", port 0 = the OS chooses, or "unix:/path") and starts
 * serving. bound_addr_out (len bytes, may be NULL) gets the address clients should dial,
 * with the chosen port filled in ("127.0.0.1:41234", "unix:/path"). */
fl_status fl_paramserver_service_start(fl_paramserver_service_t *svc, const char *listen_addr, char *bound_addr_out,
                                       size_t len, fl_err_t *err);
/* Stops serving (idempotent; a no-op before start). */
void fl_paramserver_service_stop(fl_paramserver_service_t *svc);
/* Stops if needed and frees. NULL is a no-op. */
void fl_paramserver_service_destroy(fl_paramserver_service_t *svc);

/* The held version and counters, as Info reports them. */
void fl_paramserver_service_info(fl_paramserver_service_t *svc, fl_param_store_info_t *out);

/* Gorila checkpoints (paramserver/checkpoint.h). Checkpoint writes the shard's state to
 * path (*saved = 0 while nothing is published) and may run while the service serves;
 * restore loads one into a service that holds nothing yet (before start), refusing a
 * file that does not match its configuration; *version (may be NULL) gets the restored
 * version. */
fl_status fl_paramserver_service_checkpoint(fl_paramserver_service_t *svc, const char *path, int *saved, fl_err_t *err);
fl_status fl_paramserver_service_restore(fl_paramserver_service_t *svc, const char *path, uint64_t *version,
                                         fl_err_t *err);

/* ---- internal: the handlers without gRPC (tests/fuzz/fuzz_paramserver.c) ----
 *
 * A service made by fl__paramserver_service_create_local has the store and the handlers
 * but no gRPC server (it cannot be started; destroy it as usual).
 * fl__paramserver_service_call runs the handler of `method` ("Publish", "Fetch",
 * "PushGradients", "Info", with or without the "/fleet.ParamServer/" prefix) on one
 * request's bytes, on the calling thread, exactly as a call over gRPC would, and leaves
 * the answer in *out: code FL_OK and the serialized response in data[0..len), or the
 * error status and its message (data NULL). An unknown method is FL_UNIMPLEMENTED.
 * Free the answer with fl__paramserver_reply_free. A push may block as over gRPC
 * (stale_policy = wait). Thread-safe like the service. */
typedef struct fl__paramserver_reply {
    fl_status code;
    char msg[FL_ERR_MSG_MAX];
    uint8_t *data; /* the response (code FL_OK) */
    size_t len;
    void (*release)(void *); /* internal: frees data (NULL: free(data)) */
    void *release_user;
} fl__paramserver_reply_t;

fl_status fl__paramserver_service_create_local(const fl_paramserver_service_opts_t *opts, int shard,
                                               fl_paramserver_service_t **out, fl_err_t *err);
fl_status fl__paramserver_service_call(fl_paramserver_service_t *svc, const char *method, const uint8_t *req,
                                       size_t len, fl__paramserver_reply_t *out);
void fl__paramserver_reply_free(fl__paramserver_reply_t *r);

/* Takes one large-message slot as a large request would (waiting up to
 * FL_PARAMSERVER_LARGE_WAIT_S; FL_RESOURCE_EXHAUSTED when none frees), or gives one back,
 * so that a test can hold the slots while it sends requests over gRPC. */
fl_status fl__paramserver_large_slot_take(fl_paramserver_service_t *svc, fl_err_t *err);
void fl__paramserver_large_slot_give(fl_paramserver_service_t *svc);

#endif
