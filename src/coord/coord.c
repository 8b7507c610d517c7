/* coord.c: the coordinator's event loop.
 *
 * One libuv loop drives everything: the listening socket (agents, libloom
 * clients and the CLI all connect here and authenticate first), the
 * backend's agent processes, signals and timers. A job is a sequence of
 * attempts; each attempt launches every task's agent, waits for all to
 * register and be ready (the rendezvous), sends each the cluster spec, then
 * follows exits until the finishing roles are done (success) or a task
 * fails (stop everything within the grace period, then retry or give up).
 * Task state lives here and is mirrored to state.json and events.jsonl. */
#include "coord/coord.h"
#include "backend/backend.h"
#include "core/ratelog.h"
#include "feed/dispatch.h"
#include "http/http.h"
#include "wire/wire.h"
#include "wire/wire_uv.h"

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

#define RING 20

enum { T_PENDING, T_LAUNCHED, T_REGISTERED, T_READY, T_RUNNING, T_SUCCEEDED,
       T_FAILED, T_STOPPED, T_LOST };
static const char *const TSTATE[] = {"pending", "launched", "registered", "ready",
                                     "running", "succeeded", "failed", "stopped",
                                     "lost"};
enum { J_RENDEZVOUS, J_RUNNING, J_STOPPING, J_DONE };
static const char *const JSTATE[] = {"starting", "running", "stopping", "done"};
enum { O_NONE, O_SUCCESS, O_FAILED, O_KILLED, O_INFRA };
enum { C_AUTH, C_AGENT, C_CLIENT, C_CTL };

typedef struct conn conn;
typedef struct coord coord;

typedef struct {
  int id;
  const spec_role *role;
  int index;
  char name[80], file[80];
  bool training;
  int rank_base;
  int state, attempt;
  char host[256];
  int port, agent_pid;
  json_t *pids;
  int exit_code, sig;
  bool have_exit;
  char reason[512];
  double t_launch, t_start, t_end;
  conn *agent;
  bool agent_running;
  char *ring[RING];
  int ring_n, ring_head;
  FILE *log;
  char cpus[256], gpus[128];
  int restarts;         /* restarts of this task in this job attempt */
  bool left;            /* an elastic member that left the membership */
  bool restart_pending; /* restart once its old agent is gone */
  int launch_tries;     /* launches of this task attempt that failed before its agent registered */
  bool relaunch_pending; /* relaunch_timer runs: the launch is tried again when it fires */
  uv_timer_t relaunch_timer;
} task;

struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  coord *co;
  wire_reader rd;
  int kind, handles;
  uint64_t last_rx;
  unsigned char nonce[WIRE_NONCE];
  task *task;
  char who[96];
  bool closing;
  conn *next, *prev;
  conn *pa_next, *pa_prev; /* the queue of connections not yet authenticated */
  char from[64];           /* the peer's address, for the log */
};

typedef struct kv_entry {
  char *key;
  unsigned char *val;
  size_t len;
  struct kv_entry *next;
} kv_entry;

typedef struct kv_wait {
  uv_timer_t timer;
  coord *co;
  conn *c;
  json_int_t id;
  char *key;
  struct kv_wait *next, *prev;
} kv_wait;

#define KV_BUCKETS 4096

struct coord {
  const coord_opts *o;
  const spec_job *s;
  uv_loop_t loop;
  uv_tcp_t server;
  uv_signal_t sigint, sigterm, sighup;
  uv_timer_t rdv_timer, stop_timer, hb_timer, flush_timer;
  char addr[300];
  backend *be;
  task *tasks;
  int ntasks, attempt, jstate, outcome, root, interrupts, nready;
  int world_size;
  bool no_retry; /* the failure's exit code is not in retry_on */
  int64_t generation; /* elastic membership generation */
  char root_msg[2048];
  FILE *events, *alllog;
  conn *conns;
  conn *pa_oldest, *pa_newest; /* not yet authenticated, oldest first */
  int npreauth;
  loom__ratelog rl_refused; /* connections refused or closed before authenticating */
  kv_entry *kv[KV_BUCKETS];
  kv_wait *waiters;
  size_t kv_bytes;
  int exit_status;
  double t_start, t_attempt;
  bool state_dirty, status_shown;
  char **env_base;
  feed_dispatch *feed;
  json_t *staged_files; /* target -> node-local copy, when the backend staged them */
  http_server *http;
  char dashboard[512], tensorboard[400];
};

static void attempt_start(coord *co);
static void attempt_fail(coord *co, task *t, const char *why);
static void check_over(coord *co);
static void conn_close(conn *c, const char *why);
static void task_exited(coord *co, task *t, int code, int sig, const char *reason, bool lost);
static void maybe_restart(coord *co, task *t);
static uint64_t hb_timeout_ms(const coord *co);

/* ---- console ------------------------------------------------------------ */
static void status_clear(coord *co) {
  if (co->o->status_line && co->status_shown) {
    fputs("\r\033[K", stderr);
    co->status_shown = false;
  }
}

static void status_draw(coord *co) {
  if (!co->o->status_line || co->jstate == J_DONE) return;
  int run = 0, done = 0, failed = 0, start = 0;
  for (int i = 0; i < co->ntasks; i++) {
    int st = co->tasks[i].state;
    if (st == T_RUNNING) run++;
    else if (st == T_SUCCEEDED || st == T_STOPPED) done++;
    else if (st == T_FAILED || st == T_LOST) failed++;
    else start++;
  }
  fprintf(stderr, "\r\033[K\033[2mloom %s · attempt %d · %s · starting %d · running %d · "
          "finished %d · failed %d · %.1fs\033[0m", co->o->job_id, co->attempt,
          JSTATE[co->jstate], start, run, done, failed, loom__wall() - co->t_start);
  fflush(stderr);
  co->status_shown = true;
}

static void say(coord *co, const char *fmt, ...) LOOM__PRINTF(2, 3);
static void say(coord *co, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (co->o->console) {
    status_clear(co);
    fputs("loom: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    status_draw(co);
  } else {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    loom__log(LOOM_LOG_INFO, "coord", "%s", msg);
  }
  va_end(ap);
}

/* ---- events and state ----------------------------------------------------- */
static void event(coord *co, task *t, const char *name, json_t *extra) {
  json_t *e = json_object();
  json_object_set_new(e, "t", json_real(loom__wall()));
  json_object_set_new(e, "job", json_string(co->o->job_id));
  if (t) {
    json_object_set_new(e, "task", json_string(t->name));
    json_object_set_new(e, "attempt", json_integer(t->attempt));
  } else {
    json_object_set_new(e, "attempt", json_integer(co->attempt));
  }
  json_object_set_new(e, "event", json_string(name));
  if (extra) {
    json_object_update(e, extra);
    json_decref(extra);
  }
  if (co->events) {
    char *s = json_dumps(e, JSON_COMPACT);
    if (s) {
      fputs(s, co->events);
      fputc('\n', co->events);
      fflush(co->events);
      free(s);
    }
  }
  json_decref(e);
  co->state_dirty = true;
}

static json_t *task_json(const task *t) {
  json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:i}", "task", t->name, "role",
                        t->role->name, "index", t->index, "state", TSTATE[t->state],
                        "attempt", t->attempt);
  if (t->host[0]) json_object_set_new(j, "host", json_string(t->host));
  if (t->port) json_object_set_new(j, "port", json_integer(t->port));
  if (t->agent_pid) json_object_set_new(j, "agent_pid", json_integer(t->agent_pid));
  if (t->pids) json_object_set(j, "pids", t->pids);
  if (t->training) json_object_set_new(j, "rank", json_integer(t->rank_base));
  json_object_set_new(j, "restarts", json_integer(t->restarts));
  if (t->left) json_object_set_new(j, "left", json_true());
  if (t->have_exit) {
    json_object_set_new(j, "exit_code", json_integer(t->exit_code));
    if (t->sig) {
      json_object_set_new(j, "signal", json_integer(t->sig));
      json_object_set_new(j, "signal_name", json_string(sigabbrev_np(t->sig) ? sigabbrev_np(t->sig) : "?"));
    }
  }
  if (t->reason[0]) json_object_set_new(j, "reason", json_string(t->reason));
  if (t->t_launch > 0) json_object_set_new(j, "launched", json_real(t->t_launch));
  if (t->t_start > 0) json_object_set_new(j, "started", json_real(t->t_start));
  if (t->t_end > 0) json_object_set_new(j, "finished", json_real(t->t_end));
  return j;
}

static void state_write(coord *co) {
  static const char *const OUT[] = {"running", "succeeded", "failed", "killed", "failed"};
  json_t *j = json_object();
  json_object_set_new(j, "job", json_string(co->o->job_id));
  json_object_set_new(j, "name", json_string(co->s->name));
  json_object_set_new(j, "backend", json_string(co->be ? co->be->ops->name : ""));
  json_object_set_new(j, "state", json_string(co->jstate == J_DONE ? OUT[co->outcome]
                                                                    : JSTATE[co->jstate]));
  json_object_set_new(j, "attempt", json_integer(co->attempt));
  json_object_set_new(j, "retries", json_integer(co->s->retries));
  json_object_set_new(j, "started", json_real(co->t_start));
  json_object_set_new(j, "coordinator", json_pack("{s:i, s:s}", "pid", (int)getpid(),
                                                  "addr", co->addr));
  if (co->jstate == J_DONE) {
    json_object_set_new(j, "finished", json_real(loom__wall()));
    json_object_set_new(j, "exit_status", json_integer(co->exit_status));
  }
  if (co->root >= 0 || co->root_msg[0]) {
    json_t *rc = json_object();
    if (co->root >= 0) json_object_set_new(rc, "task", json_string(co->tasks[co->root].name));
    json_object_set_new(rc, "message", json_string(co->root_msg));
    json_object_set_new(j, "root_cause", rc);
  }
  if (co->feed) json_object_set_new(j, "feed", feed_dispatch_status(co->feed));
  if (co->dashboard[0]) json_object_set_new(j, "dashboard", json_string(co->dashboard));
  if (co->tensorboard[0]) json_object_set_new(j, "tensorboard", json_string(co->tensorboard));
  json_t *ts = json_array();
  for (int i = 0; i < co->ntasks; i++) json_array_append_new(ts, task_json(&co->tasks[i]));
  json_object_set_new(j, "tasks", ts);
  char *s = json_dumps(j, JSON_INDENT(1));
  json_decref(j);
  if (!s) return;
  char *path = loom__asprintf("%s/state.json", co->o->job_dir);
  if (path && loom__write_atomic(path, s, strlen(s), 0600, co->jstate == J_DONE) < 0)
    loom__log(LOOM_LOG_WARN, "coord", "cannot write %s: %s", path, strerror(errno));
  free(path);
  free(s);
  co->state_dirty = false;
}

