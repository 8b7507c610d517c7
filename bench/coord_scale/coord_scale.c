/* coord_scale.c: how fast one coordinator registers N tasks and hands each
 * the cluster spec, with N simulated agents in this one process.
 *
 * The job is started beforehand by `loom submit SPEC --backend external`
 * (one role `worker` with N instances); this program is given its job
 * directory, reads coord.json and secret there, and plays every agent over
 * non-blocking sockets on one epoll loop:
 *
 *   phase auth:    open N connections and authenticate each (CHALLENGE,
 *                  AUTH, AUTH_OK), then close them: the cost of the
 *                  handshake alone, measured apart;
 *   phase rdv:     open N connections again; each authenticates, sends
 *                  REGISTER {task worker:K, port 20000+K}, answers ASSIGN
 *                  with READY and waits for CLUSTER. The figure is the time
 *                  from the first connect to the last CLUSTER received.
 *                  Every CLUSTER is checked: its blob lists N workers, the
 *                  K-th at 127.0.0.1:20000+K, and master is worker:0;
 *   phase finish:  each agent sends STARTED and EXIT 0 and closes; the
 *                  coordinator must then exit with state.json "succeeded".
 *
 * Output, one line: name=coord_scale n=N bytes=0 median_s=<rdv seconds> and
 * the detail (connect/auth latencies, when the last task authenticated,
 * registered, and so on); run.sh takes medians over several jobs. Exit
 * status 0 when everything checked out, 1 otherwise. */
#include "core/core.h"
#include "wire/wire.h"
#include "wire/wire_auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#define PORT_BASE 20000
#define PHASE_TIMEOUT_MS 30000
#define EXIT_WAIT_MS 30000

enum { S_CONNECTING, S_CHALLENGE, S_AUTH_OK, S_ASSIGN, S_CLUSTER, S_DONE, S_CLOSED };
enum { P_AUTH, P_RDV, P_FINISH };

typedef struct {
  int fd, k, st;
  wire_reader rd;
  loom__buf out; /* bytes not yet taken by the socket */
  bool want_out; /* EPOLLOUT is armed */
  unsigned char cnonce[WIRE_NONCE];
  uint64_t t0, t_conn, t_auth, t_assign, t_cluster; /* ns, monotonic */
  uint64_t t_register;                              /* ns: REGISTER sent */
  size_t cmp_off; /* > 0: bytes of a CLUSTER frame matched against the first, streaming */
} agent;

typedef struct {
  const char *job_dir;
  char host[64];
  int port, coord_pid, n, phase, ep, done;
  char *secret;
  agent *a;
  unsigned char *ref; /* the first CLUSTER blob, checked in full */
  size_t ref_len;
  unsigned char *ref_frame; /* the first CLUSTER frame, whole: every other must be the same bytes */
  size_t ref_frame_len;
  int ref_k;     /* whose it was */
  char err[512]; /* the first failure, for the report */
} bench;

static void fail_at(bench *b, const char *fmt, ...) LOOM__PRINTF(2, 3);
static void fail_at(bench *b, const char *fmt, ...) {
  if (b->err[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->err, sizeof b->err, fmt, ap);
  va_end(ap);
}

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, c = *(const uint64_t *)y;
  return a < c ? -1 : a > c;
}

/* The q-quantile (0..1) of v[0..n), in milliseconds; sorts v. */
static double quantile_ms(uint64_t *v, int n, double q) {
  if (n == 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_u64);
  int i = (int)(q * (n - 1) + 0.5);
  return (double)v[i] / 1e6;
}

/* ---- sockets --------------------------------------------------------------- */
static void arm(bench *b, agent *a, bool out) {
  struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = a};
  epoll_ctl(b->ep, EPOLL_CTL_MOD, a->fd, &ev);
  a->want_out = out;
}

static void agent_close(bench *b, agent *a) {
  if (a->fd >= 0) {
    epoll_ctl(b->ep, EPOLL_CTL_DEL, a->fd, NULL);
    close(a->fd);
  }
  a->fd = -1;
  a->st = S_CLOSED;
  wire_reader_free(&a->rd);
  loom__buf_free(&a->out);
}

