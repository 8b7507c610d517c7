/* loom.c: libloom's handle: identity from the task's environment, the
 * authenticated connection to the coordinator, and the KV store and event
 * calls over it.
 *
 * One reader thread owns the receiving side of the connection: it hands
 * each REPLY to the caller waiting for that request id, and turns an ABORT
 * (or the loss of the connection) into a readable abort fd that collectives
 * poll. Senders serialize on a mutex, so calls are thread-safe. */
#include "lib/lib.h"
#include "loom/comm.h"
#include "wire/wire.h"
#include "wire/wire_msg.h"
#include "wire/wire_tls.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define LIB_MAX_PENDING 64

struct pending {
  uint64_t id;
  bool done;
  int rc;
  json_t *json; /* the whole reply (the feed's carry fields of their own) */
  bool has_value;
  int64_t value; /* KV_ADD's result */
  unsigned char *blob;
  size_t blob_len;
};

struct loom {
  int rank, world, local_rank, local_size, index, attempt;
  int64_t generation, latest_generation;
  char role[64], task[96], job_id[160], host[256], secret[160];
  int fd, abort_efd;
  wire_reader reader;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu; /* guards everything below and sends */
  pthread_cond_t cv;
  uint64_t next_id;
  struct pending *pending[LIB_MAX_PENDING];
  int aborted; /* 0, LOOM_EABORTED or LOOM_ECONN */
  char abort_reason[256];
  uint64_t serial; /* names the handle in last_err: an address may come back */
  void *comm;
  /* loom__phase_add: totals, and the metrics' current window */
  _Atomic uint64_t phase_ns[LOOM__PHASE_N];
  _Atomic uint64_t phase_t0;   /* when the first phase began; 0: none yet */
  _Atomic uint64_t phase_next; /* when the current window closes */
  pthread_mutex_t phase_mu;    /* guards what follows; only tried */
  uint64_t win_t0, win_ns[LOOM__PHASE_N];
};

static void phase_window(loom_t *l, uint64_t now);
static int lib_metric(loom_t *l, const char *tag, int64_t step, double value);

/* The detail text of the last error, one per thread, as loom_errmsg
 * promises: a thread's error never overwrites another's. serial names the
 * handle it belongs to (0: none yet). */
static _Thread_local struct {
  uint64_t serial;
  char text[512];
} last_err;
static _Atomic uint64_t next_serial = 1;

int loom__fail(loom_t *l, int code, const char *fmt, ...) {
  if (!l) return code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_err.text, sizeof last_err.text, fmt, ap);
  last_err.serial = l->serial;
  va_end(ap);
  return code;
}

const char *loom_version(void) { return LOOM__VERSION; }

const char *loom_errmsg(const loom_t *l) {
  return l && l->serial && last_err.serial == l->serial ? last_err.text : "";
}
int loom_rank(const loom_t *l) { return l ? l->rank : -1; }
int loom_world_size(const loom_t *l) { return l ? l->world : 0; }
int loom_local_rank(const loom_t *l) { return l ? l->local_rank : 0; }
int loom_local_size(const loom_t *l) { return l ? l->local_size : 1; }
const char *loom_role(const loom_t *l) { return l ? l->role : ""; }
int loom_index(const loom_t *l) { return l ? l->index : -1; }
int loom_attempt(const loom_t *l) { return l ? l->attempt : 0; }
const char *loom_job_id(const loom_t *l) { return l ? l->job_id : ""; }
int loom__abort_fd(const loom_t *l) { return l ? l->abort_efd : -1; }
const char *loom__host(const loom_t *l) { return l->host; }
void **loom__comm_slot(loom_t *l) { return &l->comm; }
/* The collectives define the real one; a program without them links this. */
__attribute__((weak)) void loom__comm_fini(loom_t *l) { (void)l; }

