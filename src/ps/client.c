/* client.c: the parameter server client of libloom (include/loom/ps.h).
 *
 * A handle holds one authenticated TCP connection per shard. Every public
 * call becomes a batch of requests (a dense variable's chunks on each
 * shard, a sparse call's keys grouped by shard) that ps_exec() (batch.c)
 * drives over all connections at once with poll(): it writes requests as
 * the sockets take them and reads each reply's payload straight into the
 * caller's buffer, so a pull from N shards costs one round trip, not N.
 * Payloads are cut at PS_CHUNK bytes. Replies come back in order per
 * connection, which is how they are matched to requests (and their ids
 * checked). */
#include "lib/lib.h"
#include "fs/fs.h"
#include "ps/ps.h"
#include "ps/client_int.h"
#include "wire/wire_tls.h"
#include "wire/wire.h"
#include "wire/wire_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* Sets the handle's (and the loom handle's) detail text. */
static void ps_vsay(loom_ps_t *ps, int code, const char *fmt, va_list ap) LOOM__PRINTF(3, 0);
static void ps_vsay(loom_ps_t *ps, int code, const char *fmt, va_list ap) {
  vsnprintf(ps->errmsg, sizeof ps->errmsg, fmt, ap);
  if (ps->l) loom__fail(ps->l, code, "%s", ps->errmsg);
}

int ps_fail(loom_ps_t *ps, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ps_vsay(ps, code, fmt, ap);
  va_end(ap);
  return code;
}

int ps_die(loom_ps_t *ps, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ps_vsay(ps, code, fmt, ap);
  va_end(ap);
  ps->dead = code;
  return code;
}

const char *loom_ps_errmsg(const loom_ps_t *ps) { return ps ? ps->errmsg : ""; }
int loom_ps_shards(const loom_ps_t *ps) { return ps ? ps->nshards : 0; }
int64_t loom_ps_clock(const loom_ps_t *ps) { return ps ? ps->step : 0; }
size_t loom_ps_var_size(const loom_ps_var_t *v) { return v ? (size_t)v->d.count : 0; }

/* ---- connecting --------------------------------------------------------- */
static int handshake(loom_ps_t *ps, int s, const char *secret) {
  uint64_t deadline = loom__now_ms() + (uint64_t)loom__tun(LOOM_TUN_AUTH_TIMEOUT_MS);
  char why[200];
  int rc = wire_io_client(ps->links[s].fd, secret, wire_auth_ps.label, deadline, why, sizeof why);
  if (rc < 0) return ps_fail(ps, rc, "ps shard %d at %s: %s", s, ps->links[s].addr, why);
  rc = wire_auth_client_fd(ps->links[s].fd, &wire_auth_ps, secret, NULL, 0, deadline);
  if (rc == LOOM_EAUTH)
    return ps_fail(ps, LOOM_EAUTH,
                   "ps shard %d at %s refused this process's "
                   "credentials or could not prove its own: is LOOM_SECRET this "
                   "job's?",
                   s, ps->links[s].addr);
  if (rc < 0)
    return ps_fail(ps, rc,
                   "ps shard %d at %s does not speak the ps protocol (%s): "
                   "is LOOM_CLUSTER's ps list right?",
                   s, ps->links[s].addr, loom_strerror(rc));
  return 0;
}

/* The ps addresses: opts' list or LOOM_CLUSTER's "ps" array. */
static int parse_servers(loom_ps_t *ps, const char *list) {
  char **addrs = NULL;
  int n = 0;
  json_t *cj = NULL;
  if (list) {
    const char *p = list;
    while (*p && n < PS_MAX_SHARDS) {
      const char *e = strchr(p, ',');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      char **na = realloc(addrs, (size_t)(n + 1) * sizeof *na);
      if (!na) break;
      addrs = na;
      addrs[n++] = strndup(p, len);
      p += len + (e ? 1 : 0);
    }
  } else {
    const char *cl = getenv("LOOM_CLUSTER");
    cj = cl ? json_loads(cl, 0, NULL) : NULL;
    json_t *arr = json_object_get(cj, "ps");
    size_t sz = json_array_size(arr);
    if (sz > PS_MAX_SHARDS) sz = PS_MAX_SHARDS;
    addrs = calloc(sz ? sz : 1, sizeof *addrs);
    for (size_t i = 0; addrs && i < sz; i++) {
      const char *a = json_string_value(json_array_get(arr, i));
      addrs[n++] = strdup(a ? a : "");
    }
    json_decref(cj);
  }
  int rc = n > 0 ? 0 : LOOM_ENOENT;
  if (rc == 0 && !(ps->links = calloc((size_t)n, sizeof *ps->links))) rc = LOOM_ENOMEM;
  for (int i = 0; rc == 0 && i < n; i++) {
    ps->links[i].fd = -1;
    if (!addrs[i] || loom__strlcpy(ps->links[i].addr, addrs[i], sizeof ps->links[i].addr) >=
                         sizeof ps->links[i].addr)
      rc = LOOM_EINVAL;
  }
  if (rc == 0) ps->nshards = n;
  for (int i = 0; i < n; i++) free(addrs[i]);
  free(addrs);
  if (rc == LOOM_ENOENT)
    return ps_fail(ps, rc,
                   "no parameter server: the job has no ps role in "
                   "LOOM_CLUSTER (add `ps: {command: loom ps}` to the spec's roles)");
  return rc < 0 ? ps_fail(ps, rc, "bad ps address list") : 0;
}

