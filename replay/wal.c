/* wal: the segmented write-ahead log (see wal.h).
 *
 * The writer keeps one file descriptor open on the current segment (O_WRONLY | O_APPEND)
 * and its size; a record is framed into one buffer (reused, grown as needed) and written
 * with one write(2) loop. After a failed write the segment is cut back to the size it had
 * before, so that a half-written record never sits in the middle of a segment. The reader
 * lists the segment files with readdir, then reads each record with pread into one buffer
 * (so memory is one record, whatever the segment size). */
#include "replay/wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/fsync.h"

struct fl_wal {
    char *dir;
    int shard;
    int fsync;
    int broken; /* a failed append could not be undone */
    uint64_t segment;
    int fd;
    uint64_t size; /* bytes in the current segment */
    uint8_t *buf;  /* one framed record */
    size_t buf_cap;
    uint64_t records, bytes;
    char path[512];
};

int fl_wal_segment_path(char *out, size_t len, const char *dir, int shard, uint64_t segment) {
    return snprintf(out, len, "%s/shard-%d.wal.%08" PRIu64, dir, shard, segment);
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t crc_of(const void *p, size_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    const uint8_t *b = p;
    while (n > 0) { /* crc32 takes a uInt length */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, k);
        b += k;
        n -= k;
    }
    return (uint32_t)c;
}

/* Opens segment w->segment into w->fd / w->size / w->path. */
static fl_status open_segment(fl_wal_t *w, uint64_t segment, fl_err_t *err) {
    char path[sizeof w->path];
    if (fl_wal_segment_path(path, sizeof path, w->dir, w->shard, segment) >= (int)sizeof path)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "wal: folder name too long (%zu bytes)", strlen(w->dir));
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return fl_err_set(err, FL_INTERNAL, "wal %s: cannot open for appending: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return fl_err_set(err, FL_INTERNAL, "wal %s: cannot stat: %s", path, strerror(e));
    }
    if (w->fsync) {
        fl_status s = fl_fsync_dir(w->dir, err);
        if (s != FL_OK) {
            fl_err_prefix(err, "wal %s", path);
            close(fd);
            return s;
        }
    }
    w->fd = fd;
    w->size = (uint64_t)st.st_size;
    w->segment = segment;
    memcpy(w->path, path, sizeof path);
    return FL_OK;
}

fl_status fl_wal_open(const char *dir, int shard, uint64_t segment, int fsync, fl_wal_t **out, fl_err_t *err) {
    *out = NULL;
    if (!dir || !*dir) return fl_err_set(err, FL_INVALID_ARGUMENT, "wal: empty folder name");
    if (segment == 0) return fl_err_set(err, FL_INVALID_ARGUMENT, "wal: segment 0, expected >= 1");
    fl_wal_t *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir))) {
        free(w);
        return fl_err_set(err, FL_NO_MEMORY, "wal: out of memory");
    }
    w->shard = shard;
    w->fsync = fsync != 0;
    w->fd = -1;
    fl_status s = open_segment(w, segment, err);
    if (s != FL_OK) {
        free(w->dir);
        free(w);
        return s;
    }
    *out = w;
    return FL_OK;
}

void fl_wal_close(fl_wal_t *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    free(w->buf);
    free(w->dir);
    free(w);
}

fl_status fl_wal_rotate(fl_wal_t *w, fl_err_t *err) {
    if (w->fsync && w->fd >= 0 && fdatasync(w->fd) != 0)
        return fl_err_set(err, FL_INTERNAL, "wal %s: cannot fdatasync: %s", w->path, strerror(errno));
    int old_fd = w->fd;
    uint64_t old_seg = w->segment, old_size = w->size;
    char old_path[sizeof w->path];
    memcpy(old_path, w->path, sizeof old_path);
    fl_status s = open_segment(w, old_seg + 1, err);
    if (s != FL_OK) {
        w->fd = old_fd;
        w->segment = old_seg;
        w->size = old_size;
        memcpy(w->path, old_path, sizeof old_path);
        return s;
    }
    if (old_fd >= 0) close(old_fd);
    return FL_OK;
}

