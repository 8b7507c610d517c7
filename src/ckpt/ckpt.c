/* ckpt.c: atomic checkpoints of named tensors (include/loom/ckpt.h).
 *
 * One file per step, dir/ckpt-<step %012lld>.ckpt: its layout is in the
 * comment that opens format.c, which reads and checks the files; a save
 * here writes them.
 *
 * A save writes .ckpt-<step>.tmp.<host>.<pid>.<n> in the same directory,
 * fsyncs it, and ckpt_dir_commit (dir.h) renames it to its name, fsyncs
 * the directory and prunes: a reader
 * sees either the old set of files or the new one, and a file under a
 * checkpoint's name was complete when it got that name. What a crash can
 * leave is a temporary file, which the next open or save on the same host
 * removes once its writer is gone. Bytes can still go bad later (a disk, a
 * person with an editor): hence the size field, the structure checks and
 * the CRC, all verified before a restore writes into the caller's memory. */
#include "core/core.h"
#include "lib/lib.h"
#include "core/bytes.h"
#include "core/crc32c.h"
#include "fs/fs.h"
#include "fs/tmpdir.h"
#include "loom/ckpt.h"
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_int.h"
#include "ckpt/dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ckpt_fail(loom_ckpt_t *c, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
  va_end(ap);
  if (c->l) loom__fail(c->l, code, "%s", c->errmsg);
  return code;
}

/* ---- the directory ---------------------------------------------------- */

/* The directory as ckpt_dir sees it: the remote one when there is one
 * (the local one then only stages saves), else the local one. */
static ckpt_dir ckpt_dir_of(const loom_ckpt_t *c, bool remote) {
  return (ckpt_dir){.dir = remote ? c->remote : c->dir,
                    .prefix = "ckpt-",
                    .suffix = ".ckpt",
                    .drop_later = true,
                    .tag = "ckpt"};
}

static int ckpt_path(const loom_ckpt_t *c, int64_t step, char *out, size_t len) {
  ckpt_dir d = ckpt_dir_of(c, false);
  return ckpt_dir_path(&d, step, out, len);
}

/* The name of step's checkpoint in the remote directory. */
static int ckpt_remote_path(const loom_ckpt_t *c, int64_t step, char *out, size_t len) {
  ckpt_dir d = ckpt_dir_of(c, true);
  return ckpt_dir_path(&d, step, out, len);
}

/* ckpt_scan of a remote directory: the names its listing holds. */
static int ckpt_scan_remote(loom_ckpt_t *c, int64_t **steps, size_t *n) {
  char why[1024];
  ckpt_dir d = ckpt_dir_of(c, true);
  int rc = ckpt_dir_steps(&d, steps, n, why, sizeof why);
  if (rc == LOOM_ENOMEM) return ckpt_fail(c, LOOM_ENOMEM, "out of memory");
  if (rc < 0) return ckpt_fail(c, rc, "cannot read checkpoint directory %s: %s", c->remote, why);
  return 0;
}

/* Removes name, a temporary file of a save, when this host wrote it and
 * its writer is gone. */
