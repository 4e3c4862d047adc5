/* Tests of common/rpc: real gRPC servers on loopback TCP (port 0) and unix sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rpc.h"
#include "tests/nobody_util.h"
#include "tests/proc_util.h"
#include "tests/rpc_test_util.h"

/* ---- handlers ------------------------------------------------------------ */

static atomic_int g_slow_started;

static fl_status echo(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    (void)user;
    return fl_rpc_reply_bytes(reply, req, len);
}

/* Sleeps for the number of milliseconds in the request (a decimal string), then echoes. */
static fl_status slow(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    (void)user;
    char buf[32] = {0};
    memcpy(buf, req, len < 31 ? len : 31);
    atomic_fetch_add(&g_slow_started, 1);
    fl_sleep_sec(atoi(buf) / 1000.0);
    return fl_rpc_reply_bytes(reply, req, len);
}

/* Answers the caller's address as the server sees it. */
static fl_status peer(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    (void)user, (void)req, (void)len;
    const char *p = fl_rpc_reply_peer(reply);
    return fl_rpc_reply_bytes(reply, p, strlen(p));
}

static fl_status failing(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    (void)user;
    return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "field 'x': expected 3 bytes, got %zu", len);
}

/* Streaming: counts messages and sums bytes; answers "count sum". */
typedef struct {
    uint64_t count, sum, bytes;
} sum_state;

static atomic_int g_stream_closes, g_stream_opens, g_stream_cancels;

static void *sum_open(void *user) {
    (void)user;
    atomic_fetch_add(&g_stream_opens, 1);
    return calloc(1, sizeof(sum_state));
}

static fl_status sum_message(void *user, void *state, const uint8_t *msg, size_t len, fl_rpc_reply_t *reply) {
    (void)user;
    sum_state *s = state;
    if (len == 4 && memcmp(msg, "FAIL", 4) == 0) return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "asked to fail");
    if (len == 5 && memcmp(msg, "SLEEP", 5) == 0) fl_sleep_sec(0.6); /* a handler busy past the idle limit */
    s->count++;
    s->bytes += len;
    for (size_t i = 0; i < len; i++) s->sum += msg[i];
    return FL_OK;
}

static fl_status sum_close(void *user, void *state, fl_status why, fl_rpc_reply_t *reply) {
    (void)user;
    sum_state *s = state;
    fl_status st = FL_OK;
    if (why == FL_OK) {
        char out[64];
        int n = snprintf(out, sizeof out, "%llu %llu %llu", (unsigned long long)s->count, (unsigned long long)s->sum,
                         (unsigned long long)s->bytes);
        st = fl_rpc_reply_bytes(reply, out, (size_t)n);
    }
    free(s);
    if (why == FL_CANCELLED) atomic_fetch_add(&g_stream_cancels, 1);
    atomic_fetch_add(&g_stream_closes, 1);
    return st;
}

static const fl_rpc_stream_handler_t sum_handler = {sum_open, sum_message, sum_close};

typedef struct {
    fl_rpc_server_t *srv;
    char addr[128];
} server_fixture;

static void start_server_opts(server_fixture *f, const char *bind, const fl_rpc_server_opts_t *o) {
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_server_create(o, &f->srv, &err), FL_OK);
    assert_int_equal(fl_rpc_server_add_unary(f->srv, "/test.Echo/Echo", echo, NULL), FL_OK);
    assert_int_equal(fl_rpc_server_add_unary(f->srv, "/test.Echo/Peer", peer, NULL), FL_OK);
    assert_int_equal(fl_rpc_server_add_unary(f->srv, "/test.Echo/Slow", slow, NULL), FL_OK);
    assert_int_equal(fl_rpc_server_add_unary(f->srv, "/test.Echo/Fail", failing, NULL), FL_OK);
    assert_int_equal(fl_rpc_server_add_stream(f->srv, "/test.Echo/Sum", &sum_handler, NULL), FL_OK);
    assert_int_equal(fl_rpc_server_add_unary(f->srv, "/test.Echo/Echo", echo, NULL), FL_ALREADY_EXISTS);
    int port = -1;
    assert_int_equal(fl_rpc_server_bind(f->srv, bind, &port, &err), FL_OK);
    if (strncmp(bind, "unix:", 5) == 0) {
        assert_int_equal(port, 0);
        snprintf(f->addr, sizeof f->addr, "%s", bind);
    } else {
        assert_true(port > 0);
        snprintf(f->addr, sizeof f->addr, "127.0.0.1:%d", port);
    }
    assert_int_equal(fl_rpc_server_start(f->srv, &err), FL_OK);
}

