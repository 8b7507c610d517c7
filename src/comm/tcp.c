/* tcp.c: the TCP transport, for peers on other hosts (or every peer with
 * LOOM_COMM_TRANSPORT=tcp).
 *
 * Each rank listens on an ephemeral port and publishes it through the store
 * next to its host; there is no configured port. Links are a full mesh:
 * rank i connects to every lower TCP peer, then accepts the higher ones, so
 * setup cannot deadlock (rank 0 only accepts; by induction every rank
 * reaches its accept loop). A link that leaves the host runs inside TLS
 * 1.3 keyed by the job secret (wire/wire_tls.h, LOOM_TLS), set up before
 * anything else is said on it. Every connection opens with the connector's
 * hello (magic, its rank, the acceptor's, the world size, the
 * communicator's tag), then authenticates both ways with the shared
 * handshake (wire/wire_auth.h, wire_auth_comm) keyed with the job's secret
 * (LOOM_SECRET; without one the handshake still checks the communicator,
 * ranks and world size) and the hello bound into its MACs. Handshake bytes come from anyone who can connect,
 * so every field is checked before use; after it, the stream carries only
 * raw message bytes whose lengths both sides already know.
 *
 * Sockets are non-blocking with TCP_NODELAY and large buffers; a receive
 * that is reduced rather than copied goes through a per-link staging buffer
 * and is handed on in whole 8-byte units. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "comm/comm.h"
#include "core/bytes.h"
#include "wire/wire_auth.h"
#include "wire/wire_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TCP_MAGIC "LOOMCOM2"
#define HELLO_LEN 56 /* magic, rank_c, rank_a, world, 0, tag */

struct tcp_link {
  comm_t *c;
  int fd;
  int peer;
  char *stage; /* tcp_stage bytes, for reducing receives */
  size_t have; /* bytes in stage not yet handed on */
  bool tls;    /* the link runs inside TLS */
  bool held;   /* a send waits for a whole record's worth (TLS) */
};

/* Under TLS a send waits until it has a whole record's worth of bytes (or
 * the stage's last ones): a pipelined stage whose bytes arrive a few KiB at
 * a time would otherwise make as many small records, each with its own
 * encryption setup and system call. */
#define TLS_SEND_MIN (16 * 1024)

struct tcp_dev {
  int lfd;
  struct tcp_link *links; /* [world], fd -1 where no link */
  int n;
};

#define TCP_LOCAL_SOCKBUF (256 << 10)

