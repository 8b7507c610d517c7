/* hdfs_read.c: reading an HDFS file: its blocks' locations from the
 * NameNode, a stream of packets from a DataNode with its checksums
 * verified, and failover to another replica; see hdfs_int.h. */
#include "hadoop/hdfs_int.h"
#include "core/bytes.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- reading ------------------------------------------------------------ */

typedef struct {
  char addr[64];
  int port;
} dn_addr;

struct hdfs_reader {
  hdfs *fs;
  char path[HDFS_MAX_PATH];
  char url[HDFS_MAX_PATH + 300];
  uint64_t size;
  Hadoop__Hdfs__LocatedBlocksProto *lbs; /* the blocks known: a range of them */
  Hadoop__Hdfs__GetBlockLocationsResponseProto *lresp;
  int failovers;
  /* the stream */
  hdfs_dn dn;
  int sblock; /* index in lbs->blocks */
  int sdn;    /* index in that block's locs */
  char speer[128];
  uint64_t spos; /* file offset of the next byte the stream gives */
  uint64_t send; /* file offset where the requested range ends */
  int ctype;
  uint32_t bpc, csize;
  uint8_t *pkt; /* the current packet: checksums then data */
  size_t pkt_cap;
  uint8_t *data;    /* verified data of the current packet not handed out */
  size_t data_left; /* ... how much */
  bool last_seen;
  /* replicas given up on, per block id: (block id, location index) */
  struct {
    uint64_t block;
    char addr[80];
    char why[200];
  } bad[32];
  int nbad;
};

static void stream_close(hdfs_reader *r) {
  hdfs_dn_close(&r->dn);
  r->data_left = 0;
  r->sblock = -1;
}

/* Asks the NameNode for the blocks of [off, off + len). */
static int locate(hdfs_reader *r, uint64_t off, char *err, size_t errlen) {
  Hadoop__Hdfs__GetBlockLocationsRequestProto req =
      HADOOP__HDFS__GET_BLOCK_LOCATIONS_REQUEST_PROTO__INIT;
  req.src = r->path;
  req.offset = off;
  req.length = r->size > off ? r->size - off : 1;
  Hadoop__Hdfs__GetBlockLocationsResponseProto *resp = NULL;
  int rc = hdfs_nn_call(r->fs, "getBlockLocations", &req.base,
                        &hadoop__hdfs__get_block_locations_response_proto__descriptor,
                        (ProtobufCMessage **)&resp, true, err, errlen);
  if (rc == 0 && !resp->locations) {
    snprintf(err, errlen, "%s: no such file", r->url);
    rc = LOOM_ENOENT;
  }
  if (rc == 0) {
    char why[512];
    if ((rc = hdfs_check_located(resp->locations, why, sizeof why)) < 0)
      snprintf(err, errlen, "%s: %s %s", r->url, r->fs->peer, why);
  }
  if (rc < 0) {
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
  }
  if (r->lresp) protobuf_c_message_free_unpacked(&r->lresp->base, NULL);
  r->lresp = resp;
  r->lbs = resp->locations;
  r->sblock = -1;
  return 0;
}

int hdfs_open(hdfs *fs, const char *path, hdfs_reader **out, char *err, size_t errlen) {
  *out = NULL;
  hdfs_reader *r = calloc(1, sizeof *r);
  if (!r) return LOOM_ENOMEM;
  r->fs = fs;
  hdfs_dn_init(&r->dn, -1);
  r->sblock = -1;
  loom__strlcpy(r->path, path, sizeof r->path);
  snprintf(r->url, sizeof r->url, "hdfs://%s:%d%s", fs->host, fs->port, path);
  hdfs_stat st;
  int rc = hdfs_stat_path(fs, path, &st, err, errlen);
  if (rc == 0 && st.dir) {
    snprintf(err, errlen, "%s is a directory", r->url);
    rc = LOOM_ESTATE;
  }
  if (rc == 0) {
    r->size = st.length;
    rc = locate(r, 0, err, errlen);
  }
  if (rc == 0 && r->lbs->underconstruction && r->lbs->filelength > r->size)
    r->size = r->lbs->filelength;
  if (rc < 0) {
    hdfs_reader_close(r);
    return rc;
  }
  *out = r;
  return 0;
}

