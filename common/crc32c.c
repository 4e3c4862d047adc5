/* crc32c: slicing-by-8 CRC-32C (see crc32c.h).
 *
 * T[0] is the classic byte table of the reflected polynomial; T[k][b] is the CRC
 * contribution of byte b followed by k zero bytes, so eight table lookups consume eight
 * bytes at once. The tables (8 KiB) are computed once instead of being spelled out. */
#include "common/crc32c.h"

#include <pthread.h>

#define POLY 0x82F63B78u

static uint32_t T[8][256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        T[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++) T[k][b] = (T[k - 1][b] >> 8) ^ T[0][T[k - 1][b] & 0xff];
}

uint32_t fl_crc32c_extend(uint32_t crc, const void *data, size_t n) {
    pthread_once(&g_once, build_tables);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        c ^= (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        c = T[7][c & 0xff] ^ T[6][(c >> 8) & 0xff] ^ T[5][(c >> 16) & 0xff] ^ T[4][c >> 24] ^ T[3][p[4]] ^ T[2][p[5]] ^
            T[1][p[6]] ^ T[0][p[7]];
    }
    for (; n; n--, p++) c = (c >> 8) ^ T[0][(c ^ *p) & 0xff];
    return ~c;
}

uint32_t fl_crc32c(const void *data, size_t n) {
    return fl_crc32c_extend(0, data, n);
}

#define MASK_DELTA 0xa282ead8u

uint32_t fl_crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + MASK_DELTA;
}

uint32_t fl_crc32c_unmask(uint32_t masked) {
    uint32_t r = masked - MASK_DELTA;
    return (r >> 17) | (r << 15);
}
