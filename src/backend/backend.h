/* backend.h: how the coordinator gets tasks placed on a cluster manager.
 * A backend is a table of operations, one file per cluster manager
 * (local.c, external.c, slurm.c), registered in backend.c. */
#ifndef LOOM_BACKEND_H
#define LOOM_BACKEND_H

#include "spec/spec.h"
#include <uv.h>

typedef struct backend backend;

/* Called on the loop's thread when the agent of task_id is gone: status is
 * its exit status, sig the signal that killed it (0 if none). detail is
 * what the launcher last said (srun's last lines of output), or NULL; it
 * is valid only during the call. */
typedef void (*backend_exit_cb)(void *arg, int task_id, int64_t status, int sig,
                                const char *detail);

typedef struct {
  const char *name;
  /* What starts an agent, as messages name it ("srun"); NULL: the agent
   * itself is the process the backend watches. */
  const char *launcher;
  /* true when the backend sees agent processes end (on_exit is called);
   * otherwise the coordinator learns it from the agent's connection. */
  bool tracks_processes;
  /* true when the launcher can fail transiently before the agent starts
   * (Slurm's srun: a step launch refused by a slurmd). The coordinator
   * then launches a task again, up to LOOM_LAUNCH_RETRIES times, when its
   * launcher exits with a failure before the agent registered: nothing
   * of the task's command can have run by then. */
  bool launch_retryable;
  /* Refuses, before anything starts, what this cluster cannot give (vcores,
   * memory, gpus), writing the figures into err. Returns 0 or
   * LOOM_ERESOURCE. Must not block for long; needs no loop. */
  int (*check)(const spec_job *s, char *err, size_t errlen);
  /* Describes in a line how ready the cluster is for `loom check`. */
  int (*probe)(char *msg, size_t msglen);
  /* Starts the agent of one task: argv[0] is the loom executable, env its
   * whole environment. Does not block. 0, or an error with err filled. */
  int (*launch)(backend *b, int task_id, char *const *argv, char *const *env,
                char *err, size_t errlen);
  /* Sends sig to the agent of task_id if it still runs. */
  void (*signal)(backend *b, int task_id, int sig);
  /* The host name agents should advertise for task_id ("127.0.0.1"), or
   * NULL to let the agent find its own. */
  const char *(*host)(backend *b, int task_id);
  /* Optional: makes the spec's files reachable on every node (Slurm
   * without a shared job directory). Returns 0 and, in *files, a JSON
   * object target -> local path (or {"tar": path} for a directory) that
   * agents use instead of the spec's sources; *files NULL when the
   * sources are reachable as they are. Blocks (runs sbcast). */
  int (*stage_files)(backend *b, const spec_job *s, json_t **files, char *err, size_t errlen);
  /* Optional: removes what stage_files left on the nodes. Blocks briefly. */
  void (*unstage_files)(backend *b);
  /* Releases what the backend holds; agents must already be gone. */
  void (*destroy)(backend *b);
} backend_ops;

struct backend {
  const backend_ops *ops;
  uv_loop_t *loop;
  backend_exit_cb on_exit;
  void *arg;
  void *priv;
};

/* The table of backend name; NULL if unknown. */
const backend_ops *backend_find(const char *name);
/* Makes a backend on loop. Returns 0 or a negative code. */
int backend_create(const char *name, const spec_job *s, uv_loop_t *loop, int ntasks,
                   backend_exit_cb on_exit, void *arg, backend **out);

/* Slurm: the batch script for spec s (one het component per role, then
 * `exe coordinator job_dir --backend slurm`); *out is malloc'ed. */
int backend_slurm_script(const spec_job *s, const char *job_id, const char *job_dir,
                         const char *exe, char **out);

/* What this machine has, for the local backend's checks and for status. */
int backend_local_cpus(void);
uint64_t backend_local_memory(void);
int backend_local_gpus(void);

#endif
