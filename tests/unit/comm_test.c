/* comm_test.c: every collective over every transport, world sizes 1..8.
 *
 * Each case forks `world` ranks that meet through a file store (no
 * coordinator) and run allreduce and reduce-scatter for every dtype and op,
 * in place and out of place, plus broadcast, allgather and barrier, over
 * counts 0, 1, primes and (for some world sizes) several MiB. Expected
 * values are in closed form: rank r's element i is s(i) * (r+1) * f(i)
 * with f(i) = i % 97 + 1 and s(i) = +1 or -1, so the sum is
 * s*f*n(n+1)/2, the max is n*f or -f, the min f or -n*f, all exact in f32.
 * Every rank runs under alarm() so a hang fails the case; a failing check
 * prints the expression and the values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "comm_testutil.h"
#include "testutil.h"
#include "comm/comm.h"
#include "loom/comm.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", g_rank, __FILE__, __LINE__, #cond);    \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

#define CALL(c, expr)                                                                              \
  do {                                                                                             \
    int rc_ = (expr);                                                                              \
    CHECK(rc_ == 0, "%s returned %s: %s", #expr, loom_err_name(rc_), comm_errmsg(c));              \
  } while (0)

struct tcase {
  const char *name;
  const char *transport; /* LOOM_COMM_TRANSPORT */
  int world;
  int large;       /* also a count of several MiB */
  int mixed;       /* alternate two host names: shm and tcp pairs at once */
  const char *env; /* "NAME=VALUE NAME=VALUE": tunables for this case */
};

static int g_rank;
static _Atomic long *g_shared; /* a page shared by the ranks (barrier) */

static const char *const dt_name[] = {"f32", "f64", "i32", "i64"};
static const char *const op_name[] = {"sum", "avg", "max", "min"};

static double val(int r, size_t i) {
  double f = (double)(i % 97 + 1), s = (i & 1) ? -1 : 1;
  return s * (r + 1) * f;
}

static double expect(loom_dtype dt, loom_op op, int n, size_t i) {
  double f = (double)(i % 97 + 1);
  int pos = !(i & 1);
  double sum = (pos ? 1 : -1) * f * n * (n + 1) / 2;
  switch (op) {
  case LOOM_SUM:
    return sum;
  case LOOM_MAX:
    return pos ? n * f : -f;
  case LOOM_MIN:
    return pos ? f : -n * f;
  case LOOM_AVG:
    if (dt == LOOM_F32) return (double)((float)sum / (float)n);
    if (dt == LOOM_F64) return sum / n;
    return (double)((long long)sum / n); /* truncating, as documented */
  }
  return 0;
}

static void put(loom_dtype dt, void *b, size_t i, double v) {
  switch (dt) {
  case LOOM_F32:
    ((float *)b)[i] = (float)v;
    break;
  case LOOM_F64:
    ((double *)b)[i] = v;
    break;
  case LOOM_I32:
    ((int32_t *)b)[i] = (int32_t)v;
    break;
  case LOOM_I64:
    ((int64_t *)b)[i] = (int64_t)v;
    break;
  }
}

static double get(loom_dtype dt, const void *b, size_t i) {
  switch (dt) {
  case LOOM_F32:
    return ((const float *)b)[i];
  case LOOM_F64:
    return ((const double *)b)[i];
  case LOOM_I32:
    return ((const int32_t *)b)[i];
  case LOOM_I64:
    return (double)((const int64_t *)b)[i];
  }
  return 0;
}

#define GUARD 12345.0

