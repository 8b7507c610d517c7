/* feed_format_fuzz.c: libFuzzer harness for the data feed's record
 * formats (src/feed/fmt_*.c, split.c): one harness for all four. The
 * first byte picks the format (lines, tfrecord, idx, fixed:<1..64>), the
 * next two the split size (1 byte to 32 KiB) and the read-ahead chunk
 * (1..256 bytes, or the whole split as a shuffled split reads it); the
 * rest is an input file, in a memfd (one, rewritten for each input). The
 * split size is raised to 1/MAX_SPLITS of the file and the chunk to
 * 1/MAX_CHUNKS of it where they are smaller, so every size is reached on
 * files small enough (1-byte splits under 128 bytes, 1-byte chunks under
 * 256) and no input costs thousands of splits or chunks (1-byte splits of
 * a 20000-byte file made cutting quadratic: up to 300 ms an input, against
 * well under 1 ms for most). The job's start makes the splits as
 * the coordinator does (loom__feed_input_make: probe, cut, check), then
 * each split is read as a task reads it (feed/client.c read_split: chunks
 * at record boundaries, grown while a record does not fit, the last one
 * at eof). Aborts when a split is not where the contract puts it, when a
 * parser's records leave its chunk, or when the records read split by
 * split differ from those of the whole file read as one split (both fail,
 * or both give the same records). Built by LOOM_FUZZ=ON with clang;
 * driver.c runs it over the committed corpus in every build. */
#include "feed/feed.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SPLITS 64  /* splits of one input, about (see the top) */
#define MAX_CHUNKS 128 /* chunks of one split, about, records aside */

typedef struct {
  uint64_t *v; /* (file offset, length) pairs */
  size_t n, cap;
} reclist;

static void rec_add(reclist *l, uint64_t off, uint64_t len) {
  if (l->n + 2 > l->cap) {
    l->cap = l->cap ? 2 * l->cap : 256;
    l->v = realloc(l->v, l->cap * sizeof *l->v);
    if (!l->v) abort();
  }
  l->v[l->n++] = off;
  l->v[l->n++] = len;
}

/* Reads [off, off+len) of file as read_split does, appending each record
 * to out; 0, or the parser's error. chunk 0: the whole split at once.
 * recs is the parser's record index, kept from split to split as the
 * client keeps its own. */
static int read_split(const uint8_t *file, const feed_format_ops *ops, uint64_t rec, uint64_t off,
                      uint64_t len, size_t chunk, feed_recs *recs, reclist *out) {
  char msg[512] = "";
  feed_parse_ctx ctx = {.path = "fuzz", .rec = rec, .err = msg, .errlen = sizeof msg};
  size_t base_cap = chunk ? chunk : (size_t)len;
  if (ctx.rec && ctx.rec <= base_cap) base_cap = base_cap / ctx.rec * ctx.rec;
  if (ctx.rec > base_cap) base_cap = (size_t)ctx.rec;
  size_t cap = base_cap;
  uint64_t pos = off, end = off + len;
  int rc = 0;
  while (pos < end) {
    size_t want = end - pos < cap ? (size_t)(end - pos) : cap;
    bool eof = pos + want == end;
    size_t used = 0;
    recs->n = 0;
    recs->stride = 0;
    ctx.base = pos;
    /* an exact-size copy, so that ASan sees a read past the chunk */
    unsigned char *buf = malloc(want ? want : 1);
    if (!buf) abort();
    memcpy(buf, file + pos, want);
    rc = ops->parse(buf, want, eof, &ctx, recs, &used);
    free(buf);
    if (rc < 0) {
      if (!msg[0] && rc != LOOM_ERANGE) abort(); /* an error says where */
      break;
    }
    if (used > want || (eof && used != want)) abort();
    if (recs->n == 0) { /* a record larger than the chunk: read more */
      if (eof || used) abort();
      cap *= 2;
      continue;
    }
    uint64_t at = 0; /* records are in order, inside what was used */
    for (size_t i = 0; i < recs->n; i++) {
      feed_rec r = loom__feed_rec_at(recs, i);
      if (r.off < at || (uint64_t)r.off + r.len > used) abort();
      at = (uint64_t)r.off + r.len;
      rec_add(out, pos + r.off, r.len);
    }
    pos += used;
    cap = base_cap;
  }
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  static const char *const FORMATS[] = {"lines", "tfrecord", "idx", "fixed:"};
  char name[32];
  snprintf(name, sizeof name, "%s", FORMATS[data[0] & 3]);
  if ((data[0] & 3) == 3) snprintf(name, sizeof name, "fixed:%d", (data[0] >> 2) + 1);
  uint64_t split_bytes = (uint64_t)1 << (data[1] & 15);
  split_bytes += data[1] >> 4;
  size_t chunk = data[2] == 0 ? 0 : (size_t)data[2];
  data += 3, size -= 3;
  if (split_bytes < size / MAX_SPLITS) split_bytes = size / MAX_SPLITS;
  if (chunk && chunk < size / MAX_CHUNKS) chunk = size / MAX_CHUNKS;

  feed_format fmt;
  if (loom__feed_format_parse(name, &fmt) < 0) abort();
  const feed_format_ops *ops = loom__feed_format_ops(&fmt);
  static int fd = -1; /* made once: the file is the input's bytes, no more */
  if (fd < 0 && (fd = memfd_create("feed", MFD_CLOEXEC)) < 0) abort();
  if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) abort();
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const char *globs[] = {path};
  feed_input *in = NULL;
  char err[1024] = "";
  int rc = loom__feed_input_make(globs, 1, &fmt, false, split_bytes, &in, err, sizeof err);
  if (rc < 0) {
    if (in || !err[0]) abort();
    return 0;
  }
  if (in->nfiles != 1 || in->nsplits == 0) abort();
  const feed_file *ff = &in->files[0];
  if (ff->size != size || ff->data_off > ff->data_end || ff->data_end > size) abort();
  if ((fmt.kind == FEED_FIXED || fmt.kind == FEED_IDX) && ff->rec == 0) abort();
  /* the splits tile [data_off, data_end) in order; a lines split starts a line */
  uint64_t at = ff->data_off;
  for (size_t i = 0; i < in->nsplits; i++) {
    const feed_split *sp = &in->splits[i];
    if (sp->file != 0 || sp->off != at || sp->len == 0) abort();
    if (ff->rec && (sp->off - ff->data_off) % ff->rec) abort();
    if (fmt.kind == FEED_LINES && i > 0 && data[sp->off - 1] != '\n') abort();
    at += sp->len;
  }
  if (at != ff->data_end || in->bytes != ff->data_end - ff->data_off) abort();

  reclist whole = {0}, parts = {0};
  feed_recs recs = {0};
  int wrc =
      read_split(data, ops, ff->rec, ff->data_off, ff->data_end - ff->data_off, 0, &recs, &whole);
  int prc = 0;
  for (size_t i = 0; i < in->nsplits && prc == 0; i++)
    prc =
        read_split(data, ops, ff->rec, in->splits[i].off, in->splits[i].len, chunk, &recs, &parts);
  loom__feed_recs_free(&recs);
  if ((wrc < 0) != (prc < 0)) abort();
  if (wrc == 0 && (whole.n != parts.n || memcmp(whole.v, parts.v, whole.n * sizeof *whole.v)))
    abort();
  free(whole.v);
  free(parts.v);
  loom__feed_input_free(in);
  return 0;
}
