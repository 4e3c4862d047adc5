/* mpi_job: setting a job of `fleet run` under mpirun up (launcher/mpi.c describes the
 * whole): 2b, its TLS credentials (made by the launcher for every rank's host and sent
 * to every rank, unless run.tls_dir is given or the fleet stays on one host's loopback);
 * 3a, the run folder, Control, the access token and each rank's own role key; 3b, the
 * effective config's text, which every rank keeps a copy of for its role. */
#ifdef FLEET_HAVE_MPI
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/credential.h"
#include "common/rpc.h"
#include "launcher/fleet_state.h"
#include "launcher/mpi_internal.h"
#include "launcher/security.h"

static void print_ranks(const mpi_state_t *m) {
    printf("  ranks       ");
    for (int r = 0; r < m->size && r < 64; r++) {
        if (m->kind[r] == K_LAUNCHER)
            printf(" %d:launcher@%s", r, m->ids[r].host);
        else
            printf(" %d:%s %d@%s", r, fl__mpi_kind_names[m->kind[r]], m->index[r], m->ids[r].host);
    }
    if (m->size > 64) printf(" ...");
    printf("\n");
    fflush(stdout);
}

/* The per-job credential files every rank gets (ca.key stays with the launcher's maker,
 * and is dropped). learner.token goes only to the ranks that use it. */
static const char *const job_names[5] = {FL_TLS_CA, FL_TLS_CERT, FL_TLS_KEY, FL_TLS_TOKEN, FL_TLS_LEARNER_TOKEN};

/* Writes the per-job files into dir (0700, made here): 0 or -1 with errno. */
static int write_job_files(const rank_run_t *X, const char *dir, int with_learner) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -1;
    for (int i = 0; i < 5; i++) {
        if (i == 4 && !with_learner) continue;
        char path[FL_CONFIG_STRING_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", dir, job_names[i]);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, i < 2 ? 0644 : 0600);
        int bad = fd < 0 || write(fd, X->job_files[i], (size_t)X->job_len[i]) != (ssize_t)X->job_len[i];
        if (fd >= 0) bad |= close(fd) != 0;
        if (bad) return -1;
    }
    return 0;
}

