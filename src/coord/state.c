/* state.c: state.json and events.jsonl: every state change of a task is an event,
 * and the state file is rewritten atomically at most four times a second. */
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

static json_t *task_json(const task *t);

/* ---- events and state ----------------------------------------------------- */
void coord_event(coord *co, task *t, const char *name, json_t *extra) {
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


void coord_state_write(coord *co) {
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
  char *path = jobdir_apath(co->o->job_dir, JOBDIR_STATE);
  if (path && loom__write_atomic(path, s, strlen(s), 0600, co->jstate == J_DONE) < 0)
    loom__log(LOOM_LOG_WARN, "coord", "cannot write %s: %s", path, strerror(errno));
  free(path);
  free(s);
  co->state_dirty = false;
}


void coord_flush_tick(uv_timer_t *tm) {
  coord *co = tm->data;
  if (co->feed) feed_dispatch_tick(co->feed, loom__now_ms());
  if (co->state_dirty) coord_state_write(co);
  if (co->o->status_line) coord_status_draw(co);
}


void coord_task_set(coord *co, task *t, int st) {
  t->state = st;
  co->state_dirty = true;
  if (co->feed && st >= T_SUCCEEDED) feed_dispatch_task_gone(co->feed, t->name);
}


bool coord_terminal(const task *t) { return t->state >= T_SUCCEEDED; }
