/* tfevents: TensorBoard event-file writer (see tfevents.h).
 *
 * Each record is assembled in one buffer (header, packed Event, CRC) and written with one
 * write(2) loop on an O_APPEND descriptor; `size` counts the bytes of whole records, and
 * a failed write truncates the file back to it. */
#include "common/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "tensorboard.pb-c.h"

struct fl_tfevents {
    int fd;
    char *path;
    uint64_t size;      /* bytes of whole records in the file */
    unsigned char *buf; /* the record being written */
    size_t cap;
};

/* The next <seq> of a file name, shared by all writers of the process. */
static _Atomic unsigned long g_seq;

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes ev as one record. On failure the file is cut back to w->size. */
static fl_status write_event(fl_tfevents_t *w, const Tensorboard__Event *ev, fl_err_t *err) {
    size_t len = tensorboard__event__get_packed_size(ev);
    size_t need = 12 + len + 4;
    if (need > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < need) cap *= 2;
        unsigned char *nb = realloc(w->buf, cap);
        if (!nb)
            return fl_err_set(err, FL_NO_MEMORY, "tfevents %s: out of memory for a %zu-byte record", w->path, need);
        w->buf = nb;
        w->cap = cap;
    }
    unsigned char *b = w->buf;
    put_le64(b, (uint64_t)len);
    put_le32(b + 8, fl_crc32c_mask(fl_crc32c(b, 8)));
    size_t packed = tensorboard__event__pack(ev, b + 12);
    if (packed != len)
        return fl_err_set(err, FL_INTERNAL, "tfevents %s: an event packed to %zu bytes, expected %zu", w->path, packed,
                          len);
    put_le32(b + 12 + len, fl_crc32c_mask(fl_crc32c(b + 12, len)));
    size_t done = 0;
    while (done < need) {
        ssize_t k = write(w->fd, b + done, need - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            /* Cut a partial record off, so that the file stays a sequence of whole records. */
            int cut = done == 0 || ftruncate(w->fd, (off_t)w->size) == 0;
            return fl_err_set(err, FL_IO_ERROR, "tfevents %s: cannot write a %zu-byte record: %s%s", w->path, need,
                              strerror(e), cut ? "" : " (and cannot cut the partial record off)");
        }
        done += (size_t)k;
    }
    w->size += need;
    return FL_OK;
}

fl_status fl_tfevents_open(const char *dir, fl_tfevents_t **out, fl_err_t *err) {
    if (!out) return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents: no place for the writer (out is NULL)");
    *out = NULL;
    if (!dir || !*dir) return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents: empty folder name");
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    fl_tfevents_t *w = calloc(1, sizeof *w);
    size_t plen = strlen(dir) + 64 + sizeof host;
    if (w) w->path = malloc(plen);
    if (!w || !w->path) {
        free(w);
        return fl_err_set(err, FL_NO_MEMORY, "tfevents %s: out of memory", dir);
    }
    long long secs = (long long)time(NULL);
    for (int tries = 0;; tries++) {
        unsigned long seq = g_seq++;
        snprintf(w->path, plen, "%s/events.out.tfevents.%lld.%s.%ld.%lu", dir, secs, host, (long)getpid(), seq);
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (w->fd >= 0) break;
        int e = errno;
        if (e == EEXIST && tries < 1000) continue;
        fl_status st = fl_err_set(err, e == ENOENT || e == ENOTDIR ? FL_NOT_FOUND : FL_IO_ERROR,
                                  "tfevents: cannot create %s: %s", w->path, strerror(e));
        free(w->path);
        free(w);
        return st;
    }
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = now_s();
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)FL_TFEVENTS_FILE_VERSION;
    fl_status st = write_event(w, &ev, err);
    if (st != FL_OK) {
        unlink(w->path);
        fl_tfevents_close(w);
        return st;
    }
    *out = w;
    return FL_OK;
}

const char *fl_tfevents_path(const fl_tfevents_t *w) {
    return w ? w->path : NULL;
}

