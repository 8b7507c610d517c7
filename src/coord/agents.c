/* agents.c: agents: registration, the assignment sent to each, the cluster spec
 * sent to all at the rendezvous, and what agents report. */
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
#include <zlib.h>

static json_t *kv_obj(const spec_kv *kv, int n, json_t *into);
static void send_assign(coord *co, task *t);
static void send_cluster(coord *co, task *only);

/* ---- agents ------------------------------------------------------------- */
task *coord_task_by_name(coord *co, const char *name) {
  if (!co->task_hash) return NULL;
  for (unsigned h = coord_name_hash(name) & co->task_hash_mask;; h = (h + 1) & co->task_hash_mask) {
    int id = co->task_hash[h];
    if (id < 0) return NULL;
    if (!strcmp(co->tasks[id].name, name)) return &co->tasks[id];
  }
}

static json_t *kv_obj(const spec_kv *kv, int n, json_t *into) {
  for (int i = 0; i < n; i++) json_object_set_new(into, kv[i].key, json_string(kv[i].value));
  return into;
}

static void send_assign(coord *co, task *t) {
  const spec_role *r = t->role;
  char *wd = jobdir_task_apath(co->o->job_dir, JOBDIR_TASKS, t->file);
  json_t *argv = NULL;
  if (!r->shell) {
    argv = json_array();
    for (int i = 0; r->argv[i]; i++) json_array_append_new(argv, json_string(r->argv[i]));
  }
  json_t *env = kv_obj(co->s->env, co->s->nenv, json_object());
  kv_obj(r->env, r->nenv, env);
  json_t *files = co->staged_files;
  if (files) {
    json_incref(files);
  } else {
    files = kv_obj(co->s->files, co->s->nfiles, json_object());
    for (int i = 0; i < co->s->narchives; i++)
      json_object_set_new(files, co->s->archives[i].key,
                          json_pack("{s:s}", "archive", co->s->archives[i].value));
  }
  wire_msg m = {.type = WIRE_ASSIGN,
                .u.assign = {
                    .workdir = wd ? wd : "",
                    .job_id = co->o->job_id,
                    .job_dir = co->o->job_dir,
                    .role = r->name,
                    .index = t->index,
                    .shell = r->shell,
                    .argv = argv,
                    .procs = r->procs,
                    .env = env,
                    .files = files,
                    .cpus = t->cpus,
                    .gpus = t->gpus,
                    .has_gpu_count = true,
                    .gpu_count = r->gpus,
                    /* where the cluster manager enforces it (YARN's
                     * container limit), the agent does not limit too */
                    .memory = co->be->ops->enforces_memory ? 0 : (int64_t)r->memory,
                    .training = t->training,
                    .rank_base = t->rank_base,
                    .world_size = co->world_size,
                    .heartbeat_timeout_ms = (int64_t)coord_hb_timeout_ms(co),
                    .has_attempt = true,
                    .attempt = t->attempt,
                    .has_protocol = true,
                    .protocol = WIRE_PROTOCOL,
                    .version = LOOM__VERSION,
                }};
  coord_conn_send_msg(t->agent, &m);
  free(wd);
  json_decref(argv);
  json_decref(env);
  json_decref(files);
}

/* Sends the cluster spec (every task's current host:port) to every agent,
 * or only to `only` (a restarted task), and keeps it in the KV store as
 * "loom/cluster" (with "loom/cluster_version" counting changes) so running
 * tasks can learn a restarted peer's new address. */
