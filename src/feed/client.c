/* client.c: a task's side of the data feed (include/loom/feed.h).
 *
 * Two threads per feed. The reader thread (reader.c) leases splits from the
 * coordinator's dispatcher (several at once when they are small), renews
 * its leases, reads each split's bytes with pread into chunks (recycled,
 * so their pages stay mapped), parses the records of each chunk (checking
 * TFRecord CRCs there, off the consumer's thread) and queues the chunks,
 * staying at most LOOM_FEED_READAHEAD bytes ahead of the consumer. The
 * consumer (the caller of loom_feed_next) walks the queued chunks and hands
 * out views; when it moves past a split's last record it finishes the
 * split: closes its output file and reports DONE, which is where the
 * coordinator commits.
 *
 * With shuffle, a split is read whole into one chunk and its records are
 * handed out in a permutation drawn from the split's seed (from the spec's
 * seed, the epoch and the split), so the order does not depend on which
 * task reads it; the dispatcher permutes the order of splits.
 *
 * Ownership: the queue, the pool, the held list and the stale flags are
 * under mu; the consumer's position (cur, retired, cur_sp, writer) is the
 * consumer's alone; a split (fsplit) is created by the reader thread and
 * freed by the consumer once finished, or by close. */
#include "feed/client_int.h"
#include "fs/tmpdir.h"
#include "wire/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- time and waiting --------------------------------------------------- */
void loom__feed_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t ms) {
  struct timespec ts = loom__deadline(CLOCK_REALTIME, ms);
  pthread_cond_timedwait(cv, mu, &ts);
}

/* ---- chunks ------------------------------------------------------------- */
static void chunk_free(chunk *c) {
  if (!c) return;
  free(c->buf);
  loom__feed_recs_free(&c->recs);
  free(c->order);
  free(c->msg);
  free(c);
}

/* A chunk from the pool (with at least cap bytes when cap > 0) or a new
 * one. Called without mu. */
chunk *loom__feed_chunk_get(loom_feed_t *f, int kind, size_t cap) {
  chunk *c = NULL;
  if (kind == K_DATA) {
    pthread_mutex_lock(&f->mu);
    for (chunk **pp = &f->pool; *pp; pp = &(*pp)->next) {
      if ((*pp)->cap >= cap) {
        c = *pp;
        *pp = c->next;
        f->npool--;
        break;
      }
    }
    pthread_mutex_unlock(&f->mu);
  }
  if (!c && !(c = calloc(1, sizeof *c))) return NULL;
  if (cap > c->cap) {
    free(c->buf);
    if (!(c->buf = malloc(cap))) {
      c->cap = 0;
      chunk_free(c);
      return NULL;
    }
    c->cap = cap;
  }
  c->kind = kind;
  c->sp = NULL;
  c->len = c->pos = 0;
  c->recs.n = 0;
  c->recs.stride = 0;
  c->err = 0;
  c->next = NULL;
  return c;
}

/* Gives a chunk back to the pool (the consumer is done with its records).
 * Called with mu held. */
void loom__feed_chunk_put_locked(loom_feed_t *f, chunk *c) {
  if (c->kind == K_DATA) {
    f->queued -= c->len;
    pthread_cond_signal(&f->cv_room);
  }
  free(c->msg);
  c->msg = NULL;
  if (c->kind == K_DATA && f->npool < POOL_MAX) {
    c->next = f->pool;
    f->pool = c;
    f->npool++;
  } else {
    c->msg = NULL;
    chunk_free(c);
  }
}

static void push_locked(loom_feed_t *f, chunk *c) {
  c->next = NULL;
  if (f->qtail)
    f->qtail->next = c;
  else
    f->qhead = c;
  f->qtail = c;
  if (c->kind == K_DATA) f->queued += c->len;
  pthread_cond_signal(&f->cv_data);
}

void loom__feed_push(loom_feed_t *f, chunk *c) {
  pthread_mutex_lock(&f->mu);
  push_locked(f, c);
  pthread_mutex_unlock(&f->mu);
}

