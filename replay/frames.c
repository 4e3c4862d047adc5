/* frames: chunks of distinct frames (see frames.h).
 *
 * Building a chunk splits every observation of the call into its frames straight into
 * the chunk's data (de-interleaving the last axis when stack > 1), hashes each frame and
 * looks it up in an open-addressing table of the frames kept so far; an equal frame
 * (hash, then memcmp) is reused and the copy is dropped, a new one stays. The chunk is
 * allocated for the worst case (every frame distinct) and shrunk at the end. */
#include "replay/frames.h"

#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

fl_status fl_frames_layout_init(fl_frames_layout_t *l, size_t obs_bytes, size_t elem_bytes, int last_dim, int stack,
                                int zstd_level, fl_err_t *err) {
    memset(l, 0, sizeof(*l));
    if (stack < 1 || stack > FL_FRAMES_MAX_STACK)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "frame_stack %d: expected 1 .. %d", stack, FL_FRAMES_MAX_STACK);
    if (stack > 1 && (last_dim < 1 || last_dim % stack != 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "frame_stack %d: the observation's last axis (%d entries) is not a multiple of it", stack,
                          last_dim);
    if (zstd_level < 0 || zstd_level > 19)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "zstd_level %d: expected 0 (off) .. 19", zstd_level);
    l->obs_bytes = obs_bytes;
    l->stack = stack;
    l->frame_bytes = obs_bytes / (size_t)stack;
    l->inner = stack > 1 ? (size_t)(last_dim / stack) * elem_bytes : l->frame_bytes;
    if (l->inner == 0) l->inner = 1;
    l->outer = l->frame_bytes / l->inner;
    l->zstd_level = zstd_level;
    return FL_OK;
}

size_t fl_chunk_alloc_bytes(const fl_chunk_t *c) {
    return sizeof(*c) + c->data_bytes;
}

void fl_chunk_release(fl_chunk_t *c, uint32_t k) {
    if (atomic_fetch_sub(&c->refs, k) == k) free(c);
}

/* 64-bit hash of n bytes: two multiply-xorshift lanes over 8-byte words. */
static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    const uint64_t m1 = UINT64_C(0x9e3779b97f4a7c15), m2 = UINT64_C(0xff51afd7ed558ccd);
    uint64_t a = n * m1, b = ~n * m2;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t w, v;
        memcpy(&w, p + i, 8);
        memcpy(&v, p + i + 8, 8);
        a = (a ^ w) * m2;
        a ^= a >> 29;
        b = (b ^ v) * m1;
        b ^= b >> 31;
    }
    if (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        a = (a ^ w) * m2;
        a ^= a >> 29;
        i += 8;
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        b = (b ^ w) * m1;
        b ^= b >> 31;
    }
    uint64_t h = (a ^ (b >> 17) ^ (b << 23)) * m1;
    return h ^ (h >> 32);
}

/* Copies frame k of the observation at obs into dst (frame_bytes). */
static void extract_frame(const fl_frames_layout_t *l, const uint8_t *obs, int k, uint8_t *dst) {
    if (l->stack == 1) {
        memcpy(dst, obs, l->frame_bytes);
        return;
    }
    const size_t in = l->inner, step = in * (size_t)l->stack;
    const uint8_t *src = obs + (size_t)k * in;
    if (in == 1) {
        for (size_t p = 0; p < l->outer; p++) dst[p] = src[p * step];
    } else {
        for (size_t p = 0; p < l->outer; p++) memcpy(dst + p * in, src + p * step, in);
    }
}

