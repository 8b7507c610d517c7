/* slurm_int.h: what the Slurm backend's files share: its state in the
 * coordinator and the coordinator side's operations (srun.c) that the
 * backend's table in slurm.c names. Nothing outside src/backend/slurm
 * includes it. */
#ifndef LOOM_BACKEND_SLURM_INT_H
#define LOOM_BACKEND_SLURM_INT_H

#include "backend/backend.h"

/* One task's srun (srun.c). */
typedef struct srun_proc srun_proc;

/* The backend's state in the coordinator (b->priv). */
typedef struct {
  char stage_dir[256];
  char exe_dir[256]; /* where loom's executable was sbcast to ("": nowhere) */
  int ngroups;       /* components of the Slurm job (1: not heterogeneous) */
  int ntasks;
  srun_proc **procs;      /* task id -> its srun, until its exit is reported */
  int *group;             /* task id -> its component (het group) */
  const spec_role **role; /* task id -> its role */
} slurm_priv;

/* backend_ops' launch and signal (backend.h): a task's agent in its own
 * job step, and a signal to it through its srun. */
int slurm_launch(backend *b, int task_id, char *const *argv, char *const *env, char *err,
                 size_t errlen);
void slurm_signal(backend *b, int task_id, int sig);

#endif
