/* mountaincar: MountainCar-v0 as in Gymnasium's classic_control/mountain_car.py.
 *
 * The car's state is two doubles, updated with the published difference equations in
 * the same order and grouping as Gymnasium (so the float64 results agree to the last
 * bit where the platform's cos does); the observation is that state rounded to float32.
 * A reset draws one number from the instance's generator: the start position, uniform
 * in [-0.6, -0.4); the velocity starts at 0. */
#include <math.h>

#include "envs/classic/classic.h"
#include "envs/core/render.h"

#define MIN_POSITION (-1.2)
#define MAX_POSITION 0.6
#define MAX_SPEED 0.07
#define GOAL_POSITION 0.5
#define GOAL_VELOCITY 0.0
#define FORCE 0.001
#define GRAVITY 0.0025

static double clip(double x, double lo, double hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

static void write_obs(const fl_mountaincar_state_t *s, void *obs) {
    float *o = obs; /* (2,) */
    o[0] = (float)s->position;
    o[1] = (float)s->velocity;
}

static void mountaincar_reset(void *state, fl_rng_t *rng, void *obs) {
    fl_mountaincar_state_t *s = state;
    s->position = fl_env_rng_uniform(rng, -0.6, -0.4);
    s->velocity = 0.0;
    write_obs(s, obs);
}

static void mountaincar_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    (void)rng;
    fl_mountaincar_state_t *s = state;
    double position = s->position, velocity = s->velocity;
    velocity = velocity + ((double)(action - 1) * FORCE + cos(3.0 * position) * (-GRAVITY));
    velocity = clip(velocity, -MAX_SPEED, MAX_SPEED);
    position = position + velocity;
    position = clip(position, MIN_POSITION, MAX_POSITION);
    if (position == MIN_POSITION && velocity < 0.0) velocity = 0.0;
    s->position = position;
    s->velocity = velocity;

    write_obs(s, obs);
    *terminated = position >= GOAL_POSITION && velocity >= GOAL_VELOCITY;
    *reward = -1.0f;
}

/* Drawn as Gymnasium draws it, at half its 600 x 400 size: the hill y = 0.45 sin(3x) +
 * 0.55 over [-1.2, 0.6], the car a 20 x 10 box tilted along the slope on two wheels, and
 * the goal flag at x = 0.5. */
#define RENDER_W 300
#define RENDER_H 200

static double hill(double x) {
    return sin(3 * x) * 0.45 + 0.55;
}

static void mountaincar_render(const void *state, uint8_t *rgb) {
    static const uint8_t white[3] = {255, 255, 255}, black[3] = {0, 0, 0}, wheel[3] = {128, 128, 128},
                         flag[3] = {204, 204, 0};
    const fl_mountaincar_state_t *s = state;
    fl_canvas_t c = {rgb, RENDER_W, RENDER_H};
    double scale = RENDER_W / (MAX_POSITION - MIN_POSITION);
#define SX(x) (((x)-MIN_POSITION) * scale)
#define SY(y) (RENDER_H - 10.0 - (y)*scale)
    fl_canvas_clear(&c, white);
    for (int i = 0; i < 100; i++) {
        double a = MIN_POSITION + (MAX_POSITION - MIN_POSITION) * i / 100.0;
        double b = MIN_POSITION + (MAX_POSITION - MIN_POSITION) * (i + 1) / 100.0;
        fl_canvas_line(&c, SX(a), SY(hill(a)), SX(b), SY(hill(b)), 1.5, black);
    }
    double ang = cos(3 * s->position), ca = cos(ang), sa = sin(ang);
    double bx = SX(s->position), by = SY(hill(s->position));
    /* Box corners in the car's frame (x along the slope, y up), lifted by the clearance. */
    double lx[4] = {-10, -10, 10, 10}, ly[4] = {5, 15, 15, 5}, px[4], py[4];
    for (int i = 0; i < 4; i++) {
        px[i] = bx + lx[i] * ca - ly[i] * sa;
        py[i] = by - (lx[i] * sa + ly[i] * ca);
    }
    fl_canvas_convex(&c, px, py, 4, black);
    for (int side = -1; side <= 1; side += 2) {
        double wx = side * 5.0, wy = 5.0;
        fl_canvas_disc(&c, bx + wx * ca - wy * sa, by - (wx * sa + wy * ca), 3.0, wheel);
    }
    double fx = SX(GOAL_POSITION), fy = SY(hill(GOAL_POSITION));
    fl_canvas_line(&c, fx, fy, fx, fy - 25, 1.0, black);
    double tx[3] = {fx, fx, fx + 12.5}, ty[3] = {fy - 25, fy - 15, fy - 20};
    fl_canvas_convex(&c, tx, ty, 3, flag);
#undef SX
#undef SY
}

static const char *mountaincar_action_name(int action) {
    static const char *const names[3] = {"left", "noop", "right"};
    return names[action];
}

const fl_env_def_t fl_env_mountaincar = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "mountaincar",
    .description = "MountainCar-v0: drive an underpowered car up a hill (Gymnasium-exact, 200-step limit)",
    .obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {2}},
    .num_actions = 3,
    .max_episode_steps = 200,
    .state_size = sizeof(fl_mountaincar_state_t),
    .reset = mountaincar_reset,
    .step = mountaincar_step,
    .render = mountaincar_render,
    .render_height = RENDER_H,
    .render_width = RENDER_W,
    .action_name = mountaincar_action_name,
};
