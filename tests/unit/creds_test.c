/* creds_test.c: Hadoop's credentials files (src/yarn/creds.c): the
 * writer of secret keys (hyarn_creds_encode) against the bytes Hadoop's
 * Credentials.writeTokenStorageToStream lays out in its WRITABLE format,
 * its round trip through the reader over every VInt length class, its
 * limits; the secret reader over a WRITABLE file that carries tokens
 * before its secrets and over a delimited CredentialsProto (the format
 * Hadoop 3 may write the container's file in); every truncation refused
 * with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "Security.pb-c.h"
#include "testutil.h"
#include "hadoop/creds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The bytes Hadoop writes for {"loom.job.secret" -> "abc"}:
 * HDTS, format 0, VInt 0 tokens, VInt 1 secret, Text alias, VInt length
 * and the value. */
static void test_encode_bytes(void **state) {
  (void)state;
  hyarn_cred_secret s = {HYARN_CREDS_JOB_SECRET, (const uint8_t *)"abc", 3};
  uint8_t *out;
  size_t n;
  assert_int_equal(hyarn_creds_encode(&s, 1, &out, &n), 0);
  static const uint8_t want[] = {'H', 'D', 'T', 'S', 0,   0,   1,   15,  'l',
                                 'o', 'o', 'm', '.', 'j', 'o', 'b', '.', 's',
                                 'e', 'c', 'r', 'e', 't', 3,   'a', 'b', 'c'};
  assert_int_equal(n, sizeof want);
  assert_memory_equal(out, want, sizeof want);
  free(out);
  /* a value of 128 bytes: WritableUtils.writeVLong(128) is 0x8f 0x80 */
  uint8_t v[300];
  memset(v, 'x', sizeof v);
  hyarn_cred_secret l = {"k", v, 128};
  assert_int_equal(hyarn_creds_encode(&l, 1, &out, &n), 0);
  assert_int_equal(n, 5 + 1 + 1 + 2 + 2 + 128);
  assert_int_equal(out[9], 0x8f);
  assert_int_equal(out[10], 0x80);
  free(out);
  /* 300: 0x8e 0x01 0x2c */
  l.len = 300;
  assert_int_equal(hyarn_creds_encode(&l, 1, &out, &n), 0);
  assert_int_equal(out[9], 0x8e);
  assert_int_equal(out[10], 0x01);
  assert_int_equal(out[11], 0x2c);
  free(out);
}

/* Every length class of the VInt (1, 2, 3 and 4 bytes) and an empty
 * value, several secrets in one file, each found back as it went in. */
static void test_round_trip(void **state) {
  (void)state;
  static const size_t lens[] = {0, 1, 127, 128, 255, 256, 65535, 65536, HYARN_CREDS_MAX_FIELD};
  enum { N = sizeof lens / sizeof lens[0] };
  uint8_t *vals[N];
  char aliases[N][32];
  hyarn_cred_secret s[N];
  for (int i = 0; i < N; i++) {
    vals[i] = malloc(lens[i] + 1);
    assert_non_null(vals[i]);
    for (size_t b = 0; b < lens[i]; b++) vals[i][b] = (uint8_t)(b * 7 + (size_t)i);
    snprintf(aliases[i], sizeof aliases[i], "alias.%d", i);
    s[i] = (hyarn_cred_secret){aliases[i], vals[i], lens[i]};
  }
  uint8_t *out;
  size_t n;
  assert_int_equal(hyarn_creds_encode(s, N, &out, &n), 0);
  for (int i = 0; i < N; i++) {
    uint8_t *v = NULL;
    size_t vl = 99;
    char err[256] = "";
    assert_int_equal(hyarn_creds_find_secret(out, n, aliases[i], &v, &vl, err, sizeof err), 0);
    assert_int_equal(vl, lens[i]);
    if (vl) assert_memory_equal(v, vals[i], vl);
    assert_int_equal(v[vl], 0);
    free(v);
  }
  char err[256] = "";
  uint8_t *v = NULL;
  size_t vl;
  assert_int_equal(hyarn_creds_find_secret(out, n, "alias.99", &v, &vl, err, sizeof err),
                   LOOM_ENOENT);
  assert_null(v);
  assert_non_null(strstr(err, "alias.99"));
  /* no token in it: the token reader says so */
  hyarn_cred_token t;
  err[0] = 0;
  assert_int_equal(hyarn_creds_find(out, n, "YARN_AM_RM_TOKEN", &t, err, sizeof err), LOOM_ENOENT);
  assert_true(err[0] != 0);
  free(out);
  for (int i = 0; i < N; i++) free(vals[i]);
}

