/* yarn.c: the YARN backend's coordinator half and its table of
 * operations. The client half (`loom check`, `loom submit`, status, kill)
 * is client.c; the capacity checks are capacity.c.
 *
 * The coordinator half: the coordinator is the application master
 * (src/yarn/am.c), unmanaged under `loom run`, managed in its container
 * under `loom submit`. A thread of its own heartbeats the scheduler
 * (allocate), asks one container a task, holds the granted ones until a
 * launch's every container is there (gang start, with a deadline), starts
 * the agents in them through the NodeManagers, stops containers, and
 * hands ends and notes to the loop thread through a uv_async. A role maps
 * to one container a task: vcores -> virtual cores (at least 1), memory ->
 * MB (rounded up; LOOM_YARN_DEFAULT_MB when unset), gpus -> yarn.io/gpu,
 * label -> node label expression, queue -> queue ("default" when unset). */
#include "backend/yarn/yarn_int.h"
#include "yarn/yarn.h"

#include "fs/fs.h"
#include "yarn/am.h"
#include "yarn/creds.h"
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

/* ---- the coordinator half: an unmanaged application master ------------ */

/* Where a task is in YARN. */
typedef enum {
  Y_IDLE,    /* nothing asked, or its container ended */
  Y_WANT,    /* launched: a container asked for, not granted yet */
  Y_HELD,    /* granted, held until every wanted container is granted (gang) */
  Y_RUNNING, /* its container started with the agent in it */
} ystate;

typedef struct {
  ystate st;
  int gen;       /* launches of this task: its allocation id is gen * ntasks + id */
  bool asked;    /* the ask of this generation was sent */
  bool withdraw; /* send num 0 for the last ask (signalled before it was granted) */
  bool stop;     /* stopContainers wanted */
  char *command; /* the agent's command line, for the NodeManager's shell */
  char **env;    /* its environment */
  hyarn_container c;
  bool has_c;
  uint64_t t_want;
} ytask;

typedef struct {
  int task;
  int64_t status;
  int sig;
  bool lost;
  char detail[2300];
  /* a note instead of an exit, when event is set */
  char event[32];
  json_t *note;
  char say[512];
} yexit;

typedef struct {
  backend *b;
  const spec_job *s;
  int ntasks;
  const spec_role **role; /* task id -> its role */
  ytask *t;
  hyarn_am *am;
  pthread_t th;
  bool th_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool quit; /* the thread should finish */
  bool gone; /* the RM ended the application: nothing more can start */
  uv_async_t async;
  bool async_live;
  yexit *ex; /* exits for the loop thread */
  int nex, capex;
  /* the spec's files and archives, staged (stage_files), localized into
   * every container */
  hyarn_resource *res;
  int nres;
  /* every task container's credentials (creds.h): the job's secret under
   * HYARN_CREDS_JOB_SECRET, set by the first launch; the secret is the
   * job's, the same for every launch */
  uint8_t *creds;
  size_t ncreds;
  bool aggregation; /* yarn.log-aggregation-enable: logs move to the cluster's filesystem */
  char stage_dir[PATH_MAX];
  hyarn_container *release; /* granted containers to give back */
  int nrelease, caprelease;
  yarn_pub *pub; /* a managed AM: publishes its job directory (jobsync.c) */
} ypriv;

