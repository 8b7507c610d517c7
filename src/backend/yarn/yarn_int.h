/* yarn_int.h: what the YARN backend's files share: the client half
 * (client.c: `loom check`, `loom submit`, status and kill through the
 * ResourceManager) that the backend's table in yarn.c names, and the
 * bounds both halves use. Nothing outside src/backend/yarn includes it. */
#ifndef LOOM_BACKEND_YARN_INT_H
#define LOOM_BACKEND_YARN_INT_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>

/* Connecting to the ResourceManager, and each call, give up after this
 * long: a check that fails, fails in seconds. */
#define YARN_RPC_TIMEOUT_MS 10000
/* Set in the environment of a managed application master's container. */
#define YARN_MANAGED_ENV "LOOM_YARN_MANAGED"

/* Whether kv (NAME=value) is a variable of the client's environment a
 * container does not take: the NodeManager's shell sets it itself. */
bool yarn_nm_sets_itself(const char *kv);

/* backend_ops' check, probe, submit, job_state and cancel (backend.h). */
int yarn_check(const spec_job *s, char *err, size_t errlen);
int yarn_probe(char *msg, size_t len);
int yarn_submit(const spec_job *s, const char *job_id, const char *job_dir, const char *exe,
                backend_job *job, char *err, size_t errlen);
int yarn_job_state(const char *job_dir, backend_job *job);
int yarn_cancel(const char *job_dir, char *msg, size_t msglen);

#endif
