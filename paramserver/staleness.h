/* staleness: the one definition of a gorila push's staleness buckets (held version -
 * based_on_version), which the store counts, Info carries (fleet.proto's staleness_hist),
 * the client returns and the launcher writes as metrics columns and summary lines. Pure,
 * thread-safe. */
#ifndef FL_PARAMSERVER_STALENESS_H
#define FL_PARAMSERVER_STALENESS_H

#include <stdint.h>

/* The buckets: 0, 1, 2, 3-4, 5-8, 9-16, 17-32, 33+. */
#define FL_PARAM_STALENESS_BUCKETS 8

/* The bucket of a staleness, 0 .. FL_PARAM_STALENESS_BUCKETS - 1. */
int fl_param_staleness_bucket(uint64_t staleness);

/* Each bucket's name: "0", "1", "2", "3-4", "5-8", "9-16", "17-32", "33+". */
extern const char *const fl_param_staleness_names[FL_PARAM_STALENESS_BUCKETS];

#endif
