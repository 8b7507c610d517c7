/* comm.c: the communicator (creation from a store, per-pair choice of
 * transport, teardown) and the public loom_* collectives, which create one
 * communicator per handle on first use over the coordinator's KV store.
 *
 * Keys of one communicator live under its prefix. The public path takes
 * the prefix from a join counter in the KV store ("comm/join"): the k-th
 * communicator created by a job's ranks gets generation (k-1) / world, so
 * a re-created communicator never reads its predecessor's keys. */
#include "comm/comm.h"
#include "lib/lib.h"
#include "loom/comm.h"

#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *comm_errmsg(const comm_t *c) { return c ? c->errmsg : ""; }

/* This machine's identity: its boot id, the same in every network
 * namespace and container of one kernel ("-" when it cannot be read). */
static void machine_id(char *out, size_t cap) {
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  size_t n = f && fgets(out, (int)cap, f) ? strcspn(out, " \n") : 0;
  if (f) fclose(f);
  if (n == 0) snprintf(out, cap, "-");
  out[n ? n : 1] = 0;
}

/* Publishes "<pid> <host> <machine>" and reads every rank's: the hosts
 * say who shares memory, the machines who shares CPUs (hosts that are
 * namespaces of one machine share its CPUs). */
static int comm_publish_hosts(comm_t *c) {
  char key[LOOM_KV_MAX_KEY + 1], val[400], me[64];
  machine_id(me, sizeof me);
  snprintf(key, sizeof key, "%s/host/%d", c->prefix, c->rank);
  int n = snprintf(val, sizeof val, "%d %s %s", (int)getpid(), c->host, me);
  int rc = c->store->ops->set(c->store, key, val, (size_t)n);
  if (rc < 0)
    return comm__fail(c, rc, "rank %d: cannot publish its address: %s", c->rank, loom_strerror(rc));
  for (int r = 0; r < c->world; r++) {
    void *v = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "%s/host/%d", c->prefix, r);
    /* wait in slices: a newer elastic generation makes this one moot */
    for (;;) {
      int64_t now = (int64_t)comm__now_ns(), left = ((int64_t)c->deadline_ns - now) / 1000000;
      int slice = c->latest_gen ? 200 : (int)(left < 0 ? 0 : left);
      if (left < slice) slice = left < 0 ? 0 : (int)left;
      rc = c->store->ops->get(c->store, key, slice, &v, &len);
      if (rc != LOOM_ETIMEDOUT || left <= slice) break;
      if (c->latest_gen && __atomic_load_n(c->latest_gen, __ATOMIC_ACQUIRE) > c->gen)
        return comm__fail(c, LOOM_ECHANGED,
                          "rank %d: the job's membership changed while "
                          "forming generation %lld: call loom_comm_reform()",
                          c->rank, (long long)c->gen);
    }
    if (rc < 0)
      return comm__fail(c, rc,
                        "rank %d: rank %d never joined the "
                        "communicator (%s)",
                        c->rank, r, loom_strerror(rc));
    /* "<pid> <host> <machine>", from a peer: check it all. */
    char *sp = len < 400 ? memchr(v, ' ', len) : NULL, *end = NULL;
    char *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
    long pid = sp ? strtol(v, &end, 10) : -1;
    if (sp2) *sp2 = 0;
    if (!sp || !sp2 || end != sp || pid <= 0 || sp[1] == 0 || sp2[1] == 0 || strchr(sp2 + 1, ' ') ||
        !(c->hosts[r] = strdup(sp + 1))) {
      free(v);
      return comm__fail(c, LOOM_EPROTO,
                        "rank %d: bad address record from "
                        "rank %d",
                        c->rank, r);
    }
    c->pids[r] = (int)pid;
    c->same_machine += r != c->rank && strcmp(sp2 + 1, me) == 0;
    free(v);
  }
  return 0;
}

int comm_create(comm_store *store, const char *prefix, int rank, int world, const char *host,
                int abort_fd, comm_t **out, char *errmsg, size_t errlen) {
  return comm_create_gen(store, prefix, rank, world, host, abort_fd, NULL, 0, out, errmsg, errlen);
}

