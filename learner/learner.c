/* learner: the learner role on the CPU or a GPU (see learner.h): create, run, stop and
 * destroy. Where updates run is a backend's (backend.h), what a step is a mode's (mode.h);
 * create picks each from one table. What every mode does after an update is step.c's,
 * the helpers every file uses are state.c's. */
#include "learner/learner.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/stop.h"
#include "kernels/fpmode.h"
#include "learner/learner_internal.h"

/* Stream of run.seed that initialises learner i's network. */
#define INIT_STREAM 0x6c6561726e6572ULL
/* Stream of run.seed that splits learner i's batches across replay shards. */
#define SPLIT_STREAM 0x73706c6974000000ULL

/* learner.device: the backend it asks for, and whether it must be there (auto takes the
 * GPU when there is one and falls back to the CPU). */
typedef struct device_row {
    const char *name;
    int gpu; /* the backend is the GPU's (loaded with its library), else the CPU's */
    int required;
} device_row_t;

static const device_row_t DEVICES[] = {
    [FL_LEARNER_CPU] = {"cpu", 0, 1},
    [FL_LEARNER_CUDA] = {"cuda", 1, 1},
    [FL_LEARNER_AUTO] = {"auto", 1, 0},
};

/* Row d's backend; NULL (why says why) where it is the GPU's and that is not there. */
static const fl__learner_backend_t *row_backend(const device_row_t *d, char *why, size_t why_size) {
    return d->gpu ? fl__learner_backend_cuda_load(why, why_size) : &fl__learner_backend_cpu;
}

/* The modes: learner.mode, and for apex whether the learners form a group. */
enum { MODE_APEX, MODE_GROUP, MODE_GORILA };
static const fl__learner_mode_t *const MODES[] = {
    [MODE_APEX] = &fl__learner_mode_apex,
    [MODE_GROUP] = &fl__learner_mode_group,
    [MODE_GORILA] = &fl__learner_mode_gorila,
};

/* ---- create / destroy ------------------------------------------------------------- */

