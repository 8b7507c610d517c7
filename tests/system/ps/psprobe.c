/* psprobe.c: the parameter server through real jobs (tests/system/test_ps.py).
 *
 *   psprobe sync-ref OUT.json   SYNC training of a dense variable and a
 *       sparse table per optimizer (SGD, Adagrad, Adam); rank 0 writes the
 *       initial and final values for a PyTorch reference to recompute.
 *   psprobe ckpt OUT STEPS EVERY SLEEP_MS   SYNC training that restores the
 *       latest checkpoint, saves every EVERY steps (rank 0) and writes the
 *       final values to OUT (rank 0); prints RESTORED/FRESH and SAVED lines.
 *   psprobe die   pulls until the ps goes away, then prints how it failed
 *       (PSFAIL rc=... t=<CLOCK_MONOTONIC seconds>) and waits to be stopped.
 *
 * The gradients are closed-form functions of the weights read, so the
 * reference can replay them. */
#include <loom.h>
#include <loom/ps.h>

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) {                                                                                \
      fprintf(stderr, "psprobe: line %d: %s: %s: %s\n", __LINE__, #call, loom_err_name(rc_),       \
              ps ? loom_ps_errmsg(ps) : "");                                                       \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { DN = 1000, SK = 40, SD = 3, STEPS = 15 };

/* worker r's gradient of 0.5 * |w - target_r|^2 */
static void grad_dense(int r, int s, const float *w, float *g, int n) {
  for (int i = 0; i < n; i++) g[i] = w[i] - (float)sin(0.01 * i * (r + 1) + 0.1 * s);
}
/* worker r's keys at step s (key 0 is everyone's, and twice for some) */
static int keys_of(int r, int s, int world, uint64_t *k) {
  int n = 0;
  for (int i = (r + s) % world; i < SK; i += world) k[n++] = (uint64_t)i * 1000003u;
  k[n++] = 0;
  return n;
}
static void grad_rows(const float *rows, int n, int r, float *g) {
  for (int i = 0; i < n * SD; i++) g[i] = rows[i] * 0.5f - 0.1f * (float)(r + 1);
}

static void put_array(FILE *f, const char *name, const float *x, int n, bool comma) {
  fprintf(f, "\"%s\": [", name);
  for (int i = 0; i < n; i++) fprintf(f, "%s%.9g", i ? "," : "", x[i]);
  fprintf(f, "]%s\n", comma ? "," : "");
}

static int sync_ref(loom_t *l, const char *out) {
  loom_ps_opts o = {.mode = LOOM_PS_SYNC};
  loom_ps_t *ps = NULL;
  CHECK(loom_ps_connect(l, &o, &ps));
  int r = loom_rank(l), world = loom_world_size(l);
  const char *names[3] = {"sgd", "adagrad", "adam"};
  loom_ps_opt opts[3] = {LOOM_PS_OPT_SGD(0.05f), LOOM_PS_OPT_ADAGRAD(0.1f),
                         LOOM_PS_OPT_ADAM(0.02f)};
  opts[1].initial_accumulator = 0.1f;
  loom_ps_init init = {LOOM_PS_UNIFORM, -0.5f, 0.5f, 5};
  loom_ps_var_t *dv[3], *sv[3];
  static float w[3][DN], w0[3][DN], rows0[3][SK * SD], rowsN[3][SK * SD];
  float g[DN], rows[SK * SD], rg[SK * SD];
  uint64_t keys[SK], all[SK];
  for (int i = 0; i < SK; i++) all[i] = (uint64_t)i * 1000003u;
  size_t shape[2] = {DN / 10, 10};
  for (int k = 0; k < 3; k++) {
    char name[32];
    snprintf(name, sizeof name, "dense-%s", names[k]);
    CHECK(loom_ps_dense(ps, name, shape, 2, &init, &opts[k], &dv[k]));
    snprintf(name, sizeof name, "emb-%s", names[k]);
    CHECK(loom_ps_sparse(ps, name, SD, &init, &opts[k], &sv[k]));
    CHECK(loom_ps_sparse_pull(ps, sv[k], all, SK, rows0[k]));
  }
  for (int s = 0; s < STEPS; s++) {
    for (int k = 0; k < 3; k++) {
      CHECK(loom_ps_pull(ps, dv[k], w[k]));
      if (s == 0) memcpy(w0[k], w[k], sizeof w[k]);
      grad_dense(r, s, w[k], g, DN);
      CHECK(loom_ps_push(ps, dv[k], g));
      int n = keys_of(r, s, world, keys);
      CHECK(loom_ps_sparse_pull(ps, sv[k], keys, (size_t)n, rows));
      grad_rows(rows, n, r, rg);
      CHECK(loom_ps_sparse_push(ps, sv[k], keys, (size_t)n, rg));
    }
    CHECK(loom_ps_step(ps));
  }
  for (int k = 0; k < 3; k++) {
    CHECK(loom_ps_pull(ps, dv[k], w[k]));
    CHECK(loom_ps_sparse_pull(ps, sv[k], all, SK, rowsN[k]));
  }
  if (r == 0) {
    FILE *f = fopen(out, "w");
    if (!f) return 1;
    fprintf(f, "{\"world\": %d, \"steps\": %d, \"shards\": %d,\n", world, STEPS,
            loom_ps_shards(ps));
    for (int k = 0; k < 3; k++) {
      char name[32];
      fprintf(f, "\"%s\": {\n", names[k]);
      put_array(f, "dense0", w0[k], DN, true);
      put_array(f, "dense", w[k], DN, true);
      snprintf(name, sizeof name, "rows0");
      put_array(f, name, rows0[k], SK * SD, true);
      put_array(f, "rows", rowsN[k], SK * SD, false);
      fprintf(f, "}%s\n", k < 2 ? "," : "");
    }
    fprintf(f, "}\n");
    fclose(f);
  }
  printf("SYNCREF rank=%d ok\n", r);
  loom_ps_close(ps);
  return 0;
}

static int ckpt(loom_t *l, const char *out, int steps, int every, int sleep_ms) {
  loom_ps_opts o = {.mode = LOOM_PS_SYNC};
  loom_ps_t *ps = NULL;
  CHECK(loom_ps_connect(l, &o, &ps));
  int r = loom_rank(l), world = loom_world_size(l);
  int64_t step = -1;
  int rc = loom_ps_restore(ps, &step);
  if (rc == LOOM_ENOENT)
    printf("FRESH rank=%d attempt=%d\n", r, loom_attempt(l));
  else
    CHECK(rc);
  if (rc == 0)
    printf("RESTORED rank=%d attempt=%d step=%lld\n", r, loom_attempt(l), (long long)step);
  fflush(stdout);
  loom_ps_init init = {LOOM_PS_NORMAL, 0, 0.3f, 9};
  loom_ps_opt adam = LOOM_PS_OPT_ADAM(0.05f);
  loom_ps_var_t *dv, *sv;
  size_t n = DN;
  CHECK(loom_ps_dense(ps, "x", &n, 1, &init, &adam, &dv));
  CHECK(loom_ps_sparse(ps, "emb", SD, &init, &adam, &sv));
  static float w[DN], g[DN];
  float rows[SK * SD], rg[SK * SD];
  uint64_t keys[SK];
  while (loom_ps_clock(ps) < steps) {
    int s = (int)loom_ps_clock(ps);
    if (r == 0 && s > 0 && s % every == 0) {
      CHECK(loom_ps_save(ps, s));
      printf("SAVED step=%d\n", s);
      fflush(stdout);
    }
    CHECK(loom_ps_pull(ps, dv, w));
    grad_dense(r, s, w, g, DN);
    CHECK(loom_ps_push(ps, dv, g));
    int k = keys_of(r, s, world, keys);
    CHECK(loom_ps_sparse_pull(ps, sv, keys, (size_t)k, rows));
    grad_rows(rows, k, r, rg);
    CHECK(loom_ps_sparse_push(ps, sv, keys, (size_t)k, rg));
    CHECK(loom_ps_step(ps));
    usleep((useconds_t)sleep_ms * 1000);
  }
  CHECK(loom_ps_pull(ps, dv, w));
  for (int i = 0; i < SK; i++) keys[i] = (uint64_t)i * 1000003u;
  CHECK(loom_ps_sparse_pull(ps, sv, keys, SK, rows));
  if (r == 0) {
    FILE *f = fopen(out, "w");
    if (!f) return 1;
    fprintf(f, "{\n");
    put_array(f, "dense", w, DN, true);
    put_array(f, "rows", rows, SK * SD, false);
    fprintf(f, "}\n");
    fclose(f);
  }
  printf("DONE rank=%d step=%lld\n", r, (long long)loom_ps_clock(ps));
  loom_ps_close(ps);
  return 0;
}

static int die(loom_t *l) {
  /* outlive the attempt's SIGTERM long enough to report */
  signal(SIGTERM, SIG_IGN);
  loom_ps_t *ps = NULL;
  CHECK(loom_ps_connect(l, NULL, &ps));
  loom_ps_opt sgd = LOOM_PS_OPT_SGD(0.1f);
  loom_ps_var_t *v;
  size_t n = 4096;
  CHECK(loom_ps_dense(ps, "x", &n, 1, NULL, &sgd, &v));
  static float w[4096];
  printf("PULLING\n");
  fflush(stdout);
  int rc;
  do rc = loom_ps_pull(ps, v, w);
  while (rc == 0);
  printf("PSFAIL rc=%s t=%.3f msg=%s\n", loom_err_name(rc), mono(), loom_ps_errmsg(ps));
  fflush(stdout);
  loom_ps_close(ps);
  sleep(30);
  return 0;
}

int main(int argc, char **argv) {
  loom_t *l = NULL;
  loom_ps_t *ps = NULL;
  CHECK(loom_init(&l));
  int rc = 2;
  if (argc == 3 && !strcmp(argv[1], "sync-ref"))
    rc = sync_ref(l, argv[2]);
  else if (argc == 6 && !strcmp(argv[1], "ckpt"))
    rc = ckpt(l, argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
  else if (argc == 2 && !strcmp(argv[1], "die"))
    rc = die(l);
  else
    fprintf(stderr, "usage: psprobe sync-ref OUT | ckpt OUT STEPS EVERY SLEEP_MS | die\n");
  loom_finish(l);
  return rc;
}
