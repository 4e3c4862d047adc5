/* rpc_server: the gRPC core server (see rpc.h).
 *
 * Server design: one completion queue polled by N threads. Every call has a context
 * (call_ctx) with three tags: the request tag (a new call arrived), the main tag (the
 * call's one outstanding batch: receive a message, or send the final status) and the
 * close tag (RECV_CLOSE_ON_SERVER, posted at the start, completes when the call ends).
 * The main path of a call is strictly sequential, so only one thread touches a call's
 * state at a time; the close tag only sets a flag and drops a reference. A context is
 * freed when both its main path and its close op have completed.
 *
 * Security: a server bound while a security is set gets TLS credentials with an auth
 * metadata processor (token_check) that gRPC runs on its own threads before a call
 * reaches the queue; it records which token the call carried in the call's auth context,
 * which call_allowed reads before a learner-only method's handler. A channel gets TLS
 * credentials composed with a metadata plugin (token_send) that picks the token per
 * method. Both copy the tokens they need, so fl_rpc_set_security never touches them.
 * Without TLS, a server bound while an access token is set keeps a copy and checks every
 * call's "authorization" header in call_allowed, before the handler; a channel made while
 * one is set keeps its header (channel_sec.access) and adds it to each call's initial
 * metadata (access_metadata).
 *
 * Idle streams: every client-streaming call is on a list (idle_mu, changed once per call)
 * with the time its current receive was posted (an atomic, 0 while a handler runs, so
 * that a message costs no lock); a watchdog thread cancels the calls that have waited
 * for a message longer than stream_idle_s. The list's mutex is taken alone, and a
 * context leaves the list before it is freed, so the watchdog never touches a freed
 * call. */
#include "common/rpc.h"
#include "common/rpc_internal.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/connguard.h"
#include "common/log.h"
#include "common/stop.h"

/* ------------------------------------------------------------- server ---- */

/* What a server's clients may hold (see rpc.h): idle and half-open connections, calls
 * per connection and gRPC's memory. Returns the number of args written (at most
 * FL__LIMIT_ARGS); a quota it creates is s->quota (the server takes its own reference). */
#define FL__LIMIT_ARGS 9
struct fl_rpc_server;
static size_t limit_args(const fl_rpc_server_opts_t *o, struct fl_rpc_server *s, grpc_arg *a);

struct call_ctx;

struct fl_rpc_reply {
    grpc_slice payload;
    int has_payload;
    fl_status code;
    char msg[FL_ERR_MSG_MAX];
    struct call_ctx *ctx; /* the call being answered (its peer) */
};

typedef struct method_entry {
    char *path;
    void *handle; /* registered with gRPC (unary methods): the request arrives with the call */
    int streaming;
    fl_rpc_unary_fn unary;
    fl_rpc_stream_handler_t stream;
    void *user;
    int learner_only; /* with TLS: the call needs the learner token */
} method_entry;

enum { TAG_REQUEST, TAG_MAIN, TAG_SHUTDOWN };
enum { ST_RECV, ST_FINISH };

struct call_ctx;
typedef struct tag {
    int kind;
    struct call_ctx *ctx;
} tag_t;

typedef struct call_ctx {
    fl_rpc_server_t *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    tag_t t_req, t_main;
    int state;
    int first_recv;
    const method_entry *reg; /* set for a request of a registered (unary) method */
    gpr_timespec deadline;
    const method_entry *m;
    grpc_byte_buffer *recv_bb;
    void *stream_state;
    int stream_open;
    int cancelled;
    atomic_int refs;
    grpc_byte_buffer *send_bb;
    grpc_slice status_details;
    int has_status_details;
    char *peer; /* grpc_call_get_peer, on first use */
    /* client-streaming calls: the idle list, guarded by the server's idle_mu */
    struct call_ctx *idle_prev, *idle_next;
    int on_idle_list;
    _Atomic int64_t recv_posted_ms; /* fl_clock_sec() in ms when the pending receive was posted; 0: none */
    atomic_int idle_cancelled;      /* the watchdog cancelled the call */
} call_ctx;

struct fl_rpc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    atomic_uint_fast64_t refused; /* calls answered with a refusal (log_refusal) */
    int quiet_refusals;           /* opts.quiet_refusals */
    method_entry *methods;
    int n_methods;
    pthread_t *threads;
    int nthreads;
    int prepost;
    int max_msg;
    double grace_s;
    int started;
    int secure;   /* bound with TLS and the token check */
    char *access; /* bound in plaintext while an access token was set: the token calls need */
    int shutdown_called;
    atomic_int shutting_down;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int shutdown_seen; /* the server's shutdown tag completed */
    int live;          /* call contexts alive (including pre-posted requests) */
    tag_t t_shutdown;
    /* idle client-streaming calls (see the top of this file) */
    double stream_idle_s; /* <= 0: no watchdog */
    pthread_mutex_t idle_mu;
    pthread_cond_t idle_cv; /* wakes the watchdog for the stop */
    call_ctx *idle_head;
    pthread_t idle_thread;
    int idle_started, idle_stop;
    grpc_resource_quota *quota;
    int max_conns_per_peer;   /* opts.max_connections_per_peer, resolved (<= 0: none) */
    int max_conns_other_user; /* opts.max_connections_other_user as given */
    int guard_ports[4];       /* TCP ports bound, guarded once the server starts */
    int guard_loopback[4];    /* ... and whether each was bound to loopback */
    int n_guard_ports;
    fl_connguard_t *guards[4];
};

