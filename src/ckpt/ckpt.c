/* ckpt.c: atomic checkpoints of named tensors (include/loom/ckpt.h).
 *
 * One file per step, dir/ckpt-<step %012lld>.ckpt, little-endian:
 *
 *   header (64 bytes)
 *     0  8  magic "LOOMCKPT"
 *     8  4  u32 format version (1)
 *    12  4  u32 header size (64)
 *    16  8  i64 step
 *    24  8  u64 file size, trailer included
 *    32  4  u32 tensor count
 *    36  4  u32 table size in bytes
 *    40  8  f64 wall time of the save (seconds since the epoch)
 *    48 16  zero
 *   table (table size bytes): per tensor, in the order saved
 *       u16 name length, the name (no NUL),
 *       u8 dtype (1 f32, 2 f64, 3 i32, 4 i64), u8 ndim, i64 shape[ndim],
 *       u64 offset of its data from the start of the file (a multiple of
 *       64), u64 size of its data in bytes
 *   data: each tensor's bytes at its offset, zeros between
 *   trailer (8 bytes)
 *       u32 CRC-32C of every byte before the trailer, then "CEND"
 *
 * A save writes .ckpt-<step>.tmp.<host>.<pid>.<n> in the same directory,
 * fsyncs it, renames it to its name and fsyncs the directory: a reader
 * sees either the old set of files or the new one, and a file under a
 * checkpoint's name was complete when it got that name. What a crash can
 * leave is a temporary file, which the next open or save on the same host
 * removes once its writer is gone. Bytes can still go bad later (a disk, a
 * person with an editor): hence the size field, the structure checks and
 * the CRC, all verified before a restore writes into the caller's memory. */
#include "core/core.h"
#include "lib/lib.h"
#include "core/crc32c.h"
#include "fs/fs.h"
#include "loom/ckpt.h"
#include "ckpt/ckpt.h"

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

#define CKPT_MAGIC "LOOMCKPT"
#define CKPT_END "CEND"
#define CKPT_VERSION 1
#define CKPT_HEADER 64
#define CKPT_TRAILER 8
#define CKPT_ALIGN 64
#define CKPT_MAX_TABLE (32u << 20)
#define CKPT_MAX_FILES (1u << 20) /* checkpoint files a directory may list */
#define CKPT_IO_CHUNK (1u << 20)

struct loom_ckpt {
  loom_t *l; /* not owned; may be NULL */
  char dir[PATH_MAX];
  /* an hdfs:// checkpoint directory: dir is then a local directory of
   * this handle's own, where a save writes (and a read fetches) one file
   * at a time; the checkpoints themselves are only in remote */
  char *remote;
  char host[256];
  int keep;
  pthread_mutex_t mu; /* one call at a time */
  char errmsg[1024];
  /* The last file found whole, so that restore right after latest reads
   * it once for its checksum, not twice. */
  struct {
    bool valid;
    int64_t step;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
  } verified;
};

/* One entry of a file's table, pointing into the table's bytes. */
typedef struct {
  const char *name;
  size_t name_len;
  int dtype; /* file code, 1..4 */
  int ndim;
  int64_t shape[LOOM_CKPT_MAX_DIMS];
  uint64_t offset, bytes;
} ckpt_entry;

/* A checked file: its header fields and parsed table. */
typedef struct {
  int64_t step;
  uint64_t size;
  uint32_t count;
  unsigned char *table; /* table bytes; entries point into it */
  ckpt_entry *entries;
} ckpt_file;

static void ckpt_file_free(ckpt_file *f) {
  free(f->table);
  free(f->entries);
  memset(f, 0, sizeof *f);
}

static int ckpt_fail(loom_ckpt_t *c, int code, const char *fmt, ...) LOOM__PRINTF(3, 4);
static int ckpt_fail(loom_ckpt_t *c, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
  va_end(ap);
  if (c->l) loom__fail(c->l, code, "%s", c->errmsg);
  return code;
}

