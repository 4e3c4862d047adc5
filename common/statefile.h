/* statefile: the small text files in which a role keeps what it needs to continue after
 * a stop (a resumed experiment, launcher/local.c's --resume): counters, random generators and
 * short windows of figures, as "key = value" lines under a first line naming the kind
 * ("# fleet state actor 1"). Doubles are written with 17 significant digits and floats
 * with 9, so every value reads back exactly; a generator is its four state words in hex.
 *
 * Writing: fl_state_begin opens PATH.tmp, the put functions add lines, fl_state_commit
 * flushes, fsyncs and renames it over PATH (then fsyncs the folder), so a reader sees
 * the old file or the new one, never half of one. Reading: fl_state_load parses a whole
 * file (at most FL_STATE_MAX_BYTES), the get functions look keys up.
 * Failure: begin and commit return FL_IO_ERROR naming the file (put errors surface at
 * commit); load FL_NOT_FOUND for a missing file, FL_PARSE_ERROR naming the line for
 * anything else, or a file of another kind. A get of a missing or malformed key returns 0.
 * Threads: one owner per writer and per loaded state. */
#ifndef FL_COMMON_STATEFILE_H
#define FL_COMMON_STATEFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/rng.h"
#include "common/status.h"

#define FL_STATE_MAX_BYTES (16u << 20)

typedef struct fl_state_out {
    FILE *f;
    char path[1024], tmp[1040];
} fl_state_out_t;

fl_status fl_state_begin(fl_state_out_t *w, const char *path, const char *kind, fl_err_t *err);
void fl_state_put_u64(fl_state_out_t *w, const char *key, uint64_t v);
void fl_state_put_double(fl_state_out_t *w, const char *key, double v);
void fl_state_put_rng(fl_state_out_t *w, const char *key, const fl_rng_t *r);
/* n floats (or doubles) on one line, space-separated. */
void fl_state_put_floats(fl_state_out_t *w, const char *key, const float *v, size_t n);
void fl_state_put_doubles(fl_state_out_t *w, const char *key, const double *v, size_t n);
fl_status fl_state_commit(fl_state_out_t *w, fl_err_t *err);
/* Closes and removes the temporary file of a writer that will not be committed. */
void fl_state_abort(fl_state_out_t *w);

typedef struct fl_state fl_state_t;

/* Loads path, a state file of `kind`. */
fl_status fl_state_load(const char *path, const char *kind, fl_state_t **out, fl_err_t *err);
void fl_state_free(fl_state_t *st); /* NULL is a no-op */
/* 1 and *out when key holds a value of the type, else 0 (*out untouched). */
int fl_state_get_u64(const fl_state_t *st, const char *key, uint64_t *out);
int fl_state_get_double(const fl_state_t *st, const char *key, double *out);
int fl_state_get_rng(const fl_state_t *st, const char *key, fl_rng_t *out);
/* Up to max values into out; returns how many the key holds (0 when missing or
 * malformed; more than max: only max are stored). */
size_t fl_state_get_floats(const fl_state_t *st, const char *key, float *out, size_t max);
size_t fl_state_get_doubles(const fl_state_t *st, const char *key, double *out, size_t max);

#endif
