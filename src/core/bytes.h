/* bytes.h: fixed-width integers to and from byte strings, big-endian (the
 * coordinator's frames, the collectives' handshake, idx files) and
 * little-endian (the parameter server's header, checkpoints, TFRecord).
 * One set for every part, so that no file keeps its own copy. Each reads or
 * writes exactly the width its name says; bounds are the caller's to check. */
#ifndef LOOM_CORE_BYTES_H
#define LOOM_CORE_BYTES_H

#include <stddef.h>
#include <stdint.h>

static inline uint16_t loom__get_be16(const unsigned char *p) {
  return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}
static inline uint32_t loom__get_be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t loom__get_be64(const unsigned char *p) {
  return (uint64_t)loom__get_be32(p) << 32 | loom__get_be32(p + 4);
}
static inline void loom__put_be16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)(v >> 8);
  p[1] = (unsigned char)v;
}
static inline void loom__put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static inline void loom__put_be64(unsigned char *p, uint64_t v) {
  loom__put_be32(p, (uint32_t)(v >> 32));
  loom__put_be32(p + 4, (uint32_t)v);
}

static inline uint16_t loom__get_le16(const unsigned char *p) {
  return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}
static inline uint32_t loom__get_le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t loom__get_le64(const unsigned char *p) {
  return (uint64_t)loom__get_le32(p) | (uint64_t)loom__get_le32(p + 4) << 32;
}
static inline void loom__put_le16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static inline void loom__put_le32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}
static inline void loom__put_le64(unsigned char *p, uint64_t v) {
  loom__put_le32(p, (uint32_t)v);
  loom__put_le32(p + 4, (uint32_t)(v >> 32));
}

/* Protocol Buffers' base-128 varint (TensorBoard's event records, Hadoop
 * IPC's delimited messages). loom__varint_put writes v in 1 to 10 bytes and
 * returns how many; loom__varint_get32 reads one of at most 32 bits from
 * p[0..n) and returns the bytes it read, or 0 when p holds no complete one
 * or it is wider than 32 bits. */
static inline size_t loom__varint_put(unsigned char out[10], uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  out[n++] = (unsigned char)v;
  return n;
}
static inline size_t loom__varint_get32(const unsigned char *p, size_t n, uint32_t *v) {
  uint32_t r = 0;
  for (size_t i = 0; i < n && i < 5; i++) {
    if (i == 4 && p[i] > 0x0f) return 0; /* more than 32 bits */
    r |= (uint32_t)(p[i] & 0x7f) << (7 * i);
    if (!(p[i] & 0x80)) {
      *v = r;
      return i + 1;
    }
  }
  return 0;
}

#endif
