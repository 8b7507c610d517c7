/* sched.h: what the YARN backend's coordinator half shares between its
 * table of operations (yarn.c, the loop thread) and its scheduler thread
 * (sched.c): the state of each task in YARN and the queue of ends and notes
 * that the thread hands to the loop thread. Nothing outside
 * src/backend/yarn includes it. */
#ifndef LOOM_BACKEND_YARN_SCHED_H
#define LOOM_BACKEND_YARN_SCHED_H

#include "backend/yarn/yarn_int.h"
#include "yarn/am.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* Where a task is in YARN. */
typedef enum {
  Y_IDLE,    /* nothing asked, or its container ended */
  Y_WANT,    /* launched: a container asked for, not granted yet */
  Y_HELD,    /* granted, held until every wanted container is granted (gang) */
  Y_RUNNING, /* its container started with the agent in it */
} ystate;

typedef struct {
  ystate st;
  int gen;       /* launches of this task: its allocation id is gen * ntasks + id */
  bool asked;    /* the ask of this generation was sent */
  bool withdraw; /* send num 0 for the last ask (signalled before it was granted) */
  bool stop;     /* stopContainers wanted */
  char *command; /* the agent's command line, for the NodeManager's shell */
  char **env;    /* its environment */
  hyarn_container c;
  bool has_c;
  uint64_t t_want;
} ytask;

typedef struct {
  int task;
  int64_t status;
  int sig;
  bool lost;
  char detail[2300];
  /* a note instead of an exit, when event is set */
  char event[32];
  json_t *note;
  char say[512];
} yexit;

typedef struct {
  backend *b;
  const spec_job *s;
  int ntasks;
  const spec_role **role; /* task id -> its role */
  ytask *t;
  hyarn_am *am;
  pthread_t th;
  bool th_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool quit; /* the thread should finish */
  bool gone; /* the RM ended the application: nothing more can start */
  uv_async_t async;
  bool async_live;
  yexit *ex; /* exits for the loop thread */
  int nex, capex;
  /* the spec's files and archives, staged (stage_files), localized into
   * every container */
  hyarn_resource *res;
  int nres;
  /* every task container's credentials (creds.h): the job's secret under
   * HYARN_CREDS_JOB_SECRET, set by the first launch; the secret is the
   * job's, the same for every launch */
  uint8_t *creds;
  size_t ncreds;
  bool aggregation; /* yarn.log-aggregation-enable: logs move to the cluster's filesystem */
  char stage_dir[PATH_MAX];
  hyarn_container *release; /* granted containers to give back */
  int nrelease, caprelease;
  yarn_pub *pub; /* a managed AM: publishes its job directory (jobsync.c) */
} ypriv;

/* Queues an exit for the loop thread (mu held); false if out of memory. */
bool yarn_push_exit(ypriv *p, int task, int64_t status, int sig, const char *detail, bool lost);
/* Queues a note for the loop thread (mu held): event for task (-1: the
 * job), detail taken, say a console line or NULL. */
void yarn_push_note(ypriv *p, int task, const char *event, json_t *detail, const char *say);
/* Gives c back to YARN on the next heartbeat (mu held); takes c. */
void yarn_push_release(ypriv *p, hyarn_container *c);
/* Frees a NULL-terminated environment. */
void yarn_free_env(char **env);
/* The loop thread's side of p->async: hands the queued ends and notes to
 * the coordinator. */
void yarn_on_async(uv_async_t *h);
/* The heartbeat thread (arg: the ypriv): asks, takes grants, starts,
 * stops, reports ends, until p->quit. */
void *yarn_thread(void *arg);

#endif