fl_status fl_chunk_build(const fl_frames_layout_t *l, size_t n, const void *obs, const void *next_obs, uint16_t *idx,
                         fl_chunk_t **out, fl_err_t *err) {
    *out = NULL;
    const size_t fb = l->frame_bytes, per = 2 * (size_t)l->stack;
    if (n == 0 || n > FL_CHUNK_MAX_FRAMES / per)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "chunk of %zu transitions: expected 1 .. %zu", n,
                          (size_t)FL_CHUNK_MAX_FRAMES / per);
    const size_t cand = n * per;
    size_t tab_len = 16;
    while (tab_len < 2 * cand) tab_len *= 2;
    /* The frames are gathered (and compressed) in scratch memory and the chunk is then
     * allocated at its final size: a chunk allocated for every candidate frame and shrunk
     * afterwards left a hole behind each one, which long-lived chunks freed in FIFO order
     * never filled (a full shard's resident memory kept growing). */
    uint32_t *tab = calloc(tab_len, sizeof(uint32_t)); /* frame index + 1, 0 = empty */
    uint64_t *hashes = malloc(cand * sizeof(uint64_t));
    uint8_t *frames = malloc(fb ? cand * fb : 1);
    uint8_t *packed = NULL; /* compressed: offsets, then the frames */
    ZSTD_CCtx *cctx = NULL;
    fl_chunk_t *c = NULL;
    fl_status st = FL_OK;
    if (!tab || !hashes || !frames) {
        st = fl_err_set(err, FL_NO_MEMORY, "chunk of %zu transitions: cannot allocate %zu bytes", n, cand * fb);
        goto done;
    }
    uint32_t nu = 0;
    for (size_t i = 0; i < n; i++) {
        for (int which = 0; which < 2; which++) {
            const uint8_t *o = (const uint8_t *)(which ? next_obs : obs) + i * l->obs_bytes;
            for (int k = 0; k < l->stack; k++) {
                uint8_t *slot = frames + (size_t)nu * fb; /* the frame lands here; kept if new */
                extract_frame(l, o, k, slot);
                uint64_t h = hash_bytes(slot, fb);
                size_t pos = (size_t)h & (tab_len - 1);
                uint32_t found = UINT32_MAX;
                while (tab[pos]) {
                    uint32_t u = tab[pos] - 1;
                    if (hashes[u] == h && memcmp(frames + (size_t)u * fb, slot, fb) == 0) {
                        found = u;
                        break;
                    }
                    pos = (pos + 1) & (tab_len - 1);
                }
                if (found == UINT32_MAX) {
                    found = nu;
                    hashes[nu] = h;
                    tab[pos] = ++nu;
                }
                idx[i * per + (size_t)which * (size_t)l->stack + (size_t)k] = (uint16_t)found;
            }
        }
    }
    const uint8_t *data = frames;
    size_t data_bytes = (size_t)nu * fb;
    if (l->zstd_level > 0) {
        size_t bound = ZSTD_compressBound(fb), head = ((size_t)nu + 1) * sizeof(uint32_t);
        size_t cap = head + (size_t)nu * bound;
        if (cap > UINT32_MAX) {
            st = fl_err_set(err, FL_INVALID_ARGUMENT, "chunk of %u frames of %zu bytes: cannot compress (%zu bytes)",
                            nu, fb, cap);
            goto done;
        }
        packed = malloc(cap);
        cctx = ZSTD_createCCtx();
        if (!packed || !cctx) {
            st = fl_err_set(err, FL_NO_MEMORY, "chunk of %u frames of %zu bytes: cannot compress (%zu bytes)", nu, fb,
                            cap);
            goto done;
        }
        uint32_t at = (uint32_t)head;
        for (uint32_t f = 0; f < nu; f++) {
            memcpy(packed + (size_t)f * 4, &at, 4);
            size_t m = ZSTD_compressCCtx(cctx, packed + at, cap - at, frames + (size_t)f * fb, fb, l->zstd_level);
            if (ZSTD_isError(m)) {
                st = fl_err_set(err, FL_INTERNAL, "zstd: %s", ZSTD_getErrorName(m));
                goto done;
            }
            at += (uint32_t)m;
        }
        memcpy(packed + (size_t)nu * 4, &at, 4);
        data = packed;
        data_bytes = at;
    }
    c = malloc(sizeof(fl_chunk_t) + (data_bytes ? data_bytes : 1));
    if (!c) {
        st = fl_err_set(err, FL_NO_MEMORY, "chunk of %u frames: cannot allocate %zu bytes", nu, data_bytes);
        goto done;
    }
    atomic_init(&c->refs, 0);
    c->rows = 0;
    c->nframes = nu;
    c->compressed = l->zstd_level > 0;
    c->data_bytes = data_bytes;
    memcpy(c->data, data, data_bytes);
    *out = c;
