/* commprobe.c: collectives through a real job: allreduce (sum, max over
 * f32 and i64), allgather, broadcast, reduce-scatter and barrier, checked
 * in closed form. With "hang" as argv[1], rank 1 dies mid-stream and the
 * others report how long their pending allreduce took to fail. Each rank
 * also prints the transport its communicator really uses to each peer
 * (loom__comm_transport_of: an internal function, hence the static
 * library). */
#include <loom.h>
#include <loom/comm.h>
#include "lib/lib.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "commprobe: line %d: ", __LINE__);                                           \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  loom_t *l;
  int rc = loom_init(&l);
  CHECK(rc == 0, "loom_init: %s", loom_strerror(rc));
  int r = loom_rank(l), n = loom_world_size(l);
  size_t count = 1000003; /* prime, ~4 MB of f32 */
  float *f = malloc(count * sizeof *f);
  int64_t *q = malloc(count * sizeof *q);
  for (size_t i = 0; i < count; i++) {
    f[i] = (float)((r + 1) * (int)(i % 13));
    q[i] = (int64_t)r * 1000000007LL + (int64_t)i;
  }
  if (argc > 1 && !strcmp(argv[1], "hang")) {
    /* report the error even though loom sends SIGTERM at the same moment;
     * its SIGKILL after the grace period ends us */
    signal(SIGTERM, SIG_IGN);
    /* everyone joins first, so the failure below is a death mid-stream */
    rc = loom_allreduce(l, f, f, count, LOOM_F32, LOOM_SUM);
    CHECK(rc == 0, "first allreduce: %s", loom_errmsg(l));
    if (r == 1) {
      usleep(300000);
      _exit(9);
    }
    double t0 = now();
    for (int it = 0; it < 100000; it++) {
      rc = loom_allreduce(l, f, f, count, LOOM_F32, LOOM_SUM);
      if (rc != 0) break;
    }
    printf("ABORTED rank=%d rc=%s after=%.3f msg=%s\n", r, loom_err_name(rc), now() - t0,
           loom_errmsg(l));
    fflush(stdout);
    sleep(30); /* the coordinator stops us */
    return 0;
  }
  rc = loom_allreduce(l, f, f, count, LOOM_F32, LOOM_SUM);
  CHECK(rc == 0, "allreduce: %s %s", loom_strerror(rc), loom_errmsg(l));
  float tri = (float)(n * (n + 1) / 2);
  for (size_t i = 0; i < count; i++) CHECK(f[i] == tri * (float)(i % 13), "sum[%zu] = %g", i, f[i]);
  int64_t *qm = malloc(count * sizeof *qm);
  rc = loom_allreduce(l, q, qm, count, LOOM_I64, LOOM_MAX);
  CHECK(rc == 0, "allreduce max: %s", loom_errmsg(l));
  for (size_t i = 0; i < count; i++)
    CHECK(qm[i] == (int64_t)(n - 1) * 1000000007LL + (int64_t)i, "max[%zu]", i);
  int *all = malloc((size_t)n * sizeof *all);
  rc = loom_allgather(l, &r, all, sizeof r);
  CHECK(rc == 0, "allgather: %s", loom_errmsg(l));
  for (int k = 0; k < n; k++) CHECK(all[k] == k, "allgather[%d] = %d", k, all[k]);
  char msg[32] = "";
  if (r == n - 1) snprintf(msg, sizeof msg, "from-%d", r);
  rc = loom_broadcast(l, msg, sizeof msg, n - 1);
  CHECK(rc == 0 && !strcmp(msg, "from-3") == (n == 4), "broadcast: '%s'", msg);
  size_t rsn = loom_reduce_scatter_count(count, n, r);
  float *blk = malloc(rsn * sizeof *blk + 4);
  for (size_t i = 0; i < count; i++) f[i] = 1.0f;
  rc = loom_reduce_scatter(l, f, blk, count, LOOM_F32, LOOM_SUM);
  CHECK(rc == 0, "reduce_scatter: %s", loom_errmsg(l));
  for (size_t i = 0; i < rsn; i++) CHECK(blk[i] == (float)n, "rs[%zu]", i);
  CHECK(loom_barrier(l) == 0, "barrier");
  char pairs[256] = "";
  for (int k = 0; k < n && k < 32; k++) {
    const char *tp = loom__comm_transport_of(l, k);
    CHECK(tp != NULL, "transport of %d: %s", k, loom_errmsg(l));
    snprintf(pairs + strlen(pairs), sizeof pairs - strlen(pairs), "%s%s", k ? "," : "", tp);
  }
  printf("COMMOK rank=%d world=%d pairs=%s\n", r, n, pairs);
  free(f);
  free(q);
  free(qm);
  free(all);
  free(blk);
  loom_finish(l);
  return 0;
}
