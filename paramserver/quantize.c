/* quantize: bfloat16 and 1-bit encodings (see quantize.h). */
#include "paramserver/quantize.h"

#include <string.h>

uint16_t fl_bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x0040u); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float fl_bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void fl_bf16_encode(const float *src, size_t n, uint8_t *dst) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h = fl_bf16_from_float(src[i]);
        dst[2 * i] = (uint8_t)h;
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

void fl_bf16_decode(const uint8_t *src, size_t n, float *dst) {
    /* Blocks of little-endian uint16 loads (memcpy: any alignment; the compiler turns the
     * inner loop into vector shifts) widened into a float block. */
    enum { B = 256 };
    uint16_t h[B];
    uint32_t u[B];
    for (size_t i = 0; i < n; i += B) {
        size_t k = n - i < B ? n - i : B;
        memcpy(h, src + 2 * i, 2 * k);
        for (size_t j = 0; j < k; j++) u[j] = (uint32_t)h[j] << 16;
        memcpy(dst + i, u, 4 * k);
    }
}

size_t fl_q1_bytes(size_t n) {
    return n / 8 + (n % 8 != 0);
}

void fl_q1_encode(const float *g, float *residual, size_t n, uint8_t *bits, float *scale_pos, float *scale_neg) {
    double sum_pos = 0, sum_neg = 0;
    size_t n_pos = 0;
    memset(bits, 0, fl_q1_bytes(n));
    for (size_t i = 0; i < n; i++) {
        float v = g[i] + residual[i];
        residual[i] = v; /* v for now; the decoded value is subtracted below */
        if (v >= 0.0f) {
            bits[i >> 3] |= (uint8_t)(1u << (i & 7));
            sum_pos += v;
            n_pos++;
        } else {
            sum_neg -= v;
        }
    }
    size_t n_neg = n - n_pos;
    float sp = n_pos ? (float)(sum_pos / (double)n_pos) : 0.0f;
    float sn = n_neg ? (float)(sum_neg / (double)n_neg) : 0.0f;
    for (size_t i = 0; i < n; i++) residual[i] -= (bits[i >> 3] >> (i & 7)) & 1u ? sp : -sn;
    *scale_pos = sp;
    *scale_neg = sn;
}

void fl_q1_decode(const uint8_t *bits, size_t n, float scale_pos, float scale_neg, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = (bits[i >> 3] >> (i & 7)) & 1u ? scale_pos : -scale_neg;
}
