/* hdfs_dtp.c: DataTransferProtocol's framing, shared by the HDFS read
 * and write: packets' lengths and headers, checksums (CRC32C and CRC32),
 * an operation's request and a DataNode's varint-delimited replies; see
 * hdfs_int.h. */
#include "hadoop/hdfs_int.h"
#include "core/bytes.h"
#include "core/crc32c.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- DataTransferProtocol framing ---------------------------------------- */

int hdfs_packet_lengths(const uint8_t pre[6], uint32_t *plen, uint16_t *hlen, char *err,
                        size_t errlen) {
  *plen = loom__get_be32(pre);
  *hlen = loom__get_be16(pre + 4);
  if (*plen < 4 || *plen > HDFS_MAX_PACKET) {
    snprintf(err, errlen, "a packet announcing %u bytes (at least 4, at most %u)", *plen,
             HDFS_MAX_PACKET);
    return LOOM_EPROTO;
  }
  if (!*hlen || *hlen > MAX_HEADER) {
    snprintf(err, errlen, "a packet header of %u bytes (1 to %u)", *hlen, MAX_HEADER);
    return LOOM_EPROTO;
  }
  return 0;
}

int hdfs_packet_decode(const uint8_t *hdr, size_t hlen, uint32_t plen, uint32_t bpc, uint32_t csize,
                       hdfs_packet *out, char *err, size_t errlen) {
  Hadoop__Hdfs__PacketHeaderProto *h = hadoop__hdfs__packet_header_proto__unpack(NULL, hlen, hdr);
  if (!h) {
    snprintf(err, errlen, "a packet header that does not decode (%zu bytes)", hlen);
    return LOOM_EPROTO;
  }
  int rc = 0;
  if (h->datalen < 0 || (uint32_t)h->datalen > plen - 4 || h->offsetinblock < 0) {
    snprintf(err, errlen, "a packet of %d data bytes at block offset %lld in %u", h->datalen,
             (long long)h->offsetinblock, plen);
    rc = LOOM_EPROTO;
  } else if (!bpc) {
    rc = LOOM_EPROTO;
    snprintf(err, errlen, "no checksum chunk size");
  } else {
    uint64_t chunks = ((uint64_t)h->datalen + bpc - 1) / bpc;
    if ((uint64_t)plen - 4 - (uint64_t)h->datalen != chunks * csize) {
      snprintf(err, errlen, "a packet whose %u bytes do not hold %d data bytes and %llu checksums",
               plen, h->datalen, (unsigned long long)chunks);
      rc = LOOM_EPROTO;
    }
  }
  if (rc == 0) {
    out->offset = h->offsetinblock;
    out->seqno = h->seqno;
    out->last = h->lastpacketinblock;
    out->datalen = (uint32_t)h->datalen;
  }
  hadoop__hdfs__packet_header_proto__free_unpacked(h, NULL);
  return rc;
}

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_make(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

/* CRC-32 (IEEE, zlib's), for DataNodes that keep CRC32 checksums. */
static uint32_t crc32_ieee(const uint8_t *p, size_t n) {
  pthread_once(&crc_once, crc_table_make);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

long hdfs_checksums_bad(int type, uint32_t bpc, const uint8_t *sums, const uint8_t *data,
                        size_t len) {
  if (type == HADOOP__HDFS__CHECKSUM_TYPE_PROTO__CHECKSUM_NULL) return -1;
  for (size_t i = 0, at = 0; at < len; i++, at += bpc) {
    size_t n = len - at < bpc ? len - at : bpc;
    uint32_t want = loom__get_be32(sums + 4 * i);
    uint32_t got = type == HADOOP__HDFS__CHECKSUM_TYPE_PROTO__CHECKSUM_CRC32
                       ? crc32_ieee(data + at, n)
                       : loom__crc32c(0, data + at, n);
    if (got != want) return (long)i;
  }
  return -1;
}

/* Appends the request prefix (version, op) and the delimited op. */
int hdfs_put_op(loom__buf *b, uint8_t op, const ProtobufCMessage *msg) {
  uint8_t pre[3 + 10];
  loom__put_be16(pre, DT_VERSION);
  pre[2] = op;
  size_t n = protobuf_c_message_get_packed_size(msg);
  if (n > MAX_REPLY) return LOOM_ERANGE;
  uint8_t *tmp = malloc(n ? n : 1);
  if (!tmp) return LOOM_ENOMEM;
  protobuf_c_message_pack(msg, tmp);
  int rc = loom__buf_add(b, pre, 3 + loom__varint_put(pre + 3, n));
  if (rc == 0) rc = loom__buf_add(b, tmp, n);
  free(tmp);
  return rc;
}

/* Reads a varint-delimited message of desc from fd. */
int hdfs_recv_delimited(int fd, const char *peer, const ProtobufCMessageDescriptor *desc,
                        ProtobufCMessage **out, const char *what, char *err, size_t errlen) {
  *out = NULL;
  uint64_t deadline = loom__now_ms() + HDFS_TIMEOUT_MS;
  uint8_t vb[5];
  uint32_t len = 0;
  size_t i = 0;
  for (;; i++) {
    if (i == sizeof vb) {
      snprintf(err, errlen, "%s: %s: a length prefix longer than 5 bytes", peer, what);
      return LOOM_EPROTO;
    }
    int rc = hipc_recv_fd(fd, peer, vb + i, 1, deadline, HDFS_TIMEOUT_MS, what, err, errlen);
    if (rc < 0) return rc;
    if (!(vb[i] & 0x80)) break;
  }
  if (!loom__varint_get32(vb, i + 1, &len) || len > MAX_REPLY) {
    snprintf(err, errlen, "%s: %s: a message of %u bytes (at most %u)", peer, what, len, MAX_REPLY);
    return LOOM_EPROTO;
  }
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return LOOM_ENOMEM;
  int rc = hipc_recv_fd(fd, peer, buf, len, deadline, HDFS_TIMEOUT_MS, what, err, errlen);
  if (rc == 0 && !(*out = protobuf_c_message_unpack(desc, NULL, len, buf))) {
    snprintf(err, errlen, "%s: %s does not decode (%u bytes)", peer, what, len);
    rc = LOOM_EPROTO;
  }
  free(buf);
  return rc;
}

const char *hdfs_status_name(int s) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&hadoop__hdfs__status__descriptor, s);
  return v ? v->name : "an unknown status";
}

void hdfs_op_header_init(op_header *h, Hadoop__Hdfs__ExtendedBlockProto *b,
                         Hadoop__Common__TokenProto *tok, const char *client) {
  hadoop__hdfs__client_operation_header_proto__init(&h->coh);
  hadoop__hdfs__base_header_proto__init(&h->base);
  h->base.block = b;
  h->base.token = tok;
  h->coh.baseheader = &h->base;
  h->coh.clientname = (char *)client;
}