static int env_num(const char *name, int def) {
  const char *v = getenv(name);
  long long x;
  if (!v || !*v || loom__parse_int(v, -1, 1 << 30, &x) < 0) return def;
  return (int)x;
}

static int ckpt_dir_of(loom_ps_t *ps, const char *given) {
  const char *d = given ? given : loom__tun_str(LOOM_TUN_PS_CKPT_DIR);
  char buf[PS_MAX_PATH + 1];
  if (!d || !*d) {
    const char *jd = getenv("LOOM_JOB_DIR");
    if (!jd || !*jd) return 0; /* none: save and restore say so */
    if ((size_t)snprintf(buf, sizeof buf, "%s/ps-ckpt", jd) >= sizeof buf) return LOOM_ERANGE;
    d = buf;
  }
  if (d[0] == '/' || loom__fs_remote(d)) {
    if (loom__strlcpy(ps->ckpt_dir, d, sizeof ps->ckpt_dir) >= sizeof ps->ckpt_dir)
      return LOOM_ERANGE;
    return 0;
  }
  char cwd[PS_MAX_PATH];
  if (!getcwd(cwd, sizeof cwd)) return LOOM_ERANGE;
  if ((size_t)snprintf(ps->ckpt_dir, sizeof ps->ckpt_dir, "%s/%s", cwd, d) >= sizeof ps->ckpt_dir)
    return LOOM_ERANGE;
  return 0;
}

int loom_ps_connect(loom_t *l, const loom_ps_opts *opts, loom_ps_t **out) {
  if (!out) return LOOM_EINVAL;
  *out = NULL;
  loom_ps_opts o = {0};
  if (opts) o = *opts;
  if ((unsigned)o.mode > LOOM_PS_BOUNDED || o.staleness < 0 || o.staleness > PS_MAX_STALENESS ||
      o.workers < 0 || o.workers > PS_MAX_WORKERS || o.timeout_ms < 0)
    return l ? loom__fail(l, LOOM_EINVAL, "loom_ps_connect: bad options") : LOOM_EINVAL;
  loom_ps_t *ps = calloc(1, sizeof *ps);
  if (!ps) return LOOM_ENOMEM;
  pthread_mutex_init(&ps->mu, NULL);
  ps->l = l;
  struct ps_tunables tun;
  ps_tunables_load(&tun);
  ps->timeout_ms =
      o.timeout_ms ? o.timeout_ms : (int)(tun.timeout_ms > INT32_MAX ? INT32_MAX : tun.timeout_ms);
  ps->spin_ns = (uint64_t)tun.spin_us * 1000u;
  ps->mode = o.mode;
  ps->staleness = o.staleness;
  ps->rank = o.rank_given ? o.rank : l ? loom_rank(l) : env_num("LOOM_RANK", -1);
  const char *secret = getenv("LOOM_SECRET");
  int rc = 0;
  if (!secret || !*secret) {
    rc = ps_fail(ps, LOOM_ENOENV,
                 "LOOM_SECRET is not set: the ps only talks to "
                 "processes of its job");
    goto fail;
  }
  if (ps->rank < -1 || (ps->rank < 0 && o.mode != LOOM_PS_ASYNC)) {
    rc = ps_fail(ps, LOOM_EINVAL, "%s mode needs a worker's rank (LOOM_RANK), got %d",
                 o.mode == LOOM_PS_SYNC ? "sync" : "bounded", ps->rank);
    goto fail;
  }
  if ((rc = ckpt_dir_of(ps, o.ckpt_dir)) < 0) {
    rc = ps_fail(ps, rc, "checkpoint directory name too long");
    goto fail;
  }
  if ((rc = parse_servers(ps, o.servers)) < 0) goto fail;
  int ctimeout = (int)loom__tun(LOOM_TUN_CONNECT_TIMEOUT_MS);
  for (int s = 0; s < ps->nshards; s++) {
    rc = wire_dial(ps->links[s].addr, ctimeout, &ps->links[s].fd);
    if (rc < 0) {
      rc = ps_fail(ps, LOOM_ECONN,
                   "cannot reach ps shard %d at %s within %d ms "
                   "(LOOM_CONNECT_TIMEOUT): did the ps task start?",
                   s, ps->links[s].addr, ctimeout);
      goto fail;
    }
    int fl = fcntl(ps->links[s].fd, F_GETFL);
    if (fl >= 0) fcntl(ps->links[s].fd, F_SETFL, fl | O_NONBLOCK);
    if ((rc = handshake(ps, s, secret)) < 0) goto fail;
  }
  ps_call *calls = calloc((size_t)(unsigned)ps->nshards, sizeof *calls);
  if (!calls) {
    rc = LOOM_ENOMEM;
    goto fail;
  }
  for (int s = 0; s < ps->nshards; s++) {
    calls[s].shard = s;
    calls[s].h = (ps_hdr){.op = PS_OP_CONFIG,
                          .flags = (uint16_t)o.mode,
                          .count = (uint32_t)o.staleness,
                          .off = (uint64_t)o.workers};
  }
  rc = ps_run(ps, calls, (size_t)ps->nshards);
  for (int s = 0; rc == 0 && s < ps->nshards; s++) {
    ps_hdr *r = &calls[s].rep;
    if (r->var != (uint32_t)s || r->count != (uint32_t)ps->nshards)
      rc = ps_fail(ps, LOOM_EPROTO,
                   "%s says it is ps shard %u of %u; LOOM_CLUSTER "
                   "has it as %d of %d",
                   ps->links[s].addr, r->var, r->count, s, ps->nshards);
  }
  if (rc == 0) {
    ps->workers = (int)calls[0].rep.off;
    ps->step = (int64_t)calls[0].rep.step;
  }
  free(calls);
  if (rc < 0) goto fail;
  *out = ps;
  return 0;
fail:
  if (l && rc < 0 && ps->errmsg[0]) loom__fail(l, rc, "%s", ps->errmsg);
  loom_ps_close(ps);
  return rc;
}

