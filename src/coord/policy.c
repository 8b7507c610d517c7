/* policy.c: the restart policy: what a task's exit means (succeeded, failed,
 * lost), whether it is restarted alone, relaunched, or fails the attempt. */
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

static task *task_of_relaunch_timer(uv_timer_t *tm);
static void relaunch_due(uv_timer_t *tm);

/* A task's processes ended (or its agent is lost). Success may end the
 * job; a failure is handled by the restart policy: with `restart: task`
 * the task alone restarts (up to max_restarts, for exit codes in
 * retry_on and deaths by signal), otherwise the attempt stops. */
void coord_task_exited(coord *co, task *t, int code, int sig, const char *reason, bool lost) {
  if (coord_terminal(t)) return;
  coord_metrics_dropped(co, t, true); /* before the exit's events */
  if (lost) coord_kill_task_groups(co, t);
  /* a lost task of a launch whose tasks stand or fall together (a Spark
   * barrier stage: Spark relaunches it whole) makes every agent registered
   * so far stale: the next attempt waits for the next launch */
  if (lost && co->be->ops->agents_any_attempt && t->fence >= 0 && co->fence >= co->fence_floor) {
    co->fence_floor = co->fence + 1;
    coord_event(co, t, "launch_stale",
                json_pack("{s:I, s:I, s:s}", "fence", (json_int_t)t->fence, "floor",
                          (json_int_t)co->fence_floor, "reason", reason ? reason : "lost"));
  }
  t->have_exit = !lost;
  t->exit_code = code;
  t->sig = sig;
  t->t_end = loom__wall();
  if (reason) loom__strlcpy(t->reason, reason, sizeof t->reason);
  bool ok = !lost && code == 0 && sig == 0;
  json_t *ex = lost ? json_object() : json_pack("{s:i}", "exit_code", code);
  if (sig) {
    json_object_set_new(ex, "signal", json_integer(sig));
    json_object_set_new(ex, "signal_name",
                        json_string(sigabbrev_np(sig) ? sigabbrev_np(sig) : "?"));
  }
  if (reason) json_object_set_new(ex, "reason", json_string(reason));
  json_object_set_new(ex, "elapsed_s", json_real(t->t_start > 0 ? t->t_end - t->t_start : 0));
  if (co->jstate == J_STOPPING || co->jstate == J_DONE) {
    coord_task_set(co, t, ok ? T_SUCCEEDED : T_STOPPED);
    coord_event(co, t, ok ? "succeeded" : "stopped", ex);
    return;
  }
  coord_task_set(co, t, ok ? T_SUCCEEDED : lost ? T_LOST : T_FAILED);
  coord_event(co, t, ok ? "succeeded" : lost ? "lost" : "failed", ex);
  if (ok) {
    if (co->jstate == J_RUNNING && coord_all_finishing_done(co)) {
      coord_event(co, NULL, "finishing_roles_done", NULL);
      coord_begin_stop(co, O_SUCCESS, (uint64_t)loom__tun(LOOM_TUN_SERVICE_GRACE_MS));
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
  bool can_restart = retryable && co->jstate == J_RUNNING &&
                     !strcmp(spec_role_restart(co->s, t->role), "task") &&
                     t->restarts < co->s->max_restarts;
  if (co->jstate == J_RUNNING && t->role->elastic_min > 0 && retryable &&
      coord_live_members(co, t->role, t) >= t->role->elastic_min) {
    /* elastic: the survivors go on in a new generation without it */
    t->left = true;
    co->generation++;
    int world = coord_publish_membership(co);
    coord_say(co, "%s %s: %d %s left; membership generation %lld, world size %d", t->name, why,
              coord_live_members(co, t->role, NULL), t->role->name, (long long)co->generation,
              world);
    coord_event(co, t, "membership_changed",
                json_pack("{s:I, s:i, s:s, s:s}", "generation", (json_int_t)co->generation,
                          "world_size", world, "left", t->name, "reason", why));
    if (can_restart) {
      t->restart_pending = true;
      coord_event(co, t, "restarting",
                  json_pack("{s:s, s:i, s:i}", "reason", why, "restart", t->restarts + 1,
                            "max_restarts", co->s->max_restarts));
      coord_maybe_restart(co, t);
    } else if (coord_all_finishing_done(co)) {
      coord_event(co, NULL, "finishing_roles_done", NULL);
      coord_begin_stop(co, O_SUCCESS, (uint64_t)loom__tun(LOOM_TUN_SERVICE_GRACE_MS));
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
    coord_say(co, "%s %s: restarting it (%d of %d)", t->name, why, t->restarts + 1,
              co->s->max_restarts);
    coord_event(co, t, "restarting",
                json_pack("{s:s, s:i, s:i}", "reason", why, "restart", t->restarts + 1,
                          "max_restarts", co->s->max_restarts));
    coord_maybe_restart(co, t);
    return;
  }
  coord_attempt_fail(co, t, why);
}

/* Restarts a failed task once its old agent is gone (restart: task). */
void coord_maybe_restart(coord *co, task *t) {
  if (!t->restart_pending || t->agent || t->agent_running) return;
  t->restart_pending = false;
  if (co->jstate != J_RUNNING) return;
  t->restarts++;
  t->attempt++;
  /* the restarted task asks for its old port, so peers that keep the
   * address they were given (TensorFlow's cluster spec) find it again */
  int port = t->port;
  coord_task_reset(co, t);
  t->prev_port = port;
  coord_launch_task(co, t);
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
  coord_launch_task(co, t);
}

/* The launcher of t exited with a failure before t's agent registered
 * (a Slurm step launch refused, say): nothing of the task's command has
 * run, so on a backend whose launches can fail transiently the task is
 * launched again after a pause, LOOM_LAUNCH_RETRIES times at most. Returns
 * true when a relaunch is scheduled. A task that registered is never
 * relaunched here: its end is the task's own, and the restart policy
 * decides. */
bool coord_maybe_relaunch(coord *co, task *t, int64_t status, int sig, const char *detail,
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
  if (sig)
    json_object_set_new(ex, "signal", json_integer(sig));
  else
    json_object_set_new(ex, "exit_code", json_integer((json_int_t)status));
  if (detail) json_object_set_new(ex, "reason", json_string(detail));
  coord_event(co, t, "launch_retry", ex);
  char msg[1600];
  snprintf(msg, sizeof msg,
           "%s: its launch failed before the agent registered (%s%s%s); "
           "launching it again in %.1fs (retry %d of %lld)",
           t->name, how, detail ? ": " : "", detail ? detail : "", (double)delay / 1000.0,
           t->launch_tries, max);
  /* on the console when attached; otherwise a warning in the coordinator's
   * log (coordinator.log under Slurm), where a person looks for it */
  if (co->o->console)
    coord_say(co, "%s", msg);
  else
    loom__log(LOOM_LOG_WARN, "coord", "%s", msg);
  t->relaunch_pending = true;
  uv_timer_start(&t->relaunch_timer, relaunch_due, delay, 0);
  return true;
}
