/* `fleet env check NAME [--plugin PATH] [options]`: does an env keep the contract of
 * <fleet/env.h>? What Gymnasium's check_env does for Python envs, for fleet's C ones.
 *
 * The env runs as a run's actors run it: inside fleet's wrapper with no wrappers
 * (envs/core/wrappers.h, which applies the env's max_episode_steps as truncation, a step
 * that terminates at the limit being terminated only), configured with the [env]
 * options of a run (defaults, or the ones given here), instance 0 of --seed. Between the
 * wrapper and the env sits a probe: a copy of the definition whose functions call the
 * env's own and note what the wrapper would hide (the raw terminal flag) or what fleet
 * cannot see (writes past state_size, into a guard region the probe adds to the state).
 * The probe lives in a file-level variable: the check is one thread, and an env
 * definition has no user pointer.
 *
 * It plays --episodes episodes of random actions (each cut at --steps steps, the
 * check's own cap, so that an env without a time limit ends too) three times: with
 * --seed, again with --seed (the same episodes must come out byte for byte:
 * observations, rewards, flags), and with the env seeded --seed + 1 and the same actions
 * (a different trajectory is expected, a warning when not). Each reset and step of the
 * first play is checked: the observation written within its size (guard regions before
 * and after it), float observations finite, the terminal flag 0 or 1, the reward finite, the state
 * within state_size. Before every call the observation buffer is filled with a byte
 * that differs between the first and the second play, so bytes an env leaves unwritten
 * show as a difference of exactly those bytes. render, when present, is called after
 * each reset, the first steps and the last step of every episode of the first play,
 * twice into buffers filled differently with a guard after them: it must write its
 * render_height x render_width x 3 bytes, nothing past them, the same image twice, and
 * leave the state as it was. action_name, when present, must name every action.
 * Steps/s come from `fleet env bench`'s single-instance loop, for a quarter second.
 *
 * Output: one line per check, PASS / WARN / FAIL (SKIP for an optional function the env
 * does not have, INFO for the speed), each naming the field, the value found and the
 * one expected; then a summary line. A crash (a signal in the env's code) is reported
 * with the call, the episode and the step it happened in. Exit status: 0 when no check
 * failed (warnings allowed), 1 when one did, 2 for usage and configuration errors (an
 * unknown env, a plugin that does not load, a bad option). */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/obs.h"
#include "common/rng.h"
#include "envs/factory.h"
#include "cli/verbs.h"

#define ACTION_STREAM (1u << 20) /* the action generator's stream, as play and record draw */
#define GUARD 64                 /* bytes before and after an observation, after the state */
#define RENDER_GUARD 256         /* bytes after an image */
#define GUARD_BYTE 0xA7
#define FILL_FIRST 0xA5                   /* the observation and image buffers before each call of the first play */
#define FILL_SECOND 0x5A                  /* ... and of the second */
#define KEEP_OBS_BYTES ((size_t)16 << 20) /* whole observations kept for the comparison up to this much */
#define RENDER_FIRST_STEPS 3              /* renders after reset, these steps and the last of an episode */
#define SPEED_S 0.25
#define MSG 400

/* ---- The probe between the wrapper and the env ----------------------------------------- */

/* Where the check is, for messages and for a crash: the env's function being called
 * (NULL between calls), the play (1..3, 0 outside), the episode and the step (0: reset). */
static const char *volatile g_call;
static volatile long g_play, g_episode, g_step;

static struct probe {
    const fl_env_def_t *real;           /* the env's own definition */
    fl_env_def_t def;                   /* its copy with the probe's functions and GUARD more bytes of state */
    int raw_terminated;                 /* what the last step wrote into *terminated */
    const char *overrun_in;             /* the first call that wrote past state_size, or NULL */
    size_t overrun_at;                  /* ... the first guard byte it changed */
    long overrun_episode, overrun_step; /* ... and where (episode 0: configure) */
} g_probe;

/* Checks the state's guard after a call of the env and arms it again. */
static void probe_guard(void *state, const char *call) {
    uint8_t *guard = (uint8_t *)state + g_probe.real->state_size;
    for (size_t i = 0; i < GUARD; i++)
        if (guard[i] != GUARD_BYTE) {
            if (!g_probe.overrun_in) {
                g_probe.overrun_in = call;
                g_probe.overrun_at = i;
                g_probe.overrun_episode = g_episode;
                g_probe.overrun_step = g_step;
            }
            break;
        }
    memset(guard, GUARD_BYTE, GUARD);
}

static void probe_reset(void *state, fl_rng_t *rng, void *obs) {
    g_probe.real->reset(state, rng, obs);
    probe_guard(state, "reset");
}

static void probe_step(void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated) {
    g_probe.real->step(state, rng, action, obs, reward, terminated);
    g_probe.raw_terminated = *terminated;
    probe_guard(state, "step");
}

static int probe_configure(void *state, const fl_env_options_t *opts) {
    int rc = g_probe.real->configure(state, opts);
    probe_guard(state, "configure");
    return rc;
}