/* ---- little-endian fields and dtypes ----------------------------------- */

static void put_le(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static const struct {
  loom_dtype dt;
  int code;
  size_t size;
  const char *name;
} DTYPES[] = {
    {LOOM_F32, 1, 4, "f32"},
    {LOOM_F64, 2, 8, "f64"},
    {LOOM_I32, 3, 4, "i32"},
    {LOOM_I64, 4, 8, "i64"},
};

static int dtype_index_of(loom_dtype dt) {
  for (size_t i = 0; i < LOOM__ARRAY_LEN(DTYPES); i++)
    if (DTYPES[i].dt == dt) return (int)i;
  return -1;
}

static int dtype_index_of_code(int code) {
  for (size_t i = 0; i < LOOM__ARRAY_LEN(DTYPES); i++)
    if (DTYPES[i].code == code) return (int)i;
  return -1;
}

/* "f32 [256, 784]" into buf. */
static const char *shape_str(int dtype_idx, int ndim, const int64_t *shape, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "%s [", dtype_idx >= 0 ? DTYPES[dtype_idx].name : "?");
  for (int i = 0; i < ndim && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (n < len) snprintf(buf + n, len - n, "]");
  return buf;
}

/* The size in bytes of a tensor of esize-byte elements and this shape, or
 * -1 when a dimension is negative or the size overflows. */
static int64_t tensor_bytes(size_t esize, int ndim, const int64_t *shape) {
  uint64_t total = esize;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return -1;
    if (__builtin_mul_overflow(total, (uint64_t)shape[i], &total)) return -1;
  }
  return total > (uint64_t)INT64_MAX / 2 ? -1 : (int64_t)total;
}

/* ---- the directory ---------------------------------------------------- */

static int cmp_i64(const void *a, const void *b);
static int64_t step_of_name(const char *name);

static int ckpt_path(const loom_ckpt_t *c, int64_t step, char *out, size_t len) {
  size_t n = (size_t)snprintf(out, len, "%s/ckpt-%012lld.ckpt", c->dir, (long long)step);
  return n < len ? 0 : LOOM_ERANGE;
}

/* The name of step's checkpoint in the remote directory. */
static int ckpt_remote_path(const loom_ckpt_t *c, int64_t step, char *out, size_t len) {
  size_t n = (size_t)snprintf(out, len, "%s/ckpt-%012lld.ckpt", c->remote, (long long)step);
  return n < len ? 0 : LOOM_ERANGE;
}

/* ckpt_scan of a remote directory: the names its listing holds. */
static int ckpt_scan_remote(loom_ckpt_t *c, int64_t **steps, size_t *n) {
  char pat[PATH_MAX + 32], why[1024];
  snprintf(pat, sizeof pat, "%s/ckpt-*.ckpt", c->remote);
  char **names = NULL;
  size_t k = 0;
  int rc = loom__fs_glob(pat, &names, &k, why, sizeof why);
  if (rc < 0) return ckpt_fail(c, rc, "cannot read checkpoint directory %s: %s", c->remote, why);
  int64_t *v = malloc((k ? k : 1) * sizeof *v);
  size_t len = 0;
  for (size_t i = 0; i < k; i++) {
    const char *b = strrchr(names[i], '/');
    int64_t st = step_of_name(b ? b + 1 : names[i]);
    if (v && st >= 0) v[len++] = st;
    free(names[i]);
  }
  free(names);
  if (!v) return ckpt_fail(c, LOOM_ENOMEM, "out of memory");
  if (len > 1) qsort(v, len, sizeof *v, cmp_i64);
  *steps = v;
  *n = len;
  return 0;
}

