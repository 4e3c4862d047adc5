/* service_main: the skeleton that `fleet replay` and `fleet paramserver` share. It parses
 * --listen, --shard, --ready-fd and --control (then the service's own options) with the
 * config options, checks them, sets up logging, creates the service, starts it, writes
 * its address and a newline to --ready-fd (the launcher's pipe, then closed), serves
 * until SIGINT/SIGTERM (or until the service itself asks to stop), stops and destroys it.
 *
 * A service is a table of callbacks on the verb's own context (fl_service_def_t); the
 * verb owns that context and the skeleton keeps nothing between calls. Failure: usage and
 * configuration errors print "fleet VERB: ..." to stderr and exit 2; the callbacks print
 * or log their own failures and choose their exit codes; a failure to start or to write
 * --ready-fd exits 1; a requested stop exits 0. One thread (the service's servers run on
 * their own threads). */
#ifndef FL_CLI_SERVICE_MAIN_H
#define FL_CLI_SERVICE_MAIN_H

#include <stddef.h>
#include <stdint.h>

#include "cli/cli.h"
#include "common/config.h"

/* What the skeleton parsed; the callbacks read it. */
typedef struct fl_service_args {
    fl_config_t cfg;
    char listen[256];  /* --listen, or the service's default */
    char control[256]; /* --control ("" = none) */
    int64_t shard;     /* --shard (default 0) */
    int64_t ready_fd;  /* --ready-fd (-1 = none) */
} fl_service_args_t;

typedef struct fl_service_def {
    const char *verb;       /* "replay": the verb, its log role and its messages' prefix */
    const char *ready_what; /* what goes to --ready-fd, as its error message names it: "bound address" */
    const fl_opt_t *opts;   /* the service's own options, after the common ones (NULL = none) */
    int nopts;
    void *ctx; /* the first argument of the callbacks */
    /* 0 when a->shard is in range; else prints why and returns 2. */
    int (*check_shard)(const fl_service_args_t *a);
    /* The --listen default (from a->cfg) into buf. */
    void (*default_listen)(const fl_service_args_t *a, char *buf, size_t len);
    /* Optional; after logging is set up and before the signal handlers: the service's
     * further checks and preparation (it may adjust a->cfg). 0, or the exit code after
     * printing why. */
    int (*prepare)(void *ctx, fl_service_args_t *a);
    /* Creates the service: 0, or the exit code after logging why (nothing to destroy then). */
    int (*create)(void *ctx, const fl_service_args_t *a);
    /* Starts serving on a->listen and logs it: 0 with the bound address in addr, or -1
     * after logging why. */
    int (*start)(void *ctx, const fl_service_args_t *a, char *addr, size_t len);
    /* Optional; every 0.05 s while serving: 1 when the service should stop by itself. */
    int (*tick)(void *ctx);
    /* Stops serving. clean: after a requested stop (the service logs and reports its last
     * figures); else after start or --ready-fd failed. */
    void (*stop)(void *ctx, int clean);
    /* Frees the service (after create succeeded). */
    void (*destroy)(void *ctx);
} fl_service_def_t;

/* Runs the service verb (argv[0] = its name); returns the process exit code. */
int fl_service_main(const fl_service_def_t *def, int argc, char **argv);

#endif
