/* netif: the IPv4 address a service should bind on a host of a multi-host fleet.
 *
 * A fleet on one host binds loopback. Across hosts each service must bind an address
 * the other hosts can reach, which the launcher finds here: the IPv4 address of a named
 * interface (run.interface, e.g. "eth0" or "ib0"), or, when none is named, of the first
 * interface that is up and is not loopback. It never answers 0.0.0.0: a service bound
 * there would advertise an address nobody can dial.
 *
 * Failure: FL_NOT_FOUND naming the interface asked for (or saying that no non-loopback
 * interface is up) and listing the interfaces with an IPv4 address; FL_IO_ERROR when
 * the interfaces cannot be read. Thread-safe. */
#ifndef FL_COMMON_NETIF_H
#define FL_COMMON_NETIF_H

#include <stddef.h>

#include "common/status.h"

/* name NULL or "": the first up, non-loopback interface. out gets the dotted address. */
fl_status fl_netif_ipv4(const char *name, char *out, size_t len, fl_err_t *err);

#endif
