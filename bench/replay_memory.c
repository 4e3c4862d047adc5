/* replay_memory: bytes a replay table spends per stored transition, for CartPole-,
 * MinAtar- and Atari-shaped observations, with frames stored raw and zstd-compressed.
 *
 * Each case runs the actor's real pipeline in process: one env instance (random actions),
 * the env wrappers, the 3-step builder (actors/nstep.h, gamma 0.99) and inserts of
 * actor.local_buffer = 50 transitions per call (one actor stream, env.num_envs = 1), into
 * a table of --capacity transitions filled 1.25 times over (so the ring has wrapped and
 * evicted, as in a long run). Then fl_table_info gives:
 *   frames/transition   distinct frames stored per transition (replay/frames.h)
 *   frame B/transition  bytes of the stored frames (compressed with zstd) per transition
 *   total B/transition  everything the table holds (frames, rows, sum-tree) / capacity
 *   naive B/transition  the same table with s and s' copied into every row (16 bytes of
 *                       scalars + 2 * obs bytes, padded as rows are), plus the sum-tree
 * Cases:
 *   cartpole         float32 [4]
 *   minatar          minatar-breakout, uint8 [10, 10, 4]
 *   atari            84x84 grayscale frames of minatar-breakout rendered (the env's RGB
 *                    render, luminance, nearest-neighbour scaled to 84x84) behind the
 *                    framestack(4) wrapper: uint8 [84, 84, 4], as Atari with the
 *                    standard wrappers; the figure of merit is total bytes per
 *                    transition against one 84x84 frame (7,056 bytes)
 * Every case with zstd_level 0 (raw) and --zstd L (default 3).
 *
 *   replay_memory [--capacity N] [--atari-capacity N] [--zstd L] [--case NAME] [--json] */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/nstep.h"
#include "common/rng.h"
#include "envs/registry.h"
#include "envs/core/wrappers.h"
#include "replay/table.h"

#define LOCAL_BUFFER 50
#define NSTEP 3
#define GAMMA 0.99f
#define ATARI_HW 84

/* ---- the Atari-shaped env: minatar-breakout drawn at 84x84 in gray --------------------- */

static const fl_env_def_t *g_inner;

typedef struct {
    uint8_t *rgb; /* render buffer */
} atari_scratch_t;
static atari_scratch_t g_scr;

static void atari_obs(const void *state, uint8_t *obs) {
    const int H = g_inner->render_height, W = g_inner->render_width;
    g_inner->render(state, g_scr.rgb);
    for (int y = 0; y < ATARI_HW; y++)
        for (int x = 0; x < ATARI_HW; x++) {
            const uint8_t *p = g_scr.rgb + ((size_t)(y * H / ATARI_HW) * (size_t)W + (size_t)(x * W / ATARI_HW)) * 3;
            obs[y * ATARI_HW + x] = (uint8_t)((299 * p[0] + 587 * p[1] + 114 * p[2]) / 1000);
        }
}

static void atari_reset(void *state, fl_rng_t *rng, void *obs) {
    uint8_t inner_obs[1024];
    g_inner->reset(state, rng, inner_obs);
    atari_obs(state, obs);
}

static void atari_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    uint8_t inner_obs[1024];
    g_inner->step(state, rng, action, inner_obs, reward, terminated);
    atari_obs(state, obs);
}

static fl_env_def_t g_atari = {
    .abi_version = FL_ENV_ABI_VERSION,
    .name = "breakout84",
    .obs = {.dtype = FL_DTYPE_UINT8, .rank = 3, .shape = {ATARI_HW, ATARI_HW, 1}},
    .max_episode_steps = 0,
    .reset = atari_reset,
    .step = atari_step,
};

/* ---- one case ------------------------------------------------------------------------- */

typedef struct {
    int json;
    long cores;
} out_t;

