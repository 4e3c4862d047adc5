/* stats: the sample figures of stats.h. */
#include "common/stats.h"

#include <math.h>
#include <stdlib.h>

/* v[i] of a double (is_float 0) or float (1) array. */
static double at(const void *v, int is_float, int i) {
    return is_float ? (double)((const float *)v)[i] : ((const double *)v)[i];
}

static fl_stats_t stats_of(const void *v, int is_float, int n) {
    fl_stats_t s = {.n = n, .mean = NAN, .std = NAN, .ci95 = NAN};
    if (n < 1) return s;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += at(v, is_float, i);
    s.mean = sum / n;
    s.std = s.ci95 = 0;
    if (n < 2) return s;
    double ss = 0;
    for (int i = 0; i < n; i++) {
        double d = at(v, is_float, i) - s.mean;
        ss += d * d;
    }
    s.std = sqrt(ss / (n - 1));
    s.ci95 = fl_stats_t95(n - 1) * s.std / sqrt((double)n);
    return s;
}

fl_stats_t fl_stats_of(const double *v, int n) {
    return stats_of(v, 0, n);
}

fl_stats_t fl_stats_of_floats(const float *v, int n) {
    return stats_of(v, 1, n);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double fl_stats_median(double *v, int n) {
    if (n < 1) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double fl_stats_t95(int df) {
    static const double t[31] = {0,     12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                 2.201, 2.179,  2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080,
                                 2.074, 2.069,  2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
    if (df < 1) return 0;
    if (df <= 30) return t[df];
    /* Cornish-Fisher: z + (z^3 + z) / (4 df) */
    const double z = 1.959964;
    return z + (z * z * z + z) / (4.0 * df);
}