void loom_ps_close(loom_ps_t *ps) {
  if (!ps) return;
  for (int s = 0; ps->links && s < ps->nshards; s++)
    if (ps->links[s].fd >= 0) wire_io_close(ps->links[s].fd);
  for (int i = 0; i < ps->nvars; i++) {
    free(ps->vars[i]->id);
    free(ps->vars[i]->lo);
    free(ps->vars[i]->hi);
    free(ps->vars[i]);
  }
  free(ps->vars);
  free(ps->links);
  free(ps->arena);
  for (int s = 0; ps->lanes && s < ps->nshards; s++) free(ps->lanes[s].stash);
  free(ps->lanes);
  free(ps->pfd);
  free(ps->who);
  free(ps->order);
  free(ps->calls);
  pthread_mutex_destroy(&ps->mu);
  free(ps);
}

/* ---- declaring ---------------------------------------------------------- */
static int declare(loom_ps_t *ps, ps_decl *d, loom_ps_var_t **out) {
  /* Check it here with the server's own parser: same messages, no trip. */
  ps_wbuf w = {0};
  ps_decl_put(&w, d);
  if (w.bad) return ps_fail(ps, LOOM_ENOMEM, "out of memory");
  loom__cur rb = {.p = w.p, .len = w.len};
  ps_decl chk;
  char err[PS_MAX_ERRMSG];
  int rc = ps_decl_get(&rb, &chk, err, sizeof err);
  if (rc < 0) {
    free(w.p);
    return ps_fail(ps, rc, "%s", err);
  }
  loom_ps_var_t *v = NULL;
  for (int i = 0; i < ps->nvars && !v; i++)
    if (!strcmp(ps->vars[i]->d.name, d->name)) v = ps->vars[i];
  bool fresh = !v;
  if (fresh) {
    v = calloc(1, sizeof *v);
    if (v) {
      v->id = calloc((size_t)ps->nshards, sizeof *v->id);
      v->lo = calloc((size_t)ps->nshards, sizeof *v->lo);
      v->hi = calloc((size_t)ps->nshards, sizeof *v->hi);
    }
    if (!v || !v->id || !v->lo || !v->hi) rc = LOOM_ENOMEM;
  }
  ps_call *calls = rc == 0 ? calloc((size_t)ps->nshards, sizeof *calls) : NULL;
  if (rc == 0 && !calls) rc = LOOM_ENOMEM;
  for (int s = 0; rc == 0 && s < ps->nshards; s++) {
    calls[s].shard = s;
    calls[s].h.op = PS_OP_DECLARE;
    calls[s].p1 = w.p;
    calls[s].n1 = w.len;
  }
  if (rc == 0)
    rc = ps_run(ps, calls, (size_t)ps->nshards);
  else
    rc = ps_fail(ps, rc, "out of memory");
  uint64_t total = 0;
  for (int s = 0; rc == 0 && s < ps->nshards; s++) {
    v->id[s] = calls[s].rep.var;
    v->lo[s] = calls[s].rep.off;
    v->hi[s] = calls[s].rep.step;
    if (d->kind == PS_DENSE && (v->lo[s] > v->hi[s] || v->hi[s] > d->count)) rc = LOOM_EPROTO;
    total += v->hi[s] - v->lo[s];
  }
  /* The parts must tile the variable: shards configured alike agree. */
  for (int a = 0; rc == 0 && d->kind == PS_DENSE && a < ps->nshards; a++)
    for (int b = a + 1; rc == 0 && b < ps->nshards; b++)
      if (v->lo[a] < v->hi[b] && v->lo[b] < v->hi[a]) rc = LOOM_EPROTO;
  if (rc == LOOM_EPROTO || (rc == 0 && d->kind == PS_DENSE && total != d->count))
    rc = ps_fail(ps, LOOM_EPROTO,
                 "the ps shards disagree on where '%s' lives: do "
                 "they all have the same LOOM_PS_SPLIT_BYTES?",
                 d->name);
  free(calls);
  free(w.p);
  if (rc == 0 && fresh && ps->nvars == ps->vcap) {
    int cap = ps->vcap ? ps->vcap * 2 : 16;
    loom_ps_var_t **nv = realloc(ps->vars, (size_t)cap * sizeof *nv);
    if (!nv)
      rc = ps_fail(ps, LOOM_ENOMEM, "out of memory");
    else
      ps->vars = nv, ps->vcap = cap;
  }
  if (rc < 0) {
    if (fresh && v) {
      free(v->id);
      free(v->lo);
      free(v->hi);
      free(v);
    }
    return rc;
  }
  v->d = *d;
  if (fresh) ps->vars[ps->nvars++] = v;
  *out = v;
  return 0;
}

