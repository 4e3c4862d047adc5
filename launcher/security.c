/* security: credentials on disk, their loading at start-up and the bind rule (see
 * security.h). The certificates are made by the openssl command (Debian: openssl), run
 * as a child with umask 077 so that no key is ever readable by others. */
#include "launcher/security.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher/proc.h"
#include "common/methods.h"
#include "common/rpc.h"

/* The files `fleet certs` makes, in the order they are made. */
static const char *const made_files[] = {FL_TLS_CA_KEY, FL_TLS_CA,    FL_TLS_KEY,
                                         FL_TLS_CERT,   FL_TLS_TOKEN, FL_TLS_LEARNER_TOKEN};
#define N_MADE (int)(sizeof made_files / sizeof made_files[0])
#define CSR_FILE ".fleet.csr"
#define EXT_FILE ".fleet.ext"
#define MAX_CRED_BYTES (1 << 20)

/* The openssl command on PATH into out. 0, or -1 with why. */
static int find_openssl(char *out, size_t len, char *why, size_t wlen) {
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path && path[0] ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/openssl", d);
        if (access(out, X_OK) == 0) return 0;
    }
    snprintf(why, wlen,
             "the openssl command is not on PATH (%s): it makes the certificates; install it (Debian: apt-get install "
             "openssl; scripts/setup.sh installs it)",
             path ? path : "unset");
    return -1;
}

/* Runs openssl with args (NULL-terminated, args[0] = the program), its output kept; 0,
 * or -1 with why naming `step` and openssl's last words. */
