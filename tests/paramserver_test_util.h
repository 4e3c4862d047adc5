/* paramserver_test_util: what the parameter-server tests share — P shard services on
 * 127.0.0.1:0 with a raw channel to each (a cluster), a publish that fails the test, a raw
 * Publish for what the client never sends, and a substring check on error messages.
 *
 * Include after <cmocka.h>, with TIMEOUT_MS (the deadline of every call, ms) defined. */
#ifndef FL_TESTS_PARAMSERVER_TEST_UTIL_H
#define FL_TESTS_PARAMSERVER_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "paramserver/client.h"
#include "paramserver/server.h"

#ifndef TIMEOUT_MS
#error "define TIMEOUT_MS before including paramserver_test_util.h"
#endif

#define MAXP 4

/* opts->shards shard services, their addresses, one raw channel each, and
 * their addresses joined by commas (what fl_param_client_create takes). */
typedef struct {
    int P;
    fl_paramserver_service_t *svc[MAXP];
    fl_rpc_channel_t *ch[MAXP];
    char addr[MAXP][128];
    char addrs[MAXP * 130];
    fl_param_client_t *cl; /* a client over all shards, when the test makes one; cluster_stop destroys it */
} cluster;

static inline void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in \"%s\"", needle, haystack);
}

/* Starts the shards of opts on 127.0.0.1:0 (c->cl is left NULL); fails the test on error. */
static inline cluster *cluster_start(const fl_paramserver_service_opts_t *opts) {
    cluster *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->P = opts->shards;
    assert_true(c->P >= 1 && c->P <= MAXP);
    fl_err_t err;
    fl_err_init(&err);
    for (int s = 0; s < c->P; s++) {
        if (fl_paramserver_service_create(opts, s, &c->svc[s], &err) != FL_OK ||
            fl_paramserver_service_start(c->svc[s], "127.0.0.1:0", c->addr[s], sizeof c->addr[s], &err) != FL_OK)
            fail_msg("shard %d: %s", s, err.msg);
        assert_int_equal(fl_rpc_channel_create(c->addr[s], 0, &c->ch[s], &err), FL_OK);
        strcat(c->addrs, s ? "," : "");
        strcat(c->addrs, c->addr[s]);
    }
    return c;
}

static inline void cluster_stop(cluster *c) {
    fl_param_client_destroy(c->cl);
    for (int s = 0; s < c->P; s++) {
        fl_rpc_channel_destroy(c->ch[s]);
        fl_paramserver_service_destroy(c->svc[s]);
    }
    free(c);
}

static inline void publish_ok(fl_param_client_t *cl, uint64_t version, const float *v, size_t n) {
    fl_err_t err;
    fl_err_init(&err);
    if (fl_param_publish(cl, version, v, n, TIMEOUT_MS, &err) != FL_OK)
        fail_msg("publish %llu: %s", (unsigned long long)version, err.msg);
}

/* A raw Publish of one slice [offset, offset + n) of a total-element vector, its values
 * `len` bytes of dtype with the given shape, over ch. Returns the status and leaves the
 * server's message in err; *resp_version (may be NULL) gets the version of a response. */
static inline fl_status raw_publish_ch(fl_rpc_channel_t *ch, uint64_t version, uint64_t offset, uint64_t total,
                                       Fleet__DType dtype, const int64_t *shape, size_t n_shape, const void *data,
                                       size_t len, uint64_t *resp_version, fl_err_t *err) {
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    t.dtype = dtype;
    t.n_shape = n_shape;
    t.shape = (int64_t *)(uintptr_t)shape;
    t.data.len = len;
    t.data.data = (uint8_t *)(uintptr_t)data;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    ps.version = version;
    ps.offset = offset;
    ps.total = total;
    ps.values = &t;
    Fleet__PublishRequest req = FLEET__PUBLISH_REQUEST__INIT;
    req.params = &ps;
    ProtobufCMessage *resp = NULL;
    fl_err_init(err);
    fl_status st = fl_rpc_unary_pb(ch, "/fleet.ParamServer/Publish", &req.base, &fleet__publish_response__descriptor,
                                   &resp, TIMEOUT_MS, FL_RPC_WAIT_FOR_READY, err);
    if (resp) {
        if (resp_version) *resp_version = ((Fleet__PublishResponse *)resp)->version;
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    return st;
}

#endif
