/* reduce: ring all-reduce over a pluggable transport, and its MPI transport (reduce.h). */
#include "learner/reduce.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifdef FLEET_HAVE_MPI
#include <mpi.h>
#endif

struct fl_reduce {
    int rank, size;
    fl_reduce_ops_t ops;
    void *ctx;
    float *scratch; /* one chunk received from the left */
    size_t scratch_n;
    size_t bytes_sent;
};

fl_status fl_reduce_create(int rank, int size, const fl_reduce_ops_t *ops, void *ctx, fl_reduce_t **out,
                           fl_err_t *err) {
    *out = NULL;
    fl_status s = FL_OK;
    if (!ops || !ops->sendrecv || !ops->broadcast)
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "reduce: a transport needs sendrecv and broadcast");
    else if (size < 1 || rank < 0 || rank >= size)
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "reduce: rank %d of a group of %d (expected 0 <= rank < size)", rank,
                       size);
    fl_reduce_t *r = s == FL_OK ? calloc(1, sizeof *r) : NULL;
    if (s == FL_OK && !r) s = fl_err_set(err, FL_NO_MEMORY, "reduce: out of memory");
    if (s != FL_OK) {
        if (ops && ops->destroy) ops->destroy(ctx);
        return s;
    }
    r->rank = rank;
    r->size = size;
    r->ops = *ops;
    r->ctx = ctx;
    *out = r;
    return FL_OK;
}

void fl_reduce_destroy(fl_reduce_t *r) {
    if (!r) return;
    if (r->ops.destroy) r->ops.destroy(r->ctx);
    free(r->scratch);
    free(r);
}

int fl_reduce_rank(const fl_reduce_t *r) {
    return r->rank;
}
int fl_reduce_size(const fl_reduce_t *r) {
    return r->size;
}
size_t fl_reduce_bytes_sent(const fl_reduce_t *r) {
    return r->bytes_sent;
}

/* Chunk c of n elements cut into p: the first n % p chunks have one more. */
static void chunk(size_t n, int p, int c, size_t *off, size_t *len) {
    size_t base = n / (size_t)p, extra = n % (size_t)p, uc = (size_t)c;
    *off = uc * base + (uc < extra ? uc : extra);
    *len = base + (uc < extra ? 1 : 0);
}

static int mod(int a, int p) {
    return ((a % p) + p) % p;
}

fl_status fl_reduce_sum(fl_reduce_t *r, float *buf, size_t n, fl_err_t *err) {
    const int p = r->size, me = r->rank;
    if (p == 1 || n == 0) return FL_OK;
    const int right = mod(me + 1, p), left = mod(me - 1, p);
    size_t max_chunk = n / (size_t)p + 1;
    if (r->scratch_n < max_chunk) {
        float *s = realloc(r->scratch, max_chunk * sizeof *s);
        if (!s) return fl_err_set(err, FL_NO_MEMORY, "reduce: out of memory for a chunk of %zu floats", max_chunk);
        r->scratch = s;
        r->scratch_n = max_chunk;
    }
    /* Reduce-scatter: at step s, send chunk me - s, receive chunk me - s - 1 and add it. */
    for (int step = 0; step < p - 1; step++) {
        size_t so, sl, ro, rl;
        chunk(n, p, mod(me - step, p), &so, &sl);
        chunk(n, p, mod(me - step - 1, p), &ro, &rl);
        fl_status s = r->ops.sendrecv(r->ctx, buf + so, sl, right, r->scratch, rl, left, err);
        if (s != FL_OK) {
            fl_err_prefix(err, "reduce: reduce-scatter step %d of %d (to %d, from %d)", step + 1, p - 1, right, left);
            return s;
        }
        r->bytes_sent += sl * sizeof(float);
        float *dst = buf + ro;
        for (size_t i = 0; i < rl; i++) dst[i] += r->scratch[i];
    }
    /* All-gather: member me now holds the sum of chunk me + 1; pass finished chunks on. */
    for (int step = 0; step < p - 1; step++) {
        size_t so, sl, ro, rl;
        chunk(n, p, mod(me + 1 - step, p), &so, &sl);
        chunk(n, p, mod(me - step, p), &ro, &rl);
        fl_status s = r->ops.sendrecv(r->ctx, buf + so, sl, right, buf + ro, rl, left, err);
        if (s != FL_OK) {
            fl_err_prefix(err, "reduce: all-gather step %d of %d (to %d, from %d)", step + 1, p - 1, right, left);
            return s;
        }
        r->bytes_sent += sl * sizeof(float);
    }
    return FL_OK;
}

