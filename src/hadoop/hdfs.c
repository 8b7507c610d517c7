/* hdfs.c: the HDFS client (hdfs.h): URLs, the NameNode's namespace calls,
 * the DataNode read with checksums and replica failover, the write
 * pipeline. */
#include "hadoop/hdfs.h"

#include "ClientNamenodeProtocol.pb-c.h"
#include "datatransfer.pb-c.h"
#include "hdfs.pb-c.h"
#include "core/bytes.h"
#include "core/crc32c.h"
#include "hadoop/conf.h"
#include "hadoop/ipc.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NN_PROTOCOL "org.apache.hadoop.hdfs.protocol.ClientProtocol"
#define DT_VERSION 28
#define OP_WRITE_BLOCK 80
#define OP_READ_BLOCK 81
#define BPC 512        /* bytes a chunk, written */
#define PKT_CHUNKS 126 /* chunks a packet: 64512 bytes, Hadoop's */
#define PKT_DATA (BPC * PKT_CHUNKS)
#define MAX_INFLIGHT 80      /* unacknowledged packets, Hadoop's */
#define MAX_REPLY (1u << 20) /* a delimited DataNode reply */
#define MAX_HEADER 1024      /* a packet header */
#define NN_IDLE_MS 5000      /* reconnect before a call after this idle */
#define LEASE_RENEW_MS 20000

/* ---- URLs ---------------------------------------------------------------- */

bool hdfs_is_url(const char *s) { return s && !strncmp(s, "hdfs:", 5); }

static int parse_authority(const char *a, size_t n, hdfs_url *out, const char *url, char *err,
                           size_t errlen) {
  const char *colon = memchr(a, ':', n);
  size_t hn = colon ? (size_t)(colon - a) : n;
  if (!hn || hn >= sizeof out->host) {
    snprintf(err, errlen, "%s: no NameNode host after hdfs://", url);
    return LOOM_EINVAL;
  }
  memcpy(out->host, a, hn);
  out->host[hn] = 0;
  out->port = HDFS_DEFAULT_PORT;
  if (colon) {
    char ps[16];
    size_t pn = n - hn - 1;
    long long port;
    if (!pn || pn >= sizeof ps) {
      snprintf(err, errlen, "%s: the port after %s: is missing or too long", url, out->host);
      return LOOM_EINVAL;
    }
    memcpy(ps, colon + 1, pn);
    ps[pn] = 0;
    if (loom__parse_int(ps, 1, 65535, &port) < 0) {
      snprintf(err, errlen, "%s: port '%s' is not a number from 1 to 65535", url, ps);
      return LOOM_EINVAL;
    }
    out->port = (int)port;
  }
  return 0;
}

int hdfs_parse_url(const char *url, hdfs_url *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (!hdfs_is_url(url) || strncmp(url, "hdfs://", 7)) {
    snprintf(err, errlen, "%s: not an HDFS URL (hdfs://host:port/path or hdfs:///path)",
             url ? url : "(null)");
    return LOOM_EINVAL;
  }
  const char *a = url + 7, *slash = strchr(a, '/');
  if (!slash) {
    snprintf(err, errlen, "%s: no path after the NameNode (hdfs://host:port/path)", url);
    return LOOM_EINVAL;
  }
  if (strlen(slash) >= sizeof out->path) {
    snprintf(err, errlen, "%.80s...: the path is longer than %d bytes", url, HDFS_MAX_PATH - 1);
    return LOOM_EINVAL;
  }
  for (const char *p = slash; *p; p++)
    if ((unsigned char)*p < 0x20) {
      snprintf(err, errlen, "%s: a control character in the path", url);
      return LOOM_EINVAL;
    }
  loom__strlcpy(out->path, slash, sizeof out->path);
  if (slash > a) return parse_authority(a, (size_t)(slash - a), out, url, err, errlen);
  /* hdfs:///path: the default filesystem of the cluster's configuration */
  char dir[1024], file[1100], why[1024], def[1024];
  const char *how;
  int rc = hconf_find_dir(NULL, dir, sizeof dir, &how, why, sizeof why);
  if (rc < 0) {
    snprintf(err, errlen, "%s names no NameNode and %s", url, why);
    return LOOM_ENOENT;
  }
  hconf c = {0};
  snprintf(file, sizeof file, "%s/core-site.xml", dir);
  rc = hconf_load(&c, file, why, sizeof why);
  if (rc == 0) rc = hconf_get(&c, "fs.defaultFS", NULL, def, sizeof def);
  hconf_free(&c);
  if (rc < 0) {
    snprintf(err, errlen, "%s names no NameNode and %s", url, why);
    return LOOM_ENOENT;
  }
  if (rc == 0 || strncmp(def, "hdfs://", 7)) {
    snprintf(err, errlen, "%s names no NameNode and %s's fs.defaultFS is %s%s%s", url, file,
             rc ? "'" : "not set", rc ? def : "", rc ? "', not an hdfs:// URL" : "");
    return LOOM_ENOENT;
  }
  const char *da = def + 7, *de = strchr(da, '/');
  rc = parse_authority(da, de ? (size_t)(de - da) : strlen(da), out, def, err, errlen);
  if (rc < 0) return rc;
  return 0;
}

