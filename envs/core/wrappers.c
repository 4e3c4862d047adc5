/* wrappers: a chain of preprocessing layers over one inner env (see wrappers.h).
 *
 * A chain is an array of layers, layer 0 being the inner env and the last the outermost
 * wrapper. Each layer knows the observation space it receives (in) and the one it
 * produces (out), and owns a slice of the instance state at a fixed offset: counters,
 * the previous action, and the frame buffers it needs so that stepping never allocates.
 * Reset and step recurse from the outermost layer down; a layer that does not change
 * the observation passes the caller's buffer straight to the layer below. Resize
 * coefficient tables are computed once at create time and shared read-only. */
#include "envs/core/wrappers.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/obs.h"

#define STATE_ALIGN 64
#define TOKEN_MAX 96

typedef enum wrap_kind {
    K_BASE,
    K_STICKY,
    K_NOOP,
    K_FRAMESKIP,
    K_EPISODICLIFE,
    K_FIRERESET,
    K_GRAYSCALE,
    K_RESIZE,
    K_CLIPREWARD,
    K_MAXSTEPS,
    K_FRAMESTACK,
    K_COUNT
} wrap_kind_t;

/* Indexed by kind; also the canonical, innermost-first order of the chain. */
static const char *const kind_names[K_COUNT] = {"",          "sticky",    "noop",   "frameskip",  "episodiclife",
                                                "firereset", "grayscale", "resize", "clipreward", "maxsteps",
                                                "framestack"};
#define KNOWN_WRAPPERS \
    "sticky, noop, frameskip, episodiclife, firereset, grayscale, resize, clipreward, maxsteps, framestack"

typedef struct space {
    fl_obs_spec_t obs;
    size_t size; /* bytes */
} space_t;

/* One output coordinate's taps along one axis: src[first .. first+count) with weights. */
typedef struct axis_taps {
    int *first, *count; /* (out) */
    int *src;           /* (taps) */
    float *weight;      /* (taps) */
} axis_taps_t;

typedef struct params {
    int present;
    char token[TOKEN_MAX];
    double p; /* sticky */
    int n;    /* noop N, frameskip k, maxsteps N, framestack n */
    int mode; /* frameskip: 1 = maxpool; resize: 1 = area */
    int h, w; /* resize */
} params_t;

typedef struct layer {
    wrap_kind_t kind; /* every switch over it names every kind (-Wswitch) */
    params_t prm;
    space_t in, out;
    size_t off; /* this layer's slice of the instance state */
    size_t bytes;
    axis_taps_t ty, tx; /* resize */
} layer_t;

struct fl_wrapped_env {
    const fl_env_def_t *inner;
    fl_env_lives_fn lives; /* the inner env's lives (fl_env_lives_of), NULL when it has none */
    int inner_limit;       /* inner steps per episode before truncation; 0 = none */
    int num_layers;
    layer_t layers[K_COUNT];
    size_t state_size;
    fl_env_def_t info;
    char name[256];
};

/* ---- Spaces --------------------------------------------------------------------------- */

static size_t space_bytes(const space_t *s) {
    size_t n = fl_dtype_size(s->obs.dtype);
    for (int i = 0; i < s->obs.rank; i++) {
        if (s->obs.shape[i] <= 0 || n > SIZE_MAX / (size_t)s->obs.shape[i]) return 0;
        n *= (size_t)s->obs.shape[i];
    }
    return n;
}

static void space_str(const space_t *s, char *buf, size_t len) {
    size_t u = (size_t)snprintf(buf, len, "%s (", fl_dtype_name(s->obs.dtype));
    for (int i = 0; i < s->obs.rank && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%d", i ? "," : "", s->obs.shape[i]);
    if (u < len) snprintf(buf + u, len - u, ")");
}

/* ---- Spec parsing --------------------------------------------------------------------- */

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_prob(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0.0 && v <= 1.0)) return -1;
    *out = v;
    return 0;
}

/* Splits "a, b ,c" (in place) into trimmed arguments; returns their count or -1 if more
 * than max. An empty argument list gives 0. */
static int split_args(char *s, char **argv, int max) {
    int n = 0;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) return 0;
    for (;;) {
        if (n == max) return -1;
        char *comma = strchr(s, ',');
        if (comma) *comma = '\0';
        char *b = s, *e = s + strlen(s);
        while (*b == ' ' || *b == '\t') b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
        *e = '\0';
        argv[n++] = b;
        if (!comma) return n;
        s = comma + 1;
    }
}

static fl_status bad_token(fl_err_t *err, const char *token, const char *expected) {
    return fl_err_set(err, FL_INVALID_ARGUMENT, "wrapper spec: token '%s': expected %s", token, expected);
}

