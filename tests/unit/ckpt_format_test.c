/* ckpt_format_test.c: checkpoints round-trip every dtype and shape
 * (scalars, empty tensors, 8 dimensions); latest, list and keep behave as
 * documented; every single-bit flip and every truncation of a checkpoint is
 * refused by restore and skipped by latest, and so is a table that names
 * two tensors alike or has a NUL in a name; mismatched names, dtypes and
 * shapes are refused before any data is written; temporary files of dead
 * savers are cleaned up. (tests/system/test_ckpt.py kills real savers.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "loom/ckpt.h"

/* Warnings from the library land here, to be checked instead of printed. */
static int warnings;
static char last_warning[2048];
static void sink(int level, const char *subsys, const char *msg, void *arg) {
  if (level > LOOM_LOG_WARN) return;
  warnings++;
  loom__strlcpy(last_warning, msg, sizeof last_warning);
}

static void ckpt_file(const char *dir, int64_t step, char *out, size_t len) {
  snprintf(out, len, "%s/ckpt-%012lld.ckpt", dir, (long long)step);
}

/* A small model: every dtype, a scalar, an empty tensor, values that
 * depend on step. */
typedef struct {
  float w[3][4];
  double b[5];
  int32_t idx[7];
  int64_t count; /* scalar */
  float none[1]; /* shape [0, 3]: no elements */
  loom_tensor t[5];
} model;

static void model_init(model *m, int64_t step) {
  memset(m, 0, sizeof *m);
  for (int i = 0; i < 12; i++) m->w[i / 4][i % 4] = (float)step + 0.25f * (float)i;
  for (int i = 0; i < 5; i++) m->b[i] = -(double)step * 1e-3 - i;
  for (int i = 0; i < 7; i++) m->idx[i] = (int32_t)(step * 7 + i);
  m->count = step * 1000003;
  m->t[0] = (loom_tensor){"layer/w", LOOM_F32, 2, {3, 4}, m->w};
  m->t[1] = (loom_tensor){"layer/b", LOOM_F64, 1, {5}, m->b};
  m->t[2] = (loom_tensor){"idx", LOOM_I32, 1, {7}, m->idx};
  m->t[3] = (loom_tensor){"count", LOOM_I64, 0, {0}, &m->count};
  m->t[4] = (loom_tensor){"none", LOOM_F32, 2, {0, 3}, m->none};
}

static void model_clear(model *m) {
  memset(m->w, 0xab, sizeof m->w);
  memset(m->b, 0xab, sizeof m->b);
  memset(m->idx, 0xab, sizeof m->idx);
  memset(&m->count, 0xab, sizeof m->count);
}

static void model_expect(const model *m, int64_t step) {
  model want;
  model_init(&want, step);
  assert_memory_equal(m->w, want.w, sizeof m->w);
  assert_memory_equal(m->b, want.b, sizeof m->b);
  assert_memory_equal(m->idx, want.idx, sizeof m->idx);
  assert_int_equal(m->count, want.count);
}

