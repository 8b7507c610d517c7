/* jobs.h: what the CLI does with job directories (src/jobdir owns their
 * layout): creating a job's, finding one from what a user typed, reading
 * its state, asking whether its coordinator still runs. */
#ifndef LOOM_CLI_JOBS_H
#define LOOM_CLI_JOBS_H

#include "backend/backend.h"
#include "spec/spec.h"

/* Creates the job directory for spec s: id, logs/, tasks/, tensorboard/,
 * output/, secret (0600), spec.yaml (resolved). id gets the job id (at
 * least 160 bytes), dir its path (PATH_MAX), secret the hex secret (65). */
int jobs_create(const spec_job *s, char *id, char *dir, char *secret, char *err, size_t errlen);
/* Finds a job from an id, a unique prefix of one, or "last" (see
 * jobdir_resolve); its directory goes to dir. */
int jobs_find(const char *arg, char *dir, size_t dirlen, char *err, size_t errlen);
/* For a job whose coordinator runs in its cluster manager: asks the
 * manager for it into *bj (when not NULL) and, where the coordinator's
 * job directory is not this one (a YARN managed application master),
 * brings this one up to date from what the coordinator published. false
 * for other jobs, or when the manager cannot say. */
bool jobs_refresh(const char *dir, backend_job *bj);
/* The job's state, or NULL. */
json_t *jobs_state(const char *dir);
/* true while the job's coordinator process is alive (for a backend whose
 * coordinator runs in the cluster: while the manager has the job pending
 * or running). */
bool jobs_coord_alive(const char *dir);

#endif
