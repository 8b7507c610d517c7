/* ps_kernels_test.c: the parameter server's pure parts, no sockets:
 * where a dense range and a key live (tiling over 1..8 shards, counts 0, 1,
 * primes and large), initial values (a function of seed, key and index
 * only), optimizer updates against a double-precision transcription of
 * torch.optim's formulas, the sparse row store, the codecs, and a shard's
 * helper threads (a large sparse read or apply split over 2..4 threads
 * gives the same bits as one thread, keys repeated or new included). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ps/ps.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint64_t COUNTS[] = {1, 2, 3, 7, 13, 257, 262144, 262145, 1000003, 4u << 20};

/* Every count over every shard count: the parts tile [0, count) exactly;
 * small variables live whole on one shard, large ones evenly split. */
static void test_dense_parts_tile(void **state) {
  (void)state;
  const uint64_t split = 1 << 20;
  for (int n = 1; n <= 8; n++) {
    for (size_t c = 0; c < LOOM__ARRAY_LEN(COUNTS); c++) {
      uint64_t count = COUNTS[c], covered = 0, next = 0, minp = UINT64_MAX, maxp = 0;
      int holders = 0;
      for (int s = 0; s < n; s++) {
        uint64_t lo, hi;
        ps_dense_part("w", count, s, n, split, &lo, &hi);
        assert_true(lo <= hi && hi <= count);
        if (hi > lo) {
          holders++;
          assert_int_equal(lo, next); /* in shard order, no gap, no overlap */
          next = hi;
        }
        covered += hi - lo;
        if (hi - lo < minp) minp = hi - lo;
        if (hi - lo > maxp) maxp = hi - lo;
      }
      assert_int_equal(covered, count);
      if (count * 4 <= split || n == 1) {
        assert_int_equal(holders, 1);
      } else {
        assert_int_equal(holders, n);
        assert_true(maxp - minp <= 1);
      }
    }
  }
  /* names spread small variables over the shards */
  int seen[4] = {0};
  for (int i = 0; i < 64; i++) {
    char name[16];
    snprintf(name, sizeof name, "var%d", i);
    for (int s = 0; s < 4; s++) {
      uint64_t lo, hi;
      ps_dense_part(name, 10, s, 4, split, &lo, &hi);
      seen[s] += hi > lo;
    }
  }
  for (int s = 0; s < 4; s++) assert_true(seen[s] >= 6);
}

/* Keys spread evenly over 1..8 shards (within 5% of the mean for 200k
 * sequential keys: the hash, not the key, decides). */
static void test_key_shards_even(void **state) {
  (void)state;
  const int keys = 200000;
  for (int n = 1; n <= 8; n++) {
    int cnt[8] = {0};
    for (int k = 0; k < keys; k++) {
      int s = ps_key_shard((uint64_t)k, n);
      assert_true(s >= 0 && s < n);
      cnt[s]++;
    }
    for (int s = 0; s < n; s++) assert_true(fabs(cnt[s] - (double)keys / n) < 0.05 * keys / n);
  }
  assert_int_equal(ps_key_shard(12345, 3), ps_key_shard(12345, 3));
}

