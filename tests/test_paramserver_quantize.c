/* Tests of paramserver/quantize (bfloat16 and 1-bit codecs) and paramserver/shard (the
 * split of the vector): pure functions, checked against independent references. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "paramserver/quantize.h"
#include "paramserver/shard.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Reference: the nearer of the two bfloat16 neighbours in double arithmetic, ties to
 * the even one; overflow past the largest bfloat16 (by at least half an ulp) to inf. */
static uint16_t ref_bf16(float f) {
    uint32_t u = bits_of(f);
    uint16_t lo = (uint16_t)(u >> 16);
    if ((u & 0xffffu) == 0) return lo;
    uint16_t hi = (uint16_t)(lo + 1);
    double dlo = fabs((double)f - (double)float_of((uint32_t)lo << 16));
    double dhi = fabs((double)float_of((uint32_t)hi << 16) - (double)f);
    if ((hi & 0x7f80u) == 0x7f80u) /* hi is inf: compare against the next step past the max */
        dhi = fabs(ldexp(1.0, 128) - fabs((double)f));
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1u) ? hi : lo;
}

static void test_bf16_known_values(void **state) {
    (void)state;
    assert_int_equal(fl_bf16_from_float(1.0f), 0x3f80);
    assert_int_equal(fl_bf16_from_float(-2.0f), 0xc000);
    assert_int_equal(fl_bf16_from_float(-0.0f), 0x8000);
    /* exactly halfway: ties to even */
    assert_int_equal(fl_bf16_from_float(float_of(0x3f808000u)), 0x3f80);
    assert_int_equal(fl_bf16_from_float(float_of(0x3f818000u)), 0x3f82);
    /* just above / below halfway */
    assert_int_equal(fl_bf16_from_float(float_of(0x3f808001u)), 0x3f81);
    assert_int_equal(fl_bf16_from_float(float_of(0x3f807fffu)), 0x3f80);
    /* infinities stay, the largest floats round up to inf, NaN stays NaN with its sign */
    assert_int_equal(fl_bf16_from_float(INFINITY), 0x7f80);
    assert_int_equal(fl_bf16_from_float(-INFINITY), 0xff80);
    assert_int_equal(fl_bf16_from_float(3.4028235e38f), 0x7f80);
    uint16_t n = fl_bf16_from_float(NAN);
    assert_true(isnan(fl_bf16_to_float(n)));
    uint16_t nn = fl_bf16_from_float(float_of(0xff800001u)); /* a NaN whose payload is in the low bits */
    assert_true(isnan(fl_bf16_to_float(nn)));
    assert_true(nn & 0x8000u);
    /* widening is exact */
    assert_true(fl_bf16_to_float(0x3f80) == 1.0f);
    assert_true(fl_bf16_to_float(0x4049) == float_of(0x40490000u));
}

static void test_bf16_against_reference(void **state) {
    (void)state;
    uint32_t x = 2463534242u;
    enum { N = 200000 };
    float *src = malloc(N * sizeof *src), *back = malloc(N * sizeof *back);
    uint8_t *enc = malloc(2 * N);
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        uint32_t u = x;
        if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu; /* finite */
        src[i] = float_of(u);
    }
    fl_bf16_encode(src, N, enc);
    fl_bf16_decode(enc, N, back);
    for (int i = 0; i < N; i++) {
        uint16_t want = ref_bf16(src[i]);
        uint16_t got = (uint16_t)(enc[2 * i] | enc[2 * i + 1] << 8);
        if (got != want) fail_msg("element %d: %08x -> %04x, expected %04x", i, bits_of(src[i]), got, want);
        assert_int_equal(bits_of(back[i]), (uint32_t)want << 16);
    }
    free(src);
    free(back);
    free(enc);
}

static void test_q1_bits_exact(void **state) {
    (void)state;
    float g[11] = {0.5f, -1.0f, 0.0f, 2.5f, -3.0f, -0.0f, 1.0f, -2.0f, 4.0f, 0.25f, -0.5f};
    float e[11] = {0};
    uint8_t bits[2] = {0xff, 0xff};
    float sp, sn;
    assert_int_equal(fl_q1_bytes(11), 2);
    assert_int_equal(fl_q1_bytes(8), 1);
    assert_int_equal(fl_q1_bytes(0), 0);
    fl_q1_encode(g, e, 11, bits, &sp, &sn);
    /* v >= 0 (-0.0 too): elements 0, 2, 3, 5, 6, 8, 9 */
    assert_int_equal(bits[0], 0x01 | 0x04 | 0x08 | 0x20 | 0x40);
    assert_int_equal(bits[1], 0x01 | 0x02); /* elements 8, 9; unused high bits zero */
    assert_float_equal(sp, (0.5 + 0 + 2.5 + 0 + 1 + 4 + 0.25) / 7, 1e-6);
    assert_float_equal(sn, (1.0 + 3 + 2 + 0.5) / 4, 1e-6);
    float d[11];
    fl_q1_decode(bits, 11, sp, sn, d);
    for (int i = 0; i < 11; i++) {
        assert_true(d[i] == (g[i] >= 0 ? sp : -sn));
        assert_float_equal(e[i], g[i] - d[i], 1e-6);
    }
    /* the residual is added in before the next encode */
    float g2[11] = {0};
    fl_q1_encode(g2, e, 11, bits, &sp, &sn);
    float e_old[11];
    for (int i = 0; i < 11; i++) e_old[i] = g[i] - d[i];
    for (int i = 0; i < 11; i++) assert_int_equal((bits[i >> 3] >> (i & 7)) & 1, e_old[i] >= 0);
    /* all of one sign: the other scale is 0 */
    float pos[3] = {1, 2, 3}, r[3] = {0};
    fl_q1_encode(pos, r, 3, bits, &sp, &sn);
    assert_int_equal(bits[0], 0x07);
    assert_float_equal(sp, 2.0, 1e-6);
    assert_true(sn == 0.0f);
}