/* ---- the NameNode connection -------------------------------------------- */

struct hdfs {
  struct hdfs *next;
  char host[256];
  int port;
  char peer[320];
  char user[256];
  char client[96]; /* the lease holder's name */
  pthread_mutex_t mu;
  hipc_client *ipc;
  uint64_t used_ms; /* the last call's end */
  /* the NameNode's defaults (getServerDefaults), 0 until asked */
  uint64_t def_blocksize;
  uint32_t def_replication;
  /* the client configuration's dfs.blocksize and dfs.replication, 0 when
   * not set: they win over the NameNode's, as in Hadoop's own client */
  uint64_t conf_blocksize;
  uint32_t conf_replication;
};

/* A size as Hadoop's Configuration.getLongBytes reads it: a number with an
 * optional k, m, g, t or p suffix (either case, powers of 1024). */
static bool hadoop_bytes(const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return false;
  static const char units[] = "kmgtp";
  if (*end) {
    const char *u = strchr(units, *end | 0x20);
    if (!u || end[1]) return false;
    for (int i = 0; i <= u - units; i++) {
      if (v > UINT64_MAX / 1024) return false;
      v *= 1024;
    }
  }
  *out = v;
  return true;
}

/* dfs.blocksize and dfs.replication from $HADOOP_CONF_DIR, when set there;
 * a bad value is said once and left to the NameNode's default. */
static void client_conf(hdfs *fs) {
  char dir[1024], why[1024], file[1100], v[128];
  const char *how;
  if (hconf_find_dir(NULL, dir, sizeof dir, &how, why, sizeof why) < 0) return;
  hconf c = {0};
  const char *files[] = {"core-site.xml", "hdfs-site.xml"};
  for (size_t i = 0; i < LOOM__ARRAY_LEN(files); i++) {
    snprintf(file, sizeof file, "%s/%s", dir, files[i]);
    int lrc = hconf_load(&c, file, why, sizeof why);
    if (lrc < 0 && lrc != LOOM_ENOENT) loom__log(LOOM_LOG_WARN, "hadoop", "%s", why);
  }
  uint64_t bs;
  if (hconf_get(&c, "dfs.blocksize", NULL, v, sizeof v) == 1) {
    if (hadoop_bytes(v, &bs) && bs >= BPC && bs % BPC == 0)
      fs->conf_blocksize = bs;
    else
      loom__log(LOOM_LOG_WARN, "hadoop",
                "%s: dfs.blocksize '%s' is not a multiple of %d bytes: the NameNode's default "
                "is used",
                dir, v, BPC);
  }
  long long rep;
  if (hconf_get(&c, "dfs.replication", NULL, v, sizeof v) == 1) {
    if (loom__parse_int(v, 1, 512, &rep) == 0)
      fs->conf_replication = (uint32_t)rep;
    else
      loom__log(LOOM_LOG_WARN, "hadoop",
                "%s: dfs.replication '%s' is not a number from 1 to 512: the NameNode's "
                "default is used",
                dir, v);
  }
  hconf_free(&c);
}

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static hdfs *g_all;

