/* fpmode: how the CPU treats denormal (subnormal) floats, below FLT_MIN (1.2e-38).
 *
 * Many CPUs compute with denormals through microcode, one to two orders of magnitude
 * slower than with normal numbers. A learner makes them all the time: Adam's moment
 * estimates of a weight whose gradient stays 0 (a first-layer weight of an input that is
 * rarely set, as most of MinAtar's are) decay geometrically through the denormal range,
 * and the whole optimizer step then runs at the microcode's pace. Flushing them to zero
 * (results: FTZ; inputs: DAZ on x86, FZ on AArch64) costs nothing in accuracy that a
 * float32 network can see, and is what TensorFlow and XLA do on the CPU by default; it
 * stays deterministic (the same inputs give the same bits).
 *
 * The mode belongs to each thread. A thread inherits its creator's mode (pthread_create),
 * so setting it on a thread before it starts any others covers them all; the threads an
 * OpenMP pool already holds are set too. */
#ifndef FL_KERNELS_FPMODE_H
#define FL_KERNELS_FPMODE_H

/* Sets (on != 0) or clears flushing denormals to zero on the calling thread and on the
 * threads of its OpenMP pool (as many as omp_get_max_threads()). Returns 1 when the CPU
 * has such a mode (x86-64 SSE, AArch64), 0 when it has none (nothing changed). */
int fl_fp_flush_denormals(int on);

/* 1 when the calling thread flushes denormals to zero, else 0. */
int fl_fp_denormals_flushed(void);

#endif
