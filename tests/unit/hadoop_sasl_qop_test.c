/* hadoop_sasl_qop_test.c: DIGEST-MD5's protection levels
 * (src/hadoop/sasl.c): the qop a challenge offers and the one chosen, the
 * response above auth (RFC 2831's A2 with the 32 zeros, cipher="3des"),
 * and the security layer of RFC 2831 sections 2.3 and 2.4: a client's
 * messages unwrapped by a server's layer and back, under auth-int and
 * auth-conf, over many messages (the CBC chain and the sequence numbers
 * carry over); a changed MAC, ciphertext, type or length refused; a
 * replayed, dropped or reordered message refused; nothing taken after a
 * refusal. hadoop_sasl_cyrus_test checks the same against cyrus-sasl. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/core.h"
#include "hadoop/sasl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S(x) (const uint8_t *)(x), strlen(x)

static const char *JAVA_CH = "realm=\"default\",nonce=\"vTf2ZQ5Y0T1kqa+Wl8mKsj9tT3u7lPxQ\","
                             "qop=\"auth-conf,auth-int,auth\",charset=utf-8,maxbuf=65536,"
                             "cipher=\"3des,rc4,des,rc4-56,rc4-40\",algorithm=md5-sess";

static void test_choose(void **state) {
  (void)state;
  hsasl_challenge c;
  char err[256];
  assert_int_equal(hsasl_parse_challenge(S(JAVA_CH), &c, err, sizeof err), 0);
  assert_int_equal(c.qops, HSASL_QOP_ALL);
  assert_int_equal(c.maxbuf, 65536);
  assert_string_equal(c.cipher, "3des,rc4,des,rc4-56,rc4-40");
  assert_int_equal(hsasl_choose_qop(&c, HSASL_QOP_ALL), HSASL_QOP_CONF);
  assert_int_equal(hsasl_choose_qop(&c, HSASL_QOP_AUTH | HSASL_QOP_INT), HSASL_QOP_INT);
  assert_int_equal(hsasl_choose_qop(&c, HSASL_QOP_AUTH), HSASL_QOP_AUTH);
  /* privacy without 3des: loom has no other cipher */
  const char *rc4 = "nonce=\"n\",qop=\"auth-conf\",cipher=\"rc4\",algorithm=md5-sess";
  assert_int_equal(hsasl_parse_challenge(S(rc4), &c, err, sizeof err), 0);
  assert_int_equal(hsasl_choose_qop(&c, HSASL_QOP_ALL), 0);
  const char *integ = "nonce=\"n\",qop=\"auth-int\",maxbuf=4096,algorithm=md5-sess";
  assert_int_equal(hsasl_parse_challenge(S(integ), &c, err, sizeof err), 0);
  assert_int_equal(c.maxbuf, 4096);
  assert_int_equal(hsasl_choose_qop(&c, HSASL_QOP_ALL), HSASL_QOP_INT);
  assert_int_equal(hsasl_choose_qop(&c, HSASL_QOP_AUTH), 0);
  /* no qop loom knows, a maxbuf out of range */
  const char *bad[] = {
      "nonce=\"n\",qop=\"auth-foo\",algorithm=md5-sess", "nonce=\"n\",maxbuf=12,algorithm=md5-sess",
      "nonce=\"n\",maxbuf=16777216,algorithm=md5-sess", "nonce=\"n\",maxbuf=x,algorithm=md5-sess"};
  for (size_t i = 0; i < LOOM__ARRAY_LEN(bad); i++)
    assert_int_equal(hsasl_parse_challenge(S(bad[i]), &c, err, sizeof err), -1);
}

static void test_response_qop(void **state) {
  (void)state;
  hsasl_challenge c;
  char err[256];
  assert_int_equal(hsasl_parse_challenge(S(JAVA_CH), &c, err, sizeof err), 0);
  const uint8_t id[] = {0, 1, 2, 0xff}, pw[] = {0xde, 0xad};
  hsasl_token t = {id, sizeof id, pw, sizeof pw};
  char out[2048], rsp[33], want[33], wrsp[33], field[64];
  uint8_t ha1[16], wha1[16];
  size_t n;
  assert_int_equal(hsasl_response_qop(&c, &t, "", "default", "cn", HSASL_QOP_CONF, out, sizeof out,
                                      &n, rsp, ha1),
                   0);
  assert_int_equal(strlen(out), n);
  assert_non_null(strstr(out, ",qop=auth-conf,cipher=\"3des\""));
  hsasl_digest_qop(&c, "AAEC/w==", "3q0=", "/default", "cn", HSASL_QOP_CONF, want, wrsp, wha1);
  snprintf(field, sizeof field, "response=%s,", want);
  assert_non_null(strstr(out, field));
  assert_string_equal(rsp, wrsp);
  assert_memory_equal(ha1, wha1, 16);
  /* the qop is in the digest, and above auth A2 ends in 32 zeros: the
   * auth-int and auth-conf digests differ from auth's and each other */
  char a[33], ar[33], i[33], ir[33];
  hsasl_digest_qop(&c, "AAEC/w==", "3q0=", "/default", "cn", HSASL_QOP_AUTH, a, ar, NULL);
  hsasl_digest_qop(&c, "AAEC/w==", "3q0=", "/default", "cn", HSASL_QOP_INT, i, ir, NULL);
  assert_string_not_equal(a, i);
  assert_string_not_equal(i, want);
  assert_string_not_equal(ar, ir);
  assert_int_equal(
      hsasl_response_qop(&c, &t, "", "default", "cn", HSASL_QOP_INT, out, sizeof out, &n, rsp, ha1),
      0);
  assert_non_null(strstr(out, ",qop=auth-int"));
  assert_null(strstr(out, "cipher"));
  assert_string_equal(rsp, ir);
}

