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
#include "coord/coord_int.h"
#include "fs/fs.h"

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

static void stop_tasks(coord *co, bool services_only, bool ending, uint64_t grace_ms);
static void stop_expired(uv_timer_t *tm);
static void rdv_expired(uv_timer_t *tm);
static char **make_env(coord *co, task *t);
static void free_env(char **env);
static void attempt_start(coord *co);
static void finish(coord *co);
static void agent_exited(void *arg, int id, int64_t status, int sig, const char *detail, bool lost);
static void on_signal(uv_signal_t *h, int signum);
static void hb_tick(uv_timer_t *tm);
static void close_walk(uv_handle_t *h, void *arg);

bool coord_all_finishing_done(coord *co) {
  /* O(1) but for elastic jobs, where a task that left is not waited for:
   * called at every exit, a scan would make a job's end O(N^2) */
  if (!co->any_elastic) return co->nunfinished == 0;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (t->left && !t->restart_pending && t->state != T_RUNNING) continue;
    if (!t->role->service && t->state != T_SUCCEEDED) return false;
  }
  return true;
}

static void stop_tasks(coord *co, bool services_only, bool ending, uint64_t grace_ms) {
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (coord_terminal(t) || (services_only && !t->role->service)) continue;
    if (t->agent) {
      coord_conn_send_msg(t->agent,
                          &(wire_msg){.type = WIRE_STOP,
                                      .u.stop = {.grace_ms = (int64_t)grace_ms, .ending = ending}});
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
      coord_conn_close(t->agent, "its task did not stop in time");
  }
}

void coord_abort_clients(coord *co, const char *why) {
  for (conn *c = co->conns; c; c = c->next)
    if (c->kind == C_CLIENT)
      coord_conn_send_msg(c, &(wire_msg){.type = WIRE_ABORT, .u.abort.reason = why});
}

void coord_begin_stop(coord *co, int outcome, uint64_t grace_ms) {
  co->jstate = J_STOPPING;
  co->over_scan = 0;
  co->outcome = outcome;
  uv_timer_stop(&co->rdv_timer);
  /* a success or a kill ends the job (a failure may start another
   * attempt): the agents learn it, so that where the cluster manager ends
   * the job too (scancel signals the coordinator first) the node-local
   * copies go with the last agent of each node (agent/nodecopy.c) */
  stop_tasks(co, outcome == O_SUCCESS, outcome == O_SUCCESS || outcome == O_KILLED, grace_ms);
  uv_timer_start(&co->stop_timer, stop_expired, grace_ms + 2000, 0);
  co->state_dirty = true;
}

/* The first failure of an attempt decides its fate: stop every other task
 * now (SIGTERM through the agents, SIGKILL after the grace period). */
void coord_attempt_fail(coord *co, task *t, const char *why) {
  if (co->jstate == J_STOPPING || co->jstate == J_DONE) return;
  co->root = t ? t->id : -1;
  loom__strlcpy(co->root_msg, why, sizeof co->root_msg);
  coord_event(co, t, "attempt_failed", json_pack("{s:s}", "reason", why));
  coord_say(co, "%s%s%s", t ? t->name : "", t ? ": " : "", why);
  coord_abort_clients(co, why);
  coord_begin_stop(co, O_FAILED, (uint64_t)loom__tun(LOOM_TUN_STOP_GRACE_MS));
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
  snprintf(why, sizeof why,
           "rendezvous timed out after %.1fs: %d of %d tasks missing: %s. "
           "Raise LOOM_RENDEZVOUS_TIMEOUT (ms) if tasks need longer to start",
           (double)loom__tun(LOOM_TUN_RENDEZVOUS_TIMEOUT_MS) / 1000.0, missing, co->ntasks,
           b.p ? b.p : "");
  loom__buf_free(&b);
  coord_event(co, NULL, "rendezvous_timeout", json_pack("{s:i}", "missing", missing));
  co->root = first ? first->id : -1;
  coord_attempt_fail(co, NULL, why);
  co->root = first ? first->id : -1;
}

