/* rpc: fleet's small C layer over the gRPC core API. Every service and client uses it.
 * Who may call what, TLS, the tokens and the access token are in docs/security.md, "The
 * trust model"; the limits a server puts on its clients (fl_rpc_server_opts_t), with
 * what a client gets, in docs/security.md, "Every service"; the services' threads in
 * docs/design.md, "Roles".
 *
 * Server: handlers are registered by method path ("/fleet.Replay/Sample") before start.
 * Unary handlers get the request bytes and fill an fl_rpc_reply_t; client-streaming
 * handlers get open/message/close callbacks. Handlers run concurrently on the server's
 * threads and may block (a blocked handler holds one thread); a handler's user pointer
 * is shared by all threads, so handlers must be thread-safe. Unknown methods are
 * answered UNIMPLEMENTED. Shutdown with calls in flight is clean: new calls are refused,
 * calls in flight get a grace period, then are cancelled; every stream's close callback
 * runs exactly once.
 *
 * Client: a channel per target, shareable by any number of threads. Unary calls and
 * client-streaming calls with deadlines and optional wait-for-ready. Every failure maps
 * the gRPC status to fl_status (same numeric codes) and keeps the server's message in
 * the fl_err_t, prefixed with the method.
 *
 * Security (process-wide): with fl_rpc_set_security, every server bound and every
 * channel created afterwards uses TLS, and every call carries a token that servers check
 * before any handler runs (UNAUTHENTICATED without the right one; PERMISSION_DENIED on a
 * learner-only method without the learner token); a failed TLS handshake is explained in
 * the client's error. Without it, servers and channels are plaintext; then
 * fl_rpc_set_access_token makes servers bound afterwards take only calls carrying the
 * access token (else UNAUTHENTICATED) and channels send it. With TLS the run token plays
 * that part and the access token is not used.
 *
 * Ownership: byte buffers returned to callers (fl_rpc_buf_t) are malloc'd and freed with
 * fl_rpc_buf_free. Streams are owned by one thread at a time. */
#ifndef FL_COMMON_RPC_H
#define FL_COMMON_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pbwalk.h"
#include "common/status.h"

/* Default limit on one message, either direction (256 MiB). */
#define FL_RPC_DEFAULT_MAX_MESSAGE (256 << 20)

/* -------------------------------------------------------------- security ---- */

typedef struct fl_rpc_security {
    const char *ca_pem;                 /* the CA that signed the servers' certificates (PEM) */
    const char *cert_pem;               /* this process's certificate (chain), presented by its servers */
    const char *key_pem;                /* its private key */
    const char *token;                  /* the run token: every call sends it, every server requires it */
    const char *learner_token;          /* NULL or "": none. Servers accept it on learner-only methods;
                                           clients send it instead of the run token on learner_methods */
    const char *const *learner_methods; /* NULL-terminated method paths (may be NULL) */
    /* For messages only: the files the PEMs came from ("" or NULL = not named). */
    const char *ca_file, *cert_file, *key_file;
} fl_rpc_security_t;

/* Sets the security of every server bound and every channel created from now on; the
 * strings are copied. NULL goes back to plaintext without tokens. Servers and channels
 * made before keep what they had. FL_INVALID_ARGUMENT when a PEM or the run token is
 * missing or a token holds characters other than printable ASCII. Thread-safe. */
fl_status fl_rpc_set_security(const fl_rpc_security_t *sec, fl_err_t *err);
/* 1 while a security is set. */
int fl_rpc_secure(void);
/* The environment variable that hands a process its fleet's access token. */
#define FL_RPC_ACCESS_ENV "FLEET_ACCESS_TOKEN"
/* Sets the access token of every plaintext server bound and every channel created from
 * now on (copied; NULL or "" clears it). FL_INVALID_ARGUMENT when it holds characters
 * other than printable ASCII without spaces. Thread-safe. */
fl_status fl_rpc_set_access_token(const char *token, fl_err_t *err);

/* 1 when addr ("host", "host:port", "[v6]:port" or "unix:/path") is a unix socket or a
 * loopback address: 127.0.0.0/8, ::1 or localhost. */
int fl_rpc_addr_is_loopback(const char *addr);

