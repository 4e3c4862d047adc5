/* credential: SipHash-2-4 and the role credentials built on it (see credential.h). */
#include "common/credential.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

static uint64_t load64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                  \
    do {                                                          \
        v0 += v1, v1 = ROTL(v1, 13), v1 ^= v0, v0 = ROTL(v0, 32); \
        v2 += v3, v3 = ROTL(v3, 16), v3 ^= v2;                    \
        v0 += v3, v3 = ROTL(v3, 21), v3 ^= v0;                    \
        v2 += v1, v1 = ROTL(v1, 17), v1 ^= v2, v2 = ROTL(v2, 32); \
    } while (0)

uint64_t fl_siphash24(const uint8_t key[FL_CRED_KEY_BYTES], const void *msg, size_t len) {
    const uint64_t k0 = load64(key), k1 = load64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    const uint8_t *p = msg;
    const size_t whole = len / 8 * 8;
    for (size_t i = 0; i < whole; i += 8) {
        const uint64_t m = load64(p + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = whole; i < len; i++) b |= (uint64_t)p[i] << (8 * (i - whole));
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

int fl_cred_random(uint8_t out[FL_CRED_KEY_BYTES]) {
    size_t got = 0;
    while (got < FL_CRED_KEY_BYTES) {
        ssize_t k = getrandom(out + got, FL_CRED_KEY_BYTES - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

/* 128 bits of msg under key: two SipHash values, the message followed by domain byte 0
 * and by 1. msg has room for one more byte at msg[len]. */
static void prf128(const uint8_t key[FL_CRED_KEY_BYTES], uint8_t *msg, size_t len, uint8_t out[16]) {
    for (int half = 0; half < 2; half++) {
        msg[len] = (uint8_t)half;
        uint64_t v = fl_siphash24(key, msg, len + 1);
        for (int i = 0; i < 8; i++) out[8 * half + i] = (uint8_t)(v >> (8 * i));
    }
}

void fl_cred_role_key(const uint8_t secret[FL_CRED_KEY_BYTES], const char *role, uint32_t index,
                      uint8_t out[FL_CRED_KEY_BYTES]) {
    uint8_t msg[64] = "fleet role key";
    size_t n = strlen((const char *)msg) + 1, rl = role ? strnlen(role, 32) : 0;
    memcpy(msg + n, role, rl);
    n += rl;
    msg[n++] = 0;
    for (int i = 0; i < 4; i++) msg[n++] = (uint8_t)(index >> (8 * i));
    prf128(secret, msg, n, out);
}

static void hex(const uint8_t *b, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) out[2 * i] = digits[b[i] >> 4], out[2 * i + 1] = digits[b[i] & 15];
    out[2 * n] = '\0';
}

void fl_cred_token(const uint8_t role_key[FL_CRED_KEY_BYTES], uint64_t n, char out[FL_CRED_TOKEN_CHARS + 1]) {
    uint8_t msg[32] = "fleet incarnation";
    size_t len = strlen((const char *)msg) + 1;
    for (int i = 0; i < 8; i++) msg[len++] = (uint8_t)(n >> (8 * i));
    uint8_t t[16];
    prf128(role_key, msg, len, t);
    hex(t, sizeof t, out);
}

int fl_cred_check(const uint8_t role_key[FL_CRED_KEY_BYTES], uint64_t n, const char *token) {
    if (!token || strlen(token) != FL_CRED_TOKEN_CHARS) return 0;
    char want[FL_CRED_TOKEN_CHARS + 1];
    fl_cred_token(role_key, n, want);
    unsigned diff = 0;
    for (int i = 0; i < FL_CRED_TOKEN_CHARS; i++) diff |= (unsigned)(want[i] ^ token[i]);
    return diff == 0;
}

static int is_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

int fl_cred_parse(const char *s, uint64_t *n, char token[FL_CRED_TOKEN_CHARS + 1]) {
    if (!s) return -1;
    uint64_t v = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9' && i < 19; i++) v = v * 10 + (uint64_t)(s[i] - '0');
    if (i == 0 || v == 0 || s[i] != ':' || strlen(s + i + 1) != FL_CRED_TOKEN_CHARS ||
        !is_hex(s + i + 1, FL_CRED_TOKEN_CHARS))
        return -1;
    *n = v;
    memcpy(token, s + i + 1, FL_CRED_TOKEN_CHARS + 1);
    return 0;
}

void fl_cred_key_hex(const uint8_t key[FL_CRED_KEY_BYTES], char out[2 * FL_CRED_KEY_BYTES + 1]) {
    hex(key, FL_CRED_KEY_BYTES, out);
}

int fl_cred_key_parse(const char *s, uint8_t key[FL_CRED_KEY_BYTES]) {
    if (!s || strlen(s) != 2 * FL_CRED_KEY_BYTES || !is_hex(s, 2 * FL_CRED_KEY_BYTES)) return -1;
    for (int i = 0; i < FL_CRED_KEY_BYTES; i++) {
        unsigned hi = (unsigned)(s[2 * i] <= '9' ? s[2 * i] - '0' : s[2 * i] - 'a' + 10);
        unsigned lo = (unsigned)(s[2 * i + 1] <= '9' ? s[2 * i + 1] - '0' : s[2 * i + 1] - 'a' + 10);
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
