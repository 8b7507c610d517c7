/* batch.c: the ps client's batch engine (client_int.h). A public call of
 * client.c becomes a batch of requests; ps_exec() writes them over every
 * shard's connection as the sockets take them and reads each reply's
 * payload straight into the caller's buffer, with one poll() over all. */
#include "lib/lib.h"
#include "ps/ps.h"
#include "ps/client_int.h"
#include "wire/wire_tls.h"
#include "wire/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- the batch engine --------------------------------------------------- */
static int lane_send(loom_ps_t *ps, ps_lane *ln, ps_call *calls, int s) {
  while (ln->si < ln->nq) {
    ps_call *c = &calls[ln->q[ln->si]];
    if (ln->soff == 0) {
      c->h.len = (uint32_t)(c->n1 + c->n2);
      ps_hdr_put(ln->shdr, &c->h);
    }
    size_t total = PS_HDR + c->n1 + c->n2, off = ln->soff;
    struct iovec iov[3];
    int k = 0;
    const void *seg[3] = {ln->shdr, c->p1, c->p2};
    size_t len[3] = {PS_HDR, c->n1, c->n2};
    for (int i = 0; i < 3; i++) {
      if (off >= len[i]) {
        off -= len[i];
        continue;
      }
      iov[k].iov_base = (char *)seg[i] + off;
      iov[k++].iov_len = len[i] - off;
      off = 0;
    }
    ssize_t n = wire_io_sendv(ps->links[s].fd, iov, k, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n < 0)
      return ps_die(ps, LOOM_ECONN, "ps shard %d (%s) is gone: %s", s, ps->links[s].addr,
                    strerror(errno));
    ln->soff += (size_t)n;
    if (ln->soff == total) ln->si++, ln->soff = 0;
  }
  return 0;
}

/* Reads into at[want]: from the stash first, then from the socket (into
 * the stash when want is small, so that what follows comes along).
 * Returns the bytes got (0: nothing now), or a transport error. */
static ssize_t lane_read(loom_ps_t *ps, ps_lane *ln, int s, void *at, size_t want) {
  size_t have = ln->st_len - ln->st_off;
  if (have) {
    size_t n = have < want ? have : want;
    memcpy(at, ln->stash + ln->st_off, n);
    ln->st_off += n;
    return (ssize_t)n;
  }
  if (!ln->readable || want == 0) return 0;
  bool direct = want >= STASH / 2;
  void *into = direct ? at : ln->stash;
  size_t ask = direct ? want : STASH;
  for (;;) {
    ssize_t n = wire_io_recv(ps->links[s].fd, into, ask, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ln->readable = false;
      return 0;
    }
    if (n <= 0)
      return ps_die(ps, LOOM_ECONN,
                    "ps shard %d (%s) closed the connection "
                    "(the ps task died, or refused a request as malformed)",
                    s, ps->links[s].addr);
    /* drained: poll before the next (TLS hands over a record at a time) */
    if ((size_t)n < ask && !wire_io_pending(ps->links[s].fd)) ln->readable = false;
    if (direct) return n;
    ln->st_off = 0;
    ln->st_len = (size_t)n;
    return lane_read(ps, ln, s, at, want);
  }
}

static int lane_recv(loom_ps_t *ps, ps_lane *ln, ps_call *calls, int s) {
  while (ln->ri < ln->nq) {
    ps_call *c = &calls[ln->q[ln->ri]];
    void *at;
    size_t want;
    if (!ln->in_payload) {
      at = ln->rhdr + ln->rhave;
      want = PS_HDR - ln->rhave;
    } else {
      char *base = c->rep.rc < 0 ? c->err : c->any_len ? c->alloc : (char *)c->dst;
      at = base + ln->phave;
      want = c->rep.len - ln->phave;
    }
    ssize_t n = want ? lane_read(ps, ln, s, at, want) : 0;
    if (n < 0) return (int)n;
    if (want && n == 0) return 0;
    if (!ln->in_payload) {
      ln->rhave += (size_t)n;
      if (ln->rhave < PS_HDR) continue;
      ps_hdr_get(ln->rhdr, &c->rep);
      ps_hdr *r = &c->rep;
      bool ok = r->id == c->h.id && r->op == c->h.op;
      if (ok && r->rc < 0)
        ok = r->len <= PS_MAX_ERRMSG;
      else if (ok && c->any_len)
        ok = r->len <= INFO_MAX;
      else if (ok)
        ok = r->rc == 0 && r->len == c->dst_len;
      if (!ok)
        return ps_die(ps, LOOM_EPROTO,
                      "ps shard %d (%s) answered %s #%llu with "
                      "op %u #%llu rc %d and %u bytes",
                      s, ps->links[s].addr, ps_op_name(c->h.op), (unsigned long long)c->h.id, r->op,
                      (unsigned long long)r->id, r->rc, r->len);
      if (r->rc == 0 && c->any_len && !(c->alloc = calloc(1, r->len + 1)))
        return ps_die(ps, LOOM_ENOMEM, "out of memory");
      ln->in_payload = true;
      ln->phave = 0;
    } else {
      ln->phave += (size_t)n;
    }
    if (ln->phave == c->rep.len) {
      if (c->rep.rc < 0) c->err[c->rep.len] = 0;
      ln->in_payload = false;
      ln->rhave = 0;
      ln->ri++;
    }
  }
  return 0;
}

