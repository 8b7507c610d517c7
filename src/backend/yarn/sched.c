/* sched.c: the YARN backend's scheduler thread, the coordinator half's
 * side that talks to YARN (the application master of src/yarn/am.c,
 * unmanaged under `loom run`, managed in its container under `loom
 * submit`): it heartbeats the scheduler (allocate), asks one container a
 * task, holds the granted ones until a launch's every container is there
 * (gang start, with a deadline), starts the agents in them through the
 * NodeManagers, stops containers, and hands ends and notes to the loop
 * thread through a uv_async (yarn_on_async). */
#include "backend/yarn/sched.h"

#include "yarn/yarn.h"
#include "fs/fs.h"
#include "yarn/am.h"
#include "hadoop/creds.h"
#include "yarn/submit.h"
#include "hadoop/conf.h"
#include "hadoop/hdfs.h"
#include "jobdir/jobdir.h"
#include "yarn_protos.pb-c.h"
#include <jansson.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Queues an exit for the loop thread (mu held). */
bool yarn_push_exit(ypriv *p, int task, int64_t status, int sig, const char *detail, bool lost) {
  if (p->nex == p->capex) {
    int cap = p->capex ? p->capex * 2 : 16;
    yexit *n = realloc(p->ex, (size_t)cap * sizeof *n);
    if (!n) return false; /* out of memory: the heartbeat timeout catches the task */
    p->ex = n;
    p->capex = cap;
  }
  yexit *e = &p->ex[p->nex++];
  memset(e, 0, sizeof *e);
  e->task = task;
  e->status = status;
  e->sig = sig;
  e->lost = lost;
  loom__strlcpy(e->detail, detail ? detail : "", sizeof e->detail);
  if (p->async_live) uv_async_send(&p->async);
  return true;
}

/* Queues a note for the loop thread (mu held): event for task (-1: the
 * job), detail taken, say a console line or NULL. */
void yarn_push_note(ypriv *p, int task, const char *event, json_t *detail, const char *say) {
  if (!yarn_push_exit(p, task, 0, 0, NULL, false)) {
    json_decref(detail);
    return;
  }
  yexit *e = &p->ex[p->nex - 1];
  loom__strlcpy(e->event, event, sizeof e->event);
  e->note = detail;
  loom__strlcpy(e->say, say ? say : "", sizeof e->say);
}

/* Gives c back to YARN on the next heartbeat (mu held); takes c. */
void yarn_push_release(ypriv *p, hyarn_container *c) {
  if (p->nrelease == p->caprelease) {
    int cap = p->caprelease ? p->caprelease * 2 : 16;
    hyarn_container *n = realloc(p->release, (size_t)cap * sizeof *n);
    if (!n) {
      hyarn_container_free(c);
      return;
    }
    p->release = n;
    p->caprelease = cap;
  }
  p->release[p->nrelease++] = *c;
  memset(c, 0, sizeof *c);
}

void yarn_free_env(char **env) {
  for (int i = 0; env && env[i]; i++) free(env[i]);
  free(env);
}

/* The words YARN's exit statuses stand for (ContainerExitStatus). */
static const char *yarn_status_word(int st) {
  switch (st) {
  case -100:
    return "aborted by YARN (its node was lost, or the container released)";
  case -101:
    return "its node's disks failed";
  case -102:
    return "preempted by YARN";
  case -103:
    return "killed by YARN for exceeding its virtual memory limit";
  case -104:
    return "killed by YARN for exceeding its physical memory limit (raise the role's memory)";
  case -105:
    return "stopped by loom";
  case -106:
    return "killed by the ResourceManager";
  case -107:
    return "killed after the application finished";
  default:
    return NULL;
  }
}

void yarn_on_async(uv_async_t *h) {
  ypriv *p = h->data;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    if (!p->nex) {
      pthread_mutex_unlock(&p->mu);
      return;
    }
    yexit e = p->ex[0];
    p->ex[0].note = NULL;
    memmove(p->ex, p->ex + 1, (size_t)(p->nex - 1) * sizeof *p->ex);
    p->nex--;
    pthread_mutex_unlock(&p->mu);
    if (e.event[0] && p->b->on_note)
      p->b->on_note(p->b->arg, e.task, e.event, e.note, e.say[0] ? e.say : NULL);
    else if (e.event[0])
      json_decref(e.note);
    else
      p->b->on_exit(p->b->arg, e.task, e.status, e.sig, e.detail[0] ? e.detail : NULL, e.lost);
  }
}