int64_t loom_generation(const loom_t *l) { return l ? l->generation : 0; }
int loom_membership_changed(const loom_t *l) {
  return l && __atomic_load_n(&l->latest_generation, __ATOMIC_ACQUIRE) > l->generation;
}
const int64_t *loom__latest_generation(const loom_t *l) { return &l->latest_generation; }
void loom__set_membership(loom_t *l, int rank, int world, int64_t generation) {
  l->rank = rank;
  l->world = world;
  l->generation = generation;
}

int loom__aborted(const loom_t *l) { return __atomic_load_n(&l->aborted, __ATOMIC_ACQUIRE); }

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  long long out;
  if (!v || loom__parse_int(v, -1, 1 << 30, &out) < 0) return def;
  return (int)out;
}

static void env_str(const char *name, char *dst, size_t len, const char *def) {
  const char *v = getenv(name);
  loom__strlcpy(dst, v && *v ? v : def, len);
}

/* Marks the attempt as over for every waiter and every collective. Called
 * with mu held. */
static void lib_abort_locked(loom_t *l, int code, const char *why) {
  if (l->aborted) return;
  loom__strlcpy(l->abort_reason, why, sizeof l->abort_reason);
  __atomic_store_n(&l->aborted, code, __ATOMIC_RELEASE);
  uint64_t one = 1;
  if (write(l->abort_efd, &one, sizeof one) < 0) { /* counter saturated */
  }
  pthread_cond_broadcast(&l->cv);
}

static void *lib_reader(void *arg) {
  loom_t *l = arg;
  for (;;) {
    wire_frame f;
    int rc = wire_recv(l->fd, &l->reader, &f, -1);
    if (rc < 0) {
      pthread_mutex_lock(&l->mu);
      lib_abort_locked(l, LOOM_ECONN, "lost the connection to the coordinator");
      pthread_mutex_unlock(&l->mu);
      return NULL;
    }
    wire_msg m = {0};
    char err[200];
    if (f.type != WIRE_MEMBERSHIP && f.type != WIRE_ABORT && f.type != WIRE_REPLY) {
      /* not for libloom (a heartbeat): nothing to do */
    } else if (wire_msg_decode(&f, &m, err, sizeof err) < 0) {
      char why[260];
      snprintf(why, sizeof why, "the coordinator sent a malformed message: %s", err);
      pthread_mutex_lock(&l->mu);
      lib_abort_locked(l, LOOM_EPROTO, why);
      pthread_mutex_unlock(&l->mu);
    } else if (m.type == WIRE_MEMBERSHIP) {
      int64_t g = m.u.membership.generation;
      if (g > __atomic_load_n(&l->latest_generation, __ATOMIC_ACQUIRE))
        __atomic_store_n(&l->latest_generation, g, __ATOMIC_RELEASE);
    } else if (m.type == WIRE_ABORT) {
      pthread_mutex_lock(&l->mu);
      lib_abort_locked(l, LOOM_EABORTED, *m.u.abort.reason ? m.u.abort.reason : "attempt aborted");
      pthread_mutex_unlock(&l->mu);
    } else {
      const wire_reply *r = &m.u.reply;
      pthread_mutex_lock(&l->mu);
      for (int i = 0; i < LIB_MAX_PENDING; i++) {
        struct pending *p = l->pending[i];
        if (!p || p->id != (uint64_t)r->id) continue;
        p->done = true;
        p->rc = (int)r->rc;
        p->has_value = r->has_value;
        p->value = r->value;
        p->json = json_incref(f.json);
        if (f.blob_len) {
          p->blob = malloc(f.blob_len + 1);
          if (p->blob) {
            memcpy(p->blob, f.blob, f.blob_len);
            p->blob[f.blob_len] = 0;
            p->blob_len = f.blob_len;
          } else {
            p->rc = LOOM_ENOMEM;
          }
        }
        pthread_cond_broadcast(&l->cv);
        break;
      }
      pthread_mutex_unlock(&l->mu);
    }
    wire_msg_free(&m);
    wire_frame_free(&f);
  }
}

