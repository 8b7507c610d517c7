/* fs_tmpdir_test.c: writers' local working directories (src/fs/tmpdir.c):
 * one made is locked for its writer's life; a sweep, and so the next
 * make of the same kind, removes those whose writer is dead (a child
 * process that made one and was SIGKILLed) and never one whose writer
 * lives (this process, or a child still running), nor another kind's,
 * nor anything that is not a directory. Each test runs under a TMPDIR of
 * its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/core.h"
#include "fs/fs.h"
#include "fs/tmpdir.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char base[PATH_MAX];
static const char *outer = "/tmp"; /* TMPDIR when the test started */

static int setup(void **state) {
  (void)state;
  snprintf(base, sizeof base, "%s/loom-tmpdir-test-XXXXXX", outer);
  if (!mkdtemp(base)) return -1;
  return setenv("TMPDIR", base, 1);
}

static int teardown(void **state) {
  (void)state;
  char err[256];
  loom__fs_remove(base, true, err, sizeof err);
  return 0;
}

static bool is_dir(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A writer in a child process: makes a directory of kind with a file in
 * it, writes the path to the pipe, then waits to be killed. The child's
 * pid, and the path into path. */
static pid_t child_writer(const char *kind, char *path, size_t len) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    char p[PATH_MAX], err[512], f[PATH_MAX + 8];
    int lock;
    if (loom__tmpdir_make(kind, p, sizeof p, &lock, err, sizeof err) < 0) _exit(2);
    snprintf(f, sizeof f, "%s/part", p);
    FILE *o = fopen(f, "w");
    if (!o || fputs("half a checkpoint", o) < 0 || fclose(o) != 0) _exit(3);
    if (write(fds[1], p, strlen(p) + 1) < 0) _exit(4);
    for (;;) pause();
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t n;
  while (got < len && (n = read(fds[0], path + got, len - got)) > 0) {
    got += (size_t)n;
    if (path[got - 1] == 0) break;
  }
  close(fds[0]);
  assert_true(got > 0 && path[got - 1] == 0);
  return pid;
}

