/* replay_bench: in-process throughput of one replay table and its sum-tree (no RPC).
 *
 * A table of capacity 2,000,000 (Ape-X) with CartPole-sized observations (float32[4]),
 * one thread, alpha 0.6, for each selector:
 *  - insert in batches of 50 (an actor's local buffer, Ape-X), filling and wrapping the ring;
 *  - sample in batches of 512 (the learner batch) at beta 0.4, once with every output
 *    column and once with keys, probabilities and weights only (counted in items);
 *  - priority updates in batches of 512: the keys of earlier sampled batches, and keys of
 *    live items drawn at random.
 * The fifo table uses max_times_sampled = 1 (a queue), so that a batch is 512 different
 * items; its updates use random live keys only (sampled keys are gone). Then the bare
 * sum-tree: 512-leaf set_many of random leaves and stratified samples of 512.
 * Inputs are generated before the clock starts. Rates are per core: the clock is the
 * thread's CPU time, so that other processes on a busy machine do not halve them (--wall
 * times with the monotonic clock instead, for an idle machine). Pin it to one core for
 * figures of one core's caches (taskset -c 1 replay_bench).
 *
 *   replay_bench [--json] [--wall] [--scale X] [--capacity N] [--selector prioritized|uniform|fifo]
 *   (--scale multiplies the amount of work) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rng.h"
#include "replay/sumtree.h"
#include "replay/table.h"

#define OBS_DIM 4
#define INSERT_BATCH 50
#define SAMPLE_BATCH 512
#define POOL 64

typedef struct {
    int json;
    long cores;
} report_t;

static void report(const report_t *r, const char *name, const char *label, double value, const char *unit) {
    if (r->json)
        printf("{\"bench\":\"replay_table\",\"case\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"cores\":%ld}\n", name,
               value, unit, r->cores);
    else
        printf("  %-44s %14.0f  %s\n", label, value, unit);
    fflush(stdout);
}

static int g_wall;

/* Seconds of the calling thread's CPU time (or of the monotonic clock with --wall). */
static double now(void) {
    if (g_wall) return fl_clock_sec();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int die(const char *what, fl_status s, const fl_err_t *err) {
    fprintf(stderr, "replay_bench: %s: %s (%s)\n", what, fl_status_str(s), err->msg);
    return 1;
}

/* A pool of distinct input batches, reused round-robin. */
static float g_obs[POOL][INSERT_BATCH * OBS_DIM], g_next[POOL][INSERT_BATCH * OBS_DIM];
static float g_rewards[POOL][INSERT_BATCH], g_discounts[POOL][INSERT_BATCH], g_prios[POOL][INSERT_BATCH];
static int32_t g_actions[POOL][INSERT_BATCH];
static float g_new_prios[POOL][SAMPLE_BATCH];
static uint64_t g_keys[POOL][SAMPLE_BATCH];
/* sample outputs */
static double g_probs[SAMPLE_BATCH];
static float g_weights[SAMPLE_BATCH], g_s_obs[SAMPLE_BATCH * OBS_DIM], g_s_next[SAMPLE_BATCH * OBS_DIM];
static float g_s_rew[SAMPLE_BATCH], g_s_disc[SAMPLE_BATCH];
static int32_t g_s_act[SAMPLE_BATCH];

static void make_inputs(void) {
    fl_rng_t rng;
    fl_rng_init(&rng, 2);
    for (int p = 0; p < POOL; p++) {
        for (int i = 0; i < INSERT_BATCH * OBS_DIM; i++) {
            g_obs[p][i] = (float)fl_rng_normal(&rng);
            g_next[p][i] = (float)fl_rng_normal(&rng);
        }
        for (int i = 0; i < INSERT_BATCH; i++) {
            g_actions[p][i] = (int32_t)fl_rng_below(&rng, 2);
            g_rewards[p][i] = 1.0f;
            g_discounts[p][i] = fl_rng_below(&rng, 20) == 0 ? 0.0f : 0.970299f;
            g_prios[p][i] = 2.0f * fl_rng_float(&rng);
        }
        for (int i = 0; i < SAMPLE_BATCH; i++) g_new_prios[p][i] = 2.0f * fl_rng_float(&rng);
    }
}

/* Keys of live items drawn at random: the live ones are [inserted - size, inserted) for
 * every table here (fifo removes from the front only). */
static void random_live_keys(fl_table_t *t, fl_rng_t *rng) {
    fl_table_info_t info;
    fl_table_info(t, &info);
    for (int p = 0; p < POOL; p++)
        for (int i = 0; i < SAMPLE_BATCH; i++)
            g_keys[p][i] = fl_table_key_make(0, info.inserted - info.size + fl_rng_below(rng, info.size));
}

static int time_updates(const report_t *rep, fl_table_t *t, size_t batches, const char *name, const char *label) {
    fl_err_t err = {0};
    size_t applied_total = 0;
    double t0 = now();
    for (size_t b = 0; b < batches; b++) {
        size_t applied = 0;
        fl_status s =
            fl_table_update_priorities(t, SAMPLE_BATCH, g_keys[b % POOL], g_new_prios[b % POOL], &applied, &err);
        if (s != FL_OK) return die("update_priorities", s, &err);
        applied_total += applied;
    }
    double dt = now() - t0;
    if (applied_total != batches * SAMPLE_BATCH) {
        fprintf(stderr, "replay_bench: %s: %zu of %zu updates applied\n", name, applied_total, batches * SAMPLE_BATCH);
        return 1;
    }
    report(rep, name, label, (double)(batches * SAMPLE_BATCH) / dt, "updates/s");
    return 0;
}

static int bench_selector(const report_t *rep, fl_selector sel, uint64_t capacity, double scale) {
    const size_t insert_batches = (size_t)((double)capacity * 1.5 / INSERT_BATCH * scale); /* fills and wraps */
    /* fifo consumes what it samples: both sample cases together take half the table. */
    const size_t sample_batches =
        sel == FL_SELECTOR_FIFO ? (size_t)((double)capacity / 4 / SAMPLE_BATCH) : (size_t)(4000 * scale);
    const size_t update_batches = (size_t)(4000 * scale);
    const char *sn = fl_selector_name(sel);
    char name[96], label[96];

    fl_table_config_t cfg;
    fl_table_config_init(&cfg);
    cfg.capacity = capacity;
    cfg.obs.dtype = FL_DTYPE_FLOAT32;
    cfg.obs.rank = 1;
    cfg.obs.shape[0] = OBS_DIM;
    cfg.seed = 1;
    cfg.selector = sel;
    cfg.max_times_sampled = sel == FL_SELECTOR_FIFO ? 1 : 0;
    fl_table_t *t = NULL;
    fl_err_t err = {0};
    fl_status s = fl_table_create(&cfg, &t, &err);
    if (s != FL_OK) return die("create", s, &err);

    double t0 = now();
    for (size_t b = 0; b < insert_batches; b++) {
        size_t p = b % POOL;
        s = fl_table_insert(t, INSERT_BATCH, g_obs[p], g_actions[p], g_rewards[p], g_discounts[p], g_next[p],
                            g_prios[p], NULL, &err);
        if (s != FL_OK) return die("insert", s, &err);
    }
    double dt = now() - t0;
    snprintf(name, sizeof(name), "%s_insert_items_per_s", sn);
    snprintf(label, sizeof(label), "%s: insert (batch %d)", sn, INSERT_BATCH);
    report(rep, name, label, (double)(insert_batches * INSERT_BATCH) / dt, "items/s");

    for (int cols = 1; cols >= 0; cols--) {
        t0 = now();
        for (size_t b = 0; b < sample_batches; b++) {
            s = cols ? fl_table_sample(t, SAMPLE_BATCH, 0.4, g_keys[b % POOL], g_probs, g_weights, g_s_obs, g_s_act,
                                       g_s_rew, g_s_disc, g_s_next, &err)
                     : fl_table_sample(t, SAMPLE_BATCH, 0.4, g_keys[b % POOL], g_probs, g_weights, NULL, NULL, NULL,
                                       NULL, NULL, &err);
            if (s != FL_OK) return die("sample", s, &err);
        }
        dt = now() - t0;
        snprintf(name, sizeof(name), "%s_sample_%s_items_per_s", sn, cols ? "all_columns" : "keys_only");
        snprintf(label, sizeof(label), "%s: sample (batch %d), %s", sn, SAMPLE_BATCH,
                 cols ? "all columns" : "keys/probs/weights");
        report(rep, name, label, (double)(sample_batches * SAMPLE_BATCH) / dt, "items/s");
    }

    if (sel != FL_SELECTOR_FIFO) {
        snprintf(name, sizeof(name), "%s_update_sampled_keys_per_s", sn);
        snprintf(label, sizeof(label), "%s: update priorities (%d sampled keys)", sn, SAMPLE_BATCH);
        if (time_updates(rep, t, update_batches, name, label)) return 1;
    }
    fl_rng_t rng;
    fl_rng_init(&rng, 3);
    random_live_keys(t, &rng);
    snprintf(name, sizeof(name), "%s_update_random_keys_per_s", sn);
    snprintf(label, sizeof(label), "%s: update priorities (%d random keys)", sn, SAMPLE_BATCH);
    if (time_updates(rep, t, update_batches, name, label)) return 1;

    if (fl_table_verify(t, &err) != FL_OK) return die("verify", FL_INTERNAL, &err);
    fl_table_destroy(t);
    return 0;
}

static int bench_sumtree(const report_t *rep, uint64_t capacity, double scale) {
    fl_sumtree_t *tree = NULL;
    fl_err_t err = {0};
    fl_status s = fl_sumtree_create(capacity, &tree, &err);
    if (s != FL_OK) return die("sumtree create", s, &err);
    fl_rng_t rng;
    fl_rng_init(&rng, 4);
    double *vals = malloc(capacity * sizeof(double));
    uint64_t(*idx)[SAMPLE_BATCH] = malloc(POOL * sizeof(*idx));
    double(*nv)[SAMPLE_BATCH] = malloc(POOL * sizeof(*nv));
    uint64_t out[SAMPLE_BATCH];
    if (!vals || !idx || !nv) {
        fprintf(stderr, "replay_bench: out of memory\n");
        return 1;
    }
    for (uint64_t i = 0; i < capacity; i++) vals[i] = fl_rng_double(&rng);
    fl_sumtree_set_range(tree, 0, capacity, vals);
    for (int p = 0; p < POOL; p++)
        for (int i = 0; i < SAMPLE_BATCH; i++) {
            idx[p][i] = fl_rng_below(&rng, capacity);
            nv[p][i] = fl_rng_double(&rng);
        }
    const size_t batches = (size_t)(4000 * scale);
    double t0 = now();
    for (size_t b = 0; b < batches; b++) fl_sumtree_set_many(tree, SAMPLE_BATCH, idx[b % POOL], nv[b % POOL], NULL);
    double dt = now() - t0;
    report(rep, "sumtree_set_many_random_per_s", "sumtree: set_many (512 random leaves)",
           (double)(batches * SAMPLE_BATCH) / dt, "updates/s");
    t0 = now();
    for (size_t b = 0; b < batches; b++) fl_sumtree_sample_stratified(tree, &rng, SAMPLE_BATCH, out, NULL);
    dt = now() - t0;
    report(rep, "sumtree_stratified_per_s", "sumtree: stratified sample (512)", (double)(batches * SAMPLE_BATCH) / dt,
           "items/s");
    t0 = now();
    fl_sumtree_rebuild(tree);
    dt = now() - t0;
    report(rep, "sumtree_rebuild_ms", "sumtree: full rebuild", dt * 1e3, "ms");
    free(vals);
    free(idx);
    free(nv);
    fl_sumtree_destroy(tree);
    return 0;
}

int main(int argc, char **argv) {
    report_t rep = {.json = 0, .cores = sysconf(_SC_NPROCESSORS_ONLN)};
    double scale = 1.0;
    uint64_t capacity = 2000000;
    int only = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            rep.json = 1;
        } else if (strcmp(argv[i], "--wall") == 0) {
            g_wall = 1;
        } else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
            scale = atof(argv[++i]);
            if (!(scale > 0.0)) {
                fprintf(stderr, "replay_bench: --scale %s: expected a number > 0\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--capacity") == 0 && i + 1 < argc) {
            capacity = strtoull(argv[++i], NULL, 10);
            if (capacity < SAMPLE_BATCH * 4 || capacity > (UINT64_C(1) << 32)) {
                fprintf(stderr, "replay_bench: --capacity %s: expected %d .. 2^32\n", argv[i], SAMPLE_BATCH * 4);
                return 2;
            }
        } else if (strcmp(argv[i], "--selector") == 0 && i + 1 < argc) {
            fl_selector sel;
            fl_err_t err = {0};
            if (fl_selector_parse(argv[++i], &sel, &err) != FL_OK) {
                fprintf(stderr, "replay_bench: --%s\n", err.msg);
                return 2;
            }
            only = (int)sel;
        } else {
            fprintf(stderr,
                    "usage: replay_bench [--json] [--wall] [--scale X] [--capacity N] "
                    "[--selector prioritized|uniform|fifo]\n");
            return 2;
        }
    }
    make_inputs();
    if (!rep.json) {
        printf("replay_table: capacity %llu, obs float32[%d], 1 thread, %ld cores online, %s time\n",
               (unsigned long long)capacity, OBS_DIM, rep.cores, g_wall ? "wall" : "CPU");
        printf("  %-44s %14s  %s\n", "case", "value", "unit");
    }
    const fl_selector all[] = {FL_SELECTOR_PRIORITIZED, FL_SELECTOR_UNIFORM, FL_SELECTOR_FIFO};
    for (int k = 0; k < 3; k++)
        if (only < 0 || only == (int)all[k])
            if (bench_selector(&rep, all[k], capacity, scale)) return 1;
    if (only < 0 && bench_sumtree(&rep, capacity, scale)) return 1;
    return 0;
}
