/* server.c: `loom ps`, one shard of the parameter server.
 *
 * One thread, one poll() loop over the listening socket, the stop and
 * abort fds and every client connection; no request blocks the loop. Each
 * connection reads into its own buffer (grown to the message at its head,
 * never past LOOM_PS_MAX_MSG) and answers in order. A request that must
 * wait (a SYNC pull or push for a later step, a BOUNDED step past the
 * staleness bound, a barrier, a SYNC save) "parks" its connection: nothing
 * behind it is served until it is. Whenever the step, a clock or the
 * barrier moves, parked connections are tried again.
 *
 * Replies are written straight from the variables when the socket takes
 * them (writev of header and data) and copied only for what it does not;
 * a connection with more than OUT_HIGH bytes unsent is not read until it
 * drains, so a client that stops reading cannot make the shard buffer
 * without bound.
 *
 * Connections that have not authenticated yet are kept apart: at most
 * LOOM_PREAUTH_MAX of them (oldest evicted first when another arrives),
 * each closed LOOM_AUTH_TIMEOUT after it connected, so that idle or
 * junk connections, however many, cannot keep a worker out. Authenticated
 * connections have their own cap, LOOM_PS_MAX_CONNS. What is refused,
 * evicted or timed out is logged through a rate limiter. */
#include "ps/server.h"
#include "lib/lib.h"
#include "ps/ps.h"
#include "core/exitcode.h"
#include "core/fifo.h"
#include "core/ratelog.h"
#include "wire/wire_tls.h"
#include "wire/wire.h"
#include "wire/wire_auth.h"

#include <arpa/inet.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define IN_MIN (64u << 10)
#define OUT_HIGH (256u << 10)
#define SHRINK_AT (1u << 20)

enum { DONE = 0, PARK = 1, GO = 2, CLOSE = -1 };

typedef struct conn {
  int fd;
  bool authed, configured, closing;
  bool parked, admitted; /* the head request waits / had its side effects */
  int rank;
  wire_auth_server auth; /* the handshake, until authed */
  uint64_t deadline_ms;  /* authenticate by then */
  char peer[64];
  unsigned char *in; /* unread bytes: [in_off, in_len) */
  size_t in_off, in_len, in_cap;
  unsigned char *out; /* unsent bytes: [out_off, out_len) */
  size_t out_off, out_len, out_cap;
  uint64_t bar_target; /* the barrier generation it waits for, or 0 */
  bool tls;            /* inside TLS (wire_tls.h): the link leaves the host */
  bool tls_hs;         /* its TLS handshake is not done: nothing else moves */
  bool tls_ww;         /* the handshake waits to write */
  bool tls_held;       /* TLS holds bytes the socket does not show */
  struct conn *next;
  loom__fifo_link pa; /* in the pre-authentication queue */
} conn;

struct ps_server {
  ps_server_cfg cfg;
  char secret[256];
  struct ps_tunables tun;
  int auth_ms;
  ps_state st;
  ps_pool *pool; /* LOOM_PS_THREADS - 1 helpers; NULL: one thread */
  bool configured;
  int mode, staleness, workers;
  uint64_t step;   /* SYNC: steps applied; else the last restored step */
  uint64_t *clock; /* [workers]: steps each worker has ended */
  uint64_t bar_gen, bar_arrived;
  bool restored;
  int restore_rc;
  uint64_t restore_step;
  char restore_err[PS_MAX_ERRMSG];
  conn *conns;
  size_t nconns;
  loom__fifo pa; /* connections not authenticated yet, oldest first */
  size_t nauthed, pa_max;
  uint64_t accept_paused_until; /* out of descriptors: wait a little */
  loom__ratelog refused;
  bool changed; /* the step, a clock or the barrier moved */
  char err[PS_MAX_ERRMSG];
};

static const char *MODE_NAMES[] = {"async", "sync", "bounded"};

static void conn_close(ps_server *s, conn *c, const char *why);

/* ---- output ------------------------------------------------------------ */
static size_t out_pending(const conn *c) { return c->out_len - c->out_off; }

static int out_room(conn *c, size_t n) {
  if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
  if (c->out_cap - c->out_len >= n) return 0;
  if (c->out_off) {
    memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
    c->out_len -= c->out_off;
    c->out_off = 0;
    if (c->out_cap - c->out_len >= n) return 0;
  }
  size_t cap = c->out_cap ? c->out_cap : 4096;
  while (cap - c->out_len < n) cap *= 2;
  unsigned char *p = realloc(c->out, cap);
  if (!p) return LOOM_ENOMEM;
  c->out = p;
  c->out_cap = cap;
  return 0;
}

static void conn_flush(conn *c) {
  if (c->tls_hs) return; /* the challenge waits for TLS */
  while (out_pending(c) && !c->closing) {
    ssize_t n = wire_io_send(c->fd, c->out + c->out_off, out_pending(c), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      c->closing = true;
      return;
    }
    c->out_off += (size_t)n;
  }
  if (!out_pending(c)) {
    c->out_off = c->out_len = 0;
    if (c->out_cap > SHRINK_AT) {
      free(c->out);
      c->out = NULL;
      c->out_cap = 0;
    }
  }
}

/* Queues a reply: written now as far as the socket takes it, the rest
 * copied. data may point into a variable; it is not kept. */
static void send_reply(conn *c, ps_hdr *rep, const void *data, size_t len) {
  unsigned char hdr[PS_HDR];
  rep->len = (uint32_t)len;
  ps_hdr_put(hdr, rep);
  size_t done = 0, total = PS_HDR + len;
  if (!out_pending(c)) {
    struct iovec iov[2] = {{hdr, PS_HDR}, {(void *)data, len}};
    for (;;) {
      ssize_t n = wire_io_sendv(c->fd, iov, len ? 2 : 1, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        c->closing = true;
        return;
      }
      done = n > 0 ? (size_t)n : 0;
      break;
    }
  }
  if (done == total) return;
  if (out_room(c, total - done) < 0) {
    c->closing = true;
    return;
  }
  if (done < PS_HDR) {
    memcpy(c->out + c->out_len, hdr + done, PS_HDR - done);
    c->out_len += PS_HDR - done;
    done = PS_HDR;
  }
  size_t off = done - PS_HDR;
  if (len > off) memcpy(c->out + c->out_len, (const char *)data + off, len - off);
  c->out_len += len - off;
}