static void start_server(server_fixture *f, const char *bind, int max_msg, double grace) {
    fl_rpc_server_opts_t o = {.threads = 4, .prepost = 16, .max_message_bytes = max_msg, .grace_s = grace};
    start_server_opts(f, bind, &o);
}

static fl_rpc_channel_t *connect_to(const char *addr) {
    fl_rpc_channel_t *ch = NULL;
    fl_err_t err;
    assert_int_equal(fl_rpc_channel_create(addr, 0, &ch, &err), FL_OK);
    return ch;
}

/* A server on 127.0.0.1 (default limits) and a channel to it. */
static fl_rpc_channel_t *serve_local(server_fixture *f) {
    start_server(f, "127.0.0.1:0", 0, 1.0);
    return connect_to(f->addr);
}

/* ---- tests --------------------------------------------------------------- */

static void do_echo_round_trips(const char *bind) {
    server_fixture f;
    start_server(&f, bind, 0, 1.0);
    fl_rpc_channel_t *ch = connect_to(f.addr);
    for (int i = 0; i < 200; i++) {
        char msg[64];
        int n = snprintf(msg, sizeof msg, "hello %d", i);
        fl_rpc_buf_t resp;
        fl_err_t err;
        fl_err_init(&err);
        assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", msg, (size_t)n, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err),
                         FL_OK);
        assert_int_equal(resp.len, (size_t)n);
        assert_memory_equal(resp.data, msg, (size_t)n);
        fl_rpc_buf_free(&resp);
    }
    check_segs_round_trips(ch, "/test.Echo/Echo");
    /* an empty message round-trips too */
    fl_rpc_buf_t resp;
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", "", 0, 5000, 0, &resp, NULL), FL_OK);
    assert_int_equal(resp.len, 0);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
}

static void test_echo_tcp(void **state) {
    (void)state;
    do_echo_round_trips("127.0.0.1:0");
}

/* A response whose slices hold their bytes inline (gRPC keeps up to 23 bytes in the
 * grpc_slice itself; its transport makes such slices when it splits a small tail off a
 * frame): the segments must point at the slices kept, not at a copy that goes away. */
static void test_segs_of_inline_slices(void **state) {
    (void)state;
    const size_t lens[] = {3, 100, 5, 1, 23, 4000, 7, 0, 2};
    const size_t n = sizeof lens / sizeof lens[0];
    uint8_t want[4200];
    grpc_slice sl[sizeof lens / sizeof lens[0]];
    size_t total = 0;
    for (size_t k = 0; k < n; k++) {
        for (size_t i = 0; i < lens[k]; i++) want[total + i] = (uint8_t)(k * 31 + i);
        sl[k] = grpc_slice_from_copied_buffer((const char *)want + total, lens[k]);
        total += lens[k];
    }
    assert_null(sl[0].refcount); /* inline */
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(sl, n);
    for (size_t k = 0; k < n; k++) grpc_slice_unref(sl[k]);
    fl_rpc_segs_t r;
    assert_int_equal(fl__rpc_segs_from_byte_buffer(bb, &r, NULL), FL_OK);
    grpc_byte_buffer_destroy(bb);
    scrub_stack();
    assert_int_equal(r.len, total);
    size_t at = 0;
    for (size_t s = 0; s < r.n; s++) {
        assert_true(r.seg[s].len <= total - at);
        assert_memory_equal(r.seg[s].p, want + at, r.seg[s].len);
        at += r.seg[s].len;
    }
    assert_int_equal(at, total);
    fl_rpc_segs_free(&r);
}

static void test_echo_unix(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "unix:/tmp/fleet-test-rpc-%d.sock", (int)getpid());
    do_echo_round_trips(path);
    unlink(path + 5);
}

typedef struct {
    fl_rpc_channel_t *ch;
    int id;
    int ok;
} client_arg;

static void *client_thread(void *p) {
    client_arg *a = p;
    a->ok = 0;
    for (int i = 0; i < 100; i++) {
        char msg[64];
        int n = snprintf(msg, sizeof msg, "client %d call %d", a->id, i);
        fl_rpc_buf_t resp;
        if (fl_rpc_unary(a->ch, "/test.Echo/Echo", msg, (size_t)n, 10000, FL_RPC_WAIT_FOR_READY, &resp, NULL) != FL_OK)
            return NULL;
        int same = resp.len == (size_t)n && memcmp(resp.data, msg, (size_t)n) == 0;
        fl_rpc_buf_free(&resp);
        if (!same) return NULL;
    }
    a->ok = 1;
    return NULL;
}