static void send_cluster(coord *co, task *only) {
  json_t *cl = json_object(), *tf = json_object();
  const task *master = NULL;
  bool tf_differs = false; /* a role TF_CONFIG leaves out of its cluster */
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
    } else {
      tf_differs = true;
    }
    if (t->training && t->rank_base == 0) master = t;
  }
  /* Every agent gets the whole spec, so the fan-out is N copies of O(N)
   * bytes: "tf_cluster" goes only where it differs from "cluster" (agents
   * take "cluster" for TF_CONFIG without it), which halves that. */
  json_t *blob = tf_differs ? json_pack("{s:o, s:o}", "cluster", cl, "tf_cluster", tf)
                            : json_pack("{s:o}", "cluster", cl);
  if (!tf_differs) json_decref(tf);
  char *bs = json_dumps(blob, JSON_COMPACT);
  char *cs = json_dumps(cl, JSON_COMPACT);
  json_decref(blob);
  if (cs) {
    coord_kv_store(co, "loom/cluster", cs, strlen(cs));
    free(cs);
  }
  /* The header is CLUSTER's fields (wire_msg.h's wire_cluster), written
   * here rather than through wire_msg_encode because the blob goes out in
   * two encodings; agents decode it with wire_msg_decode. */
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
  /* The blob deflated, for the agents that said they inflate (all of
   * loom's): a host:port list compresses 7 to 14 times, and the fan-out
   * is N copies of it. The plain frame is made only for an agent that did
   * not say so. */
  shared_frame *sf[2] = {NULL, NULL}; /* plain, deflated */
  bool want[2] = {false, false};
  for (int i = 0; i < co->ntasks; i++) {
    task *t = only ? only : &co->tasks[i];
    if (t->agent) want[t->agent->inflate] = true;
    if (only) break;
  }
  int rc = bs ? 0 : LOOM_ENOMEM;
  size_t blen = bs ? strlen(bs) : 0;
  for (int k = 0; k < 2 && rc == 0; k++) {
    if (!want[k]) continue;
    if (!(sf[k] = calloc(1, sizeof *sf[k]))) {
      rc = LOOM_ENOMEM;
      break;
    }
    sf[k]->refs = 1;
    if (k == 0) {
      rc = wire_encode(WIRE_CLUSTER, j, bs, blen, &sf[k]->buf, &sf[k]->len);
      continue;
    }
    uLongf zlen = compressBound(blen);
    unsigned char *z = malloc(zlen);
    if (!z || compress2(z, &zlen, (const Bytef *)bs, blen, Z_BEST_SPEED) != Z_OK) {
      free(z);
      rc = LOOM_ENOMEM;
      break;
    }
    json_t *jz = json_deep_copy(j);
    json_object_set_new(jz, "blob_encoding", json_string("deflate"));
    json_object_set_new(jz, "blob_size", json_integer((json_int_t)blen));
    rc = wire_encode(WIRE_CLUSTER, jz, z, zlen, &sf[k]->buf, &sf[k]->len);
    json_decref(jz);
    free(z);
  }
  json_decref(j);
  free(bs);
  if (rc < 0) {
    for (int k = 0; k < 2; k++)
      if (sf[k]) coord_shared_put(sf[k]);
    coord_attempt_fail(co, NULL, "out of memory while sending the cluster spec");
    return;
  }
  for (int i = 0; i < co->ntasks; i++) {
    task *t = only ? only : &co->tasks[i];
    if (t->agent) coord_conn_send_shared(t->agent, sf[t->agent->inflate]);
    if (only) break;
  }
  for (int k = 0; k < 2; k++)
    if (sf[k]) coord_shared_put(sf[k]);
}

static bool loopback_host(const char *h) {
  return !strncmp(h, "127.", 4) || !strcmp(h, "localhost") || !strcmp(h, "::1");
}

/* A cluster spec that spans hosts cannot hold a loopback address: peers on
 * other hosts would dial themselves. Agents choose a loopback address only
 * when the coordinator is on loopback, so one there was set by hand
 * (LOOM_HOST): say so at the rendezvous, naming it and a task elsewhere. */
static void check_hosts(coord *co) {
  const task *lo = NULL, *far = NULL;
  for (int i = 0; i < co->ntasks && !(lo && far); i++) {
    const task *t = &co->tasks[i];
    if (loopback_host(t->host)) {
      if (!lo) lo = t;
    } else if (!far) {
      far = t;
    }
  }
  if (!lo || !far) return;
  coord_event(co, NULL, "loopback_in_cluster",
              json_pack("{s:s, s:s, s:s, s:s}", "task", lo->name, "host", lo->host, "other",
                        far->name, "other_host", far->host));
  loom__log(LOOM_LOG_WARN, "coord",
            "%s is published at %s, a loopback address, while %s is at %s: tasks on other hosts "
            "cannot reach it; unset LOOM_HOST for its agent, or set LOOM_IFACE",
            lo->name, lo->host, far->name, far->host);
}

