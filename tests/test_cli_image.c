/* cli/image: GIF and PNG files are read back by decoders written here from the file
 * formats (GIF89a with LZW; PNG chunks with CRCs, zlib-inflated rows) and must give back
 * the exact pixels written: small palettes, frames big enough to fill the LZW dictionary
 * many times over, more than 256 colours (quantized to the 6x7x6 cube), 1x1 frames.
 * Also the strip tiler and the error paths (bad sizes, unwritable paths, a GIF with no
 * frames leaves no file). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <cmocka.h>

#include "cli/image.h"
#include "common/rng.h"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fleet-image-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* ---- A GIF decoder, from the GIF89a specification ------------------------------------ */

typedef struct gif_read {
    int width, height, frames, loop_ext, delay;
    uint8_t *rgb; /* frames * height * width * 3 */
} gif_read_t;

/* Concatenates the data sub-blocks at *p; returns the bytes and advances *p. */
static uint8_t *sub_blocks(const uint8_t *buf, size_t len, size_t *p, size_t *out_len) {
    uint8_t *data = malloc(len);
    size_t n = 0;
    while (*p < len && buf[*p] != 0) {
        size_t k = buf[*p];
        assert_true(*p + 1 + k <= len);
        memcpy(data + n, buf + *p + 1, k);
        n += k;
        *p += 1 + k;
    }
    assert_true(*p < len);
    (*p)++; /* terminator */
    *out_len = n;
    return data;
}

/* LZW-decodes into out (npix indices); returns the count decoded. */
static size_t lzw_decode(const uint8_t *data, size_t n, int min_size, uint8_t *out, size_t npix) {
    int clear = 1 << min_size, eoi = clear + 1;
    static uint16_t prefix[4096];
    static uint8_t suffix[4096], first[4096];
    static uint8_t stack[4096];
    for (int i = 0; i < clear; i++) {
        prefix[i] = 0xffff;
        suffix[i] = (uint8_t)i;
        first[i] = (uint8_t)i;
    }
    int size = min_size + 1, next = eoi + 1, prev = -1;
    size_t bitpos = 0, written = 0;
    for (;;) {
        if (bitpos + (size_t)size > n * 8) break;
        int code = 0;
        for (int b = 0; b < size; b++, bitpos++) code |= ((data[bitpos / 8] >> (bitpos % 8)) & 1) << b;
        if (code == clear) {
            size = min_size + 1;
            next = eoi + 1;
            prev = -1;
            continue;
        }
        if (code == eoi) break;
        assert_true(code <= next);
        int c = code;
        int sp = 0;
        if (code == next) { /* KwKwK */
            assert_true(prev >= 0);
            stack[sp++] = first[prev];
            c = prev;
        }
        while (c >= 0 && c != 0xffff) {
            stack[sp++] = suffix[c];
            c = prefix[c] == 0xffff ? -1 : prefix[c];
        }
        uint8_t head = stack[sp - 1];
        while (sp > 0 && written < npix) out[written++] = stack[--sp];
        if (prev >= 0 && next < 4096) {
            prefix[next] = (uint16_t)prev;
            suffix[next] = head;
            first[next] = first[prev];
            next++;
            if (next == (1 << size) && size < 12) size++;
        }
        prev = code;
    }
    return written;
}

