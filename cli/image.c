/* image: GIF and PNG writers (see image.h).
 *
 * GIF frames are LZW-coded with a trie over (code, next index) whose used slots are
 * remembered, so a dictionary reset costs the codes issued, not the whole table. Codes go
 * LSB-first into 255-byte sub-blocks. The code-size rule is the one every decoder
 * expects: after code 2^size - 1 is issued the size grows; at 4095 a clear code restarts
 * the dictionary. */
#include "cli/image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define GIF_MAX_CODES 4096

/* ---- Files written under a temporary name and renamed on success ------------------- */

typedef struct out_file {
    FILE *f;
    char path[4096];
    char tmp[4112];
} out_file_t;

static fl_status out_open(out_file_t *o, const char *path, fl_err_t *err) {
    if (strlen(path) >= sizeof o->path) return fl_err_set(err, FL_INVALID_ARGUMENT, "image path too long: %s", path);
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp%ld", path, (long)getpid());
    o->f = fopen(o->tmp, "wb");
    if (!o->f) return fl_err_set(err, FL_IO_ERROR, "cannot create %s: %s", o->tmp, strerror(errno));
    return FL_OK;
}

/* Closes and renames when ok, else removes the temporary file. */
static fl_status out_close(out_file_t *o, int ok, fl_err_t *err) {
    if (!o->f) return FL_OK;
    int failed = ferror(o->f);
    if (fclose(o->f) != 0) failed = 1;
    o->f = NULL;
    if (ok && failed) {
        remove(o->tmp);
        return fl_err_set(err, FL_IO_ERROR, "writing %s failed: %s", o->path, strerror(errno));
    }
    if (!ok) {
        remove(o->tmp);
        return FL_OK;
    }
    if (rename(o->tmp, o->path) != 0) {
        fl_status st = fl_err_set(err, FL_IO_ERROR, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(errno));
        remove(o->tmp);
        return st;
    }
    return FL_OK;
}

static void put16(FILE *f, int v) {
    fputc(v & 0xff, f);
    fputc((v >> 8) & 0xff, f);
}

/* ---- GIF --------------------------------------------------------------------------- */

struct fl_gif {
    out_file_t out;
    int width, height, delay_cs, frames;
    fl_status failed;             /* first error of add */
    uint8_t *indices;             /* width * height palette indices of a frame */
    uint16_t (*child)[256];       /* trie: child[code][index] = code + 1, 0 = none */
    uint32_t used[GIF_MAX_CODES]; /* (code << 8 | index) of each issued code */
    /* bit writer */
    uint32_t acc;
    int nbits;
    uint8_t block[255];
    int block_len;
};

static void gif_byte(fl_gif_t *g, uint8_t b) {
    g->block[g->block_len++] = b;
    if (g->block_len == 255) {
        fputc(255, g->out.f);
        fwrite(g->block, 1, 255, g->out.f);
        g->block_len = 0;
    }
}

static void gif_code(fl_gif_t *g, unsigned code, int size) {
    g->acc |= (uint32_t)code << g->nbits;
    g->nbits += size;
    while (g->nbits >= 8) {
        gif_byte(g, (uint8_t)(g->acc & 0xff));
        g->acc >>= 8;
        g->nbits -= 8;
    }
}

static void gif_flush(fl_gif_t *g) {
    if (g->nbits > 0) gif_byte(g, (uint8_t)(g->acc & 0xff));
    g->acc = 0;
    g->nbits = 0;
    if (g->block_len > 0) {
        fputc(g->block_len, g->out.f);
        fwrite(g->block, 1, (size_t)g->block_len, g->out.f);
        g->block_len = 0;
    }
    fputc(0, g->out.f); /* block terminator */
}

fl_status fl_gif_open(fl_gif_t **out, const char *path, int width, int height, int delay_cs, fl_err_t *err) {
    *out = NULL;
    if (width < 1 || width > 65535 || height < 1 || height > 65535)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "GIF %s: frame size %d x %d, expected 1..65535 each", path, width,
                          height);
    if (delay_cs < 0 || delay_cs > 65535)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "GIF %s: delay %d cs, expected 0..65535", path, delay_cs);
    fl_gif_t *g = calloc(1, sizeof *g);
    if (g) g->indices = malloc((size_t)width * (size_t)height);
    if (g) g->child = calloc(GIF_MAX_CODES, sizeof *g->child);
    if (!g || !g->indices || !g->child) {
        if (g) free(g->indices);
        free(g);
        return fl_err_set(err, FL_NO_MEMORY, "GIF %s: out of memory", path);
    }
    g->width = width;
    g->height = height;
    g->delay_cs = delay_cs;
    fl_status st = out_open(&g->out, path, err);
    if (st != FL_OK) {
        free(g->child);
        free(g->indices);
        free(g);
        return st;
    }
    FILE *f = g->out.f;
    fwrite("GIF89a", 1, 6, f);
    put16(f, width);
    put16(f, height);
    fputc(0x00, f); /* no global colour table: each frame has its own */
    fputc(0, f);    /* background index */
    fputc(0, f);    /* pixel aspect ratio: unspecified */
    /* Application extension: loop forever. */
    static const uint8_t loop[] = {0x21, 0xff, 0x0b, 'N', 'E',  'T',  'S',  'C',  'A', 'P',
                                   'E',  '2',  '.',  '0', 0x03, 0x01, 0x00, 0x00, 0x00};
    fwrite(loop, 1, sizeof loop, f);
    *out = g;
    return FL_OK;
}

