/* wire_msg_fuzz.c: libFuzzer harness for the message decoders
 * (src/wire/wire_msg.c). The input is a type selector byte, JSON text up
 * to the first NUL and a blob after it; they are framed, read back with a
 * wire_reader and decoded as the coordinator, agents and libloom do.
 * Aborts when a message that decoded does not encode again or does not
 * decode the same way the second time. Built by LOOM_FUZZ=ON with clang;
 * driver.c runs it over the committed corpus in every build. */
#include "core/bytes.h"
#include "wire/wire_msg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    wire_msg_free(&m2);
    wire_frame_free(&f2);
    free(again);
    wire_msg_free(&m);
    wire_frame_free(&f);
  }
  free(frame);
  return 0;
}
