/* ps_server_test.c: the parameter server end to end, in one process: real
 * shards (the same server `loom ps` runs, each on its own thread and
 * loopback port) and real clients (one handle per worker thread).
 *
 * - async dense and sparse updates equal a single-process reference, over
 *   1..4 shards, small and split variables;
 * - a sparse push's repeated keys are summed into one update;
 * - rows land on the shard their key hashes to, and the values do not
 *   depend on the number of shards;
 * - SYNC: W workers over 1..3 shards, SGD, Adagrad and Adam, dense and
 *   sparse, equal one process applying the summed gradients, and every
 *   worker reads the same parameters at every step;
 * - BOUNDED: no worker leaves step c before every worker ended step c-K;
 *   in ASYNC a fast worker does run ahead (the check can fail);
 * - checkpoints: save / restore round trip (values and optimizer slots),
 *   into another number of shards, atomic files and pruning, a damaged
 *   file refused with the live state untouched, a late worker's restore
 *   does not rewind the others;
 * - bad, oversized, unauthenticated and silent connections are closed or
 *   refused and the shard serves on;
 * - a shard that dies fails pending and later calls with LOOM_ECONN at
 *   once; a step nobody finishes times out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "testutil.h"

#include "ps/ps.h"
#include "ps/server.h"
#include "wire/wire.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SECRET "unit-test-secret"
#define MAXS 4

/* ---- a cluster of shards on threads ------------------------------------ */
typedef struct {
  int n;
  ps_server *srv[MAXS];
  pthread_t th[MAXS];
  int stop[MAXS], port[MAXS];
  bool up[MAXS];
  char list[256];
} cluster;

static void *serve(void *arg) {
  loom__ps_server_run(arg);
  return NULL;
}

static void cluster_start(cluster *c, int n, int world) {
  memset(c, 0, sizeof *c);
  c->n = n;
  for (int i = 0; i < n; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 128), 0);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    c->port[i] = ntohs(sa.sin_port);
    c->stop[i] = eventfd(0, EFD_CLOEXEC);
    ps_server_cfg cfg = {.listen_fd = fd,
                         .stop_fd = c->stop[i],
                         .abort_fd = -1,
                         .shard = i,
                         .nshards = n,
                         .world = world,
                         .secret = SECRET};
    assert_int_equal(loom__ps_server_new(&cfg, &c->srv[i]), 0);
    pthread_create(&c->th[i], NULL, serve, c->srv[i]);
    c->up[i] = true;
    size_t len = strlen(c->list);
    snprintf(c->list + len, sizeof c->list - len, "%s127.0.0.1:%d", i ? "," : "", c->port[i]);
  }
}

static void shard_stop(cluster *c, int i) {
  if (!c->up[i]) return;
  uint64_t one = 1;
  assert_int_equal(write(c->stop[i], &one, sizeof one), 8);
  pthread_join(c->th[i], NULL);
  loom__ps_server_free(c->srv[i]); /* closes its connections */
  close(c->stop[i]);
  c->up[i] = false;
}

static void cluster_stop(cluster *c) {
  for (int i = 0; i < c->n; i++) shard_stop(c, i);
}

