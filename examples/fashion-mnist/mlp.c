/* mlp.c: data-parallel training of a multilayer perceptron on
 * Fashion-MNIST, in plain C with OpenBLAS, using libloom's collectives.
 *
 * The model is 784 -> H1 -> H2 -> 10 with ReLU and softmax cross-entropy,
 * trained with SGD with momentum. Run alone it trains as one process; run as
 * the chief and workers of a loom job (job.yaml) every process takes a
 * contiguous slice of each global batch, the gradients are summed over all
 * processes with loom_allreduce(), and every process applies the same
 * update. The global batches, their order, the initial parameters and the
 * update rule do not depend on the number of processes, so N processes train
 * the same model as one, up to the order of floating-point sums.
 *
 * Reading order: the layers (paired _forward/_backward), the model that
 * strings them together, the optimizer, the data, checkpoints and
 * summaries, then main().
 *
 * Rank 0 checkpoints the parameters, their momentum and the progress after
 * every epoch (loom/ckpt.h; --ckpt DIR, or by default inside a job the
 * job's ckpt/ directory), and at start every rank resumes from the newest
 * checkpoint there: rank 0 restores it and broadcasts it. Since the
 * schedule, the shuffles and the update depend only on the options and the
 * epoch, a resumed run continues exactly as the interrupted one would have.
 * Rank 0 also writes TensorBoard summaries (loom/summary.h; --summary DIR,
 * or inside a job the task's tensorboard/ run): the global batch's loss and
 * accuracy every step, loss, accuracy and throughput per epoch, histograms
 * of the weights per epoch, and the run's configuration as text. Inside a
 * job the writer has the job's handle, so the scalars also reach loom's
 * dashboard as live charts.
 *
 * --save writes the final parameters (rank 0) as:
 *   offset 0   8 bytes   magic "LOOMMLP1"
 *   offset 8   4 x u32   layer sizes: 784, H1, H2, 10
 *   offset 24  u64       number of float32 values that follow
 *   offset 32  f32...    w1 (H1,784) b1 (H1) w2 (H2,H1) b2 (H2)
 *                        w3 (10,H2) b3 (10)
 * all little-endian, matrices row-major ([out][in], as torch.nn.Linear). */
#include <cblas.h>
#include <errno.h>
#include <loom.h>
#include <loom/ckpt.h>
#include <loom/comm.h>
#include <loom/summary.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include "idx.h"

#define IMG_SIDE 28
#define NUM_INPUTS (IMG_SIDE * IMG_SIDE)
#define NUM_CLASSES 10
/* Mean and standard deviation of the Fashion-MNIST training pixels (in
 * 0..1); inputs are standardized with them. */
#define PIXEL_MEAN 0.2860f
#define PIXEL_STD 0.3530f
#define SAVE_MAGIC "LOOMMLP1"

// ----------------------------------------------------------------------------
// layers. B is the number of rows (examples), C input and OC output features.

/* out = inp @ weight^T + bias. */
static void linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int C, int OC) {
  // out is (B,OC), inp is (B,C), weight is (OC,C), bias is (OC)
  if (B == 0) return;
  for (int b = 0; b < B; b++) memcpy(out + (size_t)b * OC, bias, OC * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, inp, C, weight, C, 1.0f, out,
              OC);
}

/* Overwrites dweight, dbias and dinp (skipped when NULL, for the first
 * layer whose input needs no gradient) with the gradients of B rows; no
 * rows: zero gradients. (Overwriting, not accumulating into zeroed
 * memory, saves a pass over the weights' gradient a step, the same for
 * one process as for many; the sums are the same floats.) */
static void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int B, int C, int OC) {
  // dinp is (B,C), dweight is (OC,C), dbias is (OC), dout is (B,OC)
  if (B == 0) {
    memset(dweight, 0, (size_t)OC * (size_t)C * sizeof(float));
    memset(dbias, 0, (size_t)OC * sizeof(float));
    return;
  }
  if (dinp != NULL) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, dout, OC, weight, C,
                0.0f, dinp, C);
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, 1.0f, dout, OC, inp, C, 0.0f,
              dweight, C);
  memcpy(dbias, dout, (size_t)OC * sizeof(float));
  for (int b = 1; b < B; b++) {
    const float *dout_b = dout + (size_t)b * OC;
    for (int o = 0; o < OC; o++) dbias[o] += dout_b[o];
  }
}

