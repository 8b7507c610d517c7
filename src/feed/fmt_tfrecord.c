/* fmt_tfrecord.c: `tfrecord`, TensorFlow's record file: each record is
 *
 *   u64 length | u32 masked_crc32c(length) | data[length] | u32 masked_crc32c(data)
 *
 * (little-endian). Both CRCs are checked on every record read; a mismatch
 * is an error naming the file and the record's offset. Record boundaries
 * cannot be found from the middle of a file, so a large file is cut by
 * walking its record headers from the start (reading headers only, a
 * window at a time, checking each length's CRC on the way). */
#include "feed/feed.h"
#include "core/bytes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TF_HDR 12
#define TF_FOOT 4
#define TF_WINDOW (1 << 20)

static bool header_ok(const unsigned char *h) {
  return loom__crc32c_mask(loom__crc32c(0, h, 8)) == loom__get_le32(h + 8);
}

static int tf_probe(loom__rfile *f, const feed_format *fmt, feed_file *ff, char *err,
                    size_t errlen) {
  (void)fmt;
  ff->data_off = 0;
  ff->data_end = ff->size;
  ff->rec = 0;
  if (ff->size == 0) return 0;
  unsigned char h[TF_HDR];
  size_t got = 0;
  if (ff->size >= TF_HDR + TF_FOOT) {
    int rc = loom__rfile_pread(f, h, sizeof h, 0, &got, err, errlen);
    if (rc < 0) return rc;
  }
  if (ff->size < TF_HDR + TF_FOOT || got != sizeof h) {
    snprintf(err, errlen, "%s: %llu bytes is too short to be a TFRecord file (format tfrecord)",
             ff->path, (unsigned long long)ff->size);
    return LOOM_ESPEC;
  }
  if (!header_ok(h)) {
    snprintf(err, errlen,
             "%s: offset 0: the first record's length CRC does not match: "
             "not a TFRecord file, or a corrupt one (format tfrecord)",
             ff->path);
    return LOOM_ESPEC;
  }
  return 0;
}

static int tf_cut(loom__rfile *f, const feed_file *ff, uint64_t step, uint64_t **cuts,
                  size_t *ncuts, char *err, size_t errlen) {
  unsigned char *win = malloc(TF_WINDOW);
  if (!win) return LOOM_ENOMEM;
  uint64_t wpos = 0, wlen = 0; /* the window holds file bytes [wpos, wpos+wlen) */
  uint64_t pos = ff->data_off, target = ff->data_off + step;
  int rc = 0;
  while (pos < ff->data_end) {
    if (ff->data_end - pos < TF_HDR + TF_FOOT) {
      snprintf(err, errlen, "%s: offset %llu: a truncated record header at the end of the file",
               ff->path, (unsigned long long)pos);
      rc = LOOM_ESPEC;
      break;
    }
    if (pos < wpos || pos + TF_HDR > wpos + wlen) {
      size_t want = ff->data_end - pos < TF_WINDOW ? (size_t)(ff->data_end - pos) : TF_WINDOW;
      size_t n = 0;
      if ((rc = loom__rfile_pread(f, win, want, pos, &n, err, errlen)) < 0) break;
      if (n < TF_HDR) {
        snprintf(err, errlen, "%s: cannot read at offset %llu: the file got shorter", ff->path,
                 (unsigned long long)pos);
        rc = LOOM_EIO;
        break;
      }
      wpos = pos;
      wlen = (uint64_t)n;
    }
    const unsigned char *h = win + (pos - wpos);
    if (!header_ok(h)) {
      snprintf(err, errlen, "%s: offset %llu: TFRecord length CRC mismatch: the file is corrupt",
               ff->path, (unsigned long long)pos);
      rc = LOOM_ESPEC;
      break;
    }
    uint64_t len = loom__get_le64(h);
    if (len > ff->data_end - pos - TF_HDR - TF_FOOT) {
      snprintf(err, errlen,
               "%s: offset %llu: a record of %llu bytes runs past the end of the "
               "file (%llu bytes): the file is truncated",
               ff->path, (unsigned long long)pos, (unsigned long long)len,
               (unsigned long long)ff->size);
      rc = LOOM_ESPEC;
      break;
    }
    if (pos >= target && pos > ff->data_off) {
      if ((rc = loom__feed_cut_push(cuts, ncuts, pos)) < 0) break;
      target = pos + step;
    }
    pos += TF_HDR + len + TF_FOOT;
  }
  free(win);
  return rc;
}

static int tf_parse(const unsigned char *buf, size_t len, bool eof, const feed_parse_ctx *ctx,
                    feed_recs *recs, size_t *used) {
  size_t p = 0;
  int rc = 0;
  while (len - p >= TF_HDR) {
    const unsigned char *h = buf + p;
    if (!header_ok(h)) {
      snprintf(ctx->err, ctx->errlen,
               "%s: offset %llu: TFRecord length CRC mismatch: the "
               "file is corrupt",
               ctx->path, (unsigned long long)(ctx->base + p));
      rc = LOOM_EIO;
      goto out;
    }
    uint64_t n = loom__get_le64(h);
    if (len - p < TF_HDR + TF_FOOT || n > len - p - TF_HDR - TF_FOOT) {
      if (!eof) goto out; /* read more */
      snprintf(ctx->err, ctx->errlen,
               "%s: offset %llu: a record of %llu bytes runs past the "
               "end of its split: the file is truncated or changed",
               ctx->path, (unsigned long long)(ctx->base + p), (unsigned long long)n);
      rc = LOOM_EIO;
      goto out;
    }
    size_t d = p + TF_HDR;
    uint32_t want = loom__get_le32(buf + d + n),
             got = loom__crc32c_mask(loom__crc32c(0, buf + d, n));
    if (want != got) {
      snprintf(ctx->err, ctx->errlen,
               "%s: offset %llu: TFRecord data CRC mismatch (record "
               "of %llu bytes; stored 0x%08x, computed 0x%08x): the file is corrupt",
               ctx->path, (unsigned long long)(ctx->base + p), (unsigned long long)n, want, got);
      rc = LOOM_EIO;
      goto out;
    }
    if ((rc = loom__feed_recs_add(recs, d, (size_t)n)) < 0) goto out;
    p = d + n + TF_FOOT;
  }
  if (eof && p < len) {
    snprintf(ctx->err, ctx->errlen,
             "%s: offset %llu: a truncated record header (%zu bytes) "
             "at the end of its split",
             ctx->path, (unsigned long long)(ctx->base + p), len - p);
    rc = LOOM_EIO;
  }
out:
  *used = p;
  return rc;
}

const feed_format_ops loom__feed_tfrecord = {
    .name = "tfrecord",
    .probe = tf_probe,
    .cut = tf_cut,
    .parse = tf_parse,
};
