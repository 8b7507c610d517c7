/* agent_int.h: what the parts of the agent share: the agent, its
 * processes and their output pipes, and the functions one part calls in
 * another. agent.c is the loop (ending, starting the command, the
 * coordinator connection, agent_main), output.c the tasks' output, ports.c
 * the address and the reserved port, taskenv.c the task's environment,
 * files.c the working directory's files. Not installed; nothing outside
 * src/agent includes it (but the agent's unit test). */
#ifndef LOOM_AGENT_INT_H
#define LOOM_AGENT_INT_H

#include "agent/agent.h"
#include "wire/wire.h"
#include "wire/wire_msg.h"
#include "wireuv/wire_uv.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct agent agent;

typedef struct {
  uv_pipe_t pipe;
  agent *a;
  int proc, stream;
  loom__buf line; /* bytes read but not sent: at most one line of LOOM_MAX_LOG_LINE */
  bool open;
  bool cutting; /* the rest of an over-long line is being dropped */
} outpipe;

typedef struct {
  uv_process_t proc;
  agent *a;
  int local;
  int pid;
  uint64_t stopped_since; /* when it was first seen stopped; 0 if running */
  bool running, spawned;
  bool guarded;    /* guard is open: its guard (exec.c) may be alive */
  uv_pipe_t guard; /* the agent's end of the socket to the guard */
  outpipe out[2];
} uproc;

struct agent {
  uv_loop_t loop;
  uv_tcp_t conn;
  uv_timer_t hb, grace, drain, linger, porthold;
  uint64_t porthold_ms; /* the port watch's next interval */
  uv_signal_t sigs[3];
  wire_reader rd;
  json_t *assign; /* the ASSIGN frame's JSON, which as borrows from */
  wire_assign as; /* what to run */
  char task[96], host[256], secret[160], cgroup[1024];
  char iface[64];        /* the interface of host, "" if unknown: the task's collectives use it */
  char tmpdir[PATH_MAX]; /* the task's TMPDIR, removed when it ends; "" if none */
  char start_cwd[PATH_MAX]; /* where the agent started (a YARN container's directory) */
  cg_kind cgkind;           /* how cgroup (if set) limits memory */
  int attempt, port, reserve_fd, nprocs, running, open_pipes;
  int guards; /* guard handles not yet closed */
  uproc *procs;
  uint64_t last_rx, last_usage, cpu_ticks, started_ms;
  double usage_t0;
  bool started, stopping, exited_sent, conn_open, have_fail;
  bool out_paused; /* the tasks' output is not read: the coordinator is behind */
  bool lingering;  /* sent everything; waiting for the coordinator to close */
  bool saw_inuse;  /* the task said "Address already in use" while its port was held */
  bool any;        /* registered with attempt "any": started by the cluster manager (Spark) */
  int fail_code, fail_sig;
  char lost_reason[160];
  int exit_status;
  int nodecopy_fd; /* its share of a Slurm job's node-local copies (nodecopy.c); -1 if none */
  char nodecopy_id[32];
  bool job_ending; /* the coordinator's STOP said the job ends (no other attempt) */
  wire_tls *tls;   /* the coordinator link's TLS, when it leaves the host */
};

/* agent.c */
void agent_log(const char *fmt, ...) LOOM__PRINTF(1, 2);
/* Sends EXIT once nothing runs and no pipe or guard is open, then ends
 * the loop. */
void agent_maybe_finish(agent *a);
/* Closes the agent's end of u's guard socket: a guard still alive then
 * kills what is left of u's session (see exec.c). */
void agent_close_guard(uproc *u);

/* output.c: the tasks' output pipes, read into LOG messages */
void agent_out_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf);
void agent_out_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
void agent_close_pipe(outpipe *o);
void agent_drain_expired(uv_timer_t *t);

/* ports.c: the address the task is published at and its reserved port */
int agent_choose_host(agent *a, int fd, char *why, size_t whylen, char *err, size_t errlen);
int agent_reserve_port(agent *a);
void agent_release_port(agent *a, const char *why);
void agent_porthold_tick(uv_timer_t *t);

/* nodecopy.c: a Slurm job's node-local copies (loom's executable, the
 * spec's files: JOBDIR_NODE_*), which the coordinator removes when the
 * job ends, but cannot when Slurm ends it first (scancel, the time limit,
 * preemption: no step starts then). Every agent that runs the node's copy
 * holds a shared lock on it while it runs; one that Slurm signalled, or
 * whose coordinator's STOP said the job ends (scancel signals the batch
 * step's coordinator, which may stop the agents before Slurm signals
 * them), marks the copies as ending, and the last one out removes marked
 * copies. */
/* The lock's fd, with the Slurm job id into id; -1 where the agent does
 * not run a node-local copy (or the lock cannot be had). */
int agent_nodecopy_hold(char *id, size_t idlen);
/* Lets fd go (-1: nothing), marking the copies first where the job ends
 * (Slurm signalled the agent, or the coordinator said so); if no other
 * agent holds it and the copies are marked, removes them. */
void agent_nodecopy_release(int fd, const char *id, bool ending);

/* taskenv.c: the environment of the task's processes */
typedef struct {
  char **v; /* "K=V" strings, NULL-terminated */
  int n, cap;
} envv;

/* What the variables loom sets for one process of a task are made of:
 * plain values (taskenv_test gives them from a table). */
typedef struct {
  const char *role;
  int index;
  const char *task;
  int attempt;
  const char *job_id, *job_dir, *host;
  int port;
  const char *cluster_s;    /* LOOM_CLUSTER: the cluster spec as JSON */
  const json_t *tf_cluster; /* TF_CONFIG's cluster (without evaluator, tensorboard) */
  int local, procs;         /* this process's place among the task's processes */
  bool training;            /* the role trains: torchrun's variables are set */
  int rank_base, world;     /* the task's first rank and the world size */
  long long generation;
  const char *master_addr; /* NULL: no MASTER_ADDR */
  bool has_master_port;
  int master_port;
  const char *gpus, *cpus; /* "" when none */
  int gpu_count;           /* the role's GPUs; -1 when the coordinator did not say */
  const char *cgroup;      /* the task's cgroup, "" when none */
  int64_t memory;          /* bytes; 0 when unlimited */
  int ppid;                /* the agent's pid (LOOM__PPID) */
} agent_taskenv;

/* Sets (replacing) in e the variables of t: LOOM_*, torchrun's (RANK,
 * WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...), TF_CONFIG and the limits that
 * `loom __exec` applies (LOOM__*). Reads nothing but t. */
void agent_taskenv_set(envv *e, const agent_taskenv *t);
/* e: this process's environment less the variables loom sets, loom on the
 * PATH, the spec's env, TMPDIR, then agent_taskenv_set's. Free it with
 * agent_env_free. */
void agent_build_env(agent *a, envv *e, int local, const wire_cluster *cl, const char *cluster_s,
                     const json_t *tf_cluster);
void agent_env_free(envv *e);

/* files.c: the working directory's files and the command's check */
int agent_place_files(agent *a, const char *wd, char *err, size_t errlen);
int agent_check_command(agent *a, const char *wd, char *err, size_t errlen);

#endif
