/* security: a fleet's credentials on disk and what every process does with them at
 * start-up (docs/security.md).
 *
 * A credentials folder (`fleet certs DIR`, or per job under mpirun) holds:
 *   ca.pem, ca.key        the fleet's own certificate authority (ca.key is only needed to
 *                         make certificates; no role reads it)
 *   fleet.pem, fleet.key  the certificate every service presents, signed by ca.pem, whose
 *                         subjectAltNames cover loopback, localhost, the host's name and
 *                         the hosts named when it was made
 *   token                 the run token: every role sends it, every service requires it
 *   learner.token         the learner token: also grants /fleet.ParamServer/Publish and
 *                         /fleet.ParamServer/PushGradients (learners send it there;
 *                         parameter servers check it)
 * The folder is 0700; keys and tokens are 0600.
 *
 * fl_security_setup is the one place every role process (fleet run, replay, paramserver,
 * actor, learner, evaluator, eval) loads run.tls_dir: fl_cli_parse calls it once the
 * config is parsed. fl_security_check_bind is the rule for what a process may bind
 * without TLS: loopback (127.0.0.0/8, ::1, localhost) and unix sockets only, unless
 * run.insecure. Failure: messages say what was wrong and what to do; no exit(). Not
 * thread-safe (start-up code). */
#ifndef FL_LAUNCHER_SECURITY_H
#define FL_LAUNCHER_SECURITY_H

#include <stddef.h>

#include "common/config.h"

#define FL_TLS_CA "ca.pem"
#define FL_TLS_CA_KEY "ca.key"
#define FL_TLS_CERT "fleet.pem"
#define FL_TLS_KEY "fleet.key"
#define FL_TLS_TOKEN "token"
#define FL_TLS_LEARNER_TOKEN "learner.token"

/* Makes dir (mode 0700; its parents as needed) and the credentials in it with the
 * openssl command: a CA, a certificate for 127.0.0.1, ::1, localhost, this host's name
 * and hosts[0..nhosts) (names or addresses), valid for `days`, and two random tokens.
 * Refuses a folder that holds any of the files already. 0, or -1 with why (nothing is
 * left behind but the folder). */
int fl_security_make(const char *dir, const char *const *hosts, int nhosts, int days, char *why, size_t len);

/* Loads dir's credentials (with `learner`, learner.token too) as this process's rpc
 * security (fl_rpc_set_security). 0, or -1 with why naming the file. */
int fl_security_load(const char *dir, int learner, char *why, size_t len);

/* The start-up step of a process of `verb`: loads run.tls_dir (the learner and the
 * parameter server load learner.token too), or goes back to plaintext when it is empty.
 * 0, or 2 after printing "fleet VERB: ..." to stderr. */
int fl_security_setup(const fl_config_t *cfg, const char *verb);

/* May this process bind addr? 0: yes (loopback, a unix socket, or run.tls_dir is set);
 * 1: yes, but only because run.insecure is set (why holds the warning to print); -1: no
 * (why says so and what to do). */
int fl_security_check_bind(const fl_config_t *cfg, const char *addr, char *why, size_t len);

/* fl_security_check_bind for `fleet VERB`: prints the refusal ("fleet VERB: ...") and
 * returns 2, or prints the warning and returns 0. */
int fl_security_bind_allowed(const fl_config_t *cfg, const char *verb, const char *addr);

#endif
