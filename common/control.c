/* control: the role side of fleet.Control/Report (see control.h).
 *
 * Finished episodes wait in a ring of the last FL__CONTROL_EPISODES_MAX (older ones are
 * dropped when the launcher is unreachable for long) until a report carries them. A
 * report is a unary call with a short deadline and no wait-for-ready, so an absent
 * launcher costs a role a failed connection attempt per report, never a stall. A failed
 * send keeps the episodes for the next report and is logged once until a send succeeds. */
#include "common/control.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/methods.h"
#include "common/procmem.h"
#include "common/rpc.h"
#include "fleet.pb-c.h"

#define FL__CONTROL_EPISODES_MAX 4096
#define FL__CONTROL_DEADLINE_MS 2000
#define FL__CONTROL_EXTRA_MAX 64

struct fl_reporter {
    fl_rpc_channel_t *ch; /* NULL: reporting is off */
    char *role;
    uint32_t index;
    uint64_t incarnation; /* FLEET_CREDENTIAL's (0: none given) */
    char credential[FL_CRED_TOKEN_CHARS + 1];
    double every_s;
    double t0, last_sent;
    int sent_once;
    int failing; /* the last send failed and was logged */
    int stop;
    uint64_t fleet_env_steps, fleet_learner_steps; /* the launcher's last answer */
    /* ring of finished episodes: oldest at head */
    float returns[FL__CONTROL_EPISODES_MAX];
    uint32_t lengths[FL__CONTROL_EPISODES_MAX];
    size_t head, count;
    /* the same, in order, for the message */
    float out_returns[FL__CONTROL_EPISODES_MAX];
    uint32_t out_lengths[FL__CONTROL_EPISODES_MAX];
};

fl_status fl_reporter_create(const char *control_addr, const char *role, uint32_t index, double every_s,
                             fl_reporter_t **out, fl_err_t *err) {
    *out = NULL;
    fl_reporter_t *r = calloc(1, sizeof *r);
    if (!r) return fl_err_set(err, FL_NO_MEMORY, "control: out of memory");
    r->role = strdup(role ? role : "");
    if (!r->role) {
        free(r);
        return fl_err_set(err, FL_NO_MEMORY, "control: out of memory");
    }
    r->index = index;
    const char *cred = getenv(FL_CRED_ENV);
    if (cred && fl_cred_parse(cred, &r->incarnation, r->credential) != 0) {
        fl_log(FL_LOG_WARN,
               "control: %s is not N:TOKEN (32 hex digits); reporting without a credential, which the "
               "launcher refuses",
               FL_CRED_ENV);
        r->incarnation = 0;
        r->credential[0] = '\0';
    }
    r->every_s = every_s > 0 ? every_s : 0;
    r->t0 = fl_clock_sec();
    if (control_addr && *control_addr) {
        fl_status st = fl_rpc_channel_create(control_addr, 0, &r->ch, err);
        if (st != FL_OK) {
            free(r->role);
            free(r);
            return st;
        }
    }
    *out = r;
    return FL_OK;
}

void fl_reporter_destroy(fl_reporter_t *r) {
    if (!r) return;
    fl_rpc_channel_destroy(r->ch);
    free(r->role);
    free(r);
}

void fl_reporter_episode(fl_reporter_t *r, float ret, uint32_t length) {
    if (!r || !r->ch) return;
    size_t slot;
    if (r->count == FL__CONTROL_EPISODES_MAX) {
        slot = r->head; /* overwrite the oldest */
        r->head = (r->head + 1) % FL__CONTROL_EPISODES_MAX;
    } else {
        slot = (r->head + r->count) % FL__CONTROL_EPISODES_MAX;
        r->count++;
    }
    r->returns[slot] = ret;
    r->lengths[slot] = length;
}