static loom_ps_t *client(cluster *c, loom_ps_mode mode, int staleness, int workers, int rank,
                         const char *dir) {
  loom_ps_opts o = {.mode = mode,
                    .staleness = staleness,
                    .workers = workers,
                    .rank = rank,
                    .rank_given = 1,
                    .servers = c->list,
                    .timeout_ms = 20000,
                    .ckpt_dir = dir};
  loom_ps_t *ps = NULL;
  int rc = loom_ps_connect(NULL, &o, &ps);
  if (rc != 0) fail_msg("connect: %s: %s", loom_err_name(rc), loom_ps_errmsg(ps));
  return ps;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int setup(void **state) {
  (void)state;
  setenv("LOOM_SECRET", SECRET, 1);
  setenv("LOOM_PS_SPLIT_BYTES", "4096", 1); /* split anything over 1024 floats */
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

#define OK(call)                                                                                   \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) fail_msg("%s: %s", #call, loom_err_name(rc_));                                   \
  } while (0)

static void close_enough(const float *a, const float *b, size_t n, double rel, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (fabs((double)a[i] - b[i]) > rel * (1 + fabs((double)b[i])))
      fail_msg("%s[%zu] = %.9g, want %.9g", what, i, a[i], b[i]);
}

/* ---- async ------------------------------------------------------------- */
static const size_t SIZES[] = {1, 7, 1031, 100003};

static void test_async_dense_matches_reference(void **state) {
  (void)state;
  for (int n = 1; n <= MAXS; n++) {
    cluster c;
    cluster_start(&c, n, 1);
    loom_ps_t *ps = client(&c, LOOM_PS_ASYNC, 0, 1, 0, NULL);
    for (size_t k = 0; k < LOOM__ARRAY_LEN(SIZES); k++) {
      size_t cnt = SIZES[k], shape[2] = {cnt, 1};
      char name[32];
      snprintf(name, sizeof name, "w%zu", k);
      loom_ps_init init = {LOOM_PS_UNIFORM, -1, 1, 3};
      loom_ps_opt opt = LOOM_PS_OPT_ADAM(0.01f);
      loom_ps_var_t *v;
      OK(loom_ps_dense(ps, name, shape, 2, &init, &opt, &v));
      float *w = malloc(cnt * 4), *ref = malloc(cnt * 4), *g = malloc(cnt * 4), *m = calloc(cnt, 4),
            *s2 = calloc(cnt, 4);
      ps_init_fill(&init, 0, 0, ref, cnt);
      OK(loom_ps_pull(ps, v, w));
      assert_memory_equal(w, ref, cnt * 4);
      for (int t = 1; t <= 3; t++) {
        for (size_t i = 0; i < cnt; i++) g[i] = (float)sin((double)i + t) + w[i];
        OK(loom_ps_push(ps, v, g));
        ps_opt_apply(&opt, (uint64_t)t, ref, m, s2, g, cnt);
        OK(loom_ps_pull(ps, v, w));
        assert_memory_equal(w, ref, cnt * 4); /* same kernel, same order: exact */
      }
      free(w), free(ref), free(g), free(m), free(s2);
    }
    loom_ps_close(ps);
    cluster_stop(&c);
  }
}

/* keys [5, 9, 5, 5, 1<<40]: key 5's gradients are summed before Adagrad sees
 * them (one update with g1+g2+g3, not three). */
static void test_sparse_duplicates_summed(void **state) {
  (void)state;
  cluster c;
  cluster_start(&c, 2, 1);
  loom_ps_t *ps = client(&c, LOOM_PS_ASYNC, 0, 1, 0, NULL);
  loom_ps_init init = {LOOM_PS_CONSTANT, 1.0f, 0, 0};
  loom_ps_opt opt = LOOM_PS_OPT_ADAGRAD(0.1f);
  loom_ps_var_t *v;
  OK(loom_ps_sparse(ps, "emb", 2, &init, &opt, &v));
  uint64_t keys[] = {5, 9, 5, 5, 1ULL << 40};
  float g[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  OK(loom_ps_sparse_push(ps, v, keys, 5, g));
  float out[10];
  OK(loom_ps_sparse_pull(ps, v, keys, 5, out));
  /* key 5: g = (1+5+7, 2+6+8) = (13, 16); one Adagrad step from a = 0:
   * w = 1 - 0.1 * g / |g| = 0.9 (each column) */
  for (int j = 0; j < 2; j++) {
    assert_true(fabsf(out[0 * 2 + j] - 0.9f) < 1e-6f);
    assert_true(out[2 * 2 + j] == out[j] && out[3 * 2 + j] == out[j]);
    assert_true(fabsf(out[1 * 2 + j] - 0.9f) < 1e-6f);
  }
  /* a second push of key 5 alone shows the accumulator holds 13^2, not
   * 1+25+49: w -= 0.1 * 1 / sqrt(169 + 1) */
  uint64_t k5 = 5;
  float g1[2] = {1, 1};
  OK(loom_ps_sparse_push(ps, v, &k5, 1, g1));
  OK(loom_ps_sparse_pull(ps, v, &k5, 1, out));
  assert_true(fabsf(out[0] - (0.9f - 0.1f / sqrtf(170.0f))) < 1e-6f);
  /* no keys: nothing to do */
  OK(loom_ps_sparse_push(ps, v, NULL, 0, NULL));
  OK(loom_ps_sparse_pull(ps, v, NULL, 0, NULL));
  loom_ps_close(ps);
  cluster_stop(&c);
}

static int shard_rows(loom_ps_t *ps, int shard) {
  char *js;
  OK(loom_ps_info(ps, shard, &js));
  const char *r = strstr(js, "\"rows\":");
  assert_non_null(r);
  int rows = atoi(r + 7);
  free(js);
  return rows;
}

/* Rows land where their key hashes, and the values are the same for any
 * number of shards. */
static void test_sharding_by_hash(void **state) {
  (void)state;
  enum { K = 3000, D = 4 };
  uint64_t *keys = malloc(K * sizeof *keys);
  float *g = malloc(K * D * 4), *out = malloc(K * D * 4), *first = malloc(K * D * 4);
  for (int i = 0; i < K; i++) keys[i] = (uint64_t)i * 0x9E3779B97F4A7C15ULL;
  for (int i = 0; i < K * D; i++) g[i] = (float)((i % 17) - 8) * 0.01f;
  for (int n = 1; n <= MAXS; n++) {
    cluster c;
    cluster_start(&c, n, 1);
    loom_ps_t *ps = client(&c, LOOM_PS_ASYNC, 0, 1, 0, NULL);
    loom_ps_init init = {LOOM_PS_NORMAL, 0, 0.1f, 11};
    loom_ps_opt opt = LOOM_PS_OPT_ADAM(0.05f);
    loom_ps_var_t *v;
    OK(loom_ps_sparse(ps, "emb", D, &init, &opt, &v));
    OK(loom_ps_sparse_push(ps, v, keys, K, g));
    OK(loom_ps_sparse_pull(ps, v, keys, K, out));
    int want[MAXS] = {0}, total = 0;
    for (int i = 0; i < K; i++) want[ps_key_shard(keys[i], n)]++;
    for (int s = 0; s < n; s++) {
      int rows = shard_rows(ps, s);
      assert_int_equal(rows, want[s]);
      total += rows;
    }
    assert_int_equal(total, K);
    if (n == 1)
      memcpy(first, out, K * D * 4);
    else
      assert_memory_equal(out, first, K * D * 4);
    loom_ps_close(ps);
    cluster_stop(&c);
  }
  free(keys), free(g), free(out), free(first);
}

/* ---- sync -------------------------------------------------------------- */
enum { SW = 3, SSTEPS = 12, SDN = 2053, SSK = 40, SSD = 3 };

typedef struct {
  cluster *c;
  int rank, opt;
  int rc;
  char err[256];
  double sum[SSTEPS]; /* a checksum of what this worker pulled at each step */
  float final[SDN];
  float rows[SSK * SSD];
} sync_worker;

static const loom_ps_opt *sync_opt(int k) {
  static loom_ps_opt o[3];
  o[0] = LOOM_PS_OPT_SGD(0.05f);
  o[1] = LOOM_PS_OPT_ADAGRAD(0.1f);
  o[1].initial_accumulator = 0.1f;
  o[2] = LOOM_PS_OPT_ADAM(0.02f);
  return &o[k];
}

/* The gradient worker r computes from w at step s: a least-squares pull
 * towards its own target, so it depends on the weights it read. */
static void grad_dense(int r, int s, const float *w, float *g) {
  for (int i = 0; i < SDN; i++) g[i] = w[i] - (float)sin(0.01 * i * (r + 1) + 0.1 * s);
}
/* Sparse: rank r touches keys r, r+SW, ... and key 0 (shared: summed). */
static int keys_of(int r, int s, uint64_t *k) {
  int n = 0;
  for (int i = (r + s) % SW; i < SSK; i += SW) k[n++] = (uint64_t)i * 1000003u;
  k[n++] = 0;
  return n;
}
static void grad_rows(const float *rows, int n, int r, float *g) {
  for (int i = 0; i < n * SSD; i++) g[i] = rows[i] * 0.5f - 0.1f * (float)(r + 1);
}

static void *sync_main(void *arg) {
  sync_worker *w = arg;
  loom_ps_opts o = {.mode = LOOM_PS_SYNC,
                    .workers = SW,
                    .rank = w->rank,
                    .rank_given = 1,
                    .servers = w->c->list,
                    .timeout_ms = 20000};
  loom_ps_t *ps = NULL;
  loom_ps_var_t *dv, *sv;
  float *wv = malloc(SDN * 4), *g = malloc(SDN * 4), rows[SSK * SSD], rg[SSK * SSD];
  uint64_t keys[SSK];
  size_t shape = SDN;
  loom_ps_init init = {LOOM_PS_UNIFORM, -0.5f, 0.5f, 5};
  int rc = loom_ps_connect(NULL, &o, &ps);
  if (rc == 0) rc = loom_ps_dense(ps, "dense", &shape, 1, &init, sync_opt(w->opt), &dv);
  if (rc == 0) rc = loom_ps_sparse(ps, "sparse", SSD, &init, sync_opt(w->opt), &sv);
  for (int s = 0; rc == 0 && s < SSTEPS; s++) {
    rc = loom_ps_pull(ps, dv, wv);
    double sum = 0;
    for (int i = 0; i < SDN; i++) sum += wv[i] * (i % 7 + 1);
    w->sum[s] = sum;
    grad_dense(w->rank, s, wv, g);
    if (rc == 0) rc = loom_ps_push(ps, dv, g);
    int n = keys_of(w->rank, s, keys);
    if (rc == 0) rc = loom_ps_sparse_pull(ps, sv, keys, (size_t)n, rows);
    grad_rows(rows, n, w->rank, rg);
    if (rc == 0) rc = loom_ps_sparse_push(ps, sv, keys, (size_t)n, rg);
    if (rc == 0) rc = loom_ps_step(ps);
  }
  if (rc == 0) rc = loom_ps_pull(ps, dv, w->final);
  for (int i = 0; i < SSK; i++) keys[i] = (uint64_t)i * 1000003u;
  if (rc == 0) rc = loom_ps_sparse_pull(ps, sv, keys, SSK, w->rows);
  w->rc = rc;
  snprintf(w->err, sizeof w->err, "%s", loom_ps_errmsg(ps));
  loom_ps_close(ps);
  free(wv), free(g);
  return NULL;
}

/* One process applying the summed gradients, with the same kernels. */
static void sync_reference(int opt, float *dense, float *table) {
  const loom_ps_opt *o = sync_opt(opt);
  int slots = ps_opt_slots(o->kind);
  loom_ps_init init = {LOOM_PS_UNIFORM, -0.5f, 0.5f, 5};
  float *s1 = malloc(SDN * 4), *s2 = calloc(SDN, 4), *g = malloc(SDN * 4), *sum = malloc(SDN * 4);
  float ts1[SSK * SSD], ts2[SSK * SSD], tsum[SSK * SSD];
  bool touched[SSK] = {false};
  ps_init_fill(&init, 0, 0, dense, SDN);
  for (int i = 0; i < SDN; i++) s1[i] = ps_opt_slot_init(o, 0);
  for (int i = 0; i < SSK; i++)
    ps_init_fill(&init, (uint64_t)i * 1000003u, 0, table + i * SSD, SSD);
  for (int i = 0; i < SSK * SSD; i++) ts1[i] = ps_opt_slot_init(o, 0), ts2[i] = 0;
  for (int s = 0; s < SSTEPS; s++) {
    memset(sum, 0, SDN * 4);
    memset(tsum, 0, sizeof tsum);
    bool in[SSK] = {false};
    for (int r = 0; r < SW; r++) {
      grad_dense(r, s, dense, g);
      for (int i = 0; i < SDN; i++) sum[i] += g[i];
      uint64_t keys[SSK];
      float rows[SSK * SSD], rg[SSK * SSD];
      int n = keys_of(r, s, keys);
      for (int i = 0; i < n; i++)
        memcpy(rows + i * SSD, table + (keys[i] / 1000003u) * SSD, SSD * 4);
      grad_rows(rows, n, r, rg);
      for (int i = 0; i < n; i++) {
        int k = (int)(keys[i] / 1000003u);
        in[k] = touched[k] = true;
        for (int j = 0; j < SSD; j++) tsum[k * SSD + j] += rg[i * SSD + j];
      }
    }
    ps_opt_apply(o, (uint64_t)s + 1, dense, slots ? s1 : NULL, slots > 1 ? s2 : NULL, sum, SDN);
    for (int k = 0; k < SSK; k++)
      if (in[k])
        ps_opt_apply(o, (uint64_t)s + 1, table + k * SSD, slots ? ts1 + k * SSD : NULL,
                     slots > 1 ? ts2 + k * SSD : NULL, tsum + k * SSD, SSD);
  }
  free(s1), free(s2), free(g), free(sum);
}

static void test_sync_equals_single_process(void **state) {
  (void)state;
  for (int n = 1; n <= 3; n++) {
    for (int opt = 0; opt < 3; opt++) {
      cluster c;
      cluster_start(&c, n, SW);
      sync_worker w[SW];
      pthread_t th[SW];
      for (int r = 0; r < SW; r++) {
        memset(&w[r], 0, sizeof w[r]);
        w[r].c = &c, w[r].rank = r, w[r].opt = opt;
        pthread_create(&th[r], NULL, sync_main, &w[r]);
      }
      for (int r = 0; r < SW; r++) pthread_join(th[r], NULL);
      cluster_stop(&c);
      for (int r = 0; r < SW; r++)
        if (w[r].rc)
          fail_msg("shards %d opt %d rank %d: %s: %s", n, opt, r, loom_err_name(w[r].rc), w[r].err);
      for (int s = 0; s < SSTEPS; s++) /* everyone read the same parameters */
        for (int r = 1; r < SW; r++) assert_true(w[r].sum[s] == w[0].sum[s]);
      float dense[SDN], table[SSK * SSD];
      sync_reference(opt, dense, table);
      /* the shard sums in arrival order, the reference in rank order */
      close_enough(w[0].final, dense, SDN, 1e-5, "dense");
      close_enough(w[0].rows, table, SSK * SSD, 1e-5, "rows");
    }
  }
}

/* ---- bounded staleness ------------------------------------------------- */
enum { BW = 3, BSTEPS = 10 };
typedef struct {
  cluster *c;
  int rank, mode, k, rc;
  double called[BSTEPS], returned[BSTEPS];
} bound_worker;

static void *bound_main(void *arg) {
  bound_worker *w = arg;
  loom_ps_opts o = {.mode = w->mode,
                    .staleness = w->k,
                    .workers = BW,
                    .rank = w->rank,
                    .rank_given = 1,
                    .servers = w->c->list,
                    .timeout_ms = 20000};
  loom_ps_t *ps = NULL;
  int rc = loom_ps_connect(NULL, &o, &ps);
  for (int s = 0; rc == 0 && s < BSTEPS; s++) {
    if (w->rank == 0) usleep(15000); /* the slow one */
    w->called[s] = now_s();
    rc = loom_ps_step(ps);
    w->returned[s] = now_s();
  }
  w->rc = rc;
  loom_ps_close(ps);
  return NULL;
}

/* max over steps of how far the fastest ran ahead of rank 0 */
static int run_bounded(int mode, int k) {
  cluster c;
  cluster_start(&c, 2, BW);
  bound_worker w[BW];
  pthread_t th[BW];
  for (int r = 0; r < BW; r++) {
    w[r] = (bound_worker){.c = &c, .rank = r, .mode = mode, .k = k};
    pthread_create(&th[r], NULL, bound_main, &w[r]);
  }
  for (int r = 0; r < BW; r++) pthread_join(th[r], NULL);
  cluster_stop(&c);
  int lead = 0;
  for (int a = 0; a < BW; a++) {
    assert_int_equal(w[a].rc, 0);
    for (int s = 0; s < BSTEPS; s++) {
      /* when a left step s (to start s+1), how many steps had rank 0 ended? */
      int ended = 0;
      while (ended < BSTEPS && w[0].called[ended] <= w[a].returned[s]) ended++;
      if (s + 1 - ended > lead) lead = s + 1 - ended;
      if (mode == LOOM_PS_BOUNDED)
        for (int b = 0; b < BW; b++)
          if (s - k >= 0 && w[b].called[s - k] > w[a].returned[s])
            fail_msg("rank %d left step %d before rank %d ended step %d (K=%d)", a, s, b, s - k, k);
    }
  }
  return lead;
}

static void test_staleness_bound_honoured(void **state) {
  (void)state;
  for (int k = 0; k <= 2; k++) assert_true(run_bounded(LOOM_PS_BOUNDED, k) <= k);
  /* without a bound the fast workers are far ahead: the check above bites */
  assert_true(run_bounded(LOOM_PS_ASYNC, 0) >= 5);
}

/* ---- checkpoints ------------------------------------------------------- */
static char tmpdir[256];

static int count_entries(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) n += !strncmp(e->d_name, prefix, strlen(prefix));
  if (d) closedir(d);
  return n;
}

enum { CK = 500, CD = 4, CN = 3000 };

typedef struct {
  loom_ps_var_t *dv, *sv;
  uint64_t keys[CK];
  float g[CN], rg[CK * CD];
} ck_vars;

static void ck_declare(loom_ps_t *ps, ck_vars *v) {
  size_t shape[2] = {CN / 3, 3};
  loom_ps_init init = {LOOM_PS_NORMAL, 0, 0.1f, 1};
  loom_ps_opt adam = LOOM_PS_OPT_ADAM(0.01f);
  OK(loom_ps_dense(ps, "dense", shape, 2, &init, &adam, &v->dv));
  OK(loom_ps_sparse(ps, "emb", CD, &init, &adam, &v->sv));
  for (int i = 0; i < CK; i++) v->keys[i] = (uint64_t)i * 7777u + 3;
  for (int i = 0; i < CN; i++) v->g[i] = (float)cos(i * 0.1);
  for (int i = 0; i < CK * CD; i++) v->rg[i] = (float)sin(i * 0.3);
}

static void ck_push(loom_ps_t *ps, ck_vars *v) {
  OK(loom_ps_push(ps, v->dv, v->g));
  OK(loom_ps_sparse_push(ps, v->sv, v->keys, CK, v->rg));
}

static void ck_pull(loom_ps_t *ps, ck_vars *v, float *dense, float *rows) {
  OK(loom_ps_pull(ps, v->dv, dense));
  OK(loom_ps_sparse_pull(ps, v->sv, v->keys, CK, rows));
}

static void test_checkpoint_round_trip(void **state) {
  (void)state;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/ck1", tmpdir);
  static float d5[CN], r5[CK * CD], d6[CN], r6[CK * CD], d[CN], r[CK * CD];
  cluster c;
  cluster_start(&c, 2, 1);
  loom_ps_t *ps = client(&c, LOOM_PS_ASYNC, 0, 1, 0, dir);
  ck_vars v;
  ck_declare(ps, &v);
  int64_t step = -1;
  assert_int_equal(loom_ps_restore(ps, &step), LOOM_ENOENT); /* nothing yet */
  for (int i = 0; i < 5; i++) ck_push(ps, &v);
  OK(loom_ps_save(ps, 5));
  ck_pull(ps, &v, d5, r5);
  ck_push(ps, &v);
  ck_pull(ps, &v, d6, r6); /* what the step after 5 gives */
  for (int i = 0; i < 4; i++) ck_push(ps, &v);
  OK(loom_ps_save(ps, 10));
  loom_ps_close(ps);
  cluster_stop(&c);

  /* the files: LATEST, a manifest each, no temporaries */
  char path[400], *latest = NULL;
  snprintf(path, sizeof path, "%s/LATEST", dir);
  OK(loom__read_file(path, 100, &latest, NULL));
  assert_string_equal(latest, "10\n");
  free(latest);
  snprintf(path, sizeof path, "%s/step-000000000005", dir);
  assert_int_equal(count_entries(path, "shard-"), 2);
  assert_int_equal(count_entries(path, "MANIFEST.json"), 1);
  assert_int_equal(count_entries(path, "shard-0-of-2.bin.tmp"), 0);

  /* restore step 5 into 2, then 3 and 1 shards: the same values, and the
   * same next update (the optimizer's slots and counts came back too) */
  for (int n = 1; n <= 3; n++) {
    cluster_start(&c, n, 1);
    ps = client(&c, LOOM_PS_ASYNC, 0, 1, 0, dir);
    step = 5;
    OK(loom_ps_restore(ps, &step));
    assert_int_equal(step, 5);
    assert_int_equal(loom_ps_clock(ps), 5);
    ck_declare(ps, &v); /* after restore: finds them */
    ck_pull(ps, &v, d, r);
    assert_memory_equal(d, d5, sizeof d);
    assert_memory_equal(r, r5, sizeof r);
    ck_push(ps, &v);
    ck_pull(ps, &v, d, r);
    close_enough(d, d6, CN, 1e-6, "dense after restore");
    close_enough(r, r6, CK * CD, 1e-6, "rows after restore");
    loom_ps_close(ps);
    cluster_stop(&c);
  }

  /* latest is 10; a second `latest` restore in the same ps life does not
   * reload (a late worker cannot rewind the others) */
  cluster_start(&c, 2, 1);
  ps = client(&c, LOOM_PS_ASYNC, 0, 1, 0, dir);
  ck_declare(ps, &v);
  step = -1;
  OK(loom_ps_restore(ps, &step));
  assert_int_equal(step, 10);
  ck_pull(ps, &v, d, r);
  ck_push(ps, &v);
  float after[CN];
  OK(loom_ps_pull(ps, v.dv, after));
  step = -1;
  OK(loom_ps_restore(ps, &step));
  OK(loom_ps_pull(ps, v.dv, d));
  assert_memory_equal(d, after, sizeof d);
  /* saving more prunes to the newest LOOM_PS_CKPT_KEEP (3) */
  for (int s = 11; s <= 14; s++) OK(loom_ps_save(ps, s));
  assert_int_equal(count_entries(dir, "step-"), 3);
  loom_ps_close(ps);
  cluster_stop(&c);

  /* a damaged shard file is refused and the live state left as it was */
  snprintf(path, sizeof path, "%s/step-000000000014/shard-1-of-2.bin", dir);
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, 100, SEEK_SET);
  fputc(0x5a, f);
  fclose(f);
  cluster_start(&c, 2, 1);
  ps = client(&c, LOOM_PS_ASYNC, 0, 1, 0, dir);
  ck_declare(ps, &v);
  OK(loom_ps_pull(ps, v.dv, after));
  step = -1;
  int rc = loom_ps_restore(ps, &step);
  assert_int_equal(rc, LOOM_EIO);
  assert_non_null(strstr(loom_ps_errmsg(ps), "damaged"));
  OK(loom_ps_pull(ps, v.dv, d)); /* still usable, untouched */
  assert_memory_equal(d, after, sizeof d);
  loom_ps_close(ps);
  cluster_stop(&c);
  test_rm_rf(dir);
}

