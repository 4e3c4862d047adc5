/* The SampleResponse written with its observations in place (replay/wire.h
 * fl_wire_sample_reply_*): whatever protobuf-c unpacks from it is what was put in —
 * every column, the tensors' dtype and shape, every field of the response — for images,
 * vectors, one transition and large batches, actions at the ends of int32's range; and
 * what it refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "replay/wire.h"

static void check_case(const fl_obs_spec_t *obs, size_t count, fl_rng_t *rng) {
    fl_err_t e;
    fl_err_init(&e);
    fl_wire_sample_reply_t r;
    assert_int_equal(fl_wire_sample_reply_begin(&r, obs, count, &e), FL_OK);
    const size_t ob = fl_obs_spec_bytes(obs), n = count * ob;
    assert_int_equal(r.obs_bytes, ob);
    uint8_t *want_obs = malloc(n), *want_next = malloc(n);
    int32_t *actions = malloc(count * sizeof *actions);
    float *rewards = malloc(count * sizeof(float)), *discounts = malloc(count * sizeof(float));
    float *weights = malloc(count * sizeof(float));
    uint64_t *keys = malloc(count * sizeof *keys);
    double *probs = malloc(count * sizeof *probs);
    assert_true(want_obs && want_next && actions && rewards && discounts && weights && keys && probs);
    for (size_t i = 0; i < n; i++) {
        want_obs[i] = (uint8_t)fl_rng_below(rng, 256);
        want_next[i] = (uint8_t)fl_rng_below(rng, 256);
    }
    memcpy(r.obs, want_obs, n); /* what the table's draw does */
    memcpy(r.next_obs, want_next, n);
    for (size_t i = 0; i < count; i++) {
        actions[i] = i == 0 ? INT32_MIN : i == 1 ? INT32_MAX : (int32_t)fl_rng_below(rng, 18);
        rewards[i] = (float)fl_rng_normal(rng);
        discounts[i] = fl_rng_float(rng);
        weights[i] = fl_rng_float(rng);
        keys[i] = fl_rng_u64(rng);
        probs[i] = fl_rng_float(rng) * 1e-6;
    }
    Fleet__SampleResponse resp = FLEET__SAMPLE_RESPONSE__INIT;
    resp.n_keys = resp.n_weights = resp.n_probabilities = count;
    resp.keys = keys;
    resp.weights = weights;
    resp.probabilities = probs;
    resp.table_size = UINT64_MAX - 1;
    resp.total_priority = 12345.5;
    resp.min_priority = 1e-9;
    resp.shard_id = 255;
    resp.sampling_mass = 3.25;
    resp.updates_applied = 7;
    resp.updates_stale = 1u << 30;
    size_t len = 0;
    assert_int_equal(fl_wire_sample_reply_finish(&r, actions, rewards, discounts, &resp, &len, &e), FL_OK);
    assert_true(len <= r.cap && len > 2 * n);

    Fleet__SampleResponse *m = fleet__sample_response__unpack(NULL, len, r.buf);
    assert_non_null(m);
    assert_non_null(m->batch);
    assert_int_equal(m->batch->count, count);
    const Fleet__Tensor *t[2] = {m->batch->obs, m->batch->next_obs};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(t[k]->dtype, (int)obs->dtype);
        assert_int_equal(t[k]->n_shape, (size_t)obs->rank + 1);
        assert_int_equal(t[k]->shape[0], (int64_t)count);
        for (int d = 0; d < obs->rank; d++) assert_int_equal(t[k]->shape[d + 1], obs->shape[d]);
        assert_int_equal(t[k]->data.len, n);
    }
    assert_memory_equal(t[0]->data.data, want_obs, n);
    assert_memory_equal(t[1]->data.data, want_next, n);
    assert_int_equal(m->batch->n_actions, count);
    assert_memory_equal(m->batch->actions, actions, count * sizeof *actions);
    assert_int_equal(m->batch->n_rewards, count);
    assert_memory_equal(m->batch->rewards, rewards, count * sizeof(float));
    assert_int_equal(m->batch->n_discounts, count);
    assert_memory_equal(m->batch->discounts, discounts, count * sizeof(float));
    assert_int_equal(m->batch->n_priorities, 0);
    assert_int_equal(m->n_keys, count);
    assert_memory_equal(m->keys, keys, count * sizeof *keys);
    assert_int_equal(m->n_weights, count);
    assert_memory_equal(m->weights, weights, count * sizeof(float));
    assert_int_equal(m->n_probabilities, count);
    assert_memory_equal(m->probabilities, probs, count * sizeof *probs);
    assert_true(m->table_size == UINT64_MAX - 1);
    assert_true(m->total_priority == 12345.5 && m->min_priority == 1e-9 && m->sampling_mass == 3.25);
    assert_int_equal(m->shard_id, 255);
    assert_int_equal(m->updates_applied, 7);
    assert_int_equal(m->updates_stale, 1u << 30);
    fleet__sample_response__free_unpacked(m, NULL);
    free(r.buf);
    free(want_obs), free(want_next), free(actions), free(rewards), free(discounts), free(weights), free(keys);
    free(probs);
}

static void test_sample_reply_unpacks_to_what_was_written(void **state) {
    (void)state;
    fl_rng_t rng;
    fl_rng_init(&rng, 7);
    const int atari[] = {84, 84, 4}, minatar[] = {10, 10, 4}, vec[] = {4}, mat[] = {3, 5};
    const fl_obs_spec_t specs[] = {fl_obs_spec_make(FL_DTYPE_UINT8, 3, atari),
                                   fl_obs_spec_make(FL_DTYPE_UINT8, 3, minatar),
                                   fl_obs_spec_make(FL_DTYPE_FLOAT32, 1, vec),
                                   fl_obs_spec_make(FL_DTYPE_FLOAT32, 2, mat)};
    const size_t counts[] = {2, 512, 1, 7, 300};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            if (!(k == 0 && counts[c] > 64)) check_case(&specs[k], counts[c], &rng); /* Atari: up to 7 */
}

static void test_sample_reply_refusals(void **state) {
    (void)state;
    const int vec[] = {4};
    const fl_obs_spec_t spec = fl_obs_spec_make(FL_DTYPE_FLOAT32, 1, vec);
    fl_err_t e;
    fl_err_init(&e);
    fl_wire_sample_reply_t r;
    assert_int_equal(fl_wire_sample_reply_begin(&r, &spec, 0, &e), FL_INVALID_ARGUMENT);
    assert_null(r.buf);
    assert_int_equal(fl_wire_sample_reply_begin(&r, &spec, (size_t)1 << 31, &e), FL_INVALID_ARGUMENT);
    assert_null(r.buf);
    assert_non_null(strstr(e.msg, "4 GB"));
    /* a response that still carries a batch of its own */
    assert_int_equal(fl_wire_sample_reply_begin(&r, &spec, 3, &e), FL_OK);
    Fleet__TransitionBatch other = FLEET__TRANSITION_BATCH__INIT;
    Fleet__SampleResponse resp = FLEET__SAMPLE_RESPONSE__INIT;
    resp.batch = &other;
    const int32_t a[3] = {0, 1, 2};
    const float f[3] = {0, 0, 0};
    size_t len = 0;
    assert_int_equal(fl_wire_sample_reply_finish(&r, a, f, f, &resp, &len, &e), FL_INTERNAL);
    free(r.buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_reply_unpacks_to_what_was_written),
        cmocka_unit_test(test_sample_reply_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
