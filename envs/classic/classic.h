/* classic: the Gymnasium classic-control tasks with discrete actions, CartPole-v1,
 * MountainCar-v0 and Acrobot-v1, reproduced step for step, and their family's rows in the
 * registry (fl_env_family_classic, envs/classic/classic.c).
 *
 * All three run their dynamics in double precision, as Gymnasium's float64 state does, and
 * write float32 observations. Their state structs are part of the contract: the state
 * memory of an instance (state_size == sizeof the struct) may be overwritten by a caller
 * between steps to put the system into a chosen state (tests, tools). None allocates or
 * takes options; all render (as Gymnasium draws them) and name their actions. The
 * definitions are immutable and the functions pure, so instances may run on any number of
 * threads. */
#ifndef FL_ENVS_CLASSIC_H
#define FL_ENVS_CLASSIC_H

#include "envs/core/env.h"
#include "envs/core/family.h"

/* The family's rows, in the order `fleet env list` shows them: cartpole, mountaincar,
 * acrobot. */
extern const fl_env_family_t fl_env_family_classic;

/* "cartpole": CartPole-v1, identical to Gymnasium's CartPoleEnv (Euler integration).
 * Observation float32 (4,): x, x_dot, theta, theta_dot; actions 0 (push left), 1 (push
 * right); reward 1 every step including the terminating one; terminates when |x| > 2.4
 * or |theta| > 12 degrees; truncated at 500 steps. The dynamics run in double precision
 * and the observation is the state rounded to float, as Gymnasium does. */
extern const fl_env_def_t fl_env_cartpole;

/* The state of one cartpole instance (state_size == sizeof(fl_cartpole_state_t)). A
 * caller may overwrite it between steps to put the system into a chosen state. */
typedef struct fl_cartpole_state {
    double x, x_dot, theta, theta_dot;
} fl_cartpole_state_t;

/* "mountaincar": MountainCar-v0, identical to Gymnasium's MountainCarEnv.
 * Observation float32 (2,): position, velocity. Actions 0 (push left), 1 (no push),
 * 2 (push right). Each step:
 *     velocity += (action - 1) * 0.001 + cos(3 * position) * (-0.0025)
 *     velocity  = clip(velocity, -0.07, 0.07)
 *     position += velocity
 *     position  = clip(position, -1.2, 0.6)
 *     if position == -1.2 and velocity < 0: velocity = 0
 * Terminates when position >= 0.5 and velocity >= 0; reward -1 every step (the
 * terminating one included); start position uniform in [-0.6, -0.4), velocity 0;
 * truncated at 200 steps. */
extern const fl_env_def_t fl_env_mountaincar;

typedef struct fl_mountaincar_state {
    double position, velocity;
} fl_mountaincar_state_t;

/* "acrobot": Acrobot-v1, identical to Gymnasium's AcrobotEnv ("book" dynamics of Sutton
 * & Barto, unit links and masses, centres of mass at 0.5, moments of inertia 1, g 9.8).
 * Observation float32 (6,): cos theta1, sin theta1, cos theta2, sin theta2, dtheta1,
 * dtheta2. Actions 0, 1, 2 apply torque -1, 0, +1 at the elbow, held constant over one
 * classic fourth-order Runge-Kutta step of dt = 0.2; then both angles are wrapped into
 * [-pi, pi] and the velocities clipped to +-4 pi and +-9 pi. Terminates when the tip is
 * more than one link length above the pivot, -cos(theta1) - cos(theta1 + theta2) > 1;
 * reward -1 per step and 0 on the terminating step; start state uniform in
 * [-0.1, 0.1) for all four components, rounded to float32 as Gymnasium does; truncated at
 * 500 steps. */
extern const fl_env_def_t fl_env_acrobot;

typedef struct fl_acrobot_state {
    double theta1, theta2;   /* radians; theta1 = 0 hangs down, theta2 is relative to link 1 */
    double dtheta1, dtheta2; /* radians per second */
} fl_acrobot_state_t;

#endif
