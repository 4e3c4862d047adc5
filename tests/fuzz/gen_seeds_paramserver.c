/* Writes the seed corpus of fuzz_paramserver: request sequences, in the target's input
 * layout (see fuzz_paramserver.c), that a shard accepts: apex and gorila shards, one and
 * several shards, drop and wait policies, every optimizer, float32 and bfloat16 fetches,
 * float32 and 1-bit pushes (fresh, stale, dropped, waiting), Info; as raw serialized
 * requests and as the target's built operations.
 * Usage: gen_seeds_paramserver DIR */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.pb-c.h"
#include "paramserver/quantize.h"
#include "paramserver/shard.h"

enum { OP_PUBLISH, OP_FETCH, OP_PUSH, OP_INFO, OP_B_PUBLISH, OP_B_PUSH, OP_B_QPUSH, OP_B_FETCH };

static uint8_t g_buf[1 << 16];
static size_t g_len;
static const char *g_dir;

/* Config bytes (fuzz_paramserver.c, make_config). */
static void begin(int gorila, int P, int s, int wait, int stal_idx, int staleness_lr, int opt, int lr_idx,
                  int learners) {
    g_len = 0;
    g_buf[g_len++] = (uint8_t)(gorila | (P - 1) << 1 | wait << 3 | stal_idx << 4 | staleness_lr << 6);
    /* b1: s = b1 % P, optimizer (b1 >> 2) & 3, lr (b1 >> 4) & 3, learners 1 + (b1 >> 6) % 3 */
    int b1 = 0;
    for (b1 = 0; b1 < 256; b1++)
        if (b1 % P == s && ((b1 >> 2) & 3) == opt && ((b1 >> 4) & 3) == lr_idx && 1 + (b1 >> 6) % 3 == learners) break;
    if (b1 == 256) {
        fprintf(stderr, "no config byte for s=%d P=%d\n", s, P);
        exit(1);
    }
    g_buf[g_len++] = (uint8_t)b1;
}

static void op(int kind, const void *data, size_t len) {
    if (len > 255) {
        g_buf[g_len++] = (uint8_t)(kind | 0x80);
        g_buf[g_len++] = (uint8_t)len;
        g_buf[g_len++] = (uint8_t)(len >> 8);
    } else {
        g_buf[g_len++] = (uint8_t)kind;
        g_buf[g_len++] = (uint8_t)len;
    }
    memcpy(g_buf + g_len, data, len);
    g_len += len;
}

static void op_pb(int kind, const ProtobufCMessage *m) {
    uint8_t tmp[8192];
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > sizeof tmp) exit(1);
    protobuf_c_message_pack(m, tmp);
    op(kind, tmp, n);
}

static void end(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(g_buf, 1, g_len, f) != g_len) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

/* Raw requests. */
static void publish(uint64_t version, uint64_t total, int P, int s) {
    uint64_t off, n;
    fl_param_shard_range(total, P, s, &off, &n);
    float v[256];
    for (uint64_t i = 0; i < n; i++) v[i] = 0.1f * (float)(off + i) - 0.5f;
    int64_t shape = (int64_t)n;
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    t.dtype = FLEET__DTYPE__DTYPE_FLOAT32;
    t.n_shape = 1;
    t.shape = &shape;
    t.data.len = 4 * n;
    t.data.data = (uint8_t *)v;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    ps.version = version;
    ps.offset = off;
    ps.total = total;
    ps.values = &t;
    Fleet__PublishRequest r = FLEET__PUBLISH_REQUEST__INIT;
    r.params = &ps;
    op_pb(OP_PUBLISH, &r.base);
}

static void fetch(uint64_t if_newer_than, Fleet__DType dt) {
    Fleet__FetchRequest r = FLEET__FETCH_REQUEST__INIT;
    r.if_newer_than = if_newer_than;
    r.dtype = dt;
    op_pb(OP_FETCH, &r.base);
}

static void info(void) {
    Fleet__ParamInfoRequest r = FLEET__PARAM_INFO_REQUEST__INIT;
    op_pb(OP_INFO, &r.base);
}

static void push(uint32_t learner, uint64_t based_on, uint64_t total, int P, int s, int quantized) {
    uint64_t off, n;
    fl_param_shard_range(total, P, s, &off, &n);
    float g[256], res[256] = {0};
    for (uint64_t i = 0; i < n; i++) g[i] = (i % 3 == 0 ? -0.25f : 0.5f) * (float)(1 + i % 5);
    int64_t shape = (int64_t)n;
    Fleet__Tensor t = FLEET__TENSOR__INIT;
    Fleet__ParamSlice ps = FLEET__PARAM_SLICE__INIT;
    Fleet__QuantizedGradients q = FLEET__QUANTIZED_GRADIENTS__INIT;
    uint8_t bits[64];
    Fleet__PushGradientsRequest r = FLEET__PUSH_GRADIENTS_REQUEST__INIT;
    r.based_on_version = based_on;
    r.learner = learner;
    if (quantized) {
        fl_q1_encode(g, res, n, bits, &q.scale_pos, &q.scale_neg);
        q.offset = off;
        q.total = total;
        q.count = n;
        q.sign_bits.len = fl_q1_bytes(n);
        q.sign_bits.data = bits;
        r.quantized = &q;
    } else {
        t.dtype = FLEET__DTYPE__DTYPE_FLOAT32;
        t.n_shape = 1;
        t.shape = &shape;
        t.data.len = 4 * n;
        t.data.data = (uint8_t *)g;
        ps.offset = off;
        ps.total = total;
        ps.values = &t;
        r.grads = &ps;
    }
    op_pb(OP_PUSH, &r.base);
}

