/* Writes the seed corpus of fuzz_replay_messages: one small valid serialized message per
 * type, each prefixed by the type byte the target expects (see its enum); with a second
 * folder, small valid checkpoints for fuzz_replay_checkpoint there (raw frames; a frame
 * stack with zstd; uniform with max_times_sampled; an empty table).
 * Usage: gen_seeds DIR [CHECKPOINT_DIR] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.pb-c.h"
#include "replay/table.h"
#include "replay/wire.h"

static const char *g_dir;

static void write_seed(const char *name, uint8_t type, const ProtobufCMessage *m) {
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n + 1);
    if (!buf) exit(1);
    buf[0] = type;
    protobuf_c_message_pack(m, buf + 1);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n + 1, f) != n + 1) {
        perror(path);
        exit(1);
    }
    fclose(f);
    free(buf);
}

static void write_raw(const char *name, uint8_t type, const uint8_t *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputc(type, f) == EOF || fwrite(p, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

/* A table of `capacity` with uint8 (4, 4, 2 * stack) observations, n items inserted in
 * calls of 5 (consecutive observations share frames), saved to DIR/name. */
static void write_checkpoint(const char *dir, const char *name, uint64_t capacity, int stack, int zstd, fl_selector sel,
                             int64_t mts, int n) {
    fl_table_config_t cfg;
    fl_table_config_init(&cfg);
    cfg.capacity = capacity;
    cfg.obs.dtype = FL_DTYPE_UINT8;
    cfg.obs.rank = 3;
    cfg.obs.shape[0] = 4;
    cfg.obs.shape[1] = 4;
    cfg.obs.shape[2] = 2 * stack;
    cfg.frame_stack = stack;
    cfg.zstd_level = zstd;
    cfg.selector = sel;
    cfg.max_times_sampled = mts;
    fl_table_t *t = NULL;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_table_create(&cfg, &t, &e) != FL_OK) exit(1);
    size_t ob = (size_t)32 * (size_t)stack;
    uint8_t obs[5 * 32 * 4], next[5 * 32 * 4];
    int32_t a[5];
    float r[5], d[5], p[5];
    for (int i = 0; i < n; i += 5) {
        for (int k = 0; k < 5; k++) {
            for (size_t b = 0; b < ob; b++) {
                obs[(size_t)k * ob + b] = (uint8_t)((i + k) * 3 + (int)(b / 32));
                next[(size_t)k * ob + b] = (uint8_t)((i + k + 1) * 3 + (int)(b / 32));
            }
            a[k] = k % 3;
            r[k] = (float)k;
            d[k] = 0.9f;
            p[k] = 0.5f + (float)k;
        }
        if (fl_table_insert(t, 5, obs, a, r, d, next, p, NULL, &e) != FL_OK) exit(1);
    }
    if (mts > 0 && n > 0) {
        uint64_t keys[3];
        if (fl_table_sample(t, 3, 0.4, keys, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &e) != FL_OK) exit(1);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (fl_table_save(t, path, NULL, &e) != FL_OK) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    fl_table_destroy(t);
}

