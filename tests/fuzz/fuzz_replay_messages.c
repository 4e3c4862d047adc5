/* libFuzzer target: arbitrary bytes into fleet.proto's message decoders.
 *
 * The first input byte picks a message type (see kTypes); the rest is handed to the
 * protobuf-c generated unpacker. Every message that unpacks is packed again and the
 * re-packed bytes must unpack and re-pack to the same bytes (a stable round trip).
 * Replay-specific messages then go through the code the shard runs on them:
 *   - InsertRequest: fl_wire_decode_batch against a fixed signature (the server's
 *     check, with FL_WIRE_NEED_PRIORITIES); a batch it accepts must be accepted by
 *     fl_table_insert too, after which fl_table_verify must pass and the table must hold
 *     exactly the batch; a batch it rejects must come with FL_INVALID_ARGUMENT and a
 *     message naming a "batch" field. An accepted batch is also re-encoded with
 *     fl_wire_encode_batch, packed, unpacked and decoded again (must be accepted).
 *   - SampleResponse: fl_wire_decode_batch_bytes (the check of a reply unpacked by
 *     protobuf-c), and the client's in-place reader (fl_wire_read_sample_reply) on the
 *     raw bytes cut into segments of 1 to 20 bytes (data[0] / 13 + 1), whether or not
 *     protobuf-c unpacks them: what the reader accepts, protobuf-c must unpack to the
 *     same columns and scalars with a batch fl_wire_decode_batch_bytes accepts (or
 *     refuses only for its priorities, which the reader ignores); what protobuf-c reads
 *     and that check accepts, with one key, weight and probability per transition and
 *     at most the room, the reader must read too, unless a message field came twice
 *     (protobuf merges them, the reader refuses) or a key named field 0 in more than
 *     one byte (protobuf reserves field 0; protobuf-c 1.4 refuses it in a one-byte key
 *     and skips it in a longer one, the reader refuses both).
 *   - UpdatePrioritiesRequest: the server's checks (one priority per key, finite and
 *     >= 0), then fl_table_update_priorities on a small table + fl_table_verify.
 * Tables are created per input so that every run is deterministic.
 *
 * Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DFLEET_FUZZ=ON
 *        cmake --build build-fuzz --target fuzz_replay_messages
 * See docs/fuzzing.md. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "fleet.pb-c.h"
#include "replay/table.h"
#include "replay/wire.h"

#define FAIL(...)                                              \
    do {                                                       \
        fprintf(stderr, "fuzz_replay_messages: " __VA_ARGS__); \
        fputc('\n', stderr);                                   \
        abort();                                               \
    } while (0)

enum {
    T_INSERT_VEC, /* InsertRequest against float32 (4), 3 actions */
    T_INSERT_IMG, /* InsertRequest against uint8 (10, 10, 4), actions unknown */
    T_SAMPLE_REQ,
    T_SAMPLE_RESP, /* client-side decode with 16 bytes per observation */
    T_UPDATE_REQ,
    T_INFO,
    T_INSERT_RESP,
    T_CHECKPOINT_REQ,
    T_PUBLISH_REQ,
    T_FETCH_REQ,
    T_FETCH_RESP,
    T_PUSH_GRAD_REQ,
    T_REPORT,
    T_COUNT
};

static const ProtobufCMessageDescriptor *descriptor_of(int t) {
    switch (t) {
    case T_INSERT_VEC:
    case T_INSERT_IMG: return &fleet__insert_request__descriptor;
    case T_SAMPLE_REQ: return &fleet__sample_request__descriptor;
    case T_SAMPLE_RESP: return &fleet__sample_response__descriptor;
    case T_UPDATE_REQ: return &fleet__update_priorities_request__descriptor;
    case T_INFO: return &fleet__replay_info__descriptor;
    case T_INSERT_RESP: return &fleet__insert_response__descriptor;
    case T_CHECKPOINT_REQ: return &fleet__checkpoint_request__descriptor;
    case T_PUBLISH_REQ: return &fleet__publish_request__descriptor;
    case T_FETCH_REQ: return &fleet__fetch_request__descriptor;
    case T_FETCH_RESP: return &fleet__fetch_response__descriptor;
    case T_PUSH_GRAD_REQ: return &fleet__push_gradients_request__descriptor;
    default: return &fleet__report__descriptor;
    }
}

static void sig_vec(fl_wire_sig_t *s) {
    memset(s, 0, sizeof *s);
    s->obs.dtype = FL_DTYPE_FLOAT32;
    s->obs.rank = 1;
    s->obs.shape[0] = 4;
    s->num_actions = 3;
}

