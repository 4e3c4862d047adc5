/* cli: shared option parsing for the verbs (see cli.h). */
#include "cli/cli.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/security.h"
#include "common/log.h"

static int set_opt(const char *verb, const fl_opt_t *o, const char *value) {
    switch (o->kind) {
    case FL_OPT_STRING:
        if (strlen(value) >= 256) {
            fprintf(stderr, "fleet %s: %s: value longer than 255 bytes\n", verb, o->name);
            return 2;
        }
        snprintf((char *)o->dest, 256, "%s", value);
        return 0;
    case FL_OPT_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end) {
            fprintf(stderr, "fleet %s: %s: '%s' is not an integer\n", verb, o->name, value);
            return 2;
        }
        *(int64_t *)o->dest = v;
        return 0;
    }
    case FL_OPT_FLAG: *(int *)o->dest = 1; return 0;
    }
    return 2;
}

int fl_cli_parse(const char *verb, int argc, char **argv, fl_config_t *cfg, const fl_opt_t *opts, int nopts,
                 char *positional, size_t positional_len) {
    fl_err_t err;
    fl_err_init(&err);
    if (positional) positional[0] = '\0';
    /* A leading positional argument of `fleet run` is a config file: turn it into --config. */
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) return 1;
    int n = 0;
    args[n++] = argv[0];
    int i = 1;
    if (positional && argc > 1 && argv[1][0] != '-') {
        args[n++] = "--config";
        args[n++] = argv[1];
        snprintf(positional, positional_len, "%s", argv[1]);
        i = 2;
    }
    for (; i < argc; i++) args[n++] = argv[i];
    if (fl_config_from_args(cfg, &n, args, &err) != FL_OK) {
        fprintf(stderr, "fleet %s: %s\n", verb, err.msg);
        free(args);
        return 2;
    }
    for (i = 1; i < n; i++) {
        const char *a = args[i];
        const fl_opt_t *o = NULL;
        const char *value = NULL;
        for (int k = 0; k < nopts; k++) {
            size_t len = strlen(opts[k].name);
            if (strncmp(a, opts[k].name, len) == 0 && (a[len] == '\0' || a[len] == '=')) {
                o = &opts[k];
                if (a[len] == '=') value = a + len + 1;
                break;
            }
        }
        if (!o) {
            fprintf(stderr, "fleet %s: unknown option '%s'\n", verb, a);
            free(args);
            return 2;
        }
        if (o->kind != FL_OPT_FLAG && !value) {
            if (i + 1 >= n) {
                fprintf(stderr, "fleet %s: option %s needs a value\n", verb, o->name);
                free(args);
                return 2;
            }
            value = args[++i];
        }
        if (set_opt(verb, o, value ? value : "") != 0) {
            free(args);
            return 2;
        }
    }
    free(args);
    if (fl_config_validate(cfg, &err) != FL_OK) {
        fprintf(stderr, "fleet %s: %s\n", verb, err.msg);
        return 2;
    }
    /* Every process that parses a config talks gRPC as its config says: TLS and tokens
     * from run.tls_dir, or plaintext without it. */
    return fl_security_setup(cfg, verb);
}

void fl_cli_nice(int64_t increment, const char *key) {
    if (increment <= 0) return;
    errno = 0;
    if (nice((int)increment) == -1 && errno != 0)
        FL_WARN("%s = %lld: nice() failed (%s); running at the inherited priority", key, (long long)increment,
                strerror(errno));
}

void fl_cli_sched_idle(int on, const char *key) {
    if (!on) return;
#ifdef SCHED_IDLE
    const struct sched_param p = {.sched_priority = 0};
    if (sched_setscheduler(0, SCHED_IDLE, &p) != 0)
        FL_WARN("%s: sched_setscheduler(SCHED_IDLE) failed (%s); running under the inherited policy", key,
                strerror(errno));
#else
    FL_WARN("%s: this system has no SCHED_IDLE; running under the inherited policy", key);
#endif
}

void fl_cli_setup_logging(const fl_config_t *cfg, const char *role, int index) {
    int level = fl_log_parse_level(FL_CONFIG_ENUM_STR(cfg, run, log_level));
    if (level >= 0) fl_log_set_level((fl_log_level)level);
    fl_log_set_role(role, index);
}
