/* ckpt.c: a shard's state on disk. A checkpoint of step S under DIR is
 *
 *   DIR/step-<S, 12 digits>/shard-<i>-of-<n>.bin   one per shard
 *   DIR/step-<S>/MANIFEST.json                      {"step", "shards", "time"}
 *   DIR/LATEST                                      "S\n"
 *
 * Each shard writes its file to a temporary name, fsyncs and renames it;
 * then shard 0, asked by the client once every shard is done, writes the
 * manifest the same way and LATEST, and prunes (ckpt_dir_commit). A crash at any point leaves LATEST
 * naming the previous complete checkpoint. A shard file is
 *
 *   "LOOMPSCK" | u32 version | u32 shard | u32 nshards | u64 step | u32 nvars
 *   per variable: u32 len | declaration | u64 t |
 *     dense:  u64 lo | u64 hi | w[hi-lo] | slot1[hi-lo] | slot2[hi-lo]
 *     sparse: u64 rows | rows x (u64 key | w[dim] | slot1[dim] | slot2[dim])
 *   SHA-256 of everything before
 *
 * little-endian. Loading checks every length against what is left of the
 * file before allocating, and the digest before anything reaches the live
 * state.
 *
 * DIR may be an hdfs:// URL: a shard's file is then written locally, as
 * above, and uploaded whole to a temporary name renamed over its own (by
 * the NameNode: atomic); the manifest and LATEST the same way; reading
 * fetches each file whole to a local temporary file first. */
#include "ps/ps.h"
#include "ckpt/dir.h"
#include "core/bytes.h"
#include "fs/fs.h"
#include "fs/tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CK_MAGIC "LOOMPSCK"
#define CK_VERSION 1
#define CK_DIGEST 32
#define CK_BUF (1u << 20)

static int step_dir(char *out, size_t len, const char *dir, uint64_t step) {
  return (size_t)snprintf(out, len, "%s/step-%012llu", dir, (unsigned long long)step) >= len
             ? LOOM_ERANGE
             : 0;
}

static int shard_path(char *out, size_t len, const char *dir, uint64_t step, int shard,
                      int nshards) {
  return (size_t)snprintf(out, len, "%s/step-%012llu/shard-%d-of-%d.bin", dir,
                          (unsigned long long)step, shard, nshards) >= len
             ? LOOM_ERANGE
             : 0;
}

/* A local temporary file's name for a copy of a remote file: `what` in a
 * locked directory of its own (fs/tmpdir.h) into dir[PATH_MAX] and *lock,
 * which loom__tmpdir_remove removes with the file. */
static int local_tmp(char *out, size_t len, const char *what, char *dir, int *lock, char *err,
                     size_t errlen) {
  char why[1024];
  int rc = loom__tmpdir_make("ps", dir, PATH_MAX, lock, why, sizeof why);
  if (rc < 0) {
    snprintf(err, errlen, "cannot make a local copy: %s", why);
    return rc;
  }
  if ((size_t)snprintf(out, len, "%s/%s", dir, what) >= len) {
    snprintf(err, errlen, "the local copy's path in %s is too long", dir);
    loom__tmpdir_remove(dir, *lock);
    dir[0] = 0;
    *lock = -1;
    return LOOM_ERANGE;
  }
  return 0;
}

static void fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* ---- writing ------------------------------------------------------------ */
typedef struct {
  FILE *f;
  EVP_MD_CTX *md;
  bool bad;
} ck_writer;

static void ck_put(ck_writer *w, const void *p, size_t n) {
  if (w->bad || n == 0) return;
  if (fwrite(p, 1, n, w->f) != n || EVP_DigestUpdate(w->md, p, n) != 1) w->bad = true;
}
static void ck_u32(ck_writer *w, uint32_t v) {
  unsigned char b[4];
  loom__put_le32(b, v);
  ck_put(w, b, 4);
}
static void ck_u64(ck_writer *w, uint64_t v) {
  unsigned char b[8];
  loom__put_le64(b, v);
  ck_put(w, b, 8);
}