static void idle_list_remove(call_ctx *c) {
    fl_rpc_server_t *s = c->srv;
    pthread_mutex_lock(&s->idle_mu);
    if (c->on_idle_list) {
        if (c->idle_prev)
            c->idle_prev->idle_next = c->idle_next;
        else
            s->idle_head = c->idle_next;
        if (c->idle_next) c->idle_next->idle_prev = c->idle_prev;
        c->on_idle_list = 0;
    }
    pthread_mutex_unlock(&s->idle_mu);
}

static void ctx_free(call_ctx *c) {
    fl_rpc_server_t *s = c->srv;
    idle_list_remove(c);
    gpr_free(c->peer);
    if (c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
    if (c->send_bb) grpc_byte_buffer_destroy(c->send_bb);
    if (c->has_status_details) grpc_slice_unref(c->status_details);
    if (c->call) grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    free(c);
    pthread_mutex_lock(&s->mu);
    s->live--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void ctx_unref(call_ctx *c) {
    if (atomic_fetch_sub(&c->refs, 1) == 1) ctx_free(c);
}

static void post_request_for(fl_rpc_server_t *s, const method_entry *reg) {
    call_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        FL_ERROR("rpc: out of memory posting a call request");
        return;
    }
    c->srv = s;
    c->t_req = (tag_t){TAG_REQUEST, c};
    c->t_main = (tag_t){TAG_MAIN, c};
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    atomic_init(&c->refs, 1);
    atomic_init(&c->recv_posted_ms, 0);
    atomic_init(&c->idle_cancelled, 0);
    pthread_mutex_lock(&s->mu);
    s->live++;
    pthread_mutex_unlock(&s->mu);
    grpc_call_error e;
    c->reg = reg;
    if (reg)
        e = grpc_server_request_registered_call(s->server, reg->handle, &c->call, &c->deadline, &c->md, &c->recv_bb,
                                                s->cq, s->cq, &c->t_req);
    else
        e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq, &c->t_req);
    if (e != GRPC_CALL_OK) {
        FL_ERROR("rpc: grpc_server_request_call failed (%d)", (int)e);
        ctx_free(c);
    }
}

/* Generic requests receive streaming and unknown methods. */
static void post_request(fl_rpc_server_t *s) {
    post_request_for(s, NULL);
}

static void start_batch(call_ctx *c, grpc_op *ops, size_t n, tag_t *t) {
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, t, NULL);
    if (e != GRPC_CALL_OK) {
        /* Cannot happen with a well-formed batch; treat the call as dead. */
        FL_ERROR("rpc: grpc_call_start_batch failed (%d) on %s", (int)e, c->m ? c->m->path : "?");
        ctx_unref(c);
    }
}

/* A call refused for what it asked (not for the service's state: RESOURCE_EXHAUSTED,
 * UNAVAILABLE and FAILED_PRECONDITION are a busy, stopping or not yet ready service, e.g.
 * a Sample the rate limiter held too long): a warning with the method, the peer and why,
 * the first 10 per server and then every 1,000th, so that a hostile or broken client
 * shows in the log without flooding it. */
static void log_refusal(call_ctx *c, fl_status code, const char *msg) {
    if (code != FL_INVALID_ARGUMENT && code != FL_PERMISSION_DENIED && code != FL_UNAUTHENTICATED &&
        code != FL_OUT_OF_RANGE && code != FL_UNIMPLEMENTED)
        return;
    fl_rpc_server_t *s = c->srv;
    uint64_t n = atomic_fetch_add(&s->refused, 1) + 1;
    if (s->quiet_refusals || !fl_log_sampled(n)) return;
    char *peer = c->call ? grpc_call_get_peer(c->call) : NULL;
    FL_WARN("rpc: refused %s from %s (%s; %llu refused so far): %.300s", c->m ? c->m->path : "a call",
            peer ? peer : "?", fl_status_str(code), (unsigned long long)n, msg);
    gpr_free(peer);
}

