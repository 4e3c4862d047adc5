/* cartpole: CartPole-v1 as in Gymnasium's classic_control/cartpole.py.
 *
 * The physics follow the published equations (Florian, "Correct equations for the
 * dynamics of the cart-pole system") with explicit Euler integration, computed in double
 * precision like Gymnasium's float64 state; observations are that state rounded to
 * float32. The start state is uniform in [-0.05, 0.05) for all four components, drawn
 * in the order x, x_dot, theta, theta_dot from the instance's generator. */
#include <math.h>

#include "envs/classic/classic.h"
#include "envs/core/render.h"

#define GRAVITY 9.8
#define MASSCART 1.0
#define MASSPOLE 0.1
#define TOTAL_MASS (MASSPOLE + MASSCART)
#define LENGTH 0.5 /* half the pole's length */
#define POLEMASS_LENGTH (MASSPOLE * LENGTH)
#define FORCE_MAG 10.0
#define TAU 0.02
#define THETA_THRESHOLD (12.0 * 2.0 * M_PI / 360.0)
#define X_THRESHOLD 2.4

static void write_obs(const fl_cartpole_state_t *s, void *obs) {
    float *o = obs;
    o[0] = (float)s->x;
    o[1] = (float)s->x_dot;
    o[2] = (float)s->theta;
    o[3] = (float)s->theta_dot;
}

static void cartpole_reset(void *state, fl_rng_t *rng, void *obs) {
    fl_cartpole_state_t *s = state;
    s->x = fl_env_rng_uniform(rng, -0.05, 0.05);
    s->x_dot = fl_env_rng_uniform(rng, -0.05, 0.05);
    s->theta = fl_env_rng_uniform(rng, -0.05, 0.05);
    s->theta_dot = fl_env_rng_uniform(rng, -0.05, 0.05);
    write_obs(s, obs);
}

static void cartpole_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    fl_cartpole_state_t *s = state;
    /* A table lookup rather than a branch: actions are often random, and a mispredicted
     * branch costs about as much as the arithmetic below. */
    static const double force_of[2] = {-FORCE_MAG, FORCE_MAG};
    double force = force_of[action == 1];
    double costheta = cos(s->theta), sintheta = sin(s->theta);
    double temp = (force + POLEMASS_LENGTH * s->theta_dot * s->theta_dot * sintheta) / TOTAL_MASS;
    double thetaacc =
        (GRAVITY * sintheta - costheta * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * costheta * costheta / TOTAL_MASS));
    double xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;

    s->x = s->x + TAU * s->x_dot;
    s->x_dot = s->x_dot + TAU * xacc;
    s->theta = s->theta + TAU * s->theta_dot;
    s->theta_dot = s->theta_dot + TAU * thetaacc;

    write_obs(s, obs);
    *terminated =
        s->x < -X_THRESHOLD || s->x > X_THRESHOLD || s->theta < -THETA_THRESHOLD || s->theta > THETA_THRESHOLD;
    *reward = 1.0f;
}

/* Drawn as Gymnasium draws it, at half its 600 x 400 size: the track spans
 * [-2.4, 2.4] over the width; the cart is 25 x 15 pixels; the pole 5 pixels wide and one
 * length unit (1.0, twice the half-length) long. */
#define RENDER_W 300
#define RENDER_H 200

static void cartpole_render(const void *state, uint8_t *rgb) {
    static const uint8_t white[3] = {255, 255, 255}, black[3] = {0, 0, 0}, pole[3] = {202, 152, 101},
                         axle[3] = {129, 132, 203};
    const fl_cartpole_state_t *s = state;
    fl_canvas_t c = {rgb, RENDER_W, RENDER_H};
    double scale = RENDER_W / (2 * X_THRESHOLD);
    double cart_y = RENDER_H - 50.0, cart_x = s->x * scale + RENDER_W / 2.0;
    fl_canvas_clear(&c, white);
    fl_canvas_rect(&c, 0, (int)cart_y, RENDER_W, (int)cart_y + 1, black);
    fl_canvas_rect(&c, (int)(cart_x - 12.5), (int)(cart_y - 7.5), (int)(cart_x + 12.5), (int)(cart_y + 7.5), black);
    double len = scale * 2 * LENGTH, top_x = cart_x + len * sin(s->theta), top_y = cart_y - 3.75 - len * cos(s->theta);
    fl_canvas_line(&c, cart_x, cart_y - 3.75, top_x, top_y, 5.0, pole);
    fl_canvas_disc(&c, cart_x, cart_y - 3.75, 2.5, axle);
}

static const char *cartpole_action_name(int action) {
    return action == 0 ? "left" : "right";
}

const fl_env_def_t fl_env_cartpole = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "cartpole",
    .description = "CartPole-v1: balance a pole on a cart (Gymnasium-exact, 500-step limit)",
    .obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {4}},
    .num_actions = 2,
    .max_episode_steps = 500,
    .state_size = sizeof(fl_cartpole_state_t),
    .reset = cartpole_reset,
    .step = cartpole_step,
    .render = cartpole_render,
    .render_height = RENDER_H,
    .render_width = RENDER_W,
    .action_name = cartpole_action_name,
};