static void probe_init(const fl_env_def_t *real) {
    memset(&g_probe, 0, sizeof g_probe);
    g_probe.real = real;
    /* name, spaces, limit, render, action_name and close as they are; a version-2
     * definition ends before close, so it is not read there */
    if (real->abi_version >= 3)
        g_probe.def = *real;
    else
        memcpy(&g_probe.def, real, offsetof(fl_env_def_t, close));
    g_probe.def.state_size = real->state_size + GUARD;
    g_probe.def.reset = probe_reset;
    g_probe.def.step = probe_step;
    g_probe.def.configure = real->configure ? probe_configure : NULL;
}

/* ---- Where the env is, for messages and for a crash ----------------------------------- */

/* Appends s to buf (async-signal-safe). */
static void put_str(char *buf, size_t *n, size_t cap, const char *s) {
    while (*s && *n + 1 < cap) buf[(*n)++] = *s++;
}

static void put_long(char *buf, size_t *n, size_t cap, long v) {
    char d[24];
    int k = 0;
    unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
    do d[k++] = (char)('0' + u % 10);
    while ((u /= 10) && k < 22);
    if (v < 0) d[k++] = '-';
    while (k && *n + 1 < cap) buf[(*n)++] = d[--k];
}

/* A signal in the env's code: one FAIL line naming the call, the play, the episode and
 * the step, and exit status 1. */
static void on_crash(int sig) {
    char buf[320];
    size_t n = 0;
    const char *name = sig == SIGSEGV  ? "SIGSEGV"
                       : sig == SIGBUS ? "SIGBUS"
                       : sig == SIGFPE ? "SIGFPE"
                       : sig == SIGILL ? "SIGILL"
                                       : "SIGABRT";
    put_str(buf, &n, sizeof buf, "FAIL  crash         ");
    put_str(buf, &n, sizeof buf, name);
    const char *call = g_call;
    put_str(buf, &n, sizeof buf, call ? " in the env's " : " (not in a call of the env)");
    if (call) put_str(buf, &n, sizeof buf, call);
    if (g_play > 0) {
        put_str(buf, &n, sizeof buf, " (play ");
        put_long(buf, &n, sizeof buf, g_play);
        put_str(buf, &n, sizeof buf, ", episode ");
        put_long(buf, &n, sizeof buf, g_episode);
        put_str(buf, &n, sizeof buf, g_step ? ", step " : ", reset");
        if (g_step) put_long(buf, &n, sizeof buf, g_step);
        put_str(buf, &n, sizeof buf, ")");
    }
    put_str(buf, &n, sizeof buf, "\nfleet env check: the env crashed; the checks after it did not run\n");
    ssize_t w = write(STDOUT_FILENO, buf, n);
    (void)w;
    _exit(1);
}

static void catch_crashes(void) {
    static char altstack[1 << 16]; /* so that a stack overflow in the env is reported too */
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}

/* "episode 2, step 17" or "episode 2, reset". */
static const char *where(char *buf, size_t len, long episode, long step) {
    if (step)
        snprintf(buf, len, "episode %ld, step %ld", episode, step);
    else
        snprintf(buf, len, "episode %ld, reset", episode);
    return buf;
}

/* ---- Observations ------------------------------------------------------------------- */

/* "obs[3]" or "obs[2, 4, 1]" for element i. */
static void element_name(const fl_env_def_t *def, size_t i, char *buf, size_t len) {
    size_t idx[FL_ENV_MAX_RANK];
    for (int d = def->obs.rank - 1; d >= 0; d--) {
        idx[d] = i % (size_t)def->obs.shape[d];
        i /= (size_t)def->obs.shape[d];
    }
    int n = snprintf(buf, len, "obs[");
    for (int d = 0; d < def->obs.rank && n > 0 && (size_t)n < len; d++)
        n += snprintf(buf + n, len - (size_t)n, "%s%zu", d ? ", " : "", idx[d]);
    if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, "]");
}

/* Element i's value as text. */
static void element_value(fl_dtype dt, const void *obs, size_t i, char *buf, size_t len) {
    switch (dt) {
    case FL_DTYPE_FLOAT32: snprintf(buf, len, "%.9g", (double)((const float *)obs)[i]); break;
    case FL_DTYPE_UINT8: snprintf(buf, len, "%u", ((const uint8_t *)obs)[i]); break;
    case FL_DTYPE_INT32: snprintf(buf, len, "%d", (int)((const int32_t *)obs)[i]); break;
    case FL_DTYPE_INT64: snprintf(buf, len, "%lld", (long long)((const int64_t *)obs)[i]); break;
    case FL_DTYPE_BFLOAT16: {
        uint32_t bits = (uint32_t)((const uint16_t *)obs)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        snprintf(buf, len, "%.4g", (double)f);
        break;
    }
    default: snprintf(buf, len, "?"); break;
    }
}

/* The first element that is not a finite number (float32 and bfloat16), or -1. */
static long first_nonfinite(const fl_env_def_t *def, const void *obs) {
    size_t n = fl_env_obs_count(def);
    if (def->obs.dtype == FL_DTYPE_FLOAT32) {
        const float *f = obs;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(f[i])) return (long)i;
    } else if (def->obs.dtype == FL_DTYPE_BFLOAT16) {
        const uint16_t *b = obs;
        for (size_t i = 0; i < n; i++)
            if ((b[i] & 0x7F80u) == 0x7F80u) return (long)i;
    }
    return -1;
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 33);
}