/* Parses one token's arguments into prm (kind already known). */
static fl_status parse_params(int kind, char *args, int has_parens, params_t *prm, fl_err_t *err) {
    char *argv[4];
    int argc = has_parens ? split_args(args, argv, 4) : 0;
    const char *t = prm->token;
    for (int i = 0; i < argc; i++)
        if (!argv[i][0]) return bad_token(err, t, "no empty arguments");
    switch (kind) {
    case K_STICKY:
        if (argc != 1 || parse_prob(argv[0], &prm->p)) return bad_token(err, t, "sticky(p) with p in [0, 1]");
        break;
    case K_NOOP:
        if (argc != 1 || parse_int(argv[0], 0, 1000000, &prm->n))
            return bad_token(err, t, "noop(N) with N an integer in [0, 1000000]");
        break;
    case K_FRAMESKIP:
        if (argc < 1 || argc > 2 || parse_int(argv[0], 1, 1000000, &prm->n))
            return bad_token(err, t, "frameskip(k) or frameskip(k, maxpool|last) with k an integer >= 1");
        prm->mode = 1;
        if (argc == 2) {
            if (strcmp(argv[1], "maxpool") == 0)
                prm->mode = 1;
            else if (strcmp(argv[1], "last") == 0)
                prm->mode = 0;
            else
                return bad_token(err, t, "the frameskip mode 'maxpool' or 'last'");
        }
        break;
    case K_GRAYSCALE:
    case K_CLIPREWARD:
    case K_EPISODICLIFE:
    case K_FIRERESET:
        if (has_parens) return bad_token(err, t, "no arguments (write it without parentheses)");
        break;
    case K_RESIZE:
        if (argc < 2 || argc > 3 || parse_int(argv[0], 1, 65536, &prm->h) || parse_int(argv[1], 1, 65536, &prm->w))
            return bad_token(err, t, "resize(h, w) or resize(h, w, area|bilinear) with h, w integers >= 1");
        prm->mode = 1;
        if (argc == 3) {
            if (strcmp(argv[2], "area") == 0)
                prm->mode = 1;
            else if (strcmp(argv[2], "bilinear") == 0)
                prm->mode = 0;
            else
                return bad_token(err, t, "the resize method 'area' or 'bilinear'");
        }
        break;
    case K_MAXSTEPS:
        if (argc != 1 || parse_int(argv[0], 1, INT_MAX, &prm->n))
            return bad_token(err, t, "maxsteps(N) with N an integer >= 1");
        break;
    case K_FRAMESTACK:
        if (argc != 1 || parse_int(argv[0], 1, 1024, &prm->n))
            return bad_token(err, t, "framestack(n) with n an integer in [1, 1024]");
        break;
    default: break;
    }
    return FL_OK;
}

static fl_status parse_spec(const char *spec, params_t prm[K_COUNT], fl_err_t *err) {
    const char *s = spec ? spec : "";
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (!*s) return FL_OK;
        const char *start = s;
        while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_') s++;
        size_t name_len = (size_t)(s - start);
        const char *after_name = s;
        while (*s == ' ' || *s == '\t') s++;
        int has_parens = *s == '(';
        const char *close = NULL;
        if (has_parens) {
            close = strchr(s, ')');
            const char *bad_open = strchr(s + 1, '(');
            if (!close || (bad_open && bad_open < close)) {
                char tok[TOKEN_MAX];
                snprintf(tok, sizeof tok, "%.*s", (int)strcspn(start, " \t\n"), start);
                return bad_token(err, tok, "a closing ')' after the arguments");
            }
        } else {
            s = after_name;
        }
        const char *end = has_parens ? close + 1 : s;
        char tok[TOKEN_MAX];
        if (name_len == 0) {
            snprintf(tok, sizeof tok, "%.*s", (int)strcspn(start, " \t\n"), start);
            return bad_token(err, tok, "a wrapper name (" KNOWN_WRAPPERS ")");
        }
        snprintf(tok, sizeof tok, "%.*s", (int)(end - start), start);
        int kind = -1;
        for (int k = 1; k < K_COUNT; k++)
            if (strlen(kind_names[k]) == name_len && strncmp(kind_names[k], start, name_len) == 0) kind = k;
        if (kind < 0)
            return fl_err_set(err, FL_INVALID_ARGUMENT, "wrapper spec: unknown wrapper '%s' (known: %s)", tok,
                              KNOWN_WRAPPERS);
        if (prm[kind].present)
            return fl_err_set(err, FL_INVALID_ARGUMENT,
                              "wrapper spec: token '%s': '%s' already appears as '%s', expected each wrapper once", tok,
                              kind_names[kind], prm[kind].token);
        prm[kind].present = 1;
        snprintf(prm[kind].token, sizeof prm[kind].token, "%s", tok);
        char args[TOKEN_MAX] = "";
        if (has_parens) snprintf(args, sizeof args, "%.*s", (int)(close - s - 1), s + 1);
        FL_TRY(parse_params(kind, args, has_parens, &prm[kind], err));
        s = end;
        if (*s && *s != ' ' && *s != '\t' && *s != '\n') {
            snprintf(tok, sizeof tok, "%.*s", (int)strcspn(start, " \t\n"), start);
            return bad_token(err, tok, "whitespace between wrappers");
        }
    }
}