static void ckpt_clean_temp(loom_ckpt_t *c, const char *name) {
  /* .ckpt-<step>.tmp.<host>.<pid>.<n> */
  const char *tmp = strstr(name, ".tmp.");
  if (strncmp(name, ".ckpt-", 6) != 0 || !tmp) return;
  const char *host = tmp + 5;
  const char *last = strrchr(host, '.');
  if (!last || last == host) return;
  const char *pid_end = last;
  const char *pid_start = pid_end;
  while (pid_start > host && pid_start[-1] != '.') pid_start--;
  if (pid_start == host) return;
  size_t host_len = (size_t)(pid_start - 1 - host);
  if (host_len != strlen(c->host) || strncmp(host, c->host, host_len) != 0) return;
  long long pid;
  char pidbuf[32];
  size_t plen = (size_t)(pid_end - pid_start);
  if (plen == 0 || plen >= sizeof pidbuf) return;
  memcpy(pidbuf, pid_start, plen);
  pidbuf[plen] = 0;
  if (loom__parse_int(pidbuf, 1, INT_MAX, &pid) < 0) return;
  if (pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) return;
  char path[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", c->dir, name) >= sizeof path) return;
  if (unlink(path) == 0)
    loom__log(LOOM_LOG_INFO, "ckpt", "removed %s, left by a save that died", path);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The steps of the checkpoint files in the directory, ascending, into a
 * malloc'ed *steps the caller frees; removes dead savers' temporary files
 * on the way. */
static int ckpt_scan(loom_ckpt_t *c, int64_t **steps, size_t *n) {
  *steps = NULL;
  *n = 0;
  if (c->remote) return ckpt_scan_remote(c, steps, n);
  ckpt_dir cd = ckpt_dir_of(c, false);
  DIR *d = opendir(c->dir);
  if (!d)
    return ckpt_fail(c, errno == ENOENT ? LOOM_ENOENT : LOOM_EIO,
                     "cannot read checkpoint directory %s: %s", c->dir, strerror(errno));
  int64_t *v = NULL;
  size_t len = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  errno = 0;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') {
      ckpt_clean_temp(c, e->d_name);
      continue;
    }
    int64_t s = ckpt_dir_step_of(&cd, e->d_name);
    if (s < 0) continue;
    if (len == cap) {
      size_t ncap = cap ? cap * 2 : 64;
      int64_t *nv = ncap <= CKPT_MAX_FILES ? realloc(v, ncap * sizeof *v) : NULL;
      if (!nv) {
        rc = ckpt_fail(c, ncap <= CKPT_MAX_FILES ? LOOM_ENOMEM : LOOM_ERANGE,
                       "too many checkpoint files in %s", c->dir);
        break;
      }
      v = nv;
      cap = ncap;
    }
    v[len++] = s;
  }
  closedir(d);
  if (rc < 0) {
    free(v);
    return rc;
  }
  if (len > 1) qsort(v, len, sizeof *v, cmp_i64);
  *steps = v;
  *n = len;
  return 0;
}

/* Opens the checkpoint of step for reading into *fd. */
static int ckpt_open_step(loom_ckpt_t *c, int64_t step, char *path, size_t len, int *fd) {
  if (ckpt_path(c, step, path, len) < 0)
    return ckpt_fail(c, LOOM_ERANGE, "checkpoint path too long in %s", c->dir);
  if (c->remote) {
    /* fetched whole (every HDFS checksum checked on the way), read from
     * here, and gone from here once read */
    char name[PATH_MAX + 32], why[1024];
    if (ckpt_remote_path(c, step, name, sizeof name) < 0)
      return ckpt_fail(c, LOOM_ERANGE, "checkpoint path too long in %s", c->remote);
    int rc = loom__fs_get(name, path, why, sizeof why);
    if (rc == LOOM_ENOENT)
      return ckpt_fail(c, LOOM_ENOENT, "no checkpoint of step %lld in %s", (long long)step,
                       c->remote);
    if (rc < 0) return ckpt_fail(c, LOOM_EIO, "cannot fetch checkpoint %s: %s", name, why);
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    int e = errno;
    unlink(path);
    /* messages name the checkpoint, not the copy */
    if (loom__strlcpy(path, name, len) >= len) path[0] = 0;
    if (*fd >= 0) return 0;
    return ckpt_fail(c, LOOM_EIO, "cannot open the copy of checkpoint %s: %s", name, strerror(e));
  }
  *fd = open(path, O_RDONLY | O_CLOEXEC);
  if (*fd >= 0) return 0;
  if (errno == ENOENT)
    return ckpt_fail(c, LOOM_ENOENT, "no checkpoint of step %lld in %s", (long long)step, c->dir);
  return ckpt_fail(c, LOOM_EIO, "cannot open checkpoint %s: %s", path, strerror(errno));
}

/* ---- open --------------------------------------------------------------- */

