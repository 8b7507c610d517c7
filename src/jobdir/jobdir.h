/* jobdir.h: the job directory, $LOOM_HOME/jobs/<id>/, owned here alone:
 * where LOOM_HOME is, the name of every file a job directory holds,
 * creating one (0700: it holds the job's secret, logs and events),
 * listing the jobs (newest first) and finding one from what a person
 * typed (an id, a unique prefix of one, or `last`). The CLI, the
 * coordinator and the dashboard all go through this header; nothing else
 * spells a job directory's file names. */
#ifndef LOOM_JOBDIR_H
#define LOOM_JOBDIR_H

#include "core/core.h"

#include <jansson.h>

/* The variable that moves loom's home (default ~/.loom), for help texts. */
#define JOBDIR_HOME_ENV "LOOM_HOME"
/* What help texts say about where jobs live. */
#define JOBDIR_WHERE "$" JOBDIR_HOME_ENV "/jobs/<id>/ (" JOBDIR_HOME_ENV " defaults to ~/.loom)"

/* Every file and folder of a job directory: name, path inside the job
 * directory, whether jobdir_create makes it (folders only). */
#define JOBDIR_FILES(X)                                                                            \
  X(SPEC, "spec.yaml", 0)            /* the spec, as resolved (JSON) */                            \
  X(STATE, "state.json", 0)          /* rewritten atomically */                                    \
  X(EVENTS, "events.jsonl", 0)       /* one event a line, appended */                              \
  X(SECRET, "secret", 0)             /* the job's secret, 0600 */                                  \
  X(COORD, "coord.json", 0)          /* the coordinator's addr and pid */                          \
  X(SUMMARY, "summary.txt", 0)       /* the end-of-job summary */                                  \
  X(COORD_LOG, "coordinator.log", 0) /* a detached coordinator's output */                         \
  X(LOGS, "logs", 1)                 /* logs/<role>-<index>.log */                                 \
  X(ALL_LOG, "logs/all.log", 0)      /* every task, interleaved */                                 \
  X(TASKS, "tasks", 1)               /* tasks/<role>-<index>/ */                                   \
  X(TENSORBOARD, "tensorboard", 1)   /* summaries */                                               \
  X(OUTPUT, "output", 1)             /* inference output */                                        \
  X(CKPT, "ckpt", 0)                 /* libloom's checkpoints */                                   \
  X(PS_CKPT, "ps-ckpt", 0)           /* the parameter server's */                                  \
  X(FETCHED, "fetched", 0)           /* fetched/<n>-<name>: hdfs:// files and archives */          \
  X(SLURM_SH, "slurm.sh", 0)         /* slurm: the batch script */                                 \
  X(SLURM_JSON, "slurm.json", 0)     /* slurm: {"job_id": ...} */                                  \
  X(YARN_JSON, "yarn.json", 0)       /* yarn: {"application": ..., "conf_dir": ...} */             \
  X(YARN_SYNC, "yarn-sync.json", 0)  /* yarn: what was copied from the AM's published copy */

typedef enum {
#define JOBDIR__ENUM(name, path, mk) JOBDIR_##name,
  JOBDIR_FILES(JOBDIR__ENUM)
#undef JOBDIR__ENUM
      JOBDIR__COUNT
} jobdir_file;

/* The longest job id, with its NUL. */
#define JOBDIR_ID_MAX 160

/* Node-local copies a Slurm job makes where the nodes do not share its
 * job directory (sbcast), by Slurm job id: loom's executable
 * (JOBDIR_NODE_EXE_DIR "/loom") and the spec's files. The coordinator
 * removes them when the job ends; agents, when Slurm ends it first. */
#define JOBDIR_NODE_EXE_DIR "/tmp/loom-"
#define JOBDIR_NODE_FILES_DIR "/tmp/loom-files-"

/* loom's home: $LOOM_HOME when set and not empty, else $HOME/.loom (else
 * /tmp/.loom). Read from the environment at each call; the string lives
 * until the next call. */