static int check_allreduce(comm_t *c, int n, size_t count, loom_dtype dt, loom_op op, int inplace) {
  size_t es = comm_dtype_size(dt);
  char *send = malloc((count + 1) * es), *recv = malloc((count + 1) * es);
  CHECK(send && recv, "out of memory");
  for (size_t i = 0; i < count; i++) put(dt, send, i, val(g_rank, i));
  memset(recv, 0x5a, count * es);
  put(dt, inplace ? send : recv, count, GUARD);
  void *out = inplace ? send : recv;
  CALL(c, comm_allreduce(c, send, out, count, dt, op));
  for (size_t i = 0; i < count; i++) {
    double got = get(dt, out, i), want = expect(dt, op, n, i);
    CHECK(got == want, "allreduce %s %s count %zu %s: [%zu] = %g, want %g", dt_name[dt],
          op_name[op], count, inplace ? "in place" : "", i, got, want);
  }
  CHECK(get(dt, out, count) == GUARD, "allreduce wrote past the end");
  free(send);
  free(recv);
  return 0;
}

struct applied {
  char *out;
  unsigned char *seen; /* times each element was handed over */
  size_t es, count, calls;
  int bad; /* a piece past the end */
};

static void apply_fn(void *arg, size_t offset, const void *piece, size_t n) {
  struct applied *a = arg;
  a->calls++;
  if (offset > a->count || n > a->count - offset) {
    a->bad = 1;
    return;
  }
  memcpy(a->out + offset * a->es, piece, n * a->es);
  for (size_t i = 0; i < n; i++) a->seen[offset + i]++;
}

/* comm_allreduce_apply: every element handed over exactly once, with the
 * reduced value, and send left as it was. */
static int check_allreduce_apply(comm_t *c, int n, size_t count, loom_dtype dt, loom_op op) {
  size_t es = comm_dtype_size(dt);
  char *send = malloc((count + 1) * es), *out = malloc((count + 1) * es);
  unsigned char *seen = calloc(count + 1, 1);
  CHECK(send && out && seen, "out of memory");
  for (size_t i = 0; i < count; i++) put(dt, send, i, val(g_rank, i));
  struct applied a = {out, seen, es, count, 0, 0};
  CALL(c, comm_allreduce_apply(c, send, count, dt, op, apply_fn, &a));
  CHECK(!a.bad, "allreduce_apply %s %s count %zu: a piece past the end", dt_name[dt], op_name[op],
        count);
  CHECK(count > 0 || a.calls == 0, "allreduce_apply of nothing called fn %zu times", a.calls);
  for (size_t i = 0; i < count; i++) {
    CHECK(seen[i] == 1, "allreduce_apply %s %s count %zu: [%zu] handed over %d times", dt_name[dt],
          op_name[op], count, i, seen[i]);
    double got = get(dt, out, i), want = expect(dt, op, n, i);
    CHECK(got == want, "allreduce_apply %s %s count %zu: [%zu] = %g, want %g", dt_name[dt],
          op_name[op], count, i, got, want);
    CHECK(get(dt, send, i) == val(g_rank, i), "allreduce_apply wrote into send at [%zu]", i);
  }
  free(send);
  free(out);
  free(seen);
  return 0;
}

/* comm_allreduce_buffer: on one host with the slot collectives, for a
 * vector that fits a slot, a place to write the send of the next
 * allreduce (or apply), which then reduces it in place with the same
 * result; NULL everywhere else. */
/* mode: 0 allreduce into memory of its own, 1 apply, 2 allreduce in
 * place (recv the lent buffer too) */
