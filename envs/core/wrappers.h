/* wrappers: Atari-style preprocessing around any environment, built from a spec string.
 *
 *     fl_wrapped_env_t *w;
 *     fl_wrapped_env_create(inner, "sticky(0.25) noop(30) frameskip(4) grayscale resize(84,84) "
 *                                  "clipreward maxsteps(27000) framestack(4)", &w, &err);
 *
 * A wrapped env is itself an env with the same contract as envs/core/env.h: the caller owns
 * one block of fl_wrapped_env_state_size() bytes per instance (zeroed once, then reset),
 * one fl_rng_t per instance and the observation buffers; reset and step only read and
 * write those, never allocate and draw randomness only from the instance's generator.
 * fl_env_def_t has no user-data pointer, so a chain cannot be a plain definition that
 * fl_vecenv steps; instead fl_wrapped_env_t is an immutable object holding the chain, and
 * fl_wrapvec_t below steps a vector of wrapped instances with exactly fl_vecenv's
 * auto-reset / final_obs / episode-stats contract.
 *
 * Spec: whitespace-separated tokens `name` or `name(arg, ...)`, each name at most once.
 * Whatever order they are written in, the chain is always built innermost-first in the
 * standard Atari order below, so a spec cannot put, say, framestack under grayscale:
 *
 *   sticky(p)         with probability p the previous executed action is executed instead
 *                     of the agent's (per inner step, p in [0,1]); the previous action
 *                     is 0 after reset. Draws one number per inner step when p > 0.
 *   noop(N)           reset performs a uniform number in [1, N] of action-0 steps after
 *                     the inner reset (none for N = 0), as Gymnasium's AtariPreprocessing
 *                     draws noop_max; an episode that ends during them is reset again.
 *   frameskip(k[,m])  repeats the action k times (stopping early at termination or
 *                     truncation) and sums the rewards; m = maxpool (default) returns the
 *                     elementwise max of the last two frames of this step (the only
 *                     frame if just one was taken), m = last returns the last frame.
 *   episodiclife      (an atari-* env: it needs lives) the loss of a life ends the agent's
 *                     episode (terminated) while the game goes on; the next reset is then
 *                     a no-op step, not a new game, unless the game is over. Training only:
 *                     evaluations drop it (fl_wrappers_for_evaluation).
 *   firereset         (an env whose action 1 is "fire", with 3 or more actions) reset is
 *                     followed by steps of action 1 and action 2, the start a game such as
 *                     Breakout waits for; their rewards are dropped.
 *   grayscale         uint8 (H,W,3) -> (H,W,1), Y = round(0.299 R + 0.587 G + 0.114 B).
 *   resize(h,w[,m])   uint8 (H,W,C) -> (h,w,C), rounded to nearest. m = area (default):
 *                     each output pixel is the mean of the input rectangle it covers,
 *                     partial pixels weighted by coverage (OpenCV INTER_AREA; when an
 *                     axis is enlarged it is interpolated as bilinear); m = bilinear:
 *                     half-pixel centers, src = (dst + 0.5) * in/out - 0.5, clamped to
 *                     the edge (OpenCV INTER_LINEAR).
 *   clipreward        reward -> sign(reward) in {-1, 0, 1} (NaN -> 0). Training only, like
 *                     episodiclife: evaluations report the game's own score.
 *   maxsteps(N)       truncates after N steps of this layer (agent steps); a step that
 *                     also terminates is terminated only.
 *   framestack(n)     the last n observations concatenated on the last axis, oldest first:
 *                     (..., C) -> (..., n*C) with channel k*C + c holding channel c of
 *                     frame k (k = n-1 is the newest). Reset fills all n with the first.
 *
 * The inner definition's own max_episode_steps (or the limit given to
 * fl_wrapped_env_create_limited) is enforced on inner steps (below every wrapper) and
 * reported as truncation. An empty spec wraps the env unchanged.
 *
 * Failure: create answers FL_INVALID_ARGUMENT naming the offending token and what was
 * expected (bad arguments, unknown names, duplicates, an observation space a wrapper
 * cannot take). Thread-safety: a created fl_wrapped_env_t is immutable and may be shared
 * by any number of threads; each instance state / fl_wrapvec_t has one owner. */
