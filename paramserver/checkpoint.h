/* checkpoint: a gorila parameter-server shard's state as a safetensors file
 * (common/safetensors.h), so that a killed shard restarts where it was.
 *
 * paramserver-<shard>.safetensors in the run's checkpoint folder holds
 *   tensors   "params"             F32 (n)        the slice [offset, offset + n)
 *             "optimizer.<slot>"   F32 (n)        each slot of the optimizer's state
 *                                                 (kernels/optim.h: Adam's m and v, ...)
 *             "clocks"             I64 (learners) applied pushes per learner
 *   metadata  format = fleet.paramserver, format_version = 1, shard, shards, offset,
 *             length, total, version, optimizer (its kind), optimizer.lr, .beta1,
 *             .beta2, .eps, .decay, .momentum (as "%.9g"), optimizer.steps, learners,
 *             publishes, pushes_applied, pushes_dropped, waits, wait_timeouts and
 *             staleness_hist (eight comma-separated counts).
 * Save copies the state under the store's lock (fl_param_store_capture) and writes
 * outside it, atomically (a temp file, fsync, rename, fsync of the folder). Load checks
 * everything against the store's configuration before it changes anything: the format,
 * the shard and paramserver.shards, the slice (offset and length of shard `shard` of a
 * `total`-element vector), the optimizer's kind and settings, learner.count and every
 * tensor's dtype and shape; a mismatch is FL_INVALID_ARGUMENT naming the file, the field
 * and both values (FL_NOT_FOUND for a missing file).
 * Thread-safety: save may run while the store serves; load only before it serves. */
#ifndef FL_PARAMSERVER_CHECKPOINT_H
#define FL_PARAMSERVER_CHECKPOINT_H

#include "common/status.h"
#include "paramserver/store.h"

/* "paramserver-<shard>.safetensors" under dir into buf. */
void fl_param_checkpoint_path(const char *dir, int shard, char *buf, size_t len);

/* Writes the store's state to path. *saved = 0 (and no file) while nothing is published. */
fl_status fl_param_checkpoint_save(fl_param_store_t *s, const char *path, int *saved, fl_err_t *err);
/* Restores the store (which holds nothing yet) from path; *version (may be NULL) gets the
 * restored version. */
fl_status fl_param_checkpoint_load(fl_param_store_t *s, const char *path, uint64_t *version, fl_err_t *err);

#endif