/* Maps the frame to palette indices; returns the number of colours (<= 256). */
static int gif_palette(fl_gif_t *g, const uint8_t *rgb, uint8_t palette[256][3]) {
    size_t n = (size_t)g->width * (size_t)g->height;
    enum { HASH = 1024 };
    uint32_t keys[HASH];
    int16_t vals[HASH];
    memset(vals, -1, sizeof vals);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = (uint32_t)rgb[3 * i] << 16 | (uint32_t)rgb[3 * i + 1] << 8 | rgb[3 * i + 2];
        uint32_t h = (c * 2654435761u) >> 22;
        while (vals[h] >= 0 && keys[h] != c) h = (h + 1) & (HASH - 1);
        if (vals[h] < 0) {
            if (count == 256) goto quantize;
            keys[h] = c;
            vals[h] = (int16_t)count;
            palette[count][0] = rgb[3 * i];
            palette[count][1] = rgb[3 * i + 1];
            palette[count][2] = rgb[3 * i + 2];
            count++;
        }
        g->indices[i] = (uint8_t)vals[h];
    }
    return count;
quantize:
    /* More than 256 colours: a 6x7x6 cube (green gets the extra level, as the eye is most
     * sensitive to it). */
    for (int r = 0; r < 6; r++)
        for (int gr = 0; gr < 7; gr++)
            for (int b = 0; b < 6; b++) {
                int k = (r * 7 + gr) * 6 + b;
                palette[k][0] = (uint8_t)(r * 255 / 5);
                palette[k][1] = (uint8_t)(gr * 255 / 6);
                palette[k][2] = (uint8_t)(b * 255 / 5);
            }
    for (size_t i = 0; i < n; i++) {
        int r = (rgb[3 * i] * 5 + 127) / 255, gr = (rgb[3 * i + 1] * 6 + 127) / 255,
            b = (rgb[3 * i + 2] * 5 + 127) / 255;
        g->indices[i] = (uint8_t)((r * 7 + gr) * 6 + b);
    }
    return 6 * 7 * 6;
}

fl_status fl_gif_add(fl_gif_t *g, const uint8_t *rgb, fl_err_t *err) {
    if (g->failed != FL_OK) return g->failed;
    uint8_t palette[256][3];
    int colours = gif_palette(g, rgb, palette);
    int bits = 1;
    while ((1 << bits) < colours) bits++;
    FILE *f = g->out.f;
    /* Graphic control extension: delay, disposal "leave in place", no transparency. */
    fputc(0x21, f);
    fputc(0xf9, f);
    fputc(4, f);
    fputc(0x04, f);
    put16(f, g->delay_cs);
    fputc(0, f);
    fputc(0, f);
    /* Image descriptor with a local colour table of 2^bits entries. */
    fputc(0x2c, f);
    put16(f, 0);
    put16(f, 0);
    put16(f, g->width);
    put16(f, g->height);
    fputc(0x80 | (bits - 1), f);
    for (int i = 0; i < (1 << bits); i++) {
        static const uint8_t black[3] = {0, 0, 0};
        fwrite(i < colours ? palette[i] : black, 1, 3, f);
    }
    /* LZW. */
    int min_size = bits < 2 ? 2 : bits;
    const unsigned clear = 1u << min_size, eoi = clear + 1;
    fputc(min_size, f);
    int size = min_size + 1;
    unsigned last = eoi; /* last code issued */
    int nused = 0;
    gif_code(g, clear, size);
    size_t n = (size_t)g->width * (size_t)g->height;
    unsigned cur = g->indices[0];
    for (size_t i = 1; i < n; i++) {
        uint8_t k = g->indices[i];
        uint16_t next = g->child[cur][k];
        if (next) {
            cur = next - 1u;
            continue;
        }
        gif_code(g, cur, size);
        last++;
        g->child[cur][k] = (uint16_t)(last + 1);
        g->used[nused++] = cur << 8 | k;
        if (last >= (1u << size) && size < 12) size++;
        if (last == GIF_MAX_CODES - 1) {
            gif_code(g, clear, size);
            for (int u = 0; u < nused; u++) g->child[g->used[u] >> 8][g->used[u] & 0xff] = 0;
            nused = 0;
            size = min_size + 1;
            last = eoi;
        }
        cur = k;
    }
    gif_code(g, cur, size);
    gif_code(g, eoi, size);
    gif_flush(g);
    for (int u = 0; u < nused; u++) g->child[g->used[u] >> 8][g->used[u] & 0xff] = 0;
    if (ferror(f)) {
        g->failed = fl_err_set(err, FL_IO_ERROR, "writing GIF %s failed: %s", g->out.path, strerror(errno));
        return g->failed;
    }
    g->frames++;
    return FL_OK;
}

