/* hparams: a run's configuration for TensorBoard's TEXT and HPARAMS tabs (see hparams.h). */
#include "launcher/hparams.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every key of the configuration: its name, type, choices and help, from the key table. */
typedef struct key_info {
    const char *name, *type, *choices, *help;
} key_info_t;

#define FL__HPARAMS_ROW(section, key, type, dflt, min, max, choices, help) {#section "." #key, #type, choices, help},
static const key_info_t keys[] = {FL_CONFIG_KEYS(FL__HPARAMS_ROW)};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

/* The keys that are not hyperparameters: where files go, how processes are run, watched
 * and restarted, and the network and its security. They change neither what a run learns
 * nor how fast; the text summary still shows them. (tests/test_launcher_hparams.c checks
 * that each is a key.) */
static const char *const not_hparams[] = {
    "run.name",
    "run.out_dir",
    "run.max_restarts",
    "run.checkpoints",
    "run.hang_s",
    "run.checkpoint_every",
    "run.keep_checkpoints",
    "run.checkpoint_dir",
    "run.log_level",
    "run.progress_every",
    "run.local_sockets",
    "run.bind_host",
    "run.interface",
    "run.tls_dir",
    "run.insecure",
    "actor.nice",
    "actor.sched_idle",
    "actor.max_joined",
    "actor.max_backlog_mb",
    "eval.nice",
    "replay.max_streams",
    "replay.stream_idle_s",
    "replay.checkpoint_dir",
    "replay.checkpoint_every",
    "replay.wal",
    "replay.wal_fsync",
    "paramserver.max_large_messages",
    "learner.checkpoint_dir",
    "learner.checkpoint_every",
    "learner.resume",
};

int fl_hparams_is_hparam(const char *name) {
    if (!name) return 0;
    int known = 0;
    for (int i = 0; i < NKEYS && !known; i++) known = strcmp(keys[i].name, name) == 0;
    if (!known) return 0;
    for (size_t i = 0; i < sizeof not_hparams / sizeof not_hparams[0]; i++)
        if (strcmp(not_hparams[i], name) == 0) return 0;
    return 1;
}

#define MAX_CHOICES 16

/* The text behind an fl_hparams_t: each key's value and choices. */
typedef struct hp_text {
    char value[FL_CONFIG_STRING_MAX];
    char choice_text[FL_CONFIG_STRING_MAX];
    const char *choices[MAX_CHOICES];
} hp_text_t;

/* Key i's value in c and in fleet's defaults d, as config.ini spells them. */
static void value_of(const fl_config_t *c, int i, char *buf, size_t len) {
    if (fl_config_get_string(c, keys[i].name, buf, len, NULL) != FL_OK) buf[0] = '\0';
}

fl_hparams_t *fl_hparams_from_config(const fl_config_t *c) {
    fl_hparams_t *h = calloc(1, sizeof *h);
    fl_config_t *d = malloc(sizeof *d);
    if (h) h->hp = calloc(NKEYS, sizeof *h->hp);
    hp_text_t *text = h ? calloc(NKEYS, sizeof *text) : NULL;
    if (h) h->storage = text;
    if (!h || !d || !h->hp || !text) {
        free(d);
        fl_hparams_free(h);
        return NULL;
    }
    fl_config_defaults(d);
    char dflt[FL_CONFIG_STRING_MAX];
    for (int i = 0; i < NKEYS; i++) {
        if (!fl_hparams_is_hparam(keys[i].name)) continue;
        hp_text_t *t = &text[h->n];
        fl_tfevents_hparam_t *p = &h->hp[h->n];
        value_of(c, i, t->value, sizeof t->value);
        value_of(d, i, dflt, sizeof dflt);
        if (!fl_tfevents_utf8(t->value)) continue;
        p->name = keys[i].name;
        p->description = keys[i].help;
        p->differs = strcmp(t->value, dflt) != 0;
        const char *type = keys[i].type;
        if (strcmp(type, "INT") == 0 || strcmp(type, "FLOAT") == 0) {
            p->kind = FL_TFEVENTS_HP_NUMBER;
            p->number = strtod(t->value, NULL);
        } else if (strcmp(type, "BOOL") == 0) {
            p->kind = FL_TFEVENTS_HP_BOOL;
            p->boolean = strcmp(t->value, "true") == 0;
        } else {
            p->kind = FL_TFEVENTS_HP_STRING;
            p->string = t->value;
        }
        if (strcmp(type, "ENUM") == 0) { /* "a|b|c": the domain */
            snprintf(t->choice_text, sizeof t->choice_text, "%s", keys[i].choices);
            for (char *s = t->choice_text; s && *s && p->n_choices < MAX_CHOICES;) {
                t->choices[p->n_choices++] = s;
                s = strchr(s, '|');
                if (s) *s++ = '\0';
            }
            p->choices = t->choices;
        }
        h->n++;
    }
    free(d);
    return h;
}

