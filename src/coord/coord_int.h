/* coord_int.h: what the parts of the coordinator share: the task, the
 * connection and the coordinator itself, and the functions one part calls
 * in another. Not installed; nothing outside src/coord includes it. */
#ifndef LOOM_COORD_INT_H
#define LOOM_COORD_INT_H

#include "coord/coord.h"
#include "backend/backend.h"
#include "core/fifo.h"
#include "core/ratelog.h"
#include "coord/feed_dispatch.h"
#include "http/http.h"
#include "jobdir/jobdir.h"
#include "wire/wire.h"
#include "wire/wire_auth.h"
#include "wire/wire_msg.h"
#include "wireuv/wire_uv.h"

#include <stdio.h>
#include <uv.h>

#define RING 20

enum {
  T_PENDING,
  T_LAUNCHED,
  T_REGISTERED,
  T_READY,
  T_RUNNING,
  T_SUCCEEDED,
  T_FAILED,
  T_STOPPED,
  T_LOST
};
__attribute__((unused)) static const char *const TSTATE[] = {"pending", "launched", "registered",
                                                             "ready",   "running",  "succeeded",
                                                             "failed",  "stopped",  "lost"};
enum { J_RENDEZVOUS, J_RUNNING, J_STOPPING, J_DONE };
__attribute__((unused)) static const char *const JSTATE[] = {"starting", "running", "stopping",
                                                             "done"};
enum { O_NONE, O_SUCCESS, O_FAILED, O_KILLED, O_INFRA };
enum { C_AUTH, C_AGENT, C_CLIENT, C_CTL };

typedef struct conn conn;
typedef struct coord coord;

typedef struct task {
  int id;
  const spec_role *role;
  int index;
  char name[80], file[80];
  bool training;
  int rank_base;
  int state, attempt;
  char host[256];
  int port, agent_pid;
  int prev_port; /* a restarted task's port before the restart: asked for again */
  json_t *pids;
  int exit_code, sig;
  bool have_exit;
  char reason[512];
  char log_url[768];   /* where the cluster manager keeps its launch's logs (a note's "logs") */
  char log_later[256]; /* how to read them once the cluster manager moved them ("logs_later") */
  double t_launch, t_start, t_end;
  conn *agent;
  bool agent_running;
  char *ring[RING];
  int ring_n, ring_head;
  FILE *log; /* open only while among the LOG_OPEN_MAX most recently written */
  struct task *log_newer, *log_older;
  char cpus[256], gpus[128];
  int restarts;      /* restarts of this task in this job attempt */
  int64_t fence;     /* its agent's launch fence (attempt "any"), -1: none */
  int64_t fence_max; /* the highest fence its agents registered with, -1: none */
  /* an agent (attempt "any") that registered while the task waited for
   * none: it waits, connected, for the task's next launch (coord_unpark) */
  struct conn *parked;
  bool left;             /* an elastic member that left the membership */
  bool restart_pending;  /* restart once its old agent is gone */
  int launch_tries;      /* launches of this task attempt that failed before its agent registered */
  bool relaunch_pending; /* relaunch_timer runs: the launch is tried again when it fires */
  bool cluster_pending;  /* rejoined while rank 0 was away: its cluster spec waits for it */
  /* its agent's connection closed without an EXIT; the backend's word on
   * how the agent ended is awaited until then (exit_explains_loss) */
  uint64_t loss_pending_ms;
  char loss_reason[400];
  uv_timer_t relaunch_timer;
  /* user metrics: a token bucket of LOOM_METRIC_RATE a second, 10 s deep */
  double metric_tokens;
  uint64_t metric_ms;       /* when the bucket was last filled; 0: never */
  uint64_t metrics_dropped; /* in all, and not yet in a metrics_dropped event */
  uint64_t metrics_unsaid, dropped_said_ms;
  char *sj; /* this task's entry in state.json, as last written */
  size_t sj_len;
  bool sj_stale; /* changed since: rendered again at the next rewrite */
} task;

struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  coord *co;
  wire_reader rd;
  int kind, handles;
  uint64_t last_rx;
  wire_auth_server auth; /* the handshake, while kind is C_AUTH */
  task *task;
  char who[96];
  bool closing;
  conn *next, *prev;
  loom__fifo_link pa; /* in the queue of connections not yet authenticated */
  char from[64];      /* the peer's address, for the log */
  bool inflate;       /* an agent that takes its CLUSTER blob deflated */
  wire_tls *tls;      /* TLS (wire_tls.h) on a link that leaves the host, else NULL */
  /* parked (attempt "any"): the task it waits for, and its REGISTER (the
   * strings owned), taken up again when that task is launched */
  task *parked_for;
  wire_register park;
};

typedef struct kv_entry {
  char *key;
  unsigned char *val;
  size_t len;
  struct kv_entry *next;
} kv_entry;

typedef struct kv_wait {
  uv_timer_t timer;
  coord *co;
  conn *c;
  json_int_t id;
  char *key;
  struct kv_wait *next, *prev;
} kv_wait;

#define KV_BUCKETS 4096

struct coord {
  const coord_opts *o;
  const spec_job *s;
  uv_loop_t loop;
  uv_tcp_t server;
  uv_signal_t sigint, sigterm, sighup;
  uv_timer_t rdv_timer, stop_timer, hb_timer, flush_timer;
  uv_timer_t unpark_timer; /* hands parked agents to their launched tasks, outside callers */
  char addr[300];
  backend *be;
  task *tasks;
  int ntasks, attempt, jstate, outcome, root, interrupts, nready;
  int world_size;
  bool no_retry;       /* the failure's exit code is not in retry_on */
  int64_t generation;  /* elastic membership generation */
  int64_t fence;       /* the highest fence any agent registered with, -1: none */
  int64_t fence_floor; /* agents of a lower fence are stale (their launch lost a task) */
  char root_msg[2048];
  FILE *events, *alllog;
  struct task *log_newest, *log_oldest; /* tasks whose log file is open, newest first */
  int nlogs_open;
  conn *conns;
  loom__fifo preauth;       /* connections not yet authenticated, oldest first */
  int nawaited;             /* tasks launched whose agent has not registered yet (T_LAUNCHED) */
  int nunfinished;          /* tasks of finishing (not service) roles not T_SUCCEEDED */
  bool any_elastic;         /* a role is elastic: its tasks may leave */
  int over_scan;            /* coord_check_over: tasks before it have no agent */
  loom__ratelog rl_refused; /* connections refused or closed before authenticating */
  kv_entry *kv[KV_BUCKETS];
  kv_wait *waiters;
  size_t kv_bytes;
  int exit_status;
  double t_start, t_attempt;
  bool state_dirty, status_shown;
  uint64_t state_next_ms;   /* no periodic state.json rewrite before then */
  uv_prepare_t events_prep; /* flushes events.jsonl before the loop waits */
  bool events_pending;
  int *task_hash; /* task ids by name: open addressing, -1 empty */
  unsigned task_hash_mask;
  char **env_base;
  feed_dispatch *feed;
  json_t *staged_files; /* target -> node-local copy, when the backend staged them */
  char agent_exe[4096]; /* argv[0] of every agent (the backend's agent_exe) */
  http_server *http;
  char dashboard[512], tensorboard[400];
  char dashboard_fp[100]; /* its self-signed certificate's SHA-256, or "" */
  long long metric_rate;  /* LOOM_METRIC_RATE, read once */
};

/* A frame encoded once and written to many connections. */
typedef struct {
  int refs;
  size_t len;
  unsigned char *buf;
} shared_frame;

/* coord.c */
int coord_launch_task(coord *co, task *t);
/* agents.c: parked agents (attempt "any") */
void coord_unpark_tick(uv_timer_t *tm);
void coord_unpark_drop(conn *c);
bool coord_all_finishing_done(coord *co);
void coord_abort_clients(coord *co, const char *why);
void coord_check_over(coord *co);
void coord_begin_stop(coord *co, int outcome, uint64_t grace_ms);
void coord_task_reset(coord *co, task *t);
void coord_attempt_fail(coord *co, task *t, const char *why);
uint64_t coord_hb_timeout_ms(const coord *co);