static int check_allreduce_buffer(comm_t *c, const struct tcase *tc, int n, size_t count,
                                  loom_dtype dt, loom_op op, int mode) {
  size_t es = comm_dtype_size(dt);
  int native = !strcmp(tc->transport, "auto") && !tc->mixed && n > 1 &&
               !(tc->env && strstr(tc->env, "LOOM_COMM_SHM_SLOT=0"));
  size_t slot = tc->env && strstr(tc->env, "LOOM_COMM_SHM_SLOT=4096") ? 4096 : 1u << 20;
  int want = native && count > 0 && count * es <= slot;
  char *p = comm_allreduce_buffer(c, count, dt);
  CHECK((p != NULL) == want, "allreduce_buffer %s count %zu: %p, want %s", dt_name[dt], count,
        (void *)p, want ? "a buffer" : "NULL");
  if (!p) return 0;
  for (size_t i = 0; i < count; i++) put(dt, p, i, val(g_rank, i));
  if (mode == 1) {
    char *out = malloc(count * es);
    unsigned char *seen = calloc(count, 1);
    CHECK(out && seen, "out of memory");
    struct applied a = {out, seen, es, count, 0, 0};
    CALL(c, comm_allreduce_apply(c, p, count, dt, op, apply_fn, &a));
    for (size_t i = 0; i < count; i++) {
      double got = get(dt, out, i), want_v = expect(dt, op, n, i);
      CHECK(seen[i] == 1 && got == want_v,
            "allreduce_buffer+apply %s %s count %zu: [%zu] = %g "
            "(seen %d), want %g",
            dt_name[dt], op_name[op], count, i, got, seen[i], want_v);
    }
    free(out);
    free(seen);
  } else {
    char *recv = mode == 2 ? p : malloc(count * es);
    CHECK(recv, "out of memory");
    CALL(c, comm_allreduce(c, p, recv, count, dt, op));
    for (size_t i = 0; i < count; i++) {
      double got = get(dt, recv, i), want_v = expect(dt, op, n, i);
      CHECK(got == want_v, "allreduce_buffer %s %s count %zu%s: [%zu] = %g, want %g", dt_name[dt],
            op_name[op], count, mode == 2 ? " in place" : "", i, got, want_v);
    }
    if (mode != 2) free(recv);
  }
  return 0;
}

/* A lent buffer with a collective between: the allreduce is refused
 * (LOOM_EINVAL) on every rank, nothing sent, and the next one works. */
static int check_buffer_misuse(comm_t *c, int n) {
  float *p = comm_allreduce_buffer(c, 64, LOOM_F32);
  if (!p) return 0;
  float recv[64];
  for (int i = 0; i < 64; i++) p[i] = 1.0f;
  CALL(c, comm_barrier(c));
  int rc = comm_allreduce(c, p, recv, 64, LOOM_F32, LOOM_SUM);
  CHECK(rc == LOOM_EINVAL, "allreduce of a buffer lent before a barrier: %s", loom_err_name(rc));
  CHECK(strstr(comm_errmsg(c), "loom_allreduce_buffer"), "the message: %s", comm_errmsg(c));
  return check_allreduce(c, n, 7, LOOM_F32, LOOM_SUM, 0);
}

static int check_reduce_scatter(comm_t *c, int n, size_t count, loom_dtype dt, loom_op op,
                                int inplace) {
  size_t es = comm_dtype_size(dt);
  size_t mine = loom_reduce_scatter_count(count, n, g_rank);
  size_t off = 0;
  for (int r = 0; r < g_rank; r++) off += loom_reduce_scatter_count(count, n, r);
  char *send = malloc((count + 1) * es), *recv = malloc((mine + 1) * es);
  CHECK(send && recv, "out of memory");
  for (size_t i = 0; i < count; i++) put(dt, send, i, val(g_rank, i));
  put(dt, recv, mine, GUARD);
  void *out = inplace ? send : recv;
  CALL(c, comm_reduce_scatter(c, send, out, count, dt, op));
  for (size_t i = 0; i < mine; i++) {
    double got = get(dt, out, i), want = expect(dt, op, n, off + i);
    CHECK(got == want, "reduce_scatter %s %s count %zu %s: [%zu] = %g, want %g", dt_name[dt],
          op_name[op], count, inplace ? "in place" : "", i, got, want);
  }
  if (!inplace) CHECK(get(dt, recv, mine) == GUARD, "wrote past the end");
  free(send);
  free(recv);
  return 0;
}

static unsigned char bpat(int r, size_t j) { return (unsigned char)(r * 31 + j * 7 + 1); }