int comm_create_gen(comm_store *store, const char *prefix, int rank, int world, const char *host,
                    int abort_fd, const int64_t *latest_gen, int64_t gen, comm_t **out,
                    char *errmsg, size_t errlen) {
  if (errmsg && errlen) errmsg[0] = 0;
  if (!store || !prefix || !host || !out || world < 1 || rank < 0 || rank >= world ||
      strlen(prefix) >= 64 || !*host || strlen(host) >= 256 || strchr(host, ' '))
    return LOOM_EINVAL;
  *out = NULL;
  comm_t *c = calloc(1, sizeof *c);
  if (!c) return LOOM_ENOMEM;
  c->rank = rank;
  c->world = world;
  c->store = store;
  c->abort_fd = abort_fd;
  c->latest_gen = latest_gen;
  c->gen = gen;
  strcpy(c->prefix, prefix);
  strcpy(c->host, host);
  comm_tunables_load(&c->t);
  /* a transport that does not exist is an error, not a warning */
  const char *mode = loom__tun_env(LOOM_TUN_COMM_TRANSPORT);
  int rc = 0;
  if (mode && loom__tun_check(LOOM_TUN_COMM_TRANSPORT, mode, NULL, NULL, 0) < 0)
    rc = comm__fail(c, LOOM_EINVAL, "%s=%s: use auto, shm or tcp",
                    loom__tun_info_of(LOOM_TUN_COMM_TRANSPORT)->env, mode);
  else if (mode && strcmp(mode, "tcp") == 0)
    c->mode = COMM_TP_TCP;
  c->pairs = calloc((size_t)world, sizeof *c->pairs);
  c->hosts = calloc((size_t)world, sizeof *c->hosts);
  c->pids = calloc((size_t)world, sizeof *c->pids);
  int *local = calloc((size_t)world, sizeof *local);
  int *remote = calloc((size_t)world, sizeof *remote);
  if (!rc && (!c->pairs || !c->hosts || !c->pids || !local || !remote))
    rc = comm__fail(c, LOOM_ENOMEM, "out of memory");
  comm__begin(c);
  if (!rc && world > 1) rc = comm_publish_hosts(c);
  int nl = 0, nr = 0, nhost = 1;
  for (int r = 0; !rc && r < world; r++) {
    if (r == rank) continue;
    nhost += strcmp(c->hosts[r], host) == 0;
    if (c->mode != COMM_TP_TCP && strcmp(c->hosts[r], host) == 0)
      local[nl++] = r;
    else
      remote[nr++] = r;
  }
  if (!rc && nl > 0) rc = comm__shm_transport.setup(c, local, nl);
  if (!rc && nr > 0) rc = comm__tcp_transport.setup(c, remote, nr);
  if (!rc && nl > 0 && nr == 0 && comm__shm_transport.coll_ok && comm__shm_transport.coll_ok(c))
    c->native = &comm__shm_transport;
  free(local);
  free(remote);
  cpu_set_t cpus;
  int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus)
                                                           : (int)sysconf(_SC_NPROCESSORS_ONLN);
  /* ranks on this machine, whatever their hosts (namespaces) */
  int nmachine = c->same_machine + 1 > nhost ? c->same_machine + 1 : nhost;
  c->oversub = nmachine > ncpu;
  if (c->t.spin < 0) c->t.spin = c->oversub ? 50 : 2000;
  if (rc < 0) {
    if (errmsg && errlen) snprintf(errmsg, errlen, "%s", c->errmsg);
    comm_destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

const char *comm_transport_of(const comm_t *c, int peer) {
  if (!c || peer < 0 || peer >= c->world) return NULL;
  if (peer == c->rank) return "self";
  return c->pairs[peer].tp ? c->pairs[peer].tp->name : NULL;
}

void comm_destroy(comm_t *c) {
  if (!c) return;
  comm__shm_transport.teardown(c);
  comm__tcp_transport.teardown(c);
  for (int r = 0; c->hosts && r < c->world; r++) free(c->hosts[r]);
  free(c->hosts);
  free(c->pids);
  free(c->pairs);
  free(c->tmp);
  free(c->apply_out);
  free(c);
}

/* ---- the public API ------------------------------------------------- */

/* What hangs in the handle's comm slot. */
struct comm_state {
  pthread_mutex_t mu; /* one collective at a time on a handle */
  comm_store *store;
  comm_t *c;
  int err; /* creation failed: every call returns this */
  char errmsg[256];
};

static pthread_mutex_t comm_create_mu = PTHREAD_MUTEX_INITIALIZER;

static int comm_state_get(loom_t *l, struct comm_state **out) {
  if (!l) return LOOM_EINVAL;
  void **slot = loom__comm_slot(l);
  pthread_mutex_lock(&comm_create_mu);
  struct comm_state *s = *slot;
  int rc = 0;
  if (!s) {
    int rank = loom_rank(l), world = loom_world_size(l);
    if (rank < 0 || world < 1) {
      pthread_mutex_unlock(&comm_create_mu);
      return loom__fail(l, LOOM_ESTATE,
                        "collectives need a rank: this task's role is not a "
                        "training role (chief or worker)");
    }
    if (!(s = calloc(1, sizeof *s))) {
      pthread_mutex_unlock(&comm_create_mu);
      return loom__fail(l, LOOM_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    *slot = s;
    int64_t v = 0;
    char prefix[64];
    rc = comm_store_loom(l, &s->store);
    /* generation 0 counts joins (a job may re-create its communicator);
     * elastic generations have their own namespace */
    if (rc == 0 && loom_generation(l) == 0) rc = loom_kv_add(l, "comm/join", 1, &v);
    if (rc == 0) {
      if (loom_generation(l) > 0)
        snprintf(prefix, sizeof prefix, "comm/e%lld", (long long)loom_generation(l));
      else
        snprintf(prefix, sizeof prefix, "comm/g%lld", (long long)((v - 1) / world));
      rc = comm_create_gen(s->store, prefix, rank, world, loom__host(l), loom__abort_fd(l),
                           loom__latest_generation(l), loom_generation(l), &s->c, s->errmsg,
                           sizeof s->errmsg);
    } else {
      snprintf(s->errmsg, sizeof s->errmsg, "cannot join the communicator through the KV store: %s",
               loom_strerror(rc));
    }
    s->err = rc;
  }
  pthread_mutex_unlock(&comm_create_mu);
  if (s->err < 0) return loom__fail(l, s->err, "%s", s->errmsg);
  if (loom__aborted(l)) comm__fail(s->c, LOOM_EABORTED, "the coordinator aborted the attempt");
  *out = s;
  return 0;
}

void loom__comm_fini(loom_t *l) {
  if (!l) return;
  void **slot = loom__comm_slot(l);
  struct comm_state *s = *slot;
  if (!s) return;
  comm_destroy(s->c);
  if (s->store) s->store->ops->destroy(s->store);
  pthread_mutex_destroy(&s->mu);
  free(s);
  *slot = NULL;
}

const char *loom__comm_transport_of(loom_t *l, int peer) {
  struct comm_state *s;
  if (comm_state_get(l, &s) < 0) return NULL;
  const char *name = comm_transport_of(s->c, peer);
  if (!name) loom__fail(l, LOOM_EINVAL, "no pair to rank %d", peer);
  return name;
}

/* Joins the newest announced generation newer than the current one. */
int loom_comm_reform(loom_t *l, int timeout_ms) {
  if (!l) return LOOM_EINVAL;
  uint64_t deadline = comm__now_ns() / 1000000u + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
  int64_t want = loom_generation(l) + 1;
  char key[64];
  void *v = NULL;
  size_t len = 0;
  int rc;
  /* wait for the next generation, then take the newest one there is */
  snprintf(key, sizeof key, "loom/membership/g%lld", (long long)want);
  rc = loom_kv_get(l, key, timeout_ms, &v, &len);
  if (rc < 0) return rc;
  free(v);
  v = NULL;
  int64_t latest = want;
  if (loom_kv_get(l, "loom/generation", 0, &v, &len) == 0) {
    long long g = atoll(v);
    if (g > latest) latest = g;
    free(v);
    v = NULL;
  }
  snprintf(key, sizeof key, "loom/membership/g%lld", (long long)latest);
  int left = (int)(deadline - comm__now_ns() / 1000000u);
  if ((rc = loom_kv_get(l, key, left > 0 ? left : 0, &v, &len)) < 0) return rc;
  json_error_t err;
  json_t *m = json_loadb(v, len, 0, &err);
  free(v);
  const char *task = getenv("LOOM_TASK");
  json_t *base = m && task ? json_object_get(json_object_get(m, "ranks"), task) : NULL;
  json_int_t world = json_integer_value(json_object_get(m, "world_size"));
  if (!json_is_integer(base) || world < 1) {
    json_decref(m);
    return loom__fail(l, m ? LOOM_ENOENT : LOOM_EPROTO, "%s is not a member of generation %lld",
                      task ? task : "this task", (long long)latest);
  }
  int rank = (int)json_integer_value(base) + loom_local_rank(l);
  json_decref(m);
  /* tear down the old communicator; the next collective makes the new one */
  pthread_mutex_lock(&comm_create_mu);
  void **slot = loom__comm_slot(l);
  struct comm_state *s = *slot;
  if (s) {
    comm_destroy(s->c);
    if (s->store) s->store->ops->destroy(s->store);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *slot = NULL;
  }
  loom__set_membership(l, rank, (int)world, latest);
  pthread_mutex_unlock(&comm_create_mu);
  return 0;
}

/* A collective from the public API: serialized per handle, its time split
 * into waiting for peers (joining the communicator included) and the rest
 * (loom__phase_add), less *excl_ns: time the call spent in the caller's
 * own code (loom_allreduce_apply's fn). */
#define COMM_PUBLIC_EXCL(call, excl_ns)                                                            \
  struct comm_state *s;                                                                            \
  uint64_t t0_ = comm__now_ns();                                                                   \
  int rc = comm_state_get(l, &s);                                                                  \
  if (rc < 0) return rc;                                                                           \
  pthread_mutex_lock(&s->mu);                                                                      \
  uint64_t w0_ = s->c->wait_ns - (comm__now_ns() - t0_); /* joining counts as waiting */           \
  rc = call;                                                                                       \
  uint64_t waited_ = s->c->wait_ns - w0_, took_ = comm__now_ns() - t0_ - (excl_ns);                \
  pthread_mutex_unlock(&s->mu);                                                                    \
  loom__phase_add(l, LOOM__PHASE_PEERS, waited_);                                                  \
  loom__phase_add(l, LOOM__PHASE_COMM, took_ > waited_ ? took_ - waited_ : 0);                     \
  return rc < 0 ? loom__fail(l, rc, "%s", comm_errmsg(s->c)) : 0
#define COMM_PUBLIC(call) COMM_PUBLIC_EXCL(call, 0)

int loom_allreduce(loom_t *l, const void *send, void *recv, size_t count, loom_dtype dt,
                   loom_op op) {
  COMM_PUBLIC(comm_allreduce(s->c, send, recv, count, dt, op));
}

/* The caller's fn, timed: its time is the program's own work, not the
 * collective's. */
struct apply_timed {
  loom_apply_fn fn;
  void *arg;
  uint64_t ns;
};

static void apply_timed(void *arg, size_t offset, const void *piece, size_t n) {
  struct apply_timed *t = arg;
  uint64_t t0 = comm__now_ns();
  t->fn(t->arg, offset, piece, n);
  t->ns += comm__now_ns() - t0;
}

int loom_allreduce_apply(loom_t *l, const void *send, size_t count, loom_dtype dt, loom_op op,
                         loom_apply_fn fn, void *arg) {
  struct apply_timed t = {fn, arg, 0};
  COMM_PUBLIC_EXCL(comm_allreduce_apply(s->c, send, count, dt, op, fn ? apply_timed : NULL, &t),
                   t.ns);
}

void *loom_allreduce_buffer(loom_t *l, size_t count, loom_dtype dt) {
  struct comm_state *s;
  if (comm_state_get(l, &s) < 0) return NULL;
  uint64_t t0 = comm__now_ns();
  pthread_mutex_lock(&s->mu);
  uint64_t w0 = s->c->wait_ns;
  void *p = comm_allreduce_buffer(s->c, count, dt);
  uint64_t waited = s->c->wait_ns - w0, took = comm__now_ns() - t0;
  pthread_mutex_unlock(&s->mu);
  loom__phase_add(l, LOOM__PHASE_PEERS, waited);
  loom__phase_add(l, LOOM__PHASE_COMM, took > waited ? took - waited : 0);
  return p;
}

int loom_broadcast(loom_t *l, void *buf, size_t bytes, int root) {
  COMM_PUBLIC(comm_broadcast(s->c, buf, bytes, root));
}

int loom_allgather(loom_t *l, const void *send, void *recv, size_t bytes) {
  COMM_PUBLIC(comm_allgather(s->c, send, recv, bytes));
}

int loom_reduce_scatter(loom_t *l, const void *send, void *recv, size_t count, loom_dtype dt,
                        loom_op op) {
  COMM_PUBLIC(comm_reduce_scatter(s->c, send, recv, count, dt, op));
}

int loom_barrier(loom_t *l) { COMM_PUBLIC(comm_barrier(s->c)); }

size_t loom_reduce_scatter_count(size_t count, int world_size, int rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size) return 0;
  return comm__block_len(count, world_size, rank);
}
