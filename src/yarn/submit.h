/* submit.h: a YARN application as a client sees it, over the
 * ResourceManager's client protocol (submit.c): a managed application
 * submitted (its application master in a container YARN starts: `loom
 * submit`), its report, its kill. The unmanaged application master the
 * coordinator itself is under `loom run` is am.h's. */
#ifndef LOOM_YARN_SUBMIT_H
#define LOOM_YARN_SUBMIT_H

#include "core/core.h"
#include "yarn/am.h"

#include <stddef.h>
#include <stdint.h>

/* Single-quotes s for a POSIX shell into b. */
void hyarn_shell_quote(loom__buf *b, const char *s);

/* Submits an application whose AM container runs command (for the
 * NodeManager's shell) with env, nres resources localized into its
 * directory (am.h's hyarn_resource), memory_mb and 1 vcore, up to
 * max_attempts attempts. app_id gets its id (64 bytes). Returns 0,
 * LOOM_ERESOURCE (the RM refused the request: err) or LOOM_EBACKEND. */
int hyarn_submit_managed(const char *conf_dir, const char *name, const char *queue,
                         const char *command, char *const *env, const hyarn_resource *res, int nres,
                         int64_t memory_mb, int max_attempts, int timeout_ms, char app_id[64],
                         char *err, size_t errlen);
/* An application's state word ("ACCEPTED", "RUNNING", "FINISHED",
 * "FAILED", "KILLED"), final status ("SUCCEEDED", ...) and diagnostics.
 * Returns 0, LOOM_ENOENT (the RM does not know it) or LOOM_EBACKEND. */
int hyarn_app_report(const char *conf_dir, const char *app_id, int timeout_ms, char state[16],
                     char final[16], char *diag, size_t diaglen, char *err, size_t errlen);
/* Kills an application. 0 or LOOM_EBACKEND. */
int hyarn_app_kill(const char *conf_dir, const char *app_id, const char *why, int timeout_ms,
                   char *err, size_t errlen);
#endif