/* Queues an exit for the loop thread (mu held). */
static bool push_exit(ypriv *p, int task, int64_t status, int sig, const char *detail, bool lost) {
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
static void push_note(ypriv *p, int task, const char *event, json_t *detail, const char *say) {
  if (!push_exit(p, task, 0, 0, NULL, false)) {
    json_decref(detail);
    return;
  }
  yexit *e = &p->ex[p->nex - 1];
  loom__strlcpy(e->event, event, sizeof e->event);
  e->note = detail;
  loom__strlcpy(e->say, say ? say : "", sizeof e->say);
}

/* Gives c back to YARN on the next heartbeat (mu held); takes c. */
static void push_release(ypriv *p, hyarn_container *c) {
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

static void free_env(char **env) {
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

static void yarn_on_async(uv_async_t *h) {
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
      push_release(p, &t->c);
      t->has_c = false;
    } else
      continue;
    t->st = Y_IDLE;
    push_exit(p, i, 1, 0, why, false);
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
    push_note(p, i, "container", note, say[0] ? say : NULL);
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
    free_env(j->env);
    hyarn_container_free(&j->c);
    if (j->rc < 0 && t->st == Y_RUNNING) {
      t->st = Y_IDLE;
      push_release(p, &t->c);
      t->has_c = false;
      push_exit(p, j->task, 1, 0, j->err, false);
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
static void *yarn_thread(void *arg) {
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
        push_exit(p, i, 1, 0, why, true);
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
        push_release(p, c); /* not wanted (any more) */
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
      push_exit(p, id, st, sig, detail, x == -100 || x == -101 || x == -102 || x == -106);
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

/* Adds the numeric addresses host resolves to to b's trusted proxies. */
static void add_proxy_host(backend *b, const char *host) {
  if (!host[0] || !strcmp(host, "0.0.0.0") || !strcmp(host, "::")) return;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, NULL, &hints, &res) != 0) return;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof ip, NULL, 0, NI_NUMERICHOST) != 0)
      continue;
    bool dup = false;
    for (int i = 0; i < b->nui_proxies; i++) dup |= !strcmp(b->ui_proxies[i], ip);
    if (!dup && b->nui_proxies < (int)(sizeof b->ui_proxies / sizeof b->ui_proxies[0]))
      loom__strlcpy(b->ui_proxies[b->nui_proxies++], ip, sizeof b->ui_proxies[0]);
  }
  freeaddrinfo(res);
}

/* The host of a "host:port" property of conf, into add_proxy_host. */
static void add_proxy_prop(backend *b, const hconf *conf, const char *name) {
  char v[512];
  if (hconf_get(conf, name, NULL, v, sizeof v) != 1) return;
  char *colon = strrchr(v, ':');
  if (colon) *colon = 0;
  add_proxy_host(b, v);
}

/* What the coordinator reads of yarn-site.xml for logs and the dashboard:
 * whether the NodeManagers aggregate logs, and, with a dashboard, where
 * YARN's web proxy reads it from, as Hadoop's AmIpFilter finds it: the
 * ResourceManagers' hosts (their web UI, each with HA, runs the proxy
 * unless yarn.web-proxy.address names a proxy of its own), and that
 * proxy; each resolved to its addresses. */
static void yarn_site_settings(backend *b, ypriv *p) {
  hyarn_rms rms;
  char err[1024];
  if (hyarn_find_rm(NULL, &rms, err, sizeof err) < 0) return;
  for (int i = 0; b->ui_url && i < rms.n; i++) add_proxy_host(b, rms.rm[i].host);
  hconf conf = {0};
  if (hconf_load(&conf, rms.file, err, sizeof err) == 0) {
    char v[16];
    p->aggregation = hconf_get(&conf, "yarn.log-aggregation-enable", "false", v, sizeof v) == 1 &&
                     !strcasecmp(v, "true");
  }
  if (b->ui_url && conf.n) {
    add_proxy_prop(b, &conf, "yarn.web-proxy.address");
    add_proxy_prop(b, &conf, "yarn.resourcemanager.webapp.address");
    for (int i = 0; i < rms.n; i++) {
      char name[160];
      snprintf(name, sizeof name, "yarn.resourcemanager.webapp.address.%s", rms.rm[i].id);
      if (rms.rm[i].id[0]) add_proxy_prop(b, &conf, name);
    }
  }
  hconf_free(&conf);
}

