/* checkpoint: the learner's checkpoints as safetensors files (see learner.h for the
 * format): fl_learner_save writes one, fl__learner_resume continues from one,
 * fl_learner_load_network takes the online network out of one (for `fleet eval`), and
 * fl__learner_checkpoint writes learner.checkpoint_dir's file during and at the end of a
 * run. The tensors are the CPU copies of the networks and the optimizer state (a GPU
 * learner pulls them first), so that checkpoints move between the backends. Resume and
 * load check every tensor a network needs (find_views) before they copy any.
 * Failure: save answers FL_NO_MEMORY or safetensors' errors (the file is written
 * atomically); resume and load FL_INVALID_ARGUMENT naming the path and the mismatch, and
 * change nothing then; a periodic checkpoint that fails is logged and training goes on.
 * Thread-safety: the learner's owner thread. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/safetensors.h"
#include "learner/learner_internal.h"

#define CKPT_FORMAT "fleet.learner"
#define CKPT_VERSION "1"
/* Longest model.spec compared (config strings are shorter). */
#define SPEC_MAX 4096
/* Room for the two specs of a hint in a message. */
#define SPEC_HINT_MAX 300

/* "10,10,4" */
static void shape_text(const fl_obs_spec_t *o, char *buf, size_t len) {
    buf[0] = '\0';
    for (int i = 0; i < o->rank; i++) snprintf(buf + strlen(buf), len - strlen(buf), "%s%d", i ? "," : "", o->shape[i]);
}

fl_status fl_learner_save(fl_learner_t *l, const char *path, fl_err_t *err) {
    const int nv = fl_qnet_num_views(l->online), slots = fl_optim_num_slots(l->opt);
    const size_t np = fl_qnet_num_params(l->online);
    fl_st_tensor_t *t = calloc((size_t)(2 * nv + slots), sizeof *t);
    if (!t) return fl_err_set(err, FL_NO_MEMORY, "learner checkpoint %s: out of memory", path);
    int n = fl_qnet_st_tensors(l->online, "online", t);
    n += fl_qnet_st_tensors(l->target, "target", t + n);
    for (int sl = 0; sl < slots; sl++) {
        fl_st_tensor_t *x = &t[n++];
        snprintf(x->name, sizeof x->name, "optimizer.%s", fl_optim_slot_name(l->opt, sl));
        x->dtype = FL_ST_F32;
        x->rank = 1;
        x->shape[0] = (int64_t)np;
        x->data = fl_optim_state(l->opt) + (size_t)sl * np;
        x->bytes = np * sizeof(float);
    }
    char shape[64], steps[32], osteps[32], samples[32], version[32], targets[32], actions[16], loss[32];
    shape_text(&l->obs, shape, sizeof shape);
    snprintf(steps, sizeof steps, "%llu", (unsigned long long)l->st.steps);
    snprintf(osteps, sizeof osteps, "%lld", (long long)fl_optim_steps(l->opt));
    snprintf(samples, sizeof samples, "%llu", (unsigned long long)l->st.samples);
    snprintf(version, sizeof version, "%llu", (unsigned long long)l->st.param_version);
    snprintf(targets, sizeof targets, "%llu", (unsigned long long)l->st.target_updates);
    snprintf(actions, sizeof actions, "%d", l->num_actions);
    snprintf(loss, sizeof loss, "%.9g", l->st.last_loss);
    const char *keys[] = {"format",        "format_version",    "model.spec",    "obs_dtype",       "obs_shape",
                          "num_actions",   "learner.optimizer", "learner.steps", "optimizer.steps", "learner.samples",
                          "param_version", "target_updates",    "last_loss"};
    const char *vals[] = {CKPT_FORMAT,
                          CKPT_VERSION,
                          l->o.model_spec,
                          fl_dtype_name(l->obs.dtype),
                          shape,
                          actions,
                          fl_optim_kind_name(fl_optim_config(l->opt)->kind),
                          steps,
                          osteps,
                          samples,
                          version,
                          targets,
                          loss};
    fl_status s = fl_safetensors_write(path, t, n, keys, vals, (int)(sizeof keys / sizeof keys[0]), err);
    free(t);
    if (s == FL_OK)
        FL_INFO("learner checkpoint %s: step %llu, version %llu", path, (unsigned long long)l->st.steps,
                (unsigned long long)l->st.param_version);
    return s;
}

/* A metadata value as an unsigned integer; FL_INVALID_ARGUMENT naming it otherwise. */
static fl_status meta_u64(const fl_safetensors_t *f, const char *path, const char *key, uint64_t *out, fl_err_t *err) {
    const char *v = fl_safetensors_meta(f, key);
    char *end = NULL;
    errno = 0;
    unsigned long long x = v && *v ? strtoull(v, &end, 10) : 0;
    if (!v || !isdigit((unsigned char)v[0]) || *end || errno || x > (unsigned long long)INT64_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner checkpoint %s: metadata %s is %s%s%s, expected an integer",
                          path, key, v ? "\"" : "", v ? v : "missing", v ? "\"" : "");
    *out = x;
    return FL_OK;
}