static char **make_env(coord *co, task *t) {
  static const char *const strip[] = {"LOOM_COORD=",   "LOOM_SECRET=",    "LOOM_TASK=",
                                      "LOOM_ATTEMPT=", "LOOM_JOB_ID=",    "LOOM_JOB_DIR=",
                                      "LOOM_HOST=",    "LOOM_PREV_PORT=", NULL};
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
  if (t->prev_port) env[k++] = loom__asprintf("LOOM_PREV_PORT=%d", t->prev_port);
  return env;
}

static void free_env(char **env) {
  for (int i = 0; env && env[i]; i++) free(env[i]);
  free(env);
}

/* Starts task t's agent through the backend. On failure the task is lost
 * and the attempt fails (a backend error: no retry). */
int coord_launch_task(coord *co, task *t) {
  char *argv[] = {co->agent_exe, "agent", NULL};
  char **env = make_env(co, t);
  char err[400] = "";
  int rc = env ? co->be->ops->launch(co->be, t->id, argv, env, err, sizeof err) : LOOM_ENOMEM;
  free_env(env);
  t->t_launch = loom__wall();
  if (rc < 0) {
    snprintf(t->reason, sizeof t->reason, "never started: %s", err[0] ? err : loom_strerror(rc));
    coord_task_set(co, t, T_LOST);
    coord_event(co, t, "launch_failed", json_pack("{s:s}", "reason", t->reason));
    coord_attempt_fail(co, t, t->reason);
    co->outcome = O_INFRA;
    return rc;
  }
  t->agent_running = co->be->ops->tracks_processes;
  coord_task_set(co, t, T_LAUNCHED);
  coord_event(co, t, "launched", NULL);
  /* an agent waits for this launch already: it takes it once this call's
   * caller is done */
  if (t->parked) uv_timer_start(&co->unpark_timer, coord_unpark_tick, 0, 0);
  return 0;
}

void coord_task_reset(coord *co, task *t) {
  coord_task_set(co, t, T_PENDING);
  t->fence = -1;
  t->launch_tries = 0;
  t->relaunch_pending = false;
  t->cluster_pending = false;
  t->loss_pending_ms = 0;
  uv_timer_stop(&t->relaunch_timer);
  t->host[0] = 0;
  t->port = t->agent_pid = 0;
  t->have_exit = false;
  t->exit_code = t->sig = 0;
  t->reason[0] = 0;
  t->t_start = t->t_end = 0;
  if (t->pids) json_decref(t->pids);
  t->pids = NULL;
  coord_ring_clear(t);
  coord_open_logs(co, t);
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
  coord_kv_clear(co);
  if (co->feed) feed_dispatch_new_attempt(co->feed);
  coord_event(co, NULL, "attempt_started", json_pack("{s:i}", "tasks", co->ntasks));
  bool first = co->attempt == co->o->first_attempt;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    /* LOOM_ATTEMPT counts every start of this task: job retries and task
     * restarts alike */
    t->attempt = first ? co->attempt : t->attempt + 1;
    t->restarts = 0;
    t->restart_pending = false;
    t->left = false;
    t->prev_port = 0;
    coord_task_reset(co, t);
  }
  for (int i = 0; i < co->ntasks && co->jstate == J_RENDEZVOUS; i++)
    if (coord_launch_task(co, &co->tasks[i]) < 0) break;
  if (co->jstate == J_RENDEZVOUS)
    uv_timer_start(&co->rdv_timer, rdv_expired, (uint64_t)loom__tun(LOOM_TUN_RENDEZVOUS_TIMEOUT_MS),
                   0);
  coord_state_write(co);
}

static void finish(coord *co) {
  co->jstate = J_DONE;
  uv_timer_stop(&co->rdv_timer);
  uv_timer_stop(&co->stop_timer);
  /* staged files go before the job is reported over: `loom run` returns
   * then, and nothing of the job may outlive it */
  if (co->be->ops->unstage_files) co->be->ops->unstage_files(co->be);
  co->exit_status = co->outcome == O_SUCCESS  ? LOOM_EXIT_OK
                    : co->outcome == O_KILLED ? LOOM_EXIT_INTR
                    : co->outcome == O_INFRA  ? LOOM_EXIT_INFRA
                                              : LOOM_EXIT_FAILED;
  coord_event(co, NULL, "job_finished",
              json_pack("{s:s, s:i, s:f}", "outcome",
                        co->outcome == O_SUCCESS  ? "succeeded"
                        : co->outcome == O_KILLED ? "killed"
                                                  : "failed",
                        "exit_status", co->exit_status, "elapsed_s", loom__wall() - co->t_start));
  coord_state_write(co);
  coord_print_summary(co);
  uv_stop(&co->loop);
}

