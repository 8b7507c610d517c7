/* shm.c: the shared-memory transport, for peers on the same host.
 *
 * All ranks of a host share one segment: a header, one slot per local rank
 * (its doorbell and pid), and a ring buffer for every ordered pair of local
 * ranks. A ring is single-producer single-consumer: the writer copies into
 * it and advances head, the reader consumes (copying out or reducing
 * straight from the ring) and advances tail. Every message starts 8-byte
 * aligned in the ring, so the reader always sees whole elements.
 *
 * Waiting: each rank has one doorbell word in its slot. Whoever advances a
 * ring that a peer may wait on increments the peer's doorbell and, if the
 * peer sleeps, wakes it with a futex (FUTEX_WAIT on shared memory works
 * across processes). A sleeper rereads the doorbell before it sleeps, so
 * no wake-up is lost, and sleeps at most LOOM_COMM_CHECK_MS at a time.
 *
 * Lifetime: the lowest local rank creates the segment (shm_open, random
 * name) and publishes its name through the store; the last rank to map it
 * unlinks it, so nothing is left in /dev/shm even after a crash. A dead
 * peer is noticed through a pidfd (or kill(pid, 0) where there is none)
 * while a rank waits on it; any failure poisons the segment (code and
 * message in the header) and rings every doorbell. */
#include "comm/comm.h"
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <signal.h>

#define SHM_MAGIC 0x326d68736d6f6f6cULL /* "loomshm2" */
#define SHM_HDR_BYTES 512
#define SHM_RING_CTL 4096 /* ring control block, keeps data page-aligned */

enum { SLOT_EMPTY, SLOT_LIVE, SLOT_LEFT };

struct shm_hdr {
  uint64_t magic;
  uint32_t nlocal;
  uint32_t pad;
  uint64_t ring_size;   /* a power of two */
  uint64_t total;       /* bytes of the segment */
  uint64_t slot_size;   /* bytes of one collective slot; 0: no slots */
  uint64_t small_bytes; /* allreduce: whole-vector reduction up to this */
  _Atomic uint32_t mapped;
  _Atomic int32_t poison; /* 0, or the LOOM_E* code that poisoned it */
  int32_t poison_by;      /* the rank that poisoned it */
  char poison_msg[256];
};

struct shm_slot {
  _Alignas(64) _Atomic uint32_t bell;
  _Atomic uint32_t sleeping;
  _Atomic uint32_t state; /* SLOT_* */
  int32_t rank;
  char pad[48];
};

struct shm_ring {
  _Alignas(64) _Atomic uint64_t head; /* bytes written, by the writer */
  char pad1[56];
  _Atomic uint64_t tail; /* bytes consumed, by the reader */
  char pad2[56];
};

/* A rank's progress through the slot collectives, advanced only by that
 * rank: arrive = k + 1 once its data for round k is in its slot, reduced =
 * k + 1 once its share of round k's result is. */
struct shm_ctl {
  _Alignas(64) _Atomic uint64_t arrive;
  _Atomic uint64_t reduced;
  char pad[48];
};

struct shm_link {
  struct shm_dev *d;
  int li;               /* the peer's local index */
  struct shm_ring *out; /* me -> peer */
  struct shm_ring *in;  /* peer -> me */
  char *out_data, *in_data;
};

