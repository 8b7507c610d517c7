/* jobdir_test.c: the job directory module: where loom's home is (the
 * variable, then $HOME/.loom), creating a job directory (0700, its
 * folders), the path of its files, listing jobs newest first, and finding
 * one from an id, a unique prefix or `last`, with the errors a person
 * sees for an unknown name and an ambiguous prefix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "jobdir/jobdir.h"
#include "testutil.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* A job directory under test_dir/jobs with a spec.yaml, its mtime set to
 * mtime (seconds) so that the listing order is the test's. */
static void make_job(const char *id, time_t mtime) {
  char dir[4096], err[512];
  assert_int_equal(jobdir_create(id, dir, sizeof dir, err, sizeof err), 0);
  assert_int_equal(jobdir_write(dir, JOBDIR_SPEC, "{}", 2, false), 0);
  char *p = jobdir_apath(dir, JOBDIR_SPEC);
  struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
  assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
  free(p);
}

static int each_setup(void **state) {
  (void)state;
  test_dir_setup(state);
  setenv(JOBDIR_HOME_ENV, test_dir, 1);
  return 0;
}

static int each_teardown(void **state) {
  unsetenv(JOBDIR_HOME_ENV);
  return test_dir_teardown(state);
}

static void test_home(void **state) {
  (void)state;
  assert_string_equal(jobdir_home(), test_dir);
  char *want = loom__asprintf("%s/jobs", test_dir);
  assert_string_equal(jobdir_root(), want);
  free(want);
  /* empty means unset: $HOME/.loom */
  setenv(JOBDIR_HOME_ENV, "", 1);
  const char *saved = getenv("HOME");
  char *home = saved ? strdup(saved) : NULL;
  setenv("HOME", "/home/someone", 1);
  assert_string_equal(jobdir_home(), "/home/someone/.loom");
  assert_string_equal(jobdir_root(), "/home/someone/.loom/jobs");
  unsetenv(JOBDIR_HOME_ENV);
  assert_string_equal(jobdir_home(), "/home/someone/.loom");
  unsetenv("HOME");
  assert_string_equal(jobdir_home(), "/tmp/.loom");
  if (home) setenv("HOME", home, 1);
  free(home);
}