/* Sends the final response (if any) and status; the main path then ends. */
static void send_finish(call_ctx *c, fl_rpc_reply_t *r, int send_initial) {
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (send_initial) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
    }
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n].data.recv_close_on_server.cancelled = &c->cancelled;
    n++;
    if (r->code == FL_OK && r->has_payload) {
        c->send_bb = grpc_raw_byte_buffer_create(&r->payload, 1);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->send_bb;
        n++;
    }
    if (r->has_payload) {
        grpc_slice_unref(r->payload);
        r->has_payload = 0;
    }
    grpc_status_code code = (grpc_status_code)fl_status_to_grpc(r->code);
    if (r->code != FL_OK) {
        const char *msg = r->msg[0] ? r->msg : fl_status_str(r->code);
        c->status_details = grpc_slice_from_copied_string(msg);
        c->has_status_details = 1;
        log_refusal(c, r->code, msg);
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.trailing_metadata_count = 0;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = c->has_status_details ? &c->status_details : NULL;
    n++;
    c->state = ST_FINISH;
    start_batch(c, ops, n, &c->t_main);
}

static void reply_init(fl_rpc_reply_t *r, call_ctx *c) {
    r->has_payload = 0;
    r->code = FL_OK;
    r->msg[0] = '\0';
    r->ctx = c;
}

static void finish_error(call_ctx *c, fl_status code, const char *msg, int send_initial) {
    fl_rpc_reply_t r;
    reply_init(&r, c);
    r.code = code;
    snprintf(r.msg, sizeof r.msg, "%s", msg);
    send_finish(c, &r, send_initial);
}

static void post_recv(call_ctx *c) {
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (c->first_recv && c->m->streaming) {
        /* Streams send their initial metadata at once; unary calls with the reply. */
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n].data.recv_message.recv_message = &c->recv_bb;
    n++;
    c->state = ST_RECV;
    if (c->m->streaming && c->srv->stream_idle_s > 0)
        atomic_store_explicit(&c->recv_posted_ms, (int64_t)(fl_clock_sec() * 1e3) + 1, memory_order_relaxed);
    start_batch(c, ops, n, &c->t_main);
}

static void stream_close(call_ctx *c, fl_status why, fl_rpc_reply_t *r) {
    if (!c->stream_open) return;
    c->stream_open = 0;
    fl_status st = c->m->stream.close(c->m->user, c->stream_state, why, r);
    if (r && st != FL_OK) {
        if (r->has_payload) {
            grpc_slice_unref(r->payload);
            r->has_payload = 0;
        }
        r->code = st;
    }
}

/* With TLS, a learner-only method needs the call to have carried the learner token (the
 * token check recorded which one it was). 1 when the call may go on; else it is ended
 * PERMISSION_DENIED. */
/* 1 when a plaintext call carries the server's access token; else it is ended
 * UNAUTHENTICATED. */
static int access_allowed(call_ctx *c) {
    const char *v;
    size_t n;
    const grpc_metadata *auth = fl__rpc_bearer_of(c->md.metadata, c->md.count, &v, &n);
    if (v && fl__rpc_token_equal(v, n, c->srv->access)) return 1;
    finish_error(c, FL_UNAUTHENTICATED,
                 !auth ? "the call carries no access token: this fleet's services take calls only from the processes "
                         "of its run (expected 'authorization: Bearer <token>'; a tool of the run's user sends the "
                         "token in the run folder's access.token, e.g. through the FLEET_ACCESS_TOKEN variable)"
                       : "the call's access token is wrong: it is not this run's (expected 'authorization: Bearer "
                         "<token>' with the token in the run folder's access.token; an old run's or another run's "
                         "token is refused)",
                 1);
    return 0;
}

static int call_allowed(call_ctx *c) {
    if (c->srv->access && !access_allowed(c)) return 0;
    if (!c->m->learner_only || !c->srv->secure) return 1;
    int learner = 0;
    grpc_auth_context *ctx = grpc_call_auth_context(c->call);
    if (ctx) {
        grpc_auth_property_iterator it = grpc_auth_context_find_properties_by_name(ctx, CRED_PROPERTY);
        const grpc_auth_property *p;
        while ((p = grpc_auth_property_iterator_next(&it)) != NULL)
            learner |=
                p->value_length == sizeof CRED_LEARNER - 1 && memcmp(p->value, CRED_LEARNER, p->value_length) == 0;
        grpc_auth_context_release(ctx);
    }
    if (learner) return 1;
    char msg[512];
    snprintf(msg, sizeof msg,
             "%s is learner-only: it needs the learner token (learner.token in run.tls_dir, which `fleet learner` "
             "sends), and the call carried the run token",
             c->m->path);
    finish_error(c, FL_PERMISSION_DENIED, msg, 1);
    return 0;
}

