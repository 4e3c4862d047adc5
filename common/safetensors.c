/* safetensors: writer and validating reader (see safetensors.h).
 *
 * The reader parses the header with a small strict recursive-descent parser that knows
 * the schema (an object of tensor entries and one optional "__metadata__" object of
 * strings), so that nothing unexpected is accepted silently. */
#include "common/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsync.h"

static const char *const DTYPE_NAMES[] = {"F32", "F64", "BF16", "U8", "I32", "I64"};
static const size_t DTYPE_SIZES[] = {4, 8, 2, 1, 4, 8};
#define NUM_DTYPES 6

const char *fl_st_dtype_name(fl_st_dtype d) {
    return (unsigned)d < NUM_DTYPES ? DTYPE_NAMES[d] : "invalid";
}
size_t fl_st_dtype_size(fl_st_dtype d) {
    return (unsigned)d < NUM_DTYPES ? DTYPE_SIZES[d] : 0;
}

/* ---- writing ------------------------------------------------------------------------ */

static int json_safe(const char *s) {
    if (!s) return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\') return 0;
    return 1;
}

/* Appends to a growing buffer; 0 on out of memory. */
typedef struct {
    char *b;
    size_t len, cap;
} sbuf_t;

static int sb_add(sbuf_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sb_add(sbuf_t *s, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(s->b ? s->b + s->len : NULL, s->b ? s->cap - s->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return 0;
        if (s->b && s->len + (size_t)n < s->cap) {
            s->len += (size_t)n;
            return 1;
        }
        size_t cap = s->cap ? s->cap * 2 : 1024;
        while (cap < s->len + (size_t)n + 1) cap *= 2;
        char *nb = realloc(s->b, cap);
        if (!nb) return 0;
        s->b = nb;
        s->cap = cap;
    }
}

static _Atomic unsigned long g_serial;

fl_status fl_safetensors_write(const char *path, const fl_st_tensor_t *t, int n, const char *const *meta_keys,
                               const char *const *meta_values, int nmeta, fl_err_t *err) {
    if (!path || !*path) return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors: empty path");
    if (strlen(path) > 4000) return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors: path longer than 4000 bytes");
    if (n < 0 || nmeta < 0 || (n && !t) || (nmeta && (!meta_keys || !meta_values)))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors %s: bad tensor or metadata list", path);
    for (int i = 0; i < n; i++) {
        if (!t[i].name[0] || !json_safe(t[i].name) || !strcmp(t[i].name, "__metadata__"))
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "safetensors %s: tensor %d: name \"%.64s\" is empty, reserved "
                              "or not JSON-safe",
                              path, i, t[i].name);
        for (int j = 0; j < i; j++)
            if (!strcmp(t[i].name, t[j].name))
                return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors %s: tensor name \"%s\" appears twice", path,
                                  t[i].name);
        if ((unsigned)t[i].dtype >= NUM_DTYPES || t[i].rank < 0 || t[i].rank > FL_ST_MAX_RANK)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors %s: tensor %s: bad dtype or rank %d", path,
                              t[i].name, t[i].rank);
        size_t want = fl_st_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].rank; d++) {
            if (t[i].shape[d] < 0)
                return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors %s: tensor %s: dimension %d is %" PRId64, path,
                                  t[i].name, d, t[i].shape[d]);
            if (t[i].shape[d] != 0 && want > SIZE_MAX / (size_t)t[i].shape[d])
                return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors %s: tensor %s: its size overflows", path,
                                  t[i].name);
            want *= (size_t)t[i].shape[d];
        }
        if (want != t[i].bytes || (want && !t[i].data))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors %s: tensor %s: %zu bytes, its shape needs %zu",
                              path, t[i].name, t[i].bytes, want);
    }
    for (int i = 0; i < nmeta; i++)
        if (!json_safe(meta_keys[i]) || !json_safe(meta_values[i]))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors %s: metadata %d is not JSON-safe text", path, i);

    /* Data in order of decreasing element size (stable), as the reference implementation
     * does, so that every tensor starts aligned to its element size. */
    int *order = malloc((size_t)(n ? n : 1) * sizeof(int));
    if (!order) return fl_err_set(err, FL_NO_MEMORY, "safetensors %s: out of memory", path);
    int no = 0;
    for (size_t size = 8; size >= 1; size /= 2)
        for (int i = 0; i < n; i++)
            if (fl_st_dtype_size(t[i].dtype) == size) order[no++] = i;
    sbuf_t h = {0};
    int ok = sb_add(&h, "{");
    if (nmeta) {
        ok = ok && sb_add(&h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++)
            ok = ok && sb_add(&h, "%s\"%s\":\"%s\"", i ? "," : "", meta_keys[i], meta_values[i]);
        ok = ok && sb_add(&h, "}");
    }
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        const fl_st_tensor_t *x = &t[order[k]];
        ok = ok && sb_add(&h, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", (nmeta || k) ? "," : "", x->name,
                          fl_st_dtype_name(x->dtype));
        for (int d = 0; d < x->rank; d++) ok = ok && sb_add(&h, "%s%" PRId64, d ? "," : "", x->shape[d]);
        ok = ok && sb_add(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + x->bytes);
        off += x->bytes;
    }
    ok = ok && sb_add(&h, "}");
    while (ok && h.len % 8) ok = sb_add(&h, " ");
    if (!ok) {
        free(h.b);
        free(order);
        return fl_err_set(err, FL_NO_MEMORY, "safetensors %s: out of memory for the header", path);
    }

    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), (unsigned long)g_serial++);
    FILE *f = fopen(tmp, "wb");
    fl_status st = FL_OK;
    if (!f) {
        st = fl_err_set(err, FL_INTERNAL, "safetensors %s: cannot create %s: %s", path, tmp, strerror(errno));
        free(h.b);
        free(order);
        return st;
    }
    uint64_t hl = h.len;
    ok = fwrite(&hl, 8, 1, f) == 1 && fwrite(h.b, 1, h.len, f) == h.len;
    for (int k = 0; ok && k < n; k++) {
        const fl_st_tensor_t *x = &t[order[k]];
        ok = x->bytes == 0 || fwrite(x->data, 1, x->bytes, f) == x->bytes;
    }
    free(h.b);
    free(order);
    if (!ok || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        st = fl_err_set(err, FL_INTERNAL, "safetensors %s: cannot write %s: %s", path, tmp, strerror(errno));
        fclose(f);
        unlink(tmp);
        return st;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        st = fl_err_set(err, FL_INTERNAL, "safetensors %s: cannot close or rename %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
        return st;
    }
    if ((st = fl_fsync_parent(path, err)) != FL_OK) fl_err_prefix(err, "safetensors %s", path);
    return st;
}