int loom_ckpt_open(loom_t *l, const char *dir, int keep, loom_ckpt_t **out) {
  if (!out) return LOOM_EINVAL;
  *out = NULL;
  if (keep < 0)
    return loom__fail(l, LOOM_EINVAL, "keep must be 0 (every checkpoint) or more, got %d", keep);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
  return loom__fail(l, LOOM_ENOTSUP, "checkpoints need a little-endian host");
#endif
  char def[PATH_MAX];
  if (!dir) {
    const char *job_dir = getenv("LOOM_JOB_DIR");
    if (!job_dir || !*job_dir)
      return loom__fail(l, LOOM_ENOENV,
                        "no checkpoint directory given and not inside a loom "
                        "job (LOOM_JOB_DIR unset)");
    if ((size_t)snprintf(def, sizeof def, "%s/ckpt", job_dir) >= sizeof def)
      return loom__fail(l, LOOM_ERANGE, "checkpoint directory path too long");
    dir = def;
  }
  if (!*dir) return loom__fail(l, LOOM_EINVAL, "checkpoint directory is empty");

  loom_ckpt_t *c = calloc(1, sizeof *c);
  if (!c) return LOOM_ENOMEM;
  c->l = l;
  c->keep = keep;
  c->dir_lock = -1;
  pthread_mutex_init(&c->mu, NULL);
  if (loom__fs_remote(dir)) {
    char why[1024];
    int rc = (c->remote = strdup(dir)) ? 0 : LOOM_ENOMEM;
    if (rc == 0)
      rc = loom__tmpdir_make("ckpt", c->dir, sizeof c->dir, &c->dir_lock, why, sizeof why);
    if (rc == 0) rc = loom__fs_mkdirs(dir, why, sizeof why);
    if (rc < 0) {
      rc = loom__fail(l, rc, "cannot create checkpoint directory %s: %s", dir, why);
      loom_ckpt_close(c);
      return rc;
    }
    *out = c;
    return 0;
  }
  if (loom__strlcpy(c->dir, dir, sizeof c->dir) >= sizeof c->dir) {
    loom_ckpt_close(c);
    return loom__fail(l, LOOM_ERANGE, "checkpoint directory path too long");
  }
  if (gethostname(c->host, sizeof c->host) < 0 || !c->host[0])
    loom__strlcpy(c->host, "localhost", sizeof c->host);
  c->host[sizeof c->host - 1] = 0;
  for (char *p = c->host; *p; p++)
    if (*p == '/') *p = '_';

  int rc = loom__mkdir_p(c->dir, 0755);
  struct stat st;
  if (rc == 0 && (stat(c->dir, &st) < 0 || !S_ISDIR(st.st_mode))) rc = LOOM_EIO;
  if (rc < 0) {
    rc = ckpt_fail(c, rc, "cannot create checkpoint directory %s: %s", c->dir, strerror(errno));
    if (!l) loom__log(LOOM_LOG_ERROR, "ckpt", "%s", c->errmsg);
    loom_ckpt_close(c);
    return rc;
  }
  int64_t *steps;
  size_t n;
  if (ckpt_scan(c, &steps, &n) == 0) free(steps); /* removes dead temps */
  c->errmsg[0] = 0;
  *out = c;
  return 0;
}