int coord_on_agent(coord *co, conn *c, const wire_msg *m) {
  task *t = c->task;
  switch (m->type) {
  case WIRE_READY:
    if (t->state != T_REGISTERED) return LOOM_EPROTO;
    coord_task_set(co, t, T_READY);
    coord_event(co, t, "ready", NULL);
    if (co->jstate == J_RUNNING) {
      /* a restarted task rejoins a running job: the cluster spec as it is
       * now, and peers see its new address in the KV store */
      coord_task_set(co, t, T_RUNNING);
      if (t->training) {
        /* it joins the next generation (elastic or not: its peers' old
         * collectives included its dead predecessor) */
        t->left = false;
        co->generation++;
        int world = coord_publish_membership(co);
        coord_event(co, t, "membership_changed",
                    json_pack("{s:I, s:i, s:s}", "generation", (json_int_t)co->generation,
                              "world_size", world, "joined", t->name));
        coord_say(co, "%s rejoined: membership generation %lld, world size %d", t->name,
                  (long long)co->generation, world);
      }
      /* Its cluster spec names rank 0's address (MASTER_ADDR): while
       * rank 0 is itself restarting (both lost with one node), it waits,
       * and goes out when rank 0 is back. */
      const task *master = NULL;
      for (int i = 0; i < co->ntasks && !master; i++)
        if (co->tasks[i].training && co->tasks[i].rank_base == 0) master = &co->tasks[i];
      if (master && !master->host[0]) {
        t->cluster_pending = true;
      } else {
        send_cluster(co, t);
        for (int i = 0; i < co->ntasks; i++) {
          task *o = &co->tasks[i];
          if (o->cluster_pending && o != t && o->agent) send_cluster(co, o);
          o->cluster_pending = false;
        }
      }
      int64_t v = 0;
      kv_entry *e = coord_kv_find(co, "loom/cluster_version");
      if (e) v = atoll((const char *)e->val);
      char buf[32];
      int n = snprintf(buf, sizeof buf, "%lld", (long long)(v + 1));
      coord_kv_store(co, "loom/cluster_version", buf, (size_t)n);
      coord_event(co, t, "rejoined", json_pack("{s:s, s:i}", "host", t->host, "port", t->port));
      return 0;
    }
    if (++co->nready == co->ntasks && co->jstate == J_RENDEZVOUS) {
      co->jstate = J_RUNNING;
      uv_timer_stop(&co->rdv_timer);
      double now = loom__wall();
      for (int i = 0; i < co->ntasks; i++) coord_task_set(co, &co->tasks[i], T_RUNNING);
      coord_event(co, NULL, "rendezvous_done",
                  json_pack("{s:f, s:i}", "elapsed_s", now - co->t_attempt, "tasks", co->ntasks));
      check_hosts(co);
      send_cluster(co, NULL);
      coord_publish_membership(co);
    }
    return 0;
  case WIRE_STARTED:
    t->t_start = loom__wall();
    if (t->pids) json_decref(t->pids);
    t->pids = json_incref(m->u.started.pids);
    coord_event(co, t, "started", json_pack("{s:O?}", "pids", t->pids));
    if (!strcmp(t->role->name, "tensorboard")) {
      char url[400];
      snprintf(url, sizeof url, "http://%s:%d/", t->host, t->port);
      coord_event(co, t, "tensorboard_url", json_pack("{s:s}", "url", url));
      loom__strlcpy(co->tensorboard, url, sizeof co->tensorboard);
      coord_say(co, "TensorBoard (%s): %s", t->name, url);
    }
    return 0;
  case WIRE_LOG:
    coord_on_log(co, t, m);
    return 0;
  case WIRE_METRIC:
    return coord_on_metric(co, t, &m->u.metric, "agent");
  case WIRE_FAIL: {
    const wire_fail *x = &m->u.fail;
    coord_task_exited(co, t, x->code ? (int)x->code : 1, 0,
                      *x->reason ? x->reason : "the agent could not start the task", false);
    return 0;
  }
  case WIRE_EXIT: {
    const wire_exit *x = &m->u.exit;
    coord_task_exited(co, t, (int)x->code, (int)x->signal, x->reason, x->lost);
    return 0;
  }
  case WIRE_HEARTBEAT:
    return 0;
  }
  return LOOM_EPROTO;
}

static void accept_agent(coord *co, conn *c, task *t, const wire_register *r);

/* Refuses an agent that registered with attempt "any", telling it why:
 * final when it belongs to an earlier launch (trying again is useless),
 * otherwise its task may wait for it later (a retry, a restart). The
 * agent closes the connection. */
static int refuse_any(coord *co, conn *c, task *t, const char *why, bool final, bool stale) {
  loom__log(stale ? LOOM_LOG_WARN : LOOM_LOG_INFO, "coord", "refused an agent of %s: %s", t->name,
            why);
  coord_event(co, t, "agent_refused",
              json_pack("{s:s, s:b, s:b}", "reason", why, "final", final, "stale", stale));
  loom__strlcpy(c->who, t->name, sizeof c->who);
  coord_conn_send_msg(c, &(wire_msg){.type = WIRE_ABORT,
                                     .u.abort = {.reason = why, .final = final, .stale = stale}});
  return 0;
}

