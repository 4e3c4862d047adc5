/* fleet_state: the launcher's record of the roles' reports (see fleet_state.h). */
#include "launcher/fleet_state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/control.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/statefile.h"
#include "fleet.pb-c.h"

int fl_fleet_state_init(fl_fleet_state_t *fs, int n_actors, int max_joined, int n_learners, int n_evaluators,
                        int gorila, double t_start) {
    memset(fs, 0, sizeof *fs);
    pthread_mutex_init(&fs->mu, NULL);
    fs->t_start = t_start;
    fs->gorila = gorila;
    fs->n_actors = n_actors;
    fs->n_started = n_actors;
    fs->max_actors = n_actors + (max_joined > 0 ? max_joined : 0);
    fs->n_learners = n_learners;
    fs->n_evaluators = n_evaluators;
    fs->actors = calloc((size_t)fs->max_actors + 1, sizeof *fs->actors);
    fs->learners = calloc((size_t)n_learners + 1, sizeof *fs->learners);
    fs->evaluators = calloc((size_t)n_evaluators + 1, sizeof *fs->evaluators);
    fs->eval_round = calloc((size_t)n_evaluators + 1, sizeof *fs->eval_round);
    fs->actor_round = calloc((size_t)fs->max_actors + 1, sizeof *fs->actor_round);
    fs->max_abs_reward = 1e6;
    if (fl_cred_random(fs->secret) != 0) return -1;
    return fs->actors && fs->learners && fs->evaluators && fs->eval_round && fs->actor_round ? 0 : -1;
}

void fl_fleet_state_destroy(fl_fleet_state_t *fs) {
    free(fs->actors);
    free(fs->learners);
    free(fs->evaluators);
    free(fs->eval_round);
    free(fs->actor_round);
    free(fs->join_replay);
    free(fs->join_params);
    free(fs->join_config);
    free(fs->join_run);
    pthread_mutex_destroy(&fs->mu);
    memset(fs, 0, sizeof *fs);
}

double fl_fleet_state_mean_return(const fl_fleet_state_t *fs, uint64_t *count) {
    uint64_t n = fs->n_returns < FL_FLEET_RETURN_WINDOW ? fs->n_returns : FL_FLEET_RETURN_WINDOW;
    *count = n;
    if (!n) return 0;
    double s = 0;
    for (uint64_t i = 0; i < n; i++) s += fs->returns[i];
    return s / (double)n;
}

double fl_fleet_state_actor_return(const fl_fleet_state_t *fs, int a, uint64_t *count) {
    const fl_role_state_t *A = &fs->actors[a];
    uint64_t n = A->n_recent < FL_FLEET_ACTOR_WINDOW ? A->n_recent : FL_FLEET_ACTOR_WINDOW;
    *count = n;
    if (!n) return 0;
    double s = 0;
    for (uint64_t i = 0; i < n; i++) s += A->recent[i];
    return s / (double)n;
}

uint64_t fl_fleet_state_learner_steps(const fl_fleet_state_t *fs) {
    uint64_t steps = 0;
    for (int i = 0; i < fs->n_learners; i++)
        steps = fs->gorila ? steps + fs->learners[i].learner_steps : (i == 0 ? fs->learners[i].learner_steps : steps);
    return steps;
}

uint64_t fl_fleet_state_env_steps(const fl_fleet_state_t *fs) {
    uint64_t env = 0;
    for (int a = 0; a < fs->n_actors; a++) env += fs->actors[a].env_steps;
    return env;
}

int fl_fleet_state_take_evals(fl_fleet_state_t *fs, fl_eval_result_t *out, int max) {
    pthread_mutex_lock(&fs->mu);
    int n = fs->queued < max ? fs->queued : max;
    memcpy(out, fs->queue, (size_t)n * sizeof *out);
    memmove(fs->queue, fs->queue + n, (size_t)(fs->queued - n) * sizeof *fs->queue);
    fs->queued -= n;
    pthread_mutex_unlock(&fs->mu);
    return n;
}

int fl_fleet_state_take_rounds(fl_fleet_state_t *fs, fl_round_row_t *out, int max) {
    pthread_mutex_lock(&fs->mu);
    int n = fs->n_rounds_done < max ? fs->n_rounds_done : max;
    memcpy(out, fs->rounds_done, (size_t)n * sizeof *out);
    memmove(fs->rounds_done, fs->rounds_done + n, (size_t)(fs->n_rounds_done - n) * sizeof *fs->rounds_done);
    fs->n_rounds_done -= n;
    pthread_mutex_unlock(&fs->mu);
    return n;
}

/* Report.extra's value named `name`: 1 with it in *v when present and finite. */
static int extra_find(const Fleet__Report *r, const char *name, double *v) {
    for (size_t i = 0; i < r->n_extra; i++)
        if (r->extra[i]->name && strcmp(r->extra[i]->name, name) == 0 && isfinite(r->extra[i]->value)) {
            *v = r->extra[i]->value;
            return 1;
        }
    return 0;
}

