/* Tests of common/rpc's security: real gRPC servers with TLS and tokens on loopback TCP
 * (port 0) and a unix socket, with credentials of the shape `fleet certs` makes, made by
 * tests/cert_util.h in a temporary folder. The right token is served; a wrong or missing
 * one is UNAUTHENTICATED; a learner-only method refuses the run token with
 * PERMISSION_DENIED and serves the learner token; a plaintext client, a client trusting
 * another CA, a TLS client of a plaintext server and a host name the certificate does not
 * cover fail with messages that say so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rpc.h"
#include "tests/cert_util.h"
#include "tests/proc_util.h"
#include "tests/rpc_test_util.h"

static char g_tmp[64], g_dir[128], g_other[128], g_sock[160];
static char *g_ca, *g_cert, *g_key, *g_other_ca;
static const char *const LEARNER_METHODS[] = {"/t.Svc/Secret", NULL};
#define RUN_TOKEN "run-token-0123456789abcdef"
#define LEARNER_TOKEN "learner-token-fedcba9876543210"

static fl_status echo(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    (void)user;
    return fl_rpc_reply_bytes(reply, req, len);
}

static void *count_open(void *user) {
    (void)user;
    return calloc(1, sizeof(uint64_t));
}

static fl_status count_message(void *user, void *state, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    (void)user;
    (void)msg;
    (void)reply;
    *(uint64_t *)state += len;
    return FL_OK;
}

static fl_status count_close(void *user, void *state, fl_status why, fl_rpc_reply_t *reply) {
    (void)user;
    fl_status st = FL_OK;
    if (why == FL_OK) st = fl_rpc_reply_bytes(reply, state, sizeof(uint64_t));
    free(state);
    return st;
}

static char *read_in(const char *dir, const char *name) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *t = read_file(path);
    assert_non_null(t);
    return t;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-rpctls-XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    snprintf(g_dir, sizeof g_dir, "%s/creds", g_tmp);
    snprintf(g_other, sizeof g_other, "%s/other", g_tmp);
    snprintf(g_sock, sizeof g_sock, "unix:%s/s.sock", g_tmp);
    char why[1024];
    if (cert_util_make(g_dir, 2, why, sizeof why) != 0 || cert_util_make(g_other, 2, why, sizeof why) != 0) {
        fprintf(stderr, "cannot make credentials: %s\n", why);
        return -1;
    }
    g_ca = read_in(g_dir, CERT_UTIL_CA);
    g_cert = read_in(g_dir, CERT_UTIL_CERT);
    g_key = read_in(g_dir, CERT_UTIL_KEY);
    g_other_ca = read_in(g_other, CERT_UTIL_CA);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    fl_err_t err;
    fl_rpc_set_security(NULL, &err);
    free(g_ca);
    free(g_cert);
    free(g_key);
    free(g_other_ca);
    rm_rf(g_tmp);
    return 0;
}

/* Sets a security with the given CA and tokens (learner_token may be NULL). */
static void secure(const char *ca, const char *token, const char *learner_token) {
    fl_rpc_security_t sec = {.ca_pem = ca,
                             .cert_pem = g_cert,
                             .key_pem = g_key,
                             .token = token,
                             .learner_token = learner_token,
                             .learner_methods = LEARNER_METHODS,
                             .ca_file = ca == g_other_ca ? "other/ca.pem" : "creds/ca.pem",
                             .cert_file = "creds/fleet.pem",
                             .key_file = "creds/fleet.key"};
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_set_security(&sec, &err), FL_OK);
}

static void plaintext(void) {
    fl_err_t err;
    assert_int_equal(fl_rpc_set_security(NULL, &err), FL_OK);
    assert_false(fl_rpc_secure());
}

/* A server of /t.Svc/Echo, /t.Svc/Secret (learner-only) and /t.Svc/Count (a stream) on
 * host:0, with whatever security is set; addr gets "host:port". */
static fl_rpc_server_t *serve(const char *host, char *addr, size_t len, int also_unix) {
    fl_rpc_server_t *s = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_server_create(NULL, &s, &err), FL_OK);
    assert_int_equal(fl_rpc_server_add_unary(s, "/t.Svc/Echo", echo, NULL), FL_OK);
    assert_int_equal(fl_rpc_server_add_unary(s, "/t.Svc/Secret", echo, NULL), FL_OK);
    fl_rpc_stream_handler_t h = {count_open, count_message, count_close};
    assert_int_equal(fl_rpc_server_add_stream(s, "/t.Svc/Count", &h, NULL), FL_OK);
    assert_int_equal(fl_rpc_server_learner_only(s, "/t.Svc/Secret"), FL_OK);
    assert_int_equal(fl_rpc_server_learner_only(s, "/t.Svc/Nothing"), FL_NOT_FOUND);
    char bind[64];
    snprintf(bind, sizeof bind, "%s:0", host);
    int port = 0;
    assert_int_equal(fl_rpc_server_bind(s, bind, &port, &err), FL_OK);
    if (also_unix) assert_int_equal(fl_rpc_server_bind(s, g_sock, NULL, &err), FL_OK);
    assert_int_equal(fl_rpc_server_start(s, &err), FL_OK);
    snprintf(addr, len, "%s:%d", host, port);
    return s;
}

