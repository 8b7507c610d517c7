/* jobsync.c: a managed application master's job directory, which is not
 * the client's. `loom submit` hands the coordinator to YARN; its container
 * may run on any node, which has neither the client's job directory nor
 * any directory shared with the client. So:
 *
 * - The client stages what the coordinator reads (the spec and the job's
 *   secret) in the job's published copy, a directory of the cluster's
 *   default filesystem only its owner may read (0700):
 *   <fs.defaultFS>/user/<user>/.loom/jobs/<id>/ on HDFS, beside the binary
 *   cache (ship.c), else <loom home>/yarn-jobs/<id>/. Both files reach the
 *   container as LocalResources; the container's shell copies them into
 *   ./<id>/, the application master's own job directory.
 * - The application master publishes what it writes there (state, events,
 *   summary, its coordinator's address, its log and the tasks' logs) into
 *   the published copy once a second while it changes, and a last time
 *   before it unregisters (yarn_pub_sync).
 * - The client's `loom status`, `loom logs` and `loom kill` bring the
 *   client's job directory up to date from the published copy before they
 *   read it (yarn_job_pull, through the backend's job_state): after that
 *   they read their own directory as for every other backend. A file is
 *   copied when its size or time there differ from what was last copied
 *   (yarn-sync.json records it).
 * - A new attempt of the application master (YARN started it again) first
 *   takes the state, events and logs of the previous one from the
 *   published copy, so its attempts and logs go on.
 *
 * One path for a one-host and a multi-host cluster. Where the node sees
 * the client's job directory itself (one host, or a home shared by NFS:
 * its secret there is the job's), the application master also copies
 * what it publishes there, after the published copy, and marks it so
 * (yarn-sync.json {"mirror": true}): the client then reads it as it is. */
#include "backend/yarn/yarn_int.h"

#include "fs/fs.h"
#include "hadoop/conf.h"
#include "hadoop/hdfs.h"
#include "jobdir/jobdir.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* What is published, besides logs/<task>.log, in this order: the state
 * that says the job ended comes after the lines it ended with. */
static const jobdir_file published[] = {JOBDIR_COORD,  JOBDIR_COORD_LOG, JOBDIR_ALL_LOG,
                                        JOBDIR_EVENTS, JOBDIR_SUMMARY,   JOBDIR_STATE};

/* How often a running application master publishes what changed, at
 * most; a file is put whole each time, so a large one waits longer
 * (PUB_MS_PER_KIB: about 1 MiB/s a file), which keeps a long job's growing
 * logs from costing the square of their size. The last sync puts all. */
#define PUB_EVERY_MS 1000
#define PUB_MS_PER_KIB 1

int yarn_job_url(const char *id, char *url, size_t len) {
  char why[512], user[256];
  hdfs_url def;
  int n;
  if (hdfs_parse_url("hdfs:///", &def, why, sizeof why) == 0) {
    hconf_user(user, sizeof user);
    n = snprintf(url, len, "hdfs://%s:%d/user/%s/.loom/jobs/%s", def.host, def.port, user, id);
  } else {
    n = snprintf(url, len, "%s/yarn-jobs/%s", jobdir_home(), id);
  }
  return n < 0 || (size_t)n >= len ? LOOM_ERANGE : 0;
}

/* Makes url's directory, its owner's only. */
static int mkdir_private(const char *url, char *err, size_t errlen) {
  if (!loom__fs_remote(url)) {
    if (loom__mkdir_p(url, 0700) < 0) {
      snprintf(err, errlen, "cannot create %s", url);
      return LOOM_EIO;
    }
    return chmod(url, 0700) == 0 ? 0 : LOOM_EIO;
  }
  hdfs_url u;
  hdfs *fs;
  int rc = hdfs_parse_url(url, &u, err, errlen);
  if (rc == 0) rc = hdfs_get(u.host, u.port, &fs);
  if (rc == 0) rc = hdfs_mkdirs(fs, u.path, 0700, err, errlen);
  return rc;
}

int yarn_job_stage(const char *job_dir, const char *url, hyarn_resource res[2], char *err,
                   size_t errlen) {
  memset(res, 0, 2 * sizeof *res);
  char why[1024];
  int rc = mkdir_private(url, why, sizeof why);
  const jobdir_file what[2] = {JOBDIR_SPEC, JOBDIR_SECRET};
  for (int i = 0; rc == 0 && i < 2; i++) {
    char *local = jobdir_apath(job_dir, what[i]);
    char *remote = loom__asprintf("%s/%s", url, jobdir_name(what[i]));
    loom__fs_info st;
    rc = local && remote ? loom__fs_put(local, remote, true, why, sizeof why) : LOOM_ENOMEM;
    if (rc == 0) rc = loom__fs_stat(remote, &st, why, sizeof why);
    free(local);
    if (rc == 0) {
      res[i].name = strdup(jobdir_name(what[i]));
      res[i].path = remote;
      res[i].size = (int64_t)st.size;
      res[i].mtime_ms = st.mtime_ms;
      if (!res[i].name) rc = LOOM_ENOMEM;
    } else {
      free(remote);
    }
  }
  if (rc < 0) {
    for (int i = 0; i < 2; i++) free((char *)res[i].name), free((char *)res[i].path);
    memset(res, 0, 2 * sizeof *res);
    snprintf(err, errlen, "cannot stage the job's spec and secret in %s: %s", url,
             rc == LOOM_ENOMEM ? "out of memory" : why);
    return rc == LOOM_ENOMEM ? rc : LOOM_EBACKEND;
  }
  return 0;
}