/* Socket options for a link to peer (-1: the listener, peer unknown). */
static int tcp_tune(comm_t *c, int fd, int peer) {
  int one = 1;
  long want = c->t.tcp_sockbuf;
  if (want < 0) /* auto: small to this host, the kernel's choice beyond */
    want = peer >= 0 && strcmp(c->hosts[peer], c->host) == 0 ? TCP_LOCAL_SOCKBUF : 0;
  int b = want > INT_MAX / 2 ? INT_MAX / 2 : (int)want;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (b > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
  }
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int ms_left(comm_t *c) {
  uint64_t now = comm__now_ns();
  if (now >= c->deadline_ns) return 0;
  uint64_t ms = (c->deadline_ns - now) / 1000000u + 1;
  return ms > 1000000 ? 1000000 : (int)ms;
}

/* Moves exactly len bytes over a non-blocking fd before the deadline. */
static int tcp_full(comm_t *c, int fd, void *buf, size_t len, int wr) {
  size_t off = 0;
  while (off < len) {
    ssize_t r = wr ? wire_io_send(fd, (char *)buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT)
                   : wire_io_recv(fd, (char *)buf + off, len - off, MSG_DONTWAIT);
    if (r > 0) {
      off += (size_t)r;
      continue;
    }
    if (r == 0) return LOOM_ECONN;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return LOOM_ECONN;
    if (!wr && wire_io_pending(fd)) continue;
    struct pollfd p = {.fd = fd, .events = wr ? POLLOUT : POLLIN};
    int ms = ms_left(c);
    if (ms == 0) return LOOM_ETIMEDOUT;
    if (poll(&p, 1, ms) < 0 && errno != EINTR) return LOOM_EIO;
  }
  return 0;
}

static const char *tcp_secret(void) {
  const char *secret = getenv("LOOM_SECRET");
  return secret ? secret : "";
}

static void tcp_tag(comm_t *c, unsigned char *tag) {
  SHA256((const unsigned char *)c->prefix, strlen(c->prefix), tag);
}

/* Connector's side: TLS where the link leaves the host (wire_tls.h), the
 * hello (which link this is), then the client side of the shared handshake
 * (wire_auth_comm) with the hello bound into both MACs. why gets TLS's
 * reason when TLS failed. */
static int tcp_hs_connect(comm_t *c, int fd, int peer, char *why, size_t whylen) {
  unsigned char hello[HELLO_LEN] = {0};
  int rc = wire_io_client(fd, tcp_secret(), wire_auth_comm.label,
                          loom__now_ms() + (uint64_t)ms_left(c), why, whylen);
  if (rc < 0) return rc;
  memcpy(hello, TCP_MAGIC, 8);
  loom__put_be32(hello + 8, (uint32_t)c->rank);
  loom__put_be32(hello + 12, (uint32_t)peer);
  loom__put_be32(hello + 16, (uint32_t)c->world);
  tcp_tag(c, hello + 24);
  rc = tcp_full(c, fd, hello, sizeof hello, 1);
  if (rc < 0) return rc;
  return wire_auth_client_fd(fd, &wire_auth_comm, tcp_secret(), hello, sizeof hello,
                             loom__now_ms() + (uint64_t)ms_left(c));
}

/* Acceptor's side: check the hello, then the server side of the shared
 * handshake. Returns the connector's rank or an error. */
static int tcp_hs_accept(comm_t *c, struct tcp_dev *d, int fd) {
  unsigned char hello[HELLO_LEN], tag[32], msg[WIRE_AUTH_MSG_MAX];
  size_t len, used;
  int rc = 0;
  if (wire_tls_wanted(fd)) {
    char why[160];
    if ((rc = wire_io_attach(fd, true, tcp_secret(), wire_auth_comm.label)) < 0) return rc;
    rc = wire_io_handshake_wait(fd, loom__now_ms() + (uint64_t)ms_left(c), why, sizeof why);
    if (rc < 0) {
      loom__log(LOOM_LOG_WARN, "comm", "rank %d: refused a TCP connection: %s", c->rank, why);
      return rc;
    }
  }
  if ((rc = tcp_full(c, fd, hello, sizeof hello, 0)) < 0) return rc;
  uint32_t from = loom__get_be32(hello + 8), to = loom__get_be32(hello + 12),
           world = loom__get_be32(hello + 16);
  tcp_tag(c, tag);
  if (memcmp(hello, TCP_MAGIC, 8) != 0 || to != (uint32_t)c->rank || world != (uint32_t)c->world ||
      from >= world || from <= (uint32_t)c->rank || memcmp(hello + 24, tag, 32) != 0 ||
      d->links[from].c == NULL || d->links[from].fd >= 0)
    return LOOM_EPROTO;
  wire_auth_server hs;
  if ((rc = wire_auth_server_start(&hs, &wire_auth_comm, tcp_secret(), hello, sizeof hello, msg,
                                   &len)) < 0 ||
      (rc = tcp_full(c, fd, msg, len, 1)) < 0 ||
      (rc = tcp_full(c, fd, msg, wire_auth_answer_len(&wire_auth_comm), 0)) < 0)
    return rc;
  rc = wire_auth_server_feed(&hs, msg, wire_auth_answer_len(&wire_auth_comm), &used, msg, &len);
  if (rc < 0) return rc;
  if (rc == 0) return LOOM_EPROTO; /* cannot happen: the whole answer was fed */
  if ((rc = tcp_full(c, fd, msg, len, 1)) < 0) return rc;
  return (int)from;
}

static int tcp_connect_to(comm_t *c, int peer, int *out) {
  char key[LOOM_KV_MAX_KEY + 1], port[16];
  snprintf(key, sizeof key, "%s/tcp/%d", c->prefix, peer);
  void *val = NULL;
  size_t len = 0;
  int rc = c->store->ops->get(c->store, key, ms_left(c), &val, &len);
  if (rc < 0)
    return comm__fail(c, rc,
                      "rank %d: rank %d did not publish its TCP "
                      "port: %s",
                      c->rank, peer, loom_strerror(rc));
  char *end = NULL;
  long p = len < sizeof port ? strtol(val, &end, 10) : 0;
  int ok = end && *end == 0 && p > 0 && p < 65536;
  free(val);
  if (!ok) return comm__fail(c, LOOM_EPROTO, "rank %d: bad TCP port from rank %d", c->rank, peer);
  snprintf(port, sizeof port, "%ld", p);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  int g = getaddrinfo(c->hosts[peer], port, &hints, &ai);
  if (g != 0)
    return comm__fail(c, LOOM_ECONN,
                      "rank %d: cannot resolve %s (rank %d): "
                      "%s",
                      c->rank, c->hosts[peer], peer, gai_strerror(g));
  int fd = -1;
  rc = LOOM_ECONN;
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    tcp_tune(c, fd, peer);
    int r = connect(fd, a->ai_addr, a->ai_addrlen);
    if (r < 0 && errno == EINPROGRESS) {
      struct pollfd pf = {.fd = fd, .events = POLLOUT};
      int err = 0;
      socklen_t el = sizeof err;
      if (poll(&pf, 1, ms_left(c)) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 &&
          err == 0)
        r = 0;
    }
    if (r < 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  char why[160] = "";
  if (fd < 0)
    return comm__fail(c, LOOM_ECONN,
                      "rank %d: cannot connect to rank %d at "
                      "%s:%s",
                      c->rank, peer, c->hosts[peer], port);
  rc = tcp_hs_connect(c, fd, peer, why, sizeof why);
  if (rc < 0) {
    wire_io_close(fd);
    return comm__fail(c, rc, "rank %d: handshake with rank %d at %s:%s failed: %s", c->rank, peer,
                      c->hosts[peer], port, why[0] ? why : loom_strerror(rc));
  }
  *out = fd;
  return 0;
}

static int tcp_setup(comm_t *c, const int *peers, int n) {
  struct tcp_dev *d = calloc(1, sizeof *d);
  if (!d) return comm__fail(c, LOOM_ENOMEM, "out of memory");
  c->tcp = d;
  d->lfd = -1;
  d->links = calloc((size_t)c->world, sizeof *d->links);
  if (!d->links) return comm__fail(c, LOOM_ENOMEM, "out of memory");
  for (int i = 0; i < c->world; i++) d->links[i].fd = -1;
  /* Listen (dual-stack where there is IPv6) on an ephemeral port. */
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = in6addr_any};
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), zero = 0;
  if (fd >= 0) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, (struct sockaddr *)&a6, sizeof a6) < 0) {
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a4, sizeof a4) < 0) {
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0)
    return comm__fail(c, LOOM_EIO, "rank %d: cannot open a TCP listener: %s", c->rank,
                      strerror(errno));
  d->lfd = fd;
  tcp_tune(c, fd, -1);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (listen(fd, n + 16) < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
    return comm__fail(c, LOOM_EIO, "rank %d: listen: %s", c->rank, strerror(errno));
  int port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                      : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  char key[LOOM_KV_MAX_KEY + 1], val[16];
  snprintf(key, sizeof key, "%s/tcp/%d", c->prefix, c->rank);
  snprintf(val, sizeof val, "%d", port);
  int rc = c->store->ops->set(c->store, key, val, strlen(val));
  if (rc < 0) return comm__fail(c, rc, "rank %d: cannot publish the TCP port", c->rank);
  int higher = 0;
  for (int i = 0; i < n; i++) {
    int p = peers[i];
    d->links[p].c = c;
    d->links[p].peer = p;
    if (p > c->rank) {
      higher++;
      continue;
    }
    if ((rc = tcp_connect_to(c, p, &d->links[p].fd)) < 0) return rc;
  }
  while (higher > 0) {
    struct pollfd pf = {.fd = d->lfd, .events = POLLIN};
    int ms = ms_left(c);
    if (ms == 0)
      return comm__fail(c, LOOM_ETIMEDOUT, "rank %d: %d higher TCP peer(s) never connected",
                        c->rank, higher);
    if (poll(&pf, 1, ms) <= 0) continue;
    int cfd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cfd < 0) continue;
    rc = tcp_hs_accept(c, d, cfd);
    if (rc < 0) {
      wire_io_close(cfd); /* a stranger, or a peer of another communicator */
      continue;
    }
    d->links[rc].fd = cfd;
    higher--;
  }
  close(d->lfd);
  d->lfd = -1;
  for (int i = 0; i < n; i++) {
    struct tcp_link *lk = &d->links[peers[i]];
    tcp_tune(c, lk->fd, peers[i]);
    lk->tls = wire_io_secure(lk->fd);
    c->pairs[peers[i]].tp = &comm__tcp_transport;
    c->pairs[peers[i]].peer = peers[i];
    c->pairs[peers[i]].impl = lk;
  }
  d->n = n;
  return 0;
}

