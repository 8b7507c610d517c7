/* hadoop_ipc_test.c: Hadoop IPC framing and the blocking client
 * (src/hadoop/ipc.c). The framing: varints at their edges; the preamble
 * and a call's frame, decoded back with the generated messages as a
 * server would; replies (success, remote exception, fatal) decoded, and
 * every truncation of a reply refused; frame lengths over the cap, and
 * another protocol's bytes, named. The client, against a fake server on
 * loopback: a call answered; a remote exception (the connection stays
 * usable); silence (a timeout that says what it waited for, on time); a
 * server that hangs up; a reply to another call; an HTTP server; a port
 * where nothing listens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "IpcConnectionContext.pb-c.h"
#include "ProtobufRpcEngine2.pb-c.h"
#include "RpcHeader.pb-c.h"
#include "core/bytes.h"
#include "hadoop/ipc.h"
#include "yarn_service_protos.pb-c.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACP "org.apache.hadoop.yarn.api.ApplicationClientProtocolPB"

static const uint8_t CID[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static void test_varint(void **state) {
  (void)state;
  const uint32_t vals[] = {0, 1, 127, 128, 300, 16383, 16384, 1u << 21, 1u << 31, UINT32_MAX};
  for (size_t i = 0; i < LOOM__ARRAY_LEN(vals); i++) {
    uint8_t b[10];
    size_t n = loom__varint_put(b, vals[i]);
    uint32_t v = 0;
    assert_int_equal(loom__varint_get32(b, n, &v), n);
    assert_int_equal(v, vals[i]);
    /* one byte short is no varint */
    assert_int_equal(loom__varint_get32(b, n - 1, &v), 0);
  }
  uint32_t v;
  const uint8_t over[] = {0xff, 0xff, 0xff, 0xff, 0x1f}; /* 35 bits */
  assert_int_equal(loom__varint_get32(over, 5, &v), 0);
  const uint8_t six[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
  assert_int_equal(loom__varint_get32(six, 6, &v), 0);
}

/* The delimited messages of a frame body: start and length of each. */
static int split_delimited(const uint8_t *p, size_t n, const uint8_t **msg, size_t *len, int max) {
  int k = 0;
  while (n && k < max) {
    uint32_t l = 0;
    size_t vn = loom__varint_get32(p, n, &l);
    assert_true(vn > 0 && l <= n - vn);
    msg[k] = p + vn;
    len[k++] = l;
    p += vn + l;
    n -= vn + l;
  }
  assert_int_equal(n, 0);
  return k;
}

static void test_preamble(void **state) {
  (void)state;
  loom__buf b;
  loom__buf_init(&b, 1 << 16);
  assert_int_equal(hipc_encode_preamble(&b, ACP, "alice", CID), 0);
  const uint8_t *p = (const uint8_t *)b.p;
  assert_memory_equal(p, "hrpc\x09\x00\x00", 7);
  assert_int_equal(loom__get_be32(p + 7), b.len - 11);
  const uint8_t *m[3];
  size_t l[3];
  assert_int_equal(split_delimited(p + 11, b.len - 11, m, l, 3), 2);
  Hadoop__Common__RpcRequestHeaderProto *h =
      hadoop__common__rpc_request_header_proto__unpack(NULL, l[0], m[0]);
  assert_non_null(h);
  assert_int_equal(h->callid, HIPC_CALL_CONTEXT);
  assert_int_equal(h->rpckind, HADOOP__COMMON__RPC_KIND_PROTO__RPC_PROTOCOL_BUFFER);
  assert_int_equal(h->clientid.len, 16);
  assert_memory_equal(h->clientid.data, CID, 16);
  assert_int_equal(h->retrycount, -1);
  Hadoop__Common__IpcConnectionContextProto *ctx =
      hadoop__common__ipc_connection_context_proto__unpack(NULL, l[1], m[1]);
  assert_non_null(ctx);
  assert_string_equal(ctx->protocol, ACP);
  assert_string_equal(ctx->userinfo->effectiveuser, "alice");
  protobuf_c_message_free_unpacked(&h->base, NULL);
  protobuf_c_message_free_unpacked(&ctx->base, NULL);
  loom__buf_free(&b);
}

