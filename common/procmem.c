/* procmem: see procmem.h. */
#include "common/procmem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/clock.h"

/* The value in kB of the line of text that starts with key (e.g. "Rss:"), in bytes; -1
 * when no line does. */
static int64_t field_kb(const char *text, const char *key) {
    size_t klen = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, klen) != 0) continue;
        char *end;
        long long kb = strtoll(p + klen, &end, 10);
        if (end == p + klen || kb < 0) return -1;
        return (int64_t)kb * 1024;
    }
    return -1;
}

int fl_procmem_parse(const char *smaps_rollup, const char *status, uint64_t *rss, uint64_t *private_bytes) {
    *rss = *private_bytes = 0;
    if (smaps_rollup) {
        int64_t r = field_kb(smaps_rollup, "Rss:"), pc = field_kb(smaps_rollup, "Private_Clean:"),
                pd = field_kb(smaps_rollup, "Private_Dirty:");
        if (r >= 0 && pc >= 0 && pd >= 0) {
            *rss = (uint64_t)r;
            *private_bytes = (uint64_t)(pc + pd);
            return 0;
        }
    }
    if (status) {
        int64_t r = field_kb(status, "VmRSS:"), anon = field_kb(status, "RssAnon:");
        if (r >= 0) {
            *rss = (uint64_t)r;
            *private_bytes = anon >= 0 ? (uint64_t)anon : 0;
            return 0;
        }
    }
    return -1;
}

/* The whole of a /proc file (they report size 0), NUL-terminated, in buf; NULL when it
 * cannot be read. */
static const char *slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n ? buf : NULL;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static double last_read = -1e9;
static uint64_t last_rss, last_private;
static int last_rc = -1;

int fl_procmem(uint64_t *rss, uint64_t *private_bytes) {
    pthread_mutex_lock(&mu);
    double now = fl_clock_sec();
    if (now - last_read >= FL_PROCMEM_CACHE_S) {
        char smaps[4096], status[8192];
        const char *s = slurp("/proc/self/smaps_rollup", smaps, sizeof smaps);
        const char *t = s ? NULL : slurp("/proc/self/status", status, sizeof status);
        last_rc = fl_procmem_parse(s, t, &last_rss, &last_private);
        if (last_rc != 0 && s)
            last_rc =
                fl_procmem_parse(NULL, slurp("/proc/self/status", status, sizeof status), &last_rss, &last_private);
        last_read = now;
    }
    *rss = last_rss;
    *private_bytes = last_private;
    int rc = last_rc;
    pthread_mutex_unlock(&mu);
    return rc;
}

double fl_proc_cpu_s(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}
