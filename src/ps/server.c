/* server.c: `loom ps`, one shard of the parameter server.
 *
 * One thread, one poll() loop over the listening socket, the stop and
 * abort fds and every client connection; no request blocks the loop. Each
 * connection reads into its own buffer (grown to the message at its head,
 * never past LOOM_PS_MAX_MSG) and answers in order. A request that must
 * wait (a SYNC pull or push for a later step, a BOUNDED step past the
 * staleness bound, a barrier, a SYNC save) "parks" its connection: nothing
 * behind it is served until it is. Whenever the step, a clock or the
 * barrier moves, parked connections are tried again.
 *
 * Replies are written straight from the variables when the socket takes
 * them (writev of header and data) and copied only for what it does not;
 * a connection with more than OUT_HIGH bytes unsent is not read until it
 * drains, so a client that stops reading cannot make the shard buffer
 * without bound.
 *
 * Connections that have not authenticated yet are kept apart: at most
 * LOOM_PREAUTH_MAX of them (oldest evicted first when another arrives),
 * each closed LOOM_AUTH_TIMEOUT after it connected, so that idle or
 * junk connections, however many, cannot keep a worker out. Authenticated
 * connections have their own cap, LOOM_PS_MAX_CONNS. What is refused,
 * evicted or timed out is logged through a rate limiter.
 *
 * What each request does is in handlers.c. */
#include "ps/server.h"
#include "lib/lib.h"
#include "ps/ps.h"
#include "ps/server_int.h"
#include "core/exitcode.h"
#include "core/fifo.h"
#include "core/ratelog.h"
#include "wire/wire_tls.h"
#include "wire/wire.h"
#include "wire/wire_auth.h"

#include <arpa/inet.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- connections ------------------------------------------------------- */
#define REFUSED "refused connections"

/* Closes c once this turn of the loop is over. A connection that never
 * authenticated is anyone's: its warning goes through the rate limiter. */
void ps_conn_close(ps_server *s, conn *c, const char *why) {
  if (!c->closing && why) {
    if (c->authed)
      loom__log(LOOM_LOG_WARN, "ps", "shard %d: closing the connection from %s: %s", s->cfg.shard,
                c->peer, why);
    else
      loom__ratelog_warn(&s->refused, "ps", REFUSED, c->peer,
                         "shard %d: closing the unauthenticated connection from %s: %s",
                         s->cfg.shard, c->peer, why);
  }
  loom__fifo_remove(&s->pa, &c->pa);
  c->closing = true;
}

/* Makes room for one more unauthenticated connection: evicts the oldest. */
static void pa_make_room(ps_server *s) {
  while (s->pa.n && s->pa.n >= s->pa_max) {
    conn *old = loom__fifo_oldest(&s->pa);
    char why[96];
    snprintf(why, sizeof why, "evicted: LOOM_PREAUTH_MAX (%zu) connections wait to authenticate",
             s->pa_max);
    ps_conn_close(s, old, old->closing ? NULL : why);
  }
}

/* Feeds the handshake what has arrived; false when the connection must
 * wait for more or was closed (c->closing says which). */
static bool authenticate(ps_server *s, conn *c) {
  unsigned char proof[WIRE_AUTH_MSG_MAX];
  size_t used, plen;
  int rc = wire_auth_server_feed(&c->auth, c->in + c->in_off, c->in_len - c->in_off, &used, proof,
                                 &plen);
  c->in_off += used;
  if (rc == 0) return false;
  if (rc < 0) {
    char why[160];
    snprintf(why, sizeof why, "authentication failed: %s", c->auth.why);
    ps_conn_close(s, c, why);
    return false;
  }
  if (s->nauthed >= (size_t)s->tun.max_conns) {
    char why[96];
    snprintf(why, sizeof why, "LOOM_PS_MAX_CONNS (%lld) authenticated connections open",
             s->tun.max_conns);
    ps_conn_close(s, c, why);
    return false;
  }
  if (ps_out_room(c, plen) < 0) {
    ps_conn_close(s, c, "out of memory");
    return false;
  }
  memcpy(c->out + c->out_len, proof, plen);
  c->out_len += plen;
  ps_conn_flush(c);
  loom__fifo_remove(&s->pa, &c->pa);
  c->authed = true;
  s->nauthed++;
  return true;
}