/* Built operations (fuzz_paramserver.c: do_publish_built, do_push_built, ...). */
static void b_publish(uint8_t version_step, uint8_t total, const float *v, size_t n) {
    uint8_t d[4 + 4 * 16];
    d[0] = version_step & 3; /* held + step */
    d[1] = (uint8_t)(0x80 | total);
    d[2] = 0;
    d[3] = 0;
    size_t k = 0;
    for (size_t i = 0; i < n && i < 16; i++, k++) {
        int16_t q = (int16_t)(v[i] * 1024.0f);
        d[4 + 4 * i] = 0;
        memcpy(d + 5 + 4 * i, &q, 2);
        d[7 + 4 * i] = 0; /* scale 1/1024 */
    }
    op(OP_B_PUBLISH, d, 4 + 4 * k);
}

static void b_push(uint8_t learner, uint8_t back, int quantized) {
    uint8_t d[11 + 4] = {learner, back, 0, 0, 0, 0x40, 1, 0, 0, 0x20, 1, 0x5a, 0xa5, 0x0f, 0xf0};
    if (quantized) {
        op(OP_B_QPUSH, d, sizeof d);
    } else {
        uint8_t e[3 + 8] = {learner, back, 0, 0, 0, 0x10, 0, 0, 0, 0xf0, 1};
        op(OP_B_PUSH, e, sizeof e);
    }
}

static void b_fetch(uint8_t back, uint8_t dt) {
    uint8_t d[2] = {back, dt};
    op(OP_B_FETCH, d, 2);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    const Fleet__DType F32 = FLEET__DTYPE__DTYPE_FLOAT32, BF16 = FLEET__DTYPE__DTYPE_BFLOAT16;

    /* apex, one shard: publish, fetch both dtypes, newer publish, up-to-date fetch,
     * Info, a refused push. */
    begin(0, 1, 0, 0, 0, 0, 0, 0, 1);
    publish(1, 8, 1, 0);
    fetch(0, F32);
    fetch(0, BF16);
    publish(3, 8, 1, 0);
    fetch(1, FLEET__DTYPE__DTYPE_INVALID);
    fetch(3, F32);
    info();
    push(0, 3, 8, 1, 0, 0);
    end("apex_p1");

    /* apex, shard 1 of 3 of 10 elements (slice checks), and a stale publish. */
    begin(0, 3, 1, 0, 0, 0, 0, 0, 1);
    publish(1, 10, 3, 1);
    publish(1, 10, 3, 1);
    publish(2, 10, 3, 0); /* shard 0's slice: refused */
    fetch(0, BF16);
    info();
    end("apex_p3_s1");

    /* gorila, one shard, sgd, drop with max_staleness 2: fresh, stale, dropped pushes,
     * float32 and 1-bit. */
    begin(1, 1, 0, 0, 2, 0, 0, 1, 2);
    publish(1, 6, 1, 0);
    push(0, 1, 6, 1, 0, 0);
    push(1, 1, 6, 1, 0, 1);
    push(0, 3, 6, 1, 0, 0);
    push(1, 0, 6, 1, 0, 0); /* staleness 4 > 2: dropped */
    fetch(0, F32);
    fetch(2, BF16);
    info();
    end("gorila_drop_sgd");

    /* gorila, shard 1 of 2, adam, wait with one learner (nothing waits), staleness_lr. */
    begin(1, 2, 1, 1, 1, 1, 1, 0, 1);
    publish(1, 9, 2, 1);
    push(0, 1, 9, 2, 1, 0);
    push(0, 1, 9, 2, 1, 1);
    push(0, 3, 9, 2, 1, 0);
    fetch(0, BF16);
    fetch(4, F32);
    info();
    end("gorila_wait_adam_p2");

    /* gorila, shard 3 of 4, rmsprop, wait with three learners (timeout 0 in the target):
     * learner 0 runs ahead and its replies wait (and time out). */
    begin(1, 4, 3, 1, 1, 0, 2, 1, 3);
    publish(1, 13, 4, 3);
    push(1, 1, 13, 4, 3, 0);
    push(0, 2, 13, 4, 3, 1);
    push(0, 3, 13, 4, 3, 0);
    push(0, 4, 13, 4, 3, 0);
    push(2, 1, 13, 4, 3, 1);
    fetch(0, F32);
    info();
    end("gorila_wait_rmsprop_p4");

    /* gorila, a shard that owns nothing (total 2 < 3 shards). */
    begin(1, 3, 2, 0, 1, 0, 0, 0, 1);
    publish(1, 2, 3, 2);
    push(0, 1, 2, 3, 2, 0);
    push(0, 2, 2, 3, 2, 1);
    fetch(0, BF16);
    info();
    end("gorila_empty_slice");

    /* Built operations: gorila, shard 0 of 2, sgd lr 1, drop max_staleness 1. */
    float v[12] = {0.5f, -1, 2, 0.25f, -3, 1, 0, 4, -0.5f, 1.5f, 2.5f, -2};
    begin(1, 2, 0, 0, 1, 0, 0, 2, 2);
    b_publish(1, 12, v, 6);
    b_push(0, 0, 0);
    b_push(1, 0, 1);
    b_push(0, 2, 0);
    b_fetch(0, 1);
    b_fetch(0, 2);
    b_push(0, 0, 1);
    b_fetch(4, 0);
    info();
    end("built_gorila_p2");

    /* Built operations: apex, shard 2 of 3. */
    begin(0, 3, 2, 0, 0, 0, 0, 0, 1);
    b_publish(1, 20, v, 6);
    b_fetch(0, 2);
    b_publish(1, 20, v + 3, 6);
    b_publish(0, 20, v, 6);
    b_fetch(0, 1);
    b_push(0, 0, 0);
    info();
    end("built_apex_p3");
    return 0;
}
