/* sharded: R replay shards seen as one replay (see sharded.h): address lists, the
 * systematic split of a batch over the shards' sampling masses, and the per-shard calls,
 * run at once on a fanout pool (common/fanout.h). */
#include "replay/sharded.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/fanout.h"
#include "common/rng.h"
#include "replay/client_internal.h"
#include "replay/table.h"
#include "replay/wire.h"

fl_status fl_replay_addrs_parse(const char *spec, fl_replay_addrs_t *out, fl_err_t *err) {
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay addresses: empty (expected HOST:PORT[,HOST:PORT...] or @FILE)");
    char *text = NULL;
    const char *seps = ",";
    if (spec[0] == '@') {
        FILE *f = fopen(spec + 1, "rb");
        if (!f) return fl_err_set(err, FL_INVALID_ARGUMENT, "replay addresses: cannot read '%s'", spec + 1);
        size_t cap = 4096, n = 0, k;
        text = malloc(cap);
        while (text && (k = fread(text + n, 1, cap - n - 1, f)) > 0) {
            n += k;
            if (n + 1 >= cap) {
                char *t = realloc(text, cap * 2);
                if (!t) {
                    free(text);
                    text = NULL;
                    break;
                }
                text = t;
                cap *= 2;
            }
        }
        fclose(f);
        if (!text) return fl_err_set(err, FL_NO_MEMORY, "replay addresses: out of memory reading '%s'", spec + 1);
        text[n] = '\0';
        seps = ", \t\r\n";
    } else {
        text = strdup(spec);
        if (!text) return fl_err_set(err, FL_NO_MEMORY, "replay addresses: out of memory");
    }
    fl_status st = FL_OK;
    out->addr = calloc(FL_REPLAY_MAX_SHARDS, sizeof *out->addr);
    if (!out->addr) {
        st = fl_err_set(err, FL_NO_MEMORY, "replay addresses: out of memory");
        goto done;
    }
    /* Between separators: with commas only, an empty entry ("a,,b") is an error; in a
     * file, runs of whitespace are one separator. */
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, seps);
        if (len == 0 && spec[0] == '@') {
            if (!*p) break;
            p++;
            continue;
        }
        if (len == 0) {
            st = fl_err_set(err, FL_INVALID_ARGUMENT, "replay addresses: entry %d of '%s' is empty", out->count, spec);
            goto done;
        }
        if (out->count == FL_REPLAY_MAX_SHARDS) {
            st = fl_err_set(err, FL_INVALID_ARGUMENT, "replay addresses: more than %d in '%.64s...'",
                            FL_REPLAY_MAX_SHARDS, spec);
            goto done;
        }
        out->addr[out->count] = strndup(p, len);
        if (!out->addr[out->count]) {
            st = fl_err_set(err, FL_NO_MEMORY, "replay addresses: out of memory");
            goto done;
        }
        out->count++;
        p += len;
        if (!*p) break;
        p++;
    }
    if (out->count == 0) st = fl_err_set(err, FL_INVALID_ARGUMENT, "replay addresses: none in '%s'", spec);
done:
    free(text);
    if (st != FL_OK) fl_replay_addrs_free(out);
    return st;
}

void fl_replay_addrs_free(fl_replay_addrs_t *a) {
    if (!a) return;
    for (int i = 0; a->addr && i < a->count; i++) free(a->addr[i]);
    free(a->addr);
    memset(a, 0, sizeof *a);
}

int fl_replay_shard_for_actor(int actor_index, int shards) {
    if (shards <= 1 || actor_index < 0) return 0;
    return actor_index % shards;
}

/* What the sampler last learned of one shard. */
typedef struct shard_view {
    double mass;    /* what its draws are proportional to (T_s with the prioritized selector) */
    double total;   /* T_s: sum of p^alpha */
    uint64_t size;  /* N_s */
    double min_q;   /* smallest positive p^alpha (0: unknown) */
    int stalled;    /* its last Sample was refused (too few items, rate limit): probed */
    double seen_at; /* clock of the answer these figures come from */
} shard_view;

/* A shard's sampling mass as answered (a server without the field: its total priority). */
static double mass_of(double sampling_mass, double total) {
    return sampling_mass > 0.0 ? sampling_mass : total > 0.0 ? total : 0.0;
}

/* A shard that gets no rows of a batch is asked for its Info at most this often (its
 * mass, < 1/B of the total or it would have got a row, is refreshed for the next split). */