void fl__mpi_remove_job_dir(const char *dir) {
    static const char *const all[] = {FL_TLS_CA,  FL_TLS_CA_KEY, FL_TLS_CERT,
                                      FL_TLS_KEY, FL_TLS_TOKEN,  FL_TLS_LEARNER_TOKEN};
    for (int i = 0; i < 6; i++) {
        char path[FL_CONFIG_STRING_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", dir, all[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* The launcher: makes the job's credentials in a temporary folder for every rank's host
 * name and address (addrs: ADDR_LEN each), and reads the files back. 0 or 1 after
 * printing why. */
static int make_job_files(rank_run_t *X, const char *addrs) {
    const mpi_state_t *m = &X->m;
    const char **hosts = calloc((size_t)m->size * 2, sizeof *hosts);
    int bad = !hosts || !mkdtemp(strcpy(X->tls_dir, "/tmp/fleet-tls-XXXXXX"));
    int n = 0;
    for (int r = 0; hosts && r < m->size; r++) {
        hosts[n++] = m->ids[r].host;
        hosts[n++] = addrs + (size_t)r * ADDR_LEN;
    }
    char why[1024] = "out of memory, or no temporary folder";
    if (!bad) bad = fl_security_make(X->tls_dir, hosts, n, 365, why, sizeof why) != 0;
    free(hosts);
    for (int i = 0; i < 5 && !bad; i++) {
        char path[FL_CONFIG_STRING_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", X->tls_dir, job_names[i]);
        X->job_files[i] = fl_proc_read_file(path, 1 << 20, &X->job_len[i]);
        if (!X->job_files[i]) snprintf(why, sizeof why, "cannot read back %s", path);
        bad = !X->job_files[i];
    }
    if (bad)
        fprintf(stderr, "fleet run: cannot make the job's TLS credentials: %s\n", why);
    else
        X->tls_own = 1;
    return bad;
}

/* 2b. TLS for the job (see the top of this file). 0, or the exit code (the same on every
 * rank). */
int fl__mpi_job_security(rank_run_t *X) {
    mpi_state_t *m = &X->m;
    const int launcher = m->me == m->launcher;
    snprintf(X->tls_dir, sizeof X->tls_dir, "%s", X->cfg.run_tls_dir);
    if (!X->cfg.run_tls_dir[0] && (!X->netif || X->cfg.run_insecure)) {
        char why[1024];
        int r = fl_security_check_bind(&X->cfg, X->host, why, sizeof why);
        if (r > 0 && launcher) fprintf(stderr, "fleet run: warning: %s\n", why);
        if (r < 0 && launcher) fprintf(stderr, "fleet run: %s\n", why);
        return fl__mpi_any_rank(r < 0) ? 2 : 0;
    }
    if (!X->cfg.run_tls_dir[0]) {
        char *addrs = calloc((size_t)m->size, ADDR_LEN);
        if (fl__mpi_any_rank(!addrs)) {
            free(addrs);
            return 1;
        }
        char mine[ADDR_LEN] = "";
        snprintf(mine, sizeof mine, "%s", X->host);
        MPI_Allgather(mine, ADDR_LEN, MPI_CHAR, addrs, ADDR_LEN, MPI_CHAR, MPI_COMM_WORLD);
        int bad = launcher ? make_job_files(X, addrs) : 0;
        free(addrs);
        if (fl__mpi_any_rank(bad)) return 1;
        for (int i = 0; i < 5; i++) {
            MPI_Bcast(&X->job_len[i], 1, MPI_LONG_LONG, m->launcher, MPI_COMM_WORLD);
            if (!launcher) X->job_files[i] = malloc((size_t)X->job_len[i] + 1);
            if (fl__mpi_any_rank(!X->job_files[i])) return 1;
            MPI_Bcast(X->job_files[i], (int)X->job_len[i], MPI_CHAR, m->launcher, MPI_COMM_WORLD);
        }
        if (!launcher) {
            char dir[64];
            snprintf(dir, sizeof dir, "/tmp/fleet-rank%d-tls-XXXXXX", m->me);
            bad = !mkdtemp(dir);
            if (!bad) {
                snprintf(X->tls_dir, sizeof X->tls_dir, "%s", dir);
                X->tls_own = 1;
                bad = write_job_files(X, dir, X->kind == K_LEARNER || X->kind == K_PARAMSERVER) != 0;
            }
            if (bad)
                fprintf(stderr, "fleet run (rank %d on %s): cannot write the job's TLS credentials in %s: %s\n", m->me,
                        X->me.host, dir, strerror(errno));
        }
        if (fl__mpi_any_rank(bad)) return 1;
    }
    char why[1024];
    int bad = fl_security_load(X->tls_dir, 0, why, sizeof why) != 0;
    if (bad) fprintf(stderr, "fleet run (rank %d on %s): run.tls_dir = %s: %s\n", m->me, X->me.host, X->tls_dir, why);
    return fl__mpi_any_rank(bad) ? 2 : 0;
}

/* The launcher's per-job credentials move from their temporary folder into the run
 * folder's tls/ (0700), which its evaluators then use. 0 or 1 after printing why. */
static int keep_job_credentials(rank_run_t *X) {
    if (X->m.me != X->m.launcher || !X->job_files[0] || !X->tls_own) return 0;
    char dir[FL_CONFIG_STRING_MAX];
    if (snprintf(dir, sizeof dir, "%s/tls", fl_launch_dir(X->L)) >= (int)sizeof dir ||
        write_job_files(X, dir, 1) != 0) {
        fprintf(stderr, "fleet run: cannot write the job's TLS credentials in %s: %s\n", dir, strerror(errno));
        return 1;
    }
    fl__mpi_remove_job_dir(X->tls_dir);
    snprintf(X->tls_dir, sizeof X->tls_dir, "%s", dir);
    X->tls_own = 0; /* the run folder keeps them */
    printf("  tls          per-job credentials for %d ranks in %s/ (no run.tls_dir)\n", X->m.size, dir);
    return 0;
}

/* 3a. The launcher's run folder and Control; Control's address to everyone. */
int fl__mpi_start_control(rank_run_t *X) {
    mpi_state_t *m = &X->m;
    int rc = 0;
    if (m->me == m->launcher) {
        rc = X->resume_dir[0] ? fl_launch_resume(&X->cfg, X->resume_dir, X->host, &X->L)
                              : fl_launch_create(&X->cfg, X->cfg_file, X->host, &X->L);
        if (!rc) rc = keep_job_credentials(X);
        if (!rc) {
            snprintf(X->control, sizeof X->control, "%s", fl_launch_control_addr(X->L));
            print_ranks(m);
        }
    }
    MPI_Bcast(&rc, 1, MPI_INT, m->launcher, MPI_COMM_WORLD);
    if (rc) return rc;
    MPI_Bcast(X->control, (int)sizeof X->control, MPI_CHAR, m->launcher, MPI_COMM_WORLD);
    /* The run's access token (common/rpc.h), which plaintext services and Control take
     * (an mpirun job on one host's loopback, or with run.insecure): every rank and the
     * roles it starts call and serve with it. */
    char access[64] = "";
    if (m->me == m->launcher)
        snprintf(access, sizeof access, "%s", getenv(FL_RPC_ACCESS_ENV) ? getenv(FL_RPC_ACCESS_ENV) : "");
    MPI_Bcast(access, (int)sizeof access, MPI_CHAR, m->launcher, MPI_COMM_WORLD);
    if (m->me != m->launcher && access[0]) {
        fl_err_t err;
        fl_err_init(&err);
        if (fl_rpc_set_access_token(access, &err) != FL_OK || setenv(FL_RPC_ACCESS_ENV, access, 1) != 0) {
            fprintf(stderr, "fleet run (rank %d): cannot set the run's access token: %s\n", m->me, err.msg);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    /* Each rank gets its own role's key only (common/credential.h): a host cannot report
     * for the roles of another. */
    unsigned char *keys = NULL, key[FL_CRED_KEY_BYTES] = {0};
    if (m->me == m->launcher) {
        keys = calloc((size_t)m->size, FL_CRED_KEY_BYTES);
        if (!keys) {
            fprintf(stderr, "fleet run: out of memory\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        const unsigned char *secret = fl_launch_fleet_state(X->L)->secret;
        for (int r = 0; r < m->size; r++)
            if (m->kind[r] != K_LAUNCHER)
                fl_cred_role_key(secret, fl__mpi_kind_names[m->kind[r]], (uint32_t)m->index[r],
                                 keys + (size_t)r * FL_CRED_KEY_BYTES);
    }
    MPI_Scatter(keys, FL_CRED_KEY_BYTES, MPI_UNSIGNED_CHAR, key, FL_CRED_KEY_BYTES, MPI_UNSIGNED_CHAR, m->launcher,
                MPI_COMM_WORLD);
    free(keys);
    if (m->me != m->launcher) {
        if (X->kind == K_LEARNER) { /* the learner runs in this process: its first and only incarnation */
            char tok[FL_CRED_TOKEN_CHARS + 1], var[64];
            fl_cred_token(key, 1, tok);
            snprintf(var, sizeof var, "1:%s", tok);
            setenv(FL_CRED_ENV, var, 1);
        } else {
            fl_proc_set_role_key(fl__mpi_kind_names[X->kind], X->index, key);
        }
    }
    return 0;
}

/* The launcher's config.ini (malloc'd, *len bytes), or NULL with *len = -1. */
static char *read_config_text(rank_run_t *X, long long *len) {
    const char *path = fl_launch_config_path(X->L);
    char *text = fl_proc_read_file(path, 1 << 20, len);
    snprintf(X->tmp_cfg, sizeof X->tmp_cfg, "%s", path);
    return text;
}

/* A rank's own copy of the config text (a temporary file), loaded as its config. 0, or 1
 * after printing why. */
static int keep_config_copy(rank_run_t *X, const char *text, long long len) {
    const int me = X->m.me;
    snprintf(X->tmp_cfg, sizeof X->tmp_cfg, "/tmp/fleet-rank%d-XXXXXX.ini", me);
    int fd = mkstemps(X->tmp_cfg, 4);
    int bad = fd < 0 || write(fd, text, (size_t)len) != (ssize_t)len;
    if (fd >= 0) close(fd);
    fl_err_t e;
    fl_err_init(&e);
    fl_config_t got;
    fl_config_defaults(&got);
    if (!bad && fl_config_load_file(&got, X->tmp_cfg, &e) != FL_OK) {
        fprintf(stderr, "fleet run (rank %d on %s): %s\n", me, X->me.host, e.msg);
        bad = 1;
    }
    if (!bad) X->cfg = got;
    if (bad && fd < 0) fprintf(stderr, "fleet run (rank %d on %s): cannot write %s\n", me, X->me.host, X->tmp_cfg);
    return bad;
}

/* 3b. The effective config's text from the launcher to every rank. */
int fl__mpi_broadcast_config(rank_run_t *X) {
    mpi_state_t *m = &X->m;
    const int launcher = m->me == m->launcher;
    long long len = 0;
    char *text = launcher ? read_config_text(X, &len) : NULL;
    MPI_Bcast(&len, 1, MPI_LONG_LONG, m->launcher, MPI_COMM_WORLD);
    if (len <= 0) {
        if (launcher) fprintf(stderr, "fleet run: cannot read back %s\n", fl_launch_config_path(X->L));
        free(text);
        return 1;
    }
    if (!launcher) text = malloc((size_t)len);
    if (fl__mpi_any_rank(!text)) {
        free(text);
        return 1;
    }
    MPI_Bcast(text, (int)len, MPI_CHAR, m->launcher, MPI_COMM_WORLD);
    int bad = launcher ? 0 : keep_config_copy(X, text, len);
    free(text);
    return fl__mpi_any_rank(bad) ? 1 : 0;
}
#endif
