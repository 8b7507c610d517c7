/* feed.h: what the data feed's parts share inside loom: the record formats
 * (a table of operations, one file each: fmt_lines.c, fmt_tfrecord.c,
 * fmt_idx.c, fmt_fixed.c), making splits of the input (split.c), CRC32C
 * (crc32c.c), the shuffle's random numbers, the feed's tunables and the
 * names of the wire messages between libloom's client (client.c) and the
 * coordinator's dispatcher (src/coord/feed_dispatch.c).
 *
 * Everything here lives in libloom; the loom command links libloom, so the
 * dispatcher uses the same format and split code as the readers do. */
#ifndef LOOM_FEED_FEED_H
#define LOOM_FEED_FEED_H

#include "core/crc32c.h"
#include "core/core.h"
#include "fs/fs.h"
#include "wire/wire_msg.h"
#include <jansson.h>

/* ---- tunables: LOOM_FEED_* in src/core/tun.h, read with loom__tun() ---- */

/* ---- wire messages: WIRE_FEED_OPEN .. WIRE_FEED_RELEASE, typed in
 * wire/wire_msg.h (wire_feed_*), with FEED_MAX_BATCH_LEASES, FEED_MAX_LIST
 * and FEED_MAX_WAIT_MS ---------------------------------------------------- */

/* CRC32C (Castagnoli), as TFRecord uses it: core/crc32c.h */

