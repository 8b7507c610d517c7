/* ports.c: the address a task is published at (LOOM_HOST, LOOM_IFACE or
 * the route to the coordinator) and the port reserved for it until the
 * task listens on it; see agent_int.h. */
#include "agent/agent_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- holding the reserved port ------------------------------------------ */
/* The reservation is a bound, never listening socket with SO_REUSEADDR and
 * SO_REUSEPORT: the kernel gives its port to no bind(0) (the usual way a
 * program picks a "free" port, and the race TensorFlow #21492 describes),
 * and no plain bind of it succeeds, while the task's own bind (gRPC sets
 * SO_REUSEPORT, most servers SO_REUSEADDR) does. It is let go once a socket
 * in this network namespace listens on the port (the task has it), when
 * the task ends, or, with LOOM_PORT_HOLD=start, just before the command
 * starts. */

/* Whether a TCP socket of this network namespace listens on `port`: 1 yes,
 * 0 no, -1 when the kernel cannot be asked. Asks sock_diag for listening
 * sockets only (the kernel walks its listening table, not every
 * connection: /proc/net/tcp took milliseconds on a host with a thousand
 * sockets, and a few such reads held up each short task's end). */
static int port_listened(int port) {
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return -1;
  struct timeval tv = {.tv_sec = 1};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int found = 0;
  static const int families[] = {AF_INET, AF_INET6};
  for (size_t f = 0; f < 2 && found == 0; f++) {
    struct {
      struct nlmsghdr nh;
      struct inet_diag_req_v2 r;
    } req = {.nh = {.nlmsg_len = sizeof req,
                    .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                    .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
             .r = {.sdiag_family = (uint8_t)families[f],
                   .sdiag_protocol = IPPROTO_TCP,
                   .idiag_states = 1u << TCP_LISTEN}};
    if (send(fd, &req, sizeof req, 0) != (ssize_t)sizeof req) {
      found = -1;
      break;
    }
    for (bool done = false; !done;) {
      long buf[2048]; /* aligned for nlmsghdr */
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        found = -1;
        break;
      }
      /* each message checked against what is left before it is read */
      size_t left = (size_t)n;
      for (struct nlmsghdr *h = (struct nlmsghdr *)buf;
           left >= sizeof *h && h->nlmsg_len >= sizeof *h && h->nlmsg_len <= left;
           left -= NLMSG_ALIGN(h->nlmsg_len) < left ? NLMSG_ALIGN(h->nlmsg_len) : left,
                           h = (struct nlmsghdr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len))) {
        if (h->nlmsg_type == NLMSG_DONE) {
          done = true;
          break;
        }
        if (h->nlmsg_type == NLMSG_ERROR) {
          found = -1;
          done = true;
          break;
        }
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg))) continue;
        const struct inet_diag_msg *m = NLMSG_DATA(h);
        if (ntohs(m->id.idiag_sport) == port) found = 1; /* read on to the end */
      }
      if (found < 0) break;
    }
  }
  close(fd);
  return found;
}

void agent_release_port(agent *a, const char *why) {
  if (a->reserve_fd < 0) return;
  close(a->reserve_fd);
  a->reserve_fd = -1;
  uv_timer_stop(&a->porthold);
  if (loom__tun_raw(LOOM_TUN_DEBUG)) agent_log("%s: port %d let go: %s", a->task, a->port, why);
}

/* Looks for the task's listener every 10 ms at first, then less often (at
 * most every 500 ms): a server binds early, a task that never listens
 * costs a file read a half-second. */
void agent_porthold_tick(uv_timer_t *t) {
  agent *a = t->data;
  if (a->reserve_fd < 0) return;
  if (a->running == 0) {
    agent_release_port(a, "the task ended");
    return;
  }
  int l = port_listened(a->port);
  if (l != 0) { /* listening, or no way to tell: then holding it helps nothing */
    agent_release_port(a, l > 0 ? "the task listens on it" : "sock_diag cannot be asked");
    return;
  }
  a->porthold_ms = a->porthold_ms * 2 > 500 ? 500 : a->porthold_ms * 2;
  uv_timer_start(&a->porthold, agent_porthold_tick, a->porthold_ms, 0);
}

/* ---- before the loop: the address and the port -------------------------- */
/* The IPv4 address of interface name into ip. When it has none (or there
 * is no such interface) err says so, naming it. */
static int iface_addr(const char *name, char *ip, size_t iplen, char *err, size_t errlen) {
  struct ifaddrs *ifs;
  if (getifaddrs(&ifs) < 0) {
    snprintf(err, errlen, "LOOM_IFACE=%s: cannot list this host's interfaces: %s", name,
             strerror(errno));
    return LOOM_EIO;
  }
  bool exists = false;
  int rc = LOOM_ENOENT;
  for (struct ifaddrs *i = ifs; i && rc < 0; i = i->ifa_next) {
    if (strcmp(i->ifa_name, name)) continue;
    exists = true;
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, (socklen_t)iplen))
      rc = 0;
  }
  freeifaddrs(ifs);
  if (rc < 0)
    snprintf(err, errlen, "LOOM_IFACE=%s: %s", name,
             exists ? "the interface has no IPv4 address"
                    : "no such interface on this host (`ip -brief address` lists them)");
  return rc;
}

