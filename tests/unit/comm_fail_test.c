/* comm_fail_test.c: what the collectives do when things go wrong.
 *
 * - a rank is SIGKILLed in the middle of a stream of large allreduces:
 *   every survivor returns an error within 2 s (measured), and the
 *   communicator stays poisoned (the next call fails at once, same code);
 * - the abort fd becomes readable: every rank returns LOOM_EABORTED;
 * - a rank stops (SIGSTOP, so no death to see): the others time out;
 * - afterwards nothing of ours is left in /dev/shm.
 * Over shared memory and over TCP. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "comm_testutil.h"
#include "testutil.h"
#include "comm/comm.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WORLD 4
#define VICTIM 2
#define COUNT (4u << 20) /* 16 MiB of f32 */

enum { KILL, ABORT, STOP };

struct shared {
  _Atomic long iters[WORLD];
  _Atomic uint64_t event_ns; /* when the parent killed/aborted/stopped */
  uint64_t err_ns[WORLD];
  int rc[WORLD], rc2[WORLD];
  uint64_t rc2_ns[WORLD];
  char msg[WORLD][200];
};

struct fcase {
  const char *name;
  const char *transport;
  int what;
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void rank_main(const struct fcase *fc, struct shared *sh, const char *dir, int r,
                      int abort_fd) {
  alarm(60);
  setenv("LOOM_COMM_TRANSPORT", fc->transport, 1);
  if (fc->what == STOP) setenv("LOOM_COMM_TIMEOUT_MS", "1000", 1);
  comm_store *store;
  comm_t *c = NULL;
  char msg[256];
  if (comm_store_file(dir, &store) < 0 ||
      comm_create(store, "f", r, WORLD, "localhost", abort_fd, &c, msg, sizeof msg) < 0)
    _exit(2);
  float *send = malloc(COUNT * sizeof *send), *recv = malloc(COUNT * sizeof *recv);
  for (size_t i = 0; i < COUNT; i++) send[i] = 1;
  int rc;
  for (;;) {
    rc = comm_allreduce(c, send, recv, COUNT, LOOM_F32, LOOM_SUM);
    if (rc < 0) break;
    atomic_fetch_add(&sh->iters[r], 1);
  }
  sh->err_ns[r] = now_ns();
  sh->rc[r] = rc;
  snprintf(sh->msg[r], sizeof sh->msg[r], "%s", comm_errmsg(c));
  uint64_t t = now_ns();
  sh->rc2[r] = comm_barrier(c);
  sh->rc2_ns[r] = now_ns() - t;
  comm_destroy(c);
  store->ops->destroy(store);
  free(send);
  free(recv);
  _exit(0);
}

static void run_fail(void **state) {
  const struct fcase *fc = *state;
  char dir[] = "/tmp/loom-comm-fail-XXXXXX";
  assert_non_null(mkdtemp(dir));
  struct shared *sh =
      mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(sh != MAP_FAILED);
  int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  assert_true(efd >= 0);
  pid_t pids[WORLD];
  for (int r = 0; r < WORLD; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) rank_main(fc, sh, dir, r, efd);
  }
  /* Let every rank get going, then strike in the middle of a call. */
  uint64_t t0 = now_ns();
  for (;;) {
    int ready = 1;
    for (int r = 0; r < WORLD; r++) ready &= atomic_load(&sh->iters[r]) >= 2;
    if (ready || now_ns() - t0 > 30000000000ull) break;
    usleep(1000);
  }
  usleep(3000);
  atomic_store(&sh->event_ns, now_ns());
  if (fc->what == KILL)
    kill(pids[VICTIM], SIGKILL);
  else if (fc->what == STOP)
    kill(pids[VICTIM], SIGSTOP);
  else {
    uint64_t one = 1;
    assert_int_equal(write(efd, &one, sizeof one), sizeof one);
  }
  int failed = 0;
  for (int r = 0; r < WORLD; r++) {
    if (fc->what == STOP && r == VICTIM) continue;
    int st = 0;
    while (waitpid(pids[r], &st, 0) < 0 && errno == EINTR) {
    }
    if (fc->what == KILL && r == VICTIM) {
      assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
      continue;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "%s: rank %d died (status %#x)\n", fc->name, r, st);
      failed++;
    }
  }
  if (fc->what == STOP) {
    kill(pids[VICTIM], SIGKILL);
    waitpid(pids[VICTIM], NULL, 0);
  }
  uint64_t ev = atomic_load(&sh->event_ns);
  for (int r = 0; r < WORLD; r++) {
    if (r == VICTIM && fc->what != ABORT) continue;
    double ms = ((double)sh->err_ns[r] - (double)ev) / 1e6;
    fprintf(stderr,
            "%s: rank %d: %s after %.0f ms (%s); next call %s in "
            "%.3f ms\n",
            fc->name, r, loom_err_name(sh->rc[r]), ms, sh->msg[r], loom_err_name(sh->rc2[r]),
            (double)sh->rc2_ns[r] / 1e6);
    if (fc->what == ABORT)
      assert_int_equal(sh->rc[r], LOOM_EABORTED);
    else if (fc->what == STOP) /* or a peer that timed out hung up */
      assert_true(sh->rc[r] == LOOM_ETIMEDOUT || sh->rc[r] == LOOM_EPEER);
    else
      assert_true(sh->rc[r] == LOOM_EPEER || sh->rc[r] == LOOM_ETIMEDOUT ||
                  sh->rc[r] == LOOM_EABORTED);
    assert_true(ms < (fc->what == STOP ? 3000 : 2000));
    assert_true(strlen(sh->msg[r]) > 0);
    /* Poisoned: the next call fails at once, with the same code. */
    assert_int_equal(sh->rc2[r], sh->rc[r]);
    assert_true(sh->rc2_ns[r] < 10000000u);
  }
  /* A timeout names the rank it waited for (the stopped one, or a rank
   * stuck behind it). */
  if (fc->what == STOP)
    for (int r = 0; r < WORLD; r++)
      if (r != VICTIM && sh->rc[r] == LOOM_ETIMEDOUT)
        assert_non_null(strstr(sh->msg[r], "(waiting for rank "));
  if (fc->what == KILL)
    for (int r = 0; r < WORLD; r++)
      if (r != VICTIM && sh->rc[r] == LOOM_EPEER && fc->transport[0] == 'a')
        assert_non_null(strstr(sh->msg[r], "rank 2"));
  test_rm_rf(dir);
  close(efd);
  munmap(sh, sizeof *sh);
  assert_int_equal(failed, 0);
  assert_int_equal(dev_shm_left(pids, WORLD), 0);
}

static struct fcase cases[] = {
    {"shm kill", "auto", KILL},  {"tcp kill", "tcp", KILL},  {"shm abort", "auto", ABORT},
    {"tcp abort", "tcp", ABORT}, {"shm stop", "auto", STOP}, {"tcp stop", "tcp", STOP},
};

int main(void) {
  struct CMUnitTest tests[sizeof cases / sizeof cases[0]];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    tests[i] = (struct CMUnitTest){cases[i].name, run_fail, NULL, NULL, &cases[i]};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
