/* config: the key table as an array of descriptors, value parsing and checking, the INI
 * loader, the dump and the help (--config and --set on a command line: config_args.c).
 *
 * Every function walks `keys[]`, built from FL_CONFIG_KEYS; a descriptor knows where its
 * field lives (offsetof) and how to parse, check and print it.
 *
 * The loader reads INI as libinih's defaults do (sections, `key = value` or `key: value`,
 * `;` and `#` comment lines, `;` after whitespace starts an inline comment), with what a
 * config needs and libinih's defaults lack: no line-length limit, every error with its
 * physical line (the earliest one is reported), indented lines read as lines (not as
 * continuations), text after `]` refused. */
#include "common/config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/suggest.h"

/* ---- the key table -------------------------------------------------------------- */

typedef enum { KT_INT, KT_FLOAT, KT_BOOL, KT_STRING, KT_ENUM } key_type;

typedef struct {
    const char *section;
    const char *key;
    const char *name; /* "section.key" */
    key_type type;
    size_t offset;    /* of the field in fl_config_t */
    int64_t idef;     /* INT, BOOL */
    double fdef;      /* FLOAT */
    const char *sdef; /* STRING, ENUM */
    int64_t imin, imax;
    double fmin, fmax;
    const char *choices; /* ENUM: '|'-separated */
    const char *help;
} key_desc;

#define DEF_INT(d) .idef = (d)
#define DEF_FLOAT(d) .fdef = (d)
#define DEF_BOOL(d) .idef = (d)
#define DEF_STRING(d) .sdef = (d)
#define DEF_ENUM(d) .sdef = (d)
#define KEY_ROW(s, k, t, d, lo, hi, ch, h)     \
    {.section = #s,                            \
     .key = #k,                                \
     .name = #s "." #k,                        \
     .type = KT_##t,                           \
     .offset = offsetof(fl_config_t, s##_##k), \
     DEF_##t(d),                               \
     .imin = (int64_t)(lo),                    \
     .imax = (int64_t)(hi),                    \
     .fmin = (double)(lo),                     \
     .fmax = (double)(hi),                     \
     .choices = (ch),                          \
     .help = (h)},

static const key_desc keys[] = {FL_CONFIG_KEYS(KEY_ROW)};
#define NKEYS (sizeof keys / sizeof keys[0])

/* STRING and ENUM defaults must fit their field. */
#define FITS_INT(s, k, d)
#define FITS_FLOAT(s, k, d)
#define FITS_BOOL(s, k, d)
#define FITS_STRING(s, k, d) _Static_assert(sizeof(d) <= FL_CONFIG_STRING_MAX, "default of " #s "." #k " is too long");
#define FITS_ENUM(s, k, d) \
    _Static_assert(sizeof(fl_cfg_##s##_##k) == sizeof(int), #s "." #k ": an enum the size of int");
#define FITS_ROW(s, k, t, d, lo, hi, ch, h) FITS_##t(s, k, d)
FL_CONFIG_KEYS(FITS_ROW)

static void *field(fl_config_t *c, const key_desc *d) {
    return (char *)c + d->offset;
}
static const void *cfield(const fl_config_t *c, const key_desc *d) {
    return (const char *)c + d->offset;
}

static const key_desc *find_key(const char *section, const char *key) {
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0) return &keys[i];
    return NULL;
}

static const key_desc *find_name(const char *name) {
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}

static int section_exists(const char *section) {
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0) return 1;
    return 0;
}

/* 1 if keys[i] is the first row of its section (sections in order of first appearance). */
static int first_of_section(size_t i) {
    for (size_t j = 0; j < i; j++)
        if (strcmp(keys[j].section, keys[i].section) == 0) return 0;
    return 1;
}

size_t fl_config_key_count(void) {
    return NKEYS;
}

const char *fl_config_key_name(size_t i) {
    return i < NKEYS ? keys[i].name : NULL;
}

static int choice_at(const char *choices, int i, char *buf, size_t len);

/* The choices of every ENUM key, split once into NUL-terminated names. */
#define MAX_CHOICES 8
#define MAX_CHOICE_LEN 32
static char choice_names[NKEYS][MAX_CHOICES][MAX_CHOICE_LEN];
static pthread_once_t choices_once = PTHREAD_ONCE_INIT;

static void split_choices(void) {
    for (size_t k = 0; k < NKEYS; k++)
        if (keys[k].type == KT_ENUM)
            for (int i = 0; i < MAX_CHOICES; i++)
                if (!choice_at(keys[k].choices, i, choice_names[k][i], MAX_CHOICE_LEN)) break;
}

const char *fl_config_enum_name(const char *name, int v) {
    pthread_once(&choices_once, split_choices);
    for (size_t k = 0; k < NKEYS; k++)
        if (keys[k].type == KT_ENUM && strcmp(keys[k].name, name) == 0)
            return v >= 0 && v < MAX_CHOICES ? choice_names[k][v] : "";
    return "";
}

/* ---- text helpers --------------------------------------------------------------- */

/* A comma-separated list into a fixed buffer, ending in "..." when it does not fit. */
typedef struct {
    char s[320];
    size_t len;
    int full;
} list_buf;

static void list_add(list_buf *l, const char *item) {
    if (l->full) return;
    size_t need = strlen(item) + (l->len ? 2 : 0);
    if (l->len + need + 8 >= sizeof l->s) { /* 8 bytes stay free for ", ..." */
        snprintf(l->s + l->len, sizeof l->s - l->len, "%s...", l->len ? ", " : "");
        l->full = 1;
        return;
    }
    l->len += (size_t)snprintf(l->s + l->len, sizeof l->s - l->len, "%s%s", l->len ? ", " : "", item);
}

/* A value as shown in a message: '' when empty, cut after 60 bytes. */
typedef struct {
    char s[72];
} shown;

static shown show(const char *v) {
    shown r;
    size_t n = strlen(v);
    if (n == 0)
        snprintf(r.s, sizeof r.s, "''");
    else if (n > 60)
        snprintf(r.s, sizeof r.s, "%.60s...", v);
    else
        snprintf(r.s, sizeof r.s, "%s", v);
    return r;
}

/* The shortest text among %.1g ... %.17g that reads back to exactly v. */
static void format_double(double v, char *buf, size_t len) {
    char best[40] = "", tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        double back = strtod(tmp, NULL);
        if (memcmp(&back, &v, sizeof v) == 0 && (!best[0] || strlen(tmp) < strlen(best))) memcpy(best, tmp, sizeof tmp);
    }
    if (!best[0]) snprintf(best, sizeof best, "%.17g", v);
    snprintf(buf, len, "%s", best);
}

