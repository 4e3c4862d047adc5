/* `fleet certs DIR [--hosts h1,h2,...] [--days N]`: makes a fleet's credentials in DIR
 * (launcher/security.h: a CA, the services' certificate and key, the run token and the learner
 * token) with the openssl command, and prints what to set. Roles use them with
 * run.tls_dir = DIR (docs/security.md).
 *
 * Exit codes: 0 made; 1 openssl missing or failing, DIR already holding credentials, or a
 * file that cannot be written; 2 usage. One thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/security.h"
#include "cli/verbs.h"

#define MAX_HOSTS 256
#define DEFAULT_DAYS 365

/* Splits the comma-separated list into hosts (pointers into list). -1 when too many. */
static int split_hosts(char *list, const char **hosts, int max) {
    int n = 0;
    for (char *save = NULL, *h = strtok_r(list, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
        if (!h[0]) continue;
        if (n == max) return -1;
        hosts[n++] = h;
    }
    return n;
}

int fl_verb_certs(int argc, char **argv) {
    const char *dir = NULL;
    char *hosts_arg = NULL;
    long days = DEFAULT_DAYS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *value = NULL;
        if (strncmp(a, "--hosts", 7) == 0 && (a[7] == '\0' || a[7] == '=')) {
            value = a[7] == '=' ? a + 8 : (i + 1 < argc ? argv[++i] : NULL);
            if (!value) {
                fprintf(stderr, "fleet certs: --hosts needs a value (h1,h2,...)\n");
                return 2;
            }
            free(hosts_arg);
            hosts_arg = strdup(value);
            if (!hosts_arg) return 1;
        } else if (strncmp(a, "--days", 6) == 0 && (a[6] == '\0' || a[6] == '=')) {
            value = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
            char *end = NULL;
            days = value ? strtol(value, &end, 10) : 0;
            if (!value || !*value || *end || days < 1 || days > 36500) {
                fprintf(stderr, "fleet certs: --days needs a whole number of days in [1, 36500], got '%s'\n",
                        value ? value : "");
                free(hosts_arg);
                return 2;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "fleet certs: unknown option '%s'\n", a);
            free(hosts_arg);
            return 2;
        } else if (dir) {
            fprintf(stderr, "fleet certs: one folder expected, got '%s' and '%s'\n", dir, a);
            free(hosts_arg);
            return 2;
        } else {
            dir = a;
        }
    }
    if (!dir) {
        fprintf(stderr, "fleet certs: missing DIR (usage: fleet certs DIR [--hosts h1,h2,...] [--days N])\n");
        free(hosts_arg);
        return 2;
    }
    const char *hosts[MAX_HOSTS];
    int n = hosts_arg ? split_hosts(hosts_arg, hosts, MAX_HOSTS) : 0;
    if (n < 0) {
        fprintf(stderr, "fleet certs: more than %d hosts in --hosts\n", MAX_HOSTS);
        free(hosts_arg);
        return 2;
    }
    char why[1024];
    int rc = fl_security_make(dir, hosts, n, (int)days, why, sizeof why);
    free(hosts_arg);
    if (rc != 0) {
        fprintf(stderr, "fleet certs: %s\n", why);
        return 1;
    }
    printf("%s: ca.pem ca.key fleet.pem fleet.key token learner.token (valid %ld days)\n", dir, days);
    printf("use them with:   --set run.tls_dir=%s   (or run.tls_dir = %s in the config's [run] section)\n", dir, dir);
    printf("every host of the fleet needs this folder at the same path; no role reads ca.key: it can stay here\n");
    return 0;
}