static void test_roundtrip(void **state) {
  char *dir = test_tmpdir("loom-ckpt-test");
  loom_ckpt_t *c;
  int64_t step = -1;
  assert_int_equal(loom_ckpt_open(NULL, dir, 0, &c), 0);
  assert_string_equal(loom_ckpt_dir(c), dir);
  assert_int_equal(loom_ckpt_latest(c, &step), LOOM_ENOENT);
  assert_non_null(strstr(loom_ckpt_errmsg(c), "no valid checkpoint"));
  model m;
  for (int64_t s = 0; s <= 30; s += 10) {
    model_init(&m, s);
    assert_int_equal(loom_ckpt_save(c, s, m.t, 5), 0);
  }
  assert_int_equal(loom_ckpt_latest(c, &step), 0);
  assert_int_equal(step, 30);
  for (int64_t s = 0; s <= 30; s += 10) {
    model_clear(&m);
    assert_int_equal(loom_ckpt_restore(c, s, m.t, 5), 0);
    model_expect(&m, s);
    assert_int_equal(loom_ckpt_verify(c, s), 0);
  }
  /* a subset, in another order */
  model_clear(&m);
  loom_tensor two[2] = {m.t[3], m.t[0]};
  assert_int_equal(loom_ckpt_restore(c, 20, two, 2), 0);
  assert_int_equal(m.count, 20 * 1000003);
  assert_true(m.w[0][0] == 20.0f);
  /* 8 dimensions, and a checkpoint of nothing */
  static double big[2 * 1 * 3 * 1 * 1 * 2 * 1 * 2];
  for (size_t i = 0; i < LOOM__ARRAY_LEN(big); i++) big[i] = (double)i / 3;
  loom_tensor t8 = {"eight", LOOM_F64, 8, {2, 1, 3, 1, 1, 2, 1, 2}, big};
  assert_int_equal(loom_ckpt_save(c, 31, &t8, 1), 0);
  memset(big, 0, sizeof big);
  assert_int_equal(loom_ckpt_restore(c, 31, &t8, 1), 0);
  for (size_t i = 0; i < LOOM__ARRAY_LEN(big); i++) assert_true(big[i] == (double)i / 3);
  assert_int_equal(loom_ckpt_save(c, 32, NULL, 0), 0);
  assert_int_equal(loom_ckpt_restore(c, 32, NULL, 0), 0);
  int64_t steps[8];
  size_t n = 0;
  assert_int_equal(loom_ckpt_list(c, steps, 8, &n), 0);
  assert_int_equal(n, 6);
  int64_t want[6] = {0, 10, 20, 30, 31, 32};
  assert_memory_equal(steps, want, sizeof want);
  assert_int_equal(loom_ckpt_list(c, steps, 2, &n), 0); /* count beyond max */
  assert_int_equal(n, 6);
  assert_int_equal(steps[1], 10);
  loom_ckpt_close(c);
  test_rm_rf(dir);
  free(dir);
}

static void test_keep_and_later_steps(void **state) {
  char *dir = test_tmpdir("loom-ckpt-test");
  loom_ckpt_t *c;
  model m;
  int64_t steps[16];
  size_t n;
  assert_int_equal(loom_ckpt_open(NULL, dir, 3, &c), 0);
  for (int64_t s = 1; s <= 6; s++) {
    model_init(&m, s);
    assert_int_equal(loom_ckpt_save(c, s, m.t, 5), 0);
  }
  assert_int_equal(loom_ckpt_list(c, steps, 16, &n), 0);
  assert_int_equal(n, 3);
  assert_int_equal(steps[0], 4);
  assert_int_equal(steps[2], 6);
  /* back to step 5 (as after a restart from it): 6 is gone, 3 are kept */
  model_init(&m, 5);
  assert_int_equal(loom_ckpt_save(c, 5, m.t, 5), 0);
  assert_int_equal(loom_ckpt_list(c, steps, 16, &n), 0);
  assert_int_equal(n, 2);
  assert_int_equal(steps[0], 4);
  assert_int_equal(steps[1], 5);
  loom_ckpt_close(c);
  /* keep 1 */
  assert_int_equal(loom_ckpt_open(NULL, dir, 1, &c), 0);
  assert_int_equal(loom_ckpt_save(c, 9, m.t, 5), 0);
  assert_int_equal(loom_ckpt_list(c, steps, 16, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(steps[0], 9);
  loom_ckpt_close(c);
  assert_int_equal(loom_ckpt_open(NULL, dir, -1, &c), LOOM_EINVAL);
  test_rm_rf(dir);
  free(dir);
}

static void read_all(const char *path, unsigned char **buf, size_t *len) {
  char *p;
  assert_int_equal(loom__read_file(path, 1 << 20, &p, len), 0);
  *buf = (unsigned char *)p;
}

static void write_all(const char *path, const unsigned char *buf, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, buf, len), (ssize_t)len);
  close(fd);
}

