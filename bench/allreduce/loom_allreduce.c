/* loom_allreduce.c: the loom side of the allreduce benchmark. Runs inside a
 * loom job (one process per rank; run.sh writes the spec) and times
 * loom_allreduce (f32 sum, in place) the same way as mpi_allreduce.c and
 * gloo_allreduce.py: per iteration, a loom_barrier, then the allreduce timed
 * on every rank with clock_gettime; the iteration's time is the max over
 * ranks (one LOOM_MAX allreduce of all iteration times after the loop, so it
 * does not disturb the timing); the figure is the median over iterations.
 * The result is checked once per size against its closed form first.
 *
 * The transport is loom's choice: shared memory on one host, TCP when the
 * job sets LOOM_COMM_TRANSPORT=tcp; the printed transport= says which.
 * Rank 0 prints one line per size on stdout.
 *
 *   loom_allreduce --sizes bytes:iters:warmup,...
 */
#include <loom.h>
#include <loom/comm.h>

#include "bench_util.h"

/* On a failed loom call: say which, where and why on stderr, and fail. */
#define CHECK(l, call)                                                                             \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ < 0) {                                                                                 \
      fprintf(stderr, "loom_allreduce: %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,           \
              loom_strerror(rc_), loom_errmsg(l));                                                 \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

/* Returns 0, or -1 after a failed call or a wrong result (said on stderr). */
static int run_size(loom_t *l, const char *transport, const bench_size *s) {
  int rank = loom_rank(l), n = loom_world_size(l);
  size_t count = s->bytes / sizeof(float);
  float *buf = NULL;
  double *t = calloc((size_t)s->iters, sizeof *t);
  int32_t bad = 0;
  int rc = -1;

  if (!t || posix_memalign((void **)&buf, 4096, s->bytes)) {
    fprintf(stderr, "loom_allreduce: out of memory for %zu bytes\n", s->bytes);
    goto fail;
  }

  /* Check once against the closed form; every rank learns if any failed. */
  for (size_t i = 0; i < count; i++) buf[i] = bench_value(rank, i);
  CHECK(l, loom_allreduce(l, buf, buf, count, LOOM_F32, LOOM_SUM));
  for (size_t i = 0; i < count && !bad; i++)
    if (buf[i] != bench_expected(n, i)) {
      fprintf(stderr,
              "loom_allreduce: rank %d bytes %zu: element %zu is %g, "
              "want %g\n",
              rank, s->bytes, i, buf[i], bench_expected(n, i));
      bad = 1;
    }
  CHECK(l, loom_allreduce(l, &bad, &bad, 1, LOOM_I32, LOOM_MAX));
  if (bad) goto fail;

  /* Zeros from here on: repeated in-place sums stay finite and normal. */
  memset(buf, 0, s->bytes);
  for (int i = 0; i < s->warmup; i++)
    CHECK(l, loom_allreduce(l, buf, buf, count, LOOM_F32, LOOM_SUM));
  for (int i = 0; i < s->iters; i++) {
    CHECK(l, loom_barrier(l));
    double t0 = bench_now();
    CHECK(l, loom_allreduce(l, buf, buf, count, LOOM_F32, LOOM_SUM));
    t[i] = bench_now() - t0;
  }
  CHECK(l, loom_allreduce(l, t, t, (size_t)s->iters, LOOM_F64, LOOM_MAX));
  if (rank == 0) bench_print("loom", transport, n, s, t);
  rc = 0;
fail:
  free(buf);
  free(t);
  return rc;
}

int main(int argc, char **argv) {
  const char *sizes = "4096:200:20";
  const char *env = getenv("LOOM_COMM_TRANSPORT");
  const char *transport = env && !strcmp(env, "tcp") ? "tcp" : "shm";
  bench_size s[BENCH_MAX_SIZES];
  loom_t *l = NULL;
  int ns, rc;

  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
      sizes = argv[++i];
    else {
      fprintf(stderr, "usage: loom_allreduce [--sizes bytes:iters:warmup,...]\n");
      return 2;
    }
  }
  if ((ns = bench_parse_sizes(sizes, s)) < 0) return 2;
  if ((rc = loom_init(&l)) < 0) {
    fprintf(stderr,
            "loom_allreduce: loom_init: %s (run it inside a loom "
            "job: bench/allreduce/run.sh does)\n",
            loom_strerror(rc));
    return 1;
  }
  rc = 0;
  for (int k = 0; k < ns && rc == 0; k++) rc = run_size(l, transport, &s[k]);
  loom_finish(l);
  return rc ? 1 : 0;
}