uint64_t hdfs_reader_size(const hdfs_reader *r) { return r->size; }
int hdfs_reader_failovers(const hdfs_reader *r) { return r->failovers; }

void hdfs_reader_close(hdfs_reader *r) {
  if (!r) return;
  stream_close(r);
  if (r->lresp) protobuf_c_message_free_unpacked(&r->lresp->base, NULL);
  free(r->pkt);
  free(r);
}

/* The index of the known block holding byte off, or -1. */
static int block_at(const hdfs_reader *r, uint64_t off) {
  if (!r->lbs) return -1;
  for (size_t i = 0; i < r->lbs->n_blocks; i++) {
    const Hadoop__Hdfs__LocatedBlockProto *b = r->lbs->blocks[i];
    if (off >= b->offset && off - b->offset < b->b->numbytes) return (int)i;
  }
  return -1;
}

static bool is_bad(const hdfs_reader *r, uint64_t block, const char *addr) {
  for (int i = 0; i < r->nbad; i++)
    if (r->bad[i].block == block && !strcmp(r->bad[i].addr, addr)) return true;
  return false;
}

static void mark_bad(hdfs_reader *r, uint64_t block, const char *addr, const char *why) {
  r->failovers++;
  loom__log(LOOM_LOG_WARN, "hadoop", "%s: block %llu on %s: %s; trying another replica", r->url,
            (unsigned long long)block, addr, why);
  if (r->nbad == (int)LOOM__ARRAY_LEN(r->bad)) {
    memmove(&r->bad[0], &r->bad[1], sizeof r->bad - sizeof r->bad[0]);
    r->nbad--;
  }
  r->bad[r->nbad].block = block;
  loom__strlcpy(r->bad[r->nbad].addr, addr, sizeof r->bad[0].addr);
  loom__strlcpy(r->bad[r->nbad].why, why, sizeof r->bad[0].why);
  r->nbad++;
}

void hdfs_dn_name(const Hadoop__Hdfs__DatanodeInfoProto *d, char *out, size_t len) {
  snprintf(out, len, "%s:%u", d->id->ipaddr, d->id->xferport);
}

/* Opens a stream of block bi from file offset off to the block's end on
 * location li. */