/* ---- A play of the episodes ---------------------------------------------------------- */

/* One reset or step as the comparison sees it. */
typedef struct rec {
    uint64_t hash;   /* of the observation's bytes */
    uint32_t reward; /* the reward's bits */
    uint8_t terminated, truncated;
} rec_t;

/* The first play's records, and its observations when they fit KEEP_OBS_BYTES. */
typedef struct trace {
    rec_t *rec;
    size_t n, cap;
    uint8_t *obs; /* n observations, or NULL */
    size_t obs_cap;
    uint8_t fill;
} trace_t;

typedef struct check_opts {
    const char *name;
    fl_env_cli_opts_t e;
    int64_t episodes, cap;
} check_opts_t;

typedef struct check {
    const check_opts_t *o;
    const fl_env_def_t *def; /* the env's own definition */
    fl_wrapped_env_t *w;     /* the probe in fleet's wrapper */
    size_t obs_size, state_size, img;
    uint8_t *state, *obs, *saved, *rgb[2]; /* obs: GUARD bytes into its buffer obs_buf */
    uint8_t *obs_buf;
    trace_t trace;
    /* the first play */
    long resets, steps, terminated, truncated, capped, term_at_limit;
    double rmin, rmax;
    char obs_fail[MSG], flag_fail[MSG], reward_fail[MSG];
    int render_calls;
    char render_fail[MSG];
    int configure_failed;
} check_t;

/* One play: its seed, its fill byte, and what it does with its records. */
typedef struct play {
    int index;     /* 1, 2, 3: g_play */
    int unwritten; /* diff is about observation bytes the env left unwritten */
    uint64_t env_seed;
    uint8_t fill;
    int first;      /* the first play: checks every call, renders, keeps the trace */
    size_t n;       /* records so far */
    char diff[MSG]; /* the first difference from the trace (plays 2 and 3) */
} play_t;

/* Compares this play's observation and record with the trace's record i (plays 2 and 3);
 * fills p->diff at the first difference. */
static void compare(check_t *c, play_t *p, size_t i, const rec_t *r, long episode, long step) {
    char at[64];
    where(at, sizeof at, episode, step);
    const trace_t *t = &c->trace;
    if (i >= t->n) {
        snprintf(p->diff, sizeof p->diff, "%s: the first play had no more steps", at);
        return;
    }
    const rec_t *q = &t->rec[i];
    if (q->terminated != r->terminated || q->truncated != r->truncated) {
        snprintf(p->diff, sizeof p->diff, "%s: terminated %d, truncated %d the first time, %d and %d now", at,
                 q->terminated, q->truncated, r->terminated, r->truncated);
        return;
    }
    if (q->reward != r->reward) {
        float a, b;
        memcpy(&a, &q->reward, sizeof a);
        memcpy(&b, &r->reward, sizeof b);
        snprintf(p->diff, sizeof p->diff, "%s: reward %.9g the first time, %.9g now", at, (double)a, (double)b);
        return;
    }
    if (q->hash == r->hash) return;
    if (!t->obs) {
        snprintf(p->diff, sizeof p->diff, "%s: the observation differs (checksums %016llx and %016llx)", at,
                 (unsigned long long)q->hash, (unsigned long long)r->hash);
        return;
    }
    /* Byte for byte: bytes that still hold each play's fill were not written. */
    const uint8_t *a = t->obs + i * c->obs_size, *b = c->obs;
    size_t first = SIZE_MAX, last = 0, differ = 0, unwritten = 0;
    for (size_t k = 0; k < c->obs_size; k++)
        if (a[k] != b[k]) {
            if (first == SIZE_MAX) first = k;
            last = k;
            differ++;
            unwritten += a[k] == t->fill && b[k] == p->fill;
        }
    size_t es = fl_dtype_size(c->def->obs.dtype), e = first / es;
    char name[64], va[48], vb[48];
    element_name(c->def, e, name, sizeof name);
    if (unwritten == differ) {
        p->unwritten = 1;
        snprintf(p->diff, sizeof p->diff,
                 "%s: %s left %zu of the observation's %zu bytes unwritten (bytes %zu..%zu, from %s): they kept "
                 "what the buffer held before the call",
                 at, step ? "step" : "reset", differ, c->obs_size, first, last, name);
        return;
    }
    element_value(c->def->obs.dtype, a, e, va, sizeof va);
    element_value(c->def->obs.dtype, b, e, vb, sizeof vb);
    snprintf(p->diff, sizeof p->diff, "%s: %s is %s the first time, %s now", at, name, va, vb);
}

/* Records one reset or step of play p: into the trace (the first play), or compared
 * with it. */