static void kill_and_reap(pid_t pid) {
  assert_int_equal(kill(pid, SIGKILL), 0);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* Made: under TMPDIR, named for its kind, a directory, locked; removed
 * with what it holds. */
static void test_make_and_remove(void **state) {
  (void)state;
  char p[PATH_MAX], err[512], prefix[PATH_MAX + 32];
  int lock = -7;
  assert_int_equal(loom__tmpdir_make("ckpt", p, sizeof p, &lock, err, sizeof err), 0);
  snprintf(prefix, sizeof prefix, "%s/loom-ckpt-", base);
  assert_memory_equal(p, prefix, strlen(prefix));
  assert_int_equal(strlen(p), strlen(prefix) + 6);
  assert_true(lock >= 0);
  assert_true(is_dir(p));
  /* its writer (this process) lives: a sweep leaves it */
  assert_int_equal(loom__tmpdir_sweep(base, "ckpt"), 0);
  assert_true(is_dir(p));
  char f[PATH_MAX + 8];
  snprintf(f, sizeof f, "%s/x", p);
  FILE *o = fopen(f, "w");
  assert_non_null(o);
  fclose(o);
  loom__tmpdir_remove(p, lock);
  assert_false(is_dir(p));
  /* "" and -1: nothing */
  loom__tmpdir_remove("", -1);
}

/* Two writers at once, here: distinct directories, neither removed by the
 * other's make. */
static void test_two_live_writers(void **state) {
  (void)state;
  char a[PATH_MAX], b[PATH_MAX], err[512];
  int la, lb;
  assert_int_equal(loom__tmpdir_make("summary", a, sizeof a, &la, err, sizeof err), 0);
  assert_int_equal(loom__tmpdir_make("summary", b, sizeof b, &lb, err, sizeof err), 0);
  assert_string_not_equal(a, b);
  assert_true(is_dir(a) && is_dir(b));
  loom__tmpdir_remove(a, la);
  assert_true(is_dir(b));
  loom__tmpdir_remove(b, lb);
}

/* A child writer, live, then SIGKILLed: its directory stays while it
 * lives, and the next make of its kind removes it once it is dead; a make
 * of another kind does not. */
static void test_dead_writer_swept(void **state) {
  (void)state;
  char dead[PATH_MAX], live[PATH_MAX], other[PATH_MAX], err[512], mine[PATH_MAX];
  pid_t pd = child_writer("feed-out", dead, sizeof dead);
  pid_t pl = child_writer("feed-out", live, sizeof live);
  pid_t po = child_writer("ps", other, sizeof other);
  assert_true(is_dir(dead) && is_dir(live) && is_dir(other));
  assert_int_equal(loom__tmpdir_sweep(base, "feed-out"), 0); /* both live */
  kill_and_reap(pd);
  kill_and_reap(po);
  int lock;
  assert_int_equal(loom__tmpdir_make("feed-out", mine, sizeof mine, &lock, err, sizeof err), 0);
  assert_false(is_dir(dead));
  assert_true(is_dir(live));
  assert_true(is_dir(other)); /* a dead ps writer's: only a ps make removes it */
  assert_true(is_dir(mine));
  kill_and_reap(pl);
  assert_int_equal(loom__tmpdir_sweep(base, "feed-out"), 1);
  assert_false(is_dir(live));
  assert_true(is_dir(mine));
  assert_int_equal(loom__tmpdir_sweep(base, "ps"), 1);
  assert_false(is_dir(other));
  loom__tmpdir_remove(mine, lock);
}

/* What a sweep never touches though the name matches: a file, a link to
 * a directory (nor what it points to), a name of another length. */
static void test_not_directories_are_left(void **state) {
  (void)state;
  char file[PATH_MAX + 32], link[PATH_MAX + 32], target[PATH_MAX + 32], longer[PATH_MAX + 32];
  snprintf(file, sizeof file, "%s/loom-ckpt-aaaaaa", base);
  snprintf(link, sizeof link, "%s/loom-ckpt-bbbbbb", base);
  snprintf(target, sizeof target, "%s/elsewhere", base);
  snprintf(longer, sizeof longer, "%s/loom-ckpt-cccccccc", base);
  FILE *o = fopen(file, "w");
  assert_non_null(o);
  fclose(o);
  assert_int_equal(mkdir(target, 0700), 0);
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(mkdir(longer, 0700), 0);
  assert_int_equal(loom__tmpdir_sweep(base, "ckpt"), 0);
  struct stat st;
  assert_int_equal(lstat(file, &st), 0);
  assert_int_equal(lstat(link, &st), 0);
  assert_true(is_dir(target));
  assert_true(is_dir(longer));
}

/* An unlocked directory of the right name (a writer dead before this
 * change, or a copy): removed with what it holds. */
static void test_unlocked_directory_removed(void **state) {
  (void)state;
  char d[PATH_MAX + 32], f[PATH_MAX + 64];
  snprintf(d, sizeof d, "%s/loom-summary-Zz09Qq", base);
  assert_int_equal(mkdir(d, 0700), 0);
  snprintf(f, sizeof f, "%s/events.out.tfevents.1", d);
  FILE *o = fopen(f, "w");
  assert_non_null(o);
  fclose(o);
  assert_int_equal(loom__tmpdir_sweep(base, "summary"), 1);
  assert_false(is_dir(d));
}

/* TMPDIR that cannot take a directory: an error that names it. */
static void test_unwritable_tmpdir(void **state) {
  (void)state;
  char p[PATH_MAX] = "x", err[512] = "";
  int lock = 5;
  setenv("TMPDIR", "/nonexistent-loom-dir", 1);
  int rc = loom__tmpdir_make("ckpt", p, sizeof p, &lock, err, sizeof err);
  setenv("TMPDIR", base, 1);
  assert_int_equal(rc, LOOM_EIO);
  assert_int_equal(lock, -1);
  assert_string_equal(p, "");
  assert_non_null(strstr(err, "/nonexistent-loom-dir"));
}

int main(void) {
  const char *td = getenv("TMPDIR");
  if (td && *td) outer = strdup(td);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_make_and_remove, setup, teardown),
      cmocka_unit_test_setup_teardown(test_two_live_writers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dead_writer_swept, setup, teardown),
      cmocka_unit_test_setup_teardown(test_not_directories_are_left, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unlocked_directory_removed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unwritable_tmpdir, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