static void gif_decode(const uint8_t *buf, size_t len, gif_read_t *g) {
    memset(g, 0, sizeof *g);
    assert_memory_equal(buf, "GIF89a", 6);
    g->width = buf[6] | buf[7] << 8;
    g->height = buf[8] | buf[9] << 8;
    assert_int_equal(buf[10] & 0x80, 0); /* no global table */
    size_t p = 13;
    size_t npix = (size_t)g->width * (size_t)g->height;
    for (;;) {
        assert_true(p < len);
        uint8_t b = buf[p++];
        if (b == 0x3b) break;
        if (b == 0x21) {
            uint8_t label = buf[p++];
            if (label == 0xff && memcmp(buf + p + 1, "NETSCAPE2.0", 11) == 0) g->loop_ext = 1;
            if (label == 0xf9) g->delay = buf[p + 2] | buf[p + 3] << 8;
            size_t n;
            free(sub_blocks(buf, len, &p, &n));
            continue;
        }
        assert_int_equal(b, 0x2c);
        assert_int_equal(buf[p + 4] | buf[p + 5] << 8, g->width);
        assert_int_equal(buf[p + 6] | buf[p + 7] << 8, g->height);
        uint8_t packed = buf[p + 8];
        p += 9;
        assert_true(packed & 0x80);
        int entries = 1 << ((packed & 7) + 1);
        const uint8_t *table = buf + p;
        p += (size_t)entries * 3;
        int min_size = buf[p++];
        size_t n;
        uint8_t *data = sub_blocks(buf, len, &p, &n);
        uint8_t *idx = malloc(npix);
        assert_int_equal(lzw_decode(data, n, min_size, idx, npix), npix);
        g->rgb = realloc(g->rgb, (size_t)(g->frames + 1) * npix * 3);
        for (size_t i = 0; i < npix; i++) {
            assert_true(idx[i] < entries);
            memcpy(g->rgb + ((size_t)g->frames * npix + i) * 3, table + idx[i] * 3, 3);
        }
        g->frames++;
        free(idx);
        free(data);
    }
    assert_int_equal(p, len);
}

/* Frames of few colours (a palette of `colours` picked from the rng). */
static void fill_frame(uint8_t *rgb, int w, int h, int colours, fl_rng_t *rng) {
    uint8_t pal[256][3];
    for (int i = 0; i < colours; i++)
        for (int k = 0; k < 3; k++) pal[i][k] = (uint8_t)fl_rng_below(rng, 256);
    for (int i = 0; i < w * h; i++) {
        /* runs of equal pixels, as in real renders, and random noise */
        int c = fl_rng_below(rng, 4) == 0 ? (int)fl_rng_below(rng, (uint64_t)colours) : (i / 7) % colours;
        memcpy(rgb + 3 * i, pal[c], 3);
    }
}

static void gif_roundtrip(int w, int h, int frames, int colours, uint64_t seed) {
    char path[128];
    snprintf(path, sizeof path, "%s/t.gif", g_dir);
    fl_rng_t rng;
    fl_rng_init(&rng, seed);
    size_t fs = (size_t)w * (size_t)h * 3;
    uint8_t *all = malloc(fs * (size_t)frames);
    fl_gif_t *gif = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_gif_open(&gif, path, w, h, 7, &err), FL_OK);
    for (int f = 0; f < frames; f++) {
        fill_frame(all + (size_t)f * fs, w, h, colours, &rng);
        assert_int_equal(fl_gif_add(gif, all + (size_t)f * fs, &err), FL_OK);
    }
    assert_int_equal(fl_gif_frames(gif), frames);
    assert_int_equal(fl_gif_close(gif, &err), FL_OK);
    size_t len;
    uint8_t *buf = slurp(path, &len);
    assert_non_null(buf);
    gif_read_t g;
    gif_decode(buf, len, &g);
    assert_int_equal(g.width, w);
    assert_int_equal(g.height, h);
    assert_int_equal(g.frames, frames);
    assert_int_equal(g.delay, 7);
    assert_true(g.loop_ext);
    assert_memory_equal(g.rgb, all, fs * (size_t)frames);
    free(g.rgb);
    free(buf);
    free(all);
}

static void test_gif_small_palettes(void **state) {
    (void)state;
    gif_roundtrip(1, 1, 1, 1, 1);
    gif_roundtrip(3, 2, 2, 2, 2);
    gif_roundtrip(10, 10, 3, 5, 3);
    gif_roundtrip(33, 17, 4, 16, 4);
}

static void test_gif_dictionary_resets(void **state) {
    (void)state;
    /* 320 x 240 noisy pixels issue far more than 4096 codes per frame, at every code
     * size; 256 colours use the widest minimum code size. */
    gif_roundtrip(320, 240, 2, 200, 5);
    gif_roundtrip(300, 200, 2, 256, 6);
    gif_roundtrip(160, 160, 3, 3, 7);
}