static void flush_tick(uv_timer_t *tm) {
  coord *co = tm->data;
  if (co->feed) feed_dispatch_tick(co->feed, loom__now_ms());
  if (co->state_dirty) state_write(co);
  if (co->o->status_line) status_draw(co);
}

static void task_set(coord *co, task *t, int st) {
  t->state = st;
  co->state_dirty = true;
  if (co->feed && st >= T_SUCCEEDED) feed_dispatch_task_gone(co->feed, t->name);
}

static bool terminal(const task *t) { return t->state >= T_SUCCEEDED; }

/* ---- connections ---------------------------------------------------------- */
/* A frame encoded once and written to many connections. */
typedef struct {
  int refs;
  size_t len;
  unsigned char *buf;
} shared_frame;

/* Drops one reference to a shared_frame (a wire_uv_release). */
static void shared_put(void *p) {
  shared_frame *sf = p;
  if (sf && --sf->refs == 0) {
    free(sf->buf);
    free(sf);
  }
}

static int conn_send_shared(conn *c, shared_frame *sf) {
  if (!c || c->closing) return LOOM_ECONN;
  sf->refs++;
  return wire_uv_write((uv_stream_t *)&c->tcp, sf->buf, sf->len, shared_put, sf);
}

static int conn_send(conn *c, uint16_t type, json_t *json, const void *blob, size_t len) {
  if (!c || c->closing) {
    json_decref(json);
    return LOOM_ECONN;
  }
  return wire_uv_send((uv_stream_t *)&c->tcp, type, json, blob, len);
}

static void conn_handle_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->handles == 0) {
    wire_reader_free(&c->rd);
    free(c);
  }
}

static void kv_drop_waiters(coord *co, conn *c);

/* Closes a connection and forgets it. An agent's connection closing before
 * its task ended means the agent is lost. */
/* ---- connections not yet authenticated ------------------------------------
 * They have a budget of their own (LOOM_PREAUTH_MAX) and a deadline
 * (LOOM_AUTH_TIMEOUT): when a new one arrives with the budget spent, the
 * oldest is closed, so that idle connections held by anyone on the network
 * can never keep a peer that holds the secret out. Their closes are logged
 * through a rate limiter: a flood gives a few lines and a count. */
static void preauth_remove(conn *c) {
  coord *co = c->co;
  if (!c->pa_prev && co->pa_oldest != c) return; /* not queued */
  if (c->pa_prev) c->pa_prev->pa_next = c->pa_next;
  else co->pa_oldest = c->pa_next;
  if (c->pa_next) c->pa_next->pa_prev = c->pa_prev;
  else co->pa_newest = c->pa_prev;
  c->pa_next = c->pa_prev = NULL;
  co->npreauth--;
}

static void preauth_add(conn *c) {
  coord *co = c->co;
  c->pa_prev = co->pa_newest;
  c->pa_next = NULL;
  if (co->pa_newest) co->pa_newest->pa_next = c;
  else co->pa_oldest = c;
  co->pa_newest = c;
  co->npreauth++;
}

/* Closes c. why is NULL when the close is expected (the job is over, the
 * peer hung up after its work, the coordinator stops it on purpose);
 * otherwise it says why in a sentence, which goes to coordinator.log and,
 * for an agent's connection, into the task's root cause. */
static void conn_close(conn *c, const char *why) {
  if (c->closing) return;
  c->closing = true;
  coord *co = c->co;
  preauth_remove(c);
  if (why && c->kind == C_AUTH)
    loom__ratelog_warn(&co->rl_refused, "coord", "refused connections", c->from,
                       "closed a connection from %s before it authenticated: %s", c->from, why);
  else if (why)
    loom__log(LOOM_LOG_WARN, "coord", "closed the connection of %s: %s",
              c->task ? c->task->name : c->who[0] ? c->who : "an unidentified peer", why);
  if (c->prev) c->prev->next = c->next;
  else co->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  kv_drop_waiters(co, c);
  if (co->feed && c->kind == C_CLIENT) feed_dispatch_conn_gone(co->feed, c);
  task *t = c->task;
  if (c->kind == C_AGENT && t && t->agent == c) {
    t->agent = NULL;
    if (!co->be->ops->tracks_processes) t->agent_running = false;
    if (!terminal(t)) {
      t->t_end = loom__wall();
      if (co->jstate == J_STOPPING) {
        task_set(co, t, T_STOPPED);
        event(co, t, "stopped", json_pack("{s:s}", "reason", "agent gone while stopping"));
      } else {
        char reason[400];
        snprintf(reason, sizeof reason, "agent lost: its connection to the coordinator closed (%s)",
                 why ? why : "closed by the coordinator");
        task_exited(co, t, -1, 0, reason, true);
      }
    }
  }
  uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
  uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
  if (c->kind == C_AGENT && t) maybe_restart(co, t);
  check_over(co);
}

/* ---- the KV store ---------------------------------------------------------- */
static uint32_t kv_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h % KV_BUCKETS;
}

static kv_entry *kv_find(coord *co, const char *key) {
  for (kv_entry *e = co->kv[kv_hash(key)]; e; e = e->next)
    if (!strcmp(e->key, key)) return e;
  return NULL;
}

static void kv_clear(coord *co) {
  for (int i = 0; i < KV_BUCKETS; i++) {
    for (kv_entry *e = co->kv[i], *n; e; e = n) {
      n = e->next;
      free(e->key);
      free(e->val);
      free(e);
    }
    co->kv[i] = NULL;
  }
  co->kv_bytes = 0;
}

static void reply(conn *c, json_int_t id, int rc, json_t *extra, const void *blob, size_t len) {
  json_t *j = json_pack("{s:I, s:i}", "id", id, "rc", rc);
  if (extra) {
    json_object_update(j, extra);
    json_decref(extra);
  }
  conn_send(c, WIRE_REPLY, j, blob, len);
}

static void feed_reply(void *c, json_int_t id, int rc, json_t *extra, const void *blob,
                       size_t len) {
  reply((conn *)c, id, rc, extra, blob, len);
}

static void waiter_closed(uv_handle_t *h) {
  kv_wait *w = h->data;
  free(w->key);
  free(w);
}

static void waiter_remove(coord *co, kv_wait *w) {
  if (w->prev) w->prev->next = w->next;
  else co->waiters = w->next;
  if (w->next) w->next->prev = w->prev;
  uv_close((uv_handle_t *)&w->timer, waiter_closed);
}

static void waiter_expired(uv_timer_t *tm) {
  kv_wait *w = tm->data;
  reply(w->c, w->id, LOOM_ETIMEDOUT, NULL, NULL, 0);
  waiter_remove(w->co, w);
}

static void kv_drop_waiters(coord *co, conn *c) {
  for (kv_wait *w = co->waiters, *n; w; w = n) {
    n = w->next;
    if (!c || w->c == c) waiter_remove(co, w);
  }
}

static int kv_store(coord *co, const char *key, const void *val, size_t len) {
  kv_entry *e = kv_find(co, key);
  size_t total = co->kv_bytes - (e ? e->len : 0) + len;
  if (total > (size_t)loom__tun(LOOM_TUN_KV_MAX_TOTAL)) return LOOM_ERANGE;
  unsigned char *copy = malloc(len + 1);
  if (!copy) return LOOM_ENOMEM;
  if (len) memcpy(copy, val, len);
  copy[len] = 0;
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e || !(e->key = strdup(key))) {
      free(e);
      free(copy);
      return LOOM_ENOMEM;
    }
    uint32_t h = kv_hash(key);
    e->next = co->kv[h];
    co->kv[h] = e;
  }
  free(e->val);
  e->val = copy;
  co->kv_bytes = total;
  e->len = len;
  for (kv_wait *w = co->waiters, *n; w; w = n) {
    n = w->next;
    if (!strcmp(w->key, key)) {
      reply(w->c, w->id, 0, NULL, e->val, e->len);
      waiter_remove(co, w);
    }
  }
  return 0;
}

static const char *kv_key(wire_frame *f) {
  const char *k = json_string_value(json_object_get(f->json, "key"));
  if (!k || !*k || strlen(k) > LOOM_KV_MAX_KEY) return NULL;
  return k;
}

/* A metric from a task (libloom) or about it (its agent's CPU and memory
 * reports): one "metric" event in events.jsonl, which the dashboard reads. */
static int on_metric(coord *co, task *t, wire_frame *f, const char *source) {
  const char *tag = json_string_value(json_object_get(f->json, "tag"));
  json_t *step = json_object_get(f->json, "step"), *val = json_object_get(f->json, "value");
  if (!tag || !*tag || strlen(tag) > 128 || !json_is_integer(step) || !json_is_number(val))
    return LOOM_EPROTO;
  event(co, t, "metric", json_pack("{s:s, s:O, s:O, s:s}", "tag", tag, "step", step, "value",
                                   val, "source", source));
  return 0;
}

