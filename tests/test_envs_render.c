/* envs/core/render: the canvas primitives pixel by pixel, and every built-in env's render and
 * action names: a render reads the state only (same state, same image; the observation
 * and the generator are untouched), shows the state (a MinAtar cell has the colour of its
 * highest set channel; CartPole's pole leans the way theta says), and every action has a
 * distinct name. Breakout's ball, which starts inside a brick, shows on top of it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "envs/classic/classic.h"
#include "envs/minatar/breakout.h"
#include "envs/registry.h"
#include "envs/core/render.h"

static const uint8_t RED[3] = {255, 0, 0}, BLK[3] = {0, 0, 0};

static const uint8_t *px(const fl_canvas_t *c, int x, int y) {
    return c->rgb + ((size_t)y * (size_t)c->width + (size_t)x) * 3;
}

static int count(const fl_canvas_t *c, const uint8_t rgb[3]) {
    int n = 0;
    for (int y = 0; y < c->height; y++)
        for (int x = 0; x < c->width; x++) n += memcmp(px(c, x, y), rgb, 3) == 0;
    return n;
}

static void test_canvas(void **state) {
    (void)state;
    uint8_t buf[20 * 10 * 3];
    fl_canvas_t c = {buf, 20, 10};
    fl_canvas_clear(&c, BLK);
    assert_int_equal(count(&c, BLK), 200);
    /* Rect: half-open, clipped at every side. */
    fl_canvas_rect(&c, 2, 3, 5, 4, RED);
    assert_int_equal(count(&c, RED), 3);
    assert_memory_equal(px(&c, 2, 3), RED, 3);
    assert_memory_equal(px(&c, 5, 3), BLK, 3);
    fl_canvas_rect(&c, -5, -5, 100, 1, RED);
    assert_int_equal(count(&c, RED), 3 + 20);
    fl_canvas_clear(&c, BLK);
    /* A horizontal line of thickness 1 through pixel centres: one row, caps included. */
    fl_canvas_line(&c, 2.5, 5.5, 9.5, 5.5, 1.0, RED);
    assert_int_equal(count(&c, RED), 8);
    assert_memory_equal(px(&c, 2, 5), RED, 3);
    assert_memory_equal(px(&c, 9, 5), RED, 3);
    fl_canvas_clear(&c, BLK);
    /* A disc of radius 2 at a pixel centre: the 13 pixels within distance 2. */
    fl_canvas_disc(&c, 10.5, 5.5, 2.0, RED);
    assert_int_equal(count(&c, RED), 13);
    fl_canvas_clear(&c, BLK);
    /* A convex quad equal to a rect, in both windings. */
    double x1[4] = {4, 8, 8, 4}, y1[4] = {2, 2, 6, 6};
    fl_canvas_convex(&c, x1, y1, 4, RED);
    assert_int_equal(count(&c, RED), 16);
    fl_canvas_clear(&c, BLK);
    double x2[4] = {4, 4, 8, 8}, y2[4] = {2, 6, 6, 2};
    fl_canvas_convex(&c, x2, y2, 4, RED);
    assert_int_equal(count(&c, RED), 16);
    /* Wholly outside, or NaN: nothing drawn, nothing touched out of bounds. */
    fl_canvas_clear(&c, BLK);
    fl_canvas_line(&c, -50, -50, -40, -40, 3, RED);
    fl_canvas_disc(&c, NAN, 3, 2, RED);
    fl_canvas_disc(&c, 1e9, 1e9, 5, RED);
    assert_int_equal(count(&c, RED), 0);
}