done:
    free(tab);
    free(hashes);
    free(frames);
    free(packed);
    ZSTD_freeCCtx(cctx);
    return st;
}

fl_status fl_chunk_from_data(const fl_frames_layout_t *l, uint32_t nframes, uint32_t compressed, const void *data,
                             size_t data_bytes, fl_chunk_t **out, fl_err_t *err) {
    *out = NULL;
    const size_t fb = l->frame_bytes;
    if (nframes < 1 || nframes > FL_CHUNK_MAX_FRAMES)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "chunk of %u frames: expected 1 .. %u", nframes,
                          FL_CHUNK_MAX_FRAMES);
    if (compressed > 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "chunk compression flag %u: expected 0 or 1", compressed);
    if (!compressed && data_bytes != (size_t)nframes * fb)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "raw chunk of %u frames: %zu bytes, expected %zu", nframes,
                          data_bytes, (size_t)nframes * fb);
    const uint8_t *d = data;
    if (compressed) {
        size_t head = ((size_t)nframes + 1) * 4;
        if (data_bytes < head || data_bytes > UINT32_MAX)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "compressed chunk of %u frames: %zu bytes", nframes,
                              data_bytes);
        uint8_t *tmp = malloc(fb ? fb : 1);
        ZSTD_DCtx *dctx = ZSTD_createDCtx();
        if (!tmp || !dctx) {
            free(tmp);
            ZSTD_freeDCtx(dctx);
            return fl_err_set(err, FL_NO_MEMORY, "compressed chunk: out of memory");
        }
        fl_status s = FL_OK;
        uint32_t prev = 0;
        for (uint32_t f = 0; f <= nframes && s == FL_OK; f++) {
            uint32_t o;
            memcpy(&o, d + (size_t)f * 4, 4);
            if ((f == 0 && o != head) || (f > 0 && o <= prev) || o > data_bytes || (f == nframes && o != data_bytes))
                s = fl_err_set(err, FL_INVALID_ARGUMENT, "compressed chunk: frame offset %u = %u out of order", f, o);
            else if (f > 0) {
                size_t m = ZSTD_decompressDCtx(dctx, tmp, fb, d + prev, o - prev);
                if (ZSTD_isError(m) || m != fb)
                    s = fl_err_set(err, FL_INVALID_ARGUMENT,
                                   "compressed chunk: frame %u does not decompress to %zu bytes (%s)", f - 1, fb,
                                   ZSTD_isError(m) ? ZSTD_getErrorName(m) : "wrong size");
            }
            prev = o;
        }
        free(tmp);
        ZSTD_freeDCtx(dctx);
        if (s != FL_OK) return s;
    }
    fl_chunk_t *c = malloc(sizeof(fl_chunk_t) + (data_bytes ? data_bytes : 1));
    if (!c) return fl_err_set(err, FL_NO_MEMORY, "chunk of %zu bytes: out of memory", data_bytes);
    atomic_init(&c->refs, 0);
    c->rows = 0;
    c->nframes = nframes;
    c->compressed = compressed;
    c->data_bytes = data_bytes;
    if (data_bytes) memcpy(c->data, data, data_bytes);
    *out = c;
    return FL_OK;
}

struct fl_frames_reader {
    ZSTD_DCtx *dctx;
    uint8_t *buf; /* stack * frame_bytes */
};

fl_status fl_frames_reader_create(const fl_frames_layout_t *l, fl_frames_reader_t **out, fl_err_t *err) {
    *out = NULL;
    fl_frames_reader_t *r = calloc(1, sizeof(*r));
    if (r) {
        r->dctx = ZSTD_createDCtx();
        r->buf = malloc(l->obs_bytes ? l->obs_bytes : 1);
    }
    if (!r || !r->dctx || !r->buf) {
        fl_frames_reader_destroy(r);
        return fl_err_set(err, FL_NO_MEMORY, "frame reader: out of memory");
    }
    *out = r;
    return FL_OK;
}