static int on_client(coord *co, conn *c, wire_frame *f) {
  json_int_t id = json_integer_value(json_object_get(f->json, "id"));
  if (f->type == WIRE_METRIC) return on_metric(co, c->task, f, "user");
  if (f->type >= WIRE_FEED_FIRST && f->type <= WIRE_FEED_LAST) {
    if (!co->feed) {
      reply(c, id, LOOM_ENOTSUP, json_pack("{s:s}", "msg", "the job's spec has no feed: section"),
            NULL, 0);
      return 0;
    }
    if (!c->task) return LOOM_EPROTO;
    co->state_dirty = true; /* state.json carries the feed's progress */
    return feed_dispatch_frame(co->feed, c, c->task->name, f);
  }
  switch (f->type) {
  case WIRE_KV_SET: {
    const char *k = kv_key(f);
    if (!k || f->blob_len > LOOM_KV_MAX_VALUE) return LOOM_EPROTO;
    reply(c, id, kv_store(co, k, f->blob, f->blob_len), NULL, NULL, 0);
    return 0;
  }
  case WIRE_KV_GET: {
    const char *k = kv_key(f);
    if (!k) return LOOM_EPROTO;
    kv_entry *e = kv_find(co, k);
    if (e) {
      reply(c, id, 0, NULL, e->val, e->len);
      return 0;
    }
    json_int_t tmo = json_integer_value(json_object_get(f->json, "timeout_ms"));
    if (tmo == 0) {
      reply(c, id, LOOM_ETIMEDOUT, NULL, NULL, 0);
      return 0;
    }
    kv_wait *w = calloc(1, sizeof *w);
    if (!w || !(w->key = strdup(k))) {
      free(w);
      reply(c, id, LOOM_ENOMEM, NULL, NULL, 0);
      return 0;
    }
    w->co = co;
    w->c = c;
    w->id = id;
    uv_timer_init(&co->loop, &w->timer);
    w->timer.data = w;
    if (tmo > 0) uv_timer_start(&w->timer, waiter_expired, (uint64_t)tmo, 0);
    w->next = co->waiters;
    if (co->waiters) co->waiters->prev = w;
    co->waiters = w;
    return 0;
  }
  case WIRE_KV_ADD: {
    const char *k = kv_key(f);
    json_t *d = json_object_get(f->json, "delta");
    if (!k || !json_is_integer(d)) return LOOM_EPROTO;
    kv_entry *e = kv_find(co, k);
    long long cur = 0;
    if (e && loom__parse_int((const char *)e->val, LLONG_MIN, LLONG_MAX, &cur) < 0) {
      reply(c, id, LOOM_EINVAL, NULL, NULL, 0);
      return 0;
    }
    long long v = cur + (long long)json_integer_value(d);
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%lld", v);
    int rc = kv_store(co, k, buf, (size_t)n);
    reply(c, id, rc, json_pack("{s:I}", "value", (json_int_t)v), NULL, 0);
    return 0;
  }
  case WIRE_EVENT: {
    const char *name = json_string_value(json_object_get(f->json, "name"));
    if (!name || strlen(name) > 128) return LOOM_EPROTO;
    json_t *extra = json_object();
    json_t *d = json_object_get(f->json, "detail");
    if (json_is_object(d)) json_object_update(extra, d);
    json_object_set_new(extra, "source", json_string("user"));
    task *t = c->task;
    event(co, t, name, extra);
    reply(c, id, 0, NULL, NULL, 0);
    return 0;
  }
  case WIRE_HEARTBEAT:
    return 0;
  }
  return LOOM_EPROTO;
}

/* ---- agents ------------------------------------------------------------- */
static task *task_by_name(coord *co, const char *name) {
  for (int i = 0; i < co->ntasks; i++)
    if (!strcmp(co->tasks[i].name, name)) return &co->tasks[i];
  return NULL;
}

static json_t *kv_obj(const spec_kv *kv, int n, json_t *into) {
  for (int i = 0; i < n; i++) json_object_set_new(into, kv[i].key, json_string(kv[i].value));
  return into;
}

static void send_assign(coord *co, task *t) {
  const spec_role *r = t->role;
  json_t *j = json_object();
  char *wd = loom__asprintf("%s/tasks/%s", co->o->job_dir, t->file);
  json_object_set_new(j, "workdir", json_string(wd ? wd : ""));
  free(wd);
  json_object_set_new(j, "job_id", json_string(co->o->job_id));
  json_object_set_new(j, "job_dir", json_string(co->o->job_dir));
  json_object_set_new(j, "role", json_string(r->name));
  json_object_set_new(j, "index", json_integer(t->index));
  if (r->shell) {
    json_object_set_new(j, "shell", json_string(r->shell));
  } else {
    json_t *a = json_array();
    for (int i = 0; r->argv[i]; i++) json_array_append_new(a, json_string(r->argv[i]));
    json_object_set_new(j, "argv", a);
  }
  json_object_set_new(j, "procs", json_integer(r->procs));
  json_t *env = kv_obj(co->s->env, co->s->nenv, json_object());
  kv_obj(r->env, r->nenv, env);
  json_object_set_new(j, "env", env);
  json_object_set_new(j, "files", co->staged_files ? json_incref(co->staged_files)
                                                   : kv_obj(co->s->files, co->s->nfiles, json_object()));
  json_object_set_new(j, "cpus", json_string(t->cpus));
  json_object_set_new(j, "gpus", json_string(t->gpus));
  json_object_set_new(j, "memory", json_integer((json_int_t)r->memory));
  json_object_set_new(j, "training", json_boolean(t->training));
  json_object_set_new(j, "rank_base", json_integer(t->rank_base));
  json_object_set_new(j, "world_size", json_integer(co->world_size));
  json_object_set_new(j, "heartbeat_timeout_ms", json_integer((json_int_t)hb_timeout_ms(co)));
  conn_send(t->agent, WIRE_ASSIGN, j, NULL, 0);
}

/* Every task is ready: tell each the cluster spec so its command starts. */
static int kv_store(coord *co, const char *key, const void *val, size_t len);

/* Sends the cluster spec (every task's current host:port) to every agent,
 * or only to `only` (a restarted task), and keeps it in the KV store as
 * "loom/cluster" (with "loom/cluster_version" counting changes) so running
 * tasks can learn a restarted peer's new address. */
static void send_cluster(coord *co, task *only) {
  json_t *cl = json_object(), *tf = json_object();
  const task *master = NULL;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    char hp[300];
    snprintf(hp, sizeof hp, "%s:%d", t->host, t->port);
    json_t *arr = json_object_get(cl, t->role->name);
    if (!arr) json_object_set_new(cl, t->role->name, arr = json_array());
    json_array_append_new(arr, json_string(hp));
    if (strcmp(t->role->name, "evaluator") && strcmp(t->role->name, "tensorboard")) {
      json_t *tarr = json_object_get(tf, t->role->name);
      if (!tarr) json_object_set_new(tf, t->role->name, tarr = json_array());
      json_array_append_new(tarr, json_string(hp));
    }
    if (t->training && t->rank_base == 0) master = t;
  }
  json_t *blob = json_pack("{s:o, s:o}", "cluster", cl, "tf_cluster", tf);
  char *bs = json_dumps(blob, JSON_COMPACT);
  char *cs = json_dumps(cl, JSON_COMPACT);
  json_decref(blob);
  if (cs) {
    kv_store(co, "loom/cluster", cs, strlen(cs));
    free(cs);
  }
  json_t *j = json_object();
  if (master) {
    json_object_set_new(j, "master_addr", json_string(master->host));
    json_object_set_new(j, "master_port", json_integer(master->port));
  }
  if (only && only->training) {
    json_object_set_new(j, "rank_base", json_integer(only->rank_base));
    json_object_set_new(j, "world_size", json_integer(co->world_size));
    json_object_set_new(j, "generation", json_integer((json_int_t)co->generation));
  }
  shared_frame *sf = calloc(1, sizeof *sf);
  int rc = sf && bs ? wire_encode(WIRE_CLUSTER, j, bs, strlen(bs), &sf->buf, &sf->len) : LOOM_ENOMEM;
  json_decref(j);
  free(bs);
  if (rc < 0) {
    free(sf);
    attempt_fail(co, NULL, "out of memory while sending the cluster spec");
    return;
  }
  sf->refs = 1;
  if (only) conn_send_shared(only->agent, sf);
  else
    for (int i = 0; i < co->ntasks; i++) conn_send_shared(co->tasks[i].agent, sf);
  shared_put(sf);
}

static void ring_push(task *t, const char *line, size_t n) {
  char *copy = strndup(line, n > 4096 ? 4096 : n);
  if (!copy) return;
  int slot = (t->ring_head + t->ring_n) % RING;
  if (t->ring_n == RING) {
    free(t->ring[t->ring_head]);
    t->ring_head = (t->ring_head + 1) % RING;
    slot = (t->ring_head + RING - 1) % RING;
  } else {
    t->ring_n++;
  }
  t->ring[slot] = copy;
}

static void ring_clear(task *t) {
  for (int i = 0; i < RING; i++) {
    free(t->ring[i]);
    t->ring[i] = NULL;
  }
  t->ring_n = t->ring_head = 0;
}

static const char *const COLORS[] = {"\033[36m", "\033[33m", "\033[32m", "\033[35m",
                                     "\033[34m", "\033[91m", "\033[96m", "\033[93m"};