/* "an integer in [1, 65536]", "one of rmsprop|adam|sgd", ... */
static void describe_accepted(const key_desc *d, char *buf, size_t len) {
    char lo[32], hi[32];
    switch (d->type) {
    case KT_INT: snprintf(buf, len, "an integer in [%" PRId64 ", %" PRId64 "]", d->imin, d->imax); break;
    case KT_FLOAT:
        format_double(d->fmin, lo, sizeof lo);
        format_double(d->fmax, hi, sizeof hi);
        snprintf(buf, len, "a number in [%s, %s]", lo, hi);
        break;
    case KT_BOOL: snprintf(buf, len, "true/false, yes/no, on/off or 1/0"); break;
    case KT_STRING: snprintf(buf, len, "text of at most %d bytes", FL_CONFIG_STRING_MAX - 1); break;
    case KT_ENUM: snprintf(buf, len, "one of %s", d->choices); break;
    }
}

static const char *type_name(key_type t) {
    switch (t) {
    case KT_INT: return "int";
    case KT_FLOAT: return "float";
    case KT_BOOL: return "bool";
    case KT_STRING: return "string";
    case KT_ENUM: return "enum";
    }
    return "?";
}

/* Sets err to "loc: <formatted>" (or just the text when loc is NULL or empty). */
__attribute__((format(printf, 4, 5))) static fl_status fail(fl_err_t *err, fl_status code, const char *loc,
                                                            const char *fmt, ...) {
    char body[FL_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (loc && *loc) return fl_err_set(err, code, "%s: %s", loc, body);
    return fl_err_set(err, code, "%s", body);
}

static void sections_list(list_buf *l) {
    for (size_t i = 0; i < NKEYS; i++)
        if (first_of_section(i)) list_add(l, keys[i].section);
}

static fl_status unknown_key(const char *section, const char *key, const char *loc, fl_err_t *err) {
    char given[160];
    if (*section)
        snprintf(given, sizeof given, "%s.%s", show(section).s, show(key).s);
    else
        snprintf(given, sizeof given, "%s", show(key).s);

    /* Suggest the same key in another section, else the nearest name. */
    const key_desc *best = NULL;
    size_t best_dist = SIZE_MAX;
    for (size_t i = 0; i < NKEYS; i++) {
        size_t dist = strcmp(keys[i].key, key) == 0 ? 0 : fl_edit_distance(given, keys[i].name);
        if (dist < best_dist) best_dist = dist, best = &keys[i];
    }
    size_t limit = strlen(given) / 5 > 2 ? strlen(given) / 5 : 2;
    char hint[96] = "";
    if (best && best_dist <= limit) snprintf(hint, sizeof hint, "; did you mean '%s'?", best->name);

    list_buf l = {0};
    if (!*section) {
        sections_list(&l);
        return fail(err, FL_NOT_FOUND, loc, "unknown key '%s' (it comes before any [section] line; sections are %s%s)",
                    given, l.s, hint);
    }
    if (!section_exists(section)) {
        sections_list(&l);
        return fail(err, FL_NOT_FOUND, loc, "unknown key '%s' (section [%s] does not exist; sections are %s%s)", given,
                    show(section).s, l.s, hint);
    }
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0) list_add(&l, keys[i].key);
    return fail(err, FL_NOT_FOUND, loc, "unknown key '%s' (section [%s] has %s%s)", given, section, l.s, hint);
}

static fl_status unknown_section(const char *section, const char *loc, fl_err_t *err) {
    const char *best = NULL;
    size_t best_dist = SIZE_MAX;
    for (size_t i = 0; i < NKEYS; i++) {
        size_t dist = fl_edit_distance(section, keys[i].section);
        if (first_of_section(i) && dist < best_dist) best_dist = dist, best = keys[i].section;
    }
    char hint[96] = "";
    if (best && best_dist <= 2) snprintf(hint, sizeof hint, "; did you mean [%s]?", best);
    list_buf l = {0};
    sections_list(&l);
    return fail(err, FL_NOT_FOUND, loc, "unknown section [%s] (sections are %s%s)", show(section).s, l.s, hint);
}