/* Whether the attempt that is stopping will be followed by another. */
bool coord_will_retry(const coord *co) {
  return co->outcome == O_FAILED && co->attempt - co->o->first_attempt < co->s->retries &&
         co->interrupts == 0 && !co->no_retry;
}

/* Called whenever something ends: once the attempt is stopping and every
 * agent is gone, retry or finish. */
void coord_check_over(coord *co) {
  if (co->jstate != J_STOPPING) return;
  /* Called at every agent gone: resume where the last call found one
   * still there (while stopping no agent starts again), and decide only on
   * a scan from the start, so that stopping N tasks is O(N), not O(N^2). */
  for (; co->over_scan < co->ntasks; co->over_scan++) {
    task *t = &co->tasks[co->over_scan];
    if (t->agent_running || t->agent) return;
  }
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (t->agent_running || t->agent) {
      co->over_scan = i;
      return;
    }
  }
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (!coord_terminal(t)) {
      t->t_end = loom__wall();
      coord_task_set(co, t, T_STOPPED);
    }
  }
  uv_timer_stop(&co->stop_timer);
  for (conn *c = co->conns, *n; c; c = n) {
    n = c->next;
    if (c->kind == C_CLIENT) coord_conn_close(c, NULL);
  }
  coord_kv_drop_waiters(co, NULL);
  coord_event(co, NULL, "attempt_finished", NULL);
  if (coord_will_retry(co)) {
    coord_say(co, "attempt %d failed: %s%s%s", co->attempt + 1,
              co->root >= 0 ? co->tasks[co->root].name : "", co->root >= 0 ? ": " : "",
              co->root_msg);
    co->attempt++;
    coord_say(co, "retrying the job: attempt %d of %d", co->attempt + 1, co->s->retries + 1);
    coord_event(co, NULL, "retrying", NULL);
    attempt_start(co);
    return;
  }
  finish(co);
}

static void agent_exited(void *arg, int id, int64_t status, int sig, const char *detail,
                         bool lost) {
  coord *co = arg;
  task *t = &co->tasks[id];
  t->agent_running = false;
  t->loss_pending_ms = 0;
  /* the cluster manager says the task's place is gone while its agent is
   * still connected (a lost node whose processes live on): drop it, which
   * stops its task and handles it as lost */
  if (lost && t->agent) {
    coord_conn_close(t->agent, detail ? detail : "its container is gone");
    coord_check_over(co);
    return;
  }
  /* libuv may reap an agent before we have read what it wrote last (its
   * EXIT): while its connection is open, its end of file decides. */
  if (!coord_terminal(t) && !t->agent) {
    char how[96];
    snprintf(how, sizeof how, "%s %s %d",
             co->be->ops->launcher ? co->be->ops->launcher : "the agent",
             sig ? "was killed by signal" : "exited with status", sig ? sig : (int)status);
    if (co->jstate == J_STOPPING) {
      coord_task_set(co, t, T_STOPPED);
      t->t_end = loom__wall();
      coord_event(co, t, "stopped", NULL);
    } else if ((status != 0 || sig != 0) && coord_maybe_relaunch(co, t, status, sig, detail, how)) {
      /* launched again by relaunch_due */
    } else {
      char why[1600];
      if (t->state == T_LAUNCHED && t->launch_tries > 0)
        snprintf(why, sizeof why,
                 "never started: %s before the agent registered, on each of "
                 "%d launches%s%s",
                 how, t->launch_tries + 1, detail ? ": " : "", detail ? detail : "");
      else if (t->state == T_LAUNCHED)
        snprintf(why, sizeof why, "never started: %s before the agent registered%s%s", how,
                 detail ? ": " : "", detail ? detail : "");
      else
        snprintf(why, sizeof why, "agent lost: %s before the task ended%s%s", how,
                 detail ? ": " : "", detail ? detail : "");
      coord_task_exited(co, t, -1, 0, why, true);
    }
  }
  coord_maybe_restart(co, t);
  coord_check_over(co);
}

