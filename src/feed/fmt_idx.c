/* fmt_idx.c: `idx`, the MNIST file format: a header
 *
 *   0x00 0x00 | type | ndims | ndims big-endian u32 sizes
 *
 * (type 0x08 u8, 0x09 i8, 0x0b i16, 0x0c i32, 0x0d f32, 0x0e f64), then the
 * data. A record is one item along the first dimension: the product of the
 * other sizes times the element size (one element for a 1-d file). The
 * header is checked against the file's size, so a truncated or compressed
 * file is refused when the job starts. */
#include "feed/feed.h"
#include "core/bytes.h"

#include <stdio.h>
#include <unistd.h>

#define IDX_MAX_DIMS 16

static int idx_elem(unsigned type) {
  switch (type) {
  case 0x08:
  case 0x09:
    return 1;
  case 0x0b:
    return 2;
  case 0x0c:
  case 0x0d:
    return 4;
  case 0x0e:
    return 8;
  }
  return 0;
}

static int idx_probe(loom__rfile *f, const feed_format *fmt, feed_file *ff, char *err,
                     size_t errlen) {
  (void)fmt;
  unsigned char h[4 + 4 * IDX_MAX_DIMS];
  size_t have = ff->size < sizeof h ? (size_t)ff->size : sizeof h;
  size_t got = 0;
  if (have >= 4) {
    int rc = loom__rfile_pread(f, h, have, 0, &got, err, errlen);
    if (rc < 0) return rc;
  }
  if (have < 4 || got != have) {
    snprintf(err, errlen, "%s: %llu bytes is too short for an idx header (format idx)", ff->path,
             (unsigned long long)ff->size);
    return LOOM_ESPEC;
  }
  if (h[0] == 0x1f && h[1] == 0x8b) {
    snprintf(err, errlen,
             "%s: the file is gzip-compressed: gunzip it first (format idx "
             "reads raw idx files)",
             ff->path);
    return LOOM_ESPEC;
  }
  if (h[0] || h[1]) {
    snprintf(err, errlen,
             "%s: not an idx file: it starts with 0x%02x 0x%02x, not 0x00 0x00 "
             "(format idx)",
             ff->path, h[0], h[1]);
    return LOOM_ESPEC;
  }
  int elem = idx_elem(h[2]);
  if (!elem) {
    snprintf(err, errlen,
             "%s: idx element type 0x%02x is not one of 08 09 0b 0c 0d 0e "
             "(format idx)",
             ff->path, h[2]);
    return LOOM_ESPEC;
  }
  unsigned nd = h[3];
  if (nd < 1 || nd > IDX_MAX_DIMS) {
    snprintf(err, errlen, "%s: idx header has %u dimensions; 1 to %d are read (format idx)",
             ff->path, nd, IDX_MAX_DIMS);
    return LOOM_ESPEC;
  }
  uint64_t hdr = 4 + 4 * (uint64_t)nd;
  if (have < hdr) {
    snprintf(err, errlen,
             "%s: the file ends inside its idx header (%u dimensions need %llu "
             "bytes)",
             ff->path, nd, (unsigned long long)hdr);
    return LOOM_ESPEC;
  }
  uint64_t dims[IDX_MAX_DIMS], rec = (uint64_t)elem;
  for (unsigned i = 0; i < nd; i++) {
    const unsigned char *d = h + 4 + 4 * i;
    dims[i] = loom__get_be32(d);
    if (i > 0) {
      if (dims[i] == 0 || rec > (UINT64_C(1) << 40) / dims[i]) {
        snprintf(err, errlen, "%s: idx dimension %u is %llu: records must be 1 byte to 1 TiB",
                 ff->path, i, (unsigned long long)dims[i]);
        return LOOM_ESPEC;
      }
      rec *= dims[i];
    }
  }
  uint64_t want;
  bool over =
      __builtin_mul_overflow(dims[0], rec, &want) || __builtin_add_overflow(want, hdr, &want);
  if (over || want != ff->size) {
    snprintf(err, errlen,
             "%s: the idx header says %llu records of %llu bytes (%llu bytes with "
             "the header) but the file is %llu bytes: it is truncated or not what its header "
             "says",
             ff->path, (unsigned long long)dims[0], (unsigned long long)rec,
             over ? 0ull : (unsigned long long)want, (unsigned long long)ff->size);
    return LOOM_ESPEC;
  }
  ff->data_off = hdr;
  ff->data_end = ff->size;
  ff->rec = rec;
  return 0;
}

const feed_format_ops loom__feed_idx = {
    .name = "idx",
    .probe = idx_probe,
    .cut = loom__feed_cut_sized,
    .parse = loom__feed_parse_sized,
};