/* run.deterministic: learner 0's or an actor's figures of one round (Report.extra
 * FL_REPORT_ROUND >= 1), added to the round's slot; a complete round (the learner and every
 * actor) is queued as a row. A slot still holding an older, incomplete round (a report
 * lost) is taken over. Under mu. */
static void take_round(fl_fleet_state_t *fs, const Fleet__Report *r, int actor) {
    double v = 0;
    if (!extra_find(r, FL_REPORT_ROUND, &v) || !(v >= 1) || v > 1e18) return;
    const uint64_t round = (uint64_t)v;
    if (actor) {
        if (round <= fs->actor_round[r->index]) return; /* counted already */
        fs->actor_round[r->index] = round;
    } else if (r->index != 0) {
        return;
    }
    fl_round_row_t *s = &fs->round_slots[round % FL_FLEET_ROUND_SLOTS];
    if (s->round != round) {
        memset(s, 0, sizeof *s);
        s->round = round;
    }
    double x = 0;
    if (actor) {
        s->actors_in++;
        if (extra_find(r, FL_REPORT_ROUND_EPISODES, &x) && x >= 0) s->episodes += (uint64_t)x;
        if (extra_find(r, FL_REPORT_ROUND_LENGTH_SUM, &x) && x >= 0) s->length_sum += (uint64_t)x;
        if (extra_find(r, FL_REPORT_ROUND_RETURN_SUM, &x)) s->return_sum += x;
    } else {
        if (s->learner_in) return;
        s->learner_in = 1;
        s->learner_steps = r->learner_steps;
        if (extra_find(r, FL_REPORT_ROUND_UPDATES, &x) && x >= 0) s->updates = (uint64_t)x;
        if (extra_find(r, FL_REPORT_ROUND_REPLAY_SIZE, &x) && x >= 0) s->replay_size = (uint64_t)x;
        if (extra_find(r, FL_REPORT_ROUND_LOSS, &x)) s->loss = x;
    }
    if (!s->learner_in || s->actors_in < fs->n_actors) return;
    if (fs->n_rounds_done == FL_FLEET_ROUND_SLOTS) { /* keep the newest */
        memmove(fs->rounds_done, fs->rounds_done + 1, (FL_FLEET_ROUND_SLOTS - 1) * sizeof *fs->rounds_done);
        fs->n_rounds_done--;
    }
    fs->rounds_done[fs->n_rounds_done++] = *s;
    memset(s, 0, sizeof *s);
}

/* An evaluator's result, when the report carries every name with a finite value and a
 * round newer than the last one queued for it. Under mu. */
static void take_result(fl_fleet_state_t *fs, const Fleet__Report *r) {
    fl_eval_result_t res;
    memset(&res, 0, sizeof res);
    int found = 0;
    for (size_t i = 0; i < r->n_extra; i++) {
        const Fleet__Metric *m = r->extra[i];
        if (!m->name) continue;
        for (int k = 0; k < FL_EVALUATOR_RESULT_COUNT; k++)
            if (strcmp(m->name, fl_evaluator_result_names[k]) == 0 && isfinite(m->value)) {
                res.v[k] = m->value;
                found++;
                break;
            }
    }
    double round = res.v[FL_EVAL_RESULT_round];
    if (found != FL_EVALUATOR_RESULT_COUNT || round < 1 || round <= (double)fs->eval_round[r->index]) return;
    fs->eval_round[r->index] = (uint64_t)round;
    res.evaluator = (int)r->index;
    res.version = r->param_version;
    res.received_s = fl_clock_sec() - fs->t_start;
    if (fs->queued == FL_FLEET_EVAL_QUEUE) { /* keep the newest */
        memmove(fs->queue, fs->queue + 1, (FL_FLEET_EVAL_QUEUE - 1) * sizeof *fs->queue);
        fs->queued--;
    }
    fs->queue[fs->queued++] = res;
}

/* Report.extra's value named `name` when present, finite and >= 0; else 0. */
static double extra_value(const Fleet__Report *r, const char *name) {
    double v = 0;
    return extra_find(r, name, &v) && v >= 0 ? v : 0;
}

