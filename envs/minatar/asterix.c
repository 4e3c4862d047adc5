/* asterix: the Asterix game of docs/minatar.md, section 2.
 *
 * Eight fixed slots, slot s tied to row s + 1, hold at most one entity per row, so the
 * state is a small value with no lists. Two global timers drive the game: spawns every S
 * steps and one shared group move every M steps; ramping lowers S and M every 102 steps.
 * A spawn draws, in order, the entry side (1/2 coin), the kind (1/3 coin for gold) and,
 * if a row is free, the row among the free ones (uniform index into the free slots in
 * increasing order). Contact is checked after the player moves and again after each
 * entity's move, so nothing can pass through the player. The wrapper (sticky actions,
 * action sets, generator) is the common MinAtar layer's.
 *
 * Speed: the actions are random and entities come and go at random, so branches on them
 * mispredict; the step only branches on the timers and on spawns, and the observation
 * reads the whole state before its first store (see fl_asterix_obs). */
#include <stddef.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "envs/minatar/asterix.h"

/* The SSE2 code handles four slots per vector, reading each as one 32-bit lane. */
_Static_assert(sizeof(fl_asterix_entity_t) == 4 && offsetof(fl_asterix_entity_t, active) == 0 &&
                   offsetof(fl_asterix_entity_t, x) == 1 && offsetof(fl_asterix_entity_t, dir) == 2 &&
                   offsetof(fl_asterix_entity_t, gold) == 3,
               "fl_asterix_entity_t is four bytes: active, x, dir, gold");

#define GRID 10
#define SPAWN_INTERVAL0 10
#define MOVE_INTERVAL0 5
#define RAMP_STEPS 100

enum { A_NOOP = 0, A_LEFT = 1, A_UP = 2, A_RIGHT = 3, A_DOWN = 4, A_FIRE = 5 };

void fl_asterix_reset(fl_asterix_t *g) {
    int ramping = g->ramping;
    memset(g, 0, sizeof(*g));
    g->ramping = ramping;
    g->player_x = 5;
    g->player_y = 5;
    g->spawn_interval = SPAWN_INTERVAL0;
    g->spawn_timer = SPAWN_INTERVAL0;
    g->move_interval = MOVE_INTERVAL0;
    g->move_timer = MOVE_INTERVAL0;
    g->ramp_counter = RAMP_STEPS;
    g->ramp_index = 0;
    g->terminal = 0;
}

/* Spec 2.4: side, kind, then the free slot; the first two draws happen even when every
 * row is taken. */
static void spawn(fl_asterix_t *g, fl_minatar_gen_t *gen) {
    int from_left = fl_minatar_u(gen) < 1.0 / 2.0;
    int gold = fl_minatar_u(gen) < 1.0 / 3.0;
    int free_slots[FL_ASTERIX_SLOTS];
    int n_free = 0;
    for (int s = 0; s < FL_ASTERIX_SLOTS; s++) { /* no branch on the (random) occupancy */
        free_slots[n_free] = s;
        n_free += !g->slots[s].active;
    }
    if (n_free == 0) return;
    int s = free_slots[fl_minatar_int(gen, 0, n_free - 1)];
    g->slots[s].active = 1;
    g->slots[s].x = (int8_t)(from_left ? 0 : GRID - 1);
    g->slots[s].dir = (int8_t)(from_left ? 1 : -1);
    g->slots[s].gold = (int8_t)gold;
}

/* Contact between the player and slot s, the slot of the player's row (s = player_y - 1,
 * the only one that can touch it): gold is collected (+1), an enemy ends the episode and
 * stays where it is. Branch-free, as whether it happens is random. */
static inline int contact(fl_asterix_t *g, int s) {
    fl_asterix_entity_t *e = &g->slots[s];
    int touch = (e->active != 0) & (e->x == g->player_x);
    int gold = touch & (e->gold != 0);
    e->active = (int8_t)(gold ? 0 : e->active);
    g->terminal |= touch & !gold;
    return gold;
}

/* Every active entity steps one column along its heading; one that leaves the grid
 * empties its slot (and keeps its off-grid column). */