/* ---- the client (and a new application master attempt): copy in ---------- */

/* "size mtime" of st. */
static void stamp(const loom__fs_info *st, char *buf, size_t len) {
  snprintf(buf, len, "%llu %lld", (unsigned long long)st->size, (long long)st->mtime_ms);
}

int yarn_job_pull(const char *dir, const char *url, bool restore) {
  json_t *rec = jobdir_read_json(dir, JOBDIR_YARN_SYNC, 1 << 20);
  if (rec && json_is_true(json_object_get(rec, "mirror"))) {
    json_decref(rec);
    return 0; /* the application master writes this directory itself */
  }
  if (!rec) rec = json_object();
  json_t *files = json_object_get(rec, "files");
  if (!files) json_object_set_new(rec, "files", files = json_object());
  if (!files) {
    json_decref(rec);
    return LOOM_ENOMEM;
  }
  /* the fixed files, then the tasks' logs */
  char why[1024], **logs = NULL;
  size_t nlogs = 0;
  char *pat = loom__asprintf("%s/%s/*.log", url, jobdir_name(JOBDIR_LOGS));
  if (pat && loom__fs_glob(pat, &logs, &nlogs, why, sizeof why) < 0) logs = NULL, nlogs = 0;
  free(pat);
  size_t nfixed = sizeof published / sizeof *published, ulen = strlen(url);
  bool changed = false;
  int rc = 0;
  for (size_t i = 0; i < nfixed + nlogs; i++) {
    const char *name;
    char *remote;
    if (i < nfixed) {
      jobdir_file f = published[i];
      if (restore && (f == JOBDIR_COORD || f == JOBDIR_COORD_LOG || f == JOBDIR_SUMMARY)) continue;
      name = jobdir_name(f);
      remote = loom__asprintf("%s/%s", url, name);
    } else {
      const char *l = logs[i - nfixed];
      if (strncmp(l, url, ulen) || l[ulen] != '/') continue;
      name = l + ulen + 1;
      if (!strcmp(name, jobdir_name(JOBDIR_ALL_LOG))) continue; /* a fixed one */
      remote = strdup(l);
    }
    loom__fs_info st;
    char now[64];
    if (!remote || loom__fs_stat(remote, &st, why, sizeof why) < 0 || st.dir) {
      free(remote);
      continue;
    }
    stamp(&st, now, sizeof now);
    char *local = loom__asprintf("%s/%s", dir, name);
    const char *had = json_string_value(json_object_get(files, name));
    struct stat ls;
    bool have = local && stat(local, &ls) == 0;
    if (local && (!have || !had || strcmp(had, now))) {
      if (loom__fs_get(remote, local, why, sizeof why) == 0) {
        json_object_set_new(files, name, json_string(now));
        changed = true;
      } else {
        rc = LOOM_EIO;
      }
    }
    free(local);
    free(remote);
  }
  for (size_t i = 0; i < nlogs; i++) free(logs[i]);
  free(logs);
  if (changed) {
    char *js = json_dumps(rec, JSON_COMPACT);
    if (js) jobdir_write(dir, JOBDIR_YARN_SYNC, js, strlen(js), false);
    free(js);
  }
  json_decref(rec);
  return rc;
}

/* ---- the application master: publish ------------------------------------- */

struct yarn_pub {
  char dir[PATH_MAX];    /* its own job directory, ./<id> */
  char url[PATH_MAX];    /* the published copy */
  char mirror[PATH_MAX]; /* the client's job directory, when this node sees it; else "" */
  json_t *sent;          /* name -> "size mtime_ns" last published */
  json_t *when;          /* name -> loom__now_ms() of that */
  bool logs_made;
  uint64_t last;
};

/* Whether the files at a and b hold the same bytes (small ones). */
static bool same_file(const char *a, const char *b) {
  char *x = NULL, *y = NULL;
  size_t xl = 0, yl = 0;
  bool same = loom__read_file(a, 4096, &x, &xl) == 0 && loom__read_file(b, 4096, &y, &yl) == 0 &&
              xl == yl && xl > 0 && !memcmp(x, y, xl);
  free(x);
  free(y);
  return same;
}