fl_status fl_reduce_mean(fl_reduce_t *r, float *buf, size_t n, fl_err_t *err) {
    FL_TRY(fl_reduce_sum(r, buf, n, err));
    if (r->size > 1) {
        const float inv = 1.0f / (float)r->size;
        for (size_t i = 0; i < n; i++) buf[i] *= inv;
    }
    return FL_OK;
}

fl_status fl_reduce_broadcast(fl_reduce_t *r, void *buf, size_t bytes, int root, fl_err_t *err) {
    if (root < 0 || root >= r->size)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "reduce: broadcast from %d in a group of %d", root, r->size);
    if (r->size == 1 || bytes == 0) return FL_OK;
    fl_status s = r->ops.broadcast(r->ctx, buf, bytes, root, err);
    if (s != FL_OK) fl_err_prefix(err, "reduce: broadcast of %zu bytes from %d", bytes, root);
    return s;
}

/* ---- the MPI transport ------------------------------------------------------------- */

#ifdef FLEET_HAVE_MPI
#define REDUCE_TAG 7101

static fl_status mpi_fail(int rc, const char *what, fl_err_t *err) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return fl_err_set(err, FL_UNAVAILABLE, "%s: %.*s", what, len, msg);
}

static fl_status mpi_sendrecv(void *ctx, const float *send, size_t ns, int dest, float *recv, size_t nr, int src,
                              fl_err_t *err) {
    MPI_Comm comm = *(MPI_Comm *)ctx;
    if (ns > INT_MAX || nr > INT_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "MPI_Sendrecv: a chunk of more than %d floats", INT_MAX);
    int rc = MPI_Sendrecv(send, (int)ns, MPI_FLOAT, dest, REDUCE_TAG, recv, (int)nr, MPI_FLOAT, src, REDUCE_TAG, comm,
                          MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? FL_OK : mpi_fail(rc, "MPI_Sendrecv", err);
}

static fl_status mpi_broadcast(void *ctx, void *buf, size_t bytes, int root, fl_err_t *err) {
    MPI_Comm comm = *(MPI_Comm *)ctx;
    unsigned char *p = buf;
    while (bytes > 0) { /* MPI counts are ints */
        int part = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        int rc = MPI_Bcast(p, part, MPI_BYTE, root, comm);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Bcast", err);
        p += part;
        bytes -= (size_t)part;
    }
    return FL_OK;
}

static void mpi_destroy(void *ctx) {
    free(ctx);
}

fl_status fl_reduce_create_mpi(const void *comm, fl_reduce_t **out, fl_err_t *err) {
    *out = NULL;
    MPI_Comm *c = malloc(sizeof *c);
    if (!c) return fl_err_set(err, FL_NO_MEMORY, "reduce: out of memory");
    *c = *(const MPI_Comm *)comm;
    int rank = 0, size = 0;
    MPI_Comm_rank(*c, &rank);
    MPI_Comm_size(*c, &size);
    static const fl_reduce_ops_t ops = {mpi_sendrecv, mpi_broadcast, mpi_destroy};
    return fl_reduce_create(rank, size, &ops, c, out, err);
}
#else
fl_status fl_reduce_create_mpi(const void *comm, fl_reduce_t **out, fl_err_t *err) {
    (void)comm;
    *out = NULL;
    return fl_err_set(err, FL_UNIMPLEMENTED,
                      "reduce: fleet was built without MPI (install libopenmpi-dev and rebuild)");
}
#endif