/* ---- values --------------------------------------------------------------------- */

typedef union {
    int64_t i;
    double f;
    char s[FL_CONFIG_STRING_MAX];
} value_t;

/* Why a string cannot be stored (an INI file could not hold it), or NULL. */
static const char *string_problem(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return "contains a control character (an INI value cannot hold newlines or other control characters)";
        if (ch == ';' && i > 0 && isspace((unsigned char)s[i - 1]))
            return "contains a ';' after whitespace, which starts a comment in an INI file";
    }
    return NULL;
}

/* The position of v among the '|'-separated choices (case-insensitive), or -1. */
static int match_choice(const char *choices, const char *v) {
    size_t vn = strlen(v);
    int i = 0;
    for (const char *p = choices; *p; i++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == vn && strncasecmp(p, v, n) == 0) return i;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

/* Choice number i of the '|'-separated choices into buf; 0 when there is none. */
static int choice_at(const char *choices, int i, char *buf, size_t len) {
    const char *p = choices;
    for (int k = 0; k < i; k++) {
        p = strchr(p, '|');
        if (!p) return 0;
        p++;
    }
    if (i < 0 || !*p) return 0;
    const char *bar = strchr(p, '|');
    snprintf(buf, len, "%.*s", (int)(bar ? (size_t)(bar - p) : strlen(p)), p);
    return 1;
}

/* Parses trimmed text t for key d into *out. */
static fl_status parse_value(const key_desc *d, const char *t, value_t *out, const char *loc, fl_err_t *err) {
    char acc[FL_CONFIG_STRING_MAX + 32];
    describe_accepted(d, acc, sizeof acc);
    char *end;
    switch (d->type) {
    case KT_INT: {
        errno = 0;
        long long v = strtoll(t, &end, 10);
        if (end == t || *end || isspace((unsigned char)*t))
            return fail(err, FL_INVALID_ARGUMENT, loc, "%s = %s is not an integer (expected %s)", d->name, show(t).s,
                        acc);
        if (errno == ERANGE || v < d->imin || v > d->imax)
            return fail(err, FL_INVALID_ARGUMENT, loc, "%s = %s is out of range (expected %s)", d->name, show(t).s,
                        acc);
        out->i = v;
        return FL_OK;
    }
    case KT_FLOAT: {
        errno = 0;
        double v = strtod(t, &end);
        if (end == t || *end || isspace((unsigned char)*t))
            return fail(err, FL_INVALID_ARGUMENT, loc, "%s = %s is not a number (expected %s)", d->name, show(t).s,
                        acc);
        if (isnan(v) || (isinf(v) && errno != ERANGE))
            return fail(err, FL_INVALID_ARGUMENT, loc, "%s = %s is not a finite number (expected %s)", d->name,
                        show(t).s, acc);
        if (isinf(v) || v < d->fmin || v > d->fmax)
            return fail(err, FL_INVALID_ARGUMENT, loc, "%s = %s is out of range (expected %s)", d->name, show(t).s,
                        acc);
        out->f = v;
        return FL_OK;
    }
    case KT_BOOL: {
        static const char *const truthy[] = {"true", "1", "yes", "on"};
        static const char *const falsy[] = {"false", "0", "no", "off"};
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(t, truthy[i]) == 0 || strcasecmp(t, falsy[i]) == 0) {
                out->i = strcasecmp(t, truthy[i]) == 0;
                return FL_OK;
            }
        }
        return fail(err, FL_INVALID_ARGUMENT, loc, "%s = %s is not a boolean (expected %s)", d->name, show(t).s, acc);
    }
    case KT_STRING:
    case KT_ENUM: {
        const char *s = t;
        size_t n = strlen(t);
        if (n > 0 && s[0] == '"') {
            if (n < 2 || s[n - 1] != '"')
                return fail(err, FL_INVALID_ARGUMENT, loc,
                            "%s = %s has an opening double quote but no closing one (expected %s; write \"\"...\" "
                            "for a value that starts with a quote)",
                            d->name, show(t).s, acc);
            s++, n -= 2;
        }
        char tmp[FL_CONFIG_STRING_MAX];
        if (n > FL_CONFIG_STRING_MAX - 1)
            return fail(err, FL_INVALID_ARGUMENT, loc, "%s = %s is too long (%zu bytes; expected %s)", d->name,
                        show(t).s, n, acc);
        memcpy(tmp, s, n);
        tmp[n] = '\0';
        if (d->type == KT_ENUM) {
            int i = match_choice(d->choices, tmp);
            if (i < 0)
                return fail(err, FL_INVALID_ARGUMENT, loc, "%s = %s is not an accepted value (expected %s)", d->name,
                            show(t).s, acc);
            out->i = i;
            return FL_OK;
        }
        const char *why = string_problem(tmp, n);
        if (why) return fail(err, FL_INVALID_ARGUMENT, loc, "%s = %s %s", d->name, show(t).s, why);
        memcpy(out->s, tmp, n + 1);
        return FL_OK;
    }
    }
    return fail(err, FL_INTERNAL, loc, "%s: unknown key type", d->name);
}