/* ---- reading ------------------------------------------------------------------------ */

struct fl_safetensors {
    uint8_t *file; /* the whole file */
    size_t len;
    fl_st_tensor_t *t;
    int n, cap;
    char **mk, **mv; /* metadata */
    int nm, mcap;
};

typedef struct {
    const char *p, *end, *start;
    const char *what;
    fl_err_t *err;
    fl_status st;
} parser_t;

static int fail(parser_t *ps, const char *msg) {
    if (ps->st == FL_OK) ps->st = fl_err_set(ps->err, FL_INVALID_ARGUMENT, "safetensors %s: header: %s", ps->what, msg);
    return 0;
}

static void skip_ws(parser_t *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int expect(parser_t *ps, char c) {
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != c) {
        char m[64];
        snprintf(m, sizeof m, "expected '%c' at byte %zu of the header", c, (size_t)(ps->p - ps->start));
        return fail(ps, m);
    }
    ps->p++;
    return 1;
}

static int hex_digit(char h) {
    return h >= '0' && h <= '9'   ? h - '0'
           : h >= 'a' && h <= 'f' ? h - 'a' + 10
           : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                  : -1;
}

/* A JSON string into out (cap bytes, NUL-terminated); escapes \" \\ \/ \b \f \n \r \t and
 * \u00XX. */