/* Queues an error for the consumer and stops reading. */
void loom__feed_push_error(loom_feed_t *f, int err, const char *fmt, ...) {
  chunk *c = calloc(1, sizeof *c);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  f->ended = true;
  if (!c) return; /* the consumer times out instead */
  c->kind = K_ERROR;
  c->err = err;
  c->msg = strdup(msg);
  loom__feed_push(f, c);
}

void loom__feed_split_free(fsplit *sp) {
  if (!sp) return;
  free(sp->path);
  free(sp->tmp);
  free(sp);
}

/* Removes sp from the held list (under mu). */
void loom__feed_held_remove_locked(loom_feed_t *f, fsplit *sp) {
  for (fsplit **pp = &f->held; *pp; pp = &(*pp)->next) {
    if (*pp == sp) {
      *pp = sp->next;
      f->nheld--;
      return;
    }
  }
}

/* ---- the consumer ------------------------------------------------------- */
static void release_retired(loom_feed_t *f) {
  if (!f->retired) return;
  pthread_mutex_lock(&f->mu);
  while (f->retired) {
    chunk *c = f->retired;
    f->retired = c->next;
    loom__feed_chunk_put_locked(f, c);
  }
  pthread_mutex_unlock(&f->mu);
}

/* Waits for the queue's head; 0 and *out (still queued), or an error. The
 * wait is as long as the reader thread needs (it has its own timeouts), as
 * long as that thread is seen going round its loop. */
static int wait_head(loom_feed_t *f, chunk **out) {
  uint64_t t0 = loom__now_ns(), limit = f->lease_ms + 3 * CALL_MARGIN_MS;
  int rc = 0;
  pthread_mutex_lock(&f->mu);
  while (!f->qhead) {
    if ((rc = loom__aborted(f->l)) < 0) break;
    if (loom__now_ms() - __atomic_load_n(&f->beat, __ATOMIC_RELAXED) > limit) {
      rc = LOOM_ETIMEDOUT;
      break;
    }
    loom__feed_wait_ms(&f->cv_data, &f->mu, 1000);
  }
  *out = f->qhead;
  pthread_mutex_unlock(&f->mu);
  uint64_t waited = loom__now_ns() - t0;
  f->st.wait_ns += waited;
  loom__phase_add(f->l, LOOM__PHASE_DATA, waited);
  if (rc == LOOM_ETIMEDOUT)
    return loom__fail(f->l, rc, "the feed's reader thread is stuck: no sign of it for %llu ms",
                      (unsigned long long)limit);
  return rc;
}

static chunk *pop_head(loom_feed_t *f) {
  pthread_mutex_lock(&f->mu);
  chunk *c = f->qhead;
  if (c) {
    f->qhead = c->next;
    if (!f->qhead) f->qtail = NULL;
  }
  pthread_mutex_unlock(&f->mu);
  return c;
}

static int set_sticky(loom_feed_t *f, int rc, const char *msg) {
  f->sticky = rc;
  loom__strlcpy(f->sticky_msg, msg ? msg : loom_strerror(rc), sizeof f->sticky_msg);
  if (rc < 0 && !f->first_err) f->first_err = rc;
  return rc < 0 ? loom__fail(f->l, rc, "%s", f->sticky_msg) : rc;
}

/* Writes out the output buffer. */
static int writer_flush(loom_feed_t *f) {
  size_t done = 0;
  while (done < f->wlen) {
    ssize_t w = write(f->w_fd, f->wbuf + done, f->wlen - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      f->w_err = true;
      f->wlen = 0;
      return loom__fail(f->l, LOOM_EIO, "cannot write the feed's output %s: %s",
                        f->w_sp ? f->w_sp->tmp : "?", strerror(errno));
    }
    done += (size_t)w;
  }
  f->wlen = 0;
  return 0;
}

/* Closes the output of the split being written; with sync, makes it
 * durable first. */
