/* bench_util.h: what the allreduce benchmark's C programs share: a monotonic
 * clock, the median of a set of timings, the size schedule given on the
 * command line, and the closed-form values used to check a result. Header
 * only, so that each program (loom, Open MPI, memcpy) builds from one .c. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One size of the schedule: bytes of f32, timed iterations, warm-ups. */
typedef struct {
  size_t bytes;
  int iters;
  int warmup;
} bench_size;

#define BENCH_MAX_SIZES 16

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of t[0..n), n > 0; t is reordered. */
static inline double bench_median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Parses "bytes:iters:warmup,..." (iters and warmup optional: 20 and 5)
 * into s[0..BENCH_MAX_SIZES). Returns the number of sizes, or -1 with a
 * message on stderr when spec is malformed. */
static inline int bench_parse_sizes(const char *spec, bench_size *s) {
  int n = 0;
  const char *p = spec;
  while (*p) {
    char *end;
    if (n == BENCH_MAX_SIZES) goto bad;
    s[n].bytes = strtoull(p, &end, 10);
    s[n].iters = 20;
    s[n].warmup = 5;
    if (end == p || s[n].bytes == 0 || s[n].bytes % 4) goto bad;
    p = end;
    if (*p == ':') {
      s[n].iters = (int)strtol(p + 1, &end, 10);
      if (end == p + 1 || s[n].iters < 1) goto bad;
      p = end;
      if (*p == ':') {
        s[n].warmup = (int)strtol(p + 1, &end, 10);
        if (end == p + 1 || s[n].warmup < 0) goto bad;
        p = end;
      }
    }
    n++;
    if (*p == ',')
      p++;
    else if (*p)
      goto bad;
  }
  if (n == 0) goto bad;
  return n;
bad:
  fprintf(stderr,
          "bad --sizes '%s': want bytes[:iters[:warmup]],... with bytes a "
          "positive multiple of 4 and at most %d sizes\n",
          spec, BENCH_MAX_SIZES);
  return -1;
}

/* The value rank r contributes at element i, and the sum over n ranks.
 * Small integers, so every partial sum is exact in f32 in any order. */
static inline float bench_value(int r, size_t i) { return (float)(r + 1 + (int)(i % 13)); }
static inline float bench_expected(int n, size_t i) {
  return (float)(n * (n + 1) / 2 + n * (int)(i % 13));
}

/* Prints the figure line for one (peer, transport, world, size) from the
 * per-iteration times t[0..s->iters) (each the max over ranks), reordering
 * t. The line ends with every sample, so that run.sh can pool the samples
 * of several rounds; report.py drops them from its output. */
static inline void bench_print(const char *peer, const char *transport, int n, const bench_size *s,
                               double *t) {
  double median_s = bench_median(t, s->iters);
  double algbw = (double)s->bytes / median_s / 1e9;
  double busbw = algbw * 2.0 * (n - 1) / n;
  printf("name=allreduce peer=%s transport=%s n=%d bytes=%zu iters=%d "
         "median_s=%.9f min_s=%.9f algbw_GBps=%.4f busbw_GBps=%.4f samples_s=",
         peer, transport, n, s->bytes, s->iters, median_s, t[0], algbw, busbw);
  for (int i = 0; i < s->iters; i++) printf("%s%.9f", i ? "," : "", t[i]);
  printf("\n");
  fflush(stdout);
}

#endif
