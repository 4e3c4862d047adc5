/* rpc_test_util: shared by the RPC tests (header-only; include after cmocka.h). */
#ifndef FL_TESTS_RPC_TEST_UTIL_H
#define FL_TESTS_RPC_TEST_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "common/rpc.h"

/* Overwrites the stack below the caller, so that a pointer left into a returned
 * function's frame reads garbage at once. */
__attribute__((noinline)) static void scrub_stack(void) {
    volatile uint8_t junk[64 * 1024];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = 0xa5;
}

/* Echoes messages of 0 to 40 bytes (small replies: gRPC keeps such bytes inline in its
 * slice), and of 255 bytes to 3 MB (many slices), through `method` (an echo) with
 * fl_rpc_unary_segs: the segments, in order, must hold exactly what was sent, also after
 * the stack the call ran on has been overwritten. */
static inline void check_segs_round_trips(fl_rpc_channel_t *ch, const char *method) {
    size_t sizes[41 + 4];
    size_t n = 0;
    for (size_t s = 0; s <= 40; s++) sizes[n++] = s;
    sizes[n++] = 255;
    sizes[n++] = 4096;
    sizes[n++] = 70000;
    sizes[n++] = (size_t)3 << 20;
    uint8_t *msg = malloc(sizes[n - 1]), *got = malloc(sizes[n - 1]);
    assert_true(msg && got);
    for (size_t i = 0; i < sizes[n - 1]; i++) msg[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t k = 0; k < n; k++) {
        fl_rpc_segs_t r;
        fl_err_t err;
        fl_err_init(&err);
        if (fl_rpc_unary_segs(ch, method, msg, sizes[k], 10000, FL_RPC_WAIT_FOR_READY, &r, &err) != FL_OK)
            fail_msg("%zu bytes: %s", sizes[k], err.msg);
        scrub_stack();
        assert_int_equal(r.len, sizes[k]);
        size_t at = 0;
        for (size_t s = 0; s < r.n; s++) {
            assert_true(r.seg[s].len <= sizes[k] - at);
            if (r.seg[s].len) memcpy(got + at, r.seg[s].p, r.seg[s].len);
            at += r.seg[s].len;
        }
        assert_int_equal(at, sizes[k]);
        if (sizes[k] && memcmp(got, msg, sizes[k]) != 0) fail_msg("%zu bytes came back changed", sizes[k]);
        fl_rpc_segs_free(&r);
    }
    free(msg);
    free(got);
}

#endif