/* Strict UTF-8 as protobuf checks it: no overlong forms, surrogates or values past
 * U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned min, cp;
        if ((c & 0xe0) == 0xc0)
            k = 1, min = 0x80, cp = c & 0x1f;
        else if ((c & 0xf0) == 0xe0)
            k = 2, min = 0x800, cp = c & 0x0f;
        else if ((c & 0xf8) == 0xf0)
            k = 3, min = 0x10000, cp = c & 0x07;
        else
            return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

int fl_tfevents_utf8(const char *s) {
    return s && utf8_valid((const unsigned char *)s, strlen(s));
}

/* A tag or an hparam's name (what, number i): 1 to FL_TFEVENTS_TAG_MAX bytes of UTF-8. */
static fl_status check_name(const fl_tfevents_t *w, const char *what, int i, const char *name, fl_err_t *err) {
    if (!name || !name[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: %s %d is %s; expected 1 to %d bytes", w->path, what,
                          i, name ? "empty" : "NULL", FL_TFEVENTS_TAG_MAX);
    size_t len = strnlen(name, FL_TFEVENTS_TAG_MAX + 1);
    if (len > FL_TFEVENTS_TAG_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: %s %d (\"%.40s...\") is longer than %d bytes",
                          w->path, what, i, name, FL_TFEVENTS_TAG_MAX);
    if (!utf8_valid((const unsigned char *)name, len))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: %s %d is not valid UTF-8", w->path, what, i);
    return FL_OK;
}

/* Round to nearest float32. A finite double at or past FLT_MAX plus half its ulp (2^103)
 * rounds to inf; the cast of such a value is undefined in ISO C, so it is done here. */
static float to_f32(double v) {
    if (!isnan(v) && fabs(v) >= 0x1.ffffffp127) return v > 0 ? INFINITY : -INFINITY;
    return (float)v;
}

fl_status fl_tfevents_scalars(fl_tfevents_t *w, int64_t step, double wall_time, int n, const char *const *tags,
                              const double *values, fl_err_t *err) {
    if (!w) return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents: no writer (NULL)");
    if (n < 1 || n > FL_TFEVENTS_VALUES_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: %d values in one event; expected 1 to %d", w->path, n,
                          FL_TFEVENTS_VALUES_MAX);
    if (!tags || !values)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: no %s list (NULL) for %d values", w->path,
                          tags ? "value" : "tag", n);
    for (int i = 0; i < n; i++) FL_TRY(check_name(w, "tag", i, tags[i], err));
    Tensorboard__Summary__Value *vals = malloc((size_t)n * sizeof *vals);
    Tensorboard__Summary__Value **ptrs = malloc((size_t)n * sizeof *ptrs);
    if (!vals || !ptrs) {
        free(vals);
        free(ptrs);
        return fl_err_set(err, FL_NO_MEMORY, "tfevents %s: out of memory for %d values", w->path, n);
    }
    for (int i = 0; i < n; i++) {
        tensorboard__summary__value__init(&vals[i]);
        vals[i].tag = (char *)tags[i];
        vals[i].value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        vals[i].simple_value = to_f32(values[i]);
        ptrs[i] = &vals[i];
    }
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    sum.n_value = (size_t)n;
    sum.value = ptrs;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    fl_status st = write_event(w, &ev, err);
    free(vals);
    free(ptrs);
    return st;
}

fl_status fl_tfevents_scalar(fl_tfevents_t *w, const char *tag, int64_t step, double wall_time, double value,
                             fl_err_t *err) {
    return fl_tfevents_scalars(w, step, wall_time, 1, &tag, &value, err);
}

/* ---- tensor summaries with a plugin's metadata ---------------------------------- */

/* Writes one Event at (step, wall) whose Summary holds one value: tag, tensor t, and the
 * metadata {plugin_name, content}. */
static fl_status write_tensor(fl_tfevents_t *w, const char *tag, int64_t step, double wall, Tensorboard__TensorProto *t,
                              const char *plugin, const uint8_t *content, size_t content_len, fl_err_t *err) {
    Tensorboard__SummaryMetadata__PluginData pd = TENSORBOARD__SUMMARY_METADATA__PLUGIN_DATA__INIT;
    pd.plugin_name = (char *)plugin;
    pd.content.data = (uint8_t *)content;
    pd.content.len = content_len;
    Tensorboard__SummaryMetadata md = TENSORBOARD__SUMMARY_METADATA__INIT;
    md.plugin_data = &pd;
    Tensorboard__Summary__Value v = TENSORBOARD__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.metadata = &md;
    v.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_TENSOR;
    v.tensor = t;
    Tensorboard__Summary__Value *vp = &v;
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    sum.n_value = 1;
    sum.value = &vp;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    return write_event(w, &ev, err);
}

fl_status fl_tfevents_text(fl_tfevents_t *w, const char *tag, int64_t step, double wall_time, const char *text,
                           fl_err_t *err) {
    if (!w) return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents: no writer (NULL)");
    FL_TRY(check_name(w, "tag", 0, tag, err));
    if (!text || !fl_tfevents_utf8(text))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: the text of %s is %s", w->path, tag,
                          text ? "not valid UTF-8" : "NULL");
    /* a scalar (no dims) of one string, as tensor_util.make_tensor_proto makes of a str */
    Tensorboard__TensorShapeProto shape = TENSORBOARD__TENSOR_SHAPE_PROTO__INIT;
    ProtobufCBinaryData str = {strlen(text), (uint8_t *)text};
    Tensorboard__TensorProto t = TENSORBOARD__TENSOR_PROTO__INIT;
    t.dtype = TENSORBOARD__DATA_TYPE__DT_STRING;
    t.tensor_shape = &shape;
    t.n_string_val = 1;
    t.string_val = &str;
    /* the text plugin's TextPluginData {version 0}: no bytes */
    return write_tensor(w, tag, step, wall_time, &t, "text", NULL, 0, err);
}

