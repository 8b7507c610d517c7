/* ctr.c: click-through-rate prediction with huge sparse embedding tables,
 * trained through loom's parameter server (loom/ps.h).
 *
 * The data: synthetic ad impressions, each 8 categorical fields (device,
 * hour, category, site, app, ad, user, query) with vocabularies from 4 to
 * 10^7 values drawn from power laws, so a few values are everywhere and
 * most are seen once or never, as in Criteo's logs. A value becomes a
 * feature key = hash(field, value). Clicks come from a hidden factorization
 * machine over those keys: the data has structure to find.
 *
 * The model: a factorization machine (Rendle, 2010), the classic CTR model,
 *
 *   logit = b + sum_f w[k_f] + sum_{f<g} <v[k_f], v[k_g]>
 *
 * with w a sparse table of rows of 1 float and v one of rows of --dim
 * floats (the embeddings), both keyed by the feature keys and created on
 * first use on the shard the key hashes to; b is a dense variable. Every
 * step each worker draws its own batch, pulls the rows its keys need,
 * computes the log-loss gradient and pushes it (repeated keys summed by
 * the client). Adagrad on the server, the usual optimizer for CTR.
 *
 *   --mode async    every push applied at once
 *   --mode sync     per step the workers' gradients are summed (each
 *                   worker weighs its batch by 1/world) and applied once
 *   --mode bounded  async, no worker more than --staleness steps ahead
 *
 * Each rank prints its training loss every --log-every steps; the chief
 * then evaluates on 20000 held-out impressions and prints a RESULT line
 * (JSON): first and last training loss windows, held-out log-loss and
 * AUC, and the log-loss of always predicting the average click rate. */
#include <loom.h>
#include <loom/ps.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FIELDS 8
#define TRUE_DIM 4

static const uint64_t VOCAB[FIELDS] = {4, 24, 60, 3000, 20000, 200000, 2000000, 10000000};
static const double SKEW[FIELDS] = {1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0};
/* How much each field's values move the hidden click model (linear and
 * pairwise): most of the signal is in the frequent values, as in ad logs,
 * so there is something to learn from a few hundred thousand impressions. */
static const double TRUE_W[FIELDS] = {0.8, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.3};
static const double TRUE_V[FIELDS] = {0.6, 0.6, 0.5, 0.4, 0.3, 0.25, 0.1, 0.1};

typedef struct {
  const char *mode;
  int staleness, steps, batch, log_every, dim, save_every, eval_n;
  float lr;
  uint64_t seed;
} args;

