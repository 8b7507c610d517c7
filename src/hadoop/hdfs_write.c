/* hdfs_write.c: writing an HDFS file: create, addBlock, the DataNode
 * pipeline of packets and their acknowledgements, complete; see
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

/* ---- writing ------------------------------------------------------------ */

struct hdfs_writer {
  hdfs *fs;
  char path[HDFS_MAX_PATH];
  char url[HDFS_MAX_PATH + 300];
  uint64_t fileid, blocksize;
  uint32_t replication;
  /* the block being written */
  Hadoop__Hdfs__AddBlockResponseProto *blk;
  hdfs_dn dn;
  char peer[128];
  uint64_t inblock; /* bytes sent in this block */
  int64_t seqno;    /* the next packet's */
  int64_t acked;    /* the last acknowledged */
  uint8_t ackbuf[4096];
  size_t acklen;
  /* the block before (addBlock's previous, complete's last) */
  bool has_prev;
  char prev_pool[256];
  uint64_t prev_id, prev_gs, prev_bytes;
  /* the packet being filled: room for the prefix and header, the
   * checksums, the data */
  uint8_t *pkt;
  size_t fill; /* data bytes in it */
  uint64_t lease_ms;
  uint64_t total;
};

#define PKT_HEAD 64
#define PKT_SUMS (PKT_CHUNKS * 4)

static uint8_t *pkt_data(hdfs_writer *w) { return w->pkt + PKT_HEAD + PKT_SUMS; }

/* The block before the one being asked for (addBlock's previous,
 * complete's last) into b; false when there is none (the file's first). */
static bool prev_block(hdfs_writer *w, Hadoop__Hdfs__ExtendedBlockProto *b) {
  hadoop__hdfs__extended_block_proto__init(b);
  if (!w->has_prev) return false;
  b->poolid = w->prev_pool;
  b->blockid = w->prev_id;
  b->generationstamp = w->prev_gs;
  b->has_numbytes = 1;
  b->numbytes = w->prev_bytes;
  return true;
}

static void writer_free(hdfs_writer *w) {
  hdfs_dn_close(&w->dn);
  if (w->blk) protobuf_c_message_free_unpacked(&w->blk->base, NULL);
  free(w->pkt);
  free(w);
}

int hdfs_create(hdfs *fs, const char *path, bool overwrite, uint32_t replication,
                uint64_t blocksize, hdfs_writer **out, char *err, size_t errlen) {
  *out = NULL;
  int rc = hdfs_server_defaults(fs, err, errlen);
  if (rc < 0) return rc;
  if (blocksize && (blocksize % BPC || blocksize < BPC)) {
    snprintf(err, errlen, "hdfs://%s:%d%s: a block size of %llu is not a multiple of %d", fs->host,
             fs->port, path, (unsigned long long)blocksize, BPC);
    return LOOM_EINVAL;
  }
  hdfs_writer *w = calloc(1, sizeof *w);
  if (!w || !(w->pkt = malloc(PKT_HEAD + PKT_SUMS + PKT_DATA))) {
    free(w);
    return LOOM_ENOMEM;
  }
  w->fs = fs;
  hdfs_dn_init(&w->dn, -1);
  w->acked = -1;
  loom__strlcpy(w->path, path, sizeof w->path);
  snprintf(w->url, sizeof w->url, "hdfs://%s:%d%s", fs->host, fs->port, path);
  w->blocksize = blocksize            ? blocksize
                 : fs->conf_blocksize ? fs->conf_blocksize
                                      : fs->def_blocksize;
  w->replication = replication            ? replication
                   : fs->conf_replication ? fs->conf_replication
                                          : fs->def_replication;
  Hadoop__Hdfs__FsPermissionProto perm = HADOOP__HDFS__FS_PERMISSION_PROTO__INIT;
  perm.perm = 0644;
  Hadoop__Hdfs__CreateRequestProto req = HADOOP__HDFS__CREATE_REQUEST_PROTO__INIT;
  req.src = w->path;
  req.masked = &perm;
  req.clientname = fs->client;
  req.createflag = HADOOP__HDFS__CREATE_FLAG_PROTO__CREATE |
                   (overwrite ? HADOOP__HDFS__CREATE_FLAG_PROTO__OVERWRITE : 0);
  req.createparent = 1;
  req.replication = w->replication;
  req.blocksize = w->blocksize;
  Hadoop__Hdfs__CryptoProtocolVersionProto cv =
      HADOOP__HDFS__CRYPTO_PROTOCOL_VERSION_PROTO__ENCRYPTION_ZONES;
  req.n_cryptoprotocolversion = 1;
  req.cryptoprotocolversion = &cv;
  Hadoop__Hdfs__CreateResponseProto *resp = NULL;
  rc = hdfs_nn_call(fs, "create", &req.base, &hadoop__hdfs__create_response_proto__descriptor,
                    (ProtobufCMessage **)&resp, false, err, errlen);
  if (rc == 0 && (!resp->fs || !resp->fs->has_fileid)) {
    snprintf(err, errlen, "%s: %s created the file but gave no file id", w->url, fs->peer);
    rc = LOOM_EPROTO;
  }
  if (rc == 0) w->fileid = resp->fs->fileid;
  if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  if (rc < 0) {
    writer_free(w);
    return rc;
  }
  w->lease_ms = loom__now_ms();
  *out = w;
  return 0;
}