/* The handle's lanes and poll arrays, made on first use; the order array
 * grown to n. */
static int exec_scratch(loom_ps_t *ps, size_t n) {
  size_t ns = (size_t)ps->nshards;
  if (!ps->lanes) ps->lanes = calloc(ns, sizeof *ps->lanes);
  if (!ps->pfd) ps->pfd = malloc((ns + 1) * sizeof *ps->pfd);
  if (!ps->who) ps->who = malloc((ns + 1) * sizeof *ps->who);
  if (!ps->lanes || !ps->pfd || !ps->who) return LOOM_ENOMEM;
  if (n > ps->order_cap) {
    size_t cap = n < 64 ? 64 : n;
    size_t *o = realloc(ps->order, cap * sizeof *o);
    if (!o) return LOOM_ENOMEM;
    ps->order = o;
    ps->order_cap = cap;
  }
  for (size_t s = 0; s < ns; s++) {
    ps_lane *ln = &ps->lanes[s];
    unsigned char *stash = ln->stash;
    *ln = (ps_lane){.stash = stash};
  }
  return 0;
}

/* Sends every call and waits for every reply, up to the handle's timeout.
 * Returns 0 when all replies are in (each call's rep.rc says how it went),
 * or a transport error (the handle is then dead). */
int ps_exec(loom_ps_t *ps, ps_call *calls, size_t n) {
  if (ps->dead) return ps->dead;
  if (n == 0) return 0;
  int rc = exec_scratch(ps, n);
  if (rc < 0) return ps_fail(ps, rc, "out of memory");
  ps_lane *lanes = ps->lanes;
  size_t *order = ps->order;
  struct pollfd *pfd = ps->pfd;
  int *who = ps->who;
  for (size_t i = 0; i < n; i++) {
    calls[i].h.id = ++ps->next_id;
    calls[i].h.rank = ps->rank;
    lanes[calls[i].shard].nq++;
  }
  size_t at = 0;
  for (int s = 0; s < ps->nshards; s++) {
    ps_lane *ln = &lanes[s];
    if (ln->nq && !ln->stash && !(ln->stash = malloc(STASH)))
      return ps_fail(ps, LOOM_ENOMEM, "out of memory");
    ln->q = order + at;
    at += ln->nq;
    ln->nq = 0;
  }
  for (size_t i = 0; i < n; i++) {
    ps_lane *ln = &lanes[calls[i].shard];
    ln->q[ln->nq++] = i;
  }
  uint64_t deadline = loom__now_ms() + (uint64_t)ps->timeout_ms;
  uint64_t spin_until = ps->spin_ns ? loom__now_ns() + ps->spin_ns : 0;
  int afd = ps->l ? loom__abort_fd(ps->l) : -1;
  for (;;) {
    size_t np = 0;
    for (int s = 0; s < ps->nshards; s++) {
      ps_lane *ln = &lanes[s];
      if ((rc = lane_send(ps, ln, calls, s)) < 0) goto out;
      if ((rc = lane_recv(ps, ln, calls, s)) < 0) goto out;
      short ev = (ln->si < ln->nq ? POLLOUT : 0) | (ln->ri < ln->nq ? POLLIN : 0);
      if (!ev) continue;
      pfd[np] = (struct pollfd){.fd = ps->links[s].fd, .events = ev};
      who[np++] = s;
    }
    if (np == 0) break;
    if (afd >= 0) {
      pfd[np] = (struct pollfd){.fd = afd, .events = POLLIN};
      who[np++] = -1;
    }
    uint64_t now = loom__now_ms();
    if (now >= deadline) {
      int s = who[0];
      rc = ps_die(ps, LOOM_ETIMEDOUT,
                  "no reply from ps shard %d (%s) to %s within "
                  "%d ms (LOOM_PS_TIMEOUT): is a worker stuck or gone?",
                  s, ps->links[s].addr, ps_op_name(calls[lanes[s].q[lanes[s].ri]].h.op),
                  ps->timeout_ms);
      goto out;
    }
    uint64_t left = deadline - now;
    int pr = ps_poll_spin(pfd, np, left > 1000 ? 1000 : (int)left, spin_until);
    if (pr < 0 && errno != EINTR) {
      rc = ps_die(ps, LOOM_EIO, "poll: %s", strerror(errno));
      goto out;
    }
    for (size_t i = 0; pr > 0 && i < np; i++)
      if (who[i] >= 0 && (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
        lanes[who[i]].readable = true;
    if (afd >= 0 && loom__aborted(ps->l)) {
      int code = loom__aborted(ps->l);
      rc = ps_die(ps, code, "the job's attempt is over (%s) while waiting for the ps",
                  loom_strerror(code));
      goto out;
    }
  }
out:
  return rc;
}

/* The first refusal among calls, as the handle's error; 0 if none. */
int ps_first_refusal(loom_ps_t *ps, ps_call *calls, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (calls[i].rep.rc < 0)
      return ps_fail(ps, calls[i].rep.rc, "ps shard %d: %s", calls[i].shard, calls[i].err);
  return 0;
}

int ps_run(loom_ps_t *ps, ps_call *calls, size_t n) {
  int rc = ps_exec(ps, calls, n);
  return rc < 0 ? rc : ps_first_refusal(ps, calls, n);
}