static void store(fl_config_t *c, const key_desc *d, const value_t *v) {
    void *p = field(c, d);
    switch (d->type) {
    case KT_INT: *(int64_t *)p = v->i; break;
    case KT_FLOAT: *(double *)p = v->f; break;
    case KT_BOOL: *(int *)p = (int)v->i; break;
    case KT_STRING: memcpy(p, v->s, strlen(v->s) + 1); break;
    case KT_ENUM: *(int *)p = (int)v->i; break;
    }
}

/* The value of key d in c as text (strings raw); returns the length snprintf would. */
static int format_value(const fl_config_t *c, const key_desc *d, char *buf, size_t len) {
    const void *p = cfield(c, d);
    switch (d->type) {
    case KT_INT: return snprintf(buf, len, "%" PRId64, *(const int64_t *)p);
    case KT_FLOAT: {
        char tmp[40];
        format_double(*(const double *)p, tmp, sizeof tmp);
        return snprintf(buf, len, "%s", tmp);
    }
    case KT_BOOL: return snprintf(buf, len, "%s", *(const int *)p ? "true" : "false");
    case KT_STRING: return snprintf(buf, len, "%.*s", FL_CONFIG_STRING_MAX - 1, (const char *)p);
    case KT_ENUM: {
        char name[FL_CONFIG_STRING_MAX];
        if (!choice_at(d->choices, *(const int *)p, name, sizeof name))
            snprintf(name, sizeof name, "%d", *(const int *)p);
        return snprintf(buf, len, "%s", name);
    }
    }
    return snprintf(buf, len, "?");
}

static void format_default(const key_desc *d, char *buf, size_t len) {
    switch (d->type) {
    case KT_INT: snprintf(buf, len, "%" PRId64, d->idef); break;
    case KT_FLOAT: format_double(d->fdef, buf, len); break;
    case KT_BOOL: snprintf(buf, len, "%s", d->idef ? "true" : "false"); break;
    case KT_STRING: snprintf(buf, len, "\"%s\"", d->sdef); break;
    case KT_ENUM: snprintf(buf, len, "%s", d->sdef); break;
    }
}

/* Checks that the field of key d holds a value the key accepts (for structs filled in by
 * code rather than parsed). */
static fl_status check_field(const fl_config_t *c, const key_desc *d, fl_err_t *err) {
    char acc[FL_CONFIG_STRING_MAX + 32], text[FL_CONFIG_STRING_MAX + 40];
    describe_accepted(d, acc, sizeof acc);
    const void *p = cfield(c, d);
    switch (d->type) {
    case KT_INT: {
        int64_t v = *(const int64_t *)p;
        if (v < d->imin || v > d->imax)
            return fail(err, FL_INVALID_ARGUMENT, NULL, "%s = %" PRId64 " is out of range (expected %s)", d->name, v,
                        acc);
        return FL_OK;
    }
    case KT_FLOAT: {
        double v = *(const double *)p;
        format_value(c, d, text, sizeof text);
        if (!isfinite(v))
            return fail(err, FL_INVALID_ARGUMENT, NULL, "%s = %s is not a finite number (expected %s)", d->name, text,
                        acc);
        if (v < d->fmin || v > d->fmax)
            return fail(err, FL_INVALID_ARGUMENT, NULL, "%s = %s is out of range (expected %s)", d->name, text, acc);
        return FL_OK;
    }
    case KT_BOOL: {
        int v = *(const int *)p;
        if (v != 0 && v != 1)
            return fail(err, FL_INVALID_ARGUMENT, NULL, "%s = %d is not a boolean (expected 0 or 1)", d->name, v);
        return FL_OK;
    }
    case KT_ENUM: {
        char name[FL_CONFIG_STRING_MAX];
        int v = *(const int *)p;
        if (!choice_at(d->choices, v, name, sizeof name))
            return fail(err, FL_INVALID_ARGUMENT, NULL, "%s = %d is not an accepted value (expected %s)", d->name, v,
                        acc);
        return FL_OK;
    }
    case KT_STRING: {
        const char *s = p;
        size_t n = strnlen(s, FL_CONFIG_STRING_MAX);
        if (n == FL_CONFIG_STRING_MAX)
            return fail(err, FL_INVALID_ARGUMENT, NULL, "%s is not NUL-terminated (expected %s)", d->name, acc);
        const char *why = string_problem(s, n);
        if (why) return fail(err, FL_INVALID_ARGUMENT, NULL, "%s = %s %s", d->name, show(s).s, why);
        return FL_OK;
    }
    }
    return FL_OK;
}

/* ---- public: defaults, set, get ------------------------------------------------- */

void fl_config_defaults(fl_config_t *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NKEYS; i++) {
        const key_desc *d = &keys[i];
        void *p = field(c, d);
        switch (d->type) {
        case KT_INT: *(int64_t *)p = d->idef; break;
        case KT_FLOAT: *(double *)p = d->fdef; break;
        case KT_BOOL: *(int *)p = (int)d->idef; break;
        case KT_STRING: snprintf(p, FL_CONFIG_STRING_MAX, "%s", d->sdef); break;
        case KT_ENUM: *(int *)p = match_choice(d->choices, d->sdef); break;
        }
    }
}

static int is_space(char ch) {
    return isspace((unsigned char)ch) != 0;
}