static void ck_var(ck_writer *w, const ps_var *v) {
  ps_wbuf d = {0};
  ps_decl_put(&d, &v->d);
  if (d.bad) w->bad = true;
  ck_u32(w, (uint32_t)d.len);
  ck_put(w, d.p, d.len);
  free(d.p);
  ck_u64(w, v->t);
  if (v->d.kind == PS_DENSE) {
    uint64_t n = v->hi - v->lo;
    ck_u64(w, v->lo);
    ck_u64(w, v->hi);
    ck_put(w, v->w, n * sizeof(float));
    if (v->slots >= 1) ck_put(w, v->s1, n * sizeof(float));
    if (v->slots >= 2) ck_put(w, v->s2, n * sizeof(float));
    return;
  }
  ck_u64(w, v->rows.n);
  for (uint64_t r = 0; r < v->rows.n; r++) {
    ck_u64(w, ps_rows_key(&v->rows, r));
    ck_put(w, ps_rows_at(&v->rows, r), v->rows.stride * sizeof(float));
  }
}

int ps_ckpt_write(const ps_state *st, const char *dir, uint64_t step, char *err, size_t errlen) {
  char sdir[PS_MAX_PATH + 64], path[PS_MAX_PATH + 128], tmp[PS_MAX_PATH + 160];
  if (step_dir(sdir, sizeof sdir, dir, step) < 0 ||
      shard_path(path, sizeof path, dir, step, st->shard, st->nshards) < 0) {
    snprintf(err, errlen, "checkpoint directory name too long");
    return LOOM_ERANGE;
  }
  bool remote = loom__fs_remote(dir);
  char tdir[PATH_MAX] = ""; /* remote: where tmp is, locked by tlock */
  int tlock = -1;
  if (remote) {
    int rc = local_tmp(tmp, sizeof tmp, "shard", tdir, &tlock, err, errlen);
    if (rc < 0) return rc;
  } else {
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  }
  if (!remote && loom__mkdir_p(sdir, 0755) < 0) {
    snprintf(err, errlen, "cannot create %s: %s", sdir, strerror(errno));
    return LOOM_EIO;
  }
  ck_writer w = {0};
  w.f = fopen(tmp, "wbe");
  w.md = EVP_MD_CTX_new();
  char *vbuf = malloc(CK_BUF);
  if (!w.f || !w.md || EVP_DigestInit_ex(w.md, EVP_sha256(), NULL) != 1) {
    snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    if (w.f) fclose(w.f);
    unlink(tmp);
    loom__tmpdir_remove(tdir, tlock);
    EVP_MD_CTX_free(w.md);
    free(vbuf);
    return LOOM_EIO;
  }
  if (vbuf) setvbuf(w.f, vbuf, _IOFBF, CK_BUF);
  ck_put(&w, CK_MAGIC, 8);
  ck_u32(&w, CK_VERSION);
  ck_u32(&w, (uint32_t)st->shard);
  ck_u32(&w, (uint32_t)st->nshards);
  ck_u64(&w, step);
  ck_u32(&w, st->nvars);
  for (uint32_t i = 0; i < st->nvars; i++) ck_var(&w, st->vars[i]);
  unsigned char digest[CK_DIGEST];
  unsigned int dlen = 0;
  if (!w.bad && EVP_DigestFinal_ex(w.md, digest, &dlen) == 1 && dlen == CK_DIGEST)
    w.bad = fwrite(digest, 1, CK_DIGEST, w.f) != CK_DIGEST;
  else
    w.bad = true;
  int saved = errno;
  if (!w.bad && (fflush(w.f) != 0 || fsync(fileno(w.f)) != 0)) w.bad = true, saved = errno;
  if (fclose(w.f) != 0 && !w.bad) w.bad = true, saved = errno;
  EVP_MD_CTX_free(w.md);
  free(vbuf);
  if (remote && !w.bad) {
    char why[1024];
    int rc = loom__fs_put(tmp, path, true, why, sizeof why);
    unlink(tmp);
    loom__tmpdir_remove(tdir, tlock);
    if (rc < 0) {
      snprintf(err, errlen, "cannot write %s: %s", path, why);
      return LOOM_EIO;
    }
    return 0;
  }
  if (w.bad || rename(tmp, path) < 0) {
    if (!w.bad) saved = errno;
    unlink(tmp);
    loom__tmpdir_remove(tdir, tlock);
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(saved));
    return LOOM_EIO;
  }
  fsync_dir(sdir);
  return 0;
}

