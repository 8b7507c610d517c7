/* reader.c: the reader thread of a task's feed client (see client.c's
 * opening comment): it leases splits from the coordinator's dispatcher,
 * renews the leases, reads each split's bytes into chunks, parses their
 * records and queues them for the consumer, staying at most
 * LOOM_FEED_READAHEAD bytes ahead. See client_int.h. */
#include "feed/client_int.h"
#include "wire/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the reader thread -------------------------------------------------- */
json_t *loom__feed_held_ids_locked(loom_feed_t *f) {
  json_t *a = json_array();
  int n = 0;
  for (fsplit *sp = f->held; sp && n < FEED_MAX_LIST; sp = sp->next, n++)
    json_array_append_new(a, json_integer((json_int_t)sp->lease));
  return a;
}

/* Renews every held lease when a third of the lease time has passed. */
static void maybe_renew(loom_feed_t *f) {
  uint64_t now = loom__now_ms();
  if (now - f->last_renew < f->lease_ms / 3) return;
  f->last_renew = now;
  pthread_mutex_lock(&f->mu);
  json_t *ids = f->held ? loom__feed_held_ids_locked(f) : NULL;
  pthread_mutex_unlock(&f->mu);
  if (!ids) return;
  json_t *rep = NULL;
  wire_msg req = {.type = WIRE_FEED_RENEW, .u.feed_renew.leases = ids};
  int rc = loom__call(f->l, &req, (int)(f->lease_ms / 3 + CALL_MARGIN_MS), &rep, NULL, NULL);
  json_decref(ids);
  wire_feed_renewed ans = {0};
  char why[256];
  if (rc == 0 && wire_feed_renewed_decode(rep, &ans, why, sizeof why) < 0)
    loom__log(LOOM_LOG_WARN, "feed", "a malformed answer from the coordinator: %s", why);
  json_t *stale = ans.stale;
  if (json_array_size(stale)) {
    pthread_mutex_lock(&f->mu);
    size_t i;
    json_t *v;
    json_array_foreach(stale, i, v) {
      for (fsplit *sp = f->held; sp; sp = sp->next)
        if ((json_int_t)sp->lease == json_integer_value(v)) sp->stale = true;
    }
    pthread_mutex_unlock(&f->mu);
    loom__log(LOOM_LOG_WARN, "feed",
              "%zu of this task's leases were taken back (a pause "
              "longer than the lease time?)",
              json_array_size(stale));
  }
  json_decref(rep);
}

/* Waits until the queue has room to read ahead (and, with for_lease, until
 * this reader holds fewer than ahead + 1 splits); false when stopping. */
static bool wait_room_for(loom_feed_t *f, bool for_lease) {
  for (;;) {
    pthread_mutex_lock(&f->mu);
    bool stop = f->stop, room = f->queued < f->readahead && (!for_lease || f->nheld < f->ahead + 1);
    if (!stop && !room) loom__feed_wait_ms(&f->cv_room, &f->mu, f->lease_ms / 6 + 1);
    stop = f->stop;
    room = f->queued < f->readahead && (!for_lease || f->nheld < f->ahead + 1);
    pthread_mutex_unlock(&f->mu);
    if (stop) return false;
    __atomic_store_n(&f->beat, loom__now_ms(), __ATOMIC_RELAXED);
    maybe_renew(f);
    if (room) return true;
  }
}

static bool wait_room(loom_feed_t *f) { return wait_room_for(f, false); }

bool loom__feed_stopping(loom_feed_t *f) {
  pthread_mutex_lock(&f->mu);
  bool s = f->stop;
  pthread_mutex_unlock(&f->mu);
  return s;
}

/* The input file path, open (the one open already when it is that one).
 * NULL with err set on failure. */
static loom__rfile *open_file(loom_feed_t *f, const char *path, char *err, size_t errlen) {
  if (f->rf && f->rpath && !strcmp(f->rpath, path)) return f->rf;
  loom__rfile_close(f->rf);
  f->rf = NULL;
  free(f->rpath);
  f->rpath = NULL;
  if (loom__rfile_open(path, &f->rf, err, errlen) == 0 && !(f->rpath = strdup(path))) {
    loom__rfile_close(f->rf);
    f->rf = NULL;
    snprintf(err, errlen, "out of memory");
  }
  return f->rf;
}

