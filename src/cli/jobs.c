/* jobs.c: what the CLI does with job directories; see jobs.h. */
#include "cli/jobs.h"
#include "backend/backend.h"
#include "jobdir/jobdir.h"
#include "wire/wire.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int jobs_create(const spec_job *s, char *id, char *dir, char *secret, char *err, size_t errlen) {
  unsigned char rnd[34];
  if (wire_random(rnd, sizeof rnd) < 0) {
    snprintf(err, errlen, "cannot get random bytes for the job secret");
    return LOOM_EIO;
  }
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  char ts[32];
  strftime(ts, sizeof ts, "%Y%m%d-%H%M%S", &tm);
  snprintf(id, JOBDIR_ID_MAX, "%s-%s-%02x%02x", s->name, ts, rnd[32], rnd[33]);
  loom__hex(rnd, 32, secret);
  int rc = jobdir_create(id, dir, PATH_MAX, err, errlen);
  if (rc < 0) return rc;
  rc = jobdir_write(dir, JOBDIR_SECRET, secret, strlen(secret), false);
  json_t *j = spec_to_json(s);
  char *txt = json_dumps(j, JSON_INDENT(2));
  json_decref(j);
  if (rc == 0) rc = txt ? jobdir_write(dir, JOBDIR_SPEC, txt, strlen(txt), false) : LOOM_ENOMEM;
  free(txt);
  if (rc < 0) snprintf(err, errlen, "cannot write the job directory %s: %s", dir, strerror(errno));
  return rc;
}

int jobs_find(const char *arg, char *dir, size_t dirlen, char *err, size_t errlen) {
  char id[JOBDIR_ID_MAX];
  int rc = jobdir_resolve(NULL, arg, id, sizeof id, err, errlen);
  if (rc == 0 && (rc = jobdir_of(id, dir, dirlen)) < 0)
    snprintf(err, errlen, "the path of job %s is too long", id);
  return rc;
}

bool jobs_refresh(const char *dir, backend_job *bj) {
  backend_job mine;
  const backend_ops *ops = backend_of_job(dir);
  return ops && ops->job_state && ops->job_state(dir, bj ? bj : &mine) == 0;
}

json_t *jobs_state(const char *dir) { return jobdir_read_json(dir, JOBDIR_STATE, 64u << 20); }

bool jobs_coord_alive(const char *dir) {
  /* a coordinator inside a cluster: alive while the manager runs the job */
  backend_job bj;
  if (jobs_refresh(dir, &bj))
    return bj.state == BACKEND_JOB_PENDING || bj.state == BACKEND_JOB_RUNNING;
  json_t *j = jobdir_read_json(dir, JOBDIR_COORD, 1 << 20);
  if (!j) return false;
  int pid = (int)json_integer_value(json_object_get(j, "pid"));
  json_decref(j);
  if (pid <= 0 || kill(pid, 0) < 0) return false;
  /* the pid must still be a loom process */
  char exe[64], link[PATH_MAX];
  snprintf(exe, sizeof exe, "/proc/%d/cmdline", pid);
  FILE *f = fopen(exe, "r");
  if (!f) return false;
  size_t n = fread(link, 1, sizeof link - 1, f);
  fclose(f);
  link[n] = 0;
  return strstr(link, "loom") != NULL;
}