static void on_new_call(call_ctx *c) {
    fl_rpc_server_t *s = c->srv;
    c->m = NULL;
    for (int i = 0; i < s->n_methods; i++) {
        if (grpc_slice_str_cmp(c->details.method, s->methods[i].path) == 0) {
            c->m = &s->methods[i];
            break;
        }
    }
    if (!c->m) {
        char msg[300];
        char *path = grpc_slice_to_c_string(c->details.method);
        snprintf(msg, sizeof msg, "unknown method %s", path);
        gpr_free(path);
        finish_error(c, FL_UNIMPLEMENTED, msg, 1);
        return;
    }
    if (!call_allowed(c)) return;
    if (c->m->streaming) {
        c->stream_state = c->m->stream.open ? c->m->stream.open(c->m->user) : NULL;
        c->stream_open = 1;
        if (s->stream_idle_s > 0) {
            pthread_mutex_lock(&s->idle_mu);
            c->idle_prev = NULL;
            c->idle_next = s->idle_head;
            if (s->idle_head) s->idle_head->idle_prev = c;
            s->idle_head = c;
            c->on_idle_list = 1;
            pthread_mutex_unlock(&s->idle_mu);
        }
    }
    c->first_recv = 1;
    post_recv(c);
}

static void on_recv(call_ctx *c, int ok) {
    const method_entry *m = c->m;
    grpc_byte_buffer *bb = c->recv_bb;
    c->recv_bb = NULL;
    int send_initial = c->first_recv && !m->streaming;
    c->first_recv = 0;
    if (m->streaming && c->srv->stream_idle_s > 0) {
        atomic_store_explicit(&c->recv_posted_ms, 0, memory_order_relaxed);
        if (atomic_load(&c->idle_cancelled)) ok = 0; /* whatever the receive says: the watchdog ended the call */
    }
    if (!ok) {
        if (bb) grpc_byte_buffer_destroy(bb);
        if (m->streaming) stream_close(c, FL_CANCELLED, NULL);
        finish_error(c, FL_CANCELLED, "call ended before its request was read", send_initial);
        return;
    }
    fl_rpc_reply_t r;
    reply_init(&r, c);
    if (!m->streaming) {
        if (!bb) {
            finish_error(c, FL_INVALID_ARGUMENT, "unary call without a request message", 1);
            return;
        }
        grpc_slice req = fl__rpc_read_all(bb);
        grpc_byte_buffer_destroy(bb);
        fl_status st = m->unary(m->user, GRPC_SLICE_START_PTR(req), GRPC_SLICE_LENGTH(req), &r);
        grpc_slice_unref(req);
        if (st != FL_OK) {
            if (r.has_payload) {
                grpc_slice_unref(r.payload);
                r.has_payload = 0;
            }
            r.code = st;
        }
        send_finish(c, &r, 1);
        return;
    }
    if (!bb) { /* client half-closed: every message was handled */
        stream_close(c, FL_OK, &r);
        send_finish(c, &r, 0);
        return;
    }
    if (atomic_load(&c->srv->shutting_down) && c->cancelled) {
        grpc_byte_buffer_destroy(bb);
        stream_close(c, FL_CANCELLED, NULL);
        finish_error(c, FL_UNAVAILABLE, "server shutting down", 0);
        return;
    }
    grpc_slice msg = fl__rpc_read_all(bb);
    grpc_byte_buffer_destroy(bb);
    fl_status st = m->stream.message(m->user, c->stream_state, GRPC_SLICE_START_PTR(msg), GRPC_SLICE_LENGTH(msg), &r);
    grpc_slice_unref(msg);
    if (r.has_payload) {
        grpc_slice_unref(r.payload);
        r.has_payload = 0;
    }
    if (st != FL_OK) {
        r.code = st;
        stream_close(c, st, NULL);
        send_finish(c, &r, 0);
        return;
    }
    post_recv(c);
}

static void handle_event(fl_rpc_server_t *s, tag_t *t, int ok) {
    call_ctx *c = t->ctx;
    switch (t->kind) {
    case TAG_SHUTDOWN:
        pthread_mutex_lock(&s->mu);
        s->shutdown_seen = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return;
    case TAG_REQUEST:
        if (!ok) { /* server shutting down: the pre-posted request is void */
            ctx_free(c);
            return;
        }
        if (!atomic_load(&s->shutting_down)) post_request_for(s, c->reg);
        if (c->reg) {
            /* A registered unary call: its request message came with it. */
            c->m = c->reg;
            c->first_recv = 1;
            c->state = ST_RECV;
            if (call_allowed(c)) on_recv(c, 1);
        } else {
            on_new_call(c);
        }
        return;
    case TAG_MAIN:
        if (c->state == ST_RECV) {
            on_recv(c, ok);
        } else {
            if (c->send_bb) {
                grpc_byte_buffer_destroy(c->send_bb);
                c->send_bb = NULL;
            }
            ctx_unref(c);
        }
        return;
    }
}