static void test_concurrent_clients(void **state) {
    (void)state;
    server_fixture f;
    start_server(&f, "127.0.0.1:0", 0, 1.0);
    enum { N = 12 };
    pthread_t th[N];
    client_arg args[N];
    fl_rpc_channel_t *shared = connect_to(f.addr);
    for (int i = 0; i < N; i++) {
        /* half the clients share one channel, half have their own */
        args[i] = (client_arg){.ch = (i % 2) ? shared : connect_to(f.addr), .id = i};
        pthread_create(&th[i], NULL, client_thread, &args[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        assert_true(args[i].ok);
        if (!(i % 2)) fl_rpc_channel_destroy(args[i].ch);
    }
    fl_rpc_channel_destroy(shared);
    fl_rpc_server_destroy(f.srv);
}

static void test_stream_many_messages(void **state) {
    (void)state;
    server_fixture f;
    start_server(&f, "127.0.0.1:0", 0, 1.0);
    fl_rpc_channel_t *ch = connect_to(f.addr);
    fl_rpc_stream_t *s = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_stream_open(ch, "/test.Echo/Sum", 30000, FL_RPC_WAIT_FOR_READY, &s, &err), FL_OK);
    uint64_t sum = 0, bytes = 0;
    const int n = 2500;
    for (int i = 0; i < n; i++) {
        uint8_t msg[100];
        size_t len = 1 + (size_t)(i % 100);
        for (size_t k = 0; k < len; k++) {
            msg[k] = (uint8_t)(i * 7 + k);
            sum += msg[k];
        }
        bytes += len;
        assert_int_equal(fl_rpc_stream_send(s, msg, len, &err), FL_OK);
    }
    fl_rpc_buf_t resp;
    assert_int_equal(fl_rpc_stream_finish(s, &resp, &err), FL_OK);
    char expect[64];
    int m = snprintf(expect, sizeof expect, "%d %llu %llu", n, (unsigned long long)sum, (unsigned long long)bytes);
    assert_int_equal(resp.len, (size_t)m);
    assert_memory_equal(resp.data, expect, (size_t)m);
    fl_rpc_buf_free(&resp);

    /* an empty stream is answered too */
    assert_int_equal(fl_rpc_stream_open(ch, "/test.Echo/Sum", 30000, 0, &s, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_finish(s, &resp, &err), FL_OK);
    assert_int_equal(resp.len, 5);
    assert_memory_equal(resp.data, "0 0 0", 5);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
}

static void test_stream_handler_error(void **state) {
    (void)state;
    server_fixture f;
    start_server(&f, "127.0.0.1:0", 0, 1.0);
    fl_rpc_channel_t *ch = connect_to(f.addr);
    int closes_before = atomic_load(&g_stream_closes);
    fl_rpc_stream_t *s = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_stream_open(ch, "/test.Echo/Sum", 10000, FL_RPC_WAIT_FOR_READY, &s, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_send(s, "abc", 3, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_send(s, "FAIL", 4, &err), FL_OK);
    /* later sends may or may not be refused; finish reports the server's status */
    for (int i = 0; i < 10; i++)
        if (fl_rpc_stream_send(s, "x", 1, NULL) != FL_OK) break;
    fl_rpc_buf_t resp;
    assert_int_equal(fl_rpc_stream_finish(s, &resp, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "asked to fail"));
    assert_non_null(strstr(err.msg, "/test.Echo/Sum"));
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
    assert_int_equal(atomic_load(&g_stream_closes), closes_before + 1);
}

/* With an access token set, a plaintext server takes unary calls and streams only from
 * channels that send it (made while the same token is set): without one, or with another,
 * the call ends UNAUTHENTICATED before its handler runs, over TCP and unix sockets. */
static void check_access_token(const char *bind) {
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_set_access_token("bad token", &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_rpc_set_access_token("s3cret-of-this-run", &err), FL_OK);
    server_fixture f;
    start_server(&f, bind, 0, 1.0);
    fl_rpc_channel_t *good = connect_to(f.addr);
    assert_int_equal(fl_rpc_set_access_token("another-run", &err), FL_OK);
    fl_rpc_channel_t *other = connect_to(f.addr);
    assert_int_equal(fl_rpc_set_access_token(NULL, &err), FL_OK);
    fl_rpc_channel_t *none = connect_to(f.addr);
    fl_rpc_buf_t resp;
    assert_int_equal(fl_rpc_unary(good, "/test.Echo/Echo", "hi", 2, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err), FL_OK);
    assert_int_equal(resp.len, 2);
    fl_rpc_buf_free(&resp);
    assert_int_equal(fl_rpc_unary(none, "/test.Echo/Echo", "hi", 2, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err),
                     FL_UNAUTHENTICATED);
    assert_non_null(strstr(err.msg, "carries no access token"));
    assert_int_equal(fl_rpc_unary(other, "/test.Echo/Echo", "hi", 2, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err),
                     FL_UNAUTHENTICATED);
    assert_non_null(strstr(err.msg, "access token is wrong"));
    /* streams: the handler never opens for a refused one */
    int opens = atomic_load(&g_stream_opens);
    fl_rpc_stream_t *s = NULL;
    assert_int_equal(fl_rpc_stream_open(none, "/test.Echo/Sum", 10000, FL_RPC_WAIT_FOR_READY, &s, &err), FL_OK);
    for (int i = 0; i < 10; i++)
        if (fl_rpc_stream_send(s, "x", 1, NULL) != FL_OK) break;
    assert_int_equal(fl_rpc_stream_finish(s, &resp, &err), FL_UNAUTHENTICATED);
    assert_int_equal(atomic_load(&g_stream_opens), opens);
    assert_int_equal(fl_rpc_stream_open(good, "/test.Echo/Sum", 10000, FL_RPC_WAIT_FOR_READY, &s, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_send(s, "abc", 3, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_finish(s, &resp, &err), FL_OK);
    assert_int_equal(atomic_load(&g_stream_opens), opens + 1);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(good);
    fl_rpc_channel_destroy(other);
    fl_rpc_channel_destroy(none);
    fl_rpc_server_destroy(f.srv);
    /* a server bound without a token takes every call, with or without one */
    start_server(&f, bind, 0, 1.0);
    assert_int_equal(fl_rpc_set_access_token("s3cret-of-this-run", &err), FL_OK);
    good = connect_to(f.addr);
    assert_int_equal(fl_rpc_set_access_token(NULL, &err), FL_OK);
    assert_int_equal(fl_rpc_unary(good, "/test.Echo/Echo", "hi", 2, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err), FL_OK);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(good);
    fl_rpc_server_destroy(f.srv);
}

static void test_access_token(void **state) {
    (void)state;
    check_access_token("127.0.0.1:0");
    char bind[128];
    snprintf(bind, sizeof bind, "unix:/tmp/fleet-rpc-access-%d.sock", (int)getpid());
    check_access_token(bind);
    unlink(bind + 5);
}

/* n raw TCP connections to 127.0.0.1:port; after wait_s, how many the server closed (EOF
 * or reset where gRPC's settings frame, or nothing, was expected). */
static int connections_closed(int port, int n, double wait_s) {
    int fds[64], made = 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < n && i < 64; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            if (fd >= 0) close(fd);
            break;
        }
        fds[made++] = fd;
    }
    usleep((useconds_t)(wait_s * 1e6));
    int closed = 0;
    for (int i = 0; i < made; i++) {
        char buf[4096];
        for (;;) {
            ssize_t k = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
            if (k > 0) continue;
            closed += k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
            break;
        }
        close(fds[i]);
    }
    return made == n ? closed : -1 - made;
}

/* connections_closed as as_nobody runs it. */
typedef struct closes {
    int port, n;
    double wait_s;
} closes_t;

static int closed_of(void *arg) {
    const closes_t *c = arg;
    return connections_closed(c->port, c->n, c->wait_s);
}

/* A peer holds at most max_connections_per_peer connections: 30 from the user nobody
 * (another user on loopback, given the same bound) against a bound of 8 lose their 22
 * newest within a second or two; 30 of this process's own user are all kept (the fleet's
 * own roles). By default another user holds none on a loopback listener. */
static void test_connections_per_peer(void **state) {
    (void)state;
    if (geteuid() != 0) {
        print_message("SKIP: not root (the test connects as another user)\n");
        skip();
    }
    server_fixture f;
    fl_rpc_server_opts_t o = {
        .threads = 2, .prepost = 8, .max_connections_per_peer = 8, .max_connections_other_user = -1};
    start_server_opts(&f, "127.0.0.1:0", &o);
    int port = atoi(strrchr(f.addr, ':') + 1);
    closes_t other = {port, 30, 2.5};
    int other_closed = as_nobody(closed_of, &other, -100);
    int own_closed = connections_closed(port, 30, 2.5);
    fprintf(stderr, "another user's 30 connections: %d closed; this user's 30: %d closed\n", other_closed, own_closed);
    assert_int_equal(other_closed, 22);
    assert_int_equal(own_closed, 0);
    /* the server still serves */
    fl_rpc_channel_t *ch = connect_to(f.addr);
    fl_rpc_buf_t resp;
    fl_err_t err;
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", "hi", 2, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err), FL_OK);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
    /* The default on a loopback listener: another local user may hold no connection. */
    fl_rpc_server_opts_t d = {.threads = 2, .prepost = 8};
    start_server_opts(&f, "127.0.0.1:0", &d);
    port = atoi(strrchr(f.addr, ':') + 1);
    other = (closes_t){port, 5, 2.0};
    other_closed = as_nobody(closed_of, &other, -100);
    fprintf(stderr, "another user's 5 connections to a loopback listener by default: %d closed\n", other_closed);
    assert_int_equal(other_closed, 5);
    fl_rpc_server_destroy(f.srv);
}

static void test_deadline(void **state) {
    (void)state;
    server_fixture f;
    start_server(&f, "127.0.0.1:0", 0, 1.0);
    fl_rpc_channel_t *ch = connect_to(f.addr);
    fl_rpc_buf_t resp;
    fl_err_t err;
    fl_err_init(&err);
    /* warm the connection so that the deadline is spent in the handler */
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", "x", 1, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err), FL_OK);
    fl_rpc_buf_free(&resp);
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Slow", "600", 3, 100, 0, &resp, &err), FL_DEADLINE_EXCEEDED);
    assert_non_null(strstr(err.msg, "/test.Echo/Slow"));
    /* the server is still serving afterwards */
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", "y", 1, 5000, 0, &resp, &err), FL_OK);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
}

static void test_unknown_method(void **state) {
    (void)state;
    server_fixture f;
    fl_rpc_channel_t *ch = serve_local(&f);
    fl_rpc_buf_t resp;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Nope", "x", 1, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err),
                     FL_UNIMPLEMENTED);
    assert_non_null(strstr(err.msg, "unknown method /test.Echo/Nope"));
    /* a stream to an unknown method too */
    fl_rpc_stream_t *s;
    assert_int_equal(fl_rpc_stream_open(ch, "/test.Echo/NoStream", 5000, 0, &s, &err), FL_OK);
    fl_rpc_stream_send(s, "x", 1, NULL);
    assert_int_equal(fl_rpc_stream_finish(s, &resp, &err), FL_UNIMPLEMENTED);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
}

/* A handler's error reaches the client with its code and message, and leaves a warning
 * in the server's log naming the method, the client and why; a flood of them only the
 * first 10 and then every 1,000th. */
static void test_handler_error_message(void **state) {
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/fleet-rpc-log-%d.txt", (int)getpid());
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    server_fixture f;
    fl_rpc_channel_t *ch = serve_local(&f);
    fl_rpc_buf_t resp;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Fail", "abcdef", 6, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err),
                     FL_INVALID_ARGUMENT);
    assert_int_equal(err.code, FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "field 'x': expected 3 bytes, got 6"));
    assert_null(resp.data);
    for (int i = 1; i < 1000; i++)
        assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Fail", "x", 1, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err),
                         FL_INVALID_ARGUMENT);
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", "x", 1, 5000, 0, &resp, &err), FL_OK); /* not logged */
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char *log = read_file(path);
    unlink(path);
    assert_non_null(log);
    int lines = 0;
    for (const char *p = log; (p = strstr(p, "rpc: refused /test.Echo/Fail from ipv4:127.0.0.1:")); p++) lines++;
    fprintf(stderr, "%s", log);
    assert_int_equal(lines, 11); /* calls 1 .. 10 and the 1,000th */
    assert_non_null(strstr(log, "(invalid argument; 1 refused so far)"));
    assert_non_null(strstr(log, "(invalid argument; 1000 refused so far)"));
    free(log);
}