/* One unary call with the current security; the status, err filled. */
static fl_status call(const char *addr, const char *method, unsigned flags, int64_t timeout_ms, fl_err_t *err) {
    fl_rpc_channel_t *ch = NULL;
    fl_err_init(err);
    assert_int_equal(fl_rpc_channel_create(addr, 0, &ch, err), FL_OK);
    fl_rpc_buf_t resp = {0};
    fl_status st = fl_rpc_unary(ch, method, "hello", 5, timeout_ms, flags, &resp, err);
    if (st == FL_OK) {
        assert_int_equal(resp.len, 5);
        assert_memory_equal(resp.data, "hello", 5);
    }
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    return st;
}

static void assert_has(const char *text, const char *part) {
    if (!strstr(text, part)) fail_msg("expected '%s' in: %s", part, text);
}

static void test_right_token_is_served(void **state) {
    (void)state;
    secure(g_ca, RUN_TOKEN, NULL);
    char addr[64];
    fl_rpc_server_t *s = serve("127.0.0.1", addr, sizeof addr, 1);
    fl_err_t err;
    assert_int_equal(call(addr, "/t.Svc/Echo", 0, 5000, &err), FL_OK);
    char local[64];
    snprintf(local, sizeof local, "localhost%s", strchr(addr, ':'));
    assert_int_equal(call(local, "/t.Svc/Echo", 0, 5000, &err), FL_OK);
    assert_int_equal(call(g_sock, "/t.Svc/Echo", 0, 5000, &err), FL_OK);
    /* A stream carries the token too. */
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(addr, 0, &ch, &err), FL_OK);
    check_segs_round_trips(ch, "/t.Svc/Echo"); /* responses left in the slices TLS hands over */
    fl_rpc_stream_t *st = NULL;
    assert_int_equal(fl_rpc_stream_open(ch, "/t.Svc/Count", 5000, 0, &st, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_send(st, "abc", 3, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_send(st, "de", 2, &err), FL_OK);
    fl_rpc_buf_t resp = {0};
    assert_int_equal(fl_rpc_stream_finish(st, &resp, &err), FL_OK);
    uint64_t n = 0;
    assert_int_equal(resp.len, sizeof n);
    memcpy(&n, resp.data, sizeof n);
    assert_int_equal(n, 5);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(s);
    plaintext();
}

static void test_wrong_token_is_unauthenticated(void **state) {
    (void)state;
    secure(g_ca, RUN_TOKEN, NULL);
    char addr[64];
    fl_rpc_server_t *s = serve("127.0.0.1", addr, sizeof addr, 0);
    secure(g_ca, "not-the-run-token", NULL);
    fl_err_t err;
    assert_int_equal(call(addr, "/t.Svc/Echo", 0, 5000, &err), FL_UNAUTHENTICATED);
    assert_has(err.msg, "token is wrong");
    /* a service without learner-only methods says which token it takes, not that the call's
     * is neither of two */
    assert_has(err.msg, "this service takes this fleet's run token");
    assert_null(strstr(err.msg, "neither"));
    /* The server never echoes a token. */
    assert_null(strstr(err.msg, "not-the-run-token"));
    assert_null(strstr(err.msg, RUN_TOKEN));
    /* Streams are refused the same way. */
    fl_rpc_channel_t *ch = NULL;
    assert_int_equal(fl_rpc_channel_create(addr, 0, &ch, &err), FL_OK);
    fl_rpc_stream_t *st = NULL;
    assert_int_equal(fl_rpc_stream_open(ch, "/t.Svc/Count", 5000, 0, &st, &err), FL_OK);
    fl_rpc_stream_send(st, "abc", 3, &err);
    fl_rpc_buf_t resp = {0};
    assert_int_equal(fl_rpc_stream_finish(st, &resp, &err), FL_UNAUTHENTICATED);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(s);
    plaintext();
}

/* A TLS call without call credentials, through gRPC core itself: the status and its
 * message. */
static grpc_status_code call_without_token(const char *addr, char *msg, size_t len) {
    grpc_init();
    grpc_channel_credentials *creds = grpc_ssl_credentials_create(g_ca, NULL, NULL, NULL);
    grpc_channel *ch = grpc_channel_create(addr, creds, NULL);
    grpc_channel_credentials_release(creds);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_seconds(10, GPR_TIMESPAN));
    grpc_call *c = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                            grpc_slice_from_static_string("/t.Svc/Echo"), NULL, deadline, NULL);
    grpc_slice payload = grpc_slice_from_static_string("hello");
    grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&payload, 1), *recv = NULL;
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_status_code code = GRPC_STATUS_OK;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;
    assert_int_equal(grpc_call_start_batch(c, ops, 6, (void *)1, NULL), GRPC_CALL_OK);
    grpc_completion_queue_pluck(cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    snprintf(msg, len, "%.*s", (int)GRPC_SLICE_LENGTH(details), (const char *)GRPC_SLICE_START_PTR(details));
    grpc_slice_unref(details);
    if (recv) grpc_byte_buffer_destroy(recv);
    grpc_byte_buffer_destroy(send);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(c);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    grpc_channel_destroy(ch);
    grpc_shutdown();
    return code;
}