/* ---- committing --------------------------------------------------------- */
/* The directory of checkpoints as ckpt_dir sees it: step-<S> directories,
 * each committed by its manifest, and LATEST. */
static ckpt_dir ps_ckpt_dir(const char *dir) {
  return (ckpt_dir){.dir = dir,
                    .prefix = "step-",
                    .suffix = "",
                    .is_dir = true,
                    .tag = "ps",
                    .manifest = "MANIFEST.json",
                    .latest = "LATEST"};
}

/* Writes len bytes of data to the new local file path, fsynced. */
static int write_file(const char *path, const char *data, size_t len, char *err, size_t errlen) {
  FILE *f = fopen(path, "wbe");
  bool bad = !f || fwrite(data, 1, len, f) != len || fflush(f) != 0 || fsync(fileno(f)) != 0;
  int e = errno;
  if (f && fclose(f) != 0 && !bad) bad = true, e = errno;
  if (!bad) return 0;
  if (f) unlink(path);
  snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
  return LOOM_EIO;
}

int ps_ckpt_commit(const char *dir, uint64_t step, int nshards, int keep, char *err,
                   size_t errlen) {
  char path[PS_MAX_PATH + 128], why[1024];
  loom__fs_info sb;
  for (int i = 0; i < nshards; i++) {
    if (shard_path(path, sizeof path, dir, step, i, nshards) < 0 ||
        loom__fs_stat(path, &sb, why, sizeof why) < 0) {
      snprintf(err, errlen, "checkpoint %llu is missing shard %d's file %s",
               (unsigned long long)step, i, path);
      return LOOM_ENOENT;
    }
  }
  char when[40];
  loom__wall_iso(loom__wall(), when, sizeof when);
  json_t *m =
      json_pack("{s:I, s:i, s:s}", "step", (json_int_t)step, "shards", nshards, "time", when);
  char *ms = m ? json_dumps(m, JSON_INDENT(2)) : NULL;
  json_decref(m);
  if (!ms) {
    snprintf(err, errlen, "out of memory");
    return LOOM_ENOMEM;
  }
  /* the manifest under a temporary name (remote: a local file, uploaded),
   * then ckpt_dir_commit: put in place, LATEST written, old steps pruned */
  char tmp[PS_MAX_PATH + 160], tdir[PATH_MAX] = "";
  int tlock = -1, rc = 0;
  if (loom__fs_remote(dir)) {
    rc = local_tmp(tmp, sizeof tmp, "manifest", tdir, &tlock, err, errlen);
  } else {
    char sdir[PS_MAX_PATH + 64];
    step_dir(sdir, sizeof sdir, dir, step);
    snprintf(tmp, sizeof tmp, "%s/MANIFEST.json.tmp.%d", sdir, (int)getpid());
  }
  if (rc == 0) rc = write_file(tmp, ms, strlen(ms), err, errlen);
  free(ms);
  if (rc == 0) {
    ckpt_dir d = ps_ckpt_dir(dir);
    rc = ckpt_dir_commit(&d, (int64_t)step, tmp, keep < 1 ? 1 : keep, NULL, NULL, err, errlen);
  }
  if (tlock >= 0) loom__tmpdir_remove(tdir, tlock);
  return rc;
}