static void test_initializers(void **state) {
  (void)state;
  loom_ps_init u = {LOOM_PS_UNIFORM, -0.5f, 0.25f, 42}, g = {LOOM_PS_NORMAL, 1.0f, 2.0f, 7};
  float a[1000], b[500];
  ps_init_fill(&u, 99, 0, a, 1000);
  ps_init_fill(&u, 99, 500, b, 500); /* same values from any offset */
  assert_memory_equal(a + 500, b, sizeof b);
  double sum = 0;
  for (int i = 0; i < 1000; i++) {
    assert_true(a[i] >= -0.5f && a[i] < 0.25f);
    sum += a[i];
  }
  assert_true(fabs(sum / 1000 - (-0.125)) < 0.03);
  float c[1000];
  ps_init_fill(&u, 100, 0, c, 1000); /* another key, other values */
  assert_true(memcmp(a, c, sizeof a) != 0);
  u.seed = 43;
  ps_init_fill(&u, 99, 0, c, 1000); /* another seed, other values */
  assert_true(memcmp(a, c, sizeof a) != 0);
  double m = 0, v = 0;
  const int N = 20000;
  for (int i = 0; i < N; i++) m += ps_init_value(&g, 0, (uint64_t)i);
  m /= N;
  for (int i = 0; i < N; i++) v += pow(ps_init_value(&g, 0, (uint64_t)i) - m, 2);
  v /= N;
  assert_true(fabs(m - 1.0) < 0.05);
  assert_true(fabs(sqrt(v) - 2.0) < 0.05);
  loom_ps_init k = {LOOM_PS_CONSTANT, 3.5f, 0, 0}, z = {0};
  assert_true(ps_init_value(&k, 5, 5) == 3.5f);
  assert_true(ps_init_value(&z, 5, 5) == 0.0f);
}

/* torch.optim's formulas in double, one element. */
static void ref_step(const loom_ps_opt *o, int t, double *w, double *s1, double *s2, double g) {
  switch (o->kind) {
  case LOOM_PS_SGD:
    *w -= o->lr * g;
    break;
  case LOOM_PS_ADAGRAD:
    *s1 += g * g;
    *w -= o->lr * g / (sqrt(*s1) + o->eps);
    break;
  case LOOM_PS_ADAM:
    *s1 = o->beta1 * *s1 + (1 - o->beta1) * g;
    *s2 = o->beta2 * *s2 + (1 - o->beta2) * g * g;
    *w -= o->lr / (1 - pow(o->beta1, t)) * *s1 / (sqrt(*s2) / sqrt(1 - pow(o->beta2, t)) + o->eps);
    break;
  }
}

static void test_optimizers_match_reference(void **state) {
  (void)state;
  loom_ps_opt opts[] = {LOOM_PS_OPT_SGD(0.1f), LOOM_PS_OPT_ADAGRAD(0.05f), LOOM_PS_OPT_ADAM(0.01f)};
  opts[1].initial_accumulator = 0.1f;
  enum { N = 37, STEPS = 50 };
  for (size_t k = 0; k < LOOM__ARRAY_LEN(opts); k++) {
    const loom_ps_opt *o = &opts[k];
    float w[N], s1[N], s2[N], g[N];
    double rw[N], r1[N], r2[N];
    for (int i = 0; i < N; i++) {
      w[i] = (float)(rw[i] = 0.1 * i - 1.0);
      s1[i] = ps_opt_slot_init(o, 0);
      r1[i] = s1[i];
      s2[i] = 0;
      r2[i] = 0;
    }
    for (int t = 1; t <= STEPS; t++) {
      for (int i = 0; i < N; i++) {
        g[i] = (float)(sin(0.3 * t + i) + 0.5 * w[i]); /* a gradient of the weights */
        ref_step(o, t, &rw[i], &r1[i], &r2[i], g[i]);
      }
      ps_opt_apply(o, (uint64_t)t, w, ps_opt_slots(o->kind) >= 1 ? s1 : NULL,
                   ps_opt_slots(o->kind) >= 2 ? s2 : NULL, g, N);
    }
    for (int i = 0; i < N; i++) {
      double tol = 1e-5 * (1 + fabs(rw[i]));
      if (fabs(w[i] - rw[i]) > tol)
        fail_msg("optimizer %zu element %d: %.9g, reference %.9g", k, i, w[i], rw[i]);
    }
  }
}