static void on_log(coord *co, task *t, wire_frame *f) {
  int stream = (int)json_integer_value(json_object_get(f->json, "s"));
  int proc = (int)json_integer_value(json_object_get(f->json, "p"));
  char prefix[112];
  if (t->role->procs > 1) snprintf(prefix, sizeof prefix, "[%s.%d]", t->name, proc);
  else snprintf(prefix, sizeof prefix, "[%s]", t->name);
  const char *p = (const char *)f->blob, *end = p + f->blob_len;
  if (co->o->console) status_clear(co);
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    if (t->log) {
      fwrite(p, 1, n, t->log);
      fputc('\n', t->log);
    }
    if (co->alllog) fprintf(co->alllog, "%s %.*s\n", prefix, (int)n, p);
    if (stream == 2) ring_push(t, p, n);
    if (co->o->console) {
      if (co->o->color)
        fprintf(stdout, "%s%s\033[0m %.*s\n", COLORS[t->id % 8], prefix, (int)n, p);
      else
        fprintf(stdout, "%s %.*s\n", prefix, (int)n, p);
    }
    p += n + 1;
  }
  if (co->o->console) {
    fflush(stdout);
    status_draw(co);
  }
}

static bool all_finishing_done(coord *co) {
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (t->left && !t->restart_pending && t->state != T_RUNNING) continue;
    if (!t->role->service && t->state != T_SUCCEEDED) return false;
  }
  return true;
}

static void stop_tasks(coord *co, bool services_only, uint64_t grace_ms) {
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (terminal(t) || (services_only && !t->role->service)) continue;
    if (t->agent) {
      conn_send(t->agent, WIRE_STOP, json_pack("{s:I}", "grace_ms", (json_int_t)grace_ms),
                NULL, 0);
    } else if (t->agent_running) {
      co->be->ops->signal(co->be, t->id, SIGTERM);
    }
  }
}

static void stop_expired(uv_timer_t *tm) {
  coord *co = tm->data;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (!t->agent_running) continue;
    loom__log(LOOM_LOG_WARN, "coord", "%s did not stop in time; killing its agent", t->name);
    co->be->ops->signal(co->be, t->id, SIGKILL);
    if (!co->be->ops->tracks_processes && t->agent)
      conn_close(t->agent, "its task did not stop in time");
  }
}

static void abort_clients(coord *co, const char *why) {
  for (conn *c = co->conns; c; c = c->next)
    if (c->kind == C_CLIENT) conn_send(c, WIRE_ABORT, json_pack("{s:s}", "reason", why), NULL, 0);
}

static void begin_stop(coord *co, int outcome, uint64_t grace_ms) {
  co->jstate = J_STOPPING;
  co->outcome = outcome;
  uv_timer_stop(&co->rdv_timer);
  stop_tasks(co, outcome == O_SUCCESS, grace_ms);
  uv_timer_start(&co->stop_timer, stop_expired, grace_ms + 2000, 0);
  co->state_dirty = true;
}

/* The first failure of an attempt decides its fate: stop every other task
 * now (SIGTERM through the agents, SIGKILL after the grace period). */
static void attempt_fail(coord *co, task *t, const char *why) {
  if (co->jstate == J_STOPPING || co->jstate == J_DONE) return;
  co->root = t ? t->id : -1;
  loom__strlcpy(co->root_msg, why, sizeof co->root_msg);
  event(co, t, "attempt_failed", json_pack("{s:s}", "reason", why));
  say(co, "%s%s%s", t ? t->name : "", t ? ": " : "", why);
  abort_clients(co, why);
  begin_stop(co, O_FAILED, (uint64_t)loom__tun(LOOM_TUN_STOP_GRACE_MS));
}

/* Elastic membership: the live training tasks, ranked chief first, then
 * workers (procs each), as the KV store's loom/membership/g<G> and a
 * WIRE_MEMBERSHIP to every libloom client. Returns the world size. */
static int publish_membership(coord *co) {
  json_t *ranks = json_object();
  int rank = 0;
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < co->ntasks; i++) {
      task *t = &co->tasks[i];
      int which = !strcmp(t->role->name, "chief") ? 0 : !strcmp(t->role->name, "worker") ? 1 : 2;
      if (!t->training || which != pass || t->left || terminal(t)) continue;
      json_object_set_new(ranks, t->name, json_integer(rank));
      t->rank_base = rank;
      rank += t->role->procs;
    }
  json_t *m = json_pack("{s:I, s:i, s:o}", "generation", (json_int_t)co->generation,
                        "world_size", rank, "ranks", ranks);
  char *ms = json_dumps(m, JSON_COMPACT);
  json_decref(m);
  char key[64], gen[32];
  snprintf(key, sizeof key, "loom/membership/g%lld", (long long)co->generation);
  int gl = snprintf(gen, sizeof gen, "%lld", (long long)co->generation);
  if (ms) kv_store(co, key, ms, strlen(ms));
  kv_store(co, "loom/generation", gen, (size_t)gl);
  free(ms);
  co->world_size = rank;
  for (conn *c = co->conns; c; c = c->next)
    if (c->kind == C_CLIENT)
      conn_send(c, WIRE_MEMBERSHIP, json_pack("{s:I}", "generation", (json_int_t)co->generation),
                NULL, 0);
  return rank;
}

static int live_members(coord *co, const spec_role *r, const task *except) {
  int n = 0;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    n += t->role == r && t != except && !t->left && t->state == T_RUNNING;
  }
  return n;
}

/* A lost agent cannot stop its task's processes any more. On this
 * machine (local backend) its process groups are ours to kill: every
 * process of a task leads its own group. */
static void kill_task_groups(coord *co, task *t) {
  if (!co->be->ops->same_host || !t->pids) return;
  size_t i;
  json_t *v;
  json_array_foreach(t->pids, i, v) {
    json_int_t pid = json_integer_value(v);
    if (pid > 1) kill(-(pid_t)pid, SIGKILL);
  }
}

/* A task's processes ended (or its agent is lost). Success may end the
 * job; a failure is handled by the restart policy: with `restart: task`
 * the task alone restarts (up to max_restarts, for exit codes in
 * retry_on and deaths by signal), otherwise the attempt stops. */