static int parse_string(parser_t *ps, char *out, size_t cap) {
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "expected a string");
    ps->p++;
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p++;
        if (c < 0x20) return fail(ps, "control character in a string");
        if (c == '\\') {
            if (ps->p >= ps->end) return fail(ps, "unfinished escape");
            char e = *ps->p++;
            switch (e) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                if (ps->end - ps->p < 4 || ps->p[0] != '0' || ps->p[1] != '0')
                    return fail(ps, "unsupported \\u escape");
                int hi = hex_digit(ps->p[2]), lo = hex_digit(ps->p[3]);
                if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return fail(ps, "bad \\u escape");
                unsigned v = (unsigned)(hi * 16 + lo);
                c = (unsigned char)v;
                ps->p += 4;
                break;
            }
            default: return fail(ps, "unknown escape in a string");
            }
        }
        if (n + 1 >= cap) return fail(ps, "string too long");
        out[n++] = (char)c;
    }
    if (ps->p >= ps->end) return fail(ps, "unterminated string");
    ps->p++;
    out[n] = '\0';
    return 1;
}

static int parse_uint(parser_t *ps, uint64_t *v) {
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "expected a non-negative integer");
    if (*ps->p == '0' && ps->p + 1 < ps->end && ps->p[1] >= '0' && ps->p[1] <= '9')
        return fail(ps, "integer with a leading zero");
    uint64_t x = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        if (x > (UINT64_C(1) << 53)) return fail(ps, "integer too large");
        x = x * 10 + (uint64_t)(*ps->p++ - '0');
    }
    *v = x;
    return 1;
}

/* [n, n, ...] into v (at most cap entries); *count receives the count. */
static int parse_uint_array(parser_t *ps, uint64_t *v, int cap, int *count) {
    if (!expect(ps, '[')) return 0;
    *count = 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return 1;
    }
    for (;;) {
        if (*count == cap) return fail(ps, "array too long");
        if (!parse_uint(ps, &v[(*count)++])) return 0;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        return expect(ps, ']');
    }
}

static int add_meta(fl_safetensors_t *f, parser_t *ps, const char *k, const char *v) {
    for (int i = 0; i < f->nm; i++)
        if (!strcmp(f->mk[i], k)) return fail(ps, "metadata key appears twice");
    if (f->nm == f->mcap) {
        int cap = f->mcap ? 2 * f->mcap : 8;
        char **a = realloc(f->mk, (size_t)cap * sizeof(char *)), **b = NULL;
        if (a) f->mk = a;
        if (a) b = realloc(f->mv, (size_t)cap * sizeof(char *));
        if (!a || !b) return fail(ps, "out of memory");
        f->mv = b;
        f->mcap = cap;
    }
    f->mk[f->nm] = strdup(k);
    f->mv[f->nm] = strdup(v);
    if (!f->mk[f->nm] || !f->mv[f->nm]) {
        free(f->mk[f->nm]);
        free(f->mv[f->nm]);
        return fail(ps, "out of memory");
    }
    f->nm++;
    return 1;
}

#define META_KEY_MAX 4096
#define META_VALUE_MAX 65536

static int parse_metadata(fl_safetensors_t *f, parser_t *ps) {
    if (!expect(ps, '{')) return 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return 1;
    }
    char *k = malloc(META_KEY_MAX), *v = malloc(META_VALUE_MAX);
    int ok = k && v ? 1 : fail(ps, "out of memory");
    while (ok) {
        ok = parse_string(ps, k, META_KEY_MAX) && expect(ps, ':') && parse_string(ps, v, META_VALUE_MAX) &&
             add_meta(f, ps, k, v);
        if (!ok) break;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        ok = expect(ps, '}');
        break;
    }
    free(k);
    free(v);
    return ok;
}

