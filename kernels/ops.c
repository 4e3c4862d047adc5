/* ops: dense, relu and dueling forward/backward on the CPU (see ops.h).
 *
 * GEMM mapping for row-major x (B, in), W (out, in), y (B, out):
 *   y  = x W^T : sgemm(NoTrans, Trans,   B,   out, in)
 *   dx = dy W  : sgemm(NoTrans, NoTrans, B,   in,  out)
 *   dW = dy^T x: sgemm(Trans,   NoTrans, out, in,  B)
 * A batch of one goes through sgemv/sger, which have far less call overhead (the actors'
 * single-observation forward). Where BLAS would be called with beta = 0 on a vector we
 * zero the output first instead, so that garbage (NaN) in it can never leak through
 * whatever the library does with beta = 0. */
#include "kernels/ops.h"

#include <assert.h>
#include <cblas.h>
#include <string.h>

/* Elementwise loops are written once as a loop over a span and run over spans of BLOCK
 * elements plus a tail, with restrict-qualified pointers and branch-free selects: a span
 * of constant length is what the compiler turns into SIMD code at -O2, where a plain
 * loop would stay scalar and, for relu on data of random sign, mispredict a branch on
 * every other element. */
#define BLOCK 16

/* acc += row */
static inline void add_span(const float *restrict row, float *restrict acc, size_t count) {
    for (size_t j = 0; j < count; j++) acc[j] += row[j];
}

static void add_row(const float *row, float *acc, size_t n) {
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) add_span(row + i, acc + i, BLOCK);
    add_span(row + i, acc + i, n - i);
}

void fl_dense_forward(const float *x, const float *w, const float *b, int B, int in, int out, float *y) {
    assert(x && w && y && B >= 1 && in >= 1 && out >= 1);
    if (b) {
        for (int r = 0; r < B; r++) memcpy(y + (size_t)r * out, b, (size_t)out * sizeof(float));
    } else {
        memset(y, 0, (size_t)B * out * sizeof(float));
    }
    if (B == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, 1.0f, y, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out, in, 1.0f, x, in, w, in, 1.0f, y, out);
    }
}

void fl_dense_backward(const float *x, const float *w, const float *dy, int B, int in, int out, float *dx, float *dw,
                       float *db, int accumulate) {
    assert(x && w && dy && B >= 1 && in >= 1 && out >= 1);
    if (dx) {
        if (B == 1) {
            if (!accumulate) memset(dx, 0, (size_t)in * sizeof(float));
            cblas_sgemv(CblasRowMajor, CblasTrans, out, in, 1.0f, w, in, dy, 1, 1.0f, dx, 1);
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out, 1.0f, dy, out, w, in,
                        accumulate ? 1.0f : 0.0f, dx, in);
        }
    }
    if (dw && B == 1) {
        if (!accumulate) memset(dw, 0, (size_t)out * in * sizeof(float));
        cblas_sger(CblasRowMajor, out, in, 1.0f, dy, 1, x, 1, dw, in);
    } else if (dw) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, B, 1.0f, dy, out, x, in, accumulate ? 1.0f : 0.0f,
                    dw, in);
    }
    if (db) {
        if (!accumulate) memset(db, 0, (size_t)out * sizeof(float));
        for (int r = 0; r < B; r++) add_row(dy + (size_t)r * out, db, (size_t)out);
    }
}

static inline void relu_fwd_span(const float *restrict x, float *restrict y, size_t count) {
    for (size_t j = 0; j < count; j++) {
        const float v = x[j];
        y[j] = v < 0.0f ? 0.0f : v;
    }
}

static inline void relu_fwd_span_inplace(float *restrict y, size_t count) {
    for (size_t j = 0; j < count; j++) {
        const float v = y[j];
        y[j] = v < 0.0f ? 0.0f : v;
    }
}

