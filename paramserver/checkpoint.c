/* checkpoint: a gorila shard's state as a safetensors file (see checkpoint.h). */
#include "paramserver/checkpoint.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/safetensors.h"
#include "kernels/optim.h"
#include "paramserver/shard.h"

#define CKPT_FORMAT "fleet.paramserver"
#define CKPT_VERSION "1"
#define MAX_SLOTS 4
#define NMETA 26

void fl_param_checkpoint_path(const char *dir, int shard, char *buf, size_t len) {
    snprintf(buf, len, "%s/paramserver-%d.safetensors", dir, shard);
}

/* The optimizer settings as metadata: keys and "%.9g" values (exact for float). */
static const char *const opt_keys[] = {"optimizer.lr",  "optimizer.beta1", "optimizer.beta2",
                                       "optimizer.eps", "optimizer.decay", "optimizer.momentum"};
#define NOPT ((int)(sizeof opt_keys / sizeof opt_keys[0]))

static void opt_values(const fl_optim_config_t *c, char v[NOPT][32]) {
    const float f[NOPT] = {c->lr, c->beta1, c->beta2, c->eps, c->decay, c->momentum};
    for (int i = 0; i < NOPT; i++) snprintf(v[i], 32, "%.9g", (double)f[i]);
}

/* The slot names of the store's optimizer (a probe over one parameter). */
static fl_status slot_names(const fl_param_store_opts_t *o, char names[MAX_SLOTS][64], int *slots, fl_err_t *err) {
    fl_optim_t *probe = NULL;
    FL_TRY(fl_optim_create(&o->optim, 1, &probe, err));
    *slots = fl_optim_num_slots(probe);
    if (*slots > MAX_SLOTS) *slots = MAX_SLOTS;
    for (int i = 0; i < *slots; i++) snprintf(names[i], 64, "optimizer.%s", fl_optim_slot_name(probe, i));
    fl_optim_destroy(probe);
    return FL_OK;
}

fl_status fl_param_checkpoint_save(fl_param_store_t *s, const char *path, int *saved, fl_err_t *err) {
    *saved = 0;
    const fl_param_store_opts_t *o = fl_param_store_opts(s);
    char names[MAX_SLOTS][64];
    int slots = 0;
    FL_TRY(slot_names(o, names, &slots, err));
    fl_param_store_state_t st;
    int have = 0;
    FL_TRY(fl_param_store_capture(s, &st, &have, err));
    if (!have) return FL_OK;
    fl_st_tensor_t t[MAX_SLOTS + 2];
    memset(t, 0, sizeof t);
    int nt = 0;
    snprintf(t[nt].name, sizeof t[nt].name, "params");
    t[nt].dtype = FL_ST_F32, t[nt].rank = 1, t[nt].shape[0] = (int64_t)st.n;
    t[nt].data = st.params, t[nt].bytes = 4 * st.n;
    nt++;
    for (int i = 0; i < slots && st.optim; i++, nt++) {
        snprintf(t[nt].name, sizeof t[nt].name, "%s", names[i]);
        t[nt].dtype = FL_ST_F32, t[nt].rank = 1, t[nt].shape[0] = (int64_t)st.n;
        t[nt].data = st.optim + (size_t)i * st.n, t[nt].bytes = 4 * st.n;
    }
    snprintf(t[nt].name, sizeof t[nt].name, "clocks");
    t[nt].dtype = FL_ST_I64, t[nt].rank = 1, t[nt].shape[0] = st.learners;
    t[nt].data = st.clocks, t[nt].bytes = 8 * (size_t)st.learners;
    nt++;

    char num[14][32], ov[NOPT][32], hist[8 * 24] = "";
    snprintf(num[0], 32, "%" PRIu32, o->shard_id);
    snprintf(num[1], 32, "%d", o->num_shards);
    snprintf(num[2], 32, "%" PRIu64, st.offset);
    snprintf(num[3], 32, "%zu", st.n);
    snprintf(num[4], 32, "%" PRIu64, st.total);
    snprintf(num[5], 32, "%" PRIu64, st.version);
    snprintf(num[6], 32, "%" PRId64, st.optim_steps);
    snprintf(num[7], 32, "%d", st.learners);
    snprintf(num[8], 32, "%" PRIu64, st.publishes);
    snprintf(num[9], 32, "%" PRIu64, st.pushes_applied);
    snprintf(num[10], 32, "%" PRIu64, st.pushes_dropped);
    snprintf(num[11], 32, "%" PRIu64, st.waits);
    snprintf(num[12], 32, "%" PRIu64, st.wait_timeouts);
    for (int i = 0; i < FL_PARAM_STALENESS_BUCKETS; i++)
        snprintf(hist + strlen(hist), sizeof hist - strlen(hist), "%s%" PRIu64, i ? "," : "", st.staleness_hist[i]);
    opt_values(&o->optim, ov);
    const char *keys[NMETA] = {"format",        "format_version", "shard",          "shards",         "offset",
                               "length",        "total",          "version",        "optimizer",      "optimizer.steps",
                               "learners",      "publishes",      "pushes_applied", "pushes_dropped", "waits",
                               "wait_timeouts", "staleness_hist"};
    const char *vals[NMETA] = {
        CKPT_FORMAT, CKPT_VERSION, num[0], num[1], num[2],  num[3],  num[4],  num[5], fl_optim_kind_name(o->optim.kind),
        num[6],      num[7],       num[8], num[9], num[10], num[11], num[12], hist};
    int nm = 17;
    for (int i = 0; i < NOPT; i++, nm++) keys[nm] = opt_keys[i], vals[nm] = ov[i];
    fl_status rc = fl_safetensors_write(path, t, nt, keys, vals, nm, err);
    fl_param_store_state_free(&st);
    if (rc == FL_OK) *saved = 1;
    return rc;
}