/* Saves steps 1 and 2, then damages step 2's file every way in turn: it
 * must be refused by restore (data untouched) and latest must fall back to
 * step 1. */
static void test_every_flip_and_truncation_is_refused(void **state) {
  char *dir = test_tmpdir("loom-ckpt-test");
  loom_ckpt_t *c;
  model m;
  char path[512];
  assert_int_equal(loom_ckpt_open(NULL, dir, 0, &c), 0);
  model_init(&m, 1);
  assert_int_equal(loom_ckpt_save(c, 1, m.t, 5), 0);
  model_init(&m, 2);
  assert_int_equal(loom_ckpt_save(c, 2, m.t, 5), 0);
  ckpt_file(dir, 2, path, sizeof path);
  unsigned char *good;
  size_t len;
  read_all(path, &good, &len);
  assert_true(len > 300);
  unsigned char *bad = malloc(len);
  assert_non_null(bad);
  int64_t step;
  size_t flips = 0;
  for (size_t bit = 0; bit < len * 8; bit++) {
    memcpy(bad, good, len);
    bad[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    write_all(path, bad, len);
    model_init(&m, 7);
    int rc = loom_ckpt_restore(c, 2, m.t, 5);
    if (rc != LOOM_EIO)
      fail_msg("flipped bit %zu (byte %zu): restore returned %d (%s)", bit, bit / 8, rc,
               loom_ckpt_errmsg(c));
    model_expect(&m, 7); /* untouched */
    warnings = 0;
    assert_int_equal(loom_ckpt_latest(c, &step), 0);
    assert_int_equal(step, 1);
    assert_int_equal(warnings, 1); /* said which file it skipped, and why */
    assert_non_null(strstr(last_warning, "ckpt-000000000002.ckpt"));
    flips++;
  }
  for (size_t cut = 0; cut < len; cut++) {
    write_all(path, good, cut);
    int rc = loom_ckpt_restore(c, 2, m.t, 5);
    if (rc != LOOM_EIO) fail_msg("truncated to %zu: restore returned %d", cut, rc);
    if (cut >= 72) assert_non_null(strstr(loom_ckpt_errmsg(c), "is truncated"));
    assert_int_equal(loom_ckpt_latest(c, &step), 0);
    assert_int_equal(step, 1);
  }
  /* bytes appended */
  memcpy(bad, good, len);
  write_all(path, good, len);
  int fd = open(path, O_WRONLY | O_APPEND);
  assert_int_equal(write(fd, "x", 1), 1);
  close(fd);
  assert_int_equal(loom_ckpt_restore(c, 2, m.t, 5), LOOM_EIO);
  /* checksum mismatch, as the message says */
  bad[len / 2] ^= 0x10;
  write_all(path, bad, len);
  assert_int_equal(loom_ckpt_restore(c, 2, m.t, 5), LOOM_EIO);
  assert_non_null(strstr(loom_ckpt_errmsg(c), "checksum mismatch"));
  /* a file that is not a checkpoint at all */
  write_all(path, (const unsigned char *)"hello, world\n", 13);
  assert_int_equal(loom_ckpt_verify(c, 2), LOOM_EIO);
  /* and the good bytes again: fine */
  write_all(path, good, len);
  assert_int_equal(loom_ckpt_restore(c, 2, m.t, 5), 0);
  model_expect(&m, 2);
  /* every candidate corrupt: none */
  write_all(path, good, 10);
  ckpt_file(dir, 1, path, sizeof path);
  write_all(path, good, 10);
  assert_int_equal(loom_ckpt_latest(c, &step), LOOM_ENOENT);
  assert_non_null(strstr(loom_ckpt_errmsg(c), "2 corrupt"));
  print_message("%zu bit flips and %zu truncations refused\n", flips, len);
  free(good);
  free(bad);
  loom_ckpt_close(c);
  test_rm_rf(dir);
  free(dir);
}

/* A table whose CRC holds but that names two tensors alike (restore would
 * hand either one's bytes to the name), or a tensor with a NUL in its name
 * (which no restore can ask for), is refused as corrupt by restore, verify
 * and latest. */
static void test_forged_names_are_refused(void **state) {
  static const struct {
    const char *to, *why;
  } CASES[] = {{"a1", "another tensor is named 'a1'"}, {"a\0", "bad tensor name"}};
  char *dir = test_tmpdir("loom-ckpt-test");
  loom_ckpt_t *c;
  char path[512];
  assert_int_equal(loom_ckpt_open(NULL, dir, 0, &c), 0);
  float a[2] = {1, 2}, b[2] = {3, 4};
  loom_tensor t[] = {{.name = "a1", .dtype = LOOM_F32, .ndim = 1, .shape = {2}, .data = a},
                     {.name = "a2", .dtype = LOOM_F32, .ndim = 1, .shape = {2}, .data = b}};
  assert_int_equal(loom_ckpt_save(c, 1, t, 2), 0);
  ckpt_file(dir, 1, path, sizeof path);
  unsigned char *good;
  size_t len;
  read_all(path, &good, &len);
  for (size_t i = 0; i < LOOM__ARRAY_LEN(CASES); i++) {
    unsigned char *bad = malloc(len);
    assert_non_null(bad);
    memcpy(bad, good, len);
    unsigned char *name = memmem(bad, len, "a2", 2);
    assert_non_null(name);
    memcpy(name, CASES[i].to, 2);
    uint32_t crc = loom__crc32c(0, bad, len - 8);
    for (int k = 0; k < 4; k++) bad[len - 8 + k] = (unsigned char)(crc >> (8 * k));
    write_all(path, bad, len);
    float x[2] = {7, 7};
    loom_tensor r = {.name = "a1", .dtype = LOOM_F32, .ndim = 1, .shape = {2}, .data = x};
    int rc = loom_ckpt_restore(c, 1, &r, 1);
    if (rc != LOOM_EIO || !strstr(loom_ckpt_errmsg(c), CASES[i].why))
      fail_msg("%s: restore returned %d (%s)", CASES[i].why, rc, loom_ckpt_errmsg(c));
    assert_true(x[0] == 7 && x[1] == 7);
    assert_int_equal(loom_ckpt_verify(c, 1), LOOM_EIO);
    int64_t step;
    assert_int_equal(loom_ckpt_latest(c, &step), LOOM_ENOENT);
    free(bad);
  }
  write_all(path, good, len);
  assert_int_equal(loom_ckpt_verify(c, 1), 0);
  free(good);
  loom_ckpt_close(c);
  test_rm_rf(dir);
  free(dir);
}

static void test_mismatch_is_refused_before_writing(void **state) {
  char *dir = test_tmpdir("loom-ckpt-test");
  loom_ckpt_t *c;
  model m;
  assert_int_equal(loom_ckpt_open(NULL, dir, 0, &c), 0);
  model_init(&m, 3);
  assert_int_equal(loom_ckpt_save(c, 3, m.t, 5), 0);
  model_init(&m, 8);
  /* the last tensor asks for the wrong shape: nothing may be written */
  m.t[1].shape[0] = 6;
  assert_int_equal(loom_ckpt_restore(c, 3, m.t, 5), LOOM_EINVAL);
  assert_string_equal(loom_ckpt_errmsg(c) + strlen(loom_ckpt_errmsg(c)) -
                          strlen("is f64 [5]; the caller expects f64 [6]"),
                      "is f64 [5]; the caller expects f64 [6]");
  model_expect(&m, 8);
  m.t[1].shape[0] = 5;
  m.t[0].dtype = LOOM_F64;
  assert_int_equal(loom_ckpt_restore(c, 3, m.t, 5), LOOM_EINVAL);
  assert_non_null(strstr(loom_ckpt_errmsg(c), "'layer/w' in checkpoint"));
  assert_non_null(strstr(loom_ckpt_errmsg(c), "is f32 [3, 4]; the caller expects f64 [3, 4]"));
  m.t[0].dtype = LOOM_F32;
  m.t[2].ndim = 2;
  m.t[2].shape[1] = 1;
  assert_int_equal(loom_ckpt_restore(c, 3, m.t, 5), LOOM_EINVAL);
  m.t[2].ndim = 1;
  m.t[4].name = "missing";
  assert_int_equal(loom_ckpt_restore(c, 3, m.t, 5), LOOM_ENOENT);
  assert_non_null(strstr(loom_ckpt_errmsg(c),
                         "has no tensor 'missing' (it has: layer/w, layer/b, idx, count, none)"));
  model_expect(&m, 8);
  assert_int_equal(loom_ckpt_restore(c, 4, m.t, 4), LOOM_ENOENT);
  assert_non_null(strstr(loom_ckpt_errmsg(c), "no checkpoint of step 4"));
  loom_ckpt_close(c);
  test_rm_rf(dir);
  free(dir);
}

static void test_bad_saves(void **state) {
  char *dir = test_tmpdir("loom-ckpt-test");
  loom_ckpt_t *c;
  model m;
  assert_int_equal(loom_ckpt_open(NULL, dir, 0, &c), 0);
  model_init(&m, 1);
  assert_int_equal(loom_ckpt_save(c, -1, m.t, 5), LOOM_EINVAL);
  m.t[2].name = "layer/w";
  assert_int_equal(loom_ckpt_save(c, 1, m.t, 5), LOOM_EINVAL);
  assert_non_null(strstr(loom_ckpt_errmsg(c), "two tensors are named 'layer/w'"));
  m.t[2].name = "";
  assert_int_equal(loom_ckpt_save(c, 1, m.t, 5), LOOM_EINVAL);
  model_init(&m, 1);
  m.t[0].shape[1] = -4;
  assert_int_equal(loom_ckpt_save(c, 1, m.t, 5), LOOM_EINVAL);
  model_init(&m, 1);
  m.t[0].ndim = 9;
  assert_int_equal(loom_ckpt_save(c, 1, m.t, 5), LOOM_EINVAL);
  model_init(&m, 1);
  m.t[0].dtype = (loom_dtype)42;
  assert_int_equal(loom_ckpt_save(c, 1, m.t, 5), LOOM_EINVAL);
  model_init(&m, 1);
  m.t[1].data = NULL;
  assert_int_equal(loom_ckpt_save(c, 1, m.t, 5), LOOM_EINVAL);
  model_init(&m, 1);
  m.t[0].shape[0] = INT64_MAX / 2; /* overflows the size */
  assert_int_equal(loom_ckpt_save(c, 1, m.t, 5), LOOM_EINVAL);
  int64_t steps[4];
  size_t n;
  assert_int_equal(loom_ckpt_list(c, steps, 4, &n), 0);
  assert_int_equal(n, 0); /* nothing was written, not even a temp file */
  DIR *d = opendir(dir);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d)) != NULL) files += e->d_name[0] != '.' || strlen(e->d_name) > 2;
  closedir(d);
  assert_int_equal(files, 0);
  loom_ckpt_close(c);
  /* outside a job, no directory: ENOENV; a directory under a file: EIO */
  unsetenv("LOOM_JOB_DIR");
  assert_int_equal(loom_ckpt_open(NULL, NULL, 0, &c), LOOM_ENOENV);
  setenv("LOOM_JOB_DIR", dir, 1);
  assert_int_equal(loom_ckpt_open(NULL, NULL, 0, &c), 0);
  char want[512];
  snprintf(want, sizeof want, "%s/ckpt", dir);
  assert_string_equal(loom_ckpt_dir(c), want);
  loom_ckpt_close(c);
  unsetenv("LOOM_JOB_DIR");
  char bad[512];
  snprintf(bad, sizeof bad, "%s/ckpt/ckpt-000000000001.ckpt", dir);
  write_all(bad, (const unsigned char *)"x", 1);
  snprintf(bad, sizeof bad, "%s/ckpt/ckpt-000000000001.ckpt/sub", dir);
  assert_int_equal(loom_ckpt_open(NULL, bad, 0, &c), LOOM_EIO);
  test_rm_rf(dir);
  free(dir);
}