int hdfs_get(const char *host, int port, hdfs **out) {
  pthread_mutex_lock(&g_mu);
  hdfs *fs = g_all;
  while (fs && (fs->port != port || strcmp(fs->host, host))) fs = fs->next;
  if (!fs && (fs = calloc(1, sizeof *fs))) {
    loom__strlcpy(fs->host, host, sizeof fs->host);
    fs->port = port;
    snprintf(fs->peer, sizeof fs->peer, "the NameNode at %s:%d", host, port);
    hconf_user(fs->user, sizeof fs->user);
    uint8_t r[6] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
      if (fread(r, 1, sizeof r, f) != sizeof r) memset(r, 0, sizeof r);
      fclose(f);
    }
    char hex[13];
    loom__hex(r, sizeof r, hex);
    snprintf(fs->client, sizeof fs->client, "DFSClient_loom_%d_%s", (int)getpid(), hex);
    pthread_mutex_init(&fs->mu, NULL);
    client_conf(fs);
    fs->next = g_all;
    g_all = fs;
  }
  pthread_mutex_unlock(&g_mu);
  *out = fs;
  return fs ? 0 : LOOM_ENOMEM;
}

void hdfs_release_all(void) {
  pthread_mutex_lock(&g_mu);
  while (g_all) {
    hdfs *fs = g_all;
    g_all = fs->next;
    hipc_close(fs->ipc);
    pthread_mutex_destroy(&fs->mu);
    free(fs);
  }
  pthread_mutex_unlock(&g_mu);
}

const char *hdfs_peer(const hdfs *fs) { return fs->peer; }

/* What a NameNode exception means to a caller. */
static int exception_code(const char *cls) {
  static const struct {
    const char *suffix;
    int code;
  } map[] = {
      {".FileNotFoundException", LOOM_ENOENT},
      {".AccessControlException", LOOM_EAUTH},
      {".FileAlreadyExistsException", LOOM_ESTATE},
      {".ParentNotDirectoryException", LOOM_ESTATE},
      {".PathIsNotEmptyDirectoryException", LOOM_ESTATE},
      {".PathIsNotDirectoryException", LOOM_ESTATE},
  };
  size_t n = strlen(cls);
  for (size_t i = 0; i < LOOM__ARRAY_LEN(map); i++) {
    size_t m = strlen(map[i].suffix);
    if (n >= m && !strcmp(cls + n - m, map[i].suffix)) return map[i].code;
  }
  return LOOM_EPEER;
}

/* One ClientProtocol call, on the shared connection (made or made again
 * as needed). idempotent calls are sent again once on a connection that
 * broke. */
static int nn_call(hdfs *fs, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp, bool idempotent,
                   char *err, size_t errlen) {
  pthread_mutex_lock(&fs->mu);
  int rc = 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    bool fresh = false;
    if (fs->ipc && loom__now_ms() - fs->used_ms > NN_IDLE_MS) {
      hipc_close(fs->ipc); /* the NameNode may have closed it: start clean */
      fs->ipc = NULL;
    }
    if (!fs->ipc) {
      rc = hipc_connect(fs->host, fs->port, fs->peer, NN_PROTOCOL, fs->user, HDFS_TIMEOUT_MS,
                        &fs->ipc, err, errlen);
      if (rc < 0) break;
      fresh = true;
    }
    rc = hipc_call(fs->ipc, method, req, desc, resp, HDFS_TIMEOUT_MS, err, errlen);
    fs->used_ms = loom__now_ms();
    if (rc == LOOM_EPEER) rc = exception_code(hipc_exception(fs->ipc));
    if (rc == LOOM_ECONN || rc == LOOM_ETIMEDOUT || rc == LOOM_EPROTO) {
      hipc_close(fs->ipc);
      fs->ipc = NULL;
      if (rc == LOOM_ECONN && idempotent && !fresh) continue;
    }
    break;
  }
  pthread_mutex_unlock(&fs->mu);
  return rc;
}