/* What a waiting task asks for, for messages. */
static void want_desc(const ypriv *p, int id, char *buf, size_t len) {
  const spec_role *r = p->role[id];
  long long mb = (long long)((r->memory + (1 << 20) - 1) >> 20);
  if (!mb) mb = loom__tun(LOOM_TUN_YARN_DEFAULT_MB);
  int k = 0;
  for (int j = 0; j < id; j++) k += p->role[j] == r;
  snprintf(buf, len, "%s:%d (%lld MB, %d vcores, %d GPUs%s%s, queue %s)", r->name, k, mb,
           r->vcores > 0 ? r->vcores : 1, r->gpus, r->label ? ", label " : "",
           r->label ? r->label : "", p->s->queue ? p->s->queue : "default");
}

/* Gang deadline passed (mu held): every task still waiting, and every
 * container held for this launch, fails: the containers go back. */
static void gang_timeout(ypriv *p) {
  loom__buf b;
  loom__buf_init(&b, 1 << 16);
  int missing = 0, held = 0;
  for (int i = 0; i < p->ntasks; i++) {
    if (p->t[i].st == Y_HELD) held++;
    if (p->t[i].st != Y_WANT) continue;
    char d[400];
    want_desc(p, i, d, sizeof d);
    if (missing++ < 12) loom__buf_printf(&b, "%s%s", missing > 1 ? ", " : "", d);
  }
  if (missing > 12) loom__buf_printf(&b, ", and %d more", missing - 12);
  char why[2300];
  snprintf(why, sizeof why,
           "YARN granted %d of %d containers within %.0f s (LOOM_YARN_GANG_TIMEOUT); missing: %s; "
           "the %d granted were released",
           held, held + missing, (double)loom__tun(LOOM_TUN_YARN_GANG_TIMEOUT_MS) / 1000.0,
           b.p ? b.p : "", held);
  loom__buf_free(&b);
  for (int i = 0; i < p->ntasks; i++) {
    ytask *t = &p->t[i];
    if (t->st == Y_WANT) {
      t->withdraw = true;
    } else if (t->st == Y_HELD) {
      yarn_push_release(p, &t->c);
      t->has_c = false;
    } else
      continue;
    t->st = Y_IDLE;
    yarn_push_exit(p, i, 1, 0, why, false);
  }
}

/* The NodeManager web UI's page of container c's logs (its stdout and
 * stderr, what yarn_launch redirects there), from the node_http_address
 * the scheduler granted it with: "http://<node http>/node/containerlogs/
 * <container>/<user>"; "" when the grant named no web address. */
static void container_log_url(const hyarn_container *c, char *url, size_t len) {
  url[0] = 0;
  Hadoop__Yarn__ContainerProto *cp =
      c->proto ? hadoop__yarn__container_proto__unpack(NULL, c->proto_len, c->proto) : NULL;
  if (cp && cp->node_http_address && cp->node_http_address[0] &&
      !strpbrk(cp->node_http_address, "/?# \t\r\n")) {
    char user[256];
    hconf_user(user, sizeof user);
    snprintf(url, len, "http://%s/node/containerlogs/%s/%s", cp->node_http_address, c->id, user);
  }
  if (cp) protobuf_c_message_free_unpacked(&cp->base, NULL);
}

/* One container start, on a thread of its own: the NodeManagers start
 * a launch's containers in parallel (one after the other, the last agent
 * of 8 registered 1.3 s after the first). */
typedef struct {
  ypriv *p;
  int task;
  hyarn_container c;
  char *cmd;
  char **env;
  const uint8_t *creds; /* p->creds, which lives as long as p */
  size_t ncreds;
  int rc;
  char err[2300];
} ystart;

static void *start_one(void *arg) {
  ystart *j = arg;
  j->rc = hyarn_am_launch(j->p->am, &j->c, j->cmd, j->env, j->p->res, j->p->nres, j->creds,
                          j->ncreds, j->err, sizeof j->err);
  return NULL;
}

/* At most this many container starts run at once. */
#define START_PARALLEL 32