static void test_oversize(void **state) {
    (void)state;
    server_fixture f;
    start_server(&f, "127.0.0.1:0", 1 << 20, 1.0); /* 1 MiB limit */
    fl_rpc_channel_t *ch = connect_to(f.addr);
    size_t n = 2u << 20;
    uint8_t *big = malloc(n);
    for (size_t i = 0; i < n; i++) big[i] = (uint8_t)(i * 31);
    fl_rpc_buf_t resp;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", big, n, 10000, FL_RPC_WAIT_FOR_READY, &resp, &err),
                     FL_RESOURCE_EXHAUSTED);
    /* just under the limit passes */
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", big, (1u << 20) - 64, 10000, 0, &resp, &err), FL_OK);
    assert_int_equal(resp.len, (1u << 20) - 64);
    assert_memory_equal(resp.data, big, resp.len);
    fl_rpc_buf_free(&resp);
    /* an oversize message inside a stream */
    fl_rpc_stream_t *s;
    assert_int_equal(fl_rpc_stream_open(ch, "/test.Echo/Sum", 10000, 0, &s, &err), FL_OK);
    fl_rpc_stream_send(s, big, n, NULL);
    assert_int_equal(fl_rpc_stream_finish(s, &resp, &err), FL_RESOURCE_EXHAUSTED);
    free(big);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
}