void hdfs_stat_of(const void *status, hdfs_stat *st, bool name) {
  const Hadoop__Hdfs__HdfsFileStatusProto *p = status;
  memset(st, 0, sizeof *st);
  st->dir = p->filetype == HADOOP__HDFS__HDFS_FILE_STATUS_PROTO__FILE_TYPE__IS_DIR;
  st->length = p->length;
  st->blocksize = p->has_blocksize ? p->blocksize : 0;
  st->fileid = p->has_fileid ? p->fileid : 0;
  st->mtime_ms = p->modification_time;
  st->atime_ms = p->access_time;
  st->perm = p->permission ? p->permission->perm & 07777 : 0;
  st->replication = p->has_block_replication ? p->block_replication : 0;
  loom__strlcpy(st->owner, p->owner ? p->owner : "", sizeof st->owner);
  loom__strlcpy(st->group, p->group ? p->group : "", sizeof st->group);
  if (name) {
    size_t n = p->path.len < sizeof st->name - 1 ? p->path.len : sizeof st->name - 1;
    if (n) memcpy(st->name, p->path.data, n);
    st->name[n] = 0;
    for (size_t i = 0; i < n; i++)
      if ((unsigned char)st->name[i] < 0x20) st->name[i] = '?';
  }
}

int hdfs_stat_path(hdfs *fs, const char *path, hdfs_stat *st, char *err, size_t errlen) {
  Hadoop__Hdfs__GetFileInfoRequestProto req = HADOOP__HDFS__GET_FILE_INFO_REQUEST_PROTO__INIT;
  req.src = (char *)path;
  Hadoop__Hdfs__GetFileInfoResponseProto *resp = NULL;
  int rc =
      nn_call(fs, "getFileInfo", &req.base, &hadoop__hdfs__get_file_info_response_proto__descriptor,
              (ProtobufCMessage **)&resp, true, err, errlen);
  if (rc == 0 && !resp->fs) {
    snprintf(err, errlen, "hdfs://%s:%d%s: no such file or directory", fs->host, fs->port, path);
    rc = LOOM_ENOENT;
  }
  if (rc == 0) hdfs_stat_of(resp->fs, st, false);
  if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  return rc;
}

#define LIST_MAX (1u << 22)

int hdfs_list(hdfs *fs, const char *path, hdfs_stat **out, size_t *n, char *err, size_t errlen) {
  *out = NULL;
  *n = 0;
  hdfs_stat *v = NULL;
  size_t cnt = 0, cap = 0;
  uint8_t *after = NULL;
  size_t after_len = 0;
  int rc = 0;
  for (;;) {
    Hadoop__Hdfs__GetListingRequestProto req = HADOOP__HDFS__GET_LISTING_REQUEST_PROTO__INIT;
    req.src = (char *)path;
    req.startafter.data = after;
    req.startafter.len = after_len;
    req.needlocation = 0;
    Hadoop__Hdfs__GetListingResponseProto *resp = NULL;
    rc = nn_call(fs, "getListing", &req.base, &hadoop__hdfs__get_listing_response_proto__descriptor,
                 (ProtobufCMessage **)&resp, true, err, errlen);
    if (rc == 0 && !resp->dirlist) {
      snprintf(err, errlen, "hdfs://%s:%d%s: no such file or directory", fs->host, fs->port, path);
      rc = LOOM_ENOENT;
    }
    size_t got = rc == 0 ? resp->dirlist->n_partiallisting : 0;
    if (rc == 0 && cnt + got > LIST_MAX) {
      snprintf(err, errlen, "hdfs://%s:%d%s: more than %u entries", fs->host, fs->port, path,
               LIST_MAX);
      rc = LOOM_ERANGE;
    }
    if (rc == 0 && cnt + got > cap) {
      size_t nc = cap ? cap : 64;
      while (nc < cnt + got) nc *= 2;
      hdfs_stat *nv = realloc(v, nc * sizeof *nv);
      if (!nv)
        rc = LOOM_ENOMEM;
      else
        v = nv, cap = nc;
    }
    bool more = false;
    if (rc == 0) {
      for (size_t i = 0; i < got; i++)
        hdfs_stat_of(resp->dirlist->partiallisting[i], &v[cnt++], true);
      more = resp->dirlist->remainingentries > 0 && got > 0;
      if (more) {
        const ProtobufCBinaryData *last = &resp->dirlist->partiallisting[got - 1]->path;
        uint8_t *na = realloc(after, last->len ? last->len : 1);
        if (!na) {
          rc = LOOM_ENOMEM;
          more = false;
        } else {
          after = na;
          memcpy(after, last->data, last->len);
          after_len = last->len;
        }
      }
    }
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (rc < 0 || !more) break;
  }
  free(after);
  if (rc < 0) {
    free(v);
    return rc;
  }
  /* a file lists itself, with its own name */
  if (cnt == 1 && !v[0].name[0]) {
    const char *slash = strrchr(path, '/');
    loom__strlcpy(v[0].name, slash ? slash + 1 : path, sizeof v[0].name);
  }
  *out = v;
  *n = cnt;
  return 0;
}

