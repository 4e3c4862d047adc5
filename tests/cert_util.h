/* cert_util: a fleet's credentials for tests, made in-process with OpenSSL's libcrypto
 * (link it: tests/CMakeLists.txt), so that a test of common/rpc's TLS needs neither
 * `fleet certs`' maker (launcher/security.c) nor the openssl command.
 *
 * cert_util_make(dir) makes dir (0700) and in it what `fleet certs DIR` makes, under
 * the names launcher/security.h gives them (FL_TLS_*), with the same shape: a P-256
 * certificate authority (ca.pem, ca.key: CA:TRUE, keyCertSign), a P-256 certificate
 * signed by it (fleet.pem, fleet.key: CA:FALSE, serverAuth and clientAuth) whose
 * subjectAltNames are 127.0.0.1, ::1, localhost and the host's name, valid for `days`,
 * and two random 64-digit hex tokens (token, learner.token). Keys and tokens are 0600.
 * 0, or -1 with why. Header-only. */
#ifndef FL_TESTS_CERT_UTIL_H
#define FL_TESTS_CERT_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* The file names of launcher/security.h (FL_TLS_*), which common/rpc's users load. */
#define CERT_UTIL_CA "ca.pem"
#define CERT_UTIL_CA_KEY "ca.key"
#define CERT_UTIL_CERT "fleet.pem"
#define CERT_UTIL_KEY "fleet.key"
#define CERT_UTIL_TOKEN "token"
#define CERT_UTIL_LEARNER_TOKEN "learner.token"

/* why gets "what: " and OpenSSL's last error; returns -1. */
static inline int cert_util_fail(const char *what, char *why, size_t len) {
    char e[256] = "no OpenSSL error";
    unsigned long code = ERR_get_error();
    if (code) ERR_error_string_n(code, e, sizeof e);
    ERR_clear_error();
    snprintf(why, len, "%s: %s", what, e);
    return -1;
}

/* Opens dir/name for writing, new, with mode. */
static inline FILE *cert_util_open(const char *dir, const char *name, int mode, char *why, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        snprintf(why, len, "cannot write %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
    }
    return f;
}

/* Closes f, written as dir/name by an OpenSSL call that returned ok; 0 or -1 with why. */
static inline int cert_util_close(FILE *f, int ok, const char *dir, const char *name, char *why, size_t len) {
    const int closed = fclose(f) == 0;
    if (ok && closed) return 0;
    if (!ok) return cert_util_fail(name, why, len);
    snprintf(why, len, "cannot write %s/%s: %s", dir, name, strerror(errno));
    return -1;
}

static inline int cert_util_write_key(const char *dir, const char *name, EVP_PKEY *key, char *why, size_t len) {
    FILE *f = cert_util_open(dir, name, 0600, why, len);
    if (!f) return -1;
    return cert_util_close(f, PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) == 1, dir, name, why, len);
}

static inline int cert_util_write_cert(const char *dir, const char *name, X509 *x, char *why, size_t len) {
    FILE *f = cert_util_open(dir, name, 0644, why, len);
    if (!f) return -1;
    return cert_util_close(f, PEM_write_X509(f, x) == 1, dir, name, why, len);
}

/* A random token, 32 bytes as 64 hex digits and a newline, at dir/name (0600). */
static inline int cert_util_write_token(const char *dir, const char *name, char *why, size_t len) {
    unsigned char raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1) return cert_util_fail("random token", why, len);
    FILE *f = cert_util_open(dir, name, 0600, why, len);
    if (!f) return -1;
    int ok = 1;
    for (size_t i = 0; i < sizeof raw; i++) ok &= fprintf(f, "%02x", raw[i]) == 2;
    ok &= fputc('\n', f) == '\n';
    if (fclose(f) != 0) ok = 0;
    if (!ok) snprintf(why, len, "cannot write %s/%s", dir, name);
    return ok ? 0 : -1;
}

/* Adds the extension `value` (openssl's config syntax) of nid to x, issued by issuer. */
static inline int cert_util_ext(X509 *x, X509 *issuer, int nid, const char *value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    int ok = ext && X509_add_ext(x, ext, -1) == 1;
    X509_EXTENSION_free(ext);
    return ok;
}