int fl_gif_frames(const fl_gif_t *g) {
    return g ? g->frames : 0;
}

fl_status fl_gif_close(fl_gif_t *g, fl_err_t *err) {
    if (!g) return FL_OK;
    fl_status st = g->failed;
    if (st == FL_OK && g->frames == 0)
        st = fl_err_set(err, FL_FAILED_PRECONDITION, "GIF %s: no frame was added", g->out.path);
    if (st == FL_OK) fputc(0x3b, g->out.f); /* trailer */
    fl_status cst = out_close(&g->out, st == FL_OK, err);
    if (st == FL_OK) st = cst;
    free(g->child);
    free(g->indices);
    free(g);
    return st;
}

void fl_gif_abort(fl_gif_t *g) {
    if (!g) return;
    out_close(&g->out, 0, NULL);
    free(g->child);
    free(g->indices);
    free(g);
}

/* ---- PNG --------------------------------------------------------------------------- */

static void png_chunk(FILE *f, const char type[4], const uint8_t *data, size_t len) {
    uint8_t be[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    fwrite(be, 1, 4, f);
    fwrite(type, 1, 4, f);
    if (len) fwrite(data, 1, len, f);
    uLong crc = crc32(0L, (const Bytef *)type, 4);
    if (len) crc = crc32(crc, data, (uInt)len);
    uint8_t c[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
    fwrite(c, 1, 4, f);
}

fl_status fl_png_write(const char *path, const uint8_t *rgb, int width, int height, fl_err_t *err) {
    if (width < 1 || height < 1 || (int64_t)width * height > (int64_t)1 << 28)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "PNG %s: size %d x %d, expected >= 1 and <= 2^28 pixels", path,
                          width, height);
    size_t row = (size_t)width * 3 + 1; /* filter byte + pixels */
    size_t raw_len = row * (size_t)height;
    uint8_t *raw = malloc(raw_len);
    uLongf z_len = compressBound((uLong)raw_len);
    uint8_t *z = malloc(z_len);
    if (!raw || !z) {
        free(raw);
        free(z);
        return fl_err_set(err, FL_NO_MEMORY, "PNG %s: out of memory", path);
    }
    for (int y = 0; y < height; y++) {
        raw[(size_t)y * row] = 0; /* filter: none */
        memcpy(raw + (size_t)y * row + 1, rgb + (size_t)y * (size_t)width * 3, (size_t)width * 3);
    }
    int zr = compress2(z, &z_len, raw, (uLong)raw_len, 6);
    free(raw);
    if (zr != Z_OK) {
        free(z);
        return fl_err_set(err, FL_INTERNAL, "PNG %s: zlib compress2 failed (%d)", path, zr);
    }
    out_file_t o;
    fl_status st = out_open(&o, path, err);
    if (st != FL_OK) {
        free(z);
        return st;
    }
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    fwrite(sig, 1, 8, o.f);
    uint8_t ihdr[13] = {(uint8_t)(width >> 24),
                        (uint8_t)(width >> 16),
                        (uint8_t)(width >> 8),
                        (uint8_t)width,
                        (uint8_t)(height >> 24),
                        (uint8_t)(height >> 16),
                        (uint8_t)(height >> 8),
                        (uint8_t)height,
                        8 /* bit depth */,
                        2 /* colour type: RGB */,
                        0,
                        0,
                        0};
    png_chunk(o.f, "IHDR", ihdr, sizeof ihdr);
    png_chunk(o.f, "IDAT", z, z_len);
    png_chunk(o.f, "IEND", NULL, 0);
    free(z);
    return out_close(&o, 1, err);
}

uint8_t *fl_image_tile(const uint8_t *const *images, int n, int width, int height, int columns, int gap,
                       const uint8_t gap_rgb[3], int *out_w, int *out_h) {
    if (n < 1 || columns < 1 || width < 1 || height < 1 || gap < 0) return NULL;
    int cols = n < columns ? n : columns;
    int rows = (n + cols - 1) / cols;
    int w = cols * width + (cols + 1) * gap, h = rows * height + (rows + 1) * gap;
    uint8_t *out = malloc((size_t)w * (size_t)h * 3);
    if (!out) return NULL;
    for (size_t p = 0; p < (size_t)w * (size_t)h; p++) memcpy(out + 3 * p, gap_rgb, 3);
    for (int i = 0; i < n; i++) {
        int x0 = gap + (i % cols) * (width + gap), y0 = gap + (i / cols) * (height + gap);
        for (int y = 0; y < height; y++)
            memcpy(out + ((size_t)(y0 + y) * (size_t)w + (size_t)x0) * 3, images[i] + (size_t)y * (size_t)width * 3,
                   (size_t)width * 3);
    }
    *out_w = w;
    *out_h = h;
    return out;
}