/* Asks for more splits; returns false when stopping or over. */
static bool lease_more(loom_feed_t *f, uint64_t *idle_since) {
  size_t room, nheld;
  pthread_mutex_lock(&f->mu);
  room = f->queued < f->readahead ? f->readahead - f->queued : 0;
  nheld = f->nheld;
  pthread_mutex_unlock(&f->mu);
  /* as many as fit in the read-ahead, up to the one being consumed and
   * `ahead` more: holding more would starve other tasks at an epoch's end */
  uint64_t per = f->last_split_len ? f->last_split_len : f->chunk_bytes;
  json_int_t max = (json_int_t)(room / (per ? per : 1));
  json_int_t slots = (json_int_t)(f->ahead + 1) - (json_int_t)nheld;
  if (max > slots) max = slots;
  if (max > FEED_MAX_BATCH_LEASES) max = FEED_MAX_BATCH_LEASES;
  if (max < 1) max = 1;
  int wait = (int)(f->lease_ms / 3 < LEASE_WAIT_MS ? f->lease_ms / 3 : LEASE_WAIT_MS);
  json_t *rep = NULL;
  wire_msg req = {.type = WIRE_FEED_LEASE,
                  .u.feed_lease = {.has_max = true, .max = (int64_t)max, .wait_ms = wait}};
  int rc = loom__call(f->l, &req, wait + CALL_MARGIN_MS, &rep, NULL, NULL);
  wire_feed_leased ans = {0};
  char why[256] = "";
  /* no reply at all (rc LOOM_ETIMEDOUT from the call itself) has no answer */
  if ((rc == 0 || (rc == LOOM_ETIMEDOUT && rep)) &&
      wire_feed_leased_decode(rep, rc, &ans, why, sizeof why) < 0) {
    loom__feed_push_error(f, LOOM_EPROTO, "a malformed lease from the feed's coordinator: %s", why);
    json_decref(rep);
    return false;
  }
  if (rc == LOOM_ETIMEDOUT) {
    /* other tasks' leases are alive (renewed): they are making progress */
    if (ans.has_leased && ans.leased > 0) *idle_since = loom__now_ms();
    if (loom__now_ms() - *idle_since > f->wait_ms) {
      const char *m = json_string_value(json_object_get(rep, "msg"));
      loom__feed_push_error(f, LOOM_ETIMEDOUT,
                            "no split of the feed became free within %llu ms "
                            "(LOOM_FEED_WAIT_MS), and no task holds one: %s",
                            (unsigned long long)f->wait_ms,
                            m ? m : "the coordinator is not answering");
      json_decref(rep);
      return false;
    }
    json_decref(rep);
    return true;
  }
  if (rc < 0) {
    const char *m = json_string_value(json_object_get(rep, "msg"));
    loom__feed_push_error(f, rc, "the feed's coordinator refused a lease: %s",
                          m                                         ? m
                          : rc == LOOM_EABORTED || rc == LOOM_ECONN ? loom_errmsg(f->l)
                                                                    : loom_strerror(rc));
    json_decref(rep);
    return false;
  }
  *idle_since = loom__now_ms();
  if (ans.end) {
    json_decref(rep);
    chunk *c = calloc(1, sizeof *c);
    f->ended = true;
    if (c) {
      c->kind = K_END;
      loom__feed_push(f, c);
    }
    return false;
  }
  bool ok = true;
  for (size_t i = 0; i < ans.nsplits; i++) {
    const wire_feed_split *a = &ans.splits[i];
    if ((a->split >= f->nsplits && !f->growing) || a->epoch >= f->epochs) {
      snprintf(why, sizeof why, "split %lld of epoch %lld is not one of this feed's",
               (long long)a->split, (long long)a->epoch);
      ok = false;
      break;
    }
    fsplit *sp = calloc(1, sizeof *sp);
    if (!sp) {
      snprintf(why, sizeof why, "out of memory");
      ok = false;
      break;
    }
    sp->lease = (uint64_t)a->lease;
    sp->split = (uint32_t)a->split;
    sp->epoch = (int)a->epoch;
    sp->off = (uint64_t)a->off;
    sp->len = (uint64_t)a->len;
    sp->rec = (uint64_t)a->rec;
    sp->shuffle = a->has_rseed;
    sp->rseed = (uint64_t)a->rseed;
    sp->path = strdup(a->path);
    const char *tmp = a->tmp;
    sp->tmp = tmp ? strdup(tmp) : NULL;
    pthread_mutex_lock(&f->mu);
    sp->next = f->held;
    f->held = sp;
    f->nheld++;
    pthread_mutex_unlock(&f->mu);
    if (!sp->path || (tmp && !sp->tmp)) {
      snprintf(why, sizeof why, "out of memory");
      ok = false;
      break;
    }
    /* to read, in the order leased; the kernel starts reading it now */
    if (!loom__fs_remote(sp->path)) {
      bool same = f->rf && f->rpath && !strcmp(f->rpath, sp->path);
      int fd = same ? -1 : open(sp->path, O_RDONLY | O_CLOEXEC);
      if (same) loom__rfile_advise(f->rf, sp->off, sp->len, false);
      if (fd >= 0) posix_fadvise(fd, (off_t)sp->off, (off_t)sp->len, POSIX_FADV_WILLNEED);
      if (fd >= 0) close(fd);
    }
    if (f->toread_tail)
      f->toread_tail->next_read = sp;
    else
      f->toread = sp;
    f->toread_tail = sp;
    f->last_split_len = sp->len;
  }
  json_decref(rep);
  if (!ok) {
    loom__feed_push_error(f, LOOM_EPROTO, "a malformed lease from the feed's coordinator: %s", why);
    return false;
  }
  return true;
}

