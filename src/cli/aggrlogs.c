/* aggrlogs.c: `loom logs` from YARN's aggregated logs, for a YARN job whose
 * job directory is gone or holds no task logs (the client that ran it was
 * elsewhere, or it was cleaned up): `loom logs application_<id>` or `loom
 * logs JOB` when JOB's directory names its application but lacks the log.
 *
 * With log aggregation on, each NodeManager uploads a finished
 * application's container logs to one TFile per node (src/hadoop/tfile.h)
 * under yarn.nodemanager.remote-app-log-dir: Hadoop 3's layout is
 * <dir>/<user>/bucket-<suffix>-tfile/<app number % 10000, 4 digits>/<app>/
 * <node>_<port>, Hadoop 2's <dir>/<user>/<suffix>/<app>/...; both are
 * looked for, for the owner given (HADOOP_USER_NAME or the login) and
 * then for every user. Each task's container has its own stdout and
 * stderr (the agent tees the task's lines there); which task a container
 * ran is in its launch_container.sh (export LOOM_TASK="role:index"), which
 * Hadoop 3 aggregates with the logs. Everything is read with loom's own
 * HDFS client: no JVM. */
#include "cli/cli.h"

#include "cli/jobs.h"
#include "core/exitcode.h"
#include "hadoop/conf.h"
#include "hadoop/hdfs.h"
#include "hadoop/tfile.h"
#include "jobdir/jobdir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  char container[128], task[128];
  loom__buf out, err;
} acont;

typedef struct {
  acont *c;
  int n, cap;
} alogs;

static acont *cont_of(alogs *a, const char *id) {
  for (int i = 0; i < a->n; i++)
    if (!strcmp(a->c[i].container, id)) return &a->c[i];
  if (a->n == a->cap) {
    int cap = a->cap ? a->cap * 2 : 16;
    acont *nc = realloc(a->c, (size_t)cap * sizeof *nc);
    if (!nc) return NULL;
    a->c = nc, a->cap = cap;
  }
  acont *c = &a->c[a->n++];
  memset(c, 0, sizeof *c);
  loom__strlcpy(c->container, id, sizeof c->container);
  loom__buf_init(&c->out, TFILE_MAX_FILE);
  loom__buf_init(&c->err, TFILE_MAX_FILE);
  return c;
}

static int on_log(void *arg, const char *container, const char *type, const uint8_t *data,
                  size_t len) {
  acont *c = cont_of(arg, container);
  if (!c) return LOOM_ENOMEM;
  if (!strcmp(type, "stdout") || !strcmp(type, "stderr"))
    return loom__buf_add(type[3] == 'o' ? &c->out : &c->err, data, len);
  if (!strcmp(type, "launch_container.sh")) {
    static const char k[] = "export LOOM_TASK=\"";
    const uint8_t *p = memmem(data, len, k, sizeof k - 1);
    if (p) {
      p += sizeof k - 1;
      const uint8_t *q = memchr(p, '"', len - (size_t)(p - data));
      if (q && (size_t)(q - p) < sizeof c->task) {
        memcpy(c->task, p, (size_t)(q - p));
        c->task[q - p] = 0;
      }
    }
  }
  return 0;
}

/* The application's aggregated log directory into out: 0, or LOOM_ENOENT. */
static int find_app_dir(hdfs *fs, const char *root, const char *user, const char *app,
                        const char *suffix, char *out, size_t outlen) {
  const char *num = strrchr(app, '_');
  long long id = num ? strtoll(num + 1, NULL, 10) : 0;
  char bucket[16];
  snprintf(bucket, sizeof bucket, "%04lld", id % 10000);
  char udir[HDFS_MAX_PATH], e[512];
  snprintf(udir, sizeof udir, "%s/%s", root, user);
  hdfs_stat *ents = NULL;
  size_t n = 0;
  if (hdfs_list(fs, udir, &ents, &n, e, sizeof e) < 0) return LOOM_ENOENT;
  int rc = LOOM_ENOENT;
  /* the configured suffix's directories first, then any other there */
  for (int pass = 0; pass < 2 && rc < 0; pass++)
    for (size_t i = 0; i < n && rc < 0; i++) {
      if (!ents[i].dir) continue;
      bool mine = strstr(ents[i].name, suffix) != NULL;
      if (mine != (pass == 0)) continue;
      /* Hadoop 3's bucket-<suffix>-tfile/<bucket>/<app>, Hadoop 2's
       * <suffix>/<app> */
      for (int f = 0; f < 2 && rc < 0; f++) {
        int w = f == 0 ? snprintf(out, outlen, "%s/%s/%s/%s", udir, ents[i].name, bucket, app)
                       : snprintf(out, outlen, "%s/%s/%s", udir, ents[i].name, app);
        if (w < 0 || (size_t)w >= outlen) continue;
        hdfs_stat st;
        if (hdfs_stat_path(fs, out, &st, e, sizeof e) == 0 && st.dir) rc = 0;
      }
    }
  free(ents);
  return rc;
}