int ps_ckpt_latest(const char *dir, uint64_t *step) {
  char path[PS_MAX_PATH + 16], *s = NULL;
  if ((size_t)snprintf(path, sizeof path, "%s/LATEST", dir) >= sizeof path) return LOOM_ERANGE;
  int rc;
  if (loom__fs_remote(dir)) {
    char why[1024];
    size_t n = 0;
    void *data = NULL;
    rc = loom__fs_read_all(path, 64, &data, &n, why, sizeof why);
    s = data;
  } else {
    rc = loom__read_file(path, 64, &s, NULL);
  }
  if (rc < 0) return rc == LOOM_ENOENT ? LOOM_ENOENT : LOOM_EIO;
  char *nl = strchr(s, '\n');
  if (nl) *nl = 0;
  long long v;
  rc = loom__parse_int(s, 0, LLONG_MAX, &v);
  free(s);
  if (rc < 0) return LOOM_EIO;
  *step = (uint64_t)v;
  return 0;
}

/* ---- reading ------------------------------------------------------------ */
typedef struct {
  FILE *f;
  EVP_MD_CTX *md;
  uint64_t left; /* bytes before the digest not yet read */
  bool bad;
} ck_reader;

static bool ck_get(ck_reader *r, void *p, size_t n) {
  if (r->bad || n > r->left) {
    r->bad = true;
    return false;
  }
  if (n && (fread(p, 1, n, r->f) != n || EVP_DigestUpdate(r->md, p, n) != 1)) {
    r->bad = true;
    return false;
  }
  r->left -= n;
  return true;
}
static uint32_t ck_g32(ck_reader *r) {
  unsigned char b[4] = {0};
  ck_get(r, b, 4);
  return loom__get_le32(b);
}
static uint64_t ck_g64(ck_reader *r) {
  unsigned char b[8] = {0};
  ck_get(r, b, 8);
  return loom__get_le64(b);
}

/* One shard file's variables, as they were on that shard. */
typedef struct {
  ps_var **vars;
  uint32_t n;
  ps_mem mem;
} ck_file;

static void ck_file_free(ck_file *f) {
  ps_state tmp = {.vars = f->vars, .nvars = f->n, .mem = f->mem};
  ps_state_free(&tmp);
  memset(f, 0, sizeof *f);
}

static int ck_read_var(ck_reader *r, ck_file *cf, ps_var **out, char *err, size_t errlen) {
  uint32_t dl = ck_g32(r);
  if (r->bad || dl > 4096) return LOOM_EIO;
  unsigned char dbuf[4096];
  if (!ck_get(r, dbuf, dl)) return LOOM_EIO;
  loom__cur rb = {.p = dbuf, .len = dl};
  ps_decl d;
  int rc = ps_decl_get(&rb, &d, err, errlen);
  if (rc < 0) return LOOM_EIO;
  ps_var *v = calloc(1, sizeof *v);
  if (!v) return LOOM_ENOMEM;
  *out = v;
  v->d = d;
  v->slots = ps_opt_slots(d.opt.kind);
  v->t = ck_g64(r);
  ps_rows_init(&v->pend_rows, (uint32_t)d.count);
  if (d.kind == PS_DENSE) {
    v->lo = ck_g64(r);
    v->hi = ck_g64(r);
    if (r->bad || v->lo > v->hi || v->hi > d.count) return LOOM_EIO;
    uint64_t n = v->hi - v->lo;
    if (n > r->left / sizeof(float) / (uint64_t)(1 + v->slots)) return LOOM_EIO;
    float **dst[3] = {&v->w, &v->s1, &v->s2};
    for (int s = 0; s <= v->slots; s++) {
      *dst[s] = malloc(n ? n * sizeof(float) : 1);
      if (!*dst[s]) return LOOM_ENOMEM;
      if (!ck_get(r, *dst[s], n * sizeof(float))) return LOOM_EIO;
    }
    return 0;
  }
  ps_rows_init(&v->rows, (uint32_t)(d.count * (uint64_t)(1 + v->slots)));
  uint64_t rows = ck_g64(r);
  uint64_t per = 8 + (uint64_t)v->rows.stride * sizeof(float);
  if (r->bad || rows > r->left / per) return LOOM_EIO;
  for (uint64_t i = 0; i < rows; i++) {
    uint64_t key = ck_g64(r);
    bool added;
    int64_t row = ps_rows_add(&v->rows, key, &added, &cf->mem);
    if (row < 0) return (int)row;
    if (!added) return LOOM_EIO; /* a key twice */
    if (!ck_get(r, ps_rows_at(&v->rows, (uint64_t)row), v->rows.stride * sizeof(float)))
      return LOOM_EIO;
  }
  return 0;
}

