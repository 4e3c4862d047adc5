/* replay_fixture: the one replay shard the replay tests (and the learner's, the actors')
 * start: a fl_replay_service (replay/server.h) on 127.0.0.1 port 0 or another listen
 * address, its bound address, and a client of it (replay/client.h) when the test asks
 * for one. Failures fail the current cmocka test, naming the step and the error.
 *
 *   replay_fixture_t f;
 *   fl_replay_service_opts_t o = replay_fixture_opts(SPEC, NUM_ACTIONS, 10000, 1);
 *   o.seed = 7;                                  (anything else the test sets)
 *   replay_fixture_start(&f, &o);                (f.svc, f.addr)
 *   fl_replay_client_t *c = replay_fixture_client(&f);
 *   ...
 *   replay_fixture_stop(&f);                     (the client, then the service)
 *
 * Header-only; include after <cmocka.h>. */
#ifndef FL_TESTS_REPLAY_FIXTURE_H
#define FL_TESTS_REPLAY_FIXTURE_H

#include <stdint.h>
#include <string.h>

#include "replay/client.h"
#include "replay/server.h"

typedef struct replay_fixture {
    fl_replay_service_t *svc;
    fl_replay_client_t *cli; /* replay_fixture_client's, NULL until it is asked for */
    char addr[300];          /* the bound address: "127.0.0.1:PORT", or the unix socket listened on */
} replay_fixture_t;

/* fl_replay_service_opts_init's options with the observation signature, the action
 * count, the capacity and replay.min_size_to_sample set. */
static inline fl_replay_service_opts_t replay_fixture_opts(fl_obs_spec_t obs, int num_actions, int64_t capacity,
                                                           int64_t min_size) {
    fl_replay_service_opts_t o;
    fl_replay_service_opts_init(&o);
    o.obs = obs;
    o.num_actions = num_actions;
    o.capacity = capacity;
    o.min_size_to_sample = min_size;
    return o;
}

/* Creates a shard of opts and starts it on listen ("127.0.0.1:0", "unix:PATH", ...). */
static inline void replay_fixture_start_at(replay_fixture_t *f, const fl_replay_service_opts_t *opts,
                                           const char *listen) {
    memset(f, 0, sizeof *f);
    fl_err_t e;
    fl_err_init(&e);
    if (fl_replay_service_create(opts, &f->svc, &e) != FL_OK) fail_msg("replay shard: create: %s", e.msg);
    if (fl_replay_service_start(f->svc, listen, f->addr, sizeof f->addr, &e) != FL_OK)
        fail_msg("replay shard: start on %s: %s", listen, e.msg);
}

/* ... on 127.0.0.1, a free port. */
static inline void replay_fixture_start(replay_fixture_t *f, const fl_replay_service_opts_t *opts) {
    replay_fixture_start_at(f, opts, "127.0.0.1:0");
}

/* The fixture's client of its shard (made on the first call). */
static inline fl_replay_client_t *replay_fixture_client(replay_fixture_t *f) {
    if (!f->cli) {
        fl_err_t e;
        fl_err_init(&e);
        if (fl_replay_client_create(f->addr, &f->cli, &e) != FL_OK) fail_msg("replay client of %s: %s", f->addr, e.msg);
    }
    return f->cli;
}

/* Destroys the client and the shard (either may be NULL); f can be started again. */
static inline void replay_fixture_stop(replay_fixture_t *f) {
    fl_replay_client_destroy(f->cli);
    fl_replay_service_destroy(f->svc);
    f->cli = NULL;
    f->svc = NULL;
}

#endif
