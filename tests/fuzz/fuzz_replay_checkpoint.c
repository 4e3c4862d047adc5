/* libFuzzer target for the replay checkpoint loader (fl_table_load): arbitrary bytes as a
 * checkpoint file. The loader must reject anything malformed with a message naming the
 * file, never crash or leak, and whatever it accepts must be a table that verifies,
 * samples (every observation gathered from its frame chunks, raw or zstd) and saves and
 * loads again to the same contents. The bytes go through a memfd; the re-saved copy goes
 * to a folder under /dev/shm. Headers naming a capacity above 4096 are skipped (see
 * below). Seeds: tests/fuzz/gen_seeds writes valid checkpoints (ckpt_*). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <zlib.h>

#include "replay/table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A folder for the re-saved copies (fl_table_save renames a temporary file into place,
 * which /proc/self/fd cannot take). */
static const char *save_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/dev/shm/fuzz_ckpt_XXXXXX");
        if (!mkdtemp(dir)) {
            snprintf(dir, sizeof dir, "/tmp/fuzz_ckpt_XXXXXX");
            if (!mkdtemp(dir)) abort();
        }
    }
    return dir;
}

static int to_memfd(const void *data, size_t size, char *path, size_t len) {
    int fd = memfd_create("fuzz_ckpt", 0);
    if (fd < 0) abort();
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, (const uint8_t *)data + done, size - done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (8u << 20)) return 0;
    /* Without an expected configuration the loader allocates the capacity the header names
     * (a shard always passes its own, which the file must match); keep it small here so
     * that inputs explore the format, not the allocator. Capacity: bytes 16 .. 24. */
    if (size >= 24) {
        uint64_t cap;
        memcpy(&cap, data + 16, 8);
        if (cap > 4096) return 0;
    }
    /* The file's last 4 bytes are a CRC-32 of the rest: set it right, so that mutations
     * reach the checks behind it (a wrong CRC is rejected first; the unit tests cover
     * that). */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) abort();
    memcpy(buf, data, size);
    if (size >= 4) {
        uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, (uInt)(size - 4));
        memcpy(buf + size - 4, &crc, 4);
    }
    char path[64];
    int fd = to_memfd(buf, size, path, sizeof path);
    free(buf);
    fl_table_t *t = NULL;
    fl_err_t e;
    fl_err_init(&e);
    fl_status st = fl_table_load(path, NULL, &t, &e);
    if (st != FL_OK) {
        if (t || !strstr(e.msg, path)) {
            fprintf(stderr, "rejection without the file name or with a table: %s\n", e.msg);
            abort();
        }
        close(fd);
        return 0;
    }
    if (fl_table_verify(t, &e) != FL_OK) {
        fprintf(stderr, "loaded table does not verify: %s\n", e.msg);
        abort();
    }
    fl_table_info_t in;
    fl_table_info(t, &in);
    size_t ob = fl_table_obs_bytes(t);
    if (in.size > 0 && ob <= (1u << 16)) {
        enum { B = 8 };
        uint64_t keys[B];
        uint8_t *obs = malloc(B * ob), *next = malloc(B * ob);
        st = fl_table_sample(t, B, 0.5, keys, NULL, NULL, obs, NULL, NULL, NULL, next, &e);
        if (st != FL_OK && st != FL_FAILED_PRECONDITION) {
            fprintf(stderr, "sample of a loaded table: %s\n", e.msg);
            abort();
        }
        free(obs);
        free(next);
    }
    /* Save and load again: the same counters and contents (as they are after the sample,
     * which may have removed items). */
    fl_table_info(t, &in);
    char path2[96];
    snprintf(path2, sizeof path2, "%s/copy.ckpt", save_dir());
    if (fl_table_save(t, path2, NULL, &e) == FL_OK) {
        fl_table_t *u = NULL;
        if (fl_table_load(path2, NULL, &u, &e) != FL_OK) {
            fprintf(stderr, "a saved table does not load: %s\n", e.msg);
            abort();
        }
        fl_table_info_t iu;
        fl_table_info(u, &iu);
        if (iu.size != in.size || iu.inserted != in.inserted || iu.frames != in.frames) abort();
        fl_table_destroy(u);
        unlink(path2);
    }
    fl_table_destroy(t);
    close(fd);
    return 0;
}