void fl_frames_reader_destroy(fl_frames_reader_t *r) {
    if (!r) return;
    ZSTD_freeDCtx(r->dctx);
    free(r->buf);
    free(r);
}

/* Frame f of a compressed chunk decompressed into dst; 0 or -1. */
static int unpack(const fl_frames_layout_t *l, const fl_chunk_t *c, uint16_t f, fl_frames_reader_t *r, void *dst) {
    uint32_t a, b;
    memcpy(&a, c->data + (size_t)f * 4, 4);
    memcpy(&b, c->data + (size_t)f * 4 + 4, 4);
    size_t m = ZSTD_decompressDCtx(r->dctx, dst, l->frame_bytes, c->data + a, b - a);
    return ZSTD_isError(m) || m != l->frame_bytes ? -1 : 0;
}

/* o[4 p + k] = f[k][p] for p < n: four one-byte-a-pixel frames interleaved pixel by
 * pixel, an Atari observation's (84, 84, 4). SSE2 (every x86-64) does 16 pixels a step:
 * bytes of frames 0 and 1, and of 2 and 3, paired, then the pairs paired. */
static void interleave4(const uint8_t *const f[4], size_t n, uint8_t *o) {
    size_t p = 0;
#if defined(__SSE2__)
    for (; p + 16 <= n; p += 16) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(f[0] + p));
        const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(f[1] + p));
        const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(f[2] + p));
        const __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(f[3] + p));
        const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b); /* a0 b0 a1 b1 ... */
        const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
        uint8_t *q = o + 4 * p;
        _mm_storeu_si128((__m128i *)(void *)q, _mm_unpacklo_epi16(ab0, cd0)); /* pixels 0-3: a0 b0 c0 d0 a1 ... */
        _mm_storeu_si128((__m128i *)(void *)(q + 16), _mm_unpackhi_epi16(ab0, cd0));
        _mm_storeu_si128((__m128i *)(void *)(q + 32), _mm_unpacklo_epi16(ab1, cd1));
        _mm_storeu_si128((__m128i *)(void *)(q + 48), _mm_unpackhi_epi16(ab1, cd1));
    }
#endif
    for (; p < n; p++) {
        o[4 * p] = f[0][p];
        o[4 * p + 1] = f[1][p];
        o[4 * p + 2] = f[2][p];
        o[4 * p + 3] = f[3][p];
    }
}

int fl_frames_gather(const fl_frames_layout_t *l, const fl_chunk_t *c, const uint16_t *idx, fl_frames_reader_t *r,
                     void *out) {
    const size_t fb = l->frame_bytes;
    uint8_t *o = out;
    if (c->compressed && !r) return -1;
    if (l->stack == 1) {
        if (c->compressed) return unpack(l, c, idx[0], r, o);
        memcpy(o, c->data + (size_t)idx[0] * fb, fb);
        return 0;
    }
    const uint8_t *fp[FL_FRAMES_MAX_STACK];
    for (int k = 0; k < l->stack; k++) {
        if (c->compressed) {
            if (unpack(l, c, idx[k], r, r->buf + (size_t)k * fb) != 0) return -1;
            fp[k] = r->buf + (size_t)k * fb;
        } else {
            fp[k] = c->data + (size_t)idx[k] * fb;
        }
    }
    const size_t in = l->inner, S = (size_t)l->stack;
    if (l->outer == 1) {
        for (size_t k = 0; k < S; k++) memcpy(o + k * in, fp[k], in);
    } else if (in == 1 && S == 4) {
        interleave4(fp, l->outer, o);
    } else if (in == 1) {
        for (size_t p = 0; p < l->outer; p++)
            for (size_t k = 0; k < S; k++) o[p * S + k] = fp[k][p];
    } else {
        for (size_t p = 0; p < l->outer; p++)
            for (size_t k = 0; k < S; k++) memcpy(o + (p * S + k) * in, fp[k] + p * in, in);
    }
    return 0;
}
