/* pb.h: the little of the protocol buffers wire format that TensorBoard's
 * Event messages need: varints, fixed 64- and 32-bit fields, and
 * length-delimited fields (strings, bytes, nested messages, packed
 * doubles). Encoding only; no schema, no reflection.
 *
 * An encoder keeps the first error it meets and skips every later write, so
 * a message is built with a run of calls and checked once at the end. */
#ifndef LOOM_SUMMARY_PB_H
#define LOOM_SUMMARY_PB_H

#include "core/core.h"

enum {
  LOOM_PB_VARINT = 0,
  LOOM_PB_FIXED64 = 1,
  LOOM_PB_LEN = 2,
  LOOM_PB_FIXED32 = 5,
};

typedef struct {
  loom__buf buf; /* the encoded bytes */
  int err;       /* 0, or the first error (LOOM_ENOMEM, LOOM_ERANGE) */
} loom__pb;

/* An empty encoder whose output may grow to max bytes. */
void loom__pb_init(loom__pb *e, size_t max);
void loom__pb_free(loom__pb *e);

/* One field each: key (field << 3 | wire type), then the value. */
void loom__pb_varint(loom__pb *e, int field, uint64_t v);
void loom__pb_double(loom__pb *e, int field, double v);
void loom__pb_float(loom__pb *e, int field, float v);
void loom__pb_bytes(loom__pb *e, int field, const void *data, size_t n);
void loom__pb_string(loom__pb *e, int field, const char *s);
/* A nested message: inner's bytes as a length-delimited field. An error in
 * inner becomes e's error. */
void loom__pb_message(loom__pb *e, int field, const loom__pb *inner);
/* A packed repeated double: one length-delimited field of n fixed64s. */
void loom__pb_packed_double(loom__pb *e, int field, const double *v, size_t n);

#endif
