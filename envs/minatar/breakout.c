/* breakout: MinAtar Breakout (docs/minatar.md, section 3).
 *
 * A paddle on the bottom row keeps a diagonally moving ball in play; the ball breaks
 * bricks in rows 1..3 for +1 each, the rows refill when the ball comes down to the
 * paddle row with no brick left, and the episode ends when the ball reaches row 9
 * without meeting the paddle. After a break the "strike" flag lets the ball pass into
 * the next brick it meets without breaking it. The only draw is the ball's start side
 * at reset. State layout: fl_breakout_state_t in envs/minatar/breakout.h. */
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "envs/minatar/breakout.h"

static void fill_bricks(fl_breakout_state_t *s) {
    for (int y = 1; y <= 3; y++)
        for (int x = 0; x < FL_MINATAR_COLS; x++) s->bricks[y][x] = 1;
}

static int no_bricks(const fl_breakout_state_t *s) {
    for (int y = 0; y < FL_MINATAR_ROWS; y++)
        for (int x = 0; x < FL_MINATAR_COLS; x++)
            if (s->bricks[y][x]) return 0;
    return 1;
}

static void breakout_reset(fl_minatar_common_t *c, fl_minatar_gen_t *gen) {
    fl_breakout_state_t *s = (fl_breakout_state_t *)c;
    s->paddle = 4;
    s->ball_y = 3;
    if (fl_minatar_int(gen, 0, 1) == 0) {
        s->ball_x = 0;
        s->dx = 1;
    } else {
        s->ball_x = 9;
        s->dx = -1;
    }
    s->dy = 1;
    s->last_y = s->ball_y;
    s->last_x = s->ball_x;
    s->strike = 0;
    memset(s->bricks, 0, sizeof s->bricks);
    fill_bricks(s);
}

static int breakout_step(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int action, int *terminal) {
    (void)gen;
    fl_breakout_state_t *s = (fl_breakout_state_t *)c;
    int reward = 0;
    if (action == FL_MINATAR_LEFT && s->paddle > 0) s->paddle--;
    if (action == FL_MINATAR_RIGHT && s->paddle < FL_MINATAR_COLS - 1) s->paddle++;

    s->last_y = s->ball_y;
    s->last_x = s->ball_x;
    int ty = s->ball_y + s->dy;
    int tx = s->ball_x + s->dx;
    if (tx < 0 || tx > FL_MINATAR_COLS - 1) {
        tx = tx < 0 ? 0 : FL_MINATAR_COLS - 1;
        s->dx = -s->dx;
    }
    int contact = 0;
    if (ty < 0) {
        ty = 0;
        s->dy = -s->dy;
    } else if (s->bricks[ty][tx]) {
        contact = 1;
        if (!s->strike) {
            reward = 1;
            s->strike = 1;
            s->bricks[ty][tx] = 0;
            ty = s->ball_y;
            s->dy = -s->dy;
        }
    } else if (ty == FL_MINATAR_ROWS - 1) {
        if (no_bricks(s)) fill_bricks(s);
        if (s->ball_x == s->paddle) {
            s->dy = -s->dy;
            ty = s->ball_y;
        } else if (tx == s->paddle) {
            s->dx = -s->dx;
            s->dy = -s->dy;
            ty = s->ball_y;
        } else {
            *terminal = 1;
        }
    }
    if (!contact) s->strike = 0;
    s->ball_y = ty;
    s->ball_x = tx;
    return reward;
}

/* Channel 3 (bricks) for every cell, with channels 0..2 of the cell zeroed: all 400 bytes.
 * A data-dependent branch per cell costs more than the rest of the step, so this is
 * branch-free, and with SSE2 sixteen cells at a time (each brick byte widened to the
 * top byte of its cell's 4-byte group). */
static void write_bricks(const uint8_t *bricks, uint8_t *obs) {
    enum { CELLS = FL_MINATAR_ROWS * FL_MINATAR_COLS, C = FL_BREAKOUT_CHANNELS };
    int i = 0;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128(), one = _mm_set1_epi8(1);
    for (; i + 16 <= CELLS; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(bricks + i));
        b = _mm_andnot_si128(_mm_cmpeq_epi8(b, zero), one);
        __m128i lo = _mm_unpacklo_epi8(zero, b), hi = _mm_unpackhi_epi8(zero, b);
        _mm_storeu_si128((__m128i *)(obs + i * C), _mm_unpacklo_epi16(zero, lo));
        _mm_storeu_si128((__m128i *)(obs + i * C + 16), _mm_unpackhi_epi16(zero, lo));
        _mm_storeu_si128((__m128i *)(obs + i * C + 32), _mm_unpacklo_epi16(zero, hi));
        _mm_storeu_si128((__m128i *)(obs + i * C + 48), _mm_unpackhi_epi16(zero, hi));
    }
#endif
    for (; i < CELLS; i++) {
        uint8_t cell[C] = {0, 0, 0, bricks[i] != 0};
        memcpy(obs + i * C, cell, C);
    }
}

static void breakout_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const fl_breakout_state_t *s = (const fl_breakout_state_t *)c;
    const int C = FL_BREAKOUT_CHANNELS;
    write_bricks(&s->bricks[0][0], obs);
    obs[FL_MINATAR_OBS_AT(FL_MINATAR_ROWS - 1, s->paddle, 0, C)] = 1;
    obs[FL_MINATAR_OBS_AT(s->ball_y, s->ball_x, 1, C)] = 1;
    obs[FL_MINATAR_OBS_AT(s->last_y, s->last_x, 2, C)] = 1;
}

static const fl_minatar_game_t breakout_game = {
    .channels = FL_BREAKOUT_CHANNELS,
    .obs_writes_all = 1,
    .reset = breakout_reset,
    .step = breakout_step,
    .obs = breakout_obs,
};

static const uint8_t breakout_minimal[] = {FL_MINATAR_NOOP, FL_MINATAR_LEFT, FL_MINATAR_RIGHT};

FL_MINATAR_DEFINE_ENVS(breakout, "breakout", "Breakout: paddle, ball and three rows of bricks", fl_breakout_state_t,
                       breakout_game, FL_BREAKOUT_CHANNELS, breakout_minimal, 3);