static void test_missing_token_is_unauthenticated(void **state) {
    (void)state;
    secure(g_ca, RUN_TOKEN, NULL);
    char addr[64];
    fl_rpc_server_t *s = serve("127.0.0.1", addr, sizeof addr, 0);
    char msg[512];
    assert_int_equal(call_without_token(addr, msg, sizeof msg), GRPC_STATUS_UNAUTHENTICATED);
    assert_has(msg, "carries no token");
    fl_rpc_server_destroy(s);
    plaintext();
}

static void test_learner_only_method(void **state) {
    (void)state;
    secure(g_ca, RUN_TOKEN, LEARNER_TOKEN);
    char addr[64];
    fl_rpc_server_t *s = serve("127.0.0.1", addr, sizeof addr, 0);
    fl_err_t err;
    /* The learner's client: the learner token on the learner method, the run token elsewhere. */
    assert_int_equal(call(addr, "/t.Svc/Secret", 0, 5000, &err), FL_OK);
    assert_int_equal(call(addr, "/t.Svc/Echo", 0, 5000, &err), FL_OK);
    /* Another role's client (the run token only) is refused on the learner method. */
    secure(g_ca, RUN_TOKEN, NULL);
    assert_int_equal(call(addr, "/t.Svc/Secret", 0, 5000, &err), FL_PERMISSION_DENIED);
    assert_has(err.msg, "/t.Svc/Secret is learner-only");
    assert_has(err.msg, "learner token");
    assert_null(strstr(err.msg, RUN_TOKEN));
    assert_int_equal(call(addr, "/t.Svc/Echo", 0, 5000, &err), FL_OK);
    /* A learner token that is not this fleet's is no token at all. */
    secure(g_ca, RUN_TOKEN, "some-other-learner-token");
    assert_int_equal(call(addr, "/t.Svc/Secret", 0, 5000, &err), FL_UNAUTHENTICATED);
    assert_has(err.msg, "neither this fleet's run token nor its learner token");
    fl_rpc_server_destroy(s);
    /* A server without the learner token serves the method to no one. */
    secure(g_ca, RUN_TOKEN, NULL);
    s = serve("127.0.0.1", addr, sizeof addr, 0);
    secure(g_ca, RUN_TOKEN, LEARNER_TOKEN);
    assert_int_equal(call(addr, "/t.Svc/Secret", 0, 5000, &err), FL_UNAUTHENTICATED);
    assert_has(err.msg, "the learner token, which only parameter servers take");
    fl_rpc_server_destroy(s);
    /* Without TLS nothing is checked, as before. */
    plaintext();
    s = serve("127.0.0.1", addr, sizeof addr, 0);
    assert_int_equal(call(addr, "/t.Svc/Secret", 0, 5000, &err), FL_OK);
    fl_rpc_server_destroy(s);
}

static void test_plaintext_client_of_tls_server(void **state) {
    (void)state;
    secure(g_ca, RUN_TOKEN, NULL);
    char addr[64];
    fl_rpc_server_t *s = serve("127.0.0.1", addr, sizeof addr, 0);
    plaintext();
    fl_err_t err;
    assert_int_equal(call(addr, "/t.Svc/Echo", 0, 5000, &err), FL_UNAVAILABLE);
    assert_has(err.msg, "this process sent plaintext");
    assert_has(err.msg, "run.tls_dir");
    /* A call that waits for the server says the same when its deadline passes. */
    assert_int_equal(call(addr, "/t.Svc/Echo", FL_RPC_WAIT_FOR_READY, 1500, &err), FL_DEADLINE_EXCEEDED);
    assert_has(err.msg, "this process sent plaintext");
    fl_rpc_server_destroy(s);
}

