/* ckpt_demo.c: saves and checks checkpoints whose content is a closed-form
 * function of the step, for tests that kill the saver at random moments
 * (tests/system/test_ckpt.py) and for trying loom/ckpt.h by hand.
 *
 *   ckpt-demo save DIR [--count N] [--keep K] [--kib KIB]
 *       resumes after the newest valid checkpoint in DIR (or at step 0) and
 *       saves one step after another, N of them (default: until killed),
 *       printing "saved STEP" after each
 *   ckpt-demo check DIR [--kib KIB]
 *       restores the newest valid checkpoint and checks every value:
 *       prints "ok STEP" or "none"; exits 1 on any difference
 *   ckpt-demo restore DIR STEP [--kib KIB]
 *       the same for one step; prints the library's error on failure
 *
 * Step s holds four tensors (--kib scales the first two, default 1024):
 *   "weights" f32 [rows(s), 256]  (s * 131 + i) % 100003 * 0.5
 *   "bias"    f64 [rows(s)]       s + i / 8
 *   "tail"    i32 [s % 7]         s ^ i            (empty when s % 7 == 0)
 *   "step"    i64 scalar          s
 * rows(s) = rows0 * (4 + s % 5) / 4, so files differ in size from step to
 * step, and a checkpoint restored under the wrong step fails its shape
 * check. */
#include <loom.h>
#include <loom/ckpt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COLS 256

typedef struct {
  int64_t rows, tail_n, step;
  float *weights;
  double *bias;
  int32_t tail[7];
  loom_tensor t[4];
} state;

static int64_t rows_of(int64_t step, long kib) {
  int64_t rows0 = kib * 1024 / (COLS * 4);
  if (rows0 < 1) rows0 = 1;
  return rows0 * (4 + step % 5) / 4;
}

/* Sizes st for step and points its tensors at its buffers; with fill, also
 * writes the step's values. Returns 0 or -1 (out of memory). */
static int state_make(state *st, int64_t step, long kib, int fill) {
  st->rows = rows_of(step, kib);
  st->tail_n = step % 7;
  st->step = fill ? step : -1;
  st->weights = malloc((size_t)(st->rows * COLS) * sizeof(float));
  st->bias = malloc((size_t)st->rows * sizeof(double));
  if (!st->weights || !st->bias) return -1;
  if (fill) {
    for (int64_t i = 0; i < st->rows * COLS; i++)
      st->weights[i] = (float)((step * 131 + i) % 100003) * 0.5f;
    for (int64_t i = 0; i < st->rows; i++) st->bias[i] = (double)step + (double)i / 8.0;
    for (int64_t i = 0; i < st->tail_n; i++) st->tail[i] = (int32_t)(step ^ i);
  } else {
    memset(st->weights, 0xee, (size_t)(st->rows * COLS) * sizeof(float));
    memset(st->bias, 0xee, (size_t)st->rows * sizeof(double));
    memset(st->tail, 0xee, sizeof st->tail);
  }
  st->t[0] = (loom_tensor){"weights", LOOM_F32, 2, {st->rows, COLS}, st->weights};
  st->t[1] = (loom_tensor){"bias", LOOM_F64, 1, {st->rows}, st->bias};
  st->t[2] = (loom_tensor){"tail", LOOM_I32, 1, {st->tail_n}, st->tail};
  st->t[3] = (loom_tensor){"step", LOOM_I64, 0, {0}, &st->step};
  return 0;
}

static void state_free(state *st) {
  free(st->weights);
  free(st->bias);
}

/* Restores step and compares every value with the closed form. */
static int check_step(loom_ckpt_t *c, int64_t step, long kib) {
  state got, want;
  int rc = -1;
  if (state_make(&got, step, kib, 0) != 0 || state_make(&want, step, kib, 1) != 0) {
    fprintf(stderr, "ckpt-demo: out of memory\n");
    goto out;
  }
  int lrc = loom_ckpt_restore(c, step, got.t, 4);
  if (lrc != 0) {
    fprintf(stderr, "ckpt-demo: restore of step %lld failed: %s: %s\n", (long long)step,
            loom_err_name(lrc), loom_ckpt_errmsg(c));
    goto out;
  }
  const char *bad = NULL;
  if (got.step != step)
    bad = "step";
  else if (memcmp(got.weights, want.weights, (size_t)(got.rows * COLS) * sizeof(float)))
    bad = "weights";
  else if (memcmp(got.bias, want.bias, (size_t)got.rows * sizeof(double)))
    bad = "bias";
  else if (memcmp(got.tail, want.tail, (size_t)got.tail_n * sizeof(int32_t)))
    bad = "tail";
  if (bad) {
    fprintf(stderr,
            "ckpt-demo: step %lld restored, but '%s' differs from its "
            "closed form\n",
            (long long)step, bad);
    goto out;
  }
  rc = 0;
out:
  state_free(&got);
  state_free(&want);
  return rc;
}

static int usage(void) {
  fprintf(stderr, "usage: ckpt-demo save DIR [--count N] [--keep K] [--kib KIB]\n"
                  "       ckpt-demo check DIR [--kib KIB]\n"
                  "       ckpt-demo restore DIR STEP [--kib KIB]\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 3) return usage();
  const char *cmd = argv[1], *dir = argv[2];
  long count = -1, keep = 3, kib = 1024;
  long long one_step = -1;
  int i = 3;
  if (strcmp(cmd, "restore") == 0) {
    if (argc < 4) return usage();
    one_step = atoll(argv[3]);
    i = 4;
  }
  for (; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--count") == 0)
      count = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--keep") == 0)
      keep = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--kib") == 0)
      kib = atol(argv[i + 1]);
    else
      return usage();
  }
  if (i != argc || kib < 1) return usage();

  loom_ckpt_t *c;
  int rc = loom_ckpt_open(NULL, dir, (int)keep, &c);
  if (rc != 0) {
    fprintf(stderr, "ckpt-demo: cannot open %s: %s\n", dir, loom_strerror(rc));
    return 1;
  }
  int status = 1;
  int64_t step;
  if (strcmp(cmd, "save") == 0) {
    rc = loom_ckpt_latest(c, &step);
    if (rc == LOOM_ENOENT)
      step = -1;
    else if (rc != 0)
      goto fail;
    for (long n = 0; count < 0 || n < count; n++) {
      state st;
      step++;
      if (state_make(&st, step, kib, 1) != 0) {
        state_free(&st);
        fprintf(stderr, "ckpt-demo: out of memory\n");
        goto out;
      }
      rc = loom_ckpt_save(c, step, st.t, 4);
      state_free(&st);
      if (rc != 0) goto fail;
      printf("saved %lld\n", (long long)step);
      fflush(stdout);
    }
    status = 0;
  } else if (strcmp(cmd, "check") == 0) {
    rc = loom_ckpt_latest(c, &step);
    if (rc == LOOM_ENOENT) {
      printf("none\n");
      status = 0;
    } else if (rc != 0) {
      goto fail;
    } else if (check_step(c, step, kib) == 0) {
      printf("ok %lld\n", (long long)step);
      status = 0;
    }
  } else if (strcmp(cmd, "restore") == 0) {
    if (check_step(c, one_step, kib) == 0) {
      printf("ok %lld\n", one_step);
      status = 0;
    }
  } else {
    loom_ckpt_close(c);
    return usage();
  }
  goto out;
fail:
  fprintf(stderr, "ckpt-demo: %s: %s\n", loom_err_name(rc), loom_ckpt_errmsg(c));
out:
  loom_ckpt_close(c);
  return status;
}