fl_status fl_wal_append(fl_wal_t *w, const void *payload, size_t len, fl_err_t *err) {
    if (w->broken)
        return fl_err_set(err, FL_INTERNAL, "wal %s: an earlier failed append could not be undone; restart the shard",
                          w->path);
    if (len == 0 || len > FL_WAL_MAX_RECORD)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "wal %s: record of %zu bytes, expected 1 .. %u", w->path, len,
                          FL_WAL_MAX_RECORD);
    if (w->size > 0 && w->size + FL_WAL_HEADER_BYTES + len > FL_WAL_SEGMENT_BYTES) FL_TRY(fl_wal_rotate(w, err));
    size_t total = FL_WAL_HEADER_BYTES + len;
    if (total > w->buf_cap) {
        uint8_t *b = realloc(w->buf, total);
        if (!b) return fl_err_set(err, FL_NO_MEMORY, "wal %s: out of memory for a record of %zu bytes", w->path, len);
        w->buf = b;
        w->buf_cap = total;
    }
    put_u32(w->buf, (uint32_t)len);
    put_u32(w->buf + 4, crc_of(payload, len));
    memcpy(w->buf + FL_WAL_HEADER_BYTES, payload, len);
    size_t done = 0;
    while (done < total) {
        ssize_t k = write(w->fd, w->buf + done, total - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : ENOSPC;
            /* Cut the partial record off, so that the segment stays a sequence of whole
             * records; if that fails too, refuse further appends. */
            if (done > 0 && ftruncate(w->fd, (off_t)w->size) != 0) w->broken = 1;
            return fl_err_set(err, FL_INTERNAL, "wal %s: cannot append a record of %zu bytes at offset %" PRIu64 ": %s",
                              w->path, len, w->size, strerror(e));
        }
        done += (size_t)k;
    }
    if (w->fsync && fdatasync(w->fd) != 0) {
        /* The record may or may not be on disk: it is not acknowledged, and a resend is
         * skipped after recovery if it was. Keep the size honest. */
        w->size += total;
        return fl_err_set(err, FL_INTERNAL, "wal %s: cannot fdatasync: %s", w->path, strerror(errno));
    }
    w->size += total;
    w->records++;
    w->bytes += total;
    return FL_OK;
}

uint64_t fl_wal_segment(const fl_wal_t *w) {
    return w->segment;
}
uint64_t fl_wal_segment_bytes(const fl_wal_t *w) {
    return w->size;
}
uint64_t fl_wal_appended_records(const fl_wal_t *w) {
    return w->records;
}
uint64_t fl_wal_appended_bytes(const fl_wal_t *w) {
    return w->bytes;
}

/* Segment number of file `name` of shard `shard`, or 0 if it is not one. */
static uint64_t parse_segment_name(const char *name, int shard) {
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "shard-%d.wal.", shard);
    if (strncmp(name, prefix, (size_t)n) != 0) return 0;
    const char *p = name + n;
    if (!*p) return 0;
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        if (v > (UINT64_MAX - 9) / 10) return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    return v;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

fl_status fl_wal_list(const char *dir, int shard, uint64_t **segs, size_t *n, fl_err_t *err) {
    *segs = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return fl_err_set(err, FL_INTERNAL, "wal: cannot read folder %s: %s", dir, strerror(errno));
    uint64_t *v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        uint64_t seg = parse_segment_name(e->d_name, shard);
        if (seg == 0) continue;
        if (cnt == cap) {
            size_t nc = cap ? 2 * cap : 16;
            uint64_t *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                free(v);
                closedir(d);
                return fl_err_set(err, FL_NO_MEMORY, "wal: out of memory listing %s", dir);
            }
            v = nv;
            cap = nc;
        }
        v[cnt++] = seg;
    }
    closedir(d);
    if (cnt) qsort(v, cnt, sizeof *v, cmp_u64);
    *segs = v;
    *n = cnt;
    return FL_OK;
}

fl_status fl_wal_delete_before(const char *dir, int shard, uint64_t segment, size_t *deleted, fl_err_t *err) {
    if (deleted) *deleted = 0;
    uint64_t *segs;
    size_t n;
    FL_TRY(fl_wal_list(dir, shard, &segs, &n, err));
    fl_status s = FL_OK;
    for (size_t i = 0; i < n && segs[i] < segment; i++) {
        char path[512];
        fl_wal_segment_path(path, sizeof path, dir, shard, segs[i]);
        if (unlink(path) != 0) {
            if (s == FL_OK) s = fl_err_set(err, FL_INTERNAL, "wal %s: cannot remove: %s", path, strerror(errno));
            continue;
        }
        if (deleted) (*deleted)++;
    }
    free(segs);
    return s;
}

/* ------------------------------------------------------------ reader ---- */

struct fl_wal_reader {
    char *dir;
    int shard;
    uint64_t first, last; /* segments to read: first .. last (0, 0: none) */
    uint64_t cur;         /* segment being read; 0 before the first */
    int fd;
    uint64_t size, off; /* of the current segment */
    char path[512];
    uint8_t *buf;
    size_t buf_cap;
    int done;
    int torn;
    fl_wal_torn_t torn_info;
};

