/* qnet: the Q-network of actors and CPU learners, built from a spec string.
 *
 * The spec (config key model.spec) lists layers left to right, separated by spaces:
 *   dense(N)   fully connected layer with N outputs (PyTorch Linear: W (N, in), b (N))
 *   relu       elementwise max(x, 0)
 *   dueling    the dueling head (must be last): value stream dense(1) and advantage
 *              stream dense(num_actions) from the same features, Q = V + A - mean(A)
 *   conv(C,K,S) or conv(C,K,S,P)
 *              2-D convolution (PyTorch Conv2d: W (C, Cin, K, K), b (C)) with C output
 *              channels, a K x K kernel, stride S and zero padding P (default 0), on
 *              (channels, height, width); e.g. the Nature DQN torso
 *              "conv(32,8,4) relu conv(64,4,2) relu conv(64,3,1) relu flatten dense(512) relu"
 *   flatten    (C, H, W) -> (C H W), channel-major as PyTorch's flatten; dense flattens
 *              its input by itself, so this only makes a spec read like a PyTorch one
 * If the last token is not `dueling`, a final dense(num_actions) is appended as the
 * output head, so "dense(256) relu" is a one-hidden-layer MLP and "" a linear model.
 *
 * Parameters live in ONE contiguous float buffer, gradients in another of the same
 * length and layout (so an optimizer, an all-reduce or a parameter-server slice sees a
 * flat vector). Named views split it into tensors, in buffer order, with the names a
 * safetensors checkpoint uses:
 *   "<i>.dense.weight" (N, in), "<i>.dense.bias" (N)      for token i (0-based) dense(N)
 *   "head.q.weight" (A, in), "head.q.bias" (A)             for the appended dense head
 *   "head.value.weight" (1, H), "head.advantage.weight" (A, H),
 *   "head.value.bias" (1), "head.advantage.bias" (A)       for a dueling head
 *   "<i>.conv.weight" (C, Cin, K, K), "<i>.conv.bias" (C)   for token i conv(C,K,S,P)
 * (The dueling streams are adjacent so that they run as one GEMM; see ops.h.)
 *
 * Initialisation follows PyTorch's defaults for Linear and Conv2d: weights and biases of
 * a layer with fan-in `in` (inputs; Cin K K for a convolution) are drawn from
 * U(-1/sqrt(in), 1/sqrt(in)).
 *
 * Observations: fl_qnet_create takes vectors of obs_dim; fl_qnet_create_image takes
 * images (H, W, C) as environments give them (MinAtar, framestack) and feeds them to the
 * first layer as (C, H, W); fl_qnet_create_for_obs picks one from an observation shape
 * (rank 3: an image). forward's obs and backward_input's dobs are in the observation's
 * own layout either way.
 *
 * Backends. A network runs on one of two CPU backends, chosen per network with
 * fl_qnet_set_backend: FL_QNET_BACKEND_REF, the plain-C/OpenBLAS ops of ops.h (the
 * reference, the default at create), or FL_QNET_BACKEND_DNNL, oneDNN's primitives
 * (dnnl.h), when fleet was built with oneDNN (FLEET_DNNL). The roles choose with
 * model.cpu_kernels (oneDNN by default where built). Both compute the same network on
 * the same parameters and agree to rounding; tests and benches switch one network
 * between them.
 *
 * Memory: parameters and gradients are allocated at create. The reference backend's
 * activations and scratch for max_batch samples are allocated when it is first chosen
 * (at create where it is the default) and it never allocates in forward or backward;
 * the oneDNN backend builds its primitives and buffers per batch size on the first
 * forward (and backward) at that size and allocates nothing of its own later at a size
 * it has seen (dnnl.h). Layers work on per-sample shapes (C, H, W) flattened row-major
 * (NCHW), with vectors as (N, 1, 1), so that image layers and uint8 observations can
 * join the layer table later.
 *
 * Failure: create answers FL_INVALID_ARGUMENT with a message naming the offending spec
 * token (1-based) and what was expected, or FL_NO_MEMORY. forward/backward answer
 * FL_INVALID_ARGUMENT for a batch outside 1..max_batch or NULL buffers, and
 * FL_FAILED_PRECONDITION for a backward without a matching forward; on the oneDNN
 * backend also FL_NO_MEMORY or FL_INTERNAL when a batch size's plan cannot be built
 * (the message goes to the log).
 * Thread-safety: one owner per network (forward keeps activations inside it); distinct
 * networks may be used from different threads at once. Nothing global is set; the
 * thread count is the caller's: OpenBLAS's (openblas_set_num_threads), which the oneDNN
 * backend copies into the calling thread's OpenMP setting at each call. */
#ifndef FL_KERNELS_QNET_H
#define FL_KERNELS_QNET_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/rng.h"
#include "common/safetensors.h"
#include "common/status.h"

