/* store.c: the two rendezvous stores of store.h: files in a directory (for
 * tests that fork ranks without a coordinator) and the coordinator's KV
 * store (for jobs). */
#include "comm/store.h"
#include "lib/lib.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Values are small (addresses, names); a file store refuses bigger ones. */
#define STORE_MAX_VALUE (1u << 20)

/* ---- file store ------------------------------------------------------ */

struct file_store {
  comm_store base;
  char dir[PATH_MAX - 300];
};

static uint64_t store_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Keys may hold '/'; a file name may not, so it becomes '%'. */
static int file_path(struct file_store *s, const char *key, char *out, size_t len) {
  size_t klen = strlen(key);
  if (klen == 0 || klen > LOOM_KV_MAX_KEY) return LOOM_EINVAL;
  int n = snprintf(out, len, "%s/", s->dir);
  if (n < 0 || (size_t)n + klen + 1 > len) return LOOM_ERANGE;
  for (size_t i = 0; i <= klen; i++) out[n + i] = key[i] == '/' ? '%' : key[i];
  return 0;
}

static int file_set(comm_store *base, const char *key, const void *val, size_t len) {
  struct file_store *s = (struct file_store *)base;
  char path[PATH_MAX], tmp[PATH_MAX + 32];
  int rc = file_path(s, key, path, sizeof path);
  if (rc < 0) return rc;
  if (len > STORE_MAX_VALUE) return LOOM_ERANGE;
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return LOOM_EIO;
  const char *p = val;
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, p + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(fd);
      unlink(tmp);
      return LOOM_EIO;
    }
    off += (size_t)w;
  }
  close(fd);
  if (rename(tmp, path) < 0) {
    unlink(tmp);
    return LOOM_EIO;
  }
  return 0;
}

static int file_read(const char *path, void **val, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? LOOM_ENOENT : LOOM_EIO;
  struct stat st;
  if (fstat(fd, &st) < 0 || st.st_size < 0 || (uint64_t)st.st_size > STORE_MAX_VALUE) {
    close(fd);
    return LOOM_EIO;
  }
  size_t n = (size_t)st.st_size, off = 0;
  char *buf = malloc(n + 1);
  if (!buf) {
    close(fd);
    return LOOM_ENOMEM;
  }
  while (off < n) {
    ssize_t r = read(fd, buf + off, n - off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    off += (size_t)r;
  }
  close(fd);
  buf[off] = 0;
  *val = buf;
  *len = off;
  return 0;
}

static int file_get(comm_store *base, const char *key, int timeout_ms, void **val, size_t *len) {
  struct file_store *s = (struct file_store *)base;
  char path[PATH_MAX];
  int rc = file_path(s, key, path, sizeof path);
  if (rc < 0) return rc;
  uint64_t end = store_now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
  for (unsigned spin = 0;; spin++) {
    rc = file_read(path, val, len);
    if (rc != LOOM_ENOENT) return rc;
    if (timeout_ms >= 0 && store_now_ms() >= end) return LOOM_ETIMEDOUT;
    /* Start fast, since ranks usually arrive together, then back off. */
    struct timespec ts = {0, (spin < 100 ? 100 : 2000) * 1000L};
    nanosleep(&ts, NULL);
  }
}

static int file_add(comm_store *base, const char *key, int64_t delta, int64_t *result) {
  struct file_store *s = (struct file_store *)base;
  char path[PATH_MAX];
  int rc = file_path(s, key, path, sizeof path);
  if (rc < 0) return rc;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return LOOM_EIO;
  if (flock(fd, LOCK_EX) < 0) {
    close(fd);
    return LOOM_EIO;
  }
  char buf[32] = {0};
  ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
  long long v = r > 0 ? strtoll(buf, NULL, 10) : 0;
  v += delta;
  int n = snprintf(buf, sizeof buf, "%lld", v);
  rc = 0;
  if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n) rc = LOOM_EIO;
  flock(fd, LOCK_UN);
  close(fd);
  if (rc == 0 && result) *result = v;
  return rc;
}

static void file_destroy(comm_store *base) { free(base); }

static const struct comm_store_ops file_ops = {
    .set = file_set,
    .get = file_get,
    .add = file_add,
    .destroy = file_destroy,
};

int comm_store_file(const char *dir, comm_store **out) {
  if (!dir || !out) return LOOM_EINVAL;
  struct file_store *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ENOMEM;
  if (strlen(dir) >= sizeof s->dir) {
    free(s);
    return LOOM_ERANGE;
  }
  strcpy(s->dir, dir);
  s->base.ops = &file_ops;
  *out = &s->base;
  return 0;
}

/* ---- the coordinator's KV store ----------------------------------------- */

struct loom_store {
  comm_store base;
  loom_t *l;
};

static int kv_set(comm_store *base, const char *key, const void *val, size_t len) {
  return loom_kv_set(((struct loom_store *)base)->l, key, val, len);
}

static int kv_get(comm_store *base, const char *key, int timeout_ms, void **val, size_t *len) {
  return loom_kv_get(((struct loom_store *)base)->l, key, timeout_ms, val, len);
}

static int kv_add(comm_store *base, const char *key, int64_t delta, int64_t *result) {
  return loom_kv_add(((struct loom_store *)base)->l, key, delta, result);
}

static const struct comm_store_ops kv_ops = {
    .set = kv_set,
    .get = kv_get,
    .add = kv_add,
    .destroy = file_destroy,
};

int comm_store_loom(loom_t *l, comm_store **out) {
  if (!l || !out) return LOOM_EINVAL;
  struct loom_store *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ENOMEM;
  s->l = l;
  s->base.ops = &kv_ops;
  *out = &s->base;
  return 0;
}