/* Writes what is queued; arms EPOLLOUT while something is left. */
static int flush_out(bench *b, agent *a) {
  while (a->out.len) {
    ssize_t w = send(a->fd, a->out.p, a->out.len, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w < 0) return LOOM_ECONN;
    loom__buf_consume(&a->out, (size_t)w);
  }
  if ((a->out.len > 0) != a->want_out) arm(b, a, a->out.len > 0);
  return 0;
}

/* Queues one frame and tries to write it now. Takes ownership of json. */
static int send_frame(bench *b, agent *a, uint16_t type, json_t *json, const void *blob,
                      size_t len) {
  unsigned char *buf;
  size_t n;
  int rc = wire_encode(type, json, blob, len, &buf, &n);
  json_decref(json);
  if (rc < 0) return rc;
  rc = loom__buf_add(&a->out, buf, n);
  free(buf);
  return rc < 0 ? rc : flush_out(b, a);
}

static int agent_open(bench *b, agent *a) {
  a->t0 = loom__now_ns();
  a->t_conn = a->t_auth = a->t_assign = a->t_cluster = a->t_register = 0;
  wire_reader_init(&a->rd, (size_t)loom__tun(LOOM_TUN_MAX_FRAME));
  loom__buf_init(&a->out, 1 << 20);
  a->want_out = true;
  a->st = S_CONNECTING;
  a->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (a->fd < 0) {
    fail_at(b, "socket() for agent %d: %s (raise the open-file limit)", a->k, strerror(errno));
    return LOOM_EIO;
  }
  int one = 1;
  setsockopt(a->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)b->port)};
  inet_pton(AF_INET, b->host, &sa.sin_addr);
  if (connect(a->fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
    fail_at(b, "connect() for agent %d to %s:%d: %s", a->k, b->host, b->port, strerror(errno));
    return LOOM_ECONN;
  }
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = a};
  if (epoll_ctl(b->ep, EPOLL_CTL_ADD, a->fd, &ev) < 0) {
    fail_at(b, "epoll_ctl: %s", strerror(errno));
    return LOOM_EIO;
  }
  return 0;
}

/* ---- the agent's side of the protocol ------------------------------------- */
/* Checks one CLUSTER frame: N workers, the K-th at 127.0.0.1:PORT_BASE+K,
 * master at worker:0's address. */
static int check_cluster(bench *b, agent *a, wire_frame *f) {
  json_error_t je;
  /* deflated, as we asked (REGISTER "inflate"), like loom's agents */
  const char *enc = json_string_value(json_object_get(f->json, "blob_encoding"));
  json_int_t size = json_integer_value(json_object_get(f->json, "blob_size"));
  unsigned char *raw = NULL;
  uLongf rawlen = size > 0 && size < (1 << 30) ? (uLongf)size : 0;
  if (!enc || strcmp(enc, "deflate") || !rawlen || !(raw = malloc(rawlen)) ||
      uncompress(raw, &rawlen, f->blob, f->blob_len) != Z_OK || rawlen != (uLongf)size) {
    fail_at(b, "worker:%d: CLUSTER blob not deflated as asked, or does not inflate", a->k);
    free(raw);
    return LOOM_EPROTO;
  }
  json_t *blob = json_loadb((const char *)raw, rawlen, 0, &je);
  free(raw);
  json_t *w = json_object_get(json_object_get(blob, "cluster"), "worker");
  int rc = 0;
  if (!json_is_array(w) || (int)json_array_size(w) != b->n) {
    fail_at(b, "worker:%d: CLUSTER blob lists %d workers, want %d", a->k,
            json_is_array(w) ? (int)json_array_size(w) : -1, b->n);
    rc = LOOM_EPROTO;
    goto out;
  }
  for (int i = 0; i < b->n; i++) {
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", PORT_BASE + i);
    const char *got = json_string_value(json_array_get(w, (size_t)i));
    if (!got || strcmp(got, want)) {
      fail_at(b, "worker:%d: CLUSTER entry %d is %s, want %s", a->k, i, got ? got : "(none)", want);
      rc = LOOM_EPROTO;
      goto out;
    }
  }
  const char *ma = json_string_value(json_object_get(f->json, "master_addr"));
  json_int_t mp = json_integer_value(json_object_get(f->json, "master_port"));
  if (!ma || strcmp(ma, "127.0.0.1") || mp != PORT_BASE) {
    fail_at(b, "worker:%d: CLUSTER master is %s:%lld, want 127.0.0.1:%d", a->k, ma ? ma : "?",
            (long long)mp, PORT_BASE);
    rc = LOOM_EPROTO;
  }
out:
  json_decref(blob);
  return rc;
}