/* An actor's or a learner's counters, and an actor's finished episodes. Under mu. */
static void take_counters(fl_fleet_state_t *fs, fl_role_state_t *st, const Fleet__Report *r, int actor) {
    if (actor && st->incarnation && r->incarnation != st->incarnation) { /* a new incarnation: it counts from zero */
        st->base_env = st->env_steps;
        st->base_episodes = st->episodes;
        st->base_acked = st->acked;
        st->base_dropped = st->dropped;
        st->lost_unacked += st->pending;
    }
    st->incarnation = r->incarnation;
    st->last_report_s = fl_clock_sec();
    st->seen = 1;
    if (actor) {
        st->env_steps = st->base_env + r->env_steps;
        st->episodes = st->base_episodes + r->episodes;
        st->acked = st->base_acked + r->transitions_acked;
        st->pending = (uint64_t)extra_value(r, "transitions_pending");
        st->dropped = st->base_dropped + (uint64_t)extra_value(r, "transitions_dropped");
    } else {
        st->env_steps = r->env_steps;
        st->episodes = r->episodes;
        st->acked = r->transitions_acked;
    }
    st->version = r->param_version;
    st->learner_steps = r->learner_steps;
    st->samples = r->samples;
    st->loss = r->loss;
    st->wait_fraction = r->wait_fraction;
    st->epsilon = r->epsilon;
    st->rss = r->rss_bytes;
    st->private_bytes = r->private_bytes;
    st->cpu_s = r->cpu_s;
    if (!actor) return;
    for (size_t i = 0; i < r->n_episode_returns; i++) {
        float ret = r->episode_returns[i];
        fs->returns[fs->n_returns % FL_FLEET_RETURN_WINDOW] = ret;
        fs->n_returns++;
        if (fs->n_returns == 1 || ret > fs->best_return) fs->best_return = ret;
        st->recent[st->n_recent % FL_FLEET_ACTOR_WINDOW] = ret;
        st->n_recent++;
    }
}

/* Why a counter of an incarnation's report cannot be true (went back, or grew by more than
 * rate a second since the last report plus `burst`), in why; 0 if it can. */
static int counter_bad(const char *name, uint64_t was, uint64_t now, double dt, double rate, double burst, char *why,
                       size_t len) {
    if (now < was) {
        snprintf(why, len, "%s went back from %llu to %llu within one process", name, (unsigned long long)was,
                 (unsigned long long)now);
        return 1;
    }
    const double most = rate * (dt > 0 ? dt : 0) + burst;
    if ((double)(now - was) > most) {
        snprintf(why, len, "%s grew by %llu in %.3g s (at most %.3g)", name, (unsigned long long)(now - was), dt, most);
        return 1;
    }
    return 0;
}

/* Why r's figures cannot be true, in why; 0 when they can. st: the role's record (its
 * latest accepted report), whose counters bound r's when r comes from the same
 * incarnation. Under mu. */
static int figures_bad(const fl_fleet_state_t *fs, const fl_role_state_t *st, const Fleet__Report *r, int actor,
                       int learner, int evaluator, char *why, size_t len) {
    for (size_t i = 0; i < r->n_episode_returns; i++) {
        const double ret = r->episode_returns[i];
        const double steps = i < r->n_episode_lengths && r->episode_lengths[i] > 0 ? r->episode_lengths[i] : 1;
        if (!isfinite(ret) || fabs(ret) > fs->max_abs_reward * steps) {
            snprintf(
                why, len,
                "episode_returns[%zu] = %g over %.0f steps (expected a finite return of at most "
                "%g a step in magnitude: the env's reward bound, env.reward_bound, or replay.max_abs_reward where set)",
                i, ret, steps, fs->max_abs_reward);
            return 1;
        }
    }
    if (r->rss_bytes > FL_FLEET_MAX_PROCESS_BYTES || r->private_bytes > r->rss_bytes) {
        snprintf(why, len, "rss_bytes = %llu, private_bytes = %llu (expected private <= resident <= 2^50)",
                 (unsigned long long)r->rss_bytes, (unsigned long long)r->private_bytes);
        return 1;
    }
    if (!(r->cpu_s >= 0 && r->cpu_s <= 1e12)) {
        snprintf(why, len, "cpu_s = %g (expected CPU seconds in [0, 1e12])", r->cpu_s);
        return 1;
    }
    if (actor && !(r->epsilon >= 0 && r->epsilon <= 1)) {
        snprintf(why, len, "epsilon = %g (expected 0..1)", r->epsilon);
        return 1;
    }
    if (learner && !(r->wait_fraction >= 0 && r->wait_fraction <= 1)) {
        snprintf(why, len, "wait_fraction = %g (expected 0..1)", r->wait_fraction);
        return 1;
    }
    if (evaluator) {
        for (size_t i = 0; i < r->n_extra; i++)
            if (!isfinite(r->extra[i]->value)) {
                snprintf(why, len, "extra %s = %g (expected a finite value)",
                         r->extra[i]->name ? r->extra[i]->name : "(unnamed)", r->extra[i]->value);
                return 1;
            }
        double mean, lo, hi, eps;
        if (extra_find(r, fl_evaluator_result_names[FL_EVAL_RESULT_return_mean], &mean) &&
            extra_find(r, fl_evaluator_result_names[FL_EVAL_RESULT_return_min], &lo) &&
            extra_find(r, fl_evaluator_result_names[FL_EVAL_RESULT_return_max], &hi)) {
            double steps = 1;
            extra_find(r, fl_evaluator_result_names[FL_EVAL_RESULT_length_max], &steps);
            if (!(lo <= mean && mean <= hi) || fabs(lo) > fs->max_abs_reward * fmax(steps, 1) ||
                fabs(hi) > fs->max_abs_reward * fmax(steps, 1)) {
                snprintf(why, len,
                         "an evaluation's return mean %g, min %g, max %g over at most %.0f steps (expected min <= "
                         "mean <= max, at most %g a step in magnitude: the env's reward bound, env.reward_bound, or "
                         "replay.max_abs_reward where set)",
                         mean, lo, hi, steps, fs->max_abs_reward);
                return 1;
            }
        }
        if (extra_find(r, fl_evaluator_result_names[FL_EVAL_RESULT_episodes], &eps) && !(eps >= 1)) {
            snprintf(why, len, "an evaluation of %g episodes (expected >= 1)", eps);
            return 1;
        }
    }
    if (!st->seen || r->incarnation != st->incarnation) return 0; /* a new process counts from 0 */
    const double dt = fl_clock_sec() - st->last_report_s;
    if (actor) {
        const uint64_t env = st->env_steps - st->base_env, eps = st->episodes - st->base_episodes,
                       acked = st->acked - st->base_acked;
        return counter_bad("env_steps", env, r->env_steps, dt, 1e8, 1e8, why, len) ||
               counter_bad("episodes", eps, r->episodes, dt, 1e8, 1e8, why, len) ||
               counter_bad("transitions_acked", acked, r->transitions_acked, dt, 1e8, 1e8, why, len);
    }
    if (learner)
        return counter_bad("learner_steps", st->learner_steps, r->learner_steps, dt, 1e6, 1e6, why, len) ||
               counter_bad("samples", st->samples, r->samples, dt, 1e9, 1e9, why, len);
    return 0;
}