/* ---- Resize tables -------------------------------------------------------------------- */

static void taps_free(axis_taps_t *t) {
    free(t->first);
    free(t->count);
    free(t->src);
    free(t->weight);
    memset(t, 0, sizeof *t);
}

/* Taps mapping an axis of `in` pixels onto `out` pixels; -1 when out of memory. */
static int taps_build(axis_taps_t *t, int in, int out, int area) {
    double scale = (double)in / (double)out;
    int max_taps = area ? (int)ceil(scale) + 2 : 2;
    t->first = calloc((size_t)out, sizeof *t->first);
    t->count = calloc((size_t)out, sizeof *t->count);
    t->src = calloc((size_t)out * (size_t)max_taps, sizeof *t->src);
    t->weight = calloc((size_t)out * (size_t)max_taps, sizeof *t->weight);
    if (!t->first || !t->count || !t->src || !t->weight) return -1;
    int used = 0;
    for (int o = 0; o < out; o++) {
        t->first[o] = used;
        if (area && scale > 1.0) {
            double lo = o * scale, hi = (o + 1) * scale;
            for (int i = (int)floor(lo); i < in && i < (int)ceil(hi); i++) {
                double cover = fmin(hi, i + 1.0) - fmax(lo, (double)i);
                if (cover <= 1e-12) continue;
                t->src[used] = i;
                t->weight[used] = (float)(cover / scale);
                used++;
            }
        } else {
            /* bilinear, and area when enlarging (where it coincides with bilinear's
             * footprint of at most two source pixels) */
            double x = (o + 0.5) * scale - 0.5;
            if (x < 0) x = 0;
            if (x > in - 1) x = in - 1;
            int i0 = (int)floor(x);
            int i1 = i0 + 1 < in ? i0 + 1 : i0;
            double f = x - i0;
            t->src[used] = i0;
            t->weight[used] = (float)(1.0 - f);
            used++;
            if (i1 != i0 && f > 0) {
                t->src[used] = i1;
                t->weight[used] = (float)f;
                used++;
            }
        }
        t->count[o] = used - t->first[o];
    }
    return 0;
}

/* ---- Chain construction --------------------------------------------------------------- */

static fl_status bad_space(fl_err_t *err, const params_t *prm, const space_t *in, const char *expected) {
    char got[96];
    space_str(in, got, sizeof got);
    return fl_err_set(err, FL_INVALID_ARGUMENT, "wrapper spec: token '%s': expected %s observations, got %s",
                      prm->token, expected, got);
}

/* Fills L->out and L->bytes from L->in and the parameters. */
static fl_status layer_setup(layer_t *L, fl_err_t *err) {
    const space_t *in = &L->in;
    space_t *out = &L->out;
    *out = *in;
    L->bytes = 0;
    switch (L->kind) {
    case K_STICKY: L->bytes = sizeof(int); break;
    case K_NOOP: L->bytes = sizeof(int); break; /* the no-ops taken at the last reset */
    case K_FRAMESKIP:
        if (L->prm.mode == 1 && in->obs.dtype != FL_DTYPE_UINT8 && in->obs.dtype != FL_DTYPE_FLOAT32 &&
            in->obs.dtype != FL_DTYPE_INT32 && in->obs.dtype != FL_DTYPE_INT64)
            return bad_space(err, &L->prm, in, "uint8, float32, int32 or int64 (for maxpool)");
        L->bytes = 2 * in->size;
        break;
    case K_GRAYSCALE:
        if (in->obs.dtype != FL_DTYPE_UINT8 || in->obs.rank != 3 || in->obs.shape[2] != 3)
            return bad_space(err, &L->prm, in, "uint8 (H,W,3) RGB");
        out->obs.shape[2] = 1;
        L->bytes = in->size;
        break;
    case K_RESIZE:
        if (in->obs.dtype != FL_DTYPE_UINT8 || in->obs.rank != 3) return bad_space(err, &L->prm, in, "uint8 (H,W,C)");
        out->obs.shape[0] = L->prm.h;
        out->obs.shape[1] = L->prm.w;
        if (taps_build(&L->ty, in->obs.shape[0], L->prm.h, L->prm.mode) ||
            taps_build(&L->tx, in->obs.shape[1], L->prm.w, L->prm.mode))
            return fl_err_set(err, FL_NO_MEMORY, "wrapper '%s': out of memory for the resize tables", L->prm.token);
        L->bytes = in->size;
        break;
    case K_MAXSTEPS: L->bytes = sizeof(int64_t); break;
    case K_EPISODICLIFE: L->bytes = 2 * sizeof(int); break; /* lives seen, and whether the game is over */
    case K_FRAMESTACK: {
        int last = in->obs.shape[in->obs.rank - 1];
        if (last > INT_MAX / L->prm.n) return bad_space(err, &L->prm, in, "a last axis small enough to stack");
        out->obs.shape[in->obs.rank - 1] = last * L->prm.n;
        break;
    }
    default: break;
    }
    out->size = space_bytes(out);
    if (out->size == 0) return bad_space(err, &L->prm, in, "an observation size that does not overflow");
    if (L->kind == K_FRAMESTACK) L->bytes = in->size + out->size;
    return FL_OK;
}