static ps_hdr reply_to(const ps_hdr *h) {
  ps_hdr r = {.op = h->op, .var = h->var, .id = h->id, .count = h->count};
  return r;
}

static int reply_err(conn *c, const ps_hdr *h, int rc, const char *fmt, ...) LOOM__PRINTF(4, 5);
static int reply_err(conn *c, const ps_hdr *h, int rc, const char *fmt, ...) {
  char msg[PS_MAX_ERRMSG];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof msg) n = (int)sizeof msg - 1;
  ps_hdr r = reply_to(h);
  r.rc = rc;
  loom__log(LOOM_LOG_DEBUG, "ps", "%s: %s refused: %s", c->peer, ps_op_name(h->op), msg);
  send_reply(c, &r, msg, (size_t)n);
  return DONE;
}

static int reply_ok(conn *c, const ps_hdr *h) {
  ps_hdr r = reply_to(h);
  send_reply(c, &r, NULL, 0);
  return DONE;
}

/* ---- steps and clocks -------------------------------------------------- */
static uint64_t min_clock(const ps_server *s) {
  uint64_t m = UINT64_MAX;
  for (int i = 0; i < s->workers; i++)
    if (s->clock[i] < m) m = s->clock[i];
  return m == UINT64_MAX ? 0 : m;
}

/* SYNC: applies every step all workers have ended. */
static void close_steps(ps_server *s) {
  while (min_clock(s) > s->step) {
    ps_state_close_step(&s->st);
    s->step++;
    s->changed = true;
  }
}

static uint64_t where_is(const ps_server *s, const conn *c) {
  return c->rank >= 0 && s->clock ? s->clock[c->rank] : s->step;
}

/* ---- handlers: DONE (a reply is queued), PARK or CLOSE ----------------- */
static int h_config(ps_server *s, conn *c, const ps_hdr *h) {
  if (c->configured || h->len) return CLOSE;
  int mode = h->flags, stal = (int)h->count;
  int workers =
      h->off ? (int)(h->off > PS_MAX_WORKERS ? PS_MAX_WORKERS + 1 : h->off) : s->cfg.world;
  if (mode > LOOM_PS_BOUNDED || h->count > PS_MAX_STALENESS || h->off > PS_MAX_WORKERS)
    return reply_err(c, h, LOOM_EINVAL, "bad mode, staleness or worker count");
  if (workers < 1)
    return reply_err(c, h, LOOM_EINVAL,
                     "the number of workers is unknown here "
                     "(no LOOM_WORLD_SIZE on the ps): set loom_ps_opts.workers");
  if (h->rank < -1 || h->rank >= workers)
    return reply_err(c, h, LOOM_EINVAL,
                     "rank %d is not in 0..%d (or -1 for a "
                     "process that only reads)",
                     h->rank, workers - 1);
  if (!s->configured) {
    s->clock = calloc((size_t)workers, sizeof *s->clock);
    if (!s->clock) return CLOSE;
    for (int i = 0; i < workers; i++) s->clock[i] = s->step;
    s->mode = mode;
    s->staleness = stal;
    s->workers = workers;
    s->configured = true;
    loom__log(LOOM_LOG_INFO, "ps", "shard %d: %s mode, %d workers, staleness %d", s->cfg.shard,
              MODE_NAMES[mode], workers, stal);
  } else if (mode != s->mode || workers != s->workers ||
             (mode == LOOM_PS_BOUNDED && stal != s->staleness)) {
    return reply_err(c, h, LOOM_ESTATE,
                     "this ps runs in %s mode for %d workers "
                     "(staleness %d); this worker asked for %s mode, %d workers, "
                     "staleness %d: every worker must use the same options",
                     MODE_NAMES[s->mode], s->workers, s->staleness, MODE_NAMES[mode], workers,
                     stal);
  }
  c->configured = true;
  c->rank = h->rank;
  ps_hdr r = reply_to(h);
  r.var = (uint32_t)s->cfg.shard;
  r.count = (uint32_t)s->cfg.nshards;
  r.off = (uint64_t)s->workers;
  r.step = where_is(s, c);
  r.flags = (uint16_t)s->mode;
  send_reply(c, &r, NULL, 0);
  return DONE;
}

static int h_declare(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p) {
  ps_rbuf rb = {.p = p, .len = h->len};
  ps_decl d;
  uint32_t id = 0;
  int rc = ps_decl_get(&rb, &d, s->err, sizeof s->err);
  if (rc == 0) rc = ps_state_declare(&s->st, &d, &id, s->err, sizeof s->err);
  if (rc < 0) return reply_err(c, h, rc, "%s", s->err);
  ps_var *v = s->st.vars[id];
  ps_hdr r = reply_to(h);
  r.var = id;
  r.off = v->lo;
  r.step = v->hi;
  send_reply(c, &r, NULL, 0);
  return DONE;
}

static ps_var *var_of(ps_server *s, conn *c, const ps_hdr *h, int kind) {
  if (h->var >= s->st.nvars || s->st.vars[h->var]->d.kind != (uint32_t)kind) {
    reply_err(c, h, LOOM_EINVAL, "no %s variable %u on shard %d",
              kind == PS_DENSE ? "dense" : "sparse", h->var, s->cfg.shard);
    return NULL;
  }
  return s->st.vars[h->var];
}

static int dense_range(ps_server *s, conn *c, const ps_hdr *h, const ps_var *v) {
  if (h->count == 0 || (uint64_t)h->count * 4 > (uint64_t)s->tun.max_msg || h->off < v->lo ||
      h->off > v->hi || h->count > v->hi - h->off) {
    reply_err(c, h, LOOM_EINVAL,
              "elements [%llu, +%u) of '%s' are not on shard "
              "%d, which holds [%llu, %llu)",
              (unsigned long long)h->off, h->count, v->d.name, s->cfg.shard,
              (unsigned long long)v->lo, (unsigned long long)v->hi);
    return -1;
  }
  return 0;
}

/* SYNC pushes belong to a step: the open one (GO), or a later one (PARK);
 * DONE when refused. */
static int push_step(ps_server *s, conn *c, const ps_hdr *h) {
  if (c->rank < 0)
    return reply_err(c, h, LOOM_EINVAL, "in sync mode only workers (rank >= 0) push");
  if (h->step > s->step) return PARK;
  if (h->step < s->step)
    return reply_err(c, h, LOOM_ESTATE,
                     "a push for step %llu arrived after "
                     "that step was applied (the ps is at step %llu)",
                     (unsigned long long)h->step, (unsigned long long)s->step);
  return GO;
}

