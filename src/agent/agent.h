/* agent.h: loom's process inside each task's allocation. It reserves the
 * task's port, registers with the coordinator, prepares the working
 * directory, starts the user's command (procs processes, each its own
 * process group) once the cluster spec is known, streams their output,
 * reports their exit, and kills them when told to or when the coordinator
 * is gone. */
#ifndef LOOM_AGENT_H
#define LOOM_AGENT_H

/* `loom agent`: everything comes from the environment (LOOM_COORD,
 * LOOM_SECRET, LOOM_TASK, LOOM_ATTEMPT, LOOM_HOST) and the coordinator.
 * Returns the process exit status. */
int agent_main(void);

/* `loom __exec -- CMD...`: applies the limits passed in LOOM__* variables
 * (CPU affinity, memory), arranges to die with the agent, then execs CMD.
 * Only returns on failure: 127 if CMD is not found, 126 otherwise. */
int agent_exec_main(int argc, char **argv);

#endif
