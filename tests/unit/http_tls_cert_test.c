/* http_tls_cert_test.c: the dashboard's certificates. A self-signed one:
 * its fingerprint's format and that it is the SHA-256 of its DER, X.509
 * v3 with the names as subjectAltName, a year, a random serial, and a
 * memory session of it (wire_tls_mem_new_ctx) that an OpenSSL client
 * verifies for 127.0.0.1 and localhost over TLS 1.3 and 1.2. A pair made
 * with the `openssl` command line: loaded from two files and from one, its
 * fingerprint the one `openssl x509 -fingerprint` gives. And refused: a
 * missing file, not PEM, a key of another certificate, an encrypted key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "wire/wire_tls.h"
#include "http/tls_cert.h"

static char *dir; /* the pairs made with the openssl command */

/* Runs a shell command in dir; its exit status. */
static int sh(const char *what) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "cd '%s' && (%s) >/dev/null 2>&1", dir, what);
  return system(cmd);
}

#define REQ_P256                                                                                   \
  "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "                  \
  "-subj /CN=loom-test -addext subjectAltName=IP:127.0.0.1,DNS:localhost "

static int group_setup(void **state) {
  (void)state;
  dir = test_tmpdir("wire-tls-cert");
  /* two P-256 pairs, an RSA one, an encrypted key, a combined file */
  if (sh(REQ_P256 "-keyout a.key -out a.crt") || sh(REQ_P256 "-keyout b.key -out b.crt") ||
      sh("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=rsa -keyout r.key -out "
         "r.crt") ||
      sh("openssl pkey -in a.key -aes256 -passout pass:xyz -out enc.key") ||
      sh("cat a.crt a.key > both.pem; echo junk > junk.pem") ||
      sh("openssl x509 -in a.crt -noout -fingerprint -sha256 > a.fp"))
    return -1;
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  test_rm_rf(dir);
  free(dir);
  return 0;
}

static char *path(const char *name) { return loom__asprintf("%s/%s", dir, name); }

/* "AB:CD:..." by hand: 32 pairs of upper-case hex digits. */
static void assert_fp_format(const char *fp) {
  assert_int_equal(strlen(fp), 32 * 3 - 1);
  for (int i = 0; i < 32 * 3 - 1; i++) {
    if (i % 3 == 2)
      assert_int_equal(fp[i], ':');
    else
      assert_non_null(strchr("0123456789ABCDEF", fp[i]));
  }
}

/* The SHA-256 of the context's leaf DER, formatted here, not by the code
 * under test. */
static void der_fp(const http_tls_cert *c, char out[HTTP_TLS_FP_LEN]) {
  X509 *x = SSL_CTX_get0_certificate(c->ssl_ctx);
  assert_non_null(x);
  unsigned char *der = NULL;
  int n = i2d_X509(x, &der);
  assert_true(n > 0);
  unsigned char md[32];
  unsigned int ml = 0;
  assert_int_equal(EVP_Digest(der, (size_t)n, md, &ml, EVP_sha256(), NULL), 1);
  OPENSSL_free(der);
  for (int i = 0; i < 32; i++) sprintf(out + 3 * i, i < 31 ? "%02X:" : "%02X", md[i]);
}

/* A memory-to-memory handshake: an OpenSSL client that trusts only the
 * server's own certificate and checks host (an IP or a DNS name) against
 * a wire_tls memory session of c; then "ping" one way. Returns 1 when the
 * handshake and the verification passed, 0 when the client refused. */