/* Takes the acknowledgements that are there (wait: at least one, waiting
 * for it). */
static int take_acks(hdfs_writer *w, bool wait, char *err, size_t errlen) {
  uint64_t deadline = loom__now_ms() + HDFS_TIMEOUT_MS;
  for (;;) {
    /* parse whole delimited acks in the buffer */
    bool took = false;
    for (;;) {
      uint32_t len = 0;
      size_t vn = loom__varint_get32(w->ackbuf, w->acklen, &len);
      if (!vn) {
        if (w->acklen >= 5) {
          snprintf(err, errlen, "%s: a malformed acknowledgement length", w->peer);
          return LOOM_EPROTO;
        }
        break;
      }
      if (len > sizeof w->ackbuf - 5) {
        snprintf(err, errlen, "%s: an acknowledgement of %u bytes", w->peer, len);
        return LOOM_EPROTO;
      }
      if (w->acklen < vn + len) break;
      Hadoop__Hdfs__PipelineAckProto *a =
          hadoop__hdfs__pipeline_ack_proto__unpack(NULL, len, w->ackbuf + vn);
      if (!a) {
        snprintf(err, errlen, "%s: an acknowledgement that does not decode", w->peer);
        return LOOM_EPROTO;
      }
      char why[512];
      int rc = hdfs_check_ack(a, w->acked + 1, w->blk->block->n_locs, why, sizeof why);
      if (rc < 0)
        snprintf(err, errlen, "%s: block %llu of %s: %s", w->peer,
                 (unsigned long long)w->blk->block->b->blockid, w->url, why);
      hadoop__hdfs__pipeline_ack_proto__free_unpacked(a, NULL);
      if (rc < 0) return rc;
      w->acked++;
      took = true;
      memmove(w->ackbuf, w->ackbuf + vn + len, w->acklen - vn - len);
      w->acklen -= vn + len;
    }
    if (took) return 0;
    size_t got = 0;
    char why[400];
    int rc = hdfs_dn_recv_now(&w->dn, w->peer, w->ackbuf + w->acklen, sizeof w->ackbuf - w->acklen,
                              &got, why, sizeof why);
    if (rc == 0 && got) {
      w->acklen += got;
      continue;
    }
    if (rc == LOOM_ECONN && !strcmp(why, "closed")) {
      snprintf(err, errlen, "%s closed the pipeline of block %llu of %s", w->peer,
               (unsigned long long)w->blk->block->b->blockid, w->url);
      return LOOM_ECONN;
    }
    if (rc < 0) {
      snprintf(err, errlen, "%s (reading acknowledgements)", why);
      return rc;
    }
    if (!wait) return 0;
    struct pollfd p = {.fd = w->dn.fd, .events = POLLIN};
    uint64_t now = loom__now_ms();
    if (now >= deadline) {
      snprintf(err, errlen, "%s: no acknowledgement of packet %lld within %d ms", w->peer,
               (long long)(w->acked + 1), HDFS_TIMEOUT_MS);
      return LOOM_ETIMEDOUT;
    }
    poll(&p, 1, (int)(deadline - now));
  }
}