/* Every built-in renders; the image depends on the state only; obs and rng untouched. */
static void test_every_env_renders(void **state) {
    (void)state;
    for (int e = 0; e < fl_env_count(); e++) {
        const fl_env_def_t *d = fl_env_at(e);
        assert_non_null(d->render);
        assert_true(d->render_width > 0 && d->render_height > 0);
        assert_non_null(d->action_name);
        for (int a = 0; a < d->num_actions; a++) {
            assert_non_null(d->action_name(a));
            for (int b = 0; b < a; b++) assert_string_not_equal(d->action_name(a), d->action_name(b));
        }
        size_t img = (size_t)d->render_width * (size_t)d->render_height * 3;
        uint8_t *s = calloc(1, d->state_size), *o = malloc(fl_env_obs_size(d)), *o2 = malloc(fl_env_obs_size(d));
        uint8_t *r1 = malloc(img), *r2 = malloc(img);
        if (d->configure) {
            fl_env_options_t opts = {.sticky_prob = 0.1f, .difficulty_ramping = 1, .args = ""};
            assert_int_equal(d->configure(s, &opts), 0);
        }
        fl_rng_t rng;
        fl_rng_init(&rng, 5 + (uint64_t)e);
        d->reset(s, &rng, o);
        for (int t = 0; t < 7; t++) {
            float r;
            int term;
            d->step(s, &rng, t % d->num_actions, o, &r, &term);
            if (term) d->reset(s, &rng, o);
        }
        memcpy(o2, o, fl_env_obs_size(d));
        fl_rng_t before = rng;
        uint8_t *scopy = malloc(d->state_size);
        memcpy(scopy, s, d->state_size);
        memset(r1, 0xab, img);
        memset(r2, 0x11, img);
        d->render(s, r1);
        d->render(s, r2);
        assert_memory_equal(r1, r2, img);
        assert_memory_equal(s, scopy, d->state_size);
        assert_memory_equal(&rng, &before, sizeof rng);
        assert_memory_equal(o, o2, fl_env_obs_size(d));
        /* Not a blank image (Atari games may show a blank screen for their first frames:
         * up to 3,000 steps more). */
        int distinct = 0;
        for (int t = 0; t < 3000 && !distinct; t++) {
            for (size_t i = 3; i < img && !distinct; i += 3) distinct = memcmp(r1, r1 + i, 3) != 0;
            if (distinct) break;
            float r;
            int term;
            d->step(s, &rng, t % d->num_actions, o, &r, &term);
            if (term) d->reset(s, &rng, o);
            d->render(s, r1);
        }
        if (!distinct) fail_msg("env %s renders a blank image", d->name);
        free(scopy);
        fl_env_close(d, s);
        free(s);
        free(o);
        free(o2);
        free(r1);
        free(r2);
    }
}

/* A MinAtar render shows exactly the observation: per cell, the colour of the lowest set
 * channel, black where none is set. */
static void test_minatar_render_matches_obs(void **state) {
    (void)state;
    const char *games[] = {"minatar-asterix", "minatar-breakout", "minatar-freeway", "minatar-seaquest",
                           "minatar-space_invaders"};
    for (size_t g = 0; g < sizeof games / sizeof games[0]; g++) {
        const fl_env_def_t *d = fl_env_find(games[g]);
        assert_non_null(d);
        int ch = d->obs.shape[2];
        uint8_t *s = calloc(1, d->state_size), *o = malloc(fl_env_obs_size(d));
        uint8_t *rgb = malloc(FL_MINATAR_RENDER_SIZE * FL_MINATAR_RENDER_SIZE * 3);
        fl_env_options_t opts = {.sticky_prob = 0.0f, .difficulty_ramping = 1, .args = ""};
        assert_int_equal(d->configure(s, &opts), 0);
        fl_rng_t rng, act;
        fl_rng_init(&rng, 77);
        fl_rng_init(&act, 78);
        d->reset(s, &rng, o);
        int lit_cells = 0;
        for (int t = 0; t < 300; t++) {
            d->render(s, rgb);
            fl_canvas_t c = {rgb, FL_MINATAR_RENDER_SIZE, FL_MINATAR_RENDER_SIZE};
            for (int y = 0; y < 10; y++)
                for (int x = 0; x < 10; x++) {
                    const uint8_t *want = BLK;
                    for (int k = ch - 1; k >= 0; k--)
                        if (o[(y * 10 + x) * ch + k]) want = fl_minatar_channel_rgb(k);
                    lit_cells += want != BLK;
                    int cx = x * FL_MINATAR_RENDER_CELL + FL_MINATAR_RENDER_CELL / 2;
                    int cy = y * FL_MINATAR_RENDER_CELL + FL_MINATAR_RENDER_CELL / 2;
                    assert_memory_equal(px(&c, cx, cy), want, 3);
                }
            float r;
            int term;
            d->step(s, &rng, (int)fl_rng_below(&act, (uint64_t)d->num_actions), o, &r, &term);
            if (term) d->reset(s, &rng, o);
        }
        assert_true(lit_cells > 0);
        free(s);
        free(o);
        free(rgb);
    }
}

