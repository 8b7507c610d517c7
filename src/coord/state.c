/* state.c: state.json and events.jsonl: every state change of a task is an event,
 * and the state file is rewritten atomically.
 *
 * How it scales with the number of tasks n: an event is one line appended
 * (O(1)); the lines of one turn of the event loop reach the file in one
 * write, before the loop waits again (and before any state.json is
 * written, so a reader never sees a state the events do not explain yet).
 * state.json is rewritten at most four times a second, whatever the number
 * of changes, and each rewrite renders again only the tasks that changed
 * since the last one (each task's entry is kept, rendered, between
 * rewrites): O(changed) JSON work plus O(n) bytes copied and written. The
 * periodic rewrites are also spaced at least ten times their own duration
 * apart, so they never take more than a tenth of the coordinator's time,
 * and a step (a registration, an exit) costs O(1) amortized whatever n is,
 * not O(n). */
#include "coord/coord_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

static json_t *task_json(const task *t);
static int task_render(task *t);
static int state_render(coord *co, loom__buf *b);

/* ---- events and state ----------------------------------------------------- */
void coord_event(coord *co, task *t, const char *name, json_t *extra) {
  coord_event_log(co, t, name, extra);
  if (t) t->sj_stale = true;
  co->state_dirty = true;
}

void coord_event_log(coord *co, task *t, const char *name, json_t *extra) {
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
      co->events_pending = true;
      free(s);
    }
  }
  json_decref(e);
}

/* The loop's prepare handle: the events of this turn reach the file in one
 * write before the loop waits for more. */
void coord_events_flush(uv_prepare_t *h) {
  coord *co = h->data;
  if (co->events_pending && co->events) fflush(co->events);
  co->events_pending = false;
}

void coord_task_touch(coord *co, task *t) {
  t->sj_stale = true;
  co->state_dirty = true;
}

static json_t *task_json(const task *t) {
  json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:i}", "task", t->name, "role", t->role->name,
                        "index", t->index, "state", TSTATE[t->state], "attempt", t->attempt);
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
      json_object_set_new(j, "signal_name",
                          json_string(sigabbrev_np(t->sig) ? sigabbrev_np(t->sig) : "?"));
    }
  }
  if (t->reason[0]) json_object_set_new(j, "reason", json_string(t->reason));
  if (t->metrics_dropped)
    json_object_set_new(j, "metrics_dropped", json_integer((json_int_t)t->metrics_dropped));
  if (t->t_launch > 0) json_object_set_new(j, "launched", json_real(t->t_launch));
  if (t->t_start > 0) json_object_set_new(j, "started", json_real(t->t_start));
  if (t->t_end > 0) json_object_set_new(j, "finished", json_real(t->t_end));
  return j;
}

/* Renders t's entry again: one line of JSON. */
static int task_render(task *t) {
  json_t *j = task_json(t);
  char *s = j ? json_dumps(j, 0) : NULL;
  json_decref(j);
  if (!s) return LOOM_ENOMEM;
  free(t->sj);
  t->sj = s;
  t->sj_len = strlen(s);
  t->sj_stale = false;
  return 0;
}

/* state.json into b: the job's fields (rendered whole: a few), then the
 * tasks' entries, each rendered again only when it changed. */