typedef struct {
    fl_rpc_channel_t *ch;
    fl_status st;
} inflight_arg;

static void *slow_call_thread(void *p) {
    inflight_arg *a = p;
    fl_rpc_buf_t resp;
    a->st = fl_rpc_unary(a->ch, "/test.Echo/Slow", "3000", 4, 20000, FL_RPC_WAIT_FOR_READY, &resp, NULL);
    fl_rpc_buf_free(&resp);
    return NULL;
}

static void *stream_thread(void *p) {
    inflight_arg *a = p;
    fl_rpc_stream_t *s;
    a->st = fl_rpc_stream_open(a->ch, "/test.Echo/Sum", 20000, FL_RPC_WAIT_FOR_READY, &s, NULL);
    if (a->st != FL_OK) return NULL;
    for (int i = 0; i < 200; i++) {
        if (fl_rpc_stream_send(s, "abc", 3, NULL) != FL_OK) break;
        fl_sleep_sec(0.005);
    }
    fl_rpc_buf_t resp;
    a->st = fl_rpc_stream_finish(s, &resp, NULL);
    fl_rpc_buf_free(&resp);
    return NULL;
}

static void test_shutdown_in_flight(void **state) {
    (void)state;
    server_fixture f;
    start_server(&f, "127.0.0.1:0", 0, 0.2);
    fl_rpc_channel_t *ch = connect_to(f.addr);
    int opens_before = atomic_load(&g_stream_opens), closes_before = atomic_load(&g_stream_closes);
    int slow_before = atomic_load(&g_slow_started);
    enum { NS = 3, NT = 3 };
    pthread_t ts[NS], tt[NT];
    inflight_arg as[NS], at[NT];
    for (int i = 0; i < NS; i++) {
        as[i] = (inflight_arg){ch, FL_OK};
        pthread_create(&ts[i], NULL, slow_call_thread, &as[i]);
    }
    for (int i = 0; i < NT; i++) {
        at[i] = (inflight_arg){ch, FL_OK};
        pthread_create(&tt[i], NULL, stream_thread, &at[i]);
    }
    /* wait until the calls are inside the server */
    for (int i = 0; i < 400 && (atomic_load(&g_slow_started) - slow_before < 2 ||
                                atomic_load(&g_stream_opens) - opens_before < NT);
         i++)
        fl_sleep_sec(0.01);
    assert_true(atomic_load(&g_stream_opens) - opens_before == NT);
    fl_rpc_server_shutdown(f.srv);
    /* after shutdown returns, every stream opened has been closed exactly once */
    assert_int_equal(atomic_load(&g_stream_closes) - closes_before, atomic_load(&g_stream_opens) - opens_before);
    fl_rpc_server_destroy(f.srv);
    for (int i = 0; i < NS; i++) pthread_join(ts[i], NULL);
    for (int i = 0; i < NT; i++) pthread_join(tt[i], NULL);
    /* streams were cut short: none can have completed normally */
    for (int i = 0; i < NT; i++) assert_int_not_equal(at[i].st, FL_OK);
    fl_rpc_channel_destroy(ch);
}