static int cmp_var_names(const void *a, const void *b) {
  return strcmp((*(ps_var *const *)a)->d.name, (*(ps_var *const *)b)->d.name);
}

/* Sets *twice to the name of a variable the file holds twice, or NULL.
 * Merging a second declaration of a name into the first's variable would
 * mix two layouts (another optimizer's slots, another row width). */
static int ck_twice(const ck_file *cf, const char **twice) {
  *twice = NULL;
  if (cf->n < 2) return 0;
  ps_var **v = malloc(cf->n * sizeof *v);
  if (!v) return LOOM_ENOMEM;
  memcpy(v, cf->vars, cf->n * sizeof *v);
  qsort(v, cf->n, sizeof *v, cmp_var_names);
  for (uint32_t i = 1; i < cf->n && !*twice; i++)
    if (!strcmp(v[i - 1]->d.name, v[i]->d.name)) *twice = v[i]->d.name;
  free(v);
  return 0;
}

/* Reads one shard file of size bytes from f (its name for messages). */
static int ck_read_stream(FILE *f, uint64_t size, const char *path, int shard, int nshards,
                          uint64_t step, ck_file *cf, char *err, size_t errlen) {
  memset(cf, 0, sizeof *cf);
  cf->mem.cap = UINT64_MAX;
  ck_reader r = {.f = f};
  r.md = EVP_MD_CTX_new();
  int rc = 0;
  if (!r.md || EVP_DigestInit_ex(r.md, EVP_sha256(), NULL) != 1) rc = LOOM_ENOMEM;
  if (rc == 0 && size < 8 + 4 * 4 + 8 + CK_DIGEST) rc = LOOM_EIO;
  r.left = rc == 0 ? size - CK_DIGEST : 0;
  char magic[8] = {0};
  if (rc == 0) {
    ck_get(&r, magic, 8);
    uint32_t ver = ck_g32(&r), fshard = ck_g32(&r), fn = ck_g32(&r);
    uint64_t fstep = ck_g64(&r);
    uint32_t nvars = ck_g32(&r);
    if (r.bad || memcmp(magic, CK_MAGIC, 8) || ver != CK_VERSION || fshard != (uint32_t)shard ||
        fn != (uint32_t)nshards || fstep != step || nvars > 65536)
      rc = LOOM_EIO;
    if (rc == 0 && !(cf->vars = calloc(nvars ? nvars : 1, sizeof *cf->vars))) rc = LOOM_ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < nvars; i++) {
      rc = ck_read_var(&r, cf, &cf->vars[i], err, errlen);
      cf->n = i + 1;
      if (rc == 0 && r.bad) rc = LOOM_EIO;
    }
  }
  unsigned char want[CK_DIGEST], got[CK_DIGEST];
  unsigned int dlen = 0;
  if (rc == 0 && (r.left != 0 || fread(got, 1, CK_DIGEST, r.f) != CK_DIGEST ||
                  EVP_DigestFinal_ex(r.md, want, &dlen) != 1 || memcmp(want, got, CK_DIGEST)))
    rc = LOOM_EIO;
  EVP_MD_CTX_free(r.md);
  const char *twice = NULL;
  if (rc == 0) rc = ck_twice(cf, &twice);
  if (twice) {
    snprintf(err, errlen, "%s is damaged: it holds variable '%.300s' twice", path, twice);
    rc = LOOM_EIO;
  } else if (rc < 0) {
    if (rc == LOOM_EIO)
      snprintf(err, errlen,
               "%s is damaged (a length, the header or the "
               "SHA-256 does not check out)",
               path);
  }
  if (rc < 0) ck_file_free(cf);
  return rc;
}