#define FL_PARAM_NAME_MAX 64
#define FL_PARAM_MAX_RANK 4
#define FL_QNET_MAX_LAYERS 64
#define FL_QNET_MAX_UNITS 65536

/* The kinds of layer of the spec grammar above. */
typedef enum { FL_QNET_DENSE, FL_QNET_RELU, FL_QNET_DUELING, FL_QNET_CONV, FL_QNET_FLATTEN } fl_qnet_layer_kind;

/* One layer of a built network, as another backend needs it to run the same network
 * (learner/dqn_cuda.c): per-sample shapes (channels, height, width), vectors as
 * (N, 1, 1), and where its parameters sit in the flat buffer. */
typedef struct fl_qnet_layer {
    fl_qnet_layer_kind kind;
    int units;                /* dense: outputs; dueling: actions */
    int in_c, in_h, in_w;     /* input; the first layer's is the network input ((C, H, W) for images) */
    int out_c, out_h, out_w;  /* output */
    int cout, k, stride, pad; /* conv: output channels, kernel, stride, zero padding */
    size_t w_off, b_off;      /* dense, dueling, conv: the weight's and the bias's offsets, in floats; a
                                 dueling head's value row comes first, then the advantage rows (and the
                                 same for the biases) */
    const char *prefix;       /* its views' name prefix ("0.dense", "head.q", "head"); valid while the
                                 network lives */
} fl_qnet_layer_t;

/* One named tensor inside the flat parameter (and gradient) buffer. */
typedef struct fl_param_view {
    char name[FL_PARAM_NAME_MAX];
    size_t offset; /* in floats from the start of the buffer */
    int rank;
    int64_t shape[FL_PARAM_MAX_RANK]; /* unused trailing dims are 1 */
    size_t numel;
} fl_param_view_t;

typedef struct fl_qnet fl_qnet_t;

/* The CPU backends (see above). */
/* FL_QNET_BACKEND_ONEDNN: oneDNN's primitives alone, every kernel of fleet's own off (the
 * tiles of conv_fwd.h, the first convolution over images, the small-batch, short-row and
 * sparse dense forwards, space-to-depth), so that the oneDNN path can be compared with
 * and trusted on its own; fl_qnet_backend reports it as FL_QNET_BACKEND_DNNL. Set it
 * before the first forward (plans made before keep their kernels). */
typedef enum { FL_QNET_BACKEND_REF, FL_QNET_BACKEND_DNNL, FL_QNET_BACKEND_ONEDNN } fl_qnet_backend_kind;

/* obs_dim, num_actions >= 1; max_batch >= 1 is the largest B of forward/backward.
 * Parameters are zero until fl_qnet_init or fl_qnet_set_params. */
fl_status fl_qnet_create(const char *spec, int obs_dim, int num_actions, int max_batch, fl_qnet_t **out, fl_err_t *err);
/* An image network: observations (H, W, C), obs_dim H W C. */
fl_status fl_qnet_create_image(const char *spec, int h, int w, int c, int num_actions, int max_batch, fl_qnet_t **out,
                               fl_err_t *err);
/* rank 3: fl_qnet_create_image(shape[0], shape[1], shape[2]); otherwise fl_qnet_create
 * with the product of the shape. */
fl_status fl_qnet_create_for_obs(const char *spec, int rank, const int *shape, int num_actions, int max_batch,
                                 fl_qnet_t **out, fl_err_t *err);
void fl_qnet_destroy(fl_qnet_t *n); /* NULL is a no-op */

size_t fl_qnet_num_params(const fl_qnet_t *n);
/* The parameters (num_params), to read or write. Each call counts as a change of them:
 * a backend may keep its weights converted to its kernels' layouts between calls (the
 * oneDNN one does) and converts them again after any fl_qnet_params, fl_qnet_init,
 * fl_qnet_set_params or fl_qnet_copy_params into this network. So a caller that writes
 * them takes the pointer anew for each change (never keeps it across a forward and
 * writes through it later). */
float *fl_qnet_params(fl_qnet_t *n);
float *fl_qnet_grads(fl_qnet_t *n); /* (num_params), same layout */
int fl_qnet_num_views(const fl_qnet_t *n);
const fl_param_view_t *fl_qnet_view(const fl_qnet_t *n, int i);                 /* NULL if out of range */
const fl_param_view_t *fl_qnet_find_view(const fl_qnet_t *n, const char *name); /* NULL if absent */
/* The parameters as safetensors tensors "<prefix>.<view>" (F32, each view's shape, pointing
 * into fl_qnet_params) into out (room for fl_qnet_num_views); returns their count. The one
 * naming of a network's tensors in fleet's files: the learner's checkpoints ("online",
 * "target") and the evaluator's best policy ("online"). */
