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

/* ---- a DataNode connection, through its security layer -------------------- */

void hdfs_dn_init(hdfs_dn *c, int fd) {
  memset(c, 0, sizeof *c);
  c->fd = fd;
}

void hdfs_dn_close(hdfs_dn *c) {
  if (c->fd >= 0) close(c->fd);
  if (c->sl) hsasl_layer_free(c->sl);
  free(c->sl);
  EVP_CIPHER_CTX_free(c->aes_out);
  EVP_CIPHER_CTX_free(c->aes_in);
  free(c->raw);
  free(c->plain);
  hdfs_dn_init(c, -1);
}

/* Makes room for n more bytes at the end of a buffer. */
static int room(uint8_t **b, size_t *cap, size_t len, size_t n) {
  if (len + n <= *cap) return 0;
  size_t want = *cap ? *cap : 1 << 16;
  while (want < len + n) want *= 2;
  uint8_t *g = realloc(*b, want);
  if (!g) return LOOM_ENOMEM;
  *b = g;
  *cap = want;
  return 0;
}

/* AES/CTR over n bytes of in into out (in place when the same). */
static int ctr(void *ctx, const uint8_t *in, size_t n, uint8_t *out) {
  while (n) {
    int k = n > (1u << 30) ? 1 << 30 : (int)n, got = 0;
    if (EVP_CipherUpdate(ctx, out, &got, in, k) != 1 || got != k) return LOOM_EIO;
    in += k;
    out += k;
    n -= (size_t)k;
  }
  return 0;
}

int hdfs_dn_send(hdfs_dn *c, const char *peer, const void *buf, size_t n, uint64_t deadline,
                 const char *what, char *err, size_t errlen) {
  if (c->aes_out) {
    const uint8_t *p = buf;
    uint8_t tmp[1 << 16];
    while (n) {
      size_t k = n < sizeof tmp ? n : sizeof tmp;
      int rc = ctr(c->aes_out, p, k, tmp);
      if (rc == 0) rc = hipc_send_fd(c->fd, peer, tmp, k, deadline, what, err, errlen);
      if (rc < 0) return rc;
      p += k;
      n -= k;
    }
    return 0;
  }
  if (!c->sl) return hipc_send_fd(c->fd, peer, buf, n, deadline, what, err, errlen);
  const uint8_t *p = buf;
  size_t cap = 4 + c->send_max + HSASL_WRAP_OVERHEAD;
  uint8_t *w = malloc(cap);
  if (!w) return LOOM_ENOMEM;
  int rc = 0;
  while (rc == 0 && n) {
    size_t k = n < c->send_max ? n : c->send_max, wl = 0;
    if (hsasl_wrap(c->sl, p, k, w + 4, cap - 4, &wl) < 0) {
      snprintf(err, errlen, "%s: SASL: cannot wrap %s", peer, what);
      rc = LOOM_EPROTO;
      break;
    }
    loom__put_be32(w, (uint32_t)wl);
    rc = hipc_send_fd(c->fd, peer, w, 4 + wl, deadline, what, err, errlen);
    p += k;
    n -= k;
  }
  free(w);
  return rc;
}

int hdfs_dn_take(hdfs_dn *c, const uint8_t *p, size_t n, char *err, size_t errlen) {
  if (room(&c->raw, &c->raw_cap, c->raw_len, n) < 0) return LOOM_ENOMEM;
  if (n) memcpy(c->raw + c->raw_len, p, n);
  c->raw_len += n;
  size_t at = 0;
  int rc = 0;
  while (c->raw_len - at >= 4) {
    uint32_t len = loom__get_be32(c->raw + at);
    if (len > HDFS_DN_MAX_WRAPPED) {
      snprintf(err, errlen, "a SASL-wrapped message of %u bytes (at most %u)", len,
               HDFS_DN_MAX_WRAPPED);
      rc = LOOM_EPROTO;
      break;
    }
    if (c->raw_len - at - 4 < len) break;
    if (!len) { /* Java's wrap of nothing: nothing */
      at += 4;
      continue;
    }
    /* the plain bytes not yet taken go to the front first */
    if (c->plain_off) {
      memmove(c->plain, c->plain + c->plain_off, c->plain_len);
      c->plain_off = 0;
    }
    if (room(&c->plain, &c->plain_cap, c->plain_len, len ? len : 1) < 0) {
      rc = LOOM_ENOMEM;
      break;
    }
    size_t got = 0;
    char why[256];
    if (hsasl_unwrap(c->sl, c->raw + at + 4, len, c->plain + c->plain_len, len, &got, why,
                     sizeof why) < 0) {
      snprintf(err, errlen, "SASL: %s", why);
      rc = LOOM_EPROTO;
      break;
    }
    c->plain_len += got;
    at += 4 + (size_t)len;
  }
  if (at) { /* (no buffer at all until a byte came) */
    memmove(c->raw, c->raw + at, c->raw_len - at);
    c->raw_len -= at;
  }
  return rc;
}

