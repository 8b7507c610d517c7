/* state.c: one shard's variables: declaring them, reading them, applying
 * gradients now (async) or summing them until the step closes (sync).
 * No I/O here: the server decides when, this file decides what. */
#include "ps/ps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_MAX_VARS 65536

void ps_state_init(ps_state *st, int shard, int nshards, uint64_t split_bytes,
                   uint64_t max_memory) {
  memset(st, 0, sizeof *st);
  st->shard = shard;
  st->nshards = nshards;
  st->split_bytes = split_bytes;
  st->mem.cap = max_memory;
}

static uint64_t dense_bytes(const ps_var *v) {
  return (v->hi - v->lo) * sizeof(float) * (uint64_t)(1 + v->slots);
}

static void var_free(ps_state *st, ps_var *v) {
  if (!v) return;
  if (v->d.kind == PS_DENSE) {
    if (v->w) ps_mem_give(&st->mem, dense_bytes(v));
    if (v->pend) ps_mem_give(&st->mem, (v->hi - v->lo) * sizeof(float));
    free(v->w);
    free(v->s1);
    free(v->s2);
    free(v->pend);
  } else {
    ps_rows_free(&v->rows, &st->mem);
    ps_rows_free(&v->pend_rows, &st->mem);
  }
  free(v);
}

void ps_state_free(ps_state *st) {
  for (uint32_t i = 0; i < st->nvars; i++) var_free(st, st->vars[i]);
  free(st->vars);
  free(st->scratch);
  st->vars = NULL;
  st->scratch = NULL;
  st->nvars = st->cap = 0;
  st->scratch_cap = 0;
}

int ps_state_find(const ps_state *st, const char *name) {
  for (uint32_t i = 0; i < st->nvars; i++)
    if (!strcmp(st->vars[i]->d.name, name)) return (int)i;
  return -1;
}

/* A new variable with its initial values, not yet in the state. */
static int var_new(ps_state *st, const ps_decl *d, ps_var **out, char *err, size_t errlen) {
  ps_var *v = calloc(1, sizeof *v);
  if (!v) return LOOM_ENOMEM;
  v->d = *d;
  v->slots = ps_opt_slots(d->opt.kind);
  if (d->kind == PS_SPARSE) {
    ps_rows_init(&v->rows, (uint32_t)(d->count * (uint64_t)(1 + v->slots)));
    ps_rows_init(&v->pend_rows, (uint32_t)d->count);
    *out = v;
    return 0;
  }
  ps_dense_part(d->name, d->count, st->shard, st->nshards, st->split_bytes, &v->lo, &v->hi);
  uint64_t n = v->hi - v->lo;
  if (n == 0) {
    *out = v;
    return 0;
  }
  if (ps_mem_take(&st->mem, n * sizeof(float) * (uint64_t)(1 + v->slots)) < 0) {
    snprintf(err, errlen,
             "'%s' needs %llu MiB more on shard %d, past "
             "LOOM_PS_MAX_MEMORY (%llu MiB)",
             d->name, (unsigned long long)(dense_bytes(v) >> 20), st->shard,
             (unsigned long long)(st->mem.cap >> 20));
    free(v);
    return LOOM_ERANGE;
  }
  v->w = malloc(n * sizeof(float));
  if (v->slots >= 1) v->s1 = malloc(n * sizeof(float));
  if (v->slots >= 2) v->s2 = malloc(n * sizeof(float));
  if (!v->w || (v->slots >= 1 && !v->s1) || (v->slots >= 2 && !v->s2)) {
    var_free(st, v);
    snprintf(err, errlen, "out of memory for '%s' on shard %d", d->name, st->shard);
    return LOOM_ENOMEM;
  }
  ps_init_fill(&d->init, 0, v->lo, v->w, n);
  float *slot[2] = {v->s1, v->s2};
  for (int s = 0; s < v->slots; s++) {
    float x = ps_opt_slot_init(&d->opt, s);
    for (uint64_t i = 0; i < n; i++) slot[s][i] = x;
  }
  *out = v;
  return 0;
}

