/* fsync: folder fsyncs (see fsync.h). */
#include "common/fsync.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

fl_status fl_fsync_dir(const char *dir, fl_err_t *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return fl_err_set(err, FL_INTERNAL, "cannot fsync folder %s: %s", dir, strerror(e));
    }
    close(fd);
    return FL_OK;
}

fl_status fl_fsync_parent(const char *path, fl_err_t *err) {
    size_t n = strlen(path);
    char *dir = malloc(n + 2);
    if (!dir) return fl_err_set(err, FL_NO_MEMORY, "cannot fsync the folder of %s: out of memory", path);
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    fl_status s = fl_fsync_dir(dir, err);
    free(dir);
    return s;
}
