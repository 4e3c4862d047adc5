/* A CartPole fleet whose learner trains on the GPU (learner.device = cuda) solves
 * CartPole, and a learner resumed from its checkpoint continues from the same step count
 * and loss level. Label gpu; skips cleanly where fleet was built without CUDA or no GPU
 * is present. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"
#include "tests/run_util.h"
#ifdef FLEET_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

static char g_tmp[256];

static int have_gpu(void) {
#ifdef FLEET_HAVE_CUDA
    int n = 0;
    return fl_cuda_device_count(&n, NULL) == FL_OK && n > 0;
#else
    return 0;
#endif
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fleet-gpu-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_tmp);
    return 0;
}

static void test_gpu_learner_solves_cartpole(void **state) {
    (void)state;
    if (!have_gpu()) {
        fprintf(stderr, "SKIP: no GPU (or fleet built without CUDA)\n");
        skip();
    }
    char ckpt[320];
    snprintf(ckpt, sizeof ckpt, "learner.checkpoint_dir=%s", g_tmp);
    const char *sets[] = {"learner.device=cuda", "run.max_seconds=300", ckpt};
    char *log = NULL;
    int rc = run_fleet_at(g_tmp, NULL, 0, "gpu", sets, 3, 400, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "learner: training on "));
    assert_no_error_lines(log);
    char *sum = summary_at(g_tmp, "gpu");
    assert_non_null(sum);
    char reason[256];
    assert_non_null(kv_get(sum, "reason", reason, sizeof reason));
    assert_non_null(strstr(reason, "target reached"));
    unsigned long long steps = summary_u64(sum, "learner_steps");
    free(sum);
    free(log);

    /* Resume: the next run's learner starts at the saved step and loss level. */
    char resume[400];
    snprintf(resume, sizeof resume, "learner.resume=%s/learner-0.safetensors", g_tmp);
    const char *again[] = {"learner.device=cuda", "run.max_seconds=20", "run.stop_at_target=false", resume};
    rc = run_fleet_at(g_tmp, NULL, 0, "gpu-resumed", again, 4, 200, &log);
    assert_non_null(log);
    assert_int_equal(rc, 0);
    char want[400];
    snprintf(want, sizeof want, "resumed from %s/learner-0.safetensors at step %llu", g_tmp, steps);
    assert_non_null(strstr(log, want));
    sum = summary_at(g_tmp, "gpu-resumed");
    assert_non_null(sum);
    assert_true(summary_u64(sum, "learner_steps") > steps);
    free(sum);
    free(log);
}

int main(void) {
    if (!have_gpu()) {
        fprintf(stderr, "SKIP: no GPU, or fleet was built without CUDA\n");
        return 77; /* CTest's SKIP_RETURN_CODE (tests/CMakeLists.txt): skipped */
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpu_learner_solves_cartpole)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
