/* netif: interface addresses through getifaddrs (see netif.h). */
#include "common/netif.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

fl_status fl_netif_ipv4(const char *name, char *out, size_t len, fl_err_t *err) {
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0)
        return fl_err_set(err, FL_IO_ERROR, "cannot list the network interfaces: %s", strerror(errno));
    int any = !name || !name[0];
    char seen[512] = "";
    size_t used = 0;
    fl_status s = FL_NOT_FOUND;
    for (struct ifaddrs *i = all; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        char addr[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, addr, sizeof addr);
        if (used < sizeof seen)
            used += (size_t)snprintf(seen + used, sizeof seen - used, "%s%s (%s)", used ? ", " : "", i->ifa_name, addr);
        if (s == FL_OK) continue;
        int up = (i->ifa_flags & IFF_UP) != 0, loop = (i->ifa_flags & IFF_LOOPBACK) != 0;
        int match = any ? up && !loop : strcmp(i->ifa_name, name) == 0;
        if (!match || strcmp(addr, "0.0.0.0") == 0) continue;
        snprintf(out, len, "%s", addr);
        s = FL_OK;
    }
    freeifaddrs(all);
    if (s == FL_OK) return FL_OK;
    if (any)
        return fl_err_set(err, FL_NOT_FOUND,
                          "no network interface is up with an IPv4 address other than loopback (interfaces: %s); "
                          "set run.interface",
                          seen[0] ? seen : "none");
    return fl_err_set(err, FL_NOT_FOUND, "run.interface = %s: no such interface with an IPv4 address (interfaces: %s)",
                      name, seen[0] ? seen : "none");
}