#ifndef FL_ENVS_WRAPPERS_H
#define FL_ENVS_WRAPPERS_H

#include <stddef.h>
#include <stdint.h>

#include "envs/core/env.h"
#include "envs/core/vecenv.h"

typedef struct fl_wrapped_env fl_wrapped_env_t;

/* The standard Atari protocols' chains (env.preset). Nature DQN / Ape-X: up to 30 no-op
 * starts, frame skip 4 with a max over the last two frames, episodic life and (for games
 * whose action 1 is fire) fire-on-reset, 84x84 (area interpolation of ALE's grayscale
 * screen), reward clipping, 108,000 frames, frame stack 4, no sticky actions. Machado et
 * al. 2018: sticky actions 0.25 (ALE's, set apart from the chain), the full action set (an
 * atari-<game>-full env), no episodic life, frame skip 4, 84x84, reward clipping, 108,000
 * frames, frame stack 4. */
#define FL_WRAPPERS_NATURE_FIRE \
    "noop(30) frameskip(4) episodiclife firereset resize(84,84) clipreward maxsteps(27000) framestack(4)"
#define FL_WRAPPERS_NATURE "noop(30) frameskip(4) episodiclife resize(84,84) clipreward maxsteps(27000) framestack(4)"
#define FL_WRAPPERS_MACHADO "frameskip(4) resize(84,84) clipreward maxsteps(27000) framestack(4)"

/* spec without its training-only wrappers (episodiclife, clipreward), into out (len
 * bytes; a spec longer than that is cut): what an evaluation plays, so that its returns
 * are whole games' scores. */
void fl_wrappers_for_evaluation(const char *spec, char *out, size_t len);
/* The largest |reward| of one agent step through spec, given base, that of one step of
 * the env inside (0 = unknown): 1 with clipreward, base x k with frameskip(k) (which sums
 * k steps' rewards), base otherwise; 0 when unknown or when spec does not parse. */
double fl_wrappers_reward_bound(const char *spec, double base);

/* Builds the chain described by spec (NULL or "" = no wrapper) around inner, which is
 * validated and must outlive the result. */
fl_status fl_wrapped_env_create(const fl_env_def_t *inner, const char *spec, fl_wrapped_env_t **out, fl_err_t *err);
/* The same, with inner_limit > 0 replacing the inner env's own max_episode_steps (the
 * limit on inner steps; 0 keeps the env's own). */
fl_status fl_wrapped_env_create_limited(const fl_env_def_t *inner, const char *spec, int inner_limit,
                                        fl_wrapped_env_t **out, fl_err_t *err);
void fl_wrapped_env_destroy(fl_wrapped_env_t *w);

/* The wrapped env's metadata as a definition: name ("inner[spec]"), obs dtype and shape,
 * num_actions, state_size (== fl_wrapped_env_state_size), max_episode_steps (the
 * maxsteps(N) of the spec, else the inner's own limit; informational, the chain enforces
 * it). Its reset/step/render/configure are NULL: run instances through the functions
 * below. Valid as long as w. */
const fl_env_def_t *fl_wrapped_env_info(const fl_wrapped_env_t *w);
const fl_env_def_t *fl_wrapped_env_inner(const fl_wrapped_env_t *w);
/* n of the framestack(n) layer (the observation is n frames on its last axis), 1 without
 * one. The replay table stores each distinct frame once (replay/frames.h). */
int fl_wrapped_env_frame_stack(const fl_wrapped_env_t *w);
/* Inner steps per agent step: k of frameskip(k), 1 without (an Atari env's emulator
 * frames per env step, unless its env.args set ALE's own frame skip as well). */
