/* jobs.c: job directories; see jobs.h. */
#include "cli/jobs.h"
#include "backend/backend.h"
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

const char *jobs_home(void) {
  static char home[PATH_MAX];
  const char *h = getenv("LOOM_HOME");
  if (h && *h) {
    loom__strlcpy(home, h, sizeof home);
  } else {
    const char *u = getenv("HOME");
    snprintf(home, sizeof home, "%s/.loom", u && *u ? u : "/tmp");
  }
  return home;
}

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
  snprintf(id, 160, "%s-%s-%02x%02x", s->name, ts, rnd[32], rnd[33]);
  snprintf(dir, PATH_MAX, "%s/jobs/%s", jobs_home(), id);
  loom__hex(rnd, 32, secret);
  static const char *const subs[] = {"", "/logs", "/tasks", "/tensorboard", "/output"};
  for (size_t i = 0; i < LOOM__ARRAY_LEN(subs); i++) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s%s", dir, subs[i]);
    /* the owner only: the secret, the dashboard token (events) and logs */
    if (loom__mkdir_p(p, 0700) < 0) {
      snprintf(err, errlen, "cannot create %s: %s (set LOOM_HOME to a writable directory)", p,
               strerror(errno));
      return LOOM_EIO;
    }
  }
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/secret", dir);
  int rc = loom__write_atomic(p, secret, strlen(secret), 0600, false);
  json_t *j = spec_to_json(s);
  char *txt = json_dumps(j, JSON_INDENT(2));
  json_decref(j);
  snprintf(p, sizeof p, "%s/spec.yaml", dir);
  if (rc == 0) rc = txt ? loom__write_atomic(p, txt, strlen(txt), 0600, false) : LOOM_ENOMEM;
  free(txt);
  if (rc < 0) snprintf(err, errlen, "cannot write the job directory %s: %s", dir, strerror(errno));
  return rc;
}

int jobs_list(char ids[][160], int max) {
  char jd[PATH_MAX];
  snprintf(jd, sizeof jd, "%s/jobs", jobs_home());
  DIR *d = opendir(jd);
  if (!d) return 0;
  struct ent { char id[160]; time_t t; } *all = NULL;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[PATH_MAX + 300];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s/spec.yaml", jd, e->d_name);
    if (stat(p, &st) < 0) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      struct ent *na = realloc(all, (size_t)cap * sizeof *all);
      if (!na) break;
      all = na;
    }
    loom__strlcpy(all[n].id, e->d_name, sizeof all[n].id);
    all[n].t = st.st_mtime;
    n++;
  }
  closedir(d);
  /* newest first: by the timestamp inside the id, then mtime */
  for (int i = 1; i < n; i++)
    for (int k = i; k > 0; k--) {
      const char *a = all[k - 1].id, *b = all[k].id;
      size_t la = strlen(a), lb = strlen(b);
      int cmp = la > 20 && lb > 20 ? strcmp(a + la - 20, b + lb - 20) : 0;
      if (cmp == 0) cmp = all[k - 1].t < all[k].t ? -1 : all[k - 1].t > all[k].t;
      if (cmp >= 0) break;
      struct ent tmp = all[k - 1];
      all[k - 1] = all[k];
      all[k] = tmp;
    }
  int out = n < max ? n : max;
  for (int i = 0; i < out; i++) loom__strlcpy(ids[i], all[i].id, 160);
  free(all);
  return out;
}

int jobs_find(const char *arg, char *dir, size_t dirlen, char *err, size_t errlen) {
  static char ids[4096][160];
  int n = jobs_list(ids, 4096);
  if (!strcmp(arg, "last")) {
    if (n == 0) {
      snprintf(err, errlen, "no jobs under %s/jobs", jobs_home());
      return LOOM_ENOENT;
    }
    snprintf(dir, dirlen, "%s/jobs/%s", jobs_home(), ids[0]);
    return 0;
  }
  int found = -1, matches = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(ids[i], arg)) {
      found = i;
      matches = 1;
      break;
    }
    if (!strncmp(ids[i], arg, strlen(arg))) {
      if (found < 0) found = i;
      matches++;
    }
  }
  if (matches == 0) {
    snprintf(err, errlen, "no job '%s' under %s/jobs: see `loom status` for the jobs there",
             arg, jobs_home());
    return LOOM_ENOENT;
  }
  if (matches > 1) {
    snprintf(err, errlen, "'%s' matches %d jobs (the newest is %s): give more of the id", arg,
             matches, ids[found]);
    return LOOM_EINVAL;
  }
  snprintf(dir, dirlen, "%s/jobs/%s", jobs_home(), ids[found]);
  return 0;
}

json_t *jobs_state(const char *dir) {
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/state.json", dir);
  json_error_t e;
  return json_load_file(p, 0, &e);
}

bool jobs_coord_alive(const char *dir) {
  /* a coordinator inside a cluster: alive while the manager runs the job */
  const backend_ops *ops = backend_of_job(dir);
  backend_job bj;
  if (ops && ops->job_state && ops->job_state(dir, &bj) == 0)
    return bj.state == BACKEND_JOB_PENDING || bj.state == BACKEND_JOB_RUNNING;
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/coord.json", dir);
  json_error_t e;
  json_t *j = json_load_file(p, 0, &e);
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
