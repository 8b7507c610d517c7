/* ship.c: loom ships itself to YARN. A NodeManager's host need not have
 * loom: every container (the managed application master's and every
 * task's) gets the client's own loom executable as a LocalResource named
 * `loom` and runs `./loom` from its directory.
 *
 * The executable is staged once per content: in a per-user cache on the
 * cluster's default filesystem, <fs.defaultFS>/user/<user>/.loom/cache/
 * <sha256>/loom when that is HDFS, else (a one-host cluster, whose
 * NodeManagers read this host's files) <loom home>/cache/<sha256>/loom. A
 * job whose binary is there already uploads nothing. A copy is written
 * under a name of its own in the cache directory, then renamed onto
 * `loom`: the rename is atomic, and of two clients staging the same
 * binary at once one rename wins, the other's copy is removed. What is
 * there is trusted when its size is the binary's (and, on the local
 * filesystem, where reading it is cheap, its SHA-256 too); otherwise it
 * is replaced. The managed application master does not stage again: the
 * client hands it what it staged in YARN_SHIP_ENV. */
#include "backend/yarn/yarn_int.h"

#include "fs/fs.h"
#include "hadoop/conf.h"
#include "hadoop/hdfs.h"
#include "jobdir/jobdir.h"

#include <openssl/evp.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The SHA-256 of the file at path, as 64 hex digits, into hex (65 bytes). */
static int sha256_file(const char *path, char hex[65], char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return LOOM_EIO;
  }
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  unsigned char *buf = malloc(1 << 20);
  int rc = md && buf && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? 0 : LOOM_ENOMEM;
  size_t n;
  while (rc == 0 && (n = fread(buf, 1, 1 << 20, f)) > 0)
    if (EVP_DigestUpdate(md, buf, n) != 1) rc = LOOM_ENOMEM;
  if (rc == 0 && ferror(f)) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    rc = LOOM_EIO;
  }
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int dl = 0;
  if (rc == 0 && (EVP_DigestFinal_ex(md, d, &dl) != 1 || dl != 32)) rc = LOOM_ENOMEM;
  for (unsigned i = 0; rc == 0 && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
  if (rc == LOOM_ENOMEM) snprintf(err, errlen, "out of memory hashing %s", path);
  free(buf);
  EVP_MD_CTX_free(md);
  fclose(f);
  return rc;
}

/* Whether the cached copy at url is the binary (size bytes, digest sha):
 * its size, and on the local filesystem its digest. */
static bool cached_ok(const char *url, uint64_t size, const char *sha, loom__fs_info *st) {
  char why[512], hex[65];
  if (loom__fs_stat(url, st, why, sizeof why) < 0 || st->dir || st->size != size) return false;
  if (loom__fs_remote(url)) return true;
  return sha256_file(url, hex, why, sizeof why) == 0 && !strcmp(hex, sha);
}

/* The managed application master: what the client staged, from
 * YARN_SHIP_ENV ("<size> <mtime_ms> <url>"). 1 when set and well formed. */
static int inherited(hyarn_resource *r) {
  const char *v = getenv(YARN_MANAGED_ENV) ? getenv(YARN_SHIP_ENV) : NULL;
  long long size, mtime;
  int off = 0;
  if (!v || sscanf(v, "%lld %lld %n", &size, &mtime, &off) != 2 || !v[off]) return 0;
  r->path = strdup(v + off);
  r->size = size;
  r->mtime_ms = mtime;
  return r->path ? 1 : LOOM_ENOMEM;
}

int yarn_ship(const char *self, hyarn_resource *r, yarn_ship_info *info, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  memset(info, 0, sizeof *info);
  uint64_t t0 = loom__now_ms();
  r->name = strdup(YARN_SHIP_NAME);
  if (!r->name) return LOOM_ENOMEM;
  r->user_cache = true;
  int rc = inherited(r);
  if (rc != 0) {
    info->inherited = rc > 0;
    if (rc < 0) free((char *)r->name), r->name = NULL;
    return rc < 0 ? rc : 0;
  }
  char why[1024];
  loom__fs_info mine;
  if ((rc = loom__fs_stat(self, &mine, why, sizeof why)) < 0 ||
      (rc = sha256_file(self, info->sha, why, sizeof why)) < 0) {
    snprintf(err, errlen, "cannot read loom's own executable %s: %s", self, why);
    goto fail;
  }
  char dir[PATH_MAX], user[256];
  hdfs_url def;
  if (hdfs_parse_url("hdfs:///", &def, why, sizeof why) == 0) {
    hconf_user(user, sizeof user);
    snprintf(dir, sizeof dir, "hdfs://%s:%d/user/%s/.loom/cache/%s", def.host, def.port, user,
             info->sha);
  } else {
    snprintf(dir, sizeof dir, "%s/cache/%s", jobdir_home(), info->sha);
  }
  char *url = loom__asprintf("%s/%s", dir, YARN_SHIP_NAME);
  if (!url) {
    rc = LOOM_ENOMEM;
    goto fail;
  }
  r->path = url;
  loom__fs_info st;
  if (!cached_ok(url, mine.size, info->sha, &st)) {
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    char *tmp = loom__asprintf("%s/.%s.%s.%ld.%llx.part", dir, YARN_SHIP_NAME, host, (long)getpid(),
                               (unsigned long long)loom__now_ms());
    rc = tmp ? loom__fs_mkdirs(dir, why, sizeof why) : LOOM_ENOMEM;
    if (rc == 0) rc = loom__fs_put(self, tmp, true, why, sizeof why);
    if (rc == 0) {
      info->uploaded = mine.size;
      /* onto an empty place; another client's copy that won is kept */
      rc = loom__fs_rename(tmp, url, false, why, sizeof why);
      if (rc == LOOM_ESTATE && !cached_ok(url, mine.size, info->sha, &st))
        rc = loom__fs_rename(tmp, url, true, why, sizeof why); /* a bad copy: replaced */
      if (rc == LOOM_ESTATE) rc = 0;
    }
    if (tmp) {
      char ignore[256];
      loom__fs_remove(tmp, false, ignore, sizeof ignore);
    }
    free(tmp);
    if (rc == 0 && !cached_ok(url, mine.size, info->sha, &st)) {
      snprintf(why, sizeof why, "the copy there is not %llu bytes after the upload",
               (unsigned long long)mine.size);
      rc = LOOM_EIO;
    }
    if (rc < 0) {
      snprintf(err, errlen, "cannot stage loom's own executable into %s for YARN: %s", url, why);
      goto fail;
    }
  }
  /* the size and time YARN checks are what the cache's filesystem says */
  r->size = (int64_t)st.size;
  r->mtime_ms = st.mtime_ms;
  info->ms = loom__now_ms() - t0;
  return 0;
fail:
  free((char *)r->name);
  free((char *)r->path);
  memset(r, 0, sizeof *r);
  return rc == LOOM_ENOMEM ? rc : LOOM_EBACKEND;
}

char *yarn_ship_env(const hyarn_resource *r) {
  return loom__asprintf("%s=%lld %lld %s", YARN_SHIP_ENV, (long long)r->size,
                        (long long)r->mtime_ms, r->path);
}
