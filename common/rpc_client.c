/* rpc_client: channels, unary calls and client streams over gRPC core (see rpc.h): a
 * channel's TLS credentials composed with the token plugin, or its access header on each
 * call (channel_sec.access, access_metadata); one completion queue per thread for unary
 * calls and one per stream; calls that a stop request or a wait hook cancel (pluck_call);
 * replies read into buffers, segments or messages. */
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
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/connguard.h"
#include "common/log.h"
#include "common/stop.h"

/* ------------------------------------------------------------- client ---- */

#define CHANNEL_METHODS 32

struct fl_rpc_channel {
    grpc_channel *ch;
    char *target;
    channel_sec sec; /* the security it was made with (for explaining failures) */
    int max_msg;
    /* Methods registered with the channel (gRPC then skips per-call path interning). */
    pthread_mutex_t mu;
    int n_methods;
    char *method_names[CHANNEL_METHODS];
    void *method_handles[CHANNEL_METHODS];
};

/* The channel's registered handle for a method, registering it on first use; NULL when
 * the table is full (the call then goes unregistered). */
static void *channel_method(fl_rpc_channel_t *c, const char *method) {
    void *h = NULL;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_methods; i++)
        if (strcmp(c->method_names[i], method) == 0) {
            h = c->method_handles[i];
            break;
        }
    if (!h && c->n_methods < CHANNEL_METHODS) {
        char *name = strdup(method);
        if (name) {
            h = grpc_channel_register_call(c->ch, name, NULL, NULL);
            c->method_names[c->n_methods] = name;
            c->method_handles[c->n_methods++] = h;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return h;
}

void fl_rpc_buf_free(fl_rpc_buf_t *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

void fl_rpc_segs_free(fl_rpc_segs_t *s) {
    if (!s) return;
    grpc_slice *sl = s->priv;
    for (size_t k = 0; k < s->n; k++) grpc_slice_unref(sl[k]);
    free(sl);
    free(s->seg);
    memset(s, 0, sizeof *s);
}

fl_status fl_rpc_channel_create(const char *target, int max_message_bytes, fl_rpc_channel_t **out, fl_err_t *err) {
    *out = NULL;
    if (!target || !*target) return fl_err_set(err, FL_INVALID_ARGUMENT, "rpc channel: empty target address");
    fl_rpc_channel_t *c = calloc(1, sizeof *c);
    if (!c) return fl_err_set(err, FL_NO_MEMORY, "rpc channel: out of memory");
    c->target = strdup(target);
    c->max_msg = fl__rpc_effective_limit(max_message_bytes);
    pthread_mutex_init(&c->mu, NULL);
    fl__rpc_grpc_init();
    grpc_arg args[6 + FL__TRANSPORT_ARGS];
    memset(args, 0, sizeof args);
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = c->max_msg;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    /* Reconnect quickly when a service restarts (the default backoff grows to minutes). */
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    args[2].value.integer = 1000;
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
    args[3].value.integer = 100;
    /* Each channel its own connection (gRPC otherwise shares one per target process-wide),
     * so that channels used by different threads do not serialize on one HTTP/2 link. */
    args[4].type = GRPC_ARG_INTEGER;
    args[4].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
    args[4].value.integer = 1;
    size_t nargs = 5 + fl__rpc_transport_args(args + 5);
    grpc_channel_credentials *creds = fl__rpc_channel_creds(&c->sec);
    if (!creds) {
        fl_rpc_channel_destroy(c);
        return fl_err_set(err, FL_INVALID_ARGUMENT, "rpc channel: cannot make TLS credentials for '%s' from the CA set",
                          target);
    }
    /* A unix socket has no host name: its server's certificate is checked for localhost. */
    if (c->sec.secure && strncmp(target, "unix:", 5) == 0) {
        args[nargs].type = GRPC_ARG_STRING;
        args[nargs].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[nargs].value.string = "localhost";
        nargs++;
    }
    grpc_channel_args cargs = {nargs, args};
    c->ch = grpc_channel_create(target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    if (!c->ch || !c->target) {
        fl_rpc_channel_destroy(c);
        return fl_err_set(err, FL_INVALID_ARGUMENT, "rpc channel: cannot create a channel to '%s'", target);
    }
    *out = c;
    return FL_OK;
}

void fl_rpc_channel_destroy(fl_rpc_channel_t *c) {
    if (!c) return;
    if (c->ch) grpc_channel_destroy(c->ch);
    for (int i = 0; i < c->n_methods; i++) free(c->method_names[i]);
    pthread_mutex_destroy(&c->mu);
    free(c->target);
    free(c);
    grpc_shutdown();
}

const char *fl_rpc_channel_target(const fl_rpc_channel_t *c) {
    return c->target;
}

int fl_rpc_channel_wait_ready(fl_rpc_channel_t *c, int64_t timeout_ms) {
    gpr_timespec deadline = fl__rpc_deadline_from_ms(timeout_ms);
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(c->ch, 1);
    if (st == GRPC_CHANNEL_READY) return 1;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    for (;;) {
        grpc_channel_watch_connectivity_state(c->ch, st, deadline, cq, (void *)1);
        grpc_event ev = grpc_completion_queue_pluck(cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (!ev.success) break; /* the deadline passed with the state unchanged */
        st = grpc_channel_check_connectivity_state(c->ch, 1);
        if (st == GRPC_CHANNEL_READY || st == GRPC_CHANNEL_SHUTDOWN) break;
    }
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    return st == GRPC_CHANNEL_READY;
}

/* What a failed connection's message says about TLS, in words a user can act on: 1 with
 * the explanation in out, 0 when it says nothing about TLS. */
static int explain_tls(const channel_sec *cs, const char *text, char *out, size_t len) {
    if (cs->secure) {
        if (strstr(text, "certificate verify failed") || strstr(text, "CERTIFICATE_VERIFY_FAILED")) {
            snprintf(out, len,
                     "the TLS handshake failed: the server's certificate is not signed by the CA this process trusts "
                     "(%s); the server has another fleet's credentials (or this process has): give every role the "
                     "same run.tls_dir, made once by `fleet certs`",
                     cs->ca_file);
            return 1;
        }
        const char *peer = strstr(text, "Peer name ");
        if (peer) {
            char host[128] = "";
            sscanf(peer + 10, "%127s", host);
            snprintf(out, len,
                     "the TLS handshake failed: the server's certificate (%s of its run.tls_dir) is not valid for the "
                     "host name dialled, %s; make the credentials again with `fleet certs DIR --hosts %s,...` so that "
                     "they cover every host name and address the services bind",
                     cs->cert_file, host, host);
            return 1;
        }
        if (strstr(text, "wrong version number") || strstr(text, "packet length too long") ||
            strstr(text, "unknown protocol") || strstr(text, "http request") || strstr(text, "record layer failure")) {
            snprintf(out, len,
                     "the TLS handshake failed: the server speaks plaintext (it runs without run.tls_dir) while this "
                     "process uses TLS (CA %s): give every role the same run.tls_dir",
                     cs->ca_file);
            return 1;
        }
        if (strstr(text, "Handshake") || strstr(text, "handshake") || strstr(text, "SSL")) {
            snprintf(out, len,
                     "the TLS handshake failed: check that the server runs with the same run.tls_dir as this process "
                     "(CA %s)",
                     cs->ca_file);
            return 1;
        }
        return 0;
    }
    /* Only while connecting: a server that dies during a call closes its socket too. */
    if (strstr(text, "failed to connect") &&
        (strstr(text, "Socket closed") || strstr(text, "Connection reset") || strstr(text, "End of TCP stream"))) {
        snprintf(out, len,
                 "the server closed the connection at once: it likely uses TLS, and this process sent plaintext (it "
                 "has no run.tls_dir): give it the fleet's run.tls_dir");
        return 1;
    }
    return 0;
}

/* The last connection error of a channel that cannot connect: a call that does not wait
 * for the connection, to a method no server has (it has no effect if the connection
 * comes up meanwhile), with a short deadline. Its message into out. */
static void last_connect_error(fl_rpc_channel_t *ch, char *out, size_t len) {
    out[0] = '\0';
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_call *call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               grpc_slice_from_static_string("/fleet.Probe/Connect"), NULL,
                                               fl__rpc_deadline_from_ms(1000), NULL);
    grpc_metadata_array trailing;
    grpc_metadata_array_init(&trailing);
    grpc_status_code code = GRPC_STATUS_OK;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[2].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[2].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[2].data.recv_status_on_client.status = &code;
    ops[2].data.recv_status_on_client.status_details = &details;
    ops[2].data.recv_status_on_client.error_string = &error_string;
    if (grpc_call_start_batch(call, ops, 3, (void *)1, NULL) == GRPC_CALL_OK) {
        grpc_completion_queue_pluck(cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (code == GRPC_STATUS_UNAVAILABLE)
            snprintf(out, len, "%.*s", (int)GRPC_SLICE_LENGTH(details), (const char *)GRPC_SLICE_START_PTR(details));
    }
    gpr_free((void *)error_string);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

/* Builds the error of a finished call from its status. A connection that failed is
 * explained when the failure was about TLS; a call that waited for the connection until
 * its deadline asks the channel (ch; NULL = do not) for its last connection error. */
static fl_status call_status(const channel_sec *cs, fl_rpc_channel_t *ch, unsigned flags, const char *method,
                             grpc_status_code code, grpc_slice details, const char *error_string, fl_err_t *err) {
    if (code == GRPC_STATUS_OK) return FL_OK;
    fl_status st = fl_status_from_grpc((int)code);
    size_t n = GRPC_SLICE_LENGTH(details);
    char text[FL_ERR_MSG_MAX], why[FL_ERR_MSG_MAX];
    if (n)
        snprintf(text, sizeof text, "%.*s", (int)n, (const char *)GRPC_SLICE_START_PTR(details));
    else
        snprintf(text, sizeof text, "%s%s%s", fl_status_str(st), error_string ? " - " : "",
                 error_string ? error_string : "");
    if (code == GRPC_STATUS_UNAVAILABLE && explain_tls(cs, text, why, sizeof why))
        return fl_err_set(err, st, "%s: %s (%s)", method, why, text);
    if (ch && code == GRPC_STATUS_DEADLINE_EXCEEDED && (flags & FL_RPC_WAIT_FOR_READY) &&
        grpc_channel_check_connectivity_state(ch->ch, 0) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
        char last[FL_ERR_MSG_MAX];
        last_connect_error(ch, last, sizeof last);
        if (explain_tls(cs, last, why, sizeof why))
            return fl_err_set(err, st, "%s: %s while waiting for the server: %s (%s)", method, text, why, last);
    }
    return fl_err_set(err, st, "%s: %s", method, text);
}

/* Unary calls pluck on a completion queue owned by the calling thread, created on its
 * first call and destroyed when the thread exits (or at process exit for main). */
static pthread_key_t g_cq_key;
static pthread_once_t g_cq_once = PTHREAD_ONCE_INIT;

static void cq_destroy(void *p) {
    grpc_completion_queue *cq = p;
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

static void cq_key_init(void) {
    /* Per-thread queues outlive channels: hold gRPC initialised for the process. */
    fl__rpc_grpc_init();
    pthread_key_create(&g_cq_key, cq_destroy);
}

static grpc_completion_queue *thread_cq(void) {
    pthread_once(&g_cq_once, cq_key_init);
    grpc_completion_queue *cq = pthread_getspecific(g_cq_key);
    if (!cq) {
        cq = grpc_completion_queue_create_for_pluck(NULL);
        pthread_setspecific(g_cq_key, cq);
    }
    return cq;
}

/* Waits for event `tag` of call on cq. A stoppable call waits in short slices and is
 * cancelled (*cancelled set) once the process is asked to stop; the event then comes at
 * once. */
/* Waits for `tag` on the call's queue. A stoppable call is cancelled once the process is
 * asked to stop; with a wait hook (streams: fl_rpc_stream_on_wait), hook(ctx) is called
 * every 100 ms of waiting and the call cancelled when it returns nonzero. */
static grpc_event pluck_call(grpc_completion_queue *cq, void *tag, grpc_call *call, int stoppable, int *cancelled,
                             fl_rpc_wait_fn hook, void *ctx) {
    if (!stoppable && !hook) return grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    for (;;) {
        grpc_event ev = grpc_completion_queue_pluck(cq, tag, fl__rpc_deadline_from_ms(100), NULL);
        if (ev.type != GRPC_QUEUE_TIMEOUT) return ev;
        if (*cancelled) continue;
        if (stoppable && fl_stop_requested()) {
            *cancelled = 1;
            grpc_call_cancel_with_status(call, GRPC_STATUS_CANCELLED, "the process was asked to stop", NULL);
        } else if (hook && hook(ctx)) {
            *cancelled = 1;
            grpc_call_cancel_with_status(call, GRPC_STATUS_CANCELLED, "the caller stopped waiting", NULL);
        }
    }
}

static fl_status unary_bb(fl_rpc_channel_t *ch, const char *method, grpc_byte_buffer *send_bb, int64_t timeout_ms,
                          unsigned flags, grpc_byte_buffer **recv_bb, fl_err_t *err) {
    grpc_completion_queue *cq = thread_cq();
    void *reg = channel_method(ch, method);
    grpc_call *call =
        reg ? grpc_channel_create_registered_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, reg,
                                                  fl__rpc_deadline_from_ms(timeout_ms), NULL)
            : grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, grpc_slice_from_copied_string(method),
                                       NULL, fl__rpc_deadline_from_ms(timeout_ms), NULL);
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = (flags & FL_RPC_WAIT_FOR_READY) ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    grpc_metadata access_md;
    fl__rpc_access_metadata(&ch->sec, &ops[0], &access_md);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;
    fl_status st;
    grpc_call_error e = grpc_call_start_batch(call, ops, 6, (void *)1, NULL);
    if (e != GRPC_CALL_OK) {
        st = fl_err_set(err, FL_INTERNAL, "%s: cannot start call (%d)", method, (int)e);
    } else {
        int cancelled = 0;
        pluck_call(cq, (void *)1, call, (flags & FL_RPC_STOPPABLE) != 0, &cancelled, NULL, NULL);
        st = call_status(&ch->sec, ch, flags, method, code, details, error_string, err);
        if (st == FL_OK && !*recv_bb) st = fl_err_set(err, FL_INTERNAL, "%s: server sent no response message", method);
    }
    if (st != FL_OK && *recv_bb) {
        grpc_byte_buffer_destroy(*recv_bb);
        *recv_bb = NULL;
    }
    gpr_free((void *)error_string);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(call);
    return st;
}

/* Copies the response's slices straight into one malloc'd buffer (fl__rpc_read_all would first
 * gather them into a slice of its own: one more allocation and copy of the whole
 * message, which shows for MB-sized replies such as parameter fetches). */
static fl_status bb_to_buf(grpc_byte_buffer *bb, fl_rpc_buf_t *out, fl_err_t *err) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return fl_err_set(err, FL_DATA_LOSS, "rpc: unreadable response");
    size_t n = grpc_byte_buffer_length(r.buffer_out);
    out->data = malloc(n ? n : 1);
    if (!out->data) {
        grpc_byte_buffer_reader_destroy(&r);
        return fl_err_set(err, FL_NO_MEMORY, "rpc: out of memory for a %zu-byte response", n);
    }
    size_t at = 0;
    grpc_slice s;
    while (grpc_byte_buffer_reader_next(&r, &s)) {
        size_t k = GRPC_SLICE_LENGTH(s);
        if (k > n - at) k = n - at;
        memcpy(out->data + at, GRPC_SLICE_START_PTR(s), k);
        at += k;
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&r);
    out->len = at;
    return FL_OK;
}

/* Takes a reference to each of the response's slices (no copy of their bytes). */
static fl_status bb_to_segs(grpc_byte_buffer *bb, fl_rpc_segs_t *out, fl_err_t *err) {
    memset(out, 0, sizeof *out);
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return fl_err_set(err, FL_DATA_LOSS, "rpc: unreadable response");
    size_t cap = 0;
    grpc_slice s;
    fl_status st = FL_OK;
    while (grpc_byte_buffer_reader_next(&r, &s)) {
        if (out->n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            grpc_slice *sl = realloc(out->priv, ncap * sizeof *sl);
            fl_pb_seg_t *seg = sl ? realloc(out->seg, ncap * sizeof *seg) : NULL;
            if (sl) out->priv = sl;
            if (seg) out->seg = seg;
            if (!sl || !seg) {
                grpc_slice_unref(s);
                st = fl_err_set(err, FL_NO_MEMORY, "rpc: out of memory for a response's %zu segments", out->n);
                break;
            }
            cap = ncap;
        }
        ((grpc_slice *)out->priv)[out->n++] = s;
    }
    grpc_byte_buffer_reader_destroy(&r);
    if (st != FL_OK) {
        fl_rpc_segs_free(out);
        return st;
    }
    /* Only now that the slices stay put: a small slice holds its bytes inline, in the
     * grpc_slice itself. */
    grpc_slice *sl = out->priv;
    for (size_t k = 0; k < out->n; k++) {
        out->seg[k] = (fl_pb_seg_t){GRPC_SLICE_START_PTR(sl[k]), GRPC_SLICE_LENGTH(sl[k])};
        out->len += out->seg[k].len;
    }
    return FL_OK;
}

fl_status fl__rpc_segs_from_byte_buffer(void *bb, fl_rpc_segs_t *out, fl_err_t *err) {
    return bb_to_segs(bb, out, err);
}

static fl_status bb_to_pb(grpc_byte_buffer *bb, const char *method, const ProtobufCMessageDescriptor *desc,
                          ProtobufCMessage **out, fl_err_t *err) {
    grpc_slice s = fl__rpc_read_all(bb);
    *out = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    if (!*out) return fl_err_set(err, FL_DATA_LOSS, "%s: the response is not a valid %s message", method, desc->name);
    return FL_OK;
}

fl_status fl_rpc_unary(fl_rpc_channel_t *ch, const char *method, const void *req, size_t req_len, int64_t timeout_ms,
                       unsigned flags, fl_rpc_buf_t *resp, fl_err_t *err) {
    resp->data = NULL;
    resp->len = 0;
    grpc_byte_buffer *send_bb = fl__rpc_copy_bytes(req, req_len), *recv_bb = NULL;
    fl_status st = unary_bb(ch, method, send_bb, timeout_ms, flags, &recv_bb, err);
    grpc_byte_buffer_destroy(send_bb);
    if (st == FL_OK) st = bb_to_buf(recv_bb, resp, err);
    if (recv_bb) grpc_byte_buffer_destroy(recv_bb);
    return st;
}

fl_status fl_rpc_unary_segs(fl_rpc_channel_t *ch, const char *method, const void *req, size_t req_len,
                            int64_t timeout_ms, unsigned flags, fl_rpc_segs_t *resp, fl_err_t *err) {
    memset(resp, 0, sizeof *resp);
    grpc_byte_buffer *send_bb = fl__rpc_copy_bytes(req, req_len), *recv_bb = NULL;
    fl_status st = unary_bb(ch, method, send_bb, timeout_ms, flags, &recv_bb, err);
    grpc_byte_buffer_destroy(send_bb);
    if (st == FL_OK) st = bb_to_segs(recv_bb, resp, err);
    if (recv_bb) grpc_byte_buffer_destroy(recv_bb);
    return st;
}

fl_status fl_rpc_unary_pb(fl_rpc_channel_t *ch, const char *method, const ProtobufCMessage *req,
                          const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, int64_t timeout_ms,
                          unsigned flags, fl_err_t *err) {
    *resp = NULL;
    grpc_byte_buffer *send_bb = fl__rpc_pack_pb(req), *recv_bb = NULL;
    fl_status st = unary_bb(ch, method, send_bb, timeout_ms, flags, &recv_bb, err);
    grpc_byte_buffer_destroy(send_bb);
    if (st == FL_OK) st = bb_to_pb(recv_bb, method, resp_desc, resp, err);
    if (recv_bb) grpc_byte_buffer_destroy(recv_bb);
    return st;
}

/* Tags of a stream's pluck queue. */
#define TAG_S_SEND ((void *)1)
#define TAG_S_RECV ((void *)2)
#define TAG_S_CLOSE ((void *)3)

struct fl_rpc_stream {
    channel_sec sec; /* its channel's, for explaining failures */
    grpc_call *call;
    grpc_completion_queue *cq;
    char method[256];
    int send_pending;             /* TAG_S_SEND outstanding */
    grpc_byte_buffer *pending_bb; /* the message of that send */
    int dead;                     /* a send failed: the call is over */
    uint32_t write_flags;         /* GRPC_WRITE_BUFFER_HINT for buffered streams */
    grpc_metadata_array initial, trailing;
    grpc_byte_buffer *resp_bb;
    grpc_status_code code;
    grpc_slice details;
    const char *error_string;
    int stoppable;          /* FL_RPC_STOPPABLE: cancelled once a stop is requested */
    int cancelled;          /* ... which it was (or its wait hook asked) */
    fl_rpc_wait_fn on_wait; /* fl_rpc_stream_on_wait (may be NULL) */
    void *on_wait_ctx;
};

/* Waits for the stream's event `tag` (pluck_call: a stoppable stream's call is
 * cancelled once the process is asked to stop). */
static grpc_event stream_pluck(fl_rpc_stream_t *s, void *tag) {
    return pluck_call(s->cq, tag, s->call, s->stoppable, &s->cancelled, s->on_wait, s->on_wait_ctx);
}

static int stream_wait_send(fl_rpc_stream_t *s) {
    if (!s->send_pending) return 1;
    grpc_event ev = stream_pluck(s, TAG_S_SEND);
    s->send_pending = 0;
    if (s->pending_bb) {
        grpc_byte_buffer_destroy(s->pending_bb);
        s->pending_bb = NULL;
    }
    if (!ev.success) s->dead = 1;
    return ev.success;
}

static void stream_free(fl_rpc_stream_t *s) {
    gpr_free((void *)s->error_string);
    grpc_slice_unref(s->details);
    grpc_metadata_array_destroy(&s->initial);
    grpc_metadata_array_destroy(&s->trailing);
    if (s->resp_bb) grpc_byte_buffer_destroy(s->resp_bb);
    if (s->pending_bb) grpc_byte_buffer_destroy(s->pending_bb);
    grpc_call_unref(s->call);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_pluck(s->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->cq);
    free(s);
}

fl_status fl_rpc_stream_open(fl_rpc_channel_t *ch, const char *method, int64_t timeout_ms, unsigned flags,
                             fl_rpc_stream_t **out, fl_err_t *err) {
    *out = NULL;
    fl_rpc_stream_t *s = calloc(1, sizeof *s);
    if (!s) return fl_err_set(err, FL_NO_MEMORY, "%s: out of memory", method);
    snprintf(s->method, sizeof s->method, "%s", method);
    s->sec = ch->sec;
    s->write_flags = (flags & FL_RPC_BUFFERED) ? GRPC_WRITE_BUFFER_HINT : 0;
    s->stoppable = (flags & FL_RPC_STOPPABLE) != 0;
    s->cq = grpc_completion_queue_create_for_pluck(NULL);
    s->call =
        grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq, grpc_slice_from_copied_string(method),
                                 NULL, fl__rpc_deadline_from_ms(timeout_ms), NULL);
    grpc_metadata_array_init(&s->initial);
    grpc_metadata_array_init(&s->trailing);
    s->details = grpc_empty_slice();
    s->code = GRPC_STATUS_UNKNOWN;
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = (flags & FL_RPC_WAIT_FOR_READY) ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    grpc_metadata access_md;
    fl__rpc_access_metadata(&s->sec, &ops[0], &access_md);
    grpc_call_error e = grpc_call_start_batch(s->call, ops, 1, TAG_S_SEND, NULL);
    if (e != GRPC_CALL_OK) {
        stream_free(s);
        return fl_err_set(err, FL_INTERNAL, "%s: cannot start stream (%d)", method, (int)e);
    }
    s->send_pending = 1;
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[0].data.recv_initial_metadata.recv_initial_metadata = &s->initial;
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &s->resp_bb;
    ops[2].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[2].data.recv_status_on_client.trailing_metadata = &s->trailing;
    ops[2].data.recv_status_on_client.status = &s->code;
    ops[2].data.recv_status_on_client.status_details = &s->details;
    ops[2].data.recv_status_on_client.error_string = &s->error_string;
    e = grpc_call_start_batch(s->call, ops, 3, TAG_S_RECV, NULL);
    if (e != GRPC_CALL_OK) {
        grpc_call_cancel(s->call, NULL);
        stream_wait_send(s);
        stream_free(s);
        return fl_err_set(err, FL_INTERNAL, "%s: cannot start stream (%d)", method, (int)e);
    }
    *out = s;
    return FL_OK;
}

static fl_status stream_send_bb(fl_rpc_stream_t *s, grpc_byte_buffer *bb, fl_err_t *err) {
    if (!stream_wait_send(s) || s->dead) {
        grpc_byte_buffer_destroy(bb);
        return fl_err_set(err, FL_UNAVAILABLE, "%s: stream closed by the server (finish it for the status)", s->method);
    }
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.flags = s->write_flags;
    op.data.send_message.send_message = bb;
    grpc_call_error e = grpc_call_start_batch(s->call, &op, 1, TAG_S_SEND, NULL);
    if (e != GRPC_CALL_OK) {
        grpc_byte_buffer_destroy(bb);
        s->dead = 1;
        return fl_err_set(err, FL_INTERNAL, "%s: cannot send (%d)", s->method, (int)e);
    }
    s->pending_bb = bb;
    s->send_pending = 1;
    return FL_OK;
}

fl_status fl_rpc_stream_send(fl_rpc_stream_t *s, const void *msg, size_t len, fl_err_t *err) {
    return stream_send_bb(s, fl__rpc_copy_bytes(msg, len), err);
}

fl_status fl_rpc_stream_send_pb(fl_rpc_stream_t *s, const ProtobufCMessage *msg, fl_err_t *err) {
    return stream_send_bb(s, fl__rpc_pack_pb(msg), err);
}

/* Half-closes and waits for the call's status; leaves the response in s->resp_bb. */
static fl_status stream_close_wait(fl_rpc_stream_t *s, fl_err_t *err) {
    stream_wait_send(s);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    if (grpc_call_start_batch(s->call, &op, 1, TAG_S_CLOSE, NULL) == GRPC_CALL_OK) stream_pluck(s, TAG_S_CLOSE);
    stream_pluck(s, TAG_S_RECV);
    fl_status st = call_status(&s->sec, NULL, 0, s->method, s->code, s->details, s->error_string, err);
    if (st == FL_OK && !s->resp_bb) st = fl_err_set(err, FL_INTERNAL, "%s: server sent no response", s->method);
    return st;
}

fl_status fl_rpc_stream_finish(fl_rpc_stream_t *s, fl_rpc_buf_t *resp, fl_err_t *err) {
    if (resp) {
        resp->data = NULL;
        resp->len = 0;
    }
    fl_status st = stream_close_wait(s, err);
    if (st == FL_OK && resp) st = bb_to_buf(s->resp_bb, resp, err);
    stream_free(s);
    return st;
}

fl_status fl_rpc_stream_finish_pb(fl_rpc_stream_t *s, const ProtobufCMessageDescriptor *resp_desc,
                                  ProtobufCMessage **resp, fl_err_t *err) {
    *resp = NULL;
    fl_status st = stream_close_wait(s, err);
    if (st == FL_OK) st = bb_to_pb(s->resp_bb, s->method, resp_desc, resp, err);
    stream_free(s);
    return st;
}

void fl_rpc_stream_on_wait(fl_rpc_stream_t *s, fl_rpc_wait_fn fn, void *ctx) {
    s->on_wait = fn;
    s->on_wait_ctx = ctx;
}

void fl_rpc_stream_cancel(fl_rpc_stream_t *s) {
    if (!s) return;
    grpc_call_cancel(s->call, NULL);
    stream_wait_send(s);
    grpc_completion_queue_pluck(s->cq, TAG_S_RECV, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    stream_free(s);
}
