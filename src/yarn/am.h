/* am.h: a YARN application master in plain C structures, over Hadoop IPC
 * (blocking calls, each bounded): the application is submitted as an
 * unmanaged AM (the caller's process is the AM: no JVM, no AM
 * container), its AMRMToken read from the application report, the
 * scheduler spoken to over SASL DIGEST-MD5 with that token
 * (registerApplicationMaster, allocate, finishApplicationMaster), and
 * containers started and stopped on their NodeManagers with the NMTokens
 * the scheduler hands out (startContainers, stopContainers). The yarn
 * backend (src/backend/yarn/yarn.c) drives it from its own thread. */
#ifndef LOOM_YARN_AM_H
#define LOOM_YARN_AM_H

#include "core/core.h"

typedef struct hyarn_am hyarn_am;

/* Submits an application named name to queue (NULL: "default") of type
 * "LOOM" as an unmanaged AM, waits (at most timeout_ms) until the
 * ResourceManager accepts it and hands out its AMRMToken, then registers
 * with the scheduler. Returns 0 with *out, or LOOM_EBACKEND with err
 * saying which step failed and why (the application is killed if it was
 * submitted). */
int hyarn_am_start(const char *conf_dir, const char *name, const char *queue, int timeout_ms,
                   hyarn_am **out, char *err, size_t errlen);
/* "application_1764200000000_0001", the attempt's id, the RM's web UI
 * address of the application. */
const char *hyarn_am_app_id(const hyarn_am *am);
const char *hyarn_am_attempt_id(const hyarn_am *am);
const char *hyarn_am_tracking(const hyarn_am *am);
/* The URL every later registration gives the ResourceManager as the
 * application's tracking URL (its web UI and proxy link to it; everyone
 * who can list applications sees it: no secret in it); "" or NULL: none.
 * Call before hyarn_am_start or hyarn_am_attach. */
void hyarn_am_set_tracking_url(const char *url);
/* The largest container the scheduler grants (from registration). */
void hyarn_am_max(const hyarn_am *am, int64_t *memory_mb, int *vcores);

/* One resource request: num containers of this size, matched by
 * alloc_id. num 0 withdraws an earlier request of the same alloc_id. */
typedef struct {
  int64_t alloc_id;
  int priority;
  int64_t memory_mb;
  int vcores;
  int64_t gpus;
  const char *label; /* node label expression, NULL for none */
  int num;
} hyarn_ask;

/* A container the scheduler granted. */
typedef struct {
  int64_t alloc_id;
  char id[96];    /* "container_1764200000000_0001_01_000002" */
  char host[256]; /* its NodeManager */
  int port;
  char node[300]; /* host:port */
  int64_t memory_mb;
  int vcores;
  int64_t gpus;
  uint8_t *proto; /* the packed ContainerProto (its id and token) */
  size_t proto_len;
} hyarn_container;

/* A container that ended. */
typedef struct {
  char id[96];
  int exit_status;        /* the process's, or YARN's: -100 aborted (node lost), -102
                            preempted, -104 over its memory, -105 stopped by the AM, ... */
  char diagnostics[2048]; /* YARN's, printable; the container's stderr tail among it */
} hyarn_done;

typedef struct {
  hyarn_container *allocated;
  int nallocated;
  hyarn_done *done;
  int ndone;
  bool shutdown; /* the ResourceManager told the AM to stop (killed, or the attempt is gone) */
  int nodes;     /* the cluster's node count */
} hyarn_alloc;

/* One heartbeat: sends asks and releases, takes what the scheduler
 * granted and what ended, keeps NMTokens and a rolled AMRMToken. Returns
 * 0 with *res (hyarn_alloc_free), or LOOM_EBACKEND (err). */
int hyarn_am_allocate(hyarn_am *am, const hyarn_ask *asks, int nasks,
                      const hyarn_container *const *release, int nrelease, float progress,
                      hyarn_alloc *res, char *err, size_t errlen);
void hyarn_alloc_free(hyarn_alloc *res);
void hyarn_container_free(hyarn_container *c);
/* A copy of c (its proto too); 0 or LOOM_ENOMEM. */
int hyarn_container_copy(hyarn_container *dst, const hyarn_container *src);

/* A file the NodeManager localizes into the container's directory before
 * the command starts (a LocalResource, visibility APPLICATION): name is
 * what it appears as there; path a file or directory on the filesystem
 * the NodeManagers read (a local path or an hdfs:// URL), with its size
 * and mtime as YARN checks them; an archive (.tar.gz, .tgz, .tar, .zip)
 * YARN unpacks into a directory of that name. user_cache: visibility
 * PRIVATE instead, so that a NodeManager keeps its copy for the user's
 * later applications (loom's own executable). */
typedef struct {
  const char *name, *path;
  int64_t size, mtime_ms;
  bool archive;
  bool user_cache;
} hyarn_resource;

/* Starts command (run by the NodeManager's shell: quote it) in container
 * c with environment env ("K=V" strings, NULL-terminated), nres
 * resources localized and, when tokens_len > 0, the credentials tokens
 * (Hadoop's "HDTS" bytes, creds.h: the NodeManager writes them to the
 * container's private container_tokens, HADOOP_TOKEN_FILE_LOCATION), on
 * c's NodeManager with its NMToken. Returns 0, or LOOM_EBACKEND (err: the
 * NodeManager's refusal). */
int hyarn_am_launch(hyarn_am *am, const hyarn_container *c, const char *command, char *const *env,
                    const hyarn_resource *res, int nres, const uint8_t *tokens, size_t tokens_len,
                    char *err, size_t errlen);
/* Stops container c (SIGTERM, then SIGKILL after the NodeManager's
 * delay). */
int hyarn_am_stop(hyarn_am *am, const hyarn_container *c, char *err, size_t errlen);

/* Unregisters: status 0 succeeded, 1 failed, 2 killed; diagnostics shown
 * by YARN. The ResourceManager then ends every container left. */
int hyarn_am_finish(hyarn_am *am, int status, const char *diagnostics, char *err, size_t errlen);
/* Kills the application through the client protocol (when finishing is
 * not possible), then frees am. NULL is a no-op. */
void hyarn_am_free(hyarn_am *am, bool kill);

/* ---- the managed application master (inside its YARN container) ------ */

/* In the AM container YARN started: the attempt from CONTAINER_ID, the
 * AMRMToken from the file HADOOP_TOKEN_FILE_LOCATION names (creds.h); registers
 * with the scheduler. Returns 0 with *out, or LOOM_EBACKEND (err). */
int hyarn_am_attach(const char *conf_dir, int timeout_ms, hyarn_am **out, char *err, size_t errlen);
/* The attempt number (1, 2, ...) of this application master. */
int hyarn_am_attempt(const hyarn_am *am);
/* How many times the ResourceManager rolled the AMRMToken over (each
 * time the scheduler connection authenticates again with the new one). */
int hyarn_am_token_rolls(const hyarn_am *am);
/* How many times the application master registered again with a restarted
 * ResourceManager (work-preserving recovery: a resync re-sends every
 * outstanding ask and release; running containers are kept). */
int hyarn_am_resyncs(const hyarn_am *am);

#endif