/* Serves what is complete in the input buffer, in order. */
static void conn_work(ps_server *s, conn *c) {
  while (!c->closing && !c->parked) {
    size_t avail = c->in_len - c->in_off;
    if (!c->authed) {
      if (avail == 0 || !authenticate(s, c)) return;
      continue;
    }
    if (ps_out_pending(c) > OUT_HIGH || avail < PS_HDR) return;
    if ((uintptr_t)(c->in + c->in_off) & 7) { /* keep payloads aligned */
      memmove(c->in, c->in + c->in_off, avail);
      c->in_off = 0;
      c->in_len = avail;
    }
    const unsigned char *p = c->in + c->in_off;
    ps_hdr h;
    ps_hdr_get(p, &h);
    if (h.op == 0 || h.op >= PS_OP__END || h.rc != 0 || h.len > (uint64_t)s->tun.max_msg) {
      char why[96];
      snprintf(why, sizeof why, "bad request header (op %u, %u bytes)", h.op, h.len);
      ps_conn_close(s, c, why);
      return;
    }
    if (avail < PS_HDR + (size_t)h.len) return;
    int r = ps_dispatch(s, c, &h, p + PS_HDR);
    if (r == PARK) {
      c->parked = true;
      return;
    }
    if (r == CLOSE) {
      char why[96];
      snprintf(why, sizeof why, "malformed %s request", ps_op_name(h.op));
      ps_conn_close(s, c, why);
      return;
    }
    c->in_off += PS_HDR + h.len;
    c->admitted = false;
  }
}

/* Reads what the socket has, making room for the head message. */
static void conn_read(ps_server *s, conn *c) {
  if (c->in_off == c->in_len) {
    c->in_off = c->in_len = 0;
    if (c->in_cap > SHRINK_AT) {
      free(c->in);
      c->in = NULL;
      c->in_cap = 0;
    }
  }
  size_t want = IN_MIN;
  size_t avail = c->in_len - c->in_off;
  if (c->authed && avail >= PS_HDR) {
    uint32_t len;
    memcpy(&len, c->in + c->in_off, 4); /* little-endian host */
    if (len <= (uint64_t)s->tun.max_msg && PS_HDR + (size_t)len > want) want = PS_HDR + len;
  }
  if (c->in_cap - c->in_off < want || c->in_cap - c->in_len < 4096) {
    if (c->in_off) {
      memmove(c->in, c->in + c->in_off, avail);
      c->in_off = 0;
      c->in_len = avail;
    }
    if (c->in_cap < want) {
      unsigned char *p = realloc(c->in, want);
      if (!p) {
        ps_conn_close(s, c, "out of memory");
        return;
      }
      c->in = p;
      c->in_cap = want;
    }
  }
  /* TLS hands over a record at a time: read on while it has more */
  do {
    if (c->in_len == c->in_cap) return; /* full of requests behind a parked one */
    ssize_t n = wire_io_recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      ps_conn_close(s, c, NULL); /* the client went away: not worth a warning */
      return;
    }
    c->in_len += (size_t)n;
  } while (c->tls && wire_io_pending(c->fd));
}

/* One step of a connection's TLS handshake. */
static void conn_tls_step(ps_server *s, conn *c) {
  char why[200];
  int rc = wire_io_handshake(c->fd, &c->tls_ww, why, sizeof why);
  if (rc < 0) {
    char msg[260];
    snprintf(msg, sizeof msg, "TLS: %s", why);
    ps_conn_close(s, c, msg);
  } else if (rc == 1) {
    c->tls_hs = false;
    ps_conn_flush(c); /* the challenge */
  }
}

static void conn_free(ps_server *s, conn *c) {
  if (c->bar_target > s->bar_gen && s->bar_arrived > 0) s->bar_arrived--;
  loom__fifo_remove(&s->pa, &c->pa);
  if (c->authed) s->nauthed--;
  wire_io_close(c->fd);
  free(c->in);
  free(c->out);
  free(c);
  s->nconns--;
}

