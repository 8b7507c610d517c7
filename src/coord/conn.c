/* conn.c: connections: the listening socket, authentication (wire_auth.h's
 * handshake fed from the read callback, with a budget and a
 * deadline for connections that have not authenticated), frame reading
 * and dispatch, sending, and closing with a reason. */
#include "coord/coord_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

static void conn_handle_closed(uv_handle_t *h);
static void on_frame(coord *co, conn *c, wire_frame *f);
static void alloc_cb(uv_handle_t *h, size_t size, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static bool conn_plain(void *arg, const char *data, size_t len);
static bool authenticate(conn *c, const char *data, size_t len, size_t *used);
static void auth_expired(uv_timer_t *tm);

/* Drops one reference to a shared_frame (a wire_uv_release). */
void coord_shared_put(void *p) {
  shared_frame *sf = p;
  if (sf && --sf->refs == 0) {
    free(sf->buf);
    free(sf);
  }
}

int coord_conn_send_shared(conn *c, shared_frame *sf) {
  if (!c || c->closing) return LOOM_ECONN;
  sf->refs++;
  return wire_uv_write_tls((uv_stream_t *)&c->tcp, c->tls, sf->buf, sf->len, coord_shared_put, sf);
}

int coord_conn_send_msg(conn *c, const wire_msg *m) {
  if (!c || c->closing) return LOOM_ECONN;
  unsigned char *buf;
  size_t len;
  int rc = wire_msg_encode(m, &buf, &len);
  if (rc < 0) return rc;
  return wire_uv_write_tls((uv_stream_t *)&c->tcp, c->tls, buf, len, free, buf);
}

static void conn_handle_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->handles == 0) {
    wire_reader_free(&c->rd);
    wire_tls_mem_free(c->tls);
    free(c);
  }
}

/* Closes a connection and forgets it. An agent's connection closing before
 * its task ended means the agent is lost. */
/* ---- connections not yet authenticated ------------------------------------
 * They have a budget of their own (LOOM_PREAUTH_MAX) and a deadline
 * (LOOM_AUTH_TIMEOUT): when a new one arrives with the budget spent, the
 * oldest is closed, so that idle connections held by anyone on the network
 * can never keep a peer that holds the secret out. Their closes are logged
 * through a rate limiter: a flood gives a few lines and a count. */

/* Closes c. why is NULL when the close is expected (the job is over, the
 * peer hung up after its work, the coordinator stops it on purpose);
 * otherwise it says why in a sentence, which goes to coordinator.log and,
 * for an agent's connection, into the task's root cause. */
void coord_conn_close(conn *c, const char *why) {
  if (c->closing) return;
  c->closing = true;
  coord *co = c->co;
  loom__fifo_remove(&c->co->preauth, &c->pa);
  if (why && c->kind == C_AUTH)
    loom__ratelog_warn(&co->rl_refused, "coord", "refused connections", c->from,
                       "closed a connection from %s before it authenticated: %s", c->from, why);
  else if (why)
    loom__log(LOOM_LOG_WARN, "coord", "closed the connection of %s: %s",
              c->task     ? c->task->name
              : c->who[0] ? c->who
                          : "an unidentified peer",
              why);
  if (c->prev)
    c->prev->next = c->next;
  else
    co->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  coord_kv_drop_waiters(co, c);
  coord_unpark_drop(c);
  if (co->feed && c->kind == C_CLIENT) feed_dispatch_conn_gone(co->feed, c);
  task *t = c->task;
  if (c->kind == C_AGENT && t && t->agent == c) {
    t->agent = NULL;
    if (!co->be->ops->tracks_processes) t->agent_running = false;
    if (!coord_terminal(t)) {
      t->t_end = loom__wall();
      if (co->jstate == J_STOPPING) {
        coord_task_set(co, t, T_STOPPED);
        coord_event(co, t, "stopped", json_pack("{s:s}", "reason", "agent gone while stopping"));
      } else {
        char reason[400];
        snprintf(reason, sizeof reason, "agent lost: its connection to the coordinator closed (%s)",
                 why ? why : "closed by the coordinator");
        if (co->be->ops->exit_explains_loss && t->agent_running) {
          /* the backend says how the agent ended in a moment (agent_exited) */
          t->loss_pending_ms = loom__now_ms() + (uint64_t)loom__tun(LOOM_TUN_LOSS_WAIT_MS);
          loom__strlcpy(t->loss_reason, reason, sizeof t->loss_reason);
        } else {
          coord_task_exited(co, t, -1, 0, reason, true);
        }
      }
    }
  }
  uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
  uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
  if (c->kind == C_AGENT && t) coord_maybe_restart(co, t);
  coord_check_over(co);
}