#define SHARD_REFRESH_S 0.1

struct fl_replay_sharded {
    int n;
    fl_replay_addrs_t addrs;
    fl_replay_client_t **c; /* (n) */
    fl_fanout_t *pool;      /* n - 1 workers for the per-shard calls */
    int64_t timeout_ms;

    pthread_mutex_t mu; /* guards the fields below */
    fl_rng_t rng;       /* the split's uniform */
    int have_views;     /* views hold answers of the last call (else: refresh first) */
    shard_view *views;  /* (n) */
};

fl_status fl_replay_sharded_create(const char *addrs, uint64_t seed, fl_replay_sharded_t **out, fl_err_t *err) {
    *out = NULL;
    fl_replay_sharded_t *s = calloc(1, sizeof *s);
    if (!s) return fl_err_set(err, FL_NO_MEMORY, "replay: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    fl_rng_init(&s->rng, seed);
    s->timeout_ms = FL_REPLAY_CLIENT_TIMEOUT_MS;
    fl_status st = fl_replay_addrs_parse(addrs, &s->addrs, err);
    if (st != FL_OK) goto fail;
    s->c = calloc((size_t)s->addrs.count, sizeof *s->c);
    s->views = calloc((size_t)s->addrs.count, sizeof *s->views);
    if (!s->c || !s->views) {
        st = fl_err_set(err, FL_NO_MEMORY, "replay: out of memory");
        goto fail;
    }
    for (int i = 0; i < s->addrs.count; i++) {
        if ((st = fl_replay_client_create(s->addrs.addr[i], &s->c[i], err)) != FL_OK) {
            fl_err_prefix(err, "replay shard %d (%s)", i, s->addrs.addr[i]);
            goto fail;
        }
        s->n++;
    }
    if (s->n > 1 && (st = fl_fanout_create(s->n - 1, &s->pool, err)) != FL_OK) goto fail;
    *out = s;
    return FL_OK;
fail:
    fl_replay_sharded_destroy(s);
    return st;
}

void fl_replay_sharded_destroy(fl_replay_sharded_t *s) {
    if (!s) return;
    fl_fanout_destroy(s->pool); /* no call is running: its workers are idle */
    for (int i = 0; i < s->n; i++) fl_replay_client_destroy(s->c[i]);
    free(s->c);
    free(s->views);
    fl_replay_addrs_free(&s->addrs);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int fl_replay_sharded_count(const fl_replay_sharded_t *s) {
    return s->n;
}

const char *fl_replay_sharded_addr(const fl_replay_sharded_t *s, int shard) {
    return shard >= 0 && shard < s->n ? s->addrs.addr[shard] : NULL;
}

fl_replay_client_t *fl_replay_sharded_client(fl_replay_sharded_t *s, int shard) {
    return shard >= 0 && shard < s->n ? s->c[shard] : NULL;
}

void fl_replay_sharded_set_timeout(fl_replay_sharded_t *s, int64_t timeout_ms) {
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : FL_REPLAY_CLIENT_TIMEOUT_MS;
    for (int i = 0; i < s->n; i++) fl_replay_client_set_timeout(s->c[i], timeout_ms);
}

/* One shard's part of a call, run on its own thread. */
typedef enum { JOB_SAMPLE, JOB_INFO, JOB_UPDATE } job_kind;

typedef struct job {
    job_kind kind;
    fl_replay_client_t *c;
    int shard;
    int64_t timeout_ms;
    /* sample */
    size_t count, offset;
    int probe;
    double beta;
    fl_replay_batch_t *out;
    fl__sample_meta_t meta;
    /* info */
    fl_replay_info_t info;
    /* update */
    const uint64_t *keys;
    const float *prios;
    uint64_t applied;

    fl_status st;
    fl_err_t err;
} job_t;

static void *job_run(void *arg) {
    job_t *j = arg;
    fl_err_init(&j->err);
    switch (j->kind) {
    case JOB_SAMPLE:
        j->st = fl__replay_sample_rows(j->c, j->count, j->beta, j->timeout_ms, j->probe, NULL, j->out, j->offset,
                                       &j->meta, &j->err);
        break;
    case JOB_INFO: j->st = fl_replay_info(j->c, j->timeout_ms, &j->info, &j->err); break;
    case JOB_UPDATE:
        j->st = fl_replay_update_priorities(j->c, j->count, j->keys, j->prios, &j->applied, &j->err);
        break;
    }
    return NULL;
}

static void job_item(void *arg, int i) {
    job_run((job_t *)arg + i);
}

/* Runs n jobs at once on the client's pool (the caller's thread takes part). */
static void run_jobs(fl_replay_sharded_t *s, job_t *jobs, int n) {
    fl_fanout_run(s->pool, n, job_item, jobs);
}

/* The first failed job's error (jobs are in shard order), naming its shard. */
static fl_status first_error(const fl_replay_sharded_t *s, const job_t *jobs, int n, fl_err_t *err) {
    for (int i = 0; i < n; i++) {
        if (jobs[i].st == FL_OK) continue;
        const char *msg = jobs[i].err.msg[0] ? jobs[i].err.msg : fl_status_str(jobs[i].st);
        return fl_err_set(err, jobs[i].st, "replay shard %d of %d (%s): %s", jobs[i].shard, s->n,
                          s->addrs.addr[jobs[i].shard], msg);
    }
    return FL_OK;
}

static fl_status wrong_shard(const fl_replay_sharded_t *s, int shard, unsigned got, fl_err_t *err) {
    return fl_err_set(err, FL_DATA_LOSS,
                      "replay shard %d of %d (%s) answers as shard %u: the replay addresses must be listed in shard "
                      "order",
                      shard, s->n, s->addrs.addr[shard], got);
}

static int64_t ms_left(double deadline) {
    double left = (deadline - fl_clock_sec()) * 1e3;
    return left < 1.0 ? 1 : (int64_t)left;
}

/* Info from every shard into the views. Any failure (named) invalidates them. */
static fl_status refresh_views(fl_replay_sharded_t *s, int64_t timeout_ms, fl_err_t *err) {
    job_t *jobs = calloc((size_t)s->n, sizeof *jobs);
    if (!jobs) return fl_err_set(err, FL_NO_MEMORY, "replay sample: out of memory");
    for (int i = 0; i < s->n; i++)
        jobs[i] = (job_t){.kind = JOB_INFO, .c = s->c[i], .shard = i, .timeout_ms = timeout_ms};
    run_jobs(s, jobs, s->n);
    fl_status st = first_error(s, jobs, s->n, err);
    for (int i = 0; st == FL_OK && i < s->n; i++)
        if (jobs[i].info.shard_id != (uint32_t)i) st = wrong_shard(s, i, jobs[i].info.shard_id, err);
    pthread_mutex_lock(&s->mu);
    if (st == FL_OK) {
        double t = fl_clock_sec();
        for (int i = 0; i < s->n; i++) {
            shard_view *v = &s->views[i];
            v->total = jobs[i].info.total_priority;
            v->mass = mass_of(jobs[i].info.sampling_mass, v->total);
            v->size = jobs[i].info.size;
            v->seen_at = t;
            v->min_q = v->total > 0.0 ? jobs[i].info.min_priority : 0.0;
        }
    }
    s->have_views = st == FL_OK;
    pthread_mutex_unlock(&s->mu);
    free(jobs);
    return st;
}

static fl_status nothing_to_sample(const fl_replay_sharded_t *s, uint64_t size, fl_err_t *err) {
    return fl_err_set(err, FL_FAILED_PRECONDITION,
                      "replay holds %" PRIu64 " transitions and nothing to sample on any of its %d shards", size, s->n);
}

/* Until some shard holds priority mass (polling Info), or the deadline. A poll that runs
 * out of time after an earlier one found every shard empty answers as that one did: the
 * caller learns that there is nothing to sample, not that the deadline hit an Info call. */
static fl_status wait_for_mass(fl_replay_sharded_t *s, int64_t timeout_ms, double deadline, fl_err_t *err) {
    int polled = 0;
    uint64_t size = 0;
    for (;;) {
        fl_status st = refresh_views(s, timeout_ms > 0 ? ms_left(deadline) : s->timeout_ms, err);
        if (st == FL_DEADLINE_EXCEEDED && polled) return nothing_to_sample(s, size, err);
        if (st != FL_OK) return st;
        polled = 1;
        double sum = 0.0;
        size = 0;
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < s->n; i++) {
            sum += s->views[i].mass;
            size += s->views[i].size;
        }
        pthread_mutex_unlock(&s->mu);
        if (sum > 0.0) return FL_OK;
        double now = fl_clock_sec();
        if (timeout_ms <= 0 || now + 0.05 >= deadline) return nothing_to_sample(s, size, err);
        fl_sleep_sec(0.05);
    }
}

/* Moves rows [src, src + n) of out to [dst, dst + n), dst <= src. */
static void move_rows(fl_replay_batch_t *out, size_t dst, size_t src, size_t n) {
    if (dst == src || n == 0) return;
    size_t ob = out->obs_bytes;
    memmove(out->obs + dst * ob, out->obs + src * ob, n * ob);
    memmove(out->next_obs + dst * ob, out->next_obs + src * ob, n * ob);
    memmove(out->actions + dst, out->actions + src, n * sizeof *out->actions);
    memmove(out->rewards + dst, out->rewards + src, n * sizeof *out->rewards);
    memmove(out->discounts + dst, out->discounts + src, n * sizeof *out->discounts);
    memmove(out->keys + dst, out->keys + src, n * sizeof *out->keys);
    memmove(out->weights + dst, out->weights + src, n * sizeof *out->weights);
    memmove(out->probs + dst, out->probs + src, n * sizeof *out->probs);
}

/* Systematic split of `need` rows over the shards with mass[i] > 0 and !skip[i]: one
 * uniform u; shard i gets the points (k + u) / need, k < need, that fall in its share of
 * [0, 1). cnt (n) receives the counts (sum need); returns the mass split over. */
static double split_rows(int n, const double *mass, const unsigned char *skip, size_t need, double u, size_t *cnt) {
    double sum = 0.0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        cnt[i] = 0;
        if (!skip[i] && mass[i] > 0.0) {
            sum += mass[i];
            last = i;
        }
    }
    if (last < 0) return 0.0;
    const double B = (double)need;
    size_t below = 0; /* points below the shard's interval */
    double cum = 0.0;
    for (int i = 0; i <= last; i++) {
        if (skip[i] || !(mass[i] > 0.0)) continue;
        size_t upto = need;
        if (i < last) {
            cum += mass[i];
            double x = ceil(cum / sum * B - u);
            upto = x <= 0.0 ? 0 : x >= B ? need : (size_t)x;
            if (upto < below) upto = below;
        }
        cnt[i] = upto - below;
        below = upto;
    }
    return sum;
}