/* What episodiclife and firereset need of the inner env: lives (an Atari game: its
 * family declares them, fl_env_lives_of) and a fire action (action 1 named "fire", and
 * at least 3 actions, as the games that need it have). */
static fl_status check_inner(const fl_env_def_t *inner, const layer_t *L, fl_err_t *err) {
    if (L->kind == K_EPISODICLIFE && !fl_env_lives_of(inner))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "wrapper spec: token '%s': expected an env with lives (an atari-* game), got '%s'",
                          L->prm.token, inner->name);
    if (L->kind == K_FIRERESET &&
        (inner->num_actions < 3 || !inner->action_name || strcmp(inner->action_name(1), "fire") != 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "wrapper spec: token '%s': expected an env whose action 1 is fire (of 3 or more), got '%s' "
                          "(action 1: %s)",
                          L->prm.token, inner->name,
                          inner->action_name && inner->num_actions > 1 ? inner->action_name(1) : "none");
    return FL_OK;
}

static size_t align_up(size_t n) {
    return (n + STATE_ALIGN - 1) / STATE_ALIGN * STATE_ALIGN;
}

fl_status fl_wrapped_env_create(const fl_env_def_t *inner, const char *spec, fl_wrapped_env_t **out, fl_err_t *err) {
    return fl_wrapped_env_create_limited(inner, spec, 0, out, err);
}

fl_status fl_wrapped_env_create_limited(const fl_env_def_t *inner, const char *spec, int inner_limit,
                                        fl_wrapped_env_t **out, fl_err_t *err) {
    *out = NULL;
    FL_TRY(fl_env_validate(inner, err));
    if (inner_limit < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "wrapped env '%s': step limit %d, expected >= 0 (0 = the env's own)", inner->name,
                          inner_limit);
    params_t prm[K_COUNT];
    memset(prm, 0, sizeof prm);
    FL_TRY(parse_spec(spec, prm, err));

    fl_wrapped_env_t *w = calloc(1, sizeof *w);
    if (!w) return fl_err_set(err, FL_NO_MEMORY, "wrapped env '%s': out of memory", inner->name);
    w->inner = inner;
    w->lives = fl_env_lives_of(inner);
    w->inner_limit = inner_limit > 0 ? inner_limit : inner->max_episode_steps;
    layer_t *base = &w->layers[0];
    base->kind = K_BASE;
    /* The first rank entries only: the unused ones stay 0 whatever the definition holds. */
    base->out.obs = fl_obs_spec_make(inner->obs.dtype, inner->obs.rank, inner->obs.shape);
    base->out.size = fl_env_obs_size(inner);
    base->in = base->out;
    base->off = align_up(inner->state_size);
    base->bytes = sizeof(int64_t); /* steps of the inner env in this episode */
    size_t used = base->off + align_up(base->bytes);
    w->num_layers = 1;

    int max_steps = w->inner_limit;
    size_t nl = (size_t)snprintf(w->name, sizeof w->name, "%s[", inner->name);
    for (int k = 1; k < K_COUNT; k++) {
        if (!prm[k].present) continue;
        layer_t *L = &w->layers[w->num_layers];
        L->kind = k;
        L->prm = prm[k];
        L->in = w->layers[w->num_layers - 1].out;
        w->num_layers++; /* counted before setup so that destroy frees its tables */
        fl_status st = layer_setup(L, err);
        if (st != FL_OK) {
            fl_wrapped_env_destroy(w);
            return st;
        }
        if (st == FL_OK) st = check_inner(inner, L, err);
        if (st != FL_OK) {
            fl_wrapped_env_destroy(w);
            return st;
        }
        L->off = used;
        used += align_up(L->bytes);
        if (k == K_MAXSTEPS) max_steps = L->prm.n;
        if (nl < sizeof w->name)
            nl +=
                (size_t)snprintf(w->name + nl, sizeof w->name - nl, "%s%s", w->num_layers > 2 ? " " : "", L->prm.token);
    }
    if (nl < sizeof w->name) snprintf(w->name + nl, sizeof w->name - nl, "]");
    if (w->num_layers == 1) snprintf(w->name, sizeof w->name, "%s", inner->name);
    w->state_size = used;

    const space_t *o = &w->layers[w->num_layers - 1].out;
    fl_env_def_t *d = &w->info;
    d->abi_version = FL_ENV_ABI_VERSION;
    d->name = w->name;
    d->description = inner->description;
    d->obs = o->obs;
    d->num_actions = inner->num_actions;
    d->max_episode_steps = max_steps;
    d->state_size = w->state_size;
    *out = w;
    return FL_OK;
}

