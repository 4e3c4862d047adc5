/* `fleet actor`: one Ape-X actor process (actors/actor.h). Options are parsed here; the
 * loop, its stop conditions and the final flush live in actors/actor.c. Exit codes: 0 on
 * a clean stop (SIGINT/SIGTERM, the launcher's request, or actor.max_steps), 1 on a
 * runtime failure (printed), 2 on a usage or configuration error.
 *
 * Two ways in: started by a launcher (`--index I --replay ... --paramserver ...`), or
 * joining a running fleet (`--join runs/NAME` on the launcher's host, `--join HOST:PORT`
 * from anywhere): the launcher's Control (fleet.Control/Join) hands the newcomer its
 * index, epsilon, credential, the services' addresses and the run's config; the
 * command line's --set overrides apply on top of that config, and run.tls_dir stays the
 * joiner's own (the copy of the run's credentials on this host). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/actor.h"
#include "common/control.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/stop.h"
#include "cli/cli.h"
#include "launcher/options.h"
#include "launcher/proc.h"
#include "launcher/security.h"
#include "cli/verbs.h"

#define JOIN_WAIT_S 60.0 /* how long a joiner waits for a launcher that is still starting */

/* The first line of dir/name into out (trailing blanks cut); 0, or -1 with errno set. */
static int read_line_file(const char *dir, const char *name, char *out, size_t len) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    errno = 0;
    char *text = fl_proc_read_file(path, 4096, NULL);
    if (!text) {
        if (!errno) errno = EIO;
        return -1;
    }
    size_t n = strcspn(text, "\r\n");
    while (n && text[n - 1] == ' ') n--;
    snprintf(out, len, "%.*s", (int)n, text);
    free(text);
    return 0;
}

/* --join's argument: a run folder on this host (its control.addr; its tls/ credentials,
 * which a fleet under mpirun makes, unless run.tls_dir is set; else its access.token)
 * or the launcher's address. tls_dir: run.tls_dir, replaced by the folder's tls/ when
 * that is used. 0, or 2 after printing why. */
static int join_target(const char *arg, char *tls_dir, size_t tls_len, char *addr, size_t len) {
    struct stat sb;
    if (stat(arg, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(addr, len, "%s", arg);
        return 0;
    }
    char job_tls[600], ca[700];
    snprintf(job_tls, sizeof job_tls, "%s/tls", arg);
    snprintf(ca, sizeof ca, "%s/ca.pem", job_tls);
    if (!tls_dir[0] && access(ca, R_OK) == 0) {
        char why[512];
        if (strlen(job_tls) >= tls_len || fl_security_load(job_tls, 0, why, sizeof why) != 0) {
            fprintf(stderr, "fleet actor: --join %s: the run's credentials in %s: %s\n", arg, job_tls,
                    strlen(job_tls) >= tls_len ? "the path is too long" : why);
            return 2;
        }
        snprintf(tls_dir, tls_len, "%s", job_tls);
    }
    if (read_line_file(arg, "control.addr", addr, len) != 0 || !addr[0]) {
        fprintf(stderr,
                "fleet actor: --join %s: no control.addr in that folder (%s); expected the folder of a running "
                "`fleet run` (runs/NAME) or the launcher's HOST:PORT\n",
                arg, strerror(errno));
        return 2;
    }
    if (!tls_dir[0] && !getenv(FL_RPC_ACCESS_ENV)) { /* a one-machine fleet's token guards its services */
        char token[128];
        fl_err_t err;
        fl_err_init(&err);
        if (read_line_file(arg, "access.token", token, sizeof token) != 0) {
            fprintf(stderr,
                    "fleet actor: --join %s: cannot read its access.token (%s); expected the run's own folder\n", arg,
                    strerror(errno));
            return 2;
        }
        if (fl_rpc_set_access_token(token, &err) != FL_OK || setenv(FL_RPC_ACCESS_ENV, token, 1) != 0) {
            fprintf(stderr, "fleet actor: --join %s: access.token: %s\n", arg, err.msg[0] ? err.msg : strerror(errno));
            return 2;
        }
    }
    return 0;
}

/* The joiner's config: the launcher's (the grant), then this command line's --set
 * overrides in order; run.tls_dir stays this host's, and a joined actor keeps no state
 * file (run.checkpoint_dir is the launcher host's folder). 0, or 2 after printing why. */
static int join_config(const fl_join_grant_t *g, const char *tls_dir, int argc, char **argv, fl_config_t *out) {
    fl_err_t err;
    fl_err_init(&err);
    fl_config_defaults(out);
    char name[160];
    snprintf(name, sizeof name, "the config of run %s (from its launcher)", g->run_name);
    fl_status s = fl_config_load_string(out, g->config, name, &err);
    for (int i = 1; s == FL_OK && i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--set") == 0 && i + 1 < argc)
            s = fl_config_set(out, argv[++i], &err);
        else if (strncmp(a, "--set=", 6) == 0)
            s = fl_config_set(out, a + 6, &err);
    }
    if (s == FL_OK) s = fl_config_validate(out, &err);
    if (s != FL_OK) {
        fprintf(stderr, "fleet actor: %s\n", err.msg);
        return 2;
    }
    snprintf(out->run_tls_dir, sizeof out->run_tls_dir, "%s", tls_dir);
    out->run_checkpoint_dir[0] = '\0';
    return 0;
}

/* Runs actor `index` with the addresses given; the exit code. */
static int run_actor(const fl_config_t *cfg, fl_actor_opts_t *ao, int index, const char *replay, const char *params,
                     const char *control) {
    fl_stop_install();
    fl_cli_setup_logging(cfg, "actor", index);
    /* actor.nice: where the roles share cores, the learner sets the fleet's pace (the
     * actors wait on its sampling through the replay's rate limit), so it runs first */
    fl_cli_nice(cfg->actor_nice, "actor.nice");
    fl_cli_sched_idle((int)cfg->actor_sched_idle, "actor.sched_idle");
    fl_actor_t *actor = NULL;
    fl_err_t err;
    fl_err_init(&err);
    fl_status s = fl_actor_create(ao, index, replay, params, control && control[0] ? control : NULL, &actor, &err);
    if (s != FL_OK) {
        fprintf(stderr, "fleet actor: %s\n", err.msg[0] ? err.msg : fl_status_str(s));
        return fl_exit_status_of_create(s); /* an env that rejects its options is not restarted */
    }
    s = fl_actor_run(actor, &err);
    fl_actor_destroy(actor);
    if (s != FL_OK) {
        fprintf(stderr, "fleet actor: %s\n", err.msg[0] ? err.msg : fl_status_str(s));
        return 1;
    }
    return 0;
}

/* `fleet actor --join TARGET [--set ...]`. */
static int join_fleet(const fl_config_t *local, const char *target, int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--config") == 0 || strncmp(argv[i], "--config=", 9) == 0) {
            fprintf(stderr,
                    "fleet actor: --join takes the run's config from its launcher (expected no --config; "
                    "--set section.key=value overrides a key for this actor)\n");
            return 2;
        }
    char addr[300], tls_dir[sizeof local->run_tls_dir];
    snprintf(tls_dir, sizeof tls_dir, "%s", local->run_tls_dir);
    int rc = join_target(target, tls_dir, sizeof tls_dir, addr, sizeof addr);
    if (rc != 0) return rc;
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    fl_join_grant_t g;
    fl_err_t err;
    fl_err_init(&err);
    if (fl_control_join(addr, host, JOIN_WAIT_S, &g, &err) != FL_OK) {
        fprintf(stderr, "fleet actor: cannot join the fleet: %s\n", err.msg);
        return 1;
    }
    fl_config_t cfg;
    rc = join_config(&g, tls_dir, argc, argv, &cfg);
    char cred[FL_CRED_TOKEN_CHARS + 32];
    snprintf(cred, sizeof cred, "%llu:%s", (unsigned long long)g.incarnation, g.credential);
    if (rc == 0 && setenv(FL_CRED_ENV, cred, 1) != 0) {
        fprintf(stderr, "fleet actor: cannot set %s: %s\n", FL_CRED_ENV, strerror(errno));
        rc = 1;
    }
    if (rc == 0) {
        printf("fleet actor: joined run %s as actor %u (epsilon %.4g) through %s\n", g.run_name, g.index, g.epsilon,
               addr);
        fflush(stdout);
        fl_actor_opts_t ao;
        fl_options_actor(&cfg, &ao);
        ao.joined = 1;
        ao.epsilon = g.epsilon;
        ao.state_dir = "";
        rc = run_actor(&cfg, &ao, (int)g.index, g.replay, g.paramserver, addr);
    }
    fl_join_grant_free(&g);
    return rc;
}