static void relu_forward(float *out, const float *inp, size_t N) {
  for (size_t i = 0; i < N; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

/* Overwrites dinp; out is the forward output (positive exactly where the
 * input was). */
static void relu_backward(float *dinp, const float *dout, const float *out, size_t N) {
  for (size_t i = 0; i < N; i++) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

/* probs = softmax(logits) row by row; losses[b] = -log probs[b][target[b]]. */
static void softmax_crossentropy_forward(float *probs, float *losses, const float *logits,
                                         const uint8_t *targets, int B, int V) {
  // probs and logits are (B,V), losses and targets are (B)
  for (int b = 0; b < B; b++) {
    const float *logits_b = logits + (size_t)b * V;
    float *probs_b = probs + (size_t)b * V;
    float maxval = logits_b[0];
    for (int v = 1; v < V; v++) maxval = fmaxf(maxval, logits_b[v]);
    float sum = 0.0f;
    for (int v = 0; v < V; v++) {
      probs_b[v] = expf(logits_b[v] - maxval);
      sum += probs_b[v];
    }
    for (int v = 0; v < V; v++) probs_b[v] /= sum;
    losses[b] = -logf(fmaxf(probs_b[targets[b]], 1e-30f));
  }
}

/* dlogits = weight * (probs - onehot(targets)): the gradient of
 * weight * sum_b losses[b]. weight is 1 / (global batch size), so that the
 * sum of every process's gradient is the mean over the global batch. */
static void softmax_crossentropy_backward(float *dlogits, const float *probs,
                                          const uint8_t *targets, float weight, int B, int V) {
  // dlogits and probs are (B,V), targets is (B)
  for (int b = 0; b < B; b++) {
    const float *probs_b = probs + (size_t)b * V;
    float *dlogits_b = dlogits + (size_t)b * V;
    for (int v = 0; v < V; v++) {
      float indicator = v == targets[b] ? 1.0f : 0.0f;
      dlogits_b[v] = weight * (probs_b[v] - indicator);
    }
  }
}

// ----------------------------------------------------------------------------
// the model

#define NUM_PARAMETER_TENSORS 6
typedef struct {
  float *w1; // (H1, NUM_INPUTS)
  float *b1; // (H1)
  float *w2; // (H2, H1)
  float *b2; // (H2)
  float *w3; // (NUM_CLASSES, H2)
  float *b3; // (NUM_CLASSES)
} ParameterTensors;

#define NUM_ACTIVATION_TENSORS 7
typedef struct {
  float *x;      // (B, NUM_INPUTS) standardized pixels
  float *l1;     // (B, H1) first linear layer's output
  float *h1;     // (B, H1) relu(l1)
  float *l2;     // (B, H2)
  float *h2;     // (B, H2) relu(l2)
  float *logits; // (B, NUM_CLASSES)
  float *probs;  // (B, NUM_CLASSES) softmax(logits)
  // the backward pass's activation gradients live in Model's dscratch*
} ActivationTensors;

typedef struct {
  int h1, h2;    // hidden sizes
  int max_batch; // rows the activations have room for
  ParameterTensors params;
  size_t param_sizes[NUM_PARAMETER_TENSORS];
  float *params_memory; // all parameters, one block
  size_t num_parameters;
  ParameterTensors grads;
  float *grads_memory; // their gradients, then GRAD_STATS floats (below)
  float *momentum;     // (num_parameters) SGD's velocity
  ActivationTensors acts;
  float *acts_memory;
  float *dscratch;  // (B, max(H1, H2, NUM_CLASSES)) backward scratch
  float *dscratch2; // same size, for the other side of a layer
  float *losses;    // (B)
  uint8_t *targets; // (B)
} Model;

/* The gradient block ends with GRAD_STATS extra floats, so that one
 * allreduce sums the gradients and the step's statistics together. */
#define GRAD_STATS 2
#define STAT_LOSS 0    // sum over the global batch of loss / batch size
#define STAT_CORRECT 1 // examples of the global batch classified right

/* Points each tensor of t into memory, consecutively, by sizes. */
static void point_tensors(float **t[], const size_t *sizes, int n, float *memory) {
  for (int i = 0; i < n; i++) {
    *t[i] = memory;
    memory += sizes[i];
  }
}

static void param_slots(ParameterTensors *p, float **slots[]);

/* Where this step's gradient block (gradients, then GRAD_STATS floats)
 * is computed: the buffer the next allreduce sends from in place, lent by
 * loom_allreduce_buffer (the shared-memory slot it reduces in, on one
 * host: no copy into it), or the model's own. Points m->grads there. */
static float *grads_block(Model *m, loom_t *l, int copy) {
  size_t count = m->num_parameters + GRAD_STATS;
  float *g = l && !copy ? loom_allreduce_buffer(l, count, LOOM_F32) : NULL;
  if (!g) g = m->grads_memory;
  float **slots[NUM_PARAMETER_TENSORS];
  param_slots(&m->grads, slots);
  point_tensors(slots, m->param_sizes, NUM_PARAMETER_TENSORS, g);
  return g;
}

static void param_slots(ParameterTensors *p, float **slots[]) {
  slots[0] = &p->w1;
  slots[1] = &p->b1;
  slots[2] = &p->w2;
  slots[3] = &p->b2;
  slots[4] = &p->w3;
  slots[5] = &p->b3;
}

/* xorshift64*: the one random number generator, so that a seed gives the
 * same numbers on every machine. */
static uint64_t rng_next(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 0x2545F4914F6CDD1DULL;
}

static uint64_t rng_seed(uint64_t seed, uint64_t stream) {
  // splitmix64 of (seed, stream): distinct, never-zero states
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + stream + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return z != 0 ? z : 1;
}

/* Uniform in [0, 1). */
static float rng_uniform(uint64_t *state) {
  return (float)(rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

/* Allocates everything for hidden sizes h1, h2 and batches of up to
 * max_batch rows, and initializes the parameters from seed: weights uniform
 * in +-sqrt(6 / fan_in) (He, for the ReLU layers) and +-sqrt(1 / fan_in)
 * for the output layer, biases zero. Returns 0 or -1 (out of memory). */
static int model_build(Model *m, int h1, int h2, int max_batch, uint64_t seed) {
  memset(m, 0, sizeof(*m));
  m->h1 = h1;
  m->h2 = h2;
  m->max_batch = max_batch;

  size_t *ps = m->param_sizes;
  ps[0] = (size_t)h1 * NUM_INPUTS;
  ps[1] = h1;
  ps[2] = (size_t)h2 * h1;
  ps[3] = h2;
  ps[4] = (size_t)NUM_CLASSES * h2;
  ps[5] = NUM_CLASSES;
  m->num_parameters = 0;
  for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) m->num_parameters += ps[i];

  size_t B = (size_t)max_batch;
  size_t act_sizes[NUM_ACTIVATION_TENSORS] = {
      B * NUM_INPUTS, B * h1, B * h1, B * h2, B * h2, B * NUM_CLASSES, B * NUM_CLASSES};
  size_t num_acts = 0;
  for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) num_acts += act_sizes[i];
  size_t widest = (size_t)(h1 > h2 ? h1 : h2);
  if (widest < NUM_CLASSES) widest = NUM_CLASSES;

  m->params_memory = calloc(m->num_parameters, sizeof(float));
  m->grads_memory = calloc(m->num_parameters + GRAD_STATS, sizeof(float));
  m->momentum = calloc(m->num_parameters, sizeof(float));
  m->acts_memory = calloc(num_acts, sizeof(float));
  m->dscratch = calloc(B * widest, sizeof(float));
  m->dscratch2 = calloc(B * widest, sizeof(float));
  m->losses = calloc(B, sizeof(float));
  m->targets = calloc(B, 1);
  if (!m->params_memory || !m->grads_memory || !m->momentum || !m->acts_memory || !m->dscratch ||
      !m->dscratch2 || !m->losses || !m->targets)
    return -1;

  float **slots[NUM_PARAMETER_TENSORS];
  param_slots(&m->params, slots);
  point_tensors(slots, ps, NUM_PARAMETER_TENSORS, m->params_memory);
  param_slots(&m->grads, slots);
  point_tensors(slots, ps, NUM_PARAMETER_TENSORS, m->grads_memory);
  ActivationTensors *a = &m->acts;
  float **aslots[NUM_ACTIVATION_TENSORS] = {&a->x,  &a->l1,     &a->h1,   &a->l2,
                                            &a->h2, &a->logits, &a->probs};
  point_tensors(aslots, act_sizes, NUM_ACTIVATION_TENSORS, m->acts_memory);

  uint64_t rng = rng_seed(seed, 0);
  const int fan_in[3] = {NUM_INPUTS, h1, h2};
  float *w[3] = {m->params.w1, m->params.w2, m->params.w3};
  for (int l = 0; l < 3; l++) {
    float bound = sqrtf((l < 2 ? 6.0f : 1.0f) / (float)fan_in[l]);
    for (size_t i = 0; i < ps[2 * l]; i++) w[l][i] = (2.0f * rng_uniform(&rng) - 1.0f) * bound;
  }
  return 0;
}

static void model_free(Model *m) {
  free(m->params_memory);
  free(m->grads_memory);
  free(m->momentum);
  free(m->acts_memory);
  free(m->dscratch);
  free(m->dscratch2);
  free(m->losses);
  free(m->targets);
  memset(m, 0, sizeof(*m));
}

/* Runs B rows of m->acts.x with labels m->targets through the model: fills
 * the activations, m->losses, and returns how many rows it classified
 * right. */
static int model_forward(Model *m, int B) {
  ParameterTensors p = m->params;
  ActivationTensors a = m->acts;
  int H1 = m->h1, H2 = m->h2;
  linear_forward(a.l1, a.x, p.w1, p.b1, B, NUM_INPUTS, H1);
  relu_forward(a.h1, a.l1, (size_t)B * H1);
  linear_forward(a.l2, a.h1, p.w2, p.b2, B, H1, H2);
  relu_forward(a.h2, a.l2, (size_t)B * H2);
  linear_forward(a.logits, a.h2, p.w3, p.b3, B, H2, NUM_CLASSES);
  softmax_crossentropy_forward(a.probs, m->losses, a.logits, m->targets, B, NUM_CLASSES);
  int correct = 0;
  for (int b = 0; b < B; b++) {
    const float *probs_b = a.probs + (size_t)b * NUM_CLASSES;
    int best = 0;
    for (int v = 1; v < NUM_CLASSES; v++)
      if (probs_b[v] > probs_b[best]) best = v;
    correct += best == m->targets[b];
  }
  return correct;
}

/* After model_forward on the same B rows: sets m->grads to loss_weight
 * times the gradient of the sum of their losses (zero for no rows). */
static void model_backward(Model *m, int B, float loss_weight) {
  ParameterTensors p = m->params, g = m->grads;
  ActivationTensors a = m->acts;
  int H1 = m->h1, H2 = m->h2;
  float *dlogits = m->dscratch; // (B, NUM_CLASSES)
  float *dh2 = m->dscratch2;    // (B, H2), then dl2 in place
  float *dh1 = m->dscratch;     // (B, H1), then dl1 in place
  softmax_crossentropy_backward(dlogits, a.probs, m->targets, loss_weight, B, NUM_CLASSES);
  linear_backward(dh2, g.w3, g.b3, dlogits, a.h2, p.w3, B, H2, NUM_CLASSES);
  relu_backward(dh2, dh2, a.h2, (size_t)B * H2);
  linear_backward(dh1, g.w2, g.b2, dh2, a.h1, p.w2, B, H1, H2);
  relu_backward(dh1, dh1, a.h1, (size_t)B * H1);
  linear_backward(NULL, g.w1, g.b1, dh1, a.x, p.w1, B, NUM_INPUTS, H1);
}

/* SGD with momentum, as torch.optim.SGD does it: v = mu * v + g;
 * p -= lr * v. Deterministic, and identical on every process given the
 * same summed gradient. */
typedef struct {
  Model *m;
  float lr, mu;
  float stats[GRAD_STATS]; // the summed statistics
} SgdStep;

/* A piece of the summed gradient block (loom_apply_fn): elements
 * [offset, offset + n) of the gradients, then of the statistics after
 * them. Updates those parameters and their velocity in place. */
static void sgd_apply(void *arg, size_t offset, const void *piece, size_t n) {
  SgdStep *st = arg;
  const Model *m = st->m;
  const float *restrict g = piece;
  size_t P = m->num_parameters, k = offset < P ? (P - offset < n ? P - offset : n) : 0;
  float *restrict v = m->momentum + offset, *restrict p = m->params_memory + offset;
  const float mu = st->mu, lr = st->lr;
  for (size_t i = 0; i < k; i++) {
    v[i] = mu * v[i] + g[i];
    p[i] -= lr * v[i];
  }
  for (size_t i = k; i < n; i++) st->stats[offset + i - P] = g[i];
}

/* The learning rate of step (from 0) of total: cosine decay from lr to 0,
 * which lets the last epochs settle instead of bouncing around. */
static float lr_at(float lr, long step, long total) {
  if (total <= 1) return lr;
  return 0.5f * lr * (1.0f + cosf(3.14159265f * (float)step / (float)total));
}

/* Writes the parameters in the format described at the top of this file.
 * Returns 0 or -1 after printing why. */
static int model_save(const Model *m, const char *path) {
  char tmp[4096];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
    fprintf(stderr, "mlp: --save path too long: %s\n", path);
    return -1;
  }
  FILE *f = fopen(tmp, "wb");
  if (f == NULL) {
    fprintf(stderr, "mlp: cannot create %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  uint8_t hdr[32];
  memcpy(hdr, SAVE_MAGIC, 8);
  uint32_t sizes[4] = {NUM_INPUTS, (uint32_t)m->h1, (uint32_t)m->h2, NUM_CLASSES};
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 4; k++) hdr[8 + 4 * i + k] = (uint8_t)(sizes[i] >> (8 * k));
  for (int k = 0; k < 8; k++) hdr[24 + k] = (uint8_t)((uint64_t)m->num_parameters >> (8 * k));
  int ok = fwrite(hdr, 1, sizeof(hdr), f) == sizeof(hdr);
  for (size_t i = 0; ok && i < m->num_parameters; i++) {
    uint32_t bits;
    uint8_t le[4];
    memcpy(&bits, &m->params_memory[i], 4);
    for (int k = 0; k < 4; k++) le[k] = (uint8_t)(bits >> (8 * k));
    ok = fwrite(le, 1, 4, f) == 4;
  }
  if (fclose(f) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    fprintf(stderr, "mlp: cannot write %s: %s\n", path, strerror(errno));
    remove(tmp);
    return -1;
  }
  return 0;
}

// ----------------------------------------------------------------------------
// data

/* Fills rows of m->acts.x and m->targets with examples idx[0..B) of ds. */
static void load_batch(Model *m, const IdxDataset *ds, const int *idx, int B) {
  const float scale = 1.0f / (255.0f * PIXEL_STD);
  const float shift = PIXEL_MEAN / PIXEL_STD;
  for (int b = 0; b < B; b++) {
    const uint8_t *img = ds->images + (size_t)idx[b] * NUM_INPUTS;
    float *x = m->acts.x + (size_t)b * NUM_INPUTS;
    for (int i = 0; i < NUM_INPUTS; i++) x[i] = (float)img[i] * scale - shift;
    m->targets[b] = ds->labels[idx[b]];
  }
}

/* The order of the training examples in epoch: a Fisher-Yates shuffle from
 * (seed, epoch), the same on every process. */
static void shuffle_epoch(int *order, int n, uint64_t seed, int epoch) {
  uint64_t rng = rng_seed(seed, 1 + (uint64_t)epoch);
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rng_next(&rng) % (uint64_t)(i + 1));
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

/* This process's contiguous share [*lo, *hi) of n rows split over world
 * processes; shares differ by at most one row, and may be empty. */
static void my_slice(int n, int rank, int world, int *lo, int *hi) {
  *lo = (int)((int64_t)n * rank / world);
  *hi = (int)((int64_t)n * (rank + 1) / world);
}

// ----------------------------------------------------------------------------
// the program

typedef struct {
  const char *data_dir;
  int epochs;
  int batch;
  float lr;
  float momentum;
  int hidden1, hidden2;
  uint64_t seed;
  int threads;
  const char *save;
  long max_steps;
  int limit;
  int json;
  int verbose;
  int phases;
  const char *summary; // TensorBoard directory (NULL: the job's, if any)
  const char *ckpt;    // checkpoint directory (NULL: the job's, if any)
  int no_ckpt;
  int copy_grads;
} Options;

/* Where a step's time goes (--phases): seconds per part, summed. */
enum { PH_LOAD, PH_FORWARD, PH_BACKWARD, PH_UPDATE, PH_N };

typedef struct {
  loom_t *loom; // NULL when running alone
  int rank, world;
} Comm;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sums the gradient block (gradients, then statistics) over all processes
 * and applies the SGD update to the sum, piece by piece where the
 * reduction left it (loom_allreduce_apply: all or nothing). A change of
 * the job's membership (a peer died, or a restarted one came back) is
 * returned as LOOM_ECHANGED or LOOM_EPEER without a message: the
 * parameters are untouched and the caller recovers. */
static int sgd_step(Comm *c, SgdStep *st, const float *grads) {
  Model *m = st->m;
  size_t count = m->num_parameters + GRAD_STATS;
  if (c->loom == NULL) {
    sgd_apply(st, 0, grads, count);
    return 0;
  }
  if (loom_membership_changed(c->loom)) return LOOM_ECHANGED;
  int rc = loom_allreduce_apply(c->loom, grads, count, LOOM_F32, LOOM_SUM, sgd_apply, st);
  if (rc != 0 && rc != LOOM_ECHANGED && rc != LOOM_EPEER)
    fprintf(stderr, "mlp: rank %d: allreduce failed: %s: %s\n", c->rank, loom_strerror(rc),
            loom_errmsg(c->loom));
  return rc;
}

/* Where training is: sent from rank 0 whenever ranks (re)join. */
typedef struct {
  int64_t epoch, s, step;
} Position;

/* Every rank takes rank 0's parameters, momentum and position: at start
 * for a process that joins a running job, and after a re-form. */
static int sync_from_rank0(Comm *c, Model *m, Position *pos) {
  int rc = loom_broadcast(c->loom, pos, sizeof *pos, 0);
  if (rc == 0) rc = loom_broadcast(c->loom, m->params_memory, m->num_parameters * sizeof(float), 0);
  if (rc == 0) rc = loom_broadcast(c->loom, m->momentum, m->num_parameters * sizeof(float), 0);
  return rc;
}

/* The job's membership changed: join the new generation (new rank and
 * world size), then continue from rank 0's state. Returns 0 or the error
 * after printing it. */
static int recover(Comm *c, Model *m, Position *pos) {
  for (int tries = 0; tries < 20; tries++) {
    int rc = loom_comm_reform(c->loom, 120000);
    if (rc == 0) {
      c->rank = loom_rank(c->loom);
      c->world = loom_world_size(c->loom);
      rc = sync_from_rank0(c, m, pos);
    }
    if (rc == 0) {
      if (c->rank == 0) {
        printf("mlp: membership generation %lld: %d processes, resuming at step %lld\n",
               (long long)loom_generation(c->loom), c->world, (long long)pos->step);
        fflush(stdout);
      }
      return 0;
    }
    if (rc != LOOM_ECHANGED && rc != LOOM_EPEER) {
      fprintf(stderr, "mlp: rank %d: cannot re-form after a membership change: %s: %s\n", c->rank,
              loom_strerror(rc), loom_errmsg(c->loom));
      return rc;
    }
  }
  fprintf(stderr, "mlp: the membership kept changing; giving up\n");
  return LOOM_ECHANGED;
}

static int comm_allreduce_f64(Comm *c, double *buf, size_t count, loom_op op) {
  if (c->loom == NULL) return 0;
  int rc = loom_allreduce(c->loom, buf, buf, count, LOOM_F64, op);
  if (rc != 0)
    fprintf(stderr, "mlp: rank %d: allreduce failed: %s: %s\n", c->rank, loom_strerror(rc),
            loom_errmsg(c->loom));
  return rc;
}

/* Test-set accuracy and mean loss, each process evaluating its slice of the
 * test set. */
static int evaluate(Model *m, const IdxDataset *test, Comm *c, double *accuracy, double *loss) {
  /* every process evaluates the whole test set: no collective here, so a
   * membership change can only meet a training step */
  int lo = 0, hi = test->n;
  (void)c;
  int *idx = malloc((size_t)m->max_batch * sizeof(int));
  if (idx == NULL) return -1;
  double sums[2] = {0.0, 0.0}; // correct, loss
  for (int start = lo; start < hi; start += m->max_batch) {
    int B = hi - start < m->max_batch ? hi - start : m->max_batch;
    for (int b = 0; b < B; b++) idx[b] = start + b;
    load_batch(m, test, idx, B);
    sums[0] += model_forward(m, B);
    for (int b = 0; b < B; b++) sums[1] += m->losses[b];
  }
  free(idx);
  *accuracy = sums[0] / test->n;
  *loss = sums[1] / test->n;
  return 0;
}

// ----------------------------------------------------------------------------
// checkpoints and summaries

static const char *const PARAM_NAMES[NUM_PARAMETER_TENSORS] = {"w1", "b1", "w2", "b2", "w3", "b3"};
static const char *const MOMENTUM_NAMES[NUM_PARAMETER_TENSORS] = {
    "momentum/w1", "momentum/b1", "momentum/w2", "momentum/b2", "momentum/w3", "momentum/b3"};
#define CKPT_TENSORS (2 * NUM_PARAMETER_TENSORS + 2)

/* Describes a checkpoint in t: each parameter tensor and its momentum with
 * its shape, then "progress" (epochs and steps done) and "config"
 * (training examples, global batch, seed: what the data order depends on).
 * The tensors point into m, progress and config. Returns their count. */
static size_t ckpt_tensors(Model *m, int64_t progress[2], int64_t config[3], loom_tensor *t) {
  const int64_t shapes[NUM_PARAMETER_TENSORS][2] = {{m->h1, NUM_INPUTS},  {m->h1, 0},
                                                    {m->h2, m->h1},       {m->h2, 0},
                                                    {NUM_CLASSES, m->h2}, {NUM_CLASSES, 0}};
  size_t k = 0, off = 0;
  for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
    int ndim = shapes[i][1] > 0 ? 2 : 1;
    t[k++] = (loom_tensor){
        PARAM_NAMES[i], LOOM_F32, ndim, {shapes[i][0], shapes[i][1]}, m->params_memory + off};
    t[k++] = (loom_tensor){
        MOMENTUM_NAMES[i], LOOM_F32, ndim, {shapes[i][0], shapes[i][1]}, m->momentum + off};
    off += m->param_sizes[i];
  }
  t[k++] = (loom_tensor){"progress", LOOM_I64, 1, {2}, progress};
  t[k++] = (loom_tensor){"config", LOOM_I64, 1, {3}, config};
  return k;
}

/* Rank 0 saves the state after epochs_done epochs (step steps). Returns 0
 * or -1 after printing why. */
static int ckpt_save_epoch(loom_ckpt_t *c, Model *m, int epochs_done, long step,
                           const int64_t config[3]) {
  int64_t progress[2] = {epochs_done, step};
  int64_t cfg[3] = {config[0], config[1], config[2]};
  loom_tensor t[CKPT_TENSORS];
  size_t n = ckpt_tensors(m, progress, cfg, t);
  int rc = loom_ckpt_save(c, step, t, n);
  if (rc != 0)
    fprintf(stderr, "mlp: cannot save the checkpoint of epoch %d: %s\n", epochs_done,
            loom_ckpt_errmsg(c));
  return rc;
}

/* Rank 0 restores the newest checkpoint of c (NULL: none) into m; then
 * every rank gets the same state from rank 0 (the parameters go with the
 * broadcast that follows in main). Sets *epoch and *step to where training
 * resumes, 0 and 0 without a checkpoint. Returns 0 or -1 after printing
 * why, on every rank. */
static int ckpt_resume(Comm *comm, loom_ckpt_t *c, Model *m, const int64_t config[3], int *epoch,
                       long *step) {
  int64_t head[4] = {0, 0, 0, 0}; // failed, resumed, epochs done, steps done
  int64_t ck_step;
  int rc = c != NULL ? loom_ckpt_latest(c, &ck_step) : LOOM_ENOENT;
  if (rc == 0) {
    int64_t progress[2], saved[3];
    loom_tensor t[CKPT_TENSORS];
    size_t n = ckpt_tensors(m, progress, saved, t);
    rc = loom_ckpt_restore(c, ck_step, t, n);
    if (rc != 0) {
      fprintf(stderr, "mlp: cannot resume from %s: %s\n", loom_ckpt_dir(c), loom_ckpt_errmsg(c));
      head[0] = 1;
    } else if (memcmp(saved, config, sizeof(saved)) != 0) {
      fprintf(stderr,
              "mlp: the checkpoint in %s is of a run over %lld training "
              "examples with --batch %lld --seed %lld, this run has %lld, "
              "%lld, %lld: use the same options or another --ckpt\n",
              loom_ckpt_dir(c), (long long)saved[0], (long long)saved[1], (long long)saved[2],
              (long long)config[0], (long long)config[1], (long long)config[2]);
      head[0] = 1;
    } else {
      head[1] = 1;
      head[2] = progress[0];
      head[3] = progress[1];
    }
  } else if (rc != LOOM_ENOENT) {
    fprintf(stderr, "mlp: cannot look for checkpoints in %s: %s\n", loom_ckpt_dir(c),
            loom_ckpt_errmsg(c));
    head[0] = 1;
  }
  if (comm->loom != NULL) {
    rc = loom_broadcast(comm->loom, head, sizeof(head), 0);
    if (rc == 0 && head[1] && head[0] == 0)
      rc = loom_broadcast(comm->loom, m->momentum, m->num_parameters * sizeof(float), 0);
    if (rc != 0) {
      fprintf(stderr, "mlp: rank %d: broadcast failed: %s: %s\n", comm->rank, loom_strerror(rc),
              loom_errmsg(comm->loom));
      return -1;
    }
  }
  if (head[0]) return -1;
  *epoch = (int)head[2];
  *step = (long)head[3];
  if (head[1] && comm->rank == 0) {
    printf("mlp: resuming from the checkpoint of step %ld (epoch %d) in %s\n", *step, *epoch,
           loom_ckpt_dir(c));
    fflush(stdout);
  }
  return 0;
}

static int summary_failed(loom_summary_t *s) {
  fprintf(stderr, "mlp: cannot write TensorBoard summaries: %s\n", loom_summary_errmsg(s));
  return -1;
}

/* Rank 0's text summary "config" at the start: the run's settings as a
 * Markdown table. Returns 0 or -1 after printing why. */
static int write_config_summary(loom_summary_t *s, long step, const Options *o, const Model *m,
                                int world, int train_n) {
  char text[1024];
  snprintf(text, sizeof text,
           "| setting | value |\n| --- | --- |\n"
           "| model | %d-%d-%d-%d (%zu parameters) |\n"
           "| processes | %d |\n| global batch | %d |\n| training examples | %d |\n"
           "| epochs | %d |\n| peak learning rate | %g |\n| momentum | %g |\n| seed | %llu |\n",
           NUM_INPUTS, m->h1, m->h2, NUM_CLASSES, m->num_parameters, world, o->batch, train_n,
           o->epochs, (double)o->lr, (double)o->momentum, (unsigned long long)o->seed);
  return loom_summary_text(s, "config", step, text) == 0 ? 0 : summary_failed(s);
}

/* Rank 0's scalars for one step: the global batch's mean loss and
 * accuracy. Returns 0 or -1 after printing why. */
static int write_step_summaries(loom_summary_t *s, long step, double loss, double accuracy) {
  if (loom_summary_scalar(s, "train/step_loss", step, loss) != 0 ||
      loom_summary_scalar(s, "train/step_accuracy", step, accuracy) != 0)
    return summary_failed(s);
  return 0;
}

/* Rank 0's summaries for one epoch, at the step it ended on: scalars, and
 * a histogram of each layer's weights. Returns 0 or -1 after printing why. */
static int write_summaries(loom_summary_t *s, const Model *m, long step, int epoch,
                           double train_loss, double train_accuracy, double test_loss,
                           double test_accuracy, double samples_per_s) {
  const struct {
    const char *tag;
    double value;
  } scalars[] = {
      {"train/loss", train_loss},
      {"train/accuracy", train_accuracy},
      {"test/loss", test_loss},
      {"test/accuracy", test_accuracy},
      {"throughput/samples_per_s", samples_per_s},
      {"epoch", epoch},
  };
  for (size_t i = 0; i < sizeof(scalars) / sizeof(scalars[0]); i++)
    if (loom_summary_scalar(s, scalars[i].tag, step, scalars[i].value) != 0)
      return summary_failed(s);
  const struct {
    const char *tag;
    const float *w;
    size_t n;
  } weights[] = {
      {"weights/w1", m->params.w1, m->param_sizes[0]},
      {"weights/w2", m->params.w2, m->param_sizes[2]},
      {"weights/w3", m->params.w3, m->param_sizes[4]},
  };
  for (size_t i = 0; i < sizeof(weights) / sizeof(weights[0]); i++)
    if (loom_summary_histogram(s, weights[i].tag, step, weights[i].w, weights[i].n) != 0)
      return summary_failed(s);
  return 0;
}

static void usage(FILE *out) {
  static const char *const lines[] = {
      "usage: mlp [options]",
      "Trains a 784-H1-H2-10 MLP on Fashion-MNIST; inside a loom job, data",
      "parallel over the job's chief and workers.",
      "  --data DIR       the IDX files",
      "                   (default /usr/share/datasets/fashion-mnist)",
      "  --epochs N       passes over the training set (default 10)",
      "  --batch B        global batch, all processes together (default 256)",
      "  --lr X           peak learning rate, cosine-decayed (default 0.1)",
      "  --momentum X     SGD momentum (default 0.9)",
      "  --hidden H1[,H2] hidden sizes (default 256,128; H2 = H1/2 if omitted)",
      "  --seed S         initialization and shuffling seed (default 1)",
      "  --threads T      OpenBLAS threads per process (default 1)",
      "  --max-steps N    stop after N optimizer steps",
      "  --limit N        train on the first N training examples only",
      "  --save PATH      write the final parameters (rank 0)",
      "  --json           print a final JSON line (rank 0)",
      "  --verbose        every rank logs, not only rank 0",
      "  --phases         every rank prints where its training time went",
      "  --summary DIR    TensorBoard summaries: loss and accuracy each step",
      "                   and epoch, weight histograms, the configuration",
      "                   (rank 0; inside a job by default, in the task's",
      "                   tensorboard/ run, the scalars also on loom's dashboard)",
      "  --ckpt DIR       checkpoint each epoch (rank 0) and resume from the",
      "                   newest one at start (inside a job by default, in",
      "                   the job's ckpt/ directory)",
      "  --no-ckpt        no checkpoints, even inside a job",
      "  --copy-grads     compute the gradients in memory of its own and let the",
      "                   allreduce copy them, instead of computing them in",
      "                   the buffer loom_allreduce_buffer lends (to compare)",
  };
  for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) fprintf(out, "%s\n", lines[i]);
}

static int parse_long(const char *flag, const char *s, long min, long max, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
    fprintf(stderr, "mlp: %s wants an integer in [%ld, %ld], got '%s'\n", flag, min, max, s);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_float(const char *flag, const char *s, float min, float max, float *out) {
  char *end;
  errno = 0;
  float v = strtof(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v >= min && v <= max)) {
    fprintf(stderr, "mlp: %s wants a number in [%g, %g], got '%s'\n", flag, (double)min,
            (double)max, s);
    return -1;
  }
  *out = v;
  return 0;
}

/* Returns 0, 1 for --help, or -1 after printing what is wrong. */
static int parse_args(int argc, char **argv, Options *o) {
  *o = (Options){.data_dir = "/usr/share/datasets/fashion-mnist",
                 .epochs = 10,
                 .batch = 256,
                 .lr = 0.1f,
                 .momentum = 0.9f,
                 .hidden1 = 256,
                 .hidden2 = 128,
                 .seed = 1,
                 .threads = 1,
                 .max_steps = -1,
                 .limit = -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    long v;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 1;
    } else if (strcmp(a, "--json") == 0) {
      o->json = 1;
      continue;
    } else if (strcmp(a, "--verbose") == 0) {
      o->verbose = 1;
      continue;
    } else if (strcmp(a, "--phases") == 0) {
      o->phases = 1;
      continue;
    } else if (strcmp(a, "--no-ckpt") == 0) {
      o->no_ckpt = 1;
      continue;
    } else if (strcmp(a, "--copy-grads") == 0) {
      o->copy_grads = 1;
      continue;
    }
    static const char *const takes_value[] = {
        "--data", "--save",      "--epochs",   "--batch",  "--threads", "--seed", "--limit",
        "--lr",   "--max-steps", "--momentum", "--hidden", "--summary", "--ckpt"};
    int known = 0;
    for (size_t k = 0; k < sizeof(takes_value) / sizeof(takes_value[0]); k++)
      known |= strcmp(a, takes_value[k]) == 0;
    if (!known) {
      fprintf(stderr, "mlp: unknown option '%s' (see --help)\n", a);
      return -1;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "mlp: %s needs a value (see --help)\n", a);
      return -1;
    }
    const char *val = argv[++i];
    if (strcmp(a, "--data") == 0) {
      o->data_dir = val;
    } else if (strcmp(a, "--save") == 0) {
      o->save = val;
    } else if (strcmp(a, "--summary") == 0) {
      o->summary = val;
    } else if (strcmp(a, "--ckpt") == 0) {
      o->ckpt = val;
    } else if (strcmp(a, "--epochs") == 0) {
      if (parse_long(a, val, 1, 100000, &v) != 0) return -1;
      o->epochs = (int)v;
    } else if (strcmp(a, "--batch") == 0) {
      if (parse_long(a, val, 1, 65536, &v) != 0) return -1;
      o->batch = (int)v;
    } else if (strcmp(a, "--threads") == 0) {
      if (parse_long(a, val, 1, 1024, &v) != 0) return -1;
      o->threads = (int)v;
    } else if (strcmp(a, "--seed") == 0) {
      if (parse_long(a, val, 0, 0x7fffffffL, &v) != 0) return -1;
      o->seed = (uint64_t)v;
    } else if (strcmp(a, "--max-steps") == 0) {
      if (parse_long(a, val, 0, 0x7fffffffL, &v) != 0) return -1;
      o->max_steps = v;
    } else if (strcmp(a, "--limit") == 0) {
      if (parse_long(a, val, 1, 0x7fffffffL, &v) != 0) return -1;
      o->limit = (int)v;
    } else if (strcmp(a, "--lr") == 0) {
      if (parse_float(a, val, 0.0f, 100.0f, &o->lr) != 0) return -1;
    } else if (strcmp(a, "--momentum") == 0) {
      if (parse_float(a, val, 0.0f, 0.999f, &o->momentum) != 0) return -1;
    } else if (strcmp(a, "--hidden") == 0) {
      char first[32];
      const char *comma = strchr(val, ',');
      size_t len = comma ? (size_t)(comma - val) : strlen(val);
      if (len >= sizeof(first)) len = sizeof(first) - 1;
      memcpy(first, val, len);
      first[len] = '\0';
      if (parse_long(a, first, 1, 65536, &v) != 0) return -1;
      o->hidden1 = (int)v;
      o->hidden2 = o->hidden1 / 2 > 0 ? o->hidden1 / 2 : 1;
      if (comma != NULL) {
        if (parse_long(a, comma + 1, 1, 65536, &v) != 0) return -1;
        o->hidden2 = (int)v;
      }
    } else {
      fprintf(stderr, "mlp: unknown option '%s' (see --help)\n", a);
      return -1;
    }
  }
  return 0;
}