/* A client and a server layer on the same H(A1). */
static void pair(int qop, hsasl_layer *cl, hsasl_layer *sv) {
  uint8_t ha1[16];
  for (int i = 0; i < 16; i++) ha1[i] = (uint8_t)(i * 37 + 5);
  assert_int_equal(hsasl_layer_init(cl, qop, ha1, 0), 0);
  assert_int_equal(hsasl_layer_init(sv, qop, ha1, 1), 0);
}

static void round_trip(int qop) {
  hsasl_layer cl, sv;
  pair(qop, &cl, &sv);
  size_t sizes[] = {0, 1, 5, 6, 7, 8, 9, 15, 16, 100, 4096, 65000};
  uint8_t *msg = malloc(65000), *w = malloc(65000 + HSASL_WRAP_OVERHEAD), *p = malloc(65100);
  for (size_t i = 0; i < 65000; i++) msg[i] = (uint8_t)(i * 7 + 3);
  char err[256];
  for (int rep = 0; rep < 3; rep++) {
    for (size_t k = 0; k < LOOM__ARRAY_LEN(sizes); k++) {
      size_t n = sizes[k], wl = 0, pl = 0;
      /* client to server */
      assert_int_equal(hsasl_wrap(&cl, msg, n, w, n + HSASL_WRAP_OVERHEAD, &wl), 0);
      assert_true(wl >= n + 16 && wl <= n + HSASL_WRAP_OVERHEAD);
      if (qop == HSASL_QOP_CONF) {
        assert_int_equal((wl - 6) % 8, 0);
        if (n >= 16) assert_memory_not_equal(w, msg, 16); /* sealed */
      } else {
        assert_memory_equal(w, msg, n); /* in the clear, then MAC, type, seq */
        assert_int_equal(wl, n + 16);
      }
      assert_int_equal(w[wl - 6], 0);
      assert_int_equal(w[wl - 5], 1);
      assert_int_equal(w[wl - 1], (uint8_t)(rep * LOOM__ARRAY_LEN(sizes) + k));
      assert_int_equal(hsasl_unwrap(&sv, w, wl, p, 65100, &pl, err, sizeof err), 0);
      assert_int_equal(pl, n);
      if (n) assert_memory_equal(p, msg, n);
      /* and back */
      assert_int_equal(hsasl_wrap(&sv, msg, n, w, n + HSASL_WRAP_OVERHEAD, &wl), 0);
      assert_int_equal(hsasl_unwrap(&cl, w, wl, p, 65100, &pl, err, sizeof err), 0);
      assert_int_equal(pl, n);
      if (n) assert_memory_equal(p, msg, n);
    }
  }
  /* a client's message is not taken by the client itself (the keys differ
   * by direction) */
  size_t wl, pl;
  assert_int_equal(hsasl_wrap(&cl, msg, 10, w, 10 + HSASL_WRAP_OVERHEAD, &wl), 0);
  hsasl_layer cl2, sv2;
  pair(qop, &cl2, &sv2);
  assert_int_equal(hsasl_wrap(&cl2, msg, 10, w, 10 + HSASL_WRAP_OVERHEAD, &wl), 0);
  assert_int_equal(hsasl_unwrap(&cl2, w, wl, p, 65100, &pl, err, sizeof err), -1);
  /* too small an output: refused */
  assert_int_equal(hsasl_wrap(&sv2, msg, 10, w, 10 + HSASL_WRAP_OVERHEAD - 1, &wl), -1);
  hsasl_layer_free(&cl);
  hsasl_layer_free(&sv);
  hsasl_layer_free(&cl2);
  hsasl_layer_free(&sv2);
  free(msg);
  free(w);
  free(p);
}

static void test_round_trip_int(void **state) {
  (void)state;
  round_trip(HSASL_QOP_INT);
}

static void test_round_trip_conf(void **state) {
  (void)state;
  round_trip(HSASL_QOP_CONF);
}

/* Wraps three messages on a fresh pair; the server gets w[i] (lengths
 * wl[i]). */
static void three(int qop, hsasl_layer *cl, hsasl_layer *sv, uint8_t w[3][64], size_t wl[3]) {
  pair(qop, cl, sv);
  const char *m[] = {"first message", "second message!", "third"};
  for (int i = 0; i < 3; i++) assert_int_equal(hsasl_wrap(cl, S(m[i]), w[i], 64, &wl[i]), 0);
}

