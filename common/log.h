/* log: leveled logging to stderr with a role/rank prefix.
 *
 * Lines look like `12:03:04.512 I [replay 0] message`. The level and prefix are
 * process-wide (set once by main for the role); fl_log itself is thread-safe (one
 * write(2) per line). */
#ifndef FL_COMMON_LOG_H
#define FL_COMMON_LOG_H

typedef enum { FL_LOG_DEBUG = 0, FL_LOG_INFO = 1, FL_LOG_WARN = 2, FL_LOG_ERROR = 3, FL_LOG_OFF = 4 } fl_log_level;

void fl_log_set_level(fl_log_level level);
fl_log_level fl_log_get_level(void);
/* Parses "debug", "info", "warn", "error", "off"; returns -1 if unknown. */
int fl_log_parse_level(const char *s);
/* Sets the role and rank shown in every line ("actor", 3). rank < 0 hides the rank. */
void fl_log_set_role(const char *role, int rank);
void fl_log(fl_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether the n-th (1-based) of a repeated event gets a log line: the first 10, then every
 * 1,000th, so that a flood (refused calls, forged reports) shows without filling the log. */
static inline int fl_log_sampled(unsigned long long n) {
    return n <= 10 || n % 1000 == 0;
}

#define FL_DEBUG(...) fl_log(FL_LOG_DEBUG, __VA_ARGS__)
#define FL_INFO(...) fl_log(FL_LOG_INFO, __VA_ARGS__)
#define FL_WARN(...) fl_log(FL_LOG_WARN, __VA_ARGS__)
#define FL_ERROR(...) fl_log(FL_LOG_ERROR, __VA_ARGS__)

#endif