static fl_status check_opts(const fl_learner_opts_t *o, fl_err_t *err) {
    if (o->mode != FL_LEARNER_APEX && o->mode != FL_LEARNER_GORILA)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: mode %d (expected apex or gorila)", (int)o->mode);
    if ((int)o->device < 0 || (size_t)o->device >= sizeof DEVICES / sizeof DEVICES[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: device %d (expected cpu, cuda or auto)", (int)o->device);
    const device_row_t *d = &DEVICES[o->device];
    if (d->required) {
        char why[1024];
        const fl__learner_backend_t *be = row_backend(d, why, sizeof why);
        if (!be) return fl_err_set(err, FL_UNIMPLEMENTED, "learner: learner.device = %s, but %s", d->name, why);
        if (be->check) FL_TRY(be->check(o, err));
    }
    if (o->index < 0 || o->index >= o->count)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "learner: index %d is out of range (expected 0 <= I < learner.count = %lld)", o->index,
                          (long long)o->count);
    if (o->mode == FL_LEARNER_APEX && o->count > 1) {
        if (!o->reduce)
            return fl_err_set(err, FL_FAILED_PRECONDITION,
                              "learner: learner.count = %lld in apex mode averages gradients over MPI: start the "
                              "fleet under mpirun (`fleet run --print-mpirun` prints the command), or use "
                              "learner.mode = gorila or learner.count = 1",
                              (long long)o->count);
        if (fl_reduce_size(o->reduce) != o->count || fl_reduce_rank(o->reduce) != o->index)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "learner: the all-reduce group is member %d of %d, expected learner %d of "
                              "learner.count = %lld",
                              fl_reduce_rank(o->reduce), fl_reduce_size(o->reduce), o->index, (long long)o->count);
    }
    if (!o->replay_addr || !o->replay_addr[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: no replay address (expected HOST:PORT or unix:/PATH)");
    if (!o->paramserver_addr || !o->paramserver_addr[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "learner: no parameter-server address (expected HOST:PORT or unix:/PATH)");
    if (o->num_actions < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: %d actions (expected >= 1)", o->num_actions);
    float probe = 0;
    unsigned char zero[8] = {0};
    if (fl_dtype_to_float(o->obs.dtype, zero, 1, &probe) != 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "learner: %s observations cannot be fed to the Q-network (expected float32, uint8 or int32)",
                          fl_dtype_name(o->obs.dtype));
    if (o->obs.rank < 1 || o->obs.rank > 4)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: observation rank %d (expected 1..4)", o->obs.rank);
    for (int i = 0; i < o->obs.rank; i++)
        if (o->obs.shape[i] < 1)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: observation shape[%d] = %d (expected >= 1)", i,
                              o->obs.shape[i]);
    return FL_OK;
}

fl_status fl_learner_check_opts(const fl_learner_opts_t *o, fl_err_t *err) {
    return check_opts(o, err);
}

/* Both networks (online initialised from the seed and the index, target a copy), the
 * optimizer and the CPU update. */
static fl_status build_networks(fl_learner_t *l, const fl_learner_opts_t *o, fl_err_t *err) {
    fl_status s;
    if ((s = fl_qnet_create_for_obs(o->model_spec, l->obs.rank, l->obs.shape, l->num_actions, l->batch_size, &l->online,
                                    err)) != FL_OK ||
        (s = fl_qnet_create_for_obs(o->model_spec, l->obs.rank, l->obs.shape, l->num_actions, l->batch_size, &l->target,
                                    err)) != FL_OK) {
        fl_err_prefix(err, "learner: model.spec");
        return s;
    }
    if ((s = fl_qnet_set_backend(l->online, o->backend, err)) != FL_OK ||
        (s = fl_qnet_set_backend(l->target, o->backend, err)) != FL_OK) {
        fl_err_prefix(err, "learner: model.cpu_kernels");
        return s;
    }
    fl_rng_t rng;
    fl_rng_init_stream(&rng, o->seed, INIT_STREAM + (uint64_t)l->index);
    fl_qnet_init(l->online, &rng);
    fl_qnet_copy_params(l->target, l->online);
    fl_qnet_set_input_scale(l->online, (float)o->input_scale);
    fl_qnet_set_input_scale(l->target, (float)o->input_scale);

    const fl_optim_config_t oc = fl_optim_config_from(&o->optim);
    if ((s = fl_optim_create(&oc, fl_qnet_num_params(l->online), &l->opt, err)) != FL_OK) {
        fl_err_prefix(err, "learner: learner.optimizer");
        return s;
    }
    fl_dqn_config_t dc = {l->batch_size, l->num_actions, (float)o->huber_delta, (float)o->grad_clip};
    return fl_dqn_create(&dc, &l->dqn, err);
}

/* The batch, its float copies, priorities, the reduce buffer and the learner's strings. */
static fl_status alloc_buffers(fl_learner_t *l, const fl_learner_opts_t *o, fl_err_t *err) {
    fl_status s;
    if ((s = fl_replay_batch_init(&l->batch, (size_t)l->batch_size, l->obs_bytes)) != FL_OK)
        return fl_err_set(err, s, "learner: out of memory for a batch of %d", l->batch_size);
    size_t nf = (size_t)l->batch_size * l->obs_count;
    l->obs_f = malloc(nf * sizeof(float));
    l->next_f = malloc(nf * sizeof(float));
    l->priorities = malloc((size_t)l->batch_size * sizeof(float));
    l->replay_addr = strdup(o->replay_addr);
    l->param_addr = strdup(o->paramserver_addr);
    l->o.model_spec = l->model_spec = strdup(o->model_spec);
    const char *dir = o->checkpoint_dir ? o->checkpoint_dir : "";
    const size_t path_len = strlen(dir) + 64;
    if (dir[0] && (l->ckpt_path = malloc(path_len)))
        snprintf(l->ckpt_path, path_len, "%s/learner-%d.safetensors", dir, l->index);
    if (l->reduce) l->rbuf = malloc((fl_qnet_num_params(l->online) + 2) * sizeof(float));
    if (!l->obs_f || !l->next_f || !l->priorities || !l->replay_addr || !l->param_addr || !l->model_spec ||
        (dir[0] && !l->ckpt_path) || (l->reduce && !l->rbuf))
        return fl_err_set(err, FL_NO_MEMORY, "learner: out of memory");
    return FL_OK;
}

/* learner.device's backend takes over training (auto may decline: the CPU then). */
static fl_status open_backend(fl_learner_t *l, fl_err_t *err) {
    const device_row_t *d = &DEVICES[l->o.device];
    char why[1024];
    l->be = row_backend(d, why, sizeof why);
    if (!l->be) {
#ifdef FLEET_HAVE_CUDA
        FL_INFO("learner.device = auto: %s: training on the CPU", why);
#endif
        l->be = &fl__learner_backend_cpu;
    }
    if (!l->be->open) return FL_OK;
    int declined = 0;
    FL_TRY(l->be->open(l, d->required, &declined, err));
    if (declined) l->be = &fl__learner_backend_cpu;
    return FL_OK;
}

/* The replay shards (and the prefetcher), the parameter servers and the reporter. */
static fl_status connect_services(fl_learner_t *l, const fl_learner_opts_t *o, fl_err_t *err) {
    fl_status s;
    fl_rng_t split_rng;
    fl_rng_init_stream(&split_rng, o->seed, SPLIT_STREAM + (uint64_t)l->index);
    if ((s = fl_replay_sharded_create(o->replay_addr, fl_rng_u64(&split_rng), &l->replay, err)) != FL_OK) {
        fl_err_prefix(err, "learner: replay %s", o->replay_addr);
        return s;
    }
    if (fl_replay_sharded_count(l->replay) != o->replay_shards)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "learner: replay %s lists %d shard address%s, but replay.shards = %lld (expected one "
                          "address per shard, shard 0 first)",
                          o->replay_addr, fl_replay_sharded_count(l->replay),
                          fl_replay_sharded_count(l->replay) == 1 ? "" : "es", (long long)o->replay_shards);
    fl_replay_sharded_set_timeout(l->replay, FL_LEARNER_RPC_TIMEOUT_MS);
    l->cur = &l->batch;
    if (o->prefetch > 0 &&
        (s = fl_replay_prefetch_create(l->replay, o->prefetch, o->batches_per_call > 0 ? o->batches_per_call : 1,
                                       (size_t)l->batch_size, l->obs_bytes, o->beta, FL__LEARNER_SAMPLE_TIMEOUT_MS,
                                       &l->prefetch, err)) != FL_OK) {
        fl_err_prefix(err, "learner: learner.prefetch");
        return s;
    }
    fl_param_client_opts_t po = {.quantize = o->mode == FL_LEARNER_GORILA && o->push_1bit,
                                 .learner = (uint32_t)l->index};
    if ((s = fl_param_client_create_opts(o->paramserver_addr, &po, &l->params, err)) != FL_OK) {
        fl_err_prefix(err, "learner: parameter server %s", o->paramserver_addr);
        return s;
    }
    if ((s = fl_reporter_create(o->control_addr, "learner", (uint32_t)l->index, o->progress_every, &l->rep, err)) !=
        FL_OK) {
        fl_err_prefix(err, "learner: control %s", o->control_addr ? o->control_addr : "");
        return s;
    }
    return FL_OK;
}

fl_status fl_learner_create(const fl_learner_opts_t *opts, fl_learner_t **out, fl_err_t *err) {
    if (!opts || !out) return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: NULL argument");
    *out = NULL;
    FL_TRY(check_opts(opts, err));
    fl_status s = FL_OK;
    fl_learner_t *l = calloc(1, sizeof *l);
    if (!l) return fl_err_set(err, FL_NO_MEMORY, "learner: out of memory");
    l->o = *opts;
    l->o.replay_addr = l->o.paramserver_addr = l->o.control_addr = l->o.resume_path = l->o.model_spec = NULL;
    l->o.checkpoint_dir = NULL;
    l->index = opts->index;
    l->obs = opts->obs;
    l->num_actions = opts->num_actions;
    l->batch_size = opts->batch_size;
    l->obs_count = 1;
    for (int i = 0; i < l->obs.rank; i++) l->obs_count *= (size_t)l->obs.shape[i];
    l->obs_bytes = fl_obs_spec_bytes(&l->obs);
    l->reduce = opts->mode == FL_LEARNER_APEX && opts->count > 1 ? opts->reduce : NULL;
    l->replay_out.what = "replay";
    l->param_out.what = "parameter server";
    if (l->obs_count > (size_t)1 << 30) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "learner: observations of %zu elements are too large", l->obs_count);
        goto fail;
    }

    /* the CPU kernels' threads; the oneDNN backend follows OpenBLAS's count (kernels/dnnl.h) */
    openblas_set_num_threads(opts->threads);
    /* before the networks and their threads exist: every thread they start inherits it */
    if (opts->flush_denormals) fl_fp_flush_denormals(1);
    if ((s = build_networks(l, opts, err)) != FL_OK || (s = alloc_buffers(l, opts, err)) != FL_OK) goto fail;
    if (opts->resume_path && opts->resume_path[0]) {
        if ((s = fl__learner_resume(l, opts->resume_path, err)) != FL_OK) goto fail;
        l->steps_at_publish = l->st.steps;
        l->resumed = 1;
    }
    if ((s = open_backend(l, err)) != FL_OK || (s = connect_services(l, opts, err)) != FL_OK) goto fail;

    l->mode = MODES[opts->mode == FL_LEARNER_GORILA ? MODE_GORILA : l->reduce ? MODE_GROUP : MODE_APEX];
    l->publisher = l->mode->publishes && l->index == 0;
    /* Only a lone apex learner pipelines: a Gorila learner must fetch and push every step. */
    l->pipelined = l->mode == MODES[MODE_APEX] && l->be->launch && l->prefetch;
    *out = l;
    return FL_OK;
fail:
    fl_learner_destroy(l);
    return s;
}

