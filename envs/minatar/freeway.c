/* freeway: MinAtar Freeway (docs/minatar.md, section 4).
 *
 * A chicken in column 4 crosses eight lanes of traffic from row 9 to row 0 for +1 per
 * crossing; a car hitting it only sends it back to row 9. Each car moves one column
 * every |v| + 1 steps with wrap-around; all speeds are re-drawn at reset (with every car
 * at column 0) and on each score (positions kept). Every episode is exactly 2501 steps,
 * ending as a true terminal. State layout: fl_freeway_state_t in envs/minatar/freeway.h.
 *
 * Speed: a step is branch-free apart from the rare score. Car timers fire at different
 * paces and the chicken moves at random, so branches on them mispredict often; the eight
 * cars are updated four at a time with SSE2 (plain C without it). The observation reads
 * the whole state before its first store (see freeway_obs). */
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "envs/minatar/freeway.h"

#define ROW_BYTES (FL_MINATAR_COLS * FL_FREEWAY_CHANNELS) /* 70 */
#define CHICKEN_COL 4

#if defined(__SSE2__)
/* Sign of v (v > 0 ? 1 : -1), on four cars. */
static inline __m128i headings(__m128i v) {
    __m128i right = _mm_cmpgt_epi32(v, _mm_setzero_si128()); /* -1 or 0 */
    return _mm_sub_epi32(_mm_set1_epi32(-1), _mm_add_epi32(right, right));
}

/* |v|, on four cars. */
static inline __m128i speeds(__m128i v) {
    __m128i sign = _mm_srai_epi32(v, 31);
    return _mm_sub_epi32(_mm_xor_si128(v, sign), sign);
}

/* Column wrap-around (-1 becomes 9 and 10 becomes 0), on four cars. */
static inline __m128i wrap_cols(__m128i x) {
    const __m128i cols = _mm_set1_epi32(FL_MINATAR_COLS);
    x = _mm_add_epi32(x, _mm_and_si128(_mm_cmpgt_epi32(_mm_setzero_si128(), x), cols));
    return _mm_sub_epi32(x, _mm_and_si128(_mm_cmpgt_epi32(x, _mm_set1_epi32(FL_MINATAR_COLS - 1)), cols));
}
#else
static int wrap_col(int x) {
    if (x < 0) return x + FL_MINATAR_COLS;
    if (x >= FL_MINATAR_COLS) return x - FL_MINATAR_COLS;
    return x;
}
#endif

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

/* Step 4 for every car: hit check, then (timer == 0) reload and move, then a second hit
 * check. Returns a mask with bit i set when car i hits column 4 of its row: it was there
 * before moving, or it moved there. Whether that is the chicken's cell is the caller's
 * business (see freeway_step). */
static unsigned move_cars(fl_freeway_state_t *s) {
    unsigned hits = 0;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128(), one = _mm_set1_epi32(1), col = _mm_set1_epi32(CHICKEN_COL);
    for (int i = 0; i < FL_FREEWAY_NUM_CARS; i += 4) {
        __m128i x = _mm_loadu_si128((const __m128i *)&s->car_x[i]);
        __m128i v = _mm_loadu_si128((const __m128i *)&s->car_v[i]);
        __m128i timer = _mm_loadu_si128((const __m128i *)&s->car_timer[i]);
        __m128i nx = wrap_cols(_mm_add_epi32(x, headings(v)));
        __m128i moves = _mm_cmpeq_epi32(timer, zero);
        __m128i hit = _mm_or_si128(_mm_cmpeq_epi32(x, col), _mm_and_si128(moves, _mm_cmpeq_epi32(nx, col)));
        timer = _mm_or_si128(_mm_and_si128(moves, speeds(v)), _mm_andnot_si128(moves, _mm_sub_epi32(timer, one)));
        x = _mm_or_si128(_mm_and_si128(moves, nx), _mm_andnot_si128(moves, x));
        _mm_storeu_si128((__m128i *)&s->car_x[i], x);
        _mm_storeu_si128((__m128i *)&s->car_timer[i], timer);
        hits |= (unsigned)_mm_movemask_ps(_mm_castsi128_ps(hit)) << i;
    }
#else
    for (int i = 0; i < FL_FREEWAY_NUM_CARS; i++) {
        int x = s->car_x[i], v = s->car_v[i], timer = s->car_timer[i];
        int moves = timer == 0;
        int nx = wrap_col(x + (v > 0 ? 1 : -1));
        hits |= (unsigned)((x == CHICKEN_COL) | (moves & (nx == CHICKEN_COL))) << i;
        s->car_timer[i] = moves ? abs(v) : timer - 1;
        s->car_x[i] = moves ? nx : x;
    }
#endif
    return hits;
}

