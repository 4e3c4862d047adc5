/* stop: a process-wide stop request set by SIGINT/SIGTERM (or by code), polled by the
 * roles' main loops so that every role finishes cleanly (flushes, closes its server)
 * instead of dying mid-write. Async-signal-safe. */
#ifndef FL_COMMON_STOP_H
#define FL_COMMON_STOP_H

/* Installs SIGINT and SIGTERM handlers that set the stop request; ignores SIGPIPE; and
 * fl_crash_install's. */
void fl_stop_install(void);
/* On SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT and SIGSYS: writes "FATAL: signal N (...);
 * backtrace:" and the backtrace to stderr, then dies of the signal (default action).
 * Nothing in sanitizer builds (the sanitizers report these themselves). The alternate
 * signal stack it sets is the calling thread's. */
void fl_crash_install(void);
/* 1 once a stop was requested. */
int fl_stop_requested(void);
/* Requests a stop from code (e.g. the launcher asked for it). */
void fl_stop_request(void);
/* The signal that requested the stop (0 if none or requested from code). */
int fl_stop_signal(void);

#endif