static void on_frame(coord *co, conn *c, wire_frame *f) {
  int rc = 0;
  wire_msg msg, *m = NULL;
  if (wire_msg_name(f->type)) {
    char err[200], why[240];
    if (wire_msg_decode(f, &msg, err, sizeof err) < 0) {
      snprintf(why, sizeof why, "it sent a malformed message: %s", err);
      coord_conn_close(c, why);
      return;
    }
    m = &msg;
  }
  if (c->kind == C_CTL && !c->task) {
    if (f->type == WIRE_REGISTER) {
      rc = coord_on_register(co, c, m);
    } else if (f->type == WIRE_HELLO) {
      const char *name = m->u.hello.task;
      c->kind = C_CLIENT;
      c->task = name ? coord_task_by_name(co, name) : NULL;
      loom__strlcpy(c->who, name ? name : "?", sizeof c->who);
      if (co->jstate == J_STOPPING || co->jstate == J_DONE)
        coord_conn_send_msg(c, &(wire_msg){.type = WIRE_ABORT, .u.abort.reason = co->root_msg});
    } else if (f->type == WIRE_CTL_KILL) {
      json_int_t id = json_integer_value(json_object_get(f->json, "id"));
      coord_reply(c, id, 0, NULL, NULL, 0);
      if (co->jstate != J_DONE && co->jstate != J_STOPPING) {
        coord_say(co, "killed on request (loom kill)");
        coord_event(co, NULL, "kill_requested", NULL);
        loom__strlcpy(co->root_msg, "killed on request (loom kill)", sizeof co->root_msg);
        coord_abort_clients(co, co->root_msg);
        coord_begin_stop(co, O_KILLED, (uint64_t)loom__tun(LOOM_TUN_STOP_GRACE_MS));
      }
    } else {
      rc = LOOM_EPROTO;
    }
  } else if (c->kind == C_AGENT) {
    rc = m ? coord_on_agent(co, c, m) : LOOM_EPROTO;
  } else if (c->kind == C_CLIENT) {
    rc = coord_on_client(co, c, m);
  } else {
    rc = LOOM_EPROTO;
  }
  if (rc < 0) {
    char why[160];
    snprintf(why, sizeof why, "unexpected or malformed message of type %d (%s)", f->type,
             loom_strerror(rc));
    coord_conn_close(c, why);
  }
  if (m) wire_msg_free(m);
}

static void alloc_cb(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  static char slab[WIRE_READ_CHUNK];
  *buf = uv_buf_init(slab, sizeof slab);
}

/* Feeds the handshake what arrived from a connection that has not
 * authenticated. Returns true when it authenticated with these bytes, with
 * *used the bytes that were its answer (the rest are frames); false when
 * it needs more or was closed. */
static bool authenticate(conn *c, const char *data, size_t len, size_t *used) {
  unsigned char proof[WIRE_AUTH_MSG_MAX];
  size_t plen;
  int rc = wire_auth_server_feed(&c->auth, data, len, used, proof, &plen);
  if (rc == 0) return false;
  if (rc < 0) {
    char why[160];
    snprintf(why, sizeof why, "it failed authentication: %s", c->auth.why);
    coord_conn_close(c, why);
    return false;
  }
  loom__fifo_remove(&c->co->preauth, &c->pa);
  c->kind = C_CTL; /* until it says who it is */
  wire_reader_limit(&c->rd, (size_t)loom__tun(LOOM_TUN_MAX_FRAME));
  uv_timer_stop(&c->timer);
  unsigned char *out = malloc(plen);
  if (!out) {
    coord_conn_close(c, "out of memory");
    return false;
  }
  memcpy(out, proof, plen);
  wire_uv_write_tls((uv_stream_t *)&c->tcp, c->tls, out, plen, free, out);
  return true;
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  conn *c = s->data;
  if (n < 0) {
    char why[160];
    snprintf(why, sizeof why, "the peer closed it (%s)", uv_strerror((int)n));
    /* a client (libloom, the CLI) hanging up, or an agent whose task has
     * ended, is the normal end of its work */
    bool expected = c->kind == C_CLIENT || c->kind == C_CTL ||
                    (c->kind == C_AGENT && (!c->task || coord_terminal(c->task)));
    coord_conn_close(c, expected ? NULL : why);
    return;
  }
  if (n == 0) return;
  c->last_rx = loom__now_ms();
  if (!c->tls) {
    conn_plain(c, buf->base, (size_t)n);
    return;
  }
  int rc = wire_uv_tls_read(s, c->tls, buf->base, (size_t)n, conn_plain, c);
  if (rc < 0 && !c->closing) {
    char why[240];
    snprintf(why, sizeof why, "TLS: %s", wire_tls_mem_why(c->tls));
    coord_conn_close(c, why);
  }
}

