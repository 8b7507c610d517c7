/* dir.c: a directory of checkpoints, one entry per step (dir.h): naming,
 * listing, committing and pruning, local or on HDFS, for libloom's checkpoints and
 * the parameter server's. */
#include "ckpt/dir.h"
#include "core/core.h"
#include "fs/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ckpt_dir_path(const ckpt_dir *d, int64_t step, char *out, size_t len) {
  size_t n =
      (size_t)snprintf(out, len, "%s/%s%012lld%s", d->dir, d->prefix, (long long)step, d->suffix);
  return n < len ? 0 : LOOM_ERANGE;
}

int64_t ckpt_dir_step_of(const ckpt_dir *d, const char *name) {
  size_t pl = strlen(d->prefix);
  if (strncmp(name, d->prefix, pl) != 0) return -1;
  const char *p = name + pl, *q = p;
  while (*q >= '0' && *q <= '9') q++;
  if (q == p || q - p > 18 || strcmp(q, d->suffix) != 0) return -1;
  int64_t v = 0;
  for (; p < q; p++) v = v * 10 + (*p - '0');
  return v;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int ckpt_dir_steps(const ckpt_dir *d, int64_t **steps, size_t *n, char *why, size_t whylen) {
  *steps = NULL;
  *n = 0;
  char pat[PATH_MAX + 64];
  if ((size_t)snprintf(pat, sizeof pat, "%s/%s*%s", d->dir, d->prefix, d->suffix) >= sizeof pat) {
    snprintf(why, whylen, "path too long");
    return LOOM_ERANGE;
  }
  char **names = NULL;
  size_t k = 0;
  int rc = loom__fs_glob(pat, &names, &k, why, whylen);
  if (rc < 0) return rc;
  int64_t *v = malloc((k ? k : 1) * sizeof *v);
  size_t len = 0;
  for (size_t i = 0; i < k; i++) {
    const char *b = strrchr(names[i], '/');
    int64_t s = ckpt_dir_step_of(d, b ? b + 1 : names[i]);
    if (v && s >= 0) v[len++] = s;
    free(names[i]);
  }
  free(names);
  if (!v) {
    snprintf(why, whylen, "out of memory");
    return LOOM_ENOMEM;
  }
  if (len > 1) qsort(v, len, sizeof *v, cmp_i64);
  *steps = v;
  *n = len;
  return 0;
}

void ckpt_dir_prune(const ckpt_dir *d, const int64_t *steps, size_t n, int64_t step, int keep,
                    void (*dropped)(void *arg, int64_t step), void *arg) {
  for (size_t i = 0; i < n; i++) {
    int64_t s = steps[i];
    bool later = s > step;
    bool drop = later && d->drop_later;
    if (!drop && s != step && keep > 0) {
      /* the kept steps newer than s: drop s once keep of them are newer */
      size_t newer = 0;
      for (size_t j = 0; j < n; j++) newer += steps[j] > s && !(d->drop_later && steps[j] > step);
      drop = newer >= (size_t)keep;
    }
    if (!drop) continue;
    char path[PATH_MAX + 64], why[1024];
    int rc = ckpt_dir_path(d, s, path, sizeof path);
    if (rc < 0) continue;
    rc = loom__fs_remove(path, d->is_dir, why, sizeof why);
    if (rc < 0 && rc != LOOM_ENOENT)
      loom__log(LOOM_LOG_WARN, d->tag, "cannot remove an old checkpoint: %s", why);
    if (dropped) dropped(arg, s);
  }
}

/* Removes tmp after a failed commit. */
static void drop_tmp(const char *tmp) {
  char why[256];
  loom__fs_remove(tmp, false, why, sizeof why);
}

int ckpt_dir_commit(const ckpt_dir *d, int64_t step, const char *tmp, int keep,
                    void (*dropped)(void *arg, int64_t step), void *arg, char *why, size_t whylen) {
  char path[PATH_MAX + 128], err[1024];
  int rc = ckpt_dir_path(d, step, path, sizeof path);
  if (rc == 0 && d->manifest) {
    size_t n = strlen(path);
    if ((size_t)snprintf(path + n, sizeof path - n, "/%s", d->manifest) >= sizeof path - n)
      rc = LOOM_ERANGE;
  }
  if (rc < 0) {
    snprintf(why, whylen, "checkpoint path too long in %s", d->dir);
    drop_tmp(tmp);
    return rc;
  }
  bool remote = loom__fs_remote(path);
  if (remote && !loom__fs_remote(tmp)) {
    /* uploaded whole under the local temporary file's name (unique to
     * its writer: two savers of one step never share it), then renamed
     * over the step's */
    char rtmp[sizeof path], base[PATH_MAX];
    loom__strlcpy(base, tmp, sizeof base);
    memcpy(rtmp, path, sizeof rtmp);
    char *slash = strrchr(rtmp, '/');
    size_t at = slash ? (size_t)(slash - rtmp) + 1 : 0;
    if ((size_t)snprintf(rtmp + at, sizeof rtmp - at, "%s", basename(base)) >= sizeof rtmp - at) {
      unlink(tmp);
      snprintf(why, whylen, "checkpoint path too long in %s", d->dir);
      return LOOM_ERANGE;
    }
    rc = loom__fs_put(tmp, rtmp, true, err, sizeof err);
    unlink(tmp);
    char scratch[256];
    if (rc == 0 && (rc = loom__fs_rename(rtmp, path, true, err, sizeof err)) < 0)
      loom__fs_remove(rtmp, false, scratch, sizeof scratch);
    if (rc < 0) {
      snprintf(why, whylen, "cannot save checkpoint %s: %s", path, err);
      return rc;
    }
  } else {
    rc = loom__fs_rename(tmp, path, true, why, whylen);
    if (rc < 0) {
      drop_tmp(tmp);
      return rc;
    }
  }
  if (!remote) {
    /* the rename reaches the disk with the directory */
    char parent[sizeof path];
    memcpy(parent, path, sizeof parent);
    const char *pd = dirname(parent);
    int dfd = open(pd, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || (fsync(dfd) < 0 && errno != EINVAL)) {
      int e = errno;
      if (dfd >= 0) close(dfd);
      snprintf(why, whylen, "cannot sync checkpoint directory %s: %s", pd, strerror(e));
      return LOOM_EIO;
    }
    close(dfd);
  }
  if (d->latest) {
    char latest[32];
    int n = snprintf(latest, sizeof latest, "%lld\n", (long long)step);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", d->dir, d->latest) >= sizeof path) {
      snprintf(why, whylen, "checkpoint path too long in %s", d->dir);
      return LOOM_ERANGE;
    }
    snprintf(err, sizeof err, "%s", "cannot write it");
    rc = remote ? loom__fs_write_all(path, latest, (size_t)n, true, err, sizeof err)
                : loom__write_atomic(path, latest, (size_t)n, 0644, true);
    if (rc < 0 && !remote) snprintf(err, sizeof err, "%s", strerror(errno));
    if (rc < 0) {
      snprintf(why, whylen, "cannot write %s: %s", path, err);
      return rc;
    }
  }
  int64_t *steps;
  size_t n;
  if (ckpt_dir_steps(d, &steps, &n, err, sizeof err) < 0) {
    loom__log(LOOM_LOG_WARN, d->tag, "cannot list checkpoints to prune in %s: %s", d->dir, err);
    return 0;
  }
  ckpt_dir_prune(d, steps, n, step, keep, dropped, arg);
  free(steps);
  return 0;
}
