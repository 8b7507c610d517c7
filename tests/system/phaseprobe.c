/* phaseprobe.c: where a task's time goes, as libloom reports it
 * (loom_phase_times_get, the time_*_pct metrics), through a real job.
 * Every rank takes steps for about SECONDS (argv[1], default 2): it
 * computes (spins on the clock) for its share of a step, then allreduces
 * a small vector. Rank 0 computes 4 ms a step, the others 0.5 ms, so
 * every other rank spends most of its time waiting for rank 0 inside the
 * allreduce. Checks each allreduce's result, then prints one line
 * "PHASES {json}" with its loom_phase_times_get and the time it spent
 * computing as it measured it itself. */
#include <loom.h>
#include <loom/comm.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "phaseprobe: line %d: ", __LINE__);                                          \
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
  double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  loom_t *l;
  int rc = loom_init(&l);
  CHECK(rc == 0, "loom_init: %s", loom_strerror(rc));
  int r = loom_rank(l), n = loom_world_size(l);
  loom_phase_times pt;
  CHECK(loom_phase_times_get(l, &pt) == 0 && pt.wall_s == 0.0, "times before any collective");
  double step_s = r == 0 ? 0.004 : 0.0005, computed = 0.0;
  long steps = (long)(seconds / 0.004);
  float v[256];
  for (long s = 0; s < steps; s++) {
    double t0 = now();
    while (now() - t0 < step_s) {
    }
    computed += now() - t0;
    for (int i = 0; i < 256; i++) v[i] = (float)(r + i);
    rc = loom_allreduce(l, v, v, 256, LOOM_F32, LOOM_SUM);
    CHECK(rc == 0, "allreduce: %s", loom_errmsg(l));
    CHECK(v[7] == (float)(n * (n - 1) / 2 + 7 * n), "allreduce gave %g", (double)v[7]);
  }
  CHECK(loom_phase_times_get(l, &pt) == 0, "loom_phase_times_get");
  CHECK(loom_phase_times_get(l, NULL) == LOOM_EINVAL, "NULL accepted");
  printf("PHASES {\"rank\": %d, \"wall\": %.6f, \"compute\": %.6f, \"comm\": %.6f, "
         "\"wait_peers\": %.6f, \"wait_data\": %.6f, \"computed\": %.6f}\n",
         r, pt.wall_s, pt.compute_s, pt.comm_s, pt.wait_peers_s, pt.wait_data_s, computed);
  fflush(stdout);
  loom_finish(l);
  return 0;
}