void fl_relu_forward(const float *x, float *y, size_t n) {
    assert(n == 0 || (x && y));
    if (n == 0) return;
    size_t i = 0;
    if (x == y) {
        for (; i + BLOCK <= n; i += BLOCK) relu_fwd_span_inplace(y + i, BLOCK);
        relu_fwd_span_inplace(y + i, n - i);
    } else {
        for (; i + BLOCK <= n; i += BLOCK) relu_fwd_span(x + i, y + i, BLOCK);
        relu_fwd_span(x + i, y + i, n - i);
    }
}

static inline void relu_bwd_span(const float *restrict y, const float *restrict dy, float *restrict dx, size_t count) {
    for (size_t j = 0; j < count; j++) {
        const float d = dy[j];
        dx[j] = y[j] > 0.0f ? d : 0.0f;
    }
}

static inline void relu_bwd_span_inplace(const float *restrict y, float *restrict d, size_t count) {
    for (size_t j = 0; j < count; j++) {
        const float v = d[j];
        d[j] = y[j] > 0.0f ? v : 0.0f;
    }
}

void fl_relu_backward(const float *y, const float *dy, float *dx, size_t n) {
    assert(n == 0 || (y && dy && dx));
    if (n == 0) return;
    size_t i = 0;
    if (dx == dy) {
        for (; i + BLOCK <= n; i += BLOCK) relu_bwd_span_inplace(y + i, dx + i, BLOCK);
        relu_bwd_span_inplace(y + i, dx + i, n - i);
    } else {
        for (; i + BLOCK <= n; i += BLOCK) relu_bwd_span(y + i, dy + i, dx + i, BLOCK);
        relu_bwd_span(y + i, dy + i, dx + i, n - i);
    }
}

void fl_dueling_combine_forward(const float *va, int B, int A, float *q) {
    assert(va && q && B >= 1 && A >= 1);
    const float inv_a = 1.0f / (float)A;
    for (int r = 0; r < B; r++) {
        const float *row = va + (size_t)r * (A + 1);
        float *qr = q + (size_t)r * A;
        float sum = 0.0f;
        for (int a = 0; a < A; a++) sum += row[1 + a];
        const float base = row[0] - sum * inv_a;
        for (int a = 0; a < A; a++) qr[a] = base + row[1 + a];
    }
}

void fl_dueling_combine_backward(const float *dq, int B, int A, float *dva) {
    assert(dq && dva && B >= 1 && A >= 1);
    const float inv_a = 1.0f / (float)A;
    for (int r = 0; r < B; r++) {
        const float *dqr = dq + (size_t)r * A;
        float *row = dva + (size_t)r * (A + 1);
        float sum = 0.0f;
        for (int a = 0; a < A; a++) sum += dqr[a];
        const float mean = sum * inv_a;
        row[0] = sum;
        for (int a = 0; a < A; a++) row[1 + a] = dqr[a] - mean;
    }
}

void fl_dueling_forward(const float *h, const float *w, const float *b, int B, int H, int A, float *va, float *q) {
    fl_dense_forward(h, w, b, B, H, A + 1, va);
    fl_dueling_combine_forward(va, B, A, q);
}

void fl_dueling_backward(const float *h, const float *w, const float *dq, int B, int H, int A, float *dva, float *dh,
                         float *dw, float *db, int accumulate) {
    fl_dueling_combine_backward(dq, B, A, dva);
    fl_dense_backward(h, w, dva, B, H, A + 1, dh, dw, db, accumulate);
}

/* ---- conv2d ------------------------------------------------------------------------
 * Samples go through in chunks of up to CONV_CHUNK_FLOATS of im2col matrix: the chunk's
 * columns side by side, col (Cin K K, n Ho Wo), so that one GEMM per chunk does the work
 * (W (Cout, Cin K K) x col); the product (Cout, n Ho Wo) is then permuted into the
 * samples' (Cout, Ho Wo) blocks. Backward permutes dy the same way, dW += dyT col^T and
 * dcol = W^T dyT in one GEMM each, and scatters dcol back per sample (col2im). */

