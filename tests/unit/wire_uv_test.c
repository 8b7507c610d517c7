/* wire_uv_test.c: frames queued on a libuv stream arrive whole and in
 * order, and every write lets go of its bytes exactly once: after libuv is
 * done with them, or at once when the write cannot be queued. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wireuv/wire_uv.h"

/* An owner that counts its releases. */
typedef struct {
  int released;
} counter;

static void count_release(void *owner) { ((counter *)owner)->released++; }

/* A loop with a pipe handle on one end of a socketpair; the test reads
 * the other end with pump(). */
typedef struct {
  uv_loop_t loop;
  uv_pipe_t pipe;
  int peer;
} rig;

static void rig_open(rig *r) {
  int fds[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  assert_int_equal(uv_loop_init(&r->loop), 0);
  assert_int_equal(uv_pipe_init(&r->loop, &r->pipe, 0), 0);
  assert_int_equal(uv_pipe_open(&r->pipe, fds[0]), 0);
  r->peer = fds[1];
}

static void rig_close(rig *r) {
  uv_close((uv_handle_t *)&r->pipe, NULL);
  uv_run(&r->loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&r->loop), 0);
  close(r->peer);
}

/* Reads up to len bytes from the peer end while running the loop (a
 * large write only completes as the peer reads), waiting 10 s at most. */
static size_t pump(rig *r, void *buf, size_t len) {
  for (int waited_ms = 0; waited_ms < 10000;) {
    uv_run(&r->loop, UV_RUN_NOWAIT);
    ssize_t n = recv(r->peer, buf, len, MSG_DONTWAIT);
    if (n > 0) return (size_t)n;
    assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    struct pollfd p = {.fd = r->peer, .events = POLLIN};
    poll(&p, 1, 10);
    waited_ms += 10;
  }
  fail_msg("nothing arrived in 10 s");
  return 0;
}

/* Reads frames from the peer end until want have arrived. */
static void read_frames(rig *r, wire_frame *out, int want) {
  wire_reader rd;
  wire_reader_init(&rd, 1 << 20);
  int got = 0;
  while (got < want) {
    int rc = wire_reader_pop(&rd, &out[got]);
    assert_true(rc >= 0);
    if (rc == 1) {
      got++;
      continue;
    }
    char buf[4096];
    size_t n = pump(r, buf, sizeof buf);
    assert_int_equal(wire_reader_push(&rd, buf, n), 0);
  }
  wire_reader_free(&rd);
}

static void test_frames_arrive_in_order(void **state) {
  rig r;
  rig_open(&r);
  /* sizes 0, 1, a prime and large, each its own frame */
  static const size_t sizes[] = {0, 1, 4099, 300000};
  enum { N = sizeof sizes / sizeof sizes[0] };
  unsigned char *blob = malloc(300000);
  assert_non_null(blob);
  for (size_t i = 0; i < 300000; i++) blob[i] = (unsigned char)(i * 31 + 7);
  for (int i = 0; i < N; i++)
    assert_int_equal(
        wire_uv_send((uv_stream_t *)&r.pipe, WIRE_LOG, json_pack("{s:i}", "i", i), blob, sizes[i]),
        0);
  /* nothing is lost when json is NULL */
  assert_int_equal(wire_uv_send((uv_stream_t *)&r.pipe, WIRE_HEARTBEAT, NULL, NULL, 0), 0);
  wire_frame f[N + 1];
  read_frames(&r, f, N + 1);
  for (int i = 0; i < N; i++) {
    assert_int_equal(f[i].type, WIRE_LOG);
    assert_int_equal(json_integer_value(json_object_get(f[i].json, "i")), i);
    assert_int_equal(f[i].blob_len, sizes[i]);
    if (sizes[i]) assert_memory_equal(f[i].blob, blob, sizes[i]);
    wire_frame_free(&f[i]);
  }
  assert_int_equal(f[N].type, WIRE_HEARTBEAT);
  assert_int_equal(f[N].blob_len, 0);
  wire_frame_free(&f[N]);
  free(blob);
  rig_close(&r);
}

static void test_release_once_after_the_write(void **state) {
  rig r;
  rig_open(&r);
  counter c = {0};
  static const char msg[] = "shared bytes";
  /* one owner, three writes of the same bytes: three releases, all from
   * the loop, none before */
  for (int i = 0; i < 3; i++)
    assert_int_equal(wire_uv_write((uv_stream_t *)&r.pipe, msg, sizeof msg, count_release, &c), 0);
  assert_int_equal(c.released, 0);
  uv_run(&r.loop, UV_RUN_DEFAULT);
  assert_int_equal(c.released, 3);
  char buf[3 * sizeof msg];
  size_t have = 0;
  while (have < sizeof buf) have += pump(&r, buf + have, sizeof buf - have);
  for (int i = 0; i < 3; i++) assert_memory_equal(buf + i * sizeof msg, msg, sizeof msg);
  rig_close(&r);
}

static void test_release_at_once_when_refused(void **state) {
  uv_loop_t loop;
  uv_tcp_t tcp; /* never connected: libuv refuses to write on it */
  assert_int_equal(uv_loop_init(&loop), 0);
  assert_int_equal(uv_tcp_init(&loop, &tcp), 0);
  counter c = {0};
  assert_int_equal(wire_uv_write((uv_stream_t *)&tcp, "x", 1, count_release, &c), LOOM_ECONN);
  assert_int_equal(c.released, 1);
  /* and an encoded frame on it is freed, not leaked (see the sanitizer build) */
  assert_int_equal(wire_uv_send((uv_stream_t *)&tcp, WIRE_HEARTBEAT, json_object(), NULL, 0),
                   LOOM_ECONN);
  uv_close((uv_handle_t *)&tcp, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(c.released, 1);
  assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_frames_arrive_in_order),
      cmocka_unit_test(test_release_once_after_the_write),
      cmocka_unit_test(test_release_at_once_when_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
