/* loom/feed.h: the data feed. The job's spec names the input (`feed:` with
 * globs, a format, epochs, shuffle and seed, and for inference an output
 * directory); the coordinator cuts it into splits and leases each to
 * whichever task asks, so fast tasks read more and a dead task's splits go
 * to others. A task's reader leases, reads and parses splits ahead of its
 * consumer on a background thread, so I/O overlaps compute; records come
 * back as views into the reader's buffers, without copies.
 *
 *   loom_feed_t *f;
 *   loom_record r;
 *   loom_feed_open(l, &f);
 *   for (;;) {
 *     int rc = loom_feed_next(f, &r);
 *     if (rc == LOOM_FEED_END) break;          // every epoch is done
 *     if (rc == LOOM_FEED_EPOCH) continue;     // the next record starts a new epoch
 *     if (rc < 0) fail(loom_errmsg(l));
 *     use(r.data, r.size);
 *     loom_feed_write(f, result, n);           // inference: output for r's split
 *   }
 *   loom_feed_close(f);
 *
 * Exactly once: a split is finished when the reader moves past its last
 * record (the next call after it), and only then is its output committed:
 * the coordinator renames the reader's temporary file to
 * `<output>/part-<split>` (`part-<split>-e<epoch>` with several epochs), and
 * refuses the commit if the lease was taken back meanwhile. So after any
 * failure and retry, the output holds each input record's results once.
 * A reader that stops early (loom_feed_close before LOOM_FEED_END) gives its
 * unfinished splits back for other tasks to read.
 *
 * A feed is used by one thread at a time (the reader's own thread is
 * internal); close it before loom_finish(). Not usable across fork(). */
#ifndef LOOM_FEED_H
#define LOOM_FEED_H

#include <loom.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_feed loom_feed_t;

/* A record: a view of size bytes that stays valid until the next call that
 * reads the feed (next, next_batch, read, read_offsets) or closes it;
 * writing output does not invalidate it. */
typedef struct {
  const void *data;
  size_t size;
} loom_record;

/* What loom_feed_next / next_batch / read / read_offsets return besides 0
 * and errors. */
enum {
  LOOM_FEED_END = 1,  /* no more records: every split of every epoch is done */
  LOOM_FEED_EPOCH = 2 /* no record: the next one begins a new epoch (once
                       * per epoch change; see loom_feed_epoch) */
};

/* Reader counters, for logs and benchmarks. */
typedef struct {
  uint64_t records, bytes; /* returned to the caller */
  uint64_t splits;         /* finished and accepted by the coordinator */
  uint64_t stale;          /* finished, but refused: the lease had been taken
                            * back (the split is read again elsewhere) */
  uint64_t wait_ns;        /* time spent waiting for data inside the calls */
} loom_feed_stats;

/* Opens the job's feed on l. LOOM_ENOTSUP if the spec has no `feed:`. On
 * success *f is the caller's, to be released with loom_feed_close(). */
LOOM_EXPORT int loom_feed_open(loom_t *l, loom_feed_t **f);

/* The next record into *rec: 0, LOOM_FEED_EPOCH, LOOM_FEED_END, or an error
 * (LOOM_EIO for a corrupt or unreadable file, with loom_errmsg() naming the
 * file and offset; LOOM_EABORTED when the attempt ended; LOOM_ETIMEDOUT
 * when no split came for LOOM_FEED_WAIT_MS while no task held one). END and
 * errors repeat. Waiting for other tasks to finish an epoch is no timeout
 * as long as their leases are alive. */
LOOM_EXPORT int loom_feed_next(loom_feed_t *f, loom_record *rec);

/* Up to max records into recs[0..*n): 0 with *n >= 1, or what
 * loom_feed_next returns (with *n = 0). A batch never spans two splits or
 * two epochs, so it may be short at a split's end. */
LOOM_EXPORT int loom_feed_next_batch(loom_feed_t *f, loom_record *recs, size_t max, size_t *n);

/* Like next_batch, but copies the records back to back into buf (cap
 * bytes) and their sizes into sizes[0..*n), stopping before a record that
 * does not fit. If not even the first fits: LOOM_ERANGE, sizes[0] = its
 * size, and the record stays next. (For bindings that want one call per
 * batch: the Python module's numpy path.) */
LOOM_EXPORT int loom_feed_read(loom_feed_t *f, void *buf, size_t cap, size_t *sizes, size_t max,
                               size_t *n);

/* What surrounds each record in loom_feed_read_offsets' buffer. */
enum {
  LOOM_FEED_FRAME_SEP = 0x100,  /* | c: the byte c (0..255) after each record */
  LOOM_FEED_FRAME_LEN32 = 0x200 /* the record's size, 4 bytes little-endian,
                                 * before it */
};

/* Like loom_feed_read, but gives offsets instead of sizes, and can frame
 * each record (frame: 0, or LOOM_FEED_FRAME_* or'ed): offs (max + 1 of
 * them) gets where each record's frame starts in buf, offs[0..*n), and
 * offs[*n] where the data ends. With frame 0 the records are back to back,
 * record k being buf[offs[k], offs[k+1]); a framed record's bytes are that
 * less its length before (4 bytes) and its separator after (1). Framing
 * lets a binding cut a batch into its own objects in one call of its own
 * (the Python module's batch(): a length before and the byte 's' after
 * each record is the layout its marshal module reads a list of bytes
 * from). If not even the first record fits: LOOM_ERANGE, offs[0] = the
 * bytes its frame needs, and the record stays next. LOOM_ENOTSUP for a
 * record of 4 GiB or more with LOOM_FEED_FRAME_LEN32; LOOM_EINVAL for
 * unknown frame bits. (For bindings: the Python module's batch() and
 * read_view().) */
LOOM_EXPORT int loom_feed_read_offsets(loom_feed_t *f, void *buf, size_t cap, size_t *offs,
                                       size_t max, unsigned frame, size_t *n);

/* The epoch of the last record returned (from 0); before any, the epoch
 * the feed is at. */
LOOM_EXPORT int loom_feed_epoch(const loom_feed_t *f);
/* The split of the last record returned, or -1. */
LOOM_EXPORT long loom_feed_split(const loom_feed_t *f);
/* The number of epochs and of splits in each (for a growing input,
 * feed.follow: the splits known when the feed opened, maybe 0). */
LOOM_EXPORT int loom_feed_epochs(const loom_feed_t *f);
LOOM_EXPORT long loom_feed_splits(const loom_feed_t *f);

/* Appends len bytes to the output of the split of the last record
 * returned (buffered; written to a temporary file, committed when the
 * split is finished). Bytes are written as given: add your own record
 * separators. LOOM_ESTATE if the spec has no feed.output or no record was
 * read yet; LOOM_EIO if the file cannot be written (the split is then
 * given back when finished, not committed). */
LOOM_EXPORT int loom_feed_write(loom_feed_t *f, const void *data, size_t len);

LOOM_EXPORT void loom_feed_get_stats(const loom_feed_t *f, loom_feed_stats *st);

/* Stops the reader, gives back every split not finished, deletes their
 * unfinished output and frees f. Returns the first error the feed met, or
 * 0. */
LOOM_EXPORT int loom_feed_close(loom_feed_t *f);

#ifdef __cplusplus
}
#endif
#endif