static fl_status note(check_t *c, play_t *p, float reward, int terminated, int truncated, long episode, long step,
                      fl_err_t *err) {
    rec_t r;
    memset(&r, 0, sizeof r);
    r.hash = hash_bytes(c->obs, c->obs_size);
    memcpy(&r.reward, &reward, sizeof r.reward);
    r.terminated = (uint8_t)terminated;
    r.truncated = (uint8_t)truncated;
    size_t i = p->n++;
    if (!p->first) {
        if (!p->diff[0]) compare(c, p, i, &r, episode, step);
        return FL_OK;
    }
    trace_t *t = &c->trace;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        rec_t *nr = realloc(t->rec, cap * sizeof *nr);
        if (!nr) return fl_err_set(err, FL_NO_MEMORY, "out of memory for %zu steps", cap);
        t->rec = nr;
        t->cap = cap;
    }
    if (t->obs && t->n < t->obs_cap) {
        memcpy(t->obs + t->n * c->obs_size, c->obs, c->obs_size);
    } else if (t->obs) { /* more steps than planned: compare by checksum alone */
        free(t->obs);
        t->obs = NULL;
    }
    t->rec[t->n++] = r;
    return FL_OK;
}

/* The observation's checks after a reset or step of the first play. */
static void check_obs(check_t *c, long episode, long step) {
    if (c->obs_fail[0]) return;
    char at[64], shape[64];
    where(at, sizeof at, episode, step);
    fl_obs_spec_format_shape(&c->def->obs, shape, sizeof shape);
    for (size_t i = 0; i < GUARD; i++)
        if (c->obs[-1 - (ptrdiff_t)i] != GUARD_BYTE) {
            snprintf(c->obs_fail, sizeof c->obs_fail,
                     "%s wrote before the observation's %zu bytes (%s %s): byte %zu before it changed, at %s",
                     step ? "step" : "reset", c->obs_size, fl_dtype_name(c->def->obs.dtype), shape, i + 1, at);
            return;
        }
    for (size_t i = 0; i < GUARD; i++)
        if (c->obs[c->obs_size + i] != GUARD_BYTE) {
            snprintf(c->obs_fail, sizeof c->obs_fail,
                     "%s wrote past the observation's %zu bytes (%s %s): byte %zu after it changed, at %s",
                     step ? "step" : "reset", c->obs_size, fl_dtype_name(c->def->obs.dtype), shape, i, at);
            return;
        }
    long bad = first_nonfinite(c->def, c->obs);
    if (bad >= 0) {
        char name[64], v[48];
        element_name(c->def, (size_t)bad, name, sizeof name);
        element_value(c->def->obs.dtype, c->obs, (size_t)bad, v, sizeof v);
        snprintf(c->obs_fail, sizeof c->obs_fail, "%s is %s at %s, expected a finite %s", name, v, at,
                 fl_dtype_name(c->def->obs.dtype));
    }
}

/* render's checks on the current state (the first play). */
static void check_render(check_t *c, long episode, long step) {
    const fl_env_def_t *def = c->def;
    if (!def->render || c->render_fail[0]) return;
    char at[64];
    where(at, sizeof at, episode, step);
    void *inner = fl_wrapped_env_inner_state(c->w, c->state);
    if (def->state_size) memcpy(c->saved, inner, def->state_size);
    const int h = def->render_height, w = def->render_width;
    for (int k = 0; k < 2; k++) {
        memset(c->rgb[k], k ? FILL_SECOND : FILL_FIRST, c->img);
        memset(c->rgb[k] + c->img, GUARD_BYTE, RENDER_GUARD);
        g_call = "render";
        def->render(inner, c->rgb[k]);
        g_call = NULL;
        c->render_calls++;
        for (size_t i = 0; i < RENDER_GUARD; i++)
            if (c->rgb[k][c->img + i] != GUARD_BYTE) {
                snprintf(c->render_fail, sizeof c->render_fail,
                         "render wrote past render_height x render_width x 3 = %d x %d x 3 = %zu bytes (byte %zu "
                         "after them changed) at %s: does it draw a bigger image than it declares?",
                         h, w, c->img, i, at);
                return;
            }
    }
    if (def->state_size && memcmp(c->saved, inner, def->state_size) != 0) {
        size_t i = 0;
        while (c->saved[i] == ((const uint8_t *)inner)[i]) i++;
        snprintf(c->render_fail, sizeof c->render_fail,
                 "render changed the state (byte %zu of its %zu) at %s, expected it only to read it", i,
                 def->state_size, at);
        return;
    }
    size_t first = SIZE_MAX, last = 0, differ = 0, unwritten = 0;
    for (size_t i = 0; i < c->img; i++)
        if (c->rgb[0][i] != c->rgb[1][i]) {
            if (first == SIZE_MAX) first = i;
            last = i;
            differ++;
            unwritten += c->rgb[0][i] == FILL_FIRST && c->rgb[1][i] == FILL_SECOND;
        }
    if (!differ) return;
    size_t row = (size_t)w * 3;
    if (unwritten == differ)
        snprintf(c->render_fail, sizeof c->render_fail,
                 "render left %zu of its %d x %d x 3 = %zu bytes unwritten (bytes %zu..%zu, rows %zu..%zu) at %s: "
                 "does it draw a smaller image than render_height x render_width declares?",
                 differ, h, w, c->img, first, last, first / row, last / row, at);
    else
        snprintf(c->render_fail, sizeof c->render_fail,
                 "render drew two different images of one state (byte %zu, row %zu, first differs) at %s", first,
                 first / row, at);
}