static void park_free(wire_register *r) {
  free((char *)r->task);
  free((char *)r->host);
  free((char *)r->host_why);
  *r = (wire_register){0};
}

/* Parks c, an agent of task t that waits for none now: it keeps its
 * connection (heartbeats from hb_tick) and its REGISTER, and takes the
 * task's next launch (coord_unpark_tick); it goes when its connection
 * closes, or with the coordinator. */
static int park(coord *co, conn *c, task *t, const wire_register *r) {
  c->park = *r;
  c->park.task = strdup(r->task);
  c->park.host = strdup(r->host);
  c->park.host_why = r->host_why ? strdup(r->host_why) : NULL;
  if (!c->park.task || !c->park.host || (r->host_why && !c->park.host_why)) {
    park_free(&c->park);
    return LOOM_ENOMEM;
  }
  c->parked_for = t;
  t->parked = c;
  loom__strlcpy(c->who, t->name, sizeof c->who);
  loom__log(LOOM_LOG_INFO, "coord", "an agent for %s waits for its next launch (%s)", t->name,
            TSTATE[t->state]);
  coord_event(co, t, "agent_parked", json_pack("{s:s}", "state", TSTATE[t->state]));
  return 0;
}

/* Forgets what c holds as a parked agent (its connection closes, or it
 * takes its task). */
void coord_unpark_drop(conn *c) {
  if (!c->parked_for) return;
  if (c->parked_for->parked == c) c->parked_for->parked = NULL;
  c->parked_for = NULL;
  park_free(&c->park);
}

static int register_any(coord *co, conn *c, task *t, const wire_register *r);

/* Each launched task with a parked agent takes it, through the checks of a
 * registration made now (its launch may have become stale since). */
void coord_unpark_tick(uv_timer_t *tm) {
  coord *co = tm->data;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    conn *c = t->parked;
    if (!c || t->state != T_LAUNCHED || t->agent ||
        (co->jstate != J_RENDEZVOUS && co->jstate != J_RUNNING))
      continue;
    wire_register r = c->park;
    c->park = (wire_register){0};
    c->parked_for = NULL;
    t->parked = NULL;
    if (register_any(co, c, t, &r) < 0) coord_conn_close(c, "its registration is refused now");
    park_free(&r);
  }
}

/* An agent started by the cluster manager (agents_any_attempt): it takes
 * the attempt its task waits for, unless it is stale: its fence (the
 * launch it belongs to: its Spark task's attempt id, which grows with
 * every launch) is below one its task's agents registered with before (an
 * agent of an earlier Spark stage attempt, still running or started late),
 * or below the floor a lost task raised (every launch registered so far is
 * dead: Spark relaunches the stage). */
static int register_any(coord *co, conn *c, task *t, const wire_register *r) {
  char why[300];
  if (!co->be->ops->agents_any_attempt) {
    loom__log(LOOM_LOG_WARN, "coord",
              "refused registration of %s attempt 'any': the %s backend starts agents with "
              "their attempt",
              t->name, co->be->ops->name);
    return LOOM_ESTATE;
  }
  if (r->has_fence && r->fence < t->fence_max) {
    snprintf(why, sizeof why,
             "it belongs to an earlier launch (fence %lld; an agent of fence %lld has registered "
             "for %s since): a stale Spark stage attempt",
             (long long)r->fence, (long long)t->fence_max, t->name);
    return refuse_any(co, c, t, why, true, true);
  }
  if (r->has_fence && r->fence < co->fence_floor) {
    snprintf(why, sizeof why,
             "its launch (fence %lld) lost a task: the job waits for the next one (fence %lld or "
             "more), a stale Spark stage attempt that Spark must launch again",
             (long long)r->fence, (long long)co->fence_floor);
    return refuse_any(co, c, t, why, true, true);
  }
  if (t->agent || t->state != T_LAUNCHED ||
      (co->jstate != J_RENDEZVOUS && co->jstate != J_RUNNING)) {
    /* final once the job is ending for good: it succeeded, was killed, or
     * failed with no retry to come */
    bool over = co->jstate == J_DONE || (co->jstate == J_STOPPING && !coord_will_retry(co));
    /* otherwise the task may want an agent later (a restart, the next
     * attempt): this one waits for that, connected, instead of trying
     * again and again; a second one for the same task is refused */
    if (!over && !t->parked && park(co, c, t, r) == 0) return 0;
    snprintf(why, sizeof why, "%s is not waiting for an agent (%s%s)", t->name,
             t->agent ? "another agent holds it" : TSTATE[t->state],
             over                       ? ", the job is ending"
             : co->jstate == J_STOPPING ? ", the attempt is stopping"
                                        : "");
    return refuse_any(co, c, t, why, over, false);
  }
  if (r->has_fence && r->fence > t->fence_max) {
    if (t->fence_max >= 0) /* a new launch of this task */
      coord_event(
          co, t, "fence_raised",
          json_pack("{s:I, s:I}", "from", (json_int_t)t->fence_max, "to", (json_int_t)r->fence));
    t->fence_max = r->fence;
  }
  if (r->has_fence && r->fence > co->fence) co->fence = r->fence;
  t->fence = r->has_fence ? r->fence : -1;
  accept_agent(co, c, t, r);
  return 0;
}