/* s without leading and trailing whitespace, every run of whitespace as one space. */
static void squeeze(const char *s, char *out, size_t len) {
    size_t n = 0;
    int gap = 0;
    for (; *s && n + 2 < len; s++) {
        if (isspace((unsigned char)*s)) {
            gap = n > 0;
            continue;
        }
        if (gap) out[n++] = ' ';
        gap = 0;
        out[n++] = *s;
    }
    out[n] = '\0';
}

/* The same layers in the same order: the specs equal up to whitespace. */
static int same_spec(const char *a, const char *b) {
    char x[SPEC_MAX], y[SPEC_MAX];
    squeeze(a, x, sizeof x);
    squeeze(b, y, sizeof y);
    return strcmp(x, y) == 0;
}

/* "(128, 4)" */
static void dims_text(const int64_t *shape, int rank, char *buf, size_t len) {
    snprintf(buf, len, "(");
    for (int d = 0; d < rank; d++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%lld", d ? ", " : "", (long long)shape[d]);
    snprintf(buf + strlen(buf), len - strlen(buf), "%s)", rank == 1 ? "," : "");
}

/* ": this network is model.spec ...; was the run's model.spec ...?" when the checkpoint's
 * model.spec is not the network's, else "": a hint in messages about its tensors. */
static void spec_hint(const fl_safetensors_t *f, const fl_qnet_t *net, char *buf, size_t len) {
    const char *spec = fl_safetensors_meta(f, "model.spec");
    buf[0] = '\0';
    if (spec && same_spec(spec, fl_qnet_spec(net))) return;
    snprintf(buf, len, ": this network is model.spec \"%s\"; was the run's model.spec \"%s\"?", fl_qnet_spec(net),
             spec ? spec : "(not recorded)");
}

/* One view's tensor "<prefix>.<view>": present, F32, of the view's shape. */
static fl_status find_view(const fl_safetensors_t *f, const char *path, const char *prefix, const fl_qnet_t *net,
                           const fl_param_view_t *v, const fl_st_tensor_t **out, fl_err_t *err) {
    char name[FL_ST_NAME_MAX], want[96], got[96], hint[2 * SPEC_HINT_MAX];
    snprintf(name, sizeof name, "%s.%s", prefix, v->name);
    const fl_st_tensor_t *x = fl_safetensors_find(f, name);
    int ok = x && x->dtype == FL_ST_F32 && x->rank == v->rank;
    for (int d = 0; ok && d < v->rank; d++) ok = x->shape[d] == v->shape[d];
    if (ok) {
        *out = x;
        return FL_OK;
    }
    dims_text(v->shape, v->rank, want, sizeof want);
    spec_hint(f, net, hint, sizeof hint);
    if (!x)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "learner checkpoint %s: tensor %s is missing; expected F32 %s as the "
                          "network's view%s",
                          path, name, want, hint);
    dims_text(x->shape, x->rank, got, sizeof got);
    return fl_err_set(err, FL_INVALID_ARGUMENT,
                      "learner checkpoint %s: tensor %s is %s %s; expected F32 %s as the "
                      "network's view%s",
                      path, name, fl_st_dtype_name(x->dtype), got, want, hint);
}

/* Every view of net has its tensor "<prefix>.<view>" (find_view), and f holds no other
 * "<prefix>." tensor (a deeper network of the same first and last layers would otherwise
 * load). src[i] gets view i's tensor. */
static fl_status find_views(const fl_safetensors_t *f, const char *path, const char *prefix, const fl_qnet_t *net,
                            const fl_st_tensor_t **src, fl_err_t *err) {
    const int nv = fl_qnet_num_views(net);
    for (int i = 0; i < nv; i++) FL_TRY(find_view(f, path, prefix, net, fl_qnet_view(net, i), &src[i], err));
    const size_t plen = strlen(prefix);
    for (int i = 0; i < fl_safetensors_count(f); i++) {
        const char *name = fl_safetensors_at(f, i)->name;
        if (strncmp(name, prefix, plen) != 0 || name[plen] != '.' || fl_qnet_find_view(net, name + plen + 1)) continue;
        char hint[2 * SPEC_HINT_MAX];
        spec_hint(f, net, hint, sizeof hint);
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner checkpoint %s: tensor %s has no view in this network%s",
                          path, name, hint);
    }
    return FL_OK;
}