/* Logs a refused report: the first 10, then every 1,000th. Under mu. */
static void log_refusal(fl_fleet_state_t *fs, const char *msg) {
    fs->refused++;
    if (fl_log_sampled(fs->refused))
        fl_log(FL_LOG_WARN, "control: refused a report (%llu so far): %s", (unsigned long long)fs->refused, msg);
}

/* A joined actor's accepted report: back from lost, or gone for good with its last one.
 * Under mu. */
static void joined_seen(fl_fleet_state_t *fs, fl_role_state_t *st, const Fleet__Report *r) {
    const int a = (int)(st - fs->actors);
    if (st->gone == FL_JOINED_LOST) {
        st->gone = 0;
        fs->losses--; /* counted while lost only */
        fl_log(FL_LOG_INFO, "actor %d (joined from %s) reports again", a, st->host);
    }
    if (r->leaving && !st->gone) {
        st->gone = FL_JOINED_LEFT;
        fs->leaves++;
        fl_log(FL_LOG_INFO,
               "actor %d (joined from %s, pid %lld) left after %llu env steps, %llu transitions acknowledged", a,
               st->host, (long long)st->pid, (unsigned long long)st->env_steps, (unsigned long long)st->acked);
    }
}

fl_status fl_fleet_state_on_report(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    fl_fleet_state_t *fs = user;
    Fleet__Report *r = fleet__report__unpack(NULL, len, req);
    if (!r) return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "Report: not a valid fleet.Report message");
    const char *role = r->role ? r->role : "";
    int actor = strcmp(role, "actor") == 0, learner = strcmp(role, "learner") == 0;
    int evaluator = strcmp(role, "evaluator") == 0;
    /* Services report too; their figures come from polling Info, so a report is only
     * answered (with the stop flag). */
    int service = strcmp(role, "replay") == 0 || strcmp(role, "paramserver") == 0;
    pthread_mutex_lock(&fs->mu);
    fl_role_state_t *st = NULL;
    if (actor && (int)r->index < fs->n_actors) st = &fs->actors[r->index];
    if (learner && (int)r->index < fs->n_learners) st = &fs->learners[r->index];
    if (evaluator && (int)r->index < fs->n_evaluators) st = &fs->evaluators[r->index];
    char why[320] = "";
    fl_status refuse = FL_OK;
    if (st || service) {
        uint8_t key[FL_CRED_KEY_BYTES];
        fl_cred_role_key(fs->secret, role, r->index, key);
        if (!r->incarnation || !fl_cred_check(key, r->incarnation, r->credential)) {
            refuse = FL_PERMISSION_DENIED;
            snprintf(why, sizeof why,
                     "Report: %.16s %u: %s credential (expected the %s that `fleet run` gives each process it starts)",
                     role, r->index, r->credential && r->credential[0] ? "a wrong" : "no", FL_CRED_ENV);
        } else if (st && r->incarnation < st->incarnation) {
            refuse = FL_FAILED_PRECONDITION;
            snprintf(why, sizeof why, "Report: %.16s %u: incarnation %llu was replaced by incarnation %llu", role,
                     r->index, (unsigned long long)r->incarnation, (unsigned long long)st->incarnation);
        } else if (st) {
            char what[256];
            if (figures_bad(fs, st, r, actor, learner, evaluator, what, sizeof what)) {
                refuse = FL_INVALID_ARGUMENT;
                snprintf(why, sizeof why, "Report: %.16s %u: %s", role, r->index, what);
            }
        }
    }
    if (refuse != FL_OK) {
        log_refusal(fs, why);
        pthread_mutex_unlock(&fs->mu);
        fleet__report__free_unpacked(r, NULL);
        return fl_rpc_reply_error(reply, refuse, "%s", why);
    }
    if (st) take_counters(fs, st, r, actor);
    if (st && actor && st->joined) joined_seen(fs, st, r);
    if (st && evaluator && r->n_extra) take_result(fs, r);
    if (st && (actor || learner) && r->n_extra) take_round(fs, r, actor);
    Fleet__ReportResponse resp = FLEET__REPORT_RESPONSE__INIT;
    resp.stop = actor || evaluator ? fs->stop_actors : learner ? fs->stop_learners : fs->stop_services;
    resp.env_steps = fl_fleet_state_env_steps(fs);
    resp.learner_steps = fl_fleet_state_learner_steps(fs);
    pthread_mutex_unlock(&fs->mu);
    int known = st != NULL || service;
    char name[32];
    snprintf(name, sizeof name, "%s", role);
    uint32_t index = r->index;
    fleet__report__free_unpacked(r, NULL);
    if (!known)
        return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "Report: unknown role '%s' index %u", name, index);
    return fl_rpc_reply_pb(reply, &resp.base);
}

