/* errmsg_test.c: loom_errmsg is the calling thread's (include/loom.h):
 * threads that get different errors on one handle at the same time each
 * read their own text, and a thread that got none reads "". The handle
 * joins a stand-in coordinator on loopback that only authenticates it;
 * the errors are the ones libloom finds before asking the coordinator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/core.h"
#include "wire/wire_auth.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SECRET "errmsg-test-secret"

/* The stand-in coordinator: listens on lfd, authenticates one connection
 * (fd, left open until the test ends) and says nothing more. */
typedef struct {
  int lfd, fd;
} fake_coord;

static void *coord_main(void *arg) {
  fake_coord *c = arg;
  c->fd = accept(c->lfd, NULL, NULL);
  if (c->fd < 0) return NULL;
  wire_auth_server s;
  unsigned char out[WIRE_AUTH_MSG_MAX], in[256];
  size_t n = 0;
  if (wire_auth_server_start(&s, &wire_auth_coord, SECRET, NULL, 0, out, &n) < 0 ||
      write(c->fd, out, n) != (ssize_t)n)
    return NULL;
  for (;;) {
    ssize_t r = read(c->fd, in, sizeof in);
    size_t used = 0;
    if (r <= 0) return NULL;
    int rc = wire_auth_server_feed(&s, in, (size_t)r, &used, out, &n);
    if (rc < 0) return NULL;
    if (rc == 1) {
      if (write(c->fd, out, n) != (ssize_t)n) return NULL;
      return NULL;
    }
  }
}

/* One thread's loom_kv_set: a key and value of these lengths, each case
 * refused with its own text (want). */
typedef struct {
  size_t keylen, vallen;
} errcase;

static const errcase CASES[] = {
    {.keylen = 0, .vallen = 1},
    {.keylen = LOOM_KV_MAX_KEY + 1, .vallen = 1},
    {.keylen = 1, .vallen = (size_t)LOOM_KV_MAX_VALUE + 1},
};

static void want(const errcase *c, char *buf, size_t len) {
  if (c->keylen == 0 || c->keylen > LOOM_KV_MAX_KEY)
    snprintf(buf, len, "KV key must be 1..%d bytes, got %zu", LOOM_KV_MAX_KEY, c->keylen);
  else
    snprintf(buf, len, "KV value for 'k' is %zu bytes", c->vallen);
}
#define NCASES (sizeof CASES / sizeof CASES[0])

typedef struct {
  loom_t *l;
  const errcase *c;
  pthread_barrier_t *all;
  int rc;
  char got[512];
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  char key[LOOM_KV_MAX_KEY + 2];
  memset(key, 'k', w->c->keylen);
  key[w->c->keylen] = 0;
  char *val = calloc(1, w->c->vallen);
  w->rc = val ? loom_kv_set(w->l, key, val, w->c->vallen) : LOOM_ENOMEM;
  free(val);
  pthread_barrier_wait(w->all); /* every thread's error is set before any reads */
  snprintf(w->got, sizeof w->got, "%s", loom_errmsg(w->l));
  return NULL;
}

static void test_errmsg_per_thread(void **state) {
  (void)state;
  fake_coord c = {.lfd = socket(AF_INET, SOCK_STREAM, 0), .fd = -1};
  assert_true(c.lfd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t salen = sizeof sa;
  assert_int_equal(bind(c.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(c.lfd, 1), 0);
  assert_int_equal(getsockname(c.lfd, (struct sockaddr *)&sa, &salen), 0);
  char coord[64];
  snprintf(coord, sizeof coord, "127.0.0.1:%d", ntohs(sa.sin_port));
  setenv("LOOM_COORD", coord, 1);
  setenv("LOOM_SECRET", SECRET, 1);
  setenv("LOOM_TLS", "off", 1);
  pthread_t ct;
  assert_int_equal(pthread_create(&ct, NULL, coord_main, &c), 0);
  loom_t *l = NULL;
  assert_int_equal(loom_init(&l), 0);
  pthread_join(ct, NULL);

  pthread_barrier_t all;
  pthread_barrier_init(&all, NULL, NCASES);
  worker w[NCASES];
  pthread_t t[NCASES];
  for (size_t i = 0; i < NCASES; i++) {
    w[i] = (worker){.l = l, .c = &CASES[i], .all = &all};
    assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  }
  for (size_t i = 0; i < NCASES; i++) pthread_join(t[i], NULL);
  for (size_t i = 0; i < NCASES; i++) {
    char text[128];
    want(&CASES[i], text, sizeof text);
    assert_true(w[i].rc < 0);
    print_message("thread %zu read: %s\n", i, w[i].got);
    assert_non_null(strstr(w[i].got, text));
  }
  /* this thread got no error on the handle */
  assert_string_equal(loom_errmsg(l), "");
  pthread_barrier_destroy(&all);
  loom_finish(l);
  close(c.fd);
  close(c.lfd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errmsg_per_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