/* Takes up to cap plain bytes into buf. */
static size_t take_plain(hdfs_dn *c, uint8_t *buf, size_t cap) {
  size_t k = c->plain_len < cap ? c->plain_len : cap;
  memcpy(buf, c->plain + c->plain_off, k);
  c->plain_off += k;
  c->plain_len -= k;
  if (!c->plain_len) c->plain_off = 0;
  return k;
}

int hdfs_dn_recv_now(hdfs_dn *c, const char *peer, void *buf, size_t cap, size_t *got, char *err,
                     size_t errlen) {
  *got = 0;
  for (;;) {
    if (c->sl && c->plain_len) {
      *got = take_plain(c, buf, cap);
      return 0;
    }
    uint8_t tmp[1 << 16];
    uint8_t *to = c->sl ? tmp : buf;
    size_t n = c->sl ? sizeof tmp : cap;
    ssize_t r = recv(c->fd, to, n, MSG_DONTWAIT);
    if (r == 0) {
      snprintf(err, errlen, "closed");
      return LOOM_ECONN;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      snprintf(err, errlen, "%s: reading failed: %s", peer, strerror(errno));
      return LOOM_ECONN;
    }
    if (!c->sl) {
      if (c->aes_in && ctr(c->aes_in, buf, (size_t)r, buf) < 0) {
        snprintf(err, errlen, "%s: AES/CTR failed", peer);
        return LOOM_EIO;
      }
      *got = (size_t)r;
      return 0;
    }
    char why[300];
    int rc = hdfs_dn_take(c, tmp, (size_t)r, why, sizeof why);
    if (rc < 0) {
      snprintf(err, errlen, "%s: %s", peer, why);
      return rc;
    }
  }
}

int hdfs_dn_recv(hdfs_dn *c, const char *peer, void *buf, size_t n, uint64_t deadline,
                 int timeout_ms, const char *what, char *err, size_t errlen) {
  if (c->aes_in) {
    int rc = hipc_recv_fd(c->fd, peer, buf, n, deadline, timeout_ms, what, err, errlen);
    if (rc == 0 && ctr(c->aes_in, buf, n, buf) < 0) {
      snprintf(err, errlen, "%s: %s: AES/CTR failed", peer, what);
      rc = LOOM_EIO;
    }
    return rc;
  }
  if (!c->sl) return hipc_recv_fd(c->fd, peer, buf, n, deadline, timeout_ms, what, err, errlen);
  uint8_t *p = buf;
  while (n) {
    if (c->plain_len) {
      size_t k = take_plain(c, p, n);
      p += k;
      n -= k;
      continue;
    }
    /* the rest of the next wrapped message (hdfs_dn_recv_now may have
     * taken a part of it): its length, then its bytes */
    size_t need = 4 - c->raw_len;
    if (c->raw_len >= 4) {
      uint32_t len = loom__get_be32(c->raw);
      if (len > HDFS_DN_MAX_WRAPPED) { /* hdfs_dn_take refused it already */
        snprintf(err, errlen, "%s: %s: a SASL-wrapped message of %u bytes", peer, what, len);
        return LOOM_EPROTO;
      }
      need = 4 + (size_t)len - c->raw_len;
    }
    uint8_t *m = malloc(need ? need : 1);
    if (!m) return LOOM_ENOMEM;
    int rc = hipc_recv_fd(c->fd, peer, m, need, deadline, timeout_ms, what, err, errlen);
    char why[300];
    if (rc == 0 && (rc = hdfs_dn_take(c, m, need, why, sizeof why)) < 0)
      snprintf(err, errlen, "%s: %s: %s", peer, what, why);
    free(m);
    if (rc < 0) return rc;
  }
  return 0;
}