static void task_exited(coord *co, task *t, int code, int sig, const char *reason, bool lost) {
  if (terminal(t)) return;
  if (lost) kill_task_groups(co, t);
  t->have_exit = !lost;
  t->exit_code = code;
  t->sig = sig;
  t->t_end = loom__wall();
  if (reason) loom__strlcpy(t->reason, reason, sizeof t->reason);
  bool ok = !lost && code == 0 && sig == 0;
  json_t *ex = lost ? json_object() : json_pack("{s:i}", "exit_code", code);
  if (sig) {
    json_object_set_new(ex, "signal", json_integer(sig));
    json_object_set_new(ex, "signal_name", json_string(sigabbrev_np(sig) ? sigabbrev_np(sig) : "?"));
  }
  if (reason) json_object_set_new(ex, "reason", json_string(reason));
  json_object_set_new(ex, "elapsed_s", json_real(t->t_start > 0 ? t->t_end - t->t_start : 0));
  if (co->jstate == J_STOPPING || co->jstate == J_DONE) {
    task_set(co, t, ok ? T_SUCCEEDED : T_STOPPED);
    event(co, t, ok ? "succeeded" : "stopped", ex);
    return;
  }
  task_set(co, t, ok ? T_SUCCEEDED : lost ? T_LOST : T_FAILED);
  event(co, t, ok ? "succeeded" : lost ? "lost" : "failed", ex);
  if (ok) {
    if (co->jstate == J_RUNNING && all_finishing_done(co)) {
      event(co, NULL, "finishing_roles_done", NULL);
      begin_stop(co, O_SUCCESS, (uint64_t)loom__tun(LOOM_TUN_SERVICE_GRACE_MS));
    }
    return;
  }
  char why[700];
  if (lost)
    snprintf(why, sizeof why, "%s", reason ? reason : "lost");
  else if (sig)
    snprintf(why, sizeof why, "killed by signal %d (SIG%s)%s%s", sig,
             sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", reason ? ": " : "", reason ? reason : "");
  else if (code == 127)
    snprintf(why, sizeof why, "exited with code 127 (command not found)%s%s", reason ? ": " : "",
             reason ? reason : "");
  else if (code == 126)
    snprintf(why, sizeof why, "exited with code 126 (command not executable)");
  else
    snprintf(why, sizeof why, "exited with code %d%s%s", code, reason ? ": " : "",
             reason ? reason : "");
  bool retryable = lost || spec_retryable(co->s, code, sig);
  bool can_restart = retryable && co->jstate == J_RUNNING && !strcmp(co->s->restart, "task") &&
                     t->restarts < co->s->max_restarts;
  if (co->jstate == J_RUNNING && t->role->elastic_min > 0 && retryable &&
      live_members(co, t->role, t) >= t->role->elastic_min) {
    /* elastic: the survivors go on in a new generation without it */
    t->left = true;
    co->generation++;
    int world = publish_membership(co);
    say(co, "%s %s: %d %s left; membership generation %lld, world size %d", t->name, why,
        live_members(co, t->role, NULL), t->role->name, (long long)co->generation, world);
    event(co, t, "membership_changed", json_pack("{s:I, s:i, s:s, s:s}", "generation",
                                                 (json_int_t)co->generation, "world_size", world,
                                                 "left", t->name, "reason", why));
    if (can_restart) {
      t->restart_pending = true;
      event(co, t, "restarting", json_pack("{s:s, s:i, s:i}", "reason", why, "restart",
                                           t->restarts + 1, "max_restarts", co->s->max_restarts));
      maybe_restart(co, t);
    } else if (all_finishing_done(co)) {
      event(co, NULL, "finishing_roles_done", NULL);
      begin_stop(co, O_SUCCESS, (uint64_t)loom__tun(LOOM_TUN_SERVICE_GRACE_MS));
    }
    return;
  }
  if (!retryable) {
    co->no_retry = true;
    size_t n = strlen(why);
    snprintf(why + n, sizeof why - n, " (not in retry_on: no retry)");
  }
  if (can_restart) {
    t->restart_pending = true;
    say(co, "%s %s: restarting it (%d of %d)", t->name, why, t->restarts + 1,
        co->s->max_restarts);
    event(co, t, "restarting", json_pack("{s:s, s:i, s:i}", "reason", why, "restart",
                                         t->restarts + 1, "max_restarts", co->s->max_restarts));
    maybe_restart(co, t);
    return;
  }
  attempt_fail(co, t, why);
}

static int on_agent(coord *co, conn *c, wire_frame *f) {
  task *t = c->task;
  switch (f->type) {
  case WIRE_READY:
    if (t->state != T_REGISTERED) return LOOM_EPROTO;
    task_set(co, t, T_READY);
    event(co, t, "ready", NULL);
    if (co->jstate == J_RUNNING) {
      /* a restarted task rejoins a running job: the cluster spec as it is
       * now, and peers see its new address in the KV store */
      task_set(co, t, T_RUNNING);
      if (t->training) {
        /* it joins the next generation (elastic or not: its peers' old
         * collectives included its dead predecessor) */
        t->left = false;
        co->generation++;
        int world = publish_membership(co);
        event(co, t, "membership_changed", json_pack("{s:I, s:i, s:s}", "generation",
                                                     (json_int_t)co->generation, "world_size",
                                                     world, "joined", t->name));
        say(co, "%s rejoined: membership generation %lld, world size %d", t->name,
            (long long)co->generation, world);
      }
      send_cluster(co, t);
      int64_t v = 0;
      kv_entry *e = kv_find(co, "loom/cluster_version");
      if (e) v = atoll((const char *)e->val);
      char buf[32];
      int n = snprintf(buf, sizeof buf, "%lld", (long long)(v + 1));
      kv_store(co, "loom/cluster_version", buf, (size_t)n);
      event(co, t, "rejoined", json_pack("{s:s, s:i}", "host", t->host, "port", t->port));
      return 0;
    }
    if (++co->nready == co->ntasks && co->jstate == J_RENDEZVOUS) {
      co->jstate = J_RUNNING;
      uv_timer_stop(&co->rdv_timer);
      double now = loom__wall();
      for (int i = 0; i < co->ntasks; i++) task_set(co, &co->tasks[i], T_RUNNING);
      event(co, NULL, "rendezvous_done",
            json_pack("{s:f, s:i}", "elapsed_s", now - co->t_attempt, "tasks", co->ntasks));
      send_cluster(co, NULL);
      publish_membership(co);
    }
    return 0;
  case WIRE_STARTED:
    t->t_start = loom__wall();
    if (t->pids) json_decref(t->pids);
    t->pids = json_incref(json_object_get(f->json, "pids"));
    event(co, t, "started", json_pack("{s:O?}", "pids", t->pids));
    if (!strcmp(t->role->name, "tensorboard")) {
      char url[400];
      snprintf(url, sizeof url, "http://%s:%d/", t->host, t->port);
      event(co, t, "tensorboard_url", json_pack("{s:s}", "url", url));
      loom__strlcpy(co->tensorboard, url, sizeof co->tensorboard);
      say(co, "TensorBoard (%s): %s", t->name, url);
    }
    return 0;
  case WIRE_LOG:
    on_log(co, t, f);
    return 0;
  case WIRE_METRIC:
    return on_metric(co, t, f, "agent");
  case WIRE_FAIL: {
    const char *why = json_string_value(json_object_get(f->json, "reason"));
    int code = (int)json_integer_value(json_object_get(f->json, "code"));
    task_exited(co, t, code ? code : 1, 0, why ? why : "the agent could not start the task",
                false);
    return 0;
  }
  case WIRE_EXIT: {
    int code = (int)json_integer_value(json_object_get(f->json, "code"));
    int sig = (int)json_integer_value(json_object_get(f->json, "signal"));
    const char *why = json_string_value(json_object_get(f->json, "reason"));
    task_exited(co, t, code, sig, why, json_is_true(json_object_get(f->json, "lost")));
    return 0;
  }
  case WIRE_HEARTBEAT:
    return 0;
  }
  return LOOM_EPROTO;
}

static int on_register(coord *co, conn *c, wire_frame *f) {
  const char *name = json_string_value(json_object_get(f->json, "task"));
  json_t *att = json_object_get(f->json, "attempt");
  const char *host = json_string_value(json_object_get(f->json, "host"));
  json_t *port = json_object_get(f->json, "port");
  task *t = name ? task_by_name(co, name) : NULL;
  if (!t || !json_is_integer(att) || !host || strlen(host) >= sizeof t->host ||
      !json_is_integer(port) || json_integer_value(port) < 1 || json_integer_value(port) > 65535) {
    loom__log(LOOM_LOG_WARN, "coord", "refused a malformed registration (%s)", name ? name : "?");
    return LOOM_EPROTO;
  }
  if (json_integer_value(att) != t->attempt || t->agent || t->state != T_LAUNCHED ||
      (co->jstate != J_RENDEZVOUS && co->jstate != J_RUNNING)) {
    loom__log(LOOM_LOG_WARN, "coord", "refused registration of %s attempt %lld: expected "
              "attempt %d and a task waiting for its agent", name,
              (long long)json_integer_value(att), t->attempt);
    return LOOM_ESTATE;
  }
  c->kind = C_AGENT;
  c->task = t;
  t->agent = c;
  if (!co->be->ops->tracks_processes) t->agent_running = true;
  loom__strlcpy(t->host, host, sizeof t->host);
  t->port = (int)json_integer_value(port);
  t->agent_pid = (int)json_integer_value(json_object_get(f->json, "pid"));
  task_set(co, t, T_REGISTERED);
  event(co, t, "registered", json_pack("{s:s, s:i}", "host", t->host, "port", t->port));
  send_assign(co, t);
  return 0;
}

static void on_frame(coord *co, conn *c, wire_frame *f) {
  int rc = 0;
  if (c->kind == C_AUTH) {
    unsigned char want[WIRE_MAC], proof[WIRE_MAC];
    wire_mac(co->o->secret, "loom-c", c->nonce, want);
    if (f->type != WIRE_AUTH || f->blob_len != WIRE_MAC + WIRE_NONCE ||
        !wire_mac_equal(f->blob, want)) {
      conn_close(c, "it failed authentication");
      return;
    }
    wire_mac(co->o->secret, "loom-s", f->blob + WIRE_MAC, proof);
    preauth_remove(c);
    c->kind = C_CTL; /* until it says who it is */
    wire_reader_limit(&c->rd, (size_t)loom__tun(LOOM_TUN_MAX_FRAME));
    uv_timer_stop(&c->timer);
    conn_send(c, WIRE_AUTH_OK, NULL, proof, WIRE_MAC);
    return;
  }
  if (c->kind == C_CTL && !c->task) {
    if (f->type == WIRE_REGISTER) {
      rc = on_register(co, c, f);
    } else if (f->type == WIRE_HELLO) {
      const char *name = json_string_value(json_object_get(f->json, "task"));
      c->kind = C_CLIENT;
      c->task = name ? task_by_name(co, name) : NULL;
      loom__strlcpy(c->who, name ? name : "?", sizeof c->who);
      if (co->jstate == J_STOPPING || co->jstate == J_DONE)
        conn_send(c, WIRE_ABORT, json_pack("{s:s}", "reason", co->root_msg), NULL, 0);
    } else if (f->type == WIRE_CTL_KILL) {
      json_int_t id = json_integer_value(json_object_get(f->json, "id"));
      reply(c, id, 0, NULL, NULL, 0);
      if (co->jstate != J_DONE && co->jstate != J_STOPPING) {
        say(co, "killed on request (loom kill)");
        event(co, NULL, "kill_requested", NULL);
        loom__strlcpy(co->root_msg, "killed on request (loom kill)", sizeof co->root_msg);
        abort_clients(co, co->root_msg);
        begin_stop(co, O_KILLED, (uint64_t)loom__tun(LOOM_TUN_STOP_GRACE_MS));
      }
    } else {
      rc = LOOM_EPROTO;
    }
  } else if (c->kind == C_AGENT) {
    rc = on_agent(co, c, f);
  } else if (c->kind == C_CLIENT) {
    rc = on_client(co, c, f);
  } else {
    rc = LOOM_EPROTO;
  }
  if (rc < 0) {
    char why[160];
    snprintf(why, sizeof why, "unexpected or malformed message of type %d (%s)", f->type,
             loom_strerror(rc));
    conn_close(c, why);
  }
}

static void alloc_cb(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  static char slab[WIRE_READ_CHUNK];
  *buf = uv_buf_init(slab, sizeof slab);
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  conn *c = s->data;
  coord *co = c->co;
  if (n < 0) {
    char why[160];
    snprintf(why, sizeof why, "the peer closed it (%s)", uv_strerror((int)n));
    /* a client (libloom, the CLI) hanging up, or an agent whose task has
     * ended, is the normal end of its work */
    bool expected = c->kind == C_CLIENT || c->kind == C_CTL ||
                    (c->kind == C_AGENT && (!c->task || terminal(c->task)));
    conn_close(c, expected ? NULL : why);
    return;
  }
  if (n == 0) return;
  c->last_rx = loom__now_ms();
  if (wire_reader_push(&c->rd, buf->base, (size_t)n) < 0) {
    char why[160];
    snprintf(why, sizeof why, "it sent more than its %zu-byte frame limit allows",
             c->rd.max_frame);
    conn_close(c, why);
    return;
  }
  for (;;) {
    if (c->closing) return;
    wire_frame f;
    int rc = wire_reader_pop(&c->rd, &f);
    if (rc == 0) return;
    if (rc < 0) {
      char why[160];
      snprintf(why, sizeof why, "it sent a malformed or oversized frame (limit %zu bytes)",
               c->rd.max_frame);
      conn_close(c, why);
      return;
    }
    on_frame(co, c, &f);
    wire_frame_free(&f);
  }
}

static void auth_expired(uv_timer_t *tm) {
  conn *c = tm->data;
  conn_close(c, "it did not authenticate in time");
}

static void on_connection(uv_stream_t *server, int status) {
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
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 || wire_random(c->nonce, WIRE_NONCE) < 0) {
    conn_close(c, "it could not be accepted");
    return;
  }
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  loom__strlcpy(c->from, "?", sizeof c->from);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET)
      uv_ip4_name((struct sockaddr_in *)&ss, c->from, sizeof c->from);
    else if (ss.ss_family == AF_INET6)
      uv_ip6_name((struct sockaddr_in6 *)&ss, c->from, sizeof c->from);
  }
  if (co->npreauth >= (int)loom__tun(LOOM_TUN_PREAUTH_MAX) && co->pa_oldest)
    conn_close(co->pa_oldest, "evicted: too many connections waiting to authenticate");
  preauth_add(c);
  uv_tcp_nodelay(&c->tcp, 1);
  c->last_rx = loom__now_ms();
  uv_timer_start(&c->timer, auth_expired, (uint64_t)loom__tun(LOOM_TUN_AUTH_TIMEOUT_MS), 0);
  conn_send(c, WIRE_CHALLENGE, NULL, c->nonce, WIRE_NONCE);
  uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