/* Opens path for reading, buffered: through *vbuf, CK_BUF bytes (free it
 * after fclose; NULL when unbuffered or out of memory), and says its size;
 * on failure NULL, a message in err and *rc LOOM_ENOENT or LOOM_EIO. */
static FILE *ck_open(const char *path, bool buffered, uint64_t *size, char **vbuf, int *rc,
                     char *err, size_t errlen) {
  struct stat sb;
  *vbuf = NULL;
  if (loom__fs_remote(path)) {
    /* fetched whole, read from here, gone from here once open */
    char local[PS_MAX_PATH], why[1024], tdir[PATH_MAX];
    int tlock;
    if ((*rc = local_tmp(local, sizeof local, "read", tdir, &tlock, err, errlen)) < 0) return NULL;
    int grc = loom__fs_get(path, local, why, sizeof why);
    if (grc < 0) {
      loom__tmpdir_remove(tdir, tlock);
      snprintf(err, errlen, "cannot read %s: %s", path, why);
      *rc = grc == LOOM_ENOENT ? LOOM_ENOENT : LOOM_EIO;
      return NULL;
    }
    FILE *f = fopen(local, "rbe");
    loom__tmpdir_remove(tdir, tlock);
    if (!f || fstat(fileno(f), &sb) < 0) {
      snprintf(err, errlen, "cannot read the copy of %s: %s", path, strerror(errno));
      *rc = LOOM_EIO;
      if (f) fclose(f);
      return NULL;
    }
    *size = (uint64_t)sb.st_size;
    if (buffered && (*vbuf = malloc(CK_BUF))) setvbuf(f, *vbuf, _IOFBF, CK_BUF);
    return f;
  }
  FILE *f = fopen(path, "rbe");
  if (!f || fstat(fileno(f), &sb) < 0) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    *rc = errno == ENOENT ? LOOM_ENOENT : LOOM_EIO;
    if (f) fclose(f);
    return NULL;
  }
  *size = (uint64_t)sb.st_size;
  if (buffered && (*vbuf = malloc(CK_BUF))) setvbuf(f, *vbuf, _IOFBF, CK_BUF);
  return f;
}