fl_status fl_config_set_kv(fl_config_t *c, const char *section, const char *key, const char *value,
                           const char *location, fl_err_t *err) {
    if (!c || !section || !key || !value)
        return fail(err, FL_INVALID_ARGUMENT, location, "fl_config_set_kv: NULL argument");
    const key_desc *d = find_key(section, key);
    if (!d) return unknown_key(section, key, location, err);

    while (is_space(*value)) value++;
    size_t n = strlen(value);
    while (n > 0 && is_space(value[n - 1])) n--;
    char *t = malloc(n + 1);
    if (!t) return fail(err, FL_NO_MEMORY, location, "out of memory");
    memcpy(t, value, n);
    t[n] = '\0';

    value_t *v = malloc(sizeof *v);
    fl_status st = v ? parse_value(d, t, v, location, err) : fail(err, FL_NO_MEMORY, location, "out of memory");
    if (st == FL_OK) store(c, d, v);
    free(v);
    free(t);
    return st;
}

fl_status fl_config_set(fl_config_t *c, const char *assignment, fl_err_t *err) {
    if (!c || !assignment) return fail(err, FL_INVALID_ARGUMENT, NULL, "fl_config_set: NULL argument");
    char loc[128];
    if (strlen(assignment) > 100)
        snprintf(loc, sizeof loc, "--set %.100s...", assignment);
    else
        snprintf(loc, sizeof loc, "--set %s", assignment);

    const char *eq = strchr(assignment, '=');
    const char *dot = eq ? memchr(assignment, '.', (size_t)(eq - assignment)) : NULL;
    if (!eq || !dot) return fail(err, FL_PARSE_ERROR, loc, "expected section.key=value (e.g. --set learner.lr=0.0001)");

    const char *s = assignment, *s_end = dot, *k = dot + 1, *k_end = eq;
    while (s < s_end && is_space(*s)) s++;
    while (k_end > k && is_space(k_end[-1])) k_end--;
    if (s == s_end || k == k_end)
        return fail(err, FL_PARSE_ERROR, loc, "expected section.key=value (e.g. --set learner.lr=0.0001)");
    /* Names longer than the buffers cannot be keys; cut, they still read as unknown. */
    char section[FL_CONFIG_STRING_MAX], key[FL_CONFIG_STRING_MAX];
    int sn = (int)(s_end - s), kn = (int)(k_end - k);
    snprintf(section, sizeof section, "%.*s", sn < FL_CONFIG_STRING_MAX ? sn : FL_CONFIG_STRING_MAX - 1, s);
    snprintf(key, sizeof key, "%.*s", kn < FL_CONFIG_STRING_MAX ? kn : FL_CONFIG_STRING_MAX - 1, k);
    return fl_config_set_kv(c, section, key, eq + 1, loc, err);
}

fl_status fl_config_get_string(const fl_config_t *c, const char *name, char *buf, size_t len, fl_err_t *err) {
    if (!c || !name || !buf) return fail(err, FL_INVALID_ARGUMENT, NULL, "fl_config_get_string: NULL argument");
    const key_desc *d = find_name(name);
    if (!d) {
        const char *dot = strchr(name, '.');
        if (!dot) return unknown_key("", name, NULL, err);
        char section[64];
        snprintf(section, sizeof section, "%.*s", (int)(dot - name) < 63 ? (int)(dot - name) : 63, name);
        return unknown_key(section, dot + 1, NULL, err);
    }
    int n = format_value(c, d, buf, len);
    if (n < 0 || (size_t)n >= len) {
        if (len) buf[0] = '\0';
        return fail(err, FL_INVALID_ARGUMENT, NULL,
                    "%s: a buffer of %zu bytes cannot hold its value (%d bytes and a NUL)", name, len, n);
    }
    return FL_OK;
}

int fl_config_equal(const fl_config_t *a, const fl_config_t *b) {
    for (size_t i = 0; i < NKEYS; i++) {
        const key_desc *d = &keys[i];
        const void *pa = cfield(a, d), *pb = cfield(b, d);
        switch (d->type) {
        case KT_INT:
            if (*(const int64_t *)pa != *(const int64_t *)pb) return 0;
            break;
        case KT_FLOAT:
            if (memcmp(pa, pb, sizeof(double)) != 0) return 0;
            break;
        case KT_BOOL:
            if (*(const int *)pa != *(const int *)pb) return 0;
            break;
        case KT_STRING:
            if (strncmp(pa, pb, FL_CONFIG_STRING_MAX) != 0) return 0;
            break;
        case KT_ENUM:
            if (*(const int *)pa != *(const int *)pb) return 0;
            break;
        }
    }
    return 1;
}

