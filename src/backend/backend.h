/* backend.h: how loom gets a job's tasks placed on a cluster manager. A
 * backend is one table of operations, one file per cluster manager
 * (local.c, external.c, slurm.c, yarn.c), registered in backend.c, covering the
 * job's whole life: the client half (check, probe, submit, follow,
 * cancel) runs in `loom run/submit/status/kill/check`; the coordinator
 * half (create, place, launch, signal, stage, destroy) runs in the job's
 * coordinator. Nothing outside src/backend/ names a cluster manager. */
#ifndef LOOM_BACKEND_H
#define LOOM_BACKEND_H

#include "spec/spec.h"
#include <jansson.h>
#include <uv.h>

typedef struct backend backend;

/* Called on the loop's thread when the agent of task_id is gone: status is
 * its exit status, sig the signal that killed it (0 if none). detail is
 * what the launcher last said (srun's last lines of output), or NULL; it
 * is valid only during the call. lost: the cluster manager took the
 * task's place away (YARN: its node lost, the container preempted) while
 * its agent may still run and be connected; the coordinator then drops
 * that agent's connection (the agent stops its task) and handles the
 * task as lost. */
typedef void (*backend_exit_cb)(void *arg, int task_id, int64_t status, int sig, const char *detail,
                                bool lost);

/* Called on the loop's thread when the backend has something to record:
 * an event named event for task_id (-1: the job) with detail (a JSON
 * object, taken; may be NULL), and, when say is not NULL, a line for the
 * job's console. */
typedef void (*backend_note_cb)(void *arg, int task_id, const char *event, json_t *detail,
                                const char *say);

/* A submitted job as its cluster manager sees it (job_state). */
typedef enum {
  BACKEND_JOB_UNKNOWN, /* the manager does not know it (any more) */
  BACKEND_JOB_PENDING, /* queued: nothing of the job runs yet */
  BACKEND_JOB_RUNNING, /* allocated: its coordinator runs or starts */
  BACKEND_JOB_ENDED,   /* finished, failed or cancelled in the manager */
} backend_job_state;

typedef struct {
  backend_job_state state;
  char id[64];      /* the manager's job id ("4312") */
  char native[32];  /* the manager's state word ("PENDING") */
  char reason[128]; /* the manager's reason ("Resources"), "" if none */
  char what[256];   /* one line for people: "Slurm job 4312 is PENDING: Resources (...)" */
} backend_job;