/* An AES/CTR context of key (16, 24 or 32 bytes) and iv (16). */
static void *aes_ctr(const uint8_t *key, size_t klen, const uint8_t *iv, int enc) {
  const EVP_CIPHER *ci = klen == 16   ? EVP_aes_128_ctr()
                         : klen == 24 ? EVP_aes_192_ctr()
                                      : EVP_aes_256_ctr();
  EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
  if (x && EVP_CipherInit_ex(x, ci, NULL, key, iv, enc) == 1) return x;
  EVP_CIPHER_CTX_free(x);
  return NULL;
}

int hdfs_dn_cipher(hdfs_dn *c, const void *cipher_option, char *err, size_t errlen) {
  const Hadoop__Hdfs__CipherOptionProto *o = cipher_option;
  if (!c->sl) {
    snprintf(err, errlen, "a cipher option without a SASL layer to unwrap its keys");
    return LOOM_EPROTO;
  }
  if (o->suite != HADOOP__HDFS__CIPHER_SUITE_PROTO__AES_CTR_NOPADDING) {
    snprintf(err, errlen, "a cipher option of suite %d, not AES/CTR/NoPadding", (int)o->suite);
    return LOOM_EPROTO;
  }
  if (!o->has_inkey || !o->has_outkey || !o->has_iniv || !o->has_outiv || o->iniv.len != 16 ||
      o->outiv.len != 16 || o->inkey.len > 256 || o->outkey.len > 256) {
    snprintf(err, errlen, "a cipher option without both keys and both 16-byte IVs");
    return LOOM_EPROTO;
  }
  /* the DataNode wrapped inKey, then outKey */
  uint8_t in[256], out[256];
  size_t il = 0, ol = 0;
  char why[256];
  if (hsasl_unwrap(c->sl, o->inkey.data, o->inkey.len, in, sizeof in, &il, why, sizeof why) < 0 ||
      hsasl_unwrap(c->sl, o->outkey.data, o->outkey.len, out, sizeof out, &ol, why, sizeof why) <
          0) {
    snprintf(err, errlen, "the cipher option's keys: SASL: %s", why);
    return LOOM_EPROTO;
  }
  if ((il != 16 && il != 24 && il != 32) || ol != il) {
    snprintf(err, errlen, "the cipher option's keys are of %zu and %zu bytes (16, 24 or 32)", il,
             ol);
    return LOOM_EPROTO;
  }
  /* the client writes with inKey/inIv and reads with outKey/outIv (the
   * DataNode the other way round), as Hadoop's createStreamPair */
  void *w = aes_ctr(in, il, o->iniv.data, 1), *r = aes_ctr(out, ol, o->outiv.data, 0);
  OPENSSL_cleanse(in, sizeof in);
  OPENSSL_cleanse(out, sizeof out);
  if (!w || !r) {
    EVP_CIPHER_CTX_free(w);
    EVP_CIPHER_CTX_free(r);
    snprintf(err, errlen, "cannot set up AES/CTR");
    return LOOM_EIO;
  }
  c->aes_out = w;
  c->aes_in = r;
  hsasl_layer_free(c->sl);
  free(c->sl);
  c->sl = NULL;
  return 0;
}

