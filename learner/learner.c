/* learner: the CPU learner role (see learner.h). */
#include "learner/learner.h"

#include "learner/learner_internal.h"

#include <cblas.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/control.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/retry.h"
#include "common/rng.h"
#include "common/safetensors.h"
#include "common/stop.h"
#include "kernels/optim.h"
#include "learner/dqn.h"
#include "paramserver/client.h"
#include "replay/prefetch.h"
#ifdef FLEET_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#include "learner/dqn_cuda.h"
#endif

/* ---- small helpers ---------------------------------------------------------------- */

static int stopping(const fl_learner_t *l) {
    if (fl_stop_requested() || fl_reporter_should_stop(l->rep)) return 1;
    return l->o.max_steps > 0 && l->st.steps >= (uint64_t)l->o.max_steps;
}

static void report(fl_learner_t *l, int force) {
    double now = fl_clock_sec();
    double span = now - l->win_start;
    if (!force && span < l->o.progress_every) return;
    if (l->win_steps > 0) l->last_mean_loss = l->win_loss_sum / (double)l->win_steps;
    fl_report_t r;
    memset(&r, 0, sizeof r);
    r.learner_steps = l->st.steps;
    r.samples = l->st.samples;
    r.param_version = l->gorila ? l->fetched_version : l->st.param_version;
    r.loss = l->last_mean_loss;
    r.wait_fraction = span > 0 ? fmin(1.0, l->win_sample_s / span) : 0.0;
    fl_reporter_tick(l->rep, &r, 1);
    l->win_start = now;
    l->win_sample_s = 0;
    l->win_loss_sum = 0;
    l->win_steps = 0;
}

/* Sleeps up to sec seconds in short slices, reporting meanwhile; returns early on a stop. */
static void idle(fl_learner_t *l, double sec) {
    double end = fl_clock_sec() + sec;
    for (;;) {
        report(l, 0);
        if (stopping(l)) return;
        double left = end - fl_clock_sec();
        if (left <= 0) return;
        fl_sleep_sec(left < IDLE_SLICE_S ? left : IDLE_SLICE_S);
    }
}

static void outage_fail(fl_learner_t *l, outage_t *o, const fl_err_t *e, fl_status s) {
    double now = fl_clock_sec();
    if (!o->active) {
        o->active = 1;
        o->since = o->last_log = now;
        fl_backoff_init(&o->backoff);
        FL_WARN("%s unreachable (%s: %s); retrying until it is back or the learner is stopped", o->what,
                fl_status_name(s), e->msg[0] ? e->msg : fl_status_str(s));
    } else if (now - o->last_log >= FL_LEARNER_LOG_EVERY_S) {
        o->last_log = now;
        FL_WARN("%s still unreachable after %.0f s (%s)", o->what, now - o->since, fl_status_name(s));
    }
    l->st.retries++;
    atomic_store_explicit(&l->watch_retries, l->st.retries, memory_order_relaxed);
    idle(l, fl_backoff_next(&o->backoff));
}

static void outage_ok(outage_t *o) {
    if (!o->active) return;
    FL_INFO("%s is back after %.1f s", o->what, fl_clock_sec() - o->since);
    o->active = 0;
}

/* ---- create / destroy ------------------------------------------------------------- */

static fl_status make_optimizer(const fl_optim_settings_t *settings, size_t n, fl_optim_t **out, fl_err_t *err) {
    const fl_optim_config_t oc = fl_optim_config_from(settings);
    return fl_optim_create(&oc, n, out, err);
}

static fl_status check_opts(const fl_learner_options_t *o, fl_err_t *err) {
    const int apex = o->mode == FL_LEARNER_APEX;
    if (o->device == FL_LEARNER_CUDA) {
#ifndef FLEET_HAVE_CUDA
        return fl_err_set(err, FL_UNIMPLEMENTED,
                          "learner: learner.device = cuda, but fleet was built without CUDA (nvcc and cuDNN under "
                          "/usr/local/cuda; expected cpu, or auto)");
#else
        if (o->obs.dtype != FL_DTYPE_FLOAT32 && o->obs.dtype != FL_DTYPE_UINT8)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "learner: learner.device = cuda takes float32 or uint8 observations, not %s",
                              fl_dtype_name(o->obs.dtype));
#endif
    }
    if (o->index < 0 || o->index >= o->count)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "learner: index %d is out of range (expected 0 <= I < learner.count = %lld)", o->index,
                          (long long)o->count);
    if (apex && o->count > 1) {
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
                              fl_reduce_rank(o->reduce), fl_reduce_size(o->reduce), o->index,
                              (long long)o->count);
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

#ifdef FLEET_HAVE_CUDA
/* learner.device = cuda, or auto when a GPU is present: builds the GPU update from the
 * CPU networks and optimizer (fresh or resumed), which stay the copies that checkpoints
 * and publishes read (gpu_pull refreshes them). *use = 0: train on the CPU. */
