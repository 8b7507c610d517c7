/* spec.h: the job spec: parse YAML into a typed, validated, resolved spec.
 * Every error names file:line:column and what to do. See docs/spec.md for
 * the keys. */
#ifndef LOOM_SPEC_H
#define LOOM_SPEC_H

#include "core/core.h"
#include <jansson.h>

typedef struct {
  char *key, *value;
} spec_kv;

/* where python: unpacks its environment in each task's directory */
#define SPEC_PYTHON_ENV "loom-env"

typedef struct {
  char *name;
  int instances;
  char *shell;     /* command as a string, run by /bin/sh -c; or NULL */
  char **argv;     /* command as a list, exec'd; NULL-terminated, or NULL */
  int vcores;      /* 0: not constrained */
  uint64_t memory; /* bytes; 0: not limited */
  int gpus;
  char *label;
  int procs;
  bool service;                 /* the job does not wait for it; stopped at the end */
  int elastic_min, elastic_max; /* 0: not elastic */
  char *restart;                /* "job" or "task"; NULL: the job's restart */
  spec_kv *env;
  int nenv;
} spec_role;

typedef struct {
  char *path; /* the spec file, absolute */
  char *name, *backend, *queue, *restart;
  int retries, max_restarts;
  bool retries_set, max_restarts_set; /* written in the spec (or --set) */
  int *retry_on; /* exit codes that are retried (signals always are); NULL: all */
  int nretry_on;
  int heartbeat_timeout_ms; /* 0: LOOM_HEARTBEAT_TIMEOUT */
  spec_kv *env;
  int nenv;
  spec_kv *files; /* target -> absolute source */
  int nfiles;
  spec_kv *archives; /* target -> absolute source of an archive (.tar.gz, .tgz, .tar, .zip),
                        unpacked into the task's directory */
  int narchives;
  spec_role *roles;
  int nroles;
  json_t *feed;  /* as written, validated; NULL if absent */
  char *warning; /* what is allowed but likely wrong, located; NULL if nothing */
} spec_job;

/* Parses and validates the spec at path, applying overrides ("a.b=c") on
 * top. On error returns LOOM_ESPEC (or LOOM_EIO) and writes a message
 * ("job.yaml:4:3: ...") into err. On success *out is owned by the caller
 * (spec_free). */
int spec_load(const char *path, const char *const *sets, int nsets, spec_job **out, char *err,
              size_t errlen);
/* Same, from text in memory (name is used in messages and to resolve
 * relative paths from the current directory). */
int spec_parse(const char *name, const char *text, size_t len, const char *const *sets, int nsets,
               spec_job **out, char *err, size_t errlen);
void spec_free(spec_job *s);
/* The resolved spec as JSON (valid YAML), defaults filled in. */
json_t *spec_to_json(const spec_job *s);
const spec_role *spec_role_find(const spec_job *s, const char *name);
/* The restart policy of role r's tasks: its own, else the job's. */
const char *spec_role_restart(const spec_job *s, const spec_role *r);
/* Whether a task that ended with (code, sig) may be restarted or retried. */
bool spec_retryable(const spec_job *s, int code, int sig);
/* Training roles: chief and worker, or when neither exists every role that
 * is not a service, evaluator or tensorboard. */
bool spec_role_is_training(const spec_job *s, const spec_role *r);
int spec_total_tasks(const spec_job *s);

/* ---- what spec asks of the program: the backends a spec may name ----
 * spec checks the backend a spec names without knowing any cluster
 * manager: the program that links spec defines these three (the loom
 * command: the backend registry, src/backend/backend.c; the spec_parse
 * fuzz harness: tests/fuzz/fuzz_backends.c), so that the arrow goes one
 * way, backend -> spec. */
/* The backend of a spec that names none. */
const char *spec_backend_default(void);
/* Whether the program has a backend called name. */
bool spec_backend_known(const char *name);
/* Every backend's name, ", "-separated, for the error that names an
 * unknown one. */
const char *spec_backend_names(void);

#endif
