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
static const char *kv_key(wire_frame *f);

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
  json_t *j = json_pack("{s:I, s:i}", "id", id, "rc", rc);
  if (extra) {
    json_object_update(j, extra);
    json_decref(extra);
  }
  coord_conn_send(c, WIRE_REPLY, j, blob, len);
}


void coord_feed_reply(void *c, json_int_t id, int rc, json_t *extra, const void *blob,
                       size_t len) {
  coord_reply((conn *)c, id, rc, extra, blob, len);
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


static const char *kv_key(wire_frame *f) {
  const char *k = json_string_value(json_object_get(f->json, "key"));
  if (!k || !*k || strlen(k) > LOOM_KV_MAX_KEY) return NULL;
  return k;
}


/* A metric from a task (libloom) or about it (its agent's CPU and memory
 * reports): one "metric" event in events.jsonl, which the dashboard reads. */
int coord_on_metric(coord *co, task *t, wire_frame *f, const char *source) {
  const char *tag = json_string_value(json_object_get(f->json, "tag"));
  json_t *step = json_object_get(f->json, "step"), *val = json_object_get(f->json, "value");
  if (!tag || !*tag || strlen(tag) > 128 || !json_is_integer(step) || !json_is_number(val))
    return LOOM_EPROTO;
  coord_event(co, t, "metric", json_pack("{s:s, s:O, s:O, s:s}", "tag", tag, "step", step, "value",
                                   val, "source", source));
  return 0;
}


int coord_on_client(coord *co, conn *c, wire_frame *f) {
  json_int_t id = json_integer_value(json_object_get(f->json, "id"));
  if (f->type == WIRE_METRIC) return coord_on_metric(co, c->task, f, "user");
  if (f->type >= WIRE_FEED_FIRST && f->type <= WIRE_FEED_LAST) {
    if (!co->feed) {
      coord_reply(c, id, LOOM_ENOTSUP, json_pack("{s:s}", "msg", "the job's spec has no feed: section"),
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
    coord_reply(c, id, coord_kv_store(co, k, f->blob, f->blob_len), NULL, NULL, 0);
    return 0;
  }
  case WIRE_KV_GET: {
    const char *k = kv_key(f);
    if (!k) return LOOM_EPROTO;
    kv_entry *e = coord_kv_find(co, k);
    if (e) {
      coord_reply(c, id, 0, NULL, e->val, e->len);
      return 0;
    }
    json_int_t tmo = json_integer_value(json_object_get(f->json, "timeout_ms"));
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
    const char *k = kv_key(f);
    json_t *d = json_object_get(f->json, "delta");
    if (!k || !json_is_integer(d)) return LOOM_EPROTO;
    kv_entry *e = coord_kv_find(co, k);
    long long cur = 0;
    if (e && loom__parse_int((const char *)e->val, LLONG_MIN, LLONG_MAX, &cur) < 0) {
      coord_reply(c, id, LOOM_EINVAL, NULL, NULL, 0);
      return 0;
    }
    long long v = cur + (long long)json_integer_value(d);
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%lld", v);
    int rc = coord_kv_store(co, k, buf, (size_t)n);
    coord_reply(c, id, rc, json_pack("{s:I}", "value", (json_int_t)v), NULL, 0);
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
    coord_event(co, t, name, extra);
    coord_reply(c, id, 0, NULL, NULL, 0);
    return 0;
  }
  case WIRE_HEARTBEAT:
    return 0;
  }
  return LOOM_EPROTO;
}