/* An agent of another protocol (another loom on its node than the
 * client's): refused with both versions named. If its task waits for an
 * agent, the attempt fails as a launch does (a backend error: the next
 * launch would start the same binary). */
static int refuse_protocol(coord *co, conn *c, task *t, const wire_register *r) {
  char theirs[32] = "none";
  if (r->has_protocol) snprintf(theirs, sizeof theirs, "%lld", (long long)r->protocol);
  char why[400];
  snprintf(why, sizeof why,
           "its agent is loom %s (protocol %s) and the coordinator loom %s (protocol %d): run "
           "the same loom on both sides",
           r->version ? r->version : "(an earlier one)", theirs, LOOM__VERSION, WIRE_PROTOCOL);
  loom__log(LOOM_LOG_WARN, "coord", "refused an agent of %s: %s", t->name, why);
  loom__strlcpy(c->who, t->name, sizeof c->who);
  coord_conn_send_msg(c,
                      &(wire_msg){.type = WIRE_ABORT, .u.abort = {.reason = why, .final = true}});
  coord_conn_close_soon(c);
  if (t->agent || t->state != T_LAUNCHED || (co->jstate != J_RENDEZVOUS && co->jstate != J_RUNNING))
    return 0;
  snprintf(t->reason, sizeof t->reason, "never started: %s", why);
  coord_task_set(co, t, T_LOST);
  coord_event(co, t, "launch_failed", json_pack("{s:s}", "reason", t->reason));
  coord_attempt_fail(co, t, t->reason);
  co->outcome = O_INFRA;
  return 0;
}

int coord_on_register(coord *co, conn *c, const wire_msg *m) {
  const wire_register *r = &m->u.reg;
  const char *name = r->task;
  task *t = coord_task_by_name(co, name);
  if (!t) {
    loom__log(LOOM_LOG_WARN, "coord", "refused the registration of %s: the job has no such task",
              name);
    return LOOM_EPROTO;
  }
  if (!r->has_protocol || r->protocol != WIRE_PROTOCOL) return refuse_protocol(co, c, t, r);
  if (r->any_attempt) return register_any(co, c, t, r);
  if (r->attempt != t->attempt || t->agent || t->state != T_LAUNCHED ||
      (co->jstate != J_RENDEZVOUS && co->jstate != J_RUNNING)) {
    loom__log(LOOM_LOG_WARN, "coord",
              "refused registration of %s attempt %lld: expected "
              "attempt %d and a task waiting for its agent",
              name, (long long)r->attempt, t->attempt);
    return LOOM_ESTATE;
  }
  t->fence = -1;
  accept_agent(co, c, t, r);
  return 0;
}

static void accept_agent(coord *co, conn *c, task *t, const wire_register *r) {
  const char *host = r->host;
  c->kind = C_AGENT;
  c->task = t;
  t->agent = c;
  if (!co->be->ops->tracks_processes) t->agent_running = true;
  loom__strlcpy(t->host, host, sizeof t->host);
  t->port = (int)r->port;
  t->agent_pid = r->has_pid ? (int)r->pid : 0;
  c->inflate = r->inflate;
  coord_task_set(co, t, T_REGISTERED);
  coord_event(
      co, t, "registered",
      json_pack("{s:s, s:i, s:s?}", "host", t->host, "port", t->port, "host_why", r->host_why));
  send_assign(co, t);
}