static void on_signal(uv_signal_t *h, int signum) {
  coord *co = h->data;
  co->interrupts++;
  if (co->interrupts == 1) {
    snprintf(co->root_msg, sizeof co->root_msg, "interrupted by SIG%s", sigabbrev_np(signum));
    coord_say(co, "%s: stopping the job (again to kill at once)", co->root_msg);
    coord_event(co, NULL, "interrupted", json_pack("{s:i}", "signal", signum));
    coord_abort_clients(co, co->root_msg);
    if (co->jstate != J_DONE)
      coord_begin_stop(co, O_KILLED, (uint64_t)loom__tun(LOOM_TUN_STOP_GRACE_MS));
    co->outcome = O_KILLED;
    coord_check_over(co);
  } else {
    co->outcome = O_KILLED;
    stop_expired(&co->stop_timer);
  }
}

uint64_t coord_hb_timeout_ms(const coord *co) {
  return co->s->heartbeat_timeout_ms > 0 ? (uint64_t)co->s->heartbeat_timeout_ms
                                         : (uint64_t)loom__tun(LOOM_TUN_HEARTBEAT_TIMEOUT_MS);
}

/* Heartbeats both ways; an agent silent for the heartbeat timeout (hung,
 * stopped, its host gone) is declared lost and handled by the policy. */
static void hb_tick(uv_timer_t *tm) {
  coord *co = tm->data;
  uint64_t now = loom__now_ms(), limit = coord_hb_timeout_ms(co);
  loom__ratelog_tick(&co->rl_refused, "coord", "refused connections");
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (t->metrics_unsaid) coord_metrics_dropped(co, t, false);
    if (t->loss_pending_ms && now >= t->loss_pending_ms) {
      /* the backend never said how the agent ended: lost, as it was */
      t->loss_pending_ms = 0;
      if (!coord_terminal(t) && !t->agent) {
        coord_task_exited(co, t, -1, 0, t->loss_reason, true);
        coord_maybe_restart(co, t);
        coord_check_over(co);
      }
      continue;
    }
    if (t->parked) coord_conn_send_msg(t->parked, &(wire_msg){.type = WIRE_HEARTBEAT});
    conn *c = t->agent;
    if (!c) continue;
    if (c->last_rx && now - c->last_rx > limit && !coord_terminal(t)) {
      char why[160];
      snprintf(why, sizeof why, "lost: no heartbeat from its agent for %.1fs",
               (double)(now - c->last_rx) / 1000.0);
      co->be->ops->signal(co->be, t->id, SIGKILL);
      coord_task_exited(co, t, -1, 0, why, true);
      coord_conn_close(c, "no heartbeat in time");
      continue;
    }
    coord_conn_send_msg(c, &(wire_msg){.type = WIRE_HEARTBEAT});
  }
}

