#include "common/clock.h"

#include <errno.h>
#include <time.h>

int64_t fl_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double fl_clock_sec(void) {
    return (double)fl_clock_ns() * 1e-9;
}

double fl_clock_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void fl_sleep_sec(double sec) {
    if (sec <= 0) return;
    struct timespec req = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)}, rem;
    while (nanosleep(&req, &rem) != 0 && errno == EINTR) req = rem;
}