int loom_init(loom_t **out) {
  if (!out) return LOOM_EINVAL;
  *out = NULL;
  const char *coord = getenv("LOOM_COORD"), *secret = getenv("LOOM_SECRET");
  if (!coord || !*coord || !secret || !*secret) return LOOM_ENOENV;
  loom_t *l = calloc(1, sizeof *l);
  if (!l) return LOOM_ENOMEM;
  l->serial = atomic_fetch_add(&next_serial, 1);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  pthread_mutex_init(&l->phase_mu, NULL);
  l->fd = -1;
  l->rank = env_int("LOOM_RANK", -1);
  l->world = env_int("LOOM_WORLD_SIZE", l->rank >= 0 ? 1 : 0);
  l->local_rank = env_int("LOOM_LOCAL_RANK", 0);
  l->local_size = env_int("LOCAL_WORLD_SIZE", 1);
  l->index = env_int("LOOM_INDEX", 0);
  l->attempt = env_int("LOOM_ATTEMPT", 0);
  l->generation = l->latest_generation = env_int("LOOM_GENERATION", 0);
  env_str("LOOM_ROLE", l->role, sizeof l->role, "");
  env_str("LOOM_TASK", l->task, sizeof l->task, "");
  env_str("LOOM_JOB_ID", l->job_id, sizeof l->job_id, "");
  loom__strlcpy(l->secret, secret, sizeof l->secret);
  const char *h = getenv("LOOM_HOST");
  if (h && *h) {
    loom__strlcpy(l->host, h, sizeof l->host);
  } else if (gethostname(l->host, sizeof l->host) < 0) {
    loom__strlcpy(l->host, "localhost", sizeof l->host);
  }
  wire_reader_init(&l->reader, (size_t)loom__tun(LOOM_TUN_MAX_FRAME));
  l->abort_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int rc = l->abort_efd < 0 ? LOOM_EIO : 0;
  if (rc == 0) rc = wire_dial(coord, (int)loom__tun(LOOM_TUN_CONNECT_TIMEOUT_MS), &l->fd);
  char why[200] = "";
  if (rc == 0)
    rc = wire_client_auth(l->fd, &l->reader, l->secret, (int)loom__tun(LOOM_TUN_AUTH_TIMEOUT_MS),
                          why, sizeof why);
  if (rc == 0) {
    wire_msg m = {.type = WIRE_HELLO,
                  .u.hello = {.task = l->task, .rank = l->rank, .pid = getpid()}};
    rc = wire_msg_send(l->fd, &m);
  }
  if (rc == 0) {
    if (pthread_create(&l->thread, NULL, lib_reader, l) != 0)
      rc = LOOM_EIO;
    else
      l->thread_started = true;
  }
  if (rc < 0) {
    loom__log(LOOM_LOG_ERROR, "lib", "cannot join the job's coordinator at %s: %s", coord,
              why[0] ? why : loom_strerror(rc));
    loom_finish(l);
    return rc;
  }
  *out = l;
  return 0;
}

void loom_finish(loom_t *l) {
  if (!l) return;
  /* the last window's shares, if it is long enough to mean something */
  if (atomic_load(&l->phase_t0) != 0 && l->fd >= 0 && !loom__aborted(l) &&
      pthread_mutex_trylock(&l->phase_mu) == 0) {
    uint64_t now = loom__now_ns();
    if (now - l->win_t0 >= 100000000u) phase_window(l, now);
    pthread_mutex_unlock(&l->phase_mu);
  }
  loom__comm_fini(l);
  if (l->fd >= 0) shutdown(l->fd, SHUT_RDWR);
  if (l->thread_started) pthread_join(l->thread, NULL);
  if (l->fd >= 0) wire_io_close(l->fd);
  if (l->abort_efd >= 0) close(l->abort_efd);
  wire_reader_free(&l->reader);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->phase_mu);
  free(l);
}

static void pending_free(struct pending *p) {
  if (!p) return;
  if (p->json) json_decref(p->json);
  free(p->blob);
  free(p);
}