yarn_pub *yarn_pub_open(void) {
  const char *url = getenv(YARN_MANAGED_ENV) ? getenv(YARN_JOB_ENV) : NULL;
  const char *slash = url ? strrchr(url, '/') : NULL;
  if (!slash || !jobdir_valid_id(slash + 1)) return NULL;
  yarn_pub *p = calloc(1, sizeof *p);
  if (!p || !(p->sent = json_object()) || !(p->when = json_object())) {
    if (p) json_decref(p->sent);
    free(p);
    return NULL;
  }
  loom__strlcpy(p->url, url, sizeof p->url);
  loom__strlcpy(p->dir, slash + 1, sizeof p->dir);
  const char *client = getenv(YARN_CLIENT_DIR_ENV);
  if (client && *client) {
    char *mine = jobdir_apath(p->dir, JOBDIR_SECRET), *theirs = jobdir_apath(client, JOBDIR_SECRET);
    if (mine && theirs && same_file(mine, theirs)) {
      loom__strlcpy(p->mirror, client, sizeof p->mirror);
      const char *m = "{\"mirror\": true}";
      jobdir_write(client, JOBDIR_YARN_SYNC, m, strlen(m), false);
    }
    free(mine);
    free(theirs);
  }
  return p;
}

/* Publishes local name (a path inside the job directory) when it changed. */
static void pub_one(yarn_pub *p, const char *name, bool final) {
  char *local = loom__asprintf("%s/%s", p->dir, name);
  struct stat st;
  if (!local || stat(local, &st) < 0 || !S_ISREG(st.st_mode)) {
    free(local);
    return;
  }
  char now[64], why[1024];
  snprintf(now, sizeof now, "%lld %lld.%09ld", (long long)st.st_size, (long long)st.st_mtim.tv_sec,
           st.st_mtim.tv_nsec);
  const char *had = json_string_value(json_object_get(p->sent, name));
  if (had && !strcmp(had, now)) {
    free(local);
    return;
  }
  uint64_t t = loom__now_ms(), wait = (uint64_t)st.st_size / 1024 * PUB_MS_PER_KIB;
  json_t *last = json_object_get(p->when, name);
  if (!final && had && last && t - (uint64_t)json_integer_value(last) < wait) {
    free(local);
    return;
  }
  bool in_logs = !strncmp(name, jobdir_name(JOBDIR_LOGS), strlen(jobdir_name(JOBDIR_LOGS))) &&
                 name[strlen(jobdir_name(JOBDIR_LOGS))] == '/';
  if (in_logs && !p->logs_made) {
    char *d = loom__asprintf("%s/%s", p->url, jobdir_name(JOBDIR_LOGS));
    p->logs_made = d && loom__fs_mkdirs(d, why, sizeof why) == 0;
    free(d);
  }
  char *remote = loom__asprintf("%s/%s", p->url, name);
  int rc = remote ? loom__fs_put(local, remote, true, why, sizeof why) : LOOM_ENOMEM;
  if (rc < 0)
    loom__log(LOOM_LOG_WARN, "yarn", "cannot publish %s to %s: %s", name, p->url,
              rc == LOOM_ENOMEM ? "out of memory" : why);
  if (rc == 0 && p->mirror[0]) {
    char *m = loom__asprintf("%s/%s", p->mirror, name);
    if (m && loom__fs_put(local, m, true, why, sizeof why) < 0)
      loom__log(LOOM_LOG_WARN, "yarn", "cannot copy %s to %s: %s", name, p->mirror, why);
    free(m);
  }
  if (rc == 0) {
    json_object_set_new(p->sent, name, json_string(now));
    json_object_set_new(p->when, name, json_integer((json_int_t)t));
  }
  free(remote);
  free(local);
}

void yarn_pub_sync(yarn_pub *p, bool final) {
  if (!p) return;
  uint64_t now = loom__now_ms();
  if (!final && now - p->last < PUB_EVERY_MS) return;
  p->last = now;
  /* the tasks' logs first: the state that says they ended comes after */
  char *logs = jobdir_apath(p->dir, JOBDIR_LOGS);
  char **names = NULL;
  size_t n = 0;
  char *pat = logs ? loom__asprintf("%s/*.log", logs) : NULL;
  char why[512];
  if (pat && loom__fs_glob(pat, &names, &n, why, sizeof why) < 0) names = NULL, n = 0;
  size_t dlen = strlen(p->dir);
  for (size_t i = 0; i < n; i++) {
    if (!strncmp(names[i], p->dir, dlen) && names[i][dlen] == '/' &&
        strcmp(names[i] + dlen + 1, jobdir_name(JOBDIR_ALL_LOG)))
      pub_one(p, names[i] + dlen + 1, final);
    free(names[i]);
  }
  free(names);
  free(pat);
  free(logs);
  for (size_t i = 0; i < sizeof published / sizeof *published; i++)
    pub_one(p, jobdir_name(published[i]), final);
}

void yarn_pub_free(yarn_pub *p) {
  if (!p) return;
  json_decref(p->sent);
  json_decref(p->when);
  free(p);
}