/* One tensor entry's object; offsets into begin/end. */
static int parse_tensor(parser_t *ps, fl_st_tensor_t *t, uint64_t *begin, uint64_t *end) {
    char key[32], val[32];
    int have_dtype = 0, have_shape = 0, have_off = 0;
    if (!expect(ps, '{')) return 0;
    for (;;) {
        if (!parse_string(ps, key, sizeof key) || !expect(ps, ':')) return 0;
        if (!strcmp(key, "dtype")) {
            if (have_dtype++ || !parse_string(ps, val, sizeof val)) return have_dtype > 1 ? fail(ps, "dtype twice") : 0;
            int d = -1;
            for (int i = 0; i < NUM_DTYPES; i++)
                if (!strcmp(val, DTYPE_NAMES[i])) d = i;
            if (d < 0) return fail(ps, "unsupported dtype (expected F32, F64, BF16, U8, I32 or I64)");
            t->dtype = (fl_st_dtype)d;
        } else if (!strcmp(key, "shape")) {
            uint64_t dims[FL_ST_MAX_RANK];
            int rank = 0;
            if (have_shape++ || !parse_uint_array(ps, dims, FL_ST_MAX_RANK, &rank))
                return have_shape > 1 ? fail(ps, "shape twice") : 0;
            t->rank = rank;
            for (int i = 0; i < rank; i++) t->shape[i] = (int64_t)dims[i];
        } else if (!strcmp(key, "data_offsets")) {
            uint64_t o[2];
            int cnt = 0;
            if (have_off++ || !parse_uint_array(ps, o, 2, &cnt)) return have_off > 1 ? fail(ps, "offsets twice") : 0;
            if (cnt != 2) return fail(ps, "data_offsets must hold two integers");
            *begin = o[0];
            *end = o[1];
        } else {
            return fail(ps, "unknown key in a tensor entry (expected dtype, shape, data_offsets)");
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (!expect(ps, '}')) return 0;
        break;
    }
    if (!have_dtype || !have_shape || !have_off) return fail(ps, "a tensor entry lacks dtype, shape or data_offsets");
    return 1;
}

/* By start, then by end: an empty tensor at the start of another comes first, whatever
 * the header's order (qsort does not keep ties in place). */
static int cmp_begin(const void *a, const void *b) {
    const fl_st_tensor_t *x = a, *y = b;
    const uint8_t *p = x->data, *q = y->data;
    if (p != q) return p < q ? -1 : 1;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

/* One tensor entry "name": {...} of the header (its name already read): its dtype, shape
 * and offsets, checked against the buffer. 0 after fail(). */
static int parse_tensor_entry(fl_safetensors_t *f, parser_t *ps, const char *name, const uint8_t *buf, size_t buf_len) {
    if (strlen(name) >= FL_ST_NAME_MAX) {
        fail(ps, "tensor name too long");
        return 0;
    }
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) {
            fail(ps, "a tensor name appears twice");
            return 0;
        }
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        fl_st_tensor_t *nt = realloc(f->t, (size_t)cap * sizeof *nt);
        if (!nt) {
            fail(ps, "out of memory");
            return 0;
        }
        f->t = nt;
        f->cap = cap;
    }
    fl_st_tensor_t *t = &f->t[f->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    uint64_t b = 0, e = 0;
    if (!parse_tensor(ps, t, &b, &e)) return 0;
    uint64_t want = fl_st_dtype_size(t->dtype);
    for (int d = 0; d < t->rank; d++) {
        if (t->shape[d] != 0 && want > UINT64_MAX / (uint64_t)t->shape[d]) {
            fail(ps, "a tensor's size overflows");
            return 0;
        }
        want *= (uint64_t)t->shape[d];
    }
    if (e < b || e > buf_len || e - b != want) {
        char m[256];
        snprintf(m, sizeof m,
                 "tensor %.64s: data_offsets [%" PRIu64 ", %" PRIu64 "] for %" PRIu64
                 " bytes of %s %s; the buffer holds %zu",
                 t->name, b, e, want, fl_st_dtype_name(t->dtype), "data", buf_len);
        fail(ps, m);
        return 0;
    }
    t->data = buf + b;
    t->bytes = (size_t)want;
    f->n++;
    return 1;
}

/* The tensors, in the order of their offsets, must tile the buffer exactly. */
static fl_status check_tiling(fl_safetensors_t *f, const uint8_t *buf, size_t buf_len, const char *what,
                              fl_err_t *err) {
    if (f->n) qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_begin);
    size_t at = 0;
    for (int i = 0; i < f->n; i++) {
        size_t b = (size_t)((const uint8_t *)f->t[i].data - buf);
        if (b != at)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "safetensors %s: tensor %s starts at byte %zu of the buffer, expected "
                              "%zu (tensors overlap or leave a gap)",
                              what, f->t[i].name, b, at);
        at += f->t[i].bytes;
    }
    if (at != buf_len)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors %s: the tensors cover %zu of the buffer's %zu bytes",
                          what, at, buf_len);
    return FL_OK;
}