/* The watchdog of idle client-streaming calls (see the top of this file). */
static void *idle_watchdog(void *arg) {
    fl_rpc_server_t *s = arg;
    double period = s->stream_idle_s / 4 < 1.0 ? s->stream_idle_s / 4 : 1.0;
    char why[160];
    snprintf(why, sizeof why,
             "stream idle: no message for %g s (a client-streaming call may pause at most that long between "
             "messages)",
             s->stream_idle_s);
    pthread_mutex_lock(&s->idle_mu);
    while (!s->idle_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + period;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&s->idle_cv, &s->idle_mu, &ts);
        if (s->idle_stop) break;
        int64_t now_ms = (int64_t)(fl_clock_sec() * 1e3), idle_ms = (int64_t)(s->stream_idle_s * 1e3);
        for (call_ctx *c = s->idle_head; c; c = c->idle_next) {
            int64_t posted = atomic_load_explicit(&c->recv_posted_ms, memory_order_relaxed);
            if (posted <= 0 || now_ms - posted < idle_ms || atomic_load(&c->idle_cancelled)) continue;
            /* A handler that took the message meanwhile finds the call cancelled later. */
            atomic_store(&c->idle_cancelled, 1);
            FL_DEBUG("rpc: cancelling a call of %s: %s", c->m ? c->m->path : "?", why);
            grpc_call_cancel_with_status(c->call, GRPC_STATUS_CANCELLED, why, NULL);
        }
    }
    pthread_mutex_unlock(&s->idle_mu);
    return NULL;
}

static void *server_thread(void *arg) {
    fl_rpc_server_t *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type == GRPC_OP_COMPLETE) handle_event(s, ev.tag, ev.success);
    }
    return NULL;
}

/* A limit's value: the option, its default when 0, none when < 0. */
static double limit_of(double v, double def) {
    return v == 0 ? def : v;
}

static int ms_of(double sec) {
    return sec * 1e3 >= 2147483647.0 ? 2147483647 : (int)(sec * 1e3);
}

static size_t limit_args(const fl_rpc_server_opts_t *o, struct fl_rpc_server *s, grpc_arg *a) {
    size_t n = 0;
    double idle = limit_of(o->connection_idle_s, FL_RPC_DEFAULT_CONNECTION_IDLE_S);
    double ka = limit_of(o->keepalive_s, FL_RPC_DEFAULT_KEEPALIVE_S);
    double ka_to = limit_of(o->keepalive_timeout_s, FL_RPC_DEFAULT_KEEPALIVE_TIMEOUT_S);
    int streams =
        o->max_streams_per_connection == 0 ? FL_RPC_DEFAULT_MAX_STREAMS_PER_CONNECTION : o->max_streams_per_connection;
    int64_t mem = o->memory_bytes == 0 ? FL_RPC_DEFAULT_MEMORY_BYTES : o->memory_bytes;
    double hs = limit_of(o->handshake_timeout_s, FL_RPC_DEFAULT_HANDSHAKE_TIMEOUT_S);
    if (hs > 0) { /* a connection that has not finished its TLS and HTTP/2 handshake by then is closed */
        a[n].type = GRPC_ARG_INTEGER, a[n].key = GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, a[n].value.integer = ms_of(hs);
        n++;
    }
    if (idle > 0) {
        a[n].type = GRPC_ARG_INTEGER, a[n].key = GRPC_ARG_MAX_CONNECTION_IDLE_MS, a[n].value.integer = ms_of(idle);
        n++;
    }
    if (ka > 0) {
        /* Pings also on connections without calls and without data, so that a peer that
         * is gone (a half-open connection) is found within ka + ka_to. */
        a[n].type = GRPC_ARG_INTEGER, a[n].key = GRPC_ARG_KEEPALIVE_TIME_MS, a[n].value.integer = ms_of(ka);
        n++;
        a[n].type = GRPC_ARG_INTEGER, a[n].key = GRPC_ARG_KEEPALIVE_TIMEOUT_MS;
        a[n].value.integer = ms_of(ka_to > 0 ? ka_to : FL_RPC_DEFAULT_KEEPALIVE_TIMEOUT_S);
        n++;
        a[n].type = GRPC_ARG_INTEGER, a[n].key = GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, a[n].value.integer = 1;
        n++;
        a[n].type = GRPC_ARG_INTEGER, a[n].key = GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, a[n].value.integer = 0;
        n++;
        a[n].type = GRPC_ARG_INTEGER, a[n].key = GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS;
        a[n].value.integer = ms_of(ka);
        n++;
    }
    if (streams > 0) {
        a[n].type = GRPC_ARG_INTEGER, a[n].key = GRPC_ARG_MAX_CONCURRENT_STREAMS, a[n].value.integer = streams;
        n++;
    }
    if (mem > 0) {
        s->quota = grpc_resource_quota_create("fleet-server");
        grpc_resource_quota_resize(s->quota, (size_t)mem);
        a[n].type = GRPC_ARG_POINTER, a[n].key = GRPC_ARG_RESOURCE_QUOTA;
        a[n].value.pointer.p = s->quota;
        a[n].value.pointer.vtable = grpc_resource_quota_arg_vtable();
        n++;
    }
    return n;
}