static void test_call_frame(void **state) {
  (void)state;
  loom__buf b;
  loom__buf_init(&b, 1 << 16);
  Hadoop__Yarn__GetQueueInfoRequestProto q = HADOOP__YARN__GET_QUEUE_INFO_REQUEST_PROTO__INIT;
  q.queuename = "default";
  assert_int_equal(hipc_encode_call(&b, 7, CID, ACP, "getQueueInfo", &q.base), 0);
  const uint8_t *p = (const uint8_t *)b.p;
  assert_int_equal(loom__get_be32(p), b.len - 4);
  const uint8_t *m[4];
  size_t l[4];
  assert_int_equal(split_delimited(p + 4, b.len - 4, m, l, 4), 3);
  Hadoop__Common__RpcRequestHeaderProto *h =
      hadoop__common__rpc_request_header_proto__unpack(NULL, l[0], m[0]);
  assert_int_equal(h->callid, 7);
  Hadoop__Common__RequestHeaderProto *rh =
      hadoop__common__request_header_proto__unpack(NULL, l[1], m[1]);
  assert_string_equal(rh->methodname, "getQueueInfo");
  assert_string_equal(rh->declaringclassprotocolname, ACP);
  assert_int_equal(rh->clientprotocolversion, 1);
  Hadoop__Yarn__GetQueueInfoRequestProto *q2 =
      hadoop__yarn__get_queue_info_request_proto__unpack(NULL, l[2], m[2]);
  assert_string_equal(q2->queuename, "default");
  protobuf_c_message_free_unpacked(&h->base, NULL);
  protobuf_c_message_free_unpacked(&rh->base, NULL);
  protobuf_c_message_free_unpacked(&q2->base, NULL);
  loom__buf_free(&b);
}

/* A reply frame (with its 4-byte length) into b: header fields, and a
 * body when body is not NULL. */
static void make_reply(loom__buf *b, uint32_t call_id, int status, const char *exc, const char *msg,
                       const ProtobufCMessage *body) {
  Hadoop__Common__RpcResponseHeaderProto h = HADOOP__COMMON__RPC_RESPONSE_HEADER_PROTO__INIT;
  h.callid = call_id;
  h.status = (Hadoop__Common__RpcResponseHeaderProto__RpcStatusProto)status;
  h.exceptionclassname = (char *)exc;
  h.errormsg = (char *)msg;
  const ProtobufCMessage *parts[2] = {&h.base, body};
  size_t at = b->len;
  uint8_t zero[4] = {0};
  loom__buf_add(b, zero, 4);
  for (int i = 0; i < (body ? 2 : 1); i++) {
    size_t n = protobuf_c_message_get_packed_size(parts[i]);
    uint8_t v[10], *tmp = malloc(n + 1);
    loom__buf_add(b, v, loom__varint_put(v, n));
    protobuf_c_message_pack(parts[i], tmp);
    loom__buf_add(b, tmp, n);
    free(tmp);
  }
  loom__put_be32((unsigned char *)b->p + at, (uint32_t)(b->len - at - 4));
}

static void metrics_body(Hadoop__Yarn__GetClusterMetricsResponseProto *r,
                         Hadoop__Yarn__YarnClusterMetricsProto *m, int nms) {
  hadoop__yarn__get_cluster_metrics_response_proto__init(r);
  hadoop__yarn__yarn_cluster_metrics_proto__init(m);
  m->has_num_node_managers = 1;
  m->num_node_managers = nms;
  r->cluster_metrics = m;
}