/* Reads the whole file at path (bounded) into a malloc'ed buffer. */
static int read_all(hdfs *fs, const char *path, uint8_t **out, size_t *len, char *err,
                    size_t errlen) {
  hdfs_reader *r;
  int rc = hdfs_open(fs, path, &r, err, errlen);
  if (rc < 0) return rc;
  uint64_t size = hdfs_reader_size(r);
  if (size > TFILE_MAX_FILE) {
    hdfs_reader_close(r);
    snprintf(err, errlen, "%s: %llu bytes, more than loom reads (%llu)", path,
             (unsigned long long)size, TFILE_MAX_FILE);
    return LOOM_ERANGE;
  }
  uint8_t *b = malloc(size ? size : 1);
  if (!b) {
    hdfs_reader_close(r);
    return LOOM_ENOMEM;
  }
  size_t got = 0;
  rc = size ? hdfs_pread(r, b, size, 0, &got, err, errlen) : 0;
  hdfs_reader_close(r);
  if (rc == 0 && got != size) {
    snprintf(err, errlen, "%s: read %zu of its %llu bytes", path, got, (unsigned long long)size);
    rc = LOOM_EIO;
  }
  if (rc < 0) {
    free(b);
    return rc;
  }
  *out = b, *len = size;
  return 0;
}

/* role:index orders by role, then index as a number */
static int task_cmp(const void *a, const void *b) {
  const acont *x = a, *y = b;
  const char *cx = strrchr(x->task, ':'), *cy = strrchr(y->task, ':');
  size_t lx = cx ? (size_t)(cx - x->task) : strlen(x->task);
  size_t ly = cy ? (size_t)(cy - y->task) : strlen(y->task);
  int c = strncmp(x->task, y->task, lx < ly ? lx : ly);
  if (c || lx != ly) return c ? c : lx < ly ? -1 : 1;
  long long ix = cx ? atoll(cx + 1) : 0, iy = cy ? atoll(cy + 1) : 0;
  if (ix != iy) return ix < iy ? -1 : 1;
  return strcmp(x->container, y->container);
}

/* Each line of b, prefixed "[task] " when prefix is not NULL. */
static void print_lines(const loom__buf *b, const char *prefix) {
  if (!prefix) {
    fwrite(b->p, 1, b->len, stdout);
    return;
  }
  const char *p = b->p, *end = b->p + b->len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    printf("[%s] %.*s\n", prefix, (int)n, p);
    p += n + (nl ? 1 : 0);
  }
}

/* `loom logs` of YARN application app from its aggregated logs: every
 * task's lines prefixed (stdout, then stderr, a task at a time), or task's
 * alone. An exit status. */