static void sig_img(fl_wire_sig_t *s) {
    memset(s, 0, sizeof *s);
    s->obs.dtype = FL_DTYPE_UINT8;
    s->obs.rank = 3;
    s->obs.shape[0] = 10;
    s->obs.shape[1] = 10;
    s->obs.shape[2] = 4;
    s->num_actions = 0;
}

static fl_table_t *make_table(const fl_wire_sig_t *sig) {
    fl_table_config_t tc;
    fl_table_config_init(&tc);
    tc.capacity = 32;
    tc.obs = sig->obs;
    tc.rebuild_every = 7;
    fl_table_t *t = NULL;
    fl_err_t e;
    fl_err_init(&e);
    if (fl_table_create(&tc, &t, &e) != FL_OK) FAIL("fl_table_create: %s", e.msg);
    return t;
}

static void verify(fl_table_t *t, const char *when) {
    fl_err_t e;
    fl_err_init(&e);
    if (fl_table_verify(t, &e) != FL_OK) FAIL("fl_table_verify after %s: %s", when, e.msg);
}

/* Whether m or a message inside it kept unknown fields. */
static int has_unknown_fields(const ProtobufCMessage *m) {
    if (!m) return 0;
    if (m->n_unknown_fields) return 1;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        const char *base = (const char *)m;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + f->offset);
            for (size_t k = 0; k < n; k++)
                if (has_unknown_fields(v[k])) return 1;
        } else if (has_unknown_fields(*(const ProtobufCMessage *const *)(base + f->offset))) {
            return 1;
        }
    }
    return 0;
}

/* Packs m, unpacks the result and packs that again: both packings must agree.
 * Messages with unknown fields are exempt: protobuf-c 1.4.1 keeps an unknown field
 * whose tag says field number 0 when the tag is a non-minimal varint (85 00) and
 * re-packs it with a one-byte tag (05), which its own unpacker then rejects (a
 * library quirk, harmless to fleet, which never forwards unknown fields). */
static void roundtrip(const ProtobufCMessage *m) {
    if (has_unknown_fields(m)) return;
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *a = malloc(n ? n : 1);
    if (!a) return;
    if (protobuf_c_message_pack(m, a) != n) FAIL("pack wrote a size other than get_packed_size");
    ProtobufCMessage *m2 = protobuf_c_message_unpack(m->descriptor, NULL, n, a);
    if (!m2) FAIL("%s: re-packed bytes (%zu) do not unpack", m->descriptor->name, n);
    size_t n2 = protobuf_c_message_get_packed_size(m2);
    uint8_t *b = malloc(n2 ? n2 : 1);
    if (b) {
        protobuf_c_message_pack(m2, b);
        if (n2 != n || memcmp(a, b, n) != 0) FAIL("%s: pack/unpack/pack is not stable", m->descriptor->name);
        free(b);
    }
    protobuf_c_message_free_unpacked(m2, NULL);
    free(a);
}

static void check_rejection(const char *what, fl_status st, const fl_err_t *e) {
    if (st != FL_INVALID_ARGUMENT) FAIL("%s: rejected with status %d, expected INVALID_ARGUMENT", what, (int)st);
    if (strncmp(e->msg, "batch", 5) != 0) FAIL("%s: rejection message does not name a field: \"%s\"", what, e->msg);
}