/* Moves what cf holds of this shard's data into st. */
static int ck_merge(ps_state *st, ck_file *cf, char *err, size_t errlen) {
  for (uint32_t i = 0; i < cf->n; i++) {
    ps_var *fv = cf->vars[i];
    uint32_t id;
    int at = ps_state_find(st, fv->d.name);
    if (at < 0) {
      int rc = ps_state_declare(st, &fv->d, &id, err, errlen);
      if (rc < 0) return rc;
      st->vars[id]->loading = true;
      at = (int)id;
    }
    ps_var *v = st->vars[at];
    if (!v->loading) { /* first seen in this restore: start from nothing */
      v->loading = true;
      v->t = 0;
      if (v->d.kind == PS_SPARSE) ps_rows_free(&v->rows, &st->mem);
    }
    if (fv->t > v->t) v->t = fv->t;
    if (v->d.kind == PS_DENSE) {
      uint64_t lo = fv->lo > v->lo ? fv->lo : v->lo;
      uint64_t hi = fv->hi < v->hi ? fv->hi : v->hi;
      if (lo >= hi) continue;
      if (fv->lo == v->lo && fv->hi == v->hi) {
        float *t;
        t = v->w, v->w = fv->w, fv->w = t;
        t = v->s1, v->s1 = fv->s1, fv->s1 = t;
        t = v->s2, v->s2 = fv->s2, fv->s2 = t;
        continue;
      }
      size_t n = (size_t)(hi - lo) * sizeof(float);
      memcpy(v->w + (lo - v->lo), fv->w + (lo - fv->lo), n);
      if (v->slots >= 1) memcpy(v->s1 + (lo - v->lo), fv->s1 + (lo - fv->lo), n);
      if (v->slots >= 2) memcpy(v->s2 + (lo - v->lo), fv->s2 + (lo - fv->lo), n);
      continue;
    }
    for (uint64_t r = 0; r < fv->rows.n; r++) {
      uint64_t key = ps_rows_key(&fv->rows, r);
      if (ps_key_shard(key, st->nshards) != st->shard) continue;
      bool added;
      int64_t row = ps_rows_add(&v->rows, key, &added, &st->mem);
      if (row < 0) {
        snprintf(err, errlen,
                 "shard %d ran out of memory restoring '%s' "
                 "(LOOM_PS_MAX_MEMORY); its state is now partial",
                 st->shard, v->d.name);
        return (int)row;
      }
      memcpy(ps_rows_at(&v->rows, (uint64_t)row), ps_rows_at(&fv->rows, r),
             v->rows.stride * sizeof(float));
    }
  }
  return 0;
}

int ps_ckpt_manifest_parse(const char *text, size_t len, uint64_t step, int *shards) {
  json_t *m = json_loadb(text, len, 0, NULL);
  json_int_t mstep = json_integer_value(json_object_get(m, "step"));
  json_int_t mshards = json_integer_value(json_object_get(m, "shards"));
  json_decref(m);
  if (mstep != (json_int_t)step || mshards < 1 || mshards > 65536) return LOOM_EIO;
  *shards = (int)mshards;
  return 0;
}

/* The number of shards that wrote checkpoint step, from its manifest. */
static int manifest_shards(const char *dir, uint64_t step, int *old, char *err, size_t errlen) {
  char sdir[PS_MAX_PATH + 64], path[PS_MAX_PATH + 128], *ms = NULL;
  size_t len = 0;
  if (step_dir(sdir, sizeof sdir, dir, step) < 0) return LOOM_ERANGE;
  snprintf(path, sizeof path, "%s/MANIFEST.json", sdir);
  int rc;
  if (loom__fs_remote(dir)) {
    char why[1024];
    void *data = NULL;
    rc = loom__fs_read_all(path, 1 << 16, &data, &len, why, sizeof why);
    ms = data;
  } else {
    rc = loom__read_file(path, 1 << 16, &ms, &len);
  }
  if (rc < 0) {
    snprintf(err, errlen, "checkpoint %llu in %s is incomplete or missing (no %s)",
             (unsigned long long)step, dir, path);
    return LOOM_ENOENT;
  }
  rc = ps_ckpt_manifest_parse(ms, strnlen(ms, len), step, old);
  free(ms);
  if (rc < 0) snprintf(err, errlen, "%s is damaged", path);
  return rc;
}

