/* statefile: key = value state files (see statefile.h). */
#include "common/statefile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsync.h"

fl_status fl_state_begin(fl_state_out_t *w, const char *path, const char *kind, fl_err_t *err) {
    memset(w, 0, sizeof *w);
    if (strlen(path) >= sizeof w->path)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "state file %.200s...: path too long", path);
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->f = fopen(w->tmp, "w");
    if (!w->f) return fl_err_set(err, FL_IO_ERROR, "state file %s: %s", w->tmp, strerror(errno));
    fprintf(w->f, "# fleet state %s 1\n", kind);
    return FL_OK;
}

void fl_state_put_u64(fl_state_out_t *w, const char *key, uint64_t v) {
    fprintf(w->f, "%s = %" PRIu64 "\n", key, v);
}

void fl_state_put_double(fl_state_out_t *w, const char *key, double v) {
    fprintf(w->f, "%s = %.17g\n", key, v);
}

void fl_state_put_rng(fl_state_out_t *w, const char *key, const fl_rng_t *r) {
    fprintf(w->f, "%s = %016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64 "\n", key, r->s[0], r->s[1], r->s[2],
            r->s[3]);
}

void fl_state_put_floats(fl_state_out_t *w, const char *key, const float *v, size_t n) {
    fprintf(w->f, "%s =", key);
    for (size_t i = 0; i < n; i++) fprintf(w->f, " %.9g", v[i]);
    fprintf(w->f, "\n");
}

void fl_state_put_doubles(fl_state_out_t *w, const char *key, const double *v, size_t n) {
    fprintf(w->f, "%s =", key);
    for (size_t i = 0; i < n; i++) fprintf(w->f, " %.17g", v[i]);
    fprintf(w->f, "\n");
}

void fl_state_abort(fl_state_out_t *w) {
    if (!w->f) return;
    fclose(w->f);
    w->f = NULL;
    unlink(w->tmp);
}

fl_status fl_state_commit(fl_state_out_t *w, fl_err_t *err) {
    int bad = fflush(w->f) != 0 || ferror(w->f) || fsync(fileno(w->f)) != 0;
    int e = errno;
    if (fclose(w->f) != 0 && !bad) bad = 1, e = errno;
    w->f = NULL;
    if (bad || rename(w->tmp, w->path) != 0) {
        if (!bad) e = errno;
        unlink(w->tmp);
        return fl_err_set(err, FL_IO_ERROR, "state file %s: %s", w->path, strerror(e));
    }
    return fl_fsync_parent(w->path, err);
}

/* ------------------------------------------------------------------ reading ---- */

struct fl_state {
    char *text; /* the file, its lines cut at '\n' and ' = ' */
    char **keys, **vals;
    size_t n;
};

void fl_state_free(fl_state_t *st) {
    if (!st) return;
    free(st->text);
    free(st->keys);
    free(st->vals);
    free(st);
}

static fl_status read_all(const char *path, char **out, fl_err_t *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return fl_err_set(err, errno == ENOENT ? FL_NOT_FOUND : FL_IO_ERROR, "state file %s: %s", path,
                          strerror(errno));
    char *buf = malloc(FL_STATE_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, FL_STATE_MAX_BYTES + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf) return fl_err_set(err, FL_NO_MEMORY, "state file %s: out of memory", path);
    if (bad || n > FL_STATE_MAX_BYTES) {
        free(buf);
        return fl_err_set(err, FL_PARSE_ERROR, "state file %s: %s", path,
                          bad ? "cannot be read" : "larger than a state file can be");
    }
    buf[n] = '\0';
    *out = buf;
    return FL_OK;
}

/* Cuts the text into key/value pairs. */
static fl_status parse(fl_state_t *st, const char *path, const char *kind, fl_err_t *err) {
    size_t lines = 1;
    for (const char *c = st->text; *c; c++) lines += *c == '\n';
    st->keys = calloc(lines, sizeof *st->keys);
    st->vals = calloc(lines, sizeof *st->vals);
    if (!st->keys || !st->vals) return fl_err_set(err, FL_NO_MEMORY, "state file %s: out of memory", path);
    char head[128];
    snprintf(head, sizeof head, "# fleet state %s 1", kind);
    char *line = st->text;
    for (size_t no = 1; line && *line; no++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (no == 1 && strcmp(line, head) != 0)
            return fl_err_set(err, FL_PARSE_ERROR, "state file %s: first line \"%.60s\", expected \"%s\"", path, line,
                              head);
        if (no > 1 && *line) {
            char *eq = strstr(line, " =");
            if (!eq) return fl_err_set(err, FL_PARSE_ERROR, "state file %s:%zu: expected \"key = value\"", path, no);
            *eq = '\0';
            st->keys[st->n] = line;
            st->vals[st->n++] = eq[2] == ' ' ? eq + 3 : eq + 2;
        }
        line = nl ? nl + 1 : NULL;
    }
    return FL_OK;
}

fl_status fl_state_load(const char *path, const char *kind, fl_state_t **out, fl_err_t *err) {
    *out = NULL;
    fl_state_t *st = calloc(1, sizeof *st);
    if (!st) return fl_err_set(err, FL_NO_MEMORY, "state file %s: out of memory", path);
    fl_status s = read_all(path, &st->text, err);
    if (s == FL_OK) s = parse(st, path, kind, err);
    if (s != FL_OK) {
        fl_state_free(st);
        return s;
    }
    *out = st;
    return FL_OK;
}

static const char *find(const fl_state_t *st, const char *key) {
    for (size_t i = st->n; i-- > 0;)
        if (strcmp(st->keys[i], key) == 0) return st->vals[i];
    return NULL;
}

int fl_state_get_u64(const fl_state_t *st, const char *key, uint64_t *out) {
    const char *v = find(st, key);
    char *end;
    if (!v || !*v || *v == '-') return 0;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end) return 0;
    *out = x;
    return 1;
}

int fl_state_get_double(const fl_state_t *st, const char *key, double *out) {
    const char *v = find(st, key);
    char *end;
    if (!v || !*v) return 0;
    double x = strtod(v, &end);
    if (*end) return 0;
    *out = x;
    return 1;
}

int fl_state_get_rng(const fl_state_t *st, const char *key, fl_rng_t *out) {
    const char *v = find(st, key);
    fl_rng_t r;
    int used = 0;
    if (!v ||
        sscanf(v, "%" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 "%n", &r.s[0], &r.s[1], &r.s[2], &r.s[3], &used) !=
            4 ||
        v[used])
        return 0;
    *out = r;
    return 1;
}

/* The numbers of key's value into dout (doubles) or fout (floats, read as floats so that
 * 9 digits give the float back exactly). */
static size_t get_list(const fl_state_t *st, const char *key, double *dout, float *fout, size_t max) {
    const char *v = find(st, key);
    if (!v) return 0;
    size_t n = 0;
    for (const char *c = v; *c;) {
        char *end;
        double d = dout ? strtod(c, &end) : 0;
        float f = fout ? strtof(c, &end) : 0;
        if (end == c) return 0;
        if (n < max && dout) dout[n] = d;
        if (n < max && fout) fout[n] = f;
        n++;
        c = end;
        while (*c == ' ') c++;
    }
    return n;
}

size_t fl_state_get_doubles(const fl_state_t *st, const char *key, double *out, size_t max) {
    return get_list(st, key, out, NULL, max);
}

size_t fl_state_get_floats(const fl_state_t *st, const char *key, float *out, size_t max) {
    return get_list(st, key, NULL, out, max);
}
