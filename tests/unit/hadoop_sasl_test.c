/* hadoop_sasl_test.c: DIGEST-MD5 (src/hadoop/sasl.c) against RFC 2831's
 * own example (section 4: user chris, password secret), the challenge
 * parser on what Hadoop's servers send and on what it must refuse, the
 * response's fields as Hadoop's DigestMD5Server reads them, the server's
 * proof; and the credentials-file reader (src/yarn/creds.c) on both
 * formats, Hadoop's VInts at their edges, and truncations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "Security.pb-c.h"
#include "core/bytes.h"
#include "testutil.h"
#include "hadoop/creds.h"
#include "hadoop/sasl.h"

#include <stdlib.h>
#include <string.h>

#define S(x) (const uint8_t *)(x), strlen(x)

static void test_rfc2831_example(void **state) {
  (void)state;
  /* RFC 2831 section 4: the IMAP example's challenge and digests */
  const char *ch = "realm=\"elwood.innosoft.com\",nonce=\"OA6MG9tEQGm2hh\",qop=\"auth\","
                   "algorithm=md5-sess,charset=utf-8";
  hsasl_challenge c;
  char err[256];
  assert_int_equal(hsasl_parse_challenge(S(ch), &c, err, sizeof err), 0);
  assert_string_equal(c.realm, "elwood.innosoft.com");
  assert_string_equal(c.nonce, "OA6MG9tEQGm2hh");
  char resp[33], rsp[33];
  hsasl_digest(&c, "chris", "secret", "imap/elwood.innosoft.com", "OA6MHXh6VqTrRk", resp, rsp);
  assert_string_equal(resp, "d388dad90d4bbd760a152321f2143af7");
  assert_string_equal(rsp, "ea40f60335c427b5527b84dbabcdfffd");
  char final[64];
  snprintf(final, sizeof final, "rspauth=%s", rsp);
  assert_int_equal(hsasl_check_rspauth(S(final), rsp), 0);
  final[20] ^= 1;
  assert_int_equal(hsasl_check_rspauth(S(final), rsp), -1);
  assert_int_equal(hsasl_check_rspauth(S("rspauth="), rsp), -1);
}

static void test_hadoop_response(void **state) {
  (void)state;
  /* what a NodeManager sends (SaslRpcServer: realm "default") */
  const char *ch = "realm=\"default\",nonce=\"n0nce+/=\",qop=\"auth\",charset=utf-8,"
                   "algorithm=md5-sess";
  hsasl_challenge c;
  char err[256];
  assert_int_equal(hsasl_parse_challenge(S(ch), &c, err, sizeof err), 0);
  const uint8_t id[] = {0, 1, 2, 0xff}, pw[] = {0xde, 0xad};
  hsasl_token t = {id, sizeof id, pw, sizeof pw};
  char out[2048], rsp[33];
  size_t n;
  assert_int_equal(hsasl_response(&c, &t, "", "default", "cn", out, sizeof out, &n, rsp), 0);
  assert_int_equal(strlen(out), n);
  /* base64 of the identifier as the user name, the digest over base64 of
   * the password, digest-uri protocol/serverId */
  assert_non_null(strstr(out, "username=\"AAEC/w==\""));
  assert_non_null(strstr(out, "digest-uri=\"/default\""));
  assert_non_null(strstr(out, "charset=utf-8,"));
  assert_non_null(strstr(out, ",qop=auth"));
  char want[33], wrsp[33];
  hsasl_digest(&c, "AAEC/w==", "3q0=", "/default", "cn", want, wrsp);
  char field[64];
  snprintf(field, sizeof field, "response=%s,", want);
  assert_non_null(strstr(out, field));
  assert_string_equal(rsp, wrsp);
  /* too small an output: refused, not cut */
  assert_int_equal(hsasl_response(&c, &t, "", "default", "cn", out, 40, &n, rsp), -1);
}