static int decl_common(loom_ps_t *ps, const char *name, const loom_ps_init *init,
                       const loom_ps_opt *opt, ps_decl *d) {
  memset(d, 0, sizeof *d);
  if (!name || !*name || strlen(name) > PS_MAX_NAME)
    return ps_fail(ps, LOOM_EINVAL, "a variable's name is 1..%d bytes", PS_MAX_NAME);
  if (!opt) return ps_fail(ps, LOOM_EINVAL, "'%s': no optimizer given", name);
  loom__strlcpy(d->name, name, sizeof d->name);
  if (init) d->init = *init;
  d->opt = *opt;
  return 0;
}

#define PUBLIC_ENTER(ps)                                                                           \
  do {                                                                                             \
    if (!(ps)) return LOOM_EINVAL;                                                                 \
    pthread_mutex_lock(&(ps)->mu);                                                                 \
  } while (0)
#define PUBLIC_LEAVE(ps, rc)                                                                       \
  do {                                                                                             \
    pthread_mutex_unlock(&(ps)->mu);                                                               \
    return (rc);                                                                                   \
  } while (0)

int loom_ps_dense(loom_ps_t *ps, const char *name, const size_t *shape, int ndim,
                  const loom_ps_init *init, const loom_ps_opt *opt, loom_ps_var_t **var) {
  PUBLIC_ENTER(ps);
  ps_decl d;
  int rc = decl_common(ps, name, init, opt, &d);
  if (rc == 0 && (!var || !shape || ndim < 1 || ndim > PS_MAX_DIMS))
    rc = ps_fail(ps, LOOM_EINVAL,
                 "'%s': give 1..%d dimensions and a place for the "
                 "handle",
                 name, PS_MAX_DIMS);
  if (rc == 0) {
    d.kind = PS_DENSE;
    d.ndim = (uint32_t)ndim;
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
      d.shape[i] = shape[i];
      count = shape[i] && count <= PS_MAX_COUNT / shape[i] ? count * shape[i] : PS_MAX_COUNT + 1;
    }
    d.count = count;
    rc = declare(ps, &d, var);
  }
  PUBLIC_LEAVE(ps, rc);
}

int loom_ps_sparse(loom_ps_t *ps, const char *name, size_t dim, const loom_ps_init *init,
                   const loom_ps_opt *opt, loom_ps_var_t **var) {
  PUBLIC_ENTER(ps);
  ps_decl d;
  int rc = decl_common(ps, name, init, opt, &d);
  if (rc == 0 && !var) rc = ps_fail(ps, LOOM_EINVAL, "no place for the handle");
  if (rc == 0) {
    d.kind = PS_SPARSE;
    d.ndim = 1;
    d.count = d.shape[0] = dim;
    rc = declare(ps, &d, var);
  }
  PUBLIC_LEAVE(ps, rc);
}

/* ---- dense -------------------------------------------------------------- */
static int var_check(loom_ps_t *ps, const loom_ps_var_t *v, int kind, const void *buf) {
  if (!v || !buf) return ps_fail(ps, LOOM_EINVAL, "no variable or no buffer");
  if (v->d.kind != (uint32_t)kind)
    return ps_fail(ps, LOOM_EINVAL, "'%s' is %s", v->d.name,
                   v->d.kind == PS_DENSE ? "dense: use loom_ps_pull/push"
                                         : "sparse: use loom_ps_sparse_pull/push");
  return ps->dead;
}

