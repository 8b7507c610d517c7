/* wire_auth_test.c: the shared handshake: a good secret authenticates both
 * ways, a bad one is refused by each side, a MAC made for one service (or
 * one context) is refused by another, the server buffers no more than the
 * answer and rejects a byte that cannot begin it at once, and the blocking
 * client over a socket. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/wire_auth.h"

static const wire_auth_proto *const PROTOS[] = {&wire_auth_coord, &wire_auth_ps, &wire_auth_comm};
#define NPROTOS (sizeof PROTOS / sizeof PROTOS[0])

/* One whole exchange in memory; returns the server's feed result and the
 * client's check result through *client_rc. */
static int exchange(const wire_auth_proto *sp, const char *ssecret, const char *sctx,
                    const wire_auth_proto *cp, const char *csecret, const char *cctx,
                    int *client_rc) {
  wire_auth_server s;
  unsigned char ch[WIRE_AUTH_MSG_MAX], ans[WIRE_AUTH_MSG_MAX], proof[WIRE_AUTH_MSG_MAX];
  unsigned char cn[WIRE_NONCE];
  size_t chlen, alen, plen = 0, used;
  assert_int_equal(
      wire_auth_server_start(&s, sp, ssecret, sctx, sctx ? strlen(sctx) : 0, ch, &chlen), 0);
  assert_int_equal(chlen, wire_auth_challenge_len(sp));
  int rc = wire_auth_client_answer(cp, csecret, cctx, cctx ? strlen(cctx) : 0, ch, chlen, cn, ans,
                                   &alen);
  if (rc < 0) {
    *client_rc = rc;
    return rc;
  }
  rc = wire_auth_server_feed(&s, ans, alen, &used, proof, &plen);
  *client_rc =
      rc == 1 ? wire_auth_client_check(cp, csecret, cctx, cctx ? strlen(cctx) : 0, cn, proof, plen)
              : LOOM_EAUTH;
  return rc;
}

static void test_good_secret(void **state) {
  for (size_t i = 0; i < NPROTOS; i++) {
    int crc;
    assert_int_equal(exchange(PROTOS[i], "s3cret", NULL, PROTOS[i], "s3cret", NULL, &crc), 1);
    assert_int_equal(crc, 0);
    assert_int_equal(exchange(PROTOS[i], "s3cret", "ctx", PROTOS[i], "s3cret", "ctx", &crc), 1);
    assert_int_equal(crc, 0);
  }
}

static void test_bad_secret(void **state) {
  for (size_t i = 0; i < NPROTOS; i++) {
    int crc;
    assert_int_equal(exchange(PROTOS[i], "s3cret", NULL, PROTOS[i], "other", NULL, &crc),
                     LOOM_EAUTH);
    assert_int_equal(crc, LOOM_EAUTH);
    /* an empty secret is a secret too: it does not match a set one */
    assert_int_equal(exchange(PROTOS[i], "", NULL, PROTOS[i], "s3cret", NULL, &crc), LOOM_EAUTH);
  }
}

/* The client's proof check refuses a server that does not hold the secret. */
static void test_client_refuses_a_wrong_proof(void **state) {
  wire_auth_server s;
  unsigned char ch[WIRE_AUTH_MSG_MAX], ans[WIRE_AUTH_MSG_MAX], proof[WIRE_AUTH_MSG_MAX];
  unsigned char cn[WIRE_NONCE];
  size_t chlen, alen, plen, used;
  assert_int_equal(wire_auth_server_start(&s, &wire_auth_ps, "a", NULL, 0, ch, &chlen), 0);
  assert_int_equal(wire_auth_client_answer(&wire_auth_ps, "a", NULL, 0, ch, chlen, cn, ans, &alen),
                   0);
  assert_int_equal(wire_auth_server_feed(&s, ans, alen, &used, proof, &plen), 1);
  assert_int_equal(wire_auth_client_check(&wire_auth_ps, "b", NULL, 0, cn, proof, plen),
                   LOOM_EAUTH);
  assert_int_equal(wire_auth_client_check(&wire_auth_ps, "a", NULL, 0, cn, proof, plen - 1),
                   LOOM_EAUTH);
  proof[plen - 1] ^= 1;
  assert_int_equal(wire_auth_client_check(&wire_auth_ps, "a", NULL, 0, cn, proof, plen),
                   LOOM_EAUTH);
}