/* The step in a checkpoint's file name, or -1 for any other name. */
static int64_t step_of_name(const char *name) {
  if (strncmp(name, "ckpt-", 5) != 0) return -1;
  const char *p = name + 5, *q = p;
  while (*q >= '0' && *q <= '9') q++;
  if (q == p || q - p > 18 || strcmp(q, ".ckpt") != 0) return -1;
  int64_t v = 0;
  for (; p < q; p++) v = v * 10 + (*p - '0');
  return v;
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
    int64_t s = step_of_name(e->d_name);
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

/* ---- checking a file ---------------------------------------------------- */

static int pread_full(int fd, void *buf, size_t n, uint64_t off) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) return -ENODATA; /* shorter than fstat said: truncated now */
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

static int cmp_entries(const void *a, const void *b) {
  const ckpt_entry *x = *(const ckpt_entry *const *)a;
  const ckpt_entry *y = *(const ckpt_entry *const *)b;
  size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
  int r = memcmp(x->name, y->name, n);
  if (r) return r;
  return (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* Sets *twice to the index of a tensor whose name another one has too,
 * or -1: a restore finds tensors by name, so a table names each once
 * (saves refuse two tensors of one name). 0 or LOOM_ENOMEM. */
static int ckpt_twice(const ckpt_file *f, int64_t *twice) {
  *twice = -1;
  if (f->count < 2) return 0;
  const ckpt_entry **v = malloc(f->count * sizeof *v);
  if (!v) return LOOM_ENOMEM;
  for (uint32_t i = 0; i < f->count; i++) v[i] = &f->entries[i];
  qsort(v, f->count, sizeof *v, cmp_entries);
  for (uint32_t i = 1; i < f->count && *twice < 0; i++)
    if (cmp_entries(&v[i - 1], &v[i]) == 0) *twice = v[i] - f->entries;
  free(v);
  return 0;
}

/* Reads and checks the file open on fd, which should hold step: size,
 * header, checksum (unless the handle verified this very file already),
 * table. On success f holds the parsed table for the caller to free. */
static int ckpt_check(loom_ckpt_t *c, const char *path, int fd, int64_t step, ckpt_file *f) {
  memset(f, 0, sizeof *f);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return ckpt_fail(c, LOOM_EIO, "cannot stat checkpoint %s: %s", path, strerror(errno));
  uint64_t size = (uint64_t)st.st_size;
  if (size < CKPT_HEADER + CKPT_TRAILER)
    return ckpt_fail(c, LOOM_EIO,
                     "checkpoint %s is truncated: %llu bytes, not even a "
                     "header and trailer (%d)",
                     path, (unsigned long long)size, CKPT_HEADER + CKPT_TRAILER);
  unsigned char h[CKPT_HEADER];
  int e = pread_full(fd, h, sizeof h, 0);
  if (e < 0) return ckpt_fail(c, LOOM_EIO, "cannot read checkpoint %s: %s", path, strerror(-e));
  if (memcmp(h, CKPT_MAGIC, 8) != 0)
    return ckpt_fail(c, LOOM_EIO,
                     "%s is not a loom checkpoint (its first bytes are not "
                     "\"" CKPT_MAGIC "\")",
                     path);
  uint32_t version = (uint32_t)get_le(h + 8, 4);
  if (version != CKPT_VERSION)
    return ckpt_fail(c, LOOM_EIO,
                     "checkpoint %s has format version %u; this libloom reads "
                     "version %d (corrupt, or written by a newer loom)",
                     path, version, CKPT_VERSION);
  uint64_t want = get_le(h + 24, 8);
  if (get_le(h + 12, 4) != CKPT_HEADER)
    return ckpt_fail(c, LOOM_EIO, "checkpoint %s is corrupt: bad header size", path);
  if (size < want)
    return ckpt_fail(c, LOOM_EIO, "checkpoint %s is truncated: %llu of its %llu bytes", path,
                     (unsigned long long)size, (unsigned long long)want);
  if (size > want)
    return ckpt_fail(c, LOOM_EIO,
                     "checkpoint %s is corrupt: %llu bytes, its header says "
                     "%llu",
                     path, (unsigned long long)size, (unsigned long long)want);
  int64_t fstep = (int64_t)get_le(h + 16, 8);
  if (fstep != step)
    return ckpt_fail(c, LOOM_EIO,
                     "checkpoint %s is corrupt: it holds step %lld, its name "
                     "says %lld",
                     path, (long long)fstep, (long long)step);
  uint32_t count = (uint32_t)get_le(h + 32, 4);
  uint32_t table_size = (uint32_t)get_le(h + 36, 4);
  if (table_size > CKPT_MAX_TABLE || CKPT_HEADER + (uint64_t)table_size > size - CKPT_TRAILER ||
      count > LOOM_CKPT_MAX_TENSORS)
    return ckpt_fail(c, LOOM_EIO,
                     "checkpoint %s is corrupt: table of %u bytes for %u "
                     "tensors does not fit",
                     path, table_size, count);

  bool known = c->verified.valid && c->verified.step == step && c->verified.dev == st.st_dev &&
               c->verified.ino == st.st_ino && c->verified.size == st.st_size &&
               c->verified.mtime.tv_sec == st.st_mtim.tv_sec &&
               c->verified.mtime.tv_nsec == st.st_mtim.tv_nsec &&
               c->verified.ctime.tv_sec == st.st_ctim.tv_sec &&
               c->verified.ctime.tv_nsec == st.st_ctim.tv_nsec;
  if (!known) {
    uint64_t body = size - CKPT_TRAILER; /* at least a header: no malloc(0) */
    unsigned char *buf = malloc(body < CKPT_IO_CHUNK ? (size_t)body : CKPT_IO_CHUNK);
    if (!buf) return ckpt_fail(c, LOOM_ENOMEM, "out of memory");
    uint32_t crc = 0;
    for (uint64_t off = 0; off < body && e == 0;) {
      size_t n = body - off < CKPT_IO_CHUNK ? (size_t)(body - off) : CKPT_IO_CHUNK;
      e = pread_full(fd, buf, n, off);
      crc = loom__crc32c(crc, buf, n);
      off += n;
    }
    unsigned char t[CKPT_TRAILER];
    if (e == 0) e = pread_full(fd, t, sizeof t, body);
    free(buf);
    if (e < 0) return ckpt_fail(c, LOOM_EIO, "cannot read checkpoint %s: %s", path, strerror(-e));
    uint32_t stored = (uint32_t)get_le(t, 4);
    if (memcmp(t + 4, CKPT_END, 4) != 0 || stored != crc)
      return ckpt_fail(c, LOOM_EIO,
                       "checkpoint %s is corrupt: checksum mismatch (stored "
                       "0x%08x, computed 0x%08x)",
                       path, stored, crc);
  }

  f->step = step;
  f->size = size;
  f->count = count;
  f->table = malloc(table_size ? table_size : 1);
  f->entries = calloc(count ? count : 1, sizeof *f->entries);
  if (!f->table || !f->entries) {
    ckpt_file_free(f);
    return ckpt_fail(c, LOOM_ENOMEM, "out of memory for a checkpoint table");
  }
  if ((e = pread_full(fd, f->table, table_size, CKPT_HEADER)) < 0) {
    ckpt_file_free(f);
    return ckpt_fail(c, LOOM_EIO, "cannot read checkpoint %s: %s", path, strerror(-e));
  }
  /* The checksum held, so a malformed table means a bug or a forgery;
   * checked all the same, since offsets steer reads. */
  const unsigned char *p = f->table, *end = f->table + table_size;
  uint64_t data_start = CKPT_HEADER + (uint64_t)table_size;
  for (uint32_t i = 0; i < count; i++) {
    ckpt_entry *en = &f->entries[i];
    const char *why = NULL;
    if (end - p < 2)
      why = "table ends early";
    else {
      en->name_len = (size_t)get_le(p, 2);
      p += 2;
      if (en->name_len == 0 || en->name_len > LOOM_CKPT_MAX_NAME ||
          (size_t)(end - p) < en->name_len + 2 || memchr(p, 0, en->name_len))
        why = "bad tensor name";
    }
    if (!why) {
      en->name = (const char *)p;
      p += en->name_len;
      en->dtype = p[0];
      en->ndim = p[1];
      p += 2;
      int di = dtype_index_of_code(en->dtype);
      if (di < 0)
        why = "unknown dtype";
      else if (en->ndim > LOOM_CKPT_MAX_DIMS || (size_t)(end - p) < 8u * (size_t)en->ndim + 16)
        why = "bad shape";
      else {
        for (int k = 0; k < en->ndim; k++, p += 8) en->shape[k] = (int64_t)get_le(p, 8);
        en->offset = get_le(p, 8);
        en->bytes = get_le(p + 8, 8);
        p += 16;
        int64_t b = tensor_bytes(DTYPES[di].size, en->ndim, en->shape);
        if (b < 0 || (uint64_t)b != en->bytes)
          why = "size does not match shape";
        else if (en->offset < data_start || en->offset % CKPT_ALIGN ||
                 en->offset > size - CKPT_TRAILER || en->bytes > size - CKPT_TRAILER - en->offset)
          why = "data out of the file";
      }
    }
    if (why) {
      ckpt_file_free(f);
      return ckpt_fail(c, LOOM_EIO, "checkpoint %s is corrupt: tensor %u: %s", path, i, why);
    }
  }
  if (p != end) {
    ckpt_file_free(f);
    return ckpt_fail(c, LOOM_EIO,
                     "checkpoint %s is corrupt: table has bytes past its "
                     "%u tensors",
                     path, count);
  }
  int64_t twice;
  if (ckpt_twice(f, &twice) < 0) {
    ckpt_file_free(f);
    return ckpt_fail(c, LOOM_ENOMEM, "out of memory for a checkpoint table");
  }
  if (twice >= 0) {
    const ckpt_entry *en = &f->entries[twice];
    int rc = ckpt_fail(c, LOOM_EIO,
                       "checkpoint %s is corrupt: tensor %lld: another tensor is named '%.*s'",
                       path, (long long)twice, (int)en->name_len, en->name);
    ckpt_file_free(f);
    return rc;
  }
  c->verified.valid = true;
  c->verified.step = step;
  c->verified.dev = st.st_dev;
  c->verified.ino = st.st_ino;
  c->verified.size = st.st_size;
  c->verified.mtime = st.st_mtim;
  c->verified.ctime = st.st_ctim;
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
  pthread_mutex_init(&c->mu, NULL);
  if (loom__fs_remote(dir)) {
    char why[1024];
    const char *td = getenv("TMPDIR");
    int rc = (c->remote = strdup(dir)) ? 0 : LOOM_ENOMEM;
    if (rc == 0) {
      snprintf(c->dir, sizeof c->dir, "%s/loom-ckpt-XXXXXX", td && *td ? td : "/tmp");
      if (!mkdtemp(c->dir)) {
        snprintf(why, sizeof why, "cannot make a local directory in %.200s: %s",
                 td && *td ? td : "/tmp", strerror(errno));
        c->dir[0] = 0;
        rc = LOOM_EIO;
      }
    }
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
  if (c->remote && c->dir[0]) {
    char why[512];
    loom__fs_remove(c->dir, true, why, sizeof why);
  }
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
    int di = dtype_index_of(x->dtype);
    if (di < 0)
      return ckpt_fail(c, LOOM_EINVAL, "tensor '%s': unknown dtype %d", x->name, (int)x->dtype);
    if (x->ndim < 0 || x->ndim > LOOM_CKPT_MAX_DIMS)
      return ckpt_fail(c, LOOM_EINVAL, "tensor '%s': ndim must be 0..%d, got %d", x->name,
                       LOOM_CKPT_MAX_DIMS, x->ndim);
    int64_t b = tensor_bytes(DTYPES[di].size, x->ndim, x->shape);
    if (b < 0)
      return ckpt_fail(c, LOOM_EINVAL,
                       "tensor '%s': shape %s has a negative dimension or is "
                       "too large",
                       x->name, shape_str(di, x->ndim, x->shape, sbuf, sizeof sbuf));
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

/* After a save of step: removes checkpoints of later steps and the oldest
 * beyond keep. Failing to remove one is worth a warning, not an error: the
 * save itself succeeded. Called with mu held. */
static void ckpt_prune(loom_ckpt_t *c, int64_t step) {
  int64_t *steps;
  size_t n;
  if (ckpt_scan(c, &steps, &n) < 0) return;
  size_t older = 0; /* steps before `step` still kept, newest first */
  for (size_t i = n; i-- > 0;) {
    bool drop;
    if (steps[i] > step)
      drop = true;
    else if (steps[i] == step)
      drop = false;
    else
      drop = c->keep > 0 && ++older >= (size_t)c->keep;
    if (!drop) continue;
    char path[PATH_MAX + 32];
    if (c->remote) {
      char why[1024];
      int rc = ckpt_remote_path(c, steps[i], path, sizeof path);
      if (rc == 0) rc = loom__fs_remove(path, false, why, sizeof why);
      if (rc < 0 && rc != LOOM_ENOENT)
        loom__log(LOOM_LOG_WARN, "ckpt", "cannot remove old checkpoint: %s", why);
    } else {
      if (ckpt_path(c, steps[i], path, sizeof path) < 0) continue;
      if (unlink(path) < 0 && errno != ENOENT)
        loom__log(LOOM_LOG_WARN, "ckpt", "cannot remove old checkpoint %s: %s", path,
                  strerror(errno));
    }
    if (c->verified.valid && c->verified.step == steps[i]) c->verified.valid = false;
  }
  free(steps);
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
    int di = dtype_index_of(t[i].dtype);
    uint64_t bytes = (uint64_t)tensor_bytes(DTYPES[di].size, t[i].ndim, t[i].shape);
    off = (off + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN;
    size_t len = strlen(t[i].name);
    put_le(p, len, 2);
    memcpy(p + 2, t[i].name, len);
    p += 2 + len;
    p[0] = (unsigned char)DTYPES[di].code;
    p[1] = (unsigned char)t[i].ndim;
    p += 2;
    for (int k = 0; k < t[i].ndim; k++, p += 8) put_le(p, (uint64_t)t[i].shape[k], 8);
    put_le(p, off, 8);
    put_le(p + 8, bytes, 8);
    p += 16;
    off += bytes;
  }
  uint64_t file_size = off + CKPT_TRAILER;
  unsigned char h[CKPT_HEADER] = {0};
  memcpy(h, CKPT_MAGIC, 8);
  put_le(h + 8, CKPT_VERSION, 4);
  put_le(h + 12, CKPT_HEADER, 4);
  put_le(h + 16, (uint64_t)step, 8);
  put_le(h + 24, file_size, 8);
  put_le(h + 32, n, 4);
  put_le(h + 36, table_size, 4);
  double now = loom__wall();
  uint64_t wall_bits;
  memcpy(&wall_bits, &now, 8);
  put_le(h + 40, wall_bits, 8);

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
    int di = dtype_index_of(t[i].dtype);
    uint64_t bytes = (uint64_t)tensor_bytes(DTYPES[di].size, t[i].ndim, t[i].shape);
    size_t pad = (size_t)((CKPT_ALIGN - off % CKPT_ALIGN) % CKPT_ALIGN);
    e = write_crc(fd, ZEROS, pad, &crc);
    if (e == 0 && bytes) e = write_crc(fd, t[i].data, (size_t)bytes, &crc);
    off += pad + bytes;
  }
  unsigned char trailer[CKPT_TRAILER];
  put_le(trailer, crc, 4);
  memcpy(trailer + 4, CKPT_END, 4);
  uint32_t ignored = 0;
  if (e == 0) e = write_crc(fd, trailer, sizeof trailer, &ignored);
  if (e == 0 && fsync(fd) < 0) e = -errno;
  if (close(fd) < 0 && e == 0) e = -errno;
  if (e < 0) {
    unlink(tmp);
    return ckpt_fail(c, LOOM_EIO, "cannot write checkpoint %s: %s", tmp, strerror(-e));
  }
  if (rename(tmp, path) < 0) {
    e = errno;
    unlink(tmp);
    return ckpt_fail(c, LOOM_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(e));
  }
  if (c->verified.valid && c->verified.step == step) c->verified.valid = false;
  /* the rename reaches the disk with the directory */
  int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || (fsync(dfd) < 0 && errno != EINVAL)) {
    e = errno;
    if (dfd >= 0) close(dfd);
    return ckpt_fail(c, LOOM_EIO, "cannot sync checkpoint directory %s: %s", c->dir, strerror(e));
  }
  close(dfd);
  if (c->remote) {
    /* up whole, under a temporary name renamed over the step's: atomic */
    char name[PATH_MAX + 32], why[1024];
    int prc = ckpt_remote_path(c, step, name, sizeof name);
    if (prc == 0) prc = loom__fs_put(path, name, true, why, sizeof why);
    unlink(path);
    if (prc < 0) return ckpt_fail(c, LOOM_EIO, "cannot save checkpoint %s: %s", name, why);
  }
  ckpt_prune(c, step);
  loom__log(LOOM_LOG_DEBUG, "ckpt", "saved %s (%zu tensors, %llu bytes)", path, n,
            (unsigned long long)file_size);
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

static const ckpt_entry *find_entry(const ckpt_entry *const *sorted, size_t n, const char *name) {
  ckpt_entry key = {.name = name, .name_len = strlen(name)};
  const ckpt_entry *kp = &key;
  const ckpt_entry *const *hit = bsearch(&kp, sorted, n, sizeof *sorted, cmp_entries);
  return hit ? *hit : NULL;
}

/* Lists the names in f ("a, b, c, ...") into buf, for error messages. */
static const char *names_str(const ckpt_file *f, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = 0;
  for (uint32_t i = 0; i < f->count && k + 1 < len; i++) {
    int w = snprintf(buf + k, len - k, "%s%.*s", i ? ", " : "", (int)f->entries[i].name_len,
                     f->entries[i].name);
    if (w < 0 || (size_t)w >= len - k) {
      if (len > 4) memcpy(buf + len - 4, "...", 4);
      break;
    }
    k += (size_t)w;
  }
  return f->count ? buf : "none";
}

/* Restores t from the checkpoint of step open on fd (path: for messages).
 * Called with mu held. */
static int ckpt_restore_fd(loom_ckpt_t *c, const char *path, int fd, int64_t step, loom_tensor *t,
                           size_t n) {
  ckpt_file f;
  int rc = ckpt_check(c, path, fd, step, &f);
  if (rc < 0) return rc;
  const ckpt_entry **sorted = malloc((f.count ? f.count : 1) * sizeof *sorted);
  const ckpt_entry **match = malloc((n ? n : 1) * sizeof *match);
  if (!sorted || !match) {
    rc = ckpt_fail(c, LOOM_ENOMEM, "out of memory");
    goto out;
  }
  for (uint32_t i = 0; i < f.count; i++) sorted[i] = &f.entries[i];
  qsort(sorted, f.count, sizeof *sorted, cmp_entries);

  /* match every tensor before touching any caller memory */
  for (size_t i = 0; i < n; i++) {
    loom_tensor *x = &t[i];
    char have[256], want[256], names[512];
    if (!x->name || !*x->name) {
      rc = ckpt_fail(c, LOOM_EINVAL, "tensor %zu to restore has no name", i);
      goto out;
    }
    const ckpt_entry *en = find_entry(sorted, f.count, x->name);
    if (!en) {
      rc = ckpt_fail(c, LOOM_ENOENT, "checkpoint %s has no tensor '%s' (it has: %s)", path, x->name,
                     names_str(&f, names, sizeof names));
      goto out;
    }
    int di = dtype_index_of(x->dtype);
    int fdi = dtype_index_of_code(en->dtype);
    bool same = di == fdi && x->ndim == en->ndim;
    for (int k = 0; same && k < en->ndim; k++) same = x->shape[k] == en->shape[k];
    if (!same) {
      int nd = x->ndim < 0 ? 0 : x->ndim > LOOM_CKPT_MAX_DIMS ? LOOM_CKPT_MAX_DIMS : x->ndim;
      rc = ckpt_fail(c, LOOM_EINVAL, "tensor '%s' in checkpoint %s is %s; the caller expects %s",
                     x->name, path, shape_str(fdi, en->ndim, en->shape, have, sizeof have),
                     shape_str(di, nd, x->shape, want, sizeof want));
      goto out;
    }
    if (en->bytes > 0 && !x->data) {
      rc = ckpt_fail(c, LOOM_EINVAL, "tensor '%s' to restore: data is NULL", x->name);
      goto out;
    }
    match[i] = en;
  }
  for (size_t i = 0; i < n; i++) {
    int e =
        match[i]->bytes ? pread_full(fd, t[i].data, (size_t)match[i]->bytes, match[i]->offset) : 0;
    if (e < 0) {
      rc = ckpt_fail(c, LOOM_EIO, "cannot read tensor '%s' from %s: %s", t[i].name, path,
                     strerror(-e));
      goto out;
    }
  }
  rc = 0;
out:
  free(sorted);
  free(match);
  ckpt_file_free(&f);
  return rc;
}

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

/* ---- for the fuzz harness ----------------------------------------------- */

void loom__ckpt_tensors_free(loom_tensor *t, size_t n) {
  for (size_t i = 0; t && i < n; i++) {
    free((char *)t[i].name);
    free(t[i].data);
  }
  free(t);
}

int loom__ckpt_restore_all_fd(loom_ckpt_t *c, int fd, int64_t step, loom_tensor **out,
                              size_t *count) {
  *out = NULL;
  *count = 0;
  if (!c) return LOOM_EINVAL;
  pthread_mutex_lock(&c->mu);
  char path[64];
  snprintf(path, sizeof path, "(fd %d)", fd);
  ckpt_file f;
  int rc = ckpt_check(c, path, fd, step, &f);
  loom_tensor *t = NULL;
  if (rc == 0 && !(t = calloc(f.count ? f.count : 1, sizeof *t)))
    rc = ckpt_fail(c, LOOM_ENOMEM, "out of memory");
  for (uint32_t i = 0; rc == 0 && i < f.count; i++) {
    const ckpt_entry *en = &f.entries[i];
    t[i].dtype = DTYPES[dtype_index_of_code(en->dtype)].dt;
    t[i].ndim = en->ndim;
    memcpy(t[i].shape, en->shape, sizeof t[i].shape);
    t[i].name = strndup(en->name, en->name_len);
    t[i].data = malloc(en->bytes ? (size_t)en->bytes : 1);
    if (!t[i].name || !t[i].data) rc = ckpt_fail(c, LOOM_ENOMEM, "out of memory");
  }
  size_t n = t ? f.count : 0;
  ckpt_file_free(&f);
  if (rc == 0) rc = ckpt_restore_fd(c, path, fd, step, t, n);
  pthread_mutex_unlock(&c->mu);
  if (rc < 0) {
    loom__ckpt_tensors_free(t, n);
    return rc;
  }
  *out = t;
  *count = n;
  return 0;
}