static void test_decode(void **state) {
  (void)state;
  Hadoop__Yarn__GetClusterMetricsResponseProto body;
  Hadoop__Yarn__YarnClusterMetricsProto m;
  metrics_body(&body, &m, 2);
  const ProtobufCMessageDescriptor *d =
      &hadoop__yarn__get_cluster_metrics_response_proto__descriptor;
  loom__buf b;
  loom__buf_init(&b, 1 << 16);
  make_reply(&b, 5, 0, NULL, NULL, &body.base);
  const uint8_t *f = (const uint8_t *)b.p + 4;
  size_t flen = b.len - 4;
  hipc_response r;
  char err[256];
  assert_int_equal(hipc_decode_response(f, flen, d, &r, err, sizeof err), 0);
  assert_int_equal(r.call_id, 5);
  assert_int_equal(r.status, 0);
  assert_non_null(r.body);
  assert_int_equal(
      ((Hadoop__Yarn__GetClusterMetricsResponseProto *)r.body)->cluster_metrics->num_node_managers,
      2);
  hipc_response_free(&r);
  /* every truncation is refused, never read past */
  for (size_t n = 0; n < flen; n++) {
    uint8_t *cut = malloc(n ? n : 1);
    memcpy(cut, f, n);
    err[0] = 0;
    int rc = hipc_decode_response(cut, n, d, &r, err, sizeof err);
    if (rc != LOOM_EPROTO) fail_msg("a reply cut to %zu of %zu bytes: %d", n, flen, rc);
    assert_true(err[0] != 0);
    assert_null(r.header);
    free(cut);
  }
  /* a remote exception: the first line, printable only */
  b.len = 0;
  make_reply(&b, 6, 1, "org.apache.hadoop.yarn.exceptions.YarnException",
             "queue \x1b[31mx\x1b[0m is stopped\n\tat org.apache.Foo(Foo.java:1)", NULL);
  assert_int_equal(hipc_decode_response((uint8_t *)b.p + 4, b.len - 4, d, &r, err, sizeof err), 0);
  assert_int_equal(r.status, 1);
  assert_null(r.body);
  assert_string_equal(r.exception, "org.apache.hadoop.yarn.exceptions.YarnException");
  assert_string_equal(r.message, "queue ?[31mx?[0m is stopped");
  hipc_response_free(&r);
  b.len = 0;
  make_reply(&b, UINT32_MAX, 2, "org.apache.hadoop.security.AccessControlException",
             "SIMPLE authentication is not enabled.  Available:[TOKEN]", NULL);
  assert_int_equal(hipc_decode_response((uint8_t *)b.p + 4, b.len - 4, d, &r, err, sizeof err), 0);
  assert_int_equal(r.status, 2);
  hipc_response_free(&r);
  /* a header that is not an RpcResponseHeaderProto (required fields missing) */
  const uint8_t junk[] = {2, 0x28, 0x01};
  assert_int_equal(hipc_decode_response(junk, sizeof junk, d, &r, err, sizeof err), LOOM_EPROTO);
  assert_non_null(strstr(err, "not an RpcResponseHeaderProto"));
  /* lengths past the end */
  const uint8_t past[] = {0x7f, 0x08};
  assert_int_equal(hipc_decode_response(past, sizeof past, d, &r, err, sizeof err), LOOM_EPROTO);
  assert_non_null(strstr(err, "past its end"));
  loom__buf_free(&b);
}

static void test_frame_length(void **state) {
  (void)state;
  uint8_t h[4];
  uint32_t len;
  char err[256];
  loom__put_be32(h, HIPC_MAX_FRAME);
  assert_int_equal(hipc_frame_length(h, &len, err, sizeof err), 0);
  assert_int_equal(len, HIPC_MAX_FRAME);
  loom__put_be32(h, HIPC_MAX_FRAME + 1);
  assert_int_equal(hipc_frame_length(h, &len, err, sizeof err), LOOM_EPROTO);
  assert_non_null(strstr(err, "more than the 67108864 allowed"));
  assert_int_equal(hipc_frame_length((const uint8_t *)"HTTP", &len, err, sizeof err), LOOM_EPROTO);
  assert_non_null(strstr(err, "starts with \"HTTP\""));
}

/* ---- the client against a fake server ---- */

typedef enum {
  SRV_ANSWER,
  SRV_EXCEPTION_THEN_ANSWER,
  SRV_SILENT,
  SRV_HANGUP,
  SRV_WRONG_ID,
  SRV_HTTP
} srv_mode;

typedef struct {
  int lfd, port;
  srv_mode mode;
  pthread_t th;
  char method[64]; /* the first call's, as the server decoded it */
  char user[64];
  int calls;
} server;

static bool read_full(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}

/* Reads one frame: its body, malloc'ed. */
static uint8_t *read_frame(int fd, size_t *len) {
  uint8_t h[4];
  if (!read_full(fd, h, 4)) return NULL;
  *len = loom__get_be32(h);
  uint8_t *b = malloc(*len + 1);
  if (!read_full(fd, b, *len)) {
    free(b);
    return NULL;
  }
  return b;
}

