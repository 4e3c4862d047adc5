/* service_main: the skeleton of a service verb (see service_main.h). */
#include "cli/service_main.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "launcher/security.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/stop.h"

#define MAX_OPTS 16

/* Writes all of buf to fd; 0 on success. */
static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The common options, then the service's own; then the checks and the --listen default.
 * 0, or the exit code after printing why. */
static int parse_args(const fl_service_def_t *def, int argc, char **argv, fl_service_args_t *a) {
    fl_opt_t opts[MAX_OPTS] = {
        {"--listen", FL_OPT_STRING, a->listen},
        {"--shard", FL_OPT_INT, &a->shard},
        {"--ready-fd", FL_OPT_INT, &a->ready_fd},
        {"--control", FL_OPT_STRING, a->control},
    };
    int n = 4;
    for (int i = 0; i < def->nopts && n < MAX_OPTS; i++) opts[n++] = def->opts[i];
    int rc = fl_cli_parse(def->verb, argc, argv, &a->cfg, opts, n, NULL, 0);
    if (rc != 0) return rc;
    rc = def->check_shard(a);
    if (rc != 0) return rc;
    if (a->ready_fd < -1 || a->ready_fd > 1 << 20) {
        fprintf(stderr, "fleet %s: --ready-fd %" PRId64 " is not a file descriptor\n", def->verb, a->ready_fd);
        return 2;
    }
    if (!a->listen[0]) def->default_listen(a, a->listen, sizeof a->listen);
    return fl_security_bind_allowed(&a->cfg, def->verb, a->listen);
}

/* The bound address and a newline to --ready-fd, which is then closed. 0, or -1 after
 * logging why. */
static int write_ready(const fl_service_def_t *def, const fl_service_args_t *a, const char *addr) {
    if (a->ready_fd < 0) return 0;
    char line[520];
    int n = snprintf(line, sizeof line, "%s\n", addr);
    int bad = write_all((int)a->ready_fd, line, (size_t)n) != 0;
    int e = errno;
    close((int)a->ready_fd);
    if (!bad) return 0;
    FL_ERROR("cannot write the %s to --ready-fd %" PRId64 ": %s", def->ready_what, a->ready_fd, strerror(e));
    return -1;
}

/* Starts the created service, serves until a stop and stops it. The exit code. */
static int serve(const fl_service_def_t *def, const fl_service_args_t *a) {
    char addr[512];
    if (def->start(def->ctx, a, addr, sizeof addr) != 0 || write_ready(def, a, addr) != 0) {
        def->stop(def->ctx, 0);
        return 1;
    }
    while (!fl_stop_requested()) {
        if (def->tick && def->tick(def->ctx)) break;
        fl_sleep_sec(0.05);
    }
    def->stop(def->ctx, 1);
    return 0;
}

int fl_service_main(const fl_service_def_t *def, int argc, char **argv) {
    fl_service_args_t a;
    memset(&a, 0, sizeof a);
    a.ready_fd = -1;
    int rc = parse_args(def, argc, argv, &a);
    if (rc != 0) return rc;
    fl_cli_setup_logging(&a.cfg, def->verb, (int)a.shard);
    if (def->prepare && (rc = def->prepare(def->ctx, &a)) != 0) return rc;
    fl_stop_install();
    rc = def->create(def->ctx, &a);
    if (rc != 0) return rc;
    rc = serve(def, &a);
    def->destroy(def->ctx);
    return rc;
}
