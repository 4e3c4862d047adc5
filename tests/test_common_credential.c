/* test_common_credential: SipHash-2-4 against the reference vectors of its authors (key
 * 00 01 .. 0f, message 00 01 .. n-1), and the role credentials built on it: a token holds
 * only for its role key and incarnation, role keys differ by role, index and secret, and
 * FLEET_CREDENTIAL's text and hex keys parse back exactly and refuse malformed ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "common/credential.h"

static void test_siphash_vectors(void **state) {
    (void)state;
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
    /* the reference implementation's vectors_sip64 (n = 0, 1, 2, 3, 8, 15) */
    assert_true(fl_siphash24(key, msg, 0) == 0x726fdb47dd0e0e31ULL);
    assert_true(fl_siphash24(key, msg, 1) == 0x74f839c593dc67fdULL);
    assert_true(fl_siphash24(key, msg, 2) == 0x0d6c8009d9a94f5aULL);
    assert_true(fl_siphash24(key, msg, 3) == 0x85676696d7fb7e2dULL);
    assert_true(fl_siphash24(key, msg, 8) == 0x93f5f5799a932462ULL);
    assert_true(fl_siphash24(key, msg, 15) == 0xa129ca6149be45e5ULL);
}

static void test_tokens(void **state) {
    (void)state;
    uint8_t secret[16], other[16], ka[16], kb[16], kc[16], kd[16];
    assert_int_equal(fl_cred_random(secret), 0);
    assert_int_equal(fl_cred_random(other), 0);
    assert_memory_not_equal(secret, other, 16);
    fl_cred_role_key(secret, "actor", 3, ka);
    fl_cred_role_key(secret, "actor", 4, kb);
    fl_cred_role_key(secret, "evaluator", 3, kc);
    fl_cred_role_key(other, "actor", 3, kd);
    assert_memory_not_equal(ka, kb, 16);
    assert_memory_not_equal(ka, kc, 16);
    assert_memory_not_equal(ka, kd, 16);
    uint8_t again[16];
    fl_cred_role_key(secret, "actor", 3, again);
    assert_memory_equal(ka, again, 16);

    char t1[FL_CRED_TOKEN_CHARS + 1], t2[FL_CRED_TOKEN_CHARS + 1];
    fl_cred_token(ka, 1, t1);
    fl_cred_token(ka, 2, t2);
    assert_int_equal(strlen(t1), FL_CRED_TOKEN_CHARS);
    assert_string_not_equal(t1, t2);
    assert_true(fl_cred_check(ka, 1, t1));
    assert_false(fl_cred_check(ka, 2, t1)); /* another incarnation */
    assert_false(fl_cred_check(kb, 1, t1)); /* another index */
    assert_false(fl_cred_check(kc, 1, t1)); /* another role */
    assert_false(fl_cred_check(kd, 1, t1)); /* another run */
    assert_false(fl_cred_check(ka, 1, ""));
    assert_false(fl_cred_check(ka, 1, NULL));
    char bad[FL_CRED_TOKEN_CHARS + 2];
    memcpy(bad, t1, sizeof t1);
    bad[FL_CRED_TOKEN_CHARS - 1] ^= 1;
    assert_false(fl_cred_check(ka, 1, bad));
    memcpy(bad, t1, sizeof t1);
    bad[FL_CRED_TOKEN_CHARS] = '0', bad[FL_CRED_TOKEN_CHARS + 1] = '\0';
    assert_false(fl_cred_check(ka, 1, bad)); /* a digit too many */
}

static void test_parse(void **state) {
    (void)state;
    uint64_t n = 0;
    char tok[FL_CRED_TOKEN_CHARS + 1];
    const char *good = "12:0123456789abcdef0123456789abcdef";
    assert_int_equal(fl_cred_parse(good, &n, tok), 0);
    assert_true(n == 12);
    assert_string_equal(tok, "0123456789abcdef0123456789abcdef");
    const char *bad[] = {NULL,
                         "",
                         "12",
                         "12:",
                         ":0123456789abcdef0123456789abcdef",
                         "0:0123456789abcdef0123456789abcdef",
                         "12:0123456789abcdef0123456789abcde",
                         "12:0123456789abcdef0123456789abcdef0",
                         "12:0123456789ABCDEF0123456789abcdef",
                         "x2:0123456789abcdef0123456789abcdef",
                         "12;0123456789abcdef0123456789abcdef",
                         "99999999999999999999:0123456789abcdef0123456789abcdef"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_int_equal(fl_cred_parse(bad[i], &n, tok), -1);

    uint8_t key[16], back[16];
    char hex[33];
    assert_int_equal(fl_cred_random(key), 0);
    fl_cred_key_hex(key, hex);
    assert_int_equal(strlen(hex), 32);
    assert_int_equal(fl_cred_key_parse(hex, back), 0);
    assert_memory_equal(key, back, 16);
    assert_int_equal(fl_cred_key_parse("00", back), -1);
    assert_int_equal(fl_cred_key_parse("0123456789abcdef0123456789abcdeg", back), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_siphash_vectors),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
