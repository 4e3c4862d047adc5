#include "paramserver/staleness.h"

const char *const fl_param_staleness_names[FL_PARAM_STALENESS_BUCKETS] = {"0",   "1",    "2",     "3-4",
                                                                          "5-8", "9-16", "17-32", "33+"};

int fl_param_staleness_bucket(uint64_t s) {
    if (s <= 2) return (int)s;
    if (s <= 4) return 3;
    if (s <= 8) return 4;
    if (s <= 16) return 5;
    if (s <= 32) return 6;
    return 7;
}