static void test_create_and_paths(void **state) {
  (void)state;
  char dir[4096], err[512], p[4200];
  assert_int_equal(jobdir_create("mlp-20261124-101010-abcd", dir, sizeof dir, err, sizeof err), 0);
  char *want = loom__asprintf("%s/jobs/mlp-20261124-101010-abcd", test_dir);
  assert_string_equal(dir, want);
  free(want);
  struct stat st;
  assert_int_equal(stat(dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  static const jobdir_file made[] = {JOBDIR_LOGS, JOBDIR_TASKS, JOBDIR_TENSORBOARD, JOBDIR_OUTPUT};
  for (size_t i = 0; i < LOOM__ARRAY_LEN(made); i++) {
    assert_int_equal(jobdir_path(dir, made[i], p, sizeof p), 0);
    assert_int_equal(stat(p, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
  }
  /* every file has a name; the contract's names */
  for (int f = 0; f < JOBDIR__COUNT; f++) assert_true(jobdir_name((jobdir_file)f)[0] != 0);
  assert_string_equal(jobdir_name(JOBDIR_STATE), "state.json");
  assert_string_equal(jobdir_name(JOBDIR_EVENTS), "events.jsonl");
  assert_string_equal(jobdir_name(JOBDIR_COORD), "coord.json");
  assert_string_equal(jobdir_name(JOBDIR_SECRET), "secret");
  assert_string_equal(jobdir_name(JOBDIR_ALL_LOG), "logs/all.log");
  char *tl = jobdir_task_apath(dir, JOBDIR_LOGS, "worker-1");
  want = loom__asprintf("%s/logs/worker-1.log", dir);
  assert_string_equal(tl, want);
  free(tl);
  free(want);
  tl = jobdir_task_apath(dir, JOBDIR_TASKS, "worker-1");
  want = loom__asprintf("%s/tasks/worker-1", dir);
  assert_string_equal(tl, want);
  free(tl);
  free(want);
  assert_null(jobdir_task_apath(dir, JOBDIR_STATE, "worker-1"));
  assert_int_equal(jobdir_path(dir, JOBDIR_STATE, p, 8), LOOM_ERANGE);
  /* files are the owner's only */
  assert_int_equal(jobdir_write(dir, JOBDIR_SECRET, "abc", 3, false), 0);
  assert_int_equal(jobdir_path(dir, JOBDIR_SECRET, p, sizeof p), 0);
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  char *s = NULL;
  assert_int_equal(jobdir_read(dir, JOBDIR_SECRET, 256, &s, NULL), 0);
  assert_string_equal(s, "abc");
  free(s);
  /* JSON: objects only */
  assert_null(jobdir_read_json(dir, JOBDIR_STATE, 1024));
  assert_int_equal(jobdir_write(dir, JOBDIR_STATE, "[1]", 3, false), 0);
  assert_null(jobdir_read_json(dir, JOBDIR_STATE, 1024));
  assert_int_equal(jobdir_write(dir, JOBDIR_STATE, "{\"state\":\"running\"}", 19, false), 0);
  json_t *j = jobdir_read_json(dir, JOBDIR_STATE, 1024);
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
  json_decref(j);
  /* not an id: nothing is made */
  assert_int_equal(jobdir_create("../x", dir, sizeof dir, err, sizeof err), LOOM_EINVAL);
  assert_int_equal(jobdir_create("", dir, sizeof dir, err, sizeof err), LOOM_EINVAL);
}

/* The runs of tensorboard/: its folders only (not files, links or hidden
 * names), sorted, at most max listed, all counted. */
static void test_tensorboard_runs(void **state) {
  (void)state;
  char dir[4096], err[512], p[4300];
  assert_int_equal(jobdir_create("tb-20261124-101010-abcd", dir, sizeof dir, err, sizeof err), 0);
  size_t total = 99;
  json_t *runs = jobdir_tensorboard_runs(dir, 10, &total);
  assert_non_null(runs);
  assert_int_equal(json_array_size(runs), 0);
  assert_int_equal(total, 0);
  json_decref(runs);
  static const char *const made[] = {"worker-1", "chief-0", "tf-0", "worker-0"};
  for (size_t i = 0; i < LOOM__ARRAY_LEN(made); i++) {
    snprintf(p, sizeof p, "%s/tensorboard/%s", dir, made[i]);
    assert_int_equal(mkdir(p, 0755), 0);
  }
  snprintf(p, sizeof p, "%s/tensorboard/.hidden", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/tensorboard/events.out.tfevents.1.host", dir);
  int fd = open(p, O_CREAT | O_WRONLY, 0600);
  assert_true(fd >= 0);
  close(fd);
  snprintf(p, sizeof p, "%s/tensorboard/link", dir);
  assert_int_equal(symlink(dir, p), 0);
  runs = jobdir_tensorboard_runs(dir, 10, &total);
  assert_int_equal(total, 4);
  assert_int_equal(json_array_size(runs), 4);
  static const char *const sorted[] = {"chief-0", "tf-0", "worker-0", "worker-1"};
  for (size_t i = 0; i < 4; i++)
    assert_string_equal(json_string_value(json_array_get(runs, i)), sorted[i]);
  json_decref(runs);
  runs = jobdir_tensorboard_runs(dir, 2, NULL);
  assert_int_equal(json_array_size(runs), 2);
  assert_string_equal(json_string_value(json_array_get(runs, 1)), "tf-0");
  json_decref(runs);
}

static void test_list_order(void **state) {
  (void)state;
  jobdir_entry *all;
  size_t n;
  /* no jobs directory yet: an empty list */
  assert_int_equal(jobdir_list(NULL, &all, &n), 0);
  assert_int_equal(n, 0);
  free(all);
  make_job("b-20261101-090000-0001", 1000);
  make_job("a-20261124-080000-ffff", 1000);
  make_job("c-20261124-080000-0000", 2000); /* same second as a, written later */
  make_job("old-20250101-000000-1234", 3000);
  /* not jobs: no spec.yaml, a hidden or unsafe name */
  char p[4200];
  snprintf(p, sizeof p, "%s/jobs/nospec-20261231-000000-0000", test_dir);
  assert_int_equal(loom__mkdir_p(p, 0700), 0);
  snprintf(p, sizeof p, "%s/jobs/.hidden-20261231-000000-0000", test_dir);
  assert_int_equal(loom__mkdir_p(p, 0700), 0);
  free(test_put_file(p, "spec.yaml", "{}", 2));
  assert_int_equal(jobdir_list(NULL, &all, &n), 0);
  assert_int_equal(n, 4);
  assert_string_equal(all[0].id, "c-20261124-080000-0000");
  assert_string_equal(all[1].id, "a-20261124-080000-ffff");
  assert_string_equal(all[2].id, "b-20261101-090000-0001");
  assert_string_equal(all[3].id, "old-20250101-000000-1234");
  assert_true(all[0].mtime == 2000.0);
  free(all);
  /* a root given explicitly */
  snprintf(p, sizeof p, "%s/jobs", test_dir);
  assert_int_equal(jobdir_list(p, &all, &n), 0);
  assert_int_equal(n, 4);
  free(all);
}

static void test_resolve(void **state) {
  (void)state;
  char id[JOBDIR_ID_MAX], err[1024];
  assert_int_equal(jobdir_resolve(NULL, "last", id, sizeof id, err, sizeof err), LOOM_ENOENT);
  assert_non_null(strstr(err, "no jobs under"));
  make_job("mlp-20261124-080000-aaaa", 1000);
  make_job("mlp-20261124-090000-bbbb", 1000);
  make_job("mlp-20261124-090000-bbbc", 1001);
  make_job("cnn-20261120-080000-cccc", 1000);
  /* last: the newest */
  assert_int_equal(jobdir_resolve(NULL, "last", id, sizeof id, err, sizeof err), 0);
  assert_string_equal(id, "mlp-20261124-090000-bbbc");
  /* a whole id, also when it is the prefix of another */
  assert_int_equal(jobdir_resolve(NULL, "mlp-20261124-090000-bbbb", id, sizeof id, err, sizeof err),
                   0);
  assert_string_equal(id, "mlp-20261124-090000-bbbb");
  /* a unique prefix */
  assert_int_equal(jobdir_resolve(NULL, "cnn", id, sizeof id, err, sizeof err), 0);
  assert_string_equal(id, "cnn-20261120-080000-cccc");
  assert_int_equal(jobdir_resolve(NULL, "mlp-20261124-08", id, sizeof id, err, sizeof err), 0);
  assert_string_equal(id, "mlp-20261124-080000-aaaa");
  /* ambiguous: every candidate named, newest first */
  assert_int_equal(jobdir_resolve(NULL, "mlp", id, sizeof id, err, sizeof err), LOOM_EINVAL);
  assert_string_equal(err, "'mlp' matches 3 jobs: mlp-20261124-090000-bbbc, "
                           "mlp-20261124-090000-bbbb, mlp-20261124-080000-aaaa; give more of "
                           "the id");
  /* unknown: named, with where it looked */
  assert_int_equal(jobdir_resolve(NULL, "rnn", id, sizeof id, err, sizeof err), LOOM_ENOENT);
  assert_non_null(strstr(err, "no job 'rnn' under "));
  assert_non_null(strstr(err, jobdir_root()));
  assert_int_equal(jobdir_resolve(NULL, "", id, sizeof id, err, sizeof err), LOOM_ENOENT);
  /* many candidates: the first eight, then a count */
  for (int i = 0; i < 10; i++) {
    char x[64];
    snprintf(x, sizeof x, "many-20261124-1000%02d-0000", i);
    make_job(x, 1000);
  }
  assert_int_equal(jobdir_resolve(NULL, "many", id, sizeof id, err, sizeof err), LOOM_EINVAL);
  assert_non_null(strstr(err, "'many' matches 10 jobs: many-20261124-100009-0000,"));
  assert_non_null(strstr(err, " and 2 more; give more of the id"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_home, each_setup, each_teardown),
      cmocka_unit_test_setup_teardown(test_create_and_paths, each_setup, each_teardown),
      cmocka_unit_test_setup_teardown(test_tensorboard_runs, each_setup, each_teardown),
      cmocka_unit_test_setup_teardown(test_list_order, each_setup, each_teardown),
      cmocka_unit_test_setup_teardown(test_resolve, each_setup, each_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
