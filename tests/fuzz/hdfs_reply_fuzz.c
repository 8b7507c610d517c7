/* hdfs_reply_fuzz.c: libFuzzer harness for what loom's HDFS client
 * (src/hadoop/hdfs.c) reads from a NameNode and from DataNodes. The first
 * byte picks what the rest is:
 *   0  a DataNode's data packet: a checksum type byte, then the packet as
 *      sent (4-byte length, 2-byte header length, header, checksums, data):
 *      hdfs_packet_lengths, hdfs_packet_decode, hdfs_checksums_bad;
 *   1  a DataNode's answer to a read request (BlockOpResponseProto), then
 *      hdfs_check_read_reply at the offset of the next 8 bytes;
 *   2  a pipeline acknowledgement (PipelineAckProto), hdfs_check_ack;
 *   3+ a NameNode reply frame (4-byte length, then the frame) to
 *      getFileInfo, getListing, getBlockLocations, addBlock or create,
 *      hipc_decode_response, then hdfs_stat_of / hdfs_check_located /
 *      hdfs_check_block on what it holds;
 *   255 a DataNode's step of the SASL handshake
 *      (DataTransferEncryptorMessageProto): hdfs_check_dt_sasl, then its
 *      payload as a DIGEST-MD5 challenge (hsasl_parse_challenge);
 *   254 a DataNode's stream under the SASL security layer (integrity or
 *      privacy by the next byte's bit 0): with bit 1 the rest as bytes
 *      that arrive (hdfs_dn_take, in two parts split at the byte after);
 *      without it the rest as plain bytes the DataNode's side wraps in
 *      messages of up to 255 bytes (the byte after says how many), which
 *      loom's side must take back exactly;
 *   253 a DataNode's cipher option (CipherOptionProto), its keys wrapped
 *      by the DataNode's side of a layer at privacy from the key bytes
 *      that follow it when the next byte is odd, else as they are:
 *      hdfs_dn_cipher.
 * Aborts when a check's contract breaks: a packet accepted whose parts do
 * not add up to its length, a read reply accepted with a chunk offset past
 * the offset or a checksum size out of range, an error without a message,
 * a file status name that is not NUL-terminated printable text. Seeds:
 * tests/fuzz/make_seeds.c, from protobuf-c's encoders of the same
 * messages. */
#include "ClientNamenodeProtocol.pb-c.h"
#include "core/bytes.h"
#include "datatransfer.pb-c.h"
#include "hadoop/hdfs.h"
#include "hadoop/hdfs_int.h"
#include "hadoop/ipc.h"
#include "hadoop/sasl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *copy(const uint8_t *p, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  if (c) memcpy(c, p, n);
  return c;
}

static void packet(const uint8_t *d, size_t n) {
  if (n < 7) return;
  int type = d[0] % 3;
  uint32_t csize = type ? 4 : 0, bpc = type ? 512 : (1u << 20);
  char err[512] = "";
  uint32_t plen;
  uint16_t hlen;
  if (hdfs_packet_lengths(d + 1, &plen, &hlen, err, sizeof err) < 0) {
    if (!err[0]) abort();
    return;
  }
  d += 7;
  n -= 7;
  if (hlen > n) return;
  uint8_t *h = copy(d, hlen);
  if (!h) return;
  hdfs_packet p;
  err[0] = 0;
  int rc = hdfs_packet_decode(h, hlen, plen, bpc, csize, &p, err, sizeof err);
  free(h);
  if (rc < 0) {
    if (!err[0]) abort();
    return;
  }
  if (p.datalen > plen - 4) abort();
  size_t body = plen - 4;
  uint64_t chunks = ((uint64_t)p.datalen + bpc - 1) / bpc;
  if (body - p.datalen != chunks * csize) abort();
  if (body > n - hlen) return;
  uint8_t *b = copy(d + hlen, body);
  if (!b) return;
  long bad = hdfs_checksums_bad(type, bpc, b, b + (body - p.datalen), p.datalen);
  if (bad >= 0 && (uint64_t)bad >= chunks) abort();
  free(b);
}

static void read_reply(const uint8_t *d, size_t n) {
  if (n < 8) return;
  uint64_t off = loom__get_be64(d);
  uint8_t *m = copy(d + 8, n - 8);
  if (!m) return;
  Hadoop__Hdfs__BlockOpResponseProto *r =
      hadoop__hdfs__block_op_response_proto__unpack(NULL, n - 8, m);
  free(m);
  if (!r) return;
  int type = -1;
  uint32_t bpc = 0;
  uint64_t chunk = 0;
  char err[512] = "";
  if (hdfs_check_read_reply(r, off, &type, &bpc, &chunk, err, sizeof err) == 0) {
    if (type < 0 || type > 2 || !bpc || bpc > (1u << 20) || chunk > off) abort();
  } else if (!err[0]) {
    abort();
  }
  hadoop__hdfs__block_op_response_proto__free_unpacked(r, NULL);
}

