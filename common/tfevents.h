/* tfevents: writing TensorBoard event files (`events.out.tfevents.*`) of scalar metrics,
 * so that `tensorboard --logdir runs/` charts a run.
 *
 * A file is a sequence of TFRecord records, each
 *   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
 *   length bytes of data, uint32 masked CRC-32C of the data
 * (common/crc32c.h: the mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8); the data of
 * each record is one `tensorboard.Event` (proto/tensorboard.proto, encoded with the
 * protobuf-c generated code). The first record is the event {wall_time, file_version:
 * "brain.Event:2"}; every later one holds one Summary of float32 `simple_value`s.
 *
 * Durability and readers: every record is handed to the kernel with one write(2) before
 * the call returns (no user-space buffer), so a reader running alongside, TensorBoard
 * for one, sees only whole records, and a crash of the writing process loses nothing
 * already returned. Nothing is fsynced: a machine crash can lose the tail (TensorBoard
 * ignores a truncated last record). A failed write (disk full, file size limit) is
 * FL_IO_ERROR naming the file and the reason; the file is cut back to its last whole
 * record, so it stays readable and the writer stays usable.
 *
 * Ownership: the writer owns its file descriptor (O_CLOEXEC) and its path string;
 * fl_tfevents_close releases both. Tags and values passed in are only read during the
 * call. Thread-safety: one writer must not be used by two threads at once (the caller
 * serialises); distinct writers are independent, in one process or several, since every
 * open creates a new file. */
#ifndef FL_COMMON_TFEVENTS_H
#define FL_COMMON_TFEVENTS_H

#include <stdint.h>

#include "common/status.h"

/* A tag is 1 to 256 bytes of UTF-8 (protobuf strings must be valid UTF-8); an event holds
 * 1 to 4096 values. */
#define FL_TFEVENTS_TAG_MAX 256
#define FL_TFEVENTS_VALUES_MAX 4096
#define FL_TFEVENTS_FILE_VERSION "brain.Event:2"

typedef struct fl_tfevents fl_tfevents_t;

/* Creates DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<seq>, a new file and
 * never an existing one (O_EXCL; seq counts up within the process, and past any name that
 * exists), writes the file_version event at the current time, step 0. DIR must exist:
 * FL_NOT_FOUND when it does not, FL_IO_ERROR naming the file for another failure,
 * FL_INVALID_ARGUMENT for a NULL or empty dir. */
fl_status fl_tfevents_open(const char *dir, fl_tfevents_t **out, fl_err_t *err);
/* The file's path (owned by the writer, valid until close). */
const char *fl_tfevents_path(const fl_tfevents_t *w);

/* Appends one Event at (step, wall_time, seconds since the Unix epoch) with n scalar
 * values tags[i] = values[i], each stored as float32 simple_value (rounded to nearest;
 * NaN and inf are written as they are, finite values beyond float32's range become inf
 * as IEEE rounding makes them). Whole and handed to the kernel before it returns.
 * FL_INVALID_ARGUMENT (nothing written) for n outside 1..4096, a NULL writer, list or
 * tag, or a tag that is empty, longer than 256 bytes or not UTF-8, naming which;
 * FL_IO_ERROR naming the file on a failed write; FL_NO_MEMORY. */
fl_status fl_tfevents_scalars(fl_tfevents_t *w, int64_t step, double wall_time, int n, const char *const *tags,
                              const double *values, fl_err_t *err);
/* The same with one value. */
fl_status fl_tfevents_scalar(fl_tfevents_t *w, const char *tag, int64_t step, double wall_time, double value,
                             fl_err_t *err);

/* Closes the file and frees the writer. NULL is a no-op. */
void fl_tfevents_close(fl_tfevents_t *w);

#endif