static void test_wrong_ca(void **state) {
    (void)state;
    secure(g_ca, RUN_TOKEN, NULL);
    char addr[64];
    fl_rpc_server_t *s = serve("127.0.0.1", addr, sizeof addr, 0);
    secure(g_other_ca, RUN_TOKEN, NULL);
    fl_err_t err;
    assert_int_equal(call(addr, "/t.Svc/Echo", 0, 5000, &err), FL_UNAVAILABLE);
    assert_has(err.msg, "not signed by the CA this process trusts");
    assert_has(err.msg, "other/ca.pem");
    assert_int_equal(call(addr, "/t.Svc/Echo", FL_RPC_WAIT_FOR_READY, 1500, &err), FL_DEADLINE_EXCEEDED);
    assert_has(err.msg, "not signed by the CA");
    fl_rpc_server_destroy(s);
    plaintext();
}

static void test_tls_client_of_plaintext_server(void **state) {
    (void)state;
    plaintext();
    char addr[64];
    fl_rpc_server_t *s = serve("127.0.0.1", addr, sizeof addr, 0);
    secure(g_ca, RUN_TOKEN, NULL);
    fl_err_t err;
    assert_int_equal(call(addr, "/t.Svc/Echo", 0, 5000, &err), FL_UNAVAILABLE);
    assert_has(err.msg, "the server speaks plaintext");
    assert_has(err.msg, "creds/ca.pem");
    fl_rpc_server_destroy(s);
    plaintext();
}

static void test_host_name_not_in_certificate(void **state) {
    (void)state;
    /* 127.0.0.2 is loopback, but the certificate names 127.0.0.1, ::1, localhost and
     * the host's name only. */
    secure(g_ca, RUN_TOKEN, NULL);
    char addr[64];
    fl_rpc_server_t *s = serve("127.0.0.2", addr, sizeof addr, 0);
    fl_err_t err;
    assert_int_equal(call(addr, "/t.Svc/Echo", 0, 5000, &err), FL_UNAVAILABLE);
    assert_has(err.msg, "not valid for the host name dialled, 127.0.0.2");
    assert_has(err.msg, "fleet certs");
    assert_has(err.msg, "creds/fleet.pem");
    fl_rpc_server_destroy(s);
    plaintext();
}

static void test_security_is_checked(void **state) {
    (void)state;
    fl_err_t err;
    fl_rpc_security_t sec = {.ca_pem = g_ca, .cert_pem = g_cert, .key_pem = NULL, .token = RUN_TOKEN};
    assert_int_equal(fl_rpc_set_security(&sec, &err), FL_INVALID_ARGUMENT);
    sec.key_pem = g_key;
    sec.token = "";
    assert_int_equal(fl_rpc_set_security(&sec, &err), FL_INVALID_ARGUMENT);
    sec.token = "two words";
    assert_int_equal(fl_rpc_set_security(&sec, &err), FL_INVALID_ARGUMENT);
    sec.token = RUN_TOKEN;
    sec.learner_token = "new\nline";
    assert_int_equal(fl_rpc_set_security(&sec, &err), FL_INVALID_ARGUMENT);
    assert_false(fl_rpc_secure());
    sec.learner_token = NULL;
    assert_int_equal(fl_rpc_set_security(&sec, &err), FL_OK);
    assert_true(fl_rpc_secure());
    plaintext();
}

static void test_loopback_addresses(void **state) {
    (void)state;
    const char *yes[] = {"127.0.0.1",    "127.0.0.1:0",     "127.9.8.7:5000", "localhost",
                         "localhost:80", "LOCALHOST:1",     "[::1]:50051",    "::1",
                         "unix:/tmp/x",  "ipv4:127.0.0.1:9"};
    const char *no[] = {"0.0.0.0",       "0.0.0.0:0", "10.0.0.5:1", "192.168.1.2",   "[::]:0", "::",
                        "example.org:1", "",          "128.0.0.1",  "localhost.x:1", "[::2]:5"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (!fl_rpc_addr_is_loopback(yes[i])) fail_msg("%s should be loopback", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (fl_rpc_addr_is_loopback(no[i])) fail_msg("%s should not be loopback", no[i]);
}

int main(void) {
    /* "localhost" is resolved by getaddrinfo: gRPC's c-ares resolver leaks a few bytes per
     * process, which LeakSanitizer would report. */
    setenv("GRPC_DNS_RESOLVER", "native", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_right_token_is_served),
        cmocka_unit_test(test_wrong_token_is_unauthenticated),
        cmocka_unit_test(test_missing_token_is_unauthenticated),
        cmocka_unit_test(test_learner_only_method),
        cmocka_unit_test(test_plaintext_client_of_tls_server),
        cmocka_unit_test(test_wrong_ca),
        cmocka_unit_test(test_tls_client_of_plaintext_server),
        cmocka_unit_test(test_host_name_not_in_certificate),
        cmocka_unit_test(test_security_is_checked),
        cmocka_unit_test(test_loopback_addresses),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