/* ---- randomness: splitmix64 streams ----------------------------------- */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
typedef struct {
  uint64_t s;
} rng;
static double uni(rng *r) { return (double)(mix(r->s++) >> 11) * 0x1.0p-53; }
static double gauss(uint64_t h) { /* a normal draw that is a function of h */
  double u1 = ((double)(mix(h) >> 11) + 1) * 0x1.0p-53, u2 = (double)(mix(h ^ 1) >> 11) * 0x1.0p-53;
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- the data --------------------------------------------------------- */
static uint64_t feature_key(int f, uint64_t value) {
  return mix(((uint64_t)(f + 1) << 56) ^ value);
}

/* The hidden model that makes the clicks. */
static double true_logit(const uint64_t *keys) {
  double z = -1.2, v[FIELDS][TRUE_DIM];
  for (int f = 0; f < FIELDS; f++) {
    z += TRUE_W[f] * gauss(keys[f] * 3 + 1);
    for (int k = 0; k < TRUE_DIM; k++)
      v[f][k] = TRUE_V[f] * gauss(keys[f] * 7 + (uint64_t)k * 131 + 2);
  }
  for (int f = 0; f < FIELDS; f++)
    for (int g = f + 1; g < FIELDS; g++)
      for (int k = 0; k < TRUE_DIM; k++) z += v[f][k] * v[g][k];
  return z;
}

/* One impression: its keys and whether it was clicked. */
static int impression(rng *r, uint64_t *keys) {
  for (int f = 0; f < FIELDS; f++) {
    uint64_t value = (uint64_t)((double)VOCAB[f] * pow(uni(r), SKEW[f]));
    keys[f] = feature_key(f, value);
  }
  double p = 1 / (1 + exp(-true_logit(keys)));
  return uni(r) < p;
}

/* ---- the model -------------------------------------------------------- */
typedef struct {
  loom_ps_t *ps;
  loom_ps_var_t *w, *v, *b;
  int dim;
  /* per batch, n = batch * FIELDS */
  uint64_t *keys; /* [n] */
  float *wr, *vr; /* [n], [n * dim]: the rows pulled */
  float *gw, *gv; /* gradients, same shapes */
  int *y;
} model;

/* Forward (and backward when scale != 0) over a batch: returns the summed
 * log-loss; fills p[] with the predictions when p is not NULL. */
static double fm(model *m, int batch, float bias, double scale, float *gb, double *p) {
  int d = m->dim;
  double loss = 0, gbias = 0;
  double *s = malloc((size_t)d * sizeof *s);
  for (int i = 0; i < batch; i++) {
    const float *w = m->wr + (size_t)i * FIELDS, *v = m->vr + (size_t)i * FIELDS * d;
    double z = bias, sq = 0;
    for (int k = 0; k < d; k++) s[k] = 0;
    for (int f = 0; f < FIELDS; f++) {
      z += w[f];
      for (int k = 0; k < d; k++) {
        s[k] += v[f * d + k];
        sq += (double)v[f * d + k] * v[f * d + k];
      }
    }
    for (int k = 0; k < d; k++) z += 0.5 * s[k] * s[k];
    z -= 0.5 * sq;
    double pr = 1 / (1 + exp(-z));
    if (p) p[i] = pr;
    double pc = fmin(fmax(pr, 1e-7), 1 - 1e-7);
    loss -= m->y[i] ? log(pc) : log(1 - pc);
    if (scale == 0) continue;
    double dz = (pr - m->y[i]) * scale; /* d loss / d logit */
    gbias += dz;
    for (int f = 0; f < FIELDS; f++) {
      m->gw[(size_t)i * FIELDS + f] = (float)dz;
      for (int k = 0; k < d; k++)
        m->gv[((size_t)i * FIELDS + f) * d + k] = (float)(dz * (s[k] - v[f * d + k]));
    }
  }
  free(s);
  if (gb) *gb = (float)gbias;
  return loss;
}

/* Pulls what a batch needs: the rows of its keys and the bias. */
static int pull(model *m, int batch, float *bias) {
  size_t n = (size_t)batch * FIELDS;
  int rc = loom_ps_sparse_pull(m->ps, m->w, m->keys, n, m->wr);
  if (rc == 0) rc = loom_ps_sparse_pull(m->ps, m->v, m->keys, n, m->vr);
  if (rc == 0) rc = loom_ps_pull(m->ps, m->b, bias);
  return rc;
}

static int cmp_pred(const void *a, const void *b) {
  double x = ((const double *)a)[0], y = ((const double *)b)[0];
  return x < y ? -1 : x > y;
}

/* AUC: the chance a random click scores above a random non-click. */
static double auc(const double *p, const int *y, int n) {
  double *pair = malloc((size_t)n * 2 * sizeof *pair);
  for (int i = 0; i < n; i++) pair[2 * i] = p[i], pair[2 * i + 1] = y[i];
  qsort(pair, (size_t)n, 2 * sizeof *pair, cmp_pred);
  double pos = 0, neg = 0, sum = 0;
  for (int i = 0; i < n; i++) {
    if (pair[2 * i + 1] > 0.5) {
      pos++;
      sum += neg; /* ties count as wins here: scores are continuous */
    } else {
      neg++;
    }
  }
  free(pair);
  return pos && neg ? sum / (pos * neg) : 0.5;
}

static void usage(void) {
  fprintf(stderr,
          "usage: ctr [--mode async|sync|bounded] [--staleness K] [--steps N] [--batch B]\n"
          "           [--dim D] [--lr X] [--log-every N] [--save-every N] [--eval N] [--seed S]\n"
          "Run it as the chief and workers of a loom job with a ps role (see job-*.yaml).\n");
}

static int parse(int argc, char **argv, args *a) {
  *a = (args){"async", 2, 300, 256, 50, 8, 0, 20000, 0.2f, 1};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return -1;
    if (!strcmp(k, "--mode"))
      a->mode = v;
    else if (!strcmp(k, "--staleness"))
      a->staleness = atoi(v);
    else if (!strcmp(k, "--steps"))
      a->steps = atoi(v);
    else if (!strcmp(k, "--batch"))
      a->batch = atoi(v);
    else if (!strcmp(k, "--dim"))
      a->dim = atoi(v);
    else if (!strcmp(k, "--lr"))
      a->lr = (float)atof(v);
    else if (!strcmp(k, "--log-every"))
      a->log_every = atoi(v);
    else if (!strcmp(k, "--save-every"))
      a->save_every = atoi(v);
    else if (!strcmp(k, "--eval"))
      a->eval_n = atoi(v);
    else if (!strcmp(k, "--seed"))
      a->seed = strtoull(v, NULL, 10);
    else
      return -1;
    i++;
  }
  if (a->steps < 1 || a->batch < 1 || a->dim < 1 || a->log_every < 1 || a->eval_n < 0) return -1;
  return 0;
}