static void move_entities(fl_asterix_t *g) {
#if defined(__SSE2__)
    /* Four slots per vector, one per 32-bit lane: bytes active, x, dir, gold (x86 is
     * little-endian), so x += dir is a byte add of dir shifted onto x. */
    const __m128i zero = _mm_setzero_si128(), x_byte = _mm_set1_epi32(0xff00), last = _mm_set1_epi8(GRID - 1);
    for (int s = 0; s < FL_ASTERIX_SLOTS; s += 4) {
        __m128i e = _mm_loadu_si128((const __m128i *)&g->slots[s]);
        __m128i idle = _mm_cmpeq_epi32(_mm_slli_epi32(e, 24), zero);
        e = _mm_add_epi8(e, _mm_andnot_si128(idle, _mm_and_si128(_mm_srli_epi32(e, 8), x_byte)));
        __m128i off = _mm_or_si128(_mm_cmpgt_epi8(zero, e), _mm_cmpgt_epi8(e, last)); /* per byte */
        e = _mm_andnot_si128(_mm_srli_epi32(_mm_and_si128(off, x_byte), 8), e);       /* active = 0 */
        _mm_storeu_si128((__m128i *)&g->slots[s], e);
    }
#else
    for (int s = 0; s < FL_ASTERIX_SLOTS; s++) {
        fl_asterix_entity_t *e = &g->slots[s];
        int active = e->active != 0;
        int8_t x = (int8_t)(e->x + e->dir);
        e->x = active ? x : e->x;
        e->active = (int8_t)(active & (x >= 0) & (x < GRID) ? e->active : 0);
    }
#endif
}

static void ramp(fl_asterix_t *g) {
    if (g->spawn_interval <= 1 && g->move_interval <= 1) return;
    if (g->ramp_counter >= 0) {
        g->ramp_counter--;
        return;
    }
    if (g->move_interval > 1 && g->ramp_index % 2 == 1) g->move_interval--;
    if (g->spawn_interval > 1) g->spawn_interval--;
    g->ramp_index++;
    g->ramp_counter = RAMP_STEPS;
}

int fl_asterix_step(fl_asterix_t *g, int action, fl_minatar_gen_t *gen) {
    if (g->terminal) return 0;
    int reward = 0;
    if (g->spawn_timer == 0) {
        spawn(g, gen);
        g->spawn_timer = g->spawn_interval;
    }
    /* Player move (left/right stop at columns 0 and 9, up/down at rows 1 and 8). */
    int px = g->player_x, py = g->player_y;
    g->player_x = px + ((action == A_RIGHT) & (px < GRID - 1)) - ((action == A_LEFT) & (px > 0));
    g->player_y = py + ((action == A_DOWN) & (py < GRID - 2)) - ((action == A_UP) & (py > 1));
    /* Only the slot of the player's row can touch the player, in either check. */
    int ps = g->player_y - 1;
    int on_row = ps >= 0 && ps < FL_ASTERIX_SLOTS;
    if (on_row) reward += contact(g, ps);
    if (g->move_timer == 0) {
        g->move_timer = g->move_interval;
        move_entities(g);
        if (on_row) reward += contact(g, ps);
    }
    g->spawn_timer -= g->spawn_timer > 0;
    g->move_timer -= g->move_timer > 0;
    if (g->ramping) ramp(g);
    return reward;
}

/* Zeroes the 400 bytes of an observation with 16-byte stores. The empty asm hides that z
 * is zero, so that the compiler does not turn the stores into a memset, whose `rep stos`
 * start-up costs more than the stores. */
static void zero_obs(uint8_t *obs) {
    enum { BYTES = GRID * GRID * FL_ASTERIX_CHANNELS };
#if defined(__SSE2__) && defined(__GNUC__)
    __m128i z = _mm_setzero_si128();
    __asm__("" : "+x"(z));
#pragma GCC unroll 25
    for (int k = 0; k < BYTES; k += 16) _mm_storeu_si128((__m128i *)(obs + k), z);
#else
    memset(obs, 0, BYTES);
#endif
}

/* The observation is zeroes plus a 1 per entity, per trail and for the player. Every
 * byte offset is worked out before the first store to obs: obs may alias the game (it is
 * a uint8_t *), so a read of g after a store would be redone from memory and held up
 * behind the stores, which costs more than the whole rest. Nothing branches on the
 * entities either (such branches mispredict at random): an empty slot, or an entity or
 * trail off the grid, writes its 1 to the player's byte instead, which is written last,
 * with its true value (the player is the only thing in channel 0; off the grid it writes
 * a 0 to channel 0 of (0, 0), where only it could be). */