fl_status fl_wal_reader_open(const char *dir, int shard, uint64_t first, fl_wal_reader_t **out, fl_err_t *err) {
    *out = NULL;
    if (first == 0) first = 1;
    uint64_t *segs;
    size_t n;
    FL_TRY(fl_wal_list(dir, shard, &segs, &n, err));
    size_t i = 0;
    while (i < n && segs[i] < first) i++;
    uint64_t lo = 0, hi = 0;
    if (i < n) {
        if (segs[i] != first) {
            char path[512];
            fl_wal_segment_path(path, sizeof path, dir, shard, first);
            fl_status s = fl_err_set(err, FL_DATA_LOSS,
                                     "wal: segment %s is missing (the log resumes there, but the next segment in %s "
                                     "is %" PRIu64 ")",
                                     path, dir, segs[i]);
            free(segs);
            return s;
        }
        lo = first;
        hi = first;
        for (size_t j = i + 1; j < n; j++) {
            if (segs[j] != hi + 1) {
                char path[512];
                fl_wal_segment_path(path, sizeof path, dir, shard, hi + 1);
                fl_status s = fl_err_set(err, FL_DATA_LOSS,
                                         "wal: segment %s is missing (segments %" PRIu64 " and %" PRIu64 " exist)",
                                         path, hi, segs[j]);
                free(segs);
                return s;
            }
            hi = segs[j];
        }
    }
    free(segs);
    fl_wal_reader_t *r = calloc(1, sizeof *r);
    if (!r || !(r->dir = strdup(dir))) {
        free(r);
        return fl_err_set(err, FL_NO_MEMORY, "wal: out of memory");
    }
    r->shard = shard;
    r->first = lo;
    r->last = hi;
    r->fd = -1;
    r->done = lo == 0;
    *out = r;
    return FL_OK;
}

void fl_wal_reader_close(fl_wal_reader_t *r) {
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    free(r->buf);
    free(r->dir);
    free(r);
}

uint64_t fl_wal_reader_first_segment(const fl_wal_reader_t *r) {
    return r->first;
}
uint64_t fl_wal_reader_last_segment(const fl_wal_reader_t *r) {
    return r->last;
}

int fl_wal_reader_torn(const fl_wal_reader_t *r, fl_wal_torn_t *out) {
    if (r->torn && out) *out = r->torn_info;
    return r->torn;
}