static fl_status gpu_open(fl_learner_t *l, fl_err_t *err) {
    int want = l->o.device == FL_LEARNER_CUDA;
    int count = 0;
    fl_err_t de;
    fl_err_init(&de);
    if (fl_cuda_device_count(&count, &de) != FL_OK) {
        if (want) return fl_err_set(err, FL_NO_DEVICE, "learner: learner.device = cuda: %s", de.msg);
        FL_INFO("learner.device = auto: no GPU (%s); training on the CPU", de.msg);
        return FL_OK;
    }
    if (!want && l->obs.dtype != FL_DTYPE_FLOAT32 && l->obs.dtype != FL_DTYPE_UINT8) {
        FL_INFO("learner.device = auto: the GPU trains on float32/uint8 observations; training on the CPU");
        return FL_OK;
    }
    fl_cuda_dqn_config_t gc;
    fl_cuda_dqn_config_init(&gc);
    gc.spec = l->o.model_spec;
    gc.obs_rank = l->obs.rank;
    for (int i = 0; i < l->obs.rank; i++) gc.obs_shape[i] = l->obs.shape[i];
    gc.obs_dtype = l->obs.dtype;
    gc.obs_scale = 1.0f / 255.0f; /* as fl_dtype_to_float */
    gc.input_scale = (float)l->o.input_scale;
    gc.num_actions = l->num_actions;
    gc.max_batch = l->batch_size;
    gc.huber_delta = (float)l->o.huber_delta;
    gc.grad_clip = (float)l->o.grad_clip;
    gc.optim = *fl_optim_config(l->opt);
    gc.tf32 = l->o.tf32 != 0;
    gc.use_graph = l->o.cuda_graphs != 0;
    FL_TRY(fl_cuda_dqn_create(&gc, &l->gpu, err));
    const size_t np = fl_qnet_num_params(l->online);
    FL_TRY(fl_cuda_dqn_set_params(l->gpu, fl_qnet_params(l->online), fl_qnet_params(l->target), np, err));
    FL_TRY(fl_cuda_dqn_set_optim_state(l->gpu, fl_optim_state(l->opt), fl_optim_state_size(l->opt),
                                       fl_optim_steps(l->opt), err));
    char name[128] = "";
    fl_cuda_device_name(0, name, sizeof name, NULL);
    FL_INFO("learner: training on %s (TF32 %s, CUDA graphs %s)", name, gc.tf32 ? "on" : "off",
            gc.use_graph ? "on" : "off");
    return FL_OK;
}

/* The CPU copies (both networks, optimizer state) from the GPU: before a checkpoint or
 * the final publish. Synchronous. */
static fl_status gpu_pull(fl_learner_t *l, fl_err_t *err) {
    if (!l->gpu) return FL_OK;
    const size_t np = fl_qnet_num_params(l->online);
    int64_t steps = 0;
    FL_TRY(fl_cuda_dqn_get_params(l->gpu, 0, fl_qnet_params(l->online), np, err));
    FL_TRY(fl_cuda_dqn_get_params(l->gpu, 1, fl_qnet_params(l->target), np, err));
    FL_TRY(fl_cuda_dqn_get_optim_state(l->gpu, fl_optim_state(l->opt), fl_optim_state_size(l->opt), &steps, err));
    fl_optim_set_steps(l->opt, steps);
    return FL_OK;
}
#endif

fl_status fl__learner_pull(fl_learner_t *l, fl_err_t *err) {
#ifdef FLEET_HAVE_CUDA
    return gpu_pull(l, err);
#else
    (void)l;
    (void)err;
    return FL_OK;
#endif
}

fl_status fl_learner_create(const fl_learner_options_t *opts, fl_learner_t **out, fl_err_t *err) {
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
    l->gorila = opts->mode == FL_LEARNER_GORILA;
    l->reduce = !l->gorila && opts->count > 1 ? opts->reduce : NULL;
    l->replay_out.what = "replay";
    l->param_out.what = "parameter server";
    if (l->obs_count > (size_t)1 << 30) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT, "learner: observations of %zu elements are too large", l->obs_count);
        goto fail;
    }

    openblas_set_num_threads(opts->threads);

    if ((s = fl_qnet_create_for_obs(opts->model_spec, l->obs.rank, l->obs.shape, l->num_actions, l->batch_size,
                                    &l->online, err)) != FL_OK ||
        (s = fl_qnet_create_for_obs(opts->model_spec, l->obs.rank, l->obs.shape, l->num_actions, l->batch_size,
                                    &l->target, err)) != FL_OK) {
        fl_err_prefix(err, "learner: model.spec");
        goto fail;
    }
    fl_rng_t rng;
    fl_rng_init_stream(&rng, opts->seed, INIT_STREAM + (uint64_t)l->index);
    fl_qnet_init(l->online, &rng);
    fl_qnet_copy_params(l->target, l->online);
    fl_qnet_set_input_scale(l->online, (float)opts->input_scale);
    fl_qnet_set_input_scale(l->target, (float)opts->input_scale);

    if ((s = make_optimizer(&opts->optim, fl_qnet_num_params(l->online), &l->opt, err)) != FL_OK) {
        fl_err_prefix(err, "learner: learner.optimizer");
        goto fail;
    }
    fl_dqn_config_t dc = {l->batch_size, l->num_actions, (float)opts->huber_delta, (float)opts->grad_clip};
    if ((s = fl_dqn_create(&dc, &l->dqn, err)) != FL_OK) goto fail;

    if ((s = fl_replay_batch_init(&l->batch, (size_t)l->batch_size, l->obs_bytes)) != FL_OK) {
        fl_err_set(err, s, "learner: out of memory for a batch of %d", l->batch_size);
        goto fail;
    }
    size_t nf = (size_t)l->batch_size * l->obs_count;
    l->obs_f = malloc(nf * sizeof(float));
    l->next_f = malloc(nf * sizeof(float));
    l->priorities = malloc((size_t)l->batch_size * sizeof(float));
    l->replay_addr = strdup(opts->replay_addr);
    l->param_addr = strdup(opts->paramserver_addr);
    l->o.model_spec = l->model_spec = strdup(opts->model_spec);
    const char *dir = opts->checkpoint_dir ? opts->checkpoint_dir : "";
    const size_t path_len = strlen(dir) + 64;
    if (dir[0] && (l->ckpt_path = malloc(path_len)))
        snprintf(l->ckpt_path, path_len, "%s/learner-%d.safetensors", dir, l->index);
    if (l->reduce) l->rbuf = malloc((fl_qnet_num_params(l->online) + 2) * sizeof(float));
    if (!l->obs_f || !l->next_f || !l->priorities || !l->replay_addr || !l->param_addr || !l->model_spec ||
        (dir[0] && !l->ckpt_path) || (l->reduce && !l->rbuf)) {
        s = fl_err_set(err, FL_NO_MEMORY, "learner: out of memory");
        goto fail;
    }

    if (opts->resume_path && opts->resume_path[0]) {
        if ((s = fl__learner_resume(l, opts->resume_path, err)) != FL_OK) goto fail;
        l->steps_at_publish = l->st.steps;
    }
