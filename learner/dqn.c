/* dqn: the double-DQN n-step update (see dqn.h). */
#include "learner/dqn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/loss.h"

struct fl_dqn {
    fl_dqn_config_t cfg;
    float *q_next_online; /* (max_batch, A) */
    float *q_next_target; /* (max_batch, A) */
    float *q_obs;         /* (max_batch, A) */
    float *dq;            /* (max_batch, A) */
    float *q_taken;       /* (max_batch) */
    float *y;             /* (max_batch) */
    float *dpred;         /* (max_batch) */
};

fl_status fl_dqn_create(const fl_dqn_config_t *cfg, fl_dqn_t **out, fl_err_t *err) {
    if (!cfg || !out) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: NULL config or output");
    *out = NULL;
    if (cfg->max_batch < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: max_batch = %d (expected >= 1)", cfg->max_batch);
    if (cfg->num_actions < 1)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: num_actions = %d (expected >= 1)", cfg->num_actions);
    if (!(cfg->huber_delta > 0) || !isfinite(cfg->huber_delta))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: huber_delta = %g (expected a finite value > 0)",
                          (double)cfg->huber_delta);
    if (!(cfg->grad_clip >= 0) || !isfinite(cfg->grad_clip))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: grad_clip = %g (expected a finite value >= 0)",
                          (double)cfg->grad_clip);
    fl_dqn_t *d = calloc(1, sizeof *d);
    if (!d) goto oom;
    d->cfg = *cfg;
    size_t ba = (size_t)cfg->max_batch * (size_t)cfg->num_actions, b = (size_t)cfg->max_batch;
    d->q_next_online = malloc(ba * sizeof(float));
    d->q_next_target = malloc(ba * sizeof(float));
    d->q_obs = malloc(ba * sizeof(float));
    d->dq = malloc(ba * sizeof(float));
    d->q_taken = calloc(b, sizeof(float));
    d->y = calloc(b, sizeof(float));
    d->dpred = malloc(b * sizeof(float));
    if (!d->q_next_online || !d->q_next_target || !d->q_obs || !d->dq || !d->q_taken || !d->y || !d->dpred) goto oom;
    *out = d;
    return FL_OK;
oom:
    fl_dqn_destroy(d);
    return fl_err_set(err, FL_NO_MEMORY, "dqn: out of memory for a batch of %d", cfg->max_batch);
}

void fl_dqn_destroy(fl_dqn_t *d) {
    if (!d) return;
    free(d->q_next_online);
    free(d->q_next_target);
    free(d->q_obs);
    free(d->dq);
    free(d->q_taken);
    free(d->y);
    free(d->dpred);
    free(d);
}

const fl_dqn_config_t *fl_dqn_config(const fl_dqn_t *d) {
    return &d->cfg;
}
const float *fl_dqn_targets(const fl_dqn_t *d) {
    return d->y;
}
const float *fl_dqn_q_taken(const fl_dqn_t *d) {
    return d->q_taken;
}

static fl_status check_inputs(const fl_dqn_t *d, const fl_qnet_t *online, const fl_qnet_t *target,
                              const fl_dqn_batch_t *b, fl_err_t *err) {
    if (!online || !target || !b) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: NULL network or batch");
    const int B = b->size, A = d->cfg.num_actions;
    if (B < 1 || B > d->cfg.max_batch)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: batch size %d (expected 1..%d)", B, d->cfg.max_batch);
    if ((b->obs_raw ? !b->next_raw : !b->obs || !b->next_obs) || !b->actions || !b->rewards || !b->discounts)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: batch has a NULL column");
    if (fl_qnet_num_actions(online) != A || fl_qnet_num_actions(target) != A)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: networks have %d and %d actions (expected %d)",
                          fl_qnet_num_actions(online), fl_qnet_num_actions(target), A);
    if (fl_qnet_obs_dim(online) != fl_qnet_obs_dim(target) || fl_qnet_num_params(online) != fl_qnet_num_params(target))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: online and target networks differ in shape");
    if (fl_qnet_max_batch(online) < B || fl_qnet_max_batch(target) < B)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: batch size %d exceeds a network's max_batch (%d, %d)", B,
                          fl_qnet_max_batch(online), fl_qnet_max_batch(target));
    for (int i = 0; i < B; i++)
        if (b->actions[i] < 0 || b->actions[i] >= A)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: actions[%d] = %d (expected 0..%d)", i, (int)b->actions[i],
                              A - 1);
    return FL_OK;
}