int fl_verb_actor(int argc, char **argv) {
    fl_config_t cfg;
    int64_t index = -1;
    char replay[256] = "", params[256] = "", control[256] = "", join[256] = "";
    int resume = 0;
    int64_t incarnation = 0;
    const fl_opt_t opts[] = {
        {"--index", FL_OPT_INT, &index},          {"--incarnation", FL_OPT_INT, &incarnation},
        {"--resume", FL_OPT_FLAG, &resume},       {"--replay", FL_OPT_STRING, replay},
        {"--paramserver", FL_OPT_STRING, params}, {"--control", FL_OPT_STRING, control},
        {"--join", FL_OPT_STRING, join},
    };
    /* fl_cli_parse compacts argv: --join needs the --set overrides as given */
    char **args = malloc(((size_t)argc + 1) * sizeof *args);
    if (!args) return 1;
    memcpy(args, argv, ((size_t)argc + 1) * sizeof *args);
    int rc = fl_cli_parse("actor", argc, argv, &cfg, opts, (int)(sizeof opts / sizeof opts[0]), NULL, 0);
    if (rc == 0 && join[0]) {
        if (index >= 0 || replay[0] || params[0] || control[0] || resume || incarnation) {
            fprintf(stderr,
                    "fleet actor: --join gets the index, the addresses and the credential from the launcher "
                    "(expected none of --index, --replay, --paramserver, --control, --resume, --incarnation)\n");
            rc = 2;
        } else {
            rc = join_fleet(&cfg, join, argc, args);
        }
        free(args);
        return rc;
    }
    free(args);
    if (rc != 0) return rc;
    if (index < 0) {
        fprintf(stderr,
                "fleet actor: --index is required (expected an integer in [0, %lld)), or --join RUN_DIR|HOST:PORT "
                "to join a running fleet\n",
                (long long)cfg.actor_count);
        return 2;
    }
    if (index >= cfg.actor_count) {
        fprintf(stderr, "fleet actor: --index %lld is out of range (expected 0 <= I < actor.count = %lld)\n",
                (long long)index, (long long)cfg.actor_count);
        return 2;
    }
    if (!replay[0]) {
        fprintf(stderr,
                "fleet actor: --replay ADDR[,ADDR...] is required (one address per replay shard, shard 0 "
                "first, or @FILE)\n");
        return 2;
    }
    if (!params[0]) {
        fprintf(stderr, "fleet actor: --paramserver ADDR is required\n");
        return 2;
    }
    fl_actor_opts_t ao;
    fl_options_actor(&cfg, &ao);
    ao.resume = resume;
    ao.incarnation = (int)incarnation;
    return run_actor(&cfg, &ao, (int)index, replay, params, control);
}