void fl_wrapped_env_destroy(fl_wrapped_env_t *w) {
    if (!w) return;
    for (int i = 0; i < w->num_layers; i++) {
        taps_free(&w->layers[i].ty);
        taps_free(&w->layers[i].tx);
    }
    free(w);
}

const fl_env_def_t *fl_wrapped_env_info(const fl_wrapped_env_t *w) {
    return &w->info;
}
const fl_env_def_t *fl_wrapped_env_inner(const fl_wrapped_env_t *w) {
    return w->inner;
}
int fl_wrapped_env_frame_skip(const fl_wrapped_env_t *w) {
    for (int i = 0; i < w->num_layers; i++)
        if (w->layers[i].kind == K_FRAMESKIP) return w->layers[i].prm.n;
    return 1;
}
int fl_wrapped_env_noops(const fl_wrapped_env_t *w, const void *state) {
    for (int i = 0; i < w->num_layers; i++)
        if (w->layers[i].kind == K_NOOP) return *(const int *)((const uint8_t *)state + w->layers[i].off);
    return -1;
}
int fl_wrapped_env_frame_stack(const fl_wrapped_env_t *w) {
    for (int i = 0; i < w->num_layers; i++)
        if (w->layers[i].kind == K_FRAMESTACK) return w->layers[i].prm.n;
    return 1;
}
size_t fl_wrapped_env_state_size(const fl_wrapped_env_t *w) {
    return w->state_size;
}
size_t fl_wrapped_env_obs_size(const fl_wrapped_env_t *w) {
    return w->layers[w->num_layers - 1].out.size;
}
void fl_wrapped_env_close(const fl_wrapped_env_t *w, void *state) {
    fl_env_close(w->inner, state);
}

void *fl_wrapped_env_inner_state(const fl_wrapped_env_t *w, void *state) {
    (void)w;
    return state;
}

fl_status fl_wrapped_env_configure(const fl_wrapped_env_t *w, void *state, const fl_env_options_t *opts,
                                   fl_err_t *err) {
    return fl_env_configure(w->inner, state, opts, 0, err);
}

/* ---- Pixel operations ----------------------------------------------------------------- */

static void max_pool(fl_dtype dt, const void *a, const void *b, void *dst, size_t bytes) {
    switch (dt) {
    case FL_DTYPE_UINT8: {
        const uint8_t *x = a, *y = b;
        uint8_t *o = dst;
        for (size_t i = 0; i < bytes; i++) o[i] = x[i] > y[i] ? x[i] : y[i];
        break;
    }
    case FL_DTYPE_FLOAT32: {
        const float *x = a, *y = b;
        float *o = dst;
        for (size_t i = 0; i < bytes / 4; i++) o[i] = x[i] > y[i] ? x[i] : y[i];
        break;
    }
    case FL_DTYPE_INT32: {
        const int32_t *x = a, *y = b;
        int32_t *o = dst;
        for (size_t i = 0; i < bytes / 4; i++) o[i] = x[i] > y[i] ? x[i] : y[i];
        break;
    }
    case FL_DTYPE_INT64: {
        const int64_t *x = a, *y = b;
        int64_t *o = dst;
        for (size_t i = 0; i < bytes / 8; i++) o[i] = x[i] > y[i] ? x[i] : y[i];
        break;
    }
    default: memcpy(dst, b, bytes); break;
    }
}

/* (H,W,3) -> (H,W,1); exact rounding of the 601 luma in integers (half rounds up). */
static void grayscale(const uint8_t *rgb, uint8_t *y, size_t pixels) {
    for (size_t i = 0; i < pixels; i++) {
        unsigned v = 299u * rgb[3 * i] + 587u * rgb[3 * i + 1] + 114u * rgb[3 * i + 2];
        y[i] = (uint8_t)((v + 500u) / 1000u);
    }
}