static void test_gif_many_colours_quantized(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/q.gif", g_dir);
    int w = 64, h = 64;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++) { /* 4096 distinct colours */
        rgb[3 * i] = (uint8_t)(i * 4);
        rgb[3 * i + 1] = (uint8_t)((i >> 6) * 4);
        rgb[3 * i + 2] = (uint8_t)((i * 7) & 0xff);
    }
    fl_gif_t *gif = NULL;
    assert_int_equal(fl_gif_open(&gif, path, w, h, 0, NULL), FL_OK);
    assert_int_equal(fl_gif_add(gif, rgb, NULL), FL_OK);
    assert_int_equal(fl_gif_close(gif, NULL), FL_OK);
    size_t len;
    uint8_t *buf = slurp(path, &len);
    gif_read_t g;
    gif_decode(buf, len, &g);
    assert_int_equal(g.frames, 1);
    /* Each channel lands on the nearest level of its axis: at most half a step away. */
    for (int i = 0; i < w * h; i++) {
        int levels[3] = {6, 7, 6};
        for (int k = 0; k < 3; k++) {
            int step = 255 / (levels[k] - 1);
            int d = abs((int)g.rgb[3 * i + k] - (int)rgb[3 * i + k]);
            assert_true(d <= step / 2 + 1);
        }
    }
    free(g.rgb);
    free(buf);
    free(rgb);
}

static void test_gif_errors(void **state) {
    (void)state;
    char path[128];
    fl_gif_t *gif = NULL;
    fl_err_t err;
    fl_err_init(&err);
    snprintf(path, sizeof path, "%s/bad.gif", g_dir);
    assert_int_equal(fl_gif_open(&gif, path, 0, 10, 5, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "0 x 10"));
    assert_null(gif);
    assert_int_equal(fl_gif_open(&gif, path, 10, 10, -1, &err), FL_INVALID_ARGUMENT);
    assert_int_equal(fl_gif_open(&gif, "/nonexistent-dir/x.gif", 4, 4, 5, &err), FL_IO_ERROR);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.gif"));
    /* No frame: an error, and no file left behind (nor its temporary). */
    assert_int_equal(fl_gif_open(&gif, path, 4, 4, 5, &err), FL_OK);
    assert_int_equal(fl_gif_close(gif, &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "no frame"));
    assert_int_equal(access(path, F_OK), -1);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", g_dir);
    assert_int_not_equal(system(cmd), 0);
    assert_int_equal(fl_gif_close(NULL, &err), FL_OK);
}

/* ---- PNG: chunks, CRCs and inflated rows --------------------------------------------- */

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void png_check(const char *path, const uint8_t *rgb, int w, int h) {
    size_t len;
    uint8_t *buf = slurp(path, &len);
    assert_non_null(buf);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    assert_memory_equal(buf, sig, 8);
    size_t p = 8;
    uint8_t *z = malloc(len);
    size_t zn = 0;
    int seen_end = 0;
    while (p + 12 <= len) {
        uint32_t n = be32(buf + p);
        const uint8_t *type = buf + p + 4, *data = buf + p + 8;
        assert_true(p + 12 + n <= len);
        uLong crc = crc32(crc32(0L, type, 4), data, n);
        assert_int_equal(crc, be32(data + n));
        if (memcmp(type, "IHDR", 4) == 0) {
            assert_int_equal(n, 13);
            assert_int_equal(be32(data), (uint32_t)w);
            assert_int_equal(be32(data + 4), (uint32_t)h);
            assert_int_equal(data[8], 8);
            assert_int_equal(data[9], 2);
        } else if (memcmp(type, "IDAT", 4) == 0) {
            memcpy(z + zn, data, n);
            zn += n;
        } else if (memcmp(type, "IEND", 4) == 0) {
            seen_end = 1;
        }
        p += 12 + n;
    }
    assert_true(seen_end);
    assert_int_equal(p, len);
    uLongf raw_len = (uLongf)((size_t)w * 3 + 1) * (uLongf)h;
    uint8_t *raw = malloc(raw_len);
    assert_int_equal(uncompress(raw, &raw_len, z, zn), Z_OK);
    assert_int_equal(raw_len, ((size_t)w * 3 + 1) * (size_t)h);
    for (int y = 0; y < h; y++) {
        const uint8_t *row = raw + (size_t)y * ((size_t)w * 3 + 1);
        assert_int_equal(row[0], 0);
        assert_memory_equal(row + 1, rgb + (size_t)y * (size_t)w * 3, (size_t)w * 3);
    }
    free(raw);
    free(z);
    free(buf);
}