static int writer_close(loom_feed_t *f, bool sync) {
  int rc = 0;
  if (f->w_fd >= 0) {
    if (sync && !f->w_err) rc = writer_flush(f);
    /* an hdfs:// output's local copy goes up whole below: no sync here */
    if (rc == 0 && sync && !f->w_err && !f->w_local && fdatasync(f->w_fd) < 0) {
      f->w_err = true;
      rc = loom__fail(f->l, LOOM_EIO, "cannot sync the feed's output %s: %s", f->w_sp->tmp,
                      strerror(errno));
    }
    close(f->w_fd);
  }
  if (f->w_err && rc == 0)
    rc = loom__fail(f->l, LOOM_EIO, "the feed's output %s could not be written", f->w_sp->tmp);
  if (f->w_local) {
    /* an hdfs:// output: the split's whole output goes up now, to the
     * temporary name the dispatcher renames at commit */
    char why[1024];
    int prc = rc == 0 && sync && !f->w_err
                  ? loom__fs_put(f->w_local, f->w_sp->tmp, true, why, sizeof why)
                  : 0;
    if (prc < 0) rc = loom__fail(f->l, LOOM_EIO, "the feed's output: %s", why);
    unlink(f->w_local);
    free(f->w_local);
    f->w_local = NULL;
  }
  f->w_fd = -1;
  f->wlen = 0;
  f->w_sp = NULL;
  f->w_err = false;
  return rc;
}

/* Gives leases back to the dispatcher (unfinished work). */
static void release_leases(loom_feed_t *f, json_t *ids) {
  if (!json_array_size(ids) || loom__aborted(f->l)) {
    json_decref(ids);
    return;
  }
  wire_msg req = {.type = WIRE_FEED_RELEASE, .u.feed_release.leases = ids};
  loom__call(f->l, &req, CALL_MARGIN_MS, NULL, NULL, NULL);
  json_decref(ids);
}

static void forget_split(loom_feed_t *f, fsplit *sp) {
  pthread_mutex_lock(&f->mu);
  loom__feed_held_remove_locked(f, sp);
  pthread_cond_signal(&f->cv_room);
  pthread_mutex_unlock(&f->mu);
  if (f->cur_sp == sp) f->cur_sp = NULL;
  loom__feed_split_free(sp);
}

/* Removes a split's temporary output (local or on HDFS). */
static void tmp_remove(const char *tmp) {
  char why[512];
  if (loom__fs_remote(tmp))
    loom__fs_remove(tmp, false, why, sizeof why);
  else
    unlink(tmp);
}

/* The consumer moved past sp's last record: commit its output and report
 * it done. Frees sp. */
static int finish_split(loom_feed_t *f, fsplit *sp) {
  bool wrote = f->w_sp == sp;
  int rc = wrote ? writer_close(f, true) : 0;
  if (rc < 0) {
    char msg[1024];
    loom__strlcpy(msg, loom_errmsg(f->l), sizeof msg);
    if (sp->tmp) tmp_remove(sp->tmp);
    release_leases(f, json_pack("[I]", (json_int_t)sp->lease));
    forget_split(f, sp);
    return loom__fail(f->l, rc, "%s (split given back uncommitted)", msg);
  }
  json_t *rep = NULL;
  wire_msg req = {.type = WIRE_FEED_DONE,
                  .u.feed_done = {.lease = (int64_t)sp->lease,
                                  .records = (int64_t)sp->records,
                                  .wrote = wrote}};
  rc = loom__call(f->l, &req, CALL_MARGIN_MS * 3, &rep, NULL, NULL);
  if (rc == LOOM_ESTATE) {
    f->st.stale++;
    if (sp->tmp) tmp_remove(sp->tmp);
    loom__log(LOOM_LOG_WARN, "feed",
              "split %u was taken back before this task finished it "
              "(lease %llu): its output is discarded; another task reads it",
              sp->split, (unsigned long long)sp->lease);
    rc = 0;
  } else if (rc == 0) {
    f->st.splits++;
  } else {
    const char *m = json_string_value(json_object_get(rep, "msg"));
    char msg[1024];
    snprintf(msg, sizeof msg, "cannot finish split %u: %s", sp->split, m ? m : loom_errmsg(f->l));
    rc = rc == LOOM_EABORTED || rc == LOOM_ECONN ? set_sticky(f, rc, msg)
                                                 : loom__fail(f->l, rc, "%s", msg);
  }
  json_decref(rep);
  forget_split(f, sp);
  return rc;
}