/* ---- random numbers for shuffling: splitmix64, the same everywhere ----- */
static inline uint64_t loom__feed_mix(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* Shuffles idx[0..n) in place (Fisher-Yates) from seed. */
void loom__feed_permute(uint32_t *idx, size_t n, uint64_t seed);
/* A seed derived from a base seed and up to two numbers (epoch, split). */
uint64_t loom__feed_seed(uint64_t base, uint64_t a, uint64_t b);

/* ---- formats ------------------------------------------------------------ */
typedef enum { FEED_LINES, FEED_TFRECORD, FEED_IDX, FEED_FIXED } feed_kind;

typedef struct {
  feed_kind kind;
  uint64_t rec; /* FEED_FIXED: bytes a record */
} feed_format;

/* One input file as the splitter sees it. */
typedef struct {
  char *path;
  uint64_t size;               /* bytes */
  uint64_t data_off, data_end; /* where the records are (idx: past the header) */
  uint64_t rec;                /* bytes a record for fixed and idx; 0: variable */
} feed_file;

/* Where a chunk's n records are: payload i is buf[v[i].off .. +v[i].len),
 * or, for fixed-size records (stride > 0), buf[i * stride .. +stride) with
 * no array at all. */
typedef struct {
  uint32_t off, len;
} feed_rec;
typedef struct {
  feed_rec *v;
  size_t n, cap;
  uint32_t stride;
} feed_recs;
static inline feed_rec loom__feed_rec_at(const feed_recs *r, size_t i) {
  if (r->stride) return (feed_rec){(uint32_t)(i * r->stride), r->stride};
  return r->v[i];
}
/* Appends a record (the slow path grows the array). */
int loom__feed_recs_push(feed_recs *r, size_t off, size_t len);
static inline int loom__feed_recs_add(feed_recs *r, size_t off, size_t len) {
  if (r->n == r->cap || off > UINT32_MAX || len > UINT32_MAX)
    return loom__feed_recs_push(r, off, len);
  r->v[r->n].off = (uint32_t)off;
  r->v[r->n].len = (uint32_t)len;
  r->n++;
  return 0;
}
void loom__feed_recs_free(feed_recs *r);

/* What a parser knows of the bytes it parses, for its messages. */
typedef struct {
  const char *path;
  uint64_t base; /* file offset of buf[0] */
  uint64_t rec;  /* record bytes for fixed-size formats */
  char *err;
  size_t errlen;
} feed_parse_ctx;

/* A format: one table of operations per file fmt_*.c. */
typedef struct feed_format_ops {
  const char *name;
  /* Checks the open file f (ff->path and ff->size set) and sets
   * ff->data_off, ff->data_end and ff->rec. LOOM_EIO / LOOM_ESPEC with a
   * message naming the file on a bad header. */
  int (*probe)(loom__rfile *f, const feed_format *fmt, feed_file *ff, char *err, size_t errlen);
  /* Cuts [data_off, data_end) into ranges of about step bytes that start and
   * end on record boundaries: appends each cut (a record's first byte,
   * strictly between data_off and data_end, increasing) to *cuts. */
  int (*cut)(loom__rfile *f, const feed_file *ff, uint64_t step, uint64_t **cuts, size_t *ncuts,
             char *err, size_t errlen);
  /* Finds the whole records in buf[0..len) (file bytes from ctx->base, at a
   * record boundary) and appends them to recs; *used gets the bytes they
   * take. With eof, buf ends where the split ends, so bytes left over are a
   * truncated record: LOOM_EIO naming the file and offset. Without eof, a
   * record that does not fit leaves *used short: read more and call again.
   * Checks the format's own integrity (TFRecord's CRCs). */
  int (*parse)(const unsigned char *buf, size_t len, bool eof, const feed_parse_ctx *ctx,
               feed_recs *recs, size_t *used);
} feed_format_ops;

/* Cutting and parsing records of ff->rec / ctx->rec bytes each, shared by
 * fmt_fixed.c and fmt_idx.c. */
int loom__feed_cut_sized(loom__rfile *f, const feed_file *ff, uint64_t step, uint64_t **cuts,
                         size_t *ncuts, char *err, size_t errlen);
int loom__feed_parse_sized(const unsigned char *buf, size_t len, bool eof,
                           const feed_parse_ctx *ctx, feed_recs *recs, size_t *used);
/* Appends one cut to a growing array. */
int loom__feed_cut_push(uint64_t **cuts, size_t *ncuts, uint64_t at);

extern const feed_format_ops loom__feed_lines;
extern const feed_format_ops loom__feed_tfrecord;
extern const feed_format_ops loom__feed_idx;
extern const feed_format_ops loom__feed_fixed;

/* "lines", "tfrecord", "idx" or "fixed:<bytes>" into fmt. LOOM_EINVAL if
 * unknown. */
int loom__feed_format_parse(const char *s, feed_format *fmt);
const feed_format_ops *loom__feed_format_ops(const feed_format *fmt);

/* ---- the input and its splits ------------------------------------------ */
#define FEED_SPLIT_HOSTS 3      /* replicas remembered per split */
#define FEED_NO_HOST UINT16_MAX /* an unused entry of feed_split.host */
typedef struct {
  uint32_t file;
  uint64_t off, len; /* bytes of the file, record-aligned */
  /* the hosts holding the split's first byte (HDFS: its block's
   * DataNodes), as indexes into feed_input.hosts */
  uint16_t host[FEED_SPLIT_HOSTS];
} feed_split;

typedef struct {
  feed_format fmt;
  feed_file *files;
  size_t nfiles;
  feed_split *splits;
  size_t nsplits;
  uint64_t bytes; /* of records, over all files */
  char **hosts;   /* every host some split names, each once */
  size_t nhosts;
  size_t filecap, splitcap;
  char **sorted; /* the files' paths, sorted: which files are known */
} feed_input;

/* Expands globs (sorted, each file once), probes every file and cuts the
 * large ones on record boundaries into splits of about split_bytes. Small
 * files are one split each; empty files none. Unless growing, a glob that
 * matches nothing or an input with no records is an error. On error
 * returns LOOM_ESPEC / LOOM_EIO / LOOM_ENOMEM with a message for people in
 * err. On success *out is the caller's, freed with loom__feed_input_free. */
int loom__feed_input_make(const char *const *globs, size_t nglobs, const feed_format *fmt,
                          bool growing, uint64_t split_bytes, feed_input **out, char *err,
                          size_t errlen);
/* Expands globs again and adds the files not seen before (in path order),
 * their splits numbered after the others; *added counts the files. A file
 * that cannot be taken (a bad header, a size that is not whole records) is
 * an error naming it, and everything before it in path order is kept. */
int loom__feed_input_grow(feed_input *in, const char *const *globs, size_t nglobs,
                          uint64_t split_bytes, size_t *added, char *err, size_t errlen);
void loom__feed_input_free(feed_input *in);

#endif
