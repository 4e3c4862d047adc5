/* acrobot: Acrobot-v1 as in Gymnasium's classic_control/acrobot.py ("book" dynamics).
 *
 * The two-link pendulum's equations of motion (Sutton & Barto) give the angular
 * accelerations; one step integrates them with a single classic Runge-Kutta step of
 * length dt = 0.2 with the chosen torque held constant, then wraps both angles into
 * [-pi, pi] with Gymnasium's wrap (add or subtract 2 pi until inside) and clips the
 * velocities. The arithmetic follows Gymnasium's expressions in the same order and
 * grouping, in double precision like its float64 state.
 *
 * Gymnasium stores the start state as float32 and only the first step promotes it to
 * float64, so a reset here draws theta1, theta2, dtheta1, dtheta2 (in that order, uniform
 * in [-0.1, 0.1)) and rounds each to float; the first observation's cos and sin are
 * float32 functions of those floats, as numpy computes them. */
#include <math.h>

#include "envs/classic/classic.h"
#include "envs/core/render.h"

#define DT 0.2
#define LINK_LENGTH_1 1.0
#define LINK_LENGTH_2 1.0
#define LINK_MASS_1 1.0
#define LINK_MASS_2 1.0
#define LINK_COM_POS_1 0.5
#define LINK_COM_POS_2 0.5
#define LINK_MOI 1.0
#define GRAVITY 9.8
#define MAX_VEL_1 (4.0 * M_PI)
#define MAX_VEL_2 (9.0 * M_PI)

static const double torques[3] = {-1.0, 0.0, 1.0};

/* Time derivative of (theta1, theta2, dtheta1, dtheta2) under torque a. */
static void dsdt(const double s[4], double a, double out[4]) {
    const double m1 = LINK_MASS_1, m2 = LINK_MASS_2, l1 = LINK_LENGTH_1;
    const double lc1 = LINK_COM_POS_1, lc2 = LINK_COM_POS_2, i1 = LINK_MOI, i2 = LINK_MOI, g = GRAVITY;
    double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
    double d1 = m1 * (lc1 * lc1) + m2 * ((l1 * l1 + lc2 * lc2) + 2.0 * l1 * lc2 * cos(theta2)) + i1 + i2;
    double d2 = m2 * (lc2 * lc2 + l1 * lc2 * cos(theta2)) + i2;
    double phi2 = m2 * lc2 * g * cos(theta1 + theta2 - M_PI / 2.0);
    double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin(theta2) -
                  2.0 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2) +
                  (m1 * lc1 + m2 * l1) * g * cos(theta1 - M_PI / 2.0) + phi2;
    double ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sin(theta2) - phi2) /
                      (m2 * (lc2 * lc2) + i2 - (d2 * d2) / d1);
    double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    out[0] = dtheta1;
    out[1] = dtheta2;
    out[2] = ddtheta1;
    out[3] = ddtheta2;
}

/* Gymnasium's wrap: whole turns are added or subtracted until lo <= x <= hi. A state set
 * from outside far from the range is first reduced with fmod (dynamics never get there),
 * and a non-finite angle is left as it is, so the loops always end. */
static double wrap(double x, double lo, double hi) {
    double diff = hi - lo;
    if (!isfinite(x)) return x;
    if (fabs(x) > 1e6) x = fmod(x, diff);
    while (x > hi) x = x - diff;
    while (x < lo) x = x + diff;
    return x;
}

static double bound(double x, double lo, double hi) {
    double y = x > lo ? x : lo;
    return y < hi ? y : hi;
}

static void write_obs(const fl_acrobot_state_t *s, void *obs) {
    float *o = obs; /* (6,) */
    o[0] = (float)cos(s->theta1);
    o[1] = (float)sin(s->theta1);
    o[2] = (float)cos(s->theta2);
    o[3] = (float)sin(s->theta2);
    o[4] = (float)s->dtheta1;
    o[5] = (float)s->dtheta2;
}

static void acrobot_reset(void *state, fl_rng_t *rng, void *obs) {
    fl_acrobot_state_t *s = state;
    float t1 = (float)fl_env_rng_uniform(rng, -0.1, 0.1);
    float t2 = (float)fl_env_rng_uniform(rng, -0.1, 0.1);
    float d1 = (float)fl_env_rng_uniform(rng, -0.1, 0.1);
    float d2 = (float)fl_env_rng_uniform(rng, -0.1, 0.1);
    s->theta1 = t1;
    s->theta2 = t2;
    s->dtheta1 = d1;
    s->dtheta2 = d2;
    float *o = obs; /* (6,) */
    o[0] = cosf(t1);
    o[1] = sinf(t1);
    o[2] = cosf(t2);
    o[3] = sinf(t2);
    o[4] = d1;
    o[5] = d2;
}