void fl_learner_destroy(fl_learner_t *l) {
    if (!l) return;
    if (l->be && l->be->close) l->be->close(l); /* before the replay batches it may have page-locked go */
    fl_reporter_destroy(l->rep);
    fl_param_client_destroy(l->params);
    fl_replay_prefetch_destroy(l->prefetch); /* before the client its threads use */
    fl_replay_sharded_destroy(l->replay);
    fl_replay_batch_free(&l->batch);
    free(l->obs_f);
    free(l->next_f);
    free(l->priorities);
    free(l->rbuf);
    free(l->replay_addr);
    free(l->param_addr);
    free(l->model_spec);
    free(l->ckpt_path);
    fl_dqn_destroy(l->dqn);
    fl_optim_destroy(l->opt);
    fl_qnet_destroy(l->online);
    fl_qnet_destroy(l->target);
    free(l);
}

void fl_learner_stop(fl_learner_t *l) {
    if (l) atomic_store_explicit(&l->stop, 1, memory_order_relaxed);
}

const fl_learner_stats_t *fl_learner_stats(const fl_learner_t *l) {
    return &l->st;
}

void fl_learner_counters(const fl_learner_t *l, uint64_t *steps, uint64_t *retries) {
    if (steps) *steps = atomic_load_explicit(&l->watch_steps, memory_order_relaxed);
    if (retries) *retries = atomic_load_explicit(&l->watch_retries, memory_order_relaxed);
}
fl_qnet_t *fl_learner_target(fl_learner_t *l) {
    return l->target;
}
fl_qnet_t *fl_learner_online(fl_learner_t *l) {
    return l->online;
}

