/* Tests of common/netif: the IPv4 address of a named interface, the first non-loopback
 * one, and the errors that name what is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/netif.h"

static void test_loopback_by_name(void **state) {
    (void)state;
    char addr[64];
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_netif_ipv4("lo", addr, sizeof addr, &e), FL_OK);
    assert_string_equal(addr, "127.0.0.1");
}

static void test_unknown_interface(void **state) {
    (void)state;
    char addr[64] = "untouched";
    fl_err_t e;
    fl_err_init(&e);
    assert_int_equal(fl_netif_ipv4("nosuchif9", addr, sizeof addr, &e), FL_NOT_FOUND);
    assert_string_equal(addr, "untouched");
    assert_non_null(strstr(e.msg, "run.interface = nosuchif9"));
    assert_non_null(strstr(e.msg, "lo (127.0.0.1)")); /* the list of what there is */
}

static void test_first_non_loopback(void **state) {
    (void)state;
    char addr[64];
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = fl_netif_ipv4(NULL, addr, sizeof addr, &e);
    if (s == FL_NOT_FOUND) { /* a machine with loopback only: the error says what to set */
        assert_non_null(strstr(e.msg, "run.interface"));
        return;
    }
    assert_int_equal(s, FL_OK);
    assert_string_not_equal(addr, "127.0.0.1");
    assert_string_not_equal(addr, "0.0.0.0");
    assert_int_equal(strncmp(addr, "127.", 4) == 0, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loopback_by_name),
        cmocka_unit_test(test_unknown_interface),
        cmocka_unit_test(test_first_non_loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