/* Checks one shard's answer to a Sample of j->count rows. */
static fl_status check_sampled(const fl_replay_sharded_t *s, const job_t *j, const fl_replay_batch_t *out,
                               fl_err_t *err) {
    int i = j->shard;
    if (j->meta.count != j->count)
        return fl_err_set(err, FL_DATA_LOSS, "replay shard %d of %d (%s): asked for %zu transitions, got %zu", i, s->n,
                          s->addrs.addr[i], j->count, j->meta.count);
    if (j->meta.shard_id != (uint32_t)i) return wrong_shard(s, i, j->meta.shard_id, err);
    for (size_t r = j->offset; r < j->offset + j->count; r++)
        if (fl_table_key_shard(out->keys[r]) != i)
            return wrong_shard(s, i, (unsigned)fl_table_key_shard(out->keys[r]), err);
    if (!(mass_of(j->meta.mass, j->meta.total) > 0.0))
        return fl_err_set(err, FL_DATA_LOSS, "replay shard %d of %d (%s): a batch drawn from sampling mass %g", i, s->n,
                          s->addrs.addr[i], j->meta.mass);
    return FL_OK;
}

/* A run of rows of the batch that one shard answered. */
typedef struct segment {
    int shard;
    size_t offset, count;
} segment;

/* One fl_replay_sharded_sample call: the shards' answers so far and the rows they filled.
 * Arrays are (n) per shard unless told. */