/* (H,W,C) -> (h,w,C) through the layer's tap tables. */
static void resize(const layer_t *L, const uint8_t *src, uint8_t *dst) {
    const int W = L->in.obs.shape[1], C = L->in.obs.shape[2];
    const int h = L->out.obs.shape[0], w = L->out.obs.shape[1];
    for (int oy = 0; oy < h; oy++) {
        const int fy = L->ty.first[oy], ny = L->ty.count[oy];
        for (int ox = 0; ox < w; ox++) {
            const int fx = L->tx.first[ox], nx = L->tx.count[ox];
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int j = 0; j < ny; j++) {
                    const uint8_t *row = src + (size_t)L->ty.src[fy + j] * (size_t)W * (size_t)C;
                    float racc = 0.0f;
                    for (int i = 0; i < nx; i++) racc += L->tx.weight[fx + i] * (float)row[L->tx.src[fx + i] * C + c];
                    acc += L->ty.weight[fy + j] * racc;
                }
                int v = (int)(acc + 0.5f);
                dst[((size_t)oy * (size_t)w + (size_t)ox) * (size_t)C + (size_t)c] = (uint8_t)(v < 0     ? 0
                                                                                               : v > 255 ? 255
                                                                                                         : v);
            }
        }
    }
}

/* stack (P, n*E) bytes: drop the oldest E bytes of every position and append frame's. */
static void stack_push(uint8_t *stack, const uint8_t *frame, size_t positions, size_t e, int n) {
    const size_t row = e * (size_t)n;
    for (size_t p = 0; p < positions; p++) {
        uint8_t *r = stack + p * row;
        if (n > 1) memmove(r, r + e, row - e);
        memcpy(r + row - e, frame + p * e, e);
    }
}

static void stack_fill(uint8_t *stack, const uint8_t *frame, size_t positions, size_t e, int n) {
    const size_t row = e * (size_t)n;
    for (size_t p = 0; p < positions; p++)
        for (int k = 0; k < n; k++) memcpy(stack + p * row + (size_t)k * e, frame + p * e, e);
}

/* Bytes of one position's channels (last axis) and the number of positions. */
static void stack_geometry(const layer_t *L, size_t *e, size_t *positions) {
    *e = fl_dtype_size(L->in.obs.dtype) * (size_t)L->in.obs.shape[L->in.obs.rank - 1];
    *positions = L->in.size / *e;
}

/* ---- Reset and step ------------------------------------------------------------------- */

static void layer_step(const fl_wrapped_env_t *w, int li, uint8_t *st, fl_rng_t *rng, int a, void *obs, float *r,
                       int *term, int *trunc);

static void layer_reset(const fl_wrapped_env_t *w, int li, uint8_t *st, fl_rng_t *rng, void *obs) {
    const layer_t *L = &w->layers[li];
    uint8_t *my = st + L->off;
    switch (L->kind) {
    case K_BASE:
        w->inner->reset(st, rng, obs);
        *(int64_t *)my = 0;
        break;
    case K_STICKY:
        *(int *)my = 0;
        layer_reset(w, li - 1, st, rng, obs);
        break;
    case K_NOOP: {
        /* 1..N no-ops (none for N = 0), drawn as Gymnasium's AtariPreprocessing and the
         * Nature DQN's NoopReset draw them */
        layer_reset(w, li - 1, st, rng, obs);
        int n = L->prm.n > 0 ? 1 + (int)fl_env_rng_below(rng, (uint64_t)L->prm.n) : 0;
        *(int *)my = n;
        for (int i = 0; i < n; i++) {
            float r = 0.0f;
            int t = 0, tr = 0;
            layer_step(w, li - 1, st, rng, 0, obs, &r, &t, &tr);
            if (t || tr) layer_reset(w, li - 1, st, rng, obs);
        }
        break;
    }
    case K_FRAMESKIP: layer_reset(w, li - 1, st, rng, obs); break;
    case K_EPISODICLIFE: {
        int *lives = (int *)my, *over = lives + 1;
        if (*over || *lives <= 0) { /* a real reset: the game is over (or never began) */
            layer_reset(w, li - 1, st, rng, obs);
        } else { /* only a life was lost: go on from where the game is, with a no-op step */
            float r = 0.0f;
            int t = 0, tr = 0;
            layer_step(w, li - 1, st, rng, 0, obs, &r, &t, &tr);
            if (t || tr) layer_reset(w, li - 1, st, rng, obs);
        }
        *lives = w->lives(st);
        *over = 0;
        break;
    }
    case K_FIRERESET:
        layer_reset(w, li - 1, st, rng, obs);
        for (int a = 1; a <= 2; a++) { /* fire, then the next action, as the games expect */
            float r = 0.0f;
            int t = 0, tr = 0;
            layer_step(w, li - 1, st, rng, a, obs, &r, &t, &tr);
            if (t || tr) layer_reset(w, li - 1, st, rng, obs);
        }
        break;
    case K_GRAYSCALE:
        layer_reset(w, li - 1, st, rng, my);
        grayscale(my, obs, L->out.size);
        break;
    case K_RESIZE:
        layer_reset(w, li - 1, st, rng, my);
        resize(L, my, obs);
        break;
    case K_CLIPREWARD: layer_reset(w, li - 1, st, rng, obs); break;
    case K_MAXSTEPS:
        *(int64_t *)my = 0;
        layer_reset(w, li - 1, st, rng, obs);
        break;
    case K_FRAMESTACK: {
        size_t e, positions;
        stack_geometry(L, &e, &positions);
        uint8_t *frame = my, *stack = my + L->in.size;
        layer_reset(w, li - 1, st, rng, frame);
        stack_fill(stack, frame, positions, e, L->prm.n);
        memcpy(obs, stack, L->out.size);
        break;
    }
    case K_COUNT: break; /* not a layer; no default, so that -Wswitch names a kind left out */
    }
}