static int check_broadcast(comm_t *c, size_t bytes, int root) {
  unsigned char *b = malloc(bytes + 1);
  CHECK(b, "out of memory");
  for (size_t j = 0; j < bytes; j++) b[j] = g_rank == root ? bpat(root, j) : 0xee;
  b[bytes] = 0x77;
  CALL(c, comm_broadcast(c, b, bytes, root));
  for (size_t j = 0; j < bytes; j++)
    CHECK(b[j] == bpat(root, j), "broadcast %zu bytes from %d: [%zu] = %d", bytes, root, j, b[j]);
  CHECK(b[bytes] == 0x77, "broadcast wrote past the end");
  free(b);
  return 0;
}

static int check_allgather(comm_t *c, int n, size_t bytes, int inplace) {
  unsigned char *send = malloc(bytes + 1), *recv = malloc(n * bytes + 1);
  CHECK(send && recv, "out of memory");
  memset(recv, 0xee, n * bytes + 1);
  unsigned char *mine = inplace ? recv + (size_t)g_rank * bytes : send;
  for (size_t j = 0; j < bytes; j++) mine[j] = bpat(g_rank, j);
  CALL(c, comm_allgather(c, mine, recv, bytes));
  for (int r = 0; r < n; r++)
    for (size_t j = 0; j < bytes; j++)
      CHECK(recv[(size_t)r * bytes + j] == bpat(r, j), "allgather %zu bytes: block %d [%zu] = %d",
            bytes, r, j, recv[(size_t)r * bytes + j]);
  CHECK(recv[n * bytes] == 0xee, "allgather wrote past the end");
  free(send);
  free(recv);
  return 0;
}

static int check_barrier(comm_t *c, int n) {
  for (long k = 0; k < 20; k++) {
    atomic_fetch_add(g_shared, 1);
    CALL(c, comm_barrier(c));
    long v = atomic_load(g_shared);
    CHECK(v >= n * (k + 1) && v <= n * (k + 2), "barrier %ld: counter %ld, want %ld..%ld", k, v,
          n * (k + 1), n * (k + 2));
  }
  return 0;
}

static int rank_body(comm_t *c, const struct tcase *tc) {
  int n = tc->world;
  size_t counts[] = {0, 1, 7, 1021, 65537, (1u << 20) + 3};
  int ncounts = tc->large ? 6 : 5;
  for (int k = 0; k < ncounts; k++)
    for (int dt = LOOM_F32; dt <= LOOM_I64; dt++)
      for (int op = LOOM_SUM; op <= LOOM_MIN; op++)
        for (int inplace = 0; inplace < 2; inplace++) {
          /* The large count: every dtype and op, out of place only. */
          if (k == 5 && inplace && dt != LOOM_F32) continue;
          if (check_allreduce(c, n, counts[k], dt, op, inplace)) return 1;
          if (check_reduce_scatter(c, n, counts[k], dt, op, inplace)) return 1;
          if (!inplace && check_allreduce_apply(c, n, counts[k], dt, op)) return 1;
          if (check_allreduce_buffer(c, tc, n, counts[k], dt, op, inplace)) return 1;
          if (!inplace && check_allreduce_buffer(c, tc, n, counts[k], dt, op, 2)) return 1;
        }
  if (check_buffer_misuse(c, n)) return 1;
  for (int k = 0; k < ncounts; k++)
    for (int root = 0; root<n; root += n> 1 ? n - 1 : 1)
      if (check_broadcast(c, counts[k] * (k == 5 ? 4 : 1), root)) return 1;
  for (int k = 0; k < ncounts; k++)
    for (int inplace = 0; inplace < 2; inplace++)
      if (check_allgather(c, n, counts[k], inplace)) return 1;
  return check_barrier(c, n);
}