static void close_walk(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* ---- the coordinator's life, step by step ---------------------------------- */

/* events.jsonl and logs/all.log, open for appending. */
static int open_job_files(coord *co) {
  co->events = jobdir_fopen(co->o->job_dir, JOBDIR_EVENTS, true);
  if (co->events) setvbuf(co->events, NULL, _IOFBF, 1 << 16); /* flushed by events_prep */
  co->alllog = jobdir_fopen(co->o->job_dir, JOBDIR_ALL_LOG, true);
  if (co->alllog) setvbuf(co->alllog, NULL, _IOLBF, 0);
  if (!co->events || !co->alllog) {
    fprintf(stderr, "loom: cannot write the job directory %s: %s\n", co->o->job_dir,
            strerror(errno));
    return LOOM_EIO;
  }
  return 0;
}

/* A task's host, for the feed's locality. */
static const char *feed_host_of(void *ctx, const char *name) {
  task *t = coord_task_by_name(ctx, name);
  return t && t->host[0] ? t->host : NULL;
}

/* The data feed's coordinator side, when the spec has a feed; a bad feed
 * is the spec's error (exit 2). */
static int start_feed(coord *co) {
  if (!co->s->feed) return 0;
  char err[1024], sdir[4096];
  loom__strlcpy(sdir, co->s->path, sizeof sdir);
  char *slash = strrchr(sdir, '/');
  if (slash) *slash = 0;
  int rc = feed_dispatch_create(co->s->feed, co->o->job_dir, sdir, coord_feed_reply, &co->feed, err,
                                sizeof err);
  if (rc < 0) {
    fprintf(stderr, "loom: %s: %s\n", co->s->path, err);
    /* an input or output on a cluster that cannot be reached is not the
     * spec's fault */
    return rc == LOOM_ECONN || rc == LOOM_ETIMEDOUT ? LOOM_EBACKEND : LOOM_EINVAL;
  }
  feed_dispatch_set_hosts(co->feed, feed_host_of, co);
  return 0;
}

/* What the backend has to say (YARN's application, its containers). */
static void backend_noted(void *arg, int id, const char *event, json_t *detail, const char *say) {
  coord *co = arg;
  task *t = id >= 0 && id < co->ntasks ? &co->tasks[id] : NULL;
  const char *logs = t && detail ? json_string_value(json_object_get(detail, "logs")) : NULL;
  if (logs) loom__strlcpy(t->log_url, logs, sizeof t->log_url);
  const char *later = t && detail ? json_string_value(json_object_get(detail, "logs_later")) : NULL;
  if (logs) loom__strlcpy(t->log_later, later ? later : "", sizeof t->log_later);
  coord_event(co, t, event, detail);
  if (say) coord_say(co, "%s%s%s", t ? t->name : "", t ? ": " : "", say);
}

/* The backend, and where each task's CPUs and GPUs come from; ui_url
 * the dashboard without its token, or NULL, for the cluster manager. */
static int start_backend(coord *co, const char *ui_url) {
  const char *bname = co->o->backend ? co->o->backend : co->s->backend;
  if (backend_create(bname, co->s, &co->loop, co->ntasks, agent_exited, co, ui_url, &co->be) < 0) {
    fprintf(stderr, "loom: backend '%s' is not available\n", bname);
    return LOOM_EBACKEND;
  }
  co->be->on_note = backend_noted;
  /* the cluster manager's web proxy that shows the dashboard reads it
   * without the token (YARN's ResourceManager proxy) */
  const char *proxies[8];
  for (int i = 0; i < co->be->nui_proxies && i < 8; i++) proxies[i] = co->be->ui_proxies[i];
  if (co->http && co->be->nui_proxies &&
      http_allow_proxies(co->http, proxies, co->be->nui_proxies < 8 ? co->be->nui_proxies : 8) < 0)
    loom__log(LOOM_LOG_WARN, "coord", "the dashboard trusts no web proxy: a bad address");
  for (int i = 0; i < co->ntasks; i++)
    co->be->ops->place(co->be, i, co->tasks[i].role, co->tasks[i].cpus, sizeof co->tasks[i].cpus,
                       co->tasks[i].gpus, sizeof co->tasks[i].gpus);
  return 0;
}

/* The listening socket every agent, client and CLI connects to; its
 * address goes to coord.json. ip gets the bound address. */
static int start_listening(coord *co, char *ip, size_t iplen) {
  const coord_opts *o = co->o;
  uv_tcp_init(&co->loop, &co->server);
  co->server.data = co;
  struct sockaddr_storage sa;
  const char *bind = o->bind ? o->bind : "127.0.0.1";
  int rc = strchr(bind, ':') ? uv_ip6_addr(bind, 0, (struct sockaddr_in6 *)&sa)
                             : uv_ip4_addr(bind, 0, (struct sockaddr_in *)&sa);
  if (rc == 0) rc = uv_tcp_bind(&co->server, (struct sockaddr *)&sa, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&co->server, 4096, coord_on_connection);
  if (rc < 0) {
    fprintf(stderr, "loom: the coordinator cannot listen on %s: %s\n", bind, uv_strerror(rc));
    return rc;
  }
  int len = sizeof sa;
  uv_tcp_getsockname(&co->server, (struct sockaddr *)&sa, &len);
  int port;
  if (sa.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&sa, ip, iplen);
    port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
  } else {
    uv_ip4_name((struct sockaddr_in *)&sa, ip, iplen);
    port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
  }
  snprintf(co->addr, sizeof co->addr, "%s:%d", o->advertise ? o->advertise : ip, port);
  co->attempt = o->first_attempt;
  co->fence = -1;
  co->fence_floor = 0;
  json_t *cj = json_pack("{s:s, s:i}", "addr", co->addr, "pid", (int)getpid());
  char *cs = json_dumps(cj, JSON_COMPACT);
  json_decref(cj);
  if (cs) jobdir_write(o->job_dir, JOBDIR_COORD, cs, strlen(cs), false);
  free(cs);
  return 0;
}