static void conn_accept(ps_server *s) {
  /* a bounded batch: the evicted give their descriptors back between */
  for (int batch = 0; batch < 256; batch++) {
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    int fd = accept4(s->cfg.listen_fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* The oldest waiting connection gives its descriptor back at the
         * end of this turn; until then the listener rests. */
        pa_make_room(s);
        if (s->pa.n)
          ps_conn_close(s, loom__fifo_oldest(&s->pa), "evicted: out of file descriptors");
        s->accept_paused_until = loom__now_ms() + 50;
        loom__ratelog_warn(&s->refused, "ps", REFUSED, "?",
                           "shard %d: cannot accept a connection: %s", s->cfg.shard,
                           strerror(errno));
      }
      return;
    }
    pa_make_room(s);
    conn *c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->rank = -1;
    c->deadline_ms = loom__now_ms() + (uint64_t)s->auth_ms;
    char host[48] = "?";
    if (sa.ss_family == AF_INET)
      inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, host, sizeof host);
    else if (sa.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, host, sizeof host);
    snprintf(c->peer, sizeof c->peer, "%s", host);
    c->next = s->conns;
    s->conns = c;
    s->nconns++;
    loom__fifo_push(&s->pa, &c->pa, c);
    unsigned char ch[WIRE_AUTH_MSG_MAX];
    size_t chlen;
    if (wire_auth_server_start(&c->auth, &wire_auth_ps, s->secret, NULL, 0, ch, &chlen) < 0 ||
        ps_out_room(c, chlen) < 0) {
      ps_conn_close(s, c, "out of memory or randomness");
      continue;
    }
    memcpy(c->out, ch, chlen);
    c->out_len = chlen;
    if (wire_tls_wanted(fd)) {
      if (wire_io_attach(fd, true, s->secret, wire_auth_ps.label) < 0) {
        ps_conn_close(s, c, "TLS could not start");
        continue;
      }
      c->tls = c->tls_hs = true;
      continue; /* the client speaks first */
    }
    ps_conn_flush(c);
  }
}

/* Tries parked connections again until nothing moves. */
static void unpark(ps_server *s) {
  while (s->changed) {
    s->changed = false;
    for (conn *c = s->conns; c; c = c->next) {
      if (!c->parked || c->closing) continue;
      c->parked = false;
      conn_work(s, c);
    }
  }
}

/* ---- for the fuzz harness ------------------------------------------------ */
int loom__ps_server_feed(ps_server *s, int fd, const void *data, size_t n) {
  conn *c = s->conns;
  if (!c) { /* as conn_accept and authenticate leave one */
    if (!(c = calloc(1, sizeof *c))) return 0;
    c->fd = fd;
    c->rank = -1;
    c->authed = true;
    snprintf(c->peer, sizeof c->peer, "fuzz");
    s->conns = c;
    s->nconns++;
    s->nauthed++;
  }
  if (c->closing) return 0;
  ps_conn_flush(c);
  if (c->in_off) {
    memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
    c->in_len -= c->in_off;
    c->in_off = 0;
  }
  if (n > c->in_cap - c->in_len) {
    unsigned char *p = realloc(c->in, c->in_len + n);
    if (!p) return 0;
    c->in = p;
    c->in_cap = c->in_len + n;
  }
  if (n) memcpy(c->in + c->in_len, data, n);
  c->in_len += n;
  conn_work(s, c);
  unpark(s);
  return !c->closing && !c->parked;
}