static void test_no_server(void **state) {
    (void)state;
    /* find a free port, then close it */
    server_fixture f;
    start_server(&f, "127.0.0.1:0", 0, 1.0);
    char addr[128];
    snprintf(addr, sizeof addr, "%s", f.addr);
    fl_rpc_server_destroy(f.srv);
    fl_rpc_channel_t *ch = connect_to(addr);
    fl_rpc_buf_t resp;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", "x", 1, 3000, 0, &resp, &err), FL_UNAVAILABLE);
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", "x", 1, 300, FL_RPC_WAIT_FOR_READY, &resp, &err),
                     FL_DEADLINE_EXCEEDED);
    fl_rpc_channel_destroy(ch);
}

static void test_wait_for_ready_server_starts_late(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "unix:/tmp/fleet-test-late-%d.sock", (int)getpid());
    fl_rpc_channel_t *ch = connect_to(path);
    inflight_arg a = {ch, FL_UNKNOWN};
    pthread_t th;
    /* the slow handler needs the server: start the call first, the server 300 ms later */
    pthread_create(&th, NULL, slow_call_thread, &a);
    fl_sleep_sec(0.3);
    server_fixture f;
    start_server(&f, path, 0, 5.0);
    pthread_join(th, NULL);
    assert_int_equal(a.st, FL_OK);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
    unlink(path + 5);
}