static void layer_step(const fl_wrapped_env_t *w, int li, uint8_t *st, fl_rng_t *rng, int a, void *obs, float *r,
                       int *term, int *trunc) {
    const layer_t *L = &w->layers[li];
    uint8_t *my = st + L->off;
    switch (L->kind) {
    case K_BASE: {
        int t = 0;
        *r = 0.0f;
        w->inner->step(st, rng, a, obs, r, &t);
        int64_t n = ++*(int64_t *)my;
        *term = t != 0;
        *trunc = !t && w->inner_limit > 0 && n >= w->inner_limit;
        break;
    }
    case K_STICKY: {
        int *prev = (int *)my;
        if (L->prm.p > 0.0 && fl_env_rng_double(rng) < L->prm.p) a = *prev;
        *prev = a;
        layer_step(w, li - 1, st, rng, a, obs, r, term, trunc);
        break;
    }
    case K_FRAMESKIP: {
        uint8_t *buf[2] = {my, my + L->in.size};
        float total = 0.0f;
        int taken = 0;
        *term = *trunc = 0;
        while (taken < L->prm.n) {
            float ri = 0.0f;
            layer_step(w, li - 1, st, rng, a, buf[taken & 1], &ri, term, trunc);
            total += ri;
            taken++;
            if (*term || *trunc) break;
        }
        *r = total;
        const uint8_t *last = buf[(taken - 1) & 1];
        if (L->prm.mode == 1 && taken >= 2)
            max_pool(L->in.obs.dtype, buf[0], buf[1], obs, L->in.size);
        else
            memcpy(obs, last, L->in.size);
        break;
    }
    case K_EPISODICLIFE: {
        int *lives = (int *)my, *over = lives + 1;
        layer_step(w, li - 1, st, rng, a, obs, r, term, trunc);
        *over = *term || *trunc;
        int now = w->lives(st);
        if (now < *lives && now > 0) *term = 1; /* a life lost ends the agent's episode */
        *lives = now;
        break;
    }
    case K_NOOP: /* no-ops are taken at reset only */
    case K_FIRERESET: layer_step(w, li - 1, st, rng, a, obs, r, term, trunc); break;
    case K_GRAYSCALE:
        layer_step(w, li - 1, st, rng, a, my, r, term, trunc);
        grayscale(my, obs, L->out.size);
        break;
    case K_RESIZE:
        layer_step(w, li - 1, st, rng, a, my, r, term, trunc);
        resize(L, my, obs);
        break;
    case K_CLIPREWARD:
        layer_step(w, li - 1, st, rng, a, obs, r, term, trunc);
        *r = *r > 0.0f ? 1.0f : *r < 0.0f ? -1.0f : 0.0f;
        break;
    case K_MAXSTEPS: {
        layer_step(w, li - 1, st, rng, a, obs, r, term, trunc);
        int64_t n = ++*(int64_t *)my;
        if (!*term && n >= L->prm.n) *trunc = 1;
        break;
    }
    case K_FRAMESTACK: {
        size_t e, positions;
        stack_geometry(L, &e, &positions);
        uint8_t *frame = my, *stack = my + L->in.size;
        layer_step(w, li - 1, st, rng, a, frame, r, term, trunc);
        stack_push(stack, frame, positions, e, L->prm.n);
        memcpy(obs, stack, L->out.size);
        break;
    }
    case K_COUNT: break; /* not a layer; no default, so that -Wswitch names a kind left out */
    }
}

void fl_wrapped_env_reset(const fl_wrapped_env_t *w, void *state, fl_rng_t *rng, void *obs) {
    layer_reset(w, w->num_layers - 1, state, rng, obs);
}

