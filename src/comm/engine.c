/* engine.c: the one place the collectives wait. Algorithms describe a
 * collective as a pipeline of stages (comm.h); the engine drives the pairs'
 * non-blocking send/recv and, when nothing moves, spins briefly, yields,
 * then sleeps on the fds and the shared-memory doorbell. Every sleep is
 * bounded by LOOM_COMM_CHECK_MS so that dead peers, an aborted attempt and
 * the collective's deadline are noticed while waiting.
 *
 * Also here: the tunables table and the communicator's poisoning. */
#include "comm/comm.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void comm_tunables_load(struct comm_tunables *t) {
  t->timeout_ms = (long)loom__tun(LOOM_TUN_COMM_TIMEOUT_MS);
  t->check_ms = (long)loom__tun(LOOM_TUN_COMM_CHECK_MS);
  t->spin = (long)loom__tun(LOOM_TUN_COMM_SPIN);
  t->yield = (long)loom__tun(LOOM_TUN_COMM_YIELD);
  t->small_bytes = (long)loom__tun(LOOM_TUN_COMM_SMALL_BYTES);
  t->bcast_small_bytes = (long)loom__tun(LOOM_TUN_COMM_BCAST_SMALL_BYTES);
  t->shm_ring = (long)loom__tun(LOOM_TUN_COMM_SHM_RING);
  t->shm_chunk = (long)loom__tun(LOOM_TUN_COMM_SHM_CHUNK);
  t->shm_slot = (long)loom__tun(LOOM_TUN_COMM_SHM_SLOT);
  t->shm_small_bytes = (long)loom__tun(LOOM_TUN_COMM_SHM_SMALL_BYTES);
  t->tcp_sockbuf = (long)loom__tun(LOOM_TUN_COMM_TCP_SOCKBUF);
  t->tcp_stage = (long)loom__tun(LOOM_TUN_COMM_TCP_STAGE);
  if (t->check_ms < 1) t->check_ms = 1;
  /* Bounded, so that the segment's layout cannot overflow. */
  if (t->shm_ring < 4096) t->shm_ring = 4096;
  if (t->shm_ring > COMM_SHM_MAX) t->shm_ring = COMM_SHM_MAX;
  t->shm_ring &= ~4095L;
  if (t->shm_slot > COMM_SHM_MAX) t->shm_slot = COMM_SHM_MAX;
  if (t->shm_chunk < 4096) t->shm_chunk = 4096;
  t->shm_chunk &= ~7L;
  if (t->tcp_stage < 4096) t->tcp_stage = 4096;
  if (t->shm_slot > 0 && t->shm_slot < 4096) t->shm_slot = 4096;
  t->shm_slot &= ~4095L;
}

uint64_t comm__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int comm__fail(comm_t *c, int code, const char *fmt, ...) {
  if (c->err) return c->err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
  va_end(ap);
  c->err = code;
  /* Tell the peers at once, so that none waits for its timeout. */
  if (c->shm) comm__shm_transport.poison(c);
  if (c->tcp) comm__tcp_transport.poison(c);
  return code;
}

int comm__begin(comm_t *c) {
  if (c->err) return c->err;
  c->gone_seen = 0;
  uint64_t now = comm__now_ns();
  c->deadline_ns = now + (uint64_t)c->t.timeout_ms * 1000000u;
  return 0;
}

