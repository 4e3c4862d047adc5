/* connguard: per-peer connection limits on a port (see connguard.h). */
#include "common/connguard.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

typedef struct conn {
    uint32_t inode, uid;
    uint8_t family; /* AF_INET, AF_INET6 */
    uint8_t src[16], dst[16];
    uint16_t sport, dport; /* host order */
} conn_t;

typedef struct conns {
    conn_t *v;
    size_t n, cap;
} conns_t;

struct fl_connguard {
    int port, max_per_peer, max_other_user;
    double every_s;
    uid_t self;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    atomic_uint_fast64_t shed;
    uint64_t logged; /* shed events logged (sampled) */
    conns_t all;
};

static int push(conns_t *c, const conn_t *x) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        conn_t *v = realloc(c->v, cap * sizeof *v);
        if (!v) return -1;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = *x;
    return 0;
}

/* An IPv4 peer of a dual-stack (IPv6) listener shows as ::ffff:a.b.c.d: rewritten as the
 * IPv4 address it is, so that both ends of a connection compare equal. */
static void normalize(conn_t *x) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (x->family != AF_INET6) return;
    for (int k = 0; k < 2; k++) {
        uint8_t *a = k ? x->dst : x->src;
        if (memcmp(a, mapped, 12) != 0) return; /* both ends are mapped, or neither */
    }
    x->family = AF_INET;
    memmove(x->src, x->src + 12, 4);
    memset(x->src + 4, 0, 12);
    memmove(x->dst, x->dst + 12, 4);
    memset(x->dst + 4, 0, 12);
}

/* Appends the TCP sockets of `family` (established, half-open or closing: each holds a
 * descriptor) with `port` as either end to c. 0, or -1. */
static int list_family(int nl, int family, int port, conns_t *c) {
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 r;
    } req;
    memset(&req, 0, sizeof req);
    req.nlh.nlmsg_len = sizeof req;
    req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.r.sdiag_family = (uint8_t)family;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = (1u << TCP_ESTABLISHED) | (1u << TCP_SYN_RECV) | (1u << TCP_CLOSE_WAIT);
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(nl, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) return -1;
    static _Thread_local char buf[32768] __attribute__((aligned(8)));
    for (;;) {
        ssize_t n = recv(nl, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE) return 0;
            if (h->nlmsg_type == NLMSG_ERROR) return -1;
            const struct inet_diag_msg *m = NLMSG_DATA(h);
            conn_t x;
            memset(&x, 0, sizeof x);
            x.sport = ntohs(m->id.idiag_sport);
            x.dport = ntohs(m->id.idiag_dport);
            if (x.sport != port && x.dport != port) continue;
            x.inode = m->idiag_inode;
            x.uid = m->idiag_uid;
            x.family = m->idiag_family;
            memcpy(x.src, m->id.idiag_src, 16);
            memcpy(x.dst, m->id.idiag_dst, 16);
            normalize(&x);
            if (push(c, &x) != 0) return -1;
        }
    }
}

/* 1 when the address (of its family) is loopback: 127.0.0.0/8, ::1, ::ffff:127.x.y.z. */
static int loopback(const conn_t *c, const uint8_t *a) {
    if (c->family == AF_INET) return a[0] == 127;
    static const uint8_t v6_loop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(a, v6_loop, 16) == 0 || (memcmp(a, mapped, 12) == 0 && a[12] == 127);
}

static int client_cmp(const void *pa, const void *pb) {
    const conn_t *a = pa, *b = pb;
    return (a->sport > b->sport) - (a->sport < b->sport);
}

/* A served connection and the peer it counts against. */
typedef struct served {
    uint32_t inode;
    int by_uid;       /* 1: keyed by uid (loopback); 0: by address */
    uint32_t uid;     /* by_uid */
    uint8_t addr[16]; /* !by_uid */
    uint8_t family;
} served_t;

static int peer_cmp(const served_t *a, const served_t *b) {
    if (a->by_uid != b->by_uid) return a->by_uid - b->by_uid;
    if (a->by_uid) return (a->uid > b->uid) - (a->uid < b->uid);
    if (a->family != b->family) return a->family - b->family;
    return memcmp(a->addr, b->addr, 16);
}

/* by peer, then newest (highest inode) first */
static int served_cmp(const void *pa, const void *pb) {
    const served_t *a = pa, *b = pb;
    int c = peer_cmp(a, b);
    if (c) return c;
    return (a->inode < b->inode) - (a->inode > b->inode);
}

static int u32_cmp(const void *pa, const void *pb) {
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    return (a > b) - (a < b);
}

static void peer_name(const served_t *s, char *out, size_t len) {
    if (s->by_uid) {
        snprintf(out, len, "uid %u on loopback", s->uid);
        return;
    }
    char a[INET6_ADDRSTRLEN] = "?";
    inet_ntop(s->family, s->addr, a, sizeof a);
    snprintf(out, len, "address %s", a);
}

/* Shuts down this process's descriptors of the sockets in inodes (sorted); how many. */
static int shut_inodes(const uint32_t *inodes, size_t n) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 0;
    int done = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], link[64];
        snprintf(path, sizeof path, "/proc/self/fd/%.255s", e->d_name);
        ssize_t k = readlink(path, link, sizeof link - 1);
        if (k <= 0) continue;
        link[k] = '\0';
        unsigned ino;
        if (sscanf(link, "socket:[%u]", &ino) != 1) continue;
        uint32_t key = ino;
        if (!bsearch(&key, inodes, n, sizeof *inodes, u32_cmp)) continue;
        int fd = atoi(e->d_name);
        struct stat st; /* the descriptor still holds that socket (not closed and reused meanwhile) */
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == ino && shutdown(fd, SHUT_RDWR) == 0) done++;
    }
    closedir(d);
    return done;
}

