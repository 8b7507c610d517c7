/* proto.c: the parameter server's shared vocabulary: tunables, the request
 * header, field codecs, declarations, and where a key or a range lives. */
#include "ps/ps.h"
#include "core/bytes.h"

#include <math.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ps_tunables_load(struct ps_tunables *t) {
  t->timeout_ms = loom__tun(LOOM_TUN_PS_TIMEOUT_MS);
  t->max_msg = loom__tun(LOOM_TUN_PS_MAX_MSG);
  t->max_memory = loom__tun(LOOM_TUN_PS_MAX_MEMORY);
  t->split_bytes = loom__tun(LOOM_TUN_PS_SPLIT_BYTES);
  t->max_conns = loom__tun(LOOM_TUN_PS_MAX_CONNS);
  t->ckpt_keep = loom__tun(LOOM_TUN_PS_CKPT_KEEP);
  t->spin_us = loom__tun(LOOM_TUN_PS_SPIN_US);
  t->threads = loom__tun(LOOM_TUN_PS_THREADS); /* 0: the server's choice */
  if (t->max_msg < PS_MIN_MAX_MSG) t->max_msg = PS_MIN_MAX_MSG;
  if (t->max_msg > (1LL << 30)) t->max_msg = 1LL << 30;
}

int ps_poll_spin(struct pollfd *pfd, size_t n, int timeout_ms, uint64_t spin_until_ns) {
  while (loom__now_ns() < spin_until_ns) {
    int pr = poll(pfd, (nfds_t)n, 0);
    if (pr != 0) return pr;
    sched_yield();
  }
  return poll(pfd, (nfds_t)n, timeout_ms);
}

/* ---- header ------------------------------------------------------------ */
void ps_hdr_put(unsigned char p[PS_HDR], const ps_hdr *h) {
  loom__put_le32(p, h->len);
  loom__put_le16(p + 4, h->op);
  loom__put_le16(p + 6, h->flags);
  loom__put_le32(p + 8, h->var);
  loom__put_le32(p + 12, (uint32_t)h->rc);
  loom__put_le32(p + 16, h->count);
  loom__put_le32(p + 20, (uint32_t)h->rank);
  loom__put_le64(p + 24, h->id);
  loom__put_le64(p + 32, h->step);
  loom__put_le64(p + 40, h->off);
}

void ps_hdr_get(const unsigned char p[PS_HDR], ps_hdr *h) {
  h->len = loom__get_le32(p);
  h->op = loom__get_le16(p + 4);
  h->flags = loom__get_le16(p + 6);
  h->var = loom__get_le32(p + 8);
  h->rc = (int32_t)loom__get_le32(p + 12);
  h->count = loom__get_le32(p + 16);
  h->rank = (int32_t)loom__get_le32(p + 20);
  h->id = loom__get_le64(p + 24);
  h->step = loom__get_le64(p + 32);
  h->off = loom__get_le64(p + 40);
}

const char *ps_op_name(int op) {
  static const char *const names[] = {"?",           "config",      "declare", "pull",    "push",
                                      "sparse pull", "sparse push", "step",    "barrier", "save",
                                      "commit",      "restore",     "info"};
  return op > 0 && op < PS_OP__END ? names[op] : "?";
}

/* ---- field codecs ------------------------------------------------------ */
static bool wbuf_room(ps_wbuf *w, size_t n) {
  if (w->bad) return false;
  if (w->len + n <= w->cap) return true;
  size_t cap = w->cap ? w->cap : 256;
  while (cap < w->len + n) cap *= 2;
  unsigned char *p = realloc(w->p, cap);
  if (!p) {
    w->bad = true;
    return false;
  }
  w->p = p;
  w->cap = cap;
  return true;
}
void ps_put_u32(ps_wbuf *w, uint32_t v) {
  if (wbuf_room(w, 4)) loom__put_le32(w->p + w->len, v), w->len += 4;
}
void ps_put_u64(ps_wbuf *w, uint64_t v) {
  if (wbuf_room(w, 8)) loom__put_le64(w->p + w->len, v), w->len += 8;
}
void ps_put_f32(ps_wbuf *w, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  ps_put_u32(w, u);
}
void ps_put_bytes(ps_wbuf *w, const void *p, size_t n) {
  if (n && wbuf_room(w, n)) memcpy(w->p + w->len, p, n), w->len += n;
}