typedef struct {
  const char *name;
  /* What starts an agent, as messages name it ("srun"); NULL: the agent
   * itself is the process the backend watches. */
  const char *launcher;
  /* true when the backend sees agent processes end (on_exit is called);
   * otherwise the coordinator learns it from the agent's connection. */
  bool tracks_processes;
  /* true when the cluster manager enforces a task's memory itself (YARN's
   * container limit, over the container's whole process tree): the agent
   * then applies no limit of its own. */
  bool enforces_memory;
  /* true when the launcher's end follows a lost agent connection within
   * seconds and says why (YARN: the container's exit status and
   * diagnostics: killed for its memory, preempted, its node lost): the
   * coordinator then waits for on_exit, at most LOOM_LOSS_WAIT ms, before
   * it declares the task lost, so that the root cause is YARN's. */
  bool exit_explains_loss;
  /* true when the launcher can fail transiently before the agent starts
   * (Slurm's srun: a step launch refused by a slurmd). The coordinator
   * then launches a task again, up to LOOM_LAUNCH_RETRIES times, when its
   * launcher exits with a failure before the agent registered: nothing
   * of the task's command can have run by then. */
  bool launch_retryable;
  /* true when agents run on the coordinator's own host as its children:
   * a lost agent's process groups are then the coordinator's to kill, and
   * `loom check` reports this machine's memory-limit mechanism. */
  bool same_host;
  /* true when the cluster manager may start the coordinator again for the
   * same job directory (Slurm's requeue): the coordinator then continues
   * the attempt numbers of the state.json it finds. */
  bool requeues;
  /* true when the cluster manager starts agents on its own schedule
   * (Spark's barrier stage, relaunched whole by Spark): an agent may then
   * register with attempt "any", taking whichever attempt its task waits
   * for, and with a fence (the launch it belongs to) that is refused when
   * below the highest one seen. Other backends refuse attempt "any". */
  bool agents_any_attempt;
  /* Non-NULL for a backend that checks specs and its cluster (check,
   * probe) but cannot launch jobs yet: why, for people. `loom run` and
   * `loom submit` stop after the check, exit 2, saying so; the coordinator
   * half and submit are then NULL. */
  const char *check_only;

  /* ---- client half: in `loom run/submit/status/kill/check` ---- */

  /* Refuses, before anything starts, what this cluster cannot give:
   * returns 0, LOOM_ERESOURCE (err has what the spec needs against what
   * the cluster has; exit 2) or LOOM_EBACKEND (the cluster cannot be
   * asked; exit 3). Blocks at most a few seconds (may ask the manager). */
  int (*check)(const spec_job *s, char *err, size_t errlen);
  /* Optional, after check: fills budgets the spec leaves unset from the
   * cluster manager's own settings (Spark: spark.task.maxFailures), so the
   * job directory's spec.yaml records them. Returns 1 with a line for
   * people in note when it set something, else 0. */
  int (*defaults)(spec_job *s, char *note, size_t notelen);
  /* `loom check --backend B`: one line on how usable the cluster is into
   * msg; 0 when usable. Blocks briefly. */
  int (*probe)(char *msg, size_t msglen);
  /* true when submit is for `loom submit` only: `loom run` then runs the
   * coordinator on this host (YARN: an unmanaged application master for
   * `run`, a managed one in a container for `submit`). */
  bool submit_detached_only;
  /* true when the cluster manager fetches hdfs:// sources of the spec's
   * files and archives itself (YARN's LocalResources); otherwise the
   * coordinator fetches them into the job directory before staging. */
  bool localizes_remote_files;
  /* Where the coordinator runs. NULL: on this host, started by the
   * client. Otherwise hands the job to the cluster manager so that the
   * coordinator (`exe coordinator job_dir --backend NAME`) starts inside
   * it; writes the backend's files into job_dir and, in *job, what to
   * call the job ("Slurm job 12"). Returns 0, LOOM_ERESOURCE (the manager
   * refused the request: exit 2) or LOOM_EBACKEND, err filled. Blocks
   * until the manager accepted or refused. */
  int (*submit)(const spec_job *s, const char *job_id, const char *job_dir, const char *exe,
                backend_job *job, char *err, size_t errlen);
  /* Follows a submitted job from any process: fills *job from the
   * manager (state, reason). NULL when the coordinator runs on this host
   * (its pid in coord.json tells). Returns 0, or LOOM_ENOENT when job_dir
   * holds no job of this backend. Blocks briefly (asks the manager). */
  int (*job_state)(const char *job_dir, backend_job *job);
  /* Cancels the job in the cluster manager, pending or running; msg says
   * what was done. NULL when there is nothing beyond the coordinator to
   * cancel. Blocks briefly. */
  int (*cancel)(const char *job_dir, char *msg, size_t msglen);
  /* In the coordinator, before it listens: the address to bind and the
   * one agents reach it by (both at least 64 bytes), when agents run on
   * other hosts. NULL: loopback for both. */
  void (*coord_address)(char *bind, size_t bindlen, char *advertise, size_t advlen);

  /* ---- coordinator half: on the coordinator's loop thread ---- */

  /* Makes b->priv for a job of ntasks tasks (ids in role order, as the
   * coordinator numbers them). 0 or LOOM_ENOMEM. */
  int (*create)(backend *b, const spec_job *s, int ntasks);
  /* Where task_id's CPU and GPU ids come from: fills cpus and gpus with
   * the lists its agent applies (affinity, CUDA_VISIBLE_DEVICES) on its
   * host, or leaves them "" to keep what the task's host gave it (a Slurm
   * step's cpuset and GPUs). Called once per task, in task order, before
   * any launch. */
  void (*place)(backend *b, int task_id, const spec_role *r, char *cpus, size_t cpuslen, char *gpus,
                size_t gpuslen);
  /* Starts the agent of one task: argv[0] is the loom executable (what
   * agent_exe gave), env its whole environment. Does not block. 0, or an
   * error with err filled. */
  int (*launch)(backend *b, int task_id, char *const *argv, char *const *env, char *err,
                size_t errlen);
  /* Sends sig to the agent of task_id if it still runs (stops one task). */
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
  /* Optional: the loom executable every task's agent runs, argv[0] of
   * every launch: into exe (exelen, at least PATH_MAX), after making it
   * reachable where tasks run. self is the coordinator's own executable.
   * NULL: self as it is (external). local gives self; Slurm gives self
   * (the client's copy in the job directory, which the batch script runs)
   * when every node sees the job directory, else sbcasts it to
   * /tmp/loom-JOBID/loom on every node; YARN stages it once per content
   * in a per-user cache on the cluster's filesystem and localizes it into
   * every container ("./loom"). Called once, after stage_files, before the first launch;
   * blocks (may upload). 0, or an error with err filled (the job then
   * fails as a backend failure). */
  int (*agent_exe)(backend *b, const char *self, char *exe, size_t exelen, char *err,
                   size_t errlen);
  /* Optional: removes what stage_files left on the nodes. Blocks briefly. */
  void (*unstage_files)(backend *b);
  /* Optional: the job is over (exit_status as `loom run` exits, why the
   * root cause or ""): tells the cluster manager the outcome (YARN's
   * final status). Called on the loop thread after the loop ran, before
   * the loop's handles close; blocks briefly. */
  void (*finish)(backend *b, int exit_status, const char *why);
  /* Releases b->priv and b; agents must already be gone. */
  void (*destroy)(backend *b);
} backend_ops;