/* n zeroed calls from the handle's reusable array (NULL without memory):
 * dense and sparse calls allocate nothing once it is big enough. */
static ps_call *calls_get(loom_ps_t *ps, size_t n) {
  if (n > ps->calls_cap || !ps->calls) {
    size_t cap = n < 8 ? 8 : n;
    ps_call *c = realloc(ps->calls, cap * sizeof *c);
    if (!c) return NULL;
    ps->calls = c;
    ps->calls_cap = cap;
  }
  memset(ps->calls, 0, n * sizeof *ps->calls);
  return ps->calls;
}

/* One call per PS_CHUNK of each shard's part of v. */
static int dense_calls(loom_ps_t *ps, loom_ps_var_t *v, int op, float *out, const float *grad,
                       ps_call **callsp, size_t *np) {
  const uint64_t per = PS_CHUNK / sizeof(float);
  size_t n = 0;
  for (int s = 0; s < ps->nshards; s++) n += (size_t)((v->hi[s] - v->lo[s] + per - 1) / per);
  ps_call *calls = calls_get(ps, n);
  if (!calls) return ps_fail(ps, LOOM_ENOMEM, "out of memory");
  size_t k = 0;
  for (int s = 0; s < ps->nshards; s++) {
    for (uint64_t off = v->lo[s]; off < v->hi[s]; off += per) {
      uint64_t cnt = v->hi[s] - off < per ? v->hi[s] - off : per;
      ps_call *c = &calls[k++];
      c->shard = s;
      c->h = (ps_hdr){.op = (uint16_t)op,
                      .var = v->id[s],
                      .count = (uint32_t)cnt,
                      .step = (uint64_t)ps->step,
                      .off = off};
      if (op == PS_OP_PULL) {
        c->dst = out + off;
        c->dst_len = cnt * sizeof(float);
        if (ps->rank < 0) c->h.flags = PS_F_NOWAIT;
      } else {
        c->p1 = grad + off;
        c->n1 = cnt * sizeof(float);
        if (off == v->lo[s]) c->h.flags = PS_F_FIRST;
      }
    }
  }
  *callsp = calls;
  *np = n;
  return 0;
}

static int dense_io(loom_ps_t *ps, loom_ps_var_t *v, int op, float *out, const float *grad) {
  PUBLIC_ENTER(ps);
  int rc = var_check(ps, v, PS_DENSE, op == PS_OP_PULL ? (const void *)out : grad);
  ps_call *calls = NULL;
  size_t n = 0;
  if (rc == 0) rc = dense_calls(ps, v, op, out, grad, &calls, &n);
  if (rc == 0) rc = ps_run(ps, calls, n);
  PUBLIC_LEAVE(ps, rc);
}

int loom_ps_pull(loom_ps_t *ps, loom_ps_var_t *var, float *out) {
  return dense_io(ps, var, PS_OP_PULL, out, NULL);
}

int loom_ps_push(loom_ps_t *ps, loom_ps_var_t *var, const float *grad) {
  if (ps && ps->rank < 0 && ps->mode == LOOM_PS_SYNC) {
    pthread_mutex_lock(&ps->mu);
    int rc = ps_fail(ps, LOOM_EINVAL, "only workers push in sync mode");
    PUBLIC_LEAVE(ps, rc);
  }
  return dense_io(ps, var, PS_OP_PUSH, NULL, grad);
}

/* ---- sparse ------------------------------------------------------------ */
/* A sparse call's keys grouped by shard, a push's duplicates merged:
 * shard s's keys are gk[first[s] .. first[s+1]), keys[i] is gk[pos[i]],
 * and rows[pos[i] * dim] its row. A pull's are not merged: a repeated key
 * is asked for (and its row sent) again, which costs less than finding
 * the repeats, and leaves a pull from one shard nothing to do. All of it
 * lives in the handle's arena (or is the caller's keys). */
typedef struct {
  const uint64_t *gk;
  size_t *pos;
  size_t *where; /* keys[i] is the where[i]-th key seen first */
  float *rows;
  size_t first[PS_MAX_SHARDS + 1]; /* [0..nshards] set */
  size_t nu;
  bool identity; /* one shard, no key merged: gk is keys, pos[i] is i (not set) */
} ps_groups;

#define ARENA_KEEP (64u << 20) /* an arena past this is freed after the call */

/* Slices of the handle's arena, 8-byte aligned; NULL without memory. */
static void *arena(loom_ps_t *ps, size_t need) {
  if (need > ps->arena_cap) {
    free(ps->arena);
    ps->arena = malloc(need);
    ps->arena_cap = ps->arena ? need : 0;
  }
  return ps->arena;
}

static void arena_trim(loom_ps_t *ps) {
  if (ps->arena_cap > ARENA_KEEP) {
    free(ps->arena);
    ps->arena = NULL;
    ps->arena_cap = 0;
  }
}

