/* taskenv.c: the environment each process of a task starts with: what
 * the agent got, less the variables loom sets, then LOOM_*, torchrun's
 * variables, TF_CONFIG and the limits for `loom __exec`. The variables
 * themselves come from plain values (agent_taskenv_set), which the unit
 * test checks against a table. See agent_int.h. */
#include "agent/agent_int.h"
#include "jobdir/jobdir.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the task's environment -------------------------------------------- */
static void env_set(envv *e, const char *k, const char *val) {
  size_t kl = strlen(k);
  for (int i = 0; i < e->n; i++)
    if (!strncmp(e->v[i], k, kl) && e->v[i][kl] == '=') {
      free(e->v[i]);
      e->v[i] = loom__asprintf("%s=%s", k, val);
      return;
    }
  if (e->n + 2 > e->cap) {
    e->cap = e->cap ? e->cap * 2 : 64;
    e->v = realloc(e->v, (size_t)e->cap * sizeof *e->v);
  }
  e->v[e->n++] = loom__asprintf("%s=%s", k, val);
  e->v[e->n] = NULL;
}

static void env_setf(envv *e, const char *k, const char *fmt, ...) LOOM__PRINTF(3, 4);
static void env_setf(envv *e, const char *k, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  env_set(e, k, buf);
}

static bool env_has(const envv *e, const char *k) {
  size_t kl = strlen(k);
  for (int i = 0; i < e->n; i++)
    if (!strncmp(e->v[i], k, kl) && e->v[i][kl] == '=') return true;
  return false;
}

static const char *env_get(const envv *e, const char *k) {
  size_t kl = strlen(k);
  for (int i = 0; i < e->n; i++)
    if (!strncmp(e->v[i], k, kl) && e->v[i][kl] == '=') return e->v[i] + kl + 1;
  return NULL;
}

void agent_env_free(envv *e) {
  for (int i = 0; i < e->n; i++) free(e->v[i]);
  free(e->v);
}

static const char *const STRIP[] = {
    "RANK",         "WORLD_SIZE",   "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT",  "TF_CONFIG",    "LOOM_RANK",  "LOOM_WORLD_SIZE",  "LOOM_LOCAL_RANK",
    "LOOM_CLUSTER", "LOOM_ROLE",    "LOOM_INDEX", "LOOM__PPID",       "LOOM__CPUS",
    "LOOM__MEM",    "LOOM__CGROUP", NULL};

void agent_taskenv_set(envv *e, const agent_taskenv *t) {
  const char *role = t->role;
  int index = t->index;
  int local = t->local;
  int procs = t->procs;
  env_set(e, "LOOM_ROLE", role);
  env_setf(e, "LOOM_INDEX", "%d", index);
  env_set(e, "LOOM_TASK", t->task);
  env_setf(e, "LOOM_ATTEMPT", "%d", t->attempt);
  env_set(e, "LOOM_JOB_ID", t->job_id);
  env_set(e, "LOOM_JOB_DIR", t->job_dir);
  env_set(e, "LOOM_HOST", t->host);
  env_setf(e, "LOOM_PORT", "%d", t->port);
  char *tbd = jobdir_apath(t->job_dir, JOBDIR_TENSORBOARD);
  if (tbd) env_set(e, "LOOM_TENSORBOARD_DIR", tbd);
  free(tbd);
  env_set(e, "LOOM_CLUSTER", t->cluster_s);
  env_setf(e, "LOOM_LOCAL_RANK", "%d", local);
  env_setf(e, "LOCAL_RANK", "%d", local);
  env_setf(e, "LOCAL_WORLD_SIZE", "%d", procs);
  int rank_base = t->rank_base;
  int world = t->world;
  env_setf(e, "LOOM_WORLD_SIZE", "%d", world); /* every role: ps shards count workers */
  env_setf(e, "LOOM_GENERATION", "%lld", t->generation);
  if (t->training) {
    int rank = rank_base + local;
    env_setf(e, "LOOM_RANK", "%d", rank);
    env_setf(e, "RANK", "%d", rank);
    env_setf(e, "WORLD_SIZE", "%d", world);
    env_setf(e, "GROUP_RANK", "%d", rank_base / (procs ? procs : 1));
    if (t->master_addr) env_set(e, "MASTER_ADDR", t->master_addr);
    if (t->has_master_port) env_setf(e, "MASTER_PORT", "%d", t->master_port);
  }
  /* TF_CONFIG: the cluster without evaluator/tensorboard, and this task. */
  json_t *tf = json_pack("{s:O, s:{s:s, s:i}}", "cluster", t->tf_cluster, "task", "type", role,
                         "index", index);
  char *tfs = tf ? json_dumps(tf, JSON_COMPACT) : NULL;
  if (tfs) env_set(e, "TF_CONFIG", tfs);
  free(tfs);
  json_decref(tf);
  /* GPUs: the devices the backend placed (local: round-robin); none at
   * all for a role without GPUs, whatever the host or cluster manager
   * left in the environment (a Slurm allocation's CUDA_VISIBLE_DEVICES, a
   * GPU node's); else (Slurm, YARN, Spark with "") what the step or
   * container was given. CUDA (so TensorFlow, PyTorch, JAX) reads
   * CUDA_VISIBLE_DEVICES when it starts; the empty string means none. */
  if (t->gpu_count == 0)
    env_set(e, "CUDA_VISIBLE_DEVICES", "");
  else if (*t->gpus)
    env_set(e, "CUDA_VISIBLE_DEVICES", t->gpus);
  env_setf(e, "LOOM__PPID", "%d", t->ppid);
  const char *cpus = t->cpus;
  if (*cpus) env_set(e, "LOOM__CPUS", cpus);
  int64_t mem = t->memory;
  if (t->cgroup[0])
    env_set(e, "LOOM__CGROUP", t->cgroup);
  else if (mem > 0)
    env_setf(e, "LOOM__MEM", "%lld", (long long)mem);
}

