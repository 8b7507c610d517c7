/* jobs.c: what the CLI does with job directories; see jobs.h. */
#include "cli/jobs.h"
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

json_t *jobs_state(const char *dir) { return jobdir_read_json(dir, JOBDIR_STATE, 64u << 20); }

int jobs_slurm_id(const char *dir, char *id, size_t len) {
  json_t *j = jobdir_read_json(dir, JOBDIR_SLURM_JSON, 1 << 20);
  const char *v = j ? json_string_value(json_object_get(j, "job_id")) : NULL;
  int rc = v && *v && strspn(v, "0123456789") == strlen(v) ? 0 : LOOM_ENOENT;
  if (rc == 0) loom__strlcpy(id, v, len);
  json_decref(j);
  return rc;
}

bool jobs_slurm_active(const char *dir) {
  char id[64], cmd[128], state[64] = "";
  if (jobs_slurm_id(dir, id, sizeof id) < 0) return false;
  snprintf(cmd, sizeof cmd, "squeue -h -j %s -o %%T 2>/dev/null", id);
  FILE *p = popen(cmd, "r");
  if (!p) return false;
  if (!fgets(state, sizeof state, p)) state[0] = 0;
  pclose(p);
  return state[0] != 0;
}

bool jobs_coord_alive(const char *dir) {
  char sid[64];
  if (jobs_slurm_id(dir, sid, sizeof sid) == 0) return jobs_slurm_active(dir);
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