fl_status fl_config_validate(const fl_config_t *c, fl_err_t *err) {
    for (size_t i = 0; i < NKEYS; i++) FL_TRY(check_field(c, &keys[i], err));
    if (c->replay_min_size_to_sample > c->replay_capacity)
        return fail(err, FL_INVALID_ARGUMENT, NULL,
                    "replay.min_size_to_sample = %" PRId64 " is larger than replay.capacity = %" PRId64
                    " (the learner would never start sampling; expected replay.min_size_to_sample <= replay.capacity)",
                    c->replay_min_size_to_sample, c->replay_capacity);
    if (c->learner_batch_size > c->replay_capacity)
        return fail(err, FL_INVALID_ARGUMENT, NULL,
                    "learner.batch_size = %" PRId64 " is larger than replay.capacity = %" PRId64
                    " (expected learner.batch_size <= replay.capacity)",
                    c->learner_batch_size, c->replay_capacity);
    if (c->learner_batch_size * c->learner_batches_per_call > 65536) /* a Sample call's most rows */
        return fail(err, FL_INVALID_ARGUMENT, NULL,
                    "learner.batch_size x learner.batches_per_call = %" PRId64 " x %" PRId64
                    " rows per Sample call (expected at most 65536)",
                    c->learner_batch_size, c->learner_batches_per_call);
    if (c->run_deterministic) {
        /* What the lockstep rounds cannot make deterministic is refused here, by name. */
        if (c->replay_shards != 1)
            return fail(err, FL_INVALID_ARGUMENT, NULL,
                        "run.deterministic needs replay.shards = 1 (got %" PRId64
                        "): the rounds are committed by one shard",
                        c->replay_shards);
        if (c->learner_count != 1 || c->learner_mode != FL_CFG_MODE_APEX)
            return fail(err, FL_INVALID_ARGUMENT, NULL,
                        "run.deterministic needs one apex learner (got learner.count = %" PRId64
                        ", learner.mode = %s): several learners' all-reduce and gorila's gradient pushes arrive "
                        "in no fixed order",
                        c->learner_count, c->learner_mode == FL_CFG_MODE_APEX ? "apex" : "gorila");
        if (c->learner_device != FL_CFG_DEVICE_CPU)
            return fail(err, FL_INVALID_ARGUMENT, NULL,
                        "run.deterministic needs learner.device = cpu: cuDNN and cuBLAS pick algorithms (and "
                        "atomics) whose sums vary from run to run");
        if (!(c->replay_samples_per_insert > 0))
            return fail(err, FL_INVALID_ARGUMENT, NULL,
                        "run.deterministic needs replay.samples_per_insert > 0 (got 0): it sets the learner's "
                        "updates per round");
        if (c->run_evaluators > 0 && c->eval_every_unit != FL_CFG_EVERY_LEARNER_STEPS)
            return fail(err, FL_INVALID_ARGUMENT, NULL,
                        "run.deterministic needs eval.every_unit = learner_steps (got seconds): evaluations at "
                        "wall-clock times would see whichever parameters were current");
    }
    return FL_OK;
}

/* ---- INI loading ---------------------------------------------------------------- */

typedef struct {
    fl_config_t *cfg; /* the working copy */
    const char *path;
    FILE *f;
    char *buf; /* getline buffer: the current physical line */
    size_t cap;
    int lineno; /* physical line number of the current line */
    int read_errno;
    char section[64]; /* the current section ("" before the first) */
    int pending_line; /* line of an unknown section that has had no key yet, or 0 */
    int err_line;     /* the earliest error found, 0 if none */
    fl_err_t first;
    int seen[NKEYS]; /* the line that set each key in this file, 0 if none */
} loader;

/* Keeps the error at `line` if it is the earliest so far. */
static void record(loader *L, int line, const fl_err_t *e) {
    if (L->err_line && L->err_line <= line) return;
    L->err_line = line;
    L->first = *e;
}

static void record_syntax(loader *L, int line, const char *what) {
    fl_err_t e;
    fail(&e, FL_PARSE_ERROR, NULL, "%s:%d: syntax error (%s)", L->path, line, what);
    record(L, line, &e);
}

/* An unknown section is reported at its line only if no key follows it (a key reports the
 * section with its own line, naming both). */
static void resolve_pending(loader *L) {
    if (!L->pending_line) return;
    char loc[FL_ERR_MSG_MAX / 2];
    snprintf(loc, sizeof loc, "%s:%d", L->path, L->pending_line);
    fl_err_t e;
    unknown_section(L->section, loc, &e); /* still the current section */
    record(L, L->pending_line, &e);
    L->pending_line = 0;
}

/* The first of `chars`, or a ';' that follows whitespace (an inline comment), or the end. */
static char *find_chars_or_comment(char *s, const char *chars) {
    int was_space = 0;
    while (*s && (!chars || !strchr(chars, *s)) && !(was_space && *s == ';')) {
        was_space = is_space(*s);
        s++;
    }
    return s;
}

static char *rstrip(char *s) {
    char *p = s + strlen(s);
    while (p > s && is_space(p[-1])) *--p = '\0';
    return s;
}

static char *lskip(char *s) {
    while (*s && is_space(*s)) s++;
    return s;
}

/* `[name]` with an optional comment after it. */
static void section_line(loader *L, char *s) {
    char *end = find_chars_or_comment(s + 1, "]");
    if (*end != ']') {
        record_syntax(L, L->lineno, "expected `[section]`: missing `]`");
        return;
    }
    *end = '\0';
    const char *name = s + 1;
    char *rest = lskip(end + 1);
    if (*rest && *rest != ';' && *rest != '#') {
        record_syntax(L, L->lineno, "unexpected text after `]`; expected `[section]` and an optional comment");
        return;
    }
    if (!*name) {
        record_syntax(L, L->lineno, "empty section name; expected `[section]`");
        return;
    }
    resolve_pending(L);
    size_t n = strlen(name);
    if (n >= sizeof L->section) { /* no section has a name this long */
        char loc[FL_ERR_MSG_MAX / 2];
        snprintf(loc, sizeof loc, "%s:%d", L->path, L->lineno);
        fl_err_t e;
        unknown_section(name, loc, &e);
        record(L, L->lineno, &e);
        return;
    }
    memcpy(L->section, name, n + 1);
    if (!section_exists(name)) L->pending_line = L->lineno;
}