/* The name of the interface that holds IPv4 address ip, or "" */
static void iface_of(const char *ip, char *name, size_t len) {
  struct ifaddrs *ifs;
  char buf[INET_ADDRSTRLEN];
  name[0] = 0;
  if (getifaddrs(&ifs) < 0) return;
  for (struct ifaddrs *i = ifs; i && !name[0]; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, sizeof buf) &&
        !strcmp(buf, ip))
      loom__strlcpy(name, i->ifa_name, len);
  freeifaddrs(ifs);
}

/* Chooses the address this task is published at in the cluster spec (and
 * its LOOM_HOST): LOOM_HOST when the backend or the user set it; else the
 * IPv4 address of the interface LOOM_IFACE names; else the address of the
 * interface that routes to the coordinator, which is the local address of
 * the connection to it (what a UDP socket connected to the coordinator
 * would tell, on the connection itself). That is a loopback address only
 * when the coordinator is on loopback (one host). why gets the reason,
 * for the log and the "registered" event. When LOOM_IFACE names no usable
 * interface, err says so and the routed address is chosen meanwhile: the
 * caller fails the task with err. fd is the coordinator connection. */
int agent_choose_host(agent *a, int fd, char *why, size_t whylen, char *err, size_t errlen) {
  const char *h = getenv("LOOM_HOST");
  if (h && *h) {
    loom__strlcpy(a->host, h, sizeof a->host);
    iface_of(h, a->iface, sizeof a->iface);
    snprintf(why, whylen, "LOOM_HOST names it");
    return 0;
  }
  const char *iface = loom__tun_str(LOOM_TUN_IFACE);
  int rc = 0;
  if (*iface) {
    char ip[INET_ADDRSTRLEN];
    rc = iface_addr(iface, ip, sizeof ip, err, errlen);
    if (rc == 0) {
      loom__strlcpy(a->host, ip, sizeof a->host);
      loom__strlcpy(a->iface, iface, sizeof a->iface);
      snprintf(why, whylen, "LOOM_IFACE names the interface %s", iface);
      return 0;
    }
  }
  struct sockaddr_storage me, peer;
  socklen_t ml = sizeof me, pl = sizeof peer;
  char mine[INET_ADDRSTRLEN], coord[INET_ADDRSTRLEN], ifn[64];
  if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0 || me.ss_family != AF_INET ||
      getpeername(fd, (struct sockaddr *)&peer, &pl) < 0 || peer.ss_family != AF_INET ||
      !inet_ntop(AF_INET, &((struct sockaddr_in *)&me)->sin_addr, mine, sizeof mine) ||
      !inet_ntop(AF_INET, &((struct sockaddr_in *)&peer)->sin_addr, coord, sizeof coord)) {
    if (gethostname(a->host, sizeof a->host) < 0)
      loom__strlcpy(a->host, "localhost", sizeof a->host);
    snprintf(why, whylen, "this host's name: the coordinator connection is not IPv4");
    return rc;
  }
  loom__strlcpy(a->host, mine, sizeof a->host);
  iface_of(mine, ifn, sizeof ifn);
  loom__strlcpy(a->iface, ifn, sizeof a->iface);
  if (!strncmp(coord, "127.", 4))
    snprintf(why, whylen, "the coordinator is on loopback at %s: every task is on this host",
             coord);
  else
    snprintf(why, whylen, "%s%sthe interface that reaches the coordinator at %s", ifn,
             ifn[0] ? ", " : "", coord);
  return rc;
}

/* Binds the reservation socket (see "holding the reserved port") to port
 * (0: any free one); -1 when that fails. */
static int reserve_bind(const char *host, int port) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) sa.sin_addr.s_addr = htonl(INADDR_ANY);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1; /* both, so that the task can bind it while we hold it */
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* A restarted task asks for the port it had (LOOM_PREV_PORT, from the
 * coordinator), so that peers holding its old address find it again; any
 * free port when that one is taken. */
int agent_reserve_port(agent *a) {
  long long prev = 0;
  const char *pv = loom__tun_raw(LOOM_TUN_PREV_PORT);
  int fd = -1;
  if (pv && loom__parse_int(pv, 1, 65535, &prev) < 0) prev = 0;
  unsetenv("LOOM_PREV_PORT"); /* the coordinator's word to us, not the task's */
  if (prev) {
    fd = reserve_bind(a->host, (int)prev);
    if (fd < 0)
      agent_log("%s: port %lld, this task's before its restart, is taken (%s); another one "
                "is published",
                a->task, prev, strerror(errno));
  }
  if (fd < 0) fd = reserve_bind(a->host, 0);
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  if (fd < 0 || getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
    if (fd >= 0) close(fd);
    return LOOM_EIO;
  }
  a->reserve_fd = fd;
  a->port = ntohs(sa.sin_port);
  return 0;
}
