/* client.c: the YARN backend's client half: `loom check --backend yarn`
 * asks the ResourceManager (found through HADOOP_CONF_DIR, as Hadoop's
 * clients find it) over Hadoop IPC for its metrics, nodes, node labels,
 * resource types, and reports them; `loom run` and `loom submit` refuse,
 * before anything is submitted, a spec the cluster can never run (an
 * unknown or stopped queue, a node label the cluster does not have or the
 * queue may not use, GPUs on a cluster without yarn.io/gpu, a task larger
 * than every RUNNING node of its partition: YARN itself would queue such
 * an application forever). `loom submit` hands the coordinator to YARN as
 * a managed application master (yarn_submit); status and kill go through
 * the ResourceManager.
 *
 * The coordinator half (the application master's thread) is in yarn.c;
 * the capacity checks, pure, in capacity.c. */
#include "backend/yarn/yarn_int.h"

#include "backend/yarn/capacity.h"
#include "yarn/submit.h"
#include "yarn/yarn.h"
#include "jobdir/jobdir.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The managed application master's container. */
#define YARN_AM_MB 256

bool yarn_env_passes(const char *kv) {
  static const char *const pass[] = {
      "LOOM_", "HADOOP_USER_NAME=", "ASAN_OPTIONS=", "UBSAN_OPTIONS=", "LSAN_OPTIONS=", NULL};
  for (int i = 0; pass[i]; i++)
    if (!strncmp(kv, pass[i], strlen(pass[i]))) return true;
  return false;
}

int yarn_check(const spec_job *s, char *err, size_t errlen) {
  const char *queue = s->queue ? s->queue : "default";
  hyarn_cluster c;
  char why[4096];
  if (hyarn_cluster_get(NULL, queue, YARN_RPC_TIMEOUT_MS, &c, why, sizeof why) < 0) {
    snprintf(err, errlen, "cannot ask YARN for its nodes: %s", why);
    return LOOM_EBACKEND;
  }
  int rc = yarn_capacity_check(&c, s, queue, (long long)loom__tun(LOOM_TUN_YARN_DEFAULT_MB), err,
                               errlen);
  hyarn_cluster_free(&c);
  return rc;
}

int yarn_probe(char *msg, size_t len) {
  hyarn_cluster c;
  char why[4096];
  if (hyarn_cluster_get(NULL, NULL, YARN_RPC_TIMEOUT_MS, &c, why, sizeof why) < 0) {
    snprintf(msg, len, "yarn: %s", why);
    return -1;
  }
  int running = 0, vcores = 0;
  long long mb = 0, gpus = 0;
  for (int i = 0; i < c.nnodes; i++) {
    if (!yarn_node_running(&c.nodes[i])) continue;
    running++;
    mb += c.nodes[i].memory_mb;
    vcores += c.nodes[i].vcores;
    gpus += c.nodes[i].gpus;
  }
  char labels[512];
  yarn_labels_desc(&c, labels, sizeof labels);
  size_t off = (size_t)snprintf(
      msg, len,
      "yarn: ResourceManager %s (%s): %d of %d nodes RUNNING, %lld MB, %d vcores, %lld GPUs%s; "
      "node labels: %s",
      c.rm, c.conf_file, running, c.nnodes, mb, vcores, gpus,
      c.gpu_type ? "" : " (no " HYARN_GPU " resource type)", labels);
  for (int i = 0; i < c.nnodes && off < len; i++) {
    if (i == YARN_NODES_NAMED) {
      off += (size_t)snprintf(msg + off, len - off, "\n     and %d more nodes", c.nnodes - i);
      break;
    }
    char d[512];
    yarn_node_desc(&c.nodes[i], d, sizeof d);
    off += (size_t)snprintf(msg + off, len - off, "\n     node %s", d);
  }
  hyarn_cluster_free(&c);
  if (!running) {
    if (off < len) snprintf(msg + off, len - off, "\n     no RUNNING NodeManager: nothing can run");
    return -1;
  }
  return 0;
}

/* ---- the client half of a managed application master ------------------ */

/* `loom submit`: the coordinator runs in a container YARN starts (and
 * starts again, up to the spec's retries + 1 attempts within the
 * cluster's yarn.resourcemanager.am.max-attempts, if it dies), from the
 * copy of exe YARN localized into it (ship.c), which it hands on to its
 * tasks' containers without staging it again (YARN_SHIP_ENV). Its job
 * directory is its own, ./<id> in the container, made from the spec and
 * the secret staged in the job's published copy (jobsync.c); what it
 * writes comes back to the client's job directory through that copy. Its
 * output goes to the container's log directory (coordinator.log, which
 * `yarn logs` shows), linked from its job directory. */
