/* seed_util: the random seed of numeric tests and a tolerance check that names it.
 *
 * Each run draws a fresh seed (FLEET_TEST_SEED=N replays one); CHECK_CLOSE fails the
 * current cmocka test with the seed, the message and both values when
 * |got - want| > atol + rtol |want|. Include after <cmocka.h>; call pick_seed() first in
 * main. */
#ifndef FL_TESTS_SEED_UTIL_H
#define FL_TESTS_SEED_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static uint64_t g_seed;

#define SEED_NOTE()                                                                           \
    print_error("seed %llu (replay with FLEET_TEST_SEED=%llu): ", (unsigned long long)g_seed, \
                (unsigned long long)g_seed)

#define CHECK_CLOSE(got, want, atol, rtol, ...)                      \
    do {                                                             \
        const double got_ = (got), want_ = (want);                   \
        if (!(fabs(got_ - want_) <= (atol) + (rtol)*fabs(want_))) {  \
            SEED_NOTE();                                             \
            print_error(__VA_ARGS__);                                \
            print_error(": got %.9g, expected %.9g\n", got_, want_); \
            fail();                                                  \
        }                                                            \
    } while (0)

static void pick_seed(void) {
    const char *s = getenv("FLEET_TEST_SEED");
    if (s && *s) {
        g_seed = strtoull(s, NULL, 0);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g_seed = ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
}

#endif
