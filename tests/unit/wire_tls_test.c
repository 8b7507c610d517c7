/* wire_tls_test.c: TLS 1.3 keyed by the job secret. Over real TCP on
 * loopback (LOOM_TLS=on): the handshake and 8 MiB each way through
 * descriptor sessions; a wrong secret or another service's key refused by
 * both sides; a TLS client against a plain server told apart from a wrong
 * key; a memory session (the libuv side) talking to a descriptor one;
 * bytes left inside a session reported by wire_io_pending; and the auto
 * policy from addresses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/wire_tls.h"

/* A connected pair of TCP sockets on 127.0.0.1. */
static void tcp_pair(int *a, int *b) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(l >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(l, 4), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
  *a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_int_equal(connect(*a, (struct sockaddr *)&sa, sizeof sa), 0);
  *b = accept(l, NULL, NULL);
  assert_true(*b >= 0);
  close(l);
}

typedef struct {
  int fd;
  bool server;
  const char *secret, *label;
  int rc;
  char why[200];
  size_t bytes; /* to send, then to receive back */
  uint32_t sum;
} side;

static void *handshake_thread(void *arg) {
  side *s = arg;
  s->rc = wire_io_attach(s->fd, s->server, s->secret, s->label);
  if (s->rc == 0)
    s->rc = wire_io_handshake_wait(s->fd, loom__now_ms() + 5000, s->why, sizeof s->why);
  return NULL;
}

static int both(side *c, side *s) {
  pthread_t tc, ts;
  pthread_create(&ts, NULL, handshake_thread, s);
  pthread_create(&tc, NULL, handshake_thread, c);
  pthread_join(tc, NULL);
  pthread_join(ts, NULL);
  return 0;
}

static void *sender(void *arg) {
  side *s = arg;
  unsigned char *buf = malloc(s->bytes);
  for (size_t i = 0; i < s->bytes; i++) buf[i] = (unsigned char)(i * 7 + s->server);
  size_t off = 0;
  while (off < s->bytes) {
    ssize_t w = wire_io_send(s->fd, buf + off, s->bytes - off, 0);
    if (w <= 0) break;
    off += (size_t)w;
  }
  s->rc = off == s->bytes ? 0 : -1;
  free(buf);
  return NULL;
}

static size_t recv_all(int fd, unsigned char *buf, size_t n) {
  size_t off = 0;
  while (off < n) {
    ssize_t r = wire_io_recv(fd, buf + off, n - off, 0);
    if (r <= 0) break;
    off += (size_t)r;
  }
  return off;
}

static void test_round_trip(void **state) {
  (void)state;
  setenv("LOOM_TLS", "on", 1);
  int a, b;
  tcp_pair(&a, &b);
  assert_true(wire_tls_wanted(a));
  side c = {.fd = a, .server = false, .secret = "s3cret", .label = "loom-tcp"};
  side s = {.fd = b, .server = true, .secret = "s3cret", .label = "loom-tcp"};
  both(&c, &s);
  assert_int_equal(c.rc, 0);
  assert_int_equal(s.rc, 0);
  assert_true(wire_io_secure(a) && wire_io_secure(b));
  /* 8 MiB each way at once: neither side may block the other */
  const size_t N = 8u << 20;
  c.bytes = s.bytes = N;
  pthread_t tc, ts;
  pthread_create(&tc, NULL, sender, &c);
  pthread_create(&ts, NULL, sender, &s);
  unsigned char *ra = malloc(N), *rb = malloc(N);
  assert_int_equal(recv_all(b, rb, N), N);
  assert_int_equal(recv_all(a, ra, N), N);
  pthread_join(tc, NULL);
  pthread_join(ts, NULL);
  assert_int_equal(c.rc, 0);
  assert_int_equal(s.rc, 0);
  for (size_t i = 0; i < N; i++) {
    if (rb[i] != (unsigned char)(i * 7) || ra[i] != (unsigned char)(i * 7 + 1)) fail();
  }
  /* a short read leaves the rest of the record inside the session: the
   * socket is not readable, wire_io_pending says so */
  assert_int_equal(wire_io_send(a, "hello world", 11, 0), 11);
  unsigned char five[5];
  struct pollfd p = {.fd = b, .events = POLLIN};
  assert_int_equal(poll(&p, 1, 2000), 1);
  assert_int_equal(wire_io_recv(b, five, 5, 0), 5);
  assert_memory_equal(five, "hello", 5);
  assert_true(wire_io_pending(b));
  unsigned char rest[6];
  assert_int_equal(wire_io_recv(b, rest, 6, MSG_DONTWAIT), 6);
  assert_memory_equal(rest, " world", 6);
  assert_false(wire_io_pending(b));
  assert_int_equal(wire_io_recv(b, rest, 6, MSG_DONTWAIT), -1);
  assert_int_equal(errno, EAGAIN);
  /* the peer's close reads as the end of the stream */
  wire_io_close(a);
  assert_int_equal(wire_io_recv(b, rest, 6, 0), 0);
  wire_io_close(b);
  free(ra);
  free(rb);
}

static void refused(const char *csecret, const char *clabel, const char *ssecret,
                    const char *slabel) {
  int a, b;
  tcp_pair(&a, &b);
  side c = {.fd = a, .server = false, .secret = csecret, .label = clabel};
  side s = {.fd = b, .server = true, .secret = ssecret, .label = slabel};
  both(&c, &s);
  /* the server finds the binder wrong (or no key for the identity) */
  assert_int_equal(s.rc, LOOM_EAUTH);
  assert_non_null(strstr(s.why, "do not hold the same job secret"));
  assert_true(c.rc == LOOM_EAUTH || c.rc == LOOM_ECONN);
  wire_io_close(a);
  wire_io_close(b);
}

