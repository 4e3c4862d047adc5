/* control: how roles report to the launcher (fleet.Control/Report over gRPC).
 *
 * A reporter gathers a role's counters and sends them as one Report message at most
 * every `every_s` seconds (fl_reporter_tick is cheap to call in a hot loop). The
 * launcher's answer may ask the role to stop (fl_reporter_should_stop). A reporter with
 * no address (NULL or "") does nothing and never asks to stop, so roles run alone too.
 * One owner thread per reporter. */
#ifndef FL_COMMON_CONTROL_H
#define FL_COMMON_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "common/credential.h"
#include "common/status.h"

typedef struct fl_reporter fl_reporter_t;

/* What a role reports; counters are totals since the role started. */
typedef struct fl_report {
    uint64_t env_steps, episodes, transitions_acked, param_version, learner_steps, samples;
    double loss;          /* learner: mean loss since the last report */
    double wait_fraction; /* learner: share of time waiting for data */
    double epsilon;       /* actor */
    int leaving;          /* actor: its last report (Report.leaving) */
    /* Named figures with no field of their own (Report.extra): n_extra names and values
     * (at most 64 are sent; names are borrowed until fl_reporter_tick returns). */
    int n_extra;
    const char *const *extra_names;
    const double *extra_values;
} fl_report_t;

/* run.deterministic: the Report.extra names of one round's figures, sent (forced) by the
 * learner and every actor at the end of each round and gathered by the launcher into
 * rounds.csv. FL_REPORT_ROUND (the round, >= 1) marks such a report. */
#define FL_REPORT_ROUND "det_round"
#define FL_REPORT_ROUND_EPISODES "det_round_episodes"       /* actor: episodes ended in the round */
#define FL_REPORT_ROUND_RETURN_SUM "det_round_return_sum"   /* actor: their returns' sum */
#define FL_REPORT_ROUND_LENGTH_SUM "det_round_length_sum"   /* actor: their lengths' sum */
#define FL_REPORT_ROUND_UPDATES "det_round_updates"         /* learner: updates taken in the round */
#define FL_REPORT_ROUND_LOSS "det_round_loss"               /* learner: their mean loss */
#define FL_REPORT_ROUND_REPLAY_SIZE "det_round_replay_size" /* learner: the shard's size at the commit */

fl_status fl_reporter_create(const char *control_addr, const char *role, uint32_t index, double every_s,
                             fl_reporter_t **out, fl_err_t *err);
void fl_reporter_destroy(fl_reporter_t *r);
/* Records a finished episode (sent with the next report). */
void fl_reporter_episode(fl_reporter_t *r, float ret, uint32_t length);
/* Sends a report if every_s has passed since the last one (or force != 0). A failed
 * send is logged once and retried at the next tick; it never fails the role. */
void fl_reporter_tick(fl_reporter_t *r, const fl_report_t *rep, int force);
/* 1 once the launcher has asked this role to stop. */
int fl_reporter_should_stop(const fl_reporter_t *r);
/* The fleet's env steps and learner steps as the launcher's last answer gave them (0
 * before the first answer, and without a launcher). */
void fl_reporter_fleet_steps(const fl_reporter_t *r, uint64_t *env_steps, uint64_t *learner_steps);

/* ------------------------------------------------------------------- join ---- */

/* What the launcher gives an actor that joins a running fleet (fleet.Control/Join). */
typedef struct fl_join_grant {
    uint32_t index;
    uint64_t incarnation;
    char credential[FL_CRED_TOKEN_CHARS + 1];
    double epsilon;
    char *replay, *paramserver, *config, *run_name; /* malloc'd */
} fl_join_grant_t;

/* Asks the launcher at control_addr for a place in its fleet, as an actor on `host`;
 * tries for up to wait_s while the fleet is still starting (UNAVAILABLE or no answer).
 * Checks what comes back: a credential of 32 hex digits, an epsilon in [0, 1], the
 * services' addresses and a config (FL_INVALID_ARGUMENT naming the field otherwise).
 * Errors: the launcher's refusal (its status and message), or the call's failure. On
 * success free *out with fl_join_grant_free. */
fl_status fl_control_join(const char *control_addr, const char *host, double wait_s, fl_join_grant_t *out,
                          fl_err_t *err);
void fl_join_grant_free(fl_join_grant_t *g);

#endif