typedef struct draw {
    fl_replay_sharded_t *s;
    int n;
    size_t batch_size;
    double beta;
    int64_t timeout_ms;
    double deadline;
    fl_replay_batch_t *out;
    job_t *jobs, *active;
    segment *segs;           /* (n * (n + 2)) runs of rows, in batch order */
    size_t nseg, filled;     /* rows [0, filled) of out are answered */
    double *mass;            /* to split by: the last answers */
    size_t *cnt;             /* rows asked of each shard in this pass */
    unsigned char *skip;     /* refused during this call */
    unsigned char *stalled;  /* probe instead of waiting */
    unsigned char *answered; /* figures fresh: this call or recent */
    shard_view *now;         /* what the shards said this call */
    int waiting_pass;        /* nobody served at once: this pass waits on every shard */
    fl_status refusal_st;    /* the first refusal of this call, FL_OK if none */
    fl_err_t refusal;
} draw_t;

static fl_status draw_alloc(draw_t *d, fl_err_t *err) {
    const size_t n = (size_t)d->n;
    d->jobs = calloc(n, sizeof *d->jobs);
    d->active = calloc(n, sizeof *d->active);
    d->segs = calloc(n * (n + 2), sizeof *d->segs);
    d->mass = calloc(n, sizeof *d->mass);
    d->cnt = calloc(n, sizeof *d->cnt);
    d->skip = calloc(n, 1);
    d->stalled = calloc(n, 1);
    d->answered = calloc(n, 1);
    d->now = calloc(n, sizeof *d->now);
    if (!d->jobs || !d->active || !d->segs || !d->mass || !d->cnt || !d->skip || !d->stalled || !d->answered || !d->now)
        return fl_err_set(err, FL_NO_MEMORY, "replay sample: out of memory");
    return FL_OK;
}