static void fuzz_insert(const Fleet__InsertRequest *req, const fl_wire_sig_t *sig) {
    fl_wire_batch_t b;
    fl_err_t e;
    fl_err_init(&e);
    fl_status st = fl_wire_decode_batch(req->batch, sig, FL_WIRE_NEED_PRIORITIES, &b, &e);
    if (st != FL_OK) {
        check_rejection("InsertRequest", st, &e);
        return;
    }
    if (b.count == 0 || !b.priorities || b.obs_bytes != fl_obs_spec_bytes(&sig->obs))
        FAIL("decoded batch is inconsistent");
    fl_table_t *t = make_table(sig);
    uint64_t *keys = malloc(b.count * sizeof *keys);
    if (!keys) FAIL("out of memory");
    st = fl_table_insert(t, b.count, b.obs, b.actions, b.rewards, b.discounts, b.next_obs, b.priorities, keys, &e);
    if (st != FL_OK) FAIL("fl_wire_decode_batch accepted a batch that fl_table_insert rejects: %s", e.msg);
    verify(t, "insert");
    fl_table_info_t ti;
    fl_table_info(t, &ti);
    uint64_t want = b.count < 32 ? b.count : 32;
    if (ti.inserted != b.count || ti.size != want)
        FAIL("table holds %llu of %llu inserted, expected %llu of %zu", (unsigned long long)ti.size,
             (unsigned long long)ti.inserted, (unsigned long long)want, b.count);
    for (size_t i = 1; i < b.count; i++)
        if (keys[i] != keys[0] + i) FAIL("keys of one insert are not consecutive");
    /* Sample a few items back: must work on a non-empty table unless every priority is 0
     * (FL_FAILED_PRECONDITION). */
    uint64_t sk[4];
    st = fl_table_sample(t, 4, 0.4, sk, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &e);
    if (st != FL_OK && st != FL_FAILED_PRECONDITION) FAIL("fl_table_sample: %s", e.msg);
    verify(t, "sample");
    free(keys);
    fl_table_destroy(t);

    /* Re-encode what was accepted; it must decode again. */
    fl_wire_batch_msg_t *m = malloc(sizeof *m);
    if (!m) FAIL("out of memory");
    fl_wire_encode_batch(m, &sig->obs, &b);
    size_t n = fleet__transition_batch__get_packed_size(&m->batch);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) FAIL("out of memory");
    fleet__transition_batch__pack(&m->batch, buf);
    Fleet__TransitionBatch *tb = fleet__transition_batch__unpack(NULL, n, buf);
    if (!tb) FAIL("re-encoded batch does not unpack");
    fl_wire_batch_t b2;
    if (fl_wire_decode_batch(tb, sig, FL_WIRE_NEED_PRIORITIES, &b2, &e) != FL_OK)
        FAIL("re-encoded batch is rejected: %s", e.msg);
    if (b2.count != b.count || memcmp(b2.obs, b.obs, b.count * b.obs_bytes) != 0) FAIL("re-encoded batch differs");
    fleet__transition_batch__free_unpacked(tb, NULL);
    free(buf);
    free(m);
}

static void fuzz_sample_response(const Fleet__SampleResponse *r) {
    fl_wire_batch_t b;
    fl_err_t e;
    fl_err_init(&e);
    fl_status st = fl_wire_decode_batch_bytes(r->batch, 16, 0, &b, &e);
    if (st != FL_OK) {
        check_rejection("SampleResponse", st, &e);
        return;
    }
    /* Touch every byte the views promise. */
    volatile unsigned acc = 0;
    const uint8_t *o = b.obs, *no = b.next_obs;
    for (size_t i = 0; i < b.count * b.obs_bytes; i++) acc += o[i] + no[i];
    for (size_t i = 0; i < b.count; i++) acc += (unsigned)b.actions[i] + (b.rewards[i] > 0) + (b.discounts[i] > 0);
    if (b.priorities)
        for (size_t i = 0; i < b.count; i++) acc += b.priorities[i] > 0;
    (void)acc;
}

#define SAMPLE_ROOM 64

