/* space_invaders: the Space Invaders game of docs/minatar.md, section 6.
 *
 * Aliens and both kinds of bullets are 10x10 byte maps ([row][col], 0 or 1 per cell), so
 * the state is a small value with no lists. Within a step: the cannon acts, friendly
 * bullets rise, enemy bullets fall, the formation moves on its global timer (sideways, or
 * down with a heading reversal at an edge), the alien nearest the cannon by column shoots
 * on a 10-step timer, and only then are alien/bullet overlaps resolved, so a bullet and an
 * alien that swap cells in one step both survive. A cleared wave refills at once and,
 * with ramping, speeds the formation up. Nothing is random: the game is a function of the
 * executed actions.
 *
 * Speed. A map is 100 contiguous bytes, so a whole-map change is a few wide loads and
 * stores: moving every bullet one row is a 10-byte memmove done in 16-byte pieces, and
 * the kill test is a byte-wise AND of two maps, eight cells per 64-bit word. The branches
 * taken every step depend on timers and rare events (a kill, an empty map), not on the
 * action. The observation (600 bytes) is written whole, with no clearing pass: with SSE2,
 * sixteen cells at a time become pair codes (3 bits per cell: alien, friendly bullet,
 * enemy bullet) and each 16-byte store is a shuffle of those codes masked down to the
 * bit each byte shows; without SSE2, cell by cell. */
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "envs/minatar/space_invaders.h"

#define GRID 10
#define CELLS (GRID * GRID)
#define CH FL_SPACE_INVADERS_CHANNELS
#define MOVE_INTERVAL0 12
#define MIN_MOVE_INTERVAL 6
#define ENEMY_SHOT_INTERVAL 10
#define SHOT_COOLDOWN 5

enum { A_NOOP = 0, A_LEFT = 1, A_UP = 2, A_RIGHT = 3, A_DOWN = 4, A_FIRE = 5 };

/* A 100-cell map is scanned as twelve 8-byte words and one 4-byte tail. */
#define WORDS 12
#define TAIL (WORDS * 8)
#define ONES 0x0101010101010101ull

