/* Unit tests for common/methods: the RPC path table agrees with the service descriptors
 * of proto/fleet.proto, row for row and method for method. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/methods.h"
#include "fleet.pb-c.h"

/* Every row names a real method and builds its path from the descriptor. */
static void test_every_row_is_a_method(void **state) {
    (void)state;
    for (int m = 0; m < FL_METHOD_COUNT; m++) {
        const char *p = fl_method_path((fl_method)m);
        if (p[0] != '/') fail_msg("row %d: no method of that name in its service", m);
        assert_non_null(strchr(p + 1, '/'));
    }
    assert_string_equal(fl_method_path(FL_METHOD_REPLAY_INSERT), "/fleet.Replay/Insert");
    assert_string_equal(fl_method_path(FL_METHOD_PARAM_PUSH_GRADIENTS), "/fleet.ParamServer/PushGradients");
    assert_string_equal(fl_method_path(FL_METHOD_CONTROL_REPORT), "/fleet.Control/Report");
    assert_string_equal(fl_method_name(FL_METHOD_REPLAY_UPDATE_PRIORITIES), "UpdatePriorities");
    assert_string_equal(fl_method_path(FL_METHOD_COUNT), "");
}

/* Every method of every service has a row (a new RPC without one fails here). */
static void test_every_method_has_a_row(void **state) {
    (void)state;
    const ProtobufCServiceDescriptor *services[] = {&fleet__replay__descriptor, &fleet__param_server__descriptor,
                                                    &fleet__control__descriptor};
    int rows = 0;
    for (size_t s = 0; s < sizeof services / sizeof *services; s++) {
        for (unsigned i = 0; i < services[s]->n_methods; i++) {
            const char *name = services[s]->methods[i].name;
            fl_method m = fl_method_find(services[s]->name, name);
            if (m == FL_METHOD_COUNT) fail_msg("%s/%s has no row in common/methods.c", services[s]->name, name);
            char path[128];
            snprintf(path, sizeof path, "/%s/%s", services[s]->name, name);
            assert_int_equal(fl_method_find(services[s]->name, path), m);
            rows++;
        }
    }
    assert_int_equal(rows, FL_METHOD_COUNT);
    assert_int_equal(fl_method_find("fleet.Replay", "Publish"), FL_METHOD_COUNT);
    assert_int_equal(fl_method_find("fleet.ParamServer", "/fleet.Replay/Info"), FL_METHOD_COUNT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_row_is_a_method),
        cmocka_unit_test(test_every_method_has_a_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