static void test_png_roundtrip(void **state) {
    (void)state;
    fl_rng_t rng;
    fl_rng_init(&rng, 11);
    int sizes[][2] = {{1, 1}, {7, 3}, {160, 160}, {513, 77}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int w = sizes[s][0], h = sizes[s][1];
        uint8_t *rgb = malloc((size_t)w * h * 3);
        for (int i = 0; i < w * h * 3; i++) rgb[i] = (uint8_t)fl_rng_below(&rng, 256);
        char path[128];
        snprintf(path, sizeof path, "%s/t%zu.png", g_dir, s);
        assert_int_equal(fl_png_write(path, rgb, w, h, NULL), FL_OK);
        png_check(path, rgb, w, h);
        free(rgb);
    }
    fl_err_t err;
    fl_err_init(&err);
    uint8_t px[3] = {1, 2, 3};
    assert_int_equal(fl_png_write("/nonexistent-dir/a.png", px, 1, 1, &err), FL_IO_ERROR);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/a.png"));
    assert_int_equal(fl_png_write("x.png", px, 0, 1, &err), FL_INVALID_ARGUMENT);
}

static void test_tile(void **state) {
    (void)state;
    uint8_t a[2 * 2 * 3], b[2 * 2 * 3], c[2 * 2 * 3];
    memset(a, 10, sizeof a);
    memset(b, 20, sizeof b);
    memset(c, 30, sizeof c);
    const uint8_t *imgs[3] = {a, b, c};
    const uint8_t gap[3] = {255, 0, 255};
    int w = 0, h = 0;
    uint8_t *t = fl_image_tile(imgs, 3, 2, 2, 2, 1, gap, &w, &h);
    assert_non_null(t);
    /* Two per row: 2 rows; width 2*2 + 3 gaps, height 2*2 + 3 gaps. */
    assert_int_equal(w, 7);
    assert_int_equal(h, 7);
#define PX(x, y) (t + ((size_t)(y) * (size_t)w + (size_t)(x)) * 3)
    assert_memory_equal(PX(0, 0), gap, 3);
    assert_int_equal(PX(1, 1)[0], 10);
    assert_int_equal(PX(2, 2)[1], 10);
    assert_memory_equal(PX(3, 1), gap, 3);
    assert_int_equal(PX(4, 1)[0], 20);
    assert_int_equal(PX(5, 2)[2], 20);
    assert_int_equal(PX(1, 4)[0], 30);
    assert_memory_equal(PX(4, 4), gap, 3); /* no fourth image */
#undef PX
    free(t);
    /* One row when there are fewer images than columns. */
    t = fl_image_tile(imgs, 2, 2, 2, 8, 0, gap, &w, &h);
    assert_int_equal(w, 4);
    assert_int_equal(h, 2);
    free(t);
    assert_null(fl_image_tile(imgs, 0, 2, 2, 8, 0, gap, &w, &h));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gif_small_palettes),
        cmocka_unit_test(test_gif_dictionary_resets),
        cmocka_unit_test(test_gif_many_colours_quantized),
        cmocka_unit_test(test_gif_errors),
        cmocka_unit_test(test_png_roundtrip),
        cmocka_unit_test(test_tile),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
