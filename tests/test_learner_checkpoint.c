/* test_learner_checkpoint: fl_learner_load_network, the online network of a learner
 * checkpoint loaded into a Q-network of the caller's (what `fleet eval` plays).
 *
 * Checkpoints are real ones: a learner with a run's default settings
 * (tests/learner_opts_util.h; its services are never called: nothing is sent before
 * fl_learner_run) writes them with fl_learner_save. A round trip gives the online parameters bit for bit
 * (not the target's, which are made to differ); a network of another model.spec (other
 * shapes, an extra layer, or only another activation), a file with a tensor missing or
 * of another dtype, a safetensors file that is not a learner checkpoint, a file that is
 * not safetensors at all and a missing file are refused with messages naming the file,
 * the tensor, the shapes and model.spec, and leave the network as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "common/safetensors.h"
#include "kernels/qnet.h"
#include "learner/learner.h"

#include "learner_opts_util.h"
#include "seed_util.h"

enum { CP_DIM = 4, CP_ACTIONS = 2 };
static const fl_obs_spec_t CP_OBS = {FL_DTYPE_FLOAT32, 1, {CP_DIM, 0, 0, 0}};
static const int CP_SHAPE[1] = {CP_DIM};
static char g_dir[64];

/* A checkpoint of a fresh learner of model.spec `spec` at g_dir/name, with its online
 * network moved away from its target; *online (num_params floats, the caller frees it)
 * gets the online parameters saved. Returns the path (static). */
static const char *write_checkpoint(const char *name, const char *spec, float **online) {
    fl_learner_opts_t o = {
        .replay_addr = "127.0.0.1:1", .paramserver_addr = "127.0.0.1:1", .obs = CP_OBS, .num_actions = CP_ACTIONS};
    learner_run_defaults(&o);
    o.model_spec = spec;
    o.seed = g_seed % 2147483647ULL;
    o.prefetch = 0; /* no Sample in flight to wait for at destroy */
    fl_err_t err = {0};
    fl_learner_t *l = NULL;
    if (fl_learner_create(&o, &l, &err) != FL_OK) fail_msg("learner: %s", err.msg);
    fl_qnet_t *net = fl_learner_online(l);
    const size_t np = fl_qnet_num_params(net);
    for (size_t i = 0; i < np; i++) fl_qnet_params(net)[i] += 0.25f;
    static char path[160];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (fl_learner_save(l, path, &err) != FL_OK) fail_msg("save: %s", err.msg);
    if (online) {
        *online = malloc(np * sizeof **online);
        assert_non_null(*online);
        memcpy(*online, fl_qnet_params(net), np * sizeof **online);
        /* the target is the online network before the change */
        assert_true(fl_qnet_params(fl_learner_target(l))[0] != (*online)[0]);
    }
    fl_learner_destroy(l);
    return path;
}

static fl_qnet_t *make_net(const char *spec) {
    fl_qnet_t *n = NULL;
    fl_err_t err = {0};
    if (fl_qnet_create_for_obs(spec, 1, CP_SHAPE, CP_ACTIONS, 3, &n, &err) != FL_OK) fail_msg("%s: %s", spec, err.msg);
    return n;
}

/* load fails with FL_INVALID_ARGUMENT (or `want`), naming each of the strings, and
 * leaves the network's parameters as they were. */
static void expect_refused(const char *path, fl_qnet_t *net, fl_status want, const char *const *words, int nwords) {
    const size_t np = fl_qnet_num_params(net);
    float *before = malloc(np * sizeof *before);
    assert_non_null(before);
    memcpy(before, fl_qnet_params(net), np * sizeof *before);
    fl_err_t err = {0};
    assert_int_equal(fl_learner_load_network(path, net, &err), want);
    for (int i = 0; i < nwords; i++)
        if (!strstr(err.msg, words[i])) fail_msg("message lacks '%s': %s", words[i], err.msg);
    assert_memory_equal(fl_qnet_params(net), before, np * sizeof *before);
    free(before);
}

static void test_round_trip(void **state) {
    (void)state;
    float *online = NULL;
    const char *path = write_checkpoint("a.safetensors", "dense(16) relu dueling", &online);
    fl_qnet_t *net = make_net("dense(16) relu dueling");
    fl_err_t err = {0};
    if (fl_learner_load_network(path, net, &err) != FL_OK) fail_msg("load: %s", err.msg);
    assert_memory_equal(fl_qnet_params(net), online, fl_qnet_num_params(net) * sizeof *online);
    /* model.spec equal up to whitespace */
    fl_qnet_t *spaced = make_net("  dense(16)   relu dueling ");
    if (fl_learner_load_network(path, spaced, &err) != FL_OK) fail_msg("load: %s", err.msg);
    assert_memory_equal(fl_qnet_params(spaced), online, fl_qnet_num_params(net) * sizeof *online);
    /* and the loaded network acts: Q-values of one observation are finite */
    float obs[CP_DIM] = {0.01f, -0.02f, 0.03f, 0.0f}, q[CP_ACTIONS];
    assert_int_equal(fl_qnet_forward(net, obs, 1, q), FL_OK);
    fl_qnet_destroy(spaced);
    fl_qnet_destroy(net);
    free(online);
}