static void test_rows_store(void **state) {
  (void)state;
  ps_mem mem = {0, 1ULL << 30};
  ps_rows r;
  ps_rows_init(&r, 3);
  const uint64_t N = 100003;
  for (uint64_t k = 0; k < N; k++) {
    bool added;
    int64_t row = ps_rows_add(&r, k * 7919 + 1, &added, &mem);
    assert_true(row == (int64_t)k && added);
    float *p = ps_rows_at(&r, (uint64_t)row);
    p[0] = (float)k, p[1] = -1, p[2] = 2;
  }
  for (uint64_t k = 0; k < N; k++) {
    int64_t row = ps_rows_find(&r, k * 7919 + 1);
    assert_true(row >= 0 && ps_rows_at(&r, (uint64_t)row)[0] == (float)k);
    bool added;
    assert_int_equal(ps_rows_add(&r, k * 7919 + 1, &added, &mem), row);
    assert_false(added);
  }
  assert_int_equal(ps_rows_find(&r, 2), -1);
  assert_int_equal(mem.used, r.bytes);
  ps_rows_clear(&r);
  assert_int_equal(ps_rows_find(&r, 1), -1);
  ps_rows_free(&r, &mem);
  assert_int_equal(mem.used, 0);
  /* the cap: adding rows stops with LOOM_ERANGE, nothing leaks */
  ps_mem small = {0, 8 << 20}; /* a few 2 MiB pages */
  ps_rows_init(&r, 64);
  int64_t rc = 0;
  for (uint64_t k = 0; k < 100000 && rc >= 0; k++) {
    bool added;
    rc = ps_rows_add(&r, k, &added, &small);
  }
  assert_int_equal(rc, LOOM_ERANGE);
  assert_true(small.used <= small.cap);
  ps_rows_free(&r, &small);
  assert_int_equal(small.used, 0);
}

/* Sparse reads and applies split over a pool (parts of PS_PAR_KEYS keys
 * or more) equal one thread's, bit for bit: SGD, Adagrad and Adam; keys
 * repeated within a message (a raw client need not merge them: their
 * updates apply in order) and keys new to the table (created before the
 * split); message sizes around the split's edges (1025 keys over 2
 * threads, 1537 over 3, 2049 over 4 left the last keys out once), read
 * into buffers of NaN so that a key left out shows; a small message to a
 * second table after large ones to the first (the lookup scratch must not
 * carry stale rows over). States with 1..4 threads get the same messages
 * side by side. */