/* ------------------------------------------------------------------- joins ---- */

int fl_fleet_state_open_joins(fl_fleet_state_t *fs, double eps_base, double eps_alpha, const char *replay,
                              const char *params, const char *config_text, const char *run_name, const char *refused) {
    char *r = strdup(replay ? replay : ""), *p = strdup(params ? params : ""),
         *c = strdup(config_text ? config_text : "");
    char *n = strdup(run_name ? run_name : "");
    if (!r || !p || !c || !n) {
        free(r);
        free(p);
        free(c);
        free(n);
        return -1;
    }
    pthread_mutex_lock(&fs->mu);
    free(fs->join_replay);
    free(fs->join_params);
    free(fs->join_config);
    free(fs->join_run);
    fs->join_replay = r;
    fs->join_params = p;
    fs->join_config = c;
    fs->join_run = n;
    fs->eps_base = eps_base;
    fs->eps_alpha = eps_alpha;
    snprintf(fs->joins_refused, sizeof fs->joins_refused, "%s", refused ? refused : "");
    fs->joins_open = 1;
    pthread_mutex_unlock(&fs->mu);
    return 0;
}

double fl_fleet_state_join_epsilon(double eps_base, double eps_alpha, uint64_t j) {
    double p = 0, f = 0.5;
    for (uint64_t k = j + 1; k; k >>= 1, f *= 0.5)
        if (k & 1) p += f;
    return pow(eps_base, 1.0 + eps_alpha * p);
}

/* Refuses a join: logged like a refused report, answered with code and message. */
static fl_status refuse_join(fl_fleet_state_t *fs, fl_rpc_reply_t *reply, fl_status code, const char *msg) {
    log_refusal(fs, msg);
    pthread_mutex_unlock(&fs->mu);
    return fl_rpc_reply_error(reply, code, "%s", msg);
}