/* Reads exactly n bytes at off; returns bytes read (< n only at end of file), or -1. */
static ssize_t pread_full(int fd, void *p, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (uint8_t *)p + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

/* Whether bytes [off, size) of the current segment are all zero (-1 on an I/O error). */
static int rest_is_zero(fl_wal_reader_t *r, uint64_t off) {
    uint8_t chunk[4096];
    while (off < r->size) {
        size_t want = r->size - off < sizeof chunk ? (size_t)(r->size - off) : sizeof chunk;
        ssize_t k = pread_full(r->fd, chunk, want, off);
        if (k < 0) return -1;
        if (k == 0) break;
        for (ssize_t i = 0; i < k; i++)
            if (chunk[i]) return 0;
        off += (uint64_t)k;
    }
    return 1;
}

/* A bad record at r->off: a torn tail (FL_OK, reader done) or corruption (FL_DATA_LOSS).
 * `tail` says whether the damage by itself looks like an interrupted last write (cut
 * short, or a bad CRC on a payload that ends exactly at the end of the file). */
static fl_status bad_record(fl_wal_reader_t *r, int tail, const char *why, fl_err_t *err) {
    int last = r->cur == r->last;
    if (last && !tail) {
        int z = rest_is_zero(r, r->off);
        if (z < 0) return fl_err_set(err, FL_INTERNAL, "wal %s: cannot read: %s", r->path, strerror(errno));
        tail = z;
    }
    if (last && tail) {
        r->torn = 1;
        r->done = 1;
        snprintf(r->torn_info.path, sizeof r->torn_info.path, "%s", r->path);
        r->torn_info.offset = r->off;
        r->torn_info.bytes = r->size - r->off;
        snprintf(r->torn_info.why, sizeof r->torn_info.why, "%s", why);
        return FL_OK;
    }
    return fl_err_set(err, FL_DATA_LOSS, "wal %s: corrupt record at offset %" PRIu64 " of %" PRIu64 " bytes: %s%s",
                      r->path, r->off, r->size, why,
                      last ? " (followed by more data, so not a torn tail)" : " (not the last segment)");
}

fl_status fl_wal_reader_next(fl_wal_reader_t *r, const void **payload, size_t *len, uint64_t *segment, uint64_t *offset,
                             fl_err_t *err) {
    *payload = NULL;
    *len = 0;
    for (;;) {
        if (r->done) return FL_OK;
        if (r->fd < 0 || r->off >= r->size) {
            /* Next segment. */
            if (r->fd >= 0) {
                close(r->fd);
                r->fd = -1;
                if (r->cur == r->last) {
                    r->done = 1;
                    return FL_OK;
                }
            }
            r->cur = r->cur ? r->cur + 1 : r->first;
            fl_wal_segment_path(r->path, sizeof r->path, r->dir, r->shard, r->cur);
            r->fd = open(r->path, O_RDONLY | O_CLOEXEC);
            if (r->fd < 0) return fl_err_set(err, FL_INTERNAL, "wal %s: cannot open: %s", r->path, strerror(errno));
            struct stat st;
            if (fstat(r->fd, &st) != 0)
                return fl_err_set(err, FL_INTERNAL, "wal %s: cannot stat: %s", r->path, strerror(errno));
            r->size = (uint64_t)st.st_size;
            r->off = 0;
            continue;
        }
        char why[128];
        uint8_t h[FL_WAL_HEADER_BYTES];
        uint64_t left = r->size - r->off;
        if (left < FL_WAL_HEADER_BYTES) {
            snprintf(why, sizeof why, "header cut short: %" PRIu64 " of %u bytes", left, FL_WAL_HEADER_BYTES);
            return bad_record(r, 1, why, err);
        }
        if (pread_full(r->fd, h, sizeof h, r->off) != (ssize_t)sizeof h)
            return fl_err_set(err, FL_INTERNAL, "wal %s: cannot read at offset %" PRIu64 ": %s", r->path, r->off,
                              strerror(errno));
        uint32_t n = get_u32(h), crc = get_u32(h + 4);
        if (n == 0 || n > FL_WAL_MAX_RECORD) {
            snprintf(why, sizeof why, "length %" PRIu32 ", expected 1 .. %u", n, FL_WAL_MAX_RECORD);
            return bad_record(r, 0, why, err);
        }
        if ((uint64_t)n > left - FL_WAL_HEADER_BYTES) {
            snprintf(why, sizeof why, "payload cut short: %" PRIu64 " of %" PRIu32 " bytes", left - FL_WAL_HEADER_BYTES,
                     n);
            return bad_record(r, 1, why, err);
        }
        if (n > r->buf_cap) {
            uint8_t *b = realloc(r->buf, n);
            if (!b)
                return fl_err_set(err, FL_NO_MEMORY, "wal %s: out of memory for a record of %" PRIu32 " bytes", r->path,
                                  n);
            r->buf = b;
            r->buf_cap = n;
        }
        if (pread_full(r->fd, r->buf, n, r->off + FL_WAL_HEADER_BYTES) != (ssize_t)n)
            return fl_err_set(err, FL_INTERNAL, "wal %s: cannot read at offset %" PRIu64 ": %s", r->path,
                              r->off + FL_WAL_HEADER_BYTES, strerror(errno));
        uint32_t got = crc_of(r->buf, n);
        if (got != crc) {
            snprintf(why, sizeof why,
                     "CRC-32 0x%08" PRIx32 " of the %" PRIu32 "-byte payload, header says 0x%08" PRIx32, got, n, crc);
            return bad_record(r, (uint64_t)n == left - FL_WAL_HEADER_BYTES, why, err);
        }
        if (segment) *segment = r->cur;
        if (offset) *offset = r->off;
        r->off += FL_WAL_HEADER_BYTES + n;
        *payload = r->buf;
        *len = n;
        return FL_OK;
    }
}

fl_status fl_wal_reader_truncate_torn(fl_wal_reader_t *r, fl_err_t *err) {
    if (!r->torn) return FL_OK;
    int fd = open(r->torn_info.path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return fl_err_set(err, FL_INTERNAL, "wal %s: cannot open to cut its torn tail: %s", r->torn_info.path,
                          strerror(errno));
    if (ftruncate(fd, (off_t)r->torn_info.offset) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return fl_err_set(err, FL_INTERNAL, "wal %s: cannot cut it to %" PRIu64 " bytes: %s", r->torn_info.path,
                          r->torn_info.offset, strerror(e));
    }
    close(fd);
    r->torn = 0;
    return FL_OK;
}
