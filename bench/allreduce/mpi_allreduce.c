/* mpi_allreduce.c: the Open MPI peer of the allreduce benchmark. Times
 * MPI_Allreduce (f32 sum, in place) with the same method as
 * loom_allreduce.c: per iteration, a barrier, then the allreduce timed on
 * every rank; the iteration's time is the max over ranks; the figure is the
 * median over iterations. Built with mpicc by run.sh.
 *
 *   mpirun -n N mpi_allreduce --transport shm|tcp --sizes bytes:iters:warmup,...
 */
#include <mpi.h>
#include <stdint.h>

#include "bench_util.h"

static int run_size(const char *transport, const bench_size *s, int rank, int n) {
  size_t count = s->bytes / sizeof(float);
  float *buf = NULL;
  double *t = calloc((size_t)s->iters, sizeof *t);
  int bad = 0, anybad = 0;
  if (!t || posix_memalign((void **)&buf, 4096, s->bytes)) {
    fprintf(stderr, "mpi_allreduce: out of memory for %zu bytes\n", s->bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  /* Check once against the closed form. */
  for (size_t i = 0; i < count; i++) buf[i] = bench_value(rank, i);
  MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < count && !bad; i++)
    if (buf[i] != bench_expected(n, i)) {
      fprintf(stderr,
              "mpi_allreduce: rank %d bytes %zu: element %zu is %g, "
              "want %g\n",
              rank, s->bytes, i, buf[i], bench_expected(n, i));
      bad = 1;
    }
  MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (anybad) {
    free(buf);
    free(t);
    return -1;
  }

  /* Zeros from here on: repeated in-place sums stay finite and normal. */
  memset(buf, 0, s->bytes);
  for (int i = 0; i < s->warmup; i++)
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < s->iters; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t[i] = bench_now() - t0;
  }
  MPI_Allreduce(MPI_IN_PLACE, t, s->iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) bench_print("mpi", transport, n, s, t);
  free(buf);
  free(t);
  return 0;
}

int main(int argc, char **argv) {
  const char *transport = "shm", *sizes = "4096:200:20";
  bench_size s[BENCH_MAX_SIZES];
  int rank, n, ns, rc = 0;

  MPI_Init(&argc, &argv);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--transport") && i + 1 < argc)
      transport = argv[++i];
    else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
      sizes = argv[++i];
    else {
      fprintf(stderr, "usage: mpi_allreduce [--transport shm|tcp] "
                      "[--sizes bytes:iters:warmup,...]\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if ((ns = bench_parse_sizes(sizes, s)) < 0) MPI_Abort(MPI_COMM_WORLD, 2);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int k = 0; k < ns && rc == 0; k++) rc = run_size(transport, &s[k], rank, n);
  if (rc && rank == 0) fprintf(stderr, "mpi_allreduce: wrong result, see above\n");
  MPI_Finalize();
  return rc ? 1 : 0;
}