static int run_case(const out_t *o, const char *name, const fl_env_def_t *def, const char *wrappers, int stack,
                    uint64_t capacity, int zstd) {
    fl_err_t err;
    fl_err_init(&err);
    fl_wrapped_env_t *w = NULL;
    if (fl_wrapped_env_create(def, wrappers, &w, &err) != FL_OK) {
        fprintf(stderr, "replay_memory: %s: %s\n", name, err.msg);
        return 1;
    }
    const fl_env_def_t *info = fl_wrapped_env_info(w);
    size_t ob = fl_wrapped_env_obs_size(w);
    fl_table_config_t cfg;
    fl_table_config_init(&cfg);
    cfg.capacity = capacity;
    cfg.obs = info->obs;
    cfg.frame_stack = stack;
    cfg.zstd_level = zstd;
    fl_table_t *t = NULL;
    fl_nstep_t *ns = NULL;
    void *state = calloc(1, fl_wrapped_env_state_size(w));
    uint8_t *obs = malloc(ob), *next = malloc(ob);
    float prios[4 * LOCAL_BUFFER];
    for (int i = 0; i < 4 * LOCAL_BUFFER; i++) prios[i] = 1.0f;
    int rc = 1;
    if (fl_table_create(&cfg, &t, &err) != FL_OK || fl_nstep_create(1, NSTEP, GAMMA, ob, &ns, &err) != FL_OK) {
        fprintf(stderr, "replay_memory: %s: %s\n", name, err.msg);
        goto done;
    }
    fl_rng_t rng;
    fl_rng_init(&rng, 5);
    fl_wrapped_env_reset(w, state, &rng, obs);
    uint64_t want = capacity + capacity / 4, inserted = 0;
    while (inserted < want) {
        int32_t a = (int32_t)fl_rng_below(&rng, (uint64_t)info->num_actions);
        float r = 0;
        int term = 0, trunc = 0;
        fl_wrapped_env_step(w, state, &rng, a, next, &r, &term, &trunc);
        uint8_t te = (uint8_t)term, tr = (uint8_t)trunc;
        if (fl_nstep_push(ns, obs, &a, &r, &te, &tr, next) != FL_OK) goto done;
        if (term || trunc)
            fl_wrapped_env_reset(w, state, &rng, obs);
        else
            memcpy(obs, next, ob);
        if (fl_nstep_ready(ns) >= LOCAL_BUFFER) {
            fl_nstep_batch_t b;
            fl_nstep_view(ns, &b);
            if (fl_table_insert(t, b.count, b.obs, b.action, b.reward, b.discount, b.next_obs, prios, NULL, &err) !=
                FL_OK) {
                fprintf(stderr, "replay_memory: %s: %s\n", name, err.msg);
                goto done;
            }
            inserted += b.count;
            fl_nstep_clear(ns);
        }
    }
    fl_table_info_t in;
    fl_table_info(t, &in);
    double n = (double)in.size;
    double frames = (double)in.frames / n, frame_b = (double)in.frame_bytes / n;
    double total = (double)in.storage_bytes / (double)capacity;
    double tree = total - (double)in.frame_bytes / (double)capacity - (double)in.row_bytes; /* per slot */
    size_t row = 16 + 2 * ob, padded = 16;
    if (row <= 64) {
        while (padded < row) padded *= 2;
    } else {
        padded = (row + 63) / 64 * 64;
    }
    double naive = (double)padded + tree;
    if (o->json) {
        printf(
            "{\"bench\":\"replay_memory\",\"case\":\"%s\",\"zstd\":%d,\"obs_bytes\":%zu,\"frames_per_item\":%.4f,"
            "\"frame_bytes_per_item\":%.1f,\"total_bytes_per_item\":%.1f,\"naive_bytes_per_item\":%.1f,"
            "\"capacity\":%" PRIu64 ",\"cores\":%ld}\n",
            name, zstd, ob, frames, frame_b, total, naive, capacity, o->cores);
    } else {
        printf(
            "  %-9s zstd %-2d obs %6zu B   frames/item %5.3f   frame B/item %8.1f   total B/item %8.1f   naive %8.1f"
            "   (%.2fx smaller)",
            name, zstd, ob, frames, frame_b, total, naive, naive / total);
        if (stack > 1) printf("   total / one 84x84 frame = %.3f", total / (double)(ATARI_HW * ATARI_HW));
        printf("\n");
    }
    fflush(stdout);
    rc = 0;
done:
    fl_table_destroy(t);
    fl_nstep_destroy(ns);
    fl_wrapped_env_destroy(w);
    free(state);
    free(obs);
    free(next);
    return rc;
}

int main(int argc, char **argv) {
    out_t o = {0, sysconf(_SC_NPROCESSORS_ONLN)};
    uint64_t capacity = 200000, atari_capacity = 30000;
    int zstd = 3;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            o.json = 1;
        else if (!strcmp(argv[i], "--capacity") && i + 1 < argc)
            capacity = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--atari-capacity") && i + 1 < argc)
            atari_capacity = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--zstd") && i + 1 < argc)
            zstd = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(
                stderr,
                "usage: replay_memory [--capacity N] [--atari-capacity N] [--zstd L] [--case cartpole|minatar|atari] "
                "[--json]\n");
            return 2;
        }
    }
    if (capacity < 1000 || atari_capacity < 1000 || zstd < 1 || zstd > 19) {
        fprintf(stderr, "replay_memory: capacities must be >= 1000 and --zstd 1 .. 19\n");
        return 2;
    }
    g_inner = fl_env_find("minatar-breakout");
    const fl_env_def_t *cartpole = fl_env_find("cartpole");
    if (!g_inner || !cartpole || !g_inner->render) {
        fprintf(stderr, "replay_memory: cartpole and minatar-breakout must be built in\n");
        return 1;
    }
    g_atari.num_actions = g_inner->num_actions;
    g_atari.state_size = g_inner->state_size;
    g_scr.rgb = malloc((size_t)g_inner->render_height * (size_t)g_inner->render_width * 3);
    if (!o.json)
        printf("replay_memory: one actor stream, %d-step, inserts of %d, %ld cores online\n", NSTEP, LOCAL_BUFFER,
               o.cores);
    int rc = 0;
    for (int level = 0; level <= 1 && rc == 0; level++) {
        int z = level ? zstd : 0;
        if (!only || !strcmp(only, "cartpole")) rc |= run_case(&o, "cartpole", cartpole, "", 1, capacity, z);
        if (!only || !strcmp(only, "minatar")) rc |= run_case(&o, "minatar", g_inner, "", 1, capacity, z);
        if (!only || !strcmp(only, "atari"))
            rc |= run_case(&o, "atari", &g_atari, "framestack(4)", 4, atari_capacity, z);
    }
    free(g_scr.rgb);
    return rc;
}
