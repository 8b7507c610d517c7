/* kv.c: the KV store libloom tasks share (set, get with wait, add), and the
 * requests of libloom clients: KV, events, metrics and the data feed. */
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

static uint32_t kv_hash(const char *s);
static void waiter_closed(uv_handle_t *h);
static void waiter_remove(coord *co, kv_wait *w);
static void waiter_expired(uv_timer_t *tm);

/* ---- the KV store ---------------------------------------------------------- */
static uint32_t kv_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h % KV_BUCKETS;
}

kv_entry *coord_kv_find(coord *co, const char *key) {
  for (kv_entry *e = co->kv[kv_hash(key)]; e; e = e->next)
    if (!strcmp(e->key, key)) return e;
  return NULL;
}

void coord_kv_clear(coord *co) {
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

void coord_reply(conn *c, json_int_t id, int rc, json_t *extra, const void *blob, size_t len) {
  wire_msg m = {.type = WIRE_REPLY,
                .u.reply = {.id = id, .rc = rc, .json = extra},
                .blob = blob,
                .blob_len = len};
  coord_conn_send_msg(c, &m);
  json_decref(extra);
}

void coord_feed_reply(void *c, json_int_t id, int rc, json_t *extra, const void *blob, size_t len) {
  coord_reply((conn *)c, id, rc, extra, blob, len);
}

static void waiter_closed(uv_handle_t *h) {
  kv_wait *w = h->data;
  free(w->key);
  free(w);
}

static void waiter_remove(coord *co, kv_wait *w) {
  if (w->prev)
    w->prev->next = w->next;
  else
    co->waiters = w->next;
  if (w->next) w->next->prev = w->prev;
  uv_close((uv_handle_t *)&w->timer, waiter_closed);
}

static void waiter_expired(uv_timer_t *tm) {
  kv_wait *w = tm->data;
  coord_reply(w->c, w->id, LOOM_ETIMEDOUT, NULL, NULL, 0);
  waiter_remove(w->co, w);
}

void coord_kv_drop_waiters(coord *co, conn *c) {
  for (kv_wait *w = co->waiters, *n; w; w = n) {
    n = w->next;
    if (!c || w->c == c) waiter_remove(co, w);
  }
}

int coord_kv_store(coord *co, const char *key, const void *val, size_t len) {
  kv_entry *e = coord_kv_find(co, key);
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
      coord_reply(w->c, w->id, 0, NULL, e->val, e->len);
      waiter_remove(co, w);
    }
  }
  return 0;
}

#define METRIC_BURST_S 10        /* the bucket holds this many seconds of metrics */
#define METRIC_DROP_SAY_MS 10000 /* at most one metrics_dropped event per task this often */

void coord_metrics_dropped(coord *co, task *t, bool force) {
  uint64_t now = loom__now_ms();
  if (!t->metrics_unsaid || (!force && now - t->dropped_said_ms < METRIC_DROP_SAY_MS)) return;
  long long rate = co->metric_rate;
  coord_event(co, t, "metrics_dropped",
              json_pack("{s:I, s:I, s:I, s:s}", "dropped", (json_int_t)t->metrics_unsaid, "total",
                        (json_int_t)t->metrics_dropped, "rate", (json_int_t)rate, "why",
                        "more metrics than LOOM_METRIC_RATE a second"));
  t->metrics_unsaid = 0;
  t->dropped_said_ms = now;
}

/* A metric from a task (libloom) or about it (its agent's CPU and memory
 * reports): one "metric" event in events.jsonl, which the dashboard reads.
 * A task's own metrics pass a token bucket, LOOM_METRIC_RATE a second and
 * 10 s of them deep, so that no task can grow events.jsonl (and the
 * coordinator's work) faster than that; the rest are counted, in a
 * metrics_dropped event at most every 10 s and in the task's state. */
