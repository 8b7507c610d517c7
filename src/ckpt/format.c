/* format.c: the bytes of a checkpoint file (ckpt_int.h): checking a file
 * and restoring tensors from it; ckpt.c names, writes and prunes the files.
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
 *       u32 CRC-32C of every byte before the trailer, then "CEND" */
#include "core/core.h"
#include "lib/lib.h"
#include "core/bytes.h"
#include "core/crc32c.h"
#include "core/cursor.h"
#include "loom/ckpt.h"
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ckpt_file_free(ckpt_file *f) {
  free(f->table);
  free(f->entries);
  memset(f, 0, sizeof *f);
}

/* ---- dtypes ------------------------------------------------------------ */

const ckpt_dtype_info ckpt_dtypes[4] = {
    {LOOM_F32, 1, 4, "f32"},
    {LOOM_F64, 2, 8, "f64"},
    {LOOM_I32, 3, 4, "i32"},
    {LOOM_I64, 4, 8, "i64"},
};

int ckpt_dtype_index_of(loom_dtype dt) {
  for (size_t i = 0; i < LOOM__ARRAY_LEN(ckpt_dtypes); i++)
    if (ckpt_dtypes[i].dt == dt) return (int)i;
  return -1;
}

static int dtype_index_of_code(int code) {
  for (size_t i = 0; i < LOOM__ARRAY_LEN(ckpt_dtypes); i++)
    if (ckpt_dtypes[i].code == code) return (int)i;
  return -1;
}

/* "f32 [256, 784]" into buf. */
const char *ckpt_shape_str(int dtype_idx, int ndim, const int64_t *shape, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "%s [", dtype_idx >= 0 ? ckpt_dtypes[dtype_idx].name : "?");
  for (int i = 0; i < ndim && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (n < len) snprintf(buf + n, len - n, "]");
  return buf;
}

/* The size in bytes of a tensor of esize-byte elements and this shape, or
 * -1 when a dimension is negative or the size overflows. */
int64_t ckpt_tensor_bytes(size_t esize, int ndim, const int64_t *shape) {
  uint64_t total = esize;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return -1;
    if (__builtin_mul_overflow(total, (uint64_t)shape[i], &total)) return -1;
  }
  return total > (uint64_t)INT64_MAX / 2 ? -1 : (int64_t)total;
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
int ckpt_check(loom_ckpt_t *c, const char *path, int fd, int64_t step, ckpt_file *f) {
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
  uint32_t version = loom__get_le32(h + 8);
  if (version != CKPT_VERSION)
    return ckpt_fail(c, LOOM_EIO,
                     "checkpoint %s has format version %u; this libloom reads "
                     "version %d (corrupt, or written by a newer loom)",
                     path, version, CKPT_VERSION);
  uint64_t want = loom__get_le64(h + 24);
  if (loom__get_le32(h + 12) != CKPT_HEADER)
    return ckpt_fail(c, LOOM_EIO, "checkpoint %s is corrupt: bad header size", path);
  if (size < want)
    return ckpt_fail(c, LOOM_EIO, "checkpoint %s is truncated: %llu of its %llu bytes", path,
                     (unsigned long long)size, (unsigned long long)want);
  if (size > want)
    return ckpt_fail(c, LOOM_EIO,
                     "checkpoint %s is corrupt: %llu bytes, its header says "
                     "%llu",
                     path, (unsigned long long)size, (unsigned long long)want);
  int64_t fstep = (int64_t)loom__get_le64(h + 16);
  if (fstep != step)
    return ckpt_fail(c, LOOM_EIO,
                     "checkpoint %s is corrupt: it holds step %lld, its name "
                     "says %lld",
                     path, (long long)fstep, (long long)step);
  uint32_t count = loom__get_le32(h + 32);
  uint32_t table_size = loom__get_le32(h + 36);
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
    uint32_t stored = loom__get_le32(t);
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
  loom__cur cur = loom__cur_make(f->table, table_size);
  uint64_t data_start = CKPT_HEADER + (uint64_t)table_size;
  for (uint32_t i = 0; i < count; i++) {
    ckpt_entry *en = &f->entries[i];
    const char *why = NULL;
    en->name_len = loom__cur_le16(&cur);
    if (cur.bad)
      why = "table ends early";
    else if (en->name_len == 0 || en->name_len > LOOM_CKPT_MAX_NAME ||
             loom__cur_left(&cur) < en->name_len + 2 || memchr(cur.p + cur.off, 0, en->name_len))
      why = "bad tensor name";
    if (!why) {
      en->name = (const char *)loom__cur_bytes(&cur, en->name_len);
      en->dtype = loom__cur_u8(&cur);
      en->ndim = loom__cur_u8(&cur);
      int di = dtype_index_of_code(en->dtype);
      if (di < 0)
        why = "unknown dtype";
      else if (en->ndim > LOOM_CKPT_MAX_DIMS || loom__cur_left(&cur) < 8u * (size_t)en->ndim + 16)
        why = "bad shape";
      else {
        for (int k = 0; k < en->ndim; k++) en->shape[k] = (int64_t)loom__cur_le64(&cur);
        en->offset = loom__cur_le64(&cur);
        en->bytes = loom__cur_le64(&cur);
        int64_t b = ckpt_tensor_bytes(ckpt_dtypes[di].size, en->ndim, en->shape);
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
  if (!loom__cur_done(&cur)) {
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
int ckpt_restore_fd(loom_ckpt_t *c, const char *path, int fd, int64_t step, loom_tensor *t,
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
    int di = ckpt_dtype_index_of(x->dtype);
    int fdi = dtype_index_of_code(en->dtype);
    bool same = di == fdi && x->ndim == en->ndim;
    for (int k = 0; same && k < en->ndim; k++) same = x->shape[k] == en->shape[k];
    if (!same) {
      int nd = x->ndim < 0 ? 0 : x->ndim > LOOM_CKPT_MAX_DIMS ? LOOM_CKPT_MAX_DIMS : x->ndim;
      rc = ckpt_fail(c, LOOM_EINVAL, "tensor '%s' in checkpoint %s is %s; the caller expects %s",
                     x->name, path, ckpt_shape_str(fdi, en->ndim, en->shape, have, sizeof have),
                     ckpt_shape_str(di, nd, x->shape, want, sizeof want));
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
    t[i].dtype = ckpt_dtypes[dtype_index_of_code(en->dtype)].dt;
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