static void *serve(void *arg) {
  server *s = arg;
  int fd = accept(s->lfd, NULL, NULL);
  if (fd < 0) return NULL;
  uint8_t pre[7];
  size_t len;
  uint8_t *f;
  if (!read_full(fd, pre, 7) || memcmp(pre, "hrpc\x09\x00\x00", 7) || !(f = read_frame(fd, &len)))
    goto out;
  {
    const uint8_t *m[3];
    size_t l[3];
    split_delimited(f, len, m, l, 3);
    Hadoop__Common__IpcConnectionContextProto *ctx =
        hadoop__common__ipc_connection_context_proto__unpack(NULL, l[1], m[1]);
    snprintf(s->user, sizeof s->user, "%s", ctx ? ctx->userinfo->effectiveuser : "?");
    if (ctx) protobuf_c_message_free_unpacked(&ctx->base, NULL);
    free(f);
  }
  while ((f = read_frame(fd, &len))) {
    const uint8_t *m[3];
    size_t l[3];
    split_delimited(f, len, m, l, 3);
    Hadoop__Common__RpcRequestHeaderProto *h =
        hadoop__common__rpc_request_header_proto__unpack(NULL, l[0], m[0]);
    Hadoop__Common__RequestHeaderProto *rh =
        hadoop__common__request_header_proto__unpack(NULL, l[1], m[1]);
    if (!s->calls) snprintf(s->method, sizeof s->method, "%s", rh->methodname);
    int32_t id = h->callid;
    protobuf_c_message_free_unpacked(&h->base, NULL);
    protobuf_c_message_free_unpacked(&rh->base, NULL);
    free(f);
    s->calls++;
    loom__buf b;
    loom__buf_init(&b, 1 << 16);
    Hadoop__Yarn__GetClusterMetricsResponseProto body;
    Hadoop__Yarn__YarnClusterMetricsProto mt;
    metrics_body(&body, &mt, 3);
    switch (s->mode) {
    case SRV_ANSWER:
      make_reply(&b, (uint32_t)id, 0, NULL, NULL, &body.base);
      break;
    case SRV_EXCEPTION_THEN_ANSWER:
      if (s->calls == 1)
        make_reply(&b, (uint32_t)id, 1, "org.apache.hadoop.yarn.exceptions.YarnException",
                   "no such thing\nat Foo", NULL);
      else
        make_reply(&b, (uint32_t)id, 0, NULL, NULL, &body.base);
      break;
    case SRV_WRONG_ID:
      make_reply(&b, (uint32_t)id + 1, 0, NULL, NULL, &body.base);
      break;
    case SRV_HTTP:
      loom__buf_printf(&b, "HTTP/1.1 400 Bad Request\r\n\r\n");
      break;
    case SRV_SILENT: {
      char c;
      (void)!read(fd, &c, 1); /* until the client gives up */
      loom__buf_free(&b);
      goto out;
    }
    case SRV_HANGUP:
      loom__buf_free(&b);
      goto out;
    }
    (void)!write(fd, b.p, b.len);
    loom__buf_free(&b);
  }
out:
  close(fd);
  return NULL;
}

static void server_start(server *s, srv_mode mode) {
  memset(s, 0, sizeof *s);
  s->mode = mode;
  s->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(s->lfd, 4), 0);
  socklen_t sl = sizeof a;
  getsockname(s->lfd, (struct sockaddr *)&a, &sl);
  s->port = ntohs(a.sin_port);
  pthread_create(&s->th, NULL, serve, s);
}

static void server_stop(server *s) {
  pthread_join(s->th, NULL);
  close(s->lfd);
}

static int metrics_call(hipc_client *c, int timeout_ms, int *nms, char *err, size_t errlen) {
  Hadoop__Yarn__GetClusterMetricsRequestProto q =
      HADOOP__YARN__GET_CLUSTER_METRICS_REQUEST_PROTO__INIT;
  ProtobufCMessage *resp = NULL;
  int rc = hipc_call(c, "getClusterMetrics", &q.base,
                     &hadoop__yarn__get_cluster_metrics_response_proto__descriptor, &resp,
                     timeout_ms, err, errlen);
  if (rc == 0) {
    *nms =
        ((Hadoop__Yarn__GetClusterMetricsResponseProto *)resp)->cluster_metrics->num_node_managers;
    protobuf_c_message_free_unpacked(resp, NULL);
  } else
    assert_null(resp);
  return rc;
}