/* Sends m, a typed request whose id this sets, and waits for its reply (at
 * most wait_ms, -1 forever). On success *rep holds the reply; the caller
 * frees it with pending_free. */
static int lib_call(loom_t *l, wire_msg *m, int wait_ms, struct pending **rep) {
  *rep = NULL;
  struct pending *p = calloc(1, sizeof *p);
  if (!p) return LOOM_ENOMEM;
  pthread_mutex_lock(&l->mu);
  int slot = -1, rc = 0;
  for (int i = 0; i < LIB_MAX_PENDING && slot < 0; i++)
    if (!l->pending[i]) slot = i;
  if (l->aborted) {
    rc = l->aborted;
  } else if (slot < 0) {
    rc = LOOM_ERANGE;
  } else {
    p->id = ++l->next_id;
    l->pending[slot] = p;
    switch (m->type) {
    case WIRE_KV_SET:
      m->u.kv_set.id = (int64_t)p->id;
      break;
    case WIRE_KV_GET:
      m->u.kv_get.id = (int64_t)p->id;
      break;
    case WIRE_KV_ADD:
      m->u.kv_add.id = (int64_t)p->id;
      break;
    default:
      m->u.event.id = (int64_t)p->id;
      break;
    }
    rc = wire_msg_send(l->fd, m);
  }
  uint64_t deadline = wait_ms < 0 ? UINT64_MAX : loom__now_ms() + (uint64_t)wait_ms;
  while (rc == 0 && !p->done && !l->aborted) {
    uint64_t now = loom__now_ms();
    if (now >= deadline) {
      rc = LOOM_ETIMEDOUT;
      break;
    }
    uint64_t left = deadline == UINT64_MAX ? 1000 : deadline - now;
    if (left > 1000) left = 1000;
    struct timespec ts = loom__deadline(CLOCK_REALTIME, left);
    pthread_cond_timedwait(&l->cv, &l->mu, &ts);
  }
  if (rc == 0 && !p->done) rc = l->aborted;
  if (slot >= 0 && l->pending[slot] == p) l->pending[slot] = NULL;
  const char *why = l->abort_reason;
  pthread_mutex_unlock(&l->mu);
  if (rc < 0) {
    pending_free(p);
    if (rc == LOOM_EABORTED || rc == LOOM_ECONN) return loom__fail(l, rc, "%s", why);
    return loom__fail(l, rc, "request to the coordinator failed: %s", loom_strerror(rc));
  }
  *rep = p;
  return 0;
}

int loom__call(loom_t *l, wire_msg *m, int wait_ms, json_t **reply_json, void **reply_blob,
               size_t *reply_len) {
  if (reply_json) *reply_json = NULL;
  if (reply_blob) *reply_blob = NULL;
  if (reply_len) *reply_len = 0;
  if (!l || !m) return LOOM_EINVAL;
  struct pending *p;
  int rc = lib_call(l, m, wait_ms, &p);
  if (rc < 0) return rc;
  rc = p->rc;
  if (reply_json) *reply_json = json_incref(p->json);
  if (reply_blob) {
    if (!p->blob) p->blob = calloc(1, 1);
    *reply_blob = p->blob;
    p->blob = NULL;
    if (reply_len) *reply_len = p->blob_len;
  }
  pending_free(p);
  return rc;
}

static int check_key(loom_t *l, const char *key) {
  if (!l || !key) return LOOM_EINVAL;
  size_t n = strlen(key);
  if (n == 0 || n > LOOM_KV_MAX_KEY)
    return loom__fail(l, LOOM_EINVAL, "KV key must be 1..%d bytes, got %zu", LOOM_KV_MAX_KEY, n);
  return 0;
}

