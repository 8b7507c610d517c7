/* feed_dispatch.c: the coordinator's side of the data feed (contract in
 * feed_dispatch.h). It owns the job's splits and hands them out as leases:
 *
 * - An epoch is every split once, in order 0..n-1, or in a permutation drawn
 *   from (seed, epoch) when the spec shuffles. Splits wait in a queue; a
 *   task asking for work gets the next ones (several at once when it asks
 *   for several, so it can read ahead), each under a new lease id.
 * - A lease ends in one of two ways. DONE from the holder, while the lease
 *   is still current: the split is finished for this epoch (its output, if
 *   any, is renamed from the holder's temporary file to part-<split>: the
 *   commit). Or the lease is taken back (its task or connection is gone, the
 *   holder gave it back, it was not renewed within the lease time, or a new
 *   whole-job attempt began): the split goes to the front of the queue and
 *   its temporary output is deleted. A DONE for a lease taken back is
 *   refused, so a stale holder can never commit: each split's output is
 *   committed exactly once per epoch.
 * - The next epoch begins only once every split of this one is done, so a
 *   task that runs out of work waits (its request is answered later, or
 *   with LOOM_ETIMEDOUT after its wait, and it asks again) while other
 *   tasks still hold leases that may come back.
 * - Committed splits stay committed across whole-job attempts; everything
 *   else is handed out again.
 * - A growing input (feed.follow: a file whose appearance ends the input)
 *   is scanned every tick: new files' splits join the first epoch's queue
 *   as they come (a shuffle shuffles each batch of them), and the first
 *   epoch ends once the end file is there and every split is done. Later
 *   epochs are the whole input.
 * - feed.consume removes an input file once every split of it is done in
 *   the last epoch (a spool the writer may refill, as loom.spark's spill).
 *
 * Everything runs on the coordinator's loop thread and never blocks but for
 * small file-system calls (rename, unlink) at commit and take-back. */
#include "coord/feed_dispatch.h"
#include "feed/feed.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { S_TODO, S_LEASED, S_DONE };

typedef struct lease {
  uint64_t id;
  uint32_t split;
  void *conn;
  char task[96];
  uint64_t expires;
  char *tmp; /* NULL without output */
  struct lease *prev, *next;
} lease;

typedef struct waiter {
  void *conn;
  json_int_t id;
  int max;
  uint64_t deadline;
  struct waiter *next;
} waiter;

struct feed_dispatch {
  feed_input *in;
  feed_reply_fn reply;
  char format[32];
  char *output, *tmpdir; /* NULL without feed.output */
  int epochs, epoch;     /* epoch == epochs: the feed is over */
  bool shuffle;
  uint64_t seed, lease_ms, next_id;
  uint8_t *state;  /* per split, this epoch */
  uint32_t *queue; /* a ring of the splits waiting for a lease */
  size_t qhead, qlen, done;
  lease *leases; /* every current lease */
  size_t nleased;
  waiter *waiters, **wtail; /* FIFO */
  uint64_t committed, expired, stale, returned, records;
  size_t qcap; /* of queue and state */
  /* a growing input: the globs, scanned until the follow file exists */
  char **globs, *follow, *fail; /* fail: why the input cannot be read */
  size_t nglobs;
  bool growing, consume;
  uint64_t split_bytes, consumed, next_scan;
  int scan_errors;     /* scans in a row that could not read a new file */
  uint32_t *file_left; /* per file: its splits not done this epoch */
  size_t file_cap;
  /* locality: where tasks run, and how many leases went to a task on a
   * host holding the split's first block */
  const char *(*host_of)(void *ctx, const char *task);
  void *host_ctx;
  uint64_t local;
};

#define LOCAL_WINDOW 64 /* queued splits looked at for a local one */
#define SCAN_TRIES 3    /* scans in a row that may fail to read a new file */

/* ---- the queue of splits ------------------------------------------------ */
static void q_push_front(feed_dispatch *d, uint32_t s) {
  size_t n = d->qcap;
  d->qhead = (d->qhead + n - 1) % n;
  d->queue[d->qhead] = s;
  d->qlen++;
}

static uint32_t q_pop(feed_dispatch *d) {
  uint32_t s = d->queue[d->qhead];
  d->qhead = (d->qhead + 1) % d->qcap;
  d->qlen--;
  return s;
}

static void q_push_back(feed_dispatch *d, uint32_t s) {
  d->queue[(d->qhead + d->qlen) % d->qcap] = s;
  d->qlen++;
}

/* Room in the queue and the per-split and per-file arrays for the input as
 * it is now; the queue keeps its order. */