/* The hparams plugin's record: tag, an HParamsPluginData at step 0 with the plugin's
 * empty DT_FLOAT tensor of shape [0] (its metadata.NULL_TENSOR). */
static fl_status write_hparams_record(fl_tfevents_t *w, const char *tag, double wall,
                                      const Tensorboard__HParamsPluginData *data, fl_err_t *err) {
    size_t len = tensorboard__hparams_plugin_data__get_packed_size(data);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return fl_err_set(err, FL_NO_MEMORY, "tfevents %s: out of memory for %s", w->path, tag);
    tensorboard__hparams_plugin_data__pack(data, buf);
    Tensorboard__TensorShapeProto__Dim dim = TENSORBOARD__TENSOR_SHAPE_PROTO__DIM__INIT;
    Tensorboard__TensorShapeProto__Dim *dp = &dim;
    Tensorboard__TensorShapeProto shape = TENSORBOARD__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 1;
    shape.dim = &dp;
    Tensorboard__TensorProto t = TENSORBOARD__TENSOR_PROTO__INIT;
    t.dtype = TENSORBOARD__DATA_TYPE__DT_FLOAT;
    t.tensor_shape = &shape;
    fl_status st = write_tensor(w, tag, 0, wall, &t, "hparams", buf, len, err);
    free(buf);
    return st;
}

#define HPARAMS_MAX 4096
#define METRICS_MAX 256

/* The checks of fl_tfevents_hparams. */
static fl_status check_hparams(const fl_tfevents_t *w, const char *group, int n, const fl_tfevents_hparam_t *hp, int m,
                               const fl_tfevents_metric_t *mt, fl_err_t *err) {
    if (n < 1 || n > HPARAMS_MAX || m < 0 || m > METRICS_MAX || !hp || (m && !mt))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "tfevents %s: %d hparams and %d metrics (expected 1 to %d and 0 to %d, and their lists)",
                          w->path, n, m, HPARAMS_MAX, METRICS_MAX);
    if (group && !fl_tfevents_utf8(group))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: the group name is not valid UTF-8", w->path);
    for (int i = 0; i < n; i++) {
        FL_TRY(check_name(w, "hparam", i, hp[i].name, err));
        const char *bad = NULL;
        if (hp[i].description && !fl_tfevents_utf8(hp[i].description)) bad = "its description";
        if (hp[i].kind == FL_TFEVENTS_HP_STRING && !fl_tfevents_utf8(hp[i].string)) bad = "its value";
        if (hp[i].kind != FL_TFEVENTS_HP_NUMBER && hp[i].kind != FL_TFEVENTS_HP_STRING &&
            hp[i].kind != FL_TFEVENTS_HP_BOOL)
            bad = "its kind";
        if (hp[i].n_choices < 0 || (hp[i].n_choices > 0 && !hp[i].choices)) bad = "its choices";
        for (int k = 0; !bad && k < hp[i].n_choices; k++)
            if (!fl_tfevents_utf8(hp[i].choices[k])) bad = "a choice";
        if (bad)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: hparam %s: %s is NULL, out of range or not UTF-8",
                              w->path, hp[i].name, bad);
    }
    for (int i = 0; i < m; i++) {
        FL_TRY(check_name(w, "metric", i, mt[i].tag, err));
        if ((mt[i].display_name && !fl_tfevents_utf8(mt[i].display_name)) ||
            (mt[i].description && !fl_tfevents_utf8(mt[i].description)))
            return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents %s: metric %s: a name or description is not UTF-8",
                              w->path, mt[i].tag);
    }
    return FL_OK;
}