/* Makes f->cur a chunk with a record left. Returns 0, LOOM_FEED_EPOCH (the
 * record begins a new epoch), LOOM_FEED_END, an error, or, with
 * stop_at_split, BOUNDARY when the current split has no records left. */
static int ensure(loom_feed_t *f, bool stop_at_split) {
  for (;;) {
    chunk *c = f->cur;
    if (c && c->pos < c->recs.n) return 0;
    if (c) {
      c->sp->records += c->pos; /* counted a chunk at a time */
      c->next = f->retired;
      f->retired = c;
      f->cur = NULL;
    }
    if (f->sticky)
      return f->sticky < 0 ? loom__fail(f->l, f->sticky, "%s", f->sticky_msg) : f->sticky;
    chunk *h;
    int rc = wait_head(f, &h);
    if (rc < 0) return set_sticky(f, rc, loom_errmsg(f->l));
    if (stop_at_split && f->cur_sp && !(h->kind == K_DATA && h->sp == f->cur_sp)) return BOUNDARY;
    pop_head(f);
    switch (h->kind) {
    case K_DATA:
      if (h->sp == f->skip_sp) {
        loom__feed_recycle(f, h);
        continue;
      }
      if (h->sp != f->cur_sp) { /* a new split */
        pthread_mutex_lock(&f->mu);
        bool stale = h->sp->stale;
        pthread_mutex_unlock(&f->mu);
        if (stale) { /* taken back before we began it: skip it whole */
          f->skip_sp = h->sp;
          loom__feed_recycle(f, h);
          continue;
        }
        f->cur_sp = h->sp;
        if (f->epoch_known && h->sp->epoch != f->epoch) {
          f->epoch = h->sp->epoch;
          f->cur = h;
          return LOOM_FEED_EPOCH;
        }
        f->epoch = h->sp->epoch;
        f->epoch_known = true;
      }
      f->cur = h;
      continue;
    case K_SPLIT_END: {
      fsplit *sp = h->sp;
      loom__feed_recycle(f, h);
      if (sp == f->skip_sp) {
        f->skip_sp = NULL;
        forget_split(f, sp);
        continue;
      }
      if ((rc = finish_split(f, sp)) < 0) return rc;
      continue;
    }
    case K_END:
      free(h);
      return set_sticky(f, LOOM_FEED_END, "the feed is over");
    default:
      rc = set_sticky(f, h->err ? h->err : LOOM_EIO, h->msg);
      chunk_free(h);
      return rc;
    }
  }
}

static inline void take(loom_feed_t *f, loom_record *rec) {
  chunk *c = f->cur;
  size_t i = c->order ? c->order[c->pos] : c->pos;
  c->pos++;
  feed_rec r = loom__feed_rec_at(&c->recs, i);
  rec->data = c->buf + r.off;
  rec->size = r.len;
  f->st.records++;
  f->st.bytes += rec->size;
}

int loom_feed_next(loom_feed_t *f, loom_record *rec) {
  if (!f || !rec) return LOOM_EINVAL;
  release_retired(f);
  chunk *c = f->cur;
  if (c && c->pos < c->recs.n) { /* the common case */
    take(f, rec);
    return 0;
  }
  int rc = ensure(f, false);
  if (rc != 0) return rc;
  take(f, rec);
  return 0;
}