/* Plays the episodes once: a fresh instance (zeroed, configured), seeded p->env_seed,
 * the actions drawn from --seed. */
static fl_status play(check_t *c, play_t *p, fl_err_t *err) {
    const check_opts_t *o = c->o;
    const fl_env_def_t *def = c->def;
    memset(c->state, 0, c->state_size);
    memset(c->state + def->state_size, GUARD_BYTE, GUARD);
    g_play = p->index;
    g_episode = g_step = 0;
    g_call = "configure";
    fl_status st = fl_wrapped_env_configure(c->w, c->state, &o->e.env, err);
    g_call = NULL;
    if (st != FL_OK) {
        c->configure_failed = 1;
        return st;
    }
    fl_rng_t rng, act;
    fl_rng_init_stream(&rng, p->env_seed, 0);
    fl_rng_init_stream(&act, o->e.seed, ACTION_STREAM);
    const int limit = def->max_episode_steps;
    for (long ep = 1; ep <= o->episodes && st == FL_OK && !p->diff[0]; ep++) {
        g_episode = ep;
        g_step = 0;
        memset(c->obs_buf, GUARD_BYTE, GUARD);
        memset(c->obs, p->fill, c->obs_size);
        memset(c->obs + c->obs_size, GUARD_BYTE, GUARD);
        g_call = "reset";
        fl_wrapped_env_reset(c->w, c->state, &rng, c->obs);
        g_call = NULL;
        if (p->first) {
            c->resets++;
            check_obs(c, ep, 0);
            check_render(c, ep, 0);
        }
        st = note(c, p, 0.0f, 0, 0, ep, 0, err);
        for (long step = 1; st == FL_OK && !p->diff[0]; step++) {
            g_step = step;
            int a = (int)fl_rng_below(&act, (uint64_t)def->num_actions);
            float r = 0.0f;
            int term = 0, trunc = 0;
            memset(c->obs, p->fill, c->obs_size);
            g_call = "step";
            fl_wrapped_env_step(c->w, c->state, &rng, a, c->obs, &r, &term, &trunc);
            g_call = NULL;
            int over = term || trunc || step >= o->cap;
            if (p->first) {
                char at[64];
                c->steps++;
                check_obs(c, ep, step);
                int raw = g_probe.raw_terminated;
                if ((raw != 0 && raw != 1) && !c->flag_fail[0])
                    snprintf(c->flag_fail, sizeof c->flag_fail, "*terminated is %d at %s, expected 0 or 1", raw,
                             where(at, sizeof at, ep, step));
                if (!isfinite(r) && !c->reward_fail[0])
                    snprintf(c->reward_fail, sizeof c->reward_fail, "*reward is %g at %s, expected a finite number",
                             (double)r, where(at, sizeof at, ep, step));
                if (isfinite(r)) {
                    if (c->steps == 1 || r < c->rmin) c->rmin = r;
                    if (c->steps == 1 || r > c->rmax) c->rmax = r;
                }
                if (step <= RENDER_FIRST_STEPS || over) check_render(c, ep, step);
                if (term) {
                    c->terminated++;
                    c->term_at_limit += limit > 0 && step == limit;
                } else if (trunc) {
                    c->truncated++;
                } else if (over) {
                    c->capped++;
                }
            }
            st = note(c, p, r, term, trunc, ep, step, err);
            if (over) break;
        }
    }
    g_call = "close";
    fl_wrapped_env_close(c->w, c->state);
    g_play = 0;
    g_call = NULL;
    if (st == FL_OK && !p->first && !p->diff[0] && p->n != c->trace.n)
        snprintf(p->diff, sizeof p->diff, "%zu resets and steps the first time, %zu now", c->trace.n, p->n);
    return st;
}

/* ---- The report --------------------------------------------------------------------- */

typedef enum { V_PASS, V_WARN, V_FAIL, V_SKIP, V_INFO } verdict_t;

typedef struct report {
    int checks, warned, failed;
} report_t;