static int handshake(const http_tls_cert *c, const char *host, int max_version) {
  SSL_CTX *cc = SSL_CTX_new(TLS_client_method());
  assert_non_null(cc);
  if (max_version) SSL_CTX_set_max_proto_version(cc, max_version);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(cc), SSL_CTX_get0_certificate(c->ssl_ctx));
  SSL_CTX_set_verify(cc, SSL_VERIFY_PEER, NULL);
  SSL *cl = SSL_new(cc);
  X509_VERIFY_PARAM *vp = SSL_get0_param(cl);
  if (!X509_VERIFY_PARAM_set1_ip_asc(vp, host)) X509_VERIFY_PARAM_set1_host(vp, host, 0);
  BIO *cin = BIO_new(BIO_s_mem()), *cout = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(cin, -1);
  SSL_set_bio(cl, cin, cout);
  SSL_set_connect_state(cl);
  wire_tls *sv = wire_tls_mem_new_ctx(c->ssl_ctx);
  assert_non_null(sv);
  int ok = 0;
  for (int round = 0; round < 10; round++) {
    int r = SSL_do_handshake(cl);
    if (r == 1) {
      ok = 1;
      break;
    }
    if (SSL_get_error(cl, r) != SSL_ERROR_WANT_READ) break;
    /* client -> server */
    unsigned char buf[16384];
    int n;
    while ((n = BIO_read(cout, buf, sizeof buf)) > 0)
      assert_int_equal(wire_tls_mem_feed(sv, buf, (size_t)n), 0);
    size_t got = 0;
    if (wire_tls_mem_read(sv, buf, sizeof buf, &got) < 0) break;
    /* server -> client */
    unsigned char *out;
    size_t olen;
    assert_int_equal(wire_tls_mem_take(sv, &out, &olen), 0);
    if (olen) BIO_write(cin, out, (int)olen);
    free(out);
  }
  if (ok) {
    /* the server reads what the client sends */
    assert_int_equal(SSL_write(cl, "ping", 4), 4);
    unsigned char buf[16384];
    int n;
    while ((n = BIO_read(cout, buf, sizeof buf)) > 0)
      assert_int_equal(wire_tls_mem_feed(sv, buf, (size_t)n), 0);
    size_t got = 0;
    for (int i = 0; i < 4 && !got; i++) assert_int_equal(wire_tls_mem_read(sv, buf, 4, &got), 0);
    assert_int_equal(got, 4);
    assert_memory_equal(buf, "ping", 4);
    assert_true(wire_tls_mem_done(sv));
  }
  wire_tls_mem_free(sv);
  SSL_free(cl);
  SSL_CTX_free(cc);
  return ok;
}

static void test_self_signed(void **state) {
  (void)state;
  const char *names[] = {"127.0.0.1", "localhost"};
  http_tls_cert *c = NULL, *c2 = NULL;
  char err[512] = "";
  assert_int_equal(http_tls_cert_self_signed(names, 2, &c, err, sizeof err), 0);
  assert_non_null(c);
  assert_true(c->self_signed);
  assert_fp_format(c->fingerprint);
  char want[HTTP_TLS_FP_LEN];
  der_fp(c, want);
  assert_string_equal(c->fingerprint, want);

  X509 *x = SSL_CTX_get0_certificate(c->ssl_ctx);
  assert_int_equal(X509_get_version(x), 2); /* v3 */
  assert_int_equal(X509_check_ip_asc(x, "127.0.0.1", 0), 1);
  assert_int_equal(X509_check_host(x, "localhost", 0, 0, NULL), 1);
  assert_int_equal(X509_check_ip_asc(x, "10.0.0.1", 0), 0);
  assert_int_equal(X509_check_purpose(x, X509_PURPOSE_SSL_SERVER, 0), 1);
  EVP_PKEY *pk = X509_get0_pubkey(x);
  assert_int_equal(EVP_PKEY_get_base_id(pk), EVP_PKEY_EC);
  assert_int_equal(EVP_PKEY_get_bits(pk), 256);
  /* valid now, for a year */
  int days = 0, secs = 0;
  assert_int_equal(X509_cmp_current_time(X509_get0_notBefore(x)), -1);
  assert_int_equal(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(x), X509_get0_notAfter(x)), 1);
  assert_int_equal(days, 365);
  /* 128 random bits, positive */
  const ASN1_INTEGER *serial = X509_get0_serialNumber(x);
  assert_int_equal(ASN1_STRING_length(serial), 16);
  assert_int_equal(ASN1_STRING_type(serial), V_ASN1_INTEGER);

  /* another one: another key, serial and fingerprint */
  assert_int_equal(http_tls_cert_self_signed(names, 2, &c2, err, sizeof err), 0);
  assert_string_not_equal(c->fingerprint, c2->fingerprint);
  assert_int_not_equal(
      ASN1_INTEGER_cmp(X509_get0_serialNumber(x),
                       X509_get0_serialNumber(SSL_CTX_get0_certificate(c2->ssl_ctx))),
      0);

  /* a browser-like client verifies it for its names, TLS 1.3 and 1.2 */
  assert_int_equal(handshake(c, "127.0.0.1", 0), 1);
  assert_int_equal(handshake(c, "localhost", 0), 1);
  assert_int_equal(handshake(c, "127.0.0.1", TLS1_2_VERSION), 1);
  assert_int_equal(handshake(c, "10.0.0.1", 0), 0);
  /* and not the other one's */
  assert_int_equal(handshake(c2, "127.0.0.1", 0), 1);
  http_tls_cert_free(c);
  http_tls_cert_free(c2);

  /* IPv6 and a host name; a name that is neither */
  const char *v6[] = {"::1", "node-7.example"};
  assert_int_equal(http_tls_cert_self_signed(v6, 2, &c, err, sizeof err), 0);
  x = SSL_CTX_get0_certificate(c->ssl_ctx);
  assert_int_equal(X509_check_ip_asc(x, "::1", 0), 1);
  assert_int_equal(X509_check_host(x, "node-7.example", 0, 0, NULL), 1);
  http_tls_cert_free(c);
  const char *bad[] = {"a b"};
  assert_int_equal(http_tls_cert_self_signed(bad, 1, &c, err, sizeof err), LOOM_EINVAL);
  assert_null(c);
  assert_non_null(strstr(err, "'a b' is neither an IP address nor a DNS name"));
  http_tls_cert_free(NULL);
}

