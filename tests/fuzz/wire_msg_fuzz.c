/* wire_msg_fuzz.c: libFuzzer harness for the message decoders
 * (src/wire/wire_msg.c). The input is a type selector byte, JSON text up
 * to the first NUL and a blob after it; they are framed, read back with a
 * wire_reader and decoded as the coordinator, agents and libloom do.
 * Aborts when a message that decoded does not encode again or does not
 * decode the same way the second time. A REPLY that decoded also goes
 * through the three decoders of the feed's answers (OPEN, LEASE, RENEW),
 * with the same rule for each answer that decodes. Built by LOOM_FUZZ=ON with clang;
 * driver.c runs it over the committed corpus in every build. */
#include "core/bytes.h"
#include "wire/wire_msg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool same_str(const char *a, const char *b) {
  return (!a && !b) || (a && b && !strcmp(a, b));
}

/* The feed's answers in reply j (rc its rc): each that decodes encodes
 * again into an answer that decodes to the same fields. */
static void answers(const json_t *j, int rc) {
  char err[256] = "";
  wire_feed_opened o, o2;
  if (wire_feed_opened_decode(j, &o, err, sizeof err) == 0) {
    json_t *e = wire_feed_opened_encode(&o);
    if (!e || wire_feed_opened_decode(e, &o2, err, sizeof err) < 0) abort();
    if (!same_str(o.format, o2.format) || o.epochs != o2.epochs || o.epoch != o2.epoch ||
        o.splits != o2.splits || o.output != o2.output || o.lease_ms != o2.lease_ms ||
        o.shuffle != o2.shuffle || o.growing != o2.growing)
      abort();
    json_decref(e);
  } else if (!err[0]) {
    abort(); /* a failure always says where */
  }
  static wire_feed_leased l, l2;
  err[0] = 0;
  if (wire_feed_leased_decode(j, rc, &l, err, sizeof err) == 0) {
    json_t *e = wire_feed_leased_encode(&l);
    if (!e || wire_feed_leased_decode(e, rc, &l2, err, sizeof err) < 0) abort();
    if (l.end != l2.end || l.nsplits != l2.nsplits || l.has_leased != l2.has_leased ||
        l.leased != l2.leased || l.nsplits > FEED_MAX_BATCH_LEASES)
      abort();
    for (size_t i = 0; i < l.nsplits; i++) {
      const wire_feed_split *a = &l.splits[i], *b = &l2.splits[i];
      if (a->split != b->split || a->epoch != b->epoch || a->lease != b->lease ||
          !same_str(a->path, b->path) || a->off != b->off || a->len != b->len || a->rec != b->rec ||
          a->has_rseed != b->has_rseed || a->rseed != b->rseed || !same_str(a->tmp, b->tmp) ||
          a->len < 1 || !a->path)
        abort();
    }
    json_decref(e);
  } else if (!err[0]) {
    abort();
  }
  wire_feed_renewed r, r2;
  err[0] = 0;
  if (wire_feed_renewed_decode(j, &r, err, sizeof err) == 0) {
    json_t *e = wire_feed_renewed_encode(&r);
    if (!e || wire_feed_renewed_decode(e, &r2, err, sizeof err) < 0 ||
        !json_equal(r.stale, r2.stale))
      abort();
    json_decref(e);
  } else if (!err[0]) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* New types go at the end, so that the committed seeds keep their meaning;
 * the feed's, from index 20, have their seeds made by make_seeds.c. */
static const uint16_t TYPES[] = {
    WIRE_REGISTER,  WIRE_ASSIGN,     WIRE_READY,     WIRE_CLUSTER,    WIRE_STARTED,
    WIRE_LOG,       WIRE_EXIT,       WIRE_STOP,      WIRE_HEARTBEAT,  WIRE_FAIL,
    WIRE_HELLO,     WIRE_KV_SET,     WIRE_KV_GET,    WIRE_KV_ADD,     WIRE_EVENT,
    WIRE_REPLY,     WIRE_ABORT,      WIRE_METRIC,    WIRE_MEMBERSHIP, WIRE_CTL_KILL,
    WIRE_FEED_OPEN, WIRE_FEED_LEASE, WIRE_FEED_DONE, WIRE_FEED_RENEW, WIRE_FEED_RELEASE,
};

static bool decode_one(const unsigned char *frame, size_t len, wire_frame *f, wire_msg *m,
                       char *err, size_t errlen) {
  wire_reader r;
  wire_reader_init(&r, 1 << 20);
  bool ok = wire_reader_push(&r, frame, len) == 0 && wire_reader_pop(&r, f) == 1;
  wire_reader_free(&r);
  if (!ok) return false;
  if (wire_msg_decode(f, m, err, errlen) < 0) {
    if (!err[0]) abort(); /* a failure always says where */
    wire_frame_free(f);
    return false;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0 || size > (1 << 19)) return 0;
  uint16_t type = TYPES[data[0] % (sizeof TYPES / sizeof TYPES[0])];
  data++, size--;
  const uint8_t *nul = memchr(data, 0, size);
  size_t jlen = nul ? (size_t)(nul - data) : size;
  size_t blen = nul ? size - jlen - 1 : 0;
  size_t total = WIRE_HDR + jlen + blen;
  unsigned char *frame = malloc(total);
  if (!frame) return 0;
  loom__put_be32(frame, (uint32_t)(total - 4));
  loom__put_be16(frame + 4, type);
  loom__put_be16(frame + 6, 0);
  loom__put_be32(frame + 8, (uint32_t)jlen);
  memcpy(frame + WIRE_HDR, data, jlen);
  if (blen) memcpy(frame + WIRE_HDR + jlen, nul + 1, blen);
  wire_frame f, f2;
  wire_msg m, m2;
  char err[256] = "";
  if (decode_one(frame, total, &f, &m, err, sizeof err)) {
    unsigned char *again;
    size_t alen;
    if (wire_msg_encode(&m, &again, &alen) < 0) abort();
    err[0] = 0;
    if (!decode_one(again, alen, &f2, &m2, err, sizeof err)) abort();
    if (m2.type != m.type || m2.blob_len != m.blob_len) abort();
    if (m.blob_len && memcmp(m.blob, m2.blob, m.blob_len)) abort();
    if (m.type == WIRE_REPLY) answers(m.u.reply.json, (int)m.u.reply.rc);
    wire_msg_free(&m2);
    wire_frame_free(&f2);
    free(again);
    wire_msg_free(&m);
    wire_frame_free(&f);
  }
  free(frame);
  return 0;
}