#define TRY(call)                                                                                  \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) {                                                                                \
      fprintf(stderr, "ctr: %s: %s (%s)\n", #call, loom_strerror(rc_),                             \
              m.ps ? loom_ps_errmsg(m.ps) : loom_errmsg(l));                                       \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

int main(int argc, char **argv) {
  args a;
  if (parse(argc, argv, &a) < 0) {
    usage();
    return 2;
  }
  loom_t *l = NULL;
  model m = {0};
  int status = 1;
  int rc = loom_init(&l);
  if (rc != 0) {
    fprintf(stderr,
            "ctr: %s: run it inside a loom job with a ps role (build/loom "
            "run examples/ctr/job-async.yaml)\n",
            loom_strerror(rc));
    return 2;
  }
  int rank = loom_rank(l), world = loom_world_size(l);
  loom_ps_opts o = {.mode = !strcmp(a.mode, "sync")      ? LOOM_PS_SYNC
                            : !strcmp(a.mode, "bounded") ? LOOM_PS_BOUNDED
                                                         : LOOM_PS_ASYNC,
                    .staleness = a.staleness};
  TRY(loom_ps_connect(l, &o, &m.ps));
  int64_t from = -1;
  rc = loom_ps_restore(m.ps, &from);
  if (rc == 0)
    printf("rank %d: resumed from the checkpoint of step %lld\n", rank, (long long)from);
  else if (rc != LOOM_ENOENT)
    TRY(rc);
  m.dim = a.dim;
  /* tables: every new row starts small and random (symmetry breaking);
   * the linear weights at 0 */
  loom_ps_init zero = {LOOM_PS_ZEROS, 0, 0, 0}, small = {LOOM_PS_NORMAL, 0, 0.01f, a.seed};
  loom_ps_opt ada = LOOM_PS_OPT_ADAGRAD(a.lr);
  ada.initial_accumulator = 0.1f;
  size_t one = 1;
  TRY(loom_ps_sparse(m.ps, "ctr/w", 1, &zero, &ada, &m.w));
  TRY(loom_ps_sparse(m.ps, "ctr/v", (size_t)a.dim, &small, &ada, &m.v));
  TRY(loom_ps_dense(m.ps, "ctr/bias", &one, 1, &zero, &ada, &m.b));
  int batch = a.batch > a.eval_n ? a.batch : a.eval_n;
  size_t n = (size_t)batch * FIELDS;
  m.keys = malloc(n * sizeof *m.keys);
  m.wr = malloc(n * sizeof *m.wr);
  m.vr = malloc(n * (size_t)a.dim * sizeof *m.vr);
  m.gw = malloc(n * sizeof *m.gw);
  m.gv = malloc(n * (size_t)a.dim * sizeof *m.gv);
  m.y = malloc((size_t)batch * sizeof *m.y);
  if (!m.keys || !m.wr || !m.vr || !m.gw || !m.gv || !m.y) goto out;
  /* Sync: the workers' gradients are summed, so each weighs its batch by
   * 1/world and the update is the mean over the global batch. */
  double scale = 1.0 / a.batch / (o.mode == LOOM_PS_SYNC ? world : 1);
  double start = -1, first = -1, window = 0, last = 0;
  int in_window = 0;
  clock_t t0 = clock();
  while (loom_ps_clock(m.ps) < a.steps) {
    int64_t s = loom_ps_clock(m.ps);
    if (a.save_every && rank == 0 && s > 0 && s % a.save_every == 0) TRY(loom_ps_save(m.ps, s));
    rng r = {mix(a.seed) ^ mix((uint64_t)rank << 32 ^ (uint64_t)s)};
    for (int i = 0; i < a.batch; i++) m.y[i] = impression(&r, m.keys + (size_t)i * FIELDS);
    float bias, gb;
    TRY(pull(&m, a.batch, &bias));
    double bl = fm(&m, a.batch, bias, scale, &gb, NULL) / a.batch;
    if (start < 0) start = bl;
    window += bl;
    size_t k = (size_t)a.batch * FIELDS;
    TRY(loom_ps_sparse_push(m.ps, m.w, m.keys, k, m.gw));
    TRY(loom_ps_sparse_push(m.ps, m.v, m.keys, k, m.gv));
    TRY(loom_ps_push(m.ps, m.b, &gb));
    TRY(loom_ps_step(m.ps));
    if (++in_window == a.log_every || loom_ps_clock(m.ps) == a.steps) {
      last = window / in_window;
      if (first < 0) first = last;
      printf("rank %d step %lld: train loss %.4f\n", rank, (long long)loom_ps_clock(m.ps), last);
      fflush(stdout);
      window = 0;
      in_window = 0;
    }
  }
  if (rank == 0 && a.eval_n > 0) {
    rng r = {mix(a.seed ^ 0xe7a1)};
    int clicks = 0;
    double oracle = 0; /* the log-loss of the model that made the clicks */
    for (int i = 0; i < a.eval_n; i++) {
      uint64_t *k = m.keys + (size_t)i * FIELDS;
      clicks += m.y[i] = impression(&r, k);
      double pt = 1 / (1 + exp(-true_logit(k)));
      oracle -= m.y[i] ? log(pt) : log(1 - pt);
    }
    oracle /= a.eval_n;
    float bias;
    TRY(pull(&m, a.eval_n, &bias));
    double *p = malloc((size_t)a.eval_n * sizeof *p);
    double loss = fm(&m, a.eval_n, bias, 0, NULL, p) / a.eval_n;
    double ctr = (double)clicks / a.eval_n;
    double base = -(ctr * log(ctr) + (1 - ctr) * log(1 - ctr));
    double au = auc(p, m.y, a.eval_n);
    free(p);
    char *info = NULL;
    long rows = 0;
    for (int sh = 0; sh < loom_ps_shards(m.ps); sh++) {
      if (loom_ps_info(m.ps, sh, &info) != 0) continue;
      for (const char *q = info; (q = strstr(q, "\"rows\":")); q += 7) rows += atol(q + 7);
      free(info);
    }
    printf("held-out: log-loss %.4f (always the average: %.4f, the true model: %.4f), "
           "AUC %.4f, click rate %.3f; %ld table rows on %d ps shards; %.1f s CPU\n",
           loss, base, oracle, au, ctr, rows, loom_ps_shards(m.ps),
           (double)(clock() - t0) / CLOCKS_PER_SEC);
    printf("RESULT {\"mode\": \"%s\", \"world\": %d, \"steps\": %d, \"start_loss\": %.5f, "
           "\"first_loss\": %.5f, \"last_loss\": %.5f, \"eval_loss\": %.5f, "
           "\"baseline\": %.5f, \"oracle\": %.5f, \"auc\": %.5f, \"rows\": %ld}\n",
           a.mode, world, a.steps, start, first, last, loss, base, oracle, au, rows);
  }
  status = 0;
out:
  free(m.keys), free(m.wr), free(m.vr), free(m.gw), free(m.gv), free(m.y);
  loom_ps_close(m.ps);
  loom_finish(l);
  return status;
}
