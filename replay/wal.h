/* wal: the write-ahead log of one replay shard, a segmented append-only file log.
 *
 * A log lives in a folder and is named by the shard id; it is a sequence of segment
 * files `shard-<id>.wal.<N>`, N = 1, 2, ... written as 8 zero-padded decimal digits
 * (shard-0.wal.00000001; a longer N is written in full and read back the same), one of
 * them open for appending at a time. A segment is a sequence of records:
 *   u32 payload length (>= 1), u32 CRC-32 (zlib crc32) of the payload, the payload,
 * little-endian, no padding. A record is appended with one write(2) of a prepared buffer
 * (looping on a partial write or EINTR), so after a kill -9 of the process a segment ends
 * either after a whole record or, at worst, inside the last one (a torn tail).
 *
 * Durability: with fsync off the record is in the page cache when fl_wal_append returns,
 * which survives a kill of the process but not a crash of the machine (or a power loss);
 * with fsync on fl_wal_append also calls fdatasync, so the record is on disk (a new
 * segment's folder entry is fsynced too) at the cost of one disk flush per record.
 *
 * Segments roll over by themselves past FL_WAL_SEGMENT_BYTES (fl_wal_append rotates
 * before a record that would start a segment beyond it), and the owner rotates at a
 * checkpoint (fl_wal_rotate) and deletes the segments the checkpoint covers
 * (fl_wal_delete_before).
 *
 * Reading (recovery): fl_wal_reader_open lists the segments >= a first one, which must be
 * consecutive (a missing number is an error), and fl_wal_reader_next returns their
 * records in order. A record that is cut short or fails its CRC at the end of the LAST
 * segment is a torn tail: the write that made it never returned, so its contents were
 * never acknowledged. The reader reports it (fl_wal_reader_torn) and stops there;
 * fl_wal_reader_truncate_torn cuts the segment back to the last whole record. Precisely,
 * in the last segment a bad record is a torn tail when fewer than 8 header bytes remain,
 * when its length runs past the end of the file, when its payload ends exactly at the
 * end of the file and the CRC is wrong, or when every byte from it to the end of the file
 * is 0 (a zero-filled tail after a machine crash). Any other bad record (in a segment
 * that is not the last one, or followed by more data) is corruption: FL_DATA_LOSS naming
 * the file, the byte offset and what was wrong.
 *
 * Thread-safety: none; a log and a reader belong to one thread at a time (the replay
 * service calls them under its insert mutex). A failed append leaves the segment as it
 * was (it is cut back to the previous record); if even that fails the log refuses every
 * later append (FL_INTERNAL) until it is reopened. */
#ifndef FL_REPLAY_WAL_H
#define FL_REPLAY_WAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define FL_WAL_HEADER_BYTES 8u
/* Largest payload accepted (and read back). */
#define FL_WAL_MAX_RECORD (1u << 30)
/* Segment size past which fl_wal_append starts a new segment. */
#define FL_WAL_SEGMENT_BYTES (64u << 20)

typedef struct fl_wal fl_wal_t;

/* The path of segment `segment` of shard `shard` in `dir` (len bytes); returns the
 * snprintf result. */
int fl_wal_segment_path(char *out, size_t len, const char *dir, int shard, uint64_t segment);

/* Opens segment `segment` (>= 1) of shard `shard` in `dir` for appending, creating it if
 * needed (an existing segment is appended to). fsync: fdatasync after every record.
 * FL_INVALID_ARGUMENT for segment 0 or an empty dir, FL_INTERNAL naming the file when it
 * cannot be opened. */
fl_status fl_wal_open(const char *dir, int shard, uint64_t segment, int fsync, fl_wal_t **out, fl_err_t *err);

/* Closes the open segment; NULL is a no-op. */
void fl_wal_close(fl_wal_t *w);

/* Appends one record of len (1 .. FL_WAL_MAX_RECORD) bytes; when this returns FL_OK the
 * record is written (and with fsync on, flushed to disk). FL_INTERNAL naming the file and
 * the failed step otherwise. */
fl_status fl_wal_append(fl_wal_t *w, const void *payload, size_t len, fl_err_t *err);

/* Closes the open segment and opens the next one (N + 1). On failure the log stays on
 * segment N. */
fl_status fl_wal_rotate(fl_wal_t *w, fl_err_t *err);

/* The segment open for appending, and its size in bytes. */
uint64_t fl_wal_segment(const fl_wal_t *w);
uint64_t fl_wal_segment_bytes(const fl_wal_t *w);
/* Records and bytes (headers included) appended through this handle. */
uint64_t fl_wal_appended_records(const fl_wal_t *w);
uint64_t fl_wal_appended_bytes(const fl_wal_t *w);

/* The segments of shard `shard` in `dir`, ascending: *segs (malloc'd, the caller frees;
 * NULL when there are none) and *n. FL_INTERNAL when dir cannot be read. */
fl_status fl_wal_list(const char *dir, int shard, uint64_t **segs, size_t *n, fl_err_t *err);

/* Deletes every segment of shard `shard` in `dir` numbered below `segment`; *deleted
 * (may be NULL) receives how many. FL_INTERNAL naming the first file that cannot be
 * removed (the others are still tried). */
fl_status fl_wal_delete_before(const char *dir, int shard, uint64_t segment, size_t *deleted, fl_err_t *err);

/* ---- reading ---- */

typedef struct fl_wal_reader fl_wal_reader_t;

/* A torn tail found by the reader. */
typedef struct fl_wal_torn {
    char path[512];  /* the last segment */
    uint64_t offset; /* where the torn record starts (the size after truncation) */
    uint64_t bytes;  /* bytes from there to the end of the file */
    char why[128];   /* what was wrong, e.g. "header cut short: 3 of 8 bytes" */
} fl_wal_torn_t;

/* Reads the segments >= first of shard `shard` in `dir` (none is fine). FL_DATA_LOSS
 * when they are not consecutive (naming the missing segment). */
fl_status fl_wal_reader_open(const char *dir, int shard, uint64_t first, fl_wal_reader_t **out, fl_err_t *err);

/* The next record: FL_OK with *payload (valid until the next call) and *len, or FL_OK
 * with *payload NULL at the end of the log (after a torn tail too). *segment and *offset
 * (either may be NULL) receive where the record starts. FL_DATA_LOSS for corruption
 * (see the top of this file), FL_INTERNAL for an I/O error; both name the file. */
fl_status fl_wal_reader_next(fl_wal_reader_t *r, const void **payload, size_t *len, uint64_t *segment, uint64_t *offset,
                             fl_err_t *err);

/* Whether the reader stopped at a torn tail (then *out describes it). */
int fl_wal_reader_torn(const fl_wal_reader_t *r, fl_wal_torn_t *out);

/* Cuts the torn tail off its segment (ftruncate to its offset, then fsync). FL_OK when
 * there is none. */
fl_status fl_wal_reader_truncate_torn(fl_wal_reader_t *r, fl_err_t *err);

/* The segments the reader found: the first and last number (0 and 0 when none). */
uint64_t fl_wal_reader_first_segment(const fl_wal_reader_t *r);
uint64_t fl_wal_reader_last_segment(const fl_wal_reader_t *r);

/* NULL is a no-op. */
void fl_wal_reader_close(fl_wal_reader_t *r);

#endif
