/* pb.c: protocol buffers encoding for TensorBoard's events (see pb.h).
 * Fixed-width values go out little-endian whatever the host. */
#include "summary/pb.h"
#include "core/bytes.h"

#include <string.h>

void loom__pb_init(loom__pb *e, size_t max) {
  loom__buf_init(&e->buf, max);
  e->err = 0;
}

void loom__pb_free(loom__pb *e) {
  loom__buf_free(&e->buf);
  e->err = 0;
}

static void pb_raw(loom__pb *e, const void *data, size_t n) {
  if (e->err) return;
  e->err = loom__buf_add(&e->buf, data, n);
}

static void pb_raw_varint(loom__pb *e, uint64_t v) {
  uint8_t tmp[10];
  pb_raw(e, tmp, loom__varint_put(tmp, v));
}

static void pb_key(loom__pb *e, int field, int wire_type) {
  pb_raw_varint(e, ((uint64_t)field << 3) | (uint64_t)wire_type);
}

static void pb_raw_fixed(loom__pb *e, uint64_t bits, int bytes) {
  uint8_t le[8];
  for (int i = 0; i < bytes; i++) le[i] = (uint8_t)(bits >> (8 * i));
  pb_raw(e, le, (size_t)bytes);
}

void loom__pb_varint(loom__pb *e, int field, uint64_t v) {
  pb_key(e, field, LOOM_PB_VARINT);
  pb_raw_varint(e, v);
}

void loom__pb_double(loom__pb *e, int field, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  pb_key(e, field, LOOM_PB_FIXED64);
  pb_raw_fixed(e, bits, 8);
}

void loom__pb_float(loom__pb *e, int field, float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  pb_key(e, field, LOOM_PB_FIXED32);
  pb_raw_fixed(e, bits, 4);
}

void loom__pb_bytes(loom__pb *e, int field, const void *data, size_t n) {
  pb_key(e, field, LOOM_PB_LEN);
  pb_raw_varint(e, n);
  pb_raw(e, data, n);
}

void loom__pb_string(loom__pb *e, int field, const char *s) {
  loom__pb_bytes(e, field, s, strlen(s));
}

void loom__pb_message(loom__pb *e, int field, const loom__pb *inner) {
  if (!e->err && inner->err) e->err = inner->err;
  loom__pb_bytes(e, field, inner->buf.p, inner->buf.len);
}

void loom__pb_packed_double(loom__pb *e, int field, const double *v, size_t n) {
  if (n > SIZE_MAX / 8) {
    if (!e->err) e->err = LOOM_ERANGE;
    return;
  }
  pb_key(e, field, LOOM_PB_LEN);
  pb_raw_varint(e, n * 8);
  for (size_t i = 0; i < n; i++) {
    uint64_t bits;
    memcpy(&bits, &v[i], 8);
    pb_raw_fixed(e, bits, 8);
  }
}