/* A MAC made for one service, or over another context, is refused. */
static void test_replay_across_services(void **state) {
  for (size_t i = 0; i < NPROTOS; i++)
    for (size_t j = 0; j < NPROTOS; j++) {
      if (i == j) continue;
      /* the other service's MAC over this server's nonce, in this one's framing */
      wire_auth_server s;
      unsigned char ch[WIRE_AUTH_MSG_MAX], ans[WIRE_AUTH_MSG_MAX], proof[WIRE_AUTH_MSG_MAX];
      size_t chlen, plen, used;
      const wire_auth_proto *p = PROTOS[i];
      assert_int_equal(wire_auth_server_start(&s, p, "k", NULL, 0, ch, &chlen), 0);
      memcpy(ans, p->answer_pre, p->answer_pre_len);
      wire_auth_mac("k", PROTOS[j]->label, "-c", ch + p->challenge_pre_len, NULL, 0,
                    ans + p->answer_pre_len);
      memset(ans + p->answer_pre_len + WIRE_MAC, 7, WIRE_NONCE);
      assert_int_equal(wire_auth_server_feed(&s, ans, wire_auth_answer_len(p), &used, proof, &plen),
                       LOOM_EAUTH);
      assert_string_equal(s.why, "its MAC is wrong (not this job's secret?)");
    }
  int crc;
  assert_int_equal(
      exchange(&wire_auth_comm, "k", "rank 1 to 0", &wire_auth_comm, "k", "rank 2 to 0", &crc),
      LOOM_EAUTH);
  /* a challenge in another service's framing is not one */
  assert_int_equal(exchange(&wire_auth_coord, "k", NULL, &wire_auth_ps, "k", NULL, &crc),
                   LOOM_EPROTO);
  /* the full labels are prefix-free, so label || nonce || ctx is unambiguous */
  char full[NPROTOS * 2][16];
  for (size_t i = 0; i < NPROTOS; i++) {
    snprintf(full[2 * i], 16, "%s-c", PROTOS[i]->label);
    snprintf(full[2 * i + 1], 16, "%s-s", PROTOS[i]->label);
  }
  for (size_t a = 0; a < NPROTOS * 2; a++)
    for (size_t b = 0; b < NPROTOS * 2; b++)
      if (a != b) assert_true(strncmp(full[a], full[b], strlen(full[a])) != 0);
}

/* The coordinator's MACs are the ones wire.h documents (and the system
 * tests compute by hand): HMAC(secret, "loom-c" nonce). */
static void test_coord_labels_are_compatible(void **state) {
  unsigned char nonce[WIRE_NONCE], a[WIRE_MAC], b[WIRE_MAC];
  memset(nonce, 0x5a, sizeof nonce);
  wire_mac("s", "loom-c", nonce, a);
  wire_auth_mac("s", wire_auth_coord.label, "-c", nonce, NULL, 0, b);
  assert_memory_equal(a, b, WIRE_MAC);
  wire_mac("s", "loom-ps-s", nonce, a);
  wire_auth_mac("s", wire_auth_ps.label, "-s", nonce, NULL, 0, b);
  assert_memory_equal(a, b, WIRE_MAC);
}

/* Split deliveries: one byte at a time, then the answer followed by the
 * service's next bytes, of which the handshake takes none. */
static void test_truncated_and_trailing(void **state) {
  for (size_t i = 0; i < NPROTOS; i++) {
    const wire_auth_proto *p = PROTOS[i];
    wire_auth_server s;
    unsigned char ch[WIRE_AUTH_MSG_MAX], ans[WIRE_AUTH_MSG_MAX + 8], proof[WIRE_AUTH_MSG_MAX];
    unsigned char cn[WIRE_NONCE];
    size_t chlen, alen, plen, used;
    assert_int_equal(wire_auth_server_start(&s, p, "k", NULL, 0, ch, &chlen), 0);
    assert_int_equal(wire_auth_client_answer(p, "k", NULL, 0, ch, chlen, cn, ans, &alen), 0);
    for (size_t k = 0; k + 1 < alen; k++) {
      assert_int_equal(wire_auth_server_feed(&s, ans + k, 1, &used, proof, &plen), 0);
      assert_int_equal(used, 1);
    }
    memcpy(ans + alen, "NEXTBYTE", 8);
    assert_int_equal(wire_auth_server_feed(&s, ans + alen - 1, 9, &used, proof, &plen), 1);
    assert_int_equal(used, 1);
    assert_int_equal(plen, wire_auth_proof_len(p));
    assert_int_equal(wire_auth_client_check(p, "k", NULL, 0, cn, proof, plen), 0);
    /* a truncated challenge is not one */
    assert_int_equal(wire_auth_client_answer(p, "k", NULL, 0, ch, chlen - 1, cn, ans, &alen),
                     LOOM_EPROTO);
  }
}

/* What is not an answer ends the handshake at its first wrong byte, and
 * the handshake stays failed. */
