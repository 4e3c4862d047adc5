/* credential: which process a report comes from (fleet.Control, docs/security.md).
 *
 * A launcher draws a run secret (16 random bytes) that never leaves it. Every role it
 * starts gets, in the environment variable FLEET_CREDENTIAL, "N:TOKEN": its incarnation
 * N (1 for the first process of that role and index, one more at each restart) and
 * TOKEN = fl_cred_token(role key, N), where the role key is fl_cred_role_key(secret,
 * role, index). Control recomputes the token from the secret and accepts a report only
 * with the right one, from an incarnation no older than the newest it has seen: a
 * process that knows neither the secret nor the role key cannot report for any role,
 * and an old incarnation cannot report over its successor. A host that starts roles
 * for a launcher elsewhere (an MPI rank) is given only its own roles' keys.
 *
 * The keyed function is SipHash-2-4 (Aumasson and Bernstein 2012), a pseudorandom
 * function of a 128-bit key; two of its 64-bit outputs under distinct domain bytes make
 * each 128-bit value. Tokens are 32 lowercase hexadecimal digits. */
#ifndef FL_COMMON_CREDENTIAL_H
#define FL_COMMON_CREDENTIAL_H

#include <stddef.h>
#include <stdint.h>

#define FL_CRED_ENV "FLEET_CREDENTIAL"
#define FL_CRED_KEY_BYTES 16
#define FL_CRED_TOKEN_CHARS 32 /* hex digits, without the NUL */

/* SipHash-2-4 of msg (len bytes) under a 16-byte key. */
uint64_t fl_siphash24(const uint8_t key[FL_CRED_KEY_BYTES], const void *msg, size_t len);

/* 16 bytes from the kernel's random source (getrandom); 0, or -1 when it fails. */
int fl_cred_random(uint8_t out[FL_CRED_KEY_BYTES]);
/* The key of (role, index) under the run secret. */
void fl_cred_role_key(const uint8_t secret[FL_CRED_KEY_BYTES], const char *role, uint32_t index,
                      uint8_t out[FL_CRED_KEY_BYTES]);
/* The token of incarnation n under a role key, into out (FL_CRED_TOKEN_CHARS + 1). */
void fl_cred_token(const uint8_t role_key[FL_CRED_KEY_BYTES], uint64_t n, char out[FL_CRED_TOKEN_CHARS + 1]);
/* 1 when token (NUL-terminated, any length) is the token of n under role_key; compares
 * in time independent of where it differs. */
int fl_cred_check(const uint8_t role_key[FL_CRED_KEY_BYTES], uint64_t n, const char *token);
/* FLEET_CREDENTIAL's value "N:TOKEN" into *n and token (FL_CRED_TOKEN_CHARS + 1): 0, or -1
 * for anything else (N >= 1, TOKEN 32 hex digits). */
int fl_cred_parse(const char *s, uint64_t *n, char token[FL_CRED_TOKEN_CHARS + 1]);
/* Key bytes as 32 hex digits and back (to pass a role key to another host); parse: 0 or -1. */
void fl_cred_key_hex(const uint8_t key[FL_CRED_KEY_BYTES], char out[2 * FL_CRED_KEY_BYTES + 1]);
int fl_cred_key_parse(const char *hex, uint8_t key[FL_CRED_KEY_BYTES]);

#endif