/* The forward of b's observations (next: next_obs), raw or float. */
static fl_status forward_batch(fl_qnet_t *n, const fl_dqn_batch_t *b, int next, float *q) {
    if (b->obs_raw) return fl_qnet_forward_obs(n, b->raw_dtype, next ? b->next_raw : b->obs_raw, b->size, q);
    return fl_qnet_forward(n, next ? b->next_obs : b->obs, b->size, q);
}

fl_status fl_dqn_compute(fl_dqn_t *d, fl_qnet_t *online, fl_qnet_t *target, const fl_dqn_batch_t *b, float *priorities,
                         fl_dqn_stats_t *stats, fl_err_t *err) {
    if (!d) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: NULL updater");
    FL_TRY(check_inputs(d, online, target, b, err));
    const int B = b->size, A = d->cfg.num_actions;
    fl_status s;

    /* Bootstrap targets first; the last forward (online on obs) keeps the activations. */
    if ((s = forward_batch(online, b, 1, d->q_next_online)) != FL_OK ||
        (s = forward_batch(target, b, 1, d->q_next_target)) != FL_OK ||
        (s = forward_batch(online, b, 0, d->q_obs)) != FL_OK)
        return fl_err_set(err, s, "dqn: forward failed (%s)", fl_status_str(s));

    double qsum = 0;
    for (int i = 0; i < B; i++) {
        float y = b->rewards[i];
        if (b->discounts[i] != 0.0f) {
            const float *qo = d->q_next_online + (size_t)i * A;
            int best = 0;
            for (int a = 1; a < A; a++)
                if (qo[a] > qo[best]) best = a;
            y += b->discounts[i] * d->q_next_target[(size_t)i * A + best];
        }
        d->y[i] = y;
        d->q_taken[i] = d->q_obs[(size_t)i * A + b->actions[i]];
        qsum += d->q_taken[i];
        if (priorities) priorities[i] = fabsf(y - d->q_taken[i]);
    }

    float loss = fl_loss_huber(d->q_taken, d->y, b->weights, B, d->cfg.huber_delta, d->dpred);
    memset(d->dq, 0, (size_t)B * A * sizeof(float));
    for (int i = 0; i < B; i++) d->dq[(size_t)i * A + b->actions[i]] = d->dpred[i];
    if ((s = fl_qnet_backward(online, d->dq, B)) != FL_OK)
        return fl_err_set(err, s, "dqn: backward failed (%s)", fl_status_str(s));

    /* Norm without clipping (max_norm 0 leaves the gradient alone). */
    float norm = fl_clip_grad_norm(fl_qnet_grads(online), fl_qnet_num_params(online), 0.0f);
    if (stats) {
        stats->loss = loss;
        stats->grad_norm = norm;
        stats->mean_q = (float)(qsum / B);
    }
    if (!isfinite(loss) || !isfinite(norm))
        return fl_err_set(err, FL_OUT_OF_RANGE, "dqn: non-finite loss %g or gradient norm %g", (double)loss,
                          (double)norm);
    return FL_OK;
}