/* CartPole: the pole's top is right of the cart when theta > 0 (leaning right, as in
 * Gymnasium's picture), left when theta < 0; the cart moves with x. */
static void test_cartpole_picture(void **state) {
    (void)state;
    const fl_env_def_t *d = fl_env_find("cartpole");
    int w = d->render_width, h = d->render_height;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    static const uint8_t pole[3] = {202, 152, 101};
    for (int sign = -1; sign <= 1; sign += 2) {
        fl_cartpole_state_t s = {.x = 1.0, .theta = sign * 0.2};
        d->render(&s, rgb);
        fl_canvas_t c = {rgb, w, h};
        /* Topmost pole pixel and its column. */
        int top_x = -1;
        for (int y = 0; y < h && top_x < 0; y++)
            for (int x = 0; x < w; x++)
                if (memcmp(px(&c, x, y), pole, 3) == 0) {
                    top_x = x;
                    break;
                }
        int cart_x = (int)(1.0 * w / 4.8 + w / 2.0);
        assert_true(top_x >= 0);
        if (sign > 0)
            assert_true(top_x > cart_x + 5);
        else
            assert_true(top_x < cart_x - 5);
    }
    free(rgb);
}

static void test_breakout_ball_on_top(void **state) {
    (void)state;
    const fl_env_def_t *d = fl_env_find("minatar-breakout");
    uint8_t *s = calloc(1, d->state_size), obs[400];
    uint8_t *rgb = malloc(FL_MINATAR_RENDER_SIZE * FL_MINATAR_RENDER_SIZE * 3);
    fl_rng_t rng;
    fl_rng_init(&rng, 1);
    d->reset(s, &rng, obs);
    const fl_breakout_state_t *b = (const fl_breakout_state_t *)s;
    assert_int_equal(b->ball_y, 3);
    assert_true(b->bricks[3][b->ball_x]);
    d->render(s, rgb);
    fl_canvas_t c = {rgb, FL_MINATAR_RENDER_SIZE, FL_MINATAR_RENDER_SIZE};
    int cx = b->ball_x * FL_MINATAR_RENDER_CELL + 8, cy = 3 * FL_MINATAR_RENDER_CELL + 8;
    assert_memory_equal(px(&c, cx, cy), fl_minatar_channel_rgb(1), 3);
    free(s);
    free(rgb);
}

/* The minimal action sets are named after the full-set actions they stand for. */
static void test_minatar_action_names(void **state) {
    (void)state;
    const fl_env_def_t *full = fl_env_find("minatar-breakout"), *v1 = fl_env_find("minatar-breakout-v1");
    const char *want_full[6] = {"noop", "left", "up", "right", "down", "fire"};
    for (int a = 0; a < 6; a++) assert_string_equal(full->action_name(a), want_full[a]);
    assert_int_equal(v1->num_actions, 3);
    assert_string_equal(v1->action_name(0), "noop");
    assert_string_equal(v1->action_name(1), "left");
    assert_string_equal(v1->action_name(2), "right");
    const fl_env_def_t *fw = fl_env_find("minatar-freeway-v1");
    assert_string_equal(fw->action_name(1), "up");
    assert_string_equal(fw->action_name(2), "down");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_canvas),
        cmocka_unit_test(test_every_env_renders),
        cmocka_unit_test(test_minatar_render_matches_obs),
        cmocka_unit_test(test_cartpole_picture),
        cmocka_unit_test(test_minatar_action_names),
        cmocka_unit_test(test_breakout_ball_on_top),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
