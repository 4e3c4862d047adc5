#include "common/stop.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Sanitizer builds keep their own reports of these signals. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FL_SANITIZED 1
#endif
#endif

static volatile sig_atomic_t g_stop = 0;
static volatile sig_atomic_t g_signal = 0;

static void on_signal(int sig) {
    g_stop = 1;
    g_signal = sig;
}

#ifndef FL_SANITIZED
static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS};
static char g_altstack[64 * 1024]; /* the handler runs here: a stack overflow leaves none */

/* Writes s to stderr (async-signal-safe). */
static void say(const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t k = write(STDERR_FILENO, s, n);
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

/* A fatal signal: the signal and a backtrace on stderr (a role's log), then the default
 * action, so that the process dies of that signal and its parent sees which. */
static void on_fatal(int sig) {
    char line[96];
    /* snprintf is not async-signal-safe in general; with an integer only and the process
     * about to die, glibc's does not allocate. */
    snprintf(line, sizeof line, "\nFATAL: signal %d (%s); backtrace:\n", sig,
             sig == SIGSEGV   ? "SIGSEGV, segmentation fault"
             : sig == SIGBUS  ? "SIGBUS, bus error"
             : sig == SIGFPE  ? "SIGFPE, arithmetic error"
             : sig == SIGILL  ? "SIGILL, illegal instruction"
             : sig == SIGABRT ? "SIGABRT, aborted"
                              : "SIGSYS, bad system call");
    say(line);
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    say("(addresses: `addr2line -f -e BINARY ADDRESS`, or gdb)\n");
    signal(sig, SIG_DFL);
    raise(sig);
}
#endif

void fl_crash_install(void) {
#ifndef FL_SANITIZED
    void *warm[2];
    backtrace(warm, 2); /* loads what backtrace needs now, not inside the handler */
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = g_altstack;
    ss.ss_size = sizeof g_altstack;
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++) sigaction(fatal_signals[i], &sa, NULL);
#endif
}

void fl_stop_install(void) {
    fl_crash_install();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int fl_stop_requested(void) {
    return g_stop != 0;
}
void fl_stop_request(void) {
    g_stop = 1;
}
int fl_stop_signal(void) {
    return (int)g_signal;
}