static void test_no_reuseport(void **state) {
    (void)state;
    server_fixture f;
    start_server(&f, "127.0.0.1:0", 0, 1.0);
    fl_rpc_server_t *other;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_server_create(NULL, &other, &err), FL_OK);
    assert_int_equal(fl_rpc_server_bind(other, f.addr, NULL, &err), FL_UNAVAILABLE);
    assert_non_null(strstr(err.msg, f.addr));
    /* one line that says what is wrong, found before gRPC logs its own dump of it */
    assert_non_null(strstr(err.msg, "the address is in use"));
    assert_null(strchr(err.msg, '\n'));
    fl_rpc_server_destroy(other);
    fl_rpc_server_destroy(f.srv);
}

/* Each connection is its own client: the handler sees the address it came from. */
static void test_peer(void **state) {
    (void)state;
    server_fixture f;
    start_server(&f, "127.0.0.1:0", 0, 1.0);
    char seen[2][128];
    for (int i = 0; i < 2; i++) {
        fl_rpc_channel_t *ch = connect_to(f.addr);
        fl_rpc_buf_t resp;
        fl_err_t err;
        fl_err_init(&err);
        assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Peer", "", 0, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err), FL_OK);
        assert_true(resp.len > 0 && resp.len < sizeof seen[i]);
        memcpy(seen[i], resp.data, resp.len);
        seen[i][resp.len] = '\0';
        fl_rpc_buf_free(&resp);
        fl_rpc_channel_destroy(ch);
        assert_non_null(strstr(seen[i], "127.0.0.1:"));
    }
    assert_string_not_equal(seen[0], seen[1]);
    /* Quotas count a loopback client by its connection, a remote one by its host. */
    char key[96];
    assert_string_equal(fl_rpc_peer_key(seen[0], key, sizeof key), seen[0]);
    static const char *const keys[][2] = {
        {"ipv4:10.1.2.3:51234", "ipv4:10.1.2.3"},
        {"ipv6:[2001:db8::7]:443", "ipv6:[2001:db8::7]"},
        {"ipv6:[::ffff:10.1.2.3]:9", "ipv4:10.1.2.3"},
        {"ipv6:[::1]:51234", "ipv6:[::1]:51234"},
        {"ipv6:[::ffff:127.0.0.1]:7", "ipv6:[::ffff:127.0.0.1]:7"},
        {"unix:/run/x.sock", "unix:/run/x.sock"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        assert_string_equal(fl_rpc_peer_key(keys[i][0], key, sizeof key), keys[i][1]);
    fl_rpc_server_destroy(f.srv);
}

static int cancels_reached(int want) {
    for (int i = 0; i < 3000 && atomic_load(&g_stream_cancels) < want; i++) fl_sleep_sec(0.01);
    return atomic_load(&g_stream_cancels) >= want;
}

/* A client-streaming call that sends nothing for stream_idle_s is cancelled (and its
 * handler closed); a handler that is itself busy longer than that is not. */
/* Connections that never send the HTTP/2 preface (raw sockets held open, as in a flood
 * of them against the descriptor limit) are closed by the server at handshake_timeout_s;
 * before, gRPC's default of 120 s let them pile up. A real client keeps working. */
static void test_silent_connections_closed(void **state) {
    (void)state;
    server_fixture f;
    fl_rpc_server_opts_t o = {.threads = 2, .grace_s = 1.0, .handshake_timeout_s = 0.5};
    start_server_opts(&f, "127.0.0.1:0", &o);
    int port = atoi(strrchr(f.addr, ':') + 1);
    enum { N = 20 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fds[i] >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&a, sizeof a), 0);
    }
    /* Each is closed by the server: a read sees the end (0) or a reset, well before 120 s
     * (a liveness bound of 20 s, forty times the timeout). */
    int closed = 0;
    const double until = fl_clock_sec() + 20.0;
    for (int i = 0; i < N; i++) {
        for (;;) { /* read what comes (the server's SETTINGS) until the end, or the bound */
            int left_ms = (int)((until - fl_clock_sec()) * 1e3);
            struct pollfd p = {.fd = fds[i], .events = POLLIN};
            if (left_ms <= 0 || poll(&p, 1, left_ms) != 1) break;
            char buf[256];
            ssize_t k = read(fds[i], buf, sizeof buf);
            if (k > 0) continue;
            closed += k == 0 || errno == ECONNRESET;
            break;
        }
        close(fds[i]);
    }
    assert_int_equal(closed, N);
    fl_rpc_channel_t *ch = connect_to(f.addr);
    fl_rpc_buf_t resp;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", "hi", 2, 5000, FL_RPC_WAIT_FOR_READY, &resp, &err), FL_OK);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
}