static int yarn_create(backend *b, const spec_job *s, int ntasks) {
  ypriv *p = calloc(1, sizeof *p);
  if (!p) return LOOM_ENOMEM;
  p->b = b;
  p->s = s;
  p->ntasks = ntasks;
  p->role = calloc((size_t)ntasks + 1, sizeof *p->role);
  p->t = calloc((size_t)ntasks + 1, sizeof *p->t);
  if (!p->role || !p->t) {
    free(p->role), free(p->t), free(p);
    return LOOM_ENOMEM;
  }
  /* task ids in role order, instances each, as the coordinator numbers them */
  for (int r = 0, id = 0; r < s->nroles; r++)
    for (int k = 0; k < s->roles[r].instances && id < ntasks; k++) p->role[id++] = &s->roles[r];
  char err[4096];
  uint64_t t0 = loom__now_ms();
  /* `loom submit`: this coordinator is the application master YARN
   * started in a container; `loom run`: it submits an unmanaged one */
  bool managed = loom__tun_raw(LOOM_TUN_YARN_MANAGED) != NULL;
  /* the dashboard, through the ResourceManager's web proxy: the
   * application's tracking URL, read without its token from the proxy */
  hyarn_am_set_tracking_url(b->ui_url);
  yarn_site_settings(b, p);
  int rc = managed ? hyarn_am_attach(NULL, YARN_RPC_TIMEOUT_MS, &p->am, err, sizeof err)
                   : hyarn_am_start(NULL, s->name, s->queue,
                                    (int)loom__tun(LOOM_TUN_YARN_SUBMIT_TIMEOUT_MS), &p->am, err,
                                    sizeof err);
  if (rc < 0) {
    fprintf(stderr, "loom: YARN: %s\n", err);
    free(p->role), free(p->t), free(p);
    return rc;
  }
  unsigned long long took = (unsigned long long)(loom__now_ms() - t0);
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  uv_async_init(b->loop, &p->async, yarn_on_async);
  p->async.data = p;
  p->async_live = true;
  char say[512];
  snprintf(say, sizeof say, "YARN application %s, %s application master (registered in %llu ms)",
           hyarn_am_app_id(p->am), managed ? "a managed" : "its own unmanaged", took);
  pthread_mutex_lock(&p->mu);
  push_note(p, -1, "yarn_application",
            json_pack("{s:s, s:s, s:b, s:I, s:s}", "application", hyarn_am_app_id(p->am),
                      "app_attempt", hyarn_am_attempt_id(p->am), "managed", managed,
                      "registered_ms", (json_int_t)took, "tracking", hyarn_am_tracking(p->am)),
            say);
  pthread_mutex_unlock(&p->mu);
  if (managed) p->pub = yarn_pub_open();
  b->priv = p;
  if (pthread_create(&p->th, NULL, yarn_thread, p) != 0) {
    hyarn_am_free(p->am, true);
    p->am = NULL;
    return LOOM_ENOMEM;
  }
  p->th_started = true;
  return 0;
}