static int on_frame(bench *b, agent *a, wire_frame *f) {
  if (f->type == WIRE_HEARTBEAT) return 0;
  switch (a->st) {
  case S_CHALLENGE: {
    /* the handshake's messages are whole frames: answer the raw one */
    unsigned char ans[WIRE_AUTH_MSG_MAX];
    size_t alen;
    if (f->type != WIRE_CHALLENGE) break;
    int rc =
        wire_auth_client_answer(&wire_auth_coord, b->secret, NULL, 0, f->raw,
                                (size_t)(f->blob + f->blob_len - f->raw), a->cnonce, ans, &alen);
    if (rc < 0) return rc;
    a->st = S_AUTH_OK;
    if ((rc = loom__buf_add(&a->out, ans, alen)) < 0) return rc;
    return flush_out(b, a);
  }
  case S_AUTH_OK: {
    if (f->type != WIRE_AUTH_OK ||
        wire_auth_client_check(&wire_auth_coord, b->secret, NULL, 0, a->cnonce, f->raw,
                               (size_t)(f->blob + f->blob_len - f->raw)) < 0) {
      fail_at(b, "agent %d: the coordinator did not prove the secret (type %d)", a->k, f->type);
      return LOOM_EAUTH;
    }
    a->t_auth = loom__now_ns();
    if (b->phase == P_AUTH) {
      a->st = S_DONE;
      b->done++;
      return 0;
    }
    char task[32];
    snprintf(task, sizeof task, "worker:%d", a->k);
    a->st = S_ASSIGN;
    a->t_register = loom__now_ns();
    return send_frame(b, a, WIRE_REGISTER,
                      json_pack("{s:s, s:i, s:s, s:i, s:i, s:b}", "task", task, "attempt", 0,
                                "host", "127.0.0.1", "port", PORT_BASE + a->k, "pid", (int)getpid(),
                                "inflate", 1),
                      NULL, 0);
  }
  case S_ASSIGN: {
    if (f->type != WIRE_ASSIGN) break;
    json_t *argv = json_object_get(f->json, "argv");
    const char *role = json_string_value(json_object_get(f->json, "role"));
    if (!json_is_array(argv) || json_array_size(argv) != 1 ||
        strcmp(json_string_value(json_array_get(argv, 0)) ?: "", "true") || !role ||
        strcmp(role, "worker") || json_integer_value(json_object_get(f->json, "index")) != a->k) {
      fail_at(b, "worker:%d: unexpected ASSIGN (argv, role or index)", a->k);
      return LOOM_EPROTO;
    }
    a->t_assign = loom__now_ns();
    a->st = S_CLUSTER;
    return send_frame(b, a, WIRE_READY, NULL, NULL, 0);
  }
  case S_CLUSTER: {
    if (f->type != WIRE_CLUSTER) break;
    a->t_cluster = loom__now_ns();
    /* The first CLUSTER is checked in full; every other must be the same
     * bytes, which costs this process far less than parsing each again
     * (the clock is running, and this process shares the machine with the
     * coordinator). */
    int rc = 0;
    if (!b->ref) {
      rc = check_cluster(b, a, f);
      size_t flen = 4 + ((size_t)f->raw[0] << 24 | (size_t)f->raw[1] << 16 |
                         (size_t)f->raw[2] << 8 | f->raw[3]);
      if (rc == 0 && !(b->ref = malloc(f->blob_len + 1))) rc = LOOM_ENOMEM;
      if (rc == 0 && !(b->ref_frame = malloc(flen))) rc = LOOM_ENOMEM;
      if (rc == 0) {
        memcpy(b->ref, f->blob, f->blob_len);
        b->ref_len = f->blob_len;
        memcpy(b->ref_frame, f->raw, flen);
        b->ref_frame_len = flen;
      }
    } else if (f->blob_len != b->ref_len || memcmp(f->blob, b->ref, b->ref_len)) {
      fail_at(b, "worker:%d: its CLUSTER blob differs from worker:%d's", a->k, b->ref_k);
      rc = LOOM_EPROTO;
    } else {
      const char *ma = json_string_value(json_object_get(f->json, "master_addr"));
      json_int_t mp = json_integer_value(json_object_get(f->json, "master_port"));
      if (!ma || strcmp(ma, "127.0.0.1") || mp != PORT_BASE) {
        fail_at(b, "worker:%d: CLUSTER master is %s:%lld, want 127.0.0.1:%d", a->k, ma ? ma : "?",
                (long long)mp, PORT_BASE);
        rc = LOOM_EPROTO;
      }
    }
    if (rc < 0) return rc;
    if (b->ref_len && b->ref_k < 0) b->ref_k = a->k;
    a->st = S_DONE;
    b->done++;
    return 0;
  }
  default:
    return 0; /* done: ignore whatever else comes */
  }
  fail_at(b, "agent %d: unexpected message type %d in state %d", a->k, f->type, a->st);
  return LOOM_EPROTO;
}