static void say(report_t *r, verdict_t v, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void say(report_t *r, verdict_t v, const char *check, const char *fmt, ...) {
    static const char *const tag[] = {"PASS", "WARN", "FAIL", "SKIP", "INFO"};
    if (v <= V_FAIL) r->checks++;
    r->warned += v == V_WARN;
    r->failed += v == V_FAIL;
    printf("%s  %-13s ", tag[v], check);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* Appends "; msg" (or msg) to buf when msg is set. */
static void join(char *buf, size_t len, const char *msg) {
    if (!msg[0]) return;
    size_t n = strlen(buf);
    snprintf(buf + n, len - n, "%s%s", n ? "; " : "", msg);
}

static void report_definition(report_t *r, const check_t *c) {
    const fl_env_def_t *d = c->def;
    char shape[64];
    fl_obs_spec_format_shape(&d->obs, shape, sizeof shape);
    char limit[32];
    if (d->max_episode_steps)
        snprintf(limit, sizeof limit, "%d", d->max_episode_steps);
    else
        snprintf(limit, sizeof limit, "0 (none)");
    say(r, V_PASS, "definition",
        "abi_version %d; obs %s %s = %zu bytes; %d actions; max_episode_steps %s; "
        "state_size %zu",
        d->abi_version, fl_dtype_name(d->obs.dtype), shape, c->obs_size, d->num_actions, limit, d->state_size);
}

static void report_plays(report_t *r, const check_t *c) {
    const fl_env_def_t *d = c->def;
    char shape[64];
    fl_obs_spec_format_shape(&d->obs, shape, sizeof shape);
    const int is_float = d->obs.dtype == FL_DTYPE_FLOAT32 || d->obs.dtype == FL_DTYPE_BFLOAT16;
    long n = c->resets + c->steps;
    if (c->obs_fail[0])
        say(r, V_FAIL, "observations", "%s", c->obs_fail);
    else
        say(r, V_PASS, "observations", "%ld observations of %s %s: %s, each written within its %zu bytes", n,
            fl_dtype_name(d->obs.dtype), shape, is_float ? "all finite" : "values not checked (not floats)",
            c->obs_size);

    char fail[3 * MSG + 8] = "";
    join(fail, sizeof fail, c->flag_fail);
    join(fail, sizeof fail, c->reward_fail);
    if (g_probe.overrun_in) {
        char m[MSG], at[64] = "configure";
        if (g_probe.overrun_episode) where(at, sizeof at, g_probe.overrun_episode, g_probe.overrun_step);
        snprintf(m, sizeof m, "%s wrote past the state's %zu bytes (state_size): byte %zu after them changed, at %s",
                 g_probe.overrun_in, d->state_size, g_probe.overrun_at, at);
        join(fail, sizeof fail, m);
    }
    if (fail[0])
        say(r, V_FAIL, "reset/step", "%s", fail);
    else
        say(r, V_PASS, "reset/step",
            "%ld resets, %ld steps: *terminated 0 or 1, rewards finite (from %g to %g), "
            "state within its %zu bytes",
            c->resets, c->steps, c->rmin, c->rmax, d->state_size);

    const long eps = c->terminated + c->truncated + c->capped;
    char limit[96];
    if (d->max_episode_steps)
        snprintf(limit, sizeof limit, "%ld truncated at max_episode_steps = %d", c->truncated, d->max_episode_steps);
    else
        snprintf(limit, sizeof limit, "none truncated (max_episode_steps 0: no limit)");
    char ends[256];
    snprintf(ends, sizeof ends, "%ld episodes: %ld terminated, %s, %ld cut at the check's %lld steps", eps,
             c->terminated, limit, c->capped, (long long)c->o->cap);
    if (c->term_at_limit)
        say(r, V_WARN, "episodes",
            "%s; %ld terminated at step %d = max_episode_steps: if the env ends episodes at "
            "its time limit itself, leave that to max_episode_steps, which fleet reports as truncation",
            ends, c->term_at_limit, d->max_episode_steps);
    else if (c->capped == eps && !d->max_episode_steps)
        say(r, V_WARN, "episodes",
            "%s: no episode ended, and the env has no max_episode_steps; if its episodes can "
            "go on for ever, declare one (or set env.max_episode_steps); --steps N plays longer",
            ends);
    else if (c->capped == eps && d->max_episode_steps > c->o->cap)
        say(r, V_PASS, "episodes", "%s (--steps %d would reach the limit)", ends, d->max_episode_steps);
    else
        say(r, V_PASS, "episodes", "%s", ends);
}

static void report_determinism(report_t *r, const check_t *c, const play_t *again, const play_t *other) {
    const check_opts_t *o = c->o;
    if (again->unwritten)
        say(r, V_SKIP, "determinism", "not judged: the observation has bytes the env does not write (above)");
    else if (again->diff[0])
        say(r, V_FAIL, "determinism",
            "seed %llu played twice with the same actions differs: %s (randomness "
            "from outside the rng argument: rand(), the time, a global or static variable, or state that reset "
            "does not set)",
            (unsigned long long)o->e.seed, again->diff);
    else
        say(r, V_PASS, "determinism",
            "seed %llu played twice: %zu resets and steps identical (observations, "
            "rewards, flags)%s",
            (unsigned long long)o->e.seed, c->trace.n, c->trace.obs ? ", byte for byte" : ", by checksum");
    if (again->diff[0])
        say(r, V_SKIP, "seeds", "not judged: seed %llu did not play the same twice", (unsigned long long)o->e.seed);
    else if (other->diff[0])
        say(r, V_PASS, "seeds", "seed %llu with the same actions plays differently (%s)",
            (unsigned long long)other->env_seed, other->diff);
    else
        say(r, V_WARN, "seeds",
            "seed %llu with the same actions plays exactly as seed %llu: the env draws nothing "
            "from its rng (fine for a deterministic game; a random one must draw from the rng argument)",
            (unsigned long long)other->env_seed, (unsigned long long)o->e.seed);
}

static void report_render(report_t *r, const check_t *c) {
    const fl_env_def_t *d = c->def;
    if (!d->render)
        say(r, V_SKIP, "render",
            "none (render is NULL): `fleet env play` shows the observation as text, `fleet "
            "env record` cannot record it");
    else if (c->render_fail[0])
        say(r, V_FAIL, "render", "%s", c->render_fail);
    else
        say(r, V_PASS, "render",
            "render_height %d x render_width %d: %d calls, each wrote its %zu bytes and nothing past them, the same "
            "image twice, the state unchanged",
            d->render_height, d->render_width, c->render_calls, c->img);
}

static void report_action_names(report_t *r, const fl_env_def_t *d) {
    if (!d->action_name) {
        say(r, V_SKIP, "action_name", "none (action_name is NULL): `fleet env play` takes actions by digit");
        return;
    }
    char names[256] = "", warn[MSG] = "";
    size_t used = 0;
    for (int a = 0; a < d->num_actions; a++) {
        g_call = "action_name";
        const char *s = d->action_name(a);
        g_call = NULL;
        if (!s || !s[0]) {
            say(r, V_FAIL, "action_name", "action_name(%d) is %s, expected a name", a, s ? "\"\"" : "NULL");
            return;
        }
        for (int b = 0; b < a && !warn[0]; b++)
            if (strcmp(d->action_name(b), s) == 0)
                snprintf(warn, sizeof warn, "action_name(%d) and action_name(%d) are both \"%s\"", b, a, s);
        for (const char *q = s; *q && !warn[0]; q++)
            if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_' || *q == '-'))
                snprintf(warn, sizeof warn,
                         "action_name(%d) is \"%s\": `fleet env play` finds keys' actions by "
                         "short lower-case names (left, right, up, down, fire, noop)",
                         a, s);
        if (used < sizeof names - 1) {
            int k = snprintf(names + used, sizeof names - used, "%s%s", a ? " " : "", s);
            used += k > 0 ? (size_t)k : 0;
        }
    }
    if (used >= sizeof names - 1) strcpy(names + sizeof names - 5, "...");
    if (warn[0])
        say(r, V_WARN, "action_name", "%s", warn);
    else
        say(r, V_PASS, "action_name", "%d actions: %s", d->num_actions, names);
}

static void report_speed(report_t *r, const check_t *c) {
    fl_err_t err;
    fl_err_init(&err);
    double rate = 0;
    if (r->failed) {
        say(r, V_INFO, "speed", "not measured: a check failed");
        return;
    }
    g_call = "reset or step (measuring the speed)";
    fl_status st = fl_env_bench_single(c->def, &c->o->e.env, INT64_MAX / 4, SPEED_S, &rate, &err);
    g_call = NULL;
    if (st != FL_OK) {
        say(r, V_INFO, "speed", "not measured: %s", err.msg);
        return;
    }
    char v[32];
    if (rate >= 1e6)
        snprintf(v, sizeof v, "%.1fM", rate / 1e6);
    else if (rate >= 1e3)
        snprintf(v, sizeof v, "%.1fK", rate / 1e3);
    else
        snprintf(v, sizeof v, "%.0f", rate);
    say(r, V_INFO, "speed", "%s steps/s (one instance, random actions, %.2g s; `fleet env bench` measures more)", v,
        SPEED_S);
}

/* ---- The verb ----------------------------------------------------------------------- */

static int parse(int argc, char **argv, check_opts_t *o) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            if (o->name) {
                fprintf(stderr, "fleet env check: one env name expected, got '%s' and '%s'\n", o->name, a);
                return 2;
            }
            o->name = a;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "fleet env check: %s needs a value\n", a);
            return 2;
        }
        i++;
        int rc = fl_env_cli_opt("check", a, v, &o->e, NULL);
        if (rc == 1 && strcmp(a, "--episodes") == 0) rc = fl_env_opt_int("check", a, v, 1, 1000, &o->episodes) ? 2 : 0;
        if (rc == 1 && strcmp(a, "--steps") == 0) rc = fl_env_opt_int("check", a, v, 1, 10000000, &o->cap) ? 2 : 0;
        if (rc == 1) fprintf(stderr, "fleet env check: unknown option '%s'\n", a);
        if (rc) return 2;
    }
    if (!o->name && !(o->e.plugin && o->e.plugin[0])) {
        fprintf(stderr, "fleet env check: missing env name (see `fleet env list`)\n");
        return 2;
    }
    return 0;
}

