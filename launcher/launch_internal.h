/* launch_internal: what the launcher's two halves share: opening a run (open.c: the
 * plan, the run folder, Control, events) and watching it (monitor.c: the progress loop,
 * the metrics files, the ordered stop, the summary). Not for use outside launcher/. */
#ifndef FL_LAUNCH_INTERNAL_H
#define FL_LAUNCH_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "common/config.h"
#include "common/rpc.h"
#include "common/tfevents.h"
#include "launcher/curve.h"
#include "launcher/fleet_state.h"
#include "launcher/launch.h"
#include "paramserver/client.h"
#include "replay/client.h"
#include "replay/sharded.h"

struct fl_launch {
    fl_config_t cfg;
    char cfg_file[256];
    char dir[600], cfg_path[700], csv_path[700], roles_path[700], summary_path[700], evals_path[700], rounds_path[700],
        returns_path[700];
    fl_fleet_state_t fs;
    int fs_ready;
    fl_rpc_server_t *control;
    char control_addr[300];
    double t_start;
    int lock_fd;            /* run.lock, held while the launcher lives */
    int resuming;           /* fl_launch_resume */
    fl_fleet_totals_t prev; /* a resumed run's figures at its last stop */
    char state_path[800];   /* run.checkpoint_dir/launcher.state, or "" */
    FILE *events;           /* events.log (opened at the first event) */
    uint64_t restarts;      /* roles restarted by the supervision */
    uint64_t role_restarts[FL_LAUNCH_ROLES];
    uint64_t crashes, hangs; /* role processes that died of a fault signal; that the launcher found hung */
    uint64_t role_crashes[FL_LAUNCH_ROLES];
    char last_crash[160]; /* "actor 0: signal 11 (Segmentation fault)" */
    char sock_dir[120];   /* the folder of the services' unix sockets (mode 0700), or "" (TCP) */
    int frame_skip;       /* emulator frames per env step (the wrappers' frameskip; 1 without) */
    /* When each replay shard [0] and parameter-server shard [1] last answered the monitor's
     * Info (fl_clock_sec; 0: never): a service's sign of life, as a report is a role's. */
    _Atomic double service_seen[2][256];
};

/* The roles' names in FL_LAUNCH_ROLES order (summary keys, events). */
extern const char *const fl__launch_role_names[FL_LAUNCH_ROLES];

/* 1 when run.target_return applies to the evaluators' return. */
static inline int target_on_eval(const fl_config_t *c) {
    return c->run_target_on == FL_CFG_TARGET_EVAL && c->run_evaluators > 0;
}

/* The supervision counters in launcher.state's layout (fl_fleet_totals_t.supervision). */
void fl__launch_pack_supervision(const fl_launch_t *L, uint64_t *c);

/* ------------------------------------------------ the monitor (monitor.c, summary.c) */

/* The kinds of process whose memory and CPU the run reports (the launcher last). */
enum { KIND_ACTOR, KIND_LEARNER, KIND_EVALUATOR, KIND_REPLAY, KIND_PARAMSERVER, KIND_LAUNCHER, N_KINDS };

/* What fl_launch_monitor works with, from the first progress line to the summary. */
typedef struct monitor {
    fl_launch_t *L;
    const fl_launch_ops_t *ops;
    void *ctx;
    int R;      /* replay shards */
    int gorila; /* learner.mode = gorila: the learners' steps add up */
    /* The learners' steps at this sitting's first progress line, and whether they have
     * moved since (until then the update rate is not shown: it would read 0 for a window
     * the learners had not yet reported on). */
    uint64_t lsteps_first;
    int lsteps_first_set, upd_seen;
    int exit_code;
    char reason[512];
    fl_replay_sharded_t *replay;
    fl_replay_info_t rinfo;       /* summed over the shards */
    int replay_final;             /* every shard answered the last Info, after the actors stopped */
    fl_replay_info_t *shard_info; /* per shard, R of them (NULL when out of memory) */
    fl_param_client_t *ps;
    fl_param_info_t pinfo;
    /* The largest resident and private memory (bytes) a process of each kind had at a
     * progress line (kinds: KIND_*), and of the whole fleet. */
    uint64_t mem_peak[N_KINDS][2], mem_total_peak[2];
    double cpu_sum[N_KINDS];  /* the CPU seconds of each kind's processes, as they last told them */
    int P;                    /* parameter-server shards */
    fl_param_info_t *ps_info; /* per shard, P of them (NULL when out of memory) */
    /* metrics.csv, roles.csv, evals.csv, returns.csv (NULL when they could not be opened) */
    FILE *csv, *roles, *evals, *returns;
    FILE *rounds;      /* run.deterministic: rounds.csv */
    fl_tfevents_t *tb; /* events.out.tfevents.* (NULL when it could not be written) */
    fl_curve_t *curve; /* curve.png */
    double next_curve; /* when curve.png is redrawn next */
    double next_state; /* when launcher.state is written next */
    /* The fleet's figures at the previous progress line. */
    double last_t;
    uint64_t last_inserted, last_env, last_learner, last_samples, last_fetches;
    /* The evaluations so far: the latest (the headline), how many, the best mean. */
    fl_eval_result_t eval;
    uint64_t n_evals;
    double best_eval;
    /* The first evaluation that reached run.target_return: the stop looks at every
     * evaluation, not only at the latest when a progress period ends (several may come
     * in one period). */
    int target_hit;
    fl_eval_result_t target_eval;
} monitor_t;

/* One period's figures from the roles' reports. */
typedef struct figures {
    uint64_t env, min_version; /* actors: env steps (sum), oldest parameter version */
    uint64_t lsteps, lsamples; /* learners: steps (see learner_figures), samples (sum) */
    double loss, wait;         /* learners' means */
    double mret;               /* mean training return over the last ep_count (<= 100) episodes */
    uint64_t ep_count, episodes;
    uint64_t rss, private_bytes;  /* memory: every process's that told it, the launcher's own too */
    int joined_ever, joined_live; /* actors that joined: any yet; those at work now */
} figures_t;

/* The fleet's figures at the end, for summary.txt and the last line. */
typedef struct totals {
    uint64_t acked, env, lsteps, episodes, ep_count;
    uint64_t pending, dropped, lost; /* actors' unacknowledged: still pending, dropped for the bound, lost
                                        with a replaced incarnation */
    double mret, best;
} totals_t;

/* The kinds' names in KIND_* order (roles.csv, summary keys). */
extern const char *const fl__monitor_kind_names[N_KINDS];

void fl__monitor_final_totals(monitor_t *M, totals_t *t);
void fl__monitor_write_summary(const monitor_t *M, double elapsed, const totals_t *t);
void fl__monitor_print_outcome(const monitor_t *M, double elapsed, const totals_t *t);

#endif