void fl_wrapped_env_step(const fl_wrapped_env_t *w, void *state, fl_rng_t *rng, int action, void *obs, float *reward,
                         int *terminated, int *truncated) {
    float r = 0.0f;
    int t = 0, tr = 0;
    layer_step(w, w->num_layers - 1, state, rng, action, obs, &r, &t, &tr);
    *reward = r;
    *terminated = t != 0;
    *truncated = !t && tr;
}

/* ---- Vector: fl_vecenv's loop (envs/core/vecenv.c), stepping each instance through the chain ---- */

struct fl_wrapvec {
    fl__vec_instances_t inst;
    fl_vecenv_t *ve;
};

static void vec_reset(const void *ctx, void *state, fl_rng_t *rng, void *obs) {
    fl_wrapped_env_reset(ctx, state, rng, obs);
}

static void vec_step(const void *ctx, void *state, fl_rng_t *rng, int action, void *obs, float *reward, int *terminated,
                     int *truncated) {
    fl_wrapped_env_step(ctx, state, rng, action, obs, reward, terminated, truncated);
}

fl_status fl_wrapvec_create(const fl_wrapped_env_t *w, int num_envs, uint64_t seed, fl_wrapvec_t **out, fl_err_t *err) {
    *out = NULL;
    fl_wrapvec_t *v = calloc(1, sizeof *v);
    if (!v) return fl_err_set(err, FL_NO_MEMORY, "wrapvec '%s': out of memory", w->info.name);
    v->inst = (fl__vec_instances_t){.def = &w->info,
                                    .configure_def = w->inner,
                                    .ctx = w,
                                    .state_size = w->state_size,
                                    .obs_size = fl_wrapped_env_obs_size(w),
                                    .reset = vec_reset,
                                    .step = vec_step};
    fl_status st = fl__vecenv_create_instances(&v->inst, num_envs, seed, &v->ve, err);
    if (st != FL_OK) {
        free(v);
        return st;
    }
    *out = v;
    return FL_OK;
}

void fl_wrapvec_destroy(fl_wrapvec_t *v) {
    if (!v) return;
    fl_vecenv_destroy(v->ve);
    free(v);
}

fl_status fl_wrapvec_configure(fl_wrapvec_t *v, const fl_env_options_t *opts, fl_err_t *err) {
    return fl_vecenv_configure(v->ve, opts, err);
}

void fl_wrapvec_reset(fl_wrapvec_t *v, void *obs) {
    fl_vecenv_reset(v->ve, obs);
}

fl_status fl_wrapvec_step(fl_wrapvec_t *v, const int32_t *actions, void *obs, float *rewards, uint8_t *terminated,
                          uint8_t *truncated, void *final_obs, fl_episode_stats_t *done_stats, fl_err_t *err) {
    return fl_vecenv_step(v->ve, actions, obs, rewards, terminated, truncated, final_obs, done_stats, err);
}

int fl_wrapvec_num_envs(const fl_wrapvec_t *v) {
    return fl_vecenv_num_envs(v->ve);
}
const fl_wrapped_env_t *fl_wrapvec_env(const fl_wrapvec_t *v) {
    return v->inst.ctx;
}
void *fl_wrapvec_state(fl_wrapvec_t *v, int i) {
    return fl_vecenv_state(v->ve, i);
}

fl_rng_t *fl_wrapvec_rng(fl_wrapvec_t *v, int i) {
    return fl_vecenv_rng(v->ve, i);
}

void fl_wrappers_for_evaluation(const char *spec, char *out, size_t len) {
    size_t used = 0;
    if (len) out[0] = '\0';
    for (const char *s = spec ? spec : ""; *s;) {
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        const char *start = s;
        int depth = 0;
        while (*s && (depth || (*s != ' ' && *s != '\t' && *s != '\n'))) {
            depth += *s == '(' ? 1 : *s == ')' ? -1 : 0;
            s++;
        }
        size_t n = (size_t)(s - start);
        if ((n == 12 && strncmp(start, "episodiclife", 12) == 0) || (n == 10 && strncmp(start, "clipreward", 10) == 0))
            continue;
        int w = snprintf(out + used, len > used ? len - used : 0, "%s%.*s", used ? " " : "", (int)n, start);
        if (w > 0) used += (size_t)w;
        if (used >= len) break;
    }
}

double fl_wrappers_reward_bound(const char *spec, double base) {
    params_t prm[K_COUNT];
    memset(prm, 0, sizeof prm);
    if (parse_spec(spec, prm, NULL) != FL_OK) return 0.0;
    if (prm[K_CLIPREWARD].present) return 1.0; /* the chain's order is fixed: clipping comes after the frame skip */
    if (!(base > 0.0)) return 0.0;
    return prm[K_FRAMESKIP].present ? base * prm[K_FRAMESKIP].n : base;
}
