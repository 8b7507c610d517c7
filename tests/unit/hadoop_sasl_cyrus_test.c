/* hadoop_sasl_cyrus_test.c: loom's DIGEST-MD5 (src/hadoop/sasl.c)
 * against cyrus-sasl's as an oracle, in process: cyrus' client answers a
 * challenge as Hadoop's server sends it; loom's digests for that qop and
 * cnonce must equal the response cyrus sent, cyrus must accept loom's
 * rspauth, and then under auth-int and auth-conf (3des) what cyrus'
 * sasl_encode makes loom's layer unwraps (the client-to-server keys, the
 * ones loom sends with) and what loom's layer wraps cyrus' sasl_decode
 * takes (the server-to-client keys, the ones loom receives with), over
 * many messages of many sizes. Cyrus' encode and decode carry a 4-byte
 * length in front; Hadoop's tokens do not. Built when libsasl2-dev is
 * installed (a test dependency only). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/bytes.h"
#include "core/core.h"
#include "hadoop/sasl.h"

#include <sasl/sasl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cb_name(void *ctx, int id, const char **result, unsigned *len) {
  (void)ctx;
  *result = id == SASL_CB_USER ? "" : "AAEC/w==";
  if (len) *len = (unsigned)strlen(*result);
  return SASL_OK;
}

static int cb_pass(sasl_conn_t *conn, void *ctx, int id, sasl_secret_t **psecret) {
  (void)conn;
  (void)ctx;
  (void)id;
  static union {
    sasl_secret_t s;
    char b[sizeof(sasl_secret_t) + 16];
  } sec;
  sec.s.len = 4;
  memcpy(sec.s.data, "3q0=", 4);
  *psecret = &sec.s;
  return SASL_OK;
}

static int cb_realm(void *ctx, int id, const char **avail, const char **result) {
  (void)ctx;
  (void)id;
  *result = avail && avail[0] ? avail[0] : "default";
  return SASL_OK;
}

/* The value of key in a DIGEST-MD5 response (quoted or not). */
static void field(const char *s, const char *key, char *out, size_t outlen) {
  char pat[64];
  snprintf(pat, sizeof pat, "%s=", key);
  const char *p = s;
  for (;;) {
    p = strstr(p, pat);
    if (!p) fail_msg("no %s in '%s'", key, s);
    if (p == s || p[-1] == ',') break;
    p++;
  }
  p += strlen(pat);
  size_t n = 0;
  if (*p == '"') {
    for (p++; *p && *p != '"' && n + 1 < outlen; p++) out[n++] = *p;
  } else {
    for (; *p && *p != ',' && n + 1 < outlen; p++) out[n++] = *p;
  }
  out[n] = 0;
}

/* cyrus' callbacks are int (*)(void): through void (*)(void), the cast
 * GCC takes as deliberate */
#define CB(f) ((int (*)(void))(void (*)(void))(f))

