/* hdfs.c: the HDFS client (hdfs.h): URLs, the NameNode's namespace calls
 * and the checks of what the NameNode and DataNodes say. The
 * DataTransferProtocol framing is in hdfs_dtp.c, the DataNode read with
 * checksums and replica failover in hdfs_read.c, the write pipeline in
 * hdfs_write.c; hdfs_int.h is what they share. */
#include "hadoop/hdfs_int.h"

#include "core/bytes.h"
#include "core/crc32c.h"
#include "hadoop/conf.h"
#include "hadoop/ipc.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* The HSASL_QOP_* bits of a protection list ("authentication, privacy":
 * hadoop.rpc.protection, dfs.data.transfer.protection). */
static int qop_levels(char *v) {
  static const struct {
    const char *name;
    int qop;
  } levels[] = {{"authentication", HSASL_QOP_AUTH},
                {"integrity", HSASL_QOP_INT},
                {"privacy", HSASL_QOP_CONF}};
  int out = 0;
  char *save = NULL;
  for (char *t = strtok_r(v, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save))
    for (size_t i = 0; i < LOOM__ARRAY_LEN(levels); i++)
      if (!strcasecmp(t, levels[i].name)) out |= levels[i].qop;
  return out;
}

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
  if (hconf_get(&c, "hadoop.security.authentication", NULL, v, sizeof v) == 1 &&
      !strcasecmp(v, "kerberos"))
    fs->kerberos = true;
  char pr[512];
  if (hconf_get(&c, "dfs.namenode.kerberos.principal", NULL, pr, sizeof pr) == 1)
    loom__strlcpy(fs->nn_principal, pr, sizeof fs->nn_principal);
  if (hconf_get(&c, "hadoop.rpc.protection", NULL, v, sizeof v) == 1) fs->qops = qop_levels(v);
  if (hconf_get(&c, "dfs.data.transfer.protection", NULL, v, sizeof v) == 1)
    fs->dt_qops = qop_levels(v);
  if (hconf_get(&c, "dfs.encrypt.data.transfer.cipher.suites", NULL, v, sizeof v) == 1)
    loom__strlcpy(fs->dt_suites, v, sizeof fs->dt_suites);
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

/* The HDFS delegation token for fs's NameNode in the credentials file
 * $HADOOP_TOKEN_FILE_LOCATION names, if any: the token whose service is
 * the NameNode's "address:port" (as Hadoop names it: the IPv4 address the
 * host resolves to), or "host:port" as given. A file that cannot be read
 * or parsed is said once, and nothing is taken from it. */
