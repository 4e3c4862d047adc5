/* rpc_tls: the rpc layer's shared ground (see rpc.h; rpc_internal.h lists what the other
 * two files use): gRPC's start and transport settings, byte buffers, and security: the
 * process-wide TLS files and tokens, the servers' token check (token_check: an auth
 * metadata processor gRPC runs before a call reaches the queue, recording which token the
 * call carried) and the channels' token plugin (token_send: the token per method), and
 * the access token of plaintext servers and channels. Servers and channels copy what they
 * need when they are made, so fl_rpc_set_security never touches them. */
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
static void choose_poller(void) {
    setenv("GRPC_POLL_STRATEGY", "epoll1", 0);
}

void fl__rpc_grpc_init(void) {
    pthread_once(&g_init_once, choose_poller);
    grpc_init();
}

int fl__rpc_effective_limit(int max_message_bytes) {
    if (max_message_bytes == 0) return FL_RPC_DEFAULT_MAX_MESSAGE;
    return max_message_bytes;
}

gpr_timespec fl__rpc_deadline_from_ms(int64_t timeout_ms) {
    if (timeout_ms <= 0) return gpr_inf_future(GPR_CLOCK_REALTIME);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

/* Reads a whole byte buffer into one slice (caller unrefs). */
grpc_slice fl__rpc_read_all(grpc_byte_buffer *bb) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return s;
}