void fl_asterix_obs(const fl_asterix_t *g, uint8_t *obs) {
    enum { C = FL_ASTERIX_CHANNELS, S = FL_ASTERIX_SLOTS };
    int px = g->player_x, py = g->player_y;
    int player_on = ((unsigned)px < GRID) & ((unsigned)py < GRID);
    int player_at = player_on ? (int)FL_MINATAR_OBS_AT(py, px, 0, C) : 0;
    int at[2 * S]; /* slot s: entity at[s], trail at[S + s] */
#if defined(__SSE2__)
    /* Four slots per vector, one per 32-bit lane: bytes active, x, dir, gold (x86 is
     * little-endian). */
    const __m128i zero = _mm_setzero_si128(), minus_one = _mm_set1_epi32(-1), grid = _mm_set1_epi32(GRID);
    const __m128i player = _mm_set1_epi32(player_at);
    for (int s = 0; s < S; s += 4) {
        __m128i e = _mm_loadu_si128((const __m128i *)&g->slots[s]);
        __m128i x = _mm_srai_epi32(_mm_slli_epi32(e, 16), 24); /* sign-extended bytes */
        __m128i dir = _mm_srai_epi32(_mm_slli_epi32(e, 8), 24);
        __m128i tx = _mm_sub_epi32(x, dir);
        __m128i idle = _mm_cmpeq_epi32(_mm_slli_epi32(e, 24), zero);
        __m128i enemy = _mm_cmpeq_epi32(_mm_srli_epi32(e, 24), zero);
        __m128i on = _mm_andnot_si128(idle, _mm_and_si128(_mm_cmpgt_epi32(x, minus_one), _mm_cmpgt_epi32(grid, x)));
        __m128i trail_on =
            _mm_andnot_si128(idle, _mm_and_si128(_mm_cmpgt_epi32(tx, minus_one), _mm_cmpgt_epi32(grid, tx)));
        /* Row s + 1 starts at byte 40 (s + 1); the entity is channel 3 (gold) or 1 (enemy). */
        __m128i row = _mm_setr_epi32((s + 1) * GRID * C, (s + 2) * GRID * C, (s + 3) * GRID * C, (s + 4) * GRID * C);
        __m128i entity_at = _mm_add_epi32(_mm_add_epi32(row, _mm_slli_epi32(x, 2)), _mm_set1_epi32(3));
        entity_at = _mm_sub_epi32(entity_at, _mm_and_si128(enemy, _mm_set1_epi32(2)));
        __m128i trail_at = _mm_add_epi32(_mm_add_epi32(row, _mm_slli_epi32(tx, 2)), _mm_set1_epi32(2));
        entity_at = _mm_or_si128(_mm_and_si128(on, entity_at), _mm_andnot_si128(on, player));
        trail_at = _mm_or_si128(_mm_and_si128(trail_on, trail_at), _mm_andnot_si128(trail_on, player));
        _mm_storeu_si128((__m128i *)&at[s], entity_at);
        _mm_storeu_si128((__m128i *)&at[S + s], trail_at);
    }
#else
    for (int s = 0; s < S; s++) {
        const fl_asterix_entity_t *e = &g->slots[s];
        int active = e->active != 0;
        int x = e->x, tx = e->x - e->dir;
        int on = active & ((unsigned)x < GRID), trail_on = active & ((unsigned)tx < GRID);
        at[s] = on ? (int)FL_MINATAR_OBS_AT(s + 1, x, e->gold ? 3 : 1, C) : player_at;
        at[S + s] = trail_on ? (int)FL_MINATAR_OBS_AT(s + 1, tx, 2, C) : player_at;
    }
#endif
    zero_obs(obs);
#pragma GCC unroll 16
    for (int k = 0; k < 2 * S; k++) obs[at[k]] = 1;
    obs[player_at] = (uint8_t)player_on;
}

/* ---- Env definitions (the common MinAtar layer drives these) ---------------------------- */

static void game_reset(fl_minatar_common_t *c, fl_minatar_gen_t *gen) {
    (void)gen;
    fl_asterix_env_state_t *s = (fl_asterix_env_state_t *)c;
    s->game.ramping = c->ramping;
    fl_asterix_reset(&s->game);
}

static int game_step(fl_minatar_common_t *c, fl_minatar_gen_t *gen, int action, int *terminal) {
    fl_asterix_env_state_t *s = (fl_asterix_env_state_t *)c;
    int r = fl_asterix_step(&s->game, action, gen);
    *terminal = s->game.terminal;
    return r;
}

static void game_obs(const fl_minatar_common_t *c, uint8_t *obs) {
    const fl_asterix_env_state_t *s = (const fl_asterix_env_state_t *)c;
    fl_asterix_obs(&s->game, obs);
}

static const fl_minatar_game_t asterix_game = {
    .channels = FL_ASTERIX_CHANNELS, .obs_writes_all = 1, .reset = game_reset, .step = game_step, .obs = game_obs};
static const uint8_t asterix_minimal[] = {A_NOOP, A_LEFT, A_UP, A_RIGHT, A_DOWN};

FL_MINATAR_DEFINE_ENVS(asterix, "asterix", "Asterix: collect gold, dodge enemies", fl_asterix_env_state_t, asterix_game,
                       FL_ASTERIX_CHANNELS, asterix_minimal, 5);