static void load_dt(hdfs *fs) {
  const char *file = getenv("HADOOP_TOKEN_FILE_LOCATION");
  if (!file || !*file) return;
  char *buf = NULL, why[512];
  size_t len = 0;
  if (loom__read_file(file, 64 << 20, &buf, &len) < 0) {
    loom__log(LOOM_LOG_WARN, "hadoop",
              "cannot read the credentials file %s "
              "(HADOOP_TOKEN_FILE_LOCATION): no delegation token taken from it",
              file);
    return;
  }
  char svc[2][320];
  snprintf(svc[1], sizeof svc[1], "%s:%d", fs->host, fs->port);
  snprintf(svc[0], sizeof svc[0], "%s", svc[1]);
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (getaddrinfo(fs->host, NULL, &hints, &ai) == 0 && ai) {
    char ip[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, ip, sizeof ip))
      snprintf(svc[0], sizeof svc[0], "%s:%d", ip, fs->port);
  }
  if (ai) freeaddrinfo(ai);
  for (int i = 0; i < 2 && !fs->have_dt; i++) {
    int rc = hyarn_creds_find_for((const uint8_t *)buf, len, HDFS_DT_KIND, svc[i], &fs->dt, why,
                                  sizeof why);
    if (rc == 0) {
      fs->have_dt = true;
      loom__strlcpy(fs->dt_from, file, sizeof fs->dt_from);
    } else if (rc != LOOM_ENOENT) {
      loom__log(LOOM_LOG_WARN, "hadoop",
                "the credentials file %s (HADOOP_TOKEN_FILE_LOCATION): "
                "%s",
                file, why);
      break;
    }
  }
  free(buf);
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
    pthread_mutex_init(&fs->dek_mu, NULL);
    client_conf(fs);
    load_dt(fs);
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
    pthread_mutex_destroy(&fs->dek_mu);
    hyarn_cred_token_free(&fs->dt);
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
int hdfs_nn_call(hdfs *fs, const char *method, const ProtobufCMessage *req,
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
      hsasl_token t = {fs->dt.identifier, fs->dt.identifier_len, fs->dt.password,
                       fs->dt.password_len};
      bool dt = fs->have_dt;
      hipc_auth a = {.token = dt ? &t : NULL,
                     .kerberos = fs->kerberos,
                     .principal = fs->nn_principal,
                     .host = fs->host,
                     .qops = fs->qops,
                     .token_no_user = true};
      rc =
          hipc_connect_auth(fs->host, fs->port, fs->peer, NN_PROTOCOL, fs->user,
                            fs->kerberos || dt ? &a : NULL, HDFS_TIMEOUT_MS, &fs->ipc, err, errlen);
      if (rc == LOOM_EAUTH && dt) {
        /* say where the token came from */
        char e2[1024];
        snprintf(e2, sizeof e2,
                 "%s (the HDFS delegation token for it in %s, "
                 "HADOOP_TOKEN_FILE_LOCATION)",
                 err, fs->dt_from);
        loom__strlcpy(err, e2, errlen);
      }
      if (rc < 0) break;
      fresh = true;
    }
    rc = hipc_call(fs->ipc, method, req, desc, resp, HDFS_TIMEOUT_MS, err, errlen);
    fs->used_ms = loom__now_ms();
    if (rc == LOOM_EPEER && !fs->kerberos && strstr(err, "SIMPLE authentication is not enabled")) {
      /* a secure NameNode with a client configuration that does not say
       * so: Kerberos, once */
      hipc_close(fs->ipc);
      fs->ipc = NULL;
      fs->kerberos = true;
      attempt--;
      continue;
    }
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
  int rc = hdfs_nn_call(fs, "getFileInfo", &req.base,
                        &hadoop__hdfs__get_file_info_response_proto__descriptor,
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
    rc = hdfs_nn_call(fs, "getListing", &req.base,
                      &hadoop__hdfs__get_listing_response_proto__descriptor,
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
  int rc = hdfs_nn_call(fs, "mkdirs", &req.base, &hadoop__hdfs__mkdirs_response_proto__descriptor,
                        &resp, true, err, errlen);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  return rc;
}

int hdfs_delete(hdfs *fs, const char *path, bool recursive, char *err, size_t errlen) {
  Hadoop__Hdfs__DeleteRequestProto req = HADOOP__HDFS__DELETE_REQUEST_PROTO__INIT;
  req.src = (char *)path;
  req.recursive = recursive;
  Hadoop__Hdfs__DeleteResponseProto *resp = NULL;
  int rc = hdfs_nn_call(fs, "delete", &req.base, &hadoop__hdfs__delete_response_proto__descriptor,
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
  int rc = hdfs_nn_call(fs, "rename2", &req.base, &hadoop__hdfs__rename2_response_proto__descriptor,
                        &resp, false, err, errlen);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  return rc;
}

int hdfs_server_defaults(hdfs *fs, char *err, size_t errlen) {
  if (fs->def_blocksize) return 0;
  Hadoop__Hdfs__GetServerDefaultsRequestProto req =
      HADOOP__HDFS__GET_SERVER_DEFAULTS_REQUEST_PROTO__INIT;
  Hadoop__Hdfs__GetServerDefaultsResponseProto *resp = NULL;
  int rc = hdfs_nn_call(fs, "getServerDefaults", &req.base,
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
      fs->encrypt_dt = resp->serverdefaults->has_encryptdatatransfer &&
                       resp->serverdefaults->encryptdatatransfer;
    }
  }
  if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  return rc;
}

void hdfs_renew_lease(hdfs *fs) {
  Hadoop__Hdfs__RenewLeaseRequestProto req = HADOOP__HDFS__RENEW_LEASE_REQUEST_PROTO__INIT;
  req.clientname = fs->client;
  ProtobufCMessage *resp = NULL;
  char err[512];
  if (hdfs_nn_call(fs, "renewLease", &req.base,
                   &hadoop__hdfs__renew_lease_response_proto__descriptor, &resp, true, err,
                   sizeof err) < 0)
    loom__log(LOOM_LOG_WARN, "hadoop", "renewing the write lease: %s", err);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
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
    snprintf(err, errlen, "refused: %s%s%s", hdfs_status_name(resp->status),
             resp->message ? ": " : "", resp->message ? resp->message : "");
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
               hdfs_status_name(a->reply[i]));
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

/* ---- delegation tokens ------------------------------------------------------ */

/* The HDFS delegation token in a credentials file's bytes, into t. */
static int dt_of(const uint8_t *file, size_t len, hyarn_cred_token *t, char *err, size_t errlen) {
  char why[512];
  int rc = hyarn_creds_find_for(file, len, HDFS_DT_KIND, NULL, t, why, sizeof why);
  if (rc < 0) snprintf(err, errlen, "%s", why);
  return rc;
}

int hdfs_dt_service(const uint8_t *file, size_t len, char *host, size_t hostlen, int *port,
                    char *err, size_t errlen) {
  hyarn_cred_token t;
  int rc = dt_of(file, len, &t, err, errlen);
  if (rc < 0) return rc;
  const char *colon = strrchr(t.service, ':');
  long long p = 0;
  if (!colon || colon == t.service || (size_t)(colon - t.service) >= hostlen ||
      loom__parse_int(colon + 1, 1, 65535, &p) < 0) {
    snprintf(err, errlen, "the delegation token's service '%s' is not HOST:PORT", t.service);
    rc = LOOM_EPROTO;
  } else {
    snprintf(host, hostlen, "%.*s", (int)(colon - t.service), t.service);
    *port = (int)p;
  }
  hyarn_cred_token_free(&t);
  return rc;
}

int hdfs_dt_fetch(hdfs *fs, const char *renewer, uint8_t **file, size_t *len, char *err,
                  size_t errlen) {
  *file = NULL;
  *len = 0;
  Hadoop__Common__GetDelegationTokenRequestProto req =
      HADOOP__COMMON__GET_DELEGATION_TOKEN_REQUEST_PROTO__INIT;
  req.renewer = (char *)(renewer ? renewer : "");
  Hadoop__Common__GetDelegationTokenResponseProto *resp = NULL;
  int rc = hdfs_nn_call(fs, "getDelegationToken", &req.base,
                        &hadoop__common__get_delegation_token_response_proto__descriptor,
                        (ProtobufCMessage **)&resp, false, err, errlen);
  if (rc == 0 && (!resp->token || !resp->token->identifier.len)) {
    snprintf(err, errlen, "%s gave no delegation token (a cluster without security gives none)",
             fs->peer);
    rc = LOOM_EPROTO;
  }
  if (rc == 0) {
    /* the NameNode names no service: the client names it, as Java's
     * SecurityUtil.setTokenService does (address:port) */
    hyarn_cred_token t = {.identifier = resp->token->identifier.data,
                          .identifier_len = resp->token->identifier.len,
                          .password = resp->token->password.data,
                          .password_len = resp->token->password.len};
    loom__strlcpy(t.kind, HDFS_DT_KIND, sizeof t.kind);
    char ip[INET_ADDRSTRLEN] = "";
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(fs->host, NULL, &hints, &ai) == 0 && ai)
      inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, ip, sizeof ip);
    if (ai) freeaddrinfo(ai);
    snprintf(t.service, sizeof t.service, "%.200s:%d", ip[0] ? ip : fs->host, fs->port);
    rc = hyarn_creds_encode_all(&t, 1, NULL, 0, file, len);
    if (rc < 0) snprintf(err, errlen, "cannot write the token: %s", loom_strerror(rc));
  }
  if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  return rc;
}

