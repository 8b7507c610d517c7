/* tls_cert.c: a server certificate and its OpenSSL context, the
 * user's or self-signed (tls_cert.h). */
#include "http/tls_cert.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SELF_SIGNED_DAYS 365

/* OpenSSL's reason for the last failure ("no start line"), and the queue
 * cleared. */
static const char *ossl_reason(char *buf, size_t len) {
  unsigned long e = ERR_peek_last_error();
  const char *r = e ? ERR_reason_error_string(e) : NULL;
  snprintf(buf, len, "%s", r ? r : e ? "unknown error" : "no detail");
  ERR_clear_error();
  return buf;
}

void http_tls_cert_fingerprint(const unsigned char *der, size_t len, char out[HTTP_TLS_FP_LEN]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!EVP_Digest(der, len, md, &n, EVP_sha256(), NULL) || n != 32) {
    out[0] = 0;
    return;
  }
  static const char hex[] = "0123456789ABCDEF";
  for (unsigned i = 0; i < n; i++) {
    out[3 * i] = hex[md[i] >> 4];
    out[3 * i + 1] = hex[md[i] & 15];
    out[3 * i + 2] = i + 1 < n ? ':' : 0;
  }
}

/* The fingerprint of the context's leaf certificate. */
static int leaf_fingerprint(SSL_CTX *ctx, char out[HTTP_TLS_FP_LEN]) {
  X509 *x = SSL_CTX_get0_certificate(ctx);
  unsigned char *der = NULL;
  int n = x ? i2d_X509(x, &der) : -1;
  if (n <= 0) return LOOM_EIO;
  http_tls_cert_fingerprint(der, (size_t)n, out);
  OPENSSL_free(der);
  return out[0] ? 0 : LOOM_EIO;
}

/* A server context for browsers: TLS 1.2 and 1.3, forward secrecy only. */
static SSL_CTX *server_ctx(void) {
  SSL_CTX *c = SSL_CTX_new(TLS_server_method());
  if (!c) return NULL;
  if (!SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) ||
      !SSL_CTX_set_cipher_list(c, "ECDHE+AESGCM:ECDHE+CHACHA20")) {
    SSL_CTX_free(c);
    return NULL;
  }
  SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                             SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return c;
}

static int cert_new(SSL_CTX *ctx, bool self_signed, http_tls_cert **out, char *err, size_t errlen) {
  http_tls_cert *c = calloc(1, sizeof *c);
  if (!c) {
    SSL_CTX_free(ctx);
    snprintf(err, errlen, "out of memory");
    return LOOM_ENOMEM;
  }
  c->ssl_ctx = ctx;
  c->self_signed = self_signed;
  if (leaf_fingerprint(ctx, c->fingerprint) < 0) {
    http_tls_cert_free(c);
    snprintf(err, errlen, "cannot take the certificate's fingerprint");
    return LOOM_EIO;
  }
  *out = c;
  return 0;
}

void http_tls_cert_free(http_tls_cert *c) {
  if (!c) return;
  SSL_CTX_free(c->ssl_ctx);
  free(c);
}

/* ---- the user's ---- */

/* Never asks for a passphrase (OpenSSL's default would prompt on the
 * terminal): an encrypted key is an error. */
static int no_passphrase(char *buf, int size, int rwflag, void *u) {
  (void)buf, (void)size, (void)rwflag, (void)u;
  return -1;
}

/* Opens path for reading, or says why not. */
static BIO *open_pem(const char *var, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "%s=%s: cannot read: %s", var, path, strerror(errno));
    return NULL;
  }
  BIO *b = BIO_new_fp(f, BIO_CLOSE);
  if (!b) {
    fclose(f);
    snprintf(err, errlen, "%s=%s: out of memory", var, path);
  }
  return b;
}

int http_tls_cert_load(const char *cert_var, const char *cert_path, const char *key_var,
                       const char *key_path, http_tls_cert **out, char *err, size_t errlen) {
  char why[160];
  *out = NULL;
  bool key_apart = key_path && *key_path;
  const char *key_setting = key_var;
  if (!key_apart) {
    key_var = cert_var;
    key_path = cert_path;
  }
  SSL_CTX *ctx = NULL;
  X509 *leaf = NULL;
  EVP_PKEY *key = NULL;
  BIO *b = NULL;
  int rc = LOOM_EINVAL;

  /* the chain: the leaf, then what it was issued by */
  if (!(b = open_pem(cert_var, cert_path, err, errlen))) goto out;
  if (!(leaf = PEM_read_bio_X509_AUX(b, NULL, no_passphrase, NULL))) {
    snprintf(err, errlen, "%s=%s: not a PEM certificate (%s)", cert_var, cert_path,
             ossl_reason(why, sizeof why));
    goto out;
  }
  if (!(ctx = server_ctx()) || !SSL_CTX_use_certificate(ctx, leaf)) {
    snprintf(err, errlen, "%s=%s: OpenSSL refused the certificate (%s)", cert_var, cert_path,
             ossl_reason(why, sizeof why));
    rc = LOOM_EIO;
    goto out;
  }
  for (X509 *ca; (ca = PEM_read_bio_X509(b, NULL, no_passphrase, NULL));)
    if (!SSL_CTX_add0_chain_cert(ctx, ca)) {
      X509_free(ca);
      snprintf(err, errlen, "%s=%s: OpenSSL refused a certificate of the chain (%s)", cert_var,
               cert_path, ossl_reason(why, sizeof why));
      goto out;
    }
  ERR_clear_error(); /* the end of the file */
  BIO_free(b);

  /* the key */
  if (!(b = open_pem(key_var, key_path, err, errlen))) goto out;
  if (!(key = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL))) {
    unsigned long e = ERR_peek_last_error();
    bool pass =
        ERR_GET_LIB(e) == ERR_LIB_PEM && (ERR_GET_REASON(e) == PEM_R_BAD_PASSWORD_READ ||
                                          ERR_GET_REASON(e) == PEM_R_PROBLEMS_GETTING_PASSWORD);
    snprintf(err, errlen, "%s=%s: %s%s%s (%s)", key_var, key_path,
             pass        ? "the private key is encrypted: give it without a passphrase"
             : key_apart ? "not a PEM private key"
                         : "holds no PEM private key: set ",
             pass || key_apart ? "" : key_setting, pass || key_apart ? "" : " to the key's file",
             ossl_reason(why, sizeof why));
    goto out;
  }
  if (X509_check_private_key(leaf, key) != 1) {
    snprintf(err, errlen, "%s=%s: the key does not match the certificate in %s=%s (%s)", key_var,
             key_path, cert_var, cert_path, ossl_reason(why, sizeof why));
    goto out;
  }
  if (!SSL_CTX_use_PrivateKey(ctx, key) || !SSL_CTX_check_private_key(ctx)) {
    snprintf(err, errlen, "%s=%s: the key does not match the certificate in %s=%s (%s)", key_var,
             key_path, cert_var, cert_path, ossl_reason(why, sizeof why));
    goto out;
  }
  rc = cert_new(ctx, false, out, err, errlen);
  ctx = NULL;