/* A CLUSTER frame after the first, compared with the first as its bytes
 * arrive instead of buffered whole: at 10,000 tasks the fan-out is 10,000
 * copies of a frame of some 180 KB, and buffering (and copying) them all
 * would make this process's own work, not the coordinator's, the figure.
 * Takes n bytes at p; returns how many it used, or <0 on a mismatch. */
static ssize_t stream_cluster(bench *b, agent *a, const void *p, size_t n) {
  size_t k = b->ref_frame_len - a->cmp_off;
  if (k > n) k = n;
  if (memcmp(p, b->ref_frame + a->cmp_off, k)) {
    fail_at(b, "worker:%d: its CLUSTER frame differs from worker:%d's", a->k, b->ref_k);
    return LOOM_EPROTO;
  }
  a->cmp_off += k;
  if (a->cmp_off == b->ref_frame_len) {
    a->cmp_off = 0;
    a->t_cluster = loom__now_ns();
    a->st = S_DONE;
    b->done++;
  }
  return (ssize_t)k;
}

static int on_event(bench *b, agent *a, uint32_t ev) {
  if (a->st == S_CONNECTING && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr) {
      fail_at(b, "agent %d: connect: %s", a->k, strerror(soerr));
      return LOOM_ECONN;
    }
    a->t_conn = loom__now_ns();
    a->st = S_CHALLENGE;
    arm(b, a, false);
  } else if (ev & EPOLLOUT) {
    if (flush_out(b, a) < 0) {
      fail_at(b, "agent %d: send: %s", a->k, strerror(errno));
      return LOOM_ECONN;
    }
  }
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR))) return 0;
  char buf[65536];
  for (;;) {
    ssize_t r = recv(a->fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (r <= 0) {
      if (a->st == S_DONE) return 1; /* the peer closed after we were done */
      fail_at(b, "agent %d: the coordinator closed the connection in state %d (%s)", a->k, a->st,
              r < 0 ? strerror(errno) : "EOF");
      return LOOM_ECONN;
    }
    const char *p = buf;
    size_t left = (size_t)r;
    if (a->cmp_off) {
      ssize_t used = stream_cluster(b, a, p, left);
      if (used < 0) return (int)used;
      p += used;
      left -= (size_t)used;
    }
    if (left && wire_reader_push(&a->rd, p, left) < 0) {
      fail_at(b, "agent %d: oversized frame", a->k);
      return LOOM_EPROTO;
    }
    for (;;) {
      wire_frame f;
      int rc = wire_reader_pop(&a->rd, &f);
      if (rc == 0) break;
      if (rc < 0) {
        fail_at(b, "agent %d: malformed frame", a->k);
        return rc;
      }
      rc = on_frame(b, a, &f);
      wire_frame_free(&f);
      if (rc < 0) return rc;
    }
    /* the start of a CLUSTER frame like the first: compare the rest as it
     * comes */
    if (a->st == S_CLUSTER && b->ref_frame && a->rd.in.len >= WIRE_HDR &&
        !memcmp(a->rd.in.p, b->ref_frame, WIRE_HDR)) {
      size_t held = a->rd.in.len;
      ssize_t used = stream_cluster(b, a, a->rd.in.p, held);
      if (used < 0) return (int)used;
      loom__buf_consume(&a->rd.in, (size_t)used);
    }
    if ((size_t)r < sizeof buf) break;
  }
  return 0;
}

/* Runs the loop until every agent is done with the phase, or a failure, or
 * the phase's timeout. */