static void write_checkpoints(const char *dir) {
    write_checkpoint(dir, "ckpt_raw", 16, 1, 0, FL_SELECTOR_PRIORITIZED, 0, 25);
    write_checkpoint(dir, "ckpt_stack_zstd", 12, 4, 3, FL_SELECTOR_PRIORITIZED, 0, 20);
    write_checkpoint(dir, "ckpt_uniform_mts", 20, 2, 0, FL_SELECTOR_UNIFORM, 2, 15);
    write_checkpoint(dir, "ckpt_empty", 8, 1, 0, FL_SELECTOR_FIFO, 1, 0);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s DIR [CHECKPOINT_DIR]\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];

    /* InsertRequest, float32 (4), 3 actions, 2 items (type 0). */
    float obs_v[8] = {0, 1, 2, 3, 4, 5, 6, 7}, nobs_v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t act[2] = {0, 2};
    float rew[2] = {1.0f, -0.5f}, disc[2] = {0.99f, 0.0f}, prio[2] = {0.5f, 2.0f};
    fl_wire_sig_t sv = {.obs = {.dtype = FL_DTYPE_FLOAT32, .rank = 1, .shape = {4}}, .num_actions = 3};
    fl_wire_batch_t b = {.count = 2,
                         .obs_bytes = 16,
                         .obs = obs_v,
                         .actions = act,
                         .rewards = rew,
                         .discounts = disc,
                         .next_obs = nobs_v,
                         .priorities = prio};
    static fl_wire_batch_msg_t bm;
    fl_wire_encode_batch(&bm, &sv.obs, &b);
    Fleet__InsertRequest ir = FLEET__INSERT_REQUEST__INIT;
    ir.stream_id = 7;
    ir.sequence = 1;
    ir.batch = &bm.batch;
    write_seed("insert_vec", 0, &ir.base);

    /* InsertRequest, uint8 (10, 10, 4), 2 items (type 1). */
    static uint8_t obs_i[800], nobs_i[800];
    for (int i = 0; i < 800; i++) {
        obs_i[i] = (uint8_t)i;
        nobs_i[i] = (uint8_t)(i * 7);
    }
    fl_wire_sig_t si = {.obs = {.dtype = FL_DTYPE_UINT8, .rank = 3, .shape = {10, 10, 4}}};
    b.obs_bytes = 400;
    b.obs = obs_i;
    b.next_obs = nobs_i;
    static fl_wire_batch_msg_t bi;
    fl_wire_encode_batch(&bi, &si.obs, &b);
    ir.batch = &bi.batch;
    write_seed("insert_img", 1, &ir.base);

    /* SampleRequest (type 2). */
    Fleet__SampleRequest sr = FLEET__SAMPLE_REQUEST__INIT;
    sr.batch_size = 32;
    sr.beta = 0.4;
    sr.timeout_ms = 100;
    write_seed("sample_req", 2, &sr.base);

    /* SampleResponse with the vector batch, no priorities (type 3). */
    b.obs_bytes = 16;
    b.obs = obs_v;
    b.next_obs = nobs_v;
    b.priorities = NULL;
    static fl_wire_batch_msg_t bs;
    fl_wire_encode_batch(&bs, &sv.obs, &b);
    Fleet__SampleResponse sp = FLEET__SAMPLE_RESPONSE__INIT;
    uint64_t keys[2] = {9, 10};
    float w[2] = {1.0f, 0.5f};
    double pr[2] = {0.25, 0.75};
    sp.batch = &bs.batch;
    sp.n_keys = 2;
    sp.keys = keys;
    sp.n_weights = 2;
    sp.weights = w;
    sp.n_probabilities = 2;
    sp.probabilities = pr;
    sp.table_size = 2;
    sp.total_priority = 3.0;
    write_seed("sample_resp", 3, &sp.base);

    /* The same as the shard writes it (observations first, 5-byte lengths), with a type
     * byte that cuts it into 5-byte segments for the client's reader (3 + 4 * 13). */
    fl_wire_sample_reply_t rep;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_wire_sample_reply_begin(&rep, &sv.obs, 2, &e) != FL_OK) exit(1);
    memcpy(rep.obs, obs_v, 2 * 16);
    memcpy(rep.next_obs, nobs_v, 2 * 16);
    sp.batch = NULL;
    size_t len = 0;
    if (fl_wire_sample_reply_finish(&rep, b.actions, b.rewards, b.discounts, &sp, &len, &e) != FL_OK) exit(1);
    write_raw("sample_reply", 3 + 4 * 13, rep.buf, len);
    free(rep.buf);

    /* UpdatePrioritiesRequest: a live key, a stale one, a duplicate (type 4). */
    Fleet__UpdatePrioritiesRequest up = FLEET__UPDATE_PRIORITIES_REQUEST__INIT;
    uint64_t uk[3] = {12, 3, 12};
    float upr[3] = {1.5f, 0.0f, 4.0f};
    up.n_keys = 3;
    up.keys = uk;
    up.n_priorities = 3;
    up.priorities = upr;
    write_seed("update_req", 4, &up.base);

    /* ReplayInfo (type 5). */
    Fleet__ReplayInfo ri = FLEET__REPLAY_INFO__INIT;
    int64_t shp[3] = {10, 10, 4};
    ri.size = 100;
    ri.capacity = 1000;
    ri.obs_dtype = FLEET__DTYPE__DTYPE_UINT8;
    ri.n_obs_shape = 3;
    ri.obs_shape = shp;
    ri.total_priority = 12.5;
    write_seed("replay_info", 5, &ri.base);

    /* InsertResponse (type 6). */
    Fleet__InsertResponse irs = FLEET__INSERT_RESPONSE__INIT;
    uint64_t fk[2] = {1, 3};
    irs.stream_id = 7;
    irs.last_sequence = 2;
    irs.batches = 2;
    irs.items = 4;
    irs.n_first_keys = 2;
    irs.first_keys = fk;
    write_seed("insert_resp", 6, &irs.base);

    /* PublishRequest (type 8) and FetchRequest (type 9). */
    Fleet__Tensor vt = FLEET__TENSOR__INIT;
    int64_t vshape[1] = {4};
    vt.dtype = FLEET__DTYPE__DTYPE_FLOAT32;
    vt.n_shape = 1;
    vt.shape = vshape;
    vt.data.len = 16;
    vt.data.data = (uint8_t *)obs_v;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    ps.version = 3;
    ps.offset = 0;
    ps.total = 4;
    ps.values = &vt;
    Fleet__PublishRequest pub = FLEET__PUBLISH_REQUEST__INIT;
    pub.params = &ps;
    write_seed("publish_req", 8, &pub.base);
    Fleet__FetchRequest fr = FLEET__FETCH_REQUEST__INIT;
    fr.if_newer_than = 2;
    fr.dtype = FLEET__DTYPE__DTYPE_BFLOAT16;
    write_seed("fetch_req", 9, &fr.base);
    if (argc == 3) write_checkpoints(argv[2]);
    return 0;
}
