/* dnnl: the oneDNN backend of the CPU Q-network (qnet.h), next to the plain-C/OpenBLAS
 * reference in ops.h.
 *
 * A fl_dnnl_net_t runs one network's forward and backward with oneDNN primitives:
 * convolutions (forward, backward data, backward weights + bias) and dense layers (inner
 * product, forward, backward data, backward weights + bias), with relu fused into the
 * convolution or dense layer before it as a post-op. A dense layer that reads the
 * observations as they come takes them as sparse inputs when at most a quarter of a
 * batch's values are set (kernels/dense_sparse.h: MinAtar's 0/1 planes), its forward and
 * weight gradient then over the set values only. Fleet's own ops stay around them:
 * the dueling head's combine step, relu backward (on whatever layout the activation has)
 * and a relu that follows no convolution or dense layer. The network is the same as the
 * reference's: the same layer table (fl_qnet_layer), the same flat parameter and
 * gradient buffers, the same observation layout; only the arithmetic's order differs, so
 * results agree with the reference to rounding (tests/test_kernels_dnnl.c states the
 * tolerances).
 *
 * Plans. Everything is compiled per batch size into a plan: the primitives, their memory
 * objects and the buffers between them. Activations between convolutions stay in the
 * layout the chosen primitives want (blocked nChw16c on AVX-512); the first convolution
 * takes the observations as they come, (H, W, C), i.e. channels-last, or, where its
 * stride divides its kernel and it has no padding (the Nature CNN's), runs as a stride-1
 * convolution on the observations cut into stride x stride tiles stacked as channels
 * (space-to-depth, written by the copy of the observations into the plan, or on AVX-512
 * read from the observations where they are, forward and weight gradient; dnnl.c has the
 * details). The network's other edges are converted by reorders only where a layer
 * needs another layout (a dense layer after the convolutions takes the channel-major
 * flattening, as the reference does). A forward reads the weights in the layouts its
 * primitives chose (a dense layer's in a blocked one that needs no packing at each
 * call), converted from the flat parameter buffer when params_gen says they may have
 * changed since the plan last did; the backward reads the flat buffer itself.
 * The first forward at a batch size builds that plan's forward part, the first backward
 * its backward part, the first backward with an input gradient that part; later calls
 * at a batch size already seen allocate no memory of ours (oneDNN itself allocates a
 * small argument map at each primitive call). A network keeps the plans of its
 * FL_DNNL_MAX_PLANS most recently used batch sizes and destroys the oldest beyond that.
 *
 * Threads. Debian's oneDNN runs on OpenMP. A call runs with as many threads as OpenBLAS
 * is set to (openblas_get_num_threads: learner.threads in a learner, 1 in an actor or evaluator), so
 * one setting governs both CPU backends: before building or running a plan the calling
 * thread's OpenMP thread count (omp_set_num_threads, which is per thread) is set to it.
 * A plan remembers the count it was built for and is rebuilt when the count changed.
 * An OpenMP team meets at the end of every primitive, so with more threads than free
 * cores each primitive can wait for a descheduled thread: one thread is the right count
 * where other work shares the cores.
 *
 * Signals. forward and backward hold the calling thread's asynchronous signals while
 * they run (oneDNN's generated GEMM kernels move the stack pointer into the heap, where a
 * signal frame would corrupt it; see dnnl_run.c); held signals arrive as the call returns.
 *
 * Ownership: the network copies the layer table and keeps the parameter and gradient
 * pointers (the caller's buffers, which must outlive it); observations and outputs are
 * the caller's, read or written only during a call.
 * Failure: FL_UNIMPLEMENTED when built without oneDNN; FL_INVALID_ARGUMENT for a batch
 * outside 1..max_batch or NULL buffers; FL_FAILED_PRECONDITION for a backward whose batch
 * size is not the last forward's; FL_NO_MEMORY;
 * FL_INTERNAL when oneDNN refuses something (the message names the layer and the call).
 * Thread-safety: one owner per network; distinct networks may run on different threads
 * at once (each has its own engine and stream). */
