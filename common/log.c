#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static fl_log_level g_level = FL_LOG_INFO;
static char g_prefix[64] = "";

void fl_log_set_level(fl_log_level level) {
    g_level = level;
}
fl_log_level fl_log_get_level(void) {
    return g_level;
}

int fl_log_parse_level(const char *s) {
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

void fl_log_set_role(const char *role, int rank) {
    if (!role || !*role)
        g_prefix[0] = '\0';
    else if (rank >= 0)
        snprintf(g_prefix, sizeof g_prefix, "[%s %d] ", role, rank);
    else
        snprintf(g_prefix, sizeof g_prefix, "[%s] ", role);
}

void fl_log(fl_log_level level, const char *fmt, ...) {
    if (level < g_level || level >= FL_LOG_OFF) return;
    static const char letters[] = "DIWE";
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %c %s", tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, letters[level], g_prefix);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