fl_status fl_dqn_step(fl_dqn_t *d, fl_qnet_t *online, fl_qnet_t *target, fl_optim_t *opt, const fl_dqn_batch_t *b,
                      float *priorities, fl_dqn_stats_t *stats, fl_err_t *err) {
    if (!opt) return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: NULL optimizer");
    if (online && fl_optim_size(opt) != fl_qnet_num_params(online))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: optimizer holds %zu parameters, network %zu",
                          fl_optim_size(opt), fl_qnet_num_params(online));
    FL_TRY(fl_dqn_compute(d, online, target, b, priorities, stats, err));
    float *g = fl_qnet_grads(online);
    size_t n = fl_qnet_num_params(online);
    if (d->cfg.grad_clip > 0) fl_clip_grad_norm(g, n, d->cfg.grad_clip);
    fl_optim_step(opt, fl_qnet_params(online), g);
    return FL_OK;
}

fl_status fl_dqn_group_mean(fl_reduce_t *reduce, float *rbuf, size_t n, int have, int want_stop, float loss,
                            int *stopped, float *mean_loss, fl_err_t *err) {
    *stopped = 0;
    if (!have) memset(rbuf, 0, n * sizeof(float));
    rbuf[n] = want_stop ? 1.0f : 0.0f;
    rbuf[n + 1] = have ? loss : 0.0f;
    fl_err_t re;
    fl_err_init(&re);
    fl_status rs = fl_reduce_sum(reduce, rbuf, n + 2, &re);
    if (rs != FL_OK) {
        *stopped = 1;
        return fl_err_set(err, rs, "dqn: %s", re.msg);
    }
    if (rbuf[n] > 0.0f) {
        *stopped = 1;
        return FL_OK;
    }
    const float inv = 1.0f / (float)fl_reduce_size(reduce);
    for (size_t i = 0; i < n; i++) rbuf[i] *= inv;
    if (mean_loss) *mean_loss = rbuf[n + 1] * inv;
    return FL_OK;
}

fl_status fl_dqn_step_group(fl_dqn_t *d, fl_qnet_t *online, fl_qnet_t *target, fl_optim_t *opt, fl_reduce_t *reduce,
                            float *rbuf, const fl_dqn_batch_t *b, int want_stop, float *priorities,
                            fl_dqn_stats_t *stats, int *stopped, fl_err_t *err) {
    *stopped = 0;
    if (!reduce || !rbuf || !opt || !online)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: NULL group, buffer, optimizer or network");
    const size_t n = fl_qnet_num_params(online);
    if (fl_optim_size(opt) != n)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "dqn: optimizer holds %zu parameters, network %zu",
                          fl_optim_size(opt), n);
    fl_status local = FL_OK;
    fl_dqn_stats_t ds = {0};
    int have = b != NULL && !want_stop;
    if (have) {
        local = fl_dqn_compute(d, online, target, b, priorities, &ds, err);
        if (local == FL_OK || local == FL_OUT_OF_RANGE) {
            memcpy(rbuf, fl_qnet_grads(online), n * sizeof(float));
            if (local == FL_OUT_OF_RANGE) rbuf[0] = NAN; /* every member skips this step */
            local = FL_OK;
        } else {
            have = 0;
            want_stop = 1;
        }
    }
    float mean_loss = 0;
    fl_err_t re;
    fl_err_init(&re);
    fl_status rs = fl_dqn_group_mean(reduce, rbuf, n, have, want_stop, ds.loss, stopped, &mean_loss, &re);
    if (local != FL_OK) { /* the others know (our stop flag); now the caller does */
        *stopped = 1;
        return local;
    }
    if (rs != FL_OK) {
        *err = re;
        return rs;
    }
    if (*stopped) return FL_OK;
    float *g = fl_qnet_grads(online);
    memcpy(g, rbuf, n * sizeof(float));
    float norm = fl_clip_grad_norm(g, n, d->cfg.grad_clip);
    if (stats) {
        stats->loss = mean_loss;
        stats->grad_norm = norm;
        stats->mean_q = ds.mean_q;
    }
    if (!isfinite(norm))
        return fl_err_set(err, FL_OUT_OF_RANGE, "dqn: non-finite mean gradient over %d learners (norm %g)",
                          fl_reduce_size(reduce), (double)norm);
    fl_optim_step(opt, fl_qnet_params(online), g);
    return FL_OK;
}