static int arrays_fit(feed_dispatch *d) {
  size_t n = d->in->nsplits, nf = d->in->nfiles;
  if (n > d->qcap || !d->queue) {
    size_t nc = d->qcap ? d->qcap : 64;
    while (nc < n) nc *= 2;
    uint32_t *q = malloc(nc * sizeof *q);
    uint8_t *st = realloc(d->state, nc);
    if (st) d->state = st;
    if (!q || !st) {
      free(q);
      return LOOM_ENOMEM;
    }
    for (size_t i = 0; i < d->qlen; i++) q[i] = d->queue[(d->qhead + i) % d->qcap];
    free(d->queue);
    d->queue = q;
    d->qhead = 0;
    d->qcap = nc;
  }
  if (nf > d->file_cap || !d->file_left) {
    size_t nc = d->file_cap ? d->file_cap : 64;
    while (nc < nf) nc *= 2;
    uint32_t *fl = realloc(d->file_left, nc * sizeof *fl);
    if (!fl) return LOOM_ENOMEM;
    memset(fl + d->file_cap, 0, (nc - d->file_cap) * sizeof *fl);
    d->file_left = fl;
    d->file_cap = nc;
  }
  return 0;
}

/* The index in in->hosts of host, or -1. */
static int host_known(const feed_dispatch *d, const char *host) {
  for (size_t i = 0; host && i < d->in->nhosts; i++)
    if (!strcmp(d->in->hosts[i], host)) return (int)i;
  return -1;
}

static bool split_on(const feed_split *sp, int h) {
  for (int k = 0; k < FEED_SPLIT_HOSTS; k++)
    if (sp->host[k] == h) return true;
  return false;
}

/* q_pop, preferring among the next LOCAL_WINDOW a split with a replica on
 * host h (>= 0): it swaps places with the head. *local says whether the
 * split popped is on h. */
static uint32_t q_pop_near(feed_dispatch *d, int h, bool *local) {
  size_t n = d->qcap; /* the ring's size (a growing input's outgrows nsplits) */
  *local = false;
  for (size_t k = 0; h >= 0 && k < d->qlen && k < LOCAL_WINDOW; k++) {
    size_t at = (d->qhead + k) % n;
    if (!split_on(&d->in->splits[d->queue[at]], h)) continue;
    uint32_t t = d->queue[at];
    d->queue[at] = d->queue[d->qhead];
    d->queue[d->qhead] = t;
    *local = true;
    break;
  }
  return q_pop(d);
}

/* Fills the queue for epoch d->epoch: every split not done, in the epoch's
 * order. */
static void epoch_begin(feed_dispatch *d) {
  size_t n = d->in->nsplits;
  for (size_t i = 0; i < n; i++) d->queue[i] = (uint32_t)i;
  if (d->shuffle) loom__feed_permute(d->queue, n, loom__feed_seed(d->seed, (uint64_t)d->epoch, 0));
  d->qhead = 0;
  d->qlen = n;
  d->done = 0;
  memset(d->state, S_TODO, n);
  memset(d->file_left, 0, d->in->nfiles * sizeof *d->file_left);
  for (size_t i = 0; i < n; i++) d->file_left[d->in->splits[i].file]++;
  if (d->growing)
    loom__log(LOOM_LOG_INFO, "feed", "epoch 1 of %d: %zu splits so far; the input grows until %s",
              d->epochs, n, d->follow);
  else
    loom__log(LOOM_LOG_INFO, "feed", "epoch %d of %d: %zu splits", d->epoch + 1, d->epochs, n);
}

/* Every split of the epoch is done and no more will come: the next epoch,
 * or the end. */
static void epoch_end_check(feed_dispatch *d) {
  if (d->growing || d->epoch >= d->epochs || d->done < d->in->nsplits) return;
  if (d->in->nsplits == 0) {
    loom__log(LOOM_LOG_WARN, "feed", "the input ended with no records: the feed is over");
    d->epoch = d->epochs;
    return;
  }
  d->epoch++;
  if (d->epoch < d->epochs)
    epoch_begin(d);
  else
    loom__log(LOOM_LOG_INFO, "feed", "every split of every epoch is done");
}

/* ---- names of the output ----------------------------------------------- */
static char *part_name(const feed_dispatch *d, uint32_t split) {
  return d->epochs > 1 ? loom__asprintf("%s/part-%05u-e%d", d->output, split, d->epoch)
                       : loom__asprintf("%s/part-%05u", d->output, split);
}

