/* pool.c: a shard's helper threads, for the row work of one large sparse
 * request (LOOM_PS_THREADS). On a table far larger than the caches that
 * work is waiting on memory, and a core keeps only so many misses in
 * flight: two cores look up and copy 4,096 random rows of a 1M-row table
 * in half the time of one (bench/ps/README.md).
 *
 * The poll loop stays one thread: it hands the parts of a request to the
 * pool and does part 0 itself; the others run on the helpers while the
 * loop waits (polling, it has nothing else to do: the request is the
 * shard's current one). A helper polls for its next job for LOOM_PS_SPIN_US
 * after one (a sleeping thread's wake-up costs tens of microseconds on a
 * VM, as much as the part it would do), then sleeps on a condition
 * variable until the next. */
#include "ps/ps.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

struct ps_pool {
  int threads; /* the caller and threads - 1 helpers */
  uint64_t spin_ns;
  pthread_t *th;
  int started;
  /* the job: generation `gen` runs fn(arg, i, parts) for i in 1..parts-1;
   * helper h (1-based) takes part h when h < parts */
  _Atomic uint64_t gen;
  _Atomic int pending; /* helpers not done with the current job */
  _Atomic int sleepers;
  _Atomic int quit;
  void (*fn)(void *arg, int part, int parts);
  void *arg;
  int parts;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

typedef struct {
  ps_pool *p;
  int id;
} helper_arg;

static void *helper(void *a) {
  helper_arg ha = *(helper_arg *)a;
  free(a);
  ps_pool *p = ha.p;
  uint64_t seen = 0;
  for (;;) {
    uint64_t until = p->spin_ns ? loom__now_ns() + p->spin_ns : 0;
    uint64_t g;
    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->quit) && loom__now_ns() < until)
      sched_yield();
    if (g == seen && !atomic_load(&p->quit)) {
      pthread_mutex_lock(&p->mu);
      atomic_fetch_add(&p->sleepers, 1);
      while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->quit))
        pthread_cond_wait(&p->cv, &p->mu);
      atomic_fetch_sub(&p->sleepers, 1);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->quit)) return NULL;
    seen = g;
    if (ha.id < p->parts) p->fn(p->arg, ha.id, p->parts);
    atomic_fetch_sub(&p->pending, 1);
  }
}

int ps_pool_new(int threads, uint64_t spin_ns, ps_pool **out) {
  *out = NULL;
  if (threads <= 1) return 0;
  ps_pool *p = calloc(1, sizeof *p);
  if (!p || !(p->th = calloc((size_t)threads, sizeof *p->th))) {
    free(p);
    return LOOM_ENOMEM;
  }
  p->threads = threads;
  p->spin_ns = spin_ns;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  for (int i = 1; i < threads; i++) {
    helper_arg *a = malloc(sizeof *a);
    if (!a) break;
    *a = (helper_arg){p, i};
    if (pthread_create(&p->th[i], NULL, helper, a) != 0) {
      free(a);
      break;
    }
    p->started = i;
  }
  if (p->started < threads - 1) { /* out of memory or of threads */
    ps_pool_free(p);
    return LOOM_ENOMEM;
  }
  *out = p;
  return 0;
}

void ps_pool_free(ps_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->quit, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i <= p->started; i++) pthread_join(p->th[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->th);
  free(p);
}

int ps_pool_threads(const ps_pool *p) { return p ? p->threads : 1; }

void ps_pool_run(ps_pool *p, int parts, void (*fn)(void *arg, int part, int parts), void *arg) {
  if (!p || parts <= 1) { /* one thread: the whole job is part 0 of 1 */
    fn(arg, 0, 1);
    return;
  }
  if (parts > p->threads) parts = p->threads;
  p->fn = fn;
  p->arg = arg;
  p->parts = parts;
  /* every helper passes through each generation (one past its part count
   * does nothing), so that none is left a job behind */
  atomic_store(&p->pending, p->threads - 1);
  atomic_fetch_add(&p->gen, 1); /* publishes fn, arg, parts */
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
  fn(arg, 0, parts);
  while (atomic_load(&p->pending) > 0) sched_yield();
}
