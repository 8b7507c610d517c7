/* yarn.c: the YARN backend's coordinator half and its table of
 * operations. The client half (`loom check`, `loom submit`, status, kill)
 * is client.c; the capacity checks are capacity.c.
 *
 * The coordinator half: the coordinator is the application master
 * (src/yarn/am.c), unmanaged under `loom run`, managed in its container
 * under `loom submit`. Its scheduler thread (sched.c) heartbeats the
 * scheduler, gang-starts containers and reports their ends; this file
 * stages the job's files, builds each task's container (its command,
 * environment and resources) and hands it to that thread. A role maps
 * to one container a task: vcores -> virtual cores (at least 1), memory ->
 * MB (rounded up; LOOM_YARN_DEFAULT_MB when unset), gpus -> yarn.io/gpu,
 * label -> node label expression, queue -> queue ("default" when unset). */
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
  yarn_push_note(p, -1, "yarn_application",
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
  yarn_push_note(p, -1, "binary_shipped",
                 json_pack("{s:s, s:s, s:I, s:I, s:I, s:b}", "path", r.path, "sha256", info.sha,
                           "size", (json_int_t)r.size, "uploaded", (json_int_t)info.uploaded, "ms",
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
    /* only what a container takes (yarn_env_passes: the NodeManager
     * sets the rest itself, each container's credentials file included:
     * a managed AM's own is not its tasks'); the managed AM's own markers
     * (managed, the binary its client staged, its job's published copy,
     * the client's job directory) are not the agents' */
    if (!yarn_env_passes(env[i]) ||
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
      yarn_push_release(p, &t->c);
      t->has_c = false;
    }
    free(t->command);
    yarn_free_env(t->env);
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
  yarn_free_env(e);
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
      yarn_push_release(p, &t->c);
      t->has_c = false;
    }
    t->st = Y_IDLE;
    yarn_push_exit(p, task_id, 0, sig, "stopped before YARN started its container", false);
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
    yarn_free_env(p->t[i].env);
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