fl_status fl_fleet_state_on_join(void *user, const uint8_t *req, size_t len, fl_rpc_reply_t *reply) {
    fl_fleet_state_t *fs = user;
    Fleet__JoinRequest *q = fleet__join_request__unpack(NULL, len, req);
    if (!q) return fl_rpc_reply_error(reply, FL_INVALID_ARGUMENT, "Join: not a valid fleet.JoinRequest message");
    char host[64] = "", msg[320] = "";
    const char *role = q->role ? q->role : "";
    int role_ok = strcmp(role, "actor") == 0, host_ok = q->host && strlen(q->host) < sizeof host;
    if (host_ok) snprintf(host, sizeof host, "%s", q->host[0] ? q->host : "?");
    for (char *h = host; *h; h++)
        if ((unsigned char)*h < 0x20 || (unsigned char)*h > 0x7e) *h = '?'; /* it goes into logs */
    const int64_t pid = q->pid;
    if (!role_ok)
        snprintf(msg, sizeof msg,
                 "Join: role '%.32s' cannot join (expected \"actor\": only actors join a running fleet)", role);
    else if (!host_ok)
        snprintf(msg, sizeof msg, "Join: host name of %zu bytes (expected at most %zu)", q->host ? strlen(q->host) : 0,
                 sizeof host - 1);
    fleet__join_request__free_unpacked(q, NULL);
    pthread_mutex_lock(&fs->mu);
    if (msg[0]) return refuse_join(fs, reply, FL_INVALID_ARGUMENT, msg);
    if (!fs->joins_open)
        return refuse_join(fs, reply, FL_UNAVAILABLE,
                           "Join: the fleet's services are still starting; try again shortly");
    if (fs->joins_refused[0]) {
        snprintf(msg, sizeof msg, "Join: this run takes no joining actors: %s", fs->joins_refused);
        return refuse_join(fs, reply, FL_FAILED_PRECONDITION, msg);
    }
    if (fs->stop_actors) return refuse_join(fs, reply, FL_FAILED_PRECONDITION, "Join: the fleet is stopping");
    if (fs->n_actors >= fs->max_actors) {
        snprintf(msg, sizeof msg, "Join: %d actors have joined this run, its actor.max_joined",
                 fs->max_actors - fs->n_started);
        return refuse_join(fs, reply, FL_RESOURCE_EXHAUSTED, msg);
    }
    const int a = fs->n_actors++;
    fl_role_state_t *st = &fs->actors[a];
    memset(st, 0, sizeof *st);
    st->joined = 1;
    st->pid = pid;
    st->last_report_s = fl_clock_sec(); /* the wait for its first report counts from here */
    snprintf(st->host, sizeof st->host, "%s", host);
    const char *peer = fl_rpc_reply_peer(reply);
    const double eps = fl_fleet_state_join_epsilon(fs->eps_base, fs->eps_alpha, (uint64_t)(a - fs->n_started));
    st->epsilon = eps;
    fs->joins++;
    uint8_t key[FL_CRED_KEY_BYTES];
    char token[FL_CRED_TOKEN_CHARS + 1];
    fl_cred_role_key(fs->secret, "actor", (uint32_t)a, key);
    fl_cred_token(key, 1, token);
    Fleet__JoinResponse resp = FLEET__JOIN_RESPONSE__INIT;
    resp.index = (uint32_t)a;
    resp.incarnation = 1;
    resp.credential = token;
    resp.epsilon = eps;
    resp.replay = fs->join_replay;
    resp.paramserver = fs->join_params;
    resp.config = fs->join_config;
    resp.run_name = fs->join_run;
    fl_log(FL_LOG_INFO, "actor %d joined from %s (pid %lld, connection %s), epsilon %.4g; %d actors now", a, host,
           (long long)pid, peer && peer[0] ? peer : "?", eps, fs->n_actors);
    fl_status s = fl_rpc_reply_pb(reply, &resp.base); /* copies the message: packed under mu */
    pthread_mutex_unlock(&fs->mu);
    return s;
}

int fl_fleet_state_check_joined(fl_fleet_state_t *fs, double timeout_s) {
    const double now = fl_clock_sec();
    int live = 0;
    pthread_mutex_lock(&fs->mu);
    for (int a = fs->n_started; a < fs->n_actors; a++) {
        fl_role_state_t *A = &fs->actors[a];
        if (A->gone == FL_JOINED_LEFT) continue;
        if (!A->gone && now - A->last_report_s > timeout_s) {
            A->gone = FL_JOINED_LOST;
            fs->losses++;
            fl_log(FL_LOG_WARN, "actor %d (joined from %s, pid %lld) lost: no report for %.0f s; the fleet goes on", a,
                   A->host, (long long)A->pid, now - A->last_report_s);
        }
        if (!A->gone) live++;
    }
    pthread_mutex_unlock(&fs->mu);
    return live;
}

/* ------------------------------------------------------------- save, restore ---- */

/* The last min(count, cap) values of a ring of cap that has seen `count`, oldest first. */
static size_t ring_in_order(const float *ring, uint64_t count, size_t cap, float *out) {
    size_t n = count < cap ? (size_t)count : cap;
    for (size_t i = 0; i < n; i++) out[i] = ring[(count - n + i) % cap];
    return n;
}

/* Puts n values (oldest first) back into a ring that has seen `count` in all. */
static void ring_restore(float *ring, uint64_t count, size_t cap, const float *in, size_t n) {
    for (size_t i = 0; i < n; i++) ring[(count - n + i) % cap] = in[i];
}