static void draw_free(draw_t *d) {
    free(d->jobs);
    free(d->active);
    free(d->segs);
    free(d->mass);
    free(d->cnt);
    free(d->skip);
    free(d->stalled);
    free(d->answered);
    free(d->now);
}

/* The masses to split by: the last call's answers, or a fresh Info round. */
static fl_status draw_masses(draw_t *d, fl_err_t *err) {
    fl_replay_sharded_t *s = d->s;
    pthread_mutex_lock(&s->mu);
    int have = s->have_views;
    double sum = 0.0;
    for (int i = 0; i < d->n; i++) sum += s->views[i].mass;
    pthread_mutex_unlock(&s->mu);
    if (!have || !(sum > 0.0)) FL_TRY(wait_for_mass(s, d->timeout_ms, d->deadline, err));
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < d->n; i++) {
        d->now[i] = s->views[i];
        d->mass[i] = d->now[i].mass;
        d->stalled[i] = (unsigned char)d->now[i].stalled;
    }
    pthread_mutex_unlock(&s->mu);
    double t_call = fl_clock_sec();
    for (int i = 0; i < d->n; i++) d->answered[i] = t_call - d->now[i].seen_at < SHARD_REFRESH_S;
    return FL_OK;
}

/* Splits the missing rows over the shards not refused yet and lays out this pass's
 * calls in d->active (*na of them): a Sample for each shard that gets rows (a probe for a
 * stalled one, unless this pass waits), an Info for each other shard whose figures are
 * not fresh. FL_FAILED_PRECONDITION (or the first refusal) when no shard is left. */
static fl_status plan_pass(draw_t *d, int *na, fl_err_t *err) {
    fl_replay_sharded_t *s = d->s;
    pthread_mutex_lock(&s->mu);
    double u = fl_rng_double(&s->rng);
    pthread_mutex_unlock(&s->mu);
    if (!(split_rows(d->n, d->mass, d->skip, d->batch_size - d->filled, u, d->cnt) > 0.0)) {
        if (d->refusal_st != FL_OK) return fl_err_set(err, d->refusal_st, "%s", d->refusal.msg);
        return fl_err_set(err, FL_FAILED_PRECONDITION, "replay: nothing to sample on any of its %d shards", d->n);
    }
    const int64_t timeout_ms = d->timeout_ms;
    size_t at = d->filled;
    *na = 0;
    for (int i = 0; i < d->n; i++) {
        job_t *j = &d->jobs[i];
        *j = (job_t){.c = s->c[i], .shard = i, .beta = d->beta, .out = d->out};
        if (d->cnt[i] > 0) {
            j->kind = JOB_SAMPLE;
            j->count = d->cnt[i];
            j->offset = at;
            j->probe = d->stalled[i] && !d->waiting_pass;
            j->timeout_ms = timeout_ms > 0 ? ms_left(d->deadline) : timeout_ms;
            at += d->cnt[i];
        } else if (!d->answered[i]) {
            j->kind = JOB_INFO; /* refreshes its mass for the next split */
            j->timeout_ms = timeout_ms > 0 ? ms_left(d->deadline) : s->timeout_ms;
        } else {
            continue;
        }
        d->active[(*na)++] = *j;
    }
    return FL_OK;
}