int hdfs_mkdirs(hdfs *fs, const char *path, uint32_t perm, char *err, size_t errlen) {
  Hadoop__Hdfs__FsPermissionProto p = HADOOP__HDFS__FS_PERMISSION_PROTO__INIT;
  p.perm = perm;
  Hadoop__Hdfs__MkdirsRequestProto req = HADOOP__HDFS__MKDIRS_REQUEST_PROTO__INIT;
  req.src = (char *)path;
  req.masked = &p;
  req.createparent = 1;
  ProtobufCMessage *resp = NULL;
  int rc = nn_call(fs, "mkdirs", &req.base, &hadoop__hdfs__mkdirs_response_proto__descriptor, &resp,
                   true, err, errlen);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  return rc;
}

int hdfs_delete(hdfs *fs, const char *path, bool recursive, char *err, size_t errlen) {
  Hadoop__Hdfs__DeleteRequestProto req = HADOOP__HDFS__DELETE_REQUEST_PROTO__INIT;
  req.src = (char *)path;
  req.recursive = recursive;
  Hadoop__Hdfs__DeleteResponseProto *resp = NULL;
  int rc = nn_call(fs, "delete", &req.base, &hadoop__hdfs__delete_response_proto__descriptor,
                   (ProtobufCMessage **)&resp, false, err, errlen);
  if (rc == 0 && !resp->result) {
    snprintf(err, errlen, "hdfs://%s:%d%s: no such file or directory", fs->host, fs->port, path);
    rc = LOOM_ENOENT;
  }
  if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  return rc;
}

int hdfs_rename(hdfs *fs, const char *src, const char *dst, bool overwrite, char *err,
                size_t errlen) {
  Hadoop__Hdfs__Rename2RequestProto req = HADOOP__HDFS__RENAME2_REQUEST_PROTO__INIT;
  req.src = (char *)src;
  req.dst = (char *)dst;
  req.overwritedest = overwrite;
  ProtobufCMessage *resp = NULL;
  int rc = nn_call(fs, "rename2", &req.base, &hadoop__hdfs__rename2_response_proto__descriptor,
                   &resp, false, err, errlen);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  return rc;
}

static int server_defaults(hdfs *fs, char *err, size_t errlen) {
  if (fs->def_blocksize) return 0;
  Hadoop__Hdfs__GetServerDefaultsRequestProto req =
      HADOOP__HDFS__GET_SERVER_DEFAULTS_REQUEST_PROTO__INIT;
  Hadoop__Hdfs__GetServerDefaultsResponseProto *resp = NULL;
  int rc = nn_call(fs, "getServerDefaults", &req.base,
                   &hadoop__hdfs__get_server_defaults_response_proto__descriptor,
                   (ProtobufCMessage **)&resp, true, err, errlen);
  if (rc == 0) {
    uint64_t bs = resp->serverdefaults->blocksize;
    uint32_t rep = resp->serverdefaults->replication;
    if (bs < BPC || bs % BPC || bs > (1ull << 40) || !rep || rep > 512) {
      snprintf(err, errlen, "%s: unusable defaults: block size %llu, replication %u", fs->peer,
               (unsigned long long)bs, rep);
      rc = LOOM_EPROTO;
    } else {
      fs->def_blocksize = bs;
      fs->def_replication = rep;
    }
  }
  if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  return rc;
}

static void renew_lease(hdfs *fs) {
  Hadoop__Hdfs__RenewLeaseRequestProto req = HADOOP__HDFS__RENEW_LEASE_REQUEST_PROTO__INIT;
  req.clientname = fs->client;
  ProtobufCMessage *resp = NULL;
  char err[512];
  if (nn_call(fs, "renewLease", &req.base, &hadoop__hdfs__renew_lease_response_proto__descriptor,
              &resp, true, err, sizeof err) < 0)
    loom__log(LOOM_LOG_WARN, "hadoop", "renewing the write lease: %s", err);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
}

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
static int put_op(loom__buf *b, uint8_t op, const ProtobufCMessage *msg) {
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
static int recv_delimited(int fd, const char *peer, const ProtobufCMessageDescriptor *desc,
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

static const char *status_name(int s) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&hadoop__hdfs__status__descriptor, s);
  return v ? v->name : "an unknown status";
}

