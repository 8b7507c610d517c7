/* yarn_int.h: what the YARN backend's files share: the client half
 * (client.c: `loom check`, `loom submit`, status and kill through the
 * ResourceManager) that the backend's table in yarn.c names, and the
 * bounds both halves use. Nothing outside src/backend/yarn includes it. */
#ifndef LOOM_BACKEND_YARN_INT_H
#define LOOM_BACKEND_YARN_INT_H

#include "backend/backend.h"
#include "yarn/am.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Connecting to the ResourceManager, and each call, give up after this
 * long: a check that fails, fails in seconds. */
#define YARN_RPC_TIMEOUT_MS 10000
/* Set in the environment of a managed application master's container. */
#define YARN_MANAGED_ENV "LOOM_YARN_MANAGED"

/* What every container gets loom's executable as (a LocalResource in its
 * directory, run as ./loom), and the variable in which the client hands
 * a managed application master what it staged: "<size> <mtime_ms> <url>". */
#define YARN_SHIP_NAME "loom"
#define YARN_SHIP_ENV "LOOM_YARN_SHIP"

/* What yarn_ship did, for the job's events. */
typedef struct {
  char sha[65];      /* the executable's SHA-256, hex ("" when inherited) */
  uint64_t uploaded; /* bytes written to the cache: 0 when it was there */
  uint64_t ms;       /* how long staging took */
  bool inherited;    /* taken from YARN_SHIP_ENV: staged by the client */
} yarn_ship_info;

/* Makes the loom executable self reachable by every NodeManager (ship.c):
 * staged once per content in the per-user cache, or, in a managed
 * application master, what the client staged (YARN_SHIP_ENV). Fills *r
 * (name YARN_SHIP_NAME and path malloc'ed, the caller frees them; size
 * and time as the cache's filesystem says; user_cache set). Blocks while
 * it uploads. Returns 0, or LOOM_EBACKEND / LOOM_ENOMEM with err filled. */
int yarn_ship(const char *self, hyarn_resource *r, yarn_ship_info *info, char *err, size_t errlen);
/* YARN_SHIP_ENV=... for r, malloc'ed; NULL when out of memory. */
char *yarn_ship_env(const hyarn_resource *r);

/* What a managed application master's environment names besides
 * YARN_MANAGED_ENV: the URL of its job's published copy (jobsync.c; its
 * last component is the job's id, and ./<id> in the container the
 * application master's job directory), and the client's job directory,
 * which it also writes where its node sees it. */
#define YARN_JOB_ENV "LOOM_YARN_JOB"
#define YARN_CLIENT_DIR_ENV "LOOM_YARN_CLIENT_DIR"

/* The URL of job id's published copy (jobsync.c): <fs.defaultFS>/user/
 * <user>/.loom/jobs/<id> when that is HDFS, else <loom home>/yarn-jobs/
 * <id>. LOOM_ERANGE when it does not fit. */
int yarn_job_url(const char *id, char *url, size_t len);
/* Makes the published copy url (0700) and stages the spec and the secret
 * of job_dir there; res gets them as the application master's
 * LocalResources (names and paths malloc'ed). 0, or LOOM_EBACKEND /
 * LOOM_ENOMEM with err. */
int yarn_job_stage(const char *job_dir, const char *url, hyarn_resource res[2], char *err,
                   size_t errlen);
/* Brings job directory dir up to date from the published copy url: each
 * file there whose size or time changed since it was last copied (none
 * when the application master writes dir itself). restore: a new
 * application master attempt's own directory: the state, events and logs
 * only. 0, or LOOM_EIO when a copy failed. */
int yarn_job_pull(const char *dir, const char *url, bool restore);
/* A managed application master's publisher: NULL when this process is
 * none (or out of memory). */
typedef struct yarn_pub yarn_pub;
yarn_pub *yarn_pub_open(void);
/* Publishes what changed: at most once a second unless final. */
void yarn_pub_sync(yarn_pub *p, bool final);
void yarn_pub_free(yarn_pub *p);

/* Whether kv (NAME=value), a variable of the client's (or the managed
 * application master's) environment, goes into a container: loom's own
 * (LOOM_*), HADOOP_USER_NAME and the sanitizers' options, nothing else. A
 * container runs on a node that is not the client's, and its environment
 * is written into launch_container.sh, which log aggregation uploads: the
 * client's KRB5CCNAME, PATH, credentials and the like stay here. A task's
 * variables are the spec's env (which travels in the task's assignment),
 * loom's and the NodeManager's (its env-whitelist: PATH, JAVA_HOME,
 * HADOOP_CONF_DIR, LANG, ... of the node). */
bool yarn_env_passes(const char *kv);

/* backend_ops' check, probe, submit, job_state and cancel (backend.h). */
int yarn_check(const spec_job *s, char *err, size_t errlen);
int yarn_probe(char *msg, size_t len);
int yarn_submit(const spec_job *s, const char *job_id, const char *job_dir, const char *exe,
                backend_job *job, char *err, size_t errlen);
int yarn_job_state(const char *job_dir, backend_job *job);
int yarn_cancel(const char *job_dir, char *msg, size_t msglen);

#endif