fl_status fl_fleet_state_save(fl_fleet_state_t *fs, const fl_fleet_totals_t *t, const char *path, fl_err_t *err) {
    fl_state_out_t w;
    FL_TRY(fl_state_begin(&w, path, "launcher", err));
    float win[FL_FLEET_RETURN_WINDOW];
    char key[64];
    pthread_mutex_lock(&fs->mu);
    fl_state_put_u64(&w, "actors", (uint64_t)fs->n_started);
    fl_state_put_u64(&w, "joined", (uint64_t)(fs->n_actors - fs->n_started));
    fl_state_put_u64(&w, "learners", (uint64_t)fs->n_learners);
    fl_state_put_u64(&w, "episodes", fs->n_returns);
    fl_state_put_double(&w, "best_return", fs->best_return);
    fl_state_put_floats(&w, "returns", win, ring_in_order(fs->returns, fs->n_returns, FL_FLEET_RETURN_WINDOW, win));
    for (int a = 0; a < fs->n_actors; a++) {
        const fl_role_state_t *A = &fs->actors[a];
        snprintf(key, sizeof key, "actor_%d_env_steps", a);
        fl_state_put_u64(&w, key, A->env_steps);
        snprintf(key, sizeof key, "actor_%d_episodes", a);
        fl_state_put_u64(&w, key, A->n_recent);
        snprintf(key, sizeof key, "actor_%d_returns", a);
        fl_state_put_floats(&w, key, win, ring_in_order(A->recent, A->n_recent, FL_FLEET_ACTOR_WINDOW, win));
        if (A->joined) { /* no state file of its own: what it had acknowledged stays in the run's totals */
            snprintf(key, sizeof key, "actor_%d_acked", a);
            fl_state_put_u64(&w, key, A->acked);
        }
        /* The counters of its earlier incarnations (an actor resumes its own counters). */
        const uint64_t base[4] = {A->base_env, A->base_episodes, A->base_acked, A->base_dropped};
        static const char *const base_names[4] = {"env", "episodes", "acked", "dropped"};
        for (int b = 0; b < 4; b++) {
            snprintf(key, sizeof key, "actor_%d_base_%s", a, base_names[b]);
            fl_state_put_u64(&w, key, base[b]);
        }
    }
    for (int i = 0; i < fs->n_learners; i++) {
        snprintf(key, sizeof key, "learner_%d_steps", i);
        fl_state_put_u64(&w, key, fs->learners[i].learner_steps);
        snprintf(key, sizeof key, "learner_%d_samples", i);
        fl_state_put_u64(&w, key, fs->learners[i].samples);
    }
    pthread_mutex_unlock(&fs->mu);
    fl_state_put_double(&w, "elapsed_s", t->elapsed_s);
    fl_state_put_u64(&w, "env_steps", t->env_steps);
    fl_state_put_u64(&w, "learner_steps", t->learner_steps);
    fl_state_put_u64(&w, "samples", t->samples);
    fl_state_put_u64(&w, "replay_inserted", t->replay_inserted);
    fl_state_put_u64(&w, "evaluations", t->n_evals);
    fl_state_put_double(&w, "best_eval", t->best_eval);
    fl_state_put_u64(&w, "eval_version", t->eval.version);
    fl_state_put_doubles(&w, "eval_result", t->eval.v, FL_EVALUATOR_RESULT_COUNT);
    double sup[FL_FLEET_SUPERVISION_COUNTERS];
    for (int i = 0; i < FL_FLEET_SUPERVISION_COUNTERS; i++) sup[i] = (double)t->supervision[i];
    fl_state_put_doubles(&w, "supervision", sup, FL_FLEET_SUPERVISION_COUNTERS);
    return fl_state_commit(&w, err);
}

/* The totals of a launcher state file. */
static int restore_totals(const fl_state_t *st, fl_fleet_totals_t *t) {
    memset(t, 0, sizeof *t);
    int ok = fl_state_get_double(st, "elapsed_s", &t->elapsed_s) && fl_state_get_u64(st, "env_steps", &t->env_steps) &&
             fl_state_get_u64(st, "learner_steps", &t->learner_steps) && fl_state_get_u64(st, "samples", &t->samples) &&
             fl_state_get_u64(st, "replay_inserted", &t->replay_inserted) &&
             fl_state_get_u64(st, "evaluations", &t->n_evals) && fl_state_get_double(st, "best_eval", &t->best_eval) &&
             fl_state_get_u64(st, "eval_version", &t->eval.version) &&
             fl_state_get_doubles(st, "eval_result", t->eval.v, FL_EVALUATOR_RESULT_COUNT) == FL_EVALUATOR_RESULT_COUNT;
    double sup[FL_FLEET_SUPERVISION_COUNTERS] = {0}; /* absent before the counters were kept: zeros */
    size_t n = fl_state_get_doubles(st, "supervision", sup, FL_FLEET_SUPERVISION_COUNTERS);
    for (size_t i = 0; i < n; i++) t->supervision[i] = sup[i] >= 0 && sup[i] < 1e18 ? (uint64_t)sup[i] : 0;
    return ok;
}