static void test_wrong_key(void **state) {
  (void)state;
  setenv("LOOM_TLS", "on", 1);
  refused("other", "loom-tcp", "s3cret", "loom-tcp");
  refused("s3cret", "loom-ps", "s3cret", "loom-tcp"); /* another service's key */
}

static void test_plain_server(void **state) {
  (void)state;
  setenv("LOOM_TLS", "on", 1);
  int a, b;
  tcp_pair(&a, &b);
  /* a plain server speaks first, as loom's do: its challenge is no TLS */
  static const char challenge[] = "\0\0\0\x2c\0\x01\0\0 some challenge bytes, not TLS at all";
  assert_int_equal(send(b, challenge, sizeof challenge, 0), (ssize_t)sizeof challenge);
  char why[200] = "";
  int rc = wire_io_client(a, "s3cret", "loom", loom__now_ms() + 3000, why, sizeof why);
  assert_int_equal(rc, LOOM_EPROTO);
  assert_non_null(strstr(why, "does not speak TLS"));
  wire_io_close(a);
  close(b);
}

/* A memory session on one end (as the coordinator), a descriptor one on
 * the other (as libloom): the memory side moves the bytes itself. */
typedef struct {
  int fd;
  int rc;
  unsigned char got[64];
  size_t n;
} mem_peer;

static void *fd_client(void *arg) {
  mem_peer *m = arg;
  char why[200];
  m->rc = wire_io_client(m->fd, "s3cret", "loom", loom__now_ms() + 5000, why, sizeof why);
  if (m->rc == 0 && wire_io_send(m->fd, "ping", 4, 0) != 4) m->rc = -1;
  if (m->rc == 0) m->n = recv_all(m->fd, m->got, 4);
  return NULL;
}

static void test_memory_session(void **state) {
  (void)state;
  setenv("LOOM_TLS", "on", 1);
  int a, b;
  tcp_pair(&a, &b);
  mem_peer m = {.fd = a};
  pthread_t t;
  pthread_create(&t, NULL, fd_client, &m);
  wire_tls *s = wire_tls_mem_new(true, "s3cret", "loom");
  assert_non_null(s);
  /* queued before the handshake, sent after it */
  assert_int_equal(wire_tls_mem_write(s, "po", 2), 0);
  unsigned char in[4096], plain[64];
  size_t have = 0;
  uint64_t deadline = loom__now_ms() + 5000;
  while (have < 4 && loom__now_ms() < deadline) {
    struct pollfd p = {.fd = b, .events = POLLIN};
    if (poll(&p, 1, 100) == 1) {
      ssize_t r = recv(b, in, sizeof in, 0);
      assert_true(r > 0);
      assert_int_equal(wire_tls_mem_feed(s, in, (size_t)r), 0);
    }
    size_t got;
    assert_int_equal(wire_tls_mem_read(s, plain + have, sizeof plain - have, &got), 0);
    have += got;
    if (wire_tls_mem_done(s) && have == 4) assert_int_equal(wire_tls_mem_write(s, "ng", 2), 0);
    unsigned char *out;
    size_t olen;
    assert_int_equal(wire_tls_mem_take(s, &out, &olen), 0);
    if (olen) assert_int_equal(send(b, out, olen, 0), (ssize_t)olen);
    free(out);
  }
  pthread_join(t, NULL);
  assert_int_equal(m.rc, 0);
  assert_int_equal(have, 4);
  assert_memory_equal(plain, "ping", 4);
  assert_int_equal(m.n, 4);
  assert_memory_equal(m.got, "pong", 4);
  wire_tls_mem_free(s);
  wire_io_close(a);
  close(b);
}

static void test_policy(void **state) {
  (void)state;
  struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
  struct sockaddr_in lo2 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000005)};
  struct sockaddr_in far = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x0a4d0102)};
  struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  setenv("LOOM_TLS", "auto", 1);
  assert_false(wire_tls_wanted_addrs(&lo, &lo2));
  assert_false(wire_tls_wanted_addrs(&lo6, &lo));
  assert_true(wire_tls_wanted_addrs(&lo, &far));
  assert_true(wire_tls_wanted_addrs(&far, &far));
  assert_true(wire_tls_wanted_addrs(NULL, &lo)); /* unknown: encrypt */
  setenv("LOOM_TLS", "on", 1);
  assert_true(wire_tls_wanted_addrs(&lo, &lo2));
  setenv("LOOM_TLS", "off", 1);
  assert_false(wire_tls_wanted_addrs(&far, &far));
  /* a plain descriptor passes straight through */
  int a, b;
  tcp_pair(&a, &b);
  assert_false(wire_io_secure(a));
  assert_int_equal(wire_io_client(a, "s", "loom", loom__now_ms() + 1000, NULL, 0), 0);
  assert_false(wire_io_secure(a));
  assert_int_equal(wire_io_send(a, "x", 1, 0), 1);
  char x;
  assert_int_equal(wire_io_recv(b, &x, 1, 0), 1);
  assert_false(wire_io_pending(b));
  wire_io_close(a);
  wire_io_close(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_wrong_key),
      cmocka_unit_test(test_plain_server), cmocka_unit_test(test_memory_session),
      cmocka_unit_test(test_policy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
