/* config_args: --config FILE and --set SECTION.KEY=VALUE taken out of a command line
 * (fl_config_from_args, see config.h): the defaults, then the file, then the overrides
 * in the order given, then the cross-key checks. */
#include <stdlib.h>
#include <string.h>

#include "common/config.h"

/* If arg is `--name VALUE` or `--name=VALUE`, sets *value (NULL when VALUE is missing)
 * and returns 1; advances *i past a separate VALUE. */
static int option(const char *name, char **argv, int argc, int *i, const char **value) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    *value = *i + 1 < argc ? argv[++*i] : NULL;
    return 1;
}

fl_status fl_config_from_args(fl_config_t *c, int *argc, char **argv, fl_err_t *err) {
    if (!c || !argc || (*argc > 0 && !argv))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "fl_config_from_args: NULL argument");
    int n = *argc > 0 ? *argc : 0;
    const char **sets = malloc(sizeof *sets * (size_t)(n + 1));
    fl_config_t *tmp = malloc(sizeof *tmp);
    if (!sets || !tmp) {
        free(sets);
        free(tmp);
        return fl_err_set(err, FL_NO_MEMORY, "out of memory");
    }

    /* Pass 1: pick out the options and compact argv, keeping the first usage error. */
    fl_status st = FL_OK;
    const char *path = NULL;
    int nsets = 0, out = n > 0 ? 1 : 0, i;
    for (i = 1; i < n; i++) {
        const char *value;
        if (strcmp(argv[i], "--") == 0) break;
        if (option("--config", argv, n, &i, &value)) {
            if (st != FL_OK) continue;
            if (!value || !*value)
                st = fl_err_set(err, FL_INVALID_ARGUMENT, "--config expects a file name (--config FILE)");
            else if (path)
                st = fl_err_set(err, FL_INVALID_ARGUMENT, "--config given twice ('%s' and '%s'); give one file", path,
                                value);
            else
                path = value;
        } else if (option("--set", argv, n, &i, &value)) {
            if (st != FL_OK) continue;
            if (!value)
                st = fl_err_set(err, FL_INVALID_ARGUMENT, "--set expects section.key=value");
            else
                sets[nsets++] = value;
        } else {
            argv[out++] = argv[i];
        }
    }
    for (; i < n; i++) argv[out++] = argv[i];
    if (out < n) argv[out] = NULL;
    *argc = out;

    /* Pass 2: defaults, the file, the overrides, the cross-key checks. */
    if (st == FL_OK) {
        fl_config_defaults(tmp);
        if (path) st = fl_config_load_file(tmp, path, err);
        for (int k = 0; k < nsets && st == FL_OK; k++) st = fl_config_set(tmp, sets[k], err);
        if (st == FL_OK) st = fl_config_validate(tmp, err);
        if (st == FL_OK) *c = *tmp;
    }
    free(tmp);
    free(sets);
    return st;
}