/* ---- attempts ------------------------------------------------------------- */
static void rdv_expired(uv_timer_t *tm) {
  coord *co = tm->data;
  if (co->jstate != J_RENDEZVOUS) return;
  loom__buf b;
  loom__buf_init(&b, 1 << 16);
  int missing = 0;
  task *first = NULL;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (t->state == T_READY) continue;
    if (!first) first = t;
    missing++;
    if (missing > 20) continue;
    const char *what;
    char tmp[160];
    if (t->state == T_PENDING) {
      what = "never started";
    } else if (t->state == T_LAUNCHED) {
      snprintf(tmp, sizeof tmp, "agent started %.1fs ago but never registered",
               loom__wall() - t->t_launch);
      what = tmp;
    } else {
      what = "still starting: registered, preparing its working directory and command";
    }
    loom__buf_printf(&b, "%s%s (%s)", missing > 1 ? ", " : "", t->name, what);
  }
  if (missing > 20) loom__buf_printf(&b, ", and %d more", missing - 20);
  char why[1600];
  snprintf(why, sizeof why, "rendezvous timed out after %.1fs: %d of %d tasks missing: %s. "
           "Raise LOOM_RENDEZVOUS_TIMEOUT (ms) if tasks need longer to start",
           (double)loom__tun(LOOM_TUN_RENDEZVOUS_TIMEOUT_MS) / 1000.0, missing, co->ntasks,
           b.p ? b.p : "");
  loom__buf_free(&b);
  event(co, NULL, "rendezvous_timeout", json_pack("{s:i}", "missing", missing));
  co->root = first ? first->id : -1;
  attempt_fail(co, NULL, why);
  co->root = first ? first->id : -1;
}

static char **make_env(coord *co, task *t) {
  static const char *const strip[] = {"LOOM_COORD=", "LOOM_SECRET=", "LOOM_TASK=",
                                      "LOOM_ATTEMPT=", "LOOM_JOB_ID=", "LOOM_JOB_DIR=",
                                      "LOOM_HOST=", NULL};
  extern char **environ;
  int n = 0;
  while (environ[n]) n++;
  char **env = calloc((size_t)n + 10, sizeof *env);
  if (!env) return NULL;
  int k = 0;
  for (int i = 0; i < n; i++) {
    bool skip = false;
    for (int s = 0; strip[s] && !skip; s++) skip = !strncmp(environ[i], strip[s], strlen(strip[s]));
    if (!skip) env[k++] = strdup(environ[i]);
  }
  const char *host = co->be->ops->host(co->be, t->id);
  env[k++] = loom__asprintf("LOOM_COORD=%s", co->addr);
  env[k++] = loom__asprintf("LOOM_SECRET=%s", co->o->secret);
  env[k++] = loom__asprintf("LOOM_TASK=%s", t->name);
  env[k++] = loom__asprintf("LOOM_ATTEMPT=%d", t->attempt);
  env[k++] = loom__asprintf("LOOM_JOB_ID=%s", co->o->job_id);
  env[k++] = loom__asprintf("LOOM_JOB_DIR=%s", co->o->job_dir);
  if (host) env[k++] = loom__asprintf("LOOM_HOST=%s", host);
  return env;
}

static void free_env(char **env) {
  for (int i = 0; env && env[i]; i++) free(env[i]);
  free(env);
}

static void open_logs(coord *co, task *t) {
  if (!t->log) {
    char *p = loom__asprintf("%s/logs/%s.log", co->o->job_dir, t->file);
    t->log = p ? loom__fopen_private(p, true) : NULL;
    if (t->log) setvbuf(t->log, NULL, _IOLBF, 0);
    free(p);
  }
  if (t->log) {
    char iso[40];
    loom__wall_iso(loom__wall(), iso, sizeof iso);
    fprintf(t->log, "=== loom: %s attempt %d, %s ===\n", t->name, t->attempt, iso);
  }
}

/* Starts task t's agent through the backend. On failure the task is lost
 * and the attempt fails (a backend error: no retry). */
static int launch_task(coord *co, task *t) {
  char *argv[] = {(char *)co->o->self_exe, "agent", NULL};
  char **env = make_env(co, t);
  char err[400] = "";
  int rc = env ? co->be->ops->launch(co->be, t->id, argv, env, err, sizeof err) : LOOM_ENOMEM;
  free_env(env);
  t->t_launch = loom__wall();
  if (rc < 0) {
    snprintf(t->reason, sizeof t->reason, "never started: %s", err[0] ? err : loom_strerror(rc));
    task_set(co, t, T_LOST);
    event(co, t, "launch_failed", json_pack("{s:s}", "reason", t->reason));
    attempt_fail(co, t, t->reason);
    co->outcome = O_INFRA;
    return rc;
  }
  t->agent_running = co->be->ops->tracks_processes;
  task_set(co, t, T_LAUNCHED);
  event(co, t, "launched", NULL);
  return 0;
}

static void task_reset(coord *co, task *t) {
  t->state = T_PENDING;
  t->launch_tries = 0;
  t->relaunch_pending = false;
  uv_timer_stop(&t->relaunch_timer);
  t->host[0] = 0;
  t->port = t->agent_pid = 0;
  t->have_exit = false;
  t->exit_code = t->sig = 0;
  t->reason[0] = 0;
  t->t_start = t->t_end = 0;
  if (t->pids) json_decref(t->pids);
  t->pids = NULL;
  ring_clear(t);
  open_logs(co, t);
}

/* Restarts a failed task once its old agent is gone (restart: task). */
static void maybe_restart(coord *co, task *t) {
  if (!t->restart_pending || t->agent || t->agent_running) return;
  t->restart_pending = false;
  if (co->jstate != J_RUNNING) return;
  t->restarts++;
  t->attempt++;
  task_reset(co, t);
  launch_task(co, t);
}

static void attempt_start(coord *co) {
  co->jstate = J_RENDEZVOUS;
  co->outcome = O_NONE;
  co->nready = 0;
  co->root = -1;
  co->root_msg[0] = 0;
  co->no_retry = false;
  co->generation = 0;
  co->t_attempt = loom__wall();
  kv_clear(co);
  if (co->feed) feed_dispatch_new_attempt(co->feed);
  event(co, NULL, "attempt_started", json_pack("{s:i}", "tasks", co->ntasks));
  bool first = co->attempt == co->o->first_attempt;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    /* LOOM_ATTEMPT counts every start of this task: job retries and task
     * restarts alike */
    t->attempt = first ? co->attempt : t->attempt + 1;
    t->restarts = 0;
    t->restart_pending = false;
    t->left = false;
    task_reset(co, t);
  }
  for (int i = 0; i < co->ntasks && co->jstate == J_RENDEZVOUS; i++)
    if (launch_task(co, &co->tasks[i]) < 0) break;
  if (co->jstate == J_RENDEZVOUS)
    uv_timer_start(&co->rdv_timer, rdv_expired,
                   (uint64_t)loom__tun(LOOM_TUN_RENDEZVOUS_TIMEOUT_MS), 0);
  state_write(co);
}

static void print_summary_to(coord *co, FILE *out);

static void print_summary(coord *co) {
  char *p = loom__asprintf("%s/summary.txt", co->o->job_dir);
  FILE *f = p ? loom__fopen_private(p, false) : NULL;
  if (f) {
    print_summary_to(co, f);
    fclose(f);
  }
  free(p);
  if (!co->o->console) return;
  status_clear(co);
  print_summary_to(co, stderr);
}

static void print_summary_to(coord *co, FILE *out) {
  double el = loom__wall() - co->t_start;
  if (co->outcome == O_SUCCESS) {
    fprintf(out, "loom: job %s succeeded in %.1fs (%d tasks, attempt %d)\n", co->o->job_id,
            el, co->ntasks, co->attempt);
    return;
  }
  if (co->outcome == O_KILLED) {
    fprintf(out, "loom: job %s was stopped after %.1fs: %s\n", co->o->job_id, el,
            co->root_msg);
    return;
  }
  fprintf(out, "loom: job %s FAILED after %.1fs (attempt %d of %d)\n", co->o->job_id, el,
          co->attempt + 1, co->s->retries + 1);
  if (co->root >= 0) {
    task *t = &co->tasks[co->root];
    fprintf(out, "loom: root cause: %s (attempt %d) %s\n", t->name, t->attempt, co->root_msg);
    if (t->ring_n) {
      fprintf(out, "loom: last %d lines of %s's stderr:\n", t->ring_n, t->name);
      for (int i = 0; i < t->ring_n; i++)
        fprintf(out, "  | %s\n", t->ring[(t->ring_head + i) % RING]);
    } else {
      fprintf(out, "loom: %s wrote nothing on stderr\n", t->name);
    }
  } else {
    fprintf(out, "loom: root cause: %s\n", co->root_msg);
  }
  fprintf(out, "loom: logs: %s/logs/   events: loom events %s\n", co->o->job_dir,
          co->o->job_id);
}