static void check_free(check_t *c) {
    free(c->trace.rec);
    free(c->trace.obs);
    free(c->state);
    free(c->obs_buf);
    free(c->saved);
    free(c->rgb[0]);
    free(c->rgb[1]);
    fl_wrapped_env_destroy(c->w);
}

/* The instance's buffers: its state, the observation with its guard, the kept
 * observations, the state's copy and the two images for render. */
static fl_status check_open(check_t *c, fl_err_t *err) {
    const fl_env_def_t *def = c->def;
    probe_init(def);
    FL_TRY(fl_wrapped_env_create_limited(&g_probe.def, "", 0, &c->w, err));
    c->obs_size = fl_env_obs_size(def);
    c->state_size = fl_wrapped_env_state_size(c->w);
    c->state = malloc(c->state_size);
    c->obs_buf = malloc(GUARD + c->obs_size + GUARD);
    c->obs = c->obs_buf ? c->obs_buf + GUARD : NULL;
    c->saved = malloc(def->state_size ? def->state_size : 1);
    if (def->render) {
        c->img = (size_t)def->render_height * (size_t)def->render_width * 3;
        c->rgb[0] = malloc(c->img + RENDER_GUARD);
        c->rgb[1] = malloc(c->img + RENDER_GUARD);
    }
    /* Whole observations when the episodes' most steps fit the budget. */
    int64_t per = c->o->cap;
    if (def->max_episode_steps > 0 && def->max_episode_steps < per) per = def->max_episode_steps;
    size_t most = (size_t)c->o->episodes * (size_t)(per + 1);
    if (most <= KEEP_OBS_BYTES / c->obs_size) {
        c->trace.obs = malloc(most * c->obs_size);
        c->trace.obs_cap = c->trace.obs ? most : 0;
    }
    c->trace.fill = FILL_FIRST;
    if (!c->state || !c->obs || !c->saved || (def->render && (!c->rgb[0] || !c->rgb[1])))
        return fl_err_set(err, FL_NO_MEMORY, "env '%s': out of memory", def->name);
    return FL_OK;
}

