/* heap: the malloc settings of fleet's processes. */
#ifndef FL_CLI_HEAP_H
#define FL_CLI_HEAP_H

/* glibc's malloc by default maps every block of 128 KB or more on its own (raising that
 * bound as such blocks are freed) and gives the top of a heap back to the system as soon
 * as 128 KB of it (or twice the raised bound) are free. The roles allocate and free
 * messages of 0.1-10 MB many times a second (sample batches, parameter vectors), so each
 * one came back as fresh pages: page faults, zeroed pages and, on unmapping, TLB
 * shoot-downs across the cores (38K page faults in 4 s in a MinAtar learner, 53K in its
 * parameter server). Blocks below 32 MB now come from the heap and 32 MB of free top are
 * kept; the replay shard and the parameter server still give free pages back on their
 * own schedule (malloc_trim), and a process's resident memory stays within its peak. The
 * benches give PyTorch the same settings (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_):
 * its CPU tensors are such blocks too. */
#define FL_MALLOC_KEEP (32u << 20)

#endif