struct backend {
  const backend_ops *ops;
  uv_loop_t *loop;
  backend_exit_cb on_exit;
  backend_note_cb on_note; /* NULL: notes are dropped */
  void *arg;
  void *priv; /* the backend's own, made by create */
  /* The job's dashboard without its token ("http://10.0.0.5:41234/"), or
   * NULL: set before create, which may show it in the cluster manager
   * (YARN's tracking URL). */
  const char *ui_url;
  /* Set by create: the numeric addresses of the cluster manager's web
   * proxy that shows the dashboard (YARN's ResourceManager web proxy),
   * which the dashboard then serves without its token (read only). */
  char ui_proxies[8][64];
  int nui_proxies;
};

/* ---- the registry (backend.c) ---- */
/* The table of backend name; NULL if unknown. */
const backend_ops *backend_find(const char *name);
/* The backend of a spec that names none. */
const backend_ops *backend_default(void);
/* Every registered name, ", "-separated ("local, slurm, yarn, spark, external"). */
const char *backend_names(void);
/* The backend a job directory's job ran on (its spec.yaml), or NULL. */
const backend_ops *backend_of_job(const char *job_dir);
/* Makes a backend on loop (ui_url: its ui_url). Returns 0 or a negative
 * code. */
int backend_create(const char *name, const spec_job *s, uv_loop_t *loop, int ntasks,
                   backend_exit_cb on_exit, void *arg, const char *ui_url, backend **out);

/* What this machine has, for the local backend's checks and placement. */
int backend_local_cpus(void);
uint64_t backend_local_memory(void);
int backend_local_gpus(void);
/* For backends whose tasks run on this machine: the next r->vcores of its
 * CPUs and r->gpus of its GPUs after the cursors, which it advances. */
void loom__backend_round_robin(int *cpu_cursor, int *gpu_cursor, const spec_role *r, char *cpus,
                               size_t cpuslen, char *gpus, size_t gpuslen);

#endif
