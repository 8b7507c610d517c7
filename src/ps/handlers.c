/* handlers.c: what a shard of `loom ps` does with each request
 * (server_int.h): queuing replies, steps and clocks, one handler per op and
 * the dispatch. A handler never blocks: it replies (DONE), parks its
 * connection until the step, a clock or the barrier moves (PARK), or has
 * the connection closed (CLOSE). server.c owns the connections, the poll
 * loop and `loom ps`'s main. */
#include "lib/lib.h"
#include "ps/ps.h"
#include "ps/server.h"
#include "ps/server_int.h"
#include "wire/wire_tls.h"
#include "wire/wire.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *MODE_NAMES[] = {"async", "sync", "bounded"};

/* ---- output ------------------------------------------------------------ */
size_t ps_out_pending(const conn *c) { return c->out_len - c->out_off; }

int ps_out_room(conn *c, size_t n) {
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

void ps_conn_flush(conn *c) {
  if (c->tls_hs) return; /* the challenge waits for TLS */
  while (ps_out_pending(c) && !c->closing) {
    ssize_t n = wire_io_send(c->fd, c->out + c->out_off, ps_out_pending(c), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      c->closing = true;
      return;
    }
    c->out_off += (size_t)n;
  }
  if (!ps_out_pending(c)) {
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
  if (!ps_out_pending(c)) {
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
  if (ps_out_room(c, total - done) < 0) {
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
  loom__cur rb = {.p = p, .len = h->len};
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
  if (ps_out_room(c, PS_HDR + bytes) < 0) return CLOSE;
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
  ps_conn_flush(c);
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

int ps_dispatch(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p) {
  if (h->op == PS_OP_CONFIG) return h_config(s, c, h);
  if (!c->configured) {
    ps_conn_close(s, c, "a request before the connection's configuration");
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