int coord_on_metric(coord *co, task *t, const wire_metric *m, const char *source) {
  if (t && !strcmp(source, "user")) {
    uint64_t now = loom__now_ms();
    double rate = (double)co->metric_rate, burst = rate * METRIC_BURST_S;
    if (t->metric_ms == 0)
      t->metric_tokens = burst;
    else
      t->metric_tokens += rate * (double)(now - t->metric_ms) / 1000.0;
    if (t->metric_tokens > burst) t->metric_tokens = burst;
    t->metric_ms = now;
    if (t->metric_tokens < 1.0) {
      t->metrics_dropped++;
      t->metrics_unsaid++;
      coord_metrics_dropped(co, t, t->dropped_said_ms == 0);
      return 0;
    }
    t->metric_tokens -= 1.0;
  }
  coord_event_log(co, t, "metric",
                  json_pack("{s:s, s:I, s:f, s:s}", "tag", m->tag, "step", (json_int_t)m->step,
                            "value", m->value, "source", source));
  return 0;
}

int coord_on_client(coord *co, conn *c, const wire_msg *m) {
  if (!m) return LOOM_EPROTO;
  if (m->type >= WIRE_FEED_FIRST && m->type <= WIRE_FEED_LAST) {
    /* every feed request's struct begins with its id (a common initial
     * sequence of the union's members) */
    json_int_t id = m->u.feed_open.id;
    if (!co->feed) {
      coord_reply(c, id, LOOM_ENOTSUP,
                  json_pack("{s:s}", "msg", "the job's spec has no feed: section"), NULL, 0);
      return 0;
    }
    if (!c->task) return LOOM_EPROTO;
    co->state_dirty = true; /* state.json carries the feed's progress */
    return feed_dispatch_msg(co->feed, c, c->task->name, m);
  }
  switch (m->type) {
  case WIRE_METRIC:
    /* libloom's own (loom/...: the time_*_pct shares) apart from the program's */
    return coord_on_metric(co, c->task, &m->u.metric,
                           strncmp(m->u.metric.tag, "loom/", 5) ? "user" : "loom");
  case WIRE_KV_SET: {
    const wire_kv_set *x = &m->u.kv_set;
    coord_reply(c, x->id, coord_kv_store(co, x->key, m->blob, m->blob_len), NULL, NULL, 0);
    return 0;
  }
  case WIRE_KV_GET: {
    const char *k = m->u.kv_get.key;
    json_int_t id = m->u.kv_get.id;
    kv_entry *e = coord_kv_find(co, k);
    if (e) {
      coord_reply(c, id, 0, NULL, e->val, e->len);
      return 0;
    }
    json_int_t tmo = m->u.kv_get.timeout_ms;
    if (tmo == 0) {
      coord_reply(c, id, LOOM_ETIMEDOUT, NULL, NULL, 0);
      return 0;
    }
    kv_wait *w = calloc(1, sizeof *w);
    if (!w || !(w->key = strdup(k))) {
      free(w);
      coord_reply(c, id, LOOM_ENOMEM, NULL, NULL, 0);
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
    const char *k = m->u.kv_add.key;
    json_int_t id = m->u.kv_add.id;
    kv_entry *e = coord_kv_find(co, k);
    long long cur = 0;
    if (e && loom__parse_int((const char *)e->val, LLONG_MIN, LLONG_MAX, &cur) < 0) {
      coord_reply(c, id, LOOM_EINVAL, NULL, NULL, 0);
      return 0;
    }
    long long v = cur + (long long)m->u.kv_add.delta;
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%lld", v);
    int rc = coord_kv_store(co, k, buf, (size_t)n);
    coord_reply(c, id, rc, json_pack("{s:I}", "value", (json_int_t)v), NULL, 0);
    return 0;
  }
  case WIRE_EVENT: {
    const wire_event *x = &m->u.event;
    json_t *extra = json_object();
    if (x->detail) json_object_update(extra, x->detail);
    json_object_set_new(extra, "source", json_string("user"));
    task *t = c->task;
    coord_event(co, t, x->name, extra);
    coord_reply(c, x->id, 0, NULL, NULL, 0);
    return 0;
  }
  case WIRE_HEARTBEAT:
    return 0;
  }
  return LOOM_EPROTO;
}