static void test_challenges_refused(void **state) {
  (void)state;
  static const struct {
    const char *ch, *want;
  } bad[] = {
      {"realm=\"default\",qop=\"auth\",algorithm=md5-sess", "no nonce"},
      {"nonce=\"a\",nonce=\"b\",algorithm=md5-sess", "two nonces"},
      {"nonce=\"a\",algorithm=md5", "not md5-sess"},
      {"nonce=\"a\",qop=\"auth-foo\",algorithm=md5-sess", "none of auth, auth-int"},
      {"nonce=\"a,algorithm=md5-sess", "malformed"},
      {"nonce", "not key=value"},
      {"=x", "not key=value"},
  };
  for (size_t i = 0; i < LOOM__ARRAY_LEN(bad); i++) {
    hsasl_challenge c;
    char err[256] = "";
    assert_int_equal(hsasl_parse_challenge(S(bad[i].ch), &c, err, sizeof err), -1);
    if (!strstr(err, bad[i].want)) fail_msg("%s: '%s' lacks '%s'", bad[i].ch, err, bad[i].want);
  }
  /* escapes inside quotes, spaces around '=' and ',', auth among others */
  hsasl_challenge c;
  char err[256];
  const char *ok = " nonce = \"a\\\"b\" , qop=\"auth-int,auth\",algorithm=md5-sess ";
  assert_int_equal(hsasl_parse_challenge(S(ok), &c, err, sizeof err), 0);
  assert_string_equal(c.nonce, "a\"b");
  /* a value longer than the field: refused */
  char big[600] = "nonce=\"";
  memset(big + 7, 'x', 400);
  strcpy(big + 407, "\",algorithm=md5-sess");
  assert_int_equal(hsasl_parse_challenge(S(big), &c, err, sizeof err), -1);
}

/* Hadoop's WritableUtils.writeVLong. */
static size_t put_vlong(uint8_t *b, int64_t v) {
  if (v >= -112 && v <= 127) {
    b[0] = (uint8_t)(int8_t)v;
    return 1;
  }
  int len = -112;
  if (v < 0) {
    v ^= -1LL;
    len = -120;
  }
  int64_t tmp = v;
  while (tmp != 0) {
    tmp >>= 8;
    len--;
  }
  b[0] = (uint8_t)(int8_t)len;
  len = len < -120 ? -(len + 120) : -(len + 112);
  for (int i = len; i != 0; i--) b[1 + len - i] = (uint8_t)((v >> ((i - 1) * 8)) & 0xff);
  return (size_t)len + 1;
}

static size_t put_text(uint8_t *b, const void *s, size_t n) {
  size_t k = put_vlong(b, (int64_t)n);
  memcpy(b + k, s, n);
  return k + n;
}