int fl_env_check(int argc, char **argv) {
    check_opts_t o;
    memset(&o, 0, sizeof o);
    fl_env_factory_opts_t fo; /* a run's [env] defaults */
    fl_env_factory_opts_init(&fo);
    fl_env_instance_options(&fo, &o.e.env);
    o.e.seed = 1;
    o.episodes = 5;
    o.cap = 1000;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;

    fl_err_t err;
    fl_err_init(&err);
    check_t c;
    memset(&c, 0, sizeof c);
    c.o = &o;
    if (fl_env_cli_resolve(&o.e, o.name, &c.def, &err) != FL_OK) {
        fprintf(stderr, "fleet env check: %s\n", err.msg);
        return 2;
    }
    catch_crashes();
    const fl_env_def_t *def = c.def;
    char from[300];
    if (o.e.plugin && o.e.plugin[0])
        snprintf(from, sizeof from, "plugin %s", o.e.plugin);
    else
        snprintf(from, sizeof from, "built-in");
    printf(
        "fleet env check: %s (%s): %lld episodes of random actions, each cut at %lld steps, seed %llu\n"
        "  env options: sticky_actions %g, difficulty_ramping %d, rng %s, args \"%s\"\n",
        def->name, from, (long long)o.episodes, (long long)o.cap, (unsigned long long)o.e.seed,
        (double)o.e.env.sticky_prob, o.e.env.difficulty_ramping, o.e.env.reference_rng ? "reference" : "fleet",
        o.e.env.args ? o.e.env.args : "");
    report_t r = {0, 0, 0};
    if (check_open(&c, &err) != FL_OK) {
        fprintf(stderr, "fleet env check: %s\n", err.msg);
        check_free(&c);
        return 1;
    }
    report_definition(&r, &c);

    play_t first = {.index = 1, .env_seed = o.e.seed, .fill = FILL_FIRST, .first = 1};
    fl_status st = play(&c, &first, &err);
    if (st != FL_OK && c.configure_failed) {
        say(&r, V_FAIL, "configure", "%s", err.msg);
    } else if (st == FL_OK) {
        if (def->configure)
            say(&r, V_PASS, "configure", "accepted the options above");
        else if (o.e.env.args && o.e.env.args[0])
            say(&r, V_WARN, "configure", "none (configure is NULL), so nothing reads --args \"%s\"", o.e.env.args);
        else
            say(&r, V_SKIP, "configure", "none (configure is NULL): the env takes no options");
    }
    if (st == FL_OK) {
        play_t again = {.index = 2, .env_seed = o.e.seed, .fill = FILL_SECOND};
        play_t other = {.index = 3, .env_seed = o.e.seed + 1, .fill = FILL_FIRST};
        st = play(&c, &again, &err);
        if (st == FL_OK) st = play(&c, &other, &err);
        if (st == FL_OK) {
            /* Bytes left unwritten show as a difference of the second play: an observation's fault. */
            if (again.unwritten && !c.obs_fail[0]) snprintf(c.obs_fail, sizeof c.obs_fail, "%s", again.diff);
            report_plays(&r, &c);
            report_determinism(&r, &c, &again, &other);
            report_render(&r, &c);
            report_action_names(&r, def);
            report_speed(&r, &c);
        }
    }
    if (st != FL_OK && !r.failed) {
        fprintf(stderr, "fleet env check: %s\n", err.msg);
        check_free(&c);
        return 1;
    }
    check_free(&c);
    if (r.failed)
        printf("fleet env check: %s: %d of %d checks failed\n", def->name, r.failed, r.checks);
    else if (r.warned)
        printf("fleet env check: %s: passed, with %d warning%s (%d checks)\n", def->name, r.warned,
               r.warned > 1 ? "s" : "", r.checks);
    else
        printf("fleet env check: %s: all %d checks passed\n", def->name, r.checks);
    return r.failed ? 1 : 0;
}