/* Reads a varint-delimited message of desc from c. */
int hdfs_recv_delimited(hdfs_dn *c, const char *peer, const ProtobufCMessageDescriptor *desc,
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
    int rc = hdfs_dn_recv(c, peer, vb + i, 1, deadline, HDFS_TIMEOUT_MS, what, err, errlen);
    if (rc < 0) return rc;
    if (!(vb[i] & 0x80)) break;
  }
  if (!loom__varint_get32(vb, i + 1, &len) || len > MAX_REPLY) {
    snprintf(err, errlen, "%s: %s: a message of %u bytes (at most %u)", peer, what, len, MAX_REPLY);
    return LOOM_EPROTO;
  }
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return LOOM_ENOMEM;
  int rc = hdfs_dn_recv(c, peer, buf, len, deadline, HDFS_TIMEOUT_MS, what, err, errlen);
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
 * Java's client. The qop is the strongest the DataNode offers and the
 * configuration allows. At authentication the stream then goes on as it
 * is; at integrity (auth-int) or privacy (auth-conf, the 3des cipher)
 * every byte after the handshake goes through the security layer
 * (hdfs_dn_send, hdfs_dn_recv), as Java's SaslOutputStream and
 * SaslInputStream do. A cluster with dfs.encrypt.data.transfer (its
 * NameNode's server defaults say so) takes only the encrypted handshake,
 * on every port: the same DIGEST-MD5 with the NameNode's data encryption
 * key (user "keyId blockPoolId base64(nonce)", password base64(key)) at
 * privacy. At privacy, with dfs.encrypt.data.transfer.cipher.suites
 * AES/CTR/NoPadding, the client asks for AES inside the handshake; a
 * DataNode that has it answers the keys (wrapped in the layer) and the
 * stream goes on in AES/CTR instead (hdfs_dn_cipher). */

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
                        bool ask_aes, uint64_t deadline, const char *what, char *err,
                        size_t errlen) {
  Hadoop__Hdfs__DataTransferEncryptorMessageProto m =
      HADOOP__HDFS__DATA_TRANSFER_ENCRYPTOR_MESSAGE_PROTO__INIT;
  m.status =
      HADOOP__HDFS__DATA_TRANSFER_ENCRYPTOR_MESSAGE_PROTO__DATA_TRANSFER_ENCRYPTOR_STATUS__SUCCESS;
  m.has_payload = 1;
  m.payload.data = (uint8_t *)payload;
  m.payload.len = n;
  /* the cipher suites the client takes: AES/CTR/NoPadding, keys to come */
  Hadoop__Hdfs__CipherOptionProto aes = HADOOP__HDFS__CIPHER_OPTION_PROTO__INIT;
  Hadoop__Hdfs__CipherOptionProto *opts[1] = {&aes};
  aes.suite = HADOOP__HDFS__CIPHER_SUITE_PROTO__AES_CTR_NOPADDING;
  if (ask_aes) {
    m.n_cipheroption = 1;
    m.cipheroption = opts;
  }
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
 * cap - 1 bytes, NUL-terminated), its length in *outlen; the message
 * itself into *keep when keep is not NULL (the caller frees it). */
static int dt_sasl_recv(hdfs_dn *c, const char *peer, char *out, size_t cap, size_t *outlen,
                        ProtobufCMessage **keep, const char *what, char *err, size_t errlen) {
  ProtobufCMessage *m = NULL;
  int rc =
      hdfs_recv_delimited(c, peer, &hadoop__hdfs__data_transfer_encryptor_message_proto__descriptor,
                          &m, what, err, errlen);
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
  if (rc == 0 && keep)
    *keep = m;
  else
    protobuf_c_message_free_unpacked(m, NULL);
  return rc;
}

/* A data encryption key is fetched again this long before it expires. */
#define DEK_MARGIN_MS 30000

/* The NameNode's data encryption key as the encrypted handshake uses it,
 * cached on fs until it is about to expire: the user name into user, the
 * password into pass, its cipher ("" when the cluster names none) into
 * alg. */
static int data_key(hdfs *fs, char *user, size_t ulen, char *pass, size_t plen, char *alg,
                    size_t alen, char *err, size_t errlen) {
  pthread_mutex_lock(&fs->dek_mu);
  uint64_t now = (uint64_t)(loom__wall() * 1000.0);
  int rc = 0;
  if (!fs->dek_expiry_ms || now + DEK_MARGIN_MS >= fs->dek_expiry_ms) {
    Hadoop__Hdfs__GetDataEncryptionKeyRequestProto req =
        HADOOP__HDFS__GET_DATA_ENCRYPTION_KEY_REQUEST_PROTO__INIT;
    Hadoop__Hdfs__GetDataEncryptionKeyResponseProto *resp = NULL;
    rc = hdfs_nn_call(fs, "getDataEncryptionKey", &req.base,
                      &hadoop__hdfs__get_data_encryption_key_response_proto__descriptor,
                      (ProtobufCMessage **)&resp, true, err, errlen);
    const Hadoop__Hdfs__DataEncryptionKeyProto *k = rc == 0 ? resp->dataencryptionkey : NULL;
    if (rc == 0 && !k) {
      snprintf(err, errlen,
               "%s asks for encrypted data transfer (dfs.encrypt.data.transfer) and gave no "
               "data encryption key",
               fs->peer);
      rc = LOOM_EPROTO;
    }
    bool bpid_ok = k && k->blockpoolid && *k->blockpoolid && strlen(k->blockpoolid) < 200;
    for (const char *q = bpid_ok ? k->blockpoolid : ""; *q; q++)
      if (*q <= ' ' || *q > '~' || *q == '"' || *q == '\\') bpid_ok = false;
    const char *a = k && k->encryptionalgorithm ? k->encryptionalgorithm : "";
    if (rc == 0 && (!bpid_ok || !k->nonce.len || k->nonce.len > 256 || !k->encryptionkey.len ||
                    k->encryptionkey.len > 128 || strlen(a) >= sizeof fs->dek_alg)) {
      snprintf(err, errlen,
               "%s gave a data encryption key loom cannot use (block pool, nonce "
               "or key out of bounds)",
               fs->peer);
      rc = LOOM_EPROTO;
    }
    if (rc == 0) {
      unsigned char nonce[400], key[200];
      EVP_EncodeBlock(nonce, k->nonce.data, (int)k->nonce.len);
      EVP_EncodeBlock(key, k->encryptionkey.data, (int)k->encryptionkey.len);
      snprintf(fs->dek_user, sizeof fs->dek_user, "%u %s %s", k->keyid, k->blockpoolid,
               (char *)nonce);
      loom__strlcpy(fs->dek_pass, (char *)key, sizeof fs->dek_pass);
      loom__strlcpy(fs->dek_alg, a, sizeof fs->dek_alg);
      fs->dek_expiry_ms = k->expirydate ? k->expirydate : 1;
    }
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  }
  if (rc == 0) {
    loom__strlcpy(user, fs->dek_user, ulen);
    loom__strlcpy(pass, fs->dek_pass, plen);
    loom__strlcpy(alg, fs->dek_alg, alen);
  }
  pthread_mutex_unlock(&fs->dek_mu);
  return rc;
}