int fl_wrapped_env_frame_skip(const fl_wrapped_env_t *w);
/* The no-ops an instance took at its last reset (1..N of noop(N); 0 for noop(0)), or -1
 * when the chain has no noop wrapper. */
int fl_wrapped_env_noops(const fl_wrapped_env_t *w, const void *state);
/* Bytes of one instance's state (the inner state plus every layer's buffers). */
size_t fl_wrapped_env_state_size(const fl_wrapped_env_t *w);
/* Bytes of one wrapped observation. */
size_t fl_wrapped_env_obs_size(const fl_wrapped_env_t *w);
/* The inner env's own state inside an instance state (for inspection or rendering). */
void *fl_wrapped_env_inner_state(const fl_wrapped_env_t *w, void *state);

/* Hands options to the inner env of one zeroed instance, once before its first reset
 * (nothing happens when the inner env has no configure function). FL_INVALID_ARGUMENT
 * naming the env when the inner env rejects them. */
fl_status fl_wrapped_env_configure(const fl_wrapped_env_t *w, void *state, const fl_env_options_t *opts, fl_err_t *err);

/* Starts an episode: state is fl_wrapped_env_state_size bytes (zeroed before the first
 * reset), obs receives fl_wrapped_env_obs_size bytes. */
void fl_wrapped_env_reset(const fl_wrapped_env_t *w, void *state, fl_rng_t *rng, void *obs);
/* Releases what the inner env holds for one instance (fl_env_close), before the state is
 * freed or zeroed for reuse. */
void fl_wrapped_env_close(const fl_wrapped_env_t *w, void *state);
/* One agent step with a valid action (0 <= action < num_actions; the caller checks).
 * *terminated: the MDP reached a terminal state; *truncated: a step limit (maxsteps or
 * the inner's own) was hit without termination. After either, reset before stepping. */
void fl_wrapped_env_step(const fl_wrapped_env_t *w, void *state, fl_rng_t *rng, int action, void *obs, float *reward,
                         int *terminated, int *truncated);

/* ---- Vector of wrapped instances (fl_vecenv's contract, see envs/core/vecenv.h) ----------- */

typedef struct fl_wrapvec fl_wrapvec_t;

/* num_envs instances of w, instance i seeded with fl_rng_init_stream(seed, i). Time limits
 * come from the chain (maxsteps and the inner's own). w must outlive the vector. */
fl_status fl_wrapvec_create(const fl_wrapped_env_t *w, int num_envs, uint64_t seed, fl_wrapvec_t **out, fl_err_t *err);
void fl_wrapvec_destroy(fl_wrapvec_t *v);
/* fl_wrapped_env_configure for every instance; after create, before the first reset
 * (FL_FAILED_PRECONDITION otherwise). opts must outlive the vector. */
fl_status fl_wrapvec_configure(fl_wrapvec_t *v, const fl_env_options_t *opts, fl_err_t *err);
/* obs: (N, obs_size) */
void fl_wrapvec_reset(fl_wrapvec_t *v, void *obs);
/* Same arguments, ends and errors as fl_vecenv_step: ended instances are reset in the
 * same call, final_obs (may be NULL) gets their last observation, done_stats (may be
 * NULL) their return (sum of the wrapped rewards) and length in agent steps. */
fl_status fl_wrapvec_step(fl_wrapvec_t *v, const int32_t *actions, void *obs, float *rewards, uint8_t *terminated,
                          uint8_t *truncated, void *final_obs, fl_episode_stats_t *done_stats, fl_err_t *err);
int fl_wrapvec_num_envs(const fl_wrapvec_t *v);
const fl_wrapped_env_t *fl_wrapvec_env(const fl_wrapvec_t *v);
/* Instance i's state (fl_wrapped_env_state_size bytes), NULL out of range. */
void *fl_wrapvec_state(fl_wrapvec_t *v, int i);
/* Instance i's random generator (fl_vecenv_rng), NULL out of range. */
fl_rng_t *fl_wrapvec_rng(fl_wrapvec_t *v, int i);

#endif