const char *jobdir_home(void);
/* <home>/jobs, where the job directories are; the same lifetime. */
const char *jobdir_root(void);
/* f's path inside a job directory ("state.json", "logs/all.log"). */
const char *jobdir_name(jobdir_file f);
/* dir/<f's name> into out; LOOM_ERANGE when it does not fit in len. */
int jobdir_path(const char *dir, jobdir_file f, char *out, size_t len);
/* The same, malloc'ed (the caller frees it); NULL when out of memory. */
char *jobdir_apath(const char *dir, jobdir_file f);
/* A task's file: dir/logs/<task>.log for JOBDIR_LOGS, dir/tasks/<task> for
 * JOBDIR_TASKS (task is "worker-1"); malloc'ed; NULL for any other f. */
char *jobdir_task_apath(const char *dir, jobdir_file f, const char *task);
/* The directory of job id: <root>/<id>. LOOM_ERANGE when it does not fit. */
int jobdir_of(const char *id, char *out, size_t len);

/* Creates the directory of job id and its folders, each 0700 (the owner
 * only: the directory holds the secret, the dashboard token's source, the
 * logs); the directory's path goes to dir. On failure err says which path
 * and why. */
int jobdir_create(const char *id, char *dir, size_t dirlen, char *err, size_t errlen);
/* Makes the job directory dir (any path) and its folders where missing,
 * each 0700, as jobdir_create does: a managed application master's own
 * job directory in its container. On failure err says which path. */
int jobdir_make(const char *dir, char *err, size_t errlen);
/* Writes f of job directory dir atomically, readable by its owner only
 * (0600); durable as loom__write_atomic. */
int jobdir_write(const char *dir, jobdir_file f, const void *data, size_t len, bool durable);
/* Opens f of dir for writing (0600; appended or truncated), as
 * loom__fopen_private. */
FILE *jobdir_fopen(const char *dir, jobdir_file f, bool append);
/* Reads f (at most max bytes) into a malloc'ed NUL-terminated buffer. */
int jobdir_read(const char *dir, jobdir_file f, size_t max, char **out, size_t *len);
/* f as a JSON object, or NULL when missing, too long or not an object. */
json_t *jobdir_read_json(const char *dir, jobdir_file f, size_t max);
/* The TensorBoard runs of job directory dir: the names of the folders in
 * its tensorboard/ (one per task that wrote summaries), sorted, at most
 * max of them, as a JSON array (empty when there are none); *total (when
 * not NULL) gets how many there are. NULL when out of memory. */
json_t *jobdir_tensorboard_runs(const char *dir, size_t max, size_t *total);

/* One job of a listing. */
typedef struct {
  char id[JOBDIR_ID_MAX];
  double mtime; /* of its spec.yaml: when it was made */
} jobdir_entry;

/* true when s can be a job id: letters, digits, '_' and '-', not first,
 * shorter than JOBDIR_ID_MAX. */
bool jobdir_valid_id(const char *s);
/* The jobs under root (NULL: jobdir_root()), newest first: by the
 * yyyymmdd-hhmmss inside the id, then the time the directory's spec.yaml
 * was written, then the id. A job is a directory with a valid id holding
 * a spec.yaml. *out (free() it) gets *n entries; a root that does not
 * exist has none. LOOM_ENOMEM when out of memory. */
int jobdir_list(const char *root, jobdir_entry **out, size_t *n);
/* The job that arg names under root (NULL: jobdir_root()): its id, a
 * unique prefix of its id, or "last" (the newest). The id goes to id (at
 * least JOBDIR_ID_MAX bytes). LOOM_ENOENT when no job matches (err names
 * arg and root), LOOM_EINVAL when the prefix is ambiguous (err lists the
 * candidates, newest first). */
int jobdir_resolve(const char *root, const char *arg, char *id, size_t idlen, char *err,
                   size_t errlen);

#endif
