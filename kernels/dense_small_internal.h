/* dense_small_internal: what dense_small's files share (kernels/dense_small.h is the
 * interface): dense_small.c (the choice of path, dense_thin's weights) and
 * dense_small_avx2.c (the AVX2 + FMA tiles). Not for use outside kernels/dense_small*.c. */
#ifndef FL_KERNELS_DENSE_SMALL_INTERNAL_H
#define FL_KERNELS_DENSE_SMALL_INTERNAL_H

/* The tiles are built where GCC's target attributes are (x86-64). */
#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX2_VERSION 1
#endif

#ifdef HAVE_AVX2_VERSION
/* fl_dense_small_forward and fl_dense_thin_forward in AVX2 + FMA (dense_small_avx2.c). */
void fl__dense_small_avx2(const float *x, const float *w, const float *bias, float *y, int B, int in, int out,
                          int relu);
void fl__dense_thin_avx2(const float *x, const float *wt, const float *bias, float *y, int B, int in, int out,
                         int relu);
#endif

#endif