int yarn_submit(const spec_job *s, const char *job_id, const char *job_dir, const char *exe,
                backend_job *job, char *err, size_t errlen) {
  memset(job, 0, sizeof *job);
  char url[PATH_MAX];
  if (yarn_job_url(job_id, url, sizeof url) < 0) {
    snprintf(err, errlen, "the published copy of job %s is too long a path", job_id);
    return LOOM_EBACKEND;
  }
  hyarn_resource res[3];
  yarn_ship_info info;
  int rc = yarn_ship(exe, &res[0], &info, err, errlen);
  if (rc < 0) return rc;
  if ((rc = yarn_job_stage(job_dir, url, &res[1], err, errlen)) < 0) {
    free((char *)res[0].name);
    free((char *)res[0].path);
    return rc;
  }
  char *ship_env = yarn_ship_env(&res[0]);
  char *job_env = loom__asprintf("%s=%s", YARN_JOB_ENV, url);
  char *client_env = loom__asprintf("%s=%s", YARN_CLIENT_DIR_ENV, job_dir);
  const char *spec = jobdir_name(JOBDIR_SPEC), *secret = jobdir_name(JOBDIR_SECRET);
  const char *clog = jobdir_name(JOBDIR_COORD_LOG);
  loom__buf cmd;
  loom__buf_init(&cmd, 1 << 20);
  /* the id is a job id: letters, digits, '_' and '-', nothing to quote */
  loom__buf_printf(&cmd,
                   "umask 077 && mkdir -p %s && cp %s %s %s/ && ln -sf <LOG_DIR>/%s %s/%s && "
                   "exec ./" YARN_SHIP_NAME " coordinator %s --backend yarn >><LOG_DIR>/%s 2>&1",
                   job_id, spec, secret, job_id, clog, job_id, clog, job_id, clog);
  extern char **environ;
  int n = 0;
  while (environ[n]) n++;
  char **env = calloc((size_t)n + 5, sizeof *env);
  int k = 0;
  /* what of the client's environment a container takes (yarn_env_passes:
   * HADOOP_CONF_DIR, for one, is the node's, which the NodeManager hands
   * on). No LOOM_SECRET (a client run inside a task has one): the
   * environment is written into launch_container.sh, which log
   * aggregation uploads; the AM's secret is the staged job's */
  for (int i = 0; env && i < n; i++)
    if (yarn_env_passes(environ[i]) && strncmp(environ[i], "LOOM_SECRET=", 12) &&
        strncmp(environ[i], YARN_SHIP_ENV "=", strlen(YARN_SHIP_ENV) + 1) &&
        strncmp(environ[i], YARN_JOB_ENV "=", strlen(YARN_JOB_ENV) + 1) &&
        strncmp(environ[i], YARN_CLIENT_DIR_ENV "=", strlen(YARN_CLIENT_DIR_ENV) + 1))
      env[k++] = environ[i];
  if (env) env[k++] = YARN_MANAGED_ENV "=1";
  if (env) env[k++] = ship_env;
  if (env) env[k++] = job_env;
  if (env) env[k++] = client_env;
  char app[64] = "", why[4096] = "";
  rc = env && cmd.p && ship_env && job_env && client_env
           ? hyarn_submit_managed(NULL, s->name, s->queue, cmd.p, env, res, 3, YARN_AM_MB,
                                  s->retries + 1, YARN_RPC_TIMEOUT_MS, app, why, sizeof why)
           : LOOM_ENOMEM;
  free(env);
  free(ship_env);
  free(job_env);
  free(client_env);
  for (int i = 0; i < 3; i++) free((char *)res[i].name), free((char *)res[i].path);
  loom__buf_free(&cmd);
  if (rc < 0) {
    snprintf(err, errlen, "YARN refused the application: %s", why[0] ? why : loom_strerror(rc));
    return rc == LOOM_ERESOURCE ? rc : LOOM_EBACKEND;
  }
  hyarn_rms rms;
  const char *conf = hyarn_find_rm(NULL, &rms, why, sizeof why) == 0 ? rms.conf_dir : "";
  json_t *j = json_pack("{s:s, s:s, s:s, s:s}", "application", app, "conf_dir", conf, "job", job_id,
                        "published", url);
  char *js = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  rc = js ? jobdir_write(job_dir, JOBDIR_YARN_JSON, js, strlen(js), false) : LOOM_ENOMEM;
  free(js);
  loom__strlcpy(job->id, app, sizeof job->id);
  job->state = BACKEND_JOB_PENDING;
  snprintf(job->what, sizeof job->what, "YARN application %s", app);
  if (rc < 0) snprintf(err, errlen, "cannot write yarn.json in %s (%s is submitted)", job_dir, app);
  return rc;
}