static void ack(const uint8_t *d, size_t n) {
  if (n < 2) return;
  uint8_t *m = copy(d + 1, n - 1);
  if (!m) return;
  Hadoop__Hdfs__PipelineAckProto *a = hadoop__hdfs__pipeline_ack_proto__unpack(NULL, n - 1, m);
  free(m);
  if (!a) return;
  char err[512] = "";
  if (hdfs_check_ack(a, (int64_t)(d[0] & 7), d[0] >> 4, err, sizeof err) < 0 && !err[0]) abort();
  hadoop__hdfs__pipeline_ack_proto__free_unpacked(a, NULL);
}

static void printable(const char *s, size_t cap) {
  size_t n = strnlen(s, cap);
  if (n == cap) abort();
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20) abort();
}

static void stat_check(const Hadoop__Hdfs__HdfsFileStatusProto *p) {
  hdfs_stat st;
  hdfs_stat_of(p, &st, true);
  printable(st.name, sizeof st.name);
  if (st.perm > 07777) abort();
}

static void nn_reply(uint8_t which, const uint8_t *d, size_t n) {
  static const ProtobufCMessageDescriptor *const descs[] = {
      &hadoop__hdfs__get_file_info_response_proto__descriptor,
      &hadoop__hdfs__get_listing_response_proto__descriptor,
      &hadoop__hdfs__get_block_locations_response_proto__descriptor,
      &hadoop__hdfs__add_block_response_proto__descriptor,
      &hadoop__hdfs__create_response_proto__descriptor,
  };
  size_t k = which % (sizeof descs / sizeof descs[0]);
  char err[512] = "";
  uint32_t len;
  if (n < 4) return;
  if (hipc_frame_length(d, &len, err, sizeof err) < 0) return;
  if (len > n - 4) return;
  uint8_t *frame = copy(d + 4, len);
  if (!frame) return;
  hipc_response r;
  int rc = hipc_decode_response(frame, len, descs[k], &r, err, sizeof err);
  free(frame);
  if (rc < 0) return;
  if (r.status == 0 && r.body) {
    switch (k) {
    case 0: {
      Hadoop__Hdfs__GetFileInfoResponseProto *m = (void *)r.body;
      if (m->fs) stat_check(m->fs);
      break;
    }
    case 1: {
      Hadoop__Hdfs__GetListingResponseProto *m = (void *)r.body;
      for (size_t i = 0; m->dirlist && i < m->dirlist->n_partiallisting; i++)
        stat_check(m->dirlist->partiallisting[i]);
      break;
    }
    case 2: {
      Hadoop__Hdfs__GetBlockLocationsResponseProto *m = (void *)r.body;
      err[0] = 0;
      if (m->locations && hdfs_check_located(m->locations, err, sizeof err) < 0 && !err[0]) abort();
      break;
    }
    case 3: {
      Hadoop__Hdfs__AddBlockResponseProto *m = (void *)r.body;
      err[0] = 0;
      if (hdfs_check_block(m->block, err, sizeof err) < 0 && !err[0]) abort();
      break;
    }
    default: {
      Hadoop__Hdfs__CreateResponseProto *m = (void *)r.body;
      if (m->fs) stat_check(m->fs);
    }
    }
  }
  hipc_response_free(&r);
}

static void dt_sasl(const uint8_t *d, size_t n) {
  uint8_t *m = copy(d, n);
  if (!m) return;
  Hadoop__Hdfs__DataTransferEncryptorMessageProto *e =
      hadoop__hdfs__data_transfer_encryptor_message_proto__unpack(NULL, n, m);
  free(m);
  if (!e) return;
  const uint8_t *p;
  size_t len;
  char err[512] = "";
  int rc = hdfs_check_dt_sasl(e, &p, &len, err, sizeof err);
  if (rc < 0 && !err[0]) abort();
  if (rc == 0) {
    if (len && !p) abort();
    hsasl_challenge c;
    err[0] = 0;
    if (hsasl_parse_challenge(p, len, &c, err, sizeof err) < 0 && !err[0]) abort();
  }
  protobuf_c_message_free_unpacked(&e->base, NULL);
}