/* SYNC: the chief saves at its step while the others run on; the file
 * holds exactly the state after that many steps. */
typedef struct {
  cluster *c;
  int rank, rc, steps;
  const char *dir;
  bool save_at_3;
  float final[64];
} ck_sync_worker;

static void *ck_sync_main(void *arg) {
  ck_sync_worker *w = arg;
  loom_ps_opts o = {.mode = LOOM_PS_SYNC,
                    .workers = 2,
                    .rank = w->rank,
                    .rank_given = 1,
                    .servers = w->c->list,
                    .timeout_ms = 20000,
                    .ckpt_dir = w->dir};
  loom_ps_t *ps = NULL;
  loom_ps_var_t *v;
  size_t n = 64;
  loom_ps_opt opt = LOOM_PS_OPT_ADAM(0.1f);
  float x[64], g[64];
  int rc = loom_ps_connect(NULL, &o, &ps);
  int64_t step = -1;
  if (rc == 0) {
    rc = loom_ps_restore(ps, &step);
    if (rc == LOOM_ENOENT) rc = 0;
  }
  if (rc == 0) rc = loom_ps_dense(ps, "x", &n, 1, NULL, &opt, &v);
  while (rc == 0 && loom_ps_clock(ps) < w->steps) {
    if (w->rank == 0 && w->save_at_3 && loom_ps_clock(ps) == 3) rc = loom_ps_save(ps, 3);
    if (rc == 0) rc = loom_ps_pull(ps, v, x);
    for (int i = 0; i < 64; i++) g[i] = x[i] - (float)(i * (w->rank + 1));
    if (rc == 0) rc = loom_ps_push(ps, v, g);
    if (rc == 0) rc = loom_ps_step(ps);
  }
  if (rc == 0) rc = loom_ps_pull(ps, v, w->final);
  w->rc = rc;
  loom_ps_close(ps);
  return NULL;
}

