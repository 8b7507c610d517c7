/* kernels.c: initial values and optimizer updates, the parameter server's
 * arithmetic. Initial values are a pure function of (seed, key, index), so
 * they are the same however many shards hold the variable and whenever a
 * row is first touched. Updates follow torch.optim's formulas so that a
 * reference in PyTorch can check them. */
#include "ps/ps.h"

#include <math.h>

/* A counter-based generator: 64 random bits for (seed, key, i). */
static uint64_t rnd(uint64_t seed, uint64_t key, uint64_t i) {
  uint64_t x = ps_mix64(seed ^ 0x6a09e667f3bcc909ULL);
  x = ps_mix64(x ^ key * 0x9e3779b97f4a7c15ULL);
  return ps_mix64(x ^ i * 0xd1b54a32d192ed03ULL);
}

/* Uniform in [0, 1) from the top 24 bits: every value a float can hold. */
static float unit(uint64_t r) { return (float)(r >> 40) * (1.0f / 16777216.0f); }

float ps_init_value(const loom_ps_init *in, uint64_t key, uint64_t i) {
  switch (in->kind) {
  case LOOM_PS_CONSTANT:
    return in->a;
  case LOOM_PS_UNIFORM:
    return in->a + (in->b - in->a) * unit(rnd(in->seed, key, i));
  case LOOM_PS_NORMAL: {
    /* Box-Muller on two draws: u1 in (0, 1] keeps the log finite. */
    double u1 = ((double)(rnd(in->seed, key, 2 * i) >> 11) + 1.0) / 9007199254740992.0;
    double u2 = (double)(rnd(in->seed, key, 2 * i + 1) >> 11) / 9007199254740992.0;
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    return (float)(in->a + in->b * z);
  }
  case LOOM_PS_ZEROS:
  default:
    return 0.0f;
  }
}

void ps_init_fill(const loom_ps_init *in, uint64_t key, uint64_t first, float *out, size_t n) {
  if (in->kind == LOOM_PS_ZEROS || in->kind == LOOM_PS_CONSTANT) {
    float v = in->kind == LOOM_PS_ZEROS ? 0.0f : in->a;
    for (size_t i = 0; i < n; i++) out[i] = v;
    return;
  }
  for (size_t i = 0; i < n; i++) out[i] = ps_init_value(in, key, first + i);
}

int ps_opt_slots(int kind) { return kind == LOOM_PS_ADAM ? 2 : kind == LOOM_PS_ADAGRAD ? 1 : 0; }

float ps_opt_slot_init(const loom_ps_opt *o, int slot) {
  return o->kind == LOOM_PS_ADAGRAD && slot == 0 ? o->initial_accumulator : 0.0f;
}

void ps_opt_apply(const loom_ps_opt *o, uint64_t t, float *restrict w, float *restrict s1,
                  float *restrict s2, const float *restrict g, size_t n) {
  const float lr = o->lr;
  switch (o->kind) {
  case LOOM_PS_SGD:
    for (size_t i = 0; i < n; i++) w[i] -= lr * g[i];
    break;
  case LOOM_PS_ADAGRAD: {
    const float eps = o->eps;
    for (size_t i = 0; i < n; i++) {
      s1[i] += g[i] * g[i];
      w[i] -= lr * g[i] / (sqrtf(s1[i]) + eps);
    }
    break;
  }
  case LOOM_PS_ADAM: {
    const float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    double tt = t < 1 ? 1.0 : (double)t;
    /* As torch.optim.Adam: the corrections in double, the rest in float. */
    const float step_size = (float)(lr / (1.0 - pow(b1, tt)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, tt));
    for (size_t i = 0; i < n; i++) {
      s1[i] = b1 * s1[i] + (1.0f - b1) * g[i];
      s2[i] = b2 * s2[i] + (1.0f - b2) * g[i] * g[i];
      w[i] -= step_size * s1[i] / (sqrtf(s2[i]) / bc2_sqrt + eps);
    }
    break;
  }
  }
}