int ps_state_declare(ps_state *st, const ps_decl *d, uint32_t *id, char *err, size_t errlen) {
  int at = ps_state_find(st, d->name);
  if (at >= 0) {
    ps_var *v = st->vars[at];
    if (!ps_decl_compatible(&v->d, d, err, errlen)) return LOOM_EINVAL;
    v->d.opt = d->opt; /* a resumed run may change its hyperparameters */
    *id = (uint32_t)at;
    return 0;
  }
  if (st->nvars >= PS_MAX_VARS) {
    snprintf(err, errlen, "at most %d variables per job", PS_MAX_VARS);
    return LOOM_ERANGE;
  }
  if (st->nvars == st->cap) {
    uint32_t cap = st->cap ? st->cap * 2 : 16;
    ps_var **nv = realloc(st->vars, cap * sizeof *nv);
    if (!nv) return LOOM_ENOMEM;
    st->vars = nv;
    st->cap = cap;
  }
  ps_var *v;
  int rc = var_new(st, d, &v, err, errlen);
  if (rc < 0) return rc;
  *id = st->nvars;
  st->vars[st->nvars++] = v;
  return 0;
}

/* ---- dense ------------------------------------------------------------- */
void ps_dense_read(const ps_var *v, uint64_t off, float *out, size_t n) {
  memcpy(out, v->w + (off - v->lo), n * sizeof(float));
}

void ps_dense_apply(ps_var *v, uint64_t off, const float *g, size_t n, bool first) {
  if (first) v->t++;
  uint64_t o = off - v->lo;
  ps_opt_apply(&v->d.opt, v->t ? v->t : 1, v->w + o, v->s1 ? v->s1 + o : NULL,
               v->s2 ? v->s2 + o : NULL, g, n);
}

int ps_dense_accum(ps_state *st, ps_var *v, uint64_t off, const float *g, size_t n) {
  uint64_t len = v->hi - v->lo;
  if (!v->pend) {
    if (ps_mem_take(&st->mem, len * sizeof(float)) < 0) return LOOM_ERANGE;
    v->pend = calloc(len, sizeof(float));
    if (!v->pend) {
      ps_mem_give(&st->mem, len * sizeof(float));
      return LOOM_ENOMEM;
    }
  }
  float *p = v->pend + (off - v->lo);
  for (size_t i = 0; i < n; i++) p[i] += g[i];
  v->pend_dirty = true;
  return 0;
}

/* ---- sparse ------------------------------------------------------------ */
#define AHEAD 4
#define READ_GROUP 64 /* keys looked up, then copied, at a time */

static uint64_t key_at(const unsigned char *keys, size_t i) {
  uint64_t k;
  memcpy(&k, keys + i * 8, 8);
  return k;
}

static void sparse_read_one(const ps_var *v, const unsigned char *keys, size_t n, float *out) {
  size_t dim = (size_t)v->d.count;
  /* A group at a time: its lookups, then its copies, each pass a group of
   * independent loads (no scratch array either). */
  int64_t rows[READ_GROUP];
  for (size_t a = 0; a < n; a += READ_GROUP) {
    size_t k = n - a < READ_GROUP ? n - a : READ_GROUP;
    ps_rows_find_many(&v->rows, keys + 8 * a, k, rows);
    for (size_t i = 0; i < k; i++) {
      float *o = out + (a + i) * dim;
      if (rows[i] >= 0)
        memcpy(o, ps_rows_at(&v->rows, (uint64_t)rows[i]), dim * sizeof(float));
      else
        ps_init_fill(&v->d.init, key_at(keys, a + i), 0, o, dim);
    }
  }
}

/* The parts a request of n keys is split into: up to the pool's
 * threads, each at least PS_PAR_KEYS / 2 keys. */
static int parts_for(const ps_state *st, size_t n) {
  int t = ps_pool_threads(st->pool);
  if (n < PS_PAR_KEYS || t <= 1) return 1;
  size_t most = n / (PS_PAR_KEYS / 2);
  return most < (size_t)t ? (int)most : t;
}

typedef struct {
  const ps_var *v; /* read, find */
  ps_var *mv;      /* apply */
  const unsigned char *keys;
  int64_t *rows; /* find: filled; apply: the keys' rows */
  const float *g;
  float *out;
  size_t n;
} sparse_job;