grpc_byte_buffer *fl__rpc_pack_pb(const ProtobufCMessage *msg) {
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

grpc_byte_buffer *fl__rpc_copy_bytes(const void *data, size_t len) {
    grpc_slice s = grpc_slice_malloc(len);
    if (len) memcpy(GRPC_SLICE_START_PTR(s), data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* Transport settings shared by servers and channels: large HTTP/2 frames and
 * flow-control windows so that MB-sized batches stream at memory speed on loopback.
 * Returns the number of args written (FL__TRANSPORT_ARGS). */
size_t fl__rpc_transport_args(grpc_arg *a) {
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

pthread_mutex_t fl__rpc_sec_mu = PTHREAD_MUTEX_INITIALIZER;
static sec_state *g_sec;
char *fl__rpc_access; /* the access token of plaintext servers and channels (rpc.h); under fl__rpc_sec_mu */

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

static char *dup_or_empty(const char *s) {
    return strdup(s ? s : "");
}

/* A token may only hold printable ASCII without spaces (it travels in an HTTP/2 header). */
static int token_ok(const char *t) {
    for (; *t; t++)
        if (*t <= ' ' || *t > '~') return 0;
    return 1;
}

fl_status fl_rpc_set_security(const fl_rpc_security_t *sec, fl_err_t *err) {
    sec_state *n = NULL;
    if (sec) {
        if (!sec->ca_pem || !sec->ca_pem[0] || !sec->cert_pem || !sec->cert_pem[0] || !sec->key_pem || !sec->key_pem[0])
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
    pthread_mutex_lock(&fl__rpc_sec_mu);
    sec_state *old = g_sec;
    g_sec = n;
    pthread_mutex_unlock(&fl__rpc_sec_mu);
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
    pthread_mutex_lock(&fl__rpc_sec_mu);
    char *old = fl__rpc_access;
    fl__rpc_access = n;
    pthread_mutex_unlock(&fl__rpc_sec_mu);
    free(old);
    return FL_OK;
}

int fl_rpc_secure(void) {
    pthread_mutex_lock(&fl__rpc_sec_mu);
    int on = g_sec != NULL;
    pthread_mutex_unlock(&fl__rpc_sec_mu);
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
int fl__rpc_token_equal(const char *given, size_t given_len, const char *secret) {
    size_t n = strlen(secret);
    unsigned diff = (unsigned)(given_len != n);
    for (size_t i = 0; i < given_len; i++) diff |= (unsigned char)given[i] ^ (unsigned char)secret[n ? i % n : 0];
    return diff == 0 && n > 0;
}

/* The "authorization" entry of md (n entries), or NULL; with it, *v and *vn get the token
 * after "Bearer " (case-insensitive), or NULL when the value is not a bearer token. */
const grpc_metadata *fl__rpc_bearer_of(const grpc_metadata *md, size_t n, const char **v, size_t *vn) {
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
    const grpc_metadata *auth = fl__rpc_bearer_of(md, num_md, &v, &n);
    if (!auth) {
        token_refuse(
            t, cb, user_data,
            "fleet: the call carries no token (expected 'authorization: Bearer <token>'; the client needs this "
            "fleet's run.tls_dir, whose token file it sends)");
        return;
    }
    if (!v) {
        token_refuse(
            t, cb, user_data,
            "fleet: the call's authorization is not a bearer token (expected 'authorization: Bearer <token>')");
        return;
    }
    int is_run = fl__rpc_token_equal(v, n, t->token);
    int is_learner = t->learner_token ? fl__rpc_token_equal(v, n, t->learner_token) : 0;
    if (!is_run && !is_learner) {
        token_refuse(
            t, cb, user_data,
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
const char *fl__rpc_sec_files(void) {
    static _Thread_local char buf[600];
    pthread_mutex_lock(&fl__rpc_sec_mu);
    if (g_sec)
        snprintf(buf, sizeof buf, "the certificate %.280s and the key %.280s",
                 g_sec->cert_file[0] ? g_sec->cert_file : "(PEM text)",
                 g_sec->key_file[0] ? g_sec->key_file : "(PEM text)");
    else
        snprintf(buf, sizeof buf, "no TLS set");
    pthread_mutex_unlock(&fl__rpc_sec_mu);
    return buf;
}

/* TLS server credentials with the token check from the current security (*secure = 1),
 * or plaintext ones when none is set; NULL on failure. */
grpc_server_credentials *fl__rpc_server_creds(int *secure) {
    *secure = 0;
    pthread_mutex_lock(&fl__rpc_sec_mu);
    grpc_server_credentials *creds = NULL;
    if (!g_sec) {
        pthread_mutex_unlock(&fl__rpc_sec_mu);
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
    pthread_mutex_unlock(&fl__rpc_sec_mu);
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

/* The initial metadata of a call on a channel with this security into md: the access
 * token's header, or nothing. The slices point into cs, which outlives the call. */
void fl__rpc_access_metadata(const channel_sec *cs, grpc_op *op, grpc_metadata *md) {
    if (!cs->access[0]) return;
    memset(md, 0, sizeof *md);
    md->key = grpc_slice_from_static_string("authorization");
    md->value = grpc_slice_from_static_string(cs->access);
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = md;
}

/* TLS channel credentials that send the token, from the current security (insecure ones
 * when none is set); NULL on failure. */
grpc_channel_credentials *fl__rpc_channel_creds(channel_sec *cs) {
    memset(cs, 0, sizeof *cs);
    pthread_mutex_lock(&fl__rpc_sec_mu);
    if (!g_sec) {
        if (fl__rpc_access &&
            snprintf(cs->access, sizeof cs->access, "Bearer %s", fl__rpc_access) >= (int)sizeof cs->access)
            cs->access[0] = '\0'; /* too long to send: the server then says the token is missing */
        pthread_mutex_unlock(&fl__rpc_sec_mu);
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
    pthread_mutex_unlock(&fl__rpc_sec_mu);
    if (!ssl) {
        if (t) token_send_destroy(t);
        return NULL;
    }
    grpc_metadata_credentials_plugin plugin = {token_send_get, NULL, token_send_destroy, t, "fleet-token"};
    grpc_call_credentials *call =
        grpc_metadata_credentials_create_from_plugin(plugin, GRPC_PRIVACY_AND_INTEGRITY, NULL);
    grpc_channel_credentials *both = call ? grpc_composite_channel_credentials_create(ssl, call, NULL) : NULL;
    grpc_channel_credentials_release(ssl);
    if (call) grpc_call_credentials_release(call);
    return both;
}
