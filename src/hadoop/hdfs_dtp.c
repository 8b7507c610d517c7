/* hdfs_dtp.c: DataTransferProtocol's framing, shared by the HDFS read
 * and write: packets' lengths and headers, checksums (CRC32C and CRC32),
 * an operation's request and a DataNode's varint-delimited replies, and
 * the SASL handshake a DataNode with dfs.data.transfer.protection asks of
 * each connection; see hdfs_int.h. */
#include "hadoop/hdfs_int.h"
#include "core/bytes.h"
#include "core/crc32c.h"
#include "hadoop/sasl.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

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

/* ---- the SASL handshake (Hadoop's SaslDataTransferClient) ----------------
 *
 * A DataNode whose dfs.data.transfer.protection is set (the way a secure
 * DataNode runs without root and a privileged port) takes a connection
 * only after SASL: the client writes the magic number 0xDEADBEEF, which no
 * DataTransferProtocol version is, then varint-delimited
 * DataTransferEncryptorMessageProtos: an empty SUCCESS; the DataNode's
 * DIGEST-MD5 challenge; the response, with user and password the block
 * access token's identifier and password (base64) and digest-uri "hdfs/0";
 * the DataNode's rspauth, which proves it knew the token's key. No RPC
 * says what a DataNode wants: the client's own configuration does, as in
 * Java's client. At authentication the stream then goes on as it is; the
 * integrity and privacy layers of the data stream are not built, and are
 * refused with a message that says so. */

#define DT_SASL_MAGIC 0xDEADBEEFu

int hdfs_check_dt_sasl(const void *encryptor_message, const uint8_t **payload, size_t *len,
                       char *err, size_t errlen) {
  const Hadoop__Hdfs__DataTransferEncryptorMessageProto *m = encryptor_message;
  *payload = NULL;
  *len = 0;
  if (m->status !=
      HADOOP__HDFS__DATA_TRANSFER_ENCRYPTOR_MESSAGE_PROTO__DATA_TRANSFER_ENCRYPTOR_STATUS__SUCCESS) {
    bool token = m->has_accesstokenerror && m->accesstokenerror;
    snprintf(err, errlen, "the DataNode refused the SASL handshake%s: %.300s",
             token ? " (the block access token: expired, or of another key)" : "",
             m->message && *m->message ? m->message : "no message");
    return LOOM_EAUTH;
  }
  if (!m->has_payload) {
    snprintf(err, errlen, "a SASL step of the DataNode without a payload");
    return LOOM_EPROTO;
  }
  *payload = m->payload.data;
  *len = m->payload.len;
  return 0;
}

/* Sends one DataTransferEncryptorMessageProto: SUCCESS and payload,
 * varint-delimited, after the magic number when magic. */
static int dt_sasl_send(int fd, const char *peer, bool magic, const void *payload, size_t n,
                        uint64_t deadline, const char *what, char *err, size_t errlen) {
  Hadoop__Hdfs__DataTransferEncryptorMessageProto m =
      HADOOP__HDFS__DATA_TRANSFER_ENCRYPTOR_MESSAGE_PROTO__INIT;
  m.status =
      HADOOP__HDFS__DATA_TRANSFER_ENCRYPTOR_MESSAGE_PROTO__DATA_TRANSFER_ENCRYPTOR_STATUS__SUCCESS;
  m.has_payload = 1;
  m.payload.data = (uint8_t *)payload;
  m.payload.len = n;
  size_t len = protobuf_c_message_get_packed_size(&m.base);
  uint8_t *buf = malloc(4 + 10 + len);
  if (!buf) return LOOM_ENOMEM;
  size_t at = 0;
  if (magic) {
    loom__put_be32(buf, DT_SASL_MAGIC);
    at = 4;
  }
  at += loom__varint_put(buf + at, len);
  protobuf_c_message_pack(&m.base, buf + at);
  int rc = hipc_send_fd(fd, peer, buf, at + len, deadline, what, err, errlen);
  free(buf);
  return rc;
}

/* Receives the DataNode's next step: its payload copied into out (at most
 * cap - 1 bytes, NUL-terminated), its length in *outlen. */