static void test_oversized_and_garbage(void **state) {
  static const struct {
    const char *name;
    const wire_auth_proto *p;
    unsigned char bytes[12];
    size_t len, used;
  } CASES[] = {
      {"coord: length 0x7fffffff", &wire_auth_coord, {0x7f, 0xff, 0xff, 0xff}, 4, 4},
      {"coord: a bigger frame (REGISTER)", &wire_auth_coord, {0, 0, 0, 0x48, 0, 10}, 6, 6},
      {"coord: AUTH with JSON", &wire_auth_coord, {0, 0, 0, 0x48, 0, 2, 0, 0, 0, 0, 0, 2}, 12, 12},
      {"ps: wrong magic", &wire_auth_ps, {'L', 'O', 'O', 'M', 'P', 'S', '0', '2'}, 8, 8},
      {"comm: the ps's magic", &wire_auth_comm, {'L', 'O', 'O', 'M', 'P', 'S'}, 6, 6},
  };
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    wire_auth_server s;
    unsigned char ch[WIRE_AUTH_MSG_MAX], proof[WIRE_AUTH_MSG_MAX];
    size_t chlen, plen, used;
    assert_int_equal(wire_auth_server_start(&s, CASES[i].p, "k", NULL, 0, ch, &chlen), 0);
    int rc = wire_auth_server_feed(&s, CASES[i].bytes, CASES[i].len, &used, proof, &plen);
    if (rc != LOOM_EPROTO) fail_msg("%s: rc %d", CASES[i].name, rc);
    assert_int_equal(used, CASES[i].used);
    assert_int_equal(plen, 0);
    assert_non_null(s.why);
    assert_int_equal(wire_auth_server_feed(&s, "x", 1, &used, proof, &plen), LOOM_EPROTO);
  }
  /* a long flood: only the answer's length is ever taken */
  wire_auth_server s;
  unsigned char ch[WIRE_AUTH_MSG_MAX], proof[WIRE_AUTH_MSG_MAX], junk[4096];
  size_t chlen, plen, used;
  memset(junk, 0, sizeof junk);
  memcpy(junk, "LOOMPS01", 8);
  assert_int_equal(wire_auth_server_start(&s, &wire_auth_ps, "k", NULL, 0, ch, &chlen), 0);
  assert_int_equal(wire_auth_server_feed(&s, junk, sizeof junk, &used, proof, &plen), LOOM_EAUTH);
  assert_int_equal(used, wire_auth_answer_len(&wire_auth_ps));
  /* a context over the cap is refused */
  static char big[WIRE_AUTH_CTX_MAX + 1];
  assert_int_equal(wire_auth_server_start(&s, &wire_auth_ps, "k", big, sizeof big, ch, &chlen),
                   LOOM_EINVAL);
}

/* ---- the blocking client against a server thread over a socketpair ---- */
typedef struct {
  int fd;
  const char *secret;
  bool silent; /* sends no challenge */
} srv_args;

static void *server_thread(void *arg) {
  srv_args *a = arg;
  wire_auth_server s;
  unsigned char buf[WIRE_AUTH_MSG_MAX];
  size_t len, used;
  if (!a->silent &&
      wire_auth_server_start(&s, &wire_auth_coord, a->secret, NULL, 0, buf, &len) == 0 &&
      write(a->fd, buf, len) == (ssize_t)len) {
    for (;;) {
      unsigned char in[7];
      ssize_t n = read(a->fd, in, sizeof in);
      if (n <= 0) break;
      int rc = wire_auth_server_feed(&s, in, (size_t)n, &used, buf, &len);
      if (rc < 0) break;
      if (rc == 1) {
        if (write(a->fd, buf, len) != (ssize_t)len) break;
        break;
      }
    }
  }
  if (a->silent) usleep(300 * 1000);
  shutdown(a->fd, SHUT_RDWR);
  return NULL;
}

static int client_over_socket(const char *ssecret, const char *csecret, bool silent) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  srv_args a = {.fd = sv[1], .secret = ssecret, .silent = silent};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, server_thread, &a), 0);
  int rc = wire_auth_client_fd(sv[0], &wire_auth_coord, csecret, NULL, 0, loom__now_ms() + 100);
  pthread_join(th, NULL);
  close(sv[0]);
  close(sv[1]);
  return rc;
}

static void test_blocking_client(void **state) {
  assert_int_equal(client_over_socket("k", "k", false), 0);
  assert_int_equal(client_over_socket("k", "not k", false), LOOM_EAUTH);
  assert_int_equal(client_over_socket("k", "k", true), LOOM_ETIMEDOUT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good_secret),
      cmocka_unit_test(test_bad_secret),
      cmocka_unit_test(test_client_refuses_a_wrong_proof),
      cmocka_unit_test(test_replay_across_services),
      cmocka_unit_test(test_coord_labels_are_compatible),
      cmocka_unit_test(test_truncated_and_trailing),
      cmocka_unit_test(test_oversized_and_garbage),
      cmocka_unit_test(test_blocking_client),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