static int load_split(IdxDataset *ds, const char *dir, const char *split) {
  char images[4096], labels[4096];
  int ni = snprintf(images, sizeof(images), "%s/%s-images-idx3-ubyte.gz", dir, split);
  int nl = snprintf(labels, sizeof(labels), "%s/%s-labels-idx1-ubyte.gz", dir, split);
  if (ni >= (int)sizeof(images) || nl >= (int)sizeof(labels)) {
    fprintf(stderr, "mlp: --data path too long\n");
    return -1;
  }
  return idx_load(ds, images, labels, IMG_SIDE, IMG_SIDE, NUM_CLASSES);
}

/* Joins the loom job if there is one; alone, rank 0 of 1. */
static int comm_init(Comm *c) {
  c->loom = NULL;
  c->rank = 0;
  c->world = 1;
  int rc = loom_init(&c->loom);
  if (rc == LOOM_ENOENV) {
    c->loom = NULL;
    return 0;
  }
  if (rc != 0) {
    fprintf(stderr, "mlp: cannot join the loom job: %s\n", loom_strerror(rc));
    c->loom = NULL;
    return -1;
  }
  c->rank = loom_rank(c->loom);
  c->world = loom_world_size(c->loom);
  if (c->rank < 0 || c->world < 1 || c->rank >= c->world) {
    fprintf(stderr,
            "mlp: this task (%s:%d) is not a training process (rank %d of %d); "
            "run mlp as the chief or a worker\n",
            loom_role(c->loom), loom_index(c->loom), c->rank, c->world);
    loom_finish(c->loom);
    c->loom = NULL;
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  Options opt;
  Comm comm = {0};
  Model model = {0};
  IdxDataset train = {0}, test = {0};
  int *order = NULL;
  loom_ckpt_t *ckpt = NULL;
  loom_summary_t *summary = NULL;
  int status = 1;

  int prc = parse_args(argc, argv, &opt);
  if (prc != 0) return prc > 0 ? 0 : 2;
  openblas_set_num_threads(opt.threads);
  if (comm_init(&comm) != 0) return 1;
  int logs = comm.rank == 0 || opt.verbose;

  if (load_split(&train, opt.data_dir, "train") != 0 ||
      load_split(&test, opt.data_dir, "t10k") != 0)
    goto out;
  if (opt.limit > 0 && opt.limit < train.n) train.n = opt.limit;
  if (model_build(&model, opt.hidden1, opt.hidden2, opt.batch, opt.seed) != 0) {
    fprintf(stderr, "mlp: out of memory for the model\n");
    goto out;
  }
  // Rank 0 checkpoints and writes summaries: where asked, and by default
  // inside a job (NULL directories: the job's).
  if (comm.rank == 0 && !opt.no_ckpt && (opt.ckpt || comm.loom)) {
    int rc = loom_ckpt_open(comm.loom, opt.ckpt, 3, &ckpt);
    if (rc != 0) {
      fprintf(stderr, "mlp: cannot open the checkpoint directory: %s\n",
              comm.loom ? loom_errmsg(comm.loom) : loom_strerror(rc));
      goto out;
    }
  }
  if (comm.rank == 0 && (opt.summary || comm.loom)) {
    int rc = loom_summary_open(comm.loom, opt.summary, &summary);
    if (rc != 0) {
      fprintf(stderr, "mlp: cannot open a TensorBoard event file: %s\n",
              comm.loom ? loom_errmsg(comm.loom) : loom_strerror(rc));
      goto out;
    }
  }
  const int64_t config[3] = {train.n, opt.batch, (int64_t)opt.seed};
  int start_epoch = 0, start_s = 0;
  long step = 0;
  Position pos = {0, 0, 0};
  int joining = comm.loom != NULL && loom_generation(comm.loom) > 0;
  if (joining) {
    // a restarted process joins a running job: rank 0's state is the truth
    int rc = sync_from_rank0(&comm, &model, &pos);
    if ((rc == LOOM_ECHANGED || rc == LOOM_EPEER) && recover(&comm, &model, &pos) == 0) rc = 0;
    if (rc != 0) {
      fprintf(stderr, "mlp: rank %d: cannot join the running job: %s\n", comm.rank,
              loom_strerror(rc));
      goto out;
    }
    start_epoch = (int)pos.epoch;
    start_s = (int)pos.s;
    step = (long)pos.step;
    if (logs)
      printf("mlp: joined generation %lld at step %ld\n", (long long)loom_generation(comm.loom),
             step);
  } else if (ckpt_resume(&comm, ckpt, &model, config, &start_epoch, &step) != 0)
    goto out;
  // Every process initialized from the same seed already (or rank 0 just
  // restored a checkpoint); the broadcast makes rank 0's parameters the
  // truth regardless.
  if (comm.loom != NULL && !joining) {
    int rc =
        loom_broadcast(comm.loom, model.params_memory, model.num_parameters * sizeof(float), 0);
    if (rc != 0) {
      fprintf(stderr, "mlp: rank %d: broadcast failed: %s: %s\n", comm.rank, loom_strerror(rc),
              loom_errmsg(comm.loom));
      goto out;
    }
  }
  if (logs)
    printf("mlp: rank %d of %d, %d train and %d test examples, model "
           "%d-%d-%d-%d (%zu parameters), global batch %d, lr %g, momentum %g\n",
           comm.rank, comm.world, train.n, test.n, NUM_INPUTS, opt.hidden1, opt.hidden2,
           NUM_CLASSES, model.num_parameters, opt.batch, (double)opt.lr, (double)opt.momentum);
  fflush(stdout);

  if (summary != NULL && !joining &&
      write_config_summary(summary, step, &opt, &model, comm.world, train.n) != 0)
    goto out;
  order = malloc((size_t)train.n * sizeof(int));
  if (order == NULL) goto out;
  double train_time = 0.0, samples = 0.0;
  double phase[PH_N] = {0};
  double accuracy = 0.0, test_loss = 0.0;
  int steps_per_epoch = (train.n + opt.batch - 1) / opt.batch;
  long total_steps = (long)steps_per_epoch * opt.epochs;
  if (opt.max_steps >= 0 && opt.max_steps < total_steps) total_steps = opt.max_steps;
  int stopped = opt.max_steps >= 0 && step >= opt.max_steps;
  int epochs_run = 0;
  for (int epoch = start_epoch; epoch < opt.epochs && !stopped; epoch++) {
    double t0 = now_s();
    double loss_sum = 0.0, correct = 0.0, seen = 0.0;
    int epoch_steps = 0;
    shuffle_epoch(order, train.n, opt.seed, epoch);
    for (int s = epoch == start_epoch ? start_s : 0; s < steps_per_epoch; s++) {
      // the global batch: order[start, start + Bg); ours: [lo, hi) of it
      int start = s * opt.batch;
      int Bg = train.n - start < opt.batch ? train.n - start : opt.batch;
      int lo, hi;
      my_slice(Bg, comm.rank, comm.world, &lo, &hi);
      int B = hi - lo;
      double p0 = now_s();
      // the gradients and the step's statistics, summed by one allreduce;
      // not touched once it begins (the peers read them in place)
      float *grads = grads_block(&model, comm.loom, opt.copy_grads);
      float *stats = grads + model.num_parameters;
      stats[STAT_LOSS] = stats[STAT_CORRECT] = 0.0f; // model_backward sets the gradients
      load_batch(&model, &train, order + start + lo, B);
      float weight = 1.0f / (float)Bg;
      double p1 = now_s();
      stats[STAT_CORRECT] = (float)model_forward(&model, B);
      for (int b = 0; b < B; b++) stats[STAT_LOSS] += weight * model.losses[b];
      double p2 = now_s();
      model_backward(&model, B, weight);
      double p3 = now_s();
      SgdStep upd = {&model, lr_at(opt.lr, step, total_steps), opt.momentum, {0}};
      int crc = sgd_step(&comm, &upd, grads);
      double p4 = now_s();
      phase[PH_LOAD] += p1 - p0;
      phase[PH_FORWARD] += p2 - p1;
      phase[PH_BACKWARD] += p3 - p2;
      phase[PH_UPDATE] += p4 - p3; // the allreduce and the update, fused
      if (crc == LOOM_ECHANGED || crc == LOOM_EPEER) {
        // a peer died or came back: re-form, take rank 0's state, and redo
        // the step rank 0 is at (the global batch does not depend on who
        // computes it, so training stays the same)
        pos = (Position){epoch, s, step};
        if (recover(&comm, &model, &pos) != 0) goto out;
        if (pos.epoch != epoch) {
          fprintf(stderr, "mlp: rank %d: rank 0 is in epoch %lld, this process in %d\n", comm.rank,
                  (long long)pos.epoch, epoch);
          goto out;
        }
        s = (int)pos.s - 1;
        step = (long)pos.step;
        continue;
      }
      if (crc != 0) goto out;
      stats = upd.stats; // the sums (the block may be a peer's to read now)
      loss_sum += (double)stats[STAT_LOSS] * Bg;
      correct += stats[STAT_CORRECT];
      seen += Bg;
      epoch_steps++;
      step++;
      if (summary != NULL && write_step_summaries(summary, step, (double)stats[STAT_LOSS],
                                                  (double)stats[STAT_CORRECT] / Bg) != 0)
        goto out;
      if (opt.max_steps >= 0 && step >= opt.max_steps) {
        stopped = 1;
        break;
      }
    }
    double dt = now_s() - t0;
    train_time += dt;
    samples += seen;
    epochs_run++;
    if (evaluate(&model, &test, &comm, &accuracy, &test_loss) != 0) goto out;
    if (logs) {
      printf("epoch %d: steps %d, train loss %.4f, train accuracy %.4f, "
             "test loss %.4f, test accuracy %.4f, %.1f s, %.0f samples/s\n",
             epoch + 1, epoch_steps, loss_sum / seen, correct / seen, test_loss, accuracy, dt,
             seen / dt);
      fflush(stdout);
    }
    if (summary != NULL && write_summaries(summary, &model, step, epoch + 1, loss_sum / seen,
                                           correct / seen, test_loss, accuracy, seen / dt) != 0)
      goto out;
    // only whole epochs: a resumed run starts at an epoch's beginning
    if (ckpt != NULL && epoch_steps == steps_per_epoch &&
        ckpt_save_epoch(ckpt, &model, epoch + 1, step, config) != 0)
      goto out;
  }
  if (epochs_run == 0 && evaluate(&model, &test, &comm, &accuracy, &test_loss) != 0) goto out;

  // Every process applied the same updates; check they still agree.
  if (comm.loom != NULL) {
    double sum = 0.0;
    for (size_t i = 0; i < model.num_parameters; i++)
      sum += (double)model.params_memory[i] * (double)((i % 7) + 1);
    double range[2] = {sum, -sum}; // max of sum, max of -sum (= -min)
    if (comm_allreduce_f64(&comm, range, 2, LOOM_MAX) != 0) goto out;
    if (range[0] != -range[1] && logs)
      fprintf(stderr,
              "mlp: warning: parameters differ across ranks "
              "(checksums from %.17g to %.17g)\n",
              -range[1], range[0]);
  }
  if (opt.phases) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("mlp: rank %d cpu %.3f s, %ld voluntary and %ld involuntary context switches\n",
           comm.rank,
           (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
               (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec,
           ru.ru_nvcsw, ru.ru_nivcsw);
    loom_phase_times pt = {0};
    if (comm.loom != NULL && loom_phase_times_get(comm.loom, &pt) == 0)
      printf("mlp: rank %d libloom: %.3f s communicating, %.3f s waiting for peers\n", comm.rank,
             pt.comm_s, pt.wait_peers_s);
    double other = train_time;
    for (int i = 0; i < PH_N; i++) other -= phase[i];
    printf("mlp: rank %d phases (s): load %.3f forward %.3f backward %.3f "
           "allreduce+update %.3f other %.3f of %.3f\n",
           comm.rank, phase[PH_LOAD], phase[PH_FORWARD], phase[PH_BACKWARD], phase[PH_UPDATE],
           other, train_time);
  }
  if (comm.rank == 0 && opt.save != NULL && model_save(&model, opt.save) != 0) goto out;
  double rate = train_time > 0.0 ? samples / train_time : 0.0;
  if (logs)
    printf("done: %ld steps, test accuracy %.4f, %.0f samples/s over %.1f s "
           "of training, %d process%s\n",
           step, accuracy, rate, train_time, comm.world, comm.world == 1 ? "" : "es");
  if (comm.rank == 0 && opt.json)
    printf("{\"test_accuracy\": %.4f, \"test_loss\": %.4f, "
           "\"samples_per_s\": %.1f, \"train_s\": %.3f, \"steps\": %ld, "
           "\"world_size\": %d}\n",
           accuracy, test_loss, rate, train_time, step, comm.world);
  fflush(stdout);
  if (summary != NULL) {
    int rc = loom_summary_close(summary);
    summary = NULL;
    if (rc != 0) {
      fprintf(stderr, "mlp: cannot finish the TensorBoard event file: %s\n", loom_strerror(rc));
      goto out;
    }
  }
  status = 0;
out:
  if (summary != NULL) loom_summary_close(summary);
  loom_ckpt_close(ckpt);
  free(order);
  model_free(&model);
  idx_free(&train);
  idx_free(&test);
  if (comm.loom != NULL) loom_finish(comm.loom);
  return status;
}