static int run_openssl(char *const args[], const char *step, char *why, size_t len) {
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, len, "cannot run openssl (%s): %s", step, strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(why, len, "cannot run openssl (%s): %s", step, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        umask(077);
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) dup2(null, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        execv(args[0], args);
        dprintf(2, "cannot execute %s: %s\n", args[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char out[2048];
    size_t used = 0;
    for (;;) {
        char buf[512];
        ssize_t n = read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; i++) { /* keep the last bytes */
            if (used == sizeof out - 1) {
                memmove(out, out + 1, used - 1);
                used--;
            }
            out[used++] = buf[i];
        }
    }
    out[used] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    for (char *p = out; *p; p++)
        if (*p == '\n') *p = ' ';
    snprintf(why, len, "openssl failed to make %s (%s %d): %.300s", step, WIFEXITED(status) ? "exit status" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), out);
    return -1;
}

static void join(char *out, size_t len, const char *dir, const char *name) {
    snprintf(out, len, "%s/%s", dir, name);
}

/* Writes data to dir/name with mode, refusing an existing file. 0 or -1 with why. */
static int write_new(const char *dir, const char *name, const char *data, int mode, char *why, size_t len) {
    char path[1200];
    join(path, sizeof path, dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    size_t n = strlen(data);
    int bad = fd < 0 || write(fd, data, n) != (ssize_t)n;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) snprintf(why, len, "cannot write %s: %s", path, strerror(e));
    return bad ? -1 : 0;
}

/* n random bytes from /dev/urandom as 2n hex digits into out (2n + 1 bytes). */
static int random_hex(char *out, size_t n, char *why, size_t len) {
    unsigned char raw[64];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    size_t got = 0;
    while (fd >= 0 && got < n) {
        ssize_t k = read(fd, raw + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (fd >= 0) close(fd);
    if (got < n) {
        snprintf(why, len, "cannot read random bytes from /dev/urandom: %s", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

/* A host for a subjectAltName: a name or an address of letters, digits and . - : only. */
static int host_ok(const char *h) {
    if (!h[0] || strlen(h) > 253) return 0;
    for (const char *p = h; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
              *p == '-' || *p == ':'))
            return 0;
    return 1;
}

/* Appends "IP:h" or "DNS:h" to the subjectAltName list unless it is there already. */
static void add_san(char *sans, size_t len, const char *h) {
    unsigned char buf[16];
    int ip = inet_pton(AF_INET, h, buf) == 1 || inet_pton(AF_INET6, h, buf) == 1;
    char entry[300];
    snprintf(entry, sizeof entry, "%s:%s", ip ? "IP" : "DNS", h);
    size_t n = strlen(entry);
    for (const char *p = sans; (p = strstr(p, entry)) != NULL; p += n)
        if ((p == sans || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return;
    size_t used = strlen(sans);
    snprintf(sans + used, len - used, "%s%s", used ? "," : "", entry);
}

/* Removes what fl_security_make made in dir. */
static void remove_made(const char *dir) {
    char path[1200];
    for (int i = 0; i < N_MADE; i++) {
        join(path, sizeof path, dir, made_files[i]);
        unlink(path);
    }
    join(path, sizeof path, dir, CSR_FILE);
    unlink(path);
    join(path, sizeof path, dir, EXT_FILE);
    unlink(path);
}

/* dir, made 0700 (with its parents), or an existing folder set to 0700 that holds none of
 * the credential files. 0 or -1 with why. */
static int prepare_dir(const char *dir, char *why, size_t len) {
    char path[1200];
    for (int i = 0; i < N_MADE; i++) {
        join(path, sizeof path, dir, made_files[i]);
        if (access(path, F_OK) == 0) {
            snprintf(why, len,
                     "%s already holds credentials (%s): refusing to overwrite them (roles that use them would be "
                     "locked out); remove the folder first, or choose another",
                     dir, made_files[i]);
            return -1;
        }
    }
    char parent[1200];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = '\0';
        if (fl_proc_mkdir_p(parent) != 0) {
            snprintf(why, len, "cannot create the folder %s: %s", parent, strerror(errno));
            return -1;
        }
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(why, len, "cannot create the folder %s: %s", dir, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || chmod(dir, 0700) != 0) {
        snprintf(why, len, "%s is not a folder this user can make private (mode 0700)", dir);
        return -1;
    }
    return 0;
}

int fl_security_make(const char *dir, const char *const *hosts, int nhosts, int days, char *why, size_t len) {
    if (!dir || !dir[0]) {
        snprintf(why, len, "no folder given");
        return -1;
    }
    if (days < 1) {
        snprintf(why, len, "the certificates must be valid for at least one day (got %d)", days);
        return -1;
    }
    char sans[4096] = "";
    add_san(sans, sizeof sans, "127.0.0.1");
    add_san(sans, sizeof sans, "::1");
    add_san(sans, sizeof sans, "localhost");
    char self[256] = "";
    if (gethostname(self, sizeof self - 1) == 0 && host_ok(self)) add_san(sans, sizeof sans, self);
    for (int i = 0; i < nhosts; i++) {
        if (!host_ok(hosts[i])) {
            snprintf(why, len, "'%s' is not a host name or address (expected letters, digits, '.', '-' and ':')",
                     hosts[i]);
            return -1;
        }
        add_san(sans, sizeof sans, hosts[i]);
    }
    if (strlen(sans) > sizeof sans - 300) {
        snprintf(why, len, "too many hosts for one certificate (%d)", nhosts);
        return -1;
    }
    char openssl[1200];
    if (find_openssl(openssl, sizeof openssl, why, len) != 0) return -1;
    if (prepare_dir(dir, why, len) != 0) return -1;

    char ca_key[1200], ca_pem[1200], key[1200], pem[1200], csr[1200], ext[1200], ndays[32], serial[64], subj[400];
    join(ca_key, sizeof ca_key, dir, FL_TLS_CA_KEY);
    join(ca_pem, sizeof ca_pem, dir, FL_TLS_CA);
    join(key, sizeof key, dir, FL_TLS_KEY);
    join(pem, sizeof pem, dir, FL_TLS_CERT);
    join(csr, sizeof csr, dir, CSR_FILE);
    join(ext, sizeof ext, dir, EXT_FILE);
    snprintf(ndays, sizeof ndays, "%d", days);
    snprintf(serial, sizeof serial, "0x");
    snprintf(subj, sizeof subj, "/CN=fleet CA %.250s", self[0] ? self : "");
    char ext_text[4400];
    snprintf(ext_text, sizeof ext_text,
             "subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,"
             "keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n",
             sans);
    char run_token[65], learner_token[65], token_line[80], learner_line[80];
    int rc = random_hex(serial + 2, 16, why, len) != 0 || random_hex(run_token, 32, why, len) != 0 ||
                     random_hex(learner_token, 32, why, len) != 0 || write_new(dir, EXT_FILE, ext_text, 0600, why, len)
                 ? -1
                 : 0;
    if (!rc) {
        char *ca[] = {openssl,
                      "req",
                      "-x509",
                      "-newkey",
                      "ec",
                      "-pkeyopt",
                      "ec_paramgen_curve:prime256v1",
                      "-nodes",
                      "-keyout",
                      ca_key,
                      "-out",
                      ca_pem,
                      "-days",
                      ndays,
                      "-subj",
                      subj,
                      "-addext",
                      "basicConstraints=critical,CA:TRUE",
                      "-addext",
                      "keyUsage=critical,keyCertSign,cRLSign",
                      NULL};
        rc = run_openssl(ca, "the CA (ca.pem, ca.key)", why, len);
    }
    if (!rc) {
        char *req[] = {openssl,  "req",     "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                       "-nodes", "-keyout", key,    "-out",    csr,  "-subj",    "/CN=fleet",
                       NULL};
        rc = run_openssl(req, "the key fleet.key", why, len);
    }
    if (!rc) {
        char *sign[] = {openssl,       "x509", "-req",  "-in", csr,    "-CA", ca_pem,     "-CAkey", ca_key,
                        "-set_serial", serial, "-days", ndays, "-out", pem,   "-extfile", ext,      NULL};
        rc = run_openssl(sign, "the certificate fleet.pem", why, len);
    }
    snprintf(token_line, sizeof token_line, "%s\n", run_token);
    snprintf(learner_line, sizeof learner_line, "%s\n", learner_token);
    if (!rc) rc = write_new(dir, FL_TLS_TOKEN, token_line, 0600, why, len);
    if (!rc) rc = write_new(dir, FL_TLS_LEARNER_TOKEN, learner_line, 0600, why, len);
    if (!rc &&
        (chmod(ca_pem, 0644) != 0 || chmod(pem, 0644) != 0 || chmod(ca_key, 0600) != 0 || chmod(key, 0600) != 0)) {
        snprintf(why, len, "cannot set the modes of the files in %s: %s", dir, strerror(errno));
        rc = -1;
    }
    unlink(csr);
    unlink(ext);
    if (rc) remove_made(dir);
    return rc;
}

/* dir/name's whole text (malloc'd) into *out. 0, or -1 with why. */
static int read_text(const char *dir, const char *name, char **out, char *why, size_t len) {
    char path[1200];
    join(path, sizeof path, dir, name);
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, len, "cannot read %s: %s (make the folder with `fleet certs %s`)", path, strerror(errno), dir);
        return -1;
    }
    char *buf = malloc(MAX_CRED_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_CRED_BYTES + 1, f) : 0;
    int bad = !buf || ferror(f) || n > MAX_CRED_BYTES;
    fclose(f);
    if (bad || n == 0) {
        snprintf(why, len, "cannot read %s: %s", path,
                 !buf     ? "out of memory"
                 : n == 0 ? "it is empty"
                          : "too large or unreadable");
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

/* A PEM file's text, checked to hold a PEM block. */
static int read_pem(const char *dir, const char *name, char **out, char *why, size_t len) {
    if (read_text(dir, name, out, why, len) != 0) return -1;
    if (strstr(*out, "-----BEGIN ")) return 0;
    snprintf(why, len, "%s/%s is not a PEM file (no -----BEGIN line)", dir, name);
    free(*out);
    *out = NULL;
    return -1;
}

/* A token file's text without surrounding white space. */
static int read_token(const char *dir, const char *name, char **out, char *why, size_t len) {
    if (read_text(dir, name, out, why, len) != 0) return -1;
    char *t = *out;
    size_t n = strlen(t);
    while (n && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' ' || t[n - 1] == '\t')) t[--n] = '\0';
    size_t lead = strspn(t, " \t\r\n");
    memmove(t, t + lead, n - lead + 1);
    if (t[0]) return 0;
    snprintf(why, len, "%s/%s holds no token", dir, name);
    free(*out);
    *out = NULL;
    return -1;
}

int fl_security_load(const char *dir, int learner, char *why, size_t len) {
    char *ca = NULL, *cert = NULL, *key = NULL, *token = NULL, *ltoken = NULL;
    int rc = -1;
    if (read_pem(dir, FL_TLS_CA, &ca, why, len) != 0 || read_pem(dir, FL_TLS_CERT, &cert, why, len) != 0 ||
        read_pem(dir, FL_TLS_KEY, &key, why, len) != 0 || read_token(dir, FL_TLS_TOKEN, &token, why, len) != 0 ||
        (learner && read_token(dir, FL_TLS_LEARNER_TOKEN, &ltoken, why, len) != 0))
        goto done;
    char ca_file[1200], cert_file[1200], key_file[1200];
    join(ca_file, sizeof ca_file, dir, FL_TLS_CA);
    join(cert_file, sizeof cert_file, dir, FL_TLS_CERT);
    join(key_file, sizeof key_file, dir, FL_TLS_KEY);
    const char *learner_methods[] = {fl_method_path(FL_METHOD_PARAM_PUBLISH),
                                     fl_method_path(FL_METHOD_PARAM_PUSH_GRADIENTS), NULL};
    fl_rpc_security_t sec = {.ca_pem = ca,
                             .cert_pem = cert,
                             .key_pem = key,
                             .token = token,
                             .learner_token = ltoken,
                             .learner_methods = learner_methods,
                             .ca_file = ca_file,
                             .cert_file = cert_file,
                             .key_file = key_file};
    fl_err_t err;
    fl_err_init(&err);
    if (fl_rpc_set_security(&sec, &err) != FL_OK) {
        snprintf(why, len, "%s: %s", dir, err.msg);
        goto done;
    }
    rc = 0;
done:
    free(ca);
    free(cert);
    free(key);
    free(token);
    free(ltoken);
    return rc;
}

int fl_security_setup(const fl_config_t *cfg, const char *verb) {
    fl_err_t err;
    fl_err_init(&err);
    if (!cfg->run_tls_dir[0]) {
        fl_rpc_set_security(NULL, &err);
        return 0;
    }
    int learner = strcmp(verb, "learner") == 0 || strcmp(verb, "paramserver") == 0;
    char why[1024];
    if (fl_security_load(cfg->run_tls_dir, learner, why, sizeof why) != 0) {
        fprintf(stderr, "fleet %s: run.tls_dir = %s: %s\n", verb, cfg->run_tls_dir, why);
        return 2;
    }
    return 0;
}

int fl_security_check_bind(const fl_config_t *cfg, const char *addr, char *why, size_t len) {
    why[0] = '\0';
    if (fl_rpc_addr_is_loopback(addr) || cfg->run_tls_dir[0] || fl_rpc_secure()) return 0;
    if (cfg->run_insecure) {
        snprintf(why, len,
                 "serving %s without TLS (run.insecure = true): plaintext and no tokens, so anyone who can reach "
                 "the port can call every service; see docs/security.md",
                 addr);
        return 1;
    }
    snprintf(why, len,
             "refusing to bind %s without TLS: only loopback (127.0.0.0/8, ::1, localhost) and unix sockets are "
             "served in plaintext. Make credentials with `fleet certs DIR --hosts NAMES` and set run.tls_dir = DIR "
             "(docs/security.md), or set run.insecure = true to serve plaintext anyway",
             addr);
    return -1;
}

int fl_security_bind_allowed(const fl_config_t *cfg, const char *verb, const char *addr) {
    char why[1024];
    int rc = fl_security_check_bind(cfg, addr, why, sizeof why);
    if (rc < 0) {
        fprintf(stderr, "fleet %s: %s\n", verb, why);
        return 2;
    }
    if (rc > 0) fprintf(stderr, "fleet %s: warning: %s\n", verb, why);
    return 0;
}