static int stream_open(hdfs_reader *r, int bi, int li, uint64_t off, char *err, size_t errlen) {
  Hadoop__Hdfs__LocatedBlockProto *b = r->lbs->blocks[bi];
  const Hadoop__Hdfs__DatanodeInfoProto *d = b->locs[li];
  char peer[128];
  snprintf(peer, sizeof peer, "the DataNode at %s:%u", d->id->ipaddr, d->id->xferport);
  int fd = -1;
  int rc = hipc_dial(d->id->ipaddr, (int)d->id->xferport, peer, HDFS_TIMEOUT_MS, &fd, err, errlen);
  if (rc < 0) return rc;
  hdfs_dn c;
  hdfs_dn_init(&c, fd);
  rc = hdfs_dt_sasl(r->fs, &c, peer, d->id->xferport, b->blocktoken, err, errlen);
  if (rc < 0) {
    hdfs_dn_close(&c);
    return rc;
  }
  int big = 1 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  op_header h;
  hdfs_op_header_init(&h, b->b, b->blocktoken, r->fs->client);
  Hadoop__Hdfs__OpReadBlockProto op = HADOOP__HDFS__OP_READ_BLOCK_PROTO__INIT;
  op.header = &h.coh;
  op.offset = off - b->offset;
  op.len = b->b->numbytes - op.offset;
  loom__buf q;
  loom__buf_init(&q, 1 << 20);
  rc = hdfs_put_op(&q, OP_READ_BLOCK, &op.base);
  uint64_t deadline = loom__now_ms() + HDFS_TIMEOUT_MS;
  if (rc == 0) rc = hdfs_dn_send(&c, peer, q.p, q.len, deadline, "the read request", err, errlen);
  loom__buf_free(&q);
  Hadoop__Hdfs__BlockOpResponseProto *resp = NULL;
  if (rc == 0)
    rc = hdfs_recv_delimited(&c, peer, &hadoop__hdfs__block_op_response_proto__descriptor,
                             (ProtobufCMessage **)&resp, "the answer to the read request", err,
                             errlen);
  if (rc == 0) {
    int t = 0;
    uint32_t bpc = 0;
    uint64_t chunk = 0;
    char why[512];
    rc = hdfs_check_read_reply(resp, op.offset, &t, &bpc, &chunk, why, sizeof why);
    if (rc < 0) {
      snprintf(err, errlen, "%s, reading block %llu: %s", peer, (unsigned long long)b->b->blockid,
               why);
    } else {
      r->ctype = t;
      r->bpc = t == 0 ? (1u << 20) : bpc;
      r->csize = t == 0 ? 0 : 4;
      /* the stream starts at the chunk's start: the bytes before off are
       * read, checked and dropped */
      r->spos = b->offset + chunk;
    }
  }
  if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  if (rc < 0) {
    hdfs_dn_close(&c);
    return rc;
  }
  r->dn = c;
  r->sblock = bi;
  r->sdn = li;
  r->send = b->offset + b->b->numbytes;
  r->data_left = 0;
  r->last_seen = false;
  loom__strlcpy(r->speer, peer, sizeof r->speer);
  return 0;
}

/* Reads the stream's next packet and checks it. */
static int next_packet(hdfs_reader *r, char *err, size_t errlen) {
  uint64_t deadline = loom__now_ms() + HDFS_TIMEOUT_MS;
  uint8_t pre[6];
  int rc = hdfs_dn_recv(&r->dn, r->speer, pre, 6, deadline, HDFS_TIMEOUT_MS, "a data packet", err,
                        errlen);
  uint32_t plen = 0;
  uint16_t hlen = 0;
  char why[256];
  if (rc == 0 && (rc = hdfs_packet_lengths(pre, &plen, &hlen, why, sizeof why)) < 0)
    snprintf(err, errlen, "%s: %s", r->speer, why);
  uint8_t hdr[MAX_HEADER];
  if (rc == 0)
    rc = hdfs_dn_recv(&r->dn, r->speer, hdr, hlen, deadline, HDFS_TIMEOUT_MS, "a packet header",
                      err, errlen);
  hdfs_packet p;
  if (rc == 0 &&
      (rc = hdfs_packet_decode(hdr, hlen, plen, r->bpc, r->csize, &p, why, sizeof why)) < 0)
    snprintf(err, errlen, "%s: %s", r->speer, why);
  size_t body = plen - 4;
  if (rc == 0 && body > r->pkt_cap) {
    uint8_t *np = realloc(r->pkt, body);
    if (!np) return LOOM_ENOMEM;
    r->pkt = np;
    r->pkt_cap = body;
  }
  if (rc == 0)
    rc = hdfs_dn_recv(&r->dn, r->speer, r->pkt, body, deadline, HDFS_TIMEOUT_MS, "packet data", err,
                      errlen);
  if (rc < 0) return rc;
  const Hadoop__Hdfs__LocatedBlockProto *b = r->lbs->blocks[r->sblock];
  uint64_t at = b->offset + (uint64_t)p.offset;
  if (p.last && !p.datalen) {
    r->last_seen = true;
    if (r->spos != r->send) {
      snprintf(err, errlen, "%s ended block %llu at %llu, before its end at %llu", r->speer,
               (unsigned long long)b->b->blockid, (unsigned long long)r->spos,
               (unsigned long long)r->send);
      return LOOM_EPROTO;
    }
    return 0;
  }
  if (at != r->spos || p.datalen > r->send - r->spos) {
    snprintf(err, errlen, "%s sent bytes %llu+%u of block %llu where %llu (up to %llu) was next",
             r->speer, (unsigned long long)p.offset, p.datalen, (unsigned long long)b->b->blockid,
             (unsigned long long)(r->spos - b->offset), (unsigned long long)(r->send - b->offset));
    return LOOM_EPROTO;
  }
  size_t sums = body - p.datalen;
  uint8_t *data = r->pkt + sums;
  long bad = hdfs_checksums_bad(r->ctype, r->bpc, r->pkt, data, p.datalen);
  if (bad >= 0) {
    snprintf(err, errlen, "%s: checksum mismatch in block %llu at block offset %llu", r->speer,
             (unsigned long long)b->b->blockid,
             (unsigned long long)((uint64_t)p.offset + (uint64_t)bad * r->bpc));
    return LOOM_EIO;
  }
  r->data = data;
  r->data_left = p.datalen;
  return 0;
}