static void exclude_free(Hadoop__Hdfs__DatanodeInfoProto **ex, size_t n) {
  for (size_t i = 0; i < n; i++) protobuf_c_message_free_unpacked(&ex[i]->base, NULL);
}

/* Asks for a new block and sets up its pipeline, excluding DataNodes that
 * fail the setup (at most 3 tries). */
static int block_open(hdfs_writer *w, char *err, size_t errlen) {
  Hadoop__Hdfs__DatanodeInfoProto *ex[8];
  size_t nex = 0;
  int rc = 0;
  for (int attempt = 0; attempt < 4; attempt++) {
    Hadoop__Hdfs__ExtendedBlockProto prev;
    Hadoop__Hdfs__AddBlockRequestProto req = HADOOP__HDFS__ADD_BLOCK_REQUEST_PROTO__INIT;
    req.src = w->path;
    req.clientname = w->fs->client;
    req.has_fileid = 1;
    req.fileid = w->fileid;
    if (prev_block(w, &prev)) req.previous = &prev;
    req.n_excludenodes = nex;
    req.excludenodes = ex;
    Hadoop__Hdfs__AddBlockResponseProto *resp = NULL;
    /* the previous block may not be reported by enough DataNodes yet */
    for (int wait_ms = 50;; wait_ms *= 2) {
      rc = hdfs_nn_call(w->fs, "addBlock", &req.base,
                        &hadoop__hdfs__add_block_response_proto__descriptor,
                        (ProtobufCMessage **)&resp, false, err, errlen);
      if (rc != LOOM_EPEER || !strstr(err, "NotReplicatedYetException") || wait_ms > 6400) break;
      usleep((useconds_t)wait_ms * 1000);
    }
    if (rc < 0) break;
    Hadoop__Hdfs__LocatedBlockProto *b = resp->block;
    char why[512];
    if (hdfs_check_block(b, why, sizeof why) < 0) {
      snprintf(err, errlen, "%s: %s %s", w->url, w->fs->peer, why);
      protobuf_c_message_free_unpacked(&resp->base, NULL);
      rc = LOOM_EPROTO;
      break;
    }
    if (!b->n_locs) {
      snprintf(err, errlen, "%s: %s gave block %llu no DataNode", w->url, w->fs->peer,
               (unsigned long long)b->b->blockid);
      protobuf_c_message_free_unpacked(&resp->base, NULL);
      rc = LOOM_EIO;
      break;
    }
    const Hadoop__Hdfs__DatanodeInfoProto *d = b->locs[0];
    snprintf(w->peer, sizeof w->peer, "the DataNode at %s:%u", d->id->ipaddr, d->id->xferport);
    int fd = -1;
    rc = hipc_dial(d->id->ipaddr, (int)d->id->xferport, w->peer, HDFS_TIMEOUT_MS, &fd, err, errlen);
    hdfs_dn c;
    hdfs_dn_init(&c, fd);
    if (rc == 0) rc = hdfs_dt_sasl(w->fs, &c, w->peer, d->id->xferport, b->blocktoken, err, errlen);
    Hadoop__Hdfs__BlockOpResponseProto * or = NULL;
    if (rc == 0) {
      int big = 1 << 20;
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
      op_header h;
      hdfs_op_header_init(&h, b->b, b->blocktoken, w->fs->client);
      Hadoop__Hdfs__ChecksumProto ck = HADOOP__HDFS__CHECKSUM_PROTO__INIT;
      ck.type = HADOOP__HDFS__CHECKSUM_TYPE_PROTO__CHECKSUM_CRC32C;
      ck.bytesperchecksum = BPC;
      Hadoop__Hdfs__OpWriteBlockProto op = HADOOP__HDFS__OP_WRITE_BLOCK_PROTO__INIT;
      op.header = &h.coh;
      op.n_targets = b->n_locs - 1;
      op.targets = b->locs + 1;
      op.stage =
          HADOOP__HDFS__OP_WRITE_BLOCK_PROTO__BLOCK_CONSTRUCTION_STAGE__PIPELINE_SETUP_CREATE;
      op.pipelinesize = (uint32_t)b->n_locs;
      op.latestgenerationstamp = b->b->generationstamp;
      op.requestedchecksum = &ck;
      if (b->n_storagetypes == b->n_locs) {
        op.has_storagetype = 1;
        op.storagetype = b->storagetypes[0];
        op.n_targetstoragetypes = b->n_locs - 1;
        op.targetstoragetypes = b->storagetypes + 1;
      }
      if (b->n_storageids == b->n_locs) {
        op.storageid = b->storageids[0];
        op.n_targetstorageids = b->n_locs - 1;
        op.targetstorageids = b->storageids + 1;
      }
      loom__buf q;
      loom__buf_init(&q, 1 << 20);
      rc = hdfs_put_op(&q, OP_WRITE_BLOCK, &op.base);
      if (rc == 0)
        rc = hdfs_dn_send(&c, w->peer, q.p, q.len, loom__now_ms() + HDFS_TIMEOUT_MS,
                          "the write request", err, errlen);
      loom__buf_free(&q);
      if (rc == 0)
        rc = hdfs_recv_delimited(&c, w->peer, &hadoop__hdfs__block_op_response_proto__descriptor,
                                 (ProtobufCMessage **)& or, "the answer to the write request", err,
                                 errlen);
      if (rc == 0 && or->status != HADOOP__HDFS__STATUS__SUCCESS) {
        snprintf(err, errlen, "%s refused to write block %llu: %s%s%s%s%s", w->peer,
                 (unsigned long long)b->b->blockid, hdfs_status_name(or->status),
                 or->message ? ": " : "", or->message ? or->message : "",
                 or->firstbadlink && * or->firstbadlink ? "; first bad DataNode " : "",
                 or->firstbadlink ? or->firstbadlink : "");
        rc = LOOM_EIO;
      }
    }
    if (rc == 0) {
      if (or) protobuf_c_message_free_unpacked(& or->base, NULL);
      w->blk = resp;
      w->dn = c;
      w->inblock = 0;
      w->seqno = 0;
      w->acked = -1;
      w->acklen = 0;
      break;
    }
    /* the pipeline failed: give the block back, leave out the DataNode that
     * failed (the first bad one the DataNode named, else the first) */
    size_t badi = 0;
    for (size_t i = 0; or && or->firstbadlink && i < b->n_locs; i++) {
      char name[80];
      hdfs_dn_name(b->locs[i], name, sizeof name);
      if (!strcmp(name, or->firstbadlink)) badi = i;
    }
    if (or) protobuf_c_message_free_unpacked(& or->base, NULL);
    hdfs_dn_close(&c);
    loom__log(LOOM_LOG_WARN, "hadoop", "%s: setting up block %llu: %s; trying without %s:%u",
              w->url, (unsigned long long)b->b->blockid, err, b->locs[badi]->id->ipaddr,
              b->locs[badi]->id->xferport);
    Hadoop__Hdfs__AbandonBlockRequestProto ab = HADOOP__HDFS__ABANDON_BLOCK_REQUEST_PROTO__INIT;
    ab.b = b->b;
    ab.src = w->path;
    ab.holder = w->fs->client;
    ab.has_fileid = 1;
    ab.fileid = w->fileid;
    ProtobufCMessage *ar = NULL;
    char aerr[256];
    hdfs_nn_call(w->fs, "abandonBlock", &ab.base,
                 &hadoop__hdfs__abandon_block_response_proto__descriptor, &ar, false, aerr,
                 sizeof aerr);
    if (ar) protobuf_c_message_free_unpacked(ar, NULL);
    if (nex < LOOM__ARRAY_LEN(ex)) {
      /* keep a copy of the DataNode's record: resp is freed below */
      size_t ln = protobuf_c_message_get_packed_size(&b->locs[badi]->base);
      uint8_t *tmp = malloc(ln ? ln : 1);
      if (tmp) {
        protobuf_c_message_pack(&b->locs[badi]->base, tmp);
        ex[nex] = hadoop__hdfs__datanode_info_proto__unpack(NULL, ln, tmp);
        if (ex[nex]) nex++;
        free(tmp);
      }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (rc == LOOM_ENOTSUP) break; /* what the client cannot do, no DataNode takes */
  }
  exclude_free(ex, nex);
  return rc;
}

/* Sends the packet of the w->fill bytes in the buffer (last: the empty
 * packet that ends a block). */
static int send_packet(hdfs_writer *w, bool last, char *err, size_t errlen) {
  size_t n = last ? 0 : w->fill;
  size_t chunks = (n + BPC - 1) / BPC;
  uint8_t *data = pkt_data(w);
  uint8_t *sums = data - chunks * 4;
  for (size_t i = 0; i < chunks; i++) {
    size_t k = n - i * BPC < BPC ? n - i * BPC : BPC;
    loom__put_be32(sums + 4 * i, loom__crc32c(0, data + i * BPC, k));
  }
  Hadoop__Hdfs__PacketHeaderProto h = HADOOP__HDFS__PACKET_HEADER_PROTO__INIT;
  h.offsetinblock = (int64_t)w->inblock;
  h.seqno = w->seqno;
  h.lastpacketinblock = last;
  h.datalen = (int32_t)n;
  size_t hl = protobuf_c_message_get_packed_size(&h.base);
  if (hl + 6 > PKT_HEAD) return LOOM_EPROTO;
  uint8_t *start = sums - hl - 6;
  loom__put_be32(start, (uint32_t)(4 + chunks * 4 + n));
  loom__put_be16(start + 4, (uint16_t)hl);
  protobuf_c_message_pack(&h.base, start + 6);
  int rc = hdfs_dn_send(&w->dn, w->peer, start, (size_t)(data + n - start),
                        loom__now_ms() + HDFS_TIMEOUT_MS, "a data packet", err, errlen);
  if (rc < 0) return rc;
  w->seqno++;
  w->inblock += n;
  w->total += n;
  w->fill = 0;
  /* keep at most MAX_INFLIGHT packets unacknowledged */
  rc = take_acks(w, false, err, errlen);
  while (rc == 0 && w->seqno - 1 - w->acked > MAX_INFLIGHT) rc = take_acks(w, true, err, errlen);
  return rc;
}

/* Ends the block: the empty last packet, every acknowledgement. */
static int block_close(hdfs_writer *w, char *err, size_t errlen) {
  int rc = send_packet(w, true, err, errlen);
  while (rc == 0 && w->acked < w->seqno - 1) rc = take_acks(w, true, err, errlen);
  if (rc < 0) return rc;
  const Hadoop__Hdfs__ExtendedBlockProto *b = w->blk->block->b;
  loom__strlcpy(w->prev_pool, b->poolid, sizeof w->prev_pool);
  w->prev_id = b->blockid;
  w->prev_gs = b->generationstamp;
  w->prev_bytes = w->inblock;
  w->has_prev = true;
  hdfs_dn_close(&w->dn);
  protobuf_c_message_free_unpacked(&w->blk->base, NULL);
  w->blk = NULL;
  return 0;
}

/* Sends the full packet in the buffer, opening and closing blocks around
 * it as needed. */
static int flush_packet(hdfs_writer *w, char *err, size_t errlen) {
  int rc = 0;
  if (!w->blk) rc = block_open(w, err, errlen);
  if (rc == 0) rc = send_packet(w, false, err, errlen);
  if (rc == 0 && w->inblock == w->blocksize) rc = block_close(w, err, errlen);
  if (rc == 0 && loom__now_ms() - w->lease_ms > LEASE_RENEW_MS) {
    hdfs_renew_lease(w->fs);
    w->lease_ms = loom__now_ms();
  }
  return rc;
}

int hdfs_write(hdfs_writer *w, const void *buf, size_t n, char *err, size_t errlen) {
  const uint8_t *p = buf;
  while (n) {
    /* a packet never crosses a block's end */
    uint64_t room = w->blocksize - w->inblock - w->fill;
    size_t cap = PKT_DATA - w->fill;
    if (cap > room) cap = (size_t)room;
    size_t k = n < cap ? n : cap;
    memcpy(pkt_data(w) + w->fill, p, k);
    w->fill += k;
    p += k;
    n -= k;
    if (w->fill == PKT_DATA || w->inblock + w->fill == w->blocksize) {
      int rc = flush_packet(w, err, errlen);
      if (rc < 0) return rc;
    }
  }
  return 0;
}

static int complete(hdfs_writer *w, char *err, size_t errlen) {
  Hadoop__Hdfs__ExtendedBlockProto last;
  Hadoop__Hdfs__CompleteRequestProto req = HADOOP__HDFS__COMPLETE_REQUEST_PROTO__INIT;
  req.src = w->path;
  req.clientname = w->fs->client;
  req.has_fileid = 1;
  req.fileid = w->fileid;
  if (prev_block(w, &last)) req.last = &last;
  /* false until the DataNodes reported the last block: ask again */
  uint64_t deadline = loom__now_ms() + HDFS_TIMEOUT_MS;
  for (int wait_ms = 20;; wait_ms = wait_ms < 800 ? wait_ms * 2 : wait_ms) {
    Hadoop__Hdfs__CompleteResponseProto *resp = NULL;
    int rc = hdfs_nn_call(w->fs, "complete", &req.base,
                          &hadoop__hdfs__complete_response_proto__descriptor,
                          (ProtobufCMessage **)&resp, true, err, errlen);
    bool done = rc == 0 && resp->result;
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (rc < 0 || done) return rc;
    if (loom__now_ms() > deadline) {
      snprintf(err, errlen,
               "%s: %s did not complete the file within %d ms (its last block not "
               "reported by enough DataNodes)",
               w->url, w->fs->peer, HDFS_TIMEOUT_MS);
      return LOOM_ETIMEDOUT;
    }
    usleep((useconds_t)wait_ms * 1000);
  }
}

int hdfs_close_file(hdfs_writer *w, char *err, size_t errlen) {
  int rc = 0;
  if (w->fill) rc = flush_packet(w, err, errlen);
  if (rc == 0 && w->blk) rc = block_close(w, err, errlen);
  if (rc == 0) rc = complete(w, err, errlen);
  if (rc < 0) {
    hdfs_abort(w);
    return rc;
  }
  writer_free(w);
  return 0;
}

void hdfs_abort(hdfs_writer *w) {
  if (!w) return;
  hdfs_dn_close(&w->dn);
  char err[256];
  hdfs_delete(w->fs, w->path, false, err, sizeof err);
  writer_free(w);
}
