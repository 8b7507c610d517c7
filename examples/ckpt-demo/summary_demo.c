/* summary_demo.c: writes TensorBoard summaries whose values are closed-form
 * functions of the step, for tests that decode the event file on their own
 * (tests/system/test_summary.py) and for trying loom/summary.h by hand:
 *
 *   summary-demo DIR|- [--steps N] [--hold SECONDS]
 *
 * DIR "-" means the task's default run ($LOOM_JOB_DIR/tensorboard/
 * <role>-<index>/). For step s in 0..N-1 (default 20) it writes
 *   scalar "loss"           1 / (1 + s)
 *   scalar "train/accuracy" s / 100
 *   histogram "weights"     at s = 0 and every 10th step: the HIST_N values
 *                           hist_value(s, i) below, with zeros, tiny, huge,
 *                           negative, infinite and NaN values among them
 *   text "notes"            at s = 0: TEXT
 * prints the event file's path, then "written" once everything is queued;
 * with --hold it waits that long before closing, without flushing, so a
 * test can see the writer's periodic flush. Inside a loom job it opens the
 * writer with the job's handle, so the scalars also reach the dashboard
 * (as loom_metric would send them, thinned per LOOM_SUMMARY_METRIC_MS). */
#include <loom.h>
#include <loom/summary.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HIST_N 1000
#define TEXT "# Notes\nloom *summary* demo: \xce\xbb = 0.1, \"quoted\" \\ text"

static float hist_value(long s, int i) {
  switch (i % 50) {
  case 0:
    return 0.0f;
  case 1:
    return 1e-13f; /* below the smallest bucket limit */
  case 2:
    return -3e25f; /* beyond the largest finite limit */
  case 3:
    return i == 3 ? INFINITY : NAN; /* left out */
  default:
    return (float)((i - HIST_N / 2) * (s + 1)) / 64.0f;
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: summary-demo DIR|- [--steps N] [--hold SECONDS]\n");
    return 2;
  }
  const char *dir = strcmp(argv[1], "-") == 0 ? NULL : argv[1];
  long steps = 20;
  double hold = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--steps") == 0)
      steps = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--hold") == 0)
      hold = atof(argv[i + 1]);
    else {
      fprintf(stderr, "summary-demo: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  loom_t *l = NULL;
  int rc;
  if (getenv("LOOM_COORD") && (rc = loom_init(&l)) != 0) {
    fprintf(stderr, "summary-demo: cannot join the job: %s\n", loom_strerror(rc));
    return 1;
  }
  loom_summary_t *s;
  rc = loom_summary_open(l, dir, &s);
  if (rc != 0) {
    fprintf(stderr, "summary-demo: cannot open a writer: %s\n",
            l ? loom_errmsg(l) : loom_strerror(rc));
    if (l) loom_finish(l);
    return 1;
  }
  printf("%s\n", loom_summary_path(s));
  static float values[HIST_N];
  for (long step = 0; step < steps && rc == 0; step++) {
    rc = loom_summary_scalar(s, "loss", step, 1.0 / (1.0 + (double)step));
    if (rc == 0) rc = loom_summary_scalar(s, "train/accuracy", step, (double)step / 100.0);
    if (rc == 0 && step % 10 == 0) {
      for (int i = 0; i < HIST_N; i++) values[i] = hist_value(step, i);
      rc = loom_summary_histogram(s, "weights", step, values, HIST_N);
    }
    if (rc == 0 && step == 0) rc = loom_summary_text(s, "notes", step, TEXT);
  }
  if (rc != 0) {
    fprintf(stderr, "summary-demo: %s: %s\n", loom_strerror(rc), loom_summary_errmsg(s));
    loom_summary_close(s);
    if (l) loom_finish(l);
    return 1;
  }
  printf("written\n");
  fflush(stdout);
  if (hold > 0) {
    struct timespec ts = {(time_t)hold, (long)((hold - (double)(time_t)hold) * 1e9)};
    nanosleep(&ts, NULL);
  }
  rc = loom_summary_close(s); /* before loom_finish: the writer uses the handle */
  if (l) loom_finish(l);
  if (rc != 0) {
    fprintf(stderr, "summary-demo: close: %s\n", loom_strerror(rc));
    return 1;
  }
  return 0;
}