/* An unsigned certificate of key's public half with the subject CN=cn, valid from now for
 * days, with a random serial, issued by issuer (NULL: by itself, as a CA is); the caller
 * adds its extensions and signs it. */
static inline X509 *cert_util_cert(EVP_PKEY *key, const char *cn, int days, X509 *issuer) {
    X509 *x = X509_new();
    unsigned char serial[16];
    BIGNUM *bn = NULL;
    int ok = x && RAND_bytes(serial, sizeof serial) == 1;
    if (ok) bn = BN_bin2bn(serial, sizeof serial, NULL);
    ok = ok && bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) && X509_set_version(x, 2) == 1 &&
         X509_gmtime_adj(X509_getm_notBefore(x), 0) && X509_gmtime_adj(X509_getm_notAfter(x), (long)days * 86400) &&
         X509_set_pubkey(x, key) == 1 &&
         X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1,
                                    0) == 1 &&
         X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : X509_get_subject_name(x)) == 1;
    BN_free(bn);
    if (!ok) {
        X509_free(x);
        return NULL;
    }
    return x;
}

static inline int cert_util_make(const char *dir, int days, char *why, size_t len) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(why, len, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    /* the host's name when it is a plain one (as `fleet certs` takes it) */
    char sans[400] = "IP:127.0.0.1,IP:::1,DNS:localhost", host[256] = "";
    const char *plain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-";
    if (gethostname(host, sizeof host - 1) == 0 && host[0] && strspn(host, plain) == strlen(host) &&
        strcmp(host, "localhost") != 0) {
        const size_t used = strlen(sans);
        snprintf(sans + used, sizeof sans - used, ",DNS:%s", host);
    }
    EVP_PKEY *ca_key = EVP_EC_gen("P-256"), *key = EVP_EC_gen("P-256");
    X509 *ca = NULL, *cert = NULL;
    int rc = -1;
    if (!ca_key || !key) {
        cert_util_fail("EC key generation", why, len);
        goto done;
    }
    ca = cert_util_cert(ca_key, "fleet test CA", days, NULL);
    if (!ca || !cert_util_ext(ca, ca, NID_basic_constraints, "critical,CA:TRUE") ||
        !cert_util_ext(ca, ca, NID_key_usage, "critical,keyCertSign,cRLSign") ||
        !cert_util_ext(ca, ca, NID_subject_key_identifier, "hash") || X509_sign(ca, ca_key, EVP_sha256()) <= 0) {
        cert_util_fail("the CA certificate", why, len);
        goto done;
    }
    cert = cert_util_cert(key, "fleet", days, ca);
    if (!cert || !cert_util_ext(cert, ca, NID_subject_alt_name, sans) ||
        !cert_util_ext(cert, ca, NID_basic_constraints, "critical,CA:FALSE") ||
        !cert_util_ext(cert, ca, NID_key_usage, "critical,digitalSignature,keyEncipherment") ||
        !cert_util_ext(cert, ca, NID_ext_key_usage, "serverAuth,clientAuth") ||
        !cert_util_ext(cert, ca, NID_authority_key_identifier, "keyid") || X509_sign(cert, ca_key, EVP_sha256()) <= 0) {
        cert_util_fail("the certificate", why, len);
        goto done;
    }
    if (cert_util_write_key(dir, CERT_UTIL_CA_KEY, ca_key, why, len) == 0 &&
        cert_util_write_cert(dir, CERT_UTIL_CA, ca, why, len) == 0 &&
        cert_util_write_key(dir, CERT_UTIL_KEY, key, why, len) == 0 &&
        cert_util_write_cert(dir, CERT_UTIL_CERT, cert, why, len) == 0 &&
        cert_util_write_token(dir, CERT_UTIL_TOKEN, why, len) == 0 &&
        cert_util_write_token(dir, CERT_UTIL_LEARNER_TOKEN, why, len) == 0)
        rc = 0;
done:
    X509_free(ca);
    X509_free(cert);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(key);
    return rc;
}

#endif