/* ---- the server -------------------------------------------------------- */
int loom__ps_server_new(const ps_server_cfg *cfg, ps_server **out) {
  *out = NULL;
  ps_server *s = calloc(1, sizeof *s);
  if (!s) {
    close(cfg->listen_fd);
    return LOOM_ENOMEM;
  }
  s->cfg = *cfg;
  loom__strlcpy(s->secret, cfg->secret ? cfg->secret : "", sizeof s->secret);
  s->cfg.secret = s->secret;
  ps_tunables_load(&s->tun);
  s->auth_ms = (int)loom__tun(LOOM_TUN_AUTH_TIMEOUT_MS);
  long long pa_max = loom__tun(LOOM_TUN_PREAUTH_MAX);
  s->pa_max = pa_max < 1 ? 1 : (size_t)pa_max;
  ps_state_init(&s->st, cfg->shard, cfg->nshards, (uint64_t)s->tun.split_bytes,
                (uint64_t)s->tun.max_memory);
  if (s->tun.threads == 0) { /* the host's cores over its ps tasks, at most 4 */
    cpu_set_t cs;            /* the cores this process may run on (a task's share) */
    long cpus =
        sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : sysconf(_SC_NPROCESSORS_ONLN);
    long co = cfg->colocated > 1 ? cfg->colocated : 1;
    s->tun.threads = cpus / co < 1 ? 1 : cpus / co > 4 ? 4 : cpus / co;
  }
  if (ps_pool_new((int)s->tun.threads, (uint64_t)s->tun.spin_us * 1000u, &s->pool) < 0)
    loom__log(LOOM_LOG_WARN, "ps",
              "shard %d: could not start %lld threads (LOOM_PS_THREADS): serving on one",
              cfg->shard, s->tun.threads);
  s->st.pool = s->pool;
  int fl = fcntl(cfg->listen_fd, F_GETFL);
  if (fl < 0 || fcntl(cfg->listen_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    loom__ps_server_free(s);
    return LOOM_EIO;
  }
  *out = s;
  return 0;
}

int loom__ps_server_threads(const ps_server *s) { return ps_pool_threads(s->pool); }

void loom__ps_server_free(ps_server *s) {
  if (!s) return;
  while (s->conns) {
    conn *c = s->conns;
    s->conns = c->next;
    conn_free(s, c);
  }
  loom__ratelog_flush(&s->refused, "ps", REFUSED);
  if (s->cfg.listen_fd >= 0) close(s->cfg.listen_fd);
  ps_state_free(&s->st);
  ps_pool_free(s->pool);
  free(s->clock);
  free(s);
}

int loom__ps_server_run(ps_server *s) {
  struct pollfd *pfd = NULL;
  conn **who = NULL;
  size_t cap = 0;
  int rc = 0;
  /* after a request, the next one is often a few microseconds away (a
   * worker's next pull or push): poll without sleeping for a while */
  uint64_t spin_until = 0, spin_ns = (uint64_t)s->tun.spin_us * 1000u;
  for (;;) {
    if (s->nconns + 3 > cap) {
      size_t ncap = (s->nconns + 3) * 2;
      struct pollfd *np = realloc(pfd, ncap * sizeof *np);
      if (np) pfd = np;
      conn **nw = realloc(who, ncap * sizeof *nw);
      if (nw) who = nw;
      if (!np || !nw) {
        rc = LOOM_ENOMEM;
        break;
      }
      cap = ncap;
    }
    size_t n = 0;
    uint64_t now = loom__now_ms();
    int timeout = -1;
    pfd[n] = (struct pollfd){.fd = s->cfg.stop_fd, .events = POLLIN};
    who[n++] = NULL;
    pfd[n] = (struct pollfd){.fd = s->cfg.abort_fd, .events = POLLIN};
    who[n++] = NULL;
    size_t lidx = n;
    bool resting = now < s->accept_paused_until;
    pfd[n] = (struct pollfd){.fd = s->cfg.listen_fd, .events = resting ? 0 : POLLIN};
    who[n++] = NULL;
    if (resting) timeout = (int)(s->accept_paused_until - now);
    if (s->refused.suppressed && (timeout < 0 || timeout > 1000)) timeout = 1000;
    for (conn *c = s->conns; c; c = c->next) {
      short ev = 0;
      /* a parked connection reads on until its buffer is full */
      if (ps_out_pending(c) <= OUT_HIGH && (!c->parked || c->in_len - c->in_off < c->in_cap))
        ev |= POLLIN;
      if (ps_out_pending(c)) ev |= POLLOUT;
      if (c->tls_hs) ev = c->tls_ww ? POLLOUT : POLLIN;
      c->tls_held = c->tls && !c->tls_hs && (ev & POLLIN) && wire_io_pending(c->fd);
      if (c->tls_held) timeout = 0;
      pfd[n] = (struct pollfd){.fd = c->fd, .events = ev};
      who[n++] = c;
      if (!c->authed) {
        int left = c->deadline_ms > now ? (int)(c->deadline_ms - now) : 0;
        if (timeout < 0 || left < timeout) timeout = left;
      }
    }
    int pr = timeout == 0 ? poll(pfd, (nfds_t)n, 0) : ps_poll_spin(pfd, n, timeout, spin_until);
    if (pr < 0 && errno == EINTR) continue;
    if (pr > 0 && spin_ns) spin_until = loom__now_ns() + spin_ns;
    if (pr < 0) {
      rc = LOOM_EIO;
      break;
    }
    if (pfd[0].revents) break;
    if (pfd[1].revents) {
      loom__log(LOOM_LOG_INFO, "ps", "shard %d: the job's attempt is over", s->cfg.shard);
      break;
    }
    if (pfd[lidx].revents & POLLIN) conn_accept(s);
    for (size_t i = lidx + 1; i < n; i++) {
      conn *c = who[i];
      short re = pfd[i].revents | (c->tls_held ? POLLIN : 0);
      if (!re || c->closing) continue;
      if (c->tls_hs) {
        conn_tls_step(s, c);
        continue;
      }
      if (re & POLLOUT) ps_conn_flush(c);
      if (re & (POLLIN | POLLHUP | POLLERR)) conn_read(s, c);
      conn_work(s, c);
    }
    now = loom__now_ms();
    /* the queue is in order of arrival: the expired are at its head */
    conn *old;
    while ((old = loom__fifo_oldest(&s->pa)) && now >= old->deadline_ms)
      ps_conn_close(s, old, "did not authenticate in time");
    loom__ratelog_tick(&s->refused, "ps", REFUSED);
    unpark(s);
    for (conn **pp = &s->conns; *pp;) {
      conn *c = *pp;
      if (!c->closing) {
        pp = &c->next;
        continue;
      }
      *pp = c->next;
      conn_free(s, c);
    }
  }
  free(pfd);
  free(who);
  return rc;
}

/* ---- `loom ps` --------------------------------------------------------- */
static int env_index(const char *name, int def) {
  const char *v = getenv(name);
  long long x;
  if (!v || !*v || loom__parse_int(v, 0, 1 << 20, &x) < 0) return def;
  return (int)x;
}

static bool is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  return sa->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* The address to listen on: host (an address, or a name resolved here),
 * or every interface when host is NULL, "*", "0.0.0.0" or "::", or when a
 * name resolves to a loopback address it does not mean ("node1" at
 * 127.0.1.1 in /etc/hosts: the other hosts know it by another address). */
static void bind_addr(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len) {
  struct sockaddr_in any = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
  memcpy(ss, &any, sizeof any);
  *len = sizeof any;
  if (!host || !*host || !strcmp(host, "*") || !strcmp(host, "0.0.0.0")) return;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
  char svc[16];
  snprintf(svc, sizeof svc, "%d", port);
  unsigned char tmp[sizeof(struct in6_addr)];
  bool numeric = inet_pton(AF_INET, host, tmp) == 1 || inet_pton(AF_INET6, host, tmp) == 1;
  if (getaddrinfo(host, svc, &hints, &ai) != 0 || !ai) {
    loom__log(LOOM_LOG_WARN, "ps", "cannot resolve '%s'; listening on every interface", host);
    return;
  }
  if (numeric || strcmp(host, "localhost") == 0 || !is_loopback(ai->ai_addr)) {
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
  } else {
    loom__log(LOOM_LOG_INFO, "ps",
              "'%s' resolves to a loopback address here; "
              "listening on every interface",
              host);
  }
  freeaddrinfo(ai);
}

static int listen_on(const char *host, int port, int *out) {
  struct sockaddr_storage sa;
  socklen_t salen;
  bind_addr(host, port, &sa, &salen);
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return LOOM_EIO;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  /* The agent released the port just before it exec'ed us. */
  uint64_t until = loom__now_ms() + 5000;
  while (bind(fd, (struct sockaddr *)&sa, salen) < 0) {
    if (errno != EADDRINUSE || loom__now_ms() >= until) {
      int e = errno;
      close(fd);
      errno = e;
      return LOOM_EIO;
    }
    usleep(50000);
  }
  if (listen(fd, 1024) < 0) {
    close(fd);
    return LOOM_EIO;
  }
  *out = fd;
  return 0;
}

int loom__ps_main(int argc, char **argv) {
  if (argc > 1) {
    fprintf(stderr,
            "loom ps: unexpected argument '%s' (loom ps takes none; it reads "
            "LOOM_CLUSTER, LOOM_INDEX and LOOM_SECRET from its job)\n",
            argv[1]);
    return LOOM_EXIT_USAGE;
  }
  const char *cl = getenv("LOOM_CLUSTER"), *secret = getenv("LOOM_SECRET");
  if (!cl || !secret || !*secret) {
    fprintf(stderr, "loom ps: LOOM_CLUSTER and LOOM_SECRET are not set: run loom ps as "
                    "the command of a job's ps role (roles: {ps: {command: loom ps}})\n");
    return LOOM_EXIT_USAGE;
  }
  int index = env_index("LOOM_INDEX", 0);
  json_error_t jerr;
  json_t *cj = json_loads(cl, 0, &jerr);
  json_t *list = json_object_get(cj, "ps");
  const char *me = json_string_value(json_array_get(list, (size_t)index));
  char host[256];
  int port = 0;
  if (!me || wire_split_hostport(me, host, sizeof host, &port) < 0) {
    fprintf(stderr,
            "loom ps: LOOM_CLUSTER has no ps task %d (is this the ps role? "
            "LOOM_CLUSTER=%.200s)\n",
            index, cl);
    json_decref(cj);
    return LOOM_EXIT_USAGE;
  }
  int nshards = (int)json_array_size(list), colocated = 0;
  for (int i = 0; i < nshards; i++) { /* the ps tasks on this host */
    char h[256];
    int pt;
    const char *a = json_string_value(json_array_get(list, (size_t)i));
    if (a && wire_split_hostport(a, h, sizeof h, &pt) == 0 && !strcmp(h, host)) colocated++;
  }
  json_decref(cj);
  /* the task's address, not every interface, unless LOOM_PS_BIND says */
  const char *bind_to = loom__tun_str(LOOM_TUN_PS_BIND);
  if (!*bind_to) bind_to = host;
  int lfd;
  if (listen_on(bind_to, port, &lfd) < 0) {
    fprintf(stderr, "loom ps: cannot listen on %s port %d: %s%s\n", bind_to, port, strerror(errno),
            errno == EADDRNOTAVAIL ? " (not an address of this host: set LOOM_PS_BIND, "
                                     "e.g. LOOM_PS_BIND=0.0.0.0)"
                                   : "");
    return LOOM_EXIT_FAILED;
  }
  /* hold LOOM_PS_MAX_CONNS workers, whatever the soft limit was */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  signal(SIGPIPE, SIG_IGN);
  sigset_t ss;
  sigemptyset(&ss);
  sigaddset(&ss, SIGTERM);
  sigaddset(&ss, SIGINT);
  sigprocmask(SIG_BLOCK, &ss, NULL);
  int sfd = signalfd(-1, &ss, SFD_CLOEXEC | SFD_NONBLOCK);
  loom_t *l = NULL;
  if (getenv("LOOM_COORD") && loom_init(&l) < 0) {
    loom__log(LOOM_LOG_WARN, "ps",
              "shard %d: cannot reach the coordinator; "
              "serving without it",
              index);
    l = NULL;
  }
  ps_server_cfg cfg = {.listen_fd = lfd,
                       .stop_fd = sfd,
                       .abort_fd = loom__abort_fd(l),
                       .shard = index,
                       .nshards = nshards,
                       .world = env_index("LOOM_WORLD_SIZE", 0),
                       .colocated = colocated,
                       .secret = secret};
  ps_server *s;
  int rc = sfd < 0 ? LOOM_EIO : loom__ps_server_new(&cfg, &s);
  if (rc == 0) {
    fprintf(stderr, "loom ps: shard %d of %d serving on port %d (%s), %d thread%s\n", index,
            nshards, port, bind_to, loom__ps_server_threads(s),
            loom__ps_server_threads(s) == 1 ? "" : "s");
    if (l) {
      char detail[96];
      snprintf(detail, sizeof detail, "{\"shard\": %d, \"shards\": %d, \"port\": %d}", index,
               nshards, port);
      loom_event(l, "ps_serving", detail);
    }
    rc = loom__ps_server_run(s);
    loom__ps_server_free(s);
  } else if (sfd < 0) {
    close(lfd);
  }
  if (sfd >= 0) close(sfd);
  loom_finish(l);
  if (rc < 0) fprintf(stderr, "loom ps: shard %d failed: %s\n", index, loom_strerror(rc));
  return rc < 0 ? LOOM_EXIT_FAILED : LOOM_EXIT_OK;
}