static void test_stream_idle_cancelled(void **state) {
    (void)state;
    server_fixture f;
    fl_rpc_server_opts_t o = {.threads = 4, .grace_s = 1.0, .stream_idle_s = 0.3};
    start_server_opts(&f, "127.0.0.1:0", &o);
    fl_rpc_channel_t *ch = connect_to(f.addr);
    fl_err_t err;
    fl_err_init(&err);
    fl_rpc_buf_t resp;

    /* Busy handler: 0.6 s inside one message, then the half-close; answered in full. */
    int cancels = atomic_load(&g_stream_cancels);
    fl_rpc_stream_t *s = NULL;
    assert_int_equal(fl_rpc_stream_open(ch, "/test.Echo/Sum", 30000, FL_RPC_WAIT_FOR_READY, &s, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_send(s, "SLEEP", 5, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_finish(s, &resp, &err), FL_OK);
    assert_int_equal(resp.len, 7);
    assert_memory_equal(resp.data, "1 377 5", 7); /* 'S' + 'L' + 'E' + 'E' + 'P' = 377 */
    fl_rpc_buf_free(&resp);
    assert_int_equal(atomic_load(&g_stream_cancels), cancels);

    /* Silent client: one message, then nothing; the server ends the call. */
    assert_int_equal(fl_rpc_stream_open(ch, "/test.Echo/Sum", 30000, FL_RPC_WAIT_FOR_READY, &s, &err), FL_OK);
    assert_int_equal(fl_rpc_stream_send(s, "abc", 3, &err), FL_OK);
    assert_true(cancels_reached(cancels + 1));
    assert_int_equal(fl_rpc_stream_finish(s, &resp, &err), FL_CANCELLED);
    assert_non_null(strstr(err.msg, "stream idle: no message for 0.3 s"));

    /* The server goes on serving. */
    assert_int_equal(fl_rpc_unary(ch, "/test.Echo/Echo", "x", 1, 5000, 0, &resp, &err), FL_OK);
    fl_rpc_buf_free(&resp);
    fl_rpc_channel_destroy(ch);
    fl_rpc_server_destroy(f.srv);
}

static void test_status_mapping(void **state) {
    (void)state;
    for (int c = 0; c <= 16; c++) assert_int_equal(fl_status_to_grpc(fl_status_from_grpc(c)), c);
    assert_int_equal(fl_status_from_grpc(99), FL_UNKNOWN);
    assert_string_equal(fl_status_name(FL_DEADLINE_EXCEEDED), "FL_DEADLINE_EXCEEDED");
    assert_string_equal(fl_status_str(FL_UNIMPLEMENTED), "unimplemented");
    fl_err_t e;
    fl_err_init(&e);
    fl_err_set(&e, FL_NOT_FOUND, "key %s", "x");
    fl_err_prefix(&e, "file %d", 3);
    assert_string_equal(e.msg, "file 3: key x");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_mapping),
        cmocka_unit_test(test_echo_tcp),
        cmocka_unit_test(test_segs_of_inline_slices),
        cmocka_unit_test(test_peer),
        cmocka_unit_test(test_stream_idle_cancelled),
        cmocka_unit_test(test_echo_unix),
        cmocka_unit_test(test_access_token),
        cmocka_unit_test(test_connections_per_peer),
        cmocka_unit_test(test_concurrent_clients),
        cmocka_unit_test(test_stream_many_messages),
        cmocka_unit_test(test_stream_handler_error),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_unknown_method),
        cmocka_unit_test(test_handler_error_message),
        cmocka_unit_test(test_silent_connections_closed),
        cmocka_unit_test(test_oversize),
        cmocka_unit_test(test_shutdown_in_flight),
        cmocka_unit_test(test_no_server),
        cmocka_unit_test(test_wait_for_ready_server_starts_late),
        cmocka_unit_test(test_no_reuseport),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