#ifdef FLEET_HAVE_CUDA
    if (opts->device != FL_LEARNER_CPU && (s = gpu_open(l, err)) != FL_OK) goto fail;
#endif

    fl_rng_t split_rng;
    fl_rng_init_stream(&split_rng, opts->seed, SPLIT_STREAM + (uint64_t)l->index);
    if ((s = fl_replay_sharded_create(opts->replay_addr, fl_rng_u64(&split_rng), &l->replay, err)) != FL_OK) {
        fl_err_prefix(err, "learner: replay %s", opts->replay_addr);
        goto fail;
    }
    if (fl_replay_sharded_count(l->replay) != opts->replay_shards) {
        s = fl_err_set(err, FL_INVALID_ARGUMENT,
                       "learner: replay %s lists %d shard address%s, but replay.shards = %lld (expected one address "
                       "per shard, shard 0 first)",
                       opts->replay_addr, fl_replay_sharded_count(l->replay),
                       fl_replay_sharded_count(l->replay) == 1 ? "" : "es", (long long)opts->replay_shards);
        goto fail;
    }
    fl_replay_sharded_set_timeout(l->replay, FL_LEARNER_RPC_TIMEOUT_MS);
    l->cur = &l->batch;
    if (opts->prefetch > 0 &&
        (s = fl_replay_prefetch_create(l->replay, opts->prefetch, (size_t)l->batch_size, l->obs_bytes, opts->beta,
                                       SAMPLE_TIMEOUT_MS, &l->prefetch, err)) != FL_OK) {
        fl_err_prefix(err, "learner: learner.prefetch");
        goto fail;
    }
    fl_param_client_opts_t po = {.quantize = l->gorila && opts->push_1bit, .learner = (uint32_t)l->index};
    if ((s = fl_param_client_create_opts(opts->paramserver_addr, &po, &l->params, err)) != FL_OK) {
        fl_err_prefix(err, "learner: parameter server %s", opts->paramserver_addr);
        goto fail;
    }
    if ((s = fl_reporter_create(opts->control_addr, "learner", (uint32_t)l->index, opts->progress_every, &l->rep,
                                err)) != FL_OK) {
        fl_err_prefix(err, "learner: control %s", opts->control_addr ? opts->control_addr : "");
        goto fail;
    }
    *out = l;
    return FL_OK;
fail:
    fl_learner_destroy(l);
    return s;
}

void fl_learner_destroy(fl_learner_t *l) {
    if (!l) return;
#ifdef FLEET_HAVE_CUDA
    for (int i = 0; i < l->n_pinned; i++) fl_cuda_host_unregister(l->pinned[i]); /* before the batches go */
#endif
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
#ifdef FLEET_HAVE_CUDA
    fl_cuda_dqn_destroy(l->gpu);
#endif
    fl_optim_destroy(l->opt);
    fl_qnet_destroy(l->online);
    fl_qnet_destroy(l->target);
    free(l);
}

const fl_learner_stats_t *fl_learner_stats(const fl_learner_t *l) { return &l->st; }

void fl_learner_counters(const fl_learner_t *l, uint64_t *steps, uint64_t *retries) {
    if (steps) *steps = atomic_load_explicit(&l->watch_steps, memory_order_relaxed);
    if (retries) *retries = atomic_load_explicit(&l->watch_retries, memory_order_relaxed);
}
fl_qnet_t *fl_learner_target(fl_learner_t *l) { return l->target; }
fl_qnet_t *fl_learner_online(fl_learner_t *l) { return l->online; }

/* ---- the services ------------------------------------------------------------------ */

/* Publishes the online parameters as the next version. retry: keep trying through an
 * outage until stopped (FL_CANCELLED then). A server that holds a newer version (this
 * learner was restarted) moves the version past it. */