fl_status fl_safetensors_parse(const void *bytes, size_t len, const char *what, fl_safetensors_t **out, fl_err_t *err) {
    *out = NULL;
    if (len < 8)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "safetensors %s: %zu bytes, too short for the header length", what,
                          len);
    uint64_t hl;
    memcpy(&hl, bytes, 8);
    if (hl < 2 || hl > FL_ST_MAX_HEADER || hl > len - 8)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "safetensors %s: header length %" PRIu64
                          ", expected 2 .. min(%u, %zu) (the file's size "
                          "less 8)",
                          what, hl, FL_ST_MAX_HEADER, len - 8);
    fl_safetensors_t *f = calloc(1, sizeof *f);
    if (!f || !(f->file = malloc(len))) {
        free(f);
        return fl_err_set(err, FL_NO_MEMORY, "safetensors %s: out of memory for %zu bytes", what, len);
    }
    memcpy(f->file, bytes, len);
    f->len = len;
    const uint8_t *buf = f->file + 8 + hl;
    const size_t buf_len = len - 8 - (size_t)hl;
    parser_t ps = {
        (const char *)f->file + 8, (const char *)f->file + 8 + hl, (const char *)f->file + 8, what, err, FL_OK};
    char name[FL_ST_NAME_MAX * 4];
    if (!expect(&ps, '{')) goto bad;
    skip_ws(&ps);
    if (ps.p < ps.end && *ps.p == '}') {
        ps.p++;
    } else {
        int seen_meta = 0;
        for (;;) {
            if (!parse_string(&ps, name, sizeof name) || !expect(&ps, ':')) goto bad;
            if (!strcmp(name, "__metadata__")) {
                if (seen_meta++) {
                    fail(&ps, "__metadata__ twice");
                    goto bad;
                }
                if (!parse_metadata(f, &ps)) goto bad;
            } else {
                if (!parse_tensor_entry(f, &ps, name, buf, buf_len)) goto bad;
            }
            skip_ws(&ps);
            if (ps.p < ps.end && *ps.p == ',') {
                ps.p++;
                continue;
            }
            if (!expect(&ps, '}')) goto bad;
            break;
        }
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        fail(&ps, "bytes after the header's object");
        goto bad;
    }
    if ((ps.st = check_tiling(f, buf, buf_len, what, err)) != FL_OK) goto bad;
    *out = f;
    return FL_OK;
bad:
    fl_safetensors_free(f);
    return ps.st != FL_OK ? ps.st : FL_INVALID_ARGUMENT;
}

fl_status fl_safetensors_read(const char *path, fl_safetensors_t **out, fl_err_t *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return fl_err_set(err, errno == ENOENT ? FL_NOT_FOUND : FL_INTERNAL, "safetensors %s: cannot open: %s", path,
                          strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fclose(f);
        return fl_err_set(err, FL_INTERNAL, "safetensors %s: cannot stat: %s", path, strerror(errno));
    }
    size_t len = (size_t)st.st_size;
    uint8_t *b = malloc(len ? len : 1);
    if (!b) {
        fclose(f);
        return fl_err_set(err, FL_NO_MEMORY, "safetensors %s: out of memory for %zu bytes", path, len);
    }
    size_t got = len ? fread(b, 1, len, f) : 0;
    fclose(f);
    fl_status s = got == len ? fl_safetensors_parse(b, len, path, out, err)
                             : fl_err_set(err, FL_INTERNAL, "safetensors %s: read %zu of %zu bytes", path, got, len);
    free(b);
    return s;
}

void fl_safetensors_free(fl_safetensors_t *f) {
    if (!f) return;
    for (int i = 0; i < f->nm; i++) {
        free(f->mk[i]);
        free(f->mv[i]);
    }
    free(f->mk);
    free(f->mv);
    free(f->t);
    free(f->file);
    free(f);
}

int fl_safetensors_count(const fl_safetensors_t *f) {
    return f->n;
}
const fl_st_tensor_t *fl_safetensors_at(const fl_safetensors_t *f, int i) {
    return i >= 0 && i < f->n ? &f->t[i] : NULL;
}
const fl_st_tensor_t *fl_safetensors_find(const fl_safetensors_t *f, const char *name) {
    for (int i = 0; name && i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}
const char *fl_safetensors_meta(const fl_safetensors_t *f, const char *key) {
    for (int i = 0; key && i < f->nm; i++)
        if (!strcmp(f->mk[i], key)) return f->mv[i];
    return NULL;
}