/* ---------------------------------------------------------------- server ---- */

typedef struct fl_rpc_server fl_rpc_server_t;
typedef struct fl_rpc_reply fl_rpc_reply_t;

/* Defaults of the limits below. An actor's writer rotates its Insert calls every 30 s and
 * sends continuously, so a stream idle for 120 s is no writer's. */
#define FL_RPC_DEFAULT_STREAM_IDLE_S 120.0
#define FL_RPC_DEFAULT_CONNECTION_IDLE_S 300.0
#define FL_RPC_DEFAULT_KEEPALIVE_S 60.0
#define FL_RPC_DEFAULT_KEEPALIVE_TIMEOUT_S 20.0
#define FL_RPC_DEFAULT_MAX_STREAMS_PER_CONNECTION 64
#define FL_RPC_DEFAULT_MEMORY_BYTES (INT64_C(1) << 30)
#define FL_RPC_DEFAULT_HANDSHAKE_TIMEOUT_S 10.0
#define FL_RPC_DEFAULT_MAX_CONNECTIONS_PER_PEER 1024

typedef struct fl_rpc_server_opts {
    int threads;           /* completion-queue threads (0 = 2) */
    int prepost;           /* requests kept posted for new calls (0 = 16) */
    int max_message_bytes; /* receive limit per message (0 = FL_RPC_DEFAULT_MAX_MESSAGE, -1 = none) */
    double grace_s;        /* shutdown: seconds calls in flight may finish before cancel (0 = 1.0) */
    /* Limits on what clients may hold (docs/security.md); 0 = the default FL_RPC_DEFAULT_*, < 0 = none. */
    double stream_idle_s;           /* a client-streaming call with no message for this long is cancelled */
    double connection_idle_s;       /* a connection without calls for this long is closed */
    double keepalive_s;             /* every connection is pinged this often ... */
    double keepalive_timeout_s;     /* ... and closed when a ping is not answered within this */
    int max_streams_per_connection; /* calls running at once on one connection */
    int64_t memory_bytes;           /* gRPC's memory quota for the server's connections */
    double handshake_timeout_s;     /* a connection that sends no (TLS and) HTTP/2 handshake this long is closed */
    int max_connections_per_peer;   /* TCP connections one peer (an address) may hold: the newest beyond are
                                       shut down within a second (common/connguard.h) */
    int max_connections_other_user; /* the same for each other local user on loopback; 0 = the default: none on
                                       a listener bound to loopback (only its own user's processes may connect),
                                       max_connections_per_peer elsewhere; < 0 = max_connections_per_peer */
    /* Calls refused for what they asked (INVALID_ARGUMENT, PERMISSION_DENIED,
     * UNAUTHENTICATED, OUT_OF_RANGE, UNIMPLEMENTED) are logged as
     * warnings with the method, the peer and the message (the first 10, then every
     * 1,000th); 1 = not (a server that logs its refusals itself). */
    int quiet_refusals;
} fl_rpc_server_opts_t;

/* Unary: the request is req[0..len). Fill `reply` with fl_rpc_reply_bytes / _alloc / _pb,
 * or return an error (fl_rpc_reply_error sets the message). A non-OK return ends the
 * call with that status; whatever was put in the reply is dropped. */
typedef fl_status (*fl_rpc_unary_fn)(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply);

/* Client-streaming. open() is called when the call starts and returns the per-call
 * state (may return NULL when none is needed; returning NULL is not an error). Each
 * message is handed to message(); a non-OK return ends the call with that status and
 * message. close() is called exactly once per opened call: with why == FL_OK after the
 * client half-closed and every message was handled (fill `reply` with the response, or
 * return an error), or with why != FL_OK (reply == NULL) when the call failed, was
 * cancelled or the server is shutting down: then it only releases the state. */
typedef struct fl_rpc_stream_handler {
    void *(*open)(void *user);
    fl_status (*message)(void *user, void *state, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply);
    fl_status (*close)(void *user, void *state, fl_status why, fl_rpc_reply_t *reply);
} fl_rpc_stream_handler_t;