fl_status fl_rpc_server_create(const fl_rpc_server_opts_t *opts, fl_rpc_server_t **out, fl_err_t *err) {
    *out = NULL;
    fl_rpc_server_t *s = calloc(1, sizeof *s);
    if (!s) return fl_err_set(err, FL_NO_MEMORY, "rpc server: out of memory");
    fl_rpc_server_opts_t o = opts ? *opts : (fl_rpc_server_opts_t){0};
    s->nthreads = o.threads > 0 ? o.threads : 2;
    s->prepost = o.prepost > 0 ? o.prepost : 16;
    s->max_msg = fl__rpc_effective_limit(o.max_message_bytes);
    s->grace_s = o.grace_s > 0 ? o.grace_s : 1.0;
    s->stream_idle_s = o.stream_idle_s == 0 ? FL_RPC_DEFAULT_STREAM_IDLE_S : o.stream_idle_s;
    s->quiet_refusals = o.quiet_refusals;
    s->max_conns_per_peer =
        o.max_connections_per_peer == 0 ? FL_RPC_DEFAULT_MAX_CONNECTIONS_PER_PEER : o.max_connections_per_peer;
    s->max_conns_other_user = o.max_connections_other_user;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->idle_mu, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    s->t_shutdown = (tag_t){TAG_SHUTDOWN, NULL};
    fl__rpc_grpc_init();
    grpc_arg args[3 + FL__LIMIT_ARGS + FL__TRANSPORT_ARGS];
    memset(args, 0, sizeof args);
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = s->max_msg;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_ALLOW_REUSEPORT;
    args[2].value.integer = 0;
    size_t nargs = 3;
    nargs += limit_args(&o, s, args + nargs);
    nargs += fl__rpc_transport_args(args + nargs);
    grpc_channel_args cargs = {nargs, args};
    s->server = grpc_server_create(&cargs, NULL);
    if (s->quota) { /* the server holds its own reference */
        grpc_resource_quota_unref(s->quota);
        s->quota = NULL;
    }
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    *out = s;
    return FL_OK;
}

static fl_status add_method(fl_rpc_server_t *s, const char *method, method_entry *e) {
    if (s->started) return FL_FAILED_PRECONDITION;
    for (int i = 0; i < s->n_methods; i++)
        if (strcmp(s->methods[i].path, method) == 0) return FL_ALREADY_EXISTS;
    method_entry *m = realloc(s->methods, (size_t)(s->n_methods + 1) * sizeof *m);
    if (!m) return FL_NO_MEMORY;
    s->methods = m;
    e->path = strdup(method);
    if (!e->path) return FL_NO_MEMORY;
    s->methods[s->n_methods++] = *e;
    return FL_OK;
}

fl_status fl_rpc_server_add_unary(fl_rpc_server_t *s, const char *method, fl_rpc_unary_fn fn, void *user) {
    method_entry e = {.streaming = 0, .unary = fn, .user = user};
    return add_method(s, method, &e);
}

fl_status fl_rpc_server_add_stream(fl_rpc_server_t *s, const char *method, const fl_rpc_stream_handler_t *h,
                                   void *user) {
    if (!h || !h->message || !h->close) return FL_INVALID_ARGUMENT;
    method_entry e = {.streaming = 1, .stream = *h, .user = user};
    return add_method(s, method, &e);
}

fl_status fl_rpc_server_learner_only(fl_rpc_server_t *s, const char *method) {
    if (s->started) return FL_FAILED_PRECONDITION;
    for (int i = 0; i < s->n_methods; i++)
        if (strcmp(s->methods[i].path, method) == 0) {
            s->methods[i].learner_only = 1;
            return FL_OK;
        }
    return FL_NOT_FOUND;
}

/* Why host:port (a fixed port) cannot be listened on, found by binding it here first: gRPC
 * would log a page of its internals for it. 0 when it can (or when the address is not
 * host:port with a port of its own: gRPC decides); else 1 with the reason in why. */
static int cannot_listen(const char *addr, char *why, size_t len) {
    const char *colon = strrchr(addr, ':');
    if (!colon || strncmp(addr, "unix:", 5) == 0 || strncmp(addr, "unix-abstract:", 14) == 0) return 0;
    char host[256], *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    size_t hl = (size_t)(colon - addr);
    if (!end || *end || port <= 0 || port > 65535 || hl >= sizeof host) return 0;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    char *h = host;
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') { /* [::1]:port */
        host[hl - 1] = '\0';
        h = host + 1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    if (getaddrinfo(h[0] ? h : NULL, colon + 1, &hints, &res) != 0 || !res) return 0;
    int err = 0;
    for (struct addrinfo *a = res; a && !err; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* as gRPC binds */
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 &&
            (errno == EADDRINUSE || errno == EACCES || errno == EADDRNOTAVAIL))
            err = errno;
        close(fd);
    }
    freeaddrinfo(res);
    if (err == EADDRINUSE)
        snprintf(why, len,
                 "cannot listen on %s: the address is in use (another process listens there; choose "
                 "another port, or port 0 for a free one)",
                 addr);
    else if (err == EACCES)
        snprintf(why, len,
                 "cannot listen on %s: permission denied (ports below 1024 need privileges; choose a "
                 "port above 1023, or port 0 for a free one)",
                 addr);
    else if (err == EADDRNOTAVAIL)
        snprintf(why, len,
                 "cannot listen on %s: no network interface of this machine has that address (use one of "
                 "its own addresses, 127.0.0.1, or 0.0.0.0 for all)",
                 addr);
    return err != 0;
}

