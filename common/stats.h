/* stats: the mean, standard deviation and 95% confidence interval of a sample, the one
 * definition that fleet's figures use: an evaluation's episodes (eval/evaluate.c), a
 * suite's seeds (cli/verb_suite.c: summary.md) and the suite's curve band over seeds
 * (launcher/curve.c).
 *
 *   mean  the arithmetic mean (two passes: the sum, then the squared deviations)
 *   std   the sample standard deviation, sqrt(sum (x - mean)^2 / (n - 1))
 *   ci95  the half-width of the 95% confidence interval of the mean: Student's t with
 *         n - 1 degrees of freedom (fl_stats_t95) times std / sqrt(n)
 * With one value std and ci95 are 0; with none every figure is NAN. Pure functions. */
#ifndef FL_COMMON_STATS_H
#define FL_COMMON_STATS_H

typedef struct fl_stats {
    int n;
    double mean, std, ci95;
} fl_stats_t;

/* The figures of v[0..n). */
fl_stats_t fl_stats_of(const double *v, int n);
/* The same for float values (summed in double). */
fl_stats_t fl_stats_of_floats(const float *v, int n);

/* The median of v[0..n), which it sorts in place; NAN for n < 1. */
double fl_stats_median(double *v, int n);

/* The two-sided 95% quantile of Student's t with df >= 1 degrees of freedom (exact to 3
 * decimals for df <= 30, then the normal approximation with a 1/df correction); 0 for
 * df < 1. */
double fl_stats_t95(int df);

#endif
