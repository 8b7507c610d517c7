/* bench_summary.c: what one loom_summary_scalar() costs a training loop,
 * run inside a loom job (run.sh). For each way of writing it times N calls
 * cycling over TAGS tags, REPS times, and prints the median per call:
 *
 *   file        a writer opened without a handle: the event file only (the
 *               cost before scalars reached the dashboard; the ceiling)
 *   dashboard   a writer opened with the job's handle, the default
 *               LOOM_SUMMARY_METRIC_MS (200 ms): the file, and per tag a
 *               metric at most every 200 ms
 *   every       the same with LOOM_SUMMARY_METRIC_MS=0: every scalar also a
 *               loom_metric() (a message to the coordinator)
 *   metric      loom_metric() alone
 *
 * The modes run interleaved, REPS rounds; after each run a KV round trip
 * makes sure the coordinator has read what that run sent.
 *
 * Output, one line a figure:
 *   name=summary_scalar mode=dashboard n=.. tags=.. median_ns=.. ratio=..
 * ratio: the file-only median over this one (1.0: no cost over the file;
 * below 1: slower; the benchmarks' convention, > 1 better for loom). */
#include <loom.h>
#include <loom/summary.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 7
#define TAGS 4

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static const char *const tags[TAGS] = {"train/loss", "train/accuracy", "train/lr", "grad_norm"};

/* ns per call of one run of n calls: mode "metric" calls loom_metric, the
 * others loom_summary_scalar on a writer opened for that mode in dir (its
 * opening and closing not timed). Then waits for a KV reply, so that the
 * coordinator has read every metric sent before the next run starts.
 * Returns a negative number on an error. */
static double time_once(loom_t *l, const char *mode, const char *dir, long n, int64_t *step) {
  loom_summary_t *s = NULL;
  if (strcmp(mode, "metric") != 0) {
    setenv("LOOM_SUMMARY_METRIC_MS", strcmp(mode, "every") == 0 ? "0" : "200", 1);
    if (loom_summary_open(strcmp(mode, "file") == 0 ? NULL : l, dir, &s) != 0) return -1;
  }
  double t0 = now_ns();
  for (long i = 0; i < n; i++, (*step)++) {
    double v = 1.0 / (double)(*step + 1);
    int rc = s ? loom_summary_scalar(s, tags[i % TAGS], *step / TAGS, v)
               : loom_metric(l, tags[i % TAGS], *step / TAGS, v);
    if (rc != 0) return -1;
  }
  double ns = (now_ns() - t0) / (double)n;
  if (s && loom_summary_close(s) != 0) return -1;
  if (loom_kv_set(l, "bench/barrier", "1", 1) != 0) return -1;
  return ns;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 20000;
  const char *dir = getenv("BENCH_DIR") ? getenv("BENCH_DIR") : "bench-summary";
  loom_t *l;
  int rc = loom_init(&l);
  if (rc != 0) {
    fprintf(stderr, "bench_summary: run it inside a loom job (run.sh): %s\n", loom_strerror(rc));
    return 1;
  }
  enum { NMODES = 4 };
  static const char *const modes[NMODES] = {"file", "dashboard", "every", "metric"};
  double per[NMODES][REPS];
  int64_t step = 0;
  /* interleaved: every mode once per round, so that the machine's other
   * load falls on all of them alike */
  for (int r = 0; r < REPS; r++) {
    for (int m = 0; m < NMODES; m++) {
      if ((per[m][r] = time_once(l, modes[m], dir, n, &step)) < 0) {
        fprintf(stderr, "bench_summary: %s failed: %s\n", modes[m], loom_errmsg(l));
        loom_finish(l);
        return 1;
      }
    }
  }
  double file_ns = 0;
  for (int m = 0; m < NMODES; m++) {
    qsort(per[m], REPS, sizeof per[m][0], cmp);
    double ns = per[m][REPS / 2];
    if (m == 0) file_ns = ns;
    printf("name=summary_scalar mode=%s n=%ld tags=%d median_ns=%.1f ratio=%.3f\n", modes[m], n,
           TAGS, ns, file_ns / ns);
  }
  fflush(stdout);
  loom_finish(l);
  return 0;
}