/* The dashboard: the token is derived from the secret, so sharing the URL
 * does not give away the secret. No dashboard is no error. */
static void start_dashboard(coord *co, const char *bind, const char *ip) {
  const coord_opts *o = co->o;
  unsigned char mac[WIRE_MAC], nonce[WIRE_NONCE] = {0};
  char token[2 * WIRE_MAC + 1], err[1024];
  wire_mac(o->secret, "loom-ui", nonce, mac);
  loom__hex(mac, 16, token);
  int hport = 0;
  /* the address peers are told, not every interface */
  const char *hb = o->advertise ? o->advertise : bind;
  int rc = http_start(&co->loop, hb, o->job_dir, token, &co->http, &hport, err, sizeof err);
  if (rc == 0) {
    snprintf(co->dashboard, sizeof co->dashboard, "%s://%s:%d/?token=%s", http_scheme(co->http),
             o->advertise ? o->advertise : ip, hport, token);
    if (o->console) fprintf(stderr, "loom: dashboard %s\n", co->dashboard);
    const char *fp = http_fingerprint(co->http);
    if (fp) {
      /* to the console, or coordinator.log for a detached coordinator */
      loom__strlcpy(co->dashboard_fp, fp, sizeof co->dashboard_fp);
      fprintf(stderr, "loom: dashboard certificate SHA-256 fingerprint %s\n", fp);
    }
  } else if (loom__tun_str(LOOM_TUN_DASHBOARD_CERT)[0] ||
             loom__tun_str(LOOM_TUN_DASHBOARD_KEY)[0]) {
    /* asked for HTTPS and it cannot be had here: none rather than plain */
    loom__log(LOOM_LOG_WARN, "coord", "no dashboard: %s", err);
  } else {
    loom__log(LOOM_LOG_INFO, "coord", "no dashboard: %s", err);
  }
}

/* Timers (heartbeats, state flushes, relaunches) and signals. */
static void start_timers(coord *co) {
  uv_timer_init(&co->loop, &co->rdv_timer);
  uv_timer_init(&co->loop, &co->stop_timer);
  uv_timer_init(&co->loop, &co->hb_timer);
  uv_timer_init(&co->loop, &co->flush_timer);
  uv_timer_init(&co->loop, &co->unpark_timer);
  co->unpark_timer.data = co;
  uv_prepare_init(&co->loop, &co->events_prep);
  co->events_prep.data = co;
  uv_prepare_start(&co->events_prep, coord_events_flush);
  for (int i = 0; i < co->ntasks; i++) {
    uv_timer_init(&co->loop, &co->tasks[i].relaunch_timer);
    co->tasks[i].relaunch_timer.data = co;
  }
  co->rdv_timer.data = co->stop_timer.data = co->hb_timer.data = co->flush_timer.data = co;
  uv_timer_start(&co->hb_timer, hb_tick, (uint64_t)loom__tun(LOOM_TUN_HEARTBEAT_MS),
                 (uint64_t)loom__tun(LOOM_TUN_HEARTBEAT_MS));
  uv_timer_start(&co->flush_timer, coord_flush_tick, 250, 250);
  co->metric_rate = loom__tun(LOOM_TUN_METRIC_RATE);
  uv_signal_init(&co->loop, &co->sigint);
  uv_signal_init(&co->loop, &co->sigterm);
  uv_signal_init(&co->loop, &co->sighup);
  co->sigint.data = co->sigterm.data = co->sighup.data = co;
  uv_signal_start(&co->sigint, on_signal, SIGINT);
  uv_signal_start(&co->sigterm, on_signal, SIGTERM);
  uv_signal_start(&co->sighup, on_signal, SIGHUP);
  signal(SIGPIPE, SIG_IGN);
}