/* `key = value` (or `key: value`): the key set in the working copy, once per file. */
static void key_line(loader *L, char *s) {
    char *end = find_chars_or_comment(s, "=:");
    if (*end != '=' && *end != ':') {
        record_syntax(L, L->lineno, "expected `key = value` or `[section]`");
        return;
    }
    *end = '\0';
    char *name = rstrip(s), *value = end + 1;
    *find_chars_or_comment(value, NULL) = '\0';
    value = rstrip(lskip(value));
    if (L->err_line) return; /* only the earliest error is reported */
    if (!*name) {
        record_syntax(L, L->lineno, "missing key name; expected `key = value`");
        return;
    }
    L->pending_line = 0; /* a key in an unknown section reports the section itself */
    char loc[FL_ERR_MSG_MAX / 2];
    snprintf(loc, sizeof loc, "%s:%d", L->path, L->lineno);
    fl_err_t e;
    if (fl_config_set_kv(L->cfg, L->section, name, value, loc, &e) != FL_OK) {
        record(L, L->lineno, &e);
        return;
    }
    const key_desc *d = find_key(L->section, name);
    if (!d) return;
    size_t k = (size_t)(d - keys);
    if (L->seen[k]) {
        fail(&e, FL_INVALID_ARGUMENT, loc, "%s is given twice in this file (first on line %d); set it once",
             keys[k].name, L->seen[k]);
        record(L, L->lineno, &e);
        return;
    }
    L->seen[k] = L->lineno;
}

/* Reads every line: indentation and trailing whitespace dropped, lines starting with ';'
 * or '#' are comments, a ';' after whitespace starts one, and a line is a section, a key
 * or blank (no continuation lines, no length limit). */