static int run_loop(bench *b) {
  struct epoll_event evs[256];
  uint64_t deadline = loom__now_ms() + PHASE_TIMEOUT_MS;
  while (b->done < b->n) {
    uint64_t now = loom__now_ms();
    if (now >= deadline) {
      fail_at(b, "phase %d timed out after %ds: %d of %d agents done", b->phase,
              PHASE_TIMEOUT_MS / 1000, b->done, b->n);
      return LOOM_ETIMEDOUT;
    }
    int k = epoll_wait(b->ep, evs, 256, (int)(deadline - now));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      fail_at(b, "epoll_wait: %s", strerror(errno));
      return LOOM_EIO;
    }
    for (int i = 0; i < k; i++) {
      agent *a = evs[i].data.ptr;
      if (a->st == S_CLOSED) continue;
      int rc = on_event(b, a, evs[i].events);
      if (rc < 0) return rc;
      if (rc == 1) agent_close(b, a);
    }
  }
  return 0;
}

/* ---- phases ------------------------------------------------------------- */
typedef struct {
  double total_s;                    /* first connect to the last agent done */
  double conn_p50_ms, conn_p99_ms;   /* connect() to established */
  double auth_p50_ms, auth_p99_ms;   /* established to AUTH_OK */
  double last_auth_s, last_assign_s; /* from the first connect */
  double cluster_spread_ms;          /* first CLUSTER to last */
  double from_register_s;            /* the first REGISTER sent to the last CLUSTER received */
} figures;

static void measure(bench *b, uint64_t t_first, figures *fg) {
  uint64_t *v = calloc((size_t)b->n, sizeof *v);
  uint64_t last_auth = 0, last_assign = 0, last_done = 0, first_cl = UINT64_MAX;
  uint64_t first_reg = UINT64_MAX;
  for (int i = 0; i < b->n; i++) {
    agent *a = &b->a[i];
    if (a->t_auth > last_auth) last_auth = a->t_auth;
    if (a->t_assign > last_assign) last_assign = a->t_assign;
    uint64_t d = b->phase == P_AUTH ? a->t_auth : a->t_cluster;
    if (d > last_done) last_done = d;
    if (a->t_cluster && a->t_cluster < first_cl) first_cl = a->t_cluster;
    if (a->t_register && a->t_register < first_reg) first_reg = a->t_register;
  }
  fg->from_register_s = first_reg != UINT64_MAX ? (double)(last_done - first_reg) / 1e9 : 0;
  fg->total_s = (double)(last_done - t_first) / 1e9;
  fg->last_auth_s = (double)(last_auth - t_first) / 1e9;
  fg->last_assign_s = last_assign ? (double)(last_assign - t_first) / 1e9 : 0;
  fg->cluster_spread_ms = first_cl != UINT64_MAX ? (double)(last_done - first_cl) / 1e6 : 0;
  if (v) {
    for (int i = 0; i < b->n; i++) v[i] = b->a[i].t_conn - b->a[i].t0;
    fg->conn_p50_ms = quantile_ms(v, b->n, 0.5);
    fg->conn_p99_ms = quantile_ms(v, b->n, 0.99);
    for (int i = 0; i < b->n; i++) v[i] = b->a[i].t_auth - b->a[i].t_conn;
    fg->auth_p50_ms = quantile_ms(v, b->n, 0.5);
    fg->auth_p99_ms = quantile_ms(v, b->n, 0.99);
  }
  free(v);
}

/* Opens every connection (all at once, as agents starting together do) and
 * runs the phase to its end. */
static int run_phase(bench *b, int phase, figures *fg) {
  b->phase = phase;
  b->done = 0;
  uint64_t t_first = loom__now_ns();
  for (int i = 0; i < b->n; i++) {
    b->a[i].k = i;
    if (agent_open(b, &b->a[i]) < 0) return LOOM_ECONN;
  }
  int rc = run_loop(b);
  if (rc == 0) measure(b, t_first, fg);
  return rc;
}

static void close_all(bench *b) {
  for (int i = 0; i < b->n; i++)
    if (b->a[i].st != S_CLOSED) agent_close(b, &b->a[i]);
}