void loom__feed_recycle(loom_feed_t *f, chunk *c) {
  pthread_mutex_lock(&f->mu);
  loom__feed_chunk_put_locked(f, c);
  pthread_mutex_unlock(&f->mu);
}

/* Reads, parses and queues one split, then its end marker. On an error
 * queues the error (which stops the reader) and returns false. */
static bool read_split(loom_feed_t *f, fsplit *sp) {
  const feed_format_ops *ops = loom__feed_format_ops(&f->fmt);
  char msg[1024] = "";
  feed_parse_ctx ctx = {
      .path = sp->path, .rec = sp->rec ? sp->rec : f->fmt.rec, .err = msg, .errlen = sizeof msg};
  char why[1024];
  loom__rfile *rf = open_file(f, sp->path, why, sizeof why);
  if (!rf) {
    loom__feed_push_error(f, LOOM_EIO, "feed input %s: cannot open: %s", sp->path, why);
    return false;
  }
  if (ctx.rec > f->max_record) {
    loom__feed_push_error(f, LOOM_ERANGE,
                          "feed input %s: records of %llu bytes are larger than %llu "
                          "(LOOM_FEED_MAX_RECORD)",
                          sp->path, (unsigned long long)ctx.rec, (unsigned long long)f->max_record);
    return false;
  }
  loom__rfile_advise(rf, sp->off, sp->len, true);
  uint64_t pos = sp->off, end = sp->off + sp->len;
  size_t base_cap = (size_t)f->chunk_bytes;
  if (ctx.rec && ctx.rec <= base_cap) base_cap = base_cap / ctx.rec * ctx.rec;
  if (ctx.rec > base_cap) base_cap = (size_t)ctx.rec;
  size_t cap = base_cap;
  if (sp->shuffle) {
    if (sp->len > f->max_record) {
      loom__feed_push_error(f, LOOM_ERANGE,
                            "feed input %s: a split of %llu bytes is too large to shuffle "
                            "in memory (LOOM_FEED_MAX_RECORD is %llu): lower LOOM_FEED_SPLIT_BYTES",
                            sp->path, (unsigned long long)sp->len,
                            (unsigned long long)f->max_record);
      return false;
    }
    cap = (size_t)sp->len;
  }
  while (pos < end) {
    if (!wait_room(f)) return true; /* stopping */
    size_t want = end - pos < cap ? (size_t)(end - pos) : cap;
    chunk *c = loom__feed_chunk_get(f, K_DATA, cap);
    if (!c) {
      loom__feed_push_error(f, LOOM_ENOMEM, "out of memory for a %zu-byte read-ahead chunk", cap);
      return false;
    }
    size_t got = 0;
    int rrc = loom__rfile_pread(rf, c->buf, want, pos, &got, why, sizeof why);
    if (rrc < 0 || got != want) {
      loom__feed_push_error(f, LOOM_EIO, "feed input %s: cannot read %zu bytes at offset %llu: %s",
                            sp->path, want, (unsigned long long)pos,
                            rrc < 0 ? why : "the file is shorter than when the job began");
      loom__feed_recycle(f, c);
      return false;
    }
    bool eof = pos + want == end;
    size_t used = 0;
    ctx.base = pos;
    int rc = ops->parse(c->buf, want, eof, &ctx, &c->recs, &used);
    if (rc < 0) {
      loom__feed_push_error(f, rc, "%s", msg[0] ? msg : loom_strerror(rc));
      loom__feed_recycle(f, c);
      return false;
    }
    if (c->recs.n == 0) { /* a record larger than the chunk */
      loom__feed_recycle(f, c);
      if (eof || cap >= f->max_record + 16) {
        loom__feed_push_error(f, LOOM_ERANGE,
                              "feed input %s: offset %llu: a record larger than %llu bytes "
                              "(LOOM_FEED_MAX_RECORD)",
                              sp->path, (unsigned long long)pos, (unsigned long long)f->max_record);
        return false;
      }
      cap = cap * 2 < f->max_record + 16 ? cap * 2 : (size_t)f->max_record + 16;
      continue;
    }
    if (sp->shuffle) {
      if (c->order_cap < c->recs.n) {
        free(c->order);
        c->order_cap = 0;
        if (!(c->order = malloc(c->recs.n * sizeof *c->order))) {
          loom__feed_recycle(f, c);
          loom__feed_push_error(f, LOOM_ENOMEM, "out of memory to shuffle %zu records", c->recs.n);
          return false;
        }
        c->order_cap = c->recs.n;
      }
      for (size_t i = 0; i < c->recs.n; i++) c->order[i] = (uint32_t)i;
      loom__feed_permute(c->order, c->recs.n, sp->rseed);
    } else if (c->order) {
      free(c->order);
      c->order = NULL;
      c->order_cap = 0;
    }
    c->sp = sp;
    c->len = used;
    loom__feed_push(f, c);
    pos += used;
    cap = sp->shuffle ? cap : base_cap;
  }
  chunk *e = loom__feed_chunk_get(f, K_SPLIT_END, 0);
  if (!e) {
    loom__feed_push_error(f, LOOM_ENOMEM, "out of memory");
    return false;
  }
  e->sp = sp;
  loom__feed_push(f, e);
  return true;
}

void *loom__feed_reader_main(void *arg) {
  loom_feed_t *f = arg;
  uint64_t idle_since = loom__now_ms();
  while (!loom__feed_stopping(f)) {
    __atomic_store_n(&f->beat, loom__now_ms(), __ATOMIC_RELAXED);
    maybe_renew(f);
    if (f->ended) {
      pthread_mutex_lock(&f->mu);
      if (!f->stop) loom__feed_wait_ms(&f->cv_room, &f->mu, f->lease_ms / 6 + 1);
      pthread_mutex_unlock(&f->mu);
      continue;
    }
    if (!f->toread) {
      if (wait_room_for(f, true)) lease_more(f, &idle_since);
      continue;
    }
    fsplit *sp = f->toread;
    f->toread = sp->next_read;
    if (!f->toread) f->toread_tail = NULL;
    pthread_mutex_lock(&f->mu);
    bool stale = sp->stale;
    if (stale) loom__feed_held_remove_locked(f, sp);
    pthread_mutex_unlock(&f->mu);
    if (stale) {
      loom__feed_split_free(sp); /* taken back before we began it: someone else reads it */
      continue;
    }
    read_split(f, sp);
  }
  loom__rfile_close(f->rf);
  f->rf = NULL;
  return NULL;
}
