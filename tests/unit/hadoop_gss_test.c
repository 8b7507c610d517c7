/* hadoop_gss_test.c: what src/hadoop/gss.c decides without a KDC: the
 * security-layer offer of RFC 4752 (a mask and a 3-byte buffer size,
 * exactly 4 bytes), the strongest layer both sides allow, the service
 * principal from the server's protocol and server id checked against a
 * configured one (_HOST replaced by the URL's host, lowercased), and,
 * through MIT's real libgssapi_krb5, that a client without a ticket gets
 * "no valid ticket ... run kinit" at once. The exchange with a real KDC
 * and NameNode is tests/system/test_kerberos.py's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/core.h"
#include "hadoop/gss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_offer(void **state) {
  (void)state;
  int mask = 0;
  uint32_t maxbuf = 0;
  const uint8_t java[4] = {0x07, 0x01, 0x00, 0x00}; /* all three, 65536 */
  assert_int_equal(hgss_parse_offer(java, 4, &mask, &maxbuf), 0);
  assert_int_equal(mask, 7);
  assert_int_equal(maxbuf, 65536);
  const uint8_t priv[4] = {0x04, 0xff, 0xff, 0xff};
  assert_int_equal(hgss_parse_offer(priv, 4, &mask, &maxbuf), 0);
  assert_int_equal(mask, HGSS_LAYER_PRIVACY);
  assert_int_equal(maxbuf, 0xFFFFFF);
  const uint8_t none[4] = {0x00, 0x01, 0x00, 0x00}, odd[4] = {0x09, 0, 0, 0};
  assert_int_equal(hgss_parse_offer(none, 4, &mask, &maxbuf), -1); /* no layer */
  assert_int_equal(hgss_parse_offer(odd, 4, &mask, &maxbuf), -1);  /* an undefined bit */
  assert_int_equal(hgss_parse_offer(java, 3, &mask, &maxbuf), -1);
  const uint8_t five[5] = {0x07, 0, 0, 0, 0};
  assert_int_equal(hgss_parse_offer(five, 5, &mask, &maxbuf), -1);
  assert_int_equal(hgss_parse_offer(NULL, 0, &mask, &maxbuf), -1);
}

static void test_choose(void **state) {
  (void)state;
  assert_int_equal(hgss_choose_layer(7, 7), HGSS_LAYER_PRIVACY);
  assert_int_equal(hgss_choose_layer(7, 3), HGSS_LAYER_INTEGRITY);
  assert_int_equal(hgss_choose_layer(3, 7), HGSS_LAYER_INTEGRITY);
  assert_int_equal(hgss_choose_layer(1, 7), HGSS_LAYER_NONE);
  assert_int_equal(hgss_choose_layer(4, 3), 0); /* privacy only, privacy not allowed */
  assert_int_equal(hgss_choose_layer(6, 1), 0);
}

static void test_target(void **state) {
  (void)state;
  char out[600], err[512];
  /* no configured principal: the server's word */
  assert_int_equal(
      hgss_target("nn", "localhost", NULL, "localhost", out, sizeof out, err, sizeof err), 0);
  assert_string_equal(out, "nn/localhost"); /* the library adds the default realm */
  assert_int_equal(
      hgss_target("nn", "localhost", "", "localhost", out, sizeof out, err, sizeof err), 0);
  assert_string_equal(out, "nn/localhost");
  /* configured, exact */
  assert_int_equal(hgss_target("nn", "localhost", "nn/localhost@LOOM.TEST", "127.0.0.1", out,
                               sizeof out, err, sizeof err),
                   0);
  assert_string_equal(out, "nn/localhost@LOOM.TEST");
  /* _HOST: the URL's host, lowercased */
  assert_int_equal(hgss_target("nn", "nn1.example.com", "nn/_HOST@EXAMPLE.COM", "NN1.Example.com",
                               out, sizeof out, err, sizeof err),
                   0);
  assert_string_equal(out, "nn/nn1.example.com@EXAMPLE.COM");
  /* a server that is not the configured one */
  assert_int_equal(
      hgss_target("nn", "evil", "nn/_HOST@EXAMPLE.COM", "nn1", out, sizeof out, err, sizeof err),
      -1);
  assert_non_null(strstr(err, "nn/evil"));
  assert_non_null(strstr(err, "nn/nn1@EXAMPLE.COM"));
  assert_int_equal(hgss_target("hdfs", "nn1", "nn/nn1@R", "nn1", out, sizeof out, err, sizeof err),
                   -1);
  /* a prefix is not a match */
  assert_int_equal(hgss_target("nn", "nn1", "nn/nn1x@R", "nn1", out, sizeof out, err, sizeof err),
                   -1);
  /* what the server says must be a clean name part */
  assert_int_equal(hgss_target("nn", "a/b", NULL, "h", out, sizeof out, err, sizeof err), -1);
  assert_int_equal(hgss_target("nn", "a@b", NULL, "h", out, sizeof out, err, sizeof err), -1);
  assert_int_equal(hgss_target("n n", "h", NULL, "h", out, sizeof out, err, sizeof err), -1);
  assert_int_equal(hgss_target("", "h", NULL, "h", out, sizeof out, err, sizeof err), -1);
  assert_int_equal(hgss_target("nn", "h\x01", NULL, "h", out, sizeof out, err, sizeof err), -1);
  /* no instance in the configured principal */
  assert_int_equal(hgss_target("nn", "h", "nn@R", "h", out, sizeof out, err, sizeof err), -1);
}

/* With MIT's library present: no credentials cache is "no valid ticket",
 * "kinit", at once (no KDC is asked: krb5.conf names none). */
static void test_no_ticket(void **state) {
  (void)state;
  char dir[] = "/tmp/loom-gss-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char conf[128], cc[128];
  snprintf(conf, sizeof conf, "%s/krb5.conf", dir);
  snprintf(cc, sizeof cc, "FILE:%s/none", dir);
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fputs("[libdefaults]\n default_realm = LOOM.TEST\n dns_lookup_kdc = false\n"
        " dns_canonicalize_hostname = false\n rdns = false\n",
        f);
  fclose(f);
  setenv("KRB5_CONFIG", conf, 1);
  setenv("KRB5CCNAME", cc, 1);
  hgss *g = (hgss *)1;
  uint8_t *tok = NULL;
  size_t n = 0;
  char err[1024] = "";
  uint64_t t0 = loom__now_ms();
  int rc = hgss_start("nn/localhost", false, &g, &tok, &n, err, sizeof err);
  uint64_t took = loom__now_ms() - t0;
  unlink(conf);
  rmdir(dir);
  if (rc == LOOM_ENOTSUP) {
    printf("libgssapi_krb5 is not installed: %s\n", err);
    skip();
  }
  assert_int_equal(rc, LOOM_EAUTH);
  assert_null(g);
  assert_null(tok);
  assert_non_null(strstr(err, "no valid ticket"));
  assert_non_null(strstr(err, "kinit"));
  assert_non_null(strstr(err, cc));
  assert_true(took < 5000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_offer),
      cmocka_unit_test(test_choose),
      cmocka_unit_test(test_target),
      cmocka_unit_test(test_no_ticket),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