static void copy_views(fl_qnet_t *net, const fl_st_tensor_t *const *src) {
    for (int i = 0; i < fl_qnet_num_views(net); i++) {
        const fl_param_view_t *v = fl_qnet_view(net, i);
        memcpy(fl_qnet_params(net) + v->offset, src[i]->data, v->numel * sizeof(float));
    }
}

/* format = fleet.learner (or, with policy_ok, fleet.policy: an evaluator's best policy,
 * eval/evaluator.h) and format_version = 1. */
static fl_status check_format(const fl_safetensors_t *f, const char *path, int policy_ok, fl_err_t *err) {
    const char *fmt = fl_safetensors_meta(f, "format");
    const char *keys[] = {"format", "format_version"},
               *want[] = {policy_ok && fmt && strcmp(fmt, FL_POLICY_FORMAT) == 0 ? FL_POLICY_FORMAT : CKPT_FORMAT,
                          CKPT_VERSION};
    for (int i = 0; i < 2; i++) {
        const char *v = fl_safetensors_meta(f, keys[i]);
        if (!v || strcmp(v, want[i]) != 0)
            return fl_err_set(
                err, FL_INVALID_ARGUMENT,
                "learner checkpoint %s: metadata %s is %s%s%s, expected \"%s\" "
                "(a file that fl_learner_save wrote, e.g. <learner.checkpoint_dir>/learner-0.safetensors)",
                path, keys[i], v ? "\"" : "", v ? v : "missing", v ? "\"" : "", want[i]);
    }
    return FL_OK;
}

fl_status fl_learner_load_network(const char *path, fl_qnet_t *net, fl_err_t *err) {
    fl_safetensors_t *f = NULL;
    FL_TRY(fl_safetensors_read(path, &f, err));
    const fl_st_tensor_t *src[FL_QNET_MAX_LAYERS * 4];
    fl_status s = check_format(f, path, 1, err);
    if (s == FL_OK) s = find_views(f, path, "online", net, src, err);
    const char *spec = fl_safetensors_meta(f, "model.spec");
    if (s == FL_OK && !(spec && same_spec(spec, fl_qnet_spec(net))))
        s = fl_err_set(err, FL_INVALID_ARGUMENT,
                       "learner checkpoint %s: model.spec is %s%s%s; this network is \"%s\" "
                       "(the tensors fit, but the layers differ: was the run's model.spec \"%s\"?)",
                       path, spec ? "\"" : "", spec ? spec : "missing", spec ? "\"" : "", fl_qnet_spec(net),
                       spec ? spec : "?");
    if (s == FL_OK) copy_views(net, src);
    fl_safetensors_free(f);
    return s;
}

/* The metadata resume compares with the learner's own configuration. */
static fl_status check_resume_meta(const fl_learner_t *l, const fl_safetensors_t *f, const char *path, fl_err_t *err) {
    char shape[64];
    shape_text(&l->obs, shape, sizeof shape);
    char actions[16];
    snprintf(actions, sizeof actions, "%d", l->num_actions);
    const char *want_k[] = {"format",    "format_version", "model.spec",       "obs_dtype",
                            "obs_shape", "num_actions",    "learner.optimizer"};
    const char *want_v[] = {CKPT_FORMAT,
                            CKPT_VERSION,
                            l->o.model_spec,
                            fl_dtype_name(l->obs.dtype),
                            shape,
                            actions,
                            fl_optim_kind_name(fl_optim_config(l->opt)->kind)};
    for (size_t i = 0; i < sizeof want_k / sizeof want_k[0]; i++) {
        const char *v = fl_safetensors_meta(f, want_k[i]);
        if (!v || strcmp(v, want_v[i]) != 0)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "learner checkpoint %s: %s is %s%s%s, this learner has \"%s\"",
                              path, want_k[i], v ? "\"" : "", v ? v : "missing", v ? "\"" : "", want_v[i]);
    }
    return FL_OK;
}

/* Both networks' and the optimizer's tensors, each present with its exact shape, and no
 * other tensor; src gets the online views, the target views, then the slots. */
static fl_status find_resume_tensors(const fl_learner_t *l, const fl_safetensors_t *f, const char *path,
                                     const fl_st_tensor_t **src, fl_err_t *err) {
    const int nv = fl_qnet_num_views(l->online), slots = fl_optim_num_slots(l->opt);
    const size_t np = fl_qnet_num_params(l->online);
    FL_TRY(find_views(f, path, "online", l->online, src, err));
    FL_TRY(find_views(f, path, "target", l->target, src + nv, err));
    int n = 2 * nv;
    for (int sl = 0; sl < slots; sl++) {
        char name[FL_ST_NAME_MAX];
        snprintf(name, sizeof name, "optimizer.%s", fl_optim_slot_name(l->opt, sl));
        const fl_st_tensor_t *x = fl_safetensors_find(f, name);
        if (!x || x->dtype != FL_ST_F32 || x->rank != 1 || x->shape[0] != (int64_t)np)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "learner checkpoint %s: tensor %s is %s; expected F32 (%zu)",
                              path, name, x ? "of another dtype or shape" : "missing", np);
        src[n++] = x;
    }
    if (fl_safetensors_count(f) != n)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner checkpoint %s: %d tensors, expected %d", path,
                          fl_safetensors_count(f), n);
    return FL_OK;
}

