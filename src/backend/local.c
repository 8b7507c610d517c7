/* local.c: the local backend: every agent is a child process of the
 * coordinator on this machine, in its own session (so a Ctrl-C on the
 * terminal reaches the coordinator, which stops the job in order).
 *
 * An agent the coordinator SIGKILLs (lost: hung or stopped; or its task
 * did not stop in time) cannot stop its task: the task's guard and its
 * parent-death signal do, an instant later. So the backend notes the
 * sessions of the agent's children before the kill, and reports the
 * agent's end only once nothing of those sessions is left: the job is
 * not over while a process of it still runs. */
#include "backend/backend.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOCAL_MAX_SIDS 16
#define LOCAL_REAP_MS 10000 /* how long the end of a killed agent's sessions is awaited */

typedef struct {
  uv_process_t proc;
  backend *b;
  int task_id;
  bool running;
  int sids[LOCAL_MAX_SIDS]; /* its tasks' sessions, noted when it was SIGKILLed */
  int nsids;
} local_agent;

/* A killed agent's end, held back until its tasks' sessions are empty. */
typedef struct local_reap {
  uv_timer_t timer;
  backend *b;
  int task_id, sig;
  int64_t status;
  int sids[LOCAL_MAX_SIDS];
  int nsids;
  uint64_t deadline_ms;
  struct local_reap *next;
} local_reap;

typedef struct {
  local_agent **agents;       /* task id -> its running agent, or NULL */
  int cpu_cursor, gpu_cursor; /* placement: the next of this machine's CPUs and GPUs */
  local_reap *reaps;          /* ends held back */
} local_priv;

static int local_create(backend *b, const spec_job *s, int ntasks) {
  local_priv *pr = calloc(1, sizeof *pr);
  if (!pr || !(pr->agents = calloc((size_t)ntasks + 1, sizeof *pr->agents))) {
    free(pr);
    return LOOM_ENOMEM;
  }
  b->priv = pr;
  return 0;
}

/* Every task is on this machine: its CPUs and GPUs are handed out
 * round-robin over this machine's. */
static void local_place(backend *b, int task_id, const spec_role *r, char *cpus, size_t cpuslen,
                        char *gpus, size_t gpuslen) {
  local_priv *pr = b->priv;
  loom__backend_round_robin(&pr->cpu_cursor, &pr->gpu_cursor, r, cpus, cpuslen, gpus, gpuslen);
}

static int local_check(const spec_job *s, char *err, size_t errlen) {
  int cpus = backend_local_cpus(), gpus = backend_local_gpus();
  uint64_t mem = backend_local_memory();
  for (int i = 0; i < s->nroles; i++) {
    const spec_role *r = &s->roles[i];
    if (r->vcores > cpus) {
      snprintf(err, errlen,
               "role '%s' asks for %d vcores per task; this machine has %d "
               "cores: lower roles.%s.vcores to at most %d",
               r->name, r->vcores, cpus, r->name, cpus);
      return LOOM_ERESOURCE;
    }
    if (r->memory > mem) {
      snprintf(err, errlen,
               "role '%s' asks for %.1f GiB of memory per task; this machine "
               "has %.1f GiB: lower roles.%s.memory",
               r->name, (double)r->memory / 1073741824.0, (double)mem / 1073741824.0, r->name);
      return LOOM_ERESOURCE;
    }
    if (r->gpus > gpus) {
      snprintf(err, errlen,
               "role '%s' asks for %d gpus per task; this machine has %d: "
               "lower roles.%s.gpus or use a cluster with GPUs",
               r->name, r->gpus, gpus, r->name);
      return LOOM_ERESOURCE;
    }
  }
  return 0;
}

static int local_probe(char *msg, size_t len) {
  snprintf(msg, len, "local: %d cores, %.1f GiB memory, %d GPUs", backend_local_cpus(),
           (double)backend_local_memory() / 1073741824.0, backend_local_gpus());
  return 0;
}

static void local_closed(uv_handle_t *h) { free(h->data); }

/* ---- a killed agent's sessions ------------------------------------------ */
typedef struct {
  const int *sids;
  int nsids, left;
} sweep_arg;

static void sweep_one(int pid, const loom__pstat *st, void *arg) {
  sweep_arg *w = arg;
  if (st->state == 'Z' || st->state == 'X') return;
  for (int i = 0; i < w->nsids; i++)
    if (st->sid == w->sids[i]) {
      kill(pid, SIGKILL);
      w->left++;
      return;
    }
}

/* SIGKILLs what is left of the sessions; how many processes were left. */
static int sweep(const int *sids, int nsids) {
  sweep_arg w = {sids, nsids, 0};
  loom__proc_each(sweep_one, &w);
  return w.left;
}

