/* wire_uv.c: writes on a libuv stream whose request and bytes live until
 * libuv calls back, shared by the coordinator and the agent so that each
 * does not keep its own copy of the request bookkeeping. */
#include "wire/wire_uv.h"

#include <limits.h>
#include <stdlib.h>

typedef struct {
  uv_write_t req; /* first: the callback gets &req back */
  wire_uv_release release;
  void *owner;
} wire_uv_req;

static void wire_uv_done(uv_write_t *req, int status) {
  wire_uv_req *w = (wire_uv_req *)req;
  w->release(w->owner);
  free(w);
}

int wire_uv_write(uv_stream_t *s, const void *buf, size_t len, wire_uv_release release,
                  void *owner) {
  if (len > UINT_MAX) {
    release(owner);
    return LOOM_EINVAL;
  }
  wire_uv_req *w = calloc(1, sizeof *w);
  if (!w) {
    release(owner);
    return LOOM_ENOMEM;
  }
  w->release = release;
  w->owner = owner;
  uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
  if (uv_write(&w->req, s, &b, 1, wire_uv_done) < 0) {
    release(owner);
    free(w);
    return LOOM_ECONN;
  }
  return 0;
}

int wire_uv_send(uv_stream_t *s, uint16_t type, json_t *json, const void *blob, size_t len) {
  unsigned char *buf;
  size_t n;
  int rc = wire_encode(type, json, blob, len, &buf, &n);
  json_decref(json);
  if (rc < 0) return rc;
  return wire_uv_write(s, buf, n, free, buf);
}