void loom_ckpt_close(loom_ckpt_t *c) {
  if (!c) return;
  if (c->remote) loom__tmpdir_remove(c->dir, c->dir_lock);
  free(c->remote);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const char *loom_ckpt_dir(const loom_ckpt_t *c) { return !c ? "" : c->remote ? c->remote : c->dir; }
const char *loom_ckpt_errmsg(const loom_ckpt_t *c) { return c ? c->errmsg : ""; }

/* ---- save --------------------------------------------------------------- */

/* Writes n bytes at p to fd, adding them to *crc. */
static int write_crc(int fd, const void *p, size_t n, uint32_t *crc) {
  *crc = loom__crc32c(*crc, p, n);
  const unsigned char *b = p;
  while (n > 0) {
    size_t chunk = n < (1u << 30) ? n : (1u << 30);
    ssize_t w = write(fd, b, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -errno;
    if (w == 0) return -EIO;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

static const unsigned char ZEROS[CKPT_ALIGN];

static int cmp_names(const void *a, const void *b) {
  const loom_tensor *x = *(const loom_tensor *const *)a;
  const loom_tensor *y = *(const loom_tensor *const *)b;
  return strcmp(x->name, y->name);
}

/* Checks the tensors to save: names, dtypes, shapes, sizes, duplicates.
 * Called with mu held. */
static int ckpt_check_tensors(loom_ckpt_t *c, const loom_tensor *t, size_t n) {
  char sbuf[256];
  for (size_t i = 0; i < n; i++) {
    const loom_tensor *x = &t[i];
    size_t len = x->name ? strlen(x->name) : 0;
    if (len == 0 || len > LOOM_CKPT_MAX_NAME)
      return ckpt_fail(c, LOOM_EINVAL, "tensor %zu: a name of 1..%d bytes is needed, got %zu", i,
                       LOOM_CKPT_MAX_NAME, len);
    int di = ckpt_dtype_index_of(x->dtype);
    if (di < 0)
      return ckpt_fail(c, LOOM_EINVAL, "tensor '%s': unknown dtype %d", x->name, (int)x->dtype);
    if (x->ndim < 0 || x->ndim > LOOM_CKPT_MAX_DIMS)
      return ckpt_fail(c, LOOM_EINVAL, "tensor '%s': ndim must be 0..%d, got %d", x->name,
                       LOOM_CKPT_MAX_DIMS, x->ndim);
    int64_t b = ckpt_tensor_bytes(ckpt_dtypes[di].size, x->ndim, x->shape);
    if (b < 0)
      return ckpt_fail(c, LOOM_EINVAL,
                       "tensor '%s': shape %s has a negative dimension or is "
                       "too large",
                       x->name, ckpt_shape_str(di, x->ndim, x->shape, sbuf, sizeof sbuf));
    if (b > 0 && !x->data) return ckpt_fail(c, LOOM_EINVAL, "tensor '%s': data is NULL", x->name);
  }
  if (n < 2) return 0;
  const loom_tensor **sorted = malloc(n * sizeof *sorted);
  if (!sorted) return ckpt_fail(c, LOOM_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) sorted[i] = &t[i];
  qsort(sorted, n, sizeof *sorted, cmp_names);
  int rc = 0;
  for (size_t i = 1; i < n && rc == 0; i++)
    if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0)
      rc = ckpt_fail(c, LOOM_EINVAL, "two tensors are named '%s'", sorted[i]->name);
  free(sorted);
  return rc;
}

/* ckpt_dir_commit's word that it removed step's checkpoint (a later one,
 * or the oldest beyond keep). Called with mu held. */
static void ckpt_forget(void *arg, int64_t step) {
  loom_ckpt_t *c = arg;
  if (c->verified.valid && c->verified.step == step) c->verified.valid = false;
}

static int ckpt_save_locked(loom_ckpt_t *c, int64_t step, const loom_tensor *t, size_t n) {
  int rc = ckpt_check_tensors(c, t, n);
  if (rc < 0) return rc;

  /* the table, and where each tensor's data goes */
  uint64_t table_size = 0;
  for (size_t i = 0; i < n; i++)
    table_size += 2 + strlen(t[i].name) + 2 + 8u * (uint64_t)t[i].ndim + 16;
  if (table_size > CKPT_MAX_TABLE)
    return ckpt_fail(c, LOOM_ERANGE,
                     "checkpoint table of %llu bytes is over the %u cap (fewer "
                     "or shorter-named tensors)",
                     (unsigned long long)table_size, CKPT_MAX_TABLE);
  unsigned char *table = malloc(table_size ? table_size : 1);
  if (!table) return ckpt_fail(c, LOOM_ENOMEM, "out of memory");
  uint64_t off = CKPT_HEADER + table_size;
  unsigned char *p = table;
  for (size_t i = 0; i < n; i++) {
    int di = ckpt_dtype_index_of(t[i].dtype);
    uint64_t bytes = (uint64_t)ckpt_tensor_bytes(ckpt_dtypes[di].size, t[i].ndim, t[i].shape);
    off = (off + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN;
    size_t len = strlen(t[i].name);
    loom__put_le16(p, (uint16_t)len);
    memcpy(p + 2, t[i].name, len);
    p += 2 + len;
    p[0] = (unsigned char)ckpt_dtypes[di].code;
    p[1] = (unsigned char)t[i].ndim;
    p += 2;
    for (int k = 0; k < t[i].ndim; k++, p += 8) loom__put_le64(p, (uint64_t)t[i].shape[k]);
    loom__put_le64(p, off);
    loom__put_le64(p + 8, bytes);
    p += 16;
    off += bytes;
  }
  uint64_t file_size = off + CKPT_TRAILER;
  unsigned char h[CKPT_HEADER] = {0};
  memcpy(h, CKPT_MAGIC, 8);
  loom__put_le32(h + 8, CKPT_VERSION);
  loom__put_le32(h + 12, CKPT_HEADER);
  loom__put_le64(h + 16, (uint64_t)step);
  loom__put_le64(h + 24, file_size);
  loom__put_le32(h + 32, (uint32_t)n);
  loom__put_le32(h + 36, (uint32_t)table_size);
  double now = loom__wall();
  uint64_t wall_bits;
  memcpy(&wall_bits, &now, 8);
  loom__put_le64(h + 40, wall_bits);

  static unsigned tmp_seq;
  char tmp[PATH_MAX], path[PATH_MAX];
  unsigned seq = __atomic_fetch_add(&tmp_seq, 1, __ATOMIC_RELAXED);
  if ((size_t)snprintf(tmp, sizeof tmp, "%s/.ckpt-%012lld.tmp.%s.%d.%u", c->dir, (long long)step,
                       c->host, (int)getpid(), seq) >= sizeof tmp ||
      ckpt_path(c, step, path, sizeof path) < 0) {
    free(table);
    return ckpt_fail(c, LOOM_ERANGE, "checkpoint path too long in %s", c->dir);
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    free(table);
    return ckpt_fail(c, LOOM_EIO, "cannot create %s: %s", tmp, strerror(errno));
  }
  uint32_t crc = 0;
  int e = write_crc(fd, h, sizeof h, &crc);
  if (e == 0) e = write_crc(fd, table, table_size, &crc);
  free(table);
  off = CKPT_HEADER + table_size;
  for (size_t i = 0; i < n && e == 0; i++) {
    int di = ckpt_dtype_index_of(t[i].dtype);
    uint64_t bytes = (uint64_t)ckpt_tensor_bytes(ckpt_dtypes[di].size, t[i].ndim, t[i].shape);
    size_t pad = (size_t)((CKPT_ALIGN - off % CKPT_ALIGN) % CKPT_ALIGN);
    e = write_crc(fd, ZEROS, pad, &crc);
    if (e == 0 && bytes) e = write_crc(fd, t[i].data, (size_t)bytes, &crc);
    off += pad + bytes;
  }
  unsigned char trailer[CKPT_TRAILER];
  loom__put_le32(trailer, crc);
  memcpy(trailer + 4, CKPT_END, 4);
  uint32_t ignored = 0;
  if (e == 0) e = write_crc(fd, trailer, sizeof trailer, &ignored);
  if (e == 0 && fsync(fd) < 0) e = -errno;
  if (close(fd) < 0 && e == 0) e = -errno;
  if (e < 0) {
    unlink(tmp);
    return ckpt_fail(c, LOOM_EIO, "cannot write checkpoint %s: %s", tmp, strerror(-e));
  }
  if (c->verified.valid && c->verified.step == step) c->verified.valid = false;
  /* into place and pruned; with a remote directory, uploaded under a
   * temporary name renamed over the step's */
  char why[1024];
  ckpt_dir d = ckpt_dir_of(c, c->remote != NULL);
  rc = ckpt_dir_commit(&d, step, tmp, c->keep, ckpt_forget, c, why, sizeof why);
  if (rc < 0) return ckpt_fail(c, LOOM_EIO, "%s", why);
  /* dead savers' temporary files go too */
  int64_t *steps;
  size_t nsteps;
  if (!c->remote && ckpt_scan(c, &steps, &nsteps) == 0) free(steps);
  loom__log(LOOM_LOG_DEBUG, "ckpt", "saved step %lld in %s (%zu tensors, %llu bytes)",
            (long long)step, loom_ckpt_dir(c), n, (unsigned long long)file_size);
  return 0;
}

int loom_ckpt_save(loom_ckpt_t *c, int64_t step, const loom_tensor *t, size_t n) {
  if (!c) return LOOM_EINVAL;
  pthread_mutex_lock(&c->mu);
  int rc;
  if (step < 0)
    rc = ckpt_fail(c, LOOM_EINVAL, "checkpoint step must be >= 0, got %lld", (long long)step);
  else if (n > LOOM_CKPT_MAX_TENSORS || (n > 0 && !t))
    rc = ckpt_fail(c, LOOM_EINVAL, "%zu tensors at %p: 0..%d tensors wanted", n, (const void *)t,
                   LOOM_CKPT_MAX_TENSORS);
  else
    rc = ckpt_save_locked(c, step, t, n);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ---- list, latest, verify ----------------------------------------------- */

int loom_ckpt_list(loom_ckpt_t *c, int64_t *steps, size_t max, size_t *count) {
  if (!c || (max > 0 && !steps)) return LOOM_EINVAL;
  pthread_mutex_lock(&c->mu);
  int64_t *v;
  size_t n;
  int rc = ckpt_scan(c, &v, &n);
  if (rc == 0) {
    for (size_t i = 0; i < n && i < max; i++) steps[i] = v[i];
    if (count) *count = n;
    free(v);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int loom_ckpt_latest(loom_ckpt_t *c, int64_t *step) {
  if (!c || !step) return LOOM_EINVAL;
  pthread_mutex_lock(&c->mu);
  int64_t *v;
  size_t n, skipped = 0;
  int rc = ckpt_scan(c, &v, &n);
  if (rc < 0) goto out;
  rc = LOOM_ENOENT;
  for (size_t i = n; i-- > 0 && rc == LOOM_ENOENT;) {
    char path[PATH_MAX];
    int fd;
    int orc = ckpt_open_step(c, v[i], path, sizeof path, &fd);
    if (orc == LOOM_ENOENT) continue; /* pruned since the scan */
    if (orc == 0) {
      ckpt_file f;
      orc = ckpt_check(c, path, fd, v[i], &f);
      close(fd);
      if (orc == 0) {
        ckpt_file_free(&f);
        *step = v[i];
        rc = 0;
        break;
      }
    }
    skipped++;
    loom__log(LOOM_LOG_WARN, "ckpt", "skipping checkpoint: %s", c->errmsg);
  }
  free(v);
  if (rc == LOOM_ENOENT)
    ckpt_fail(c, rc, "no valid checkpoint in %s (%zu corrupt or unreadable)", c->dir, skipped);
out:
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int loom_ckpt_verify(loom_ckpt_t *c, int64_t step) {
  if (!c) return LOOM_EINVAL;
  pthread_mutex_lock(&c->mu);
  char path[PATH_MAX];
  int fd;
  int rc = ckpt_open_step(c, step, path, sizeof path, &fd);
  if (rc == 0) {
    c->verified.valid = false; /* read it through: that is the point */
    ckpt_file f;
    rc = ckpt_check(c, path, fd, step, &f);
    close(fd);
    if (rc == 0) ckpt_file_free(&f);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ---- restore ------------------------------------------------------------ */

static int ckpt_restore_locked(loom_ckpt_t *c, int64_t step, loom_tensor *t, size_t n) {
  char path[PATH_MAX];
  int fd;
  int rc = ckpt_open_step(c, step, path, sizeof path, &fd);
  if (rc < 0) return rc;
  rc = ckpt_restore_fd(c, path, fd, step, t, n);
  close(fd);
  return rc;
}

int loom_ckpt_restore(loom_ckpt_t *c, int64_t step, loom_tensor *t, size_t n) {
  if (!c) return LOOM_EINVAL;
  pthread_mutex_lock(&c->mu);
  int rc;
  if (n > 0 && !t)
    rc = ckpt_fail(c, LOOM_EINVAL, "%zu tensors to restore at NULL", n);
  else if (step < 0)
    rc = ckpt_fail(c, LOOM_ENOENT, "no checkpoint of step %lld (steps are >= 0)", (long long)step);
  else
    rc = ckpt_restore_locked(c, step, t, n);
  pthread_mutex_unlock(&c->mu);
  return rc;
}