/* Takes in the answers of this pass's na calls: a refusal leaves its shard out of this
 * call (probed on the next ones); an Info refreshes the shard's figures; a Sample's rows
 * move down to close the gaps left by refused shards. *served receives the rows
 * answered, *probes_refused the probes refused. Any other failure fails the call. */
static fl_status collect_pass(draw_t *d, int na, size_t *served, int *probes_refused, fl_err_t *err) {
    fl_replay_sharded_t *s = d->s;
    *served = 0;
    *probes_refused = 0;
    for (int a = 0; a < na; a++) {
        job_t *j = &d->active[a];
        int i = j->shard;
        shard_view *v = &d->now[i];
        if (j->st == FL_FAILED_PRECONDITION && j->kind == JOB_SAMPLE) {
            if (d->refusal_st == FL_OK) {
                d->refusal_st = j->st;
                fl_err_set(&d->refusal, j->st, "replay shard %d of %d (%s): %s", i, d->n, s->addrs.addr[i], j->err.msg);
            }
            d->skip[i] = 1;
            d->stalled[i] = 1;
            *probes_refused += j->probe;
            continue;
        }
        if (j->st != FL_OK) return first_error(s, j, 1, err);
        d->answered[i] = 1;
        if (j->kind == JOB_INFO) {
            if (j->info.shard_id != (uint32_t)i) return wrong_shard(s, i, j->info.shard_id, err);
            v->total = j->info.total_priority;
            v->mass = mass_of(j->info.sampling_mass, v->total);
            v->size = j->info.size;
            v->seen_at = fl_clock_sec();
            v->min_q = v->total > 0.0 ? j->info.min_priority : 0.0;
            continue;
        }
        FL_TRY(check_sampled(s, j, d->out, err));
        v->total = j->meta.total;
        v->mass = mass_of(j->meta.mass, j->meta.total);
        v->size = j->meta.table_size;
        v->seen_at = fl_clock_sec();
        if (j->meta.min_q > 0.0) v->min_q = j->meta.min_q;
        d->stalled[i] = 0;
        move_rows(d->out, d->filled + *served, j->offset, j->count);
        d->segs[d->nseg++] = (segment){i, d->filled + *served, j->count};
        *served += j->count;
    }
    return FL_OK;
}

/* Passes until the batch is full: split what is missing over the shards not refused
 * yet; a shard that refuses (FAILED_PRECONDITION: too few items, or its rate limiter)
 * is left out and its rows are drawn from the others. A stalled shard is probed without
 * waiting; if nobody serves, one more pass waits on every shard. */
static fl_status draw_rows(draw_t *d, fl_err_t *err) {
    while (d->filled < d->batch_size) {
        int na = 0, probes_refused = 0;
        size_t served = 0;
        FL_TRY(plan_pass(d, &na, err));
        run_jobs(d->s, d->active, na);
        FL_TRY(collect_pass(d, na, &served, &probes_refused, err));
        d->filled += served;
        if (served > 0) continue;
        if (probes_refused && !d->waiting_pass) {
            d->waiting_pass = 1; /* nobody could serve at once: wait on every shard */
            memset(d->skip, 0, (size_t)d->n);
            continue;
        }
        return fl_err_set(err, d->refusal_st, "%s", d->refusal.msg);
    }
    return FL_OK;
}

/* The batch is a draw from the shards that served (all of them, normally): P(i) =
 * P_s(i) M_s / M over those shards (M_s: sampling mass, T_s when prioritized), weights
 * renormalised to their smallest priority. */
