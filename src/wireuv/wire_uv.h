/* wire_uv.h: frames written on a libuv stream, for the loom command's
 * event-loop processes (the coordinator and the agent). A write owns its
 * request and lets go of its bytes when libuv is done with them. A folder
 * of its own (src/wireuv/, over wire/): only the loom command links it,
 * libloom does not use libuv. */
#ifndef LOOM_WIREUV_WIRE_UV_H
#define LOOM_WIREUV_WIRE_UV_H

#include "wire/wire.h"
#include "wire/wire_tls.h"

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

/* The same through t, a memory TLS session (wire_tls.h), when t is not
 * NULL: the bytes are encrypted at once and their ciphertext queued;
 * release(owner) is called when that ciphertext is written (at once when
 * the handshake has not ended and TLS holds them until it does). */
int wire_uv_write_tls(uv_stream_t *s, wire_tls *t, const void *buf, size_t len,
                      wire_uv_release release, void *owner);
/* Queues the ciphertext t has to send (handshake messages, an alert). */
int wire_uv_tls_flush(uv_stream_t *s, wire_tls *t);

/* Takes plaintext: returns false to stop (the connection is closing). */
typedef bool (*wire_uv_plain)(void *arg, const char *data, size_t n);
/* Feeds n bytes read from s (may be 0: to drain what t holds already) to t,
 * hands the plaintext to fn in pieces of at most WIRE_READ_CHUNK bytes,
 * and sends what TLS answers. Returns 0, or LOOM_EAUTH / LOOM_EPROTO /
 * LOOM_ECONN when TLS failed (wire_tls_mem_why(t) says why). */
int wire_uv_tls_read(uv_stream_t *s, wire_tls *t, const void *data, size_t n, wire_uv_plain fn,
                     void *arg);

/* Encodes one frame (see wire_encode) and queues it on s; the encoded
 * bytes are freed when the write is done. Takes ownership of json, which
 * may be NULL. Returns 0, wire_encode's error, or wire_uv_write's. */
int wire_uv_send(uv_stream_t *s, uint16_t type, json_t *json, const void *blob, size_t len);

#endif