/* The application, configuration directory and published copy (url, ""
 * when none) of a job directory. */
static int app_of(const char *job_dir, char *app, size_t applen, char *conf, size_t conflen,
                  char *url, size_t urllen) {
  json_t *j = jobdir_read_json(job_dir, JOBDIR_YARN_JSON, 1 << 20);
  const char *a = j ? json_string_value(json_object_get(j, "application")) : NULL;
  const char *c = j ? json_string_value(json_object_get(j, "conf_dir")) : NULL;
  const char *u = j ? json_string_value(json_object_get(j, "published")) : NULL;
  int rc = a && *a ? 0 : LOOM_ENOENT;
  if (rc == 0) {
    loom__strlcpy(app, a, applen);
    loom__strlcpy(conf, c ? c : "", conflen);
    loom__strlcpy(url, u ? u : "", urllen);
  }
  json_decref(j);
  return rc;
}

int yarn_job_state(const char *job_dir, backend_job *job) {
  memset(job, 0, sizeof *job);
  char conf[1024], url[PATH_MAX], state[16], final[16], diag[256], err[1024];
  if (app_of(job_dir, job->id, sizeof job->id, conf, sizeof conf, url, sizeof url) < 0) {
    /* a new attempt of a managed application master, in its own job
     * directory (./<id>): what the previous one published */
    const char *pub = getenv(YARN_MANAGED_ENV) ? getenv(YARN_JOB_ENV) : NULL;
    const char *id = pub ? strrchr(pub, '/') : NULL, *base = strrchr(job_dir, '/');
    if (id && !strcmp(id + 1, base ? base + 1 : job_dir)) yarn_job_pull(job_dir, pub, true);
    return LOOM_ENOENT;
  }
  /* what the application master published, into the client's directory */
  if (url[0]) yarn_job_pull(job_dir, url, false);
  int rc = hyarn_app_report(conf[0] ? conf : NULL, job->id, YARN_RPC_TIMEOUT_MS, state, final, diag,
                            sizeof diag, err, sizeof err);
  if (rc < 0) {
    job->state = BACKEND_JOB_UNKNOWN;
    snprintf(job->what, sizeof job->what, "YARN application %s: %.160s", job->id,
             rc == LOOM_ENOENT ? "not known to the ResourceManager (any more)" : err);
    return 0;
  }
  loom__strlcpy(job->native, state, sizeof job->native);
  if (!strcmp(state, "RUNNING"))
    job->state = BACKEND_JOB_RUNNING;
  else if (!strcmp(state, "FINISHED") || !strcmp(state, "FAILED") || !strcmp(state, "KILLED"))
    job->state = BACKEND_JOB_ENDED;
  else
    job->state = BACKEND_JOB_PENDING;
  if (job->state == BACKEND_JOB_PENDING && strcmp(diag, "N/A"))
    loom__strlcpy(job->reason, diag, sizeof job->reason);
  snprintf(job->what, sizeof job->what, "YARN application %s is %s%s%s", job->id, state,
           job->state == BACKEND_JOB_ENDED ? " " : "",
           job->state == BACKEND_JOB_ENDED ? final : "");
  return 0;
}

int yarn_cancel(const char *job_dir, char *msg, size_t msglen) {
  char app[64], conf[1024], url[PATH_MAX], err[1024];
  if (app_of(job_dir, app, sizeof app, conf, sizeof conf, url, sizeof url) < 0) {
    snprintf(msg, msglen, "%s has no yarn.json: no YARN application to kill", job_dir);
    return LOOM_ENOENT;
  }
  if (hyarn_app_kill(conf[0] ? conf : NULL, app, "killed by loom kill", YARN_RPC_TIMEOUT_MS, err,
                     sizeof err) < 0) {
    snprintf(msg, msglen, "killing YARN application %s: %s", app, err);
    return LOOM_EBACKEND;
  }
  snprintf(msg, msglen, "killed YARN application %s", app);
  return 0;
}
