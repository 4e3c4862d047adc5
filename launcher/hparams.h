/* hparams: a run's configuration in TensorBoard, beside its scalars (the monitor writes
 * it when the event file opens, launcher/monitor.c):
 *
 *   TEXT tab     `run/config`: the effective configuration (config.ini's every key) as a
 *                Markdown table of key, value and, where the value is not fleet's
 *                default, the default;
 *   HPARAMS tab  the run's hyperparameters (fl_hparams_from_config: every key but those of
 *                where files go, how processes are run and watched, and the network) with
 *                their types, help texts and, for choices and switches, their domains;
 *                keys set away from fleet's default are marked `differs`, which the tab
 *                lists first. Its metrics are the last values of eval/return_mean,
 *                train/mean_return_100, learner/steps and time/seconds.
 *
 * Values are spelled as config.ini spells them (fl_config_get_string); numbers go to the
 * hparams plugin as numbers (float64), switches as booleans, the rest as strings. */
#ifndef FL_LAUNCHER_HPARAMS_H
#define FL_LAUNCHER_HPARAMS_H

#include <stdint.h>

#include "common/config.h"
#include "common/status.h"
#include "common/tfevents.h"

/* The text summary's tag. */
#define FL_HPARAMS_TEXT_TAG "run/config"

/* The hyperparameters of a configuration: hp[0..n) for fl_tfevents_hparams, whose
 * strings the struct holds. */
typedef struct fl_hparams fl_hparams_t;
struct fl_hparams {
    int n;
    fl_tfevents_hparam_t *hp;
    void *storage; /* the values' and choices' text */
};

/* The hyperparameters of c in the key table's order (malloc'd; NULL when out of memory).
 * A string key whose value is not UTF-8 (the hparams plugin could not read it) is left
 * out. */
fl_hparams_t *fl_hparams_from_config(const fl_config_t *c);
void fl_hparams_free(fl_hparams_t *h); /* NULL is a no-op */

/* 1 when the key ("section.key") is among the run's hyperparameters, else 0 (also for a
 * key the configuration does not have). */
int fl_hparams_is_hparam(const char *name);

/* The text summary: a Markdown table of every key of c (malloc'd; NULL when out of
 * memory). Values are code spans; a value that is not UTF-8 shows as "(not UTF-8)". */
char *fl_hparams_config_markdown(const fl_config_t *c);

/* Writes the text summary at (step, wall_time) and, with with_hparams, the hparams
 * plugin's experiment and session records (fl_tfevents_hparams) to w. */
fl_status fl_hparams_write(fl_tfevents_t *w, const fl_config_t *c, int64_t step, double wall_time, int with_hparams,
                           fl_err_t *err);

#endif
