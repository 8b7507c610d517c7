/* ckpt_dir_test.c: ckpt_dir_commit (src/ckpt/dir.c) on a local directory,
 * for both kinds of checkpoint directory: files ckpt-<step>.ckpt (as
 * libloom's, later steps dropped on a commit) and directories step-<step>
 * committed by their MANIFEST.json, with LATEST (as the parameter
 * server's). Each case fills a directory with steps, commits one from a
 * temporary file and checks the steps left, the ones reported dropped, the
 * committed entry's bytes, LATEST, and that the temporary file is gone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "testutil.h"

#include "ckpt/dir.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define END (-1) /* ends a list of steps */

static const struct {
  const char *what;
  bool ps;         /* step-<S> directories with a manifest and LATEST */
  bool drop_later; /* as libloom's */
  int64_t before[8];
  int64_t step;
  int keep;
  int64_t after[8];
  int64_t dropped[8];
} CASES[] = {
    {"a commit into an empty directory", false, true, {END}, 5, 0, {5, END}, {END}},
    {"a commit replaces the step's file", false, true, {3, 5, END}, 5, 0, {3, 5, END}, {END}},
    {"keep 0 keeps every step", false, true, {1, 2, 3, END}, 4, 0, {1, 2, 3, 4, END}, {END}},
    {"keep 2 keeps the step and the newest before it",
     false,
     true,
     {1, 2, 3, 4, END},
     5,
     2,
     {4, 5, END},
     {1, 2, 3, END}},
    {"drop_later removes the later steps",
     false,
     true,
     {1, 2, 7, 9, END},
     3,
     0,
     {1, 2, 3, END},
     {7, 9, END}},
    {"without drop_later later steps stay and count toward keep",
     false,
     false,
     {1, 2, 7, 9, END},
     3,
     2,
     {3, 7, 9, END},
     {1, 2, END}},
    {"a directory is committed by its manifest, LATEST written, keep 1",
     true,
     false,
     {1, 2, END},
     3,
     1,
     {3, END},
     {1, 2, END}},
    {"a directory's manifest is replaced", true, false, {2, 3, END}, 3, 0, {2, 3, END}, {END}},
    {"keep 2 of directories", true, false, {1, 2, END}, 4, 2, {2, 4, END}, {1, END}},
};

static ckpt_dir dir_of(const char *path, bool ps, bool drop_later) {
  if (ps)
    return (ckpt_dir){.dir = path,
                      .prefix = "step-",
                      .suffix = "",
                      .is_dir = true,
                      .tag = "test",
                      .manifest = "MANIFEST.json",
                      .latest = "LATEST"};
  return (ckpt_dir){
      .dir = path, .prefix = "ckpt-", .suffix = ".ckpt", .drop_later = drop_later, .tag = "test"};
}

typedef struct {
  int64_t steps[8];
  size_t n;
} dropped_log;

static void on_dropped(void *arg, int64_t step) {
  dropped_log *l = arg;
  assert_true(l->n < 8);
  l->steps[l->n++] = step;
}

static size_t count(const int64_t *v) {
  size_t n = 0;
  while (v[n] != END) n++;
  return n;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static char *slurp(const char *path) {
  char *s = NULL;
  assert_int_equal(loom__read_file(path, 4096, &s, NULL), 0);
  return s;
}

/* Makes step's entry holding text: the file, or the directory and its
 * manifest (text NULL: the directory only, as the shards leave it). */
static void make_entry(const ckpt_dir *d, int64_t step, const char *text) {
  char path[4096];
  assert_int_equal(ckpt_dir_path(d, step, path, sizeof path), 0);
  if (d->is_dir) {
    assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
    if (text) free(test_put_file(path, "MANIFEST.json", text, strlen(text)));
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
  }
}

static void test_commit_cases(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    print_message("case: %s\n", CASES[i].what);
    char *root = test_tmpdir("loom-ckpt-dir");
    ckpt_dir d = dir_of(root, CASES[i].ps, CASES[i].drop_later);
    for (const int64_t *s = CASES[i].before; *s != END; s++) make_entry(&d, *s, "old");
    int64_t step = CASES[i].step;
    char text[64], tmp[4200], path[4096], why[1024] = "";
    snprintf(text, sizeof text, "new %lld", (long long)step);
    assert_int_equal(ckpt_dir_path(&d, step, path, sizeof path), 0);
    if (d.is_dir) {
      make_entry(&d, step, NULL);
      snprintf(tmp, sizeof tmp, "%s/MANIFEST.json.tmp.1", path);
      strcat(path, "/MANIFEST.json");
    } else {
      snprintf(tmp, sizeof tmp, "%s/.ckpt-%012lld.tmp.host.1.0", root, (long long)step);
    }
    FILE *f = fopen(tmp, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);

    dropped_log log = {0};
    assert_int_equal(
        ckpt_dir_commit(&d, step, tmp, CASES[i].keep, on_dropped, &log, why, sizeof why), 0);

    struct stat st;
    assert_int_equal(stat(tmp, &st), -1);
    char *got = slurp(path);
    assert_string_equal(got, text);
    free(got);
    if (d.latest) {
      char latest[4096], want[32];
      snprintf(latest, sizeof latest, "%s/LATEST", root);
      snprintf(want, sizeof want, "%lld\n", (long long)step);
      got = slurp(latest);
      assert_string_equal(got, want);
      free(got);
    } else {
      char latest[4096];
      snprintf(latest, sizeof latest, "%s/LATEST", root);
      assert_int_equal(stat(latest, &st), -1);
    }

    int64_t *steps;
    size_t n;
    assert_int_equal(ckpt_dir_steps(&d, &steps, &n, why, sizeof why), 0);
    assert_int_equal(n, count(CASES[i].after));
    for (size_t k = 0; k < n; k++) assert_int_equal(steps[k], CASES[i].after[k]);
    free(steps);
    qsort(log.steps, log.n, sizeof log.steps[0], cmp_i64);
    assert_int_equal(log.n, count(CASES[i].dropped));
    for (size_t k = 0; k < log.n; k++) assert_int_equal(log.steps[k], CASES[i].dropped[k]);
    test_rm_rf(root);
    free(root);
  }
}

/* A commit whose temporary file is missing fails, naming it, and prunes
 * nothing. */
static void test_failed_commit_prunes_nothing(void **state) {
  (void)state;
  char *root = test_tmpdir("loom-ckpt-dir");
  ckpt_dir d = dir_of(root, false, true);
  make_entry(&d, 1, "old");
  make_entry(&d, 9, "old");
  char tmp[4200], why[1024] = "";
  snprintf(tmp, sizeof tmp, "%s/.ckpt-000000000002.tmp.host.1.0", root);
  dropped_log log = {0};
  assert_int_equal(ckpt_dir_commit(&d, 2, tmp, 1, on_dropped, &log, why, sizeof why), LOOM_ENOENT);
  assert_non_null(strstr(why, ".ckpt-000000000002.tmp"));
  assert_int_equal(log.n, 0);
  int64_t *steps;
  size_t n;
  assert_int_equal(ckpt_dir_steps(&d, &steps, &n, why, sizeof why), 0);
  assert_int_equal(n, 2);
  assert_int_equal(steps[0], 1);
  assert_int_equal(steps[1], 9);
  free(steps);
  test_rm_rf(root);
  free(root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_commit_cases),
      cmocka_unit_test(test_failed_commit_prunes_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
