/* minatar_freeway: MinAtar Freeway (specs/minatar.md, section 4).
 *
 * A chicken in column 4 crosses eight lanes of traffic from row 9 to row 0 for +1 per
 * crossing; a car hitting it only sends it back to row 9. Each car moves one column
 * every |v| + 1 steps with wrap-around; all speeds are re-drawn at reset (with every car
 * at column 0) and on each score (positions kept). Every episode is exactly 2501 steps,
 * ending as a true terminal. State layout: fl_freeway_state_t in envs/minatar.h. */
#include <stdlib.h>

#include "envs/minatar.h"

static int wrap_col(int x) {
    if (x < 0) return x + FL_MINATAR_COLS;
    if (x >= FL_MINATAR_COLS) return x - FL_MINATAR_COLS;
    return x;
}

/* 8 magnitudes I(1, 5), then 8 coins (u < 1/2: heading left, else right); each timer
 * reloads to the new |v|. */
static void draw_speeds(fl_freeway_state_t *s, fl_minatar_gen_t *gen) {
    for (int i = 0; i < FL_FREEWAY_NUM_CARS; i++) s->car_v[i] = fl_minatar_int(gen, 1, 5);
    for (int i = 0; i < FL_FREEWAY_NUM_CARS; i++)
        if (fl_minatar_u(gen) < 0.5) s->car_v[i] = -s->car_v[i];
    for (int i = 0; i < FL_FREEWAY_NUM_CARS; i++) s->car_timer[i] = abs(s->car_v[i]);
}

static void freeway_reset(fl_minatar_common_t *c, fl_minatar_gen_t *gen) {
    fl_freeway_state_t *s = (fl_freeway_state_t *)c;
    s->chicken_y = FL_MINATAR_ROWS - 1;
    s->cooldown = FL_FREEWAY_COOLDOWN;
    s->budget = FL_FREEWAY_BUDGET;
    for (int i = 0; i < FL_FREEWAY_NUM_CARS; i++) s->car_x[i] = 0;
    draw_speeds(s, gen);
}

static int freeway_step(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int action, int *terminal) {
    fl_freeway_state_t *s = (fl_freeway_state_t *)c;
    const int bottom = FL_MINATAR_ROWS - 1;
    int reward = 0;
    if (action == FL_MINATAR_UP && s->cooldown == 0) {
        if (s->chicken_y > 0) s->chicken_y--;
        s->cooldown = FL_FREEWAY_COOLDOWN;
    } else if (action == FL_MINATAR_DOWN && s->cooldown == 0) {
        if (s->chicken_y < bottom) s->chicken_y++;
        s->cooldown = FL_FREEWAY_COOLDOWN;
    }
    if (s->chicken_y == 0) {
        reward = 1;
        draw_speeds(s, gen);
        s->chicken_y = bottom;
    }
    /* Branch-free form of: hit check, then (timer == 0) reload and move, then a second
     * hit check. A hit sends the chicken to row 9, where no car can reach it, so the two
     * checks fold into one on "old column 4, or moved onto column 4". */
    int chicken_y = s->chicken_y;
    for (int i = 0; i < FL_FREEWAY_NUM_CARS; i++) {
        int x = s->car_x[i], v = s->car_v[i], timer = s->car_timer[i];
        int moves = timer == 0;
        int nx = wrap_col(x + (v > 0 ? 1 : -1));
        int hit = (x == 4) | (moves & (nx == 4));
        s->car_timer[i] = moves ? abs(v) : timer - 1;
        s->car_x[i] = moves ? nx : x;
        chicken_y = hit & (chicken_y == i + 1) ? bottom : chicken_y;
    }
    s->chicken_y = chicken_y;
    if (s->cooldown > 0) s->cooldown--;
    s->budget--;
    if (s->budget < 0) *terminal = 1;
    return reward;
}

static void freeway_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const fl_freeway_state_t *s = (const fl_freeway_state_t *)c;
    const int C = FL_FREEWAY_CHANNELS;
    fl__minatar_zero(obs, (size_t)FL_MINATAR_ROWS * FL_MINATAR_COLS * FL_FREEWAY_CHANNELS);
    obs[FL_MINATAR_OBS_AT(s->chicken_y, 4, 0, C)] = 1;
    for (int i = 0; i < FL_FREEWAY_NUM_CARS; i++) {
        int v = s->car_v[i];
        int speed = abs(v);
        int behind = wrap_col(s->car_x[i] - (v > 0 ? 1 : -1));
        obs[FL_MINATAR_OBS_AT(i + 1, s->car_x[i], 1, C)] = 1;
        obs[FL_MINATAR_OBS_AT(i + 1, behind, 1 + speed, C)] = 1;
    }
}

static const fl_minatar_game_t freeway_game = {
    .channels = FL_FREEWAY_CHANNELS,
    .obs_writes_all = 1,
    .reset = freeway_reset,
    .step = freeway_step,
    .obs = freeway_obs,
};

static const uint8_t freeway_minimal[] = {FL_MINATAR_NOOP, FL_MINATAR_UP, FL_MINATAR_DOWN};

FL_MINATAR_DEFINE_ENVS(freeway, "freeway", "Freeway: a chicken crosses eight lanes of traffic", fl_freeway_state_t,
                       freeway_game, FL_FREEWAY_CHANNELS, freeway_minimal, 3);
