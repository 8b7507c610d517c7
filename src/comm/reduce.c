/* reduce.c: the elementwise reduction kernels of allreduce and
 * reduce-scatter, for sum/max/min (avg is sum, then comm_scale) over
 * f32/f64/i32/i64.
 *
 * Each kernel is a plain loop over restrict pointers so that gcc vectorizes
 * it; this file is built at O3 whatever the build type, since these loops
 * are where a large allreduce spends its CPU. There are two forms of each,
 * d = a op b and d op= b, because in place d aliases a and restrict would
 * be a lie. */
#pragma GCC optimize("O3")
#include "comm/comm.h"

#include <stdint.h>

#define COMM_SUM(x, y) ((x) + (y))
#define COMM_MAX(x, y) ((x) > (y) ? (x) : (y))
#define COMM_MIN(x, y) ((x) < (y) ? (x) : (y))

#define COMM_KERNEL(name, T, OP)                                                                   \
  static void name##_3(T *restrict d, const T *restrict a, const T *restrict b, size_t n) {        \
    for (size_t i = 0; i < n; i++) d[i] = OP(a[i], b[i]);                                          \
  }                                                                                                \
  static void name##_2(T *restrict d, const T *restrict b, size_t n) {                             \
    for (size_t i = 0; i < n; i++) d[i] = OP(d[i], b[i]);                                          \
  }

#define COMM_KERNELS(tname, T)                                                                     \
  COMM_KERNEL(sum_##tname, T, COMM_SUM)                                                            \
  COMM_KERNEL(max_##tname, T, COMM_MAX)                                                            \
  COMM_KERNEL(min_##tname, T, COMM_MIN)                                                            \
  static void reduce_##tname(loom_op op, void *d, const void *a, const void *b, size_t n) {        \
    if (d == a) {                                                                                  \
      if (op == LOOM_MAX)                                                                          \
        max_##tname##_2(d, b, n);                                                                  \
      else if (op == LOOM_MIN)                                                                     \
        min_##tname##_2(d, b, n);                                                                  \
      else                                                                                         \
        sum_##tname##_2(d, b, n);                                                                  \
    } else {                                                                                       \
      if (op == LOOM_MAX)                                                                          \
        max_##tname##_3(d, a, b, n);                                                               \
      else if (op == LOOM_MIN)                                                                     \
        min_##tname##_3(d, a, b, n);                                                               \
      else                                                                                         \
        sum_##tname##_3(d, a, b, n);                                                               \
    }                                                                                              \
  }                                                                                                \
  static void scale_##tname(T *restrict d, size_t n, T div) {                                      \
    for (size_t i = 0; i < n; i++) d[i] /= div;                                                    \
  }

COMM_KERNELS(f32, float)
COMM_KERNELS(f64, double)
COMM_KERNELS(i32, int32_t)
COMM_KERNELS(i64, int64_t)

size_t comm_dtype_size(loom_dtype dt) {
  switch (dt) {
  case LOOM_F32:
    return 4;
  case LOOM_F64:
    return 8;
  case LOOM_I32:
    return 4;
  case LOOM_I64:
    return 8;
  }
  return 0;
}

void comm_reduce(loom_dtype dt, loom_op op, void *dst, const void *a, const void *b, size_t n) {
  switch (dt) {
  case LOOM_F32:
    reduce_f32(op, dst, a, b, n);
    break;
  case LOOM_F64:
    reduce_f64(op, dst, a, b, n);
    break;
  case LOOM_I32:
    reduce_i32(op, dst, a, b, n);
    break;
  case LOOM_I64:
    reduce_i64(op, dst, a, b, n);
    break;
  }
}

void comm_scale(loom_dtype dt, void *dst, size_t n, int div) {
  switch (dt) {
  case LOOM_F32:
    scale_f32(dst, n, (float)div);
    break;
  case LOOM_F64:
    scale_f64(dst, n, (double)div);
    break;
  case LOOM_I32:
    scale_i32(dst, n, (int32_t)div);
    break;
  case LOOM_I64:
    scale_i64(dst, n, (int64_t)div);
    break;
  }
}

void comm__reduce_piece(void *arg, const void *piece, size_t off, size_t n) {
  const struct comm_reduce_sink *s = arg;
  size_t es = comm_dtype_size(s->dt);
  comm_reduce(s->dt, s->op, s->dst + off, s->a + off, piece, n / es);
  if (s->div > 1) comm_scale(s->dt, s->dst + off, n / es, s->div);
}