/* renewDelegationToken or cancelDelegationToken of the file's token. */
static int dt_call(hdfs *fs, bool renew, const uint8_t *file, size_t len, uint64_t *expiry_ms,
                   char *err, size_t errlen) {
  hyarn_cred_token t;
  int rc = dt_of(file, len, &t, err, errlen);
  if (rc < 0) return rc;
  Hadoop__Common__TokenProto tok = HADOOP__COMMON__TOKEN_PROTO__INIT;
  tok.identifier = (ProtobufCBinaryData){t.identifier_len, t.identifier};
  tok.password = (ProtobufCBinaryData){t.password_len, t.password};
  tok.kind = t.kind;
  tok.service = t.service;
  if (renew) {
    Hadoop__Common__RenewDelegationTokenRequestProto req =
        HADOOP__COMMON__RENEW_DELEGATION_TOKEN_REQUEST_PROTO__INIT;
    req.token = &tok;
    Hadoop__Common__RenewDelegationTokenResponseProto *resp = NULL;
    rc = hdfs_nn_call(fs, "renewDelegationToken", &req.base,
                      &hadoop__common__renew_delegation_token_response_proto__descriptor,
                      (ProtobufCMessage **)&resp, false, err, errlen);
    if (rc == 0 && expiry_ms) *expiry_ms = resp->newexpirytime;
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  } else {
    Hadoop__Common__CancelDelegationTokenRequestProto req =
        HADOOP__COMMON__CANCEL_DELEGATION_TOKEN_REQUEST_PROTO__INIT;
    req.token = &tok;
    ProtobufCMessage *resp = NULL;
    rc = hdfs_nn_call(fs, "cancelDelegationToken", &req.base,
                      &hadoop__common__cancel_delegation_token_response_proto__descriptor, &resp,
                      false, err, errlen);
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  }
  hyarn_cred_token_free(&t);
  return rc;
}

int hdfs_dt_renew(hdfs *fs, const uint8_t *file, size_t len, uint64_t *expiry_ms, char *err,
                  size_t errlen) {
  return dt_call(fs, true, file, len, expiry_ms, err, errlen);
}

int hdfs_dt_cancel(hdfs *fs, const uint8_t *file, size_t len, char *err, size_t errlen) {
  return dt_call(fs, false, file, len, NULL, err, errlen);
}
