/* mode: what one training step of a learner is, behind one table of operations:
 *   mode_apex.c    one Ape-X learner: sample, update, bookkeeping (or the backend's
 *                  pipeline, batch k+1's copy overlapping update k);
 *   mode_group.c   apex learners in step: learner 0's state broadcast at the start, then
 *                  every step a collective gradient average (ring all-reduce,
 *                  learner/reduce.h) and the same update on every learner;
 *   mode_gorila.c  the parameter servers own the optimizer: fetch, gradient, push.
 * learner.c picks one at create (learner.mode, and learner.count for the group) and
 * fl_learner_run is start, then step until done or an error, then end.
 * Failure: start and step return the learner's errors (FL_CANCELLED when stopped while
 * waiting, which the run treats as a clean stop); end gets the loop's status and returns
 * the run's. Thread-safety: the learner's owner thread. */
#ifndef FL_LEARNER_MODE_H
#define FL_LEARNER_MODE_H

#include "common/status.h"
#include "learner/learner.h"

typedef struct fl__learner_mode {
    const char *name;
    /* Learner 0 publishes the parameters the actors read (apex); otherwise the parameter
     * servers own them (gorila). */
    int publishes;
    fl_status (*start)(fl_learner_t *l, fl_err_t *err);
    /* One step; *done = 1 when the learner stops. */
    fl_status (*step)(fl_learner_t *l, int *done, fl_err_t *err);
    /* After the loop (s: its status); NULL: nothing to finish. */
    fl_status (*end)(fl_learner_t *l, fl_status s, fl_err_t *err);
} fl__learner_mode_t;

extern const fl__learner_mode_t fl__learner_mode_apex, fl__learner_mode_group, fl__learner_mode_gorila;

/* mode_apex.c: the pipelined step and its drain, for backends with launch/finish (a lone
 * apex learner; see fl_learner_t.pipelined). */
fl_status fl__learner_pipeline_step(fl_learner_t *l, int *done, fl_err_t *err);
fl_status fl__learner_pipeline_end(fl_learner_t *l, fl_status s, fl_err_t *err);

#endif