/* Sends CHECKSUM_OK once a block's range was read whole, as the DataNode
 * expects (it then keeps no error in its log). */
static void read_done(hdfs_reader *r) {
  Hadoop__Hdfs__ClientReadStatusProto s = HADOOP__HDFS__CLIENT_READ_STATUS_PROTO__INIT;
  s.status = HADOOP__HDFS__STATUS__CHECKSUM_OK;
  uint8_t buf[16];
  size_t n = protobuf_c_message_get_packed_size(&s.base);
  if (n + 1 <= sizeof buf) {
    buf[0] = (uint8_t)n;
    protobuf_c_message_pack(&s.base, buf + 1);
    char err[128];
    hdfs_dn_send(&r->dn, r->speer, buf, n + 1, loom__now_ms() + 1000, "the read status", err,
                 sizeof err);
  }
  stream_close(r);
}

/* Makes the stream deliver byte off: keeps it when it is there, else opens
 * one on a replica not given up on, refetching the locations once when
 * every known one failed. */
static int stream_to(hdfs_reader *r, uint64_t off, char *err, size_t errlen) {
  if (r->dn.fd >= 0 && r->spos == off) return 0;
  stream_close(r);
  for (int round = 0; round < 2; round++) {
    int bi = block_at(r, off);
    if (bi < 0) {
      int rc = locate(r, off, err, errlen);
      if (rc < 0) return rc;
      if ((bi = block_at(r, off)) < 0) {
        snprintf(err, errlen, "%s: %s knows no block holding byte %llu of %llu", r->url,
                 r->fs->peer, (unsigned long long)off, (unsigned long long)r->size);
        return LOOM_EIO;
      }
    }
    Hadoop__Hdfs__LocatedBlockProto *b = r->lbs->blocks[bi];
    /* what the messages below need, kept: locate() frees b */
    uint64_t blk = b->b->blockid, gs = b->b->generationstamp, boff = b->offset;
    uint64_t blen = b->b->numbytes;
    size_t nlocs = b->n_locs;
    for (size_t li = 0; li < b->n_locs; li++) {
      char addr[80];
      hdfs_dn_name(b->locs[li], addr, sizeof addr);
      if (is_bad(r, b->b->blockid, addr)) continue;
      int rc = stream_open(r, bi, (int)li, off, err, errlen);
      if (rc == LOOM_ENOMEM) return rc;
      if (rc < 0) {
        mark_bad(r, b->b->blockid, addr, err);
        continue;
      }
      /* drop the chunk's bytes before off, checked */
      while (rc == 0 && r->spos < off) {
        if ((rc = next_packet(r, err, errlen)) < 0) break;
        if (r->last_seen) {
          rc = LOOM_EPROTO;
          snprintf(err, errlen, "%s: the stream ended before byte %llu", r->speer,
                   (unsigned long long)off);
          break;
        }
        size_t skip = off - r->spos < r->data_left ? (size_t)(off - r->spos) : r->data_left;
        r->data += skip;
        r->data_left -= skip;
        r->spos += skip;
      }
      if (rc == 0) return 0;
      if (rc == LOOM_ENOMEM) return rc;
      mark_bad(r, b->b->blockid, addr, err);
      stream_close(r);
    }
    if (round == 0) {
      /* every known replica failed: ask again (the NameNode may know of new
       * ones, or the dead may have come back) */
      if (r->lresp) protobuf_c_message_free_unpacked(&r->lresp->base, NULL);
      r->lresp = NULL;
      r->lbs = NULL;
      int rc = locate(r, off, err, errlen);
      if (rc < 0) return rc;
      int nb = block_at(r, off);
      bool fresh = false;
      if (nb >= 0) {
        Hadoop__Hdfs__LocatedBlockProto *b2 = r->lbs->blocks[nb];
        for (size_t li = 0; li < b2->n_locs && !fresh; li++) {
          char addr[80];
          hdfs_dn_name(b2->locs[li], addr, sizeof addr);
          fresh = !is_bad(r, blk, addr);
        }
      }
      if (fresh) continue;
      /* the same replicas, all given up on: the block is lost */
    }
    /* give up */
    char whys[1200] = "";
    size_t wl = 0;
    for (int i = 0; i < r->nbad && wl < sizeof whys - 1; i++)
      if (r->bad[i].block == blk)
        wl += (size_t)snprintf(whys + wl, sizeof whys - wl, "%s%s", wl ? "; " : "", r->bad[i].why);
    snprintf(err, errlen, "%s: no good replica of block blk_%llu_%llu (bytes %llu-%llu): %s",
             r->url, (unsigned long long)blk, (unsigned long long)gs, (unsigned long long)boff,
             (unsigned long long)(boff + blen),
             nlocs ? whys : "the NameNode lists no DataNode holding it");
    return LOOM_EIO;
  }
  return LOOM_EIO;
}