/* A temporary file whose writer (on this host) is dead goes at the next
 * open; one whose writer lives, or from another host, stays. */
static void test_dead_savers_temp_files_are_removed(void **state) {
  char *dir = test_tmpdir("loom-ckpt-test");
  char host[256] = "localhost";
  gethostname(host, sizeof host);
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, NULL, 0); /* now a pid nobody has */
  char dead[512], live[512], other[512];
  snprintf(dead, sizeof dead, "%s/.ckpt-000000000005.tmp.%s.%d.0", dir, host, (int)child);
  snprintf(live, sizeof live, "%s/.ckpt-000000000005.tmp.%s.%d.0", dir, host, (int)getppid());
  snprintf(other, sizeof other, "%s/.ckpt-000000000005.tmp.elsewhere.%d.0", dir, (int)child);
  write_all(dead, (const unsigned char *)"LOOMCKPT", 8);
  write_all(live, (const unsigned char *)"LOOMCKPT", 8);
  write_all(other, (const unsigned char *)"LOOMCKPT", 8);
  loom_ckpt_t *c;
  assert_int_equal(loom_ckpt_open(NULL, dir, 0, &c), 0);
  struct stat st;
  assert_int_equal(stat(dead, &st), -1);
  assert_int_equal(stat(live, &st), 0);
  assert_int_equal(stat(other, &st), 0);
  int64_t step;
  assert_int_equal(loom_ckpt_latest(c, &step), LOOM_ENOENT);
  loom_ckpt_close(c);
  test_rm_rf(dir);
  free(dir);
}