int fl_qnet_st_tensors(fl_qnet_t *n, const char *prefix, fl_st_tensor_t *out);
/* The metadata "format" of a file holding only a network's "online" tensors (an
 * evaluator's best policy, eval/evaluator.h), beside the learner's "fleet.learner". */
#define FL_POLICY_FORMAT "fleet.policy"

/* Draws every parameter as documented above. */
void fl_qnet_init(fl_qnet_t *n, fl_rng_t *rng);
/* Copies count floats into the parameters; count must equal fl_qnet_num_params. */
fl_status fl_qnet_set_params(fl_qnet_t *n, const float *src, size_t count, fl_err_t *err);
/* dst's parameters = src's (target-network copy). Both must come from the same spec,
 * obs_dim and num_actions (asserted); max_batch may differ. */
void fl_qnet_copy_params(fl_qnet_t *dst, const fl_qnet_t *src);

/* q (B, num_actions) = Q(obs (B, obs_dim)), 1 <= B <= max_batch. Keeps every
 * activation for a following backward. obs must stay as it is until that backward: the
 * oneDNN backend's first convolution over images may read the observations where they
 * are (fl_conv_img, on AVX-512), and its backward then reads them again. Without a
 * backward, obs may be reused as soon as the call returns. */
fl_status fl_qnet_forward(fl_qnet_t *n, const float *obs, int B, float *q);
/* The same on B observations of dtype d as environments give them (B obs_dim elements):
 * the results of fl_dtype_to_float into a float buffer and fl_qnet_forward. The oneDNN
 * backend converts uint8 observations on the way into its own layout, with no float copy
 * of the batch in between; float32 goes to fl_qnet_forward as it is; the other cases
 * convert into a buffer of the network's (allocated at the first call). FL_INVALID_ARGUMENT also for a dtype with no
 * float conversion; FL_NO_MEMORY. */
fl_status fl_qnet_forward_obs(fl_qnet_t *n, fl_dtype d, const void *obs, int B, float *q);
/* Given dq (B, num_actions) = dLoss/dQ of the last forward (same B), overwrites (does
 * not accumulate) the gradient buffer with dLoss/dparams. */
fl_status fl_qnet_backward(fl_qnet_t *n, const float *dq, int B);
/* The same, and also writes dLoss/dobs (B, obs_dim) into dobs when it is not NULL. */
fl_status fl_qnet_backward_input(fl_qnet_t *n, const float *dq, int B, float *dobs);

int fl_qnet_obs_dim(const fl_qnet_t *n);
/* Observations are multiplied by `scale` on their way into the first layer (1 at create;
 * config key model.input_scale), and backward_input's dobs accordingly: a network over
 * 0/1 planes stored as uint8 (MinAtar, which callers convert with 1/255) sets 255. */
void fl_qnet_set_input_scale(fl_qnet_t *n, float scale);
float fl_qnet_input_scale(const fl_qnet_t *n);
/* Marks n an inference network (an actor's, an evaluator's: forwards, its parameters
 * replaced now and then; 0 at create): the CPU kernels may then keep weights in layouts
 * that cost a conversion at each change of the parameters and save work at every
 * forward, at any batch (oneDNN's: the first dense layer after the convolutions, see
 * docs/cpu-kernels.md). Plans made before keep their choice. A backward still works. */
void fl_qnet_set_inference(fl_qnet_t *n, int on);
/* Chooses the backend of later calls (a backward then needs a forward on it first).
 * FL_UNIMPLEMENTED for FL_QNET_BACKEND_DNNL in a build without oneDNN; FL_NO_MEMORY when
 * the reference backend's buffers cannot be allocated. */
fl_status fl_qnet_set_backend(fl_qnet_t *n, fl_qnet_backend_kind backend, fl_err_t *err);
fl_qnet_backend_kind fl_qnet_backend(const fl_qnet_t *n);
const char *fl_qnet_backend_name(fl_qnet_backend_kind backend); /* "reference", "dnnl" */
/* The roles' default (model.cpu_kernels = auto): oneDNN in a build with it, else the
 * reference. */
fl_qnet_backend_kind fl_qnet_default_backend(void);
/* On the oneDNN backend, the implementations its plan for batch B uses (dnnl.h's
 * fl_dnnl_net_describe); 0 and "" otherwise or before a forward at B. */
size_t fl_qnet_describe_kernels(const fl_qnet_t *n, int B, char *out, size_t cap);
int fl_qnet_num_actions(const fl_qnet_t *n);
int fl_qnet_max_batch(const fl_qnet_t *n);
const char *fl_qnet_spec(const fl_qnet_t *n); /* the spec as given to create */

/* The layers in order, the appended head included: the one parse of model.spec that
 * every backend reads. fl_qnet_layer: 0 and *out, or -1 when i is out of range. */
int fl_qnet_num_layers(const fl_qnet_t *n);
int fl_qnet_layer(const fl_qnet_t *n, int i, fl_qnet_layer_t *out);

#endif