/* The header every operation carries: the block, its token, us. */
typedef struct {
  Hadoop__Hdfs__ClientOperationHeaderProto coh;
  Hadoop__Hdfs__BaseHeaderProto base;
} op_header;

static void op_header_init(op_header *h, Hadoop__Hdfs__ExtendedBlockProto *b,
                           Hadoop__Common__TokenProto *tok, const char *client) {
  hadoop__hdfs__client_operation_header_proto__init(&h->coh);
  hadoop__hdfs__base_header_proto__init(&h->base);
  h->base.block = b;
  h->base.token = tok;
  h->coh.baseheader = &h->base;
  h->coh.clientname = (char *)client;
}

/* ---- checks of what the NameNode and DataNodes say ---------------------- */

static bool addr_ok(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (!n || n >= 64) return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] <= 0x20 || s[i] >= 0x7f) return false;
  return true;
}

int hdfs_check_block(const void *located, char *err, size_t errlen) {
  const Hadoop__Hdfs__LocatedBlockProto *b = located;
  if (!b->b->poolid || strlen(b->b->poolid) >= 256) {
    snprintf(err, errlen, "gave a block with a block pool id of more than 255 bytes");
    return LOOM_EPROTO;
  }
  for (size_t k = 0; k < b->n_locs; k++) {
    const Hadoop__Hdfs__DatanodeIDProto *id = b->locs[k]->id;
    if (!addr_ok(id->ipaddr) || !id->xferport || id->xferport > 65535) {
      snprintf(err, errlen, "gave block %llu a DataNode with an unusable address",
               (unsigned long long)b->b->blockid);
      return LOOM_EPROTO;
    }
  }
  return 0;
}

int hdfs_check_located(const void *located_blocks, char *err, size_t errlen) {
  const Hadoop__Hdfs__LocatedBlocksProto *l = located_blocks;
  if (l->ecpolicy || l->fileencryptioninfo) {
    snprintf(err, errlen, "says the file is %s: not supported by loom's HDFS client",
             l->ecpolicy ? "erasure-coded" : "in an encryption zone");
    return LOOM_ENOTSUP;
  }
  for (size_t i = 0; i < l->n_blocks; i++) {
    const Hadoop__Hdfs__LocatedBlockProto *b = l->blocks[i];
    if (b->offset > l->filelength || b->b->numbytes > l->filelength - b->offset ||
        (i && b->offset < l->blocks[i - 1]->offset + l->blocks[i - 1]->b->numbytes)) {
      snprintf(err, errlen,
               "gave block %zu at %llu+%llu, overlapping or past the file's %llu bytes", i,
               (unsigned long long)b->offset, (unsigned long long)b->b->numbytes,
               (unsigned long long)l->filelength);
      return LOOM_EPROTO;
    }
    int rc = hdfs_check_block(b, err, errlen);
    if (rc < 0) return rc;
  }
  return 0;
}

int hdfs_check_read_reply(const void *block_op_response, uint64_t offset, int *type, uint32_t *bpc,
                          uint64_t *chunk, char *err, size_t errlen) {
  const Hadoop__Hdfs__BlockOpResponseProto *resp = block_op_response;
  if (resp->status != HADOOP__HDFS__STATUS__SUCCESS) {
    snprintf(err, errlen, "refused: %s%s%s", status_name(resp->status), resp->message ? ": " : "",
             resp->message ? resp->message : "");
    return LOOM_EPEER;
  }
  const Hadoop__Hdfs__ReadOpChecksumInfoProto *ci = resp->readopchecksuminfo;
  if (!ci || !ci->checksum) {
    snprintf(err, errlen, "sent no checksum information");
    return LOOM_EPROTO;
  }
  int t = ci->checksum->type;
  uint32_t n = ci->checksum->bytesperchecksum;
  if (t < 0 || t > 2 || !n || n > (1u << 20) || ci->chunkoffset > offset ||
      (t != 0 && offset - ci->chunkoffset >= n)) {
    snprintf(err, errlen,
             "sent unusable checksum information (type %d, %u bytes a chunk, chunk at %llu for "
             "offset %llu)",
             t, n, (unsigned long long)ci->chunkoffset, (unsigned long long)offset);
    return LOOM_EPROTO;
  }
  *type = t;
  *bpc = n;
  *chunk = ci->chunkoffset;
  return 0;
}