static fl_status publish(fl_learner_t *l, int retry, fl_err_t *err) {
    uint64_t version = l->st.param_version + 1;
    for (;;) {
        fl_err_t e;
        fl_err_init(&e);
        fl_status s = fl_param_publish(l->params, version, fl_qnet_params(l->online), fl_qnet_num_params(l->online),
                                       FL_LEARNER_RPC_TIMEOUT_MS, &e);
        if (s == FL_OK) {
            outage_ok(&l->param_out);
            l->st.param_version = version;
            l->st.publishes++;
            l->steps_at_publish = l->st.steps;
            return FL_OK;
        }
        if (s == FL_FAILED_PRECONDITION) {
            fl_param_info_t info;
            fl_err_t ie;
            fl_err_init(&ie);
            fl_status si = fl_param_info(l->params, FL_LEARNER_RPC_TIMEOUT_MS, &info, &ie);
            if (si == FL_OK && info.version >= version) {
                FL_WARN("the parameter server already holds version %llu; publishing as %llu",
                        (unsigned long long)info.version, (unsigned long long)(info.version + 1));
                version = info.version + 1;
                continue;
            }
            if (si == FL_OK)
                return fl_err_set(err, s, "learner: publish version %llu: %s", (unsigned long long)version, e.msg);
            s = si, e = ie;
        }
        if (!fl_retry_transient(s) || !retry)
            return fl_err_set(err, s, "learner: publish version %llu: %s", (unsigned long long)version, e.msg);
        if (stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while publishing");
        outage_fail(l, &l->param_out, &e, s);
        if (stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while publishing");
    }
}

/* One Sample: synchronously into l->batch, or the next prefetched result (held in
 * l->taken until release_batch). */
static fl_status sample_once(fl_learner_t *l, fl_err_t *e) {
    if (!l->prefetch)
        return fl_replay_sharded_sample(l->replay, (size_t)l->batch_size, l->o.beta, SAMPLE_TIMEOUT_MS,
                                        &l->batch, e);
    fl_replay_prefetched_t *r = NULL;
    while (!fl_replay_prefetch_next(l->prefetch, 200, &r))
        if (stopping(l)) return fl_err_set(e, FL_CANCELLED, "learner: stopped while sampling");
    l->taken = r;
    l->cur = r->batch;
    if (r->status != FL_OK) *e = r->err;
    return r->status;
}

/* Gives a prefetched batch back to its sampler thread, with the new priorities of its
 * rows when the step produced them (they go out with that thread's next Sample). */
static void release_batch(fl_learner_t *l) {
    if (l->taken) fl_replay_prefetch_release_updating(l->prefetch, l->taken, l->prio_n, l->priorities);
    l->taken = NULL;
    l->prio_n = 0;
    l->cur = &l->batch;
}

/* Samples one batch into l->cur. FL_OK with a batch, FL_CANCELLED when stopped while
 * waiting for data or for the shard to come back, another status for a real error. */
static fl_status sample(fl_learner_t *l, fl_err_t *err) {
    double t0 = fl_clock_sec(), last_wait_log = -1e9;
    fl_status result;
    for (;;) {
        if (stopping(l)) {
            result = fl_err_set(err, FL_CANCELLED, "learner: stopped while sampling");
            break;
        }
        fl_err_t e;
        fl_err_init(&e);
        double tc = fl_clock_sec();
        fl_status s = sample_once(l, &e);
        if (s == FL_OK && l->cur->count > 0) {
            outage_ok(&l->replay_out);
            result = FL_OK;
            break;
        }
        release_batch(l); /* a failed call's buffer goes back at once */
        if (s == FL_CANCELLED && stopping(l)) { /* our own stop (a shard's CANCELLED is an outage) */
            result = s;
            *err = e;
            break;
        }
        if (s == FL_OK || s == FL_FAILED_PRECONDITION) {
            /* Not enough data yet (or an empty answer): the shard has waited for us. */
            outage_ok(&l->replay_out);
            double now = fl_clock_sec();
            if (now - last_wait_log >= FL_LEARNER_LOG_EVERY_S) {
                FL_INFO("waiting for replay: %s", s == FL_OK ? "empty sample" : e.msg);
                last_wait_log = now;
            }
            idle(l, now - tc < 0.1 ? 0.1 : 0.0);
            continue;
        }
        if (!fl_retry_transient(s)) {
            result = fl_err_set(err, s, "learner: sample: %s", e.msg[0] ? e.msg : fl_status_str(s));
            break;
        }
        outage_fail(l, &l->replay_out, &e, s);
    }
    double dt = fl_clock_sec() - t0;
    l->st.sample_s += dt;
    l->win_sample_s += dt;
    return result;
}

/* Sends the priorities of the batch just trained on; retries through an outage until
 * stopped (then the update is dropped: FL_OK). */
static fl_status send_priorities(fl_learner_t *l, size_t n, fl_err_t *err) {
    if (l->taken) { /* prefetching: they ride on the next Sample call */
        l->prio_n = n;
        l->st.priorities_sent += n;
        l->st.priorities_applied = fl_replay_prefetch_updates_applied(l->prefetch);
        return FL_OK;
    }
    for (;;) {
        fl_err_t e;
        fl_err_init(&e);
        uint64_t applied = 0;
        fl_status s = fl_replay_sharded_update_priorities(l->replay, n, l->cur->keys, l->priorities, &applied, &e);
        if (s == FL_OK) {
            outage_ok(&l->replay_out);
            l->st.priorities_sent += n;
            l->st.priorities_applied += applied;
            return FL_OK;
        }
        if (!fl_retry_transient(s))
            return fl_err_set(err, s, "learner: update priorities: %s", e.msg[0] ? e.msg : fl_status_str(s));
        if (stopping(l)) return FL_OK;
        outage_fail(l, &l->replay_out, &e, s);
        if (stopping(l)) return FL_OK;
    }
}

/* ---- the loop ---------------------------------------------------------------------- */

/* The sampled batch's observations are this learner's size. */
static fl_status check_obs_bytes(const fl_learner_t *l, fl_err_t *err) {
    if (l->cur->obs_bytes == l->obs_bytes) return FL_OK;
    return fl_err_set(err, FL_DATA_LOSS, "learner: sampled observations of %zu bytes (expected %zu)",
                      l->cur->obs_bytes, l->obs_bytes);
}

/* The batch being trained on as float columns. */
static fl_status batch_view(fl_learner_t *l, fl_dqn_batch_t *b, fl_err_t *err) {
    const fl_replay_batch_t *cb = l->cur;
    const size_t n = cb->count;
    FL_TRY(check_obs_bytes(l, err));
    fl_dtype_to_float(l->obs.dtype, cb->obs, n * l->obs_count, l->obs_f);
    fl_dtype_to_float(l->obs.dtype, cb->next_obs, n * l->obs_count, l->next_f);
    *b = (fl_dqn_batch_t){(int)n, l->obs_f, cb->actions, cb->rewards, cb->discounts, l->next_f, cb->weights};
    return FL_OK;
}

static void skipped(fl_learner_t *l, const char *why) {
    l->st.skipped_steps++;
    if ((l->st.skipped_steps & (l->st.skipped_steps - 1)) == 0)
        FL_WARN("skipped a batch (%llu so far): %s", (unsigned long long)l->st.skipped_steps, why);
}

/* After a step was taken: priorities, counters, target copy, checkpoint, publish. */
static fl_status after_step(fl_learner_t *l, size_t n, double loss, fl_err_t *err) {
    FL_TRY(send_priorities(l, n, err));
    l->st.steps++;
    atomic_store_explicit(&l->watch_steps, l->st.steps, memory_order_relaxed);
    l->st.samples += n;
    l->st.last_loss = loss;
    l->win_loss_sum += loss;
    l->win_steps++;
    if (l->st.steps % (uint64_t)l->o.target_update == 0) {
#ifdef FLEET_HAVE_CUDA
        if (l->gpu) FL_TRY(fl_cuda_dqn_sync_target(l->gpu, err));
#endif
        fl_qnet_copy_params(l->target, l->online);
        l->st.target_updates++;
    }
    if (l->index == 0 && l->o.checkpoint_every > 0 && l->st.steps % (uint64_t)l->o.checkpoint_every == 0)
        fl__learner_checkpoint(l);
#ifdef FLEET_HAVE_CUDA
    if (l->gpu && !l->gorila && l->index == 0) { /* publish from a snapshot copied while training goes on */
        if (l->snapshot_pending) {
            const float *host = NULL;
            int ready = 0;
            FL_TRY(fl_cuda_dqn_snapshot_poll(l->gpu, &host, &ready, err));
            if (ready) {
                l->snapshot_pending = 0;
                memcpy(fl_qnet_params(l->online), host, fl_qnet_num_params(l->online) * sizeof(float));
                fl_status s = publish(l, 1, err);
                if (s == FL_CANCELLED) return FL_OK;
                if (s != FL_OK) return s;
            }
        }
        if (l->st.steps % (uint64_t)l->o.publish_every == 0 && !l->snapshot_pending) {
            FL_TRY(fl_cuda_dqn_snapshot_begin(l->gpu, err));
            l->snapshot_pending = 1;
        }
        return FL_OK;
    }
    if (l->gpu) return FL_OK; /* learners that do not publish */
#endif
    if (!l->gorila && l->index == 0 && l->st.steps % (uint64_t)l->o.publish_every == 0) {
        fl_status s = publish(l, 1, err);
        if (s == FL_CANCELLED) return FL_OK;
        if (s != FL_OK) return s;
    }
    return FL_OK;
}

#ifdef FLEET_HAVE_CUDA
/* The batch being trained on as the GPU will read it: straight from the replay batch
 * (decoded there by the prefetch thread) once that batch is page-locked, which happens
 * the first time each of the prefetcher's batches comes by; otherwise (registration
 * refused) copied into the next pinned input slot. */
static fl_status gpu_batch(fl_learner_t *l, fl_cuda_dqn_slot_t *out, fl_err_t *err) {
    const fl_replay_batch_t *cb = l->cur;
    const size_t n = cb->count;
    FL_TRY(check_obs_bytes(l, err));
    int pinned = 0;
    for (int i = 0; i < l->n_pinned && !pinned; i++) pinned = l->pinned[i] == cb->block;
    if (!pinned && !l->pin_failed && l->n_pinned < FL_LEARNER_MAX_PINNED) {
        fl_err_t e;
        fl_err_init(&e);
        if (fl_cuda_host_register(cb->block, cb->block_bytes, &e) == FL_OK) {
            l->pinned[l->n_pinned++] = cb->block;
            pinned = 1;
        } else {
            FL_WARN("learner: cannot page-lock replay batches (%s): copying them into pinned buffers", e.msg);
            l->pin_failed = 1;
        }
    }
    if (pinned) {
        *out = (fl_cuda_dqn_slot_t){cb->obs, cb->next_obs, cb->actions, cb->rewards, cb->discounts, cb->weights};
        return FL_OK;
    }
    fl_cuda_dqn_slot_t slot;
    FL_TRY(fl_cuda_dqn_slot(l->gpu, l->gpu_slot, &slot, err));
    memcpy(slot.obs, cb->obs, n * l->obs_bytes);
    memcpy(slot.next_obs, cb->next_obs, n * l->obs_bytes);
    memcpy(slot.actions, cb->actions, n * sizeof(int32_t));
    memcpy(slot.rewards, cb->rewards, n * sizeof(float));
    memcpy(slot.discounts, cb->discounts, n * sizeof(float));
    if (cb->weights)
        memcpy(slot.weights, cb->weights, n * sizeof(float));
    else
        for (size_t i = 0; i < n; i++) slot.weights[i] = 1.0f;
    l->gpu_slot = (l->gpu_slot + 1) % fl_cuda_dqn_num_slots(l->gpu);
    *out = slot;
    return FL_OK;
}

/* One learner on the GPU: the batch into a pinned slot, one update. */
static fl_status gpu_train_step(fl_learner_t *l, fl_err_t *err) {
    const size_t n = l->cur->count;
    fl_cuda_dqn_slot_t batch;
    FL_TRY(gpu_batch(l, &batch, err));
    fl_cuda_dqn_stats_t ds;
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = fl_cuda_dqn_step_from(l->gpu, &batch, (int)n, l->priorities, &ds, &e);
    if (s == FL_OUT_OF_RANGE) {
        skipped(l, e.msg);
        return FL_OK;
    }
    if (s != FL_OK) return fl_err_set(err, s, "learner: GPU update: %s", e.msg);
    return after_step(l, n, ds.loss, err);
}

/* Waits for the launched GPU update of l->cur's batch; then its bookkeeping. */
static fl_status gpu_finish(fl_learner_t *l, fl_err_t *err) {
    fl_cuda_dqn_stats_t ds;
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = fl_cuda_dqn_finish(l->gpu, l->priorities, &ds, &e);
    if (s == FL_OUT_OF_RANGE) {
        skipped(l, e.msg);
        return FL_OK;
    }
    if (s != FL_OK) return fl_err_set(err, s, "learner: GPU update: %s", e.msg);
    return after_step(l, l->cur->count, ds.loss, err);
}

/* One GPU learner with prefetching: batch k+1 is sampled and its copy to the GPU runs
 * while update k computes; then update k is finished (its priorities go back with its
 * batch) and k+1 launched. Two prefetched batches are held at a time. */
static fl_status gpu_pipeline(fl_learner_t *l, fl_err_t *err) {
    fl_status s = FL_OK;
    fl_replay_prefetched_t *inflight = NULL; /* the launched update's batch */
    fl_replay_batch_t *inflight_batch = NULL;
    int trained = 0;
    while (s == FL_OK && !stopping(l)) {
        s = sample(l, err); /* into l->taken / l->cur */
        if (s != FL_OK) break;
        if (!trained) {
            FL_INFO("replay ready (%llu transitions); training on the GPU", (unsigned long long)l->cur->table_size);
            trained = 1;
        }
        fl_cuda_dqn_slot_t view;
        int stage = -1;
        s = gpu_batch(l, &view, err);
        if (s == FL_OK) {
            fl_err_t e;
            fl_err_init(&e);
            s = fl_cuda_dqn_upload(l->gpu, &view, (int)l->cur->count, &stage, &e);
            if (s != FL_OK) fl_err_set(err, s, "learner: GPU upload: %s", e.msg);
        }
        fl_replay_prefetched_t *next = l->taken;
        fl_replay_batch_t *next_batch = l->cur;
        if (inflight) { /* update k: finished while k+1's copy runs */
            l->taken = inflight;
            l->cur = inflight_batch;
            fl_err_t fe;
            fl_err_init(&fe);
            fl_status fs = gpu_finish(l, &fe);
            release_batch(l);
            inflight = NULL;
            if (s == FL_OK && fs != FL_OK) {
                s = fs;
                *err = fe;
            }
        }
        l->taken = next;
        l->cur = next_batch;
        if (s == FL_OK) {
            fl_err_t e;
            fl_err_init(&e);
            s = fl_cuda_dqn_launch(l->gpu, stage, &e);
            if (s != FL_OK) fl_err_set(err, s, "learner: GPU launch: %s", e.msg);
        }
        if (s != FL_OK) {
            release_batch(l);
            break;
        }
        inflight = l->taken;
        inflight_batch = l->cur;
        l->taken = NULL;
        l->cur = &l->batch;
        report(l, 0);
    }
    if (inflight) {
        l->taken = inflight;
        l->cur = inflight_batch;
        fl_err_t fe;
        fl_err_init(&fe);
        fl_status fs = gpu_finish(l, &fe);
        release_batch(l);
        if (s == FL_OK || s == FL_CANCELLED) {
            if (fs != FL_OK) {
                s = fs;
                *err = fe;
            }
        }
    }
    return s;
}
#endif

/* One learner (apex): sample, fl_dqn_step, bookkeeping. */
static fl_status train_step(fl_learner_t *l, fl_err_t *err) {
#ifdef FLEET_HAVE_CUDA
    if (l->gpu) return gpu_train_step(l, err);
#endif
    fl_dqn_batch_t b;
    FL_TRY(batch_view(l, &b, err));
    fl_dqn_stats_t ds;
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = fl_dqn_step(l->dqn, l->online, l->target, l->opt, &b, l->priorities, &ds, &e);
    if (s == FL_OUT_OF_RANGE) {
        skipped(l, e.msg);
        return FL_OK;
    }
    if (s != FL_OK) return fl_err_set(err, s, "learner: update: %s", e.msg);
    return after_step(l, (size_t)b.size, ds.loss, err);
}

/* Several learners (apex): one collective step. Every learner calls this the same number
 * of times: it samples and computes its gradient (unless it wants to stop), then all
 * reduce [gradient, wants-to-stop, loss]. If any learner wants to stop, nobody steps and
 * *stop is set on every learner; otherwise each applies the mean gradient. A local
 * failure is returned after the reduce that tells the others. */
#ifdef FLEET_HAVE_CUDA
/* group_step on the GPU: the gradient comes back to the host, is averaged over the
 * learners by the ring all-reduce (fl_dqn_group_mean), and the GPU clips and steps. */
static fl_status gpu_group_step(fl_learner_t *l, int *stop, fl_err_t *err) {
    const size_t n = fl_qnet_num_params(l->online);
    fl_status result = FL_OK;
    int want_stop = stopping(l), have = 0;
    fl_cuda_dqn_stats_t ds = {0};
    if (!want_stop) {
        result = sample(l, err);
        fl_cuda_dqn_slot_t batch;
        if (result == FL_OK) result = gpu_batch(l, &batch, err);
        if (result == FL_OK) {
            fl_err_t e;
            fl_err_init(&e);
            fl_status s = fl_cuda_dqn_compute_from(l->gpu, &batch, (int)l->cur->count, l->rbuf, l->priorities, &ds, &e);
            if (s == FL_OUT_OF_RANGE) l->rbuf[0] = NAN; /* every learner skips this step */
            else if (s != FL_OK) result = fl_err_set(err, s, "learner: GPU update: %s", e.msg);
        }
        have = result == FL_OK;
    }
    float loss = 0;
    fl_err_t re;
    fl_err_init(&re);
    double t0 = fl_clock_sec();
    fl_status rs = fl_dqn_group_mean(l->reduce, l->rbuf, n, have, !have, ds.loss, stop, &loss, &re);
    l->st.reduce_s += fl_clock_sec() - t0;
    if (result != FL_OK) {
        *stop = 1;
        return result == FL_CANCELLED ? FL_OK : result;
    }
    if (rs != FL_OK) return fl_err_set(err, rs, "learner: %s", re.msg);
    if (*stop) return FL_OK;
    fl_err_t e;
    fl_err_init(&e);
    fl_status s = fl_cuda_dqn_apply(l->gpu, l->rbuf, NULL, &e);
    if (s == FL_OUT_OF_RANGE) {
        skipped(l, "non-finite mean gradient over the learners");
        return FL_OK;
    }
    if (s != FL_OK) return fl_err_set(err, s, "learner: GPU update: %s", e.msg);
    return after_step(l, l->cur->count, loss, err);
}
#endif

static fl_status group_step(fl_learner_t *l, int *stop, fl_err_t *err) {
#ifdef FLEET_HAVE_CUDA
    if (l->gpu) return gpu_group_step(l, stop, err);
#endif
    fl_status result = FL_OK;
    int want_stop = stopping(l), have = 0;
    fl_dqn_batch_t b;
    if (!want_stop) {
        result = sample(l, err); /* FL_CANCELLED: stopped while waiting; else a real error */
        if (result == FL_OK) result = batch_view(l, &b, err);
        have = result == FL_OK;
    }
    fl_dqn_stats_t ds = {0};
    fl_err_t e;
    fl_err_init(&e);
    double t0 = fl_clock_sec();
    fl_status s = fl_dqn_step_group(l->dqn, l->online, l->target, l->opt, l->reduce, l->rbuf, have ? &b : NULL,
                                    !have, l->priorities, &ds, stop, &e);
    l->st.reduce_s += fl_clock_sec() - t0;
    if (result != FL_OK) { /* the others were told by the stop flag */
        *stop = 1;
        return result == FL_CANCELLED ? FL_OK : result;
    }
    if (s == FL_OUT_OF_RANGE) {
        skipped(l, e.msg);
        return FL_OK;
    }
    if (s != FL_OK) return fl_err_set(err, s, "learner: update: %s", e.msg);
    if (*stop) return FL_OK;
    return after_step(l, (size_t)b.size, ds.loss, err);
}

/* Gorila: fetches the newest parameters into the online network (retrying through an
 * outage; FL_CANCELLED when stopped). wait_first: until some version exists. */
static fl_status fetch_params(fl_learner_t *l, int wait_first, fl_err_t *err) {
    for (;;) {
        fl_err_t e;
        fl_err_init(&e);
        int updated = 0;
        uint64_t v = l->fetched_version;
        fl_status s = fl_param_fetch(l->params, &v, fl_qnet_params(l->online), fl_qnet_num_params(l->online),
                                     &updated, FL_LEARNER_RPC_TIMEOUT_MS, &e);
        if (s == FL_OK) {
            outage_ok(&l->param_out);
            if (updated) l->fetched_version = v;
            if (!wait_first || l->fetched_version > 0) return FL_OK;
            idle(l, 0.05);
            if (stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while waiting for parameters");
            continue;
        }
        if (!fl_retry_transient(s)) return fl_err_set(err, s, "learner: fetch parameters: %s", e.msg);
        if (stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while fetching");
        outage_fail(l, &l->param_out, &e, s);
        if (stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while fetching");
    }
}

/* Gorila: pushes the online network's gradient; retries through an outage. */
static fl_status push_grads(fl_learner_t *l, fl_err_t *err) {
    for (;;) {
        fl_err_t e;
        fl_err_init(&e);
        fl_param_push_result_t res;
        memset(&res, 0, sizeof res);
        fl_status s = fl_param_push(l->params, fl_qnet_grads(l->online), fl_qnet_num_params(l->online), &res,
                                    FL_LEARNER_RPC_TIMEOUT_MS + (int64_t)(l->o.paramserver_wait_timeout_s * 1000),
                                    &e);
        if (s == FL_OK) {
            outage_ok(&l->param_out);
            l->st.pushes++;
            l->st.pushes_applied += (uint64_t)res.applied;
            l->st.pushes_dropped += (uint64_t)res.dropped;
            if (res.max_staleness > l->st.max_staleness) l->st.max_staleness = res.max_staleness;
            return FL_OK;
        }
        if (!fl_retry_transient(s)) return fl_err_set(err, s, "learner: push gradients: %s", e.msg);
        if (stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while pushing");
        outage_fail(l, &l->param_out, &e, s);
        if (stopping(l)) return fl_err_set(err, FL_CANCELLED, "learner: stopped while pushing");
    }
}

/* Gorila: fetch (every learner.fetch_every steps), gradient, clip, push, bookkeeping. On
 * a GPU, fetched parameters go to the device and the gradient comes back to the host. */
static fl_status gorila_step(fl_learner_t *l, fl_err_t *err) {
    if (l->st.steps % (uint64_t)l->o.fetch_every == 0) {
        uint64_t before = l->fetched_version;
        FL_TRY(fetch_params(l, 0, err));
#ifdef FLEET_HAVE_CUDA
        if (l->gpu && l->fetched_version != before)
            FL_TRY(fl_cuda_dqn_set_params(l->gpu, fl_qnet_params(l->online), fl_qnet_params(l->target),
                                          fl_qnet_num_params(l->online), err));
#else
        (void)before;
#endif
    }
    fl_dqn_batch_t b = {(int)l->cur->count, NULL, NULL, NULL, NULL, NULL, NULL};
    fl_dqn_stats_t ds = {0};
    fl_err_t e;
    fl_err_init(&e);
    fl_status s;
#ifdef FLEET_HAVE_CUDA
    if (l->gpu) {
        fl_cuda_dqn_slot_t batch;
        FL_TRY(gpu_batch(l, &batch, err));
        fl_cuda_dqn_stats_t gs = {0};
        s = fl_cuda_dqn_compute_from(l->gpu, &batch, b.size, fl_qnet_grads(l->online), l->priorities, &gs, &e);
        ds.loss = gs.loss;
    } else
#endif
    {
        FL_TRY(batch_view(l, &b, err));
        s = fl_dqn_compute(l->dqn, l->online, l->target, &b, l->priorities, &ds, &e);
    }
    if (s == FL_OUT_OF_RANGE) {
        skipped(l, e.msg);
        return FL_OK;
    }
    if (s != FL_OK) return fl_err_set(err, s, "learner: update: %s", e.msg);
    fl_clip_grad_norm(fl_qnet_grads(l->online), fl_qnet_num_params(l->online), (float)l->o.grad_clip);
    if (l->o.slow_push_ms > 0 && l->index == l->o.count - 1) idle(l, (double)l->o.slow_push_ms / 1000.0);
    FL_TRY(push_grads(l, err));
    return after_step(l, (size_t)b.size, ds.loss, err);
}

/* Apex with several learners: everyone takes learner 0's networks, optimizer state and
 * counters. */
static fl_status group_start(fl_learner_t *l, fl_err_t *err) {
    const size_t np = fl_qnet_num_params(l->online);
    uint64_t counters[5] = {l->st.steps, l->st.samples, l->st.param_version, l->st.target_updates,
                            (uint64_t)fl_optim_steps(l->opt)};
    FL_TRY(fl_reduce_broadcast(l->reduce, fl_qnet_params(l->online), np * sizeof(float), 0, err));
    FL_TRY(fl_reduce_broadcast(l->reduce, fl_qnet_params(l->target), np * sizeof(float), 0, err));
    FL_TRY(fl_reduce_broadcast(l->reduce, fl_optim_state(l->opt), fl_optim_state_size(l->opt) * sizeof(float), 0,
                               err));
    FL_TRY(fl_reduce_broadcast(l->reduce, counters, sizeof counters, 0, err));
    l->st.steps = counters[0];
    l->st.samples = counters[1];
    l->st.param_version = counters[2];
    l->st.target_updates = counters[3];
    fl_optim_set_steps(l->opt, (int64_t)counters[4]);
    atomic_store(&l->watch_steps, l->st.steps);
    l->steps_at_publish = l->st.steps;
#ifdef FLEET_HAVE_CUDA
    if (l->gpu) { /* the GPU took this learner's own state at create */
        FL_TRY(fl_cuda_dqn_set_params(l->gpu, fl_qnet_params(l->online), fl_qnet_params(l->target), np, err));
        FL_TRY(fl_cuda_dqn_set_optim_state(l->gpu, fl_optim_state(l->opt), fl_optim_state_size(l->opt),
                                           fl_optim_steps(l->opt), err));
    }
#endif
    return FL_OK;
}

/* Gorila: learner 0 adopts the parameters a shard already holds (a restarted learner),
 * or publishes its own as version 1; the others wait for a version. */
static fl_status gorila_start(fl_learner_t *l, fl_err_t *err) {
    if (l->index != 0) return fetch_params(l, 1, err);
    FL_TRY(fetch_params(l, 0, err));
    if (l->fetched_version == 0) {
        FL_TRY(publish(l, 1, err));
        l->fetched_version = l->st.param_version;
    } else {
        FL_INFO("the parameter servers already hold version %llu: training from it",
                (unsigned long long)l->fetched_version);
    }
    fl_qnet_copy_params(l->target, l->online);
    return FL_OK;
}

fl_status fl_learner_run(fl_learner_t *l, fl_err_t *err) {
    if (!l) return fl_err_set(err, FL_INVALID_ARGUMENT, "learner: NULL learner");
    fl_status s = FL_OK;
    l->t_start = l->win_start = fl_clock_sec();
    FL_INFO("learner: %zu parameters (%s), batch %d, %s lr %g, replay %s, parameter server %s",
            fl_qnet_num_params(l->online), l->o.model_spec, l->batch_size, fl_optim_kind_name(l->o.optim.kind),
            l->o.optim.lr, l->replay_addr, l->param_addr);

    if (l->reduce) s = group_start(l, err);
    if (s == FL_OK && l->gorila) s = gorila_start(l, err);
    if (s == FL_OK && !l->gorila && l->index == 0) {
        s = publish(l, 1, err);
        if (s == FL_OK)
            FL_INFO("published the initial parameters as version %llu", (unsigned long long)l->st.param_version);
    }
    int trained = 0;
#ifdef FLEET_HAVE_CUDA
    if (s == FL_OK && l->gpu && !l->reduce && l->prefetch) s = gpu_pipeline(l, err);
    else
#endif
    while (s == FL_OK && (l->reduce || !stopping(l))) {
        if (l->reduce) {
            int stop = 0;
            s = group_step(l, &stop, err);
            if (s == FL_OK && !stop && !trained) {
                FL_INFO("replay ready; training with %d learners", fl_reduce_size(l->reduce));
                trained = 1;
            }
            release_batch(l);
            report(l, 0);
            if (stop) break;
            continue;
        }
        s = sample(l, err);
        if (s != FL_OK) break;
        if (!trained) {
            FL_INFO("replay ready (%llu transitions); training", (unsigned long long)l->cur->table_size);
            trained = 1;
        }
        s = l->gorila ? gorila_step(l, err) : train_step(l, err);
        release_batch(l);
        report(l, 0);
    }
    if (s == FL_CANCELLED) s = FL_OK; /* stopped while waiting: a clean stop */
    release_batch(l);
    if (l->prefetch) { /* no more samples; the last priorities still go out */
        fl_err_t e;
        fl_err_init(&e);
        if (fl_replay_prefetch_stop(l->prefetch, &e) != FL_OK) FL_WARN("last priority updates not sent: %s", e.msg);
        l->st.priorities_applied = fl_replay_prefetch_updates_applied(l->prefetch);
    }

    if (s == FL_OK && !l->gorila && l->index == 0 && (l->st.steps > l->steps_at_publish || l->st.publishes == 0)) {
        fl_err_t e;
        fl_err_init(&e);
#ifdef FLEET_HAVE_CUDA
        if (gpu_pull(l, &e) != FL_OK)
            FL_WARN("final publish failed: %s", e.msg);
        else
#endif
        if (publish(l, 0, &e) != FL_OK)
            FL_WARN("final publish failed: %s", e.msg);
        else
            FL_INFO("published the final parameters as version %llu", (unsigned long long)l->st.param_version);
    }
    if (s == FL_OK && l->index == 0) fl__learner_checkpoint(l); /* the final state, when learner.checkpoint_dir is set */
    l->st.total_s = fl_clock_sec() - l->t_start;
    report(l, 1);
    if (s == FL_OK)
        FL_INFO("learner stopped after %llu steps (%llu samples, %llu skipped), version %llu, "
                "%.0f%% of %.3g s in Sample",
                (unsigned long long)l->st.steps, (unsigned long long)l->st.samples,
                (unsigned long long)l->st.skipped_steps, (unsigned long long)l->st.param_version,
                l->st.total_s > 0 ? 100.0 * l->st.sample_s / l->st.total_s : 0.0, l->st.total_s);
    return s;
}
