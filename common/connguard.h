/* connguard: a bound on the TCP connections one peer may hold on a service's port.
 *
 * gRPC core (1.51) accepts every connection its listener gets and has no per-peer or
 * total limit, so a peer that opens connections by the thousand exhausts the service's
 * file descriptors (docs/security.md). A guard watches the connections established to
 * one local port of this process: every every_s it lists them with the kernel's socket
 * diagnostics (NETLINK_SOCK_DIAG), groups them by peer and shuts down (shutdown(2) on
 * this process's descriptor, which gRPC then closes as a broken connection) the newest
 * of every peer that holds more than max_per_peer.
 *
 * A peer is its address, except on loopback, where every local process has the same
 * address: there it is the user (uid) that owns the client's socket, found in the same
 * listing, with a bound of its own (a service on loopback allows other users none).
 * Connections from this process's own user on loopback are never shed: they are the
 * fleet's own roles, which hold the run's credentials anyway.
 *
 * Thread-safety: one thread per guard (its own); start and stop from one thread. */
#ifndef FL_COMMON_CONNGUARD_H
#define FL_COMMON_CONNGUARD_H

#include <stdint.h>

#include "common/status.h"

typedef struct fl_connguard fl_connguard_t;

/* Starts guarding TCP port `port` (1..65535) with at most max_per_peer (>= 1)
 * connections a peer, and max_other_user (>= 0) for each other local user on loopback,
 * looked at every every_s seconds (> 0). FL_UNAVAILABLE when the kernel's socket
 * diagnostics cannot be opened (then nothing is guarded: the caller logs it and goes
 * on). */
fl_status fl_connguard_start(int port, int max_per_peer, int max_other_user, double every_s, fl_connguard_t **out,
                             fl_err_t *err);
/* Stops the guard's thread and frees it (NULL: nothing). */
void fl_connguard_stop(fl_connguard_t *g);
/* Connections shut down so far. */
uint64_t fl_connguard_shed(const fl_connguard_t *g);

#endif