/* console.c */
void coord_status_draw(coord *co);
void coord_say(coord *co, const char *fmt, ...) LOOM__PRINTF(2, 3);
void coord_ring_clear(task *t);
void coord_open_logs(coord *co, task *t);
void coord_close_log(coord *co, task *t);
void coord_print_summary(coord *co);
void coord_on_log(coord *co, task *t, const wire_msg *m);

/* state.c */
void coord_event(coord *co, task *t, const char *name, json_t *extra);
/* The same for an event that changes no state (a metric): state.json is
 * not rewritten for it. */
void coord_event_log(coord *co, task *t, const char *name, json_t *extra);
void coord_state_write(coord *co);
void coord_task_set(coord *co, task *t, int st);
bool coord_terminal(const task *t);
void coord_flush_tick(uv_timer_t *tm);
/* Marks t's state.json entry for rendering again: for changes to a task
 * made other than through coord_task_set or coord_event. */
void coord_task_touch(coord *co, task *t);
void coord_events_flush(uv_prepare_t *h);
/* Frees what state.c keeps (the rendered task entries). */
void coord_state_free(coord *co);

/* conn.c */
void coord_conn_close(conn *c, const char *why);
/* Closes c in 500 ms unless its peer closes first: what was queued on it
 * last (a refusal saying why) has time to leave. */
void coord_conn_close_soon(conn *c);
int coord_conn_send_shared(conn *c, shared_frame *sf);
/* Encodes m and queues it on c. */
int coord_conn_send_msg(conn *c, const wire_msg *m);
void coord_on_connection(uv_stream_t *server, int status);
void coord_shared_put(void *p);

/* kv.c */
void coord_reply(conn *c, json_int_t id, int rc, json_t *extra, const void *blob, size_t len);
/* A libloom client's message (m NULL: a frame of no known type). */
int coord_on_client(coord *co, conn *c, const wire_msg *m);
int coord_on_metric(coord *co, task *t, const wire_metric *m, const char *source);
/* Writes t's metrics_dropped event for the metrics dropped since the last
 * one, if any, when force or 10 s have passed since it. */
void coord_metrics_dropped(coord *co, task *t, bool force);
void coord_kv_drop_waiters(coord *co, conn *c);
void coord_kv_clear(coord *co);
void coord_feed_reply(void *c, json_int_t id, int rc, json_t *extra, const void *blob, size_t len);
kv_entry *coord_kv_find(coord *co, const char *key);
int coord_kv_store(coord *co, const char *key, const void *val, size_t len);

/* agents.c */
/* The task named name ("worker:3"), or NULL: a hash lookup. */
task *coord_task_by_name(coord *co, const char *name);
bool coord_will_retry(const coord *co);
/* FNV-1a of a task's name, for co->task_hash. */
static inline unsigned coord_name_hash(const char *s) {
  unsigned h = 2166136261u;
  while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
  return h;
}
int coord_on_agent(coord *co, conn *c, const wire_msg *m);
int coord_on_register(coord *co, conn *c, const wire_msg *m);

/* membership.c */
int coord_publish_membership(coord *co);
int coord_live_members(coord *co, const spec_role *r, const task *except);
void coord_kill_task_groups(coord *co, task *t);

/* policy.c */
void coord_maybe_restart(coord *co, task *t);
bool coord_maybe_relaunch(coord *co, task *t, int64_t status, int sig, const char *detail,
                          const char *how);
void coord_task_exited(coord *co, task *t, int code, int sig, const char *reason, bool lost);

/* placement.c */
/* Builds co->tasks from the spec, ranks them and places them. */
int coord_setup_tasks(coord *co);
/* Gives each training task for which member() is true (every one when it
 * is NULL) its first rank, in the rank order; returns the world size. */
int coord_rank_tasks(task *tasks, int ntasks, bool (*member)(const task *t));

#endif
