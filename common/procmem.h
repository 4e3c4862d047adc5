/* procmem: this process's resident and private memory, and its CPU time, as the run's
 * metrics report them.
 *
 * Resident (RSS) counts every page of the process in memory, the shared libraries' pages
 * too; private counts the pages no other process maps (its heap, its stacks, the
 * libraries' pages it wrote), the memory one more process of the role costs. Both come
 * from /proc/self/smaps_rollup (Rss, and Private_Clean + Private_Dirty), or where that
 * file is missing from /proc/self/status (VmRSS, and RssAnon for private). Reading
 * smaps_rollup walks the process's page tables (about 1 ms per GB resident), so a read
 * within FL_PROCMEM_CACHE_S of the last one returns the last figures. Thread-safe. */
#ifndef FL_COMMON_PROCMEM_H
#define FL_COMMON_PROCMEM_H

#include <stdint.h>

#define FL_PROCMEM_CACHE_S 1.0

/* Bytes resident and private now (or as read less than FL_PROCMEM_CACHE_S ago). 0, or -1
 * (both 0) where /proc gives neither figure. */
int fl_procmem(uint64_t *rss, uint64_t *private_bytes);

/* The same, read from the files now: a smaps_rollup text (or NULL) and a status text (or
 * NULL), for tests. */
int fl_procmem_parse(const char *smaps_rollup, const char *status, uint64_t *rss, uint64_t *private_bytes);

/* CPU seconds this process has used so far, user and system, all its threads (not its
 * children's); 0 where getrusage fails. */
double fl_proc_cpu_s(void);

#endif
