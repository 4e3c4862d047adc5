/* quantize: the wire encodings of parameter and gradient vectors, as pure functions.
 *
 * bfloat16 (fetches): the top 16 bits of a float32, rounded to nearest even; NaN stays
 * NaN (quiet, sign kept), infinities stay infinite, and finite values that round past
 * the largest bfloat16 become infinite, as in every reference conversion. Widening back
 * is exact. Bytes are little-endian, 2 per element.
 *
 * 1-bit gradients with error feedback (pushes; Seide et al., "1-bit SGD", 2014): the
 * sender keeps a residual e (one float per element, zero at first). For a gradient g:
 *   v = g + e
 *   bit_i = (v_i >= 0)                      packed little-endian: bit i % 8 of byte i / 8
 *   scale_pos = mean of v_i over bit_i = 1  (0 when there is none)
 *   scale_neg = mean of |v_i| over bit_i = 0 (0 when there is none)
 *   d_i = bit_i ? +scale_pos : -scale_neg   what the receiver decodes
 *   e = v - d                               carried into the next encode
 * So the running sum of decoded gradients equals the running sum of true gradients minus
 * the current residual: sum_t d_t = sum_t g_t - e_T (exactly, up to float rounding).
 * The payload is ceil(n / 8) bytes plus two floats: about 1/32 of float32.
 *
 * Inputs must be finite (the callers check); nothing here allocates or fails.
 * Thread-safety: pure functions over caller-owned buffers. */
#ifndef FL_PARAMSERVER_QUANTIZE_H
#define FL_PARAMSERVER_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

uint16_t fl_bf16_from_float(float f);
float fl_bf16_to_float(uint16_t h);
/* dst: 2n bytes, little-endian bfloat16 of src (n). */
void fl_bf16_encode(const float *src, size_t n, uint8_t *dst);
/* dst (n) floats from 2n little-endian bfloat16 bytes (any alignment). */
void fl_bf16_decode(const uint8_t *src, size_t n, float *dst);

/* Bytes of the sign bits of n elements: ceil(n / 8). */
size_t fl_q1_bytes(size_t n);
/* Encodes g (n) with the residual (n, updated in place) into bits (fl_q1_bytes(n)
 * bytes, fully written) and the two scales. */
void fl_q1_encode(const float *g, float *residual, size_t n, uint8_t *bits, float *scale_pos, float *scale_neg);
/* out (n) = the decoded gradient. */
void fl_q1_decode(const uint8_t *bits, size_t n, float scale_pos, float scale_neg, float *out);

#endif
