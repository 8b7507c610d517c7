/* memcpy_bw.c: the ceiling for the allreduce benchmark: how fast one core
 * of this machine copies a large buffer (memcpy between two 64 MiB buffers
 * by default). Prints bytes copied per second of the median iteration.
 *
 *   memcpy_bw [--bytes B] [--iters N] [--warmup W]
 */
#include "bench_util.h"

int main(int argc, char **argv) {
  size_t bytes = 64u << 20;
  int iters = 30, warmup = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
      bytes = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
      warmup = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: memcpy_bw [--bytes B] [--iters N] [--warmup W]\n");
      return 2;
    }
  }
  if (bytes == 0 || iters < 1 || warmup < 0) {
    fprintf(stderr, "memcpy_bw: bytes and iters must be positive\n");
    return 2;
  }
  char *a = NULL, *b = NULL;
  double *t = calloc((size_t)iters, sizeof *t);
  if (!t || posix_memalign((void **)&a, 4096, bytes) || posix_memalign((void **)&b, 4096, bytes)) {
    fprintf(stderr, "memcpy_bw: out of memory for 2 x %zu bytes\n", bytes);
    return 1;
  }
  memset(a, 1, bytes); /* fault the pages in outside the timing */
  memset(b, 2, bytes);
  for (int i = 0; i < warmup; i++) memcpy(b, a, bytes);
  for (int i = 0; i < iters; i++) {
    double t0 = bench_now();
    memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
    t[i] = bench_now() - t0;
  }
  /* Keep the copies observable so they cannot be dropped. */
  volatile char sink = a[bytes / 2] ^ b[bytes / 3];
  (void)sink;
  double med = bench_median(t, iters);
  printf("name=memcpy bytes=%zu iters=%d median_s=%.9f GBps=%.4f\n", bytes, iters, med,
         (double)bytes / med / 1e9);
  free(a);
  free(b);
  free(t);
  return 0;
}
