/* wire_uv.c: writes on a libuv stream whose request and bytes live until
 * libuv calls back, shared by the coordinator and the agent so that each
 * does not keep its own copy of the request bookkeeping. */
#include "wireuv/wire_uv.h"

#include <limits.h>
#include <stdlib.h>

typedef struct {
  uv_write_t req; /* first: the callback gets &req back */
  wire_uv_release release;
  void *owner;
  unsigned char *ct; /* the ciphertext written, when the bytes went through TLS */
} wire_uv_req;

static void wire_uv_done(uv_write_t *req, int status) {
  wire_uv_req *w = (wire_uv_req *)req;
  free(w->ct);
  w->release(w->owner);
  free(w);
}

static int queue(uv_stream_t *s, const void *buf, size_t len, wire_uv_release release, void *owner,
                 unsigned char *ct) {
  int rc = len > UINT_MAX ? LOOM_EINVAL : 0;
  wire_uv_req *w = rc == 0 ? calloc(1, sizeof *w) : NULL;
  if (!w) {
    free(ct);
    release(owner);
    return rc < 0 ? rc : LOOM_ENOMEM;
  }
  w->release = release;
  w->owner = owner;
  w->ct = ct;
  uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
  if (uv_write(&w->req, s, &b, 1, wire_uv_done) < 0) {
    free(ct);
    release(owner);
    free(w);
    return LOOM_ECONN;
  }
  return 0;
}

int wire_uv_write(uv_stream_t *s, const void *buf, size_t len, wire_uv_release release,
                  void *owner) {
  return queue(s, buf, len, release, owner, NULL);
}

static void no_release(void *owner) { (void)owner; }

int wire_uv_tls_flush(uv_stream_t *s, wire_tls *t) {
  unsigned char *ct;
  size_t n;
  int rc = t ? wire_tls_mem_take(t, &ct, &n) : 0;
  if (rc < 0 || !t || n == 0) return rc;
  return queue(s, ct, n, no_release, NULL, ct);
}

int wire_uv_write_tls(uv_stream_t *s, wire_tls *t, const void *buf, size_t len,
                      wire_uv_release release, void *owner) {
  if (!t) return queue(s, buf, len, release, owner, NULL);
  int rc = wire_tls_mem_write(t, buf, len);
  unsigned char *ct = NULL;
  size_t n = 0;
  if (rc == 0) rc = wire_tls_mem_take(t, &ct, &n);
  if (rc < 0 || n == 0) { /* failed, or queued until the handshake ends */
    release(owner);
    return rc;
  }
  /* owner is let go of when its ciphertext is written, as without TLS:
   * callers count what is in flight */
  return queue(s, ct, n, release, owner, ct);
}

int wire_uv_tls_read(uv_stream_t *s, wire_tls *t, const void *data, size_t n, wire_uv_plain fn,
                     void *arg) {
  int rc = n ? wire_tls_mem_feed(t, data, n) : 0;
  unsigned char buf[WIRE_READ_CHUNK];
  while (rc == 0) {
    size_t got = 0;
    rc = wire_tls_mem_read(t, buf, sizeof buf, &got);
    if (rc < 0 || got == 0 || !fn(arg, (const char *)buf, got)) break;
  }
  wire_uv_tls_flush(s, t); /* the handshake's answers, or the alert of a failure */
  return rc < 0 ? rc : 0;
}

int wire_uv_send(uv_stream_t *s, uint16_t type, json_t *json, const void *blob, size_t len) {
  unsigned char *buf;
  size_t n;
  int rc = wire_encode(type, json, blob, len, &buf, &n);
  json_decref(json);
  if (rc < 0) return rc;
  return wire_uv_write(s, buf, n, free, buf);
}