static void layered(const uint8_t *d, size_t n) {
  if (n < 2) return;
  int qop = d[0] & 1 ? HSASL_QOP_CONF : HSASL_QOP_INT;
  bool raw = d[0] & 2;
  size_t cut = d[1];
  d += 2;
  n -= 2;
  uint8_t ha1[16] = {1, 2, 3};
  hdfs_dn c;
  hdfs_dn_init(&c, -1);
  c.sl = calloc(1, sizeof *c.sl);
  if (!c.sl || hsasl_layer_init(c.sl, qop, ha1, 0) < 0) abort();
  char err[512] = "";
  if (raw) {
    size_t a = cut < n ? cut : n;
    int rc = hdfs_dn_take(&c, d, a, err, sizeof err);
    if (rc == 0) rc = hdfs_dn_take(&c, d + a, n - a, err, sizeof err);
    if (rc < 0 && !err[0]) abort();
    if (c.plain_len > n) abort(); /* unwrapping never grows */
    hdfs_dn_close(&c);
    return;
  }
  /* the DataNode's side wraps; loom's takes back what it wrapped */
  hsasl_layer srv;
  if (hsasl_layer_init(&srv, qop, ha1, 1) < 0) abort();
  size_t per = cut ? cut : 1;
  for (size_t at = 0; at < n; at += per) {
    size_t k = n - at < per ? n - at : per, wl = 0;
    uint8_t w[4 + 255 + HSASL_WRAP_OVERHEAD];
    if (hsasl_wrap(&srv, d + at, k, w + 4, sizeof w - 4, &wl) < 0) abort();
    loom__put_be32(w, (uint32_t)wl);
    /* in two parts: a message may arrive cut anywhere */
    size_t half = (4 + wl) / 2;
    if (hdfs_dn_take(&c, w, half, err, sizeof err) < 0 ||
        hdfs_dn_take(&c, w + half, 4 + wl - half, err, sizeof err) < 0)
      abort();
  }
  if (c.plain_len != n || c.raw_len || (n && memcmp(c.plain + c.plain_off, d, n))) abort();
  hsasl_layer_free(&srv);
  hdfs_dn_close(&c);
}

static void cipher_option(const uint8_t *d, size_t n) {
  if (n < 2) return;
  bool wrap = d[0] & 1;
  size_t olen = d[1] < n - 2 ? d[1] : n - 2;
  uint8_t *m = copy(d + 2, olen);
  if (!m) return;
  Hadoop__Hdfs__CipherOptionProto *o = hadoop__hdfs__cipher_option_proto__unpack(NULL, olen, m);
  free(m);
  if (!o) return;
  uint8_t ha1[16] = {9, 8, 7};
  hdfs_dn c;
  hdfs_dn_init(&c, -1);
  c.sl = calloc(1, sizeof *c.sl);
  if (!c.sl || hsasl_layer_init(c.sl, HSASL_QOP_CONF, ha1, 0) < 0) abort();
  /* keys the DataNode's side wraps: the bytes after the option, halved */
  uint8_t wi[64 + HSASL_WRAP_OVERHEAD], wo[64 + HSASL_WRAP_OVERHEAD];
  size_t rest = n - 2 - olen, half = rest / 2 > 64 ? 64 : rest / 2, il = 0, ol = 0;
  hsasl_layer srv;
  if (hsasl_layer_init(&srv, HSASL_QOP_CONF, ha1, 1) < 0) abort();
  /* the unpacker's own keys, given back before it frees them */
  ProtobufCBinaryData oi = o->inkey, oo = o->outkey;
  protobuf_c_boolean hi = o->has_inkey, ho = o->has_outkey;
  if (wrap && half && hsasl_wrap(&srv, d + 2 + olen, half, wi, sizeof wi, &il) == 0 &&
      hsasl_wrap(&srv, d + 2 + olen + half, half, wo, sizeof wo, &ol) == 0) {
    o->has_inkey = o->has_outkey = 1;
    o->inkey = (ProtobufCBinaryData){il, wi};
    o->outkey = (ProtobufCBinaryData){ol, wo};
  }
  char err[512] = "";
  int rc = hdfs_dn_cipher(&c, o, err, sizeof err);
  if (rc < 0 && !err[0]) abort();
  if (rc == 0 && (!c.aes_out || !c.aes_in || c.sl)) abort();
  if (rc == 0 && !(wrap && (half == 16 || half == 24 || half == 32))) abort();
  o->inkey = oi;
  o->outkey = oo;
  o->has_inkey = hi;
  o->has_outkey = ho;
  hsasl_layer_free(&srv);
  hdfs_dn_close(&c);
  hadoop__hdfs__cipher_option_proto__free_unpacked(o, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  switch (data[0]) {
  case 253:
    cipher_option(data + 1, size - 1);
    break;
  case 254:
    layered(data + 1, size - 1);
    break;
  case 255:
    dt_sasl(data + 1, size - 1);
    break;
  case 0:
    packet(data + 1, size - 1);
    break;
  case 1:
    read_reply(data + 1, size - 1);
    break;
  case 2:
    ack(data + 1, size - 1);
    break;
  default:
    nn_reply(data[0] - 3, data + 1, size - 1);
  }
  return 0;
}
