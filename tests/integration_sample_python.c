/* Interoperability of the Sample reply with another protobuf implementation: a replay
 * shard on 127.0.0.1 (in this process, MinAtar-shaped: uint8 (10, 10, 4), 6 actions)
 * holding 200 transitions from fleet's own writer, sampled by grpcio and decoded by
 * Python's protobuf runtime (tests/py/sample_interop.py). The shard writes its replies
 * with the observations first and 5-byte length prefixes (replay/wire.h); the script
 * checks every column it gets against what was inserted.
 *
 * grpcio (with protobuf) is installed from PyPI with pip into <build>/pydeps when the
 * interpreter lacks it (once); where that is impossible (no pip, no network) the test is
 * skipped with a message saying so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/py_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/client.h"
#include "replay/server.h"
#include "replay/writer.h"
#include "tests/proc_util.h"
#include "tests/replay_fixture.h"

#define N 200
#define OB 400

static void test_grpcio_reads_a_sample(void **state) {
    (void)state;
    char env[2048];
    const char *python = NULL;
    if (!py_find("grpc, google.protobuf", "grpcio protobuf", env, sizeof env, &python)) {
        print_message("SKIP: no python3 with grpcio and protobuf, and pip could not install them\n");
        skip();
    }
    fl_err_t e;
    fl_err_init(&e);
    const int shape[] = {10, 10, 4};
    fl_replay_service_opts_t ro = replay_fixture_opts(fl_obs_spec_make(FL_DTYPE_UINT8, 3, shape), 6, 1000, 100);
    replay_fixture_t f;
    replay_fixture_start(&f, &ro);

    /* transition i: obs every byte i % 200, next_obs i % 200 + 1 */
    uint8_t *obs = malloc((size_t)N * OB), *next = malloc((size_t)N * OB);
    int32_t actions[N];
    float rewards[N], discounts[N], prio[N];
    assert_true(obs && next);
    for (int i = 0; i < N; i++) {
        memset(obs + (size_t)i * OB, i % 200, OB);
        memset(next + (size_t)i * OB, i % 200 + 1, OB);
        actions[i] = i % 6;
        rewards[i] = (float)(i % 3);
        discounts[i] = 0.97f;
        prio[i] = 1.0f + (float)(i % 5);
    }
    fl_replay_writer_t *w = NULL;
    assert_int_equal(fl_replay_writer_create(replay_fixture_client(&f), 1, &ro.obs, 1, &w, &e), FL_OK);
    for (int k = 0; k < N; k += 50)
        assert_int_equal(fl_replay_writer_append(w, 50, obs + (size_t)k * OB, actions + k, rewards + k, discounts + k,
                                                 next + (size_t)k * OB, prio + k, &e),
                         FL_OK);
    assert_int_equal(fl_replay_writer_flush(w, 10000, &e), FL_OK);

    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s timeout 120 %s %s/tests/py/sample_interop.py %s", env, python, fleet_source_dir(),
             f.addr);
    const int rc = py_shell(cmd);
    fl_replay_writer_destroy(w);
    replay_fixture_stop(&f);
    free(obs), free(next);
    assert_int_equal(rc, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_grpcio_reads_a_sample)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
