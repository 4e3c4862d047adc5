/* cli: option parsing shared by the verbs. A verb declares a table of options; the
 * config options (--config, --set) are taken first by fl_config_from_args, then the
 * table's options; anything left over is a usage error that names the option. */
#ifndef FL_CLI_CLI_H
#define FL_CLI_CLI_H

#include "common/config.h"
#include "common/status.h"

typedef enum { FL_OPT_STRING, FL_OPT_INT, FL_OPT_FLAG } fl_opt_kind;

typedef struct fl_opt {
    const char *name; /* "--listen" */
    fl_opt_kind kind;
    void *dest; /* char[256] for STRING, int64_t for INT, int for FLAG */
} fl_opt_t;

/* Parses argv (argv[0] = the verb's name): config options into cfg, then the table;
 * then sets this process's gRPC security from run.tls_dir (launcher/security.h).
 * `positional` (may be NULL) receives one positional argument (e.g. the config file of
 * `fleet run`); a second one is an error. Prints the error to stderr and returns 2 on
 * failure, 0 on success. */
int fl_cli_parse(const char *verb, int argc, char **argv, fl_config_t *cfg, const fl_opt_t *opts, int nopts,
                 char *positional, size_t positional_len);

/* Sets the log level from cfg and the log prefix to role/index. */
void fl_cli_setup_logging(const fl_config_t *cfg, const char *role, int index);

/* Adds increment (> 0; 0 does nothing) to this process's niceness, as the config key
 * `key` asks; a failure is a warning (the process runs at its inherited priority). */
void fl_cli_nice(int64_t increment, const char *key);

/* on != 0: puts this thread, and so every thread it starts afterwards, under Linux's
 * SCHED_IDLE policy, as the config key `key` asks (call it before any thread starts); a
 * failure is a warning. */
void fl_cli_sched_idle(int on, const char *key);

#endif
