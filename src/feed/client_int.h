/* client_int.h: what the two halves of a task's feed client share: the
 * feed (struct loom_feed), its splits and chunks, and the functions one
 * half calls in the other. client.c is the consumer's side (the API of
 * include/loom/feed.h, the chunks, open and close), reader.c the reader
 * thread. Not installed; only src/feed/client.c and reader.c include it. */
#ifndef LOOM_FEED_CLIENT_INT_H
#define LOOM_FEED_CLIENT_INT_H

#include "feed/feed.h"
#include "lib/lib.h"
#include "loom/feed.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define POOL_MAX 64
#define WBUF (1 << 20)
#define LEASE_WAIT_MS 1000 /* longest one LEASE request is held */
#define CALL_MARGIN_MS 10000

enum { K_DATA, K_SPLIT_END, K_END, K_ERROR };
enum { BOUNDARY = 100 }; /* internal: the current split has no more records */

typedef struct fsplit {
  uint64_t lease, rseed;
  uint32_t split;
  int epoch;
  bool shuffle, stale;
  char *path, *tmp;
  uint64_t off, len, rec;
  uint64_t records;         /* handed out by the consumer */
  struct fsplit *next;      /* the held list */
  struct fsplit *next_read; /* the reader thread's list to read */
} fsplit;

typedef struct chunk {
  int kind;
  fsplit *sp;
  unsigned char *buf;
  size_t cap, len;
  feed_recs recs;
  uint32_t *order; /* shuffled order of recs, or NULL */
  size_t order_cap, pos;
  int err;
  char *msg;
  struct chunk *next;
} chunk;

struct loom_feed {
  loom_t *l;
  feed_format fmt;
  int epochs;
  long nsplits; /* at open; a growing input's grow */
  bool output, growing;
  uint64_t lease_ms, readahead, chunk_bytes, max_record, wait_ms, ahead;

  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv_data, cv_room; /* queue not empty; room to read ahead */
  chunk *qhead, *qtail;
  size_t queued; /* bytes in chunks not yet recycled */
  chunk *pool;
  int npool;
  fsplit *held; /* leased and not finished */
  size_t nheld;
  bool stop;
  uint64_t beat; /* when the reader thread last went round its loop */

  /* reader thread only */
  fsplit *toread, *toread_tail;
  bool ended;
  loom__rfile *rf; /* the input file being read */
  char *rpath;
  uint64_t last_renew, last_split_len;

  /* consumer only */
  chunk *cur, *retired;
  fsplit *cur_sp, *skip_sp;
  int epoch;
  bool epoch_known;
  int sticky; /* END or an error, repeated */
  char sticky_msg[1024];
  int first_err;
  /* the output of cur_sp's split */
  fsplit *w_sp;
  int w_fd;
  char *w_local; /* the local file an hdfs:// output is written to first */
  char *w_dir;   /* where w_local is made: loom__tmpdir_make's, locked by w_lock */
  int w_lock;
  bool w_err;
  unsigned char *wbuf;
  size_t wlen;
  loom_feed_stats st;
};

/* client.c: waiting, chunks and splits (the queue, the pool, the held list
 * are under f->mu) */
void loom__feed_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t ms);
chunk *loom__feed_chunk_get(loom_feed_t *f, int kind, size_t cap);
void loom__feed_chunk_put_locked(loom_feed_t *f, chunk *c);
void loom__feed_push(loom_feed_t *f, chunk *c);
void loom__feed_push_error(loom_feed_t *f, int err, const char *fmt, ...) LOOM__PRINTF(3, 4);
void loom__feed_split_free(fsplit *sp);
void loom__feed_held_remove_locked(loom_feed_t *f, fsplit *sp);

/* reader.c: the reader thread */
json_t *loom__feed_held_ids_locked(loom_feed_t *f);
bool loom__feed_stopping(loom_feed_t *f);
void loom__feed_recycle(loom_feed_t *f, chunk *c);
void *loom__feed_reader_main(void *arg);

#endif