static void test_credentials_writable(void **state) {
  (void)state;
  uint8_t f[4096];
  size_t n = 0;
  memcpy(f, "HDTS", 4);
  f[4] = 0;
  n = 5;
  n += put_vlong(f + n, 2);
  uint8_t id[300]; /* an identifier over 127 bytes: a multi-byte VInt */
  for (size_t i = 0; i < sizeof id; i++) id[i] = (uint8_t)i;
  /* a token of another kind first */
  n += put_text(f + n, "alias1", 6);
  n += put_text(f + n, "x", 1);
  n += put_text(f + n, "y", 1);
  n += put_text(f + n, "HDFS_DELEGATION_TOKEN", 21);
  n += put_text(f + n, "nn:8020", 7);
  n += put_text(f + n, "appattempt", 10);
  n += put_text(f + n, id, sizeof id);
  n += put_text(f + n, "pw!", 3);
  n += put_text(f + n, "YARN_AM_RM_TOKEN", 16);
  n += put_text(f + n, "127.0.0.1:8030", 14);
  n += put_vlong(f + n, 0); /* no secret keys */
  hyarn_cred_token t;
  char err[256];
  assert_int_equal(hyarn_creds_find(f, n, "YARN_AM_RM_TOKEN", &t, err, sizeof err), 0);
  assert_int_equal(t.identifier_len, sizeof id);
  assert_memory_equal(t.identifier, id, sizeof id);
  assert_int_equal(t.password_len, 3);
  assert_memory_equal(t.password, "pw!", 3);
  assert_string_equal(t.service, "127.0.0.1:8030");
  hyarn_cred_token_free(&t);
  assert_int_equal(hyarn_creds_find(f, n, "NOPE", &t, err, sizeof err), LOOM_ENOENT);
  /* every truncation is refused or not found, never read past */
  for (size_t cut = 0; cut < n - 1; cut++) {
    uint8_t *c = test_prefix(f, cut);
    int rc = hyarn_creds_find(c, cut, "YARN_AM_RM_TOKEN", &t, err, sizeof err);
    if (rc == 0) fail_msg("a file cut at %zu bytes gave a token", cut);
    free(c);
  }
  /* VInts at their edges */
  const int64_t edges[] = {-113, -112, 127, 128, 255, 256, 65535, 1 << 24, -1000, INT32_MAX};
  for (size_t i = 0; i < LOOM__ARRAY_LEN(edges); i++) {
    uint8_t b[16];
    size_t k = put_vlong(b, edges[i]);
    uint8_t g[32] = "HDTS";
    memcpy(g + 5, b, k);
    /* as a count: negative or huge counts are malformed, others run out */
    assert_int_not_equal(hyarn_creds_find(g, 5 + k, "K", &t, err, sizeof err), 0);
  }
  f[4] = 7;
  assert_int_equal(hyarn_creds_find(f, n, "YARN_AM_RM_TOKEN", &t, err, sizeof err), LOOM_EPROTO);
  assert_non_null(strstr(err, "format 7"));
  assert_int_equal(hyarn_creds_find(S("HDRS\0"), "K", &t, err, sizeof err), LOOM_EPROTO);
}

static void test_credentials_protobuf(void **state) {
  (void)state;
  Hadoop__Common__TokenProto tp = HADOOP__COMMON__TOKEN_PROTO__INIT;
  tp.identifier.data = (uint8_t *)"ident";
  tp.identifier.len = 5;
  tp.password.data = (uint8_t *)"pass";
  tp.password.len = 4;
  tp.kind = "YARN_AM_RM_TOKEN";
  tp.service = "svc";
  Hadoop__Common__CredentialsKVProto kv = HADOOP__COMMON__CREDENTIALS_KVPROTO__INIT;
  kv.alias = "a";
  kv.token = &tp;
  Hadoop__Common__CredentialsKVProto *kvs[] = {&kv};
  Hadoop__Common__CredentialsProto cp = HADOOP__COMMON__CREDENTIALS_PROTO__INIT;
  cp.n_tokens = 1;
  cp.tokens = kvs;
  uint8_t f[512] = "HDTS";
  f[4] = 1;
  size_t ml = hadoop__common__credentials_proto__get_packed_size(&cp);
  size_t k = loom__varint_put(f + 5, ml);
  hadoop__common__credentials_proto__pack(&cp, f + 5 + k);
  size_t n = 5 + k + ml;
  hyarn_cred_token t;
  char err[256];
  assert_int_equal(hyarn_creds_find(f, n, "YARN_AM_RM_TOKEN", &t, err, sizeof err), 0);
  assert_int_equal(t.identifier_len, 5);
  assert_memory_equal(t.password, "pass", 4);
  hyarn_cred_token_free(&t);
  assert_int_equal(hyarn_creds_find(f, n - 1, "YARN_AM_RM_TOKEN", &t, err, sizeof err),
                   LOOM_EPROTO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rfc2831_example),      cmocka_unit_test(test_hadoop_response),
      cmocka_unit_test(test_challenges_refused),   cmocka_unit_test(test_credentials_writable),
      cmocka_unit_test(test_credentials_protobuf),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