int hdfs_check_ack(const void *pipeline_ack, int64_t seqno, size_t nodes, char *err,
                   size_t errlen) {
  const Hadoop__Hdfs__PipelineAckProto *a = pipeline_ack;
  for (size_t i = 0; i < a->n_reply; i++)
    if (a->reply[i] != HADOOP__HDFS__STATUS__SUCCESS) {
      snprintf(err, errlen, "DataNode %zu of the pipeline answered %s", i + 1,
               status_name(a->reply[i]));
      return LOOM_EIO;
    }
  if (a->seqno != seqno) {
    snprintf(err, errlen, "acknowledged packet %lld where %lld was next", (long long)a->seqno,
             (long long)seqno);
    return LOOM_EPROTO;
  }
  if (a->n_reply != nodes) {
    snprintf(err, errlen, "an acknowledgement for %zu DataNodes from a pipeline of %zu", a->n_reply,
             nodes);
    return LOOM_EPROTO;
  }
  return 0;
}

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
  int fd;
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
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
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
  int rc = nn_call(r->fs, "getBlockLocations", &req.base,
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
  r->fd = -1;
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

static void dn_name(const Hadoop__Hdfs__DatanodeInfoProto *d, char *out, size_t len) {
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
  int big = 1 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  op_header h;
  op_header_init(&h, b->b, b->blocktoken, r->fs->client);
  Hadoop__Hdfs__OpReadBlockProto op = HADOOP__HDFS__OP_READ_BLOCK_PROTO__INIT;
  op.header = &h.coh;
  op.offset = off - b->offset;
  op.len = b->b->numbytes - op.offset;
  loom__buf q;
  loom__buf_init(&q, 1 << 20);
  rc = put_op(&q, OP_READ_BLOCK, &op.base);
  uint64_t deadline = loom__now_ms() + HDFS_TIMEOUT_MS;
  if (rc == 0) rc = hipc_send_fd(fd, peer, q.p, q.len, deadline, "the read request", err, errlen);
  loom__buf_free(&q);
  Hadoop__Hdfs__BlockOpResponseProto *resp = NULL;
  if (rc == 0)
    rc = recv_delimited(fd, peer, &hadoop__hdfs__block_op_response_proto__descriptor,
                        (ProtobufCMessage **)&resp, "the answer to the read request", err, errlen);
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
    close(fd);
    return rc;
  }
  r->fd = fd;
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
  int rc = hipc_recv_fd(r->fd, r->speer, pre, 6, deadline, HDFS_TIMEOUT_MS, "a data packet", err,
                        errlen);
  uint32_t plen = 0;
  uint16_t hlen = 0;
  char why[256];
  if (rc == 0 && (rc = hdfs_packet_lengths(pre, &plen, &hlen, why, sizeof why)) < 0)
    snprintf(err, errlen, "%s: %s", r->speer, why);
  uint8_t hdr[MAX_HEADER];
  if (rc == 0)
    rc = hipc_recv_fd(r->fd, r->speer, hdr, hlen, deadline, HDFS_TIMEOUT_MS, "a packet header", err,
                      errlen);
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
    rc = hipc_recv_fd(r->fd, r->speer, r->pkt, body, deadline, HDFS_TIMEOUT_MS, "packet data", err,
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
    hipc_send_fd(r->fd, r->speer, buf, n + 1, loom__now_ms() + 1000, "the read status", err,
                 sizeof err);
  }
  stream_close(r);
}

/* Makes the stream deliver byte off: keeps it when it is there, else opens
 * one on a replica not given up on, refetching the locations once when
 * every known one failed. */