/* A DataNode that did not know the key: the next handshake fetches one. */
static void data_key_drop(hdfs *fs) {
  pthread_mutex_lock(&fs->dek_mu);
  fs->dek_expiry_ms = 0;
  pthread_mutex_unlock(&fs->dek_mu);
}

int hdfs_dt_sasl(hdfs *fs, hdfs_dn *c, const char *peer, uint32_t xferport,
                 const Hadoop__Common__TokenProto *tok, char *err, size_t errlen) {
  /* whether the cluster encrypts data transfer: its NameNode's defaults
   * (asked once per NameNode, as Java's client) */
  int drc = hdfs_server_defaults(fs, err, errlen);
  if (drc < 0) return drc;
  bool enc = fs->encrypt_dt;
  if (!enc && (!fs->dt_qops || xferport < 1024)) return 0;
  char user[600], pass[200], alg[32];
  if (enc) {
    drc = data_key(fs, user, sizeof user, pass, sizeof pass, alg, sizeof alg, err, errlen);
    if (drc < 0) return drc;
    if (alg[0] && strcmp(alg, "3des")) {
      snprintf(err, errlen,
               "%s: the cluster encrypts data transfer with %s (dfs.encrypt.data.transfer."
               "algorithm): loom's privacy layer takes 3des",
               peer, alg);
      return LOOM_ENOTSUP;
    }
  } else if (!tok || !tok->identifier.len) {
    snprintf(err, errlen,
             "%s: the DataNode asks for SASL (dfs.data.transfer.protection) and the NameNode "
             "gave the block no access token (dfs.block.access.token.enable)",
             peer);
    return LOOM_EAUTH;
  }
  int fd = c->fd;
  uint64_t deadline = loom__now_ms() + HDFS_TIMEOUT_MS;
  char ch_text[4096], resp[12000], fin[512], rspauth[33], why[256];
  size_t n = 0, rl = 0;
  int rc = dt_sasl_send(fd, peer, true, "", 0, false, deadline, "the SASL start", err, errlen);
  if (rc == 0)
    rc = dt_sasl_recv(c, peer, ch_text, sizeof ch_text, &n, NULL, "the DataNode's SASL challenge",
                      err, errlen);
  hsasl_challenge ch;
  if (rc == 0 && hsasl_parse_challenge((const uint8_t *)ch_text, n, &ch, why, sizeof why) < 0) {
    snprintf(err, errlen, "%s: SASL: %s", peer, why);
    rc = LOOM_EPROTO;
  }
  int qop = 0, allowed = enc ? HSASL_QOP_CONF : fs->dt_qops;
  if (rc == 0 && !(qop = hsasl_choose_qop(&ch, allowed))) {
    char allows[64] = "";
    const char *names[] = {"authentication", "integrity", "privacy"};
    for (int i = 0; i < 3; i++)
      if (allowed & (1 << i))
        snprintf(allows + strlen(allows), sizeof allows - strlen(allows), "%s%s",
                 allows[0] ? ", " : "", names[i]);
    snprintf(err, errlen,
             "%s: SASL: the DataNode offers qop %s%s%s%s and %s allows %s: no level in common",
             peer, ch.qop, ch.cipher[0] ? " (ciphers " : "", ch.cipher,
             ch.cipher[0] ? "; loom's privacy layer takes 3des)" : "",
             enc ? "encrypted data transfer (dfs.encrypt.data.transfer)"
                 : "the client's dfs.data.transfer.protection",
             allows);
    rc = LOOM_ENOTSUP;
  }
  uint8_t ha1[16];
  if (rc == 0) {
    uint8_t raw[12];
    char cnonce[17];
    hsasl_token t = {0};
    if (!enc)
      t = (hsasl_token){tok->identifier.data, tok->identifier.len, tok->password.data,
                        tok->password.len};
    if (RAND_bytes(raw, sizeof raw) != 1) rc = LOOM_EIO;
    EVP_EncodeBlock((unsigned char *)cnonce, raw, sizeof raw);
    if (rc == 0 && (enc ? hsasl_response_user(&ch, user, pass, "hdfs", "0", cnonce, qop, resp,
                                              sizeof resp, &rl, rspauth, ha1)
                        : hsasl_response_qop(&ch, &t, "hdfs", "0", cnonce, qop, resp, sizeof resp,
                                             &rl, rspauth, ha1)) < 0) {
      snprintf(err, errlen, "%s: the %s is too large for a DIGEST-MD5 response", peer,
               enc ? "data encryption key" : "block token");
      rc = LOOM_EINVAL;
    }
  }
  /* at privacy, with dfs.encrypt.data.transfer.cipher.suites, ask for
   * AES/CTR (the only suite Hadoop's client knows) */
  bool ask_aes = false;
  if (rc == 0 && qop == HSASL_QOP_CONF && fs->dt_suites[0]) {
    if (strcmp(fs->dt_suites, "AES/CTR/NoPadding")) {
      snprintf(err, errlen,
               "dfs.encrypt.data.transfer.cipher.suites is '%s': the one cipher suite known is "
               "AES/CTR/NoPadding",
               fs->dt_suites);
      rc = LOOM_EINVAL;
    }
    ask_aes = true;
  }
  if (rc == 0)
    rc = dt_sasl_send(fd, peer, false, resp, rl, ask_aes, deadline, "the SASL response", err,
                      errlen);
  Hadoop__Hdfs__DataTransferEncryptorMessageProto *last = NULL;
  if (rc == 0)
    rc = dt_sasl_recv(c, peer, fin, sizeof fin, &n, (ProtobufCMessage **)&last,
                      "the DataNode's SASL outcome", err, errlen);
  if (rc == 0 && hsasl_check_rspauth((const uint8_t *)fin, n, rspauth) < 0) {
    snprintf(err, errlen,
             "%s: SASL: the DataNode's proof (rspauth) does not match the %s: not a DataNode of "
             "this cluster",
             peer, enc ? "data encryption key" : "block token");
    rc = LOOM_EAUTH;
  }
  if (rc == LOOM_EAUTH && enc) data_key_drop(fs); /* a key it does not know (any more) */
  /* above authentication every byte from here on goes through the layer */
  if (rc == 0 && qop != HSASL_QOP_AUTH) {
    c->sl = calloc(1, sizeof *c->sl);
    if (!c->sl || hsasl_layer_init(c->sl, qop, ha1, 0) < 0) {
      free(c->sl);
      c->sl = NULL;
      snprintf(err, errlen, "%s: SASL: cannot set up the %s layer", peer, hsasl_qop_name(qop));
      rc = LOOM_EIO;
    } else {
      c->send_max = ch.maxbuf > HSASL_WRAP_OVERHEAD + 4 ? ch.maxbuf - HSASL_WRAP_OVERHEAD - 4 : 64;
    }
  }
  /* the DataNode took AES: its keys come wrapped in the layer; a DataNode
   * that does not know AES answers no option, and the layer stays */
  const char *aes_said = "";
  if (rc == 0 && ask_aes && last && last->n_cipheroption) {
    char cwhy[300];
    rc = hdfs_dn_cipher(c, last->cipheroption[0], cwhy, sizeof cwhy);
    if (rc < 0)
      snprintf(err, errlen, "%s: SASL: %s", peer, cwhy);
    else
      aes_said = ", then AES/CTR";
  }
  if (last) protobuf_c_message_free_unpacked(&last->base, NULL);
  if (rc == 0)
    loom__log(LOOM_LOG_DEBUG, "hadoop", "%s: DataTransferProtocol SASL at %s%s%s", peer,
              hsasl_qop_name(qop), enc ? " (encrypted data transfer)" : "", aes_said);
  return rc;
}