static void test_other_model(void **state) {
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "%s", write_checkpoint("b.safetensors", "dense(16) relu dueling", NULL));
    /* other shapes: the first tensor that differs, both shapes, both specs */
    fl_qnet_t *narrow = make_net("dense(8) relu dueling");
    const char *w1[] = {path,
                        "online.0.dense.weight",
                        "(16, 4)",
                        "(8, 4)",
                        "model.spec \"dense(8) relu dueling\"",
                        "model.spec \"dense(16) relu dueling\"?"};
    expect_refused(path, narrow, FL_INVALID_ARGUMENT, w1, 6);
    /* a deeper network whose views all exist in the file: the missing one is named */
    fl_qnet_t *deep = make_net("dense(16) relu dense(16) relu dueling");
    const char *w2[] = {path, "online.2.dense.weight is missing", "(16, 16)", "model.spec"};
    expect_refused(path, deep, FL_INVALID_ARGUMENT, w2, 4);
    /* a shallower network whose views all fit the deeper file's: the extra tensor is named */
    const char *deep_path = write_checkpoint("c.safetensors", "dense(16) relu dense(16) relu dueling", NULL);
    fl_qnet_t *shallow = make_net("dense(16) relu dueling");
    const char *w3[] = {deep_path, "online.2.dense.", "has no view", "model.spec"};
    expect_refused(deep_path, shallow, FL_INVALID_ARGUMENT, w3, 4);
    /* the same tensors, another activation: only model.spec tells */
    fl_qnet_t *linear = make_net("dense(16) dueling");
    const char *w4[] = {path, "model.spec is \"dense(16) relu dueling\"", "\"dense(16) dueling\""};
    expect_refused(path, linear, FL_INVALID_ARGUMENT, w4, 3);
    fl_qnet_destroy(narrow);
    fl_qnet_destroy(deep);
    fl_qnet_destroy(shallow);
    fl_qnet_destroy(linear);
}

/* The tensors of net's views under "online." (data from net) with the given metadata,
 * leaving out view `skip` (-1: none) and storing view `as_f64` (-1: none) as F64. */
static void write_file(const char *path, fl_qnet_t *net, int skip, int as_f64, const char *format) {
    const int nv = fl_qnet_num_views(net);
    fl_st_tensor_t t[32];
    static double wide[4096];
    int n = 0;
    for (int i = 0; i < nv; i++) {
        if (i == skip) continue;
        const fl_param_view_t *v = fl_qnet_view(net, i);
        fl_st_tensor_t *x = &t[n++];
        snprintf(x->name, sizeof x->name, "online.%s", v->name);
        x->dtype = i == as_f64 ? FL_ST_F64 : FL_ST_F32;
        x->rank = v->rank;
        for (int d = 0; d < v->rank; d++) x->shape[d] = v->shape[d];
        x->data = i == as_f64 ? (const void *)wide : (const void *)(fl_qnet_params(net) + v->offset);
        x->bytes = v->numel * fl_st_dtype_size(x->dtype);
        assert_true(v->numel <= 4096);
    }
    const char *keys[] = {"format", "format_version", "model.spec"};
    const char *vals[] = {format, "1", fl_qnet_spec(net)};
    fl_err_t err = {0};
    if (fl_safetensors_write(path, t, n, keys, vals, 3, &err) != FL_OK) fail_msg("write: %s", err.msg);
}

static void test_damaged_and_foreign_files(void **state) {
    (void)state;
    fl_qnet_t *net = make_net("dense(16) relu dueling");
    fl_rng_t r;
    fl_rng_init_stream(&r, g_seed, 3);
    fl_qnet_init(net, &r);
    char path[160];
    snprintf(path, sizeof path, "%s/d.safetensors", g_dir);
    /* a tensor missing: the last view left out */
    const int last = fl_qnet_num_views(net) - 1;
    const char *missing_name = fl_qnet_view(net, last)->name;
    char want_missing[96];
    snprintf(want_missing, sizeof want_missing, "online.%s is missing", missing_name);
    write_file(path, net, last, -1, "fleet.learner");
    fl_qnet_t *fresh = make_net("dense(16) relu dueling");
    const char *w1[] = {path, want_missing, "expected F32"};
    expect_refused(path, fresh, FL_INVALID_ARGUMENT, w1, 3);
    /* a tensor of another dtype */
    write_file(path, net, -1, 0, "fleet.learner");
    const char *w2[] = {path, "online.0.dense.weight is F64 (16, 4)", "expected F32 (16, 4)"};
    expect_refused(path, fresh, FL_INVALID_ARGUMENT, w2, 3);
    /* every tensor right, but not a learner checkpoint */
    write_file(path, net, -1, -1, "something.else");
    const char *w3[] = {path, "format is \"something.else\"", "expected \"fleet.learner\""};
    expect_refused(path, fresh, FL_INVALID_ARGUMENT, w3, 3);
    /* the same file as a learner checkpoint loads */
    write_file(path, net, -1, -1, "fleet.learner");
    fl_err_t err = {0};
    if (fl_learner_load_network(path, fresh, &err) != FL_OK) fail_msg("load: %s", err.msg);
    assert_memory_equal(fl_qnet_params(fresh), fl_qnet_params(net), fl_qnet_num_params(net) * sizeof(float));
    /* not safetensors at all, and no file */
    fl_qnet_t *other = make_net("dense(16) relu dueling");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("[run]\nname = x\n", f);
    fclose(f);
    const char *w4[] = {path};
    expect_refused(path, other, FL_INVALID_ARGUMENT, w4, 1);
    snprintf(path, sizeof path, "%s/none.safetensors", g_dir);
    expect_refused(path, other, FL_NOT_FOUND, w4, 1);
    fl_qnet_destroy(net);
    fl_qnet_destroy(fresh);
    fl_qnet_destroy(other);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fleet-ckpt-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    pick_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_other_model),
        cmocka_unit_test(test_damaged_and_foreign_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