static void tcp_teardown(comm_t *c) {
  struct tcp_dev *d = c->tcp;
  if (!d) return;
  if (d->lfd >= 0) close(d->lfd);
  for (int i = 0; d->links && i < c->world; i++) {
    if (d->links[i].fd >= 0) wire_io_close(d->links[i].fd);
    free(d->links[i].stage);
  }
  free(d->links);
  free(d);
  c->tcp = NULL;
}

static int tcp_lost(struct tcp_link *lk, const char *what, int err) {
  /* Peers shut their sockets when they fail; if that is because the
   * attempt was aborted, say so rather than blame the peer. */
  struct pollfd pf = {.fd = lk->c->abort_fd, .events = POLLIN};
  if (lk->c->abort_fd >= 0 && poll(&pf, 1, 0) > 0)
    return comm__fail(lk->c, LOOM_EABORTED, "rank %d: the coordinator aborted the attempt",
                      lk->c->rank);
  return comm__fail(lk->c, LOOM_EPEER, "rank %d: the connection to rank %d was lost (%s: %s)",
                    lk->c->rank, lk->peer, what, err ? strerror(err) : "closed by the peer");
}

static int tcp_send(comm_pair *p, const void *buf, size_t len, size_t upto, size_t *done) {
  struct tcp_link *lk = p->impl;
  lk->held = lk->tls && upto < len && upto - *done < TLS_SEND_MIN;
  if (lk->held) return 0; /* the bytes it waits for come from a receive */
  ssize_t r =
      wire_io_send(lk->fd, (const char *)buf + *done, upto - *done, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (r > 0)
    *done += (size_t)r;
  else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return tcp_lost(lk, "send", errno);
  return 0;
}

static int tcp_recv(comm_pair *p, size_t len, size_t *done, const struct comm_sink *sink) {
  struct tcp_link *lk = p->impl;
  ssize_t r;
  if (sink->direct) {
    r = wire_io_recv(lk->fd, (char *)sink->direct + *done, len - *done, MSG_DONTWAIT);
    if (r > 0) *done += (size_t)r;
  } else {
    size_t cap = (size_t)lk->c->t.tcp_stage;
    if (!lk->stage && !(lk->stage = malloc(cap)))
      return comm__fail(lk->c, LOOM_ENOMEM, "out of memory");
    size_t want = len - *done - lk->have;
    if (want > cap - lk->have) want = cap - lk->have;
    r = wire_io_recv(lk->fd, lk->stage + lk->have, want, MSG_DONTWAIT);
    if (r > 0) {
      lk->have += (size_t)r;
      size_t n = *done + lk->have == len ? lk->have : lk->have & ~(size_t)7;
      if (n > 0) {
        sink->fn(sink->arg, lk->stage, *done, n);
        *done += n;
        lk->have -= n;
        memmove(lk->stage, lk->stage + n, lk->have);
      }
    }
  }
  if (r == 0) return tcp_lost(lk, "recv", 0);
  if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return tcp_lost(lk, "recv", errno);
  return 0;
}

static void tcp_want(comm_pair *p, int dir, struct comm_waitset *ws) {
  struct tcp_link *lk = p->impl;
  if (dir && lk->held) return; /* waiting for a receive, not for the socket */
  if (ws->nfds < COMM_WAIT_MAX_FDS - 1)
    ws->fds[ws->nfds++] = (struct pollfd){.fd = lk->fd, .events = dir ? POLLOUT : POLLIN};
  if (ws->npeers < (int)(sizeof ws->peers / sizeof ws->peers[0])) ws->peers[ws->npeers++] = p->peer;
}

static int tcp_check(comm_t *c, int full, const struct comm_waitset *ws) {
  (void)c, (void)full, (void)ws;
  return 0; /* a dead peer's kernel closes its sockets: recv/send see it */
}

static void tcp_poison(comm_t *c) {
  struct tcp_dev *d = c->tcp;
  for (int i = 0; d && d->links && i < c->world; i++)
    if (d->links[i].fd >= 0) shutdown(d->links[i].fd, SHUT_RDWR);
}

const struct comm_transport comm__tcp_transport = {
    .name = "tcp",
    .setup = tcp_setup,
    .teardown = tcp_teardown,
    .send = tcp_send,
    .recv = tcp_recv,
    .want = tcp_want,
    .check = tcp_check,
    .poison = tcp_poison,
};
