/* cuda_test_util: what the GPU tests share (test_kernels_cuda_gpu.c,
 * test_learner_cuda_gpu.c) — the skip when there is no GPU, OK() around calls that take
 * an fl_err_t, host buffers, and element-by-element comparisons that name the seed.
 *
 * Include after <cmocka.h>, tests/seed_util.h and kernels/cuda/cuda.h, inside
 * #ifdef FLEET_HAVE_CUDA. */
#ifndef FL_TESTS_CUDA_TEST_UTIL_H
#define FL_TESTS_CUDA_TEST_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 1 when a GPU is present (its name printed); else 0, with the reason printed. */
static inline int have_gpu(void) {
    int n = 0;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_cuda_device_count(&n, &e) != FL_OK) {
        print_message("SKIP: no GPU (%s)\n", e.msg);
        return 0;
    }
    char name[256];
    if (fl_cuda_device_name(0, name, sizeof name, &e) == FL_OK) print_message("GPU 0: %s\n", name);
    return 1;
}

/* Fails the test (naming the seed, the call and its error) unless expr is FL_OK; expr may
 * pass E, the error record OK() declares. */
#define OK(expr)                                                                    \
    do {                                                                            \
        fl_err_t e_;                                                                \
        fl_err_init(&e_);                                                           \
        fl_status s_ = (expr);                                                      \
        if (s_ != FL_OK) {                                                          \
            SEED_NOTE();                                                            \
            print_error("%s failed: %s (%s)\n", #expr, fl_status_name(s_), e_.msg); \
            fail();                                                                 \
        }                                                                           \
    } while (0)

/* The error record OK() declares, for calls that take one. */
#define E (&e_)

/* n zeroed floats (at least one). */
static inline float *host(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}

static inline double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i]) > m) m = fabs((double)a[i]);
    return m;
}

/* Every element within atol + rtol |want|; names the first that is not. */
static inline void check_close_all(const char *what, const float *got, const float *want, size_t n, double atol,
                                   double rtol) {
    for (size_t i = 0; i < n; i++) CHECK_CLOSE(got[i], want[i], atol, rtol, "%s[%zu] of %zu", what, i, n);
}

/* Every element the same bits as want; names the first that is not. */
static inline void check_exact(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            SEED_NOTE();
            print_error("%s[%zu] of %zu: got %.9g, expected %.9g (bit-exact)\n", what, i, n, (double)got[i],
                        (double)want[i]);
            fail();
        }
}

#endif
