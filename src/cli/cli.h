/* cli.h: the loom command's verbs, shared by its files: main.c (the verb
 * table, help, dispatch), run.c (run, submit, coordinator) and views.c
 * (status, logs, events, kill). Not a library: only src/cli/ prints for
 * people and returns exit statuses (core/exitcode.h). */
#ifndef LOOM_CLI_H
#define LOOM_CLI_H

#include "core/core.h"

#include <stddef.h>

/* A verb's handler: argv[0] is the program, argv[1] the verb, its
 * arguments from argv[2]. Returns the process exit status (enum
 * loom_exit). */
typedef int cli_verb_fn(int argc, char **argv);

/* run.c */
cli_verb_fn cli_run;         /* `loom run SPEC ...`: stays attached */
cli_verb_fn cli_submit;      /* `loom submit SPEC ...`: prints the job id */
cli_verb_fn cli_coordinator; /* `loom coordinator JOBDIR ...` (internal) */

/* views.c */
cli_verb_fn cli_status; /* `loom status [JOB] [--json]` */
cli_verb_fn cli_logs;   /* `loom logs JOB [--task T] [--follow]` */
cli_verb_fn cli_events; /* `loom events JOB [--json]` */
cli_verb_fn cli_kill;   /* `loom kill JOB` */
/* aggrlogs.c: YARN's aggregated logs, for `loom logs` of an application id
 * or of a YARN job whose directory lacks its logs */
int cli_aggr_logs(const char *app, const char *task);     /* every task's, or task's */
bool cli_job_app(const char *dir, char *app, size_t len); /* the job's application id */

/* main.c */
/* Says on stderr what is wrong with the arguments of verb ("loom VERB:
 * ...", then where its help is); returns LOOM_EXIT_USAGE. */
int cli_bad_usage(const char *verb, const char *fmt, ...) LOOM__PRINTF(2, 3);
/* The path of the running loom executable (the agents and a detached
 * coordinator run it) into buf; -1 when /proc does not say. */
int cli_self_exe(char *buf, size_t len);

#endif
