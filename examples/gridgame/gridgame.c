/* gridgame: a complete custom environment for fleet, in one file.
 *
 * An agent on a 5x5 grid walks to the goal in the bottom-right corner. Each episode
 * starts on a random cell other than the goal. Actions: 0 up, 1 down, 2 left, 3 right;
 * a move into the border leaves the agent where it is. Every step costs 0.1, reaching
 * the goal pays +1 and ends the episode; after 50 steps the episode is truncated.
 * The best return from a random start is 0.68 on average; a uniformly random policy
 * gets about -3.
 *
 * Observation: float32 (5, 5), 1 on the agent's cell and 0 elsewhere.
 *
 * Options (env.args, read by configure): "slip=P" makes a move go in a uniformly random
 * direction with probability P (0 <= P <= 1); "" keeps the grid deterministic. Anything
 * else is rejected, and fleet then reports the env and the options.
 *
 * Build (see docs/custom-envs.md): cc -shared -fPIC -O2 -I<prefix>/include gridgame.c
 * -o libgridgame.so; run: fleet run --set env.plugin=./libgridgame.so --set env.name=gridgame */
#include <fleet/env.h>

#include <stdlib.h>
#include <string.h>

#define SIZE 5
#define GOAL_ROW (SIZE - 1)
#define GOAL_COL (SIZE - 1)
#define STEP_REWARD -0.1f
#define GOAL_REWARD 1.0f
#define TIME_LIMIT 50

/* One instance. slip is set by configure and kept across episodes; row and col are
 * the episode state that reset initializes. */
typedef struct gridgame_state {
    float slip;
    int row, col;
} gridgame_state_t;

static void write_obs(const gridgame_state_t *s, float *obs /* (SIZE, SIZE) */) {
    memset(obs, 0, SIZE * SIZE * sizeof *obs);
    obs[s->row * SIZE + s->col] = 1.0f;
}

static void gridgame_reset(void *state, fl_rng_t *rng, void *obs) {
    gridgame_state_t *s = state;
    /* A uniform cell among the SIZE*SIZE - 1 that are not the goal (the last index). */
    int cell = (int)fl_env_rng_below(rng, SIZE * SIZE - 1);
    s->row = cell / SIZE;
    s->col = cell % SIZE;
    write_obs(s, obs);
}

static void gridgame_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    gridgame_state_t *s = state;
    if (s->slip > 0.0f && fl_env_rng_float(rng) < s->slip) action = (int)fl_env_rng_below(rng, 4);
    static const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
    int r = s->row + dr[action], c = s->col + dc[action];
    if (r >= 0 && r < SIZE && c >= 0 && c < SIZE) {
        s->row = r;
        s->col = c;
    }
    int at_goal = s->row == GOAL_ROW && s->col == GOAL_COL;
    *reward = at_goal ? GOAL_REWARD : STEP_REWARD;
    *terminated = at_goal;
    write_obs(s, obs);
}

/* Accepts "" or "slip=P" with 0 <= P <= 1. */
static int gridgame_configure(void *state, const fl_env_options_t *opts) {
    gridgame_state_t *s = state;
    s->slip = 0.0f;
    const char *a = opts->args ? opts->args : "";
    if (!a[0]) return 0;
    if (strncmp(a, "slip=", 5) != 0) return -1;
    char *end = NULL;
    double p = strtod(a + 5, &end);
    if (end == a + 5 || *end != '\0' || !(p >= 0.0 && p <= 1.0)) return -1;
    s->slip = (float)p;
    return 0;
}

/* Draws the grid, 8x8 pixels a cell: the agent blue, the goal green, the floor grey. */
static void gridgame_render(const void *state, uint8_t *rgb /* (40, 40, 3) */) {
    const gridgame_state_t *s = state;
    for (int y = 0; y < SIZE * 8; y++)
        for (int x = 0; x < SIZE * 8; x++) {
            int r = y / 8, c = x / 8;
            uint8_t *p = rgb + ((size_t)y * SIZE * 8 + (size_t)x) * 3;
            uint8_t col[3] = {60, 60, 60};
            if (r == GOAL_ROW && c == GOAL_COL) col[0] = 40, col[1] = 200, col[2] = 40;
            if (r == s->row && c == s->col) col[0] = 40, col[1] = 80, col[2] = 230;
            p[0] = col[0];
            p[1] = col[1];
            p[2] = col[2];
        }
}

/* Names for people and tools: `fleet env play` maps the arrow keys to these. */
static const char *gridgame_action_name(int action) {
    static const char *const names[4] = {"up", "down", "left", "right"};
    return names[action];
}

static const fl_env_def_t gridgame = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "gridgame",
    .description = "5x5 grid, walk to the corner goal (+1), 0.1 per step, 50-step limit",
    .obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 2, .shape = {SIZE, SIZE}},
    .num_actions = 4,
    .max_episode_steps = TIME_LIMIT,
    .state_size = sizeof(gridgame_state_t),
    .reset = gridgame_reset,
    .step = gridgame_step,
    .render = gridgame_render,
    .render_height = SIZE * 8,
    .render_width = SIZE * 8,
    .configure = gridgame_configure,
    .action_name = gridgame_action_name,
};

FL_ENV_EXPORT const fl_env_def_t *fl_env_plugin(void) {
    return &gridgame;
}