/* Keys [*a, *b) of n are part i of parts: runs of ceil(n / parts) keys
 * rounded up to READ_GROUP, which cover all n (the last may be short or
 * empty). */
static void part_range(size_t n, int i, int parts, size_t *a, size_t *b) {
  size_t per = (n + (size_t)parts - 1) / (size_t)parts;
  per = (per + READ_GROUP - 1) / READ_GROUP * READ_GROUP;
  *a = per * (size_t)i < n ? per * (size_t)i : n;
  *b = n - *a > per ? *a + per : n;
}

/* Part i of a read: a contiguous run of keys. */
static void read_part(void *arg, int i, int parts) {
  const sparse_job *j = arg;
  size_t a, b;
  part_range(j->n, i, parts, &a, &b);
  if (a < b) sparse_read_one(j->v, j->keys + 8 * a, b - a, j->out + a * (size_t)j->v->d.count);
}

void ps_sparse_read(ps_state *st, const ps_var *v, const unsigned char *keys, size_t n,
                    float *out) {
  sparse_job j = {.v = v, .keys = keys, .n = n, .out = out};
  ps_pool_run(st->pool, parts_for(st, n), read_part, &j);
}

/* Part i of a lookup: a contiguous run of keys. */
static void find_part(void *arg, int i, int parts) {
  const sparse_job *j = arg;
  size_t a, b;
  part_range(j->n, i, parts, &a, &b);
  if (a < b) ps_rows_find_many(&j->v->rows, j->keys + 8 * a, b - a, j->rows + a);
}

/* The rows of a message's keys, -1 where absent (NULL without memory). */
static int64_t *find_rows(ps_state *st, const ps_var *v, const unsigned char *keys, size_t n) {
  if (n > st->scratch_cap) {
    size_t cap = n < 4096 ? 4096 : n;
    int64_t *p = realloc(st->scratch, cap * sizeof *p);
    if (!p) return NULL;
    st->scratch = p;
    st->scratch_cap = cap;
  }
  sparse_job j = {.v = v, .keys = keys, .n = n, .rows = st->scratch};
  ps_pool_run(st->pool, parts_for(st, n), find_part, &j);
  return st->scratch;
}

/* The stored row of key, created with its initial values if new. */
static int64_t row_touch(ps_state *st, ps_var *v, uint64_t key) {
  bool added;
  int64_t row = ps_rows_add(&v->rows, key, &added, &st->mem);
  if (row < 0 || !added) return row;
  size_t dim = (size_t)v->d.count;
  float *p = ps_rows_at(&v->rows, (uint64_t)row);
  ps_init_fill(&v->d.init, key, 0, p, dim);
  for (int s = 0; s < v->slots; s++) {
    float x = ps_opt_slot_init(&v->d.opt, s);
    for (size_t j = 0; j < dim; j++) p[(size_t)(s + 1) * dim + j] = x;
  }
  return row;
}

/* The stored rows of a message's keys, made where missing. */
static int64_t *touch_rows(ps_state *st, ps_var *v, const unsigned char *keys, size_t n, int *rc) {
  int64_t *rows = find_rows(st, v, keys, n);
  *rc = rows ? 0 : LOOM_ENOMEM;
  for (size_t i = 0; rows && i < n; i++) {
    if (rows[i] >= 0) continue;
    rows[i] = row_touch(st, v, key_at(keys, i));
    if (rows[i] < 0) {
      *rc = (int)rows[i];
      return NULL;
    }
  }
  return rows;
}

static void row_apply(ps_var *v, uint64_t row, const float *g) {
  size_t dim = (size_t)v->d.count;
  float *p = ps_rows_at(&v->rows, row);
  ps_opt_apply(&v->d.opt, v->t ? v->t : 1, p, v->slots >= 1 ? p + dim : NULL,
               v->slots >= 2 ? p + 2 * dim : NULL, g, dim);
}

/* Part i of an apply: the keys whose row number's hash falls in part i,
 * in the message's order. A row that repeats is one part's alone, its
 * updates in order: the same result, bit for bit, as one thread. */