void fl_reporter_tick(fl_reporter_t *r, const fl_report_t *rep, int force) {
    if (!r || !r->ch) return;
    double now = fl_clock_sec();
    if (!force && r->sent_once && now - r->last_sent < r->every_s) return;
    r->sent_once = 1;
    r->last_sent = now;

    size_t n = r->count;
    for (size_t i = 0; i < n; i++) {
        size_t k = (r->head + i) % FL__CONTROL_EPISODES_MAX;
        r->out_returns[i] = r->returns[k];
        r->out_lengths[i] = r->lengths[k];
    }
    static const fl_report_t zero;
    if (!rep) rep = &zero;
    Fleet__Report m = FLEET__REPORT__INIT;
    m.role = r->role;
    m.index = r->index;
    m.pid = (int64_t)getpid();
    m.incarnation = r->incarnation;
    m.credential = r->credential;
    m.uptime_s = now - r->t0;
    m.env_steps = rep->env_steps;
    m.episodes = rep->episodes;
    m.n_episode_returns = n;
    m.episode_returns = r->out_returns;
    m.n_episode_lengths = n;
    m.episode_lengths = r->out_lengths;
    m.transitions_acked = rep->transitions_acked;
    m.param_version = rep->param_version;
    m.learner_steps = rep->learner_steps;
    m.samples = rep->samples;
    m.loss = rep->loss;
    m.wait_fraction = rep->wait_fraction;
    m.epsilon = rep->epsilon;
    m.leaving = rep->leaving != 0;
    fl_procmem(&m.rss_bytes, &m.private_bytes);
    m.cpu_s = fl_proc_cpu_s();
    Fleet__Metric extra_m[FL__CONTROL_EXTRA_MAX];
    Fleet__Metric *extra_p[FL__CONTROL_EXTRA_MAX];
    size_t n_extra = rep->n_extra > 0 ? (size_t)rep->n_extra : 0;
    if (n_extra > FL__CONTROL_EXTRA_MAX) n_extra = FL__CONTROL_EXTRA_MAX;
    for (size_t i = 0; i < n_extra; i++) {
        fleet__metric__init(&extra_m[i]);
        extra_m[i].name = (char *)rep->extra_names[i];
        extra_m[i].value = rep->extra_values[i];
        extra_p[i] = &extra_m[i];
    }
    m.n_extra = n_extra;
    m.extra = n_extra ? extra_p : NULL;

    fl_err_t err;
    fl_err_init(&err);
    ProtobufCMessage *resp = NULL;
    fl_status st = fl_rpc_unary_pb(r->ch, fl_method_path(FL_METHOD_CONTROL_REPORT), &m.base,
                                   &fleet__report_response__descriptor, &resp, FL__CONTROL_DEADLINE_MS, 0, &err);
    if (st != FL_OK) {
        if (!r->failing)
            FL_WARN("control: cannot report to %s (%s); the role goes on and keeps retrying quietly",
                    fl_rpc_channel_target(r->ch), err.msg);
        r->failing = 1;
        return;
    }
    if (r->failing) FL_INFO("control: reporting to %s again", fl_rpc_channel_target(r->ch));
    r->failing = 0;
    /* The episodes sent are delivered; any recorded since stay (none: one owner thread). */
    r->head = (r->head + n) % FL__CONTROL_EPISODES_MAX;
    r->count -= n;
    const Fleet__ReportResponse *rr = (const Fleet__ReportResponse *)resp;
    r->fleet_env_steps = rr->env_steps;
    r->fleet_learner_steps = rr->learner_steps;
    if (rr->stop && !r->stop) {
        FL_INFO("control: the launcher asks this role to stop");
        r->stop = 1;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
}

int fl_reporter_should_stop(const fl_reporter_t *r) {
    return r && r->stop;
}

void fl_reporter_fleet_steps(const fl_reporter_t *r, uint64_t *env_steps, uint64_t *learner_steps) {
    *env_steps = r ? r->fleet_env_steps : 0;
    *learner_steps = r ? r->fleet_learner_steps : 0;
}

/* ------------------------------------------------------------------- join ---- */

void fl_join_grant_free(fl_join_grant_t *g) {
    if (!g) return;
    free(g->replay);
    free(g->paramserver);
    free(g->config);
    free(g->run_name);
    memset(g, 0, sizeof *g);
}

/* The grant of a JoinResponse into out, checked. */
static fl_status take_grant(const Fleet__JoinResponse *m, fl_join_grant_t *out, fl_err_t *err) {
    const char *cred = m->credential ? m->credential : "";
    uint64_t n;
    char tok[FL_CRED_TOKEN_CHARS + 1], both[FL_CRED_TOKEN_CHARS + 32];
    snprintf(both, sizeof both, "1:%s", cred);
    if (m->incarnation != 1 || fl_cred_parse(both, &n, tok) != 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "join: the launcher's answer holds incarnation %llu and a credential of %zu characters "
                          "(expected 1 and 32 hexadecimal digits)",
                          (unsigned long long)m->incarnation, strlen(cred));
    if (!(m->epsilon >= 0 && m->epsilon <= 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT, "join: the launcher's answer holds epsilon %g (expected 0..1)",
                          m->epsilon);
    if (!m->replay || !m->replay[0] || !m->paramserver || !m->paramserver[0] || !m->config || !m->config[0])
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "join: the launcher's answer lacks the %s (expected the replay shards' and parameter "
                          "servers' addresses and the run's config)",
                          !m->replay || !m->replay[0]             ? "replay addresses"
                          : !m->paramserver || !m->paramserver[0] ? "parameter servers' addresses"
                                                                  : "config");
    memset(out, 0, sizeof *out);
    out->index = m->index;
    out->incarnation = 1;
    snprintf(out->credential, sizeof out->credential, "%s", tok);
    out->epsilon = m->epsilon;
    out->replay = strdup(m->replay);
    out->paramserver = strdup(m->paramserver);
    out->config = strdup(m->config);
    out->run_name = strdup(m->run_name ? m->run_name : "");
    if (!out->replay || !out->paramserver || !out->config || !out->run_name) {
        fl_join_grant_free(out);
        return fl_err_set(err, FL_NO_MEMORY, "join: out of memory");
    }
    return FL_OK;
}

fl_status fl_control_join(const char *control_addr, const char *host, double wait_s, fl_join_grant_t *out,
                          fl_err_t *err) {
    memset(out, 0, sizeof *out);
    if (!control_addr || !control_addr[0]) return fl_err_set(err, FL_INVALID_ARGUMENT, "join: no launcher address");
    fl_rpc_channel_t *ch = NULL;
    FL_TRY(fl_rpc_channel_create(control_addr, 0, &ch, err));
    Fleet__JoinRequest q = FLEET__JOIN_REQUEST__INIT;
    q.role = "actor";
    q.host = (char *)(host ? host : "");
    q.pid = (int64_t)getpid();
    const double until = fl_clock_sec() + (wait_s > 0 ? wait_s : 0);
    fl_status s;
    for (;;) {
        ProtobufCMessage *resp = NULL;
        fl_err_t e;
        fl_err_init(&e);
        s = fl_rpc_unary_pb(ch, fl_method_path(FL_METHOD_CONTROL_JOIN), &q.base, &fleet__join_response__descriptor,
                            &resp, 10000, FL_RPC_WAIT_FOR_READY, &e);
        if (s == FL_OK) {
            s = take_grant((const Fleet__JoinResponse *)resp, out, err);
            protobuf_c_message_free_unpacked(resp, NULL);
            break;
        }
        if ((s != FL_UNAVAILABLE && s != FL_DEADLINE_EXCEEDED) || fl_clock_sec() >= until) {
            fl_err_set(err, s, "join %s: %s", control_addr, e.msg[0] ? e.msg : fl_status_str(s));
            break;
        }
        usleep(500 * 1000);
    }
    fl_rpc_channel_destroy(ch);
    return s;
}
