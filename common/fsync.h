/* fsync: making a rename or a new file durable, for the atomic writers (replay
 * checkpoints, the replay write-ahead log, safetensors files): after a file is fsynced
 * and renamed (or created), its folder must be fsynced too, or a machine crash can lose
 * the folder entry. */
#ifndef FL_COMMON_FSYNC_H
#define FL_COMMON_FSYNC_H

#include "common/status.h"

/* fsync of folder `dir`. FL_INTERNAL "cannot fsync folder DIR: REASON" on failure. */
fl_status fl_fsync_dir(const char *dir, fl_err_t *err);
/* fsync of the folder that holds `path` ("." for a bare name). */
fl_status fl_fsync_parent(const char *path, fl_err_t *err);

#endif
