/* crashenv: an env plugin that crashes, for the supervision tests
 * (tests/integration_chaos.c). A one-cell corridor: any action ends the episode with
 * reward 1 after 10 steps. With env.args "segv_after=N", each instance dereferences a
 * null pointer at its N-th step (SIGSEGV); "" never crashes. */
#include <fleet/env.h>

#include <stdlib.h>
#include <string.h>

typedef struct crash_state {
    long segv_after, steps, t;
} crash_state_t;

static void crash_reset(void *state, fl_rng_t *rng, void *obs) {
    (void)rng;
    crash_state_t *s = state;
    s->t = 0;
    ((float *)obs)[0] = 0.0f;
}

static void crash_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    (void)rng;
    (void)action;
    crash_state_t *s = state;
    if (s->segv_after > 0 && ++s->steps >= s->segv_after) {
        volatile int *nowhere = NULL;
        *nowhere = 1; /* the crash this plugin is for */
    }
    s->t++;
    ((float *)obs)[0] = (float)s->t / 10.0f;
    *reward = s->t == 10 ? 1.0f : 0.0f;
    *terminated = s->t == 10;
}

static int crash_configure(void *state, const fl_env_options_t *opts) {
    crash_state_t *s = state;
    const char *a = opts->args ? opts->args : "";
    s->segv_after = 0;
    if (!a[0]) return 0;
    if (strncmp(a, "segv_after=", 11) != 0) return -1;
    s->segv_after = strtol(a + 11, NULL, 10);
    return s->segv_after > 0 ? 0 : -1;
}

static const fl_env_def_t crashenv = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "crashenv",
    .description = "a 10-step corridor whose step dereferences NULL after env.args segv_after=N steps",
    .obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {1}},
    .num_actions = 2,
    .max_episode_steps = 10,
    .state_size = sizeof(crash_state_t),
    .reset = crash_reset,
    .step = crash_step,
    .configure = crash_configure,
};

FL_ENV_EXPORT const fl_env_def_t *fl_env_plugin(void) {
    return &crashenv;
}