/* Metadata `key` as an unsigned integer. */
static fl_status meta_u64(const fl_safetensors_t *f, const char *path, const char *key, uint64_t *out, fl_err_t *err) {
    const char *v = fl_safetensors_meta(f, key);
    char *end = NULL;
    errno = 0;
    unsigned long long x = v && isdigit((unsigned char)v[0]) ? strtoull(v, &end, 10) : 0;
    if (!v || !isdigit((unsigned char)v[0]) || *end || errno)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "paramserver checkpoint %s: metadata %s is %s%s%s, expected an "
                          "unsigned integer",
                          path, key, v ? "\"" : "", v ? v : "missing", v ? "\"" : "");
    *out = x;
    return FL_OK;
}

/* Metadata `key` equals `want`; else names both. */
static fl_status meta_is(const fl_safetensors_t *f, const char *path, const char *key, const char *want,
                         const char *what, fl_err_t *err) {
    const char *v = fl_safetensors_meta(f, key);
    if (v && strcmp(v, want) == 0) return FL_OK;
    return fl_err_set(err, FL_INVALID_ARGUMENT,
                      "paramserver checkpoint %s: %s is %s%s%s in the file, %s in this "
                      "shard's config (%s)",
                      path, key, v ? "\"" : "", v ? v : "missing", v ? "\"" : "", want, what);
}

/* The F32 or I64 tensor `name` of shape (n,). */
static fl_status find_vec(const fl_safetensors_t *f, const char *path, const char *name, fl_st_dtype dt, uint64_t n,
                          const void **data, fl_err_t *err) {
    const fl_st_tensor_t *x = fl_safetensors_find(f, name);
    if (!x || x->dtype != dt || x->rank != 1 || (uint64_t)x->shape[0] != n)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "paramserver checkpoint %s: tensor %s is %s, expected %s (%" PRIu64 ",)", path, name,
                          x ? "of another dtype or shape" : "missing", fl_st_dtype_name(dt), n);
    *data = x->data;
    return FL_OK;
}