fl_status fl_rpc_server_create(const fl_rpc_server_opts_t *opts, fl_rpc_server_t **out, fl_err_t *err);
/* Registration is only allowed before fl_rpc_server_start. `method` is copied. */
fl_status fl_rpc_server_add_unary(fl_rpc_server_t *s, const char *method, fl_rpc_unary_fn fn, void *user);
fl_status fl_rpc_server_add_stream(fl_rpc_server_t *s, const char *method, const fl_rpc_stream_handler_t *h,
                                   void *user);
/* Marks a registered method as learner-only: with a security set, its calls need the
 * learner token (checked before the handler; else PERMISSION_DENIED naming the method).
 * Without one it changes nothing. Only before fl_rpc_server_start. */
fl_status fl_rpc_server_learner_only(fl_rpc_server_t *s, const char *method);
/* Binds "host:port" (port 0 = the OS chooses) or "unix:/path" (an existing socket file
 * is replaced), with TLS and the token check when a security is set (fl_rpc_set_security).
 * *port gets the bound TCP port (0 for unix sockets); may be NULL. */
fl_status fl_rpc_server_bind(fl_rpc_server_t *s, const char *addr, int *port, fl_err_t *err);
fl_status fl_rpc_server_start(fl_rpc_server_t *s, fl_err_t *err);
/* Stops accepting calls, lets calls in flight finish for the grace period, cancels the
 * rest, and joins the threads. Idempotent. */
void fl_rpc_server_shutdown(fl_rpc_server_t *s);
/* Shuts down (if needed) and frees. NULL is a no-op. */
void fl_rpc_server_destroy(fl_rpc_server_t *s);

/* Reply helpers for handlers. */
fl_status fl_rpc_reply_bytes(fl_rpc_reply_t *r, const void *data, size_t len);
/* Returns a buffer of len bytes that becomes the reply (no further copy); NULL on OOM. */
void *fl_rpc_reply_alloc(fl_rpc_reply_t *r, size_t len);
/* Replies with bytes the caller keeps alive (no copy): release(user) is called once
 * gRPC no longer needs them (for a buffer shared by reference count, say). */
fl_status fl_rpc_reply_ref(fl_rpc_reply_t *r, const void *data, size_t len, void (*release)(void *), void *user);
/* Packs a protobuf-c message as the reply. */
fl_status fl_rpc_reply_pb(fl_rpc_reply_t *r, const ProtobufCMessage *msg);
/* The address of the client that made the call, as gRPC names it ("ipv4:127.0.0.1:51234",
 * "ipv6:[::1]:51234", "unix:..."): one per connection. Valid during the handler; "" when
 * unknown. */
const char *fl_rpc_reply_peer(const fl_rpc_reply_t *r);
/* The client a quota counts by, from a peer as fl_rpc_reply_peer names it: a remote host
 * is its address without the port ("ipv4:10.0.0.7"; an IPv4-mapped IPv6 address as its
 * IPv4 form), so that all the connections of one host count as one client; a client on
 * loopback or a unix socket (the run's own processes: docs/security.md) is its
 * connection, the peer as given. Writes at most len bytes (len > 0) and returns out. */
