/* catch: a complete custom environment for fleet, in one file (docs/custom-envs.md).
 *
 * Balls fall one at a time down a 10 x 5 grid, one row a step, each from a random column
 * of the top row; the agent moves a paddle along the bottom row to catch them. A catch
 * pays +1 and a miss -1; the third miss ends the game (terminated). An agent that never
 * misses plays on until fleet truncates the episode at max_episode_steps, 200 steps: a
 * return of 22. A random policy gets about -2.
 *
 * Observation: float32 (10, 5), 1 on the ball's cell, -1 on the paddle's, 0 elsewhere.
 * Actions: 0 left, 1 noop, 2 right.
 *
 *   cc -O2 -shared -fPIC -I$HOME/.local/include catch.c -o libcatch.so
 *   fleet env check catch --plugin ./libcatch.so
 *   fleet run --set env.plugin=./libcatch.so --set env.name=catch --set run.name=catch ... */
#include <fleet/env.h>

#include <string.h>

#define ROWS 10
#define COLS 5
#define MAX_MISSES 3
#define CELL 8 /* pixels a cell in render */

/* One instance's state: fleet allocates it (zeroed once); reset sets every field. */
typedef struct catch_state {
    int ball_row, ball_col; /* the falling ball */
    int paddle;             /* the paddle's column, on the bottom row */
    int misses;
} catch_state_t;

static void write_obs(const catch_state_t *s, float *obs /* (ROWS, COLS) */) {
    memset(obs, 0, ROWS * COLS * sizeof *obs);
    obs[s->ball_row * COLS + s->ball_col] = 1.0f;
    obs[(ROWS - 1) * COLS + s->paddle] = -1.0f;
}

/* A new ball at the top, in a column drawn from the instance's generator. */
static void drop_ball(catch_state_t *s, fl_rng_t *rng) {
    s->ball_row = 0;
    s->ball_col = (int)fl_env_rng_below(rng, COLS);
}

static void catch_reset(void *state, fl_rng_t *rng, void *obs) {
    catch_state_t *s = state;
    s->paddle = COLS / 2;
    s->misses = 0;
    drop_ball(s, rng);
    write_obs(s, obs);
}

static void catch_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    catch_state_t *s = state;
    s->paddle += action - 1; /* 0 left, 1 noop, 2 right; fleet passes 0 <= action < 3 */
    if (s->paddle < 0) s->paddle = 0;
    if (s->paddle > COLS - 1) s->paddle = COLS - 1;
    *reward = 0.0f;
    if (++s->ball_row == ROWS - 1) { /* the ball reaches the paddle's row */
        if (s->ball_col == s->paddle) {
            *reward = 1.0f;
        } else {
            *reward = -1.0f;
            s->misses++;
        }
        drop_ball(s, rng);
    }
    *terminated = s->misses >= MAX_MISSES;
    write_obs(s, obs);
}

/* The state as an image, CELL x CELL pixels a cell: the ball yellow, the paddle blue, a
 * red bar on the left edge's lowest rows for each miss so far. */
static void catch_render(const void *state, uint8_t *rgb /* (ROWS * CELL, COLS * CELL, 3) */) {
    const catch_state_t *s = state;
    for (int y = 0; y < ROWS * CELL; y++)
        for (int x = 0; x < COLS * CELL; x++) {
            int r = y / CELL, c = x / CELL;
            uint8_t col[3] = {20, 20, 30};
            if (r == s->ball_row && c == s->ball_col) col[0] = 240, col[1] = 210, col[2] = 40;
            if (r == ROWS - 1 && c == s->paddle) col[0] = 50, col[1] = 110, col[2] = 240;
            if (x < 2 && y >= (ROWS - s->misses) * CELL) col[0] = 220, col[1] = 40, col[2] = 40;
            memcpy(rgb + ((size_t)y * COLS * CELL + (size_t)x) * 3, col, 3);
        }
}

/* `fleet env play` maps the arrow keys to "left" and "right", '.' to "noop". */
static const char *catch_action_name(int action) {
    static const char *const names[3] = {"left", "noop", "right"};
    return names[action];
}

static const fl_env_def_t catch_env = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "catch",
    .description = "catch falling balls with a paddle: +1 a catch, -1 a miss, 3 misses end the game",
    .obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 2, .shape = {ROWS, COLS}},
    .num_actions = 3,
    .max_episode_steps = 200, /* fleet truncates here; the env never ends a game for time */
    .state_size = sizeof(catch_state_t),
    .reset = catch_reset,
    .step = catch_step,
    .render = catch_render,
    .render_height = ROWS * CELL,
    .render_width = COLS * CELL,
    .action_name = catch_action_name,
};

FL_ENV_EXPORT const fl_env_def_t *fl_env_plugin(void) {
    return &catch_env;
}