/* One look: lists the port's connections, sheds each peer's newest over the limit. */
static void sweep(fl_connguard_t *g, int nl) {
    conns_t *c = &g->all;
    c->n = 0;
    if (list_family(nl, AF_INET, g->port, c) != 0 || list_family(nl, AF_INET6, g->port, c) != 0) return;
    size_t n_served = 0;
    for (size_t i = 0; i < c->n; i++) n_served += c->v[i].sport == g->port && c->v[i].inode != 0;
    if (n_served <= (size_t)g->max_per_peer && n_served <= (size_t)g->max_other_user) return; /* nobody can be over */
    served_t *sv = malloc(n_served * sizeof *sv);
    conn_t *clients = malloc(c->n * sizeof *clients); /* loopback clients, by their port */
    if (!sv || !clients) {
        free(sv);
        free(clients);
        return;
    }
    size_t nc = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->v[i].dport == g->port) clients[nc++] = c->v[i];
    qsort(clients, nc, sizeof *clients, client_cmp);
    size_t m = 0;
    for (size_t i = 0; i < c->n; i++) {
        const conn_t *s = &c->v[i];
        if (s->sport != g->port || s->inode == 0) continue;
        served_t x;
        memset(&x, 0, sizeof x);
        x.inode = s->inode;
        x.family = s->family;
        if (loopback(s, s->dst)) {
            /* the client's socket: source = our peer's end, destination = our port */
            const conn_t *client = NULL;
            size_t lo = 0, hi = nc; /* the first client whose port is s's peer port */
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (clients[mid].sport < s->dport)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            for (size_t j = lo; j < nc && clients[j].sport == s->dport && !client; j++)
                if (clients[j].family == s->family && memcmp(clients[j].src, s->dst, 16) == 0) client = &clients[j];
            if (!client || client->uid == (uint32_t)g->self) continue; /* gone, or the fleet's own user */
            x.by_uid = 1;
            x.uid = client->uid;
        } else {
            memcpy(x.addr, s->dst, 16);
        }
        sv[m++] = x;
    }
    qsort(sv, m, sizeof *sv, served_cmp);
    uint32_t *shed = malloc((m ? m : 1) * sizeof *shed);
    size_t n_shed = 0;
    for (size_t i = 0; shed && i < m;) {
        size_t j = i;
        while (j < m && peer_cmp(&sv[i], &sv[j]) == 0) j++;
        size_t held = j - i, limit = (size_t)(sv[i].by_uid ? g->max_other_user : g->max_per_peer);
        if (held > limit) {
            for (size_t k = i; k < j - limit; k++) shed[n_shed++] = sv[k].inode; /* the newest */
            uint64_t event = ++g->logged;
            if (fl_log_sampled(event)) {
                char who[96];
                peer_name(&sv[i], who, sizeof who);
                FL_WARN("rpc: port %d: %s holds %zu connections, over its limit of %zu: the newest %zu are shut down",
                        g->port, who, held, limit, held - limit);
            }
        }
        i = j;
    }
    if (n_shed) {
        qsort(shed, n_shed, sizeof *shed, u32_cmp);
        atomic_fetch_add(&g->shed, (uint_fast64_t)shut_inodes(shed, n_shed));
    }
    free(shed);
    free(sv);
    free(clients);
}

static void *guard_main(void *arg) {
    fl_connguard_t *g = arg;
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        pthread_mutex_unlock(&g->mu);
        if (nl >= 0) sweep(g, nl);
        pthread_mutex_lock(&g->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + g->every_s;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        while (!g->stop && pthread_cond_timedwait(&g->cv, &g->mu, &ts) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (nl >= 0) close(nl);
    return NULL;
}

fl_status fl_connguard_start(int port, int max_per_peer, int max_other_user, double every_s, fl_connguard_t **out,
                             fl_err_t *err) {
    *out = NULL;
    if (port < 1 || port > 65535 || max_per_peer < 1 || max_other_user < 0 || !(every_s > 0))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "connection guard: port %d, max_per_peer %d, max_other_user %d, every_s %g (expected "
                          "1..65535, >= 1, >= 0, > 0)",
                          port, max_per_peer, max_other_user, every_s);
    int probe = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (probe < 0)
        return fl_err_set(err, FL_UNAVAILABLE, "connection guard: the kernel's socket diagnostics: %s",
                          strerror(errno));
    close(probe);
    fl_connguard_t *g = calloc(1, sizeof *g);
    if (!g) return fl_err_set(err, FL_NO_MEMORY, "connection guard: out of memory");
    g->port = port;
    g->max_per_peer = max_per_peer;
    g->max_other_user = max_other_user;
    g->every_s = every_s;
    g->self = getuid();
    atomic_init(&g->shed, 0);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return fl_err_set(err, FL_INTERNAL, "connection guard: cannot start its thread");
    }
    *out = g;
    return FL_OK;
}

void fl_connguard_stop(fl_connguard_t *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->all.v);
    free(g);
}

uint64_t fl_connguard_shed(const fl_connguard_t *g) {
    return g ? atomic_load(&((fl_connguard_t *)g)->shed) : 0;
}