static int stream_to(hdfs_reader *r, uint64_t off, char *err, size_t errlen) {
  if (r->fd >= 0 && r->spos == off) return 0;
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
      dn_name(b->locs[li], addr, sizeof addr);
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
          dn_name(b2->locs[li], addr, sizeof addr);
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
        dn_name(b->locs[r->sdn], addr, sizeof addr);
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

/* ---- writing ------------------------------------------------------------ */

struct hdfs_writer {
  hdfs *fs;
  char path[HDFS_MAX_PATH];
  char url[HDFS_MAX_PATH + 300];
  uint64_t fileid, blocksize;
  uint32_t replication;
  /* the block being written */
  Hadoop__Hdfs__AddBlockResponseProto *blk;
  int fd;
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
  if (w->fd >= 0) close(w->fd);
  if (w->blk) protobuf_c_message_free_unpacked(&w->blk->base, NULL);
  free(w->pkt);
  free(w);
}

int hdfs_create(hdfs *fs, const char *path, bool overwrite, uint32_t replication,
                uint64_t blocksize, hdfs_writer **out, char *err, size_t errlen) {
  *out = NULL;
  int rc = server_defaults(fs, err, errlen);
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
  w->fd = -1;
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
  rc = nn_call(fs, "create", &req.base, &hadoop__hdfs__create_response_proto__descriptor,
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
    ssize_t r = recv(w->fd, w->ackbuf + w->acklen, sizeof w->ackbuf - w->acklen, MSG_DONTWAIT);
    if (r > 0) {
      w->acklen += (size_t)r;
      continue;
    }
    if (r == 0) {
      snprintf(err, errlen, "%s closed the pipeline of block %llu of %s", w->peer,
               (unsigned long long)w->blk->block->b->blockid, w->url);
      return LOOM_ECONN;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      snprintf(err, errlen, "%s: reading acknowledgements: %s", w->peer, strerror(errno));
      return LOOM_ECONN;
    }
    if (!wait) return 0;
    struct pollfd p = {.fd = w->fd, .events = POLLIN};
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
      rc =
          nn_call(w->fs, "addBlock", &req.base, &hadoop__hdfs__add_block_response_proto__descriptor,
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
    Hadoop__Hdfs__BlockOpResponseProto * or = NULL;
    if (rc == 0) {
      int big = 1 << 20;
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
      op_header h;
      op_header_init(&h, b->b, b->blocktoken, w->fs->client);
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
      rc = put_op(&q, OP_WRITE_BLOCK, &op.base);
      if (rc == 0)
        rc = hipc_send_fd(fd, w->peer, q.p, q.len, loom__now_ms() + HDFS_TIMEOUT_MS,
                          "the write request", err, errlen);
      loom__buf_free(&q);
      if (rc == 0)
        rc = recv_delimited(fd, w->peer, &hadoop__hdfs__block_op_response_proto__descriptor,
                            (ProtobufCMessage **)& or, "the answer to the write request", err,
                            errlen);
      if (rc == 0 && or->status != HADOOP__HDFS__STATUS__SUCCESS) {
        snprintf(err, errlen, "%s refused to write block %llu: %s%s%s%s%s", w->peer,
                 (unsigned long long)b->b->blockid, status_name(or->status),
                 or->message ? ": " : "", or->message ? or->message : "",
                 or->firstbadlink && * or->firstbadlink ? "; first bad DataNode " : "",
                 or->firstbadlink ? or->firstbadlink : "");
        rc = LOOM_EIO;
      }
    }
    if (rc == 0) {
      if (or) protobuf_c_message_free_unpacked(& or->base, NULL);
      w->blk = resp;
      w->fd = fd;
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
      dn_name(b->locs[i], name, sizeof name);
      if (!strcmp(name, or->firstbadlink)) badi = i;
    }
    if (or) protobuf_c_message_free_unpacked(& or->base, NULL);
    if (fd >= 0) close(fd);
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
    nn_call(w->fs, "abandonBlock", &ab.base,
            &hadoop__hdfs__abandon_block_response_proto__descriptor, &ar, false, aerr, sizeof aerr);
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
  int rc = hipc_send_fd(w->fd, w->peer, start, (size_t)(data + n - start),
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
  close(w->fd);
  w->fd = -1;
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
    renew_lease(w->fs);
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
    int rc =
        nn_call(w->fs, "complete", &req.base, &hadoop__hdfs__complete_response_proto__descriptor,
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
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  char err[256];
  hdfs_delete(w->fs, w->path, false, err, sizeof err);
  writer_free(w);
}