static void test_threads_same_bits(void **state) {
  (void)state;
  enum { MAXN = 5000, DIM = 5, SPACE = 3000, T = 4 };
  static const size_t SIZES[] = {1024, 1025, 1153, 1281, 1409, 1537, 1538,
                                 1729, 2049, 2050, 2051, 4097, 5000};
  const loom_ps_opt opts[] = {LOOM_PS_OPT_SGD(0.1f), LOOM_PS_OPT_ADAGRAD(0.05f),
                              LOOM_PS_OPT_ADAM(0.01f)};
  unsigned char *keys = malloc(MAXN * 8);
  float *g = malloc(MAXN * DIM * sizeof(float));
  float *out[T];
  for (int t = 0; t < T; t++) assert_non_null(out[t] = malloc(MAXN * DIM * sizeof(float)));
  assert_non_null(keys);
  assert_non_null(g);
  for (size_t o = 0; o < LOOM__ARRAY_LEN(opts); o++) {
    ps_pool *pool[T];
    ps_state st[T];
    uint32_t id[T], id2[T];
    for (int t = 0; t < T; t++) {
      assert_int_equal(ps_pool_new(t + 1, 20000, &pool[t]), 0);
      assert_int_equal(ps_pool_threads(pool[t]), t + 1);
      ps_state_init(&st[t], 0, 1, 1 << 20, 1ULL << 30);
      st[t].pool = pool[t];
      ps_decl d = {.kind = PS_SPARSE, .ndim = 1, .count = DIM, .shape = {DIM}, .opt = opts[o]};
      d.init = (loom_ps_init){LOOM_PS_NORMAL, 0.0f, 1.0f, 42};
      char err[256];
      snprintf(d.name, sizeof d.name, "emb");
      assert_int_equal(ps_state_declare(&st[t], &d, &id[t], err, sizeof err), 0);
      snprintf(d.name, sizeof d.name, "other");
      assert_int_equal(ps_state_declare(&st[t], &d, &id2[t], err, sizeof err), 0);
    }
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t r = 0; r < LOOM__ARRAY_LEN(SIZES); r++) {
      size_t n = SIZES[r];
      /* keys from a space smaller than the message: many repeats, and new
       * keys every round (the space moves) */
      for (size_t i = 0; i < n; i++) {
        x = ps_mix64(x + i);
        uint64_t k = (uint64_t)r * 500 + x % SPACE;
        memcpy(keys + 8 * i, &k, 8);
        for (int j = 0; j < DIM; j++) g[i * DIM + j] = (float)((int)(x >> (8 * j)) % 97) / 50.0f;
      }
      for (int t = 0; t < T; t++) {
        assert_int_equal(ps_sparse_apply(&st[t], st[t].vars[id[t]], keys, g, n, true), 0);
        for (size_t i = 0; i < n * DIM; i++) out[t][i] = NAN;
        ps_sparse_read(&st[t], st[t].vars[id[t]], keys, n, out[t]);
        for (size_t i = 0; i < n * DIM; i++) assert_false(isnan(out[t][i]));
        if (t) assert_memory_equal(out[0], out[t], n * DIM * sizeof(float));
      }
      /* then a few new keys to the other table: their rows are made */
      for (int t = 0; t < T; t++) {
        assert_int_equal(ps_sparse_apply(&st[t], st[t].vars[id2[t]], keys, g, 3, true), 0);
        assert_int_equal(st[t].vars[id2[t]]->rows.n, st[0].vars[id2[0]]->rows.n);
      }
    }
    /* every key the rounds touched and some never pushed (initial values),
     * read in one message, and a small one that stays on the caller */
    for (size_t i = 0; i < MAXN; i++) {
      uint64_t k = i * 3;
      memcpy(keys + 8 * i, &k, 8);
    }
    for (int t = 0; t < T; t++) {
      ps_sparse_read(&st[t], st[t].vars[id[t]], keys, MAXN, out[t]);
      if (t) assert_memory_equal(out[0], out[t], MAXN * DIM * sizeof(float));
      ps_sparse_read(&st[t], st[t].vars[id[t]], keys, 7, out[t]);
      assert_memory_equal(out[0], out[t], 7 * DIM * sizeof(float));
      ps_state_free(&st[t]);
      ps_pool_free(pool[t]);
    }
  }
  free(keys);
  free(g);
  for (int t = 0; t < T; t++) free(out[t]);
}

/* ps_pool_run runs every part exactly once, part 0 on the caller and the
 * others on as many other threads; parts past the pool's threads are cut;
 * NULL or a one-thread pool runs everything on the caller. */
typedef struct {
  pthread_t who[8];
  int runs[8];
  int parts_seen;
} pool_probe;

static void probe_part(void *arg, int i, int parts) {
  pool_probe *p = arg;
  p->who[i] = pthread_self();
  p->runs[i]++;
  p->parts_seen = parts;
}

static void test_pool_runs_each_part_once(void **state) {
  (void)state;
  for (int threads = 1; threads <= 4; threads++) {
    ps_pool *pool = (ps_pool *)&state; /* must be overwritten */
    assert_int_equal(ps_pool_new(threads, threads == 3 ? 0 : 50000, &pool), 0);
    if (threads == 1) assert_null(pool);
    for (int want = 1; want <= 6; want++) {
      for (int rep = 0; rep < 50; rep++) {
        pool_probe pr;
        memset(&pr, 0, sizeof pr);
        ps_pool_run(pool, want, probe_part, &pr);
        int parts = want < threads ? want : threads;
        assert_int_equal(pr.parts_seen, parts);
        for (int i = 0; i < 8; i++) assert_int_equal(pr.runs[i], i < parts ? 1 : 0);
        assert_true(pthread_equal(pr.who[0], pthread_self()));
        for (int i = 1; i < parts; i++) {
          assert_false(pthread_equal(pr.who[i], pthread_self()));
          for (int k = 1; k < i; k++) assert_false(pthread_equal(pr.who[i], pr.who[k]));
        }
      }
    }
    ps_pool_free(pool);
  }
  assert_int_equal(ps_pool_threads(NULL), 1);
}