int loom_kv_set(loom_t *l, const char *key, const void *val, size_t len) {
  int rc = check_key(l, key);
  if (rc < 0) return rc;
  if (len > LOOM_KV_MAX_VALUE || (len && !val))
    return loom__fail(l, LOOM_ERANGE, "KV value for '%s' is %zu bytes; at most %u", key, len,
                      LOOM_KV_MAX_VALUE);
  struct pending *p;
  wire_msg m = {.type = WIRE_KV_SET, .u.kv_set.key = key, .blob = val, .blob_len = len};
  rc = lib_call(l, &m, (int)loom__tun(LOOM_TUN_CONNECT_TIMEOUT_MS) * 3, &p);
  if (rc < 0) return rc;
  rc = p->rc;
  pending_free(p);
  return rc < 0 ? loom__fail(l, rc, "KV set '%s' refused", key) : 0;
}

int loom_kv_get(loom_t *l, const char *key, int timeout_ms, void **val, size_t *len) {
  int rc = check_key(l, key);
  if (rc < 0) return rc;
  if (!val) return LOOM_EINVAL;
  *val = NULL;
  if (len) *len = 0;
  struct pending *p;
  int wait = timeout_ms < 0 ? -1 : timeout_ms + 10000;
  wire_msg m = {.type = WIRE_KV_GET, .u.kv_get = {.key = key, .timeout_ms = timeout_ms}};
  rc = lib_call(l, &m, wait, &p);
  if (rc < 0) return rc;
  rc = p->rc;
  if (rc == 0) {
    if (!p->blob) {
      p->blob = calloc(1, 1);
      if (!p->blob) rc = LOOM_ENOMEM;
    }
    *val = p->blob;
    if (len) *len = p->blob_len;
    p->blob = NULL;
  }
  pending_free(p);
  if (rc == LOOM_ETIMEDOUT)
    return loom__fail(l, rc, "KV key '%s' did not appear within %d ms", key, timeout_ms);
  return rc < 0 ? loom__fail(l, rc, "KV get '%s' failed", key) : 0;
}

int loom_kv_add(loom_t *l, const char *key, int64_t delta, int64_t *result) {
  int rc = check_key(l, key);
  if (rc < 0) return rc;
  struct pending *p;
  wire_msg m = {.type = WIRE_KV_ADD, .u.kv_add = {.key = key, .delta = delta}};
  rc = lib_call(l, &m, (int)loom__tun(LOOM_TUN_CONNECT_TIMEOUT_MS) * 3, &p);
  if (rc < 0) return rc;
  rc = p->rc;
  if (rc == 0 && result) *result = p->has_value ? p->value : 0;
  pending_free(p);
  return rc < 0 ? loom__fail(l, rc, "KV add '%s': the value is not an integer", key) : 0;
}

/* A metric to the coordinator, without waiting; libloom's own (tags
 * "loom/...") go this way too. */
static int lib_metric(loom_t *l, const char *tag, int64_t step, double value) {
  wire_msg m = {.type = WIRE_METRIC, .u.metric = {.tag = tag, .step = step, .value = value}};
  pthread_mutex_lock(&l->mu);
  int rc = l->aborted ? l->aborted : wire_msg_send(l->fd, &m);
  pthread_mutex_unlock(&l->mu);
  return rc;
}

int loom_metric(loom_t *l, const char *tag, int64_t step, double value) {
  if (!l || !tag || !*tag || strlen(tag) > LOOM_METRIC_MAX_TAG) return LOOM_EINVAL;
  if (!isfinite(value)) return LOOM_EINVAL; /* JSON has no NaN or infinity */
  if (!strncmp(tag, "loom/", 5))
    return loom__fail(l, LOOM_EINVAL,
                      "metric tag '%s': tags beginning with loom/ are libloom's own", tag);
  return lib_metric(l, tag, step, value);
}

static const char *const PHASE_TAGS[LOOM__PHASE_N] = {
    "loom/time_comm_pct", "loom/time_wait_peers_pct", "loom/time_wait_data_pct"};

/* Sends the shares of the window [win_t0, now) as metrics, at the step of
 * the milliseconds since the first phase, and opens the next window. */