fl_status fl_tfevents_hparams(fl_tfevents_t *w, double wall_time, const char *group, int n,
                              const fl_tfevents_hparam_t *hp, int m, const fl_tfevents_metric_t *mt, fl_err_t *err) {
    if (!w) return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents: no writer (NULL)");
    FL_TRY(check_hparams(w, group, n, hp, m, mt, err));
    int n_choices = 0;
    for (int i = 0; i < n; i++) n_choices += hp[i].kind == FL_TFEVENTS_HP_BOOL ? 2 : hp[i].n_choices;
    /* every message in arrays, pointed at from pointer arrays */
    Tensorboard__HParamInfo *infos = calloc((size_t)n, sizeof *infos);
    Tensorboard__HParamInfo **info_p = calloc((size_t)n, sizeof *info_p);
    Tensorboard__ListValue *domains = calloc((size_t)n, sizeof *domains);
    Tensorboard__Value *choice_v = calloc((size_t)n_choices + 1, sizeof *choice_v);
    Tensorboard__Value **choice_p = calloc((size_t)n_choices + 1, sizeof *choice_p);
    Tensorboard__Value *values = calloc((size_t)n, sizeof *values);
    Tensorboard__SessionStartInfo__HparamsEntry *entries = calloc((size_t)n, sizeof *entries);
    Tensorboard__SessionStartInfo__HparamsEntry **entry_p = calloc((size_t)n, sizeof *entry_p);
    Tensorboard__MetricInfo *minfos = calloc((size_t)m + 1, sizeof *minfos);
    Tensorboard__MetricInfo **minfo_p = calloc((size_t)m + 1, sizeof *minfo_p);
    Tensorboard__MetricName *mnames = calloc((size_t)m + 1, sizeof *mnames);
    fl_status st = FL_OK;
    if (!infos || !info_p || !domains || !choice_v || !choice_p || !values || !entries || !entry_p || !minfos ||
        !minfo_p || !mnames) {
        st = fl_err_set(err, FL_NO_MEMORY, "tfevents %s: out of memory for %d hparams", w->path, n);
        goto out;
    }
    int c = 0;
    for (int i = 0; i < n; i++) {
        const fl_tfevents_hparam_t *h = &hp[i];
        Tensorboard__HParamInfo *info = &infos[i];
        tensorboard__hparam_info__init(info);
        info->name = (char *)h->name;
        if (h->description) info->description = (char *)h->description;
        info->differs = h->differs != 0;
        Tensorboard__Value *v = &values[i];
        tensorboard__value__init(v);
        int nc = h->kind == FL_TFEVENTS_HP_BOOL ? 2 : h->n_choices;
        if (nc > 0) {
            tensorboard__list_value__init(&domains[i]);
            domains[i].n_values = (size_t)nc;
            domains[i].values = &choice_p[c];
            for (int k = 0; k < nc; k++, c++) {
                tensorboard__value__init(&choice_v[c]);
                if (h->kind == FL_TFEVENTS_HP_BOOL) {
                    choice_v[c].kind_case = TENSORBOARD__VALUE__KIND_BOOL_VALUE;
                    choice_v[c].bool_value = k;
                } else {
                    choice_v[c].kind_case = TENSORBOARD__VALUE__KIND_STRING_VALUE;
                    choice_v[c].string_value = (char *)h->choices[k];
                }
                choice_p[c] = &choice_v[c];
            }
            info->domain_case = TENSORBOARD__HPARAM_INFO__DOMAIN_DOMAIN_DISCRETE;
            info->domain_discrete = &domains[i];
        }
        if (h->kind == FL_TFEVENTS_HP_NUMBER) {
            info->type = TENSORBOARD__HPARAM_DATA_TYPE__DATA_TYPE_FLOAT64;
            v->kind_case = TENSORBOARD__VALUE__KIND_NUMBER_VALUE;
            v->number_value = h->number;
        } else if (h->kind == FL_TFEVENTS_HP_BOOL) {
            info->type = TENSORBOARD__HPARAM_DATA_TYPE__DATA_TYPE_BOOL;
            v->kind_case = TENSORBOARD__VALUE__KIND_BOOL_VALUE;
            v->bool_value = h->boolean != 0;
        } else {
            info->type = TENSORBOARD__HPARAM_DATA_TYPE__DATA_TYPE_STRING;
            v->kind_case = TENSORBOARD__VALUE__KIND_STRING_VALUE;
            v->string_value = (char *)h->string;
        }
        info_p[i] = info;
        tensorboard__session_start_info__hparams_entry__init(&entries[i]);
        entries[i].key = (char *)h->name;
        entries[i].value = v;
        entry_p[i] = &entries[i];
    }
    for (int i = 0; i < m; i++) {
        tensorboard__metric_name__init(&mnames[i]);
        mnames[i].tag = (char *)mt[i].tag;
        tensorboard__metric_info__init(&minfos[i]);
        minfos[i].name = &mnames[i];
        if (mt[i].display_name) minfos[i].display_name = (char *)mt[i].display_name;
        if (mt[i].description) minfos[i].description = (char *)mt[i].description;
        minfos[i].dataset_type = mt[i].validation ? TENSORBOARD__DATASET_TYPE__DATASET_VALIDATION
                                                  : TENSORBOARD__DATASET_TYPE__DATASET_TRAINING;
        minfo_p[i] = &minfos[i];
    }
    Tensorboard__Experiment exp = TENSORBOARD__EXPERIMENT__INIT;
    exp.time_created_secs = wall_time;
    exp.n_hparam_infos = (size_t)n;
    exp.hparam_infos = info_p;
    exp.n_metric_infos = (size_t)m;
    exp.metric_infos = minfo_p;
    Tensorboard__HParamsPluginData data = TENSORBOARD__HPARAMS_PLUGIN_DATA__INIT;
    data.data_case = TENSORBOARD__HPARAMS_PLUGIN_DATA__DATA_EXPERIMENT;
    data.experiment = &exp;
    st = write_hparams_record(w, "_hparams_/experiment", wall_time, &data, err);
    if (st != FL_OK) goto out;
    Tensorboard__SessionStartInfo start = TENSORBOARD__SESSION_START_INFO__INIT;
    start.n_hparams = (size_t)n;
    start.hparams = entry_p;
    if (group) start.group_name = (char *)group;
    start.start_time_secs = wall_time;
    data.data_case = TENSORBOARD__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO;
    data.session_start_info = &start;
    st = write_hparams_record(w, "_hparams_/session_start_info", wall_time, &data, err);
out:
    free(infos);
    free(info_p);
    free(domains);
    free(choice_v);
    free(choice_p);
    free(values);
    free(entries);
    free(entry_p);
    free(minfos);
    free(minfo_p);
    free(mnames);
    return st;
}

fl_status fl_tfevents_session_end(fl_tfevents_t *w, double wall_time, int success, fl_err_t *err) {
    if (!w) return fl_err_set(err, FL_INVALID_ARGUMENT, "tfevents: no writer (NULL)");
    Tensorboard__SessionEndInfo end = TENSORBOARD__SESSION_END_INFO__INIT;
    end.status = success ? TENSORBOARD__STATUS__STATUS_SUCCESS : TENSORBOARD__STATUS__STATUS_FAILURE;
    end.end_time_secs = wall_time;
    Tensorboard__HParamsPluginData data = TENSORBOARD__HPARAMS_PLUGIN_DATA__INIT;
    data.data_case = TENSORBOARD__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO;
    data.session_end_info = &end;
    return write_hparams_record(w, "_hparams_/session_end_info", wall_time, &data, err);
}

void fl_tfevents_close(fl_tfevents_t *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    free(w->path);
    free(w->buf);
    free(w);
}