static int group_keys(loom_ps_t *ps, const uint64_t *keys, size_t n, size_t dim, bool merge,
                      ps_groups *g) {
  g->nu = 0;
  g->identity = false;
  memset(g->first, 0, ((size_t)ps->nshards + 1) * sizeof *g->first);
  size_t tsize = 16;
  while (tsize < 2 * n) tsize *= 2;
  size_t m = n ? n : 1;
  /* table[tsize] u32 | uniq, gk [m] u64 | where, slot, pos [m] size_t |
   * shard [m] int | rows [m * dim] float */
  size_t need = tsize * 4 + m * 8 * 2 + m * sizeof(size_t) * 3 + m * sizeof(int) +
                m * dim * sizeof(float) + 64;
  char *p = arena(ps, need);
  if (!p) return ps_fail(ps, LOOM_ENOMEM, "out of memory for %zu keys", n);
#define CARVE(ptr, count)                                                                          \
  (ptr) = (void *)p;                                                                               \
  p += ((count) * sizeof *(ptr) + 7) & ~(size_t)7
  uint32_t *table;
  uint64_t *uniq, *gk;
  size_t *where, *slot;
  int *shard;
  CARVE(table, tsize);
  CARVE(uniq, m);
  CARVE(gk, m);
  CARVE(where, m);
  CARVE(slot, m);
  CARVE(g->pos, m);
  CARVE(shard, m);
  CARVE(g->rows, m * dim);
#undef CARVE
  const uint64_t *uq = uniq; /* the keys in order of first sight */
  size_t nu = 0, mask = tsize - 1;
  if (!merge) {
    uq = keys;
    nu = n;
  } else {
    memset(table, 0, tsize * sizeof *table);
  }
  for (size_t i = 0; merge && i < n; i++) {
    size_t h = (size_t)ps_mix64(keys[i]) & mask;
    while (table[h] && uniq[table[h] - 1] != keys[i]) h = (h + 1) & mask;
    if (!table[h]) {
      uniq[nu] = keys[i];
      table[h] = (uint32_t)++nu;
    }
    where[i] = table[h] - 1;
  }
  g->nu = nu;
  g->where = merge ? where : NULL;
  if (ps->nshards == 1) { /* nothing to group: the unique keys in order */
    g->first[1] = nu;
    g->gk = uq;
    g->identity = nu == n && n > 0;
    if (!g->identity)
      for (size_t i = 0; i < n; i++) g->pos[i] = where[i];
    return 0;
  }
  for (size_t u = 0; u < nu; u++) {
    shard[u] = ps_key_shard(uq[u], ps->nshards);
    g->first[shard[u] + 1]++;
  }
  for (int s = 0; s < ps->nshards; s++) g->first[s + 1] += g->first[s];
  size_t fill[PS_MAX_SHARDS];
  memcpy(fill, g->first, (size_t)ps->nshards * sizeof *fill);
  for (size_t u = 0; u < nu; u++) {
    slot[u] = fill[shard[u]]++;
    gk[slot[u]] = uq[u];
  }
  g->gk = gk;
  for (size_t i = 0; i < n; i++) g->pos[i] = merge ? slot[where[i]] : slot[i];
  return 0;
}