static int full(ps_server *s, conn *c, const ps_hdr *h, int rc, const ps_var *v) {
  if (rc == LOOM_ERANGE)
    return reply_err(c, h, rc,
                     "shard %d is full: LOOM_PS_MAX_MEMORY (%llu MiB) "
                     "reached with '%s' at %llu rows; raise it or add ps tasks",
                     s->cfg.shard, (unsigned long long)(s->st.mem.cap >> 20), v->d.name,
                     (unsigned long long)v->rows.n);
  return reply_err(c, h, rc, "shard %d: out of memory", s->cfg.shard);
}

static int h_pull(ps_server *s, conn *c, const ps_hdr *h) {
  if (h->len) return CLOSE;
  ps_var *v = var_of(s, c, h, PS_DENSE);
  if (!v || dense_range(s, c, h, v) < 0) return DONE;
  if (s->mode == LOOM_PS_SYNC && !(h->flags & PS_F_NOWAIT) && s->step < h->step) return PARK;
  ps_hdr r = reply_to(h);
  r.step = s->step;
  r.off = h->off;
  send_reply(c, &r, v->w + (h->off - v->lo), (size_t)h->count * sizeof(float));
  return DONE;
}

static int h_push(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p) {
  if (h->len != (uint64_t)h->count * 4) return CLOSE;
  ps_var *v = var_of(s, c, h, PS_DENSE);
  if (!v || dense_range(s, c, h, v) < 0) return DONE;
  const float *g = (const float *)p;
  if (s->mode == LOOM_PS_SYNC) {
    int r = push_step(s, c, h);
    if (r != GO) return r;
    int rc = ps_dense_accum(&s->st, v, h->off, g, h->count);
    if (rc < 0) return full(s, c, h, rc, v);
  } else {
    ps_dense_apply(v, h->off, g, h->count, h->flags & PS_F_FIRST);
  }
  return reply_ok(c, h);
}

/* Every key must be this shard's: a client with another shard count or a
 * bug would otherwise split a row's history over two shards. */
static int keys_ours(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *keys, size_t n) {
  for (size_t i = 0; s->cfg.nshards > 1 && i < n; i++) {
    uint64_t k;
    memcpy(&k, keys + 8 * i, 8);
    int home = ps_key_shard(k, s->cfg.nshards);
    if (home != s->cfg.shard) {
      reply_err(c, h, LOOM_EINVAL, "key %llu belongs to shard %d of %d, not %d",
                (unsigned long long)k, home, s->cfg.nshards, s->cfg.shard);
      return -1;
    }
  }
  return 0;
}

static int h_spull(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p) {
  if (h->len != (uint64_t)h->count * 8) return CLOSE;
  ps_var *v = var_of(s, c, h, PS_SPARSE);
  if (!v) return DONE;
  size_t n = h->count, dim = (size_t)v->d.count;
  if ((uint64_t)n * dim * 4 > (uint64_t)s->tun.max_msg)
    return reply_err(c, h, LOOM_EINVAL,
                     "a pull of %zu rows of '%s' is past "
                     "LOOM_PS_MAX_MSG: ask for fewer keys at once",
                     n, v->d.name);
  if (keys_ours(s, c, h, p, n) < 0) return DONE;
  if (s->mode == LOOM_PS_SYNC && !(h->flags & PS_F_NOWAIT) && s->step < h->step) return PARK;
  size_t bytes = n * dim * sizeof(float);
  if (out_room(c, PS_HDR + bytes) < 0) return CLOSE;
  ps_hdr r = reply_to(h);
  r.step = s->step;
  r.len = (uint32_t)bytes;
  ps_hdr_put(c->out + c->out_len, &r);
  unsigned char *dst = c->out + c->out_len + PS_HDR;
  if (((uintptr_t)dst & 3) == 0) {
    ps_sparse_read(&s->st, v, p, n, (float *)(void *)dst);
  } else { /* behind an error text of odd length */
    float *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return CLOSE;
    ps_sparse_read(&s->st, v, p, n, tmp);
    memcpy(dst, tmp, bytes);
    free(tmp);
  }
  c->out_len += PS_HDR + bytes;
  conn_flush(c);
  return DONE;
}

static int h_spush(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p) {
  ps_var *v = var_of(s, c, h, PS_SPARSE);
  if (!v) return DONE;
  size_t n = h->count, dim = (size_t)v->d.count;
  if (h->len != (uint64_t)n * (8 + 4 * (uint64_t)dim)) return CLOSE;
  if (keys_ours(s, c, h, p, n) < 0) return DONE;
  const float *g = (const float *)(const void *)(p + 8 * n);
  int rc;
  if (s->mode == LOOM_PS_SYNC) {
    int r = push_step(s, c, h);
    if (r != GO) return r;
    rc = ps_sparse_accum(&s->st, v, p, g, n);
  } else {
    rc = ps_sparse_apply(&s->st, v, p, g, n, h->flags & PS_F_FIRST);
  }
  if (rc < 0) return full(s, c, h, rc, v);
  return reply_ok(c, h);
}

static int h_step(ps_server *s, conn *c, const ps_hdr *h) {
  if (h->len) return CLOSE;
  if (c->rank < 0) return reply_err(c, h, LOOM_EINVAL, "only workers end steps");
  if (!c->admitted) {
    uint64_t *ck = &s->clock[c->rank];
    if (h->step != *ck)
      return reply_err(c, h, LOOM_ESTATE,
                       "rank %d ended step %llu, but this ps "
                       "has it at step %llu (did every worker call "
                       "loom_ps_restore? does a rank run twice?)",
                       c->rank, (unsigned long long)h->step, (unsigned long long)*ck);
    *ck = h->step + 1;
    c->admitted = true;
    s->changed = true;
    if (s->mode == LOOM_PS_SYNC) close_steps(s);
  }
  uint64_t slowest = min_clock(s);
  if (s->mode == LOOM_PS_BOUNDED && slowest + (uint64_t)s->staleness < h->step + 1) return PARK;
  ps_hdr r = reply_to(h);
  r.step = s->mode == LOOM_PS_SYNC ? s->step : slowest;
  send_reply(c, &r, NULL, 0);
  return DONE;
}