static void test_load_pair(void **state) {
  (void)state;
  char *crt = path("a.crt"), *key = path("a.key"), *both = path("both.pem"), *fpf = path("a.fp");
  http_tls_cert *c = NULL;
  char err[1024] = "";
  int rc = http_tls_cert_load("CERT", crt, "KEY", key, &c, err, sizeof err);
  assert_int_equal(rc, 0);
  assert_false(c->self_signed);
  assert_fp_format(c->fingerprint);
  /* what `openssl x509 -noout -fingerprint -sha256` says */
  char *txt = NULL;
  assert_int_equal(loom__read_file(fpf, 4096, &txt, NULL), 0);
  const char *eq = strchr(txt, '=');
  assert_non_null(eq);
  assert_memory_equal(eq + 1, c->fingerprint, strlen(c->fingerprint));
  free(txt);
  assert_int_equal(handshake(c, "127.0.0.1", 0), 1);
  assert_int_equal(handshake(c, "localhost", TLS1_2_VERSION), 1);
  char fp[HTTP_TLS_FP_LEN];
  loom__strlcpy(fp, c->fingerprint, sizeof fp);
  http_tls_cert_free(c);

  /* the key in the certificate's file: no key path */
  assert_int_equal(http_tls_cert_load("CERT", both, "KEY", "", &c, err, sizeof err), 0);
  assert_string_equal(c->fingerprint, fp);
  http_tls_cert_free(c);
  assert_int_equal(http_tls_cert_load("CERT", both, "KEY", NULL, &c, err, sizeof err), 0);
  http_tls_cert_free(c);

  /* RSA */
  char *rcrt = path("r.crt"), *rkey = path("r.key");
  assert_int_equal(http_tls_cert_load("CERT", rcrt, "KEY", rkey, &c, err, sizeof err), 0);
  assert_int_equal(handshake(c, "127.0.0.1", TLS1_2_VERSION), 0); /* no IP in that one */
  http_tls_cert_free(c);
  free(rcrt);
  free(rkey);
  free(crt);
  free(key);
  free(both);
  free(fpf);
}

static const struct {
  const char *cert, *key; /* file names in dir; a leading '/' as is */
  const char *says;       /* in the message */
} refused[] = {
    {"/nonexistent/dash.crt", "a.key", "CERT=/nonexistent/dash.crt: cannot read: No such file"},
    {"a.crt", "/nonexistent/dash.key", "KEY=/nonexistent/dash.key: cannot read: No such file"},
    {"junk.pem", "a.key", "/junk.pem: not a PEM certificate ("},
    {"a.crt", "junk.pem", "/junk.pem: not a PEM private key ("},
    {"a.crt", "b.key", "/b.key: the key does not match the certificate in CERT="},
    {"b.crt", "a.key", "/a.key: the key does not match the certificate in CERT="},
    {"a.crt", "r.key", "/r.key: the key does not match the certificate in CERT="},
    {"r.crt", "b.key", "/b.key: the key does not match the certificate in CERT="},
    {"a.crt", "enc.key", "/enc.key: the private key is encrypted: give it without a passphrase"},
    {"a.crt", "", "/a.crt: holds no PEM private key: set KEY to the key's file"},
    {"a.key", "a.key", "/a.key: not a PEM certificate"},
};

static void test_refused(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    const char *cn = refused[i].cert, *kn = refused[i].key;
    char *cp = cn[0] == '/' ? strdup(cn) : path(cn);
    char *kp = kn[0] == '/' || !kn[0] ? strdup(kn) : path(kn);
    http_tls_cert *c = (http_tls_cert *)1;
    char err[1024] = "";
    int rc = http_tls_cert_load("CERT", cp, "KEY", kp, &c, err, sizeof err);
    if (rc != LOOM_EINVAL || !strstr(err, refused[i].says))
      fail_msg("case %zu (%s, %s): rc %d, message '%s', wanted '%s'", i, cn, kn, rc, err,
               refused[i].says);
    assert_null(c);
    /* the key's bytes never reach the message */
    assert_null(strstr(err, "PRIVATE KEY-----"));
    free(cp);
    free(kp);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_self_signed),
      cmocka_unit_test(test_load_pair),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