/* Runs argv (cp, rm), waiting at most 10 minutes; 0 when it exited 0. */
static int run_wait(char *const *argv) {
  pid_t pid = fork();
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  if (pid < 0) return -1;
  int st = 0;
  for (int i = 0; i < 600 * 20; i++) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
    if (r < 0 && errno != EINTR) return -1;
    usleep(50 * 1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

/* The spec's files and archives, copied into a staging directory the
 * NodeManagers read, become every container's LocalResources: YARN
 * localizes them into the container's directory, unpacking the archives,
 * and the agent links each to its target in the task's directory ({"cwd":
 * name}). A copy, so that a source changed during the job does not make a
 * restarted task's localization fail (YARN checks the size and time it was
 * told). When the cluster's default filesystem is HDFS (fs.defaultFS in
 * HADOOP_CONF_DIR's core-site.xml) the staging directory is
 * hdfs:///user/<user>/.loom/staging/<application>, which NodeManagers on
 * every host can read; otherwise $TMPDIR/loom-yarn-<application>-*, on
 * this host's filesystem (file://), for a one-host cluster. */
static int yarn_stage(backend *b, const spec_job *s, json_t **files, char *err, size_t errlen) {
  ypriv *p = b->priv;
  *files = NULL;
  int n = s->nfiles + s->narchives;
  if (!n) return 0;
  hdfs_url def;
  char why[1024];
  bool remote = hdfs_parse_url("hdfs:///", &def, why, sizeof why) == 0;
  if (remote) {
    char user[256];
    hconf_user(user, sizeof user);
    snprintf(p->stage_dir, sizeof p->stage_dir, "hdfs://%s:%d/user/%s/.loom/staging/%s", def.host,
             def.port, user, hyarn_am_app_id(p->am));
    int rc = loom__fs_mkdirs(p->stage_dir, why, sizeof why);
    if (rc < 0) {
      snprintf(err, errlen, "cannot make the YARN staging directory: %s", why);
      p->stage_dir[0] = 0;
      return rc == LOOM_ENOMEM ? rc : LOOM_EBACKEND;
    }
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(p->stage_dir, sizeof p->stage_dir, "%s/loom-yarn-%s-XXXXXX",
             tmp && *tmp ? tmp : "/tmp", hyarn_am_app_id(p->am));
    if (!mkdtemp(p->stage_dir)) {
      snprintf(err, errlen, "cannot make the YARN staging directory %s: %s", p->stage_dir,
               strerror(errno));
      p->stage_dir[0] = 0;
      return LOOM_EIO;
    }
    chmod(p->stage_dir, 0700);
  }
  hyarn_resource *grown = realloc(p->res, (size_t)(p->nres + n) * sizeof *p->res);
  json_t *out = grown ? json_object() : NULL;
  if (grown) p->res = grown;
  if (!out) return LOOM_ENOMEM;
  for (int i = 0; i < n; i++) {
    bool arch = i >= s->nfiles;
    const spec_kv *kv = arch ? &s->archives[i - s->nfiles] : &s->files[i];
    const char *base = strrchr(kv->value, '/');
    base = base ? base + 1 : kv->value;
    char *dst = loom__asprintf("%s/%d-%s", p->stage_dir, i, base);
    char *name = loom__asprintf("loom-%s%d", arch ? "archive" : "file", i);
    loom__fs_info st;
    int rc = dst && name ? 0 : LOOM_ENOMEM;
    snprintf(why, sizeof why, "out of memory");
    if (rc == 0 && loom__fs_remote(kv->value)) {
      /* already on HDFS: localized from where it is, not copied */
      free(dst);
      dst = strdup(kv->value);
      if (!dst) rc = LOOM_ENOMEM;
    } else if (rc == 0 && remote) {
      struct stat ls;
      if (stat(kv->value, &ls) < 0) {
        snprintf(why, sizeof why, "%s", strerror(errno));
        rc = LOOM_EIO;
      } else {
        rc = S_ISDIR(ls.st_mode) ? loom__fs_put_tree(kv->value, dst, why, sizeof why)
                                 : loom__fs_put(kv->value, dst, true, why, sizeof why);
      }
    } else if (rc == 0) {
      char *cp[] = {"cp", "-a", "--", (char *)kv->value, dst, NULL};
      if (run_wait(cp) < 0) {
        snprintf(why, sizeof why, "cp failed");
        rc = LOOM_EIO;
      }
    }
    /* the size and time YARN checks are what the staging filesystem says */
    if (rc == 0) rc = loom__fs_stat(dst, &st, why, sizeof why);
    if (rc < 0) {
      snprintf(err, errlen, "cannot stage %s.%s (%s) into %s for YARN: %s",
               arch ? "archives" : "files", kv->key, kv->value, p->stage_dir, why);
      free(dst);
      free(name);
      json_decref(out);
      return rc == LOOM_ENOMEM ? rc : LOOM_EIO;
    }
    hyarn_resource *r = &p->res[p->nres++];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->path = dst;
    r->size = (int64_t)st.size;
    r->mtime_ms = st.mtime_ms;
    r->archive = arch;
    json_object_set_new(out, kv->key, json_pack("{s:s}", "cwd", name));
  }
  *files = out;
  return 0;
}

/* Removes the staging directory: YARN has its own copies in the
 * containers' directories, and the job is over. */
static void yarn_unstage(backend *b) {
  ypriv *p = b->priv;
  if (!p->stage_dir[0]) return;
  char why[1024];
  int rc = loom__fs_remove(p->stage_dir, true, why, sizeof why);
  if (rc < 0 && rc != LOOM_ENOENT)
    loom__log(LOOM_LOG_WARN, "yarn", "could not remove the staging directory: %s", why);
  p->stage_dir[0] = 0;
}

/* The binary every task's agent runs: loom's own executable, staged in
 * the per-user cache (ship.c), or handed down by the client to a managed
 * application master, localized into each container as ./loom. */
static int yarn_agent_exe(backend *b, const char *self, char *exe, size_t exelen, char *err,
                          size_t errlen) {
  ypriv *p = b->priv;
  hyarn_resource r;
  yarn_ship_info info;
  int rc = yarn_ship(self, &r, &info, err, errlen);
  if (rc < 0) return rc;
  hyarn_resource *grown = realloc(p->res, (size_t)(p->nres + 1) * sizeof *p->res);
  if (!grown) {
    free((char *)r.name), free((char *)r.path);
    return LOOM_ENOMEM;
  }
  p->res = grown;
  p->res[p->nres++] = r;
  snprintf(exe, exelen, "./%s", YARN_SHIP_NAME);
  char say[PATH_MAX + 256];
  if (info.inherited)
    snprintf(say, sizeof say, "loom's executable for the containers: %s (staged by the client)",
             r.path);
  else
    snprintf(say, sizeof say, "loom's executable for the containers: %s (%s, %llu ms)", r.path,
             info.uploaded ? "uploaded" : "cached already", (unsigned long long)info.ms);
  pthread_mutex_lock(&p->mu);
  push_note(p, -1, "binary_shipped",
            json_pack("{s:s, s:s, s:I, s:I, s:I, s:b}", "path", r.path, "sha256", info.sha, "size",
                      (json_int_t)r.size, "uploaded", (json_int_t)info.uploaded, "ms",
                      (json_int_t)info.ms, "inherited", info.inherited),
            say);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

/* YARN gives each container its own CPUs and GPUs: nothing to place here. */
static void yarn_place(backend *b, int task_id, const spec_role *r, char *cpus, size_t cpuslen,
                       char *gpus, size_t gpuslen) {
  cpus[0] = gpus[0] = 0;
}

static int yarn_launch(backend *b, int task_id, char *const *argv, char *const *env, char *err,
                       size_t errlen) {
  ypriv *p = b->priv;
  loom__buf cmd;
  loom__buf_init(&cmd, 1 << 20);
  loom__buf_printf(&cmd, "exec");
  for (int i = 0; argv[i]; i++) {
    loom__buf_add(&cmd, " ", 1);
    hyarn_shell_quote(&cmd, argv[i]);
  }
  /* <LOG_DIR>: the container's log directory, which the NodeManager
   * fills in; its stderr's tail comes back in YARN's diagnostics */
  loom__buf_printf(&cmd, " 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr");
  int n = 0;
  while (env[n]) n++;
  char **e = calloc((size_t)n + 1, sizeof *e);
  char *c = cmd.p ? strndup(cmd.p, cmd.len) : NULL;
  loom__buf_free(&cmd);
  const char *secret = NULL;
  for (int i = 0, k = 0; e && i < n; i++) {
    /* the job's secret goes in the container's credentials, never its
     * environment: the NodeManager writes the environment into
     * launch_container.sh, which log aggregation uploads and its web UI
     * shows; the credentials go to the container's private
     * container_tokens (HADOOP_TOKEN_FILE_LOCATION), which the agent
     * reads */
    if (!strncmp(env[i], "LOOM_SECRET=", 12)) {
      secret = env[i] + 12;
      continue;
    }
    /* the NodeManager sets these itself (and each container's
     * credentials file: a managed AM's own is not its tasks'); the
     * managed AM's own markers (managed, the binary its client staged,
     * its job's published copy, the client's job directory) are not the
     * agents' */
    if (yarn_nm_sets_itself(env[i]) || !strncmp(env[i], "HADOOP_TOKEN_FILE_LOCATION=", 27) ||
        !strncmp(env[i], YARN_MANAGED_ENV "=", strlen(YARN_MANAGED_ENV) + 1) ||
        !strncmp(env[i], YARN_SHIP_ENV "=", strlen(YARN_SHIP_ENV) + 1) ||
        !strncmp(env[i], YARN_JOB_ENV "=", strlen(YARN_JOB_ENV) + 1) ||
        !strncmp(env[i], YARN_CLIENT_DIR_ENV "=", strlen(YARN_CLIENT_DIR_ENV) + 1))
      continue;
    if (!(e[k++] = strdup(env[i]))) break;
  }
  uint8_t *creds = NULL;
  size_t ncreds = 0;
  int crc = 0;
  if (secret) {
    hyarn_cred_secret cs = {HYARN_CREDS_JOB_SECRET, (const uint8_t *)secret, strlen(secret)};
    crc = hyarn_creds_encode(&cs, 1, &creds, &ncreds);
  }
  pthread_mutex_lock(&p->mu);
  ytask *t = &p->t[task_id];
  int rc = 0;
  if (!e || !c || crc == LOOM_ENOMEM) {
    rc = LOOM_ENOMEM;
  } else if (crc < 0) {
    snprintf(err, errlen, "the job's secret does not fit in a container's credentials");
    rc = LOOM_EBACKEND;
  } else if (p->gone) {
    snprintf(err, errlen, "YARN ended application %s: no container can start",
             hyarn_am_app_id(p->am));
    rc = LOOM_EBACKEND;
  } else {
    if (t->st == Y_WANT && t->asked) t->withdraw = true;
    if (t->st == Y_HELD) {
      push_release(p, &t->c);
      t->has_c = false;
    }
    free(t->command);
    free_env(t->env);
    t->command = c;
    t->env = e;
    c = NULL;
    e = NULL;
    if (creds && !p->creds) {
      p->creds = creds;
      p->ncreds = ncreds;
      creds = NULL;
    }
    t->gen++;
    t->asked = false;
    t->st = Y_WANT;
    t->t_want = loom__now_ms();
    pthread_cond_signal(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  free(c);
  free_env(e);
  free(creds);
  return rc;
}

static void yarn_signal(backend *b, int task_id, int sig) {
  ypriv *p = b->priv;
  pthread_mutex_lock(&p->mu);
  ytask *t = &p->t[task_id];
  if (t->st == Y_RUNNING) {
    t->stop = true; /* the NodeManager sends SIGTERM, then SIGKILL */
  } else if (t->st == Y_WANT || t->st == Y_HELD) {
    if (t->st == Y_WANT) t->withdraw = t->asked;
    if (t->st == Y_HELD) {
      push_release(p, &t->c);
      t->has_c = false;
    }
    t->st = Y_IDLE;
    push_exit(p, task_id, 0, sig, "stopped before YARN started its container", false);
  }
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static const char *yarn_host(backend *b, int task_id) { return NULL; }

/* Agents run on the NodeManagers' hosts: the coordinator listens on the
 * address this host reaches the ResourceManager from. */
static void yarn_coord_address(char *bind, size_t bindlen, char *adv, size_t advlen) {
  hyarn_rms rms;
  char err[1024];
  loom__strlcpy(bind, "127.0.0.1", bindlen);
  loom__strlcpy(adv, "127.0.0.1", advlen);
  if (hyarn_find_rm(NULL, &rms, err, sizeof err) < 0) return;
  struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", rms.rm[0].port);
  if (getaddrinfo(rms.rm[0].host, port, &hints, &res) != 0) return;
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char ip[INET6_ADDRSTRLEN];
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
      getnameinfo((struct sockaddr *)&ss, sl, ip, sizeof ip, NULL, 0, NI_NUMERICHOST) == 0) {
    loom__strlcpy(bind, ip, bindlen);
    loom__strlcpy(adv, ip, advlen);
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
}

/* Unregisters with the job's outcome; the RM then ends what is left. */
static void yarn_finish(backend *b, int exit_status, const char *why) {
  ypriv *p = b->priv;
  pthread_mutex_lock(&p->mu);
  p->quit = true;
  p->async_live = false;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (p->th_started) pthread_join(p->th, NULL);
  p->th_started = false;
  /* the job's end where the client reads it, before YARN says it ended */
  yarn_pub_sync(p->pub, true);
  if (!p->am || p->gone) return;
  char err[2048];
  int st = exit_status == 0 ? 0 : exit_status == 130 ? 2 : 1; /* 130: interrupted, killed */
  if (hyarn_am_finish(p->am, st, why, err, sizeof err) < 0) {
    loom__log(LOOM_LOG_WARN, "yarn", "%s; killing the application instead", err);
    hyarn_am_free(p->am, true);
    p->am = NULL;
  }
}

static void yarn_destroy(backend *b) {
  ypriv *p = b->priv;
  if (!p) {
    free(b);
    return;
  }
  if (p->th_started) yarn_finish(b, 3, "the coordinator stopped");
  hyarn_am_free(p->am, true);
  for (int i = 0; i < p->ntasks; i++) {
    free(p->t[i].command);
    free_env(p->t[i].env);
    hyarn_container_free(&p->t[i].c);
  }
  for (int i = 0; i < p->nrelease; i++) hyarn_container_free(&p->release[i]);
  for (int i = 0; i < p->nres; i++) free((char *)p->res[i].name), free((char *)p->res[i].path);
  free(p->res);
  free(p->creds);
  free(p->release);
  for (int i = 0; i < p->nex; i++) json_decref(p->ex[i].note);
  free(p->ex);
  free(p->t);
  free(p->role);
  yarn_pub_free(p->pub);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p);
  free(b);
}

const backend_ops loom__backend_yarn = {
    .name = "yarn",
    .launcher = "the YARN container",
    .tracks_processes = true,
    .exit_explains_loss = true,
    .enforces_memory = true,
    .requeues = true,
    .submit_detached_only = true,
    .submit = yarn_submit,
    .job_state = yarn_job_state,
    .cancel = yarn_cancel,
    .check = yarn_check,
    .probe = yarn_probe,
    .coord_address = yarn_coord_address,
    .create = yarn_create,
    .place = yarn_place,
    .launch = yarn_launch,
    .signal = yarn_signal,
    .host = yarn_host,
    .stage_files = yarn_stage,
    .agent_exe = yarn_agent_exe,
    .localizes_remote_files = true,
    .unstage_files = yarn_unstage,
    .finish = yarn_finish,
    .destroy = yarn_destroy,
};