/* Every agent reports its command started and exited 0, then hangs up. */
static int finish_all(bench *b) {
  b->phase = P_FINISH;
  for (int i = 0; i < b->n; i++) {
    agent *a = &b->a[i];
    if (send_frame(b, a, WIRE_STARTED, json_pack("{s:[]}", "pids"), NULL, 0) < 0 ||
        send_frame(b, a, WIRE_EXIT, json_pack("{s:i, s:i}", "code", 0, "signal", 0), NULL, 0) < 0) {
      fail_at(b, "worker:%d: cannot send STARTED/EXIT", i);
      return LOOM_ECONN;
    }
  }
  /* Wait until every queue is written before hanging up. */
  uint64_t deadline = loom__now_ms() + PHASE_TIMEOUT_MS;
  for (;;) {
    int left = 0;
    for (int i = 0; i < b->n; i++) left += b->a[i].out.len > 0;
    if (!left) break;
    if (loom__now_ms() >= deadline) {
      fail_at(b, "%d agents could not write STARTED/EXIT", left);
      return LOOM_ETIMEDOUT;
    }
    struct epoll_event evs[256];
    int k = epoll_wait(b->ep, evs, 256, 100);
    for (int i = 0; i < k; i++) {
      agent *a = evs[i].data.ptr;
      if (evs[i].events & EPOLLOUT) flush_out(b, a);
      if (evs[i].events & EPOLLIN) {
        char buf[65536];
        while (recv(a->fd, buf, sizeof buf, 0) > 0) {
        }
      }
    }
  }
  close_all(b);
  return 0;
}

/* The peak resident memory of process pid in MiB, or -1. */
static double peak_rss_mib(int pid) {
  char path[64], *st = NULL;
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  if (loom__read_file(path, 1 << 16, &st, NULL) < 0) return -1;
  const char *p = strstr(st, "VmHWM:");
  double kib = p ? strtod(p + 6, NULL) : -1024;
  free(st);
  return kib / 1024.0;
}

/* The coordinator is not our child: wait for its pid to go (or turn into a
 * zombie nobody reaped yet). */
static bool wait_gone(int pid, int timeout_ms) {
  uint64_t deadline = loom__now_ms() + (uint64_t)timeout_ms;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  while (loom__now_ms() < deadline) {
    if (kill(pid, 0) < 0 && errno == ESRCH) return true;
    char *st = NULL;
    if (loom__read_file(path, 4096, &st, NULL) == 0) {
      const char *p = strrchr(st, ')');
      bool zombie = p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
      free(st);
      if (zombie) return true;
    }
    usleep(2000);
  }
  return false;
}

static int check_state(bench *b) {
  char path[4096];
  snprintf(path, sizeof path, "%s/state.json", b->job_dir);
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  const char *st = json_string_value(json_object_get(j, "state"));
  int rc = 0;
  if (!st || strcmp(st, "succeeded")) {
    fail_at(b, "%s: state is %s, want succeeded", path, st ? st : "(unreadable)");
    rc = LOOM_ESTATE;
  } else {
    json_t *ts = json_object_get(j, "tasks");
    int ok = 0;
    for (size_t i = 0; i < json_array_size(ts); i++) {
      const char *s = json_string_value(json_object_get(json_array_get(ts, i), "state"));
      ok += s && !strcmp(s, "succeeded");
    }
    if (ok != b->n) {
      fail_at(b, "%s: %d of %d tasks succeeded", path, ok, b->n);
      rc = LOOM_ESTATE;
    }
  }
  json_decref(j);
  return rc;
}

static int wait_file(const char *dir, const char *name, int timeout_ms) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  uint64_t deadline = loom__now_ms() + (uint64_t)timeout_ms;
  while (access(path, F_OK) != 0) {
    if (loom__now_ms() >= deadline) return LOOM_ETIMEDOUT;
    usleep(1000);
  }
  return 0;
}