/* Error feedback: sum_t d_t = sum_t g_t - e_T, so the running sums track each other
 * within the residual, which stays bounded; without feedback they drift apart. */
static void test_q1_error_feedback(void **state) {
    (void)state;
    enum { N = 512, T = 2000 };
    float *g = malloc(N * sizeof *g), *e = calloc(N, sizeof *e), *d = malloc(N * sizeof *d);
    float *e0 = calloc(N, sizeof *e0);
    double *sum_g = calloc(N, sizeof *sum_g), *sum_d = calloc(N, sizeof *sum_d), *sum_d0 = calloc(N, sizeof *sum_d0);
    uint8_t bits[N / 8];
    uint32_t x = 12345;
    double max_resid = 0;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < N; i++) {
            x = x * 1664525u + 1013904223u;
            /* a per-element bias plus noise, as gradients have */
            g[i] = 0.01f * (float)(i % 7 - 3) + ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.1f;
            sum_g[i] += g[i];
        }
        float sp, sn;
        fl_q1_encode(g, e, N, bits, &sp, &sn);
        fl_q1_decode(bits, N, sp, sn, d);
        for (int i = 0; i < N; i++) sum_d[i] += d[i];
        for (int i = 0; i < N; i++) e0[i] = 0; /* no feedback */
        fl_q1_encode(g, e0, N, bits, &sp, &sn);
        fl_q1_decode(bits, N, sp, sn, d);
        for (int i = 0; i < N; i++) sum_d0[i] += d[i];
        for (int i = 0; i < N; i++) max_resid = fmax(max_resid, fabs((double)e[i]));
    }
    double worst = 0, worst0 = 0;
    for (int i = 0; i < N; i++) {
        double gap = fabs(sum_g[i] - sum_d[i]);
        assert_true(fabs(gap - fabs((double)e[i])) < 1e-3 + 1e-4 * fabs(sum_g[i])); /* sum d = sum g - e */
        worst = fmax(worst, gap);
        worst0 = fmax(worst0, fabs(sum_g[i] - sum_d0[i]));
    }
    /* bounded: a few gradient magnitudes, not growing with T (|g| <= 0.08 here) */
    assert_true(max_resid < 1.0);
    assert_true(worst < 1.0);
    assert_true(worst0 > 10 * worst);
    free(g), free(e), free(d), free(e0), free(sum_g), free(sum_d), free(sum_d0);
}

static void test_q1_size(void **state) {
    (void)state;
    size_t n = 1700000;
    double ratio = (double)(fl_q1_bytes(n) + 8) / (double)(4 * n);
    assert_true(ratio > 1.0 / 32 * 0.99 && ratio < 1.0 / 32 * 1.01);
}

static void test_shard_ranges(void **state) {
    (void)state;
    for (uint64_t total = 0; total <= 60; total++)
        for (int P = 1; P <= 9; P++) {
            uint64_t next = 0;
            for (int s = 0; s < P; s++) {
                uint64_t off, n;
                fl_param_shard_range(total, P, s, &off, &n);
                assert_int_equal(off, next); /* contiguous, in order */
                assert_int_equal(n, total / (uint64_t)P + ((uint64_t)s < total % (uint64_t)P)); /* balanced */
                next = off + n;
            }
            assert_int_equal(next, total); /* covers the vector */
        }
    uint64_t off, n;
    fl_param_shard_range(1700001, 2, 0, &off, &n);
    assert_int_equal(off, 0);
    assert_int_equal(n, 850001);
    fl_param_shard_range(1700001, 2, 1, &off, &n);
    assert_int_equal(off, 850001);
    assert_int_equal(n, 850000);
    fl_param_shard_range(10, 1, 0, &off, &n);
    assert_int_equal(off, 0);
    assert_int_equal(n, 10);
    fl_param_shard_range(UINT64_MAX, 3, 2, &off, &n);
    assert_int_equal(off + n, UINT64_MAX);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_known_values), cmocka_unit_test(test_bf16_against_reference),
        cmocka_unit_test(test_q1_bits_exact),     cmocka_unit_test(test_q1_error_feedback),
        cmocka_unit_test(test_q1_size),           cmocka_unit_test(test_shard_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