static void finish(coord *co) {
  co->jstate = J_DONE;
  uv_timer_stop(&co->rdv_timer);
  uv_timer_stop(&co->stop_timer);
  /* staged files go before the job is reported over: `loom run` returns
   * then, and nothing of the job may outlive it */
  if (co->be->ops->unstage_files) co->be->ops->unstage_files(co->be);
  co->exit_status = co->outcome == O_SUCCESS  ? EXIT_OK
                    : co->outcome == O_KILLED ? EXIT_INTR
                    : co->outcome == O_INFRA  ? EXIT_INFRA
                                              : EXIT_FAILED;
  event(co, NULL, "job_finished", json_pack("{s:s, s:i, s:f}", "outcome",
                                            co->outcome == O_SUCCESS  ? "succeeded"
                                            : co->outcome == O_KILLED ? "killed"
                                                                      : "failed",
                                            "exit_status", co->exit_status, "elapsed_s",
                                            loom__wall() - co->t_start));
  state_write(co);
  print_summary(co);
  uv_stop(&co->loop);
}

/* Called whenever something ends: once the attempt is stopping and every
 * agent is gone, retry or finish. */
static void check_over(coord *co) {
  if (co->jstate != J_STOPPING) return;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (t->agent_running || t->agent) return;
  }
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (!terminal(t)) {
      task_set(co, t, T_STOPPED);
      t->t_end = loom__wall();
    }
  }
  uv_timer_stop(&co->stop_timer);
  for (conn *c = co->conns, *n; c; c = n) {
    n = c->next;
    if (c->kind == C_CLIENT) conn_close(c, NULL);
  }
  kv_drop_waiters(co, NULL);
  event(co, NULL, "attempt_finished", NULL);
  if (co->outcome == O_FAILED && co->attempt - co->o->first_attempt < co->s->retries &&
      co->interrupts == 0 && !co->no_retry) {
    say(co, "attempt %d failed: %s%s%s", co->attempt + 1, co->root >= 0 ? co->tasks[co->root].name : "",
        co->root >= 0 ? ": " : "", co->root_msg);
    co->attempt++;
    say(co, "retrying the job: attempt %d of %d", co->attempt + 1, co->s->retries + 1);
    event(co, NULL, "retrying", NULL);
    attempt_start(co);
    return;
  }
  finish(co);
}

static task *task_of_relaunch_timer(uv_timer_t *tm) {
  return (task *)(void *)((char *)tm - offsetof(task, relaunch_timer));
}

static void relaunch_due(uv_timer_t *tm) {
  coord *co = tm->data;
  task *t = task_of_relaunch_timer(tm);
  if (!t->relaunch_pending) return;
  t->relaunch_pending = false;
  /* an attempt that stopped meanwhile has already counted this task as
   * gone (check_over); a new attempt has reset it */
  if ((co->jstate != J_RENDEZVOUS && co->jstate != J_RUNNING) || t->state != T_LAUNCHED) return;
  launch_task(co, t);
}

/* The launcher of t exited with a failure before t's agent registered
 * (a Slurm step launch refused, say): nothing of the task's command has
 * run, so on a backend whose launches can fail transiently the task is
 * launched again after a pause, LOOM_LAUNCH_RETRIES times at most. Returns
 * true when a relaunch is scheduled. A task that registered is never
 * relaunched here: its end is the task's own, and the restart policy
 * decides. */
static bool maybe_relaunch(coord *co, task *t, int64_t status, int sig, const char *detail,
                           const char *how) {
  long long max = loom__tun(LOOM_TUN_LAUNCH_RETRIES);
  if (!co->be->ops->launch_retryable || t->state != T_LAUNCHED || t->agent ||
      (co->jstate != J_RENDEZVOUS && co->jstate != J_RUNNING) || t->launch_tries >= max)
    return false;
  t->launch_tries++;
  /* the pause doubles each time, up to 30 s */
  uint64_t delay = (uint64_t)loom__tun(LOOM_TUN_LAUNCH_RETRY_MS);
  for (int i = 1; i < t->launch_tries && delay < 30000; i++) delay *= 2;
  if (delay > 30000) delay = 30000;
  json_t *ex = json_pack("{s:i, s:I, s:f, s:s}", "retry", t->launch_tries, "max_retries",
                         (json_int_t)max, "delay_s", (double)delay / 1000.0, "launcher", how);
  if (sig) json_object_set_new(ex, "signal", json_integer(sig));
  else json_object_set_new(ex, "exit_code", json_integer((json_int_t)status));
  if (detail) json_object_set_new(ex, "reason", json_string(detail));
  event(co, t, "launch_retry", ex);
  char msg[1600];
  snprintf(msg, sizeof msg, "%s: its launch failed before the agent registered (%s%s%s); "
           "launching it again in %.1fs (retry %d of %lld)", t->name, how, detail ? ": " : "",
           detail ? detail : "", (double)delay / 1000.0, t->launch_tries, max);
  /* on the console when attached; otherwise a warning in the coordinator's
   * log (coordinator.log under Slurm), where a person looks for it */
  if (co->o->console) say(co, "%s", msg);
  else loom__log(LOOM_LOG_WARN, "coord", "%s", msg);
  t->relaunch_pending = true;
  uv_timer_start(&t->relaunch_timer, relaunch_due, delay, 0);
  return true;
}

static void agent_exited(void *arg, int id, int64_t status, int sig, const char *detail) {
  coord *co = arg;
  task *t = &co->tasks[id];
  t->agent_running = false;
  /* libuv may reap an agent before we have read what it wrote last (its
   * EXIT): while its connection is open, its end of file decides. */
  if (!terminal(t) && !t->agent) {
    char how[96];
    snprintf(how, sizeof how, "%s %s %d",
             co->be->ops->launcher ? co->be->ops->launcher : "the agent",
             sig ? "was killed by signal" : "exited with status", sig ? sig : (int)status);
    if (co->jstate == J_STOPPING) {
      task_set(co, t, T_STOPPED);
      t->t_end = loom__wall();
      event(co, t, "stopped", NULL);
    } else if ((status != 0 || sig != 0) && maybe_relaunch(co, t, status, sig, detail, how)) {
      /* launched again by relaunch_due */
    } else {
      char why[1600];
      if (t->state == T_LAUNCHED && t->launch_tries > 0)
        snprintf(why, sizeof why, "never started: %s before the agent registered, on each of "
                 "%d launches%s%s", how, t->launch_tries + 1, detail ? ": " : "",
                 detail ? detail : "");
      else if (t->state == T_LAUNCHED)
        snprintf(why, sizeof why, "never started: %s before the agent registered%s%s", how,
                 detail ? ": " : "", detail ? detail : "");
      else
        snprintf(why, sizeof why, "agent lost: %s before the task ended%s%s", how,
                 detail ? ": " : "", detail ? detail : "");
      task_exited(co, t, -1, 0, why, true);
    }
  }
  maybe_restart(co, t);
  check_over(co);
}

static void on_signal(uv_signal_t *h, int signum) {
  coord *co = h->data;
  co->interrupts++;
  if (co->interrupts == 1) {
    snprintf(co->root_msg, sizeof co->root_msg, "interrupted by SIG%s", sigabbrev_np(signum));
    say(co, "%s: stopping the job (again to kill at once)", co->root_msg);
    event(co, NULL, "interrupted", json_pack("{s:i}", "signal", signum));
    abort_clients(co, co->root_msg);
    if (co->jstate != J_DONE) begin_stop(co, O_KILLED, (uint64_t)loom__tun(LOOM_TUN_STOP_GRACE_MS));
    co->outcome = O_KILLED;
    check_over(co);
  } else {
    co->outcome = O_KILLED;
    stop_expired(&co->stop_timer);
  }
}

static uint64_t hb_timeout_ms(const coord *co) {
  return co->s->heartbeat_timeout_ms > 0 ? (uint64_t)co->s->heartbeat_timeout_ms
                                         : (uint64_t)loom__tun(LOOM_TUN_HEARTBEAT_TIMEOUT_MS);
}

/* Heartbeats both ways; an agent silent for the heartbeat timeout (hung,
 * stopped, its host gone) is declared lost and handled by the policy. */
static void hb_tick(uv_timer_t *tm) {
  coord *co = tm->data;
  uint64_t now = loom__now_ms(), limit = hb_timeout_ms(co);
  loom__ratelog_tick(&co->rl_refused, "coord", "refused connections");
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    conn *c = t->agent;
    if (!c) continue;
    if (c->last_rx && now - c->last_rx > limit && !terminal(t)) {
      char why[160];
      snprintf(why, sizeof why, "lost: no heartbeat from its agent for %.1fs",
               (double)(now - c->last_rx) / 1000.0);
      co->be->ops->signal(co->be, t->id, SIGKILL);
      task_exited(co, t, -1, 0, why, true);
      conn_close(c, "no heartbeat in time");
      continue;
    }
    conn_send(c, WIRE_HEARTBEAT, NULL, NULL, 0);
  }
}