static void read_lines(loader *L) {
    ssize_t n;
    errno = 0;
    while ((n = getline(&L->buf, &L->cap, L->f)) >= 0) {
        L->lineno++;
        char *s = L->buf;
        if (strlen(s) != (size_t)n) {
            record_syntax(L, L->lineno, "the line contains a NUL byte");
            continue;
        }
        if (L->lineno == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3; /* UTF-8 BOM */
        s = rstrip(lskip(s));
        if (*s == '[')
            section_line(L, s);
        else if (*s && *s != ';' && *s != '#')
            key_line(L, s);
        errno = 0;
    }
    if (ferror(L->f)) L->read_errno = errno ? errno : EIO;
    resolve_pending(L);
}

/* Applies the INI text of f (named path in messages) on top of *c; closes f. */
static fl_status load_stream(fl_config_t *c, FILE *f, const char *path, fl_err_t *err) {
    loader L = {.path = path, .f = f};
    fl_status st = FL_OK;
    L.cfg = malloc(sizeof *L.cfg);
    if (!L.cfg) {
        st = fail(err, FL_NO_MEMORY, NULL, "%s: out of memory", path);
        goto done;
    }
    *L.cfg = *c;
    read_lines(&L);
    if (L.read_errno) {
        st = fail(err, FL_IO_ERROR, NULL, "cannot read config file '%s': %s", path, strerror(L.read_errno));
    } else if (L.err_line) {
        st = L.first.code;
        if (err) *err = L.first;
    } else {
        *c = *L.cfg;
    }
done:
    free(L.cfg);
    free(L.buf);
    fclose(L.f);
    return st;
}

/* " (did you mean 'configs/cartpole.ini'?)" for the .ini file beside path closest to its name. */
static void near_file(const char *path, char *hint, size_t len) {
    const char *slash = strrchr(path, '/');
    char dir[1024];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    const char *base = slash ? slash + 1 : path;
    DIR *d = opendir(slash && slash == path ? "/" : dir);
    if (!d) return;
    fl_suggest_t sg;
    fl_suggest_init(&sg, base, strlen(base) >= 6 ? strlen(base) / 3 : 2);
    char names[64][256];
    int n = 0;
    for (struct dirent *e; n < 64 && (e = readdir(d));) {
        size_t k = strlen(e->d_name);
        if (k < 5 || k >= sizeof names[0] || strcmp(e->d_name + k - 4, ".ini") != 0) continue;
        memcpy(names[n], e->d_name, k + 1);
        fl_suggest_consider(&sg, names[n++]);
    }
    if (sg.best) snprintf(hint, len, " (did you mean '%s%s%s'?)", slash ? dir : "", slash ? "/" : "", sg.best);
    closedir(d);
}

fl_status fl_config_load_file(fl_config_t *c, const char *path, fl_err_t *err) {
    if (!c || !path) return fail(err, FL_INVALID_ARGUMENT, NULL, "fl_config_load_file: NULL argument");
    FILE *f = fopen(path, "r");
    if (!f) {
        const int e = errno;
        char hint[1400] = "";
        if (e == ENOENT) near_file(path, hint, sizeof hint);
        return fail(err, FL_IO_ERROR, NULL, "cannot open config file '%s': %s%s", path, strerror(e), hint);
    }
    return load_stream(c, f, path, err);
}

fl_status fl_config_load_string(fl_config_t *c, const char *text, const char *name, fl_err_t *err) {
    if (!c || !text || !name) return fail(err, FL_INVALID_ARGUMENT, NULL, "fl_config_load_string: NULL argument");
    if (!text[0]) return FL_OK; /* fmemopen refuses an empty buffer: nothing to apply */
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    if (!f) return fail(err, FL_NO_MEMORY, NULL, "%s: cannot read the text: %s", name, strerror(errno));
    return load_stream(c, f, name, err);
}

/* ---- dump and help -------------------------------------------------------------- */

static void describe_key(const key_desc *d, char *buf, size_t len) {
    char acc[FL_CONFIG_STRING_MAX + 32], def[FL_CONFIG_STRING_MAX + 8];
    describe_accepted(d, acc, sizeof acc);
    format_default(d, def, sizeof def);
    snprintf(buf, len, "%s: %s; default %s", type_name(d->type), acc, def);
}

static fl_status dump(const fl_config_t *c, FILE *f, fl_err_t *err) {
    if (!c || !f) return fail(err, FL_INVALID_ARGUMENT, NULL, "fl_config_dump: NULL argument");
    for (size_t i = 0; i < NKEYS; i++) FL_TRY(check_field(c, &keys[i], err));
    fprintf(f, "# fleet configuration: every key with its value (read it back with --config FILE)\n");
    for (size_t i = 0; i < NKEYS; i++) {
        if (!first_of_section(i)) continue;
        fprintf(f, "\n[%s]\n", keys[i].section);
        for (size_t j = i; j < NKEYS; j++) {
            const key_desc *d = &keys[j];
            if (strcmp(d->section, keys[i].section) != 0) continue;
            char about[2 * FL_CONFIG_STRING_MAX + 64], value[FL_CONFIG_STRING_MAX + 40];
            describe_key(d, about, sizeof about);
            format_value(c, d, value, sizeof value);
            fprintf(f, "# %s\n# %s\n", d->help, about);
            if (d->type == KT_STRING)
                fprintf(f, "%s = \"%s\"\n", d->key, value);
            else
                fprintf(f, "%s = %s\n", d->key, value);
        }
    }
    if (fflush(f) != 0 || ferror(f))
        return fail(err, FL_IO_ERROR, NULL, "cannot write the configuration: %s", strerror(errno ? errno : EIO));
    return FL_OK;
}

fl_status fl_config_dump(const fl_config_t *c, FILE *f) {
    return dump(c, f, NULL);
}

fl_status fl_config_write_file(const fl_config_t *c, const char *path, fl_err_t *err) {
    if (!c || !path) return fail(err, FL_INVALID_ARGUMENT, NULL, "fl_config_write_file: NULL argument");
    fl_err_t e;
    fl_err_init(&e);
    for (size_t i = 0; i < NKEYS; i++)
        if (check_field(c, &keys[i], &e) != FL_OK)
            return fail(err, e.code, NULL, "cannot write config file '%s': %s", path, e.msg);
    FILE *f = fopen(path, "w");
    if (!f) return fail(err, FL_IO_ERROR, NULL, "cannot create config file '%s': %s", path, strerror(errno));
    fl_status st = dump(c, f, &e);
    if (fclose(f) != 0 && st == FL_OK) st = fl_err_set(&e, FL_IO_ERROR, "%s", strerror(errno));
    if (st != FL_OK) {
        unlink(path);
        return fail(err, st, NULL, "cannot write config file '%s': %s", path, e.msg);
    }
    return FL_OK;
}

/* Whether key d is among those `only` asks for (see fl_config_print_help_of). */
static int wanted(const key_desc *d, const char *only, int by_section, int by_key) {
    if (!only) return 1;
    if (by_section) return strcmp(d->section, only) == 0;
    if (by_key) return strcmp(d->name, only) == 0;
    return strstr(d->name, only) != NULL;
}

size_t fl_config_print_help_of(FILE *f, const char *only) {
    if (only && !*only) only = NULL;
    const int by_section = only && section_exists(only), by_key = only && !by_section && find_name(only) != NULL;
    size_t printed = 0;
    for (size_t i = 0; i < NKEYS; i++) {
        if (!first_of_section(i)) continue;
        int header = 0;
        for (size_t j = i; j < NKEYS; j++) {
            const key_desc *d = &keys[j];
            if (strcmp(d->section, keys[i].section) != 0 || !wanted(d, only, by_section, by_key)) continue;
            if (!printed)
                fprintf(f,
                        "Configuration keys: set them in an INI file under [section] (--config FILE)\n"
                        "or one at a time with --set section.key=value (applied after the file).\n");
            if (!header) fprintf(f, "\n[%s]\n", keys[i].section);
            header = 1;
            char about[2 * FL_CONFIG_STRING_MAX + 64];
            describe_key(d, about, sizeof about);
            fprintf(f, "  %-28s %s\n      %s\n", d->name, about, d->help);
            printed++;
        }
    }
    return printed;
}

void fl_config_print_help(FILE *f) {
    fl_config_print_help_of(f, NULL);
}

void fl_config_sections(char *buf, size_t len) {
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < NKEYS; i++) {
        if (!first_of_section(i)) continue;
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", used ? " " : "", keys[i].section);
    }
}