static fl_status load_checked(fl_param_store_t *s, const fl_safetensors_t *f, const char *path, uint64_t *version,
                              fl_err_t *err) {
    const fl_param_store_opts_t *o = fl_param_store_opts(s);
    char want[32], ov[NOPT][32];
    FL_TRY(meta_is(f, path, "format", CKPT_FORMAT, "a file that a gorila parameter-server shard wrote", err));
    FL_TRY(meta_is(f, path, "format_version", CKPT_VERSION, "this build's format", err));
    snprintf(want, sizeof want, "%d", o->num_shards);
    FL_TRY(meta_is(f, path, "shards", want, "paramserver.shards", err));
    snprintf(want, sizeof want, "%" PRIu32, o->shard_id);
    FL_TRY(meta_is(f, path, "shard", want, "--shard", err));
    FL_TRY(meta_is(f, path, "optimizer", fl_optim_kind_name(o->optim.kind), "learner.optimizer", err));
    opt_values(&o->optim, ov);
    for (int i = 0; i < NOPT; i++) FL_TRY(meta_is(f, path, opt_keys[i], ov[i], "learner.* optimizer settings", err));
    snprintf(want, sizeof want, "%d", o->learners);
    FL_TRY(meta_is(f, path, "learners", want, "learner.count", err));

    fl_param_store_state_t st;
    memset(&st, 0, sizeof st);
    uint64_t len = 0, steps = 0;
    FL_TRY(meta_u64(f, path, "total", &st.total, err));
    FL_TRY(meta_u64(f, path, "offset", &st.offset, err));
    FL_TRY(meta_u64(f, path, "length", &len, err));
    FL_TRY(meta_u64(f, path, "version", &st.version, err));
    FL_TRY(meta_u64(f, path, "optimizer.steps", &steps, err));
    uint64_t eo = 0, en = 0;
    if (st.total == 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "paramserver checkpoint %s: total is 0, expected a vector of at "
                          "least one element",
                          path);
    fl_param_shard_range(st.total, o->num_shards, (int)o->shard_id, &eo, &en);
    if (st.offset != eo || len != en)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "paramserver checkpoint %s: the slice is offset %" PRIu64 ", length %" PRIu64
                          " in the file; shard %" PRIu32 " of paramserver.shards = %d owns offset %" PRIu64
                          ", length %" PRIu64 " of a %" PRIu64 "-element vector",
                          path, st.offset, len, o->shard_id, o->num_shards, eo, en, st.total);
    const struct {
        const char *key;
        uint64_t *out;
    } counters[] = {{"publishes", &st.publishes},
                    {"pushes_applied", &st.pushes_applied},
                    {"pushes_dropped", &st.pushes_dropped},
                    {"waits", &st.waits},
                    {"wait_timeouts", &st.wait_timeouts}};
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        FL_TRY(meta_u64(f, path, counters[i].key, counters[i].out, err));
    const char *h = fl_safetensors_meta(f, "staleness_hist");
    int nh = 0;
    for (const char *p = h; p && nh < FL_PARAM_STALENESS_BUCKETS; nh++) {
        char *end = NULL;
        if (!isdigit((unsigned char)*p)) break;
        st.staleness_hist[nh] = strtoull(p, &end, 10);
        p = *end == ',' ? end + 1 : NULL;
    }
    if (nh != FL_PARAM_STALENESS_BUCKETS)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "paramserver checkpoint %s: metadata staleness_hist is %s, "
                          "expected %d comma-separated counts",
                          path, h ? h : "missing", FL_PARAM_STALENESS_BUCKETS);

    st.n = (size_t)len;
    st.optim_steps = (int64_t)steps;
    st.learners = o->learners;
    char names[MAX_SLOTS][64];
    int slots = 0;
    FL_TRY(slot_names(o, names, &slots, err));
    const void *params = NULL, *clocks = NULL;
    FL_TRY(find_vec(f, path, "params", FL_ST_F32, len, &params, err));
    FL_TRY(find_vec(f, path, "clocks", FL_ST_I64, (uint64_t)o->learners, &clocks, err));
    int expect = 2 + (len ? slots : 0);
    if (fl_safetensors_count(f) != expect)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "paramserver checkpoint %s: %d tensors, expected %d (params, "
                          "clocks and the %d slot(s) of %s)",
                          path, fl_safetensors_count(f), expect, slots, fl_optim_kind_name(o->optim.kind));
    /* Copies, so that the values are aligned whatever the file's layout. */
    fl_status rc = FL_OK;
    st.params = malloc(len ? 4 * len : 1);
    st.clocks = malloc(8 * (size_t)o->learners);
    st.optim_size = len ? (size_t)slots * len : 0;
    st.optim = st.optim_size ? malloc(4 * st.optim_size) : NULL;
    if (!st.params || !st.clocks || (st.optim_size && !st.optim)) {
        rc = fl_err_set(err, FL_NO_MEMORY, "paramserver checkpoint %s: out of memory", path);
        goto done;
    }
    memcpy(st.params, params, 4 * len);
    memcpy(st.clocks, clocks, 8 * (size_t)o->learners);
    for (int i = 0; i < slots && len; i++) {
        const void *slot = NULL;
        if ((rc = find_vec(f, path, names[i], FL_ST_F32, len, &slot, err)) != FL_OK) goto done;
        memcpy(st.optim + (size_t)i * len, slot, 4 * len);
    }
    fl_err_t e;
    fl_err_init(&e);
    if ((rc = fl_param_store_restore(s, &st, &e)) != FL_OK) {
        fl_err_set(err, rc, "paramserver checkpoint %s: %s", path, e.msg);
        goto done;
    }
    if (version) *version = st.version;
done:
    fl_param_store_state_free(&st);
    return rc;
}

fl_status fl_param_checkpoint_load(fl_param_store_t *s, const char *path, uint64_t *version, fl_err_t *err) {
    fl_safetensors_t *f = NULL;
    FL_TRY(fl_safetensors_read(path, &f, err));
    fl_status rc = load_checked(s, f, path, version, err);
    fl_safetensors_free(f);
    return rc;
}
