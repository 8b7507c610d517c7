/* agent.h: loom's process inside each task's allocation. It reserves the
 * task's port, registers with the coordinator, prepares the working
 * directory, starts the user's command (procs processes, each its own
 * process group) once the cluster spec is known, streams their output,
 * reports their exit, and kills them when told to or when the coordinator
 * is gone. */
#ifndef LOOM_AGENT_H
#define LOOM_AGENT_H

#include <stdbool.h>
#include <stddef.h>

/* `loom agent`: everything comes from the environment (LOOM_COORD,
 * LOOM_SECRET, LOOM_TASK, LOOM_ATTEMPT, LOOM_HOST) and the coordinator.
 * Returns the process exit status. */
int agent_main(void);

/* `loom __exec [--guard FD] -- CMD...`: applies the limits passed in
 * LOOM__* variables (CPU affinity, memory), arranges to die with the agent
 * (with --guard, leaves the guard that kills the rest of the task's session
 * when the agent dies, FD its end of the agent's socket; see exec.c), then
 * execs CMD. Only returns on failure: 127 if CMD is not found, 126
 * otherwise. `loom __exec --guarding FD` is the guard itself. */
int agent_exec_main(int argc, char **argv);

/* ---- memory limits (cgroup.c) ---- */
typedef enum { CG_RLIMIT, CG_V2, CG_V1 } cg_kind;

typedef struct {
  cg_kind kind;
  char base[512]; /* where loom-<job>/ cgroups go; "" for the rlimit */
  char why[700];  /* for the rlimit: why no cgroup is used */
} cg_probe;

/* Finds how this machine enforces a task's memory limit: cgroup v2, a
 * cgroup v1 memory hierarchy, else RLIMIT_DATA (LOOM_CGROUP_ROOT overrides
 * the place, "none" forces the rlimit). For v2 it enables the memory
 * controller for the cgroups below, moving the processes of the base
 * cgroup into <base>/loom-leaf if the kernel demands it. Always 0. */
int cg_probe_memory(cg_probe *p);
const char *cg_kind_name(cg_kind k);  /* "cgroup v2", "cgroup v1", "rlimit" */
const char *cg_limit_file(cg_kind k); /* "memory.max", ... */

/* Makes <base>/loom-<job>/<task> limited to bytes (and, on v2 with cpuset,
 * to the cores in the list cpus, which may be NULL); its path goes to out.
 * 0 or a negative LOOM_E*, nothing left behind. */
int cg_create(const cg_probe *p, const char *job, const char *task, long long bytes,
              const char *cpus, char *out, size_t outlen);

/* Whether the kernel's OOM killer killed a process of the task's cgroup. */
bool cg_oom_killed(cg_kind k, const char *dir);

/* Removes a task's cgroup (killing anything of the task still in it) and its
 * job's cgroup once empty. */
void cg_remove(const char *dir);

#endif