/* Starts every held container (mu held, dropped around the calls). */
static void start_held(ypriv *p) {
  ystart *jobs = calloc((size_t)p->ntasks + 1, sizeof *jobs);
  if (!jobs) return; /* tried again at the next heartbeat */
  int nj = 0;
  for (int i = 0; i < p->ntasks; i++) {
    ytask *t = &p->t[i];
    if (t->st != Y_HELD) continue;
    ystart *j = &jobs[nj];
    if (hyarn_container_copy(&j->c, &t->c) < 0) continue;
    t->st = Y_RUNNING;
    const spec_role *r = p->role[i];
    int64_t asked = (int64_t)((r->memory + (1 << 20) - 1) >> 20);
    if (!asked) asked = loom__tun(LOOM_TUN_YARN_DEFAULT_MB);
    char say[512] = "";
    if (t->c.memory_mb > asked)
      snprintf(say, sizeof say,
               "YARN granted %lld MB where %lld MB was asked (its scheduler rounds up to "
               "yarn.scheduler.minimum-allocation-mb steps): the container's limit is %lld MB",
               (long long)t->c.memory_mb, (long long)asked, (long long)t->c.memory_mb);
    json_t *note =
        json_pack("{s:s, s:s, s:I, s:I, s:i, s:I}", "container", t->c.id, "node", t->c.node,
                  "memory_mb", (json_int_t)t->c.memory_mb, "asked_mb", (json_int_t)asked, "vcores",
                  t->c.vcores, "gpus", (json_int_t)t->c.gpus);
    /* where YARN users look for the task's output: the coordinator
     * prints it when the task fails */
    char logs[700];
    container_log_url(&t->c, logs, sizeof logs);
    if (note && logs[0]) json_object_set_new(note, "logs", json_string(logs));
    if (note && logs[0] && p->aggregation)
      json_object_set_new(note, "logs_later",
                          json_sprintf("yarn logs -applicationId %s -containerId %s",
                                       hyarn_am_app_id(p->am), t->c.id));
    yarn_push_note(p, i, "container", note, say[0] ? say : NULL);
    j->p = p;
    j->task = i;
    j->cmd = t->command;
    j->env = t->env;
    j->creds = p->creds;
    j->ncreds = p->ncreds;
    t->command = NULL;
    t->env = NULL;
    nj++;
  }
  pthread_mutex_unlock(&p->mu);
  for (int k = 0; k < nj; k += START_PARALLEL) {
    pthread_t th[START_PARALLEL];
    bool started[START_PARALLEL] = {false};
    int m = nj - k < START_PARALLEL ? nj - k : START_PARALLEL;
    for (int q = 0; q < m; q++)
      started[q] = pthread_create(&th[q], NULL, start_one, &jobs[k + q]) == 0;
    for (int q = 0; q < m; q++) {
      if (started[q])
        pthread_join(th[q], NULL);
      else
        start_one(&jobs[k + q]); /* no thread: here, in turn */
    }
  }
  pthread_mutex_lock(&p->mu);
  for (int k = 0; k < nj; k++) {
    ystart *j = &jobs[k];
    ytask *t = &p->t[j->task];
    free(j->cmd);
    yarn_free_env(j->env);
    hyarn_container_free(&j->c);
    if (j->rc < 0 && t->st == Y_RUNNING) {
      t->st = Y_IDLE;
      yarn_push_release(p, &t->c);
      t->has_c = false;
      yarn_push_exit(p, j->task, 1, 0, j->err, false);
    }
  }
  free(jobs);
}

/* The task whose current container is id, or -1. */
static int task_of_container(const ypriv *p, const char *id) {
  for (int i = 0; i < p->ntasks; i++)
    if (p->t[i].has_c && !strcmp(p->t[i].c.id, id)) return i;
  return -1;
}