void fl_hparams_free(fl_hparams_t *h) {
    if (!h) return;
    free(h->hp);
    free(h->storage);
    free(h);
}

/* ---- the text summary ----------------------------------------------------------------- */

typedef struct strbuf {
    char *s;
    size_t len, cap;
    int failed;
} strbuf_t;

static void put(strbuf_t *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->failed = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void puts_(strbuf_t *b, const char *s) {
    put(b, s, strlen(s));
}

/* v as a Markdown code span in a table cell: delimited by more backticks than it holds,
 * with spaces inside when it has any (one space on each side is stripped); "" for the
 * empty value. Python-Markdown's tables, which TensorBoard renders with, do not split a
 * cell at a pipe inside a code span (and would show an escaped one with its backslash). */
static void code_cell(strbuf_t *b, const char *v) {
    if (!fl_tfevents_utf8(v)) {
        puts_(b, "(not UTF-8)");
        return;
    }
    if (!v[0]) v = "\"\"";
    int run = 0, longest = 0;
    for (const char *p = v; *p; p++) {
        run = *p == '`' ? run + 1 : 0;
        if (run > longest) longest = run;
    }
    char ticks[FL_CONFIG_STRING_MAX + 2];
    memset(ticks, '`', (size_t)longest + 1);
    ticks[longest + 1] = '\0';
    puts_(b, ticks);
    if (longest) puts_(b, " ");
    puts_(b, v);
    if (longest) puts_(b, " ");
    puts_(b, ticks);
}

char *fl_hparams_config_markdown(const fl_config_t *c) {
    fl_config_t *d = malloc(sizeof *d);
    if (!d) return NULL;
    fl_config_defaults(d);
    strbuf_t b = {0};
    puts_(&b,
          "The run's effective configuration (its config.ini), every key; where a value is not fleet's "
          "default, the default beside it.\n\n| key | value | default |\n|---|---|---|\n");
    char v[FL_CONFIG_STRING_MAX], dv[FL_CONFIG_STRING_MAX];
    for (int i = 0; i < NKEYS; i++) {
        value_of(c, i, v, sizeof v);
        value_of(d, i, dv, sizeof dv);
        puts_(&b, "| ");
        puts_(&b, keys[i].name);
        puts_(&b, " | ");
        code_cell(&b, v);
        puts_(&b, " | ");
        if (strcmp(v, dv) != 0) code_cell(&b, dv);
        puts_(&b, " |\n");
    }
    free(d);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- both, to the event file --------------------------------------------------------- */

fl_status fl_hparams_write(fl_tfevents_t *w, const fl_config_t *c, int64_t step, double wall_time, int with_hparams,
                           fl_err_t *err) {
    char *md = fl_hparams_config_markdown(c);
    if (!md) return fl_err_set(err, FL_NO_MEMORY, "out of memory for the configuration's text summary");
    fl_status st = fl_tfevents_text(w, FL_HPARAMS_TEXT_TAG, step, wall_time, md, err);
    free(md);
    if (st != FL_OK || !with_hparams) return st;
    static const fl_tfevents_metric_t metrics[] = {
        {"eval/return_mean", "evaluation return", "the last greedy evaluation's mean return", 1},
        {"train/mean_return_100", "training return", "the mean return of the last 100 training episodes", 0},
        {"learner/steps", "learner steps", "learner steps at the last progress line", 0},
        {"time/seconds", "seconds", "the run's seconds at the last progress line", 0},
    };
    fl_hparams_t *h = fl_hparams_from_config(c);
    if (!h) return fl_err_set(err, FL_NO_MEMORY, "out of memory for the run's hyperparameters");
    st = fl_tfevents_hparams(w, wall_time, NULL, h->n, h->hp, (int)(sizeof metrics / sizeof metrics[0]), metrics, err);
    fl_hparams_free(h);
    return st;
}