/* ---- declarations ------------------------------------------------------ */
void ps_decl_put(ps_wbuf *w, const ps_decl *d) {
  ps_put_u32(w, d->kind);
  ps_put_u32(w, d->ndim);
  ps_put_u64(w, d->count);
  for (uint32_t i = 0; i < d->ndim && i < PS_MAX_DIMS; i++) ps_put_u64(w, d->shape[i]);
  ps_put_u32(w, (uint32_t)d->init.kind);
  ps_put_f32(w, d->init.a);
  ps_put_f32(w, d->init.b);
  ps_put_u64(w, d->init.seed);
  ps_put_u32(w, (uint32_t)d->opt.kind);
  ps_put_f32(w, d->opt.lr);
  ps_put_f32(w, d->opt.beta1);
  ps_put_f32(w, d->opt.beta2);
  ps_put_f32(w, d->opt.eps);
  ps_put_f32(w, d->opt.initial_accumulator);
  size_t nl = strlen(d->name);
  ps_put_u32(w, (uint32_t)nl);
  ps_put_bytes(w, d->name, nl);
}

static bool finite_nonneg(float x) { return isfinite(x) && x >= 0; }

int ps_decl_get(loom__cur *r, ps_decl *d, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  d->kind = loom__cur_le32(r);
  d->ndim = loom__cur_le32(r);
  d->count = loom__cur_le64(r);
  if (r->bad || d->ndim < 1 || d->ndim > PS_MAX_DIMS) {
    snprintf(err, errlen, "a variable has 1..%d dimensions", PS_MAX_DIMS);
    return LOOM_EINVAL;
  }
  for (uint32_t i = 0; i < d->ndim; i++) d->shape[i] = loom__cur_le64(r);
  d->init.kind = (loom_ps_init_kind)loom__cur_le32(r);
  d->init.a = loom__cur_lef32(r);
  d->init.b = loom__cur_lef32(r);
  d->init.seed = loom__cur_le64(r);
  d->opt.kind = (loom_ps_optimizer)loom__cur_le32(r);
  d->opt.lr = loom__cur_lef32(r);
  d->opt.beta1 = loom__cur_lef32(r);
  d->opt.beta2 = loom__cur_lef32(r);
  d->opt.eps = loom__cur_lef32(r);
  d->opt.initial_accumulator = loom__cur_lef32(r);
  uint32_t nl = loom__cur_le32(r);
  const unsigned char *name = nl <= PS_MAX_NAME ? loom__cur_bytes(r, nl) : NULL;
  if (r->bad || !name || nl == 0) {
    snprintf(err, errlen, "a variable's name is 1..%d bytes", PS_MAX_NAME);
    return LOOM_EINVAL;
  }
  for (uint32_t i = 0; i < nl; i++) {
    if (name[i] < 0x21 || name[i] > 0x7e) {
      snprintf(err, errlen, "a variable's name is printable ASCII without spaces");
      return LOOM_EINVAL;
    }
  }
  memcpy(d->name, name, nl);
  d->name[nl] = 0;
  if (d->kind == PS_DENSE) {
    uint64_t prod = 1;
    for (uint32_t i = 0; i < d->ndim; i++) {
      if (d->shape[i] == 0 || d->shape[i] > PS_MAX_COUNT || prod > PS_MAX_COUNT / d->shape[i]) {
        snprintf(err, errlen,
                 "'%s': every dimension is at least 1 and the "
                 "total at most 2^40 elements",
                 d->name);
        return LOOM_EINVAL;
      }
      prod *= d->shape[i];
    }
    if (prod != d->count) {
      snprintf(err, errlen, "'%s': count %llu is not the product of the shape", d->name,
               (unsigned long long)d->count);
      return LOOM_EINVAL;
    }
  } else if (d->kind == PS_SPARSE) {
    if (d->ndim != 1 || d->count < 1 || d->count > PS_MAX_DIM || d->shape[0] != d->count) {
      snprintf(err, errlen, "'%s': a sparse row has 1..%d floats", d->name, PS_MAX_DIM);
      return LOOM_EINVAL;
    }
  } else {
    snprintf(err, errlen, "'%s': unknown variable kind %u", d->name, d->kind);
    return LOOM_EINVAL;
  }
  if ((unsigned)d->init.kind > LOOM_PS_NORMAL || !isfinite(d->init.a) || !isfinite(d->init.b) ||
      (d->init.kind == LOOM_PS_UNIFORM && !(d->init.a <= d->init.b)) ||
      (d->init.kind == LOOM_PS_NORMAL && !(d->init.b >= 0))) {
    snprintf(err, errlen,
             "'%s': bad initializer (uniform needs a <= b, "
             "normal a standard deviation b >= 0)",
             d->name);
    return LOOM_EINVAL;
  }
  const loom_ps_opt *o = &d->opt;
  if ((unsigned)o->kind > LOOM_PS_ADAM || !finite_nonneg(o->lr) || !finite_nonneg(o->eps) ||
      !finite_nonneg(o->initial_accumulator) || !finite_nonneg(o->beta1) || !(o->beta1 < 1) ||
      !finite_nonneg(o->beta2) || !(o->beta2 < 1)) {
    snprintf(err, errlen,
             "'%s': bad optimizer (lr, eps and "
             "initial_accumulator are finite and >= 0, betas in [0, 1))",
             d->name);
    return LOOM_EINVAL;
  }
  if (!loom__cur_done(r)) {
    snprintf(err, errlen, "'%s': trailing bytes after the declaration", d->name);
    return LOOM_EINVAL;
  }
  return 0;
}

