/* rpc: gRPC core server and client wrappers (see rpc.h).
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

/* ------------------------------------------------------------ helpers ---- */

/* gRPC's polling engine is chosen from GRPC_POLL_STRATEGY when gRPC starts. fleet asks
 * for "epoll1" (one designated poller that hands work to the others), gRPC's own choice
 * on Linux. The "poll" engine (every thread that waits on a queue polls its own
 * sockets) makes 30-60% more small unary calls per second on 2 cores, but with it a
 * call on a channel whose other calls are held by the server (two Sample calls waiting
 * at the rate limiter) sometimes was never delivered until its deadline; whole fleets
 * ran within their run-to-run spread on either (docs/benchmarks.md). A value set by the
 * user wins. */
static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
static void choose_poller(void) { setenv("GRPC_POLL_STRATEGY", "epoll1", 0); }

static void fl_grpc_init(void) {
    pthread_once(&g_init_once, choose_poller);
    grpc_init();
}

static int effective_limit(int max_message_bytes) {
    if (max_message_bytes == 0) return FL_RPC_DEFAULT_MAX_MESSAGE;
    return max_message_bytes;
}

static gpr_timespec deadline_from_ms(int64_t timeout_ms) {
    if (timeout_ms <= 0) return gpr_inf_future(GPR_CLOCK_REALTIME);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

/* Reads a whole byte buffer into one slice (caller unrefs). */
static grpc_slice read_all(grpc_byte_buffer *bb) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return s;
}