static void acrobot_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    (void)rng;
    fl_acrobot_state_t *st = state;
    const double a = torques[action];
    const double h = DT, h2 = DT / 2.0;
    double y0[4] = {st->theta1, st->theta2, st->dtheta1, st->dtheta2};
    double k1[4], k2[4], k3[4], k4[4], y[4];

    dsdt(y0, a, k1);
    for (int i = 0; i < 4; i++) y[i] = y0[i] + h2 * k1[i];
    dsdt(y, a, k2);
    for (int i = 0; i < 4; i++) y[i] = y0[i] + h2 * k2[i];
    dsdt(y, a, k3);
    for (int i = 0; i < 4; i++) y[i] = y0[i] + h * k3[i];
    dsdt(y, a, k4);
    for (int i = 0; i < 4; i++) y[i] = y0[i] + h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]);

    st->theta1 = wrap(y[0], -M_PI, M_PI);
    st->theta2 = wrap(y[1], -M_PI, M_PI);
    st->dtheta1 = bound(y[2], -MAX_VEL_1, MAX_VEL_1);
    st->dtheta2 = bound(y[3], -MAX_VEL_2, MAX_VEL_2);

    write_obs(st, obs);
    int term = -cos(st->theta1) - cos(st->theta2 + st->theta1) > 1.0;
    *terminated = term;
    *reward = term ? 0.0f : -1.0f;
}

/* Drawn as Gymnasium draws it, at 200 x 200: the pivot in the centre, the view spanning
 * +-2.2 link lengths, the links as thick lines with round joints, and the target height
 * (one link length above the pivot) as a line. */
#define RENDER_SIZE 200

static void acrobot_render(const void *state, uint8_t *rgb) {
    static const uint8_t white[3] = {255, 255, 255}, black[3] = {0, 0, 0}, link[3] = {0, 204, 204},
                         joint[3] = {204, 204, 0};
    const fl_acrobot_state_t *s = state;
    fl_canvas_t c = {rgb, RENDER_SIZE, RENDER_SIZE};
    double scale = RENDER_SIZE / (2 * (LINK_LENGTH_1 + LINK_LENGTH_2 + 0.2)), o = RENDER_SIZE / 2.0;
    fl_canvas_clear(&c, white);
    fl_canvas_line(&c, 0, o - LINK_LENGTH_1 * scale, RENDER_SIZE, o - LINK_LENGTH_1 * scale, 1.0, black);
    /* theta1 = 0 hangs straight down; screen y grows downwards. */
    double x1 = o + LINK_LENGTH_1 * scale * sin(s->theta1), y1 = o + LINK_LENGTH_1 * scale * cos(s->theta1);
    double x2 = x1 + LINK_LENGTH_2 * scale * sin(s->theta1 + s->theta2);
    double y2 = y1 + LINK_LENGTH_2 * scale * cos(s->theta1 + s->theta2);
    fl_canvas_line(&c, o, o, x1, y1, 0.2 * scale, link);
    fl_canvas_line(&c, x1, y1, x2, y2, 0.2 * scale, link);
    fl_canvas_disc(&c, o, o, 0.1 * scale, joint);
    fl_canvas_disc(&c, x1, y1, 0.1 * scale, joint);
}

static const char *acrobot_action_name(int action) {
    static const char *const names[3] = {"left", "noop", "right"}; /* torque -1, 0, +1 */
    return names[action];
}

const fl_env_def_t fl_env_acrobot = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "acrobot",
    .description = "Acrobot-v1: swing a two-link pendulum's tip above a line (Gymnasium-exact, 500-step limit)",
    .obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {6}},
    .num_actions = 3,
    .max_episode_steps = 500,
    .state_size = sizeof(fl_acrobot_state_t),
    .reset = acrobot_reset,
    .step = acrobot_step,
    .render = acrobot_render,
    .render_height = RENDER_SIZE,
    .render_width = RENDER_SIZE,
    .action_name = acrobot_action_name,
};