static int h_barrier(ps_server *s, conn *c, const ps_hdr *h) {
  if (h->len) return CLOSE;
  if (c->rank < 0) return reply_err(c, h, LOOM_EINVAL, "only workers join barriers");
  if (!c->admitted) {
    c->admitted = true;
    c->bar_target = s->bar_gen + 1;
    if (++s->bar_arrived >= (uint64_t)s->workers) {
      s->bar_gen++;
      s->bar_arrived = 0;
      s->changed = true;
    }
  }
  if (s->bar_gen < c->bar_target) return PARK;
  c->bar_target = 0;
  return reply_ok(c, h);
}

/* The directory in a SAVE, COMMIT or RESTORE payload, NUL-terminated: an
 * absolute path or an hdfs:// URL. */
static int dir_of(const ps_hdr *h, const unsigned char *p, char *dir) {
  if (h->len < 2 || h->len > PS_MAX_PATH || memchr(p, 0, h->len)) return -1;
  if (p[0] != '/' && (h->len < 8 || memcmp(p, "hdfs://", 7))) return -1;
  memcpy(dir, p, h->len);
  dir[h->len] = 0;
  return 0;
}

static int h_save(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p) {
  char dir[PS_MAX_PATH + 1];
  if (dir_of(h, p, dir) < 0) return CLOSE;
  if (s->mode == LOOM_PS_SYNC) {
    if (h->step > s->step) return PARK;
    if (h->step < s->step)
      return reply_err(c, h, LOOM_ESTATE,
                       "cannot save step %llu: shard %d is "
                       "already at step %llu",
                       (unsigned long long)h->step, s->cfg.shard, (unsigned long long)s->step);
  }
  uint64_t t0 = loom__now_ms();
  int rc = ps_ckpt_write(&s->st, dir, h->step, s->err, sizeof s->err);
  if (rc < 0) return reply_err(c, h, rc, "shard %d: %s", s->cfg.shard, s->err);
  loom__log(LOOM_LOG_INFO, "ps", "shard %d saved step %llu in %llu ms", s->cfg.shard,
            (unsigned long long)h->step, (unsigned long long)(loom__now_ms() - t0));
  return reply_ok(c, h);
}

static int h_commit(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p) {
  char dir[PS_MAX_PATH + 1];
  if (dir_of(h, p, dir) < 0) return CLOSE;
  if (h->count != (uint32_t)s->cfg.nshards)
    return reply_err(c, h, LOOM_EINVAL, "commit for %u shards; there are %d", h->count,
                     s->cfg.nshards);
  int rc =
      ps_ckpt_commit(dir, h->step, s->cfg.nshards, (int)s->tun.ckpt_keep, s->err, sizeof s->err);
  if (rc < 0) return reply_err(c, h, rc, "%s", s->err);
  return reply_ok(c, h);
}

/* Two phases, so that a checkpoint loads everywhere or nowhere: CHECK
 * resolves the step and verifies this shard's files (state untouched), then
 * a plain RESTORE of that step loads. A shard loads at most once per
 * `latest` in its life: later requests (a late worker's) get the first
 * outcome, so they cannot rewind the others. */
static int h_restore(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p) {
  char dir[PS_MAX_PATH + 1];
  if (dir_of(h, p, dir) < 0) return CLOSE;
  ps_hdr r = reply_to(h);
  bool cached = s->restored && (h->step == PS_STEP_LATEST || h->step == s->restore_step);
  if (h->flags & PS_F_CHECK) {
    if (cached && s->restore_rc < 0)
      return reply_err(c, h, s->restore_rc, "shard %d: %s", s->cfg.shard, s->restore_err);
    uint64_t step = cached ? s->restore_step : h->step;
    int rc = step == PS_STEP_LATEST ? ps_ckpt_latest(dir, &step) : 0;
    if (rc == LOOM_ENOENT) { /* nothing to restore: that is the outcome */
      snprintf(s->restore_err, sizeof s->restore_err, "no checkpoint in %.400s", dir);
      s->restored = true;
      s->restore_rc = rc;
      s->restore_step = PS_STEP_LATEST;
      return reply_err(c, h, rc, "shard %d: %s", s->cfg.shard, s->restore_err);
    }
    if (rc < 0)
      return reply_err(c, h, rc, "shard %d: cannot read %.400s/LATEST", s->cfg.shard, dir);
    if (!cached && (rc = ps_ckpt_verify(&s->st, dir, step, s->err, sizeof s->err)) < 0)
      return reply_err(c, h, rc, "shard %d: %s", s->cfg.shard, s->err);
    r.step = step;
    send_reply(c, &r, NULL, 0);
    return DONE;
  }
  if (!cached) {
    uint64_t step = h->step, t0 = loom__now_ms();
    int rc = step == PS_STEP_LATEST ? ps_ckpt_latest(dir, &step) : 0;
    if (rc == 0)
      rc = ps_ckpt_load(&s->st, dir, step, s->restore_err, sizeof s->restore_err);
    else
      snprintf(s->restore_err, sizeof s->restore_err, "no checkpoint in %.400s", dir);
    if (rc == 0) {
      s->step = step;
      for (int i = 0; s->clock && i < s->workers; i++) s->clock[i] = step;
      s->changed = true;
      loom__log(LOOM_LOG_INFO, "ps", "shard %d restored step %llu in %llu ms", s->cfg.shard,
                (unsigned long long)step, (unsigned long long)(loom__now_ms() - t0));
    }
    s->restored = true;
    s->restore_rc = rc;
    s->restore_step = step;
  }
  if (s->restore_rc < 0)
    return reply_err(c, h, s->restore_rc, "shard %d: %s", s->cfg.shard, s->restore_err);
  r.step = where_is(s, c);
  send_reply(c, &r, NULL, 0);
  return DONE;
}