char *fl_rpc_peer_key(const char *peer, char *out, size_t len);
/* Sets the error message sent with a non-OK status; returns code. */
fl_status fl_rpc_reply_error(fl_rpc_reply_t *r, fl_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- client ---- */

typedef struct fl_rpc_channel fl_rpc_channel_t;
typedef struct fl_rpc_stream fl_rpc_stream_t;

typedef struct fl_rpc_buf {
    uint8_t *data;
    size_t len;
} fl_rpc_buf_t;

void fl_rpc_buf_free(fl_rpc_buf_t *b);

/* A response left where gRPC received it: its bytes as segments (common/pbwalk.h), in
 * order, not copied into one buffer. Free with fl_rpc_segs_free. */
typedef struct fl_rpc_segs {
    fl_pb_seg_t *seg;
    size_t n, len; /* segments; total bytes */
    void *priv;    /* the slices holding them */
} fl_rpc_segs_t;

void fl_rpc_segs_free(fl_rpc_segs_t *s);
/* For tests: the segments of a grpc_byte_buffer (bb), as fl_rpc_unary_segs takes them. */
fl_status fl__rpc_segs_from_byte_buffer(void *bb, fl_rpc_segs_t *out, fl_err_t *err);

/* Call flags. */
#define FL_RPC_WAIT_FOR_READY 1u /* wait (until the deadline) for the server to come up */
#define FL_RPC_BUFFERED                                                     \
    2u /* streams: messages may be coalesced into fewer writes; they go out \
          when the write buffer fills or the stream is finished */
#define FL_RPC_STOPPABLE                                                      \
    4u /* once the process is asked to stop (common/stop.h), a unary call, or \
          a stream's send or finish, that waits (on a server holding back,    \
          say) cancels the call: it ends CANCELLED within ~0.1 s */

/* target: "host:port" or "unix:/path". max_message_bytes as for the server (0 = default). */
fl_status fl_rpc_channel_create(const char *target, int max_message_bytes, fl_rpc_channel_t **out, fl_err_t *err);
void fl_rpc_channel_destroy(fl_rpc_channel_t *ch);
const char *fl_rpc_channel_target(const fl_rpc_channel_t *ch);
/* Waits up to timeout_ms for the channel to be connected (starting a connection attempt
 * when it is idle): 1 when it is, 0 when the time ran out. */
int fl_rpc_channel_wait_ready(fl_rpc_channel_t *ch, int64_t timeout_ms);

/* A unary call. timeout_ms <= 0 means no deadline. On success *resp holds the response
 * bytes (free with fl_rpc_buf_free). On failure the status is the call's gRPC status
 * and err holds "<method>: <server's message>". */
fl_status fl_rpc_unary(fl_rpc_channel_t *ch, const char *method, const void *req, size_t req_len, int64_t timeout_ms,
                       unsigned flags, fl_rpc_buf_t *resp, fl_err_t *err);
/* The same with the response left in the segments it arrived in (for large responses
 * read in place, with one copy of each part to where it goes). */
fl_status fl_rpc_unary_segs(fl_rpc_channel_t *ch, const char *method, const void *req, size_t req_len,
                            int64_t timeout_ms, unsigned flags, fl_rpc_segs_t *resp, fl_err_t *err);
/* The same with protobuf-c messages: packs req, unpacks the response with resp_desc
 * into *resp (free with protobuf_c_message_free_unpacked(*resp, NULL)). */
fl_status fl_rpc_unary_pb(fl_rpc_channel_t *ch, const char *method, const ProtobufCMessage *req,
                          const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, int64_t timeout_ms,
                          unsigned flags, fl_err_t *err);

/* A client-streaming call: open, send any number of messages, finish. */
fl_status fl_rpc_stream_open(fl_rpc_channel_t *ch, const char *method, int64_t timeout_ms, unsigned flags,
                             fl_rpc_stream_t **out, fl_err_t *err);
/* Queues one message. Returns once the previous message has been handed to the
 * transport (one send in flight at a time). A failure here means the call is over:
 * call fl_rpc_stream_finish to learn the status. */
fl_status fl_rpc_stream_send(fl_rpc_stream_t *s, const void *msg, size_t len, fl_err_t *err);
fl_status fl_rpc_stream_send_pb(fl_rpc_stream_t *s, const ProtobufCMessage *msg, fl_err_t *err);
/* Half-closes, waits for the response and status, and frees the stream. */
fl_status fl_rpc_stream_finish(fl_rpc_stream_t *s, fl_rpc_buf_t *resp, fl_err_t *err);
fl_status fl_rpc_stream_finish_pb(fl_rpc_stream_t *s, const ProtobufCMessageDescriptor *resp_desc,
                                  ProtobufCMessage **resp, fl_err_t *err);
/* Cancels the call and frees the stream. NULL is a no-op. */
void fl_rpc_stream_cancel(fl_rpc_stream_t *s);
/* While send or finish waits (a server that holds the call: replay's rate limiter), fn(ctx)
 * is called every 100 ms; a nonzero return cancels the call (its status: CANCELLED, "the
 * caller stopped waiting"). The caller keeps its duties meanwhile (an actor reports). */
typedef int (*fl_rpc_wait_fn)(void *ctx);
void fl_rpc_stream_on_wait(fl_rpc_stream_t *s, fl_rpc_wait_fn fn, void *ctx);

#endif