fl_status fl_rpc_server_bind(fl_rpc_server_t *s, const char *addr, int *port, fl_err_t *err) {
    if (port) *port = 0;
    if (s->started) return fl_err_set(err, FL_FAILED_PRECONDITION, "rpc server: bind %s after start", addr);
    int is_unix = strncmp(addr, "unix:", 5) == 0;
    if (is_unix) {
        const char *path = addr + 5;
        if (strncmp(path, "//", 2) == 0) path += 2;
        unlink(path); /* a stale socket file from an earlier run */
    }
    char why[512];
    if (cannot_listen(addr, why, sizeof why)) return fl_err_set(err, FL_UNAVAILABLE, "rpc server: %s", why);
    int secure = 0;
    grpc_server_credentials *creds = fl__rpc_server_creds(&secure);
    if (!creds)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "rpc server: cannot make TLS credentials for '%s' from the certificate and key set", addr);
    int p = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (p == 0 && secure)
        return fl_err_set(err, FL_UNAVAILABLE,
                          "rpc server: cannot bind '%s' with TLS (expected host:port with a free port, or unix:/path; "
                          "and a certificate and private key that belong together: %s)",
                          addr, fl__rpc_sec_files());
    if (p == 0)
        return fl_err_set(err, FL_UNAVAILABLE,
                          "rpc server: cannot bind '%s' (expected host:port with a free port, or unix:/path)", addr);
    s->secure |= secure;
    if (!secure && !s->access) {
        pthread_mutex_lock(&fl__rpc_sec_mu);
        s->access = fl__rpc_access ? strdup(fl__rpc_access) : NULL;
        int lost = fl__rpc_access && !s->access;
        pthread_mutex_unlock(&fl__rpc_sec_mu);
        if (lost) return fl_err_set(err, FL_NO_MEMORY, "rpc server: out of memory");
    }
    if (!is_unix && s->max_conns_per_peer > 0 && s->n_guard_ports < 4) {
        s->guard_loopback[s->n_guard_ports] = fl_rpc_addr_is_loopback(addr);
        s->guard_ports[s->n_guard_ports++] = p;
    }
    if (port) *port = is_unix ? 0 : p;
    return FL_OK;
}

fl_status fl_rpc_server_start(fl_rpc_server_t *s, fl_err_t *err) {
    if (s->started) return fl_err_set(err, FL_FAILED_PRECONDITION, "rpc server: already started");
    for (int i = 0; i < s->n_methods; i++) {
        method_entry *m = &s->methods[i];
        if (m->streaming) continue;
        m->handle = grpc_server_register_method(s->server, m->path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (!m->handle) return fl_err_set(err, FL_INTERNAL, "rpc server: cannot register %s", m->path);
    }
    grpc_server_start(s->server);
    s->started = 1;
    for (int i = 0; i < s->prepost; i++) post_request(s);
    for (int i = 0; i < s->n_methods; i++)
        if (s->methods[i].handle)
            for (int k = 0; k < s->prepost; k++) post_request_for(s, &s->methods[i]);
    s->threads = calloc((size_t)s->nthreads, sizeof *s->threads);
    if (!s->threads) return fl_err_set(err, FL_NO_MEMORY, "rpc server: out of memory");
    for (int i = 0; i < s->nthreads; i++) {
        if (pthread_create(&s->threads[i], NULL, server_thread, s) != 0) {
            s->nthreads = i;
            return fl_err_set(err, FL_INTERNAL, "rpc server: cannot start thread %d", i);
        }
    }
    int streaming = 0;
    for (int i = 0; i < s->n_methods; i++) streaming |= s->methods[i].streaming;
    if (streaming && s->stream_idle_s > 0) {
        if (pthread_create(&s->idle_thread, NULL, idle_watchdog, s) != 0)
            return fl_err_set(err, FL_INTERNAL, "rpc server: cannot start the idle-stream watchdog");
        s->idle_started = 1;
    }
    for (int i = 0; i < s->n_guard_ports; i++) {
        fl_err_t gerr;
        fl_err_init(&gerr);
        const int other = s->max_conns_other_user > 0   ? s->max_conns_other_user
                          : s->max_conns_other_user < 0 ? s->max_conns_per_peer
                          : s->guard_loopback[i]        ? 0 /* only this user's processes on a loopback listener */
                                                        : s->max_conns_per_peer;
        if (fl_connguard_start(s->guard_ports[i], s->max_conns_per_peer, other, 0.5, &s->guards[i], &gerr) != FL_OK)
            FL_WARN("rpc server: port %d: no bound on connections per peer: %s", s->guard_ports[i], gerr.msg);
    }
    return FL_OK;
}

void fl_rpc_server_shutdown(fl_rpc_server_t *s) {
    if (!s || s->shutdown_called) return;
    s->shutdown_called = 1;
    atomic_store(&s->shutting_down, 1);
    for (int i = 0; i < s->n_guard_ports; i++) {
        fl_connguard_stop(s->guards[i]);
        s->guards[i] = NULL;
    }
    if (s->idle_started) {
        pthread_mutex_lock(&s->idle_mu);
        s->idle_stop = 1;
        pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->idle_mu);
        pthread_join(s->idle_thread, NULL);
        s->idle_started = 0;
    }
    if (s->started) {
        grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
        /* Grace period for calls in flight, then cancel what is left. */
        double until = fl_clock_sec() + s->grace_s;
        pthread_mutex_lock(&s->mu);
        while (!s->shutdown_seen) {
            double left = until - fl_clock_sec();
            if (left <= 0) break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (left < 0.05 ? left : 0.05);
            ts.tv_sec = (time_t)t;
            ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        }
        int done = s->shutdown_seen;
        pthread_mutex_unlock(&s->mu);
        if (!done) grpc_server_cancel_all_calls(s->server);
        pthread_mutex_lock(&s->mu);
        while (!s->shutdown_seen || s->live > 0) pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
    }
    grpc_completion_queue_shutdown(s->cq);
    if (s->started) {
        for (int i = 0; i < s->nthreads; i++) pthread_join(s->threads[i], NULL);
    } else {
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
    }
}