#ifndef FL_KERNELS_DNNL_H
#define FL_KERNELS_DNNL_H

#include <stddef.h>

#include "common/status.h"
#include "kernels/qnet.h"

#define FL_DNNL_MAX_PLANS 8

typedef struct fl_dnnl_net fl_dnnl_net_t;

/* What the backend needs of a network (qnet.c fills it from its own layer table). */
typedef struct fl_dnnl_net_desc {
    const fl_qnet_layer_t *layers; /* in order, the appended head included */
    int num_layers;
    int img_h, img_w, img_c; /* image observations (H, W, C); all 0 for vectors */
    int obs_dim;             /* H W C for images */
    int num_actions;
    int max_batch;
    float *params; /* the network's flat parameter buffer (qnet.h) */
    float *grads;  /* its gradient buffer, written by the backward */
    /* Bumped by the owner at every (possible) change of params: a forward converts the
     * weights into its kernels' layouts again only when it moved since the last. */
    const unsigned long long *params_gen;
    /* Not 0 (read when a plan is made): an inference network (fl_qnet_set_inference) */
    const int *inference;
    /* Not 0 (read when a plan is made): oneDNN's primitives alone, none of fleet's own
     * kernels (FL_QNET_BACKEND_ONEDNN); may be NULL */
    const int *prims_only;
} fl_dnnl_net_desc_t;

/* 1 when fleet was built with oneDNN (FLEET_DNNL), else 0. */
int fl_dnnl_available(void);

/* Builds no plan yet. */
fl_status fl_dnnl_net_create(const fl_dnnl_net_desc_t *d, fl_dnnl_net_t **out, fl_err_t *err);
void fl_dnnl_net_destroy(fl_dnnl_net_t *n); /* NULL is a no-op */

/* q (B, num_actions) = Q(obs (B, obs_dim) * scale). Keeps the activations for a backward
 * at the same B. Where the first convolution reads the observations as they are
 * (fl_conv_img: a space-to-depth convolution on AVX-512), the backward reads obs again
 * for its weight gradient: obs must stay as it is until that backward. */
fl_status fl_dnnl_net_forward(fl_dnnl_net_t *n, const float *obs, float scale, int B, float *q, fl_err_t *err);
/* The same on uint8 observations, each taken as v x (1 / 255) (as fl_dtype_to_float
 * converts them) before the scale: the results of converting them first, without the
 * float copy (the conversion is done on the way into the plan's layout). */
fl_status fl_dnnl_net_forward_u8(fl_dnnl_net_t *n, const unsigned char *obs, float scale, int B, float *q,
                                 fl_err_t *err);
/* The gradient buffer (overwritten) = dLoss/dparams for dq (B, num_actions) = dLoss/dQ of
 * the last forward, which must have been at B (else FL_FAILED_PRECONDITION); dobs
 * (B, obs_dim), when not NULL, = dLoss/dobs (scale as in that forward). */
fl_status fl_dnnl_net_backward(fl_dnnl_net_t *n, const float *dq, int B, float *dobs, float scale, fl_err_t *err);

/* The implementations the plan at batch B runs, one "layer step: impl" line each (e.g.
 * "0.conv fwd: jit:avx512_core" for oneDNN's choice, "2.conv fwd (tiles): fleet:avx2" for
 * fleet's own forward kernels; a first dense layer that may go sparse: "0.dense fwd
 * (sparse inputs): fleet:sparse, else gemm:jit (last forward: sparse, 412 of 51200
 * inputs not 0)"), into out (always NUL-terminated); the
 * length it needed, or 0 when there is no plan at B. For tests and benches. */
size_t fl_dnnl_net_describe(const fl_dnnl_net_t *n, int B, char *out, size_t cap);

#endif