out:
  BIO_free(b);
  X509_free(leaf);
  EVP_PKEY_free(key);
  SSL_CTX_free(ctx);
  ERR_clear_error();
  return rc;
}

/* ---- self-signed ---- */

static bool add_ext(X509 *x, int nid, const char *value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
  X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
  bool ok = e && X509_add_ext(x, e, -1);
  X509_EXTENSION_free(e);
  return ok;
}

static bool random_serial(X509 *x) {
  unsigned char r[16];
  if (RAND_bytes(r, sizeof r) != 1) return false;
  r[0] &= 0x7f; /* positive */
  r[0] |= 0x01; /* and 16 bytes long */
  BIGNUM *bn = BN_bin2bn(r, sizeof r, NULL);
  bool ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
  BN_free(bn);
  return ok;
}

int http_tls_cert_self_signed(const char *const *names, size_t n, http_tls_cert **out, char *err,
                              size_t errlen) {
  *out = NULL;
  char why[160];
  if (n == 0) {
    snprintf(err, errlen, "a self-signed certificate needs a name");
    return LOOM_EINVAL;
  }
  /* subjectAltName: "IP:1.2.3.4,DNS:localhost" */
  loom__buf san;
  loom__buf_init(&san, 4096);
  for (size_t i = 0; i < n; i++) {
    unsigned char a[16];
    bool ip = inet_pton(AF_INET, names[i], a) == 1 || inet_pton(AF_INET6, names[i], a) == 1;
    bool dns = !ip && names[i][0] &&
               strspn(names[i], "abcdefghijklmnopqrstuvwxyz"
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == strlen(names[i]);
    if (!ip && !dns) {
      loom__buf_free(&san);
      snprintf(err, errlen, "'%s' is neither an IP address nor a DNS name for the certificate",
               names[i]);
      return LOOM_EINVAL;
    }
    if (loom__buf_printf(&san, "%s%s:%s", i ? "," : "", ip ? "IP" : "DNS", names[i]) < 0) {
      loom__buf_free(&san);
      snprintf(err, errlen, "out of memory, or too many names");
      return LOOM_ENOMEM;
    }
  }
  if (loom__buf_add(&san, "", 1) < 0) {
    loom__buf_free(&san);
    snprintf(err, errlen, "out of memory");
    return LOOM_ENOMEM;
  }

  int rc = LOOM_EIO;
  SSL_CTX *ctx = NULL;
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *x = key ? X509_new() : NULL;
  X509_NAME *name = x ? X509_get_subject_name(x) : NULL;
  if (!name || !X509_set_version(x, 2) || !random_serial(x) ||
      !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(x), (long)SELF_SIGNED_DAYS * 24 * 3600) ||
      !X509_set_pubkey(x, key) ||
      !X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"loom", -1, -1,
                                  0) ||
      !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"loom dashboard",
                                  -1, -1, 0) ||
      !X509_set_issuer_name(x, name) || !add_ext(x, NID_basic_constraints, "critical,CA:FALSE") ||
      !add_ext(x, NID_key_usage, "critical,digitalSignature") ||
      !add_ext(x, NID_ext_key_usage, "serverAuth") ||
      !add_ext(x, NID_subject_key_identifier, "hash") ||
      !add_ext(x, NID_authority_key_identifier, "keyid:always") ||
      !add_ext(x, NID_subject_alt_name, san.p) || !X509_sign(x, key, EVP_sha256())) {
    snprintf(err, errlen, "cannot make a self-signed certificate (%s)",
             ossl_reason(why, sizeof why));
    goto out;
  }
  if (!(ctx = server_ctx()) || !SSL_CTX_use_certificate(ctx, x) ||
      !SSL_CTX_use_PrivateKey(ctx, key) || !SSL_CTX_check_private_key(ctx)) {
    snprintf(err, errlen, "OpenSSL refused the self-signed certificate (%s)",
             ossl_reason(why, sizeof why));
    goto out;
  }
  rc = cert_new(ctx, true, out, err, errlen);
  ctx = NULL;
out:
  loom__buf_free(&san);
  X509_free(x);
  EVP_PKEY_free(key);
  SSL_CTX_free(ctx);
  ERR_clear_error();
  return rc;
}
