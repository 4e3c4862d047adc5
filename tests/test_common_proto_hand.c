/* The messages of proto/fleet.proto that fleet reads or writes by hand, not through
 * protobuf-c's generated code (marked "by hand" in the .proto): the replay shard's Sample
 * reply, written with its observations in place and read in place (replay/wire_sample.c,
 * common/pbwalk.c), and the parameter server's Fetch reply read in place
 * (paramserver/client.c). The hand code names their fields by number and wire type; this
 * test holds the same numbers and types, and every message's field count, so that any
 * change of these messages' fields fails here until the hand code is looked at. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "fleet.pb-c.h"

typedef struct hand_field {
    const char *name;
    unsigned number;
    ProtobufCType type;
    ProtobufCLabel label;
} hand_field_t;

typedef struct hand_message {
    const ProtobufCMessageDescriptor *desc;
    unsigned n_fields; /* all of the message's fields, read by hand or not */
    const hand_field_t *fields;
    size_t n;
} hand_message_t;

#define R PROTOBUF_C_LABEL_REPEATED
#define N PROTOBUF_C_LABEL_NONE

/* fleet.Tensor: common/pbwalk.c (fl_pb_read_tensor), replay/wire_sample.c (data). */
static const hand_field_t tensor[] = {
    {"dtype", 1, PROTOBUF_C_TYPE_ENUM, N},
    {"shape", 2, PROTOBUF_C_TYPE_INT64, R},
    {"data", 3, PROTOBUF_C_TYPE_BYTES, N},
};
/* fleet.TransitionBatch inside a SampleResponse: replay/wire_sample.c (on_batch, and the
 * writer's obs and next_obs in place). */
static const hand_field_t batch[] = {
    {"count", 1, PROTOBUF_C_TYPE_UINT32, N},     {"obs", 2, PROTOBUF_C_TYPE_MESSAGE, N},
    {"actions", 3, PROTOBUF_C_TYPE_INT32, R},    {"rewards", 4, PROTOBUF_C_TYPE_FLOAT, R},
    {"discounts", 5, PROTOBUF_C_TYPE_FLOAT, R},  {"next_obs", 6, PROTOBUF_C_TYPE_MESSAGE, N},
    {"priorities", 7, PROTOBUF_C_TYPE_FLOAT, R},
};
/* fleet.SampleResponse: replay/wire_sample.c (on_response, and the writer's field 1). */
static const hand_field_t sample[] = {
    {"batch", 1, PROTOBUF_C_TYPE_MESSAGE, N},         {"keys", 2, PROTOBUF_C_TYPE_FIXED64, R},
    {"weights", 3, PROTOBUF_C_TYPE_FLOAT, R},         {"probabilities", 4, PROTOBUF_C_TYPE_DOUBLE, R},
    {"table_size", 5, PROTOBUF_C_TYPE_UINT64, N},     {"total_priority", 6, PROTOBUF_C_TYPE_DOUBLE, N},
    {"min_priority", 7, PROTOBUF_C_TYPE_DOUBLE, N},   {"shard_id", 8, PROTOBUF_C_TYPE_UINT32, N},
    {"sampling_mass", 9, PROTOBUF_C_TYPE_DOUBLE, N},  {"updates_applied", 10, PROTOBUF_C_TYPE_UINT64, N},
    {"updates_stale", 11, PROTOBUF_C_TYPE_UINT64, N},
};
/* fleet.FetchResponse and its fleet.ParamSlice: paramserver/client.c (on_response,
 * on_slice). */
static const hand_field_t fetch[] = {
    {"version", 1, PROTOBUF_C_TYPE_UINT64, N},
    {"has_params", 2, PROTOBUF_C_TYPE_BOOL, N},
    {"params", 3, PROTOBUF_C_TYPE_MESSAGE, N},
};
static const hand_field_t slice[] = {
    {"version", 1, PROTOBUF_C_TYPE_UINT64, N},
    {"offset", 2, PROTOBUF_C_TYPE_UINT64, N},
    {"total", 3, PROTOBUF_C_TYPE_UINT64, N},
    {"values", 4, PROTOBUF_C_TYPE_MESSAGE, N},
};

#define MSG(d, nf, f) \
    { &(d), nf, f, sizeof f / sizeof f[0] }
static const hand_message_t messages[] = {
    MSG(fleet__tensor__descriptor, 3, tensor),           MSG(fleet__transition_batch__descriptor, 7, batch),
    MSG(fleet__sample_response__descriptor, 11, sample), MSG(fleet__fetch_response__descriptor, 3, fetch),
    MSG(fleet__param_slice__descriptor, 4, slice),
};

static void test_hand_read_fields_unchanged(void **state) {
    (void)state;
    for (size_t m = 0; m < sizeof messages / sizeof messages[0]; m++) {
        const hand_message_t *h = &messages[m];
        if (h->desc->n_fields != h->n_fields)
            fail_msg(
                "%s has %u fields, the hand code knows %u: look at the code named in "
                "tests/test_common_proto_hand.c before changing this count",
                h->desc->name, h->desc->n_fields, h->n_fields);
        for (size_t i = 0; i < h->n; i++) {
            const hand_field_t *f = &h->fields[i];
            const ProtobufCFieldDescriptor *d = protobuf_c_message_descriptor_get_field_by_name(h->desc, f->name);
            if (!d) fail_msg("%s.%s: gone from fleet.proto, and read or written by hand", h->desc->name, f->name);
            if (d->id != f->number || d->type != f->type || d->label != f->label)
                fail_msg(
                    "%s.%s: field %u, type %d, label %d in fleet.proto; the hand code reads field %u, type %d, "
                    "label %d",
                    h->desc->name, f->name, d->id, (int)d->type, (int)d->label, f->number, (int)f->type, (int)f->label);
        }
    }
}

/* The nested messages are the ones the hand code walks into. */
static void test_nested_types(void **state) {
    (void)state;
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(&fleet__sample_response__descriptor, "batch");
    assert_ptr_equal(f->descriptor, &fleet__transition_batch__descriptor);
    f = protobuf_c_message_descriptor_get_field_by_name(&fleet__transition_batch__descriptor, "obs");
    assert_ptr_equal(f->descriptor, &fleet__tensor__descriptor);
    f = protobuf_c_message_descriptor_get_field_by_name(&fleet__transition_batch__descriptor, "next_obs");
    assert_ptr_equal(f->descriptor, &fleet__tensor__descriptor);
    f = protobuf_c_message_descriptor_get_field_by_name(&fleet__fetch_response__descriptor, "params");
    assert_ptr_equal(f->descriptor, &fleet__param_slice__descriptor);
    f = protobuf_c_message_descriptor_get_field_by_name(&fleet__param_slice__descriptor, "values");
    assert_ptr_equal(f->descriptor, &fleet__tensor__descriptor);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_read_fields_unchanged),
        cmocka_unit_test(test_nested_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
