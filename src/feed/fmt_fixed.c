/* fmt_fixed.c: `fixed:<bytes>`: a file is records of exactly that many
 * bytes, back to back, with nothing else. The cutting and parsing of
 * fixed-size records here are shared with idx (fmt_idx.c). */
#include "feed/feed.h"

#include <stdio.h>
#include <stdint.h>

static int fixed_probe(loom__rfile *f, const feed_format *fmt, feed_file *ff, char *err,
                       size_t errlen) {
  (void)f;
  if (ff->size % fmt->rec) {
    snprintf(err, errlen,
             "%s is %llu bytes, not a multiple of the record size %llu (format fixed:%llu): "
             "is it the right file and format?",
             ff->path, (unsigned long long)ff->size, (unsigned long long)fmt->rec,
             (unsigned long long)fmt->rec);
    return LOOM_ESPEC;
  }
  ff->data_off = 0;
  ff->data_end = ff->size;
  ff->rec = fmt->rec;
  return 0;
}

int loom__feed_cut_sized(loom__rfile *f, const feed_file *ff, uint64_t step, uint64_t **cuts,
                         size_t *ncuts, char *err, size_t errlen) {
  (void)f;
  (void)err;
  (void)errlen;
  uint64_t r = ff->rec, per = step / r ? step / r : 1; /* records a split */
  for (uint64_t at = ff->data_off + per * r; at < ff->data_end; at += per * r) {
    int rc = loom__feed_cut_push(cuts, ncuts, at);
    if (rc < 0) return rc;
  }
  return 0;
}

int loom__feed_parse_sized(const unsigned char *buf, size_t len, bool eof,
                           const feed_parse_ctx *ctx, feed_recs *recs, size_t *used) {
  (void)buf;
  size_t r = (size_t)ctx->rec, n = r ? len / r : 0;
  *used = 0;
  if (!r || r > UINT32_MAX || len > UINT32_MAX || recs->n) return LOOM_EINVAL;
  recs->stride = (uint32_t)r; /* no array: record i is at i * r */
  recs->n = n;
  *used = n * r;
  if (eof && *used < len) {
    snprintf(ctx->err, ctx->errlen,
             "%s: offset %llu: a truncated record (%zu bytes of %zu): the file "
             "changed or is corrupt",
             ctx->path, (unsigned long long)(ctx->base + *used), len - *used, r);
    return LOOM_EIO;
  }
  return 0;
}

const feed_format_ops loom__feed_fixed = {
    .name = "fixed",
    .probe = fixed_probe,
    .cut = loom__feed_cut_sized,
    .parse = loom__feed_parse_sized,
};