static void test_limits(void **state) {
  (void)state;
  uint8_t *out = (uint8_t *)"x";
  size_t n = 5;
  assert_int_equal(hyarn_creds_encode(NULL, 0, &out, &n), 0);
  assert_int_equal(n, 7); /* HDTS, 0, no tokens, no secrets */
  free(out);
  hyarn_cred_secret s = {NULL, (const uint8_t *)"a", 1};
  assert_int_equal(hyarn_creds_encode(&s, 1, &out, &n), LOOM_EINVAL);
  assert_null(out);
  assert_int_equal(hyarn_creds_encode(&s, -1, &out, &n), LOOM_EINVAL);
  s.alias = "a";
  s.len = (size_t)HYARN_CREDS_MAX_FIELD + 1;
  assert_int_equal(hyarn_creds_encode(&s, 1, &out, &n), LOOM_EINVAL);
  s.len = 1;
  hyarn_cred_secret many[HYARN_CREDS_MAX_SECRETS + 1];
  for (int i = 0; i <= HYARN_CREDS_MAX_SECRETS; i++) many[i] = s;
  assert_int_equal(hyarn_creds_encode(many, HYARN_CREDS_MAX_SECRETS + 1, &out, &n), LOOM_EINVAL);
  assert_int_equal(hyarn_creds_encode(many, HYARN_CREDS_MAX_SECRETS, &out, &n), 0);
  free(out);
  char *big = malloc((size_t)HYARN_CREDS_MAX_FIELD + 2);
  assert_non_null(big);
  memset(big, 'a', (size_t)HYARN_CREDS_MAX_FIELD + 1);
  big[HYARN_CREDS_MAX_FIELD + 1] = 0;
  s.alias = big;
  assert_int_equal(hyarn_creds_encode(&s, 1, &out, &n), LOOM_EINVAL);
  free(big);
}

/* ---- a WRITABLE file with a token before the secrets ------------------ */
static void put_bytes(uint8_t *b, size_t *at, const char *s) {
  size_t l = strlen(s);
  assert_true(l < 128);
  b[(*at)++] = (uint8_t)l;
  memcpy(b + *at, s, l);
  *at += l;
}

static void test_writable_with_tokens(void **state) {
  (void)state;
  uint8_t b[512];
  size_t at = 0;
  memcpy(b, "HDTS", 4);
  b[4] = 0;
  at = 5;
  b[at++] = 1; /* one token: alias, identifier, password, kind, service */
  put_bytes(b, &at, "svc:8030");
  put_bytes(b, &at, "ident");
  put_bytes(b, &at, "pass");
  put_bytes(b, &at, "YARN_AM_RM_TOKEN");
  put_bytes(b, &at, "svc:8030");
  b[at++] = 2; /* two secrets */
  put_bytes(b, &at, "other");
  put_bytes(b, &at, "nope");
  put_bytes(b, &at, HYARN_CREDS_JOB_SECRET);
  put_bytes(b, &at, "s3cr3t");
  uint8_t *v;
  size_t vl;
  char err[256] = "";
  assert_int_equal(hyarn_creds_find_secret(b, at, HYARN_CREDS_JOB_SECRET, &v, &vl, err, sizeof err),
                   0);
  assert_int_equal(vl, 6);
  assert_string_equal((char *)v, "s3cr3t");
  free(v);
  hyarn_cred_token t;
  assert_int_equal(hyarn_creds_find(b, at, "YARN_AM_RM_TOKEN", &t, err, sizeof err), 0);
  assert_int_equal(t.password_len, 4);
  hyarn_cred_token_free(&t);
  /* every truncation: refused with a message, never read past the end */
  for (size_t cut = 0; cut < at; cut++) {
    uint8_t *c = test_prefix(b, cut);
    err[0] = 0;
    v = NULL;
    int rc = hyarn_creds_find_secret(c, cut, HYARN_CREDS_JOB_SECRET, &v, &vl, err, sizeof err);
    assert_int_equal(rc, LOOM_EPROTO);
    assert_null(v);
    assert_true(err[0] != 0);
    free(c);
  }
  /* an unknown format and a count that runs away */
  b[4] = 7;
  assert_int_equal(hyarn_creds_find_secret(b, at, "x", &v, &vl, err, sizeof err), LOOM_EPROTO);
  assert_non_null(strstr(err, "format 7"));
}