static void refused(int qop) {
  hsasl_layer cl, sv;
  uint8_t w[3][64], p[64];
  size_t wl[3], pl;
  char err[256];
  /* a flipped bit anywhere: in the message or the MAC (or the
   * ciphertext), in the type, in the sequence number */
  three(qop, &cl, &sv, w, wl);
  size_t len0 = wl[0];
  for (size_t at = 0; at < len0; at++) {
    hsasl_layer c2, s2;
    uint8_t w2[3][64];
    size_t wl2[3];
    three(qop, &c2, &s2, w2, wl2);
    w2[0][at] ^= 0x10;
    err[0] = 0;
    if (hsasl_unwrap(&s2, w2[0], wl2[0], p, sizeof p, &pl, err, sizeof err) != -1)
      fail_msg("qop %d: a flip at byte %zu of %zu was taken", qop, at, wl2[0]);
    assert_non_null(strstr(err, "refused"));
    /* and the layer takes nothing after: not even the good next one */
    assert_int_equal(hsasl_unwrap(&s2, w2[1], wl2[1], p, sizeof p, &pl, err, sizeof err), -1);
    hsasl_layer_free(&c2);
    hsasl_layer_free(&s2);
  }
  /* the MAC changed: said so */
  w[0][wl[0] - 7] ^= 1;
  assert_int_equal(hsasl_unwrap(&sv, w[0], wl[0], p, sizeof p, &pl, err, sizeof err), -1);
  assert_non_null(strstr(err, qop == HSASL_QOP_CONF ? "refused" : "MAC does not match"));
  hsasl_layer_free(&cl);
  hsasl_layer_free(&sv);

  /* replayed */
  three(qop, &cl, &sv, w, wl);
  assert_int_equal(hsasl_unwrap(&sv, w[0], wl[0], p, sizeof p, &pl, err, sizeof err), 0);
  assert_int_equal(pl, 13);
  assert_memory_equal(p, "first message", 13);
  assert_int_equal(hsasl_unwrap(&sv, w[0], wl[0], p, sizeof p, &pl, err, sizeof err), -1);
  assert_non_null(strstr(err, "sequence number"));
  hsasl_layer_free(&cl);
  hsasl_layer_free(&sv);
  /* dropped (out of order: the third before the second) */
  three(qop, &cl, &sv, w, wl);
  assert_int_equal(hsasl_unwrap(&sv, w[0], wl[0], p, sizeof p, &pl, err, sizeof err), 0);
  assert_int_equal(hsasl_unwrap(&sv, w[2], wl[2], p, sizeof p, &pl, err, sizeof err), -1);
  assert_non_null(strstr(err, "sequence number"));
  hsasl_layer_free(&cl);
  hsasl_layer_free(&sv);
  /* a sequence number rewritten to the expected one: the MAC covers it */
  three(qop, &cl, &sv, w, wl);
  w[1][wl[1] - 1] = 0;
  assert_int_equal(hsasl_unwrap(&sv, w[1], wl[1], p, sizeof p, &pl, err, sizeof err), -1);
  hsasl_layer_free(&cl);
  hsasl_layer_free(&sv);
  /* truncated, too short, and output too small */
  three(qop, &cl, &sv, w, wl);
  for (size_t n = 0; n < 16; n++)
    assert_int_equal(hsasl_unwrap(&sv, w[0], n, p, sizeof p, &pl, err, sizeof err), -1);
  hsasl_layer_free(&sv);
  hsasl_layer_free(&cl);
  three(qop, &cl, &sv, w, wl);
  assert_int_equal(hsasl_unwrap(&sv, w[0] + 1, wl[0] - 1, p, sizeof p, &pl, err, sizeof err), -1);
  hsasl_layer_free(&sv);
  hsasl_layer_free(&cl);
  three(qop, &cl, &sv, w, wl);
  assert_int_equal(hsasl_unwrap(&sv, w[0], wl[0], p, wl[0] - 1, &pl, err, sizeof err), -1);
  hsasl_layer_free(&sv);
  hsasl_layer_free(&cl);
}

static void test_refused_int(void **state) {
  (void)state;
  refused(HSASL_QOP_INT);
}

static void test_refused_conf(void **state) {
  (void)state;
  refused(HSASL_QOP_CONF);
}

static void test_layer_init(void **state) {
  (void)state;
  hsasl_layer l;
  uint8_t ha1[16] = {0};
  assert_int_equal(hsasl_layer_init(&l, HSASL_QOP_AUTH, ha1, 0), -1);
  assert_int_equal(hsasl_layer_init(&l, 0, ha1, 0), -1);
  assert_int_equal(hsasl_layer_init(&l, HSASL_QOP_INT, ha1, 0), 0);
  assert_null(l.enc);
  hsasl_layer_free(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_choose),         cmocka_unit_test(test_response_qop),
      cmocka_unit_test(test_round_trip_int), cmocka_unit_test(test_round_trip_conf),
      cmocka_unit_test(test_refused_int),    cmocka_unit_test(test_refused_conf),
      cmocka_unit_test(test_layer_init),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