/* ---- setup ------------------------------------------------------------- */
static int setup_tasks(coord *co) {
  co->ntasks = spec_total_tasks(co->s);
  co->tasks = calloc((size_t)co->ntasks, sizeof *co->tasks);
  if (!co->tasks) return LOOM_ENOMEM;
  int k = 0;
  for (int i = 0; i < co->s->nroles; i++) {
    const spec_role *r = &co->s->roles[i];
    for (int j = 0; j < r->instances; j++, k++) {
      task *t = &co->tasks[k];
      t->id = k;
      t->role = r;
      t->index = j;
      t->rank_base = -1;
      snprintf(t->name, sizeof t->name, "%s:%d", r->name, j);
      snprintf(t->file, sizeof t->file, "%s-%d", r->name, j);
      t->training = spec_role_is_training(co->s, r);
    }
  }
  /* Ranks: chief first, then worker, then other training roles. */
  int rank = 0;
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < co->ntasks; i++) {
      task *t = &co->tasks[i];
      if (!t->training) continue;
      int which = !strcmp(t->role->name, "chief") ? 0 : !strcmp(t->role->name, "worker") ? 1 : 2;
      if (which != pass) continue;
      t->rank_base = rank;
      rank += t->role->procs;
    }
  co->world_size = rank;
  return 0;
}

static void close_walk(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

int coord_run(const coord_opts *o) {
  coord *co = calloc(1, sizeof *co);
  if (!co) return EXIT_INFRA;
  co->o = o;
  co->s = o->spec;
  co->root = -1;
  co->t_start = loom__wall();
  int status = EXIT_INFRA;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (uv_loop_init(&co->loop) < 0) goto out_free;
  if (setup_tasks(co) < 0) goto out_loop;
  char *p = loom__asprintf("%s/events.jsonl", o->job_dir);
  co->events = p ? loom__fopen_private(p, true) : NULL;
  free(p);
  p = loom__asprintf("%s/logs/all.log", o->job_dir);
  co->alllog = p ? loom__fopen_private(p, true) : NULL;
  if (co->alllog) setvbuf(co->alllog, NULL, _IOLBF, 0);
  free(p);
  if (!co->events || !co->alllog) {
    fprintf(stderr, "loom: cannot write the job directory %s: %s\n", o->job_dir, strerror(errno));
    goto out_loop;
  }
  if (co->s->feed) {
    char err[1024], sdir[4096];
    loom__strlcpy(sdir, co->s->path, sizeof sdir);
    char *slash = strrchr(sdir, '/');
    if (slash) *slash = 0;
    if (feed_dispatch_create(co->s->feed, o->job_dir, sdir, feed_reply, &co->feed, err,
                             sizeof err) < 0) {
      fprintf(stderr, "loom: %s: %s\n", co->s->path, err);
      status = EXIT_USAGE;
      goto out_loop;
    }
  }
  const char *bname = o->backend ? o->backend : co->s->backend;
  if (backend_create(bname, co->s, &co->loop, co->ntasks, agent_exited, co, &co->be) < 0) {
    fprintf(stderr, "loom: backend '%s' is not available\n", bname);
    goto out_loop;
  }
  /* CPUs and GPUs: where the backend says they come from */
  for (int i = 0; i < co->ntasks; i++)
    co->be->ops->place(co->be, i, co->tasks[i].role, co->tasks[i].cpus, sizeof co->tasks[i].cpus,
                       co->tasks[i].gpus, sizeof co->tasks[i].gpus);
  uv_tcp_init(&co->loop, &co->server);
  co->server.data = co;
  struct sockaddr_storage sa;
  const char *bind = o->bind ? o->bind : "127.0.0.1";
  int rc = strchr(bind, ':') ? uv_ip6_addr(bind, 0, (struct sockaddr_in6 *)&sa)
                             : uv_ip4_addr(bind, 0, (struct sockaddr_in *)&sa);
  if (rc == 0) rc = uv_tcp_bind(&co->server, (struct sockaddr *)&sa, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&co->server, 4096, on_connection);
  if (rc < 0) {
    fprintf(stderr, "loom: the coordinator cannot listen on %s: %s\n", bind, uv_strerror(rc));
    goto out_be;
  }
  int len = sizeof sa;
  uv_tcp_getsockname(&co->server, (struct sockaddr *)&sa, &len);
  char ip[INET6_ADDRSTRLEN] = "";
  int port;
  if (sa.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&sa, ip, sizeof ip);
    port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
  } else {
    uv_ip4_name((struct sockaddr_in *)&sa, ip, sizeof ip);
    port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
  }
  snprintf(co->addr, sizeof co->addr, "%s:%d", o->advertise ? o->advertise : ip, port);
  co->attempt = o->first_attempt;
  json_t *cj = json_pack("{s:s, s:i}", "addr", co->addr, "pid", (int)getpid());
  char *cs = json_dumps(cj, JSON_COMPACT);
  json_decref(cj);
  p = loom__asprintf("%s/coord.json", o->job_dir);
  if (cs && p) loom__write_atomic(p, cs, strlen(cs), 0600, false);
  free(cs);
  free(p);

  /* The dashboard: the token is derived from the secret, so sharing the
   * URL does not give away the secret. */
  {
    unsigned char mac[WIRE_MAC], nonce[WIRE_NONCE] = {0};
    char token[2 * WIRE_MAC + 1], err[256];
    wire_mac(o->secret, "loom-ui", nonce, mac);
    loom__hex(mac, 16, token);
    int hport = 0;
    const char *hb = o->advertise ? "0.0.0.0" : bind;
    if (http_start(&co->loop, hb, o->job_dir, token, &co->http, &hport, err, sizeof err) == 0) {
      snprintf(co->dashboard, sizeof co->dashboard, "http://%s:%d/?token=%s",
               o->advertise ? o->advertise : ip, hport, token);
      if (o->console) fprintf(stderr, "loom: dashboard %s\n", co->dashboard);
    } else {
      loom__log(LOOM_LOG_INFO, "coord", "no dashboard: %s", err);
    }
  }
  uv_timer_init(&co->loop, &co->rdv_timer);
  uv_timer_init(&co->loop, &co->stop_timer);
  uv_timer_init(&co->loop, &co->hb_timer);
  uv_timer_init(&co->loop, &co->flush_timer);
  for (int i = 0; i < co->ntasks; i++) {
    uv_timer_init(&co->loop, &co->tasks[i].relaunch_timer);
    co->tasks[i].relaunch_timer.data = co;
  }
  co->rdv_timer.data = co->stop_timer.data = co->hb_timer.data = co->flush_timer.data = co;
  uv_timer_start(&co->hb_timer, hb_tick, (uint64_t)loom__tun(LOOM_TUN_HEARTBEAT_MS),
                 (uint64_t)loom__tun(LOOM_TUN_HEARTBEAT_MS));
  uv_timer_start(&co->flush_timer, flush_tick, 250, 250);
  uv_signal_init(&co->loop, &co->sigint);
  uv_signal_init(&co->loop, &co->sigterm);
  uv_signal_init(&co->loop, &co->sighup);
  co->sigint.data = co->sigterm.data = co->sighup.data = co;
  uv_signal_start(&co->sigint, on_signal, SIGINT);
  uv_signal_start(&co->sigterm, on_signal, SIGTERM);
  uv_signal_start(&co->sighup, on_signal, SIGHUP);
  signal(SIGPIPE, SIG_IGN);

  event(co, NULL, "job_started", json_pack("{s:s, s:s, s:i}", "name", co->s->name, "coordinator",
                                           co->addr, "tasks", co->ntasks));
  if (co->dashboard[0]) event(co, NULL, "dashboard", json_pack("{s:s}", "url", co->dashboard));
  if (co->be->ops->stage_files) {
    char err[512] = "";
    setenv("LOOM_JOB_DIR_STAGE", o->job_dir, 1);
    if (co->be->ops->stage_files(co->be, co->s, &co->staged_files, err, sizeof err) < 0) {
      fprintf(stderr, "loom: cannot stage the job's files on its nodes: %s\n", err);
      event(co, NULL, "staging_failed", json_pack("{s:s}", "reason", err));
      co->outcome = O_INFRA;
      loom__strlcpy(co->root_msg, err, sizeof co->root_msg);
      finish(co);
      goto out_run;
    }
    if (co->staged_files) event(co, NULL, "files_staged", json_pack("{s:O}", "files", co->staged_files));
  }
  attempt_start(co);
  uv_run(&co->loop, UV_RUN_DEFAULT);
out_run:
  status = co->exit_status;
  if (co->http) http_stop(co->http);
  if (co->be->ops->unstage_files) co->be->ops->unstage_files(co->be);
  if (co->jstate != J_DONE) status = EXIT_INFRA;

  for (conn *c = co->conns, *n; c; c = n) {
    n = c->next;
    conn_close(c, NULL);
  }
  loom__ratelog_flush(&co->rl_refused, "coord", "refused connections");
  kv_drop_waiters(co, NULL);
out_be:
  uv_walk(&co->loop, close_walk, NULL);
  uv_run(&co->loop, UV_RUN_DEFAULT);
  if (co->be) co->be->ops->destroy(co->be);
out_loop:
  uv_walk(&co->loop, close_walk, NULL);
  uv_run(&co->loop, UV_RUN_DEFAULT);
  uv_loop_close(&co->loop);
  kv_clear(co);
  for (int i = 0; co->tasks && i < co->ntasks; i++) {
    ring_clear(&co->tasks[i]);
    if (co->tasks[i].log) fclose(co->tasks[i].log);
    if (co->tasks[i].pids) json_decref(co->tasks[i].pids);
  }
  free(co->tasks);
  if (co->staged_files) json_decref(co->staged_files);
  if (co->feed) feed_dispatch_destroy(co->feed);
  if (co->events) fclose(co->events);
  if (co->alllog) fclose(co->alllog);
out_free:
  free(co);
  return status;
}