static int sparse_io(loom_ps_t *ps, loom_ps_var_t *v, const uint64_t *keys, size_t n, bool pull,
                     float *out, const float *grad) {
  PUBLIC_ENTER(ps);
  const void *buf = pull ? (const void *)out : grad;
  int rc = var_check(ps, v, PS_SPARSE, n ? buf : (const void *)v);
  if (rc == 0 && n && !keys) rc = ps_fail(ps, LOOM_EINVAL, "no keys");
  if (rc == 0 && n >= UINT32_MAX) rc = ps_fail(ps, LOOM_ERANGE, "too many keys at once");
  if (rc == 0 && !pull && ps->rank < 0 && ps->mode == LOOM_PS_SYNC)
    rc = ps_fail(ps, LOOM_EINVAL, "only workers push in sync mode");
  /* In sync mode every shard hears of every push (an empty one if none of
   * the keys are its), so a table's update count moves alike everywhere. */
  bool everyone = !pull && ps->mode == LOOM_PS_SYNC;
  if (rc < 0 || (n == 0 && !everyone)) PUBLIC_LEAVE(ps, rc);
  size_t dim = (size_t)v->d.count, row = dim * sizeof(float);
  ps_groups g;
  ps_call *calls = NULL;
  if ((rc = group_keys(ps, keys, n, dim, !pull, &g)) < 0) PUBLIC_LEAVE(ps, rc);
  size_t per = pull ? PS_CHUNK / (row > 8 ? row : 8) : PS_CHUNK / (8 + row);
  if (per < 1) per = 1;
  size_t ncalls = 0;
  for (int s = 0; s < ps->nshards; s++) {
    size_t k = g.first[s + 1] - g.first[s];
    ncalls += k ? (k + per - 1) / per : everyone;
  }
  calls = calls_get(ps, ncalls);
  if (!calls) {
    rc = ps_fail(ps, LOOM_ENOMEM, "out of memory for %zu rows of '%s'", g.nu, v->d.name);
    goto out;
  }
  /* One shard and no key twice: the keys, gradients and rows are the
   * caller's, sent from and received into where they are. */
  float *rows = g.identity ? (pull ? out : (float *)grad) : g.rows;
  if (!pull && !g.identity) { /* gather, summing the gradients of repeated keys */
    size_t seen = 0;
    for (size_t i = 0; i < n; i++) {
      float *restrict dst = g.rows + g.pos[i] * dim;
      const float *restrict src = grad + i * dim;
      if (g.where[i] == seen) { /* its first sight */
        memcpy(dst, src, row);
        seen++;
      } else {
        for (size_t j = 0; j < dim; j++) dst[j] += src[j];
      }
    }
  }
  size_t c = 0;
  for (int s = 0; s < ps->nshards; s++) {
    size_t a = g.first[s], b = g.first[s + 1];
    if (a == b && !everyone) continue;
    bool first = true;
    do {
      size_t k = b - a < per ? b - a : per;
      ps_call *cl = &calls[c++];
      cl->shard = s;
      cl->h = (ps_hdr){.op = pull ? PS_OP_SPULL : PS_OP_SPUSH,
                       .var = v->id[s],
                       .count = (uint32_t)k,
                       .step = (uint64_t)ps->step};
      cl->p1 = g.gk + a;
      cl->n1 = k * sizeof(uint64_t);
      if (pull) {
        cl->dst = rows + a * dim;
        cl->dst_len = k * row;
        if (ps->rank < 0) cl->h.flags = PS_F_NOWAIT;
      } else {
        cl->p2 = rows + a * dim;
        cl->n2 = k * row;
        if (first) cl->h.flags = PS_F_FIRST;
      }
      first = false;
      a += k;
    } while (a < b);
  }
  rc = ps_run(ps, calls, c);
  if (rc == 0 && pull && !g.identity)
    for (size_t i = 0; i < n; i++) memcpy(out + i * dim, g.rows + g.pos[i] * dim, row);
out:
  arena_trim(ps);
  PUBLIC_LEAVE(ps, rc);
}

int loom_ps_sparse_pull(loom_ps_t *ps, loom_ps_var_t *var, const uint64_t *keys, size_t n,
                        float *out) {
  return sparse_io(ps, var, keys, n, true, out, NULL);
}

int loom_ps_sparse_push(loom_ps_t *ps, loom_ps_var_t *var, const uint64_t *keys, size_t n,
                        const float *grad) {
  return sparse_io(ps, var, keys, n, false, NULL, grad);
}

/* ---- steps, barrier ----------------------------------------------------- */
/* One call to every shard (or just shard 0), with path as the payload.
 * *callsp (freed by the caller) holds the replies; refusals are returned
 * as errors unless keep_refusals. */
static int to_all(loom_ps_t *ps, int op, uint64_t step, const char *path, bool only0,
                  ps_call **callsp, bool keep_refusals) {
  uint16_t flags = keep_refusals && op == PS_OP_RESTORE ? PS_F_CHECK : 0;
  int n = only0 ? 1 : ps->nshards;
  ps_call *calls = calloc((size_t)n, sizeof *calls);
  *callsp = calls;
  if (!calls) return ps_fail(ps, LOOM_ENOMEM, "out of memory");
  for (int s = 0; s < n; s++) {
    calls[s].shard = s;
    calls[s].h = (ps_hdr){.op = (uint16_t)op,
                          .step = step,
                          .flags = flags,
                          .count = op == PS_OP_COMMIT ? (uint32_t)ps->nshards : 0};
    if (path) {
      calls[s].p1 = path;
      calls[s].n1 = strlen(path);
    }
  }
  return keep_refusals ? ps_exec(ps, calls, (size_t)n) : ps_run(ps, calls, (size_t)n);
}

int loom_ps_step(loom_ps_t *ps) {
  PUBLIC_ENTER(ps);
  int rc = ps->dead;
  if (rc == 0 && ps->mode != LOOM_PS_ASYNC) {
    if (ps->rank < 0) rc = ps_fail(ps, LOOM_EINVAL, "only workers end steps");
    ps_call *calls = NULL;
    if (rc == 0) rc = to_all(ps, PS_OP_STEP, (uint64_t)ps->step, NULL, false, &calls, false);
    free(calls);
  }
  if (rc == 0) ps->step++;
  PUBLIC_LEAVE(ps, rc);
}

