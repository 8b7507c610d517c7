/* tfile.c: Hadoop's TFile and YARN's aggregated logs in it, read from
 * memory with every length checked (tfile.h says the layout). */
#include "hadoop/tfile.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const uint8_t BCFILE_MAGIC[16] = {0xd1, 0x11, 0xd3, 0x68, 0x91, 0xb5, 0xd7, 0xb6,
                                         0x39, 0xdf, 0x41, 0x40, 0x92, 0xba, 0xe1, 0x50};
#define TAIL (8 + 4 + 16) /* meta index offset, version, magic */

static int fail(int rc, char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

static uint64_t be(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

/* sign-extends the n-byte big-endian value at p */
static int64_t sbe(const uint8_t *p, int n) {
  uint64_t v = be(p, n);
  if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~0ull << (8 * n);
  return (int64_t)v;
}

int tfile_vlong(const uint8_t *p, const uint8_t *end, int64_t *v, size_t *used) {
  if (p >= end) return LOOM_EPROTO;
  int fb = (int8_t)p[0];
  size_t avail = (size_t)(end - p) - 1;
  if (fb >= -32) {
    *v = fb, *used = 1;
    return 0;
  }
  /* the first byte says how many follow: [-72, -33] one, [-104, -73] two,
   * [-120, -105] three (each with high bits in the first byte), [-128,
   * -121] a signed big-endian number of fb + 129 bytes (4 to 8) */
  if (fb >= -72) {
    if (avail < 1) return LOOM_EPROTO;
    *v = (int64_t)(fb + 52) * 256 + p[1], *used = 2;
  } else if (fb >= -104) {
    if (avail < 2) return LOOM_EPROTO;
    *v = (int64_t)(fb + 88) * 65536 + (int64_t)be(p + 1, 2), *used = 3;
  } else if (fb >= -120) {
    if (avail < 3) return LOOM_EPROTO;
    *v = (int64_t)(fb + 112) * 16777216 + (int64_t)be(p + 1, 3), *used = 4;
  } else {
    int len = fb + 129;
    if (len < 4 || avail < (size_t)len) return LOOM_EPROTO;
    *v = sbe(p + 1, len), *used = (size_t)len + 1;
  }
  return 0;
}

/* A cursor over bytes [p, end). */
typedef struct {
  const uint8_t *p, *end;
} cur;

static int get_vlong(cur *c, int64_t *v) {
  size_t used;
  int rc = tfile_vlong(c->p, c->end, v, &used);
  if (rc == 0) c->p += used;
  return rc;
}

/* A TFile string (VInt length, bytes) of at most cap - 1 bytes into out. */
static int get_string(cur *c, char *out, size_t cap) {
  int64_t n;
  if (get_vlong(c, &n) < 0 || n < 0 || (uint64_t)n >= cap || n > c->end - c->p) return LOOM_EPROTO;
  memcpy(out, c->p, (size_t)n);
  out[n] = 0;
  c->p += n;
  return 0;
}

typedef struct {
  int64_t off, csize, rsize;
} region;

static int get_region(cur *c, region *r, size_t flen) {
  if (get_vlong(c, &r->off) < 0 || get_vlong(c, &r->csize) < 0 || get_vlong(c, &r->rsize) < 0)
    return LOOM_EPROTO;
  if (r->off < 0 || r->csize < 0 || r->rsize < 0 || (uint64_t)r->off > flen ||
      (uint64_t)r->csize > flen - (uint64_t)r->off)
    return LOOM_EPROTO;
  return 0;
}

/* The bytes of region r of file, decompressed with algo ("none" or "gz"):
 * *out points into file (none; *owned NULL) or to a malloc'ed buffer
 * (*owned, the caller frees). */
static int block_bytes(const uint8_t *file, const region *r, const char *algo, const uint8_t **out,
                       size_t *outlen, uint8_t **owned, char *err, size_t errlen) {
  *owned = NULL;
  if (!strcmp(algo, "none")) {
    *out = file + r->off, *outlen = (size_t)r->csize;
    return 0;
  }
  if (strcmp(algo, "gz"))
    return fail(LOOM_ENOTSUP, err, errlen, "compression %s is not supported (none and gz are)",
                algo);
  if ((uint64_t)r->rsize > TFILE_MAX_BLOCK)
    return fail(LOOM_ERANGE, err, errlen, "a block of %lld bytes (more than %u)",
                (long long)r->rsize, TFILE_MAX_BLOCK);
  /* deflate expands at most 1032 to 1: a raw size past that is a lie,
   * refused before it is allocated */
  if ((uint64_t)r->rsize > (uint64_t)r->csize * 1032 + 64)
    return fail(LOOM_EPROTO, err, errlen, "a gz block at offset %lld claims %lld bytes from %lld",
                (long long)r->off, (long long)r->rsize, (long long)r->csize);
  uint8_t *buf = malloc(r->rsize ? (size_t)r->rsize : 1);
  if (!buf) return LOOM_ENOMEM;
  z_stream z = {0};
  /* TFile's "gz" is Hadoop's DefaultCodec (zlib); a gzip header is taken
   * too */
  if (inflateInit2(&z, 15 + 32) != Z_OK) {
    free(buf);
    return LOOM_ENOMEM;
  }
  int rc = 0;
  size_t done = 0;
  const uint8_t *in = file + r->off;
  size_t inleft = (size_t)r->csize;
  /* a stream may be several concatenated members (Hadoop's codec stream
   * restarts after each finish): on until the input is used up */
  while (inleft > 0) {
    z.next_in = (Bytef *)in, z.avail_in = (uInt)(inleft > (1u << 30) ? 1u << 30 : inleft);
    z.next_out = buf + done, z.avail_out = (uInt)((size_t)r->rsize - done);
    uInt gave = z.avail_in;
    int zr = inflate(&z, Z_NO_FLUSH);
    size_t took = gave - z.avail_in;
    in += took, inleft -= took;
    done = (size_t)r->rsize - z.avail_out;
    if (zr == Z_STREAM_END) {
      if (inleft == 0) break;
      if (inflateReset(&z) != Z_OK) {
        rc = LOOM_EPROTO;
        break;
      }
      continue;
    }
    if (zr != Z_OK || (took == 0 && z.avail_out == 0) || (took == 0 && inleft > 0)) {
      rc = fail(LOOM_EPROTO, err, errlen, "a gz block at offset %lld does not inflate (%s)",
                (long long)r->off, z.msg ? z.msg : "truncated or longer than its raw size");
      break;
    }
  }
  inflateEnd(&z);
  if (rc == 0 && done != (size_t)r->rsize)
    rc = fail(LOOM_EPROTO, err, errlen,
              "a gz block at offset %lld inflates to %zu bytes, not its raw size %lld",
              (long long)r->off, done, (long long)r->rsize);
  if (rc < 0) {
    if (rc == LOOM_EPROTO && err && !err[0])
      fail(rc, err, errlen, "a gz block at offset %lld is malformed", (long long)r->off);
    free(buf);
    return rc;
  }
  *out = buf, *outlen = done, *owned = buf;
  return 0;
}

/* The records of one decompressed data block. */
static int block_records(const uint8_t *b, size_t n, int64_t boff, tfile_record_fn fn, void *arg,
                         char *err, size_t errlen) {
  cur c = {b, b + n};
  uint8_t *val = NULL;
  size_t vcap = 0;
  int rc = 0;
  while (c.p < c.end) {
    int64_t klen;
    if (get_vlong(&c, &klen) < 0 || klen < 0 || klen > c.end - c.p) {
      rc = fail(LOOM_EPROTO, err, errlen, "a key's length runs past the data block at %lld",
                (long long)boff);
      break;
    }
    const uint8_t *key = c.p;
    c.p += klen;
    /* the value's chunks: their total first, then joined (one chunk, the
     * usual case for a known length, is passed as it lies) */
    cur v = c;
    size_t total = 0, chunks = 0;
    for (;;) {
      int64_t cl;
      if (get_vlong(&v, &cl) < 0 || cl == INT64_MIN) break;
      int64_t len = cl < 0 ? -cl : cl;
      if (len > v.end - v.p) {
        rc = LOOM_EPROTO;
        break;
      }
      v.p += len, total += (size_t)len, chunks++;
      if (cl >= 0) goto have_value;
    }
    rc =
        fail(LOOM_EPROTO, err, errlen, "a value runs past the data block at %lld", (long long)boff);
    break;
  have_value:;
    const uint8_t *vp;
    if (chunks == 1) {
      int64_t cl;
      size_t used;
      tfile_vlong(c.p, c.end, &cl, &used);
      vp = c.p + used;
    } else {
      if (total > vcap) {
        uint8_t *nv = realloc(val, total);
        if (!nv) {
          rc = LOOM_ENOMEM;
          break;
        }
        val = nv, vcap = total;
      }
      size_t at = 0;
      cur w = c;
      for (;;) {
        int64_t cl;
        get_vlong(&w, &cl);
        size_t len = (size_t)(cl < 0 ? -cl : cl);
        if (len) memcpy(val + at, w.p, len);
        at += len, w.p += len;
        if (cl >= 0) break;
      }
      vp = val;
    }
    c.p = v.p;
    rc = fn(arg, key, (size_t)klen, vp, total);
    if (rc) break;
  }
  free(val);
  return rc;
}

int tfile_each(const uint8_t *file, size_t len, tfile_record_fn fn, void *arg, char *err,
               size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (len > TFILE_MAX_FILE)
    return fail(LOOM_ERANGE, err, errlen, "%zu bytes (more than %llu)", len, TFILE_MAX_FILE);
  if (len < TAIL || memcmp(file + len - 16, BCFILE_MAGIC, 16))
    return fail(LOOM_EPROTO, err, errlen, "not a TFile (no BCFile magic at its end)");
  const uint8_t *tail = file + len - TAIL;
  int64_t metaoff = sbe(tail, 8);
  int major = (int)sbe(tail + 8, 2);
  if (major != 1) return fail(LOOM_EPROTO, err, errlen, "BCFile version %d, not 1", major);
  if (metaoff < 0 || (uint64_t)metaoff > len - TAIL)
    return fail(LOOM_EPROTO, err, errlen, "the meta index's offset %lld is outside the file",
                (long long)metaoff);
  /* the meta index: find BCFile.index */
  cur c = {file + metaoff, tail};
  int64_t nmeta;
  if (get_vlong(&c, &nmeta) < 0 || nmeta < 0 || nmeta > TFILE_MAX_BLOCKS)
    return fail(LOOM_EPROTO, err, errlen, "a malformed meta index count");
  region idx = {-1, 0, 0};
  char idxalgo[64] = "";
  for (int64_t i = 0; i < nmeta; i++) {
    char name[1024], algo[64];
    region r;
    if (get_string(&c, name, sizeof name) < 0 || get_string(&c, algo, sizeof algo) < 0 ||
        get_region(&c, &r, len) < 0)
      return fail(LOOM_EPROTO, err, errlen, "meta index entry %lld is malformed", (long long)i);
    if (strncmp(name, "data:", 5))
      return fail(LOOM_EPROTO, err, errlen, "meta block name '%.100s' lacks 'data:'", name);
    if (!strcmp(name + 5, "BCFile.index")) idx = r, memcpy(idxalgo, algo, sizeof algo);
  }
  if (idx.off < 0) return fail(LOOM_EPROTO, err, errlen, "no BCFile.index meta block");
  const uint8_t *ib;
  size_t ilen;
  uint8_t *iown;
  int rc = block_bytes(file, &idx, idxalgo, &ib, &ilen, &iown, err, errlen);
  if (rc < 0) return rc;
  /* the data index: the blocks' compression, count and regions */
  cur d = {ib, ib + ilen};
  char algo[64];
  int64_t nblk;
  if (get_string(&d, algo, sizeof algo) < 0 || get_vlong(&d, &nblk) < 0 || nblk < 0 ||
      nblk > TFILE_MAX_BLOCKS) {
    free(iown);
    return fail(LOOM_EPROTO, err, errlen, "a malformed data index");
  }
  for (int64_t i = 0; i < nblk && rc == 0; i++) {
    region r;
    if (get_region(&d, &r, len) < 0) {
      rc = fail(LOOM_EPROTO, err, errlen, "data block %lld's region is malformed", (long long)i);
      break;
    }
    const uint8_t *b;
    size_t blen;
    uint8_t *own;
    rc = block_bytes(file, &r, algo, &b, &blen, &own, err, errlen);
    if (rc < 0) break;
    rc = block_records(b, blen, r.off, fn, arg, err, errlen);
    free(own);
  }
  free(iown);
  return rc;
}

/* ---- aggregated logs ---------------------------------------------------- */

/* A Java writeUTF string at c into out (at most cap - 1 bytes). */
static int get_utf(cur *c, char *out, size_t cap) {
  if (c->end - c->p < 2) return LOOM_EPROTO;
  size_t n = (size_t)be(c->p, 2);
  if (n >= cap || (size_t)(c->end - c->p - 2) < n) return LOOM_EPROTO;
  memcpy(out, c->p + 2, n);
  out[n] = 0;
  c->p += 2 + n;
  return 0;
}

typedef struct {
  tfile_log_fn fn;
  void *arg;
  char *owner;
  size_t ownerlen;
  char *err;
  size_t errlen;
} logwalk;

static int on_log_record(void *arg, const uint8_t *key, size_t klen, const uint8_t *val,
                         size_t vlen) {
  logwalk *w = arg;
  char k[256];
  cur kc = {key, key + klen};
  if (get_utf(&kc, k, sizeof k) < 0 || kc.p != kc.end)
    return fail(LOOM_EPROTO, w->err, w->errlen, "a key that is not one writeUTF string");
  cur v = {val, val + vlen};
  if (!strcmp(k, "APPLICATION_OWNER")) {
    if (w->owner) {
      char o[256];
      if (get_utf(&v, o, sizeof o) < 0)
        return fail(LOOM_EPROTO, w->err, w->errlen, "a malformed APPLICATION_OWNER");
      loom__strlcpy(w->owner, o, w->ownerlen);
    }
    return 0;
  }
  if (!strcmp(k, "VERSION") || !strcmp(k, "APPLICATION_ACL") || strncmp(k, "container_", 10))
    return 0; /* none of ours: the format's other keys */
  while (v.p < v.end) {
    char type[1024], lenstr[32];
    if (get_utf(&v, type, sizeof type) < 0 || get_utf(&v, lenstr, sizeof lenstr) < 0)
      return fail(LOOM_EPROTO, w->err, w->errlen, "%s: a malformed log header", k);
    char *e;
    unsigned long long n = strtoull(lenstr, &e, 10);
    if (!lenstr[0] || *e || lenstr[0] == '-' || n > (uint64_t)(v.end - v.p))
      return fail(LOOM_EPROTO, w->err, w->errlen, "%s: log %.100s's length '%s' is wrong", k, type,
                  lenstr);
    int rc = w->fn(w->arg, k, type, v.p, (size_t)n);
    if (rc) return rc;
    v.p += n;
  }
  return 0;
}

int tfile_logs_each(const uint8_t *file, size_t len, tfile_log_fn fn, void *arg, char *owner,
                    size_t ownerlen, char *err, size_t errlen) {
  logwalk w = {fn, arg, owner, ownerlen, err, errlen};
  if (owner && ownerlen) owner[0] = 0;
  return tfile_each(file, len, on_log_record, &w, err, errlen);
}