int loom_feed_next_batch(loom_feed_t *f, loom_record *recs, size_t max, size_t *n) {
  if (!f || !recs || !n || !max) return LOOM_EINVAL;
  *n = 0;
  release_retired(f);
  int rc = ensure(f, false);
  if (rc != 0) return rc;
  size_t k = 0;
  while (k < max) {
    if (k > 0 && ensure(f, true) != 0) break; /* split boundary, or an error for later */
    chunk *c = f->cur;
    while (k < max && c->pos < c->recs.n) take(f, &recs[k++]);
  }
  *n = k;
  return 0;
}

/* Copies up to max records back to back into dst (cap bytes), each framed
 * as frame says (a LOOM_FEED_FRAME_* set; 0 for none), stopping before one
 * that does not fit. Gives record k's size in sizes[k] (when sizes) and
 * where its frame starts in offs[k] (when offs; offs[*n] is where the data
 * ends). If not even the first fits: LOOM_ERANGE, with the bytes its frame
 * needs in need, and the record stays next. */
static int read_batch(loom_feed_t *f, unsigned char *dst, size_t cap, size_t *sizes, size_t *offs,
                      size_t max, unsigned frame, size_t *n, size_t *need) {
  *n = 0;
  release_retired(f);
  int rc = ensure(f, false);
  if (rc != 0) return rc;
  size_t pre = frame & LOOM_FEED_FRAME_LEN32 ? 4 : 0, post = frame & LOOM_FEED_FRAME_SEP ? 1 : 0;
  size_t k = 0, used = 0;
  while (k < max) {
    if (k > 0 && ensure(f, true) != 0) break; /* split boundary, or an error for later */
    chunk *c = f->cur;
    while (k < max && c->pos < c->recs.n) {
      size_t i = c->order ? c->order[c->pos] : c->pos;
      size_t len = loom__feed_rec_at(&c->recs, i).len;
      if (pre && len > UINT32_MAX) {
        if (k > 0) goto out; /* the error for the next call, the record stays next */
        return loom__fail(f->l, LOOM_ENOTSUP, "a %zu-byte record has no 4-byte length", len);
      }
      if (len > cap - used || pre + post > cap - used - len) {
        if (k == 0) {
          *need = pre + len + post;
          return loom__fail(f->l, LOOM_ERANGE, "a %zu-byte record does not fit in %zu bytes", len,
                            cap);
        }
        goto out;
      }
      loom_record r;
      take(f, &r);
      if (offs) offs[k] = used;
      if (sizes) sizes[k] = len;
      for (size_t b = 0; b < pre; b++) dst[used++] = (unsigned char)(len >> (8 * b));
      memcpy(dst + used, r.data, len);
      used += len;
      if (post) dst[used++] = (unsigned char)frame;
      k++;
    }
  }
out:
  if (offs) offs[k] = used;
  *n = k;
  return 0;
}

int loom_feed_read(loom_feed_t *f, void *buf, size_t cap, size_t *sizes, size_t max, size_t *n) {
  if (!f || (!buf && cap) || !sizes || !n || !max) return LOOM_EINVAL;
  return read_batch(f, buf, cap, sizes, NULL, max, 0, n, &sizes[0]);
}

int loom_feed_read_offsets(loom_feed_t *f, void *buf, size_t cap, size_t *offs, size_t max,
                           unsigned frame, size_t *n) {
  unsigned known = LOOM_FEED_FRAME_SEP | LOOM_FEED_FRAME_LEN32 | 0xff;
  if (!f || (!buf && cap) || !offs || !n || !max || (frame & ~known) ||
      (!(frame & LOOM_FEED_FRAME_SEP) && (frame & 0xff)))
    return LOOM_EINVAL;
  return read_batch(f, buf, cap, NULL, offs, max, frame, n, &offs[0]);
}