static void test_client(void **state) {
  (void)state;
  const struct {
    srv_mode mode;
    int rc;
    const char *err;
  } cases[] = {
      {SRV_ANSWER, 0, NULL},
      {SRV_EXCEPTION_THEN_ANSWER, LOOM_EPEER,
       "the RM at test: getClusterMetrics failed: org.apache.hadoop.yarn.exceptions.YarnException: "
       "no such thing"},
      {SRV_SILENT, LOOM_ETIMEDOUT, "the RM at test: no reply to getClusterMetrics within 300 ms"},
      {SRV_HANGUP, LOOM_ECONN,
       "the RM at test closed the connection while loom waited for reply to getClusterMetrics"},
      {SRV_WRONG_ID, LOOM_EPROTO, "a reply to call 1 where call 0 was waited for"},
      {SRV_HTTP, LOOM_EPROTO, "the reply does not look like Hadoop IPC: it starts with \"HTTP\""},
  };
  for (size_t i = 0; i < LOOM__ARRAY_LEN(cases); i++) {
    server s;
    server_start(&s, cases[i].mode);
    hipc_client *c;
    char err[1024] = "";
    assert_int_equal(
        hipc_connect("127.0.0.1", s.port, "the RM at test", ACP, "bob", 2000, &c, err, sizeof err),
        0);
    int nms = 0;
    uint64_t t0 = loom__now_ms();
    int rc = metrics_call(c, 300, &nms, err, sizeof err);
    uint64_t took = loom__now_ms() - t0;
    if (rc != cases[i].rc) fail_msg("case %zu: rc %d (%s), wanted %d", i, rc, err, cases[i].rc);
    if (cases[i].err && !strstr(err, cases[i].err))
      fail_msg("case %zu: '%s', wanted '%s'", i, err, cases[i].err);
    assert_true(took < 2000);
    if (rc == 0) assert_int_equal(nms, 3);
    if (cases[i].mode == SRV_EXCEPTION_THEN_ANSWER) {
      assert_string_equal(hipc_exception(c), "org.apache.hadoop.yarn.exceptions.YarnException");
      /* a remote exception leaves the connection usable */
      assert_int_equal(metrics_call(c, 2000, &nms, err, sizeof err), 0);
      assert_int_equal(nms, 3);
    } else if (rc < 0) {
      /* anything else closes it */
      assert_int_equal(metrics_call(c, 300, &nms, err, sizeof err), LOOM_ECONN);
      assert_non_null(strstr(err, "the connection was closed after an earlier error"));
    }
    hipc_close(c);
    server_stop(&s);
    assert_string_equal(s.method, "getClusterMetrics");
    assert_string_equal(s.user, "bob");
  }
}

static void test_connect_refused(void **state) {
  (void)state;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bind(fd, (struct sockaddr *)&a, sizeof a);
  socklen_t sl = sizeof a;
  getsockname(fd, (struct sockaddr *)&a, &sl);
  close(fd); /* nothing listens there now */
  hipc_client *c;
  char err[512];
  assert_int_equal(hipc_connect("127.0.0.1", ntohs(a.sin_port), "the RM at x", ACP, "u", 1000, &c,
                                err, sizeof err),
                   LOOM_ECONN);
  assert_non_null(strstr(err, "the RM at x: cannot connect: Connection refused"));
  assert_int_equal(
      hipc_connect("no-such-host.invalid", 1, "the RM at y", ACP, "u", 1000, &c, err, sizeof err),
      LOOM_ECONN);
  assert_non_null(strstr(err, "the RM at y: cannot resolve no-such-host.invalid"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_varint),          cmocka_unit_test(test_preamble),
      cmocka_unit_test(test_call_frame),      cmocka_unit_test(test_decode),
      cmocka_unit_test(test_frame_length),    cmocka_unit_test(test_client),
      cmocka_unit_test(test_connect_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