/* What arrived on c, in the clear: the handshake's answer, then frames.
 * false once c is closing. */
static bool conn_plain(void *arg, const char *data, size_t len) {
  conn *c = arg;
  coord *co = c->co;
  if (c->closing) return false;
  if (c->kind == C_AUTH) {
    size_t used = 0;
    if (!authenticate(c, data, len, &used)) return !c->closing;
    data += used;
    len -= used;
  }
  if (wire_reader_push(&c->rd, data, len) < 0) {
    char why[160];
    snprintf(why, sizeof why, "it sent more than its %zu-byte frame limit allows", c->rd.max_frame);
    coord_conn_close(c, why);
    return false;
  }
  for (;;) {
    if (c->closing) return false;
    wire_frame f;
    int rc = wire_reader_pop(&c->rd, &f);
    if (rc == 0) return true;
    if (rc < 0) {
      char why[160];
      snprintf(why, sizeof why, "it sent a malformed or oversized frame (limit %zu bytes)",
               c->rd.max_frame);
      coord_conn_close(c, why);
      return false;
    }
    on_frame(co, c, &f);
    wire_frame_free(&f);
  }
}

static void auth_expired(uv_timer_t *tm) {
  conn *c = tm->data;
  coord_conn_close(c, "it did not authenticate in time");
}

static void refused_expired(uv_timer_t *tm) {
  coord_conn_close(tm->data, "it was refused and did not close its connection");
}

void coord_conn_close_soon(conn *c) {
  if (!c->closing) uv_timer_start(&c->timer, refused_expired, 500, 0);
}

void coord_on_connection(uv_stream_t *server, int status) {
  coord *co = server->data;
  if (status < 0) return;
  conn *c = calloc(1, sizeof *c);
  if (!c) return;
  c->co = co;
  c->handles = 2;
  wire_reader_init(&c->rd, WIRE_HANDSHAKE_MAX);
  uv_tcp_init(&co->loop, &c->tcp);
  uv_timer_init(&co->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->next = co->conns;
  if (co->conns) co->conns->prev = c;
  co->conns = c;
  unsigned char challenge[WIRE_AUTH_MSG_MAX];
  size_t chlen = 0;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 ||
      wire_auth_server_start(&c->auth, &wire_auth_coord, co->o->secret, NULL, 0, challenge,
                             &chlen) < 0) {
    coord_conn_close(c, "it could not be accepted");
    return;
  }
  struct sockaddr_storage ss, ls;
  int sl = sizeof ss, ll = sizeof ls;
  loom__strlcpy(c->from, "?", sizeof c->from);
  bool have_peer = uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0;
  bool have_local = uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ls, &ll) == 0;
  if (wire_tls_wanted_addrs(have_local ? (void *)&ls : NULL, have_peer ? (void *)&ss : NULL) &&
      !(c->tls = wire_tls_mem_new(true, co->o->secret, wire_auth_coord.label))) {
    coord_conn_close(c, "TLS could not start");
    return;
  }
  if (have_peer) {
    if (ss.ss_family == AF_INET)
      uv_ip4_name((struct sockaddr_in *)&ss, c->from, sizeof c->from);
    else if (ss.ss_family == AF_INET6)
      uv_ip6_name((struct sockaddr_in6 *)&ss, c->from, sizeof c->from);
  }
  /* room for every agent still awaited (all of them dial at once when a
   * large job starts) on top of the budget */
  if (co->preauth.n && co->preauth.n >= (size_t)(loom__tun(LOOM_TUN_PREAUTH_MAX) + co->nawaited))
    coord_conn_close(loom__fifo_oldest(&co->preauth),
                     "evicted: too many connections waiting to authenticate");
  loom__fifo_push(&co->preauth, &c->pa, c);
  uv_tcp_nodelay(&c->tcp, 1);
  c->last_rx = loom__now_ms();
  uv_timer_start(&c->timer, auth_expired, (uint64_t)loom__tun(LOOM_TUN_AUTH_TIMEOUT_MS), 0);
  unsigned char *out = malloc(chlen);
  if (!out) {
    coord_conn_close(c, "out of memory");
    return;
  }
  memcpy(out, challenge, chlen);
  /* with TLS, sent when the client's handshake is done */
  wire_uv_write_tls((uv_stream_t *)&c->tcp, c->tls, out, chlen, free, out);
  uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}