/* The heartbeat thread: asks, takes grants, starts, stops, reports ends. */
void *yarn_thread(void *arg) {
  ypriv *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!p->quit) {
    int n = p->ntasks;
    hyarn_ask *asks = calloc((size_t)n * 2 + 1, sizeof *asks);
    hyarn_container *stops = calloc((size_t)n + 1, sizeof *stops);
    int nasks = 0, nstops = 0;
    bool wanting = false;
    for (int i = 0; asks && stops && i < n; i++) {
      ytask *t = &p->t[i];
      const spec_role *r = p->role[i];
      hyarn_ask a = {.alloc_id = (int64_t)t->gen * n + i,
                     .priority = 1,
                     .memory_mb = (int64_t)((r->memory + (1 << 20) - 1) >> 20),
                     .vcores = r->vcores > 0 ? r->vcores : 1,
                     .gpus = r->gpus,
                     .label = r->label};
      if (!a.memory_mb) a.memory_mb = loom__tun(LOOM_TUN_YARN_DEFAULT_MB);
      if (t->withdraw) {
        a.num = 0;
        asks[nasks++] = a;
        t->withdraw = false;
      }
      if (t->st == Y_WANT && !t->asked) {
        a.num = 1;
        asks[nasks++] = a;
        t->asked = true;
      }
      if (t->stop && t->st == Y_RUNNING && t->has_c &&
          hyarn_container_copy(&stops[nstops], &t->c) == 0)
        nstops++;
      t->stop = false;
      wanting |= t->st == Y_WANT;
    }
    hyarn_container *rel = p->release;
    int nrel = p->nrelease;
    p->release = NULL;
    p->nrelease = p->caprelease = 0;
    pthread_mutex_unlock(&p->mu);

    char err[2300];
    for (int i = 0; i < nstops; i++) {
      if (hyarn_am_stop(p->am, &stops[i], err, sizeof err) < 0)
        loom__log(LOOM_LOG_WARN, "yarn", "%s", err);
      hyarn_container_free(&stops[i]);
    }
    const hyarn_container **relp = calloc((size_t)nrel + 1, sizeof *relp);
    for (int i = 0; relp && i < nrel; i++) relp[i] = &rel[i];
    hyarn_alloc res;
    int rc =
        hyarn_am_allocate(p->am, asks, nasks, relp, relp ? nrel : 0, 0.5f, &res, err, sizeof err);
    free(relp);
    for (int i = 0; i < nrel; i++) hyarn_container_free(&rel[i]);
    free(rel);
    free(asks);
    free(stops);
    yarn_pub_sync(p->pub, false);

    pthread_mutex_lock(&p->mu);
    if (rc < 0 || res.shutdown) {
      /* the ResourceManager ended the attempt (killed, expired): every
       * task's container is gone or going */
      char why[2400];
      snprintf(why, sizeof why, "YARN ended application %.64s: %.2300s", hyarn_am_app_id(p->am),
               rc < 0 ? err : "the ResourceManager told the application master to shut down");
      loom__log(LOOM_LOG_ERROR, "yarn", "%s", why);
      p->gone = true;
      for (int i = 0; i < n; i++) {
        ytask *t = &p->t[i];
        if (t->st == Y_IDLE) continue;
        t->st = Y_IDLE;
        yarn_push_exit(p, i, 1, 0, why, true);
      }
      if (rc == 0) hyarn_alloc_free(&res);
      break;
    }
    for (int k = 0; k < res.nallocated; k++) {
      hyarn_container *c = &res.allocated[k];
      int id = c->alloc_id >= 0 ? (int)(c->alloc_id % n) : -1;
      int gen = c->alloc_id >= 0 ? (int)(c->alloc_id / n) : -1;
      ytask *t = id >= 0 ? &p->t[id] : NULL;
      if (t && t->st == Y_WANT && t->gen == gen) {
        t->c = *c;
        memset(c, 0, sizeof *c);
        t->has_c = true;
        t->st = Y_HELD;
      } else {
        yarn_push_release(p, c); /* not wanted (any more) */
      }
    }
    for (int k = 0; k < res.ndone; k++) {
      hyarn_done *d = &res.done[k];
      int id = task_of_container(p, d->id);
      if (id < 0) continue;
      ytask *t = &p->t[id];
      hyarn_container_free(&t->c);
      t->has_c = false;
      if (t->st != Y_RUNNING) continue;
      t->st = Y_IDLE;
      const char *word = yarn_status_word(d->exit_status);
      char detail[2300];
      snprintf(detail, sizeof detail, "YARN container %s: %s%sexit status %d%s%.2000s", d->id,
               word ? word : "", word ? "; " : "", d->exit_status, d->diagnostics[0] ? ": " : "",
               d->diagnostics);
      int64_t st = d->exit_status;
      int sig = 0;
      if (st > 128 && st < 160) { /* the shell's 128+N: killed by signal N */
        sig = (int)(st - 128);
        st = 0;
      }
      /* aborted (node lost), disks failed, preempted, killed by the RM: its
       * processes may live on where YARN no longer counts them */
      int x = d->exit_status;
      yarn_push_exit(p, id, st, sig, detail, x == -100 || x == -101 || x == -102 || x == -106);
    }
    hyarn_alloc_free(&res);

    bool any_want = false, any_held = false;
    uint64_t oldest = 0;
    for (int i = 0; i < n; i++) {
      if (p->t[i].st == Y_WANT) {
        any_want = true;
        if (!oldest || p->t[i].t_want < oldest) oldest = p->t[i].t_want;
      }
      any_held |= p->t[i].st == Y_HELD;
    }
    if (!any_want && any_held)
      start_held(p);
    else if (any_want &&
             loom__now_ms() - oldest > (uint64_t)loom__tun(LOOM_TUN_YARN_GANG_TIMEOUT_MS))
      gang_timeout(p);
    if (p->quit) break;
    /* quick heartbeats while containers are wanted (the RM grants on its
     * NodeManagers' heartbeats), then one a second */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ms = (wanting || any_want) ? 100 : 1000;
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}