int ps_ckpt_verify_stream(FILE *f, uint64_t size, const char *name, int shard, int nshards,
                          uint64_t step, char *err, size_t errlen) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  /* a buffer no larger than the file (+1: never malloc(0)) */
  unsigned char *buf = malloc(size < CK_BUF ? (size_t)size + 1 : CK_BUF);
  int rc = md && buf && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? 0 : LOOM_ENOMEM;
  uint64_t left = size;
  if (rc == 0 && left < 8 + 4 * 4 + 8 + CK_DIGEST) rc = LOOM_EIO;
  if (rc == 0) left -= CK_DIGEST;
  bool head = true;
  while (rc == 0 && left) {
    size_t n = left < CK_BUF ? (size_t)left : CK_BUF;
    if (fread(buf, 1, n, f) != n || EVP_DigestUpdate(md, buf, n) != 1) {
      rc = LOOM_EIO;
      break;
    }
    if (head) { /* magic, version, shard, nshards, step */
      head = false;
      unsigned char want[28];
      ps_wbuf w = {.p = want, .cap = sizeof want};
      ps_put_bytes(&w, CK_MAGIC, 8);
      ps_put_u32(&w, CK_VERSION);
      ps_put_u32(&w, (uint32_t)shard);
      ps_put_u32(&w, (uint32_t)nshards);
      ps_put_u64(&w, step);
      if (n < sizeof want || memcmp(buf, want, sizeof want)) rc = LOOM_EIO;
    }
    left -= n;
  }
  unsigned char got[CK_DIGEST], want[CK_DIGEST];
  unsigned int dl = 0;
  if (rc == 0 && (fread(got, 1, CK_DIGEST, f) != CK_DIGEST ||
                  EVP_DigestFinal_ex(md, want, &dl) != 1 || memcmp(got, want, CK_DIGEST)))
    rc = LOOM_EIO;
  free(buf);
  EVP_MD_CTX_free(md);
  if (rc == LOOM_EIO)
    snprintf(err, errlen, "%s is damaged (its header or SHA-256 does not check out)", name);
  return rc;
}

int ps_ckpt_verify(const ps_state *st, const char *dir, uint64_t step, char *err, size_t errlen) {
  int old, rc = manifest_shards(dir, step, &old, err, errlen);
  char path[PS_MAX_PATH + 128];
  for (int i = 0; rc == 0 && i < old; i++) {
    if (old == st->nshards && i != st->shard) continue;
    shard_path(path, sizeof path, dir, step, i, old);
    uint64_t size;
    char *vbuf;
    FILE *f = ck_open(path, false, &size, &vbuf, &rc, err, errlen);
    if (!f) {
      rc = LOOM_EIO;
      break;
    }
    rc = ps_ckpt_verify_stream(f, size, path, i, old, step, err, errlen);
    fclose(f);
  }
  return rc;
}

int ps_ckpt_load_stream(ps_state *st, FILE *f, uint64_t size, const char *name, int shard,
                        int nshards, uint64_t step, char *err, size_t errlen) {
  ck_file cf;
  int rc = ck_read_stream(f, size, name, shard, nshards, step, &cf, err, errlen);
  if (rc < 0) return rc;
  for (uint32_t i = 0; rc == 0 && i < cf.n; i++) {
    int at = ps_state_find(st, cf.vars[i]->d.name);
    if (at >= 0 && !ps_decl_compatible(&st->vars[at]->d, &cf.vars[i]->d, err, errlen))
      rc = LOOM_EINVAL;
  }
  if (rc == 0) rc = ck_merge(st, &cf, err, errlen);
  ck_file_free(&cf);
  return rc;
}

int ps_ckpt_load(ps_state *st, const char *dir, uint64_t step, char *err, size_t errlen) {
  char path[PS_MAX_PATH + 128];
  int old, rc = manifest_shards(dir, step, &old, err, errlen);
  if (rc < 0) return rc;
  /* Check the declarations before anything changes: from our own file, or
   * (when the shard count changed) the first one's. */
  for (uint32_t i = 0; i < st->nvars; i++) st->vars[i]->loading = false;
  for (int i = 0; rc == 0 && i < old; i++) {
    if (old == st->nshards && i != st->shard) continue;
    shard_path(path, sizeof path, dir, step, i, old);
    uint64_t size;
    char *vbuf;
    FILE *f = ck_open(path, true, &size, &vbuf, &rc, err, errlen);
    if (!f) break;
    rc = ps_ckpt_load_stream(st, f, size, path, i, old, step, err, errlen);
    fclose(f);
    free(vbuf);
  }
  for (uint32_t i = 0; i < st->nvars; i++) st->vars[i]->loading = false;
  ps_state_drop_pending(st);
  return rc;
}