static int freeway_step(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int action, int *terminal) {
    fl_freeway_state_t *s = (fl_freeway_state_t *)c;
    const int bottom = FL_MINATAR_ROWS - 1;
    int reward = 0;
    /* Step 2 without branches: at most one of up and down applies. */
    int ready = s->cooldown == 0;
    int up = ready & (action == FL_MINATAR_UP), down = ready & (action == FL_MINATAR_DOWN);
    int y = s->chicken_y;
    y += (down & (y < bottom)) - (up & (y > 0));
    s->cooldown = up | down ? FL_FREEWAY_COOLDOWN : s->cooldown;
    if (y == 0) {
        reward = 1;
        draw_speeds(s, gen);
        y = bottom;
    }
    /* Cars are checked in order against the chicken's row as it stands, but a hit sends
     * the chicken to row 9, where no car can reach it, so only the car on its row (car
     * y - 1, when y is 1..8) can matter. */
    unsigned hits = move_cars(s);
    unsigned lane = (unsigned)(y - 1);
    int hit = (int)((hits >> (lane & 7u)) & (lane < FL_FREEWAY_NUM_CARS));
    s->chicken_y = hit ? bottom : y;
    s->cooldown -= s->cooldown > 0;
    s->budget--;
    if (s->budget < 0) *terminal = 1;
    return reward;
}

/* Zeroes the 700 bytes of an observation with 16-byte stores (the last one overlaps). The
 * empty asm hides that z is zero, so that the compiler does not turn the stores into a
 * memset, whose `rep stos` start-up costs more than the stores. */
static void zero_obs(uint8_t *obs) {
    enum { BYTES = FL_MINATAR_ROWS * ROW_BYTES };
#if defined(__SSE2__) && defined(__GNUC__)
    __m128i z = _mm_setzero_si128();
    __asm__("" : "+x"(z));
#pragma GCC unroll 43
    for (int k = 0; k + 16 <= BYTES; k += 16) _mm_storeu_si128((__m128i *)(obs + k), z);
    _mm_storeu_si128((__m128i *)(obs + BYTES - 16), z);
#else
    memset(obs, 0, BYTES);
#endif
}

/* The observation holds 17 1s: per car i, row i + 1, the car (channel 1 at its column x)
 * and its trail (channel 1 + |v| at the behind column, wrapping), then the chicken.
 * All of their byte offsets are worked out before the first store to obs: obs may alias
 * the state (it is a uint8_t *), so a state read after a store would be redone from
 * memory and held up behind the stores, which costs more than the whole rest. */
static void freeway_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const fl_freeway_state_t *s = (const fl_freeway_state_t *)c;
    const int C = FL_FREEWAY_CHANNELS;
    enum { N = FL_FREEWAY_NUM_CARS };
    int ones[2 * N]; /* car i at ones[i], its trail at ones[N + i] */
#if defined(__SSE2__)
    for (int i = 0; i < N; i += 4) {
        __m128i x = _mm_loadu_si128((const __m128i *)&s->car_x[i]);
        __m128i v = _mm_loadu_si128((const __m128i *)&s->car_v[i]);
        __m128i behind = wrap_cols(_mm_sub_epi32(x, headings(v)));
        /* Offset of (row i + 1, column x, channel 1): 70 (i + 1) + 7 x + 1, with 7 x = 8 x - x. */
        __m128i row = _mm_setr_epi32((i + 1) * ROW_BYTES + 1, (i + 2) * ROW_BYTES + 1, (i + 3) * ROW_BYTES + 1,
                                     (i + 4) * ROW_BYTES + 1);
        __m128i car = _mm_add_epi32(row, _mm_sub_epi32(_mm_slli_epi32(x, 3), x));
        __m128i trail = _mm_add_epi32(_mm_add_epi32(row, speeds(v)), _mm_sub_epi32(_mm_slli_epi32(behind, 3), behind));
        _mm_storeu_si128((__m128i *)&ones[i], car);
        _mm_storeu_si128((__m128i *)&ones[N + i], trail);
    }
#else
    for (int i = 0; i < N; i++) {
        int x = s->car_x[i], v = s->car_v[i];
        ones[i] = (int)FL_MINATAR_OBS_AT(i + 1, x, 1, C);
        ones[N + i] = (int)FL_MINATAR_OBS_AT(i + 1, wrap_col(x - (v > 0 ? 1 : -1)), 1 + abs(v), C);
    }
#endif
    size_t chicken = FL_MINATAR_OBS_AT(s->chicken_y, CHICKEN_COL, 0, C);
    zero_obs(obs);
#pragma GCC unroll 16
    for (int k = 0; k < 2 * N; k++) obs[ones[k]] = 1;
    obs[chicken] = 1;
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