static void exchange(int qop) {
  sasl_callback_t cbs[] = {
      {SASL_CB_AUTHNAME, CB(cb_name), NULL}, {SASL_CB_USER, CB(cb_name), NULL},
      {SASL_CB_PASS, CB(cb_pass), NULL},     {SASL_CB_GETREALM, CB(cb_realm), NULL},
      {SASL_CB_LIST_END, NULL, NULL},
  };
  assert_int_equal(sasl_client_init(NULL), SASL_OK);
  sasl_conn_t *conn = NULL;
  assert_int_equal(sasl_client_new("nn", "default", NULL, NULL, cbs, 0, &conn), SASL_OK);
  sasl_security_properties_t sp = {0};
  sp.maxbufsize = 65536;
  sp.min_ssf = qop == HSASL_QOP_CONF ? 112 : 1;
  sp.max_ssf = qop == HSASL_QOP_CONF ? 112 : 1;
  assert_int_equal(sasl_setprop(conn, SASL_SEC_PROPS, &sp), SASL_OK);
  const char *out = NULL, *mech = NULL;
  unsigned outlen = 0;
  int rc = sasl_client_start(conn, "DIGEST-MD5", NULL, &out, &outlen, &mech);
  if (rc != SASL_CONTINUE) fail_msg("sasl_client_start: %s", sasl_errdetail(conn));
  /* what Hadoop's server offers (the JDK's DigestMD5Server) */
  const char *chs = "realm=\"default\",nonce=\"vTf2ZQ5Y0T1kqa+Wl8mKsj9tT3u7lPxQ\","
                    "qop=\"auth-conf,auth-int,auth\",charset=utf-8,maxbuf=65536,"
                    "cipher=\"3des\",algorithm=md5-sess";
  hsasl_challenge ch;
  char err[256];
  assert_int_equal(hsasl_parse_challenge((const uint8_t *)chs, strlen(chs), &ch, err, sizeof err),
                   0);
  rc = sasl_client_step(conn, chs, (unsigned)strlen(chs), NULL, &out, &outlen);
  if (rc != SASL_CONTINUE && qop == HSASL_QOP_CONF &&
      strstr(sasl_errdetail(conn), "failed to init cipher '3des'")) {
    /* Debian 12's cyrus cannot set up its own 3des (its DES_key_sched
     * on OpenSSL 3): no oracle here; the Java NameNode and
     * ResourceManager of the privacy test cluster are the other one */
    printf("cyrus-sasl cannot do 3des here (%s): auth-conf not checked against it\n",
           sasl_errdetail(conn));
    sasl_dispose(&conn);
    skip();
  }
  if (rc != SASL_CONTINUE) fail_msg("sasl_client_step: %d %s", rc, sasl_errdetail(conn));
  char resp[4096];
  assert_true(outlen < sizeof resp);
  memcpy(resp, out, outlen);
  resp[outlen] = 0;
  char cnonce[128], qops[32], response[64], uri[64];
  field(resp, "cnonce", cnonce, sizeof cnonce);
  field(resp, "qop", qops, sizeof qops);
  field(resp, "response", response, sizeof response);
  field(resp, "digest-uri", uri, sizeof uri);
  assert_string_equal(qops, hsasl_qop_name(qop));
  assert_string_equal(uri, "nn/default");
  if (qop == HSASL_QOP_CONF) {
    char cipher[32];
    field(resp, "cipher", cipher, sizeof cipher);
    assert_string_equal(cipher, "3des");
  }
  char want[33], rspauth[33];
  uint8_t ha1[16];
  hsasl_digest_qop(&ch, "AAEC/w==", "3q0=", uri, cnonce, qop, want, rspauth, ha1);
  assert_string_equal(want, response);
  /* the server's proof, as loom expects it: cyrus must take it */
  char fin[64];
  snprintf(fin, sizeof fin, "rspauth=%s", rspauth);
  rc = sasl_client_step(conn, fin, (unsigned)strlen(fin), NULL, &out, &outlen);
  if (rc != SASL_OK) fail_msg("cyrus refused loom's rspauth: %d %s", rc, sasl_errdetail(conn));

  /* the layers: cyrus is the client, loom plays the server */
  hsasl_layer sv;
  assert_int_equal(hsasl_layer_init(&sv, qop, ha1, 1), 0);
  uint8_t *msg = malloc(60000), *w = malloc(60000 + 64), *p = malloc(60000 + 64);
  for (size_t i = 0; i < 60000; i++) msg[i] = (uint8_t)(i * 13 + 1);
  size_t sizes[] = {0, 1, 7, 8, 9, 17, 100, 1000, 4096, 60000};
  for (int rep = 0; rep < 2; rep++) {
    for (size_t k = 0; k < LOOM__ARRAY_LEN(sizes); k++) {
      size_t n = sizes[k], pl = 0, wl = 0;
      if (n == 0) continue; /* cyrus encodes nothing for nothing */
      /* cyrus -> loom */
      rc = sasl_encode(conn, (const char *)msg, (unsigned)n, &out, &outlen);
      if (rc != SASL_OK) fail_msg("sasl_encode: %s", sasl_errdetail(conn));
      assert_true(outlen > 4);
      assert_int_equal(loom__get_be32((const unsigned char *)out), outlen - 4);
      if (hsasl_unwrap(&sv, (const uint8_t *)out + 4, outlen - 4, p, 60064, &pl, err, sizeof err) <
          0)
        fail_msg("loom refused cyrus' %zu-byte message: %s", n, err);
      assert_int_equal(pl, n);
      assert_memory_equal(p, msg, n);
      /* loom -> cyrus, with the length cyrus wants in front */
      assert_int_equal(hsasl_wrap(&sv, msg, n, w + 4, n + HSASL_WRAP_OVERHEAD, &wl), 0);
      loom__put_be32(w, (uint32_t)wl);
      rc = sasl_decode(conn, (const char *)w, (unsigned)(wl + 4), &out, &outlen);
      if (rc != SASL_OK)
        fail_msg("cyrus refused loom's %zu-byte message: %s", n, sasl_errdetail(conn));
      assert_int_equal(outlen, n);
      assert_memory_equal(out, msg, n);
    }
  }
  /* a message loom tampered with: cyrus refuses it too */
  size_t wl = 0;
  assert_int_equal(hsasl_wrap(&sv, msg, 50, w + 4, 50 + HSASL_WRAP_OVERHEAD, &wl), 0);
  loom__put_be32(w, (uint32_t)wl);
  w[4 + 3] ^= 4;
  rc = sasl_decode(conn, (const char *)w, (unsigned)(wl + 4), &out, &outlen);
  assert_int_not_equal(rc, SASL_OK);
  hsasl_layer_free(&sv);
  free(msg);
  free(w);
  free(p);
  sasl_dispose(&conn);
}

static void test_cyrus_auth_int(void **state) {
  (void)state;
  exchange(HSASL_QOP_INT);
}

static void test_cyrus_auth_conf(void **state) {
  (void)state;
  exchange(HSASL_QOP_CONF);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cyrus_auth_int),
      cmocka_unit_test(test_cyrus_auth_conf),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sasl_done();
  return rc;
}