void *comm__scratch(comm_t *c, size_t n) {
  if (n <= c->tmp_cap) return c->tmp;
  void *p = realloc(c->tmp, n);
  if (!p) return NULL;
  c->tmp = p;
  c->tmp_cap = n;
  return p;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Checks what may end a wait: poisoning by a peer, the abort fd, dead
 * peers, the deadline. full: also the slower checks. */
static int engine_check(comm_t *c, int full, const struct comm_waitset *ws) {
  int rc;
  if (c->shm && (rc = comm__shm_transport.check(c, full, ws)) < 0) return rc;
  if (!full) return 0;
  if (c->tcp && (rc = comm__tcp_transport.check(c, full, ws)) < 0) return rc;
  if (c->abort_fd >= 0) {
    struct pollfd p = {.fd = c->abort_fd, .events = POLLIN};
    if (poll(&p, 1, 0) > 0)
      return comm__fail(c, LOOM_EABORTED, "rank %d: the coordinator aborted the attempt", c->rank);
  }
  if (c->latest_gen && __atomic_load_n(c->latest_gen, __ATOMIC_ACQUIRE) > c->gen)
    return comm__fail(c, LOOM_ECHANGED,
                      "rank %d: the job's membership changed (generation %lld is newer "
                      "than %lld): call loom_comm_reform()",
                      c->rank, (long long)__atomic_load_n(c->latest_gen, __ATOMIC_ACQUIRE),
                      (long long)c->gen);
  if (comm__now_ns() >= c->deadline_ns) {
    char who[64] = "";
    size_t at = 0;
    for (int i = 0; i < ws->npeers && at < sizeof who; i++)
      at += (size_t)snprintf(who + at, sizeof who - at, "%s%d", i ? ", " : "", ws->peers[i]);
    return comm__fail(c, LOOM_ETIMEDOUT,
                      "rank %d: a collective did not finish within "
                      "LOOM_COMM_TIMEOUT_MS=%ld ms (waiting for rank %s)",
                      c->rank, c->t.timeout_ms, who[0] ? who : "?");
  }
  return 0;
}

/* Waits for ws (or briefly spins). Returns 0 to retry, or an error. */
static int engine_wait(comm_t *c, struct comm_waitset *ws, uint32_t token, unsigned *idle) {
  unsigned n = (*idle)++;
  if (n == 0) c->wait_from_ns = comm__now_ns();
  /* Only sockets to wait on and more ranks than CPUs: the kernel wakes the
   * poll as soon as bytes come, and spinning or yielding would only take
   * the CPU from the rank that sends them (measured: 10-15% at 4 ranks on
   * 2 cores over TCP). */
  if (c->oversub && ws->nfds > 0 && !ws->bell) n = (unsigned)(c->t.spin + c->t.yield);
  if (n < (unsigned)c->t.spin) {
    cpu_relax();
    return 0;
  }
  uint64_t now = comm__now_ns();
  int full = now >= c->next_check_ns || c->gone_seen;
  if (full) c->next_check_ns = now + (uint64_t)c->t.check_ms * 1000000u;
  int rc = engine_check(c, full, ws);
  if (rc < 0) return rc;
  if (c->gone_seen == 1) { /* a peer is gone: let the caller look again */
    c->gone_seen = 2;
    return 0;
  }
  if (n < (unsigned)(c->t.spin + c->t.yield)) {
    sched_yield();
    return 0;
  }
  uint64_t left_ms = (c->next_check_ns - now) / 1000000u + 1;
  int ms = left_ms > (uint64_t)c->t.check_ms ? (int)c->t.check_ms : (int)left_ms;
  if (ws->nfds > 0) {
    if (c->abort_fd >= 0 && ws->nfds < COMM_WAIT_MAX_FDS)
      ws->fds[ws->nfds++] = (struct pollfd){.fd = c->abort_fd, .events = POLLIN};
    /* With shm peers pending too, poll briefly: a doorbell is no fd. */
    if (poll(ws->fds, (nfds_t)ws->nfds, ws->bell ? 1 : ms) < 0 && errno != EINTR)
      return comm__fail(c, LOOM_EIO, "rank %d: poll: %s", c->rank, strerror(errno));
  } else if (ws->bell) {
    comm__shm_bell_sleep(c, token, ms);
  } else {
    sched_yield();
  }
  return 0;
}

/* Ends a wait that engine_wait began (if one did): its time joins wait_ns. */
static void engine_waited(comm_t *c, unsigned *idle) {
  if (*idle == 0) return;
  c->wait_ns += comm__now_ns() - c->wait_from_ns;
  *idle = 0;
}

/* Transports report through comm__fail(); this covers one that did not. */
static int engine_error(comm_t *c, int rc) {
  return c->err ? c->err : comm__fail(c, rc, "rank %d: transport error", c->rank);
}

int comm__pipeline(comm_t *c, struct comm_stage *st, int n) {
  int s = 0, r = 0, rc;
  unsigned idle = 0;
  for (int i = 0; i < n; i++) st[i].sdone = st[i].rdone = 0;
  for (;;) {
    int moved = 0;
    uint32_t token = c->shm ? comm__shm_bell_token(c) : 0;
    struct comm_waitset ws;
    ws.nfds = ws.bell = ws.npeers = 0;
    /* Skip what is complete (zero-length halves included). */
    while (s < n && st[s].sdone == st[s].slen) s++, moved = 1;
    while (r < n && r <= s && st[r].rdone == st[r].rlen) r++, moved = 1;
    if (s == n && r == n) {
      engine_waited(c, &idle);
      return 0;
    }
    if (s < n) {
      struct comm_stage *x = &st[s];
      size_t upto = x->sdep >= 0 ? st[x->sdep].rdone : x->slen;
      if (upto > x->slen) upto = x->slen;
      if (upto > x->sdone) {
        comm_pair *p = &c->pairs[x->to];
        size_t before = x->sdone;
        rc = p->tp->send(p, x->sbuf, x->slen, upto, &x->sdone);
        if (rc < 0) return engine_error(c, rc);
        if (x->sdone != before)
          moved = 1;
        else
          p->tp->want(p, 1, &ws);
      }
    }
    if (r < n && r <= s) {
      struct comm_stage *x = &st[r];
      comm_pair *p = &c->pairs[x->from];
      size_t before = x->rdone;
      rc = p->tp->recv(p, x->rlen, &x->rdone, &x->sink);
      if (rc < 0) return engine_error(c, rc);
      if (x->rdone != before)
        moved = 1;
      else
        p->tp->want(p, 0, &ws);
    }
    if (moved) {
      engine_waited(c, &idle);
      c->gone_seen = 0;
      continue;
    }
    if ((rc = engine_wait(c, &ws, token, &idle)) < 0) return rc;
  }
}

int comm__wait_counter(comm_t *c, const _Atomic uint64_t *v, uint64_t target, int peer) {
  unsigned idle = 0;
  for (;;) {
    uint32_t token = comm__shm_bell_token(c);
    if (atomic_load_explicit(v, memory_order_acquire) >= target) {
      engine_waited(c, &idle);
      c->gone_seen = 0;
      return 0;
    }
    struct comm_waitset ws;
    ws.nfds = 0;
    ws.bell = 1;
    ws.npeers = 1;
    ws.peers[0] = peer;
    int rc = engine_wait(c, &ws, token, &idle);
    if (rc < 0) return rc;
  }
}

size_t comm__block_off(size_t count, int n, int b) {
  size_t q = count / (size_t)n, m = count % (size_t)n, ub = (size_t)b;
  return ub * q + (ub < m ? ub : m);
}

size_t comm__block_len(size_t count, int n, int b) {
  return count / (size_t)n + ((size_t)b < count % (size_t)n ? 1 : 0);
}