/* ---- a delimited CredentialsProto ---------------------------------------- */
static void test_protobuf(void **state) {
  (void)state;
  Hadoop__Common__TokenProto tok = HADOOP__COMMON__TOKEN_PROTO__INIT;
  tok.identifier.data = (uint8_t *)"id";
  tok.identifier.len = 2;
  tok.password.data = (uint8_t *)"pw";
  tok.password.len = 2;
  tok.kind = "YARN_AM_RM_TOKEN";
  tok.service = "rm:8030";
  Hadoop__Common__CredentialsKVProto tkv = HADOOP__COMMON__CREDENTIALS_KVPROTO__INIT;
  tkv.alias = "rm:8030";
  tkv.token = &tok;
  Hadoop__Common__CredentialsKVProto s1 = HADOOP__COMMON__CREDENTIALS_KVPROTO__INIT;
  s1.alias = "other";
  s1.has_secret = 1;
  s1.secret.data = (uint8_t *)"zzz";
  s1.secret.len = 3;
  Hadoop__Common__CredentialsKVProto s2 = HADOOP__COMMON__CREDENTIALS_KVPROTO__INIT;
  s2.alias = HYARN_CREDS_JOB_SECRET;
  s2.has_secret = 1;
  s2.secret.data = (uint8_t *)"0123456789abcdef";
  s2.secret.len = 16;
  Hadoop__Common__CredentialsKVProto *toks[] = {&tkv}, *secs[] = {&s1, &s2};
  Hadoop__Common__CredentialsProto c = HADOOP__COMMON__CREDENTIALS_PROTO__INIT;
  c.n_tokens = 1;
  c.tokens = toks;
  c.n_secrets = 2;
  c.secrets = secs;
  size_t ml = hadoop__common__credentials_proto__get_packed_size(&c);
  assert_true(ml < 128);
  uint8_t *b = malloc(6 + ml);
  assert_non_null(b);
  memcpy(b, "HDTS", 4);
  b[4] = 1;
  b[5] = (uint8_t)ml;
  hadoop__common__credentials_proto__pack(&c, b + 6);
  size_t n = 6 + ml;
  uint8_t *v;
  size_t vl;
  char err[256] = "";
  assert_int_equal(hyarn_creds_find_secret(b, n, HYARN_CREDS_JOB_SECRET, &v, &vl, err, sizeof err),
                   0);
  assert_int_equal(vl, 16);
  assert_string_equal((char *)v, "0123456789abcdef");
  free(v);
  assert_int_equal(hyarn_creds_find_secret(b, n, "missing", &v, &vl, err, sizeof err), LOOM_ENOENT);
  for (size_t cut = 0; cut < n; cut++) {
    uint8_t *part = test_prefix(b, cut);
    err[0] = 0;
    v = NULL;
    assert_int_equal(
        hyarn_creds_find_secret(part, cut, HYARN_CREDS_JOB_SECRET, &v, &vl, err, sizeof err),
        LOOM_EPROTO);
    assert_null(v);
    assert_true(err[0] != 0);
    free(part);
  }
  free(b);
}

/* Tokens written (as `loom fs fetchdt` writes one) are found again, by
 * kind and by service, with the secret keys after them. */
static void test_tokens_round_trip(void **state) {
  (void)state;
  uint8_t id1[] = {1, 2, 3, 0, 255}, pw1[] = {9, 8, 7}, id2[200], pw2[20];
  for (size_t i = 0; i < sizeof id2; i++) id2[i] = (uint8_t)(i * 7);
  memset(pw2, 0x5a, sizeof pw2);
  hyarn_cred_token t[2] = {{.identifier = id1,
                            .identifier_len = sizeof id1,
                            .password = pw1,
                            .password_len = sizeof pw1},
                           {.identifier = id2,
                            .identifier_len = sizeof id2,
                            .password = pw2,
                            .password_len = sizeof pw2}};
  strcpy(t[0].kind, "HDFS_DELEGATION_TOKEN");
  strcpy(t[0].service, "10.0.0.1:8020");
  strcpy(t[1].kind, "HDFS_DELEGATION_TOKEN");
  strcpy(t[1].service, "10.0.0.2:9000");
  hyarn_cred_secret sec = {.alias = "a", .value = (const uint8_t *)"v", .len = 1};
  uint8_t *b = NULL;
  size_t n = 0;
  assert_int_equal(hyarn_creds_encode_all(t, 2, &sec, 1, &b, &n), 0);
  hyarn_cred_token got;
  char err[256];
  assert_int_equal(
      hyarn_creds_find_for(b, n, "HDFS_DELEGATION_TOKEN", "10.0.0.2:9000", &got, err, sizeof err),
      0);
  assert_int_equal(got.identifier_len, sizeof id2);
  assert_memory_equal(got.identifier, id2, sizeof id2);
  assert_memory_equal(got.password, pw2, sizeof pw2);
  assert_string_equal(got.service, "10.0.0.2:9000");
  hyarn_cred_token_free(&got);
  assert_int_equal(hyarn_creds_find(b, n, "HDFS_DELEGATION_TOKEN", &got, err, sizeof err), 0);
  assert_memory_equal(got.identifier, id1, sizeof id1);
  assert_string_equal(got.service, "10.0.0.1:8020");
  hyarn_cred_token_free(&got);
  assert_int_equal(
      hyarn_creds_find_for(b, n, "HDFS_DELEGATION_TOKEN", "10.0.0.3:8020", &got, err, sizeof err),
      LOOM_ENOENT);
  assert_non_null(strstr(err, "for 10.0.0.3:8020"));
  uint8_t *v = NULL;
  size_t vl = 0;
  assert_int_equal(hyarn_creds_find_secret(b, n, "a", &v, &vl, err, sizeof err), 0);
  assert_int_equal(vl, 1);
  free(v);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_encode_bytes), cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_limits),       cmocka_unit_test(test_writable_with_tokens),
      cmocka_unit_test(test_protobuf),     cmocka_unit_test(test_tokens_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