fl_status fl__learner_resume(fl_learner_t *l, const char *path, fl_err_t *err) {
    fl_safetensors_t *f = NULL;
    FL_TRY(fl_safetensors_read(path, &f, err));
    uint64_t steps = 0, osteps = 0, samples = 0, version = 0, targets = 0;
    const fl_st_tensor_t *src[2 * FL_QNET_MAX_LAYERS * 4 + 8];
    fl_status s;
    if ((s = check_resume_meta(l, f, path, err)) != FL_OK ||
        (s = meta_u64(f, path, "learner.steps", &steps, err)) != FL_OK ||
        (s = meta_u64(f, path, "optimizer.steps", &osteps, err)) != FL_OK ||
        (s = meta_u64(f, path, "learner.samples", &samples, err)) != FL_OK ||
        (s = meta_u64(f, path, "param_version", &version, err)) != FL_OK ||
        (s = meta_u64(f, path, "target_updates", &targets, err)) != FL_OK ||
        (s = find_resume_tensors(l, f, path, src, err)) != FL_OK)
        goto done;
    /* Everything checked: copy. */
    const int nv = fl_qnet_num_views(l->online), slots = fl_optim_num_slots(l->opt);
    const size_t np = fl_qnet_num_params(l->online);
    copy_views(l->online, src);
    copy_views(l->target, src + nv);
    for (int sl = 0; sl < slots; sl++) memcpy(fl_optim_state(l->opt) + (size_t)sl * np, src[2 * nv + sl]->data, np * 4);
    fl_optim_set_steps(l->opt, (int64_t)osteps);
    l->st.steps = steps;
    l->st.samples = samples;
    l->st.param_version = version;
    l->st.target_updates = targets;
    atomic_store(&l->watch_steps, steps);
    const char *loss = fl_safetensors_meta(f, "last_loss");
    if (loss) l->st.last_loss = strtod(loss, NULL);
    FL_INFO("learner: resumed from %s at step %llu (version %llu, last loss %.4g)", path, (unsigned long long)steps,
            (unsigned long long)version, l->st.last_loss);
done:
    fl_safetensors_free(f);
    return s;
}

/* The step number of "learner-<index>.step-<N>.safetensors", or -1 for another name. */
static long long copy_step(const char *name, int index) {
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "learner-%d.step-", index);
    if (strncmp(name, prefix, (size_t)n) != 0 || !isdigit((unsigned char)name[n])) return -1;
    char *end;
    long long step = strtoll(name + n, &end, 10);
    return strcmp(end, ".safetensors") == 0 ? step : -1;
}

/* Links the checkpoint just written as learner-<index>.step-<steps>.safetensors and
 * removes all but the keep_checkpoints newest such copies. Failures are logged. */
static void keep_copies(fl_learner_t *l) {
    if (l->o.keep_checkpoints <= 0) return;
    char dir[1024], copy[1100];
    snprintf(dir, sizeof dir, "%s", l->ckpt_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    snprintf(copy, sizeof copy, "%s/learner-%d.step-%llu.safetensors", dir, l->index, (unsigned long long)l->st.steps);
    unlink(copy);
    if (link(l->ckpt_path, copy) != 0) FL_WARN("learner checkpoint: cannot link %s: %s", copy, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return;
    long long steps[1024];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 1024;) {
        long long st = copy_step(e->d_name, l->index);
        if (st >= 0) steps[n++] = st;
    }
    closedir(d);
    for (int i = 0; i < n; i++) { /* remove every copy with keep_checkpoints newer ones */
        int newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer < l->o.keep_checkpoints) continue;
        snprintf(copy, sizeof copy, "%s/learner-%d.step-%lld.safetensors", dir, l->index, steps[i]);
        if (unlink(copy) != 0) FL_WARN("learner checkpoint: cannot remove %s: %s", copy, strerror(errno));
    }
}

void fl__learner_checkpoint(fl_learner_t *l) {
    if (!l->ckpt_path) return;
    l->last_ckpt_t = fl_clock_sec();
    fl_err_t e;
    fl_err_init(&e);
    if (fl__learner_pull(l, &e) != FL_OK) {
        FL_WARN("learner checkpoint failed: %s", e.msg);
        return;
    }
    if (fl_learner_save(l, l->ckpt_path, &e) != FL_OK) {
        FL_WARN("learner checkpoint failed: %s", e.msg);
        return;
    }
    keep_copies(l);
}