static void phase_window(loom_t *l, uint64_t now) {
  uint64_t wall = now > l->win_t0 ? now - l->win_t0 : 1;
  int64_t step = (int64_t)((now - atomic_load(&l->phase_t0)) / 1000000u);
  double rest = 100.0;
  for (int i = 0; i < LOOM__PHASE_N; i++) {
    uint64_t cur = atomic_load_explicit(&l->phase_ns[i], memory_order_relaxed);
    double pct = 100.0 * (double)(cur - l->win_ns[i]) / (double)wall;
    if (pct > rest) pct = rest; /* a phase that began before the window */
    rest -= pct;
    l->win_ns[i] = cur;
    lib_metric(l, PHASE_TAGS[i], step, pct);
  }
  lib_metric(l, "loom/time_compute_pct", step, rest);
  l->win_t0 = now;
  atomic_store(&l->phase_next, now + (uint64_t)loom__tun(LOOM_TUN_PHASE_MS) * 1000000u);
}

void loom__phase_add(loom_t *l, int phase, uint64_t ns) {
  if (!l || phase < 0 || phase >= LOOM__PHASE_N) return;
  atomic_fetch_add_explicit(&l->phase_ns[phase], ns, memory_order_relaxed);
  uint64_t now = loom__now_ns();
  uint64_t next = atomic_load_explicit(&l->phase_next, memory_order_relaxed);
  if (next != 0 && now < next) return;
  if (pthread_mutex_trylock(&l->phase_mu) != 0) return; /* another thread is at it */
  if (atomic_load(&l->phase_t0) == 0) { /* the first: the window opens where it began */
    uint64_t t0 = now > ns ? now - ns : 1;
    l->win_t0 = t0;
    for (int i = 0; i < LOOM__PHASE_N; i++) l->win_ns[i] = 0;
    atomic_store(&l->phase_t0, t0);
    atomic_store(&l->phase_next, t0 + (uint64_t)loom__tun(LOOM_TUN_PHASE_MS) * 1000000u);
  } else if (now >= atomic_load(&l->phase_next)) {
    phase_window(l, now);
  }
  pthread_mutex_unlock(&l->phase_mu);
}

int loom_phase_times_get(loom_t *l, loom_phase_times *out) {
  if (!l || !out) return LOOM_EINVAL;
  *out = (loom_phase_times){0};
  uint64_t t0 = atomic_load(&l->phase_t0);
  if (t0 == 0) return 0;
  out->wall_s = (double)(loom__now_ns() - t0) / 1e9;
  out->comm_s = (double)atomic_load(&l->phase_ns[LOOM__PHASE_COMM]) / 1e9;
  out->wait_peers_s = (double)atomic_load(&l->phase_ns[LOOM__PHASE_PEERS]) / 1e9;
  out->wait_data_s = (double)atomic_load(&l->phase_ns[LOOM__PHASE_DATA]) / 1e9;
  out->compute_s = out->wall_s - out->comm_s - out->wait_peers_s - out->wait_data_s;
  if (out->compute_s < 0) out->compute_s = 0;
  return 0;
}

int loom_event(loom_t *l, const char *name, const char *detail_json) {
  if (!l || !name || !*name || strlen(name) > 128) return LOOM_EINVAL;
  json_t *d = NULL;
  if (detail_json) {
    json_error_t err;
    d = json_loads(detail_json, 0, &err);
    if (!d || !json_is_object(d)) {
      json_decref(d);
      return loom__fail(l, LOOM_EINVAL, "event detail must be a JSON object: %s (column %d)",
                        err.text, err.column);
    }
  }
  struct pending *p;
  wire_msg m = {.type = WIRE_EVENT, .u.event = {.name = name, .detail = d}};
  int rc = lib_call(l, &m, (int)loom__tun(LOOM_TUN_CONNECT_TIMEOUT_MS) * 3, &p);
  json_decref(d);
  if (rc < 0) return rc;
  rc = p->rc;
  pending_free(p);
  return rc;
}