static void apply_part(void *arg, int i, int parts) {
  const sparse_job *j = arg;
  size_t dim = (size_t)j->mv->d.count;
  const int64_t *rows = j->rows;
  /* A block at a time: this part's keys picked out without a branch (a
   * mispredicted one per key would stall the misses in flight), the owner
   * by a multiply, not a division (one part: every key); then applied,
   * prefetching ahead. */
  uint32_t mine[256];
  for (size_t a = 0; a < j->n; a += 256) {
    size_t e = j->n - a < 256 ? j->n - a : 256, m = 0;
    for (size_t k = 0; k < e; k++) {
      mine[m] = (uint32_t)k;
      m += parts == 1 ||
           (((ps_mix64((uint64_t)rows[a + k]) >> 32) * (uint64_t)parts) >> 32) == (uint64_t)i;
    }
    for (size_t q = 0; q < m; q++) {
      if (q + AHEAD < m)
        __builtin_prefetch(ps_rows_at(&j->mv->rows, (uint64_t)rows[a + mine[q + AHEAD]]));
      row_apply(j->mv, (uint64_t)rows[a + mine[q]], j->g + (a + mine[q]) * dim);
    }
  }
}

int ps_sparse_apply(ps_state *st, ps_var *v, const unsigned char *keys, const float *g, size_t n,
                    bool first) {
  if (first) v->t++;
  int rc;
  int64_t *rows = touch_rows(st, v, keys, n, &rc);
  if (!rows) return rc;
  sparse_job j = {.mv = v, .rows = rows, .g = g, .n = n};
  ps_pool_run(st->pool, parts_for(st, n), apply_part, &j);
  return rc;
}

int ps_sparse_accum(ps_state *st, ps_var *v, const unsigned char *keys, const float *g, size_t n) {
  size_t dim = (size_t)v->d.count;
  v->pend_touched = true;
  /* The stored rows are made now, so closing the step allocates nothing
   * and a shard out of memory refuses the push that caused it. */
  int rc;
  if (!touch_rows(st, v, keys, n, &rc)) return rc;
  for (size_t i = 0; i < n; i++) {
    bool added;
    int64_t pr = ps_rows_add(&v->pend_rows, key_at(keys, i), &added, &st->mem);
    if (pr < 0) return (int)pr;
    float *p = ps_rows_at(&v->pend_rows, (uint64_t)pr);
    if (added) memset(p, 0, dim * sizeof(float));
    for (size_t j = 0; j < dim; j++) p[j] += g[i * dim + j];
  }
  return 0;
}

/* ---- steps ------------------------------------------------------------- */
int ps_state_close_step(ps_state *st) {
  for (uint32_t i = 0; i < st->nvars; i++) {
    ps_var *v = st->vars[i];
    if (v->d.kind == PS_DENSE) {
      if (!v->pend_dirty) continue;
      v->t++;
      ps_opt_apply(&v->d.opt, v->t, v->w, v->s1, v->s2, v->pend, v->hi - v->lo);
      memset(v->pend, 0, (v->hi - v->lo) * sizeof(float));
      v->pend_dirty = false;
    } else {
      if (!v->pend_touched) continue;
      v->t++;
      for (uint64_t r = 0; r < v->pend_rows.n; r++) {
        int64_t row = ps_rows_find(&v->rows, ps_rows_key(&v->pend_rows, r));
        if (row >= 0) row_apply(v, (uint64_t)row, ps_rows_at(&v->pend_rows, r));
      }
      ps_rows_clear(&v->pend_rows);
      v->pend_touched = false;
    }
  }
  return 0;
}

void ps_state_drop_pending(ps_state *st) {
  for (uint32_t i = 0; i < st->nvars; i++) {
    ps_var *v = st->vars[i];
    if (v->d.kind == PS_DENSE) {
      if (v->pend) memset(v->pend, 0, (v->hi - v->lo) * sizeof(float));
      v->pend_dirty = false;
    } else {
      ps_rows_clear(&v->pend_rows);
      v->pend_touched = false;
    }
  }
}