static int dt_sasl_recv(int fd, const char *peer, char *out, size_t cap, size_t *outlen,
                        const char *what, char *err, size_t errlen) {
  ProtobufCMessage *m = NULL;
  int rc = hdfs_recv_delimited(fd, peer,
                               &hadoop__hdfs__data_transfer_encryptor_message_proto__descriptor, &m,
                               what, err, errlen);
  if (rc < 0) return rc;
  const uint8_t *p;
  size_t n;
  char why[512];
  rc = hdfs_check_dt_sasl(m, &p, &n, why, sizeof why);
  if (rc == 0 && n >= cap) {
    snprintf(why, sizeof why, "a SASL step of %zu bytes (at most %zu)", n, cap - 1);
    rc = LOOM_EPROTO;
  }
  if (rc < 0) {
    snprintf(err, errlen, "%s: %s", peer, why);
  } else {
    if (n) memcpy(out, p, n);
    out[n] = 0;
    *outlen = n;
  }
  protobuf_c_message_free_unpacked(m, NULL);
  return rc;
}

int hdfs_dt_sasl(hdfs *fs, int fd, const char *peer, uint32_t xferport,
                 const Hadoop__Common__TokenProto *tok, char *err, size_t errlen) {
  if (!fs->dt_qops || xferport < 1024) return 0;
  if (!(fs->dt_qops & HSASL_QOP_AUTH)) {
    snprintf(err, errlen,
             "%s: dfs.data.transfer.protection in the client's configuration allows only %s: "
             "loom's HDFS client does DataTransferProtocol's SASL at authentication only (the "
             "integrity and privacy layers of the data stream are not built yet)",
             peer, fs->dt_qops & HSASL_QOP_INT ? "integrity or above" : "privacy");
    return LOOM_ENOTSUP;
  }
  if (!tok || !tok->identifier.len) {
    snprintf(err, errlen,
             "%s: the DataNode asks for SASL (dfs.data.transfer.protection) and the NameNode "
             "gave the block no access token (dfs.block.access.token.enable)",
             peer);
    return LOOM_EAUTH;
  }
  uint64_t deadline = loom__now_ms() + HDFS_TIMEOUT_MS;
  char ch_text[4096], resp[12000], fin[512], rspauth[33], why[256];
  size_t n = 0, rl = 0;
  int rc = dt_sasl_send(fd, peer, true, "", 0, deadline, "the SASL start", err, errlen);
  if (rc == 0)
    rc = dt_sasl_recv(fd, peer, ch_text, sizeof ch_text, &n, "the DataNode's SASL challenge", err,
                      errlen);
  hsasl_challenge ch;
  if (rc == 0 && hsasl_parse_challenge((const uint8_t *)ch_text, n, &ch, why, sizeof why) < 0) {
    snprintf(err, errlen, "%s: SASL: %s", peer, why);
    rc = LOOM_EPROTO;
  }
  if (rc == 0 && !hsasl_choose_qop(&ch, HSASL_QOP_AUTH)) {
    snprintf(err, errlen,
             "%s: the DataNode wants qop %s (dfs.data.transfer.protection integrity or privacy): "
             "loom's HDFS client does DataTransferProtocol's SASL at authentication only",
             peer, ch.qop);
    rc = LOOM_ENOTSUP;
  }
  if (rc == 0) {
    uint8_t raw[12];
    char cnonce[17];
    hsasl_token t = {tok->identifier.data, tok->identifier.len, tok->password.data,
                     tok->password.len};
    if (RAND_bytes(raw, sizeof raw) != 1) rc = LOOM_EIO;
    EVP_EncodeBlock((unsigned char *)cnonce, raw, sizeof raw);
    if (rc == 0 && hsasl_response_qop(&ch, &t, "hdfs", "0", cnonce, HSASL_QOP_AUTH, resp,
                                      sizeof resp, &rl, rspauth, NULL) < 0) {
      snprintf(err, errlen, "%s: the block token is too large for a DIGEST-MD5 response", peer);
      rc = LOOM_EINVAL;
    }
  }
  if (rc == 0)
    rc = dt_sasl_send(fd, peer, false, resp, rl, deadline, "the SASL response", err, errlen);
  if (rc == 0)
    rc = dt_sasl_recv(fd, peer, fin, sizeof fin, &n, "the DataNode's SASL outcome", err, errlen);
  if (rc == 0 && hsasl_check_rspauth((const uint8_t *)fin, n, rspauth) < 0) {
    snprintf(err, errlen,
             "%s: SASL: the DataNode's proof (rspauth) does not match the block token: not a "
             "DataNode of this cluster",
             peer);
    rc = LOOM_EAUTH;
  }
  return rc;
}
