/* tfevents: TensorBoard event-file writer (see tfevents.h).
 *
 * Each record is assembled in one buffer (header, packed Event, CRC) and written with one
 * write(2) loop on an O_APPEND descriptor; `size` counts the bytes of whole records, and
 * a failed write truncates the file back to it. */
#include "common/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "tensorboard.pb-c.h"

struct fl_tfevents {
    int fd;
    char *path;
    uint64_t size;      /* bytes of whole records in the file */
    unsigned char *buf; /* the record being written */
    size_t cap;
};

/* The next <seq> of a file name, shared by all writers of the process. */
static _Atomic unsigned long g_seq;

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes ev as one record. On failure the file is cut back to w->size. */
static fl_status write_event(fl_tfevents_t *w, const Tensorboard__Event *ev, fl_err_t *err) {
    size_t len = tensorboard__event__get_packed_size(ev);
    size_t need = 12 + len + 4;
    if (need > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < need) cap *= 2;
        unsigned char *nb = realloc(w->buf, cap);
        if (!nb)
            return fl_err_set(err, FL_NO_MEMORY, "tfevents %s: out of memory for a %zu-byte record", w->path, need);
        w->buf = nb;
        w->cap = cap;
    }
    unsigned char *b = w->buf;
    put_le64(b, (uint64_t)len);
    put_le32(b + 8, fl_crc32c_mask(fl_crc32c(b, 8)));
    size_t packed = tensorboard__event__pack(ev, b + 12);
    if (packed != len)
        return fl_err_set(err, FL_INTERNAL, "tfevents %s: an event packed to %zu bytes, expected %zu", w->path, packed,
                          len);
    put_le32(b + 12 + len, fl_crc32c_mask(fl_crc32c(b + 12, len)));
    size_t done = 0;
    while (done < need) {
        ssize_t k = write(w->fd, b + done, need - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            /* Cut a partial record off, so that the file stays a sequence of whole records. */
            int cut = done == 0 || ftruncate(w->fd, (off_t)w->size) == 0;
            return fl_err_set(err, FL_IO_ERROR, "tfevents %s: cannot write a %zu-byte record: %s%s", w->path, need,
                              strerror(e), cut ? "" : " (and cannot cut the partial record off)");
        }
        done += (size_t)k;
    }
    w->size += need;
    return FL_OK;
}

fl_status fl_tfevents_open(const char *dir, fl_tfevents_t **out, fl_err_t *err) {
    if (!out) return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents: no place for the writer (out is NULL)");
    *out = NULL;
    if (!dir || !*dir) return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents: empty folder name");
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    fl_tfevents_t *w = calloc(1, sizeof *w);
    size_t plen = strlen(dir) + 64 + sizeof host;
    if (w) w->path = malloc(plen);
    if (!w || !w->path) {
        free(w);
        return fl_err_set(err, FL_NO_MEMORY, "tfevents %s: out of memory", dir);
    }
    long long secs = (long long)time(NULL);
    for (int tries = 0;; tries++) {
        unsigned long seq = g_seq++;
        snprintf(w->path, plen, "%s/events.out.tfevents.%lld.%s.%ld.%lu", dir, secs, host, (long)getpid(), seq);
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (w->fd >= 0) break;
        int e = errno;
        if (e == EEXIST && tries < 1000) continue;
        fl_status st = fl_err_set(err, e == ENOENT || e == ENOTDIR ? FL_NOT_FOUND : FL_IO_ERROR,
                                  "tfevents: cannot create %s: %s", w->path, strerror(e));
        free(w->path);
        free(w);
        return st;
    }
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = now_s();
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)FL_TFEVENTS_FILE_VERSION;
    fl_status st = write_event(w, &ev, err);
    if (st != FL_OK) {
        unlink(w->path);
        fl_tfevents_close(w);
        return st;
    }
    *out = w;
    return FL_OK;
}

const char *fl_tfevents_path(const fl_tfevents_t *w) { return w ? w->path : NULL; }

/* Strict UTF-8 as protobuf checks it: no overlong forms, surrogates or values past
 * U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned min, cp;
        if ((c & 0xe0) == 0xc0) k = 1, min = 0x80, cp = c & 0x1f;
        else if ((c & 0xf0) == 0xe0) k = 2, min = 0x800, cp = c & 0x0f;
        else if ((c & 0xf8) == 0xf0) k = 3, min = 0x10000, cp = c & 0x07;
        else return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

/* Round to nearest float32. A finite double at or past FLT_MAX plus half its ulp (2^103)
 * rounds to inf; the cast of such a value is undefined in ISO C, so it is done here. */
static float to_f32(double v) {
    if (!isnan(v) && fabs(v) >= 0x1.ffffffp127) return v > 0 ? INFINITY : -INFINITY;
    return (float)v;
}

fl_status fl_tfevents_scalars(fl_tfevents_t *w, int64_t step, double wall_time, int n, const char *const *tags,
                              const double *values, fl_err_t *err) {
    if (!w) return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents: no writer (NULL)");
    if (n < 1 || n > FL_TFEVENTS_VALUES_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: %d values in one event; expected 1 to %d", w->path, n,
                          FL_TFEVENTS_VALUES_MAX);
    if (!tags || !values)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: no %s list (NULL) for %d values", w->path,
                          tags ? "value" : "tag", n);
    for (int i = 0; i < n; i++) {
        if (!tags[i] || !tags[i][0])
            return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: tag %d is %s; expected 1 to %d bytes", w->path, i,
                              tags[i] ? "empty" : "NULL", FL_TFEVENTS_TAG_MAX);
        size_t len = strnlen(tags[i], FL_TFEVENTS_TAG_MAX + 1);
        if (len > FL_TFEVENTS_TAG_MAX)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: tag %d (\"%.40s...\") is longer than %d bytes",
                              w->path, i, tags[i], FL_TFEVENTS_TAG_MAX);
        if (!utf8_valid((const unsigned char *)tags[i], len))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: tag %d is not valid UTF-8", w->path, i);
    }
    Tensorboard__Summary__Value *vals = malloc((size_t)n * sizeof *vals);
    Tensorboard__Summary__Value **ptrs = malloc((size_t)n * sizeof *ptrs);
    if (!vals || !ptrs) {
        free(vals);
        free(ptrs);
        return fl_err_set(err, FL_NO_MEMORY, "tfevents %s: out of memory for %d values", w->path, n);
    }
    for (int i = 0; i < n; i++) {
        tensorboard__summary__value__init(&vals[i]);
        vals[i].tag = (char *)tags[i];
        vals[i].value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        vals[i].simple_value = to_f32(values[i]);
        ptrs[i] = &vals[i];
    }
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    sum.n_value = (size_t)n;
    sum.value = ptrs;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    fl_status st = write_event(w, &ev, err);
    free(vals);
    free(ptrs);
    return st;
}

fl_status fl_tfevents_scalar(fl_tfevents_t *w, const char *tag, int64_t step, double wall_time, double value,
                             fl_err_t *err) {
    return fl_tfevents_scalars(w, step, wall_time, 1, &tag, &value, err);
}

void fl_tfevents_close(fl_tfevents_t *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    free(w->path);
    free(w->buf);
    free(w);
}
