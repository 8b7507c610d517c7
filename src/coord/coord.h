/* coord.h: the coordinator: one per job. It asks the backend for every
 * task's agent, runs the rendezvous, the KV store and the event log,
 * collects logs, follows each task's state and decides what a failure
 * means (stop the attempt, retry, give up). */
#ifndef LOOM_COORD_H
#define LOOM_COORD_H

#include "core/exitcode.h"
#include "spec/spec.h"

typedef struct {
  const char *job_dir; /* <home>/jobs/<id> */
  const char *job_id;
  const char *secret; /* the job's secret, hex */
  const spec_job *spec;
  const char *backend;   /* overrides spec->backend when not NULL */
  const char *self_exe;  /* the loom executable the agents run */
  const char *bind;      /* address to listen on; "127.0.0.1" by default */
  const char *advertise; /* host agents reach the coordinator at; the bound address by default */
  int first_attempt;     /* > 0 when a requeued job continues its attempts */
  bool console;          /* stream task output and the summary to stdout */
  bool color;            /* color the task prefixes */
  bool status_line;      /* a live status line on stderr */
} coord_opts;

/* Runs the job to its end and returns its exit status (core/exitcode.h):
 * LOOM_EXIT_OK succeeded, _FAILED a task failed past its retries, _INFRA
 * the backend failed, _INTR interrupted or killed. Handles SIGINT and
 * SIGTERM itself while it runs. */
int coord_run(const coord_opts *o);

#endif
