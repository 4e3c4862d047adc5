/* Tests of what a parameter-server shard refuses a client (docs/security.md, "Limits on
 * what a client may do"): versions too far ahead, and large messages beyond the shard's
 * slots. Real services on 127.0.0.1 port 0, the real client over gRPC; after every
 * refusal the shard keeps serving and still holds what it held. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rpc.h"
#include "fleet.pb-c.h"
#include "paramserver/client.h"
#include "paramserver/server.h"
#include "paramserver/store.h"

#define TIMEOUT_MS 60000

#include "paramserver_test_util.h"

typedef struct {
    fl_paramserver_service_t *svc;
    fl_param_client_t *cl;
    char addr[256];
} shard_t;

static void shard_start(shard_t *s, const fl_paramserver_service_opts_t *opts) {
    fl_err_t e;
    fl_err_init(&e);
    if (fl_paramserver_service_create(opts, 0, &s->svc, &e) != FL_OK) fail_msg("create: %s", e.msg);
    assert_int_equal(fl_paramserver_service_start(s->svc, "127.0.0.1:0", s->addr, sizeof s->addr, &e), FL_OK);
    assert_int_equal(fl_param_client_create(s->addr, &s->cl, &e), FL_OK);
}

static void shard_stop(shard_t *s) {
    fl_param_client_destroy(s->cl);
    fl_paramserver_service_destroy(s->svc);
}

static uint64_t held(shard_t *s) {
    fl_param_info_t in;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_param_info(s->cl, TIMEOUT_MS, &in, &e) != FL_OK) fail_msg("info: %s", e.msg);
    return in.version;
}

static void publish_refused(shard_t *s, uint64_t version, const float *v, size_t n, fl_status want, const char *msg) {
    fl_err_t e;
    fl_err_init(&e);
    uint64_t before = held(s);
    fl_status st = fl_param_publish(s->cl, version, v, n, TIMEOUT_MS, &e);
    if (st != want || !strstr(e.msg, msg))
        fail_msg("publish %" PRIu64 ": status %d, message '%s', expected %d with '%s'", version, (int)st, e.msg,
                 (int)want, msg);
    assert_int_equal(held(s), before);
}

static void publish_held(shard_t *s, uint64_t version, const float *v, size_t n) {
    fl_err_t e;
    fl_err_init(&e);
    if (fl_param_publish(s->cl, version, v, n, TIMEOUT_MS, &e) != FL_OK)
        fail_msg("publish %" PRIu64 ": %s", version, e.msg);
    assert_int_equal(held(s), version);
}

/* A publish must be newer than the held version and at most paramserver.max_version_step
 * past it: one Publish of 2^64 - 1 can no longer put the version where nothing passes it. */
static void test_version_step(void **state) {
    (void)state;
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    shard_t s;
    shard_start(&s, NULL);
    publish_refused(&s, UINT64_MAX, v, 8, FL_INVALID_ARGUMENT,
                    "params.version: 18446744073709551615 is too far past the held version 0: expected 1 .. "
                    "4294967296 (paramserver.max_version_step = 4294967296)");
    publish_held(&s, 1, v, 8);
    publish_refused(&s, 1, v, 8, FL_FAILED_PRECONDITION,
                    "params.version: 1 is not newer than the held version 1 (expected 2 .. 4294967297)");
    publish_refused(&s, 2 + FL_PARAM_DEFAULT_MAX_VERSION_STEP, v, 8, FL_INVALID_ARGUMENT,
                    "params.version: 4294967298 is too far past the held version 1: expected 2 .. 4294967297");
    publish_held(&s, 1 + FL_PARAM_DEFAULT_MAX_VERSION_STEP, v, 8);
    /* Fetches see the held version's values. */
    float got[8];
    uint64_t version = 0;
    int updated = 0;
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_param_fetch(s.cl, &version, got, 8, &updated, TIMEOUT_MS, &e), FL_OK);
    assert_int_equal(version, 1 + FL_PARAM_DEFAULT_MAX_VERSION_STEP);
    assert_memory_equal(got, v, sizeof v);
    shard_stop(&s);

    /* The step from the configuration. */
    fl_paramserver_service_opts_t o;
    fl_paramserver_service_opts_init(&o);
    o.max_version_step = 10;
    shard_start(&s, &o);
    publish_refused(&s, 11, v, 8, FL_INVALID_ARGUMENT,
                    "params.version: 11 is too far past the held version 0: expected 1 .. 10 "
                    "(paramserver.max_version_step = 10)");
    publish_held(&s, 10, v, 8);
    publish_refused(&s, 21, v, 8, FL_INVALID_ARGUMENT, "expected 11 .. 20");
    publish_held(&s, 20, v, 8);
    shard_stop(&s);

    fl_paramserver_service_opts_init(&o);
    o.max_large_messages = 0;
    fl_paramserver_service_t *bad = NULL;
    assert_int_equal(fl_paramserver_service_create(&o, 0, &bad, &e), FL_INVALID_ARGUMENT);
    assert_contains(e.msg, "paramserver.max_large_messages = 0: expected >= 1");
}

/* A large request needs one of paramserver.max_large_messages slots: with every slot
 * taken it waits, then is refused with RESOURCE_EXHAUSTED naming the limit; small
 * requests never wait; once a slot is free the same publish goes through. */
static void test_large_message_slots(void **state) {
    (void)state;
    const size_t n = (FL_PARAMSERVER_LARGE_MESSAGE / 4) + 1024; /* just over the threshold */
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) v[i] = (float)(i % 1000) * 0.001f;
    fl_paramserver_service_opts_t o;
    fl_paramserver_service_opts_init(&o);
    o.max_large_messages = 1;
    shard_t s;
    shard_start(&s, &o);
    publish_held(&s, 1, v, n);
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl__paramserver_large_slot_take(s.svc, &e), FL_OK);
    publish_refused(&s, 2, v, n, FL_RESOURCE_EXHAUSTED,
                    "needs one of the 1 large-message slots (paramserver.max_large_messages; requests of 16777216 "
                    "bytes or more), and 1 are taken after 2 s of waiting: send it again later");
    /* Small requests (fetches of the version held, Info) go on meanwhile. */
    uint64_t version = 1;
    int updated = 1;
    assert_int_equal(fl_param_fetch(s.cl, &version, v, n, &updated, TIMEOUT_MS, &e), FL_OK);
    assert_int_equal(updated, 0);
    fl__paramserver_large_slot_give(s.svc);
    publish_held(&s, 2, v, n);
    shard_stop(&s);
    free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_step),
        cmocka_unit_test(test_large_message_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