static void note_child(int pid, const loom__pstat *st, void *arg) {
  local_agent *a = arg;
  /* the agent starts each process of its task as a session leader */
  if (st->ppid != a->proc.pid || st->sid != pid || st->state == 'Z') return;
  for (int i = 0; i < a->nsids; i++)
    if (a->sids[i] == pid) return;
  if (a->nsids < LOCAL_MAX_SIDS) a->sids[a->nsids++] = pid;
}

static void reap_closed(uv_handle_t *h) {
  local_reap *r = h->data;
  local_priv *pr = r->b->priv;
  for (local_reap **p = &pr->reaps; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  free(r);
}

static void reap_tick(uv_timer_t *tm) {
  local_reap *r = tm->data;
  int left = sweep(r->sids, r->nsids);
  if (left && loom__now_ms() < r->deadline_ms) return;
  if (left)
    loom__log(LOOM_LOG_WARN, "local",
              "%d process(es) of a killed agent's task still alive after %d s of SIGKILL", left,
              LOCAL_REAP_MS / 1000);
  uv_timer_stop(tm);
  r->b->on_exit(r->b->arg, r->task_id, r->status, r->sig, NULL, false);
  uv_close((uv_handle_t *)tm, reap_closed);
}

static void local_exited(uv_process_t *p, int64_t status, int sig) {
  local_agent *a = p->data;
  a->running = false;
  backend *b = a->b;
  local_priv *pr = b->priv;
  int id = a->task_id;
  pr->agents[id] = NULL;
  local_reap *r = a->nsids && sweep(a->sids, a->nsids) ? calloc(1, sizeof *r) : NULL;
  if (r && uv_timer_init(b->loop, &r->timer) == 0) {
    r->timer.data = r;
    r->b = b;
    r->task_id = id;
    r->status = status;
    r->sig = sig;
    memcpy(r->sids, a->sids, sizeof r->sids);
    r->nsids = a->nsids;
    r->deadline_ms = loom__now_ms() + LOCAL_REAP_MS;
    r->next = pr->reaps;
    pr->reaps = r;
    uv_timer_start(&r->timer, reap_tick, 10, 10);
    uv_close((uv_handle_t *)p, local_closed);
    return;
  }
  free(r);
  uv_close((uv_handle_t *)p, local_closed);
  b->on_exit(b->arg, id, status, sig, NULL, false);
}

static int local_launch(backend *b, int task_id, char *const *argv, char *const *env, char *err,
                        size_t errlen) {
  local_agent *a = calloc(1, sizeof *a);
  if (!a) return LOOM_ENOMEM;
  a->b = b;
  a->task_id = task_id;
  a->proc.data = a;
  uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
                                   {.flags = UV_INHERIT_FD, .data.fd = 2},
                                   {.flags = UV_INHERIT_FD, .data.fd = 2}};
  uv_process_options_t o = {.exit_cb = local_exited,
                            .file = argv[0],
                            .args = (char **)argv,
                            .env = (char **)env,
                            .flags = UV_PROCESS_DETACHED,
                            .stdio_count = 3,
                            .stdio = stdio};
  int rc = uv_spawn(b->loop, &a->proc, &o);
  if (rc < 0) {
    snprintf(err, errlen, "cannot start the agent %s: %s", argv[0], uv_strerror(rc));
    uv_close((uv_handle_t *)&a->proc, local_closed);
    return LOOM_EBACKEND;
  }
  a->running = true;
  ((local_priv *)b->priv)->agents[task_id] = a;
  return 0;
}

static void local_signal(backend *b, int task_id, int sig) {
  local_agent *a = ((local_priv *)b->priv)->agents[task_id];
  if (!a || !a->running) return;
  if (sig == SIGKILL) loom__proc_each(note_child, a); /* before: the kill orphans them */
  uv_process_kill(&a->proc, sig);
}

static const char *local_host(backend *b, int task_id) { return "127.0.0.1"; }

/* Agents run on this host: the coordinator's own executable, as it is. */
static int local_agent_exe(backend *b, const char *self, char *exe, size_t exelen, char *err,
                           size_t errlen) {
  if (strlen(self) >= exelen) {
    snprintf(err, errlen, "the path of loom's executable is too long: %s", self);
    return LOOM_ERANGE;
  }
  loom__strlcpy(exe, self, exelen);
  return 0;
}

static void local_destroy(backend *b) {
  local_priv *pr = b->priv;
  while (pr->reaps) { /* closed by the coordinator's last walk over its loop */
    local_reap *n = pr->reaps->next;
    free(pr->reaps);
    pr->reaps = n;
  }
  free(pr->agents);
  free(pr);
  free(b);
}

const backend_ops loom__backend_local = {
    .name = "local",
    .tracks_processes = true,
    .same_host = true,
    .check = local_check,
    .probe = local_probe,
    .create = local_create,
    .place = local_place,
    .launch = local_launch,
    .signal = local_signal,
    .host = local_host,
    .agent_exe = local_agent_exe,
    .destroy = local_destroy,
};