int cli_aggr_logs(const char *app, const char *task) {
  char cdir[1024], file[1200], why[1024], root[HDFS_MAX_PATH], suffix[256], user[256];
  const char *how;
  if (hconf_find_dir(NULL, cdir, sizeof cdir, &how, why, sizeof why) < 0) {
    fprintf(stderr, "loom logs: %s's aggregated logs need the cluster's configuration: %s\n", app,
            why);
    return LOOM_EXIT_USAGE;
  }
  hconf c = {0};
  snprintf(file, sizeof file, "%s/core-site.xml", cdir);
  hconf_load(&c, file, why, sizeof why);
  snprintf(file, sizeof file, "%s/yarn-site.xml", cdir);
  hconf_load(&c, file, why, sizeof why);
  hconf_get(&c, "yarn.nodemanager.remote-app-log-dir", "/tmp/logs", root, sizeof root);
  hconf_get(&c, "yarn.nodemanager.remote-app-log-dir-suffix", "logs", suffix, sizeof suffix);
  hconf_free(&c);
  char url[HDFS_MAX_PATH + 16], err[HDFS_MAX_PATH * 2 + 1024];
  if (hdfs_is_url(root))
    loom__strlcpy(url, root, sizeof url);
  else
    snprintf(url, sizeof url, "hdfs://%s", root);
  hdfs_url u;
  hdfs *fs;
  if (hdfs_parse_url(url, &u, err, sizeof err) < 0 || hdfs_get(u.host, u.port, &fs) < 0) {
    fprintf(stderr, "loom logs: yarn.nodemanager.remote-app-log-dir: %s\n", err);
    return LOOM_EXIT_INFRA;
  }
  hconf_user(user, sizeof user);
  char adir[HDFS_MAX_PATH];
  int rc = find_app_dir(fs, u.path, user, app, suffix, adir, sizeof adir);
  if (rc < 0) { /* someone else's application: every user's directory */
    hdfs_stat *us = NULL;
    size_t nu = 0;
    if (hdfs_list(fs, u.path, &us, &nu, err, sizeof err) == 0)
      for (size_t i = 0; i < nu && rc < 0; i++)
        if (us[i].dir && strcmp(us[i].name, user))
          rc = find_app_dir(fs, u.path, us[i].name, app, suffix, adir, sizeof adir);
    free(us);
  }
  if (rc < 0) {
    fprintf(stderr,
            "loom logs: no aggregated logs of %s under hdfs://%s:%d%s (is log aggregation on, "
            "and has the application ended?)\n",
            app, u.host, u.port, u.path);
    return LOOM_EXIT_USAGE;
  }
  hdfs_stat *files = NULL;
  size_t nf = 0;
  if (hdfs_list(fs, adir, &files, &nf, err, sizeof err) < 0) {
    fprintf(stderr, "loom logs: %s\n", err);
    return LOOM_EXIT_INFRA;
  }
  alogs a = {0};
  int status = 0, partial = 0;
  for (size_t i = 0; i < nf && status == 0; i++) {
    size_t nl = strlen(files[i].name);
    if (files[i].dir) continue;
    if (nl > 4 && !strcmp(files[i].name + nl - 4, ".tmp")) { /* still being uploaded */
      partial++;
      continue;
    }
    char path[HDFS_MAX_PATH * 2];
    snprintf(path, sizeof path, "%s/%s", adir, files[i].name);
    uint8_t *b;
    size_t len;
    char owner[256];
    rc = read_all(fs, path, &b, &len, err, sizeof err);
    if (rc == 0) {
      char why2[512] = "";
      rc = tfile_logs_each(b, len, on_log, &a, owner, sizeof owner, why2, sizeof why2);
      if (rc < 0) snprintf(err, sizeof err, "%s: %s", path, why2[0] ? why2 : loom_strerror(rc));
      free(b);
    }
    if (rc < 0) {
      fprintf(stderr, "loom logs: %s\n", err);
      status = LOOM_EXIT_INFRA;
    }
  }
  free(files);
  if (partial)
    fprintf(stderr,
            "loom logs: %d node(s) still uploading %s's logs: what is printed may lack "
            "some tasks\n",
            partial, app);
  int shown = 0;
  if (status == 0) {
    qsort(a.c, (size_t)a.n, sizeof *a.c, task_cmp);
    for (int i = 0; i < a.n; i++) {
      acont *ct = &a.c[i];
      if (!ct->task[0]) continue; /* the application master's, say */
      if (task && strcmp(ct->task, task)) continue;
      print_lines(&ct->out, task ? NULL : ct->task);
      print_lines(&ct->err, task ? NULL : ct->task);
      shown++;
    }
    fflush(stdout);
    if (!shown) {
      fprintf(stderr, "loom logs: %s's aggregated logs (%s) hold %s%s\n", app, adir,
              task ? "no task " : "no task's logs", task ? task : "");
      status = LOOM_EXIT_USAGE;
    }
  }
  for (int i = 0; i < a.n; i++) loom__buf_free(&a.c[i].out), loom__buf_free(&a.c[i].err);
  free(a.c);
  return status;
}

/* The YARN application of the job at dir (its yarn_application event)
 * into app: true when it has one. */
bool cli_job_app(const char *dir, char *app, size_t len) {
  char path[PATH_MAX + 32];
  jobdir_path(dir, JOBDIR_EVENTS, path, sizeof path);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char line[8192];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    if (!strstr(line, "\"yarn_application\"")) continue;
    json_t *j = json_loads(line, 0, NULL);
    json_t *d = j ? json_object_get(j, "application") : NULL;
    if (json_is_string(d) && strlen(json_string_value(d)) < len) {
      loom__strlcpy(app, json_string_value(d), len);
      found = true;
    }
    json_decref(j);
  }
  fclose(f);
  return found;
}