int hdfs_pread(hdfs_reader *r, void *buf, size_t n, uint64_t off, size_t *got, char *err,
               size_t errlen) {
  *got = 0;
  if (off >= r->size) return 0;
  if (n > r->size - off) n = (size_t)(r->size - off);
  uint8_t *out = buf;
  size_t done = 0;
  int tries = 0;
  while (done < n) {
    int rc = stream_to(r, off + done, err, errlen);
    if (rc < 0) return rc;
    if (!r->data_left) {
      rc = next_packet(r, err, errlen);
      if (rc == 0 && r->last_seen) {
        read_done(r);
        continue;
      }
      if (rc < 0) {
        if (rc == LOOM_ENOMEM || ++tries > 64) return rc;
        const Hadoop__Hdfs__LocatedBlockProto *b = r->lbs->blocks[r->sblock];
        char addr[80];
        hdfs_dn_name(b->locs[r->sdn], addr, sizeof addr);
        mark_bad(r, b->b->blockid, addr, err);
        stream_close(r);
        continue;
      }
    }
    size_t k = r->data_left < n - done ? r->data_left : n - done;
    memcpy(out + done, r->data, k);
    r->data += k;
    r->data_left -= k;
    r->spos += k;
    done += k;
    *got = done;
    if (!r->data_left && r->spos == r->send) {
      /* the block's last bytes: take the empty last packet and say OK */
      rc = next_packet(r, err, errlen);
      if (rc == 0 && r->last_seen)
        read_done(r);
      else
        stream_close(r);
    }
  }
  return 0;
}

int hdfs_reader_hosts(hdfs_reader *r, uint64_t off, char (*hosts)[64], int max, char *err,
                      size_t errlen) {
  int bi = block_at(r, off);
  if (bi < 0) {
    int rc = locate(r, off, err, errlen);
    if (rc < 0) return rc;
    if ((bi = block_at(r, off)) < 0) return 0;
  }
  const Hadoop__Hdfs__LocatedBlockProto *b = r->lbs->blocks[bi];
  int n = 0;
  for (size_t i = 0; i < b->n_locs && n < max; i++)
    loom__strlcpy(hosts[n++], b->locs[i]->id->ipaddr, sizeof hosts[0]);
  return n;
}