static int h_info(ps_server *s, conn *c, const ps_hdr *h) {
  if (h->len) return CLOSE;
  json_t *vars = json_array();
  for (uint32_t i = 0; i < s->st.nvars; i++) {
    ps_var *v = s->st.vars[i];
    json_array_append_new(vars, json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "name", v->d.name,
                                          "kind", v->d.kind == PS_DENSE ? "dense" : "sparse",
                                          "size", (json_int_t)v->d.count, "lo", (json_int_t)v->lo,
                                          "hi", (json_int_t)v->hi, "rows", (json_int_t)v->rows.n,
                                          "t", (json_int_t)v->t));
  }
  json_t *clocks = json_array();
  for (int i = 0; s->clock && i < s->workers && i < 256; i++)
    json_array_append_new(clocks, json_integer((json_int_t)s->clock[i]));
  json_t *j = json_pack("{s:i, s:i, s:s, s:i, s:i, s:I, s:I, s:o, s:I, s:I, s:I, s:o}", "shard",
                        s->cfg.shard, "shards", s->cfg.nshards, "mode",
                        s->configured ? MODE_NAMES[s->mode] : "unset", "staleness", s->staleness,
                        "workers", s->workers, "step", (json_int_t)s->step, "slowest",
                        (json_int_t)(s->clock ? min_clock(s) : 0), "clocks", clocks, "bytes",
                        (json_int_t)s->st.mem.used, "max_bytes", (json_int_t)s->st.mem.cap,
                        "connections", (json_int_t)s->nconns, "vars", vars);
  char *js = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!js) return CLOSE;
  ps_hdr r = reply_to(h);
  send_reply(c, &r, js, strlen(js));
  free(js);
  return DONE;
}

static int dispatch(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p) {
  if (h->op == PS_OP_CONFIG) return h_config(s, c, h);
  if (!c->configured) {
    conn_close(s, c, "a request before the connection's configuration");
    return CLOSE;
  }
  switch (h->op) {
  case PS_OP_DECLARE:
    return h_declare(s, c, h, p);
  case PS_OP_PULL:
    return h_pull(s, c, h);
  case PS_OP_PUSH:
    return h_push(s, c, h, p);
  case PS_OP_SPULL:
    return h_spull(s, c, h, p);
  case PS_OP_SPUSH:
    return h_spush(s, c, h, p);
  case PS_OP_STEP:
    return h_step(s, c, h);
  case PS_OP_BARRIER:
    return h_barrier(s, c, h);
  case PS_OP_SAVE:
    return h_save(s, c, h, p);
  case PS_OP_COMMIT:
    return h_commit(s, c, h, p);
  case PS_OP_RESTORE:
    return h_restore(s, c, h, p);
  case PS_OP_INFO:
    return h_info(s, c, h);
  default:
    return CLOSE;
  }
}

/* ---- connections ------------------------------------------------------- */
#define REFUSED "refused connections"

/* Closes c once this turn of the loop is over. A connection that never
 * authenticated is anyone's: its warning goes through the rate limiter. */
static void conn_close(ps_server *s, conn *c, const char *why) {
  if (!c->closing && why) {
    if (c->authed)
      loom__log(LOOM_LOG_WARN, "ps", "shard %d: closing the connection from %s: %s", s->cfg.shard,
                c->peer, why);
    else
      loom__ratelog_warn(&s->refused, "ps", REFUSED, c->peer,
                         "shard %d: closing the unauthenticated connection from %s: %s",
                         s->cfg.shard, c->peer, why);
  }
  loom__fifo_remove(&s->pa, &c->pa);
  c->closing = true;
}

/* Makes room for one more unauthenticated connection: evicts the oldest. */
static void pa_make_room(ps_server *s) {
  while (s->pa.n && s->pa.n >= s->pa_max) {
    conn *old = loom__fifo_oldest(&s->pa);
    char why[96];
    snprintf(why, sizeof why, "evicted: LOOM_PREAUTH_MAX (%zu) connections wait to authenticate",
             s->pa_max);
    conn_close(s, old, old->closing ? NULL : why);
  }
}

/* Feeds the handshake what has arrived; false when the connection must
 * wait for more or was closed (c->closing says which). */
static bool authenticate(ps_server *s, conn *c) {
  unsigned char proof[WIRE_AUTH_MSG_MAX];
  size_t used, plen;
  int rc = wire_auth_server_feed(&c->auth, c->in + c->in_off, c->in_len - c->in_off, &used, proof,
                                 &plen);
  c->in_off += used;
  if (rc == 0) return false;
  if (rc < 0) {
    char why[160];
    snprintf(why, sizeof why, "authentication failed: %s", c->auth.why);
    conn_close(s, c, why);
    return false;
  }
  if (s->nauthed >= (size_t)s->tun.max_conns) {
    char why[96];
    snprintf(why, sizeof why, "LOOM_PS_MAX_CONNS (%lld) authenticated connections open",
             s->tun.max_conns);
    conn_close(s, c, why);
    return false;
  }
  if (out_room(c, plen) < 0) {
    conn_close(s, c, "out of memory");
    return false;
  }
  memcpy(c->out + c->out_len, proof, plen);
  c->out_len += plen;
  conn_flush(c);
  loom__fifo_remove(&s->pa, &c->pa);
  c->authed = true;
  s->nauthed++;
  return true;
}

/* Serves what is complete in the input buffer, in order. */
static void conn_work(ps_server *s, conn *c) {
  while (!c->closing && !c->parked) {
    size_t avail = c->in_len - c->in_off;
    if (!c->authed) {
      if (avail == 0 || !authenticate(s, c)) return;
      continue;
    }
    if (out_pending(c) > OUT_HIGH || avail < PS_HDR) return;
    if ((uintptr_t)(c->in + c->in_off) & 7) { /* keep payloads aligned */
      memmove(c->in, c->in + c->in_off, avail);
      c->in_off = 0;
      c->in_len = avail;
    }
    const unsigned char *p = c->in + c->in_off;
    ps_hdr h;
    ps_hdr_get(p, &h);
    if (h.op == 0 || h.op >= PS_OP__END || h.rc != 0 || h.len > (uint64_t)s->tun.max_msg) {
      char why[96];
      snprintf(why, sizeof why, "bad request header (op %u, %u bytes)", h.op, h.len);
      conn_close(s, c, why);
      return;
    }
    if (avail < PS_HDR + (size_t)h.len) return;
    int r = dispatch(s, c, &h, p + PS_HDR);
    if (r == PARK) {
      c->parked = true;
      return;
    }
    if (r == CLOSE) {
      char why[96];
      snprintf(why, sizeof why, "malformed %s request", ps_op_name(h.op));
      conn_close(s, c, why);
      return;
    }
    c->in_off += PS_HDR + h.len;
    c->admitted = false;
  }
}