static void test_codecs(void **state) {
  (void)state;
  ps_hdr h = {.len = 123,
              .op = PS_OP_SPUSH,
              .flags = 3,
              .var = 77,
              .rc = -9,
              .count = 4000000000u,
              .rank = -1,
              .id = 1ULL << 60,
              .step = 42,
              .off = 0xfedcba9876543210ULL},
         g;
  unsigned char buf[PS_HDR];
  ps_hdr_put(buf, &h);
  ps_hdr_get(buf, &g);
  assert_memory_equal(&h, &g, sizeof h);

  ps_decl d = {.kind = PS_DENSE,
               .ndim = 2,
               .count = 12,
               .shape = {3, 4},
               .init = {LOOM_PS_NORMAL, 0, 0.1f, 9},
               .opt = LOOM_PS_OPT_ADAM(0.001f)};
  strcpy(d.name, "layer1/w");
  ps_wbuf w = {0};
  ps_decl_put(&w, &d);
  loom__cur r = {.p = w.p, .len = w.len};
  ps_decl e;
  char err[256];
  assert_int_equal(ps_decl_get(&r, &e, err, sizeof err), 0);
  assert_string_equal(e.name, "layer1/w");
  assert_true(ps_decl_compatible(&d, &e, err, sizeof err));
  /* bad fields are refused, with a reason */
  ps_decl x = d;
  x.count = 13; /* not the product of the shape */
  w.len = 0;
  ps_decl_put(&w, &x);
  r = (loom__cur){.p = w.p, .len = w.len};
  assert_int_equal(ps_decl_get(&r, &e, err, sizeof err), LOOM_EINVAL);
  assert_non_null(strstr(err, "product"));
  x = d;
  x.opt.beta1 = 1.0f;
  w.len = 0;
  ps_decl_put(&w, &x);
  r = (loom__cur){.p = w.p, .len = w.len};
  assert_int_equal(ps_decl_get(&r, &e, err, sizeof err), LOOM_EINVAL);
  x = d;
  strcpy(x.name, "has space");
  w.len = 0;
  ps_decl_put(&w, &x);
  r = (loom__cur){.p = w.p, .len = w.len};
  assert_int_equal(ps_decl_get(&r, &e, err, sizeof err), LOOM_EINVAL);
  /* truncated at every length */
  w.len = 0;
  ps_decl_put(&w, &d);
  for (size_t cut = 0; cut < w.len; cut++) {
    r = (loom__cur){.p = w.p, .len = cut};
    assert_int_equal(ps_decl_get(&r, &e, err, sizeof err), LOOM_EINVAL);
  }
  x = d;
  x.opt.kind = LOOM_PS_SGD;
  assert_false(ps_decl_compatible(&d, &x, err, sizeof err));
  x = d;
  x.opt.lr = 0.5f; /* hyperparameters may change */
  assert_true(ps_decl_compatible(&d, &x, err, sizeof err));
  free(w.p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense_parts_tile),  cmocka_unit_test(test_key_shards_even),
      cmocka_unit_test(test_initializers),      cmocka_unit_test(test_optimizers_match_reference),
      cmocka_unit_test(test_rows_store),        cmocka_unit_test(test_codecs),
      cmocka_unit_test(test_threads_same_bits), cmocka_unit_test(test_pool_runs_each_part_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