static void draw_combine(draw_t *d) {
    fl_replay_batch_t *out = d->out;
    const shard_view *now = d->now;
    double M = 0.0, T = 0.0, qmin = INFINITY; /* sampling mass, priority total */
    uint64_t N = 0;
    for (int i = 0; i < d->n; i++) {
        /* In: every shard that served rows, and every other shard with mass that is not
         * refusing (its figures from this call, or from an answer < SHARD_REFRESH_S old). */
        int served_rows = 0;
        for (size_t k = 0; k < d->nseg; k++) served_rows |= d->segs[k].shard == i;
        if (!(now[i].mass > 0.0) || !(served_rows || (!d->skip[i] && !d->stalled[i]))) continue;
        M += now[i].mass;
        T += now[i].total;
        N += now[i].size;
        if (now[i].min_q > 0.0 && now[i].min_q < qmin) qmin = now[i].min_q;
    }
    const double beta = d->beta;
    for (size_t k = 0; k < d->nseg; k++) {
        const segment *g = &d->segs[k];
        const shard_view *v = &now[g->shard];
        double share = v->mass / M;
        double f = 1.0;
        if (beta > 0.0 && isfinite(qmin) && v->min_q > 0.0) f = pow(qmin / v->min_q, beta);
        for (size_t r = g->offset; r < g->offset + g->count; r++) {
            out->probs[r] *= share;
            if (f != 1.0) {
                float w = (float)((double)out->weights[r] * f);
                out->weights[r] = w > 0.0f ? w : FLT_MIN;
            }
        }
    }
    out->count = d->batch_size;
    out->table_size = N;
    out->total_priority = T;
    out->min_priority = beta > 0.0 && isfinite(qmin) ? qmin : 0.0;
}

/* What the shards said becomes the next split's masses; after a failure (st) the next
 * call asks every shard's Info first. Stalled flags persist either way. */
static void draw_publish(draw_t *d, fl_status st) {
    fl_replay_sharded_t *s = d->s;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < d->n; i++) {
        shard_view *v = &s->views[i];
        const shard_view *now = &d->now[i];
        if (now->seen_at > v->seen_at) {
            v->total = now->total;
            v->mass = now->mass;
            v->size = now->size;
            v->min_q = now->min_q;
            v->seen_at = now->seen_at;
        }
        v->stalled = d->stalled[i];
    }
    s->have_views = st == FL_OK;
    pthread_mutex_unlock(&s->mu);
}

fl_status fl_replay_sharded_sample_updating(fl_replay_sharded_t *s, size_t batch_size, double beta, int64_t timeout_ms,
                                            fl_replay_updates_t *upd, fl_replay_batch_t *out, fl_err_t *err) {
    if (s->n == 1) return fl_replay_sample_updating(s->c[0], batch_size, beta, timeout_ms, upd, out, err);
    if (upd) {
        upd->applied = 0;
        if (upd->n > 0)
            FL_TRY(fl_replay_sharded_update_priorities(s, upd->n, upd->keys, upd->priorities, &upd->applied, err));
    }
    return fl_replay_sharded_sample(s, batch_size, beta, timeout_ms, out, err);
}

fl_status fl_replay_sharded_sample(fl_replay_sharded_t *s, size_t batch_size, double beta, int64_t timeout_ms,
                                   fl_replay_batch_t *out, fl_err_t *err) {
    if (s->n == 1) return fl_replay_sample(s->c[0], batch_size, beta, timeout_ms, out, err);
    if (batch_size == 0 || batch_size > out->capacity || batch_size > UINT32_MAX)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "replay sample: batch_size %zu, expected 1 .. %zu (the batch's capacity)", batch_size,
                          out->capacity);
    if (!(beta >= 0.0 && beta <= 1.0))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay sample: beta %g, expected a value in [0, 1]", beta);
    draw_t d = {.s = s,
                .n = s->n,
                .batch_size = batch_size,
                .beta = beta,
                .timeout_ms = timeout_ms,
                .deadline = fl_clock_sec() + (double)(timeout_ms > 0 ? timeout_ms : s->timeout_ms) * 1e-3,
                .out = out,
                .refusal_st = FL_OK};
    fl_err_init(&d.refusal);
    fl_status st = draw_alloc(&d, err);
    if (st == FL_OK) st = draw_masses(&d, err);
    if (st == FL_OK) st = draw_rows(&d, err);
    if (st == FL_OK) draw_combine(&d);
    if (d.now && d.stalled) draw_publish(&d, st);
    draw_free(&d);
    return st;
}

