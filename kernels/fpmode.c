/* fpmode: flushing denormal floats to zero (see fpmode.h). */
#include "kernels/fpmode.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FLUSH_BITS 0x8040u /* MXCSR: FTZ (bit 15) and DAZ (bit 6) */
static int thread_set(int on) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(on ? csr | FLUSH_BITS : csr & ~FLUSH_BITS);
    return 1;
}
int fl_fp_denormals_flushed(void) {
    return (_mm_getcsr() & FLUSH_BITS) == FLUSH_BITS;
}
#elif defined(__aarch64__)
#define FLUSH_BIT (1ull << 24) /* FPCR.FZ */
static unsigned long long fpcr_get(void) {
    unsigned long long v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return v;
}
static int thread_set(int on) {
    const unsigned long long v = fpcr_get();
    __asm__ volatile("msr fpcr, %0" : : "r"(on ? v | FLUSH_BIT : v & ~FLUSH_BIT));
    return 1;
}
int fl_fp_denormals_flushed(void) {
    return (fpcr_get() & FLUSH_BIT) != 0;
}
#else
static int thread_set(int on) {
    (void)on;
    return 0;
}
int fl_fp_denormals_flushed(void) {
    return 0;
}
#endif

int fl_fp_flush_denormals(int on) {
    const int have = thread_set(on);
#ifdef _OPENMP
    if (have) {
#pragma omp parallel num_threads(omp_get_max_threads())
        thread_set(on);
    }
#endif
    return have;
}
