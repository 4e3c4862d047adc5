/* Writes the seed corpus of fuzz_replay_messages: one small valid serialized message per
 * type, each prefixed by the type byte the target expects (see its enum).
 * Usage: gen_seeds DIR */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.pb-c.h"
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

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];

    /* InsertRequest, float32 (4), 3 actions, 2 items (type 0). */
    float obs_v[8] = {0, 1, 2, 3, 4, 5, 6, 7}, nobs_v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t act[2] = {0, 2};
    float rew[2] = {1.0f, -0.5f}, disc[2] = {0.99f, 0.0f}, prio[2] = {0.5f, 2.0f};
    fl_wire_sig_t sv = {.obs_dtype = FL_DTYPE_FLOAT32, .obs_rank = 1, .obs_shape = {4}, .num_actions = 3};
    fl_wire_batch_t b = {.count = 2, .obs_bytes = 16, .obs = obs_v, .actions = act, .rewards = rew,
                         .discounts = disc, .next_obs = nobs_v, .priorities = prio};
    static fl_wire_batch_msg_t bm;
    fl_wire_encode_batch(&bm, &sv, &b);
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
    fl_wire_sig_t si = {.obs_dtype = FL_DTYPE_UINT8, .obs_rank = 3, .obs_shape = {10, 10, 4}};
    b.obs_bytes = 400;
    b.obs = obs_i;
    b.next_obs = nobs_i;
    static fl_wire_batch_msg_t bi;
    fl_wire_encode_batch(&bi, &si, &b);
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
    fl_wire_encode_batch(&bs, &sv, &b);
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
    return 0;
}