fl_status fl_replay_sharded_update_priorities(fl_replay_sharded_t *s, size_t n, const uint64_t *keys,
                                              const float *priorities, uint64_t *applied, fl_err_t *err) {
    if (s->n == 1) return fl_replay_update_priorities(s->c[0], n, keys, priorities, applied, err);
    if (applied) *applied = 0;
    if (n == 0) return FL_OK;
    if (!keys || !priorities)
        return fl_err_set(err, FL_INVALID_ARGUMENT, "replay update_priorities: %s is NULL for %zu items",
                          !keys ? "keys" : "priorities", n);
    for (size_t i = 0; i < n; i++)
        if (fl_table_key_shard(keys[i]) >= s->n)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "replay update_priorities: keys[%zu] = %016" PRIx64
                              " names shard %d, expected 0 .. %d "
                              "(%d replay shards)",
                              i, keys[i], fl_table_key_shard(keys[i]), s->n - 1, s->n);
    FL_TRY(fl_wire_check_priorities("replay update_priorities: priorities", n, priorities, err));
    fl_status st = FL_OK;
    size_t *count = calloc((size_t)s->n + 1, sizeof *count);
    uint64_t *k = malloc(n * sizeof *k);
    float *p = malloc(n * sizeof *p);
    job_t *jobs = calloc((size_t)s->n, sizeof *jobs);
    if (!count || !k || !p || !jobs) {
        st = fl_err_set(err, FL_NO_MEMORY, "replay update_priorities: out of memory for %zu keys", n);
        goto done;
    }
    /* Group by shard, keeping each shard's keys in their order (a later duplicate wins). */
    for (size_t i = 0; i < n; i++) count[fl_table_key_shard(keys[i]) + 1]++;
    for (int i = 0; i < s->n; i++) count[i + 1] += count[i];
    int nj = 0;
    for (int i = 0; i < s->n; i++)
        if (count[i + 1] > count[i])
            jobs[nj++] = (job_t){.kind = JOB_UPDATE,
                                 .c = s->c[i],
                                 .shard = i,
                                 .count = count[i + 1] - count[i],
                                 .keys = k + count[i],
                                 .prios = p + count[i]};
    for (size_t i = 0; i < n; i++) {
        size_t at = count[fl_table_key_shard(keys[i])]++;
        k[at] = keys[i];
        p[at] = priorities[i];
    }
    run_jobs(s, jobs, nj);
    for (int i = 0; i < nj; i++)
        if (applied) *applied += jobs[i].applied;
    st = first_error(s, jobs, nj, err);
done:
    free(count);
    free(k);
    free(p);
    free(jobs);
    return st;
}

fl_status fl_replay_sharded_info(fl_replay_sharded_t *s, int64_t timeout_ms, fl_replay_info_t *total,
                                 fl_replay_info_t *per_shard, fl_err_t *err) {
    job_t *jobs = calloc((size_t)s->n, sizeof *jobs);
    if (!jobs) return fl_err_set(err, FL_NO_MEMORY, "replay info: out of memory");
    for (int i = 0; i < s->n; i++)
        jobs[i] = (job_t){.kind = JOB_INFO, .c = s->c[i], .shard = i, .timeout_ms = timeout_ms};
    run_jobs(s, jobs, s->n);
    fl_replay_info_t t;
    memset(&t, 0, sizeof t);
    int answered = 0;
    for (int i = 0; i < s->n; i++) {
        if (jobs[i].st != FL_OK) continue;
        const fl_replay_info_t *in = &jobs[i].info;
        if (per_shard) per_shard[i] = *in;
        t.size += in->size;
        t.capacity += in->capacity;
        t.inserted += in->inserted;
        t.sampled += in->sampled;
        t.insert_batches += in->insert_batches;
        t.updates_applied += in->updates_applied;
        t.updates_stale += in->updates_stale;
        t.sample_calls += in->sample_calls;
        t.rejected += in->rejected;
        t.total_priority += in->total_priority;
        t.sampling_mass += in->sampling_mass;
        t.storage_bytes += in->storage_bytes;
        t.frames += in->frames;
        t.rss_bytes += in->rss_bytes;
        t.private_bytes += in->private_bytes;
        t.cpu_s += in->cpu_s;
        if (in->min_priority > 0.0 && (t.min_priority == 0.0 || in->min_priority < t.min_priority))
            t.min_priority = in->min_priority;
        t.max_priority = fmax(t.max_priority, in->max_priority);
        t.uptime_s = answered++ ? fmin(t.uptime_s, in->uptime_s) : in->uptime_s;
        t.samples_per_insert = fmax(t.samples_per_insert, in->samples_per_insert);
        t.insert_blocked_s += in->insert_blocked_s;
        t.sample_blocked_s += in->sample_blocked_s;
        t.inserts_waiting += in->inserts_waiting;
        t.samples_waiting += in->samples_waiting;
    }
    fl_status st = first_error(s, jobs, s->n, err);
    if (st == FL_OK && total) *total = t;
    free(jobs);
    return st;
}