static int read_job(bench *b) {
  char path[4096];
  snprintf(path, sizeof path, "%s/coord.json", b->job_dir);
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  const char *addr = json_string_value(json_object_get(j, "addr"));
  b->coord_pid = (int)json_integer_value(json_object_get(j, "pid"));
  int rc = addr && b->coord_pid > 0 ? wire_split_hostport(addr, b->host, sizeof b->host, &b->port)
                                    : LOOM_EINVAL;
  json_decref(j);
  if (rc < 0) {
    fprintf(stderr, "coord_scale: %s: no addr and pid (%s)\n", path, je.text);
    return rc;
  }
  snprintf(path, sizeof path, "%s/secret", b->job_dir);
  if (loom__read_file(path, 256, &b->secret, NULL) < 0) {
    fprintf(stderr, "coord_scale: cannot read %s\n", path);
    return LOOM_EIO;
  }
  b->secret[strcspn(b->secret, " \r\n")] = 0;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: coord_scale JOBDIR N\n"
                    "  JOBDIR: a job made by `loom submit SPEC --backend external` whose\n"
                    "  spec has one role worker with N instances and command [\"true\"]\n");
    return 2;
  }
  bench b = {.job_dir = argv[1], .ep = -1, .ref_k = -1};
  long long n;
  if (loom__parse_int(argv[2], 1, 60000, &n) < 0) {
    fprintf(stderr, "coord_scale: N must be 1..60000, not %s\n", argv[2]);
    return 2;
  }
  b.n = (int)n;
  signal(SIGPIPE, SIG_IGN);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)b.n + 64) {
    fprintf(stderr, "coord_scale: the open-file limit %llu is below %d: raise ulimit -Hn\n",
            (unsigned long long)rl.rlim_cur, b.n + 64);
    return 2;
  }
  if (read_job(&b) < 0) return 1;
  /* coord.json appears before the coordinator has set up the attempt (for
   * 1000 tasks: a log file each, events, the first state.json); agents
   * connecting meanwhile would only wait in the listen backlog. Start the
   * clock once the rendezvous is open, and say how long that took. */
  uint64_t t_up = loom__now_ms();
  if (wait_file(b.job_dir, "state.json", PHASE_TIMEOUT_MS) < 0) {
    fprintf(stderr, "coord_scale: %s/state.json did not appear in %ds\n", b.job_dir,
            PHASE_TIMEOUT_MS / 1000);
    return 1;
  }
  double ready_s = (double)(loom__now_ms() - t_up) / 1e3;
  b.a = calloc((size_t)b.n, sizeof *b.a);
  b.ep = epoll_create1(EPOLL_CLOEXEC);
  if (!b.a || b.ep < 0) return 1;
  for (int i = 0; i < b.n; i++) b.a[i].fd = -1, b.a[i].st = S_CLOSED;

  figures fa = {0}, fr = {0};
  int rc = run_phase(&b, P_AUTH, &fa);
  close_all(&b);
  if (rc == 0) rc = run_phase(&b, P_RDV, &fr);
  double rss = rc == 0 ? peak_rss_mib(b.coord_pid) : -1;
  if (rc == 0) rc = finish_all(&b);
  close_all(&b);
  uint64_t t_wait = loom__now_ms();
  bool gone = wait_gone(b.coord_pid, EXIT_WAIT_MS);
  double exit_s = (double)(loom__now_ms() - t_wait) / 1e3;
  if (rc == 0 && !gone) {
    fail_at(&b, "the coordinator (pid %d) still runs %ds after every task exited", b.coord_pid,
            EXIT_WAIT_MS / 1000);
    rc = LOOM_ETIMEDOUT;
  }
  if (rc == 0) rc = check_state(&b);

  if (rc == 0)
    printf("name=coord_scale n=%d bytes=0 median_s=%.6f auth_all_s=%.6f "
           "auth_connect_p50_ms=%.3f auth_connect_p99_ms=%.3f auth_p50_ms=%.3f "
           "auth_p99_ms=%.3f rdv_connect_p50_ms=%.3f rdv_auth_p50_ms=%.3f "
           "rdv_last_auth_s=%.6f rdv_last_assign_s=%.6f cluster_spread_ms=%.3f "
           "from_register_s=%.6f coord_ready_wait_s=%.3f coord_exit_s=%.3f "
           "coord_peak_rss_mib=%.1f\n",
           b.n, fr.total_s, fa.total_s, fa.conn_p50_ms, fa.conn_p99_ms, fa.auth_p50_ms,
           fa.auth_p99_ms, fr.conn_p50_ms, fr.auth_p50_ms, fr.last_auth_s, fr.last_assign_s,
           fr.cluster_spread_ms, fr.from_register_s, ready_s, exit_s, rss);
  else
    fprintf(stderr, "coord_scale: FAILED: %s\n", b.err[0] ? b.err : loom_strerror(rc));
  close(b.ep);
  free(b.a);
  free(b.secret);
  free(b.ref);
  free(b.ref_frame);
  return rc == 0 ? 0 : 1;
}
