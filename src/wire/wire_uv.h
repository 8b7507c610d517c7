/* wire_uv.h: frames written on a libuv stream, for the loom command's
 * event-loop processes (the coordinator and the agent). A write owns its
 * request and lets go of its bytes when libuv is done with them. Only the
 * loom command compiles wire_uv.c: libloom does not use libuv. */
#ifndef LOOM_WIRE_UV_H
#define LOOM_WIRE_UV_H

#include "wire/wire.h"

#include <uv.h>

/* Lets go of the bytes of one write; owner is what was passed with them. */
typedef void (*wire_uv_release)(void *owner);

/* Queues buf[0..len) for writing on s. release(owner) is called exactly
 * once: when the write has completed or failed, or before this returns
 * when it could not be queued; buf must stay valid until then. Returns 0,
 * LOOM_ENOMEM, LOOM_EINVAL (len does not fit a uv_buf_t) or LOOM_ECONN
 * (libuv refused the write: the stream is closing or closed). */
int wire_uv_write(uv_stream_t *s, const void *buf, size_t len, wire_uv_release release,
                  void *owner);

/* Encodes one frame (see wire_encode) and queues it on s; the encoded
 * bytes are freed when the write is done. Takes ownership of json, which
 * may be NULL. Returns 0, wire_encode's error, or wire_uv_write's. */
int wire_uv_send(uv_stream_t *s, uint16_t type, json_t *json, const void *blob, size_t len);

#endif