/* The spec's files and archives whose source is on HDFS, fetched into
 * the job directory (fetched/<n>-<name>), their sources then those copies:
 * for backends that do not localize them themselves. */
static int fetch_remote_files(coord *co, char *err, size_t errlen) {
  if (co->be->ops->localizes_remote_files) return 0;
  const spec_job *s = co->s;
  json_t *got = NULL;
  int rc = 0;
  for (int i = 0; i < s->nfiles + s->narchives && rc == 0; i++) {
    bool arch = i >= s->nfiles;
    spec_kv *kv = arch ? &s->archives[i - s->nfiles] : &s->files[i];
    if (!loom__fs_remote(kv->value)) continue;
    const char *base = strrchr(kv->value, '/');
    base = base && base[1] ? base + 1 : "source";
    char *dir = jobdir_apath(co->o->job_dir, JOBDIR_FETCHED);
    char *dst = dir ? loom__asprintf("%s/%d-%s", dir, i, base) : NULL;
    char why[1024] = "out of memory";
    rc = dst ? loom__fs_mkdirs(dir, why, sizeof why) : LOOM_ENOMEM;
    if (rc == 0) rc = loom__fs_get_tree(kv->value, dst, why, sizeof why);
    if (rc < 0) {
      snprintf(err, errlen, "%s.%s: cannot fetch %s: %s", arch ? "archives" : "files", kv->key,
               kv->value, why);
      free(dst);
    } else {
      if (!got) got = json_object();
      json_object_set_new(got, kv->key, json_string(kv->value));
      free(kv->value);
      kv->value = dst;
    }
    free(dir);
  }
  if (got) coord_event(co, NULL, "files_fetched", json_pack("{s:o}", "files", got));
  return rc;
}

/* Files the backend copies to the job's nodes; false when it could not
 * (the job is then finished, as a backend failure). */
static bool staging_failed(coord *co, const char *what, const char *err) {
  fprintf(stderr, "loom: cannot %s: %s\n", what, err);
  coord_event(co, NULL, "staging_failed", json_pack("{s:s}", "reason", err));
  co->outcome = O_INFRA;
  loom__strlcpy(co->root_msg, err, sizeof co->root_msg);
  finish(co);
  return false;
}

static bool stage_files(coord *co) {
  const coord_opts *o = co->o;
  char ferr[1400] = "";
  if (fetch_remote_files(co, ferr, sizeof ferr) < 0)
    return staging_failed(co, "fetch the job's files", ferr);
  if (co->be->ops->stage_files) {
    char err[512] = "";
    setenv("LOOM_JOB_DIR_STAGE", o->job_dir, 1);
    if (co->be->ops->stage_files(co->be, co->s, &co->staged_files, err, sizeof err) < 0)
      return staging_failed(co, "stage the job's files on its nodes", err);
    if (co->staged_files)
      coord_event(co, NULL, "files_staged", json_pack("{s:O}", "files", co->staged_files));
  }
  /* the binary every agent runs: one place decides it, the backend */
  loom__strlcpy(co->agent_exe, o->self_exe, sizeof co->agent_exe);
  if (co->be->ops->agent_exe) {
    char err[1400] = "";
    if (co->be->ops->agent_exe(co->be, o->self_exe, co->agent_exe, sizeof co->agent_exe, err,
                               sizeof err) < 0)
      return staging_failed(co, "make loom's executable reachable on the job's nodes", err);
  }
  return true;
}