int loom_feed_write(loom_feed_t *f, const void *data, size_t len) {
  if (!f || (!data && len)) return LOOM_EINVAL;
  if (!f->output)
    return loom__fail(f->l, LOOM_ESTATE,
                      "the job's feed has no output directory "
                      "(feed.output in the spec)");
  fsplit *sp = f->cur_sp;
  if (!sp || !sp->tmp)
    return loom__fail(f->l, LOOM_ESTATE, "no record to write output for: read one first");
  if (f->w_sp != sp) {
    if (f->w_sp) writer_close(f, false);
    if (!f->wbuf && !(f->wbuf = malloc(WBUF))) return LOOM_ENOMEM;
    if (loom__fs_remote(sp->tmp)) {
      /* written here first, uploaded whole when the split is done: in
       * this handle's own locked directory (fs/tmpdir.h), made once */
      char why[1024];
      if (!f->w_dir) {
        char dir[PATH_MAX];
        if (loom__tmpdir_make("feed-out", dir, sizeof dir, &f->w_lock, why, sizeof why) < 0)
          return loom__fail(f->l, LOOM_EIO, "cannot create the feed's output %s: %s", sp->tmp, why);
        if (!(f->w_dir = strdup(dir))) {
          loom__tmpdir_remove(dir, f->w_lock);
          f->w_lock = -1;
          return LOOM_ENOMEM;
        }
      }
      f->w_local = loom__asprintf("%s/out", f->w_dir);
      f->w_fd = f->w_local ? open(f->w_local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
      if (f->w_fd < 0 && f->w_local) {
        free(f->w_local);
        f->w_local = NULL;
      }
    } else {
      f->w_fd = open(sp->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    f->w_sp = sp;
    f->w_err = f->w_fd < 0;
    if (f->w_fd < 0)
      return loom__fail(f->l, LOOM_EIO, "cannot create the feed's output %s: %s", sp->tmp,
                        strerror(errno));
  }
  if (f->w_err)
    return loom__fail(f->l, LOOM_EIO, "the feed's output %s could not be written", sp->tmp);
  const unsigned char *p = data;
  while (len) {
    size_t k = WBUF - f->wlen < len ? WBUF - f->wlen : len;
    memcpy(f->wbuf + f->wlen, p, k);
    f->wlen += k;
    p += k;
    len -= k;
    if (f->wlen == WBUF) {
      int rc = writer_flush(f);
      if (rc < 0) return rc;
    }
  }
  return 0;
}

int loom_feed_epoch(const loom_feed_t *f) { return f ? f->epoch : 0; }
long loom_feed_split(const loom_feed_t *f) { return f && f->cur_sp ? (long)f->cur_sp->split : -1; }
int loom_feed_epochs(const loom_feed_t *f) { return f ? f->epochs : 0; }
long loom_feed_splits(const loom_feed_t *f) { return f ? f->nsplits : 0; }

void loom_feed_get_stats(const loom_feed_t *f, loom_feed_stats *st) {
  if (!st) return;
  if (!f) {
    memset(st, 0, sizeof *st);
    return;
  }
  *st = f->st;
}

/* ---- open and close ----------------------------------------------------- */
static void feed_free(loom_feed_t *f) {
  for (chunk *c = f->qhead, *n; c; c = n) {
    n = c->next;
    chunk_free(c);
  }
  for (chunk *c = f->retired, *n; c; c = n) {
    n = c->next;
    chunk_free(c);
  }
  for (chunk *c = f->pool, *n; c; c = n) {
    n = c->next;
    chunk_free(c);
  }
  chunk_free(f->cur);
  for (fsplit *sp = f->held, *n; sp; sp = n) {
    n = sp->next;
    loom__feed_split_free(sp);
  }
  free(f->rpath);
  free(f->wbuf);
  loom__tmpdir_remove(f->w_dir ? f->w_dir : "", f->w_lock);
  free(f->w_dir);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv_data);
  pthread_cond_destroy(&f->cv_room);
  free(f);
}

int loom_feed_open(loom_t *l, loom_feed_t **out) {
  if (!l || !out) return LOOM_EINVAL;
  *out = NULL;
  json_t *rep = NULL;
  wire_msg req = {.type = WIRE_FEED_OPEN};
  int rc = loom__call(l, &req, (int)loom__tun(LOOM_TUN_CONNECT_TIMEOUT_MS) * 3, &rep, NULL, NULL);
  if (rc < 0) {
    const char *m = json_string_value(json_object_get(rep, "msg"));
    rc = loom__fail(l, rc, "cannot open the feed: %s", m ? m : loom_errmsg(l));
    json_decref(rep);
    return rc;
  }
  loom_feed_t *f = calloc(1, sizeof *f);
  if (!f) {
    json_decref(rep);
    return LOOM_ENOMEM;
  }
  f->l = l;
  f->w_fd = -1;
  f->w_lock = -1;
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv_data, NULL);
  pthread_cond_init(&f->cv_room, NULL);
  /* a growing input (feed.follow) may have no split yet, and gets more */
  wire_feed_opened o;
  char why[256];
  rc = wire_feed_opened_decode(rep, &o, why, sizeof why);
  if (rc == 0 && loom__feed_format_parse(o.format, &f->fmt) < 0) {
    snprintf(why, sizeof why, "FEED_OPEN reply: an unknown format '%s'", o.format);
    rc = LOOM_EPROTO;
  }
  if (rc < 0) {
    json_decref(rep);
    feed_free(f);
    return loom__fail(l, LOOM_EPROTO,
                      "cannot open the feed: a malformed answer from the "
                      "coordinator (%s)",
                      why);
  }
  f->growing = o.growing;
  f->epochs = (int)o.epochs;
  f->epoch = (int)o.epoch;
  f->nsplits = (long)o.splits;
  f->output = o.output;
  f->lease_ms = (uint64_t)o.lease_ms;
  json_decref(rep);
  f->readahead = (uint64_t)loom__tun(LOOM_TUN_FEED_READAHEAD);
  f->chunk_bytes = (uint64_t)loom__tun(LOOM_TUN_FEED_CHUNK);
  f->max_record = (uint64_t)loom__tun(LOOM_TUN_FEED_MAX_RECORD);
  f->wait_ms = (uint64_t)loom__tun(LOOM_TUN_FEED_WAIT_MS);
  f->ahead = (uint64_t)loom__tun(LOOM_TUN_FEED_AHEAD_SPLITS);
  if (f->max_record > UINT32_MAX - 64) f->max_record = UINT32_MAX - 64;
  if (f->chunk_bytes > f->max_record) f->chunk_bytes = f->max_record;
  f->last_renew = f->beat = loom__now_ms();
  if (pthread_create(&f->thread, NULL, loom__feed_reader_main, f) != 0) {
    feed_free(f);
    return loom__fail(l, LOOM_EIO, "cannot start the feed's reader thread");
  }
  f->thread_started = true;
  *out = f;
  return 0;
}

int loom_feed_close(loom_feed_t *f) {
  if (!f) return LOOM_EINVAL;
  pthread_mutex_lock(&f->mu);
  f->stop = true;
  pthread_cond_broadcast(&f->cv_room);
  pthread_cond_broadcast(&f->cv_data);
  pthread_mutex_unlock(&f->mu);
  if (f->thread_started) pthread_join(f->thread, NULL);
  if (f->w_fd >= 0) {
    close(f->w_fd);
    f->w_fd = -1;
    if (f->w_local) {
      unlink(f->w_local);
      free(f->w_local);
      f->w_local = NULL;
    } else if (f->w_sp && f->w_sp->tmp) {
      unlink(f->w_sp->tmp);
    }
  }
  /* every split not finished goes back, in batches the wire allows */
  while (f->held) {
    json_t *ids = loom__feed_held_ids_locked(f);
    for (int k = 0; k < FEED_MAX_LIST && f->held; k++) {
      fsplit *sp = f->held;
      f->held = sp->next;
      loom__feed_split_free(sp);
    }
    release_leases(f, ids);
  }
  int rc = f->first_err;
  feed_free(f);
  return rc;
}
