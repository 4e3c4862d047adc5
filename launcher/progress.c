/* progress: the progress line of progress.h. */
#include "launcher/progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void fl_progress_compact(double v, char out[16]) {
    static const char suffix[] = "KMGTP";
    if (isnan(v)) {
        snprintf(out, 16, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, 16, v < 0 ? "-inf" : "inf");
        return;
    }
    double a = fabs(v);
    if (a < 999.95) {
        snprintf(out, 16, "%.1f", v);
        return;
    }
    int k = -1;
    while (a >= 999.95 && k < 4) {
        a /= 1000;
        v /= 1000;
        k++;
    }
    if (a >= 999.95)
        snprintf(out, 16, "%.0e", v * 1e15);
    else
        snprintf(out, 16, "%.1f%c", v, suffix[k]);
}

/* A count: as it is below 1000, else compact. */
static void count_text(uint64_t n, char out[16]) {
    if (n < 1000)
        snprintf(out, 16, "%llu", (unsigned long long)n);
    else
        fl_progress_compact((double)n, out);
}

void fl_progress_total(uint64_t n, char out[16]) {
    static const char suffix[] = "KMGTPE";
    if (n < 1000) {
        snprintf(out, 16, "%llu", (unsigned long long)n);
        return;
    }
    double v = (double)n;
    int k = -1;
    while (v >= 999.5 && k < 5) { /* 999.5K would print as 1e+03K */
        v /= 1000;
        k++;
    }
    if (v < 1) v = 1; /* 999.5 to 999.999 of the unit below, 1000 to three digits */
    snprintf(out, 16, "%.3g%c", v, suffix[k]);
}

enum {
    SEG_TIME,
    SEG_EVAL,
    SEG_TRAIN,
    SEG_ENV,
    SEG_FRAMES,
    SEG_UPD,
    SEG_LOSS,
    SEG_REPLAY,
    SEG_LAG,
    SEG_PUSH,
    SEG_RESTART,
    SEG_ACTORS,
    SEG_BUDGET,
    SEGS
};
/* Dropped first to last when the line is too long. */
static const int drop_order[] = {SEG_PUSH,    SEG_LAG,    SEG_REPLAY, SEG_LOSS, SEG_FRAMES,
                                 SEG_RESTART, SEG_ACTORS, SEG_UPD,    SEG_ENV};

static void budget_text(const fl_progress_t *p, char *s, size_t n) {
    if (p->budget_done < 0) return;
    size_t u = (size_t)snprintf(s, n, "%.0f%%", 100.0 * fmin(1.0, p->budget_done));
    if (p->eta_s < 0 || p->budget_done <= 0 || p->budget_done >= 1 || u >= n) return;
    double eta = fmin(p->eta_s, 359999);
    if (eta >= 3600)
        snprintf(s + u, n - u, " ETA %dh%02dm", (int)(eta / 3600), (int)fmod(eta / 60, 60));
    else
        snprintf(s + u, n - u, " ETA %dm%02ds", (int)(eta / 60), (int)fmod(eta, 60));
}

static void segments(const fl_progress_t *p, char seg[SEGS][64]) {
    char a[16], b[16];
    memset(seg, 0, SEGS * sizeof seg[0]);
    snprintf(seg[SEG_TIME], 64, "[%6.1fs]", fmin(p->elapsed_s, 99999.9));
    if (p->evaluators) {
        fl_progress_compact(p->eval_mean, a);
        fl_progress_compact(p->eval_ci95, b);
        if (p->have_eval)
            snprintf(seg[SEG_EVAL], 64, "eval %s+-%s", a, b);
        else
            snprintf(seg[SEG_EVAL], 64, "eval -");
    }
    fl_progress_compact(p->train_return, a);
    snprintf(seg[SEG_TRAIN], 64, "train %s", p->have_train ? a : "-");
    fl_progress_total(p->env_steps, a);
    fl_progress_compact(p->env_rate, b);
    snprintf(seg[SEG_ENV], 64, "env %s %s/s", a, b);
    if (p->frames) {
        fl_progress_total(p->frames, a);
        snprintf(seg[SEG_FRAMES], 64, "frames %s", a);
    }
    if (p->warmup_need && p->replay_size < p->warmup_need) {
        fl_progress_total(p->replay_size, a);
        fl_progress_total(p->warmup_need, b);
        snprintf(seg[SEG_UPD], 64, "warm-up %s/%s", a, b);
    } else {
        fl_progress_total(p->learner_steps, a);
        fl_progress_compact(p->upd_rate, b);
        snprintf(seg[SEG_UPD], 64, "upd %s %s/s", a, p->have_upd ? b : "-");
        if (p->have_upd) snprintf(seg[SEG_LOSS], 64, "loss %.2g", p->loss);
    }
    fl_progress_total(p->replay_size, a);
    snprintf(seg[SEG_REPLAY], 64, "replay %s", a);
    count_text(p->lag, a);
    snprintf(seg[SEG_LAG], 64, "lag %s", a);
    if (p->gorila) {
        count_text(p->pushes_applied, a);
        count_text(p->pushes_dropped, b);
        snprintf(seg[SEG_PUSH], 64, "push %s/%s dropped", a, b);
    }
    if (p->restarts) {
        count_text(p->restarts, a);
        if (p->crashes || p->hangs)
            snprintf(seg[SEG_RESTART], 64, "restarts %s (crashed %llu, hung %llu)", a, (unsigned long long)p->crashes,
                     (unsigned long long)p->hangs);
        else
            snprintf(seg[SEG_RESTART], 64, "restarts %s", a);
    }
    if (p->joined_ever) {
        count_text(p->actors_started, a);
        count_text(p->actors_joined, b);
        snprintf(seg[SEG_ACTORS], 64, "actors %s+%s joined", a, b);
    }
    budget_text(p, seg[SEG_BUDGET], 64);
}

/* The line of the segments kept: the time, a space, then " | " between parts, except
 * that "loss" follows "upd" after a space. */
static size_t join(char seg[SEGS][64], const int *keep, char *buf, size_t len) {
    size_t u = 0;
    int prev = -1;
    buf[0] = '\0';
    for (int i = 0; i < SEGS && u < len; i++) {
        if (!keep[i] || !seg[i][0]) continue;
        const char *sep = prev < 0 ? "" : prev == SEG_TIME || (i == SEG_LOSS && prev == SEG_UPD) ? " " : " | ";
        int n = snprintf(buf + u, len - u, "%s%s", sep, seg[i]);
        if (n < 0) break;
        u += (size_t)n;
        prev = i;
    }
    return u < len ? u : len - 1;
}

size_t fl_progress_format(const fl_progress_t *p, char *buf, size_t len) {
    char seg[SEGS][64];
    segments(p, seg);
    int keep[SEGS];
    for (int i = 0; i < SEGS; i++) keep[i] = 1;
    char line[SEGS * 64 + SEGS * 3 + 1];
    size_t n = join(seg, keep, line, sizeof line);
    for (size_t d = 0; d < sizeof drop_order / sizeof drop_order[0] && n > FL_PROGRESS_COLUMNS; d++) {
        keep[drop_order[d]] = 0;
        n = join(seg, keep, line, sizeof line);
    }
    if (n > FL_PROGRESS_COLUMNS) n = FL_PROGRESS_COLUMNS;
    line[n] = '\0';
    snprintf(buf, len, "%s", line);
    return strlen(buf);
}