#define CONV_CHUNK_FLOATS ((size_t)1 << 22) /* 16 MiB of im2col per chunk */

int fl_conv2d_shape_init(fl_conv2d_shape_t *s) {
    if (s->cin < 1 || s->h < 1 || s->w < 1 || s->cout < 1 || s->k < 1 || s->stride < 1 || s->pad < 0) return -1;
    int hp = s->h + 2 * s->pad, wp = s->w + 2 * s->pad;
    if (s->k > hp || s->k > wp) return -1;
    s->ho = (hp - s->k) / s->stride + 1;
    s->wo = (wp - s->k) / s->stride + 1;
    return 0;
}

/* Samples per chunk for a batch of B. */
static int conv_chunk(const fl_conv2d_shape_t *s, int B) {
    size_t per = (size_t)s->cin * s->k * s->k * (size_t)s->ho * s->wo;
    size_t n = per ? CONV_CHUNK_FLOATS / per : 1;
    if (n < 1) n = 1;
    return n < (size_t)B ? (int)n : B;
}

size_t fl_conv2d_col_floats(const fl_conv2d_shape_t *s, int max_batch) {
    size_t n = (size_t)conv_chunk(s, max_batch), howo = (size_t)s->ho * s->wo;
    return n * howo * ((size_t)s->cin * s->k * s->k + (size_t)s->cout);
}

/* col rows (c, ky, kx) of length ld; this sample's Ho Wo columns start at col: column
 * (oy, ox) holds x[c, oy S + ky - P, ox S + kx - P] (0 outside the input). */
static void im2col(const fl_conv2d_shape_t *s, const float *x, float *col, size_t ld) {
    const int K = s->k, S = s->stride, P = s->pad;
    for (int c = 0; c < s->cin; c++)
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                float *row = col + ((size_t)(c * K + ky) * K + kx) * ld;
                const float *xc = x + (size_t)c * s->h * s->w;
                for (int oy = 0; oy < s->ho; oy++) {
                    int iy = oy * S + ky - P;
                    float *r = row + (size_t)oy * s->wo;
                    if (iy < 0 || iy >= s->h) {
                        memset(r, 0, (size_t)s->wo * sizeof(float));
                        continue;
                    }
                    const float *xr = xc + (size_t)iy * s->w;
                    if (S == 1 && kx - P >= 0 && s->wo - 1 + kx - P < s->w) {
                        memcpy(r, xr + kx - P, (size_t)s->wo * sizeof(float));
                        continue;
                    }
                    for (int ox = 0; ox < s->wo; ox++) {
                        int ix = ox * S + kx - P;
                        r[ox] = ix >= 0 && ix < s->w ? xr[ix] : 0.0f;
                    }
                }
            }
}

/* dx += col2im(dcol) for one sample whose columns start at dcol (rows of length ld). */
static void col2im_add(const fl_conv2d_shape_t *s, const float *dcol, size_t ld, float *dx) {
    const int K = s->k, S = s->stride, P = s->pad;
    for (int c = 0; c < s->cin; c++)
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                const float *row = dcol + ((size_t)(c * K + ky) * K + kx) * ld;
                float *xc = dx + (size_t)c * s->h * s->w;
                for (int oy = 0; oy < s->ho; oy++) {
                    int iy = oy * S + ky - P;
                    if (iy < 0 || iy >= s->h) continue;
                    const float *r = row + (size_t)oy * s->wo;
                    float *xr = xc + (size_t)iy * s->w;
                    for (int ox = 0; ox < s->wo; ox++) {
                        int ix = ox * S + kx - P;
                        if (ix >= 0 && ix < s->w) xr[ix] += r[ox];
                    }
                }
            }
}