struct shm_dev {
  comm_t *c;
  char name[64];
  int unlinked;
  char *base;
  size_t size;
  struct shm_hdr *hdr;
  struct shm_slot *slots;
  int nlocal, me;
  int *ranks;             /* [nlocal] local index -> rank */
  int *pidfd;             /* [nlocal] -1: none */
  int *lidx;              /* [world] rank -> local index, -1 if not local */
  struct shm_link *links; /* [nlocal] */
  uint64_t mask, chunk;
  struct shm_ctl *ctl; /* [nlocal] */
  char *slots_base;    /* 2 x nlocal slots of slot_size bytes */
  uint64_t slot_size, small_bytes;
  uint64_t round;  /* slot rounds this rank has started */
  uint64_t lent;   /* round + 1 whose slot loom_allreduce_buffer lent out; 0: none */
  const char **xs; /* [nlocal] the inputs of one reduction */
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
  return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static void shm_ring_bell(struct shm_slot *s) {
  atomic_fetch_add(&s->bell, 1);
  if (atomic_load(&s->sleeping)) futex((_Atomic uint32_t *)&s->bell, FUTEX_WAKE, INT_MAX, NULL);
}

uint32_t comm__shm_bell_token(comm_t *c) {
  struct shm_dev *d = c->shm;
  return atomic_load(&d->slots[d->me].bell);
}

void comm__shm_bell_sleep(comm_t *c, uint32_t token, int timeout_ms) {
  struct shm_dev *d = c->shm;
  struct shm_slot *s = &d->slots[d->me];
  struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  atomic_store(&s->sleeping, 1);
  if (atomic_load(&s->bell) == token) futex(&s->bell, FUTEX_WAIT, token, &ts);
  atomic_store(&s->sleeping, 0);
}

/* Maps the segment's total bytes from fd into d. */
static int shm_map(comm_t *c, struct shm_dev *d, int fd, size_t total) {
  void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return comm__fail(c, LOOM_ENOMEM, "rank %d: mmap: %s", c->rank, strerror(errno));
  d->base = p;
  d->size = total;
  d->hdr = p;
  return 0;
}

/* The segment: header, doorbell slots, rings, the slot collectives'
 * control lines and their slots (two per rank: rounds alternate). */
static size_t shm_layout(uint32_t nlocal, uint64_t ring, uint64_t slot, size_t *rings_at,
                         size_t *ctl_at) {
  size_t at = SHM_HDR_BYTES + (size_t)nlocal * sizeof(struct shm_slot);
  at = (at + 4095) & ~(size_t)4095;
  *rings_at = at;
  at += (size_t)nlocal * nlocal * (SHM_RING_CTL + ring);
  *ctl_at = at;
  at += ((size_t)nlocal * sizeof(struct shm_ctl) + 4095) & ~(size_t)4095;
  return at + 2 * (size_t)nlocal * slot;
}

static struct shm_ring *shm_ring_at(struct shm_dev *d, int from, int to) {
  size_t rings_at, ctl_at;
  shm_layout(d->hdr->nlocal, d->hdr->ring_size, d->hdr->slot_size, &rings_at, &ctl_at);
  size_t i = (size_t)from * (size_t)d->nlocal + (size_t)to;
  return (struct shm_ring *)(d->base + rings_at + i * (SHM_RING_CTL + d->hdr->ring_size));
}

static int shm_create(comm_t *c, struct shm_dev *d, int *fd_out) {
  /* Slots only serve a communicator whose ranks are all on this host. */
  uint64_t ring = 4096, slot = d->nlocal == c->world ? (uint64_t)c->t.shm_slot : 0;
  while (ring * 2 <= (uint64_t)c->t.shm_ring) ring *= 2;
  size_t rings_at, ctl_at, total = shm_layout((uint32_t)d->nlocal, ring, slot, &rings_at, &ctl_at);
  unsigned char rnd[8];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
    return comm__fail(c, LOOM_EIO, "rank %d: getrandom failed", c->rank);
  snprintf(d->name, sizeof d->name, "/loom-comm-%d-%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0],
           rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
  int fd = shm_open(d->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return comm__fail(c, LOOM_EIO, "rank %d: shm_open(%s): %s", c->rank, d->name, strerror(errno));
  *fd_out = fd;
  /* Reserve the memory now: a full /dev/shm then fails here, cleanly,
   * instead of with SIGBUS in the middle of a collective. */
  int err = ftruncate(fd, (off_t)total) < 0 ? errno : posix_fallocate(fd, 0, (off_t)total);
  if (err)
    return comm__fail(c, LOOM_ERESOURCE,
                      "rank %d: cannot reserve %zu bytes of shared memory "
                      "(%s); lower LOOM_COMM_SHM_RING or LOOM_COMM_SHM_SLOT, or grow "
                      "/dev/shm",
                      c->rank, total, strerror(err));
  int mrc = shm_map(c, d, fd, total);
  if (mrc < 0) return mrc;
  d->hdr->nlocal = (uint32_t)d->nlocal;
  d->hdr->ring_size = ring;
  d->hdr->slot_size = slot;
  d->hdr->small_bytes = (uint64_t)c->t.shm_small_bytes;
  d->hdr->total = total;
  atomic_store(&d->hdr->magic, SHM_MAGIC); /* fresh pages are zero */
  char key[LOOM_KV_MAX_KEY + 1];
  snprintf(key, sizeof key, "%s/shm/%d", c->prefix, c->rank);
  int rc = c->store->ops->set(c->store, key, d->name, strlen(d->name));
  if (rc < 0) return comm__fail(c, rc, "rank %d: cannot publish the shm segment", c->rank);
  return 0;
}

static int shm_open_peer(comm_t *c, struct shm_dev *d, int *fd_out) {
  int leader = d->ranks[0];
  char key[LOOM_KV_MAX_KEY + 1];
  snprintf(key, sizeof key, "%s/shm/%d", c->prefix, leader);
  void *val = NULL;
  size_t len = 0;
  int rc = c->store->ops->get(c->store, key, (int)c->t.timeout_ms, &val, &len);
  if (rc < 0)
    return comm__fail(c, rc,
                      "rank %d: no shared memory segment from rank %d "
                      "(its host peer): %s",
                      c->rank, leader, loom_strerror(rc));
  if (len == 0 || len >= sizeof d->name || ((char *)val)[0] != '/' ||
      memchr(val, '/', len) != val || memchr(val + 1, '/', len - 1)) {
    free(val);
    return comm__fail(c, LOOM_EPROTO, "rank %d: bad shm segment name", c->rank);
  }
  memcpy(d->name, val, len);
  d->name[len] = 0;
  free(val);
  int fd = shm_open(d->name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    return comm__fail(c, LOOM_EPEER, "rank %d: shm_open(%s): %s", c->rank, d->name,
                      strerror(errno));
  *fd_out = fd;
  struct stat st;
  if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(struct shm_hdr))
    return comm__fail(c, LOOM_EPROTO, "rank %d: shm segment too small", c->rank);
  size_t total = (size_t)st.st_size;
  int mrc = shm_map(c, d, fd, total);
  if (mrc < 0) return mrc;
  size_t rings_at, ctl_at;
  uint64_t ring = d->hdr->ring_size, slot = d->hdr->slot_size;
  if (d->hdr->magic != SHM_MAGIC || d->hdr->nlocal != (uint32_t)d->nlocal || ring < 4096 ||
      (ring & (ring - 1)) || ring > (1ull << 32) || slot % 4096 || slot > (1ull << 32) ||
      shm_layout(d->hdr->nlocal, ring, slot, &rings_at, &ctl_at) != total)
    return comm__fail(c, LOOM_EPROTO,
                      "rank %d: shm segment %s does not match this "
                      "communicator",
                      c->rank, d->name);
  return 0;
}

static int shm_setup(comm_t *c, const int *peers, int n) {
  struct shm_dev *d = calloc(1, sizeof *d);
  if (!d) return comm__fail(c, LOOM_ENOMEM, "out of memory");
  c->shm = d;
  d->c = c;
  d->nlocal = n + 1;
  d->ranks = calloc((size_t)d->nlocal, sizeof *d->ranks);
  d->pidfd = calloc((size_t)d->nlocal, sizeof *d->pidfd);
  d->lidx = calloc((size_t)c->world, sizeof *d->lidx);
  d->links = calloc((size_t)d->nlocal, sizeof *d->links);
  d->xs = calloc((size_t)d->nlocal, sizeof *d->xs);
  if (!d->ranks || !d->pidfd || !d->lidx || !d->links || !d->xs)
    return comm__fail(c, LOOM_ENOMEM, "out of memory");
  /* Local indices in rank order; peers[] is sorted by the caller. */
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (k == i && peers[i] > c->rank) d->ranks[k++] = c->rank;
    d->ranks[k++] = peers[i];
  }
  if (k == n) d->ranks[k++] = c->rank;
  for (int i = 0; i < c->world; i++) d->lidx[i] = -1;
  for (int i = 0; i < d->nlocal; i++) {
    d->lidx[d->ranks[i]] = i;
    d->pidfd[i] = -1;
    if (d->ranks[i] == c->rank) d->me = i;
  }
  int fd = -1, rc;
  rc = d->me == 0 ? shm_create(c, d, &fd) : shm_open_peer(c, d, &fd);
  if (fd >= 0) close(fd);
  if (rc < 0) return rc;
  d->slots = (struct shm_slot *)(d->base + SHM_HDR_BYTES);
  d->mask = d->hdr->ring_size - 1;
  d->chunk = (uint64_t)c->t.shm_chunk;
  size_t rings_at, ctl_at;
  shm_layout(d->hdr->nlocal, d->hdr->ring_size, d->hdr->slot_size, &rings_at, &ctl_at);
  d->slot_size = d->hdr->slot_size;
  d->small_bytes = d->hdr->small_bytes;
  d->ctl = (struct shm_ctl *)(d->base + ctl_at);
  d->slots_base =
      d->base + ctl_at + (((size_t)d->nlocal * sizeof(struct shm_ctl) + 4095) & ~(size_t)4095);
  d->slots[d->me].rank = c->rank;
  atomic_store(&d->slots[d->me].state, SLOT_LIVE);
  if (atomic_fetch_add(&d->hdr->mapped, 1) + 1 == (uint32_t)d->nlocal) {
    shm_unlink(d->name);
    d->unlinked = 1;
  }
  for (int i = 0; i < d->nlocal; i++) {
    if (i == d->me) continue;
    struct shm_link *lk = &d->links[i];
    lk->d = d;
    lk->li = i;
    lk->out = shm_ring_at(d, d->me, i);
    lk->in = shm_ring_at(d, i, d->me);
    lk->out_data = (char *)lk->out + SHM_RING_CTL;
    lk->in_data = (char *)lk->in + SHM_RING_CTL;
    int r = d->ranks[i];
    c->pairs[r].tp = &comm__shm_transport;
    c->pairs[r].peer = r;
    c->pairs[r].impl = lk;
#ifdef SYS_pidfd_open
    if (c->pids[r] > 0) d->pidfd[i] = (int)syscall(SYS_pidfd_open, (pid_t)c->pids[r], 0);
#endif
  }
  return 0;
}

static void shm_teardown(comm_t *c) {
  struct shm_dev *d = c->shm;
  if (!d) return;
  if (d->base) {
    if (d->slots) atomic_store(&d->slots[d->me].state, SLOT_LEFT);
    /* A peer that never mapped it: nobody else will unlink it. */
    if (!d->unlinked && d->name[0]) shm_unlink(d->name);
    munmap(d->base, d->size);
  } else if (d->me == 0 && d->name[0]) {
    shm_unlink(d->name);
  }
  for (int i = 0; d->pidfd && i < d->nlocal; i++)
    if (d->pidfd[i] >= 0) close(d->pidfd[i]);
  free(d->ranks);
  free(d->pidfd);
  free(d->lidx);
  free(d->links);
  free(d->xs);
  free(d);
  c->shm = NULL;
}

static int shm_send(comm_pair *p, const void *buf, size_t len, size_t upto, size_t *done) {
  struct shm_link *lk = p->impl;
  struct shm_dev *d = lk->d;
  uint64_t size = d->mask + 1;
  uint64_t head = atomic_load_explicit(&lk->out->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&lk->out->tail, memory_order_acquire);
  uint64_t space = size - (head - tail), pos = head & d->mask;
  uint64_t n = upto - *done;
  if (n > space) n = space;
  if (n > size - pos) n = size - pos;
  if (n > d->chunk) n = d->chunk;
  int last = *done + n == len;
  if (!last) n &= ~(uint64_t)7;
  if (n == 0) return 0;
  memcpy(lk->out_data + pos, (const char *)buf + *done, n);
  *done += n;
  atomic_store_explicit(&lk->out->head, head + (last ? (n + 7) & ~7ull : n), memory_order_release);
  shm_ring_bell(&d->slots[lk->li]);
  return 0;
}

static int shm_recv(comm_pair *p, size_t len, size_t *done, const struct comm_sink *sink) {
  struct shm_link *lk = p->impl;
  struct shm_dev *d = lk->d;
  uint64_t size = d->mask + 1;
  uint64_t tail = atomic_load_explicit(&lk->in->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&lk->in->head, memory_order_acquire);
  uint64_t avail = head - tail, pos = tail & d->mask;
  if (avail > size)
    return comm__fail(d->c, LOOM_EPROTO,
                      "rank %d: corrupt shm ring from "
                      "rank %d",
                      d->c->rank, p->peer);
  uint64_t n = len - *done;
  if (n > avail) n = avail;
  if (n > size - pos) n = size - pos;
  if (n > d->chunk) n = d->chunk;
  int last = *done + n == len;
  if (!last) n &= ~(uint64_t)7;
  if (n == 0) return 0;
  const char *src = lk->in_data + pos;
  if (sink->direct)
    memcpy((char *)sink->direct + *done, src, n);
  else
    sink->fn(sink->arg, src, *done, n);
  *done += n;
  atomic_store_explicit(&lk->in->tail, tail + (last ? (n + 7) & ~7ull : n), memory_order_release);
  shm_ring_bell(&d->slots[lk->li]);
  return 0;
}

static void shm_want(comm_pair *p, int dir, struct comm_waitset *ws) {
  (void)dir;
  ws->bell = 1;
  if (ws->npeers < (int)(sizeof ws->peers / sizeof ws->peers[0])) ws->peers[ws->npeers++] = p->peer;
}

/* Whether process pid has ended (zombies included). */
static int shm_pid_dead(int pidfd, int pid) {
  if (pidfd >= 0) {
    struct pollfd pf = {.fd = pidfd, .events = POLLIN};
    return poll(&pf, 1, 0) > 0;
  }
  if (pid <= 0) return 0;
  if (kill(pid, 0) < 0 && errno == ESRCH) return 1;
  char st = loom__proc_state(pid);
  return st == 'Z' || st == 'X';
}

static int shm_check(comm_t *c, int full, const struct comm_waitset *ws) {
  struct shm_dev *d = c->shm;
  int code = atomic_load_explicit(&d->hdr->poison, memory_order_acquire);
  if (code < 0 && !c->err)
    return comm__fail(c, code, "%.200s (reported by rank %d)", d->hdr->poison_msg,
                      d->hdr->poison_by);
  if (!full) return 0;
  for (int i = 0; i < ws->npeers; i++) {
    int r = ws->peers[i], li = r >= 0 && r < c->world ? d->lidx[r] : -1;
    if (li < 0) continue;
    int left = atomic_load(&d->slots[li].state) == SLOT_LEFT;
    if (!left && !shm_pid_dead(d->pidfd[li], c->pids[r])) continue;
    /* A peer that published its last bytes and then left looks the same
     * as one that left in the middle, until the caller looks again: the
     * first time, only say so (the engine re-tests at once); if nothing
     * moved since, the peer is really missing. */
    if (!c->gone_seen) {
      c->gone_seen = 1;
      return 0;
    }
    if (left)
      return comm__fail(c, LOOM_EPEER,
                        "rank %d left the communicator while rank %d "
                        "waited for it",
                        r, c->rank);
    return comm__fail(c, LOOM_EPEER, "rank %d (pid %d, on this host) died", r, c->pids[r]);
  }
  return 0;
}

static void shm_poison(comm_t *c) {
  struct shm_dev *d = c->shm;
  if (!d || !d->slots) return;
  int32_t zero = 0;
  /* The message goes in before the code that makes it visible; a second
   * failing rank leaves the first one's story alone. */
  if (atomic_load(&d->hdr->poison) == 0) {
    snprintf(d->hdr->poison_msg, sizeof d->hdr->poison_msg, "%s", c->errmsg);
    d->hdr->poison_by = c->rank;
    atomic_compare_exchange_strong(&d->hdr->poison, &zero, c->err);
  }
  for (int i = 0; i < d->nlocal; i++)
    if (i != d->me) shm_ring_bell(&d->slots[i]);
}

/* ---- collectives through the slots ----------------------------------
 *
 * When every rank of the communicator is on this host, allreduce and
 * barrier skip the pairs: each rank owns two slots in the segment and a
 * control line (struct shm_ctl). A collective is a sequence of rounds; in
 * round k a rank writes slot k % 2 and publishes arrive = k + 1. Before
 * anyone reads a peer's slot of round k it waits for that peer's arrive, so
 * by the time a rank starts round k + 2 (and overwrites the slot of round
 * k) every peer has arrived at round k + 1, which it does only after it has
 * finished reading round k. Double buffering therefore costs no extra
 * waiting, and a fast rank runs up to one round ahead.
 *
 * allreduce, small (<= small_bytes): copy the vector into the slot, arrive,
 * then every rank reduces all slots itself, in rank order, so that all get
 * the same bits. One synchronization per call.
 * allreduce, large: the vector goes in chunks of one slot. Each rank copies
 * its chunk in (all but its own slice j = its local index), arrives,
 * reduces slice j of every slot (its own from its input) into its slot,
 * publishes reduced, and copies the other slices' results out of their
 * owners' slots as they are published. Per rank that moves about 4(n-1)/n
 * + 1 + 2/n times the bytes, against 9(n-1)/n for the ring over the pairs:
 * on a host whose cores are shared by several ranks that is the time.
 * barrier: a round without data. broadcast, allgather and reduce-scatter:
 * below, each a round per chunk. */

static int shm_coll_ok(const comm_t *c) {
  const struct shm_dev *d = c->shm;
  /* reduce-scatter splits a slot into nlocal regions of whole elements */
  return d && d->nlocal == c->world && d->slot_size > 0 && d->slot_size / (uint64_t)d->nlocal >= 64;
}

static char *shm_slot_at(struct shm_dev *d, uint64_t round, int li) {
  return d->slots_base + ((size_t)(round & 1) * (size_t)d->nlocal + (size_t)li) * d->slot_size;
}

/* Publishes *field = v for this rank and rings every peer. */
static void shm_publish(struct shm_dev *d, _Atomic uint64_t *field, uint64_t v) {
  atomic_store_explicit(field, v, memory_order_release);
  for (int i = 0; i < d->nlocal; i++)
    if (i != d->me) shm_ring_bell(&d->slots[i]);
}

static int shm_wait_arrive(comm_t *c, struct shm_dev *d, int li, uint64_t k) {
  return comm__wait_counter(c, &d->ctl[li].arrive, k + 1, d->ranks[li]);
}

/* dst = x[0] op x[1] op ... op x[n-1] (n >= 2) over cnt elements, in rank
 * order, a block at a time so that dst stays in the L1 cache between the
 * passes. dst may be x[0] but must not otherwise overlap. */
#define SHM_REDUCE_BLOCK 8192
/* dst may be x[k] (a lent buffer reduced in place): for k > 0 each block
 * of it is first copied aside, since the sum, in rank order, overwrites
 * dst before it reaches x[k]. */
static void shm_reduce_n(loom_dtype dt, loom_op op, char *dst, const char *const *x, int n,
                         size_t cnt) {
  size_t es = comm_dtype_size(dt), per = SHM_REDUCE_BLOCK / es;
  _Alignas(64) char aside[SHM_REDUCE_BLOCK];
  int k = 0;
  for (int i = 1; i < n; i++)
    if (x[i] == dst) k = i;
  for (size_t at = 0; at < cnt; at += per) {
    size_t m = cnt - at < per ? cnt - at : per, off = at * es;
    if (k) memcpy(aside, x[k] + off, m * es);
#define SHM_X(i) ((i) == k && k ? (const char *)aside : x[i] + off)
    comm_reduce(dt, op, dst + off, SHM_X(0), SHM_X(1), m);
    for (int i = 2; i < n; i++) comm_reduce(dt, op, dst + off, dst + off, SHM_X(i), m);
#undef SHM_X
  }
}

/* Waits until every peer has arrived at round k. */
static int shm_wait_all(comm_t *c, struct shm_dev *d, uint64_t k) {
  for (int i = 1; i < d->nlocal; i++) {
    int rc = shm_wait_arrive(c, d, (d->me + i) % d->nlocal, k);
    if (rc < 0) return rc;
  }
  return 0;
}

/* Starts a round: its number. Before a rank writes its slot of round k it
 * needs every peer past round k - 2 (arrived at k - 1); after a round that
 * waited for everyone that already holds, after a broadcast it may not. */
static int shm_round(comm_t *c, struct shm_dev *d, uint64_t *k) {
  *k = d->round++;
  d->lent = 0; /* a lent slot serves only the round it was lent for */
  return *k > 0 ? shm_wait_all(c, d, *k - 1) : 0;
}

/* send is this rank's slot of the next round: it must have been lent for
 * it (loom_allreduce_buffer, with no collective since), as the next round
 * is about to read it in place. */
static int shm_check_lent(comm_t *c, struct shm_dev *d, const void *send) {
  bool slot =
      send == shm_slot_at(d, d->round, d->me) || send == shm_slot_at(d, d->round + 1, d->me);
  if (!slot || (send == shm_slot_at(d, d->round, d->me) && d->lent == d->round + 1)) return 0;
  /* an argument error, as comm__check_reduce's: refused before the round,
   * nothing sent, the communicator usable */
  if (!c->err)
    snprintf(c->errmsg, sizeof c->errmsg,
             "invalid argument: the buffer from loom_allreduce_buffer was lent for an earlier "
             "collective (none may run between the two calls)");
  return LOOM_EINVAL;
}

/* loom_allreduce_buffer: this rank's slot of the next round, where the
 * caller writes the vector that the next allreduce sends, saving its copy
 * into the slot. Free once every peer has arrived at the round before
 * (past the last round that read it). */
static void *shm_allreduce_buffer(comm_t *c, size_t count, loom_dtype dt) {
  struct shm_dev *d = c->shm;
  size_t bytes = count * comm_dtype_size(dt);
  if (!bytes || bytes > d->slot_size) return NULL;
  if (d->round > 0 && shm_wait_all(c, d, d->round - 1) < 0) return NULL;
  d->lent = d->round + 1;
  return shm_slot_at(d, d->round, d->me);
}

static int shm_barrier(comm_t *c) {
  struct shm_dev *d = c->shm;
  uint64_t k = d->round++;
  shm_publish(d, &d->ctl[d->me].arrive, k + 1);
  return shm_wait_all(c, d, k);
}

/* Small: every rank reduces every slot, in rank order. */
static int shm_allreduce_all(comm_t *c, struct shm_dev *d, const void *send, void *recv,
                             size_t count, loom_dtype dt, loom_op op) {
  size_t bytes = count * comm_dtype_size(dt);
  const char **x = d->xs;
  uint64_t k;
  int rc = shm_round(c, d, &k);
  if (rc < 0) return rc;
  if (send != shm_slot_at(d, k, d->me)) memcpy(shm_slot_at(d, k, d->me), send, bytes);
  shm_publish(d, &d->ctl[d->me].arrive, k + 1);
  if ((rc = shm_wait_all(c, d, k)) < 0) return rc;
  for (int i = 0; i < d->nlocal; i++) x[i] = shm_slot_at(d, k, i);
  shm_reduce_n(dt, op, recv, x, d->nlocal, count);
  if (op == LOOM_AVG) comm_scale(dt, recv, count, d->nlocal);
  return 0;
}

/* Large: per chunk, each rank reduces its slice and gathers the others.
 * With fn (comm_allreduce_apply; count fits one slot), each slice goes
 * to fn from its slot instead of being copied into recv, once every slice
 * is reduced: after the last wait, so that a failure hands over nothing. */
static int shm_allreduce_slices(comm_t *c, struct shm_dev *d, const char *send, char *recv,
                                size_t count, loom_dtype dt, loom_op op, loom_apply_fn fn,
                                void *arg) {
  size_t es = comm_dtype_size(dt), per = d->slot_size / es;
  int n = d->nlocal, me = d->me, rc;
  const char **x = d->xs;
  for (size_t at = 0; at < count; at += per) {
    size_t cnt = count - at < per ? count - at : per;
    const char *in = send + at * es;
    char *out = fn ? NULL : recv + at * es;
    uint64_t k;
    if ((rc = shm_round(c, d, &k)) < 0) return rc;
    char *mine = shm_slot_at(d, k, me);
    size_t so = comm__block_off(cnt, n, me) * es;
    size_t sl = comm__block_len(cnt, n, me) * es;
    /* In: everything but my own slice, which only I read (nothing when
     * the caller wrote it here: a lent buffer). */
    if (in != mine) {
      memcpy(mine, in, so);
      memcpy(mine + so + sl, in + so + sl, cnt * es - so - sl);
    }
    shm_publish(d, &d->ctl[me].arrive, k + 1);
    /* Reduce my slice of every slot into mine, in rank order. */
    if ((rc = shm_wait_all(c, d, k)) < 0) return rc;
    for (int i = 0; i < n; i++) x[i] = i == me ? in + so : shm_slot_at(d, k, i) + so;
    shm_reduce_n(dt, op, mine + so, x, n, sl / es);
    if (op == LOOM_AVG) comm_scale(dt, mine + so, sl / es, n);
    shm_publish(d, &d->ctl[me].reduced, k + 1);
    if (!fn && out + so != mine + so) memcpy(out + so, mine + so, sl);
    /* Out: the other slices, from their owners' slots. */
    for (int j = 1; j < n; j++) {
      int o = (me + j) % n;
      rc = comm__wait_counter(c, &d->ctl[o].reduced, k + 1, d->ranks[o]);
      if (rc < 0) return rc;
      size_t oo = comm__block_off(cnt, n, o) * es, ol = comm__block_len(cnt, n, o);
      if (!fn && out + oo != shm_slot_at(d, k, o) + oo)
        memcpy(out + oo, shm_slot_at(d, k, o) + oo, ol * es);
    }
    /* Every slice is reduced and stays in its slot until this rank starts
     * the round after next: hand them all over. */
    for (int j = 0; fn && j < n; j++) {
      int o = (me + j) % n;
      size_t oo = comm__block_off(cnt, n, o) * es, ol = comm__block_len(cnt, n, o);
      fn(arg, at + oo / es, shm_slot_at(d, k, o) + oo, ol);
    }
  }
  return 0;
}

static int shm_allreduce(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                         loom_op op) {
  struct shm_dev *d = c->shm;
  size_t bytes = count * comm_dtype_size(dt);
  int rc = shm_check_lent(c, d, send);
  if (rc < 0) return rc;
  /* the small path sums into recv while peers still read every slot: not
   * into a lent slot (in place); the slices path writes a slot's parts
   * only once their readers are done */
  const char *slot = shm_slot_at(d, d->round, d->me);
  bool into_slot = (const char *)recv < slot + d->slot_size && slot < (const char *)recv + bytes;
  if (bytes <= d->small_bytes && bytes <= d->slot_size && !into_slot)
    return shm_allreduce_all(c, d, send, recv, count, dt, op);
  return shm_allreduce_slices(c, d, send, recv, count, dt, op, NULL, NULL);
}

/* A vector that fits a slot: each slice handed over from the slot it was
 * reduced into (small ones reduced whole into scratch). Larger ones take
 * several rounds, and a slot is reused two rounds later: reduced into a
 * buffer, then handed over whole. Either way fn runs after the last wait. */
static int shm_allreduce_apply(comm_t *c, const void *send, size_t count, loom_dtype dt, loom_op op,
                               loom_apply_fn fn, void *arg) {
  struct shm_dev *d = c->shm;
  size_t bytes = count * comm_dtype_size(dt);
  int lrc = shm_check_lent(c, d, send);
  if (lrc < 0) return lrc;
  if (bytes <= d->slot_size && bytes > d->small_bytes)
    return shm_allreduce_slices(c, d, send, NULL, count, dt, op, fn, arg);
  void *out = comm__scratch(c, bytes);
  if (!out) return comm__fail(c, LOOM_ENOMEM, "out of memory");
  int rc = bytes <= d->small_bytes && bytes <= d->slot_size
               ? shm_allreduce_all(c, d, send, out, count, dt, op)
               : shm_allreduce_slices(c, d, send, out, count, dt, op, NULL, NULL);
  if (rc == 0) fn(arg, 0, out, count);
  return rc;
}

/* broadcast: per slot-sized chunk, the root copies in and arrives; the
 * others arrive at once (they are done with the round before) and copy out
 * once the root has. */
static int shm_broadcast(comm_t *c, void *buf, size_t bytes, int root) {
  struct shm_dev *d = c->shm;
  int rl = d->lidx[root], rc;
  for (size_t at = 0; at < bytes; at += d->slot_size) {
    size_t len = bytes - at < d->slot_size ? bytes - at : d->slot_size;
    uint64_t k;
    if ((rc = shm_round(c, d, &k)) < 0) return rc;
    if (d->me == rl) memcpy(shm_slot_at(d, k, rl), (char *)buf + at, len);
    shm_publish(d, &d->ctl[d->me].arrive, k + 1);
    if (d->me == rl) continue;
    if ((rc = shm_wait_arrive(c, d, rl, k)) < 0) return rc;
    memcpy((char *)buf + at, shm_slot_at(d, k, rl), len);
  }
  return 0;
}

/* allgather: per chunk, everyone copies its piece in, arrives, and copies
 * the others' out as they arrive. */
static int shm_allgather(comm_t *c, const void *send, void *recv, size_t bytes) {
  struct shm_dev *d = c->shm;
  int n = d->nlocal, me = d->me, rc;
  char *rb = recv;
  for (size_t at = 0; at < bytes; at += d->slot_size) {
    size_t len = bytes - at < d->slot_size ? bytes - at : d->slot_size;
    uint64_t k;
    if ((rc = shm_round(c, d, &k)) < 0) return rc;
    memcpy(shm_slot_at(d, k, me), (const char *)send + at, len);
    shm_publish(d, &d->ctl[me].arrive, k + 1);
    for (int j = 1; j < n; j++) {
      int o = (me + j) % n;
      if ((rc = shm_wait_arrive(c, d, o, k)) < 0) return rc;
      memcpy(rb + (size_t)o * bytes + at, shm_slot_at(d, k, o), len);
    }
  }
  if ((const char *)send != rb + (size_t)me * bytes) memmove(rb + (size_t)me * bytes, send, bytes);
  return 0;
}

/* reduce-scatter: a slot holds one region per rank; in round t each rank
 * copies piece t of every block but its own into the regions, arrives,
 * and reduces piece t of its own block from every slot (its own from its
 * input), in rank order. If recv overlaps send, the result goes through
 * scratch and is copied at the end. */
static int shm_reduce_scatter(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                              loom_op op) {
  struct shm_dev *d = c->shm;
  int n = d->nlocal, me = d->me, rc;
  size_t es = comm_dtype_size(dt);
  size_t per = d->slot_size / (size_t)n / es, region = per * es;
  const char *sb = send;
  size_t mine = comm__block_len(count, n, me);
  size_t moff = comm__block_off(count, n, me);
  size_t most = comm__block_len(count, n, 0); /* the first block is longest */
  char *out = recv;
  int overlap = mine > 0 && out < sb + count * es && sb < out + mine * es;
  if (overlap && !(out = comm__scratch(c, mine * es)))
    return comm__fail(c, LOOM_ENOMEM, "out of memory");
  const char **x = d->xs;
  for (size_t t = 0; t < most; t += per) {
    uint64_t k;
    if ((rc = shm_round(c, d, &k)) < 0) return rc;
    char *slot = shm_slot_at(d, k, me);
    for (int j = 0; j < n; j++) {
      size_t jl = comm__block_len(count, n, j);
      if (j == me || t >= jl) continue;
      size_t m = jl - t < per ? jl - t : per;
      memcpy(slot + (size_t)j * region, sb + (comm__block_off(count, n, j) + t) * es, m * es);
    }
    shm_publish(d, &d->ctl[me].arrive, k + 1);
    if ((rc = shm_wait_all(c, d, k)) < 0) return rc;
    size_t m = mine > t ? (mine - t < per ? mine - t : per) : 0;
    for (int i = 0; i < n; i++)
      x[i] = i == me ? sb + (moff + t) * es : shm_slot_at(d, k, i) + (size_t)me * region;
    char *dst = slot + (size_t)me * region;
    shm_reduce_n(dt, op, dst, x, n, m);
    if (op == LOOM_AVG) comm_scale(dt, dst, m, n);
    memcpy(out + t * es, dst, m * es);
  }
  if (overlap) memmove(recv, out, mine * es);
  return 0;
}

const struct comm_transport comm__shm_transport = {
    .name = "shm",
    .setup = shm_setup,
    .teardown = shm_teardown,
    .send = shm_send,
    .recv = shm_recv,
    .want = shm_want,
    .check = shm_check,
    .poison = shm_poison,
    .coll_ok = shm_coll_ok,
    .allreduce = shm_allreduce,
    .allreduce_apply = shm_allreduce_apply,
    .allreduce_buffer = shm_allreduce_buffer,
    .barrier = shm_barrier,
    .broadcast = shm_broadcast,
    .allgather = shm_allgather,
    .reduce_scatter = shm_reduce_scatter,
};