static char *tmp_name(const feed_dispatch *d, uint32_t split, const char *task, uint64_t id) {
  char t[96];
  size_t i = 0;
  for (; task[i] && i < sizeof t - 1; i++) {
    char c = task[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    t[i] = ok ? c : '-';
  }
  t[i] = 0;
  return loom__asprintf("%s/part-%05u-e%d.%s.%llu", d->tmpdir, split, d->epoch, t,
                        (unsigned long long)id);
}

/* ---- leases ------------------------------------------------------------- */
static lease *lease_find(feed_dispatch *d, uint64_t id) {
  for (lease *l = d->leases; l; l = l->next)
    if (l->id == id) return l;
  return NULL;
}

static void lease_unlink(feed_dispatch *d, lease *l) {
  if (l->prev)
    l->prev->next = l->next;
  else
    d->leases = l->next;
  if (l->next) l->next->prev = l->prev;
  d->nleased--;
  free(l->tmp);
  free(l);
}

static void serve_waiters(feed_dispatch *d);

/* Takes a lease back: its split waits again at the front of the queue and
 * its unfinished output is deleted. why is for the log. */
static void lease_take_back(feed_dispatch *d, lease *l, const char *why, int level) {
  loom__log(level, "feed", "split %u (lease %llu of %s) %s: it will be read again", l->split,
            (unsigned long long)l->id, l->task, why);
  char because[1024];
  int rrc = l->tmp ? loom__fs_remove(l->tmp, false, because, sizeof because) : 0;
  if (rrc < 0 && rrc != LOOM_ENOENT) loom__log(LOOM_LOG_WARN, "feed", "cannot remove: %s", because);
  d->state[l->split] = S_TODO;
  q_push_front(d, l->split);
  d->returned++;
  lease_unlink(d, l);
}

/* The lease reply for up to max splits from the queue (at least one). */
static json_t *lease_out(feed_dispatch *d, void *conn, const char *task, int max) {
  wire_feed_leased out = {0};
  if (max > FEED_MAX_BATCH_LEASES) max = FEED_MAX_BATCH_LEASES;
  uint64_t now = loom__now_ms();
  int h = d->host_of && d->in->nhosts ? host_known(d, d->host_of(d->host_ctx, task)) : -1;
  for (int k = 0; k < max && d->qlen > 0; k++) {
    bool local;
    uint32_t s = q_pop_near(d, h, &local);
    d->local += local;
    if (d->state[s] != S_TODO) { /* cannot happen: a split is queued once */
      loom__log(LOOM_LOG_ERROR, "feed", "internal error: split %u queued twice", s);
      continue;
    }
    const feed_split *sp = &d->in->splits[s];
    const feed_file *ff = &d->in->files[sp->file];
    lease *l = calloc(1, sizeof *l);
    if (!l) {
      q_push_front(d, s);
      break;
    }
    l->id = ++d->next_id;
    l->split = s;
    l->conn = conn;
    loom__strlcpy(l->task, task, sizeof l->task);
    l->expires = now + d->lease_ms;
    if (d->output && !(l->tmp = tmp_name(d, s, task, l->id))) {
      free(l);
      q_push_front(d, s);
      break;
    }
    l->next = d->leases;
    if (d->leases) d->leases->prev = l;
    d->leases = l;
    d->state[s] = S_LEASED;
    d->nleased++;
    out.splits[out.nsplits++] = (wire_feed_split){
        .split = (int64_t)s,
        .epoch = d->epoch,
        .lease = (int64_t)l->id,
        .path = ff->path,
        .off = (int64_t)sp->off,
        .len = (int64_t)sp->len,
        .rec = (int64_t)ff->rec,
        .has_rseed = d->shuffle,
        .rseed = (int64_t)(loom__feed_seed(d->seed, (uint64_t)d->epoch, s + 1ull) >> 1),
        .tmp = l->tmp};
  }
  /* no split (out of memory): an answer without splits, refused below */
  return out.nsplits ? wire_feed_leased_encode(&out) : json_object();
}

/* Answers a LEASE request now if it can: the end, or splits. */
static bool try_serve(feed_dispatch *d, void *conn, const char *task, json_int_t id, int max) {
  if (d->fail) {
    d->reply(conn, id, LOOM_EIO, json_pack("{s:s}", "msg", d->fail), NULL, 0);
    return true;
  }
  if (d->epoch >= d->epochs) {
    d->reply(conn, id, 0, wire_feed_leased_encode(&(wire_feed_leased){.end = true}), NULL, 0);
    return true;
  }
  if (d->qlen == 0) return false;
  json_t *r = lease_out(d, conn, task, max);
  if (json_array_size(json_object_get(r, "splits")) == 0) {
    json_decref(r);
    d->reply(conn, id, LOOM_ENOMEM, json_pack("{s:s}", "msg", "the coordinator is out of memory"),
             NULL, 0);
    return true;
  }
  d->reply(conn, id, 0, r, NULL, 0);
  return true;
}

/* ---- waiting requests --------------------------------------------------- */
typedef struct {
  waiter w;
  char task[96];
} waiter_task;

static void waiters_remove_if(feed_dispatch *d, bool (*pred)(feed_dispatch *, waiter *, void *),
                              void *arg) {
  waiter **pp = &d->waiters;
  d->wtail = &d->waiters;
  while (*pp) {
    waiter *w = *pp;
    if (pred(d, w, arg)) {
      *pp = w->next;
      free(w);
    } else {
      pp = &w->next;
      d->wtail = &w->next;
    }
  }
}

static bool w_serve(feed_dispatch *d, waiter *w, void *arg) {
  (void)arg;
  const char *task = ((waiter_task *)w)->task;
  return try_serve(d, w->conn, task, w->id, w->max);
}

static void serve_waiters(feed_dispatch *d) {
  if (d->waiters && (d->qlen > 0 || d->epoch >= d->epochs || d->fail))
    waiters_remove_if(d, w_serve, NULL);
}

/* LEASE's answer when no split is free: the reply's msg, and the leases
 * other tasks hold. */
static json_t *busy(feed_dispatch *d, const char *msg) {
  json_t *j = json_pack("{s:s}", "msg", msg);
  if (j)
    json_object_update_new(j, wire_feed_leased_encode(&(wire_feed_leased){
                                  .has_leased = true, .leased = (int64_t)d->nleased}));
  return j;
}

static bool w_expired(feed_dispatch *d, waiter *w, void *arg) {
  if (w->deadline > *(uint64_t *)arg) return false;
  d->reply(w->conn, w->id, LOOM_ETIMEDOUT,
           busy(d, d->growing && d->qlen == 0 && d->done + d->nleased == d->in->nsplits
                       ? "no split is free yet: the input has not grown (feed.follow: it grows "
                         "until its end file exists); ask again"
                       : "no split is free yet: other tasks hold the rest of "
                         "the epoch; ask again"),
           NULL, 0);
  return true;
}

static bool w_of_conn(feed_dispatch *d, waiter *w, void *arg) {
  (void)d;
  return w->conn == arg;
}

static bool w_abort(feed_dispatch *d, waiter *w, void *arg) {
  (void)arg;
  d->reply(w->conn, w->id, LOOM_EABORTED, json_pack("{s:s}", "msg", "the job's attempt ended"),
           NULL, 0);
  return true;
}

/* ---- requests: typed in wire/wire_msg.h, checked by wire_msg_decode --- */
static int on_open(feed_dispatch *d, void *conn, json_int_t id) {
  wire_feed_opened o = {.format = d->format,
                        .epochs = d->epochs,
                        .epoch = d->epoch < d->epochs ? d->epoch : d->epochs - 1,
                        .splits = (int64_t)d->in->nsplits,
                        .output = d->output != NULL,
                        .lease_ms = (int64_t)d->lease_ms,
                        .shuffle = d->shuffle,
                        .growing = d->follow != NULL};
  d->reply(conn, id, 0, wire_feed_opened_encode(&o), NULL, 0);
  return 0;
}

static int on_lease(feed_dispatch *d, void *conn, const char *task, json_int_t id,
                    const wire_feed_lease *req) {
  json_int_t max = req->has_max ? req->max : 1, wait = req->wait_ms;
  if (try_serve(d, conn, task, id, (int)max)) return 0;
  if (wait == 0) {
    d->reply(conn, id, LOOM_ETIMEDOUT, busy(d, "no split is free yet"), NULL, 0);
    return 0;
  }
  waiter_task *wt = calloc(1, sizeof *wt);
  if (!wt) {
    d->reply(conn, id, LOOM_ENOMEM, NULL, NULL, 0);
    return 0;
  }
  wt->w.conn = conn;
  wt->w.id = id;
  wt->w.max = (int)max;
  wt->w.deadline = loom__now_ms() + (uint64_t)wait;
  loom__strlcpy(wt->task, task, sizeof wt->task);
  *d->wtail = &wt->w;
  d->wtail = &wt->w.next;
  return 0;
}

/* The split of lease l is finished: commit its output, count it, and begin
 * the next epoch when it was the last. */
static int finish(feed_dispatch *d, lease *l, bool wrote, json_int_t records, char *msg,
                  size_t msglen) {
  uint32_t s = l->split;
  if (d->output && wrote) {
    char *final = part_name(d, s);
    char why[1024] = "out of memory";
    /* never over a committed part: a split is committed once */
    int rc = final ? loom__fs_rename(l->tmp, final, false, why, sizeof why) : LOOM_ENOMEM;
    if (rc < 0) {
      snprintf(msg, msglen, "cannot commit the output of split %u: %s", s, why);
      free(final);
      lease_take_back(d, l, "could not be committed", LOOM_LOG_WARN);
      serve_waiters(d);
      return LOOM_EIO;
    }
    free(final);
  }
  lease_unlink(d, l);
  d->state[s] = S_DONE;
  d->done++;
  d->committed++;
  d->records += (uint64_t)records;
  uint32_t fi = d->in->splits[s].file;
  if (d->file_left[fi] && --d->file_left[fi] == 0 && d->consume && d->epoch == d->epochs - 1) {
    char why[1024];
    int rc = loom__fs_remove(d->in->files[fi].path, false, why, sizeof why);
    if (rc < 0 && rc != LOOM_ENOENT)
      loom__log(LOOM_LOG_WARN, "feed", "feed.consume: cannot remove %s: %s", d->in->files[fi].path,
                why);
    else
      d->consumed++;
  }
  epoch_end_check(d);
  serve_waiters(d);
  return 0;
}

static int on_done(feed_dispatch *d, void *conn, json_int_t id, const wire_feed_done *req) {
  json_int_t lid = req->lease;
  lease *l = lease_find(d, (uint64_t)lid);
  if (!l || l->conn != conn) {
    d->stale++;
    loom__log(LOOM_LOG_WARN, "feed",
              "refused to finish lease %lld: it was taken back (expired, "
              "or its task was gone); its split is read again elsewhere",
              (long long)lid);
    d->reply(conn, id, LOOM_ESTATE,
             json_pack("{s:s}", "msg",
                       "the lease was taken back (it expired or its task was "
                       "gone): the split is read again elsewhere and this output is discarded"),
             NULL, 0);
    return 0;
  }
  char msg[1024] = "";
  int rc = finish(d, l, req->wrote, req->records, msg, sizeof msg);
  d->reply(conn, id, rc, rc < 0 ? json_pack("{s:s}", "msg", msg) : NULL, NULL, 0);
  return 0;
}

static int on_renew(feed_dispatch *d, void *conn, json_int_t id, const wire_feed_leases *req) {
  json_t *ids = req->leases;
  json_t *stale = json_array();
  uint64_t until = loom__now_ms() + d->lease_ms;
  size_t i;
  json_t *v;
  json_array_foreach(ids, i, v) {
    lease *l = lease_find(d, (uint64_t)json_integer_value(v));
    if (l && l->conn == conn)
      l->expires = until;
    else
      json_array_append(stale, v);
  }
  d->reply(conn, id, 0, wire_feed_renewed_encode(&(wire_feed_renewed){.stale = stale}), NULL, 0);
  json_decref(stale);
  return 0;
}

static int on_release(feed_dispatch *d, void *conn, json_int_t id, const wire_feed_leases *req) {
  json_t *ids = req->leases;
  for (size_t i = json_array_size(ids); i-- > 0;) { /* the first given back waits first */
    lease *l = lease_find(d, (uint64_t)json_integer_value(json_array_get(ids, i)));
    if (l && l->conn == conn) lease_take_back(d, l, "was given back unfinished", LOOM_LOG_INFO);
  }
  serve_waiters(d);
  d->reply(conn, id, 0, NULL, NULL, 0);
  return 0;
}

int feed_dispatch_msg(feed_dispatch *d, void *conn, const char *task, const wire_msg *m) {
  if (!d || !m || !task) return LOOM_EPROTO;
  switch (m->type) {
  case WIRE_FEED_OPEN:
    return on_open(d, conn, m->u.feed_open.id);
  case WIRE_FEED_LEASE:
    return on_lease(d, conn, task, m->u.feed_lease.id, &m->u.feed_lease);
  case WIRE_FEED_DONE:
    return on_done(d, conn, m->u.feed_done.id, &m->u.feed_done);
  case WIRE_FEED_RENEW:
    return on_renew(d, conn, m->u.feed_renew.id, &m->u.feed_renew);
  case WIRE_FEED_RELEASE:
    return on_release(d, conn, m->u.feed_release.id, &m->u.feed_release);
  default:
    return LOOM_EPROTO;
  }
}

/* ---- the coordinator's events ------------------------------------------ */
void feed_dispatch_task_gone(feed_dispatch *d, const char *task) {
  if (!d || !task) return;
  for (lease *l = d->leases, *n; l; l = n) {
    n = l->next;
    if (!strcmp(l->task, task))
      lease_take_back(d, l, "was held by a task that ended", LOOM_LOG_WARN);
  }
  serve_waiters(d);
}

void feed_dispatch_conn_gone(feed_dispatch *d, void *conn) {
  if (!d) return;
  waiters_remove_if(d, w_of_conn, conn);
  for (lease *l = d->leases, *n; l; l = n) {
    n = l->next;
    if (l->conn == conn)
      lease_take_back(d, l, "was held by a process whose connection closed", LOOM_LOG_WARN);
  }
  serve_waiters(d);
}

/* A growing input: takes the files that appeared since the last scan, and
 * ends the input once the follow file exists (looked at before the globs,
 * so every file written before it is taken). */
static void scan(feed_dispatch *d) {
  char why[1024];
  loom__fs_info st;
  int src = loom__fs_stat(d->follow, &st, why, sizeof why);
  bool ending = src == 0;
  if (src < 0 && src != LOOM_ENOENT) {
    loom__log(LOOM_LOG_WARN, "feed", "feed.follow %s: %s (looked at again in a moment)", d->follow,
              why);
    return;
  }
  size_t n0 = d->in->nsplits, added = 0;
  int rc = loom__feed_input_grow(d->in, (const char *const *)d->globs, d->nglobs, d->split_bytes,
                                 &added, why, sizeof why);
  if (arrays_fit(d) < 0) {
    rc = LOOM_ENOMEM;
    loom__strlcpy(why, "the coordinator is out of memory for the feed's splits", sizeof why);
    d->in->nsplits = n0; /* not queued: forget them, and fail below */
  }
  size_t n = d->in->nsplits;
  uint32_t *fresh = n > n0 ? malloc((n - n0) * sizeof *fresh) : NULL;
  if (n > n0 && !fresh) {
    rc = LOOM_ENOMEM;
    loom__strlcpy(why, "the coordinator is out of memory for the feed's splits", sizeof why);
    d->in->nsplits = n = n0;
  }
  if (n > n0) {
    for (size_t i = n0; i < n; i++) fresh[i - n0] = (uint32_t)i;
    if (d->shuffle) loom__feed_permute(fresh, n - n0, loom__feed_seed(d->seed, 0, n0 + 1));
    for (size_t i = 0; i < n - n0; i++) {
      d->state[fresh[i]] = S_TODO;
      d->file_left[d->in->splits[fresh[i]].file]++;
      q_push_back(d, fresh[i]);
    }
    loom__log(LOOM_LOG_INFO, "feed", "the input grew by %zu files, %zu splits (%zu in all)", added,
              n - n0, n);
  }
  free(fresh);
  if (rc < 0) {
    /* the cluster unreachable, or a file that could not be read (HDFS:
     * maybe for a moment): looked at again, up to SCAN_TRIES scans in a
     * row for a read error; a bad file (ESPEC) at once */
    if (rc == LOOM_ECONN || rc == LOOM_ETIMEDOUT ||
        (rc == LOOM_EIO && ++d->scan_errors < SCAN_TRIES)) {
      loom__log(LOOM_LOG_WARN, "feed", "feed.input: %s (scanned again in a moment)", why);
      serve_waiters(d);
      return;
    }
    d->fail = loom__asprintf("the feed's growing input cannot be read: %s", why);
    loom__log(LOOM_LOG_ERROR, "feed", "%s", d->fail ? d->fail : why);
    if (!d->fail) d->fail = strdup("the feed's growing input cannot be read");
    serve_waiters(d);
    return;
  }
  d->scan_errors = 0;
  if (ending) {
    d->growing = false;
    loom__log(LOOM_LOG_INFO, "feed", "%s exists: the input is whole, %zu files, %zu splits",
              d->follow, d->in->nfiles, n);
    epoch_end_check(d);
  }
  serve_waiters(d);
}

void feed_dispatch_tick(feed_dispatch *d, uint64_t now_ms) {
  if (!d) return;
  /* an HDFS glob and each new file's open are NameNode calls on the
   * coordinator's loop: once a second there, every tick on local disks */
  if (d->growing && !d->fail && now_ms >= d->next_scan) {
    d->next_scan = loom__fs_remote(d->follow) ? now_ms + 1000 : 0;
    scan(d);
  }
  bool back = false;
  for (lease *l = d->leases, *n; l; l = n) {
    n = l->next;
    if (l->expires <= now_ms) {
      char why[96];
      snprintf(why, sizeof why, "was not renewed within %llu ms", (unsigned long long)d->lease_ms);
      d->expired++;
      lease_take_back(d, l, why, LOOM_LOG_WARN);
      back = true;
    }
  }
  if (back) serve_waiters(d);
  waiters_remove_if(d, w_expired, &now_ms);
}

void feed_dispatch_new_attempt(feed_dispatch *d) {
  if (!d) return;
  free(d->fail); /* a bad file is found again by the next scan */
  d->fail = NULL;
  d->scan_errors = 0;
  waiters_remove_if(d, w_abort, NULL);
  while (d->leases)
    lease_take_back(d, d->leases, "belonged to the previous attempt", LOOM_LOG_INFO);
}

json_t *feed_dispatch_status(const feed_dispatch *d) {
  if (!d) return json_object();
  bool over = d->epoch >= d->epochs;
  return json_pack(
      "{s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:b, s:I}", "epoch",
      over ? d->epochs - 1 : d->epoch, "epochs", d->epochs, "splits", (json_int_t)d->in->nsplits,
      "done", (json_int_t)(over ? d->in->nsplits : d->done), "leased", (json_int_t)d->nleased,
      "committed", (json_int_t)d->committed, "expired", (json_int_t)d->expired, "stale",
      (json_int_t)d->stale, "records", (json_int_t)d->records, "finished", over, "data_local",
      (json_int_t)d->local, "growing", d->growing, "consumed", (json_int_t)d->consumed);
}

/* ---- making and unmaking ------------------------------------------------ */
static int output_prepare(feed_dispatch *d, char *err, size_t errlen) {
  char why[1024];
  int rc = loom__fs_mkdirs(d->output, why, sizeof why);
  if (rc < 0) {
    snprintf(err, errlen, "feed.output %s: cannot create it: %s", d->output, why);
    return rc == LOOM_EINVAL                          ? LOOM_ESPEC
           : rc == LOOM_ECONN || rc == LOOM_ETIMEDOUT ? rc
                                                      : LOOM_EIO;
  }
  char *pat = loom__asprintf("%s/part-*", d->output);
  char **parts = NULL;
  size_t n = 0;
  rc = pat ? loom__fs_glob(pat, &parts, &n, why, sizeof why) : LOOM_ENOMEM;
  free(pat);
  if (rc < 0) {
    snprintf(err, errlen, "feed.output %s: cannot read it: %s", d->output, why);
    return LOOM_EIO;
  }
  if (n) {
    const char *b = strrchr(parts[0], '/');
    snprintf(err, errlen,
             "feed.output %s already holds output of an earlier run (%s): "
             "remove its part-* files or choose another directory",
             d->output, b ? b + 1 : parts[0]);
    rc = LOOM_ESPEC;
  }
  for (size_t i = 0; i < n; i++) free(parts[i]);
  free(parts);
  if (rc < 0) return rc;
  if (!(d->tmpdir = loom__asprintf("%s/.tmp", d->output))) return LOOM_ENOMEM;
  /* what a crashed earlier coordinator left goes */
  rc = loom__fs_remove(d->tmpdir, true, why, sizeof why);
  if (rc == 0 || rc == LOOM_ENOENT) rc = loom__fs_mkdirs(d->tmpdir, why, sizeof why);
  if (rc < 0) {
    snprintf(err, errlen, "feed.output %s: cannot make %s afresh: %s", d->output, d->tmpdir, why);
    return LOOM_EIO;
  }
  return 0;
}

int feed_dispatch_create(const json_t *feed, const char *job_dir, const char *spec_dir,
                         feed_reply_fn reply, feed_dispatch **out, char *err, size_t errlen) {
  (void)job_dir;
  *out = NULL;
  if (errlen) err[0] = 0;
  if (!json_is_object(feed) || !reply) {
    snprintf(err, errlen, "feed: not a valid feed section");
    return LOOM_ESPEC;
  }
  feed_dispatch *d = calloc(1, sizeof *d);
  if (!d) return LOOM_ENOMEM;
  d->reply = reply;
  d->wtail = &d->waiters;
  d->lease_ms = (uint64_t)loom__tun(LOOM_TUN_FEED_LEASE_MS);
  int rc = LOOM_ESPEC;
  const char *fmt_s = json_string_value(json_object_get(feed, "format"));
  feed_format fmt;
  if (!fmt_s) fmt_s = "lines";
  if (loom__feed_format_parse(fmt_s, &fmt) < 0) {
    snprintf(err, errlen,
             "feed.format '%s' is not known: use lines, tfrecord, idx or "
             "fixed:<bytes>",
             fmt_s);
    goto fail;
  }
  loom__strlcpy(d->format, fmt_s, sizeof d->format);
  json_t *ep = json_object_get(feed, "epochs"), *sd = json_object_get(feed, "seed");
  d->epochs = json_is_integer(ep) ? (int)json_integer_value(ep) : 1;
  if (d->epochs < 1 || d->epochs > 1000000) {
    snprintf(err, errlen, "feed.epochs must be 1 to 1000000");
    goto fail;
  }
  d->seed = json_is_integer(sd) ? (uint64_t)json_integer_value(sd) : 0;
  d->shuffle = json_is_true(json_object_get(feed, "shuffle"));
  d->consume = json_is_true(json_object_get(feed, "consume"));
  const char *fo = json_string_value(json_object_get(feed, "follow"));
  if (fo && *fo) {
    d->follow = fo[0] == '/' || loom__fs_remote(fo) || !spec_dir
                    ? strdup(fo)
                    : loom__asprintf("%s/%s", spec_dir, fo);
    if (!d->follow) {
      rc = LOOM_ENOMEM;
      goto fail;
    }
    d->growing = true;
  }
  d->split_bytes = (uint64_t)loom__tun(LOOM_TUN_FEED_SPLIT_BYTES);
  json_t *input = json_object_get(feed, "input");
  size_t ng = json_is_array(input) ? json_array_size(input) : 0;
  if (!ng) {
    snprintf(err, errlen, "feed.input must be a non-empty list of globs");
    goto fail;
  }
  char **globs = calloc(ng, sizeof *globs);
  if (!globs) {
    rc = LOOM_ENOMEM;
    goto fail;
  }
  for (size_t i = 0; i < ng; i++) {
    const char *g = json_string_value(json_array_get(input, i));
    if (!g || !*g) {
      snprintf(err, errlen, "feed.input entries must be globs");
      rc = LOOM_ESPEC;
      break;
    }
    globs[i] = g[0] == '/' || loom__fs_remote(g) || !spec_dir
                   ? strdup(g)
                   : loom__asprintf("%s/%s", spec_dir, g);
    if (!globs[i]) {
      rc = LOOM_ENOMEM;
      break;
    }
    rc = 0;
  }
  if (rc == 0)
    rc = loom__feed_input_make((const char *const *)globs, ng, &fmt, d->growing, d->split_bytes,
                               &d->in, err, errlen);
  d->globs = globs; /* a growing input scans them again */
  d->nglobs = ng;
  if (rc < 0) goto fail;
  size_t n = d->in->nsplits;
  if ((rc = arrays_fit(d)) < 0) goto fail;
  const char *o = json_string_value(json_object_get(feed, "output"));
  if (o && *o) {
    d->output = o[0] == '/' || loom__fs_remote(o) || !spec_dir
                    ? strdup(o)
                    : loom__asprintf("%s/%s", spec_dir, o);
    if (!d->output) {
      rc = LOOM_ENOMEM;
      goto fail;
    }
    if ((rc = output_prepare(d, err, errlen)) < 0) goto fail;
  }
  epoch_begin(d);
  loom__log(LOOM_LOG_INFO, "feed", "%zu files, %llu bytes of records, %zu splits, format %s",
            d->in->nfiles, (unsigned long long)d->in->bytes, n, d->format);
  *out = d;
  return 0;
fail:
  if (errlen && !err[0]) snprintf(err, errlen, "feed: %s", loom_strerror(rc));
  feed_dispatch_destroy(d);
  return rc == LOOM_ENOMEM || rc == LOOM_EIO || rc == LOOM_ECONN || rc == LOOM_ETIMEDOUT
             ? rc
             : LOOM_ESPEC;
}

void feed_dispatch_destroy(feed_dispatch *d) {
  if (!d) return;
  for (waiter *w = d->waiters, *n; w; w = n) {
    n = w->next;
    free(w);
  }
  char why[1024];
  while (d->leases) {
    lease *l = d->leases;
    if (l->tmp) loom__fs_remove(l->tmp, false, why, sizeof why);
    lease_unlink(d, l);
  }
  if (d->tmpdir) loom__fs_remove(d->tmpdir, true, why, sizeof why);
  loom__feed_input_free(d->in);
  for (size_t i = 0; i < d->nglobs; i++) free(d->globs[i]);
  free(d->globs);
  free(d->follow);
  free(d->fail);
  free(d->file_left);
  free(d->state);
  free(d->queue);
  free(d->output);
  free(d->tmpdir);
  free(d);
}

void feed_dispatch_set_hosts(feed_dispatch *d, const char *(*host_of)(void *ctx, const char *task),
                             void *ctx) {
  if (!d) return;
  d->host_of = host_of;
  d->host_ctx = ctx;
}