static const char *const INIT_NAMES[] = {"zeros", "constant", "uniform", "normal"};
static const char *const OPT_NAMES[] = {"sgd", "adagrad", "adam"};

bool ps_decl_compatible(const ps_decl *a, const ps_decl *b, char *why, size_t whylen) {
  if (a->kind != b->kind) {
    snprintf(why, whylen, "'%s' is %s, declared here as %s", a->name,
             a->kind == PS_DENSE ? "dense" : "sparse", b->kind == PS_DENSE ? "dense" : "sparse");
    return false;
  }
  bool shape = a->ndim == b->ndim && a->count == b->count;
  for (uint32_t i = 0; shape && i < a->ndim; i++) shape = a->shape[i] == b->shape[i];
  if (!shape) {
    snprintf(why, whylen, "'%s' exists with %llu %s; declared here with %llu", a->name,
             (unsigned long long)a->count,
             a->kind == PS_DENSE ? "elements (or another shape)" : "columns",
             (unsigned long long)b->count);
    return false;
  }
  if (a->init.kind != b->init.kind || a->init.a != b->init.a || a->init.b != b->init.b ||
      a->init.seed != b->init.seed) {
    snprintf(why, whylen, "'%s' exists with another initializer (%s)", a->name,
             INIT_NAMES[a->init.kind]);
    return false;
  }
  if (a->opt.kind != b->opt.kind) {
    snprintf(why, whylen, "'%s' exists with optimizer %s, declared here with %s", a->name,
             OPT_NAMES[a->opt.kind], OPT_NAMES[b->opt.kind]);
    return false;
  }
  return true;
}

/* ---- placement --------------------------------------------------------- */
static uint64_t name_hash(const char *s) { /* FNV-1a */
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return ps_mix64(h);
}

void ps_dense_part(const char *name, uint64_t count, int shard, int nshards, uint64_t split_bytes,
                   uint64_t *lo, uint64_t *hi) {
  *lo = *hi = 0;
  if (nshards < 1 || shard < 0 || shard >= nshards) return;
  if (nshards == 1 || count * 4 <= split_bytes) {
    int home = (int)(((name_hash(name) >> 32) * (uint64_t)nshards) >> 32);
    if (home == shard) *hi = count;
    return;
  }
  uint64_t n = (uint64_t)nshards, s = (uint64_t)shard;
  uint64_t base = count / n, extra = count % n;
  *lo = s * base + (s < extra ? s : extra);
  *hi = *lo + base + (s < extra ? 1 : 0);
}

/* ---- memory ------------------------------------------------------------ */
int ps_mem_take(ps_mem *m, uint64_t n) {
  if (n > m->cap || m->used > m->cap - n) return LOOM_ERANGE;
  m->used += n;
  return 0;
}
void ps_mem_give(ps_mem *m, uint64_t n) { m->used = n > m->used ? 0 : m->used - n; }