int loom_ps_barrier(loom_ps_t *ps) {
  PUBLIC_ENTER(ps);
  int rc = ps->dead;
  if (rc == 0 && ps->rank < 0) rc = ps_fail(ps, LOOM_EINVAL, "only workers join barriers");
  ps_call *calls = NULL;
  if (rc == 0) rc = to_all(ps, PS_OP_BARRIER, 0, NULL, true, &calls, false);
  free(calls);
  PUBLIC_LEAVE(ps, rc);
}

/* ---- checkpoints -------------------------------------------------------- */
int loom_ps_save(loom_ps_t *ps, int64_t step) {
  PUBLIC_ENTER(ps);
  int rc = ps->dead;
  if (rc == 0 && !ps->ckpt_dir[0])
    rc = ps_fail(ps, LOOM_EINVAL,
                 "no checkpoint directory: outside a job, set "
                 "loom_ps_opts.ckpt_dir or LOOM_PS_CKPT_DIR");
  if (rc == 0 && step < 0) rc = ps_fail(ps, LOOM_EINVAL, "a step is >= 0");
  if (rc == 0 && ps->mode == LOOM_PS_SYNC && step != ps->step)
    rc = ps_fail(ps, LOOM_EINVAL,
                 "in sync mode save the step this worker is at "
                 "(loom_ps_clock() = %lld), not %lld",
                 (long long)ps->step, (long long)step);
  ps_call *calls = NULL;
  if (rc == 0) rc = to_all(ps, PS_OP_SAVE, (uint64_t)step, ps->ckpt_dir, false, &calls, false);
  free(calls);
  calls = NULL;
  if (rc == 0) rc = to_all(ps, PS_OP_COMMIT, (uint64_t)step, ps->ckpt_dir, true, &calls, false);
  free(calls);
  PUBLIC_LEAVE(ps, rc);
}

/* Two phases (see h_restore): every shard verifies, then every shard
 * loads; a damaged or missing file anywhere changes nothing anywhere. */
int loom_ps_restore(loom_ps_t *ps, int64_t *step) {
  PUBLIC_ENTER(ps);
  int rc = ps->dead;
  if (rc == 0 && !step) rc = ps_fail(ps, LOOM_EINVAL, "no place for the step");
  if (rc == 0 && !ps->ckpt_dir[0])
    rc = ps_fail(ps, LOOM_EINVAL,
                 "no checkpoint directory: outside a job, set "
                 "loom_ps_opts.ckpt_dir or LOOM_PS_CKPT_DIR");
  ps_call *calls = NULL;
  uint64_t want = step && *step >= 0 ? (uint64_t)*step : PS_STEP_LATEST;
  if (rc == 0) {
    rc = to_all(ps, PS_OP_RESTORE, want, ps->ckpt_dir, false, &calls, true); /* check */
  }
  if (rc == 0) {
    int none = 0;
    for (int s = 0; s < ps->nshards; s++) none += calls[s].rep.rc == LOOM_ENOENT;
    if (none == ps->nshards)
      rc = ps_fail(ps, LOOM_ENOENT, "no checkpoint in %s", ps->ckpt_dir);
    else
      rc = ps_first_refusal(ps, calls, (size_t)ps->nshards);
    for (int s = 1; rc == 0 && s < ps->nshards; s++)
      if (calls[s].rep.step != calls[0].rep.step)
        rc = ps_fail(ps, LOOM_EIO,
                     "the ps shards found different checkpoints "
                     "(step %llu on shard 0, %llu on shard %d)",
                     (unsigned long long)calls[0].rep.step, (unsigned long long)calls[s].rep.step,
                     s);
  }
  if (rc == 0) {
    want = calls[0].rep.step;
    free(calls);
    calls = NULL;
    rc = to_all(ps, PS_OP_RESTORE, want, ps->ckpt_dir, false, &calls, false);
  }
  for (int s = 1; rc == 0 && s < ps->nshards; s++)
    if (calls[s].rep.step != calls[0].rep.step)
      rc = ps_fail(ps, LOOM_EIO, "the ps shards restored different steps");
  if (rc == 0) {
    ps->step = (int64_t)calls[0].rep.step;
    *step = ps->step;
  }
  free(calls);
  PUBLIC_LEAVE(ps, rc);
}

int loom_ps_info(loom_ps_t *ps, int shard, char **json) {
  PUBLIC_ENTER(ps);
  int rc = ps->dead;
  if (rc == 0 && (!json || shard < 0 || shard >= ps->nshards))
    rc = ps_fail(ps, LOOM_EINVAL, "no shard %d (there are %d)", shard, ps->nshards);
  ps_call c = {.shard = shard, .h = {.op = PS_OP_INFO}, .any_len = true};
  if (rc == 0) rc = ps_run(ps, &c, 1);
  if (rc == 0) {
    *json = c.alloc;
    c.alloc = NULL;
  }
  free(c.alloc);
  PUBLIC_LEAVE(ps, rc);
}
