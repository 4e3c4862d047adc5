/* reduce: the all-reduce that keeps several Ape-X learners in step.
 *
 * With learner.count = L > 1 in apex mode, every learner computes the gradient of its
 * own batch, and fl_reduce_mean replaces it, on every learner, by the mean over the L
 * learners; each then takes the same optimizer step, so the L copies of the network stay
 * identical. The algorithm is the bandwidth-optimal ring: the vector is cut into L
 * chunks; L - 1 steps of reduce-scatter (each learner sends one chunk to its right-hand
 * neighbour and adds the chunk received from its left) leave learner r with the full sum
 * of chunk r + 1, and L - 1 steps of all-gather pass the finished chunks round. Each
 * learner sends and receives 2 (L - 1) / L of the vector, whatever L is. A finished chunk
 * is copied, never re-added, so every learner ends with bit-identical values.
 *
 * The transport is a table of functions (fl_reduce_ops_t): fl_reduce_create_mpi builds
 * one over an MPI communicator (Open MPI's point-to-point MPI_Sendrecv and MPI_Bcast;
 * only when fleet is built with MPI), and tests build one over threads in a process.
 *
 * Failure: a transport error comes back as its status with the transport's message,
 * naming the step and the peer; the buffer is then unspecified. A learner that fails
 * must still not leave its peers waiting: the learner keeps calling fl_reduce_mean with
 * its stop flag set (see mode_group.c), and the launcher aborts the job when a peer died.
 * Thread-safety: one owner thread per fl_reduce_t; each member of the group calls the
 * same functions in the same order. */
#ifndef FL_LEARNER_REDUCE_H
#define FL_LEARNER_REDUCE_H

#include <stddef.h>

#include "common/status.h"

typedef struct fl_reduce_ops {
    /* Sends send[0..ns) to rank dest and receives recv[0..nr) from rank src, at once
     * (neither may wait for the other to finish first). */
    fl_status (*sendrecv)(void *ctx, const float *send, size_t ns, int dest, float *recv, size_t nr, int src,
                          fl_err_t *err);
    /* buf[0..bytes) of rank root is copied into every other member's buf. */
    fl_status (*broadcast)(void *ctx, void *buf, size_t bytes, int root, fl_err_t *err);
    void (*destroy)(void *ctx); /* may be NULL */
} fl_reduce_ops_t;

typedef struct fl_reduce fl_reduce_t;

/* A member `rank` of a group of `size` (>= 1) over `ops` (copied) and ctx (owned from
 * here on: ops->destroy(ctx) runs at fl_reduce_destroy, or here on failure). */
fl_status fl_reduce_create(int rank, int size, const fl_reduce_ops_t *ops, void *ctx, fl_reduce_t **out, fl_err_t *err);
/* A member over an MPI communicator (`comm` points to an MPI_Comm, which must outlive
 * the reducer). FL_UNIMPLEMENTED when fleet was built without MPI. */
fl_status fl_reduce_create_mpi(const void *comm, fl_reduce_t **out, fl_err_t *err);
void fl_reduce_destroy(fl_reduce_t *r); /* NULL is a no-op */

int fl_reduce_rank(const fl_reduce_t *r);
int fl_reduce_size(const fl_reduce_t *r);

/* buf[0..n) = the element-wise sum over the group (ring all-reduce, as above). No
 * allocation after the first call with the largest n. */
fl_status fl_reduce_sum(fl_reduce_t *r, float *buf, size_t n, fl_err_t *err);
/* fl_reduce_sum, then divided by the group's size. */
fl_status fl_reduce_mean(fl_reduce_t *r, float *buf, size_t n, fl_err_t *err);
/* buf[0..bytes) of `root` to every member. */
fl_status fl_reduce_broadcast(fl_reduce_t *r, void *buf, size_t bytes, int root, fl_err_t *err);
/* Bytes this member has sent through sendrecv since create (for metrics and tests). */
size_t fl_reduce_bytes_sent(const fl_reduce_t *r);

#endif