/* Reads what the socket has, making room for the head message. */
static void conn_read(ps_server *s, conn *c) {
  if (c->in_off == c->in_len) {
    c->in_off = c->in_len = 0;
    if (c->in_cap > SHRINK_AT) {
      free(c->in);
      c->in = NULL;
      c->in_cap = 0;
    }
  }
  size_t want = IN_MIN;
  size_t avail = c->in_len - c->in_off;
  if (c->authed && avail >= PS_HDR) {
    uint32_t len;
    memcpy(&len, c->in + c->in_off, 4); /* little-endian host */
    if (len <= (uint64_t)s->tun.max_msg && PS_HDR + (size_t)len > want) want = PS_HDR + len;
  }
  if (c->in_cap - c->in_off < want || c->in_cap - c->in_len < 4096) {
    if (c->in_off) {
      memmove(c->in, c->in + c->in_off, avail);
      c->in_off = 0;
      c->in_len = avail;
    }
    if (c->in_cap < want) {
      unsigned char *p = realloc(c->in, want);
      if (!p) {
        conn_close(s, c, "out of memory");
        return;
      }
      c->in = p;
      c->in_cap = want;
    }
  }
  /* TLS hands over a record at a time: read on while it has more */
  do {
    if (c->in_len == c->in_cap) return; /* full of requests behind a parked one */
    ssize_t n = wire_io_recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      conn_close(s, c, NULL); /* the client went away: not worth a warning */
      return;
    }
    c->in_len += (size_t)n;
  } while (c->tls && wire_io_pending(c->fd));
}

/* One step of a connection's TLS handshake. */
static void conn_tls_step(ps_server *s, conn *c) {
  char why[200];
  int rc = wire_io_handshake(c->fd, &c->tls_ww, why, sizeof why);
  if (rc < 0) {
    char msg[260];
    snprintf(msg, sizeof msg, "TLS: %s", why);
    conn_close(s, c, msg);
  } else if (rc == 1) {
    c->tls_hs = false;
    conn_flush(c); /* the challenge */
  }
}

static void conn_free(ps_server *s, conn *c) {
  if (c->bar_target > s->bar_gen && s->bar_arrived > 0) s->bar_arrived--;
  loom__fifo_remove(&s->pa, &c->pa);
  if (c->authed) s->nauthed--;
  wire_io_close(c->fd);
  free(c->in);
  free(c->out);
  free(c);
  s->nconns--;
}

static void conn_accept(ps_server *s) {
  /* a bounded batch: the evicted give their descriptors back between */
  for (int batch = 0; batch < 256; batch++) {
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    int fd = accept4(s->cfg.listen_fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* The oldest waiting connection gives its descriptor back at the
         * end of this turn; until then the listener rests. */
        pa_make_room(s);
        if (s->pa.n) conn_close(s, loom__fifo_oldest(&s->pa), "evicted: out of file descriptors");
        s->accept_paused_until = loom__now_ms() + 50;
        loom__ratelog_warn(&s->refused, "ps", REFUSED, "?",
                           "shard %d: cannot accept a connection: %s", s->cfg.shard,
                           strerror(errno));
      }
      return;
    }
    pa_make_room(s);
    conn *c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->rank = -1;
    c->deadline_ms = loom__now_ms() + (uint64_t)s->auth_ms;
    char host[48] = "?";
    if (sa.ss_family == AF_INET)
      inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, host, sizeof host);
    else if (sa.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, host, sizeof host);
    snprintf(c->peer, sizeof c->peer, "%s", host);
    c->next = s->conns;
    s->conns = c;
    s->nconns++;
    loom__fifo_push(&s->pa, &c->pa, c);
    unsigned char ch[WIRE_AUTH_MSG_MAX];
    size_t chlen;
    if (wire_auth_server_start(&c->auth, &wire_auth_ps, s->secret, NULL, 0, ch, &chlen) < 0 ||
        out_room(c, chlen) < 0) {
      conn_close(s, c, "out of memory or randomness");
      continue;
    }
    memcpy(c->out, ch, chlen);
    c->out_len = chlen;
    if (wire_tls_wanted(fd)) {
      if (wire_io_attach(fd, true, s->secret, wire_auth_ps.label) < 0) {
        conn_close(s, c, "TLS could not start");
        continue;
      }
      c->tls = c->tls_hs = true;
      continue; /* the client speaks first */
    }
    conn_flush(c);
  }
}

/* Tries parked connections again until nothing moves. */
static void unpark(ps_server *s) {
  while (s->changed) {
    s->changed = false;
    for (conn *c = s->conns; c; c = c->next) {
      if (!c->parked || c->closing) continue;
      c->parked = false;
      conn_work(s, c);
    }
  }
}

/* ---- for the fuzz harness ------------------------------------------------ */
int loom__ps_server_feed(ps_server *s, int fd, const void *data, size_t n) {
  conn *c = s->conns;
  if (!c) { /* as conn_accept and authenticate leave one */
    if (!(c = calloc(1, sizeof *c))) return 0;
    c->fd = fd;
    c->rank = -1;
    c->authed = true;
    snprintf(c->peer, sizeof c->peer, "fuzz");
    s->conns = c;
    s->nconns++;
    s->nauthed++;
  }
  if (c->closing) return 0;
  conn_flush(c);
  if (c->in_off) {
    memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
    c->in_len -= c->in_off;
    c->in_off = 0;
  }
  if (n > c->in_cap - c->in_len) {
    unsigned char *p = realloc(c->in, c->in_len + n);
    if (!p) return 0;
    c->in = p;
    c->in_cap = c->in_len + n;
  }
  if (n) memcpy(c->in + c->in_len, data, n);
  c->in_len += n;
  conn_work(s, c);
  unpark(s);
  return !c->closing && !c->parked;
}