static inline uint64_t load8(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline void store8(uint8_t *p, uint64_t w) {
    memcpy(p, &w, 8);
}

static inline uint64_t load4(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

static inline void store4(uint8_t *p, uint64_t w) {
    uint32_t v = (uint32_t)w;
    memcpy(p, &v, 4);
}

static inline uint64_t load2(const uint8_t *p) {
    uint16_t w;
    memcpy(&w, p, 2);
    return w;
}

static inline void store2(uint8_t *p, uint64_t w) {
    uint16_t v = (uint16_t)w;
    memcpy(p, &v, 2);
}

/* Sum of the bytes of w when it is below 256. */
static inline int byte_sum(uint64_t w) {
    return (int)((w * ONES) >> 56);
}

/* Bit j set when byte j of w is nonzero. */
static inline unsigned nonzero_bits(uint64_t w) {
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7full;
    uint64_t ones = ((((w & low7) + low7) | w) >> 7) & ONES; /* 1 in each nonzero byte */
    return (unsigned)((ones * 0x0102040810204080ull) >> 56);
}

static void fill_wave(fl_space_invaders_t *g) {
    for (int y = 0; y <= 3; y++)
        for (int x = 2; x <= 7; x++) g->aliens[y][x] = 1;
}

void fl_space_invaders_reset(fl_space_invaders_t *g) {
    int ramping = g->ramping;
    memset(g, 0, sizeof(*g));
    g->ramping = ramping;
    g->cannon_x = 5;
    fill_wave(g);
    g->alien_dir = -1;
    g->move_interval = MOVE_INTERVAL0;
    g->move_timer = MOVE_INTERVAL0;
    g->shot_timer = ENEMY_SHOT_INTERVAL;
    g->shot_cooldown = 0;
    g->ramp_index = 0;
    g->terminal = 0;
}

static int alien_count(const fl_space_invaders_t *g) {
    const uint8_t *a = &g->aliens[0][0];
    uint64_t acc = load4(a + TAIL);
    for (int k = 0; k < WORDS; k++) acc += load8(a + 8 * k);
    return byte_sum(acc);
}

/* Row y as an 80-bit value split into columns 0..7 (lo, byte x = column x) and 8..9 (hi). */
static inline void row_load(const uint8_t *grid, int y, uint64_t *lo, uint64_t *hi) {
    *lo = load8(grid + y * GRID);
    *hi = load2(grid + y * GRID + 8);
}

/* Bit x set when column x holds an alien. */
static unsigned column_mask(const fl_space_invaders_t *g) {
    uint64_t lo = 0, hi = 0;
    for (int y = 0; y < GRID; y++) {
        uint64_t rl, rh;
        row_load(&g->aliens[0][0], y, &rl, &rh);
        lo |= rl;
        hi |= rh;
    }
    return nonzero_bits(lo) | nonzero_bits(hi) << 8;
}

/* ---- Whole-map operations ---------------------------------------------------------------- */

/* Copies 16 bytes; src and dst may overlap (the bytes are read before any is written). */
static inline void move16(uint8_t *dst, const uint8_t *src) {
    uint8_t t[16];
    memcpy(t, src, 16);
    memcpy(dst, t, 16);
}

/* Moves every row one row up: bytes 10..99 go to 0..89 in 16-byte pieces, lowest first,
 * each read before it is overwritten; row 9 becomes empty. */
static inline void rows_up(uint8_t *m) {
    for (int o = 0; o < 80; o += 16) move16(m + o, m + o + GRID);
    move16(m + 74, m + 84);
    store8(m + 90, 0);
    store2(m + 98, 0);
}

/* Moves every row one row down: bytes 0..89 go to 10..99, highest first; row 0 becomes
 * empty. */
static inline void rows_down(uint8_t *m) {
    for (int o = 84; o > 10; o -= 16) move16(m + o, m + o - GRID);
    move16(m + 10, m);
    store8(m, 0);
    store2(m + 8, 0);
}

/* Step 3 and the shot of step 2: the friendly bullets move up, and fire (0 or 1) puts a
 * bullet at (8, x), where one put at (9, x) before the move would be. */
static inline void bullets_up(uint8_t *f, int x, int fire) {
    rows_up(f);
    f[(GRID - 2) * GRID + x] |= (uint8_t)fire;
}

/* Step 4: the enemy bullets move down. Returns 1 when one is then at (9, x). */
static inline int bullets_down(uint8_t *e, int x) {
    rows_down(e);
    return e[(GRID - 1) * GRID + x] != 0;
}

/* The descent of step 6, cyclic: row 9 reappears on row 0. */
static void descend(uint8_t *a) {
    uint64_t lo = load8(a + (GRID - 1) * GRID), hi = load2(a + (GRID - 1) * GRID + 8);
    rows_down(a);
    store8(a, lo);
    store2(a + 8, hi);
}

/* Step 8: removes every alien that shares a cell with a friendly bullet, and the bullet
 * with it, eight cells per 64-bit word (cells hold 0 or 1, so byte-wise ANDs and sums
 * never carry into the next cell). Returns the number of kills; *left is set to whether
 * any alien remains. */
static inline int resolve_hits(fl_space_invaders_t *g, int *left) {
    uint8_t *a = &g->aliens[0][0], *f = &g->f_bullets[0][0];
    uint64_t kills = 0, alive = 0;
    for (int k = 0; k < WORDS; k++) {
        uint64_t wa = load8(a + 8 * k), wf = load8(f + 8 * k);
        uint64_t hit = wa & wf;
        if (hit) {
            store8(a + 8 * k, wa ^ hit);
            store8(f + 8 * k, wf ^ hit);
            kills += hit;
        }
        alive |= wa ^ hit;
    }
    uint64_t wa = load4(a + TAIL), wf = load4(f + TAIL);
    uint64_t hit = wa & wf;
    if (hit) {
        store4(a + TAIL, wa ^ hit);
        store4(f + TAIL, wf ^ hit);
        kills += hit;
    }
    alive |= wa ^ hit;
    *left = alive != 0;
    return byte_sum(kills);
}

/* Step 6 of spec 6.3: reverse and descend at an edge (cyclically, so that on the terminal
 * descent row 9 reappears on row 0), otherwise shift sideways. Returns 1 when terminal. */
static int move_aliens(fl_space_invaders_t *g) {
    uint8_t *a = &g->aliens[0][0];
    unsigned cols = column_mask(g);
    int terminal = 0;
    int at_edge = (g->alien_dir < 0 && (cols & 1u)) || (g->alien_dir > 0 && (cols >> (GRID - 1) & 1u));
    if (at_edge) {
        g->alien_dir = -g->alien_dir;
        uint64_t last_lo, last_hi;
        row_load(a, GRID - 1, &last_lo, &last_hi);
        if (last_lo | last_hi) terminal = 1;
        descend(a);
    } else {
        /* The edge test guarantees the column the formation leaves from is empty. */
        for (int y = 0; y < GRID; y++) {
            uint64_t lo, hi;
            row_load(a, y, &lo, &hi);
            if (g->alien_dir < 0) {
                lo = (lo >> 8) | (hi << 56);
                hi >>= 8;
            } else {
                hi = ((hi << 8) | (lo >> 56)) & 0xffff;
                lo <<= 8;
            }
            store8(a + y * GRID, lo);
            store2(a + y * GRID + 8, hi);
        }
    }
    if (g->aliens[GRID - 1][g->cannon_x]) terminal = 1;
    return terminal;
}

/* Step 7 of spec 6.3: the lowest alien of the occupied column nearest the cannon (ties to
 * the smaller column) shoots from its own cell. */
static void alien_shoot(fl_space_invaders_t *g) {
    unsigned cols = column_mask(g);
    if (!cols) return;
    int x = g->cannon_x;
    unsigned left = cols & ((2u << x) - 1);   /* occupied columns <= x */
    unsigned right = cols & ~((2u << x) - 1); /* occupied columns > x */
    int best;
    if (!left)
        best = __builtin_ctz(right);
    else if (!right)
        best = 31 - __builtin_clz(left);
    else {
        int xl = 31 - __builtin_clz(left), xr = __builtin_ctz(right);
        best = x - xl <= xr - x ? xl : xr;
    }
    for (int y = GRID - 1; y >= 0; y--) {
        if (g->aliens[y][best]) {
            g->e_bullets[y][best] = 1;
            return;
        }
    }
}

/* One step of spec 6.3 with a full action index. */
static inline int step(fl_space_invaders_t *g, int action) {
    if (g->terminal) return 0;
    uint8_t *f = &g->f_bullets[0][0], *e = &g->e_bullets[0][0];

    /* Steps 2 and 3, without branching on the action. */
    int x = g->cannon_x;
    int fire = (action == A_FIRE) & (g->shot_cooldown == 0);
    x += (action == A_RIGHT && x < GRID - 1) - (action == A_LEFT && x > 0);
    g->cannon_x = x;
    int cooldown = fire ? SHOT_COOLDOWN : g->shot_cooldown;
    bullets_up(f, x, fire);

    /* Steps 4 and 5. */
    int terminal = bullets_down(e, x) | (g->aliens[GRID - 1][x] != 0);

    if (g->move_timer == 0) {
        int n = alien_count(g);
        g->move_timer = n < g->move_interval ? n : g->move_interval;
        terminal |= move_aliens(g);
    }

    if (g->shot_timer == 0) {
        g->shot_timer = ENEMY_SHOT_INTERVAL;
        alien_shoot(g);
    }

    int left;
    int reward = resolve_hits(g, &left);

    /* Step 9. */
    g->shot_cooldown = cooldown - (cooldown > 0);
    g->move_timer -= g->move_timer > 0;
    g->shot_timer -= g->shot_timer > 0;

    if (__builtin_expect(!left, 0)) {
        if (g->ramping && g->move_interval > MIN_MOVE_INTERVAL) {
            g->move_interval--;
            g->ramp_index++;
        }
        fill_wave(g);
    }
    g->terminal = terminal;
    return reward;
}

int fl_space_invaders_step(fl_space_invaders_t *g, int action) {
    return step(g, action);
}

/* ---- Observation ------------------------------------------------------------------------- */

#if defined(__SSE2__)
/* The observation is built from pair codes: cells 2p and 2p + 1 give the 6-bit code
 * p_code = code(2p) | code(2p + 1) << 3, where code = alien | friendly bullet << 1 | enemy
 * bullet << 2. The pair's 12 bytes all start as p_code; a per-byte mask keeps the one bit
 * that the byte's cell and channel show, and min(., 1) turns it into 0 or 1. Channel 0
 * (the cannon) is set afterwards. Masks for 4 pairs (48 bytes) per heading: [0] left (the
 * alien copy in channel 2), [1] right (channel 3). */
#define PAIR_MASKS_LEFT 0, 1, 1, 0, 2, 4, 0, 8, 8, 0, 16, 32
#define PAIR_MASKS_RIGHT 0, 1, 0, 1, 2, 4, 0, 8, 0, 8, 16, 32
static _Alignas(16) const uint8_t pair_masks[2][8 * CH] = {
    {PAIR_MASKS_LEFT, PAIR_MASKS_LEFT, PAIR_MASKS_LEFT, PAIR_MASKS_LEFT},
    {PAIR_MASKS_RIGHT, PAIR_MASKS_RIGHT, PAIR_MASKS_RIGHT, PAIR_MASKS_RIGHT}};

/* Pair codes of 16 cells from one vector of each map (any nonzero byte counts as
 * present), each code in both bytes of its 16-bit lane. */
static inline __m128i pair_codes(__m128i a, __m128i f, __m128i e) {
    const __m128i one = _mm_set1_epi8(1);
    a = _mm_min_epu8(a, one);
    f = _mm_min_epu8(f, one);
    e = _mm_min_epu8(e, one);
    __m128i c = _mm_or_si128(a, _mm_or_si128(_mm_add_epi8(f, f), _mm_slli_epi16(e, 2)));
    __m128i p = _mm_and_si128(_mm_or_si128(c, _mm_srli_epi16(c, 5)), _mm_set1_epi16(0x3f));
    return _mm_or_si128(p, _mm_slli_epi16(p, 8));
}

/* The four pairs whose codes fill the dwords of q span 48 observation bytes, three
 * vectors, each made of four dwords of one pair's code: pairs 0 0 0 1, 1 1 2 2, 2 3 3 3. */
#define PAIRS_V0 _MM_SHUFFLE(1, 0, 0, 0)
#define PAIRS_V1 _MM_SHUFFLE(2, 2, 1, 1)
#define PAIRS_V2 _MM_SHUFFLE(3, 3, 3, 2)

/* 16 observation bytes from 16 copies of pair codes and their masks. */
static inline __m128i obs_bytes(__m128i codes, __m128i mask) {
    return _mm_min_epu8(_mm_and_si128(codes, mask), _mm_set1_epi8(1));
}

/* Writes the 48 observation bytes of 4 pairs (8 cells). */
static inline void write_pairs(__m128i q, const __m128i m[3], uint8_t *out) {
    _mm_storeu_si128((__m128i *)out, obs_bytes(_mm_shuffle_epi32(q, PAIRS_V0), m[0]));
    _mm_storeu_si128((__m128i *)(out + 16), obs_bytes(_mm_shuffle_epi32(q, PAIRS_V1), m[1]));
    _mm_storeu_si128((__m128i *)(out + 32), obs_bytes(_mm_shuffle_epi32(q, PAIRS_V2), m[2]));
}

/* Writes all 600 bytes with 38 stores: cells 0..95 in six rounds of 16 (the maps' six
 * vectors), then cells 96..99 (the maps' tails) as 16 + 8 bytes. */
static inline void write_obs(const fl_space_invaders_t *g, uint8_t *obs) {
    const uint8_t *a = &g->aliens[0][0], *f = &g->f_bullets[0][0], *e = &g->e_bullets[0][0];
    const uint8_t *mp = pair_masks[g->alien_dir < 0 ? 0 : 1];
    const __m128i m[3] = {_mm_load_si128((const __m128i *)mp), _mm_load_si128((const __m128i *)(mp + 16)),
                          _mm_load_si128((const __m128i *)(mp + 32))};
    for (int o = 0; o < TAIL; o += 16) {
        __m128i w = pair_codes(_mm_loadu_si128((const __m128i *)(a + o)), _mm_loadu_si128((const __m128i *)(f + o)),
                               _mm_loadu_si128((const __m128i *)(e + o)));
        write_pairs(_mm_unpacklo_epi16(w, w), m, obs + o * CH);
        write_pairs(_mm_unpackhi_epi16(w, w), m, obs + (o + 8) * CH);
    }
    __m128i w = pair_codes(_mm_cvtsi32_si128((int)load4(a + TAIL)), _mm_cvtsi32_si128((int)load4(f + TAIL)),
                           _mm_cvtsi32_si128((int)load4(e + TAIL)));
    __m128i q = _mm_unpacklo_epi16(w, w); /* pairs 48, 49 */
    _mm_storeu_si128((__m128i *)(obs + TAIL * CH), obs_bytes(_mm_shuffle_epi32(q, PAIRS_V0), m[0]));
    _mm_storel_epi64((__m128i *)(obs + TAIL * CH + 16), obs_bytes(_mm_shuffle_epi32(q, PAIRS_V1), m[1]));
    obs[((GRID - 1) * GRID + g->cannon_x) * CH + 0] = 1;
}
#else
/* Portable version: one cell at a time. */
static inline void write_obs(const fl_space_invaders_t *g, uint8_t *obs) {
    int left = g->alien_dir < 0;
    const uint8_t *a = &g->aliens[0][0], *f = &g->f_bullets[0][0], *e = &g->e_bullets[0][0];
    for (int i = 0; i < CELLS; i++) {
        uint8_t *out = obs + i * CH;
        out[0] = 0;
        out[1] = a[i] != 0;
        out[2] = a[i] != 0 && left;
        out[3] = a[i] != 0 && !left;
        out[4] = f[i] != 0;
        out[5] = e[i] != 0;
    }
    obs[((GRID - 1) * GRID + g->cannon_x) * CH + 0] = 1;
}
#endif

void fl_space_invaders_obs(const fl_space_invaders_t *g, uint8_t *obs) {
    write_obs(g, obs);
}

/* ---- Env definitions (the common MinAtar layer drives these) ---------------------------- */

static void game_reset(fl_minatar_common_t *c, fl_minatar_gen_t *gen) {
    (void)gen;
    fl_space_invaders_env_state_t *s = (fl_space_invaders_env_state_t *)c;
    s->game.ramping = c->ramping;
    fl_space_invaders_reset(&s->game);
}

static int game_step(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int action, int *terminal) {
    (void)gen;
    fl_space_invaders_env_state_t *s = (fl_space_invaders_env_state_t *)c;
    int r = step(&s->game, action);
    *terminal = s->game.terminal;
    return r;
}

static void game_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const fl_space_invaders_env_state_t *s = (const fl_space_invaders_env_state_t *)c;
    write_obs(&s->game, obs);
}

static const fl_minatar_game_t space_invaders_game = {
    .channels = CH, .obs_writes_all = 1, .reset = game_reset, .step = game_step, .obs = game_obs};
static const uint8_t space_invaders_minimal[] = {A_NOOP, A_LEFT, A_RIGHT, A_FIRE};

FL_MINATAR_DEFINE_ENVS(space_invaders, "space_invaders", "Space Invaders: shoot the descending alien formation",
                       fl_space_invaders_env_state_t, space_invaders_game, CH, space_invaders_minimal, 4);