/* The roles' part of a launcher state file, under mu. */
static int restore_roles(fl_fleet_state_t *fs, const fl_state_t *st) {
    float win[FL_FLEET_RETURN_WINDOW];
    char key[64];
    size_t n = fl_state_get_floats(st, "returns", win, FL_FLEET_RETURN_WINDOW);
    if (!fl_state_get_u64(st, "episodes", &fs->n_returns) ||
        !fl_state_get_double(st, "best_return", &fs->best_return) || n > fs->n_returns)
        return 0;
    ring_restore(fs->returns, fs->n_returns, FL_FLEET_RETURN_WINDOW, win, n);
    for (int a = 0; a < fs->n_actors; a++) {
        fl_role_state_t *A = &fs->actors[a];
        if (a >= fs->n_started) { /* joined an earlier sitting: gone with it */
            A->joined = 1;
            A->gone = FL_JOINED_LEFT;
            A->seen = 1;
            snprintf(A->host, sizeof A->host, "an earlier sitting");
            snprintf(key, sizeof key, "actor_%d_acked", a);
            if (!fl_state_get_u64(st, key, &A->acked)) return 0;
        }
        snprintf(key, sizeof key, "actor_%d_env_steps", a);
        int ok = fl_state_get_u64(st, key, &A->env_steps);
        snprintf(key, sizeof key, "actor_%d_episodes", a);
        ok = ok && fl_state_get_u64(st, key, &A->n_recent);
        snprintf(key, sizeof key, "actor_%d_returns", a);
        n = fl_state_get_floats(st, key, win, FL_FLEET_ACTOR_WINDOW);
        if (!ok || n > A->n_recent) return 0;
        ring_restore(A->recent, A->n_recent, FL_FLEET_ACTOR_WINDOW, win, n);
        uint64_t *base[4] = {&A->base_env, &A->base_episodes, &A->base_acked, &A->base_dropped};
        static const char *const base_names[4] = {"env", "episodes", "acked", "dropped"};
        for (int b = 0; b < 4; b++) { /* absent from the files of older versions: 0 */
            snprintf(key, sizeof key, "actor_%d_base_%s", a, base_names[b]);
            if (!fl_state_get_u64(st, key, base[b])) *base[b] = 0;
        }
        A->last_env = A->env_steps;
    }
    for (int i = 0; i < fs->n_learners; i++) {
        fl_role_state_t *Ln = &fs->learners[i];
        snprintf(key, sizeof key, "learner_%d_steps", i);
        int ok = fl_state_get_u64(st, key, &Ln->learner_steps);
        snprintf(key, sizeof key, "learner_%d_samples", i);
        if (!ok || !fl_state_get_u64(st, key, &Ln->samples)) return 0;
        Ln->last_steps = Ln->learner_steps;
        Ln->last_samples = Ln->samples;
    }
    return 1;
}

fl_status fl_fleet_state_restore(fl_fleet_state_t *fs, fl_fleet_totals_t *t, const char *path, fl_err_t *err) {
    fl_state_t *st = NULL;
    FL_TRY(fl_state_load(path, "launcher", &st, err));
    uint64_t actors = 0, learners = 0;
    fl_status s = FL_OK;
    if (!fl_state_get_u64(st, "actors", &actors) || !fl_state_get_u64(st, "learners", &learners) ||
        actors != (uint64_t)fs->n_started || learners != (uint64_t)fs->n_learners)
        s = fl_err_set(err, FL_INVALID_ARGUMENT,
                       "%s: saved with %llu actors and %llu learners; the run now has actor.count = %d and "
                       "learner.count = %d (a resumed experiment keeps its roles)",
                       path, (unsigned long long)actors, (unsigned long long)learners, fs->n_started, fs->n_learners);
    uint64_t joined = 0; /* absent from the files of older versions: none */
    fl_state_get_u64(st, "joined", &joined);
    if (s == FL_OK && joined > (uint64_t)(fs->max_actors - fs->n_started))
        s = fl_err_set(err, FL_INVALID_ARGUMENT,
                       "%s: %llu actors joined the run's earlier sittings; actor.max_joined is now %d (expected at "
                       "least as many)",
                       path, (unsigned long long)joined, fs->max_actors - fs->n_started);
    if (s == FL_OK && !restore_totals(st, t))
        s = fl_err_set(err, FL_PARSE_ERROR, "%s: the totals are incomplete", path);
    pthread_mutex_lock(&fs->mu);
    if (s == FL_OK) fs->n_actors = fs->n_started + (int)joined;
    if (s == FL_OK && !restore_roles(fs, st))
        s = fl_err_set(err, FL_PARSE_ERROR, "%s: the roles' figures are incomplete", path);
    pthread_mutex_unlock(&fs->mu);
    fl_state_free(st);
    return s;
}

double fl_fleet_state_last_report(fl_fleet_state_t *fs, const char *role, int index) {
    double t = -1;
    pthread_mutex_lock(&fs->mu);
    if (strcmp(role, "actor") == 0 && index >= 0 && index < fs->n_actors) t = fs->actors[index].last_report_s;
    if (strcmp(role, "learner") == 0 && index >= 0 && index < fs->n_learners) t = fs->learners[index].last_report_s;
    if (strcmp(role, "evaluator") == 0 && index >= 0 && index < fs->n_evaluators)
        t = fs->evaluators[index].last_report_s;
    pthread_mutex_unlock(&fs->mu);
    return t;
}