/* ---- the server -------------------------------------------------------- */
int loom__ps_server_new(const ps_server_cfg *cfg, ps_server **out) {
  *out = NULL;
  ps_server *s = calloc(1, sizeof *s);
  if (!s) {
    close(cfg->listen_fd);
    return LOOM_ENOMEM;
  }
  s->cfg = *cfg;
  loom__strlcpy(s->secret, cfg->secret ? cfg->secret : "", sizeof s->secret);
  s->cfg.secret = s->secret;
  ps_tunables_load(&s->tun);
  s->auth_ms = (int)loom__tun(LOOM_TUN_AUTH_TIMEOUT_MS);
  long long pa_max = loom__tun(LOOM_TUN_PREAUTH_MAX);
  s->pa_max = pa_max < 1 ? 1 : (size_t)pa_max;
  ps_state_init(&s->st, cfg->shard, cfg->nshards, (uint64_t)s->tun.split_bytes,
                (uint64_t)s->tun.max_memory);
  if (s->tun.threads == 0) { /* the host's cores over its ps tasks, at most 4 */
    cpu_set_t cs;            /* the cores this process may run on (a task's share) */
    long cpus =
        sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : sysconf(_SC_NPROCESSORS_ONLN);
    long co = cfg->colocated > 1 ? cfg->colocated : 1;
    s->tun.threads = cpus / co < 1 ? 1 : cpus / co > 4 ? 4 : cpus / co;
  }
  if (ps_pool_new((int)s->tun.threads, (uint64_t)s->tun.spin_us * 1000u, &s->pool) < 0)
    loom__log(LOOM_LOG_WARN, "ps",
              "shard %d: could not start %lld threads (LOOM_PS_THREADS): serving on one",
              cfg->shard, s->tun.threads);
  s->st.pool = s->pool;
  int fl = fcntl(cfg->listen_fd, F_GETFL);
  if (fl < 0 || fcntl(cfg->listen_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    loom__ps_server_free(s);
    return LOOM_EIO;
  }
  *out = s;
  return 0;
}

int loom__ps_server_threads(const ps_server *s) { return ps_pool_threads(s->pool); }

void loom__ps_server_free(ps_server *s) {
  if (!s) return;
  while (s->conns) {
    conn *c = s->conns;
    s->conns = c->next;
    conn_free(s, c);
  }
  loom__ratelog_flush(&s->refused, "ps", REFUSED);
  if (s->cfg.listen_fd >= 0) close(s->cfg.listen_fd);
  ps_state_free(&s->st);
  ps_pool_free(s->pool);
  free(s->clock);
  free(s);
}

int loom__ps_server_run(ps_server *s) {
  struct pollfd *pfd = NULL;
  conn **who = NULL;
  size_t cap = 0;
  int rc = 0;
  /* after a request, the next one is often a few microseconds away (a
   * worker's next pull or push): poll without sleeping for a while */
  uint64_t spin_until = 0, spin_ns = (uint64_t)s->tun.spin_us * 1000u;
  for (;;) {
    if (s->nconns + 3 > cap) {
      size_t ncap = (s->nconns + 3) * 2;
      struct pollfd *np = realloc(pfd, ncap * sizeof *np);
      if (np) pfd = np;
      conn **nw = realloc(who, ncap * sizeof *nw);
      if (nw) who = nw;
      if (!np || !nw) {
        rc = LOOM_ENOMEM;
        break;
      }
      cap = ncap;
    }
    size_t n = 0;
    uint64_t now = loom__now_ms();
    int timeout = -1;
    pfd[n] = (struct pollfd){.fd = s->cfg.stop_fd, .events = POLLIN};
    who[n++] = NULL;
    pfd[n] = (struct pollfd){.fd = s->cfg.abort_fd, .events = POLLIN};
    who[n++] = NULL;
    size_t lidx = n;
    bool resting = now < s->accept_paused_until;
    pfd[n] = (struct pollfd){.fd = s->cfg.listen_fd, .events = resting ? 0 : POLLIN};
    who[n++] = NULL;
    if (resting) timeout = (int)(s->accept_paused_until - now);
    if (s->refused.suppressed && (timeout < 0 || timeout > 1000)) timeout = 1000;
    for (conn *c = s->conns; c; c = c->next) {
      short ev = 0;
      /* a parked connection reads on until its buffer is full */
      if (out_pending(c) <= OUT_HIGH && (!c->parked || c->in_len - c->in_off < c->in_cap))
        ev |= POLLIN;
      if (out_pending(c)) ev |= POLLOUT;
      if (c->tls_hs) ev = c->tls_ww ? POLLOUT : POLLIN;
      c->tls_held = c->tls && !c->tls_hs && (ev & POLLIN) && wire_io_pending(c->fd);
      if (c->tls_held) timeout = 0;
      pfd[n] = (struct pollfd){.fd = c->fd, .events = ev};
      who[n++] = c;
      if (!c->authed) {
        int left = c->deadline_ms > now ? (int)(c->deadline_ms - now) : 0;
        if (timeout < 0 || left < timeout) timeout = left;
      }
    }
    int pr = timeout == 0 ? poll(pfd, (nfds_t)n, 0) : ps_poll_spin(pfd, n, timeout, spin_until);
    if (pr < 0 && errno == EINTR) continue;
    if (pr > 0 && spin_ns) spin_until = loom__now_ns() + spin_ns;
    if (pr < 0) {
      rc = LOOM_EIO;
      break;
    }
    if (pfd[0].revents) break;
    if (pfd[1].revents) {
      loom__log(LOOM_LOG_INFO, "ps", "shard %d: the job's attempt is over", s->cfg.shard);
      break;
    }
    if (pfd[lidx].revents & POLLIN) conn_accept(s);
    for (size_t i = lidx + 1; i < n; i++) {
      conn *c = who[i];
      short re = pfd[i].revents | (c->tls_held ? POLLIN : 0);
      if (!re || c->closing) continue;
      if (c->tls_hs) {
        conn_tls_step(s, c);
        continue;
      }
      if (re & POLLOUT) conn_flush(c);
      if (re & (POLLIN | POLLHUP | POLLERR)) conn_read(s, c);
      conn_work(s, c);
    }
    now = loom__now_ms();
    /* the queue is in order of arrival: the expired are at its head */
    conn *old;
    while ((old = loom__fifo_oldest(&s->pa)) && now >= old->deadline_ms)
      conn_close(s, old, "did not authenticate in time");
    loom__ratelog_tick(&s->refused, "ps", REFUSED);
    unpark(s);
    for (conn **pp = &s->conns; *pp;) {
      conn *c = *pp;
      if (!c->closing) {
        pp = &c->next;
        continue;
      }
      *pp = c->next;
      conn_free(s, c);
    }
  }
  free(pfd);
  free(who);
  return rc;
}

/* ---- `loom ps` --------------------------------------------------------- */
static int env_index(const char *name, int def) {
  const char *v = getenv(name);
  long long x;
  if (!v || !*v || loom__parse_int(v, 0, 1 << 20, &x) < 0) return def;
  return (int)x;
}

static bool is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  return sa->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* The address to listen on: host (an address, or a name resolved here),
 * or every interface when host is NULL, "*", "0.0.0.0" or "::", or when a
 * name resolves to a loopback address it does not mean ("node1" at
 * 127.0.1.1 in /etc/hosts: the other hosts know it by another address). */
static void bind_addr(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len) {
  struct sockaddr_in any = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
  memcpy(ss, &any, sizeof any);
  *len = sizeof any;
  if (!host || !*host || !strcmp(host, "*") || !strcmp(host, "0.0.0.0")) return;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
  char svc[16];
  snprintf(svc, sizeof svc, "%d", port);
  unsigned char tmp[sizeof(struct in6_addr)];
  bool numeric = inet_pton(AF_INET, host, tmp) == 1 || inet_pton(AF_INET6, host, tmp) == 1;
  if (getaddrinfo(host, svc, &hints, &ai) != 0 || !ai) {
    loom__log(LOOM_LOG_WARN, "ps", "cannot resolve '%s'; listening on every interface", host);
    return;
  }
  if (numeric || strcmp(host, "localhost") == 0 || !is_loopback(ai->ai_addr)) {
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
  } else {
    loom__log(LOOM_LOG_INFO, "ps",
              "'%s' resolves to a loopback address here; "
              "listening on every interface",
              host);
  }
  freeaddrinfo(ai);
}

static int listen_on(const char *host, int port, int *out) {
  struct sockaddr_storage sa;
  socklen_t salen;
  bind_addr(host, port, &sa, &salen);
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return LOOM_EIO;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  /* The agent released the port just before it exec'ed us. */
  uint64_t until = loom__now_ms() + 5000;
  while (bind(fd, (struct sockaddr *)&sa, salen) < 0) {
    if (errno != EADDRINUSE || loom__now_ms() >= until) {
      int e = errno;
      close(fd);
      errno = e;
      return LOOM_EIO;
    }
    usleep(50000);
  }
  if (listen(fd, 1024) < 0) {
    close(fd);
    return LOOM_EIO;
  }
  *out = fd;
  return 0;
}

int loom__ps_main(int argc, char **argv) {
  if (argc > 1) {
    fprintf(stderr,
            "loom ps: unexpected argument '%s' (loom ps takes none; it reads "
            "LOOM_CLUSTER, LOOM_INDEX and LOOM_SECRET from its job)\n",
            argv[1]);
    return LOOM_EXIT_USAGE;
  }
  const char *cl = getenv("LOOM_CLUSTER"), *secret = getenv("LOOM_SECRET");
  if (!cl || !secret || !*secret) {
    fprintf(stderr, "loom ps: LOOM_CLUSTER and LOOM_SECRET are not set: run loom ps as "
                    "the command of a job's ps role (roles: {ps: {command: loom ps}})\n");
    return LOOM_EXIT_USAGE;
  }
  int index = env_index("LOOM_INDEX", 0);
  json_error_t jerr;
  json_t *cj = json_loads(cl, 0, &jerr);
  json_t *list = json_object_get(cj, "ps");
  const char *me = json_string_value(json_array_get(list, (size_t)index));
  char host[256];
  int port = 0;
  if (!me || wire_split_hostport(me, host, sizeof host, &port) < 0) {
    fprintf(stderr,
            "loom ps: LOOM_CLUSTER has no ps task %d (is this the ps role? "
            "LOOM_CLUSTER=%.200s)\n",
            index, cl);
    json_decref(cj);
    return LOOM_EXIT_USAGE;
  }
  int nshards = (int)json_array_size(list), colocated = 0;
  for (int i = 0; i < nshards; i++) { /* the ps tasks on this host */
    char h[256];
    int pt;
    const char *a = json_string_value(json_array_get(list, (size_t)i));
    if (a && wire_split_hostport(a, h, sizeof h, &pt) == 0 && !strcmp(h, host)) colocated++;
  }
  json_decref(cj);
  /* the task's address, not every interface, unless LOOM_PS_BIND says */
  const char *bind_to = loom__tun_str(LOOM_TUN_PS_BIND);
  if (!*bind_to) bind_to = host;
  int lfd;
  if (listen_on(bind_to, port, &lfd) < 0) {
    fprintf(stderr, "loom ps: cannot listen on %s port %d: %s%s\n", bind_to, port, strerror(errno),
            errno == EADDRNOTAVAIL ? " (not an address of this host: set LOOM_PS_BIND, "
                                     "e.g. LOOM_PS_BIND=0.0.0.0)"
                                   : "");
    return LOOM_EXIT_FAILED;
  }
  /* hold LOOM_PS_MAX_CONNS workers, whatever the soft limit was */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  signal(SIGPIPE, SIG_IGN);
  sigset_t ss;
  sigemptyset(&ss);
  sigaddset(&ss, SIGTERM);
  sigaddset(&ss, SIGINT);
  sigprocmask(SIG_BLOCK, &ss, NULL);
  int sfd = signalfd(-1, &ss, SFD_CLOEXEC | SFD_NONBLOCK);
  loom_t *l = NULL;
  if (getenv("LOOM_COORD") && loom_init(&l) < 0) {
    loom__log(LOOM_LOG_WARN, "ps",
              "shard %d: cannot reach the coordinator; "
              "serving without it",
              index);
    l = NULL;
  }
  ps_server_cfg cfg = {.listen_fd = lfd,
                       .stop_fd = sfd,
                       .abort_fd = loom__abort_fd(l),
                       .shard = index,
                       .nshards = nshards,
                       .world = env_index("LOOM_WORLD_SIZE", 0),
                       .colocated = colocated,
                       .secret = secret};
  ps_server *s;
  int rc = sfd < 0 ? LOOM_EIO : loom__ps_server_new(&cfg, &s);
  if (rc == 0) {
    fprintf(stderr, "loom ps: shard %d of %d serving on port %d (%s), %d thread%s\n", index,
            nshards, port, bind_to, loom__ps_server_threads(s),
            loom__ps_server_threads(s) == 1 ? "" : "s");
    if (l) {
      char detail[96];
      snprintf(detail, sizeof detail, "{\"shard\": %d, \"shards\": %d, \"port\": %d}", index,
               nshards, port);
      loom_event(l, "ps_serving", detail);
    }
    rc = loom__ps_server_run(s);
    loom__ps_server_free(s);
  } else if (sfd < 0) {
    close(lfd);
  }
  if (sfd >= 0) close(sfd);
  loom_finish(l);
  if (rc < 0) fprintf(stderr, "loom ps: shard %d failed: %s\n", index, loom_strerror(rc));
  return rc < 0 ? LOOM_EXIT_FAILED : LOOM_EXIT_OK;
}