/* The client's reader on the raw reply (see the top). m: protobuf-c's unpacking, or NULL. */
static void fuzz_sample_reader(const uint8_t *p, size_t len, size_t seglen, const Fleet__SampleResponse *m) {
    enum { OB = 16, R = SAMPLE_ROOM };
    static uint8_t obs[R * OB], next[R * OB];
    static int32_t actions[R];
    static float rewards[R], discounts[R], weights[R];
    static uint64_t keys[R];
    static double probs[R];
    const fl_wire_sample_cols_t cols = {R, OB, obs, next, actions, rewards, discounts, weights, keys, probs};
    size_t nseg = len / seglen + 1;
    fl_pb_seg_t *seg = malloc(nseg * sizeof *seg);
    if (!seg) FAIL("out of memory");
    for (size_t i = 0; i < nseg; i++) {
        size_t at = i * seglen;
        seg[i] = (fl_pb_seg_t){p + at, at + seglen <= len ? seglen : len - at};
    }
    fl_wire_sample_info_t info;
    fl_err_t e;
    fl_err_init(&e);
    fl_status st = fl_wire_read_sample_reply(seg, nseg, &cols, &info, &e);
    free(seg);
    fl_wire_batch_t b;
    fl_err_t e2;
    fl_err_init(&e2);
    fl_status st2 = m ? fl_wire_decode_batch_bytes(m->batch, OB, 0, &b, &e2) : FL_DATA_LOSS;
    if (st == FL_OK) {
        if (!m) FAIL("the reader read a reply protobuf-c refuses (%zu transitions)", info.count);
        if (st2 != FL_OK) {
            if (strncmp(e2.msg, "batch.priorities", 16) != 0)
                FAIL("the reader read a reply the batch check refuses: %s", e2.msg);
            return;
        }
        size_t n = b.count;
        if (info.count != n || m->n_keys != n || m->n_weights != n || m->n_probabilities != n)
            FAIL("the reader read %zu transitions, protobuf-c %zu (keys %zu)", info.count, n, m->n_keys);
        if (memcmp(obs, b.obs, n * OB) || memcmp(next, b.next_obs, n * OB) || memcmp(actions, b.actions, 4 * n) ||
            memcmp(rewards, b.rewards, 4 * n) || memcmp(discounts, b.discounts, 4 * n) ||
            memcmp(keys, m->keys, 8 * n) || memcmp(weights, m->weights, 4 * n) ||
            memcmp(probs, m->probabilities, 8 * n))
            FAIL("the reader's columns differ from protobuf-c's");
        if (info.table_size != m->table_size || info.shard_id != m->shard_id ||
            info.updates_applied != m->updates_applied || info.updates_stale != m->updates_stale ||
            memcmp(&info.total_priority, &m->total_priority, 8) || memcmp(&info.min_priority, &m->min_priority, 8) ||
            memcmp(&info.sampling_mass, &m->sampling_mass, 8))
            FAIL("the reader's scalars differ from protobuf-c's");
        return;
    }
    if (st != FL_DATA_LOSS || !e.msg[0]) FAIL("the reader refused with status %d and message \"%s\"", (int)st, e.msg);
    if (st2 == FL_OK && b.count <= R && m->n_keys == b.count && m->n_weights == b.count &&
        m->n_probabilities == b.count && !strstr(e.msg, "sent twice") && !strstr(e.msg, "field number 0"))
        FAIL("the reader refused a reply protobuf-c reads: %s", e.msg);
}

static void fuzz_update(const Fleet__UpdatePrioritiesRequest *req) {
    fl_err_t e;
    fl_err_init(&e);
    /* The server answers INVALID_ARGUMENT for a length mismatch before touching the table. */
    if (req->n_priorities != req->n_keys) return;
    fl_wire_sig_t sig;
    sig_vec(&sig);
    fl_table_t *t = make_table(&sig);
    /* 40 items into a table of 32: keys 0..7 are evicted (stale), 8..39 live. */
    enum { N = 40 };
    float obs[N * 4] = {0}, r[N], g[N], p[N];
    int32_t a[N];
    for (int i = 0; i < N; i++) {
        a[i] = i % 3;
        r[i] = (float)i;
        g[i] = 0.99f;
        p[i] = (float)(i % 5);
    }
    if (fl_table_insert(t, N, obs, a, r, g, obs, p, NULL, &e) != FL_OK) FAIL("prefill: %s", e.msg);
    fl_table_info_t before, after;
    fl_table_info(t, &before);
    size_t applied = 0;
    fl_status st = fl_table_update_priorities(t, req->n_keys, req->keys, req->priorities, &applied, &e);
    fl_table_info(t, &after);
    if (fl_wire_check_priorities("priorities", req->n_priorities, req->priorities, NULL) != FL_OK) {
        if (st != FL_INVALID_ARGUMENT) FAIL("update with a bad priority: status %d", (int)st);
        if (after.updates_applied != before.updates_applied || after.total_priority != before.total_priority)
            FAIL("a rejected priority update changed the table");
    } else if (st != FL_OK) {
        FAIL("valid priority update rejected: %s", e.msg);
    } else if (applied > req->n_keys) {
        FAIL("applied %zu of %zu updates", applied, req->n_keys);
    }
    verify(t, "update_priorities");
    fl_table_destroy(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int type = data[0] % T_COUNT;
    const ProtobufCMessageDescriptor *d = descriptor_of(type);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
    if (type == T_SAMPLE_RESP) fuzz_sample_reader(data + 1, size - 1, 1u + data[0] / T_COUNT, (const void *)m);
    if (!m) return 0;
    roundtrip(m);
    fl_wire_sig_t sig;
    switch (type) {
    case T_INSERT_VEC:
        sig_vec(&sig);
        fuzz_insert((const Fleet__InsertRequest *)m, &sig);
        break;
    case T_INSERT_IMG:
        sig_img(&sig);
        fuzz_insert((const Fleet__InsertRequest *)m, &sig);
        break;
    case T_SAMPLE_RESP: fuzz_sample_response((const Fleet__SampleResponse *)m); break;
    case T_UPDATE_REQ: fuzz_update((const Fleet__UpdatePrioritiesRequest *)m); break;
    default: break;
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