static void run_case(void **state) {
  const struct tcase *tc = *state;
  char dir[] = "/tmp/loom-comm-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  g_shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(g_shared != MAP_FAILED);
  pid_t pids[8];
  for (int r = 0; r < tc->world; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] > 0) continue;
    g_rank = r;
    alarm(120);
    setenv("LOOM_COMM_TRANSPORT", tc->transport, 1);
    if (tc->env) { /* "A=1 B=2" */
      char buf[256], *save = NULL;
      snprintf(buf, sizeof buf, "%s", tc->env);
      for (char *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        if (eq) *eq = 0, setenv(kv, eq + 1, 1);
      }
    }
    comm_store *store;
    comm_t *c = NULL;
    char msg[256];
    int rc = comm_store_file(dir, &store);
    if (rc == 0)
      rc = comm_create(store, "t", r, tc->world, tc->mixed && r % 2 ? "127.0.0.1" : "localhost", -1,
                       &c, msg, sizeof msg);
    if (rc < 0) {
      fprintf(stderr, "rank %d: comm_create: %s: %s\n", r, loom_err_name(rc), msg);
      _exit(2);
    }
    rc = rank_body(c, tc);
    comm_destroy(c);
    store->ops->destroy(store);
    _exit(rc);
  }
  int failed = 0;
  for (int r = 0; r < tc->world; r++) {
    int st = 0;
    while (waitpid(pids[r], &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "%s: rank %d %s %d\n", tc->name, r,
              WIFSIGNALED(st) ? "killed by signal" : "exited with",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
      failed++;
    }
  }
  test_rm_rf(dir);
  munmap((void *)g_shared, 4096);
  assert_int_equal(failed, 0);
  /* Nothing of ours is left in /dev/shm. */
  assert_int_equal(dev_shm_left(pids, tc->world), 0);
}

#define CASE(name, tp, n, large, mixed)                                                            \
  { name, tp, n, large, mixed, NULL }
/* One host without the slot collectives: the algorithms over shm pairs. */
#define PAIRS "LOOM_COMM_SHM_SLOT=0"
/* Tiny slots, no small path: many rounds, chunks that split unevenly. */
#define TINY "LOOM_COMM_SHM_SLOT=4096 LOOM_COMM_SHM_SMALL_BYTES=0"
static struct tcase cases[] = {
    CASE("shm 1", "auto", 1, 1, 0),
    CASE("shm 2", "auto", 2, 1, 0),
    CASE("shm 3", "auto", 3, 0, 0),
    CASE("shm 4", "auto", 4, 1, 0),
    CASE("shm 5", "auto", 5, 0, 0),
    CASE("shm 6", "auto", 6, 0, 0),
    CASE("shm 7", "auto", 7, 0, 0),
    CASE("shm 8", "auto", 8, 1, 0),
    CASE("tcp 2", "tcp", 2, 1, 0),
    CASE("tcp 3", "tcp", 3, 0, 0),
    CASE("tcp 4", "tcp", 4, 1, 0),
    CASE("tcp 5", "tcp", 5, 0, 0),
    CASE("tcp 6", "tcp", 6, 0, 0),
    CASE("tcp 7", "tcp", 7, 0, 0),
    CASE("tcp 8", "tcp", 8, 1, 0),
    CASE("mixed 4", "auto", 4, 1, 1),
    CASE("mixed 5", "auto", 5, 0, 1),
    {"shm pairs 2", "auto", 2, 1, 0, PAIRS},
    {"shm pairs 3", "auto", 3, 0, 0, PAIRS},
    {"shm pairs 4", "auto", 4, 1, 0, PAIRS},
    {"shm pairs 8", "auto", 8, 0, 0, PAIRS},
    {"shm tiny slots 2", "auto", 2, 1, 0, TINY},
    {"shm tiny slots 3", "auto", 3, 0, 0, TINY},
    {"shm tiny slots 5", "auto", 5, 0, 0, TINY},
    {"shm tiny slots 8", "auto", 8, 0, 0, TINY},
};

int main(void) {
  struct CMUnitTest tests[sizeof cases / sizeof cases[0]];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    tests[i] = (struct CMUnitTest){cases[i].name, run_case, NULL, NULL, &cases[i]};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