void agent_build_env(agent *a, envv *e, int local, const wire_cluster *cl, const char *cluster_s,
                     const json_t *tf_cluster) {
  extern char **environ;
  memset(e, 0, sizeof *e);
  for (char **p = environ; *p; p++) {
    bool skip = false;
    for (int s = 0; STRIP[s] && !skip; s++) {
      size_t l = strlen(STRIP[s]);
      skip = !strncmp(*p, STRIP[s], l) && (*p)[l] == '=';
    }
    if (skip) continue;
    const char *eq = strchr(*p, '=');
    if (!eq) continue;
    char *k = strndup(*p, (size_t)(eq - *p));
    env_set(e, k, eq + 1);
    free(k);
  }
  /* `loom` itself on the PATH, so `command: loom ps` works wherever the
   * binary is installed */
  char self[PATH_MAX], exe[PATH_MAX] = "";
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl > 0) {
    self[sl] = 0;
    loom__strlcpy(exe, self, sizeof exe);
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    const char *path = getenv("PATH");
    char *np = loom__asprintf("%s:%s", self, path && *path ? path : "/usr/bin:/bin");
    if (np) env_set(e, "PATH", np);
    free(np);
  }
  const char *key;
  json_t *v;
  json_object_foreach(a->as.env, key, v) env_set(e, key, json_string_value(v));
  /* the task's `loom` (the Python package's loom.binary(), `loom fs` in a
   * task) is the agent's own, wherever the spec's PATH points: on a node
   * that has no loom but the one shipped with the job */
  const char *lb = env_get(e, "LOOM_BIN");
  if (exe[0] && (!lb || !*lb)) env_set(e, "LOOM_BIN", exe);
  /* python: the environment unpacked in the task's directory, its bin/
   * first on the PATH (over the spec's PATH too) */
  const char *pyenv = json_string_value(json_object_get(a->as.env, "LOOM_PYTHON_ENV"));
  if (pyenv && *pyenv && pyenv[0] != '/' && !strstr(pyenv, "..")) {
    const char *wd = a->as.workdir ? a->as.workdir : ".", *cur = env_get(e, "PATH");
    char *np = wd[0] == '/' ? loom__asprintf("%s/%s/bin:%s", wd, pyenv, cur ? cur : "/usr/bin:/bin")
                            : loom__asprintf("%s/%s/%s/bin:%s", a->start_cwd, wd, pyenv,
                                             cur ? cur : "/usr/bin:/bin");
    if (np) env_set(e, "PATH", np);
    free(np);
  }
  /* the task's collectives (PyTorch's Gloo and TensorPipe, NCCL's
   * bootstrap) on the interface the task is published at, unless the spec
   * or the environment names one: left alone they take the address the
   * host's name resolves to (127.0.1.1 in Debian's /etc/hosts) or the
   * first interface, which may not reach the other tasks */
  static const char *const IFVARS[] = {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                                       "TP_SOCKET_IFNAME", NULL};
  for (int i = 0; a->iface[0] && IFVARS[i]; i++)
    if (!env_has(e, IFVARS[i])) env_set(e, IFVARS[i], a->iface);
  if (a->tmpdir[0]) env_set(e, "TMPDIR", a->tmpdir);
  const wire_assign *as = &a->as;
  /* a task joining a running elastic job gets its rank in the CLUSTER */
  bool rejoin = cl->has_rank_base;
  agent_taskenv t = {.role = as->role,
                     .index = (int)as->index,
                     .task = a->task,
                     .attempt = a->attempt,
                     .job_id = as->job_id,
                     .job_dir = as->job_dir,
                     .host = a->host,
                     .port = a->port,
                     .cluster_s = cluster_s,
                     .tf_cluster = tf_cluster,
                     .local = local,
                     .procs = a->nprocs,
                     .training = as->training,
                     .rank_base = (int)(rejoin ? cl->rank_base : as->rank_base),
                     .world = (int)(rejoin ? cl->world_size : as->world_size),
                     .generation = (long long)cl->generation,
                     .master_addr = cl->master_addr,
                     .has_master_port = cl->has_master_port,
                     .master_port = (int)cl->master_port,
                     .gpus = as->gpus,
                     .gpu_count = as->has_gpu_count ? (int)as->gpu_count : -1,
                     .cpus = as->cpus,
                     .cgroup = a->cgroup,
                     .memory = as->memory,
                     .ppid = (int)getpid()};
  agent_taskenv_set(e, &t);
}
