/* tls_cert.h: a certificate for a TLS server that browsers talk to
 * (the dashboard under HTTPS), as an OpenSSL server context that
 * wire_tls_mem_new_ctx() makes sessions of.
 *
 * Either the user's: a PEM certificate chain and its private key, checked
 * to match. Or a self-signed one made at start: a fresh P-256 key, X.509
 * v3, the given names as subjectAltName (IP addresses as IP entries, the
 * rest as DNS names), valid from an hour ago for a year, a random 128-bit
 * serial. A browser cannot check a self-signed certificate against anyone:
 * the user compares its SHA-256 fingerprint with the one loom printed.
 *
 * The context speaks TLS 1.2 and 1.3 (browsers), with forward-secret
 * suites only (ECDHE with AES-GCM or ChaCha20-Poly1305 for 1.2), no
 * renegotiation. The private key is never logged or put in a message. Only
 * the loom command compiles this file: libloom serves no certificate. */
#ifndef LOOM_HTTP_TLS_CERT_H
#define LOOM_HTTP_TLS_CERT_H

#include "core/core.h"

#include <stdbool.h>
#include <stddef.h>

/* "AB:CD:...": 32 bytes as two hex digits each, ':' between, and NUL. */
#define HTTP_TLS_FP_LEN (32 * 3)

typedef struct {
  void *ssl_ctx; /* SSL_CTX *, owned: give it to wire_tls_mem_new_ctx() */
  bool self_signed;
  char fingerprint[HTTP_TLS_FP_LEN]; /* SHA-256 of the certificate's DER */
} http_tls_cert;

/* Loads the PEM certificate chain in cert_path (leaf first) and the PEM
 * private key in key_path (NULL or "": from cert_path too), and checks
 * that the key is the leaf's. cert_var and key_var name where the paths
 * came from, for messages ("LOOM_DASHBOARD_CERT"). Returns 0 with *out
 * (free it with http_tls_cert_free), or LOOM_EINVAL (cannot read, not PEM,
 * the key does not match: err says which file and OpenSSL's reason),
 * LOOM_ENOMEM, LOOM_EIO (OpenSSL refused to make a context). */
int http_tls_cert_load(const char *cert_var, const char *cert_path, const char *key_var,
                       const char *key_path, http_tls_cert **out, char *err, size_t errlen);

/* Makes a self-signed certificate and its key for names[0..n) (IP
 * addresses or DNS names; at least one). Returns 0 with *out, LOOM_EINVAL
 * (a name that fits neither), LOOM_ENOMEM or LOOM_EIO, with err filled. */
int http_tls_cert_self_signed(const char *const *names, size_t n, http_tls_cert **out, char *err,
                              size_t errlen);

/* Frees c and its context (sessions made from it keep their own
 * reference). NULL is fine. */
void http_tls_cert_free(http_tls_cert *c);

/* The SHA-256 fingerprint of der[0..len) as "AB:CD:..." into out. */
void http_tls_cert_fingerprint(const unsigned char *der, size_t len, char out[HTTP_TLS_FP_LEN]);

#endif