/* ---- run ----------------------------------------------------------------------------- */

/* After the loop: the last priorities, the final publish and checkpoint, the last report. */
static fl_status wind_down(fl_learner_t *l, fl_status s) {
    if (s == FL_CANCELLED) s = FL_OK; /* stopped while waiting: a clean stop */
    fl__learner_release_batch(l);
    if (l->prefetch) { /* no more samples; the last priorities still go out */
        fl_err_t e;
        fl_err_init(&e);
        if (fl_replay_prefetch_stop(l->prefetch, &e) != FL_OK) FL_WARN("last priority updates not sent: %s", e.msg);
        l->st.priorities_applied = fl_replay_prefetch_updates_applied(l->prefetch);
    }
    if (s == FL_OK && l->publisher && (l->st.steps > l->steps_at_publish || l->st.publishes == 0)) {
        fl_err_t e;
        fl_err_init(&e);
        if (fl__learner_pull(l, &e) != FL_OK || fl__learner_publish(l, 0, &e) != FL_OK)
            FL_WARN("final publish failed: %s", e.msg);
        else
            FL_INFO("published the final parameters as version %llu", (unsigned long long)l->st.param_version);
    }
    if (s == FL_OK && l->index == 0) fl__learner_checkpoint(l); /* the final state, when checkpoint_dir is set */
    l->st.total_s = fl_clock_sec() - l->t_start;
    fl__learner_report(l, 1);
    if (s == FL_OK)
        FL_INFO(
            "learner stopped after %llu steps (%llu samples, %llu skipped), version %llu, "
            "%.0f%% of %.3g s in Sample",
            (unsigned long long)l->st.steps, (unsigned long long)l->st.samples, (unsigned long long)l->st.skipped_steps,
            (unsigned long long)l->st.param_version, l->st.total_s > 0 ? 100.0 * l->st.sample_s / l->st.total_s : 0.0,
            l->st.total_s);
    return s;
}

fl_status fl_learner_run(fl_learner_t *l, fl_err_t *err) {
    if (!l) return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: NULL learner");
    l->t_start = l->win_start = l->last_ckpt_t = fl_clock_sec();
    FL_INFO("learner: %zu parameters (%s), batch %d, %s lr %g, %s kernels, replay %s, parameter server %s",
            fl_qnet_num_params(l->online), l->o.model_spec, l->batch_size, fl_optim_kind_name(l->o.optim.kind),
            l->o.optim.lr, fl_qnet_backend_name(fl_qnet_backend(l->online)), l->replay_addr, l->param_addr);
    const fl__learner_mode_t *m = l->mode;
    fl_status s = m->start(l, err);
    for (int done = 0; s == FL_OK && !done;) s = m->step(l, &done, err);
    if (m->end) s = m->end(l, s, err);
    return wind_down(l, s);
}
