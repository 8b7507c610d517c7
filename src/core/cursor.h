/* cursor.h: a bounds-checked reader over a byte string in memory, for every
 * decoder of a length-prefixed binary format (the parameter server's
 * declarations, checkpoint tables). Each get takes the next bytes and
 * moves past them; one that would run past the end takes nothing, marks
 * the cursor bad and yields 0 (or NULL), and so does every get after it.
 * A decoder reads all its fields, then checks bad once, and done() to
 * refuse trailing bytes. The bytes are the caller's and must outlive the
 * cursor; widths and byte orders are core/bytes.h's. */
#ifndef LOOM_CORE_CURSOR_H
#define LOOM_CORE_CURSOR_H

#include "core/bytes.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  const unsigned char *p; /* the bytes, not owned */
  size_t len;             /* how many */
  size_t off;             /* the next one to read */
  bool bad;               /* a get ran past the end */
} loom__cur;

static inline loom__cur loom__cur_make(const void *p, size_t len) {
  return (loom__cur){.p = p, .len = len};
}

/* How many bytes are left to read (0 once bad). */
static inline size_t loom__cur_left(const loom__cur *c) { return c->bad ? 0 : c->len - c->off; }

/* Whether every byte was read and no get ran past the end. */
static inline bool loom__cur_done(const loom__cur *c) { return !c->bad && c->off == c->len; }

/* The next n bytes, or NULL (and bad) when fewer are left. */
static inline const unsigned char *loom__cur_bytes(loom__cur *c, size_t n) {
  if (c->bad || n > c->len - c->off) {
    c->bad = true;
    return NULL;
  }
  const unsigned char *p = c->p + c->off;
  c->off += n;
  return p;
}

static inline uint8_t loom__cur_u8(loom__cur *c) {
  const unsigned char *p = loom__cur_bytes(c, 1);
  return p ? p[0] : 0;
}
static inline uint16_t loom__cur_le16(loom__cur *c) {
  const unsigned char *p = loom__cur_bytes(c, 2);
  return p ? loom__get_le16(p) : 0;
}
static inline uint32_t loom__cur_le32(loom__cur *c) {
  const unsigned char *p = loom__cur_bytes(c, 4);
  return p ? loom__get_le32(p) : 0;
}
static inline uint64_t loom__cur_le64(loom__cur *c) {
  const unsigned char *p = loom__cur_bytes(c, 8);
  return p ? loom__get_le64(p) : 0;
}
/* An IEEE-754 single stored as its little-endian bits. */
static inline float loom__cur_lef32(loom__cur *c) {
  uint32_t u = loom__cur_le32(c);
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline uint16_t loom__cur_be16(loom__cur *c) {
  const unsigned char *p = loom__cur_bytes(c, 2);
  return p ? loom__get_be16(p) : 0;
}
static inline uint32_t loom__cur_be32(loom__cur *c) {
  const unsigned char *p = loom__cur_bytes(c, 4);
  return p ? loom__get_be32(p) : 0;
}
static inline uint64_t loom__cur_be64(loom__cur *c) {
  const unsigned char *p = loom__cur_bytes(c, 8);
  return p ? loom__get_be64(p) : 0;
}

#endif