/* Closes what the run opened, once the loop has stopped. */
static void free_coord(coord *co) {
  coord_kv_clear(co);
  for (int i = 0; co->tasks && i < co->ntasks; i++) {
    coord_ring_clear(&co->tasks[i]);
    coord_close_log(co, &co->tasks[i]);
    if (co->tasks[i].pids) json_decref(co->tasks[i].pids);
  }
  coord_state_free(co);
  free(co->tasks);
  free(co->task_hash);
  if (co->staged_files) json_decref(co->staged_files);
  if (co->feed) feed_dispatch_destroy(co->feed);
  if (co->events) fclose(co->events);
  if (co->alllog) fclose(co->alllog);
  free(co);
}

static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int coord_run(const coord_opts *o) {
  coord *co = calloc(1, sizeof *co);
  if (!co) return LOOM_EXIT_INFRA;
  co->o = o;
  co->s = o->spec;
  co->root = -1;
  co->t_start = loom__wall();
  int status = LOOM_EXIT_INFRA;
  char ip[INET6_ADDRSTRLEN] = "";
  raise_fd_limit();
  if (uv_loop_init(&co->loop) < 0) {
    free(co);
    return LOOM_EXIT_INFRA;
  }
  if (coord_setup_tasks(co) < 0 || open_job_files(co) < 0) goto out_loop;
  int frc = start_feed(co);
  if (frc < 0) {
    status = frc == LOOM_EBACKEND ? LOOM_EXIT_INFRA : LOOM_EXIT_USAGE;
    goto out_loop;
  }
  /* the dashboard first: the backend may give its URL to the cluster
   * manager (YARN's tracking URL, registered with the application) */
  const char *bind = o->bind ? o->bind : "127.0.0.1";
  start_dashboard(co, bind, bind);
  char ui_url[sizeof co->dashboard];
  loom__strlcpy(ui_url, co->dashboard, sizeof ui_url);
  char *tok = strchr(ui_url, '?');
  if (tok) *tok = 0; /* never the token: a cluster manager shows the URL to everyone */
  if (start_backend(co, ui_url[0] ? ui_url : NULL) < 0) {
    if (co->http) http_stop(co->http);
    goto out_loop;
  }
  if (start_listening(co, ip, sizeof ip) < 0) {
    if (co->http) http_stop(co->http);
    goto out_be;
  }
  start_timers(co);
  coord_event(co, NULL, "job_started",
              json_pack("{s:s, s:s, s:i}", "name", co->s->name, "coordinator", co->addr, "tasks",
                        co->ntasks));
  if (co->dashboard[0]) {
    json_t *d = json_pack("{s:s}", "url", co->dashboard);
    if (co->dashboard_fp[0]) json_object_set_new(d, "fingerprint", json_string(co->dashboard_fp));
    coord_event(co, NULL, "dashboard", d);
  }
  if (stage_files(co)) {
    attempt_start(co);
    uv_run(&co->loop, UV_RUN_DEFAULT);
  }
  status = co->jstate == J_DONE ? co->exit_status : LOOM_EXIT_INFRA;
  if (co->http) http_stop(co->http);
  if (co->be->ops->unstage_files) co->be->ops->unstage_files(co->be);
  for (conn *c = co->conns, *n; c; c = n) {
    n = c->next;
    coord_conn_close(c, NULL);
  }
  loom__ratelog_flush(&co->rl_refused, "coord", "refused connections");
  coord_kv_drop_waiters(co, NULL);
out_be:
  if (co->be->ops->finish) {
    /* the cause as the console's root cause says it, the task named (a
     * cluster manager shows it: YARN's diagnostics) */
    char cause[sizeof co->root_msg + 160];
    if (co->root >= 0 && co->outcome != O_SUCCESS && co->outcome != O_KILLED)
      snprintf(cause, sizeof cause, "%s (attempt %d) %s", co->tasks[co->root].name,
               co->tasks[co->root].attempt, co->root_msg);
    else
      loom__strlcpy(cause, co->root_msg, sizeof cause);
    co->be->ops->finish(co->be, status, cause);
  }
  uv_walk(&co->loop, close_walk, NULL);
  uv_run(&co->loop, UV_RUN_DEFAULT);
  co->be->ops->destroy(co->be);
out_loop:
  uv_walk(&co->loop, close_walk, NULL);
  uv_run(&co->loop, UV_RUN_DEFAULT);
  uv_loop_close(&co->loop);
  free_coord(co);
  return status;
}