static void run_ck_sync(const char *dir, int steps, bool save, float *final) {
  cluster c;
  cluster_start(&c, 2, 2);
  ck_sync_worker w[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    w[r] = (ck_sync_worker){.c = &c, .rank = r, .steps = steps, .dir = dir, .save_at_3 = save};
    pthread_create(&th[r], NULL, ck_sync_main, &w[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  cluster_stop(&c);
  assert_int_equal(w[0].rc, 0);
  assert_int_equal(w[1].rc, 0);
  assert_memory_equal(w[0].final, w[1].final, sizeof w[0].final);
  memcpy(final, w[0].final, sizeof w[0].final);
}

static void test_checkpoint_sync_resume(void **state) {
  (void)state;
  char dir[300], other[300];
  snprintf(dir, sizeof dir, "%s/ck2", tmpdir);
  snprintf(other, sizeof other, "%s/ck2-none", tmpdir);
  float straight[64], first[64], resumed[64];
  run_ck_sync(other, 6, false, straight);                  /* 6 steps in one go */
  run_ck_sync(dir, 5, true, first);                        /* saves at 3, stops at 5 */
  run_ck_sync(dir, 6, false, resumed);                     /* a new ps: restores 3, runs 3 more */
  assert_memory_equal(resumed, straight, sizeof straight); /* 2 workers: exact */
  assert_true(memcmp(first, straight, sizeof first) != 0);
  test_rm_rf(dir);
  test_rm_rf(other);
}

/* ---- bad peers --------------------------------------------------------- */
static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

/* Reads exactly n bytes (1 if the peer closed first: 0 returned). */
static int raw_read(int fd, void *buf, size_t n, int ms) {
  size_t got = 0;
  while (got < n) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return -1;
    ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
    if (r <= 0) return 0;
    got += (size_t)r;
  }
  return 1;
}

/* 1 when the server closed the connection within ms */
static int raw_closed(int fd, int ms) {
  char b[4096];
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return 0;
    ssize_t r = recv(fd, b, sizeof b, 0);
    if (r <= 0) return 1;
  }
}

static int raw_authed(int port, const char *secret) {
  int fd = raw_connect(port);
  unsigned char ch[PS_CHALLENGE_LEN], au[PS_AUTH_LEN], ok[PS_AUTH_OK_LEN];
  assert_int_equal(raw_read(fd, ch, sizeof ch, 2000), 1);
  memcpy(au, PS_MAGIC, 8);
  wire_mac(secret, "loom-ps-c", ch + 8, au + 8);
  memset(au + 40, 7, 32);
  assert_int_equal(send(fd, au, sizeof au, MSG_NOSIGNAL), (ssize_t)sizeof au);
  if (raw_read(fd, ok, sizeof ok, 2000) != 1) {
    close(fd);
    return -1;
  }
  return fd;
}

static void raw_send(int fd, const ps_hdr *h, const void *p, size_t n) {
  unsigned char b[PS_HDR];
  ps_hdr_put(b, h);
  send(fd, b, PS_HDR, MSG_NOSIGNAL);
  if (n) send(fd, p, n, MSG_NOSIGNAL);
}

static int raw_reply(int fd, ps_hdr *r, char *msg, size_t cap) {
  unsigned char b[PS_HDR];
  if (raw_read(fd, b, PS_HDR, 3000) != 1) return -1;
  ps_hdr_get(b, r);
  if (r->len >= cap) return -1;
  if (r->len && raw_read(fd, msg, r->len, 3000) != 1) return -1;
  msg[r->len] = 0;
  return 0;
}

static void test_bad_messages_refused(void **state) {
  (void)state;
  setenv("LOOM_AUTH_TIMEOUT", "400", 1);
  cluster c;
  cluster_start(&c, 2, 1);
  unsetenv("LOOM_AUTH_TIMEOUT");
  int port = c.port[0];
  /* 1. the wrong secret: closed after the answer */
  assert_int_equal(raw_authed(port, "not-the-secret"), -1);
  /* 2. bytes before authenticating: closed */
  int fd = raw_connect(port);
  unsigned char junk[200];
  memset(junk, 'x', sizeof junk);
  send(fd, junk, sizeof junk, MSG_NOSIGNAL);
  assert_true(raw_closed(fd, 2000));
  close(fd);
  /* 3. silence: closed after LOOM_AUTH_TIMEOUT */
  fd = raw_connect(port);
  double t0 = now_s();
  assert_true(raw_closed(fd, 3000));
  assert_true(now_s() - t0 < 2.0);
  close(fd);
  /* 4. after auth, a request before CONFIG: closed */
  fd = raw_authed(port, SECRET);
  ps_hdr h = {.op = PS_OP_INFO};
  raw_send(fd, &h, NULL, 0);
  assert_true(raw_closed(fd, 2000));
  close(fd);
  /* 5. an oversized length: closed before anything is allocated */
  fd = raw_authed(port, SECRET);
  h = (ps_hdr){.op = PS_OP_PUSH, .len = 0x7fffffff};
  unsigned char b[PS_HDR];
  ps_hdr_put(b, &h);
  send(fd, b, PS_HDR, MSG_NOSIGNAL);
  assert_true(raw_closed(fd, 2000));
  close(fd);
  /* 6. an unknown op: closed */
  fd = raw_authed(port, SECRET);
  h = (ps_hdr){.op = 999};
  raw_send(fd, &h, NULL, 0);
  assert_true(raw_closed(fd, 2000));
  close(fd);
  /* 7. well-formed requests the shard cannot serve get errors, and the
   * connection goes on */
  fd = raw_authed(port, SECRET);
  char msg[1024];
  ps_hdr r;
  h = (ps_hdr){.op = PS_OP_CONFIG, .id = 1, .off = 1, .rank = 0};
  raw_send(fd, &h, NULL, 0);
  assert_int_equal(raw_reply(fd, &r, msg, sizeof msg), 0);
  assert_int_equal(r.rc, 0);
  h = (ps_hdr){.op = PS_OP_PULL, .id = 2, .var = 12345, .count = 1};
  raw_send(fd, &h, NULL, 0);
  assert_int_equal(raw_reply(fd, &r, msg, sizeof msg), 0);
  assert_int_equal(r.rc, LOOM_EINVAL);
  assert_int_equal(r.id, 2);
  assert_non_null(strstr(msg, "no dense variable"));
  h = (ps_hdr){.op = PS_OP_DECLARE, .id = 3, .len = 10};
  raw_send(fd, &h, "garbage!!!", 10);
  assert_int_equal(raw_reply(fd, &r, msg, sizeof msg), 0);
  assert_int_equal(r.rc, LOOM_EINVAL);
  /* a real declaration, then reads past its end and keys of shard 1 */
  ps_decl d = {
      .kind = PS_SPARSE, .ndim = 1, .count = 2, .shape = {2}, .opt = LOOM_PS_OPT_SGD(0.1f)};
  strcpy(d.name, "t");
  ps_wbuf wb = {0};
  ps_decl_put(&wb, &d);
  h = (ps_hdr){.op = PS_OP_DECLARE, .id = 4};
  h.len = (uint32_t)wb.len;
  raw_send(fd, &h, wb.p, wb.len);
  free(wb.p);
  assert_int_equal(raw_reply(fd, &r, msg, sizeof msg), 0);
  assert_int_equal(r.rc, 0);
  uint64_t key = 0;
  while (ps_key_shard(key, 2) != 1) key++;
  h = (ps_hdr){.op = PS_OP_SPULL, .id = 5, .var = r.var, .count = 1, .len = 8};
  raw_send(fd, &h, &key, 8);
  assert_int_equal(raw_reply(fd, &r, msg, sizeof msg), 0);
  assert_int_equal(r.rc, LOOM_EINVAL);
  assert_non_null(strstr(msg, "belongs to shard 1"));
  /* a payload length that does not match the count: closed */
  h = (ps_hdr){.op = PS_OP_SPUSH, .id = 6, .var = 0, .count = 1000, .len = 8};
  raw_send(fd, &h, &key, 8);
  assert_true(raw_closed(fd, 2000));
  close(fd);
  /* 8. after all that, a real client is served */
  loom_ps_t *ps = client(&c, LOOM_PS_ASYNC, 0, 1, 0, NULL);
  loom_ps_var_t *v;
  loom_ps_opt opt = LOOM_PS_OPT_SGD(1);
  OK(loom_ps_sparse(ps, "t", 2, NULL, &opt, &v));
  uint64_t k = 42;
  float g[2] = {1, 2}, out[2];
  OK(loom_ps_sparse_push(ps, v, &k, 1, g));
  OK(loom_ps_sparse_pull(ps, v, &k, 1, out));
  assert_true(out[0] == -1 && out[1] == -2);
  /* and a client with the wrong secret is told so */
  setenv("LOOM_SECRET", "wrong", 1);
  loom_ps_opts o = {.servers = c.list, .rank_given = 1};
  loom_ps_t *bad = NULL;
  assert_int_equal(loom_ps_connect(NULL, &o, &bad), LOOM_EAUTH);
  setenv("LOOM_SECRET", SECRET, 1);
  /* declarations that disagree are refused with the reason */
  loom_ps_opt adam = LOOM_PS_OPT_ADAM(1);
  assert_int_equal(loom_ps_sparse(ps, "t", 2, NULL, &adam, &v), LOOM_EINVAL);
  assert_non_null(strstr(loom_ps_errmsg(ps), "optimizer sgd"));
  assert_int_equal(loom_ps_sparse(ps, "t", 3, NULL, &opt, &v), LOOM_EINVAL);
  loom_ps_close(ps);
  cluster_stop(&c);
}

static void test_mode_mismatch_refused(void **state) {
  (void)state;
  cluster c;
  cluster_start(&c, 1, 2);
  loom_ps_t *a = client(&c, LOOM_PS_SYNC, 0, 2, 0, NULL), *b = NULL;
  loom_ps_opts o = {.mode = LOOM_PS_ASYNC, .servers = c.list, .rank = 1, .rank_given = 1};
  assert_int_equal(loom_ps_connect(NULL, &o, &b), LOOM_ESTATE);
  o.mode = LOOM_PS_SYNC;
  o.rank = 5; /* no such worker */
  assert_int_equal(loom_ps_connect(NULL, &o, &b), LOOM_EINVAL);
  loom_ps_close(a);
  cluster_stop(&c);
}

/* ---- failures ---------------------------------------------------------- */
typedef struct {
  loom_ps_t *ps;
  loom_ps_var_t *v;
  int rc;
  double when;
} waiter;

static void *pull_waits(void *arg) {
  waiter *w = arg;
  float x[10];
  w->rc = loom_ps_pull(w->ps, w->v, x);
  w->when = now_s();
  return NULL;
}

static void test_shard_death_fails_fast(void **state) {
  (void)state;
  cluster c;
  cluster_start(&c, 2, 2);
  loom_ps_t *ps = client(&c, LOOM_PS_SYNC, 0, 2, 0, NULL);
  size_t n = 10;
  loom_ps_opt opt = LOOM_PS_OPT_SGD(1);
  loom_ps_var_t *v;
  OK(loom_ps_dense(ps, "x", &n, 1, NULL, &opt, &v));
  OK(loom_ps_step(ps)); /* rank 1 never ends step 0: the pull of step 1 waits */
  waiter w = {.ps = ps, .v = v};
  pthread_t th;
  pthread_create(&th, NULL, pull_waits, &w);
  usleep(200000);
  double t0 = now_s();
  for (int i = 0; i < 2; i++) shard_stop(&c, i);
  pthread_join(th, NULL);
  assert_int_equal(w.rc, LOOM_ECONN);
  assert_true(w.when - t0 < 1.0);
  float x[10];
  assert_int_equal(loom_ps_pull(ps, v, x), LOOM_ECONN); /* and stays failed */
  assert_non_null(strstr(loom_ps_errmsg(ps), "closed the connection"));
  loom_ps_close(ps);
  /* nobody listening: connect fails, no hang */
  setenv("LOOM_CONNECT_TIMEOUT", "300", 1);
  loom_ps_opts o = {.servers = c.list, .rank_given = 1};
  loom_ps_t *none = NULL;
  assert_int_equal(loom_ps_connect(NULL, &o, &none), LOOM_ECONN);
  unsetenv("LOOM_CONNECT_TIMEOUT");
}

static void test_stuck_step_times_out(void **state) {
  (void)state;
  cluster c;
  cluster_start(&c, 1, 2);
  loom_ps_opts o = {
      .mode = LOOM_PS_SYNC, .workers = 2, .rank_given = 1, .servers = c.list, .timeout_ms = 300};
  loom_ps_t *ps = NULL;
  OK(loom_ps_connect(NULL, &o, &ps));
  size_t n = 3;
  loom_ps_opt opt = LOOM_PS_OPT_SGD(1);
  loom_ps_var_t *v;
  OK(loom_ps_dense(ps, "x", &n, 1, NULL, &opt, &v));
  OK(loom_ps_step(ps));
  float x[3];
  double t0 = now_s();
  assert_int_equal(loom_ps_pull(ps, v, x), LOOM_ETIMEDOUT);
  assert_true(now_s() - t0 < 1.5);
  loom_ps_close(ps);
  cluster_stop(&c);
}

static int make_tmp(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/ps_server_test.XXXXXX");
  if (!mkdtemp(tmpdir)) return -1;
  return 0;
}
static int drop_tmp(void **state) {
  (void)state;
  test_rm_rf(tmpdir);
  return 0;
}

int main(void) {
  setup(NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_async_dense_matches_reference),
      cmocka_unit_test(test_sparse_duplicates_summed),
      cmocka_unit_test(test_sharding_by_hash),
      cmocka_unit_test(test_sync_equals_single_process),
      cmocka_unit_test(test_staleness_bound_honoured),
      cmocka_unit_test(test_checkpoint_round_trip),
      cmocka_unit_test(test_checkpoint_sync_resume),
      cmocka_unit_test(test_bad_messages_refused),
      cmocka_unit_test(test_mode_mismatch_refused),
      cmocka_unit_test(test_shard_death_fails_fast),
      cmocka_unit_test(test_stuck_step_times_out),
  };
  return cmocka_run_group_tests(tests, make_tmp, drop_tmp);
}