/* A save that cannot be written (the file size limit stands in for a full
 * disk) fails with the reason, leaves no temporary file and leaves the
 * previous checkpoint the latest. */
static void test_failed_write_leaves_the_previous_checkpoint(void **state) {
  char *dir = test_tmpdir("loom-ckpt-test");
  loom_ckpt_t *c;
  model m;
  assert_int_equal(loom_ckpt_open(NULL, dir, 0, &c), 0);
  model_init(&m, 1);
  assert_int_equal(loom_ckpt_save(c, 1, m.t, 5), 0);
  static float big[16384];
  loom_tensor t = {"big", LOOM_F32, 1, {16384}, big};
  struct rlimit old, small = {4096, 0};
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  small.rlim_max = old.rlim_max;
  signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  int rc = loom_ckpt_save(c, 2, &t, 1);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_DFL);
  assert_int_equal(rc, LOOM_EIO);
  assert_non_null(strstr(loom_ckpt_errmsg(c), "cannot write checkpoint"));
  assert_non_null(strstr(loom_ckpt_errmsg(c), "File too large"));
  int64_t steps[4], step;
  size_t n;
  assert_int_equal(loom_ckpt_list(c, steps, 4, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(loom_ckpt_latest(c, &step), 0);
  assert_int_equal(step, 1);
  DIR *d = opendir(dir);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, ".ckpt-", 6) == 0) fail_msg("left %s", e->d_name);
  closedir(d);
  loom_ckpt_close(c);
  test_rm_rf(dir);
  free(dir);
}

int main(void) {
  loom__log_set_sink(sink, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip),
      cmocka_unit_test(test_keep_and_later_steps),
      cmocka_unit_test(test_every_flip_and_truncation_is_refused),
      cmocka_unit_test(test_forged_names_are_refused),
      cmocka_unit_test(test_mismatch_is_refused_before_writing),
      cmocka_unit_test(test_bad_saves),
      cmocka_unit_test(test_dead_savers_temp_files_are_removed),
      cmocka_unit_test(test_failed_write_leaves_the_previous_checkpoint),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