static grpc_byte_buffer *pack_pb(const ProtobufCMessage *msg) {
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static grpc_byte_buffer *copy_bytes(const void *data, size_t len) {
    grpc_slice s = grpc_slice_malloc(len);
    if (len) memcpy(GRPC_SLICE_START_PTR(s), data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* Transport settings shared by servers and channels: large HTTP/2 frames and
 * flow-control windows so that MB-sized batches stream at memory speed on loopback.
 * Returns the number of args written (FL__TRANSPORT_ARGS). */
#define FL__TRANSPORT_ARGS 6
static size_t transport_args(grpc_arg *a) {
    memset(a, 0, FL__TRANSPORT_ARGS * sizeof *a);
    a[0].type = GRPC_ARG_INTEGER;
    a[0].key = GRPC_ARG_HTTP2_MAX_FRAME_SIZE;
    a[0].value.integer = (1 << 24) - 1;
    a[1].type = GRPC_ARG_INTEGER;
    a[1].key = GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES;
    a[1].value.integer = 64 << 20;
    a[2].type = GRPC_ARG_INTEGER;
    a[2].key = GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE;
    a[2].value.integer = 8 << 20;
    a[3].type = GRPC_ARG_INTEGER;
    a[3].key = "grpc.experimental.tcp_max_read_chunk_size";
    a[3].value.integer = 8 << 20;
    /* Features fleet does not use but every call would pay for: transparent retries
     * (which keep a copy of each sent message) and channelz bookkeeping. */
    a[4].type = GRPC_ARG_INTEGER;
    a[4].key = GRPC_ARG_ENABLE_RETRIES;
    a[4].value.integer = 0;
    a[5].type = GRPC_ARG_INTEGER;
    a[5].key = GRPC_ARG_ENABLE_CHANNELZ;
    a[5].value.integer = 0;
    return FL__TRANSPORT_ARGS;
}

/* ----------------------------------------------------------- security ---- */

/* The process-wide security (NULL = plaintext). Servers and channels copy what they need
 * when they are made, so a later change never touches them. */
typedef struct sec_state {
    char *ca, *cert, *key, *token, *learner_token;
    char **learner_methods;
    int n_learner_methods;
    char *ca_file, *cert_file, *key_file;
} sec_state;

static pthread_mutex_t g_sec_mu = PTHREAD_MUTEX_INITIALIZER;
static sec_state *g_sec;
static char *g_access; /* the access token of plaintext servers and channels (rpc.h); under g_sec_mu */

/* The auth-context property the token check adds: which credential the call carried. */
#define CRED_PROPERTY "fleet.credential"
#define CRED_RUN "run"
#define CRED_LEARNER "learner"

static void sec_free(sec_state *s) {
    if (!s) return;
    free(s->ca);
    free(s->cert);
    free(s->key);
    free(s->token);
    free(s->learner_token);
    for (int i = 0; i < s->n_learner_methods; i++) free(s->learner_methods[i]);
    free(s->learner_methods);
    free(s->ca_file);
    free(s->cert_file);
    free(s->key_file);
    free(s);
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

/* A token may only hold printable ASCII without spaces (it travels in an HTTP/2 header). */
static int token_ok(const char *t) {
    for (; *t; t++)
        if (*t <= ' ' || *t > '~') return 0;
    return 1;
}

fl_status fl_rpc_set_security(const fl_rpc_security_t *sec, fl_err_t *err) {
    sec_state *n = NULL;
    if (sec) {
        if (!sec->ca_pem || !sec->ca_pem[0] || !sec->cert_pem || !sec->cert_pem[0] || !sec->key_pem ||
            !sec->key_pem[0])
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "rpc security: the CA, the certificate and the key are all needed (PEM text)");
        if (!sec->token || !sec->token[0] || !token_ok(sec->token) ||
            (sec->learner_token && !token_ok(sec->learner_token)))
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "rpc security: a token is empty or holds characters other than printable ASCII "
                              "without spaces (expected the hex text `fleet certs` writes)");
        n = calloc(1, sizeof *n);
        if (!n) return fl_err_set(err, FL_NO_MEMORY, "rpc security: out of memory");
        n->ca = dup_or_empty(sec->ca_pem);
        n->cert = dup_or_empty(sec->cert_pem);
        n->key = dup_or_empty(sec->key_pem);
        n->token = dup_or_empty(sec->token);
        n->learner_token = sec->learner_token && sec->learner_token[0] ? strdup(sec->learner_token) : NULL;
        n->ca_file = dup_or_empty(sec->ca_file);
        n->cert_file = dup_or_empty(sec->cert_file);
        n->key_file = dup_or_empty(sec->key_file);
        int bad = !n->ca || !n->cert || !n->key || !n->token || !n->ca_file || !n->cert_file || !n->key_file ||
                  (sec->learner_token && sec->learner_token[0] && !n->learner_token);
        int k = 0;
        while (sec->learner_methods && sec->learner_methods[k]) k++;
        if (k) {
            n->learner_methods = calloc((size_t)k, sizeof *n->learner_methods);
            bad |= !n->learner_methods;
            for (int i = 0; i < k && n->learner_methods; i++) {
                n->learner_methods[i] = strdup(sec->learner_methods[i]);
                n->n_learner_methods++;
                bad |= !n->learner_methods[i];
            }
        }
        if (bad) {
            sec_free(n);
            return fl_err_set(err, FL_NO_MEMORY, "rpc security: out of memory");
        }
    }
    pthread_mutex_lock(&g_sec_mu);
    sec_state *old = g_sec;
    g_sec = n;
    pthread_mutex_unlock(&g_sec_mu);
    sec_free(old);
    return FL_OK;
}

fl_status fl_rpc_set_access_token(const char *token, fl_err_t *err) {
    char *n = NULL;
    if (token && token[0]) {
        if (!token_ok(token))
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "rpc access token: it holds characters other than printable ASCII without spaces "
                              "(expected the hex digits of the run folder's access.token)");
        if (!(n = strdup(token))) return fl_err_set(err, FL_NO_MEMORY, "rpc access token: out of memory");
    }
    pthread_mutex_lock(&g_sec_mu);
    char *old = g_access;
    g_access = n;
    pthread_mutex_unlock(&g_sec_mu);
    free(old);
    return FL_OK;
}

int fl_rpc_secure(void) {
    pthread_mutex_lock(&g_sec_mu);
    int on = g_sec != NULL;
    pthread_mutex_unlock(&g_sec_mu);
    return on;
}

int fl_rpc_addr_is_loopback(const char *addr) {
    if (!addr) return 0;
    if (strncmp(addr, "unix:", 5) == 0 || strncmp(addr, "unix-abstract:", 14) == 0) return 1;
    if (strncmp(addr, "ipv4:", 5) == 0 || strncmp(addr, "ipv6:", 5) == 0) addr += 5;
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (addr[0] == '[') {
        const char *end = strchr(addr, ']');
        if (!end || (size_t)(end - addr - 1) >= sizeof host) return 0;
        snprintf(host, sizeof host, "%.*s", (int)(end - addr - 1), addr + 1);
    } else if (colon && strchr(addr, ':') == colon) { /* one colon: host:port */
        if ((size_t)(colon - addr) >= sizeof host) return 0;
        snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
    } else { /* no port, or a bare IPv6 address */
        if (strlen(addr) >= sizeof host) return 0;
        snprintf(host, sizeof host, "%s", addr);
    }
    if (strcasecmp(host, "localhost") == 0) return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

/* Constant-time equality of a presented token and a secret: the time taken depends on
 * neither's contents, only on the presented length. */
static int token_equal(const char *given, size_t given_len, const char *secret) {
    size_t n = strlen(secret);
    unsigned diff = (unsigned)(given_len != n);
    for (size_t i = 0; i < given_len; i++) diff |= (unsigned char)given[i] ^ (unsigned char)secret[n ? i % n : 0];
    return diff == 0 && n > 0;
}

/* The "authorization" entry of md (n entries), or NULL; with it, *v and *vn get the token
 * after "Bearer " (case-insensitive), or NULL when the value is not a bearer token. */
static const grpc_metadata *bearer_of(const grpc_metadata *md, size_t n, const char **v, size_t *vn) {
    *v = NULL;
    *vn = 0;
    for (size_t i = 0; i < n; i++)
        if (grpc_slice_str_cmp(md[i].key, "authorization") == 0) {
            const char *t = (const char *)GRPC_SLICE_START_PTR(md[i].value);
            size_t tn = GRPC_SLICE_LENGTH(md[i].value);
            if (tn >= 7 && strncasecmp(t, "Bearer ", 7) == 0) {
                *v = t + 7;
                *vn = tn - 7;
            }
            return &md[i];
        }
    return NULL;
}

/* The servers' token check (a gRPC auth metadata processor): runs on a gRPC thread for
 * every call before the call reaches the server's queue. The state holds copies of the
 * tokens. */
typedef struct token_check {
    char *token, *learner_token;
    atomic_uint_fast64_t refused; /* calls refused here (logged sampled, as log_refusal does) */
} token_check;

static void token_check_destroy(void *state) {
    token_check *t = state;
    free(t->token);
    free(t->learner_token);
    free(t);
}

/* Ends a call in the token check with UNAUTHENTICATED and logs it (sampled: the first
 * ten, then every thousandth), as the server logs the refusals of its handlers. */
static void token_refuse(token_check *t, grpc_process_auth_metadata_done_cb cb, void *user_data, const char *why) {
    uint64_t n = atomic_fetch_add(&t->refused, 1) + 1;
    if (fl_log_sampled(n))
        FL_WARN("rpc: refused a call at the token check (UNAUTHENTICATED; %llu refused so far): %.300s",
                (unsigned long long)n, why);
    cb(user_data, NULL, 0, NULL, 0, GRPC_STATUS_UNAUTHENTICATED, why);
}

static void token_check_process(void *state, grpc_auth_context *ctx, const grpc_metadata *md, size_t num_md,
                                grpc_process_auth_metadata_done_cb cb, void *user_data) {
    token_check *t = state;
    const char *v;
    size_t n;
    const grpc_metadata *auth = bearer_of(md, num_md, &v, &n);
    if (!auth) {
        token_refuse(t, cb, user_data,
           "fleet: the call carries no token (expected 'authorization: Bearer <token>'; the client needs this "
           "fleet's run.tls_dir, whose token file it sends)");
        return;
    }
    if (!v) {
        token_refuse(t, cb, user_data,
           "fleet: the call's authorization is not a bearer token (expected 'authorization: Bearer <token>')");
        return;
    }
    int is_run = token_equal(v, n, t->token);
    int is_learner = t->learner_token ? token_equal(v, n, t->learner_token) : 0;
    if (!is_run && !is_learner) {
        token_refuse(t, cb, user_data,
           t->learner_token
               ? "fleet: the call's token is wrong (it is neither this fleet's run token nor its learner token: the "
                 "client has another fleet's credentials; give every role the same run.tls_dir)"
               : "fleet: the call's token is wrong (this service takes this fleet's run token, and the call's is "
                 "not it: the learner token, which only parameter servers take, or another fleet's credentials; "
                 "give every role the same run.tls_dir and send the run token here)");
        return;
    }
    grpc_auth_context_add_cstring_property(ctx, CRED_PROPERTY, is_learner ? CRED_LEARNER : CRED_RUN);
    /* The token is consumed: it goes no further than this check. */
    cb(user_data, auth, 1, NULL, 0, GRPC_STATUS_OK, NULL);
}

/* "the certificate fleet.pem and the key fleet.key" of the current security, for
 * messages (a thread-local buffer). */
static const char *sec_files(void) {
    static _Thread_local char buf[600];
    pthread_mutex_lock(&g_sec_mu);
    if (g_sec)
        snprintf(buf, sizeof buf, "the certificate %.280s and the key %.280s",
                 g_sec->cert_file[0] ? g_sec->cert_file : "(PEM text)", g_sec->key_file[0] ? g_sec->key_file : "(PEM text)");
    else
        snprintf(buf, sizeof buf, "no TLS set");
    pthread_mutex_unlock(&g_sec_mu);
    return buf;
}

/* TLS server credentials with the token check from the current security (*secure = 1),
 * or plaintext ones when none is set; NULL on failure. */
static grpc_server_credentials *server_creds(int *secure) {
    *secure = 0;
    pthread_mutex_lock(&g_sec_mu);
    grpc_server_credentials *creds = NULL;
    if (!g_sec) {
        pthread_mutex_unlock(&g_sec_mu);
        return grpc_insecure_server_credentials_create();
    }
    token_check *t = calloc(1, sizeof *t);
    if (t) {
        t->token = strdup(g_sec->token);
        t->learner_token = g_sec->learner_token ? strdup(g_sec->learner_token) : NULL;
    }
    if (t && t->token && (!g_sec->learner_token || t->learner_token)) {
        grpc_ssl_pem_key_cert_pair pair = {g_sec->key, g_sec->cert};
        creds = grpc_ssl_server_credentials_create_ex(NULL, &pair, 1, GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, NULL);
    }
    pthread_mutex_unlock(&g_sec_mu);
    if (!creds) {
        if (t) token_check_destroy(t);
        return NULL;
    }
    grpc_auth_metadata_processor p = {token_check_process, token_check_destroy, t};
    grpc_server_credentials_set_auth_metadata_processor(creds, p);
    *secure = 1;
    return creds;
}

/* The clients' token (a gRPC metadata credentials plugin): the learner token on the
 * learner methods when this process has it, the run token on every other call. */
typedef struct token_send {
    char *run_header, *learner_header; /* "Bearer <token>" */
    char **learner_methods;
    int n_learner_methods;
} token_send;

static void token_send_destroy(void *state) {
    token_send *t = state;
    free(t->run_header);
    free(t->learner_header);
    for (int i = 0; i < t->n_learner_methods; i++) free(t->learner_methods[i]);
    free(t->learner_methods);
    free(t);
}

/* 1 when "<service_url>/<method>" names a learner method ("https://host/fleet.X", "Y"
 * is "/fleet.X/Y"). */
static int is_learner_method(const token_send *t, const char *service_url, const char *method) {
    const char *svc = service_url ? strrchr(service_url, '/') : NULL;
    if (!svc || !method) return 0;
    size_t ns = strlen(svc), nm = strlen(method);
    for (int i = 0; i < t->n_learner_methods; i++) {
        const char *p = t->learner_methods[i];
        if (strncmp(p, svc, ns) == 0 && p[ns] == '/' && strcmp(p + ns + 1, method) == 0 && strlen(p) == ns + 1 + nm)
            return 1;
    }
    return 0;
}

static int token_send_get(void *state, grpc_auth_metadata_context context, grpc_credentials_plugin_metadata_cb cb,
                          void *user_data, grpc_metadata creds_md[GRPC_METADATA_CREDENTIALS_PLUGIN_SYNC_MAX],
                          size_t *num_creds_md, grpc_status_code *status, const char **error_details) {
    (void)cb;
    (void)user_data;
    const token_send *t = state;
    const char *h = t->learner_header && is_learner_method(t, context.service_url, context.method_name)
                        ? t->learner_header
                        : t->run_header;
    memset(&creds_md[0], 0, sizeof creds_md[0]);
    creds_md[0].key = grpc_slice_from_static_string("authorization");
    creds_md[0].value = grpc_slice_from_copied_string(h);
    *num_creds_md = 1;
    *status = GRPC_STATUS_OK;
    *error_details = NULL;
    return 1;
}

static char *bearer_header(const char *token) {
    size_t n = strlen(token) + 8;
    char *h = malloc(n);
    if (h) snprintf(h, n, "Bearer %s", token);
    return h;
}

/* What a channel keeps of the security it was made with, for its error messages. */
typedef struct channel_sec {
    int secure;
    char ca_file[256], cert_file[256];
    char access[128]; /* plaintext: "Bearer <access token>" sent on every call, or "" */
} channel_sec;

/* The initial metadata of a call on a channel with this security into md: the access
 * token's header, or nothing. The slices point into cs, which outlives the call. */
static void access_metadata(const channel_sec *cs, grpc_op *op, grpc_metadata *md) {
    if (!cs->access[0]) return;
    memset(md, 0, sizeof *md);
    md->key = grpc_slice_from_static_string("authorization");
    md->value = grpc_slice_from_static_string(cs->access);
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = md;
}

/* TLS channel credentials that send the token, from the current security (insecure ones
 * when none is set); NULL on failure. */
static grpc_channel_credentials *channel_creds(channel_sec *cs) {
    memset(cs, 0, sizeof *cs);
    pthread_mutex_lock(&g_sec_mu);
    if (!g_sec) {
        if (g_access && snprintf(cs->access, sizeof cs->access, "Bearer %s", g_access) >= (int)sizeof cs->access)
            cs->access[0] = '\0'; /* too long to send: the server then says the token is missing */
        pthread_mutex_unlock(&g_sec_mu);
        return grpc_insecure_credentials_create();
    }
    token_send *t = calloc(1, sizeof *t);
    int bad = !t;
    if (t) {
        t->run_header = bearer_header(g_sec->token);
        t->learner_header = g_sec->learner_token ? bearer_header(g_sec->learner_token) : NULL;
        bad = !t->run_header || (g_sec->learner_token && !t->learner_header);
        if (g_sec->n_learner_methods) {
            t->learner_methods = calloc((size_t)g_sec->n_learner_methods, sizeof *t->learner_methods);
            bad |= !t->learner_methods;
            for (int i = 0; t->learner_methods && i < g_sec->n_learner_methods; i++) {
                t->learner_methods[i] = strdup(g_sec->learner_methods[i]);
                t->n_learner_methods++;
                bad |= !t->learner_methods[i];
            }
        }
    }
    grpc_channel_credentials *ssl = bad ? NULL : grpc_ssl_credentials_create(g_sec->ca, NULL, NULL, NULL);
    cs->secure = 1;
    snprintf(cs->ca_file, sizeof cs->ca_file, "%s", g_sec->ca_file[0] ? g_sec->ca_file : "the configured CA");
    snprintf(cs->cert_file, sizeof cs->cert_file, "%s", g_sec->cert_file[0] ? g_sec->cert_file : "fleet.pem");
    pthread_mutex_unlock(&g_sec_mu);
    if (!ssl) {
        if (t) token_send_destroy(t);
        return NULL;
    }
    grpc_metadata_credentials_plugin plugin = {token_send_get, NULL, token_send_destroy, t, "fleet-token"};
    grpc_call_credentials *call = grpc_metadata_credentials_create_from_plugin(plugin, GRPC_PRIVACY_AND_INTEGRITY, NULL);
    grpc_channel_credentials *both = call ? grpc_composite_channel_credentials_create(ssl, call, NULL) : NULL;
    grpc_channel_credentials_release(ssl);
    if (call) grpc_call_credentials_release(call);
    return both;
}

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
    int secure;          /* bound with TLS and the token check */
    char *access;        /* bound in plaintext while an access token was set: the token calls need */
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
    int max_conns_per_peer;       /* opts.max_connections_per_peer, resolved (<= 0: none) */
    int max_conns_other_user;     /* opts.max_connections_other_user as given */
    int guard_ports[4];           /* TCP ports bound, guarded once the server starts */
    int guard_loopback[4];        /* ... and whether each was bound to loopback */
    int n_guard_ports;
    fl_connguard_t *guards[4];
};

static void idle_list_remove(call_ctx *c) {
    fl_rpc_server_t *s = c->srv;
    pthread_mutex_lock(&s->idle_mu);
    if (c->on_idle_list) {
        if (c->idle_prev) c->idle_prev->idle_next = c->idle_next;
        else s->idle_head = c->idle_next;
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
static void post_request(fl_rpc_server_t *s) { post_request_for(s, NULL); }

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
    const grpc_metadata *auth = bearer_of(c->md.metadata, c->md.count, &v, &n);
    if (v && token_equal(v, n, c->srv->access)) return 1;
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
            learner |= p->value_length == sizeof CRED_LEARNER - 1 && memcmp(p->value, CRED_LEARNER, p->value_length) == 0;
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
        grpc_slice req = read_all(bb);
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
    grpc_slice msg = read_all(bb);
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
static double limit_of(double v, double def) { return v == 0 ? def : v; }

static int ms_of(double sec) { return sec * 1e3 >= 2147483647.0 ? 2147483647 : (int)(sec * 1e3); }

static size_t limit_args(const fl_rpc_server_opts_t *o, struct fl_rpc_server *s, grpc_arg *a) {
    size_t n = 0;
    double idle = limit_of(o->connection_idle_s, FL_RPC_DEFAULT_CONNECTION_IDLE_S);
    double ka = limit_of(o->keepalive_s, FL_RPC_DEFAULT_KEEPALIVE_S);
    double ka_to = limit_of(o->keepalive_timeout_s, FL_RPC_DEFAULT_KEEPALIVE_TIMEOUT_S);
    int streams = o->max_streams_per_connection == 0 ? FL_RPC_DEFAULT_MAX_STREAMS_PER_CONNECTION
                                                     : o->max_streams_per_connection;
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
    s->max_msg = effective_limit(o.max_message_bytes);
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
    fl_grpc_init();
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
    nargs += transport_args(args + nargs);
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

fl_status fl_rpc_server_bind(fl_rpc_server_t *s, const char *addr, int *port, fl_err_t *err) {
    if (port) *port = 0;
    if (s->started) return fl_err_set(err, FL_FAILED_PRECONDITION, "rpc server: bind %s after start", addr);
    int is_unix = strncmp(addr, "unix:", 5) == 0;
    if (is_unix) {
        const char *path = addr + 5;
        if (strncmp(path, "//", 2) == 0) path += 2;
        unlink(path); /* a stale socket file from an earlier run */
    }
    int secure = 0;
    grpc_server_credentials *creds = server_creds(&secure);
    if (!creds)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "rpc server: cannot make TLS credentials for '%s' from the certificate and key set", addr);
    int p = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (p == 0 && secure)
        return fl_err_set(err, FL_UNAVAILABLE,
                          "rpc server: cannot bind '%s' with TLS (expected host:port with a free port, or unix:/path; "
                          "and a certificate and private key that belong together: %s)",
                          addr, sec_files());
    if (p == 0)
        return fl_err_set(err, FL_UNAVAILABLE,
                          "rpc server: cannot bind '%s' (expected host:port with a free port, or unix:/path)", addr);
    s->secure |= secure;
    if (!secure && !s->access) {
        pthread_mutex_lock(&g_sec_mu);
        s->access = g_access ? strdup(g_access) : NULL;
        int lost = g_access && !s->access;
        pthread_mutex_unlock(&g_sec_mu);
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
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
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

fl_status fl_rpc_channel_create(const char *target, int max_message_bytes, fl_rpc_channel_t **out,
                                fl_err_t *err) {
    *out = NULL;
    if (!target || !*target) return fl_err_set(err, FL_INVALID_ARGUMENT, "rpc channel: empty target address");
    fl_rpc_channel_t *c = calloc(1, sizeof *c);
    if (!c) return fl_err_set(err, FL_NO_MEMORY, "rpc channel: out of memory");
    c->target = strdup(target);
    c->max_msg = effective_limit(max_message_bytes);
    pthread_mutex_init(&c->mu, NULL);
    fl_grpc_init();
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
    size_t nargs = 5 + transport_args(args + 5);
    grpc_channel_credentials *creds = channel_creds(&c->sec);
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

const char *fl_rpc_channel_target(const fl_rpc_channel_t *c) { return c->target; }

int fl_rpc_channel_wait_ready(fl_rpc_channel_t *c, int64_t timeout_ms) {
    gpr_timespec deadline = deadline_from_ms(timeout_ms);
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
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
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
                                               deadline_from_ms(1000), NULL);
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
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
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
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

static void cq_key_init(void) {
    /* Per-thread queues outlive channels: hold gRPC initialised for the process. */
    fl_grpc_init();
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
        grpc_event ev = grpc_completion_queue_pluck(cq, tag, deadline_from_ms(100), NULL);
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
                                                  deadline_from_ms(timeout_ms), NULL)
            : grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, grpc_slice_from_copied_string(method),
                                       NULL, deadline_from_ms(timeout_ms), NULL);
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
    access_metadata(&ch->sec, &ops[0], &access_md);
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

/* Copies the response's slices straight into one malloc'd buffer (read_all would first
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
    grpc_slice s = read_all(bb);
    *out = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    if (!*out)
        return fl_err_set(err, FL_DATA_LOSS, "%s: the response is not a valid %s message", method, desc->name);
    return FL_OK;
}

fl_status fl_rpc_unary(fl_rpc_channel_t *ch, const char *method, const void *req, size_t req_len,
                       int64_t timeout_ms, unsigned flags, fl_rpc_buf_t *resp, fl_err_t *err) {
    resp->data = NULL;
    resp->len = 0;
    grpc_byte_buffer *send_bb = copy_bytes(req, req_len), *recv_bb = NULL;
    fl_status st = unary_bb(ch, method, send_bb, timeout_ms, flags, &recv_bb, err);
    grpc_byte_buffer_destroy(send_bb);
    if (st == FL_OK) st = bb_to_buf(recv_bb, resp, err);
    if (recv_bb) grpc_byte_buffer_destroy(recv_bb);
    return st;
}

fl_status fl_rpc_unary_segs(fl_rpc_channel_t *ch, const char *method, const void *req, size_t req_len,
                            int64_t timeout_ms, unsigned flags, fl_rpc_segs_t *resp, fl_err_t *err) {
    memset(resp, 0, sizeof *resp);
    grpc_byte_buffer *send_bb = copy_bytes(req, req_len), *recv_bb = NULL;
    fl_status st = unary_bb(ch, method, send_bb, timeout_ms, flags, &recv_bb, err);
    grpc_byte_buffer_destroy(send_bb);
    if (st == FL_OK) st = bb_to_segs(recv_bb, resp, err);
    if (recv_bb) grpc_byte_buffer_destroy(recv_bb);
    return st;
}

fl_status fl_rpc_unary_pb(fl_rpc_channel_t *ch, const char *method, const ProtobufCMessage *req,
                          const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                          int64_t timeout_ms, unsigned flags, fl_err_t *err) {
    *resp = NULL;
    grpc_byte_buffer *send_bb = pack_pb(req), *recv_bb = NULL;
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
    int send_pending;              /* TAG_S_SEND outstanding */
    grpc_byte_buffer *pending_bb;  /* the message of that send */
    int dead;                      /* a send failed: the call is over */
    uint32_t write_flags;          /* GRPC_WRITE_BUFFER_HINT for buffered streams */
    grpc_metadata_array initial, trailing;
    grpc_byte_buffer *resp_bb;
    grpc_status_code code;
    grpc_slice details;
    const char *error_string;
    int stoppable;                 /* FL_RPC_STOPPABLE: cancelled once a stop is requested */
    int cancelled;                 /* ... which it was (or its wait hook asked) */
    fl_rpc_wait_fn on_wait;        /* fl_rpc_stream_on_wait (may be NULL) */
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
    while (grpc_completion_queue_pluck(s->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
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
    s->call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq,
                                       grpc_slice_from_copied_string(method), NULL, deadline_from_ms(timeout_ms),
                                       NULL);
    grpc_metadata_array_init(&s->initial);
    grpc_metadata_array_init(&s->trailing);
    s->details = grpc_empty_slice();
    s->code = GRPC_STATUS_UNKNOWN;
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = (flags & FL_RPC_WAIT_FOR_READY) ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    grpc_metadata access_md;
    access_metadata(&s->sec, &ops[0], &access_md);
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
        return fl_err_set(err, FL_UNAVAILABLE, "%s: stream closed by the server (finish it for the status)",
                          s->method);
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
    return stream_send_bb(s, copy_bytes(msg, len), err);
}

fl_status fl_rpc_stream_send_pb(fl_rpc_stream_t *s, const ProtobufCMessage *msg, fl_err_t *err) {
    return stream_send_bb(s, pack_pb(msg), err);
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