void fl_rpc_server_destroy(fl_rpc_server_t *s) {
    if (!s) return;
    if (!s->started) {
        /* grpc requires shutdown before destroy even for a server never started. */
        grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
        grpc_completion_queue_shutdown(s->cq);
        for (;;) {
            grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        }
        s->shutdown_called = 1;
    }
    fl_rpc_server_shutdown(s);
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    for (int i = 0; i < s->n_methods; i++) free(s->methods[i].path);
    free(s->methods);
    free(s->threads);
    free(s->access);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->idle_mu);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
    grpc_shutdown();
}

fl_status fl_rpc_reply_bytes(fl_rpc_reply_t *r, const void *data, size_t len) {
    void *p = fl_rpc_reply_alloc(r, len);
    if (!p && len) return FL_NO_MEMORY;
    if (len) memcpy(p, data, len);
    return FL_OK;
}

void *fl_rpc_reply_alloc(fl_rpc_reply_t *r, size_t len) {
    if (r->has_payload) grpc_slice_unref(r->payload);
    r->payload = grpc_slice_malloc(len);
    r->has_payload = 1;
    return GRPC_SLICE_START_PTR(r->payload);
}

fl_status fl_rpc_reply_ref(fl_rpc_reply_t *r, const void *data, size_t len, void (*release)(void *), void *user) {
    if (r->has_payload) grpc_slice_unref(r->payload);
    r->payload = grpc_slice_new_with_user_data((void *)data, len, release, user);
    r->has_payload = 1;
    return FL_OK;
}

fl_status fl_rpc_reply_pb(fl_rpc_reply_t *r, const ProtobufCMessage *msg) {
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *p = fl_rpc_reply_alloc(r, n);
    if (!p && n) return FL_NO_MEMORY;
    protobuf_c_message_pack(msg, p);
    return FL_OK;
}

const char *fl_rpc_reply_peer(const fl_rpc_reply_t *r) {
    call_ctx *c = r ? r->ctx : NULL;
    if (!c || !c->call) return "";
    if (!c->peer) c->peer = grpc_call_get_peer(c->call); /* the call's own thread: no race */
    return c->peer ? c->peer : "";
}

char *fl_rpc_peer_key(const char *peer, char *out, size_t len) {
    if (!peer) peer = "";
    snprintf(out, len, "%s", peer);
    const char *port = strrchr(peer, ':');
    if (strncmp(peer, "ipv4:", 5) == 0 && port > peer + 4) {
        if (strncmp(peer + 5, "127.", 4) == 0) return out; /* loopback: the connection */
        snprintf(out, len, "%.*s", (int)(port - peer), peer);
    } else if (strncmp(peer, "ipv6:[", 6) == 0 && port > peer + 6 && port[-1] == ']') {
        const char *a = peer + 6;
        const int alen = (int)(port - 1 - a);
        if ((alen == 3 && strncmp(a, "::1", 3) == 0) || strncmp(a, "::ffff:127.", 11) == 0) return out;
        if (alen > 7 && strncmp(a, "::ffff:", 7) == 0 && !memchr(a + 7, ':', (size_t)(alen - 7)))
            snprintf(out, len, "ipv4:%.*s", alen - 7, a + 7);
        else
            snprintf(out, len, "%.*s", (int)(port - peer), peer);
    }
    return out;
}

fl_status fl_rpc_reply_error(fl_rpc_reply_t *r, fl_status code, const char *fmt, ...) {
    if (!r) return code;
    r->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    return code;
}
