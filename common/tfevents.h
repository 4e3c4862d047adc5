/* tfevents: writing TensorBoard event files (`events.out.tfevents.*`) of scalar metrics,
 * so that `tensorboard --logdir runs/` charts a run.
 *
 * A file is a sequence of TFRecord records, each
 *   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
 *   length bytes of data, uint32 masked CRC-32C of the data
 * (common/crc32c.h: the mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8); the data of
 * each record is one `tensorboard.Event` (proto/tensorboard.proto, encoded with the
 * protobuf-c generated code). The first record is the event {wall_time, file_version:
 * "brain.Event:2"}; every later one holds one Summary: float32 `simple_value`s
 * (fl_tfevents_scalars), or one tensor value with the metadata of the plugin that reads
 * it: a text summary (fl_tfevents_text: TensorBoard's TEXT tab) or the hparams plugin's
 * records (fl_tfevents_hparams, fl_tfevents_session_end: the HPARAMS tab), as
 * TensorBoard's own summary functions write them (plugins/text/summary_v2.py,
 * plugins/hparams/summary_v2.py).
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

/* 1 when the NUL-terminated s is valid UTF-8 (as protobuf strings must be: no overlong
 * forms, surrogates or values past U+10FFFF), else 0. */
int fl_tfevents_utf8(const char *s);

/* Appends a text summary at (step, wall_time): tag (as for scalars) and text (UTF-8,
 * Markdown: TensorBoard's TEXT tab renders it, tables and fenced code included), as one
 * DT_STRING scalar tensor with the text plugin's metadata. FL_INVALID_ARGUMENT for a bad
 * tag, a NULL or non-UTF-8 text; FL_IO_ERROR, FL_NO_MEMORY as above. */
fl_status fl_tfevents_text(fl_tfevents_t *w, const char *tag, int64_t step, double wall_time, const char *text,
                           fl_err_t *err);

/* One hyperparameter of a run, for the hparams plugin. */
typedef enum { FL_TFEVENTS_HP_NUMBER, FL_TFEVENTS_HP_STRING, FL_TFEVENTS_HP_BOOL } fl_tfevents_hp_kind;
typedef struct fl_tfevents_hparam {
    const char *name;        /* e.g. "learner.lr" (UTF-8, 1 to 256 bytes) */
    const char *description; /* NULL or "": none */
    fl_tfevents_hp_kind kind;
    double number;      /* FL_TFEVENTS_HP_NUMBER's value */
    const char *string; /* FL_TFEVENTS_HP_STRING's value (UTF-8) */
    int boolean;        /* FL_TFEVENTS_HP_BOOL's value (0 or 1) */
    /* A string's possible values (the HPARAMS tab's filter offers them), n_choices of
     * them; NULL: any string. A bool's are false and true, a number has none. */
    const char *const *choices;
    int n_choices;
    /* Listed first in the HPARAMS tab (the plugin's `differs`, which TensorBoard computes
     * itself only when no experiment record is written). */
    int differs;
} fl_tfevents_hparam_t;

/* A metric of the HPARAMS tab: a scalar tag of the same run, whose last value it shows. */
typedef struct fl_tfevents_metric {
    const char *tag;          /* e.g. "eval/return_mean" */
    const char *display_name; /* NULL: the tag */
    const char *description;  /* NULL: none */
    int validation;           /* 1: a held-out figure (an evaluation), 0: a training one */
} fl_tfevents_metric_t;

/* Appends the hparams plugin's two records for this run at step 0: the experiment
 * (`_hparams_/experiment`: each hparam's name, description, type and domain, and the
 * metrics, in the order given) and the session's start (`_hparams_/session_start_info`:
 * the values, start_time_secs = wall_time, group_name = group, NULL or "": the run's own
 * row). TensorBoard uses the first experiment record it finds in the logdir for every run,
 * so runs written by one program should list the same hparams. FL_INVALID_ARGUMENT (nothing
 * written) for no writer, n outside 1..4096 or m outside 0..256, a NULL list, a name,
 * tag, string or choice that is empty where it must not be, too long or not UTF-8 (naming
 * it); FL_IO_ERROR, FL_NO_MEMORY as above. */
fl_status fl_tfevents_hparams(fl_tfevents_t *w, double wall_time, const char *group, int n,
                              const fl_tfevents_hparam_t *hparams, int m, const fl_tfevents_metric_t *metrics,
                              fl_err_t *err);

/* Appends the session's end (`_hparams_/session_end_info`) at step 0: status 1 success,
 * 2 failure (the HPARAMS tab's Status), end_time_secs = wall_time. TensorBoard reads the
 * first of each hparams record of a run, so one is written once, when the run has ended. */
fl_status fl_tfevents_session_end(fl_tfevents_t *w, double wall_time, int success, fl_err_t *err);

/* Closes the file and frees the writer. NULL is a no-op. */
void fl_tfevents_close(fl_tfevents_t *w);

#endif