void fl_conv2d_forward(const fl_conv2d_shape_t *s, const float *x, const float *w, const float *b, int B,
                       float *scratch, float *y) {
    assert(s && x && w && scratch && y && B >= 1);
    const int M = s->cout, HW = s->ho * s->wo, Kd = s->cin * s->k * s->k, chunk = conv_chunk(s, B);
    const size_t in_sz = (size_t)s->cin * s->h * s->w, out_sz = (size_t)M * HW;
    float *col = scratch, *prod = scratch + (size_t)chunk * HW * Kd;
    for (int n0 = 0; n0 < B; n0 += chunk) {
        const int n = B - n0 < chunk ? B - n0 : chunk;
        const size_t ld = (size_t)n * HW;
        for (int j = 0; j < n; j++) im2col(s, x + (size_t)(n0 + j) * in_sz, col + (size_t)j * HW, ld);
        for (int m = 0; m < M; m++) {
            float v = b ? b[m] : 0.0f;
            float *pr = prod + (size_t)m * ld;
            for (size_t j = 0; j < ld; j++) pr[j] = v;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, (int)ld, Kd, 1.0f, w, Kd, col, (int)ld, 1.0f, prod,
                    (int)ld);
        for (int j = 0; j < n; j++) /* (Cout, n HW) -> n x (Cout, HW) */
            for (int m = 0; m < M; m++)
                memcpy(y + (size_t)(n0 + j) * out_sz + (size_t)m * HW, prod + (size_t)m * ld + (size_t)j * HW,
                       (size_t)HW * sizeof(float));
    }
}

void fl_conv2d_backward(const fl_conv2d_shape_t *s, const float *x, const float *w, const float *dy, int B,
                        float *scratch, float *dx, float *dw, float *db, int accumulate) {
    assert(s && x && w && dy && scratch && B >= 1);
    const int M = s->cout, HW = s->ho * s->wo, Kd = s->cin * s->k * s->k, chunk = conv_chunk(s, B);
    const size_t in_sz = (size_t)s->cin * s->h * s->w, out_sz = (size_t)M * HW;
    float *col = scratch, *dyt = scratch + (size_t)chunk * HW * Kd;
    if (!accumulate) {
        if (dw) memset(dw, 0, (size_t)M * Kd * sizeof(float));
        if (db) memset(db, 0, (size_t)M * sizeof(float));
        if (dx) memset(dx, 0, (size_t)B * in_sz * sizeof(float));
    }
    for (int n0 = 0; n0 < B; n0 += chunk) {
        const int n = B - n0 < chunk ? B - n0 : chunk;
        const size_t ld = (size_t)n * HW;
        for (int j = 0; j < n; j++) /* n x (Cout, HW) -> (Cout, n HW) */
            for (int m = 0; m < M; m++)
                memcpy(dyt + (size_t)m * ld + (size_t)j * HW, dy + (size_t)(n0 + j) * out_sz + (size_t)m * HW,
                       (size_t)HW * sizeof(float));
        if (db)
            for (int m = 0; m < M; m++) {
                float acc = 0.0f;
                const float *r = dyt + (size_t)m * ld;
                for (size_t j = 0; j < ld; j++) acc += r[j];
                db[m] += acc;
            }
        if (dw) {
            for (int j = 0; j < n; j++) im2col(s, x + (size_t)(n0 + j) * in_sz, col + (size_t)j * HW, ld);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, Kd, (int)ld, 1.0f, dyt, (int)ld, col, (int)ld, 1.0f,
                        dw, Kd);
        }
        if (dx) {
            /* dcol (Kd, n HW) = W^T dyT, into the im2col scratch, then scattered back */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Kd, (int)ld, M, 1.0f, w, Kd, dyt, (int)ld, 0.0f, col,
                        (int)ld);
            for (int j = 0; j < n; j++) col2im_add(s, col + (size_t)j * HW, ld, dx + (size_t)(n0 + j) * in_sz);
        }
    }
}