static int state_render(coord *co, loom__buf *b) {
  static const char *const OUT[] = {"running", "succeeded", "failed", "killed", "failed"};
  json_t *j = json_object();
  json_object_set_new(j, "job", json_string(co->o->job_id));
  json_object_set_new(j, "name", json_string(co->s->name));
  json_object_set_new(j, "backend", json_string(co->be ? co->be->ops->name : ""));
  json_object_set_new(j, "state",
                      json_string(co->jstate == J_DONE ? OUT[co->outcome] : JSTATE[co->jstate]));
  json_object_set_new(j, "attempt", json_integer(co->attempt));
  json_object_set_new(j, "retries", json_integer(co->s->retries));
  json_object_set_new(j, "started", json_real(co->t_start));
  json_object_set_new(j, "coordinator",
                      json_pack("{s:i, s:s}", "pid", (int)getpid(), "addr", co->addr));
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
  if (co->dashboard_fp[0])
    json_object_set_new(j, "dashboard_fingerprint", json_string(co->dashboard_fp));
  if (co->tensorboard[0]) json_object_set_new(j, "tensorboard", json_string(co->tensorboard));
  char *s = json_dumps(j, JSON_INDENT(1));
  json_decref(j);
  if (!s) return LOOM_ENOMEM;
  /* the object without its closing brace, then "tasks" */
  size_t n = strlen(s);
  while (n && s[n - 1] != '}') n--;
  if (n) n--;
  while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) n--;
  int rc = n ? loom__buf_add(b, s, n) : LOOM_EPROTO;
  free(s);
  if (rc == 0) rc = loom__buf_printf(b, ",\n \"tasks\": [");
  for (int i = 0; rc == 0 && i < co->ntasks; i++) {
    task *t = &co->tasks[i];
#ifndef NDEBUG
    /* every change to a task must have marked it: check that the kept
     * entry is what rendering it now gives */
    if (!t->sj_stale && t->sj) {
      char *kept = t->sj;
      t->sj = NULL;
      if (task_render(t) == 0 && strcmp(kept, t->sj)) {
        fprintf(stderr,
                "loom: state.json entry of %s changed without being marked:\n"
                "  kept: %s\n  now:  %s\n",
                t->name, kept, t->sj);
        abort();
      }
      free(kept);
    }
#endif
    if ((t->sj_stale || !t->sj) && (rc = task_render(t)) < 0) break;
    rc = loom__buf_add(b, i ? ",\n  " : "\n  ", i ? 4 : 3);
    if (rc == 0) rc = loom__buf_add(b, t->sj, t->sj_len);
  }
  if (rc == 0) rc = loom__buf_printf(b, "%s]\n}", co->ntasks ? "\n " : "");
  return rc;
}

void coord_state_write(coord *co) {
  /* the events that led here are in events.jsonl before the state is */
  if (co->events_pending && co->events) fflush(co->events);
  co->events_pending = false;
  uint64_t t0 = loom__now_ms();
  loom__buf b;
  /* an entry is at most a few KiB (host, reason and pids are capped) */
  loom__buf_init(&b, ((size_t)co->ntasks + 64) * 16384);
  int rc = state_render(co, &b);
  char *path = rc == 0 ? jobdir_apath(co->o->job_dir, JOBDIR_STATE) : NULL;
  if (rc < 0)
    loom__log(LOOM_LOG_WARN, "coord", "cannot render state.json: %s", loom_strerror(rc));
  else if (path && loom__write_atomic(path, b.p, b.len, 0600, co->jstate == J_DONE) < 0)
    loom__log(LOOM_LOG_WARN, "coord", "cannot write %s: %s", path, strerror(errno));
  free(path);
  loom__buf_free(&b);
  co->state_dirty = false;
  uint64_t took = loom__now_ms() - t0;
  co->state_next_ms = loom__now_ms() + 10 * took;
}

void coord_state_free(coord *co) {
  for (int i = 0; co->tasks && i < co->ntasks; i++) {
    free(co->tasks[i].sj);
    co->tasks[i].sj = NULL;
  }
}

void coord_flush_tick(uv_timer_t *tm) {
  coord *co = tm->data;
  if (co->feed) feed_dispatch_tick(co->feed, loom__now_ms());
  if (co->state_dirty && loom__now_ms() >= co->state_next_ms) coord_state_write(co);
  if (co->o->status_line) coord_status_draw(co);
}

void coord_task_set(coord *co, task *t, int st) {
  co->nawaited += (st == T_LAUNCHED) - (t->state == T_LAUNCHED);
  if (!t->role->service) co->nunfinished += (st != T_SUCCEEDED) - (t->state != T_SUCCEEDED);
  t->state = st;
  t->sj_stale = true;
  co->state_dirty = true;
  if (co->feed && st >= T_SUCCEEDED) feed_dispatch_task_gone(co->feed, t->name);
}

bool coord_terminal(const task *t) { return t->state >= T_SUCCEEDED; }
