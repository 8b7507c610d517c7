/* jobdir.c: the job directory: its place, its files, listing and lookup;
 * see jobdir.h. */
#include "jobdir/jobdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
  const char *path;
  bool mkdir;
} files[] = {
#define JOBDIR__ROW(name, path, mk) {path, mk},
    JOBDIR_FILES(JOBDIR__ROW)
#undef JOBDIR__ROW
};

const char *jobdir_home(void) {
  static char home[PATH_MAX];
  const char *h = getenv(JOBDIR_HOME_ENV);
  if (h && *h) {
    loom__strlcpy(home, h, sizeof home);
  } else {
    const char *u = getenv("HOME");
    snprintf(home, sizeof home, "%s/.loom", u && *u ? u : "/tmp");
  }
  return home;
}

const char *jobdir_root(void) {
  static char root[PATH_MAX + 8];
  snprintf(root, sizeof root, "%s/jobs", jobdir_home());
  return root;
}

const char *jobdir_name(jobdir_file f) { return (unsigned)f < JOBDIR__COUNT ? files[f].path : ""; }

int jobdir_path(const char *dir, jobdir_file f, char *out, size_t len) {
  int n = snprintf(out, len, "%s/%s", dir, jobdir_name(f));
  return n < 0 || (size_t)n >= len ? LOOM_ERANGE : 0;
}

char *jobdir_apath(const char *dir, jobdir_file f) {
  return loom__asprintf("%s/%s", dir, jobdir_name(f));
}

char *jobdir_task_apath(const char *dir, jobdir_file f, const char *task) {
  if (f == JOBDIR_LOGS) return loom__asprintf("%s/%s/%s.log", dir, jobdir_name(f), task);
  if (f == JOBDIR_TASKS) return loom__asprintf("%s/%s/%s", dir, jobdir_name(f), task);
  return NULL;
}

int jobdir_of(const char *id, char *out, size_t len) {
  int n = snprintf(out, len, "%s/%s", jobdir_root(), id);
  return n < 0 || (size_t)n >= len ? LOOM_ERANGE : 0;
}

int jobdir_create(const char *id, char *dir, size_t dirlen, char *err, size_t errlen) {
  if (!jobdir_valid_id(id)) {
    snprintf(err, errlen, "'%s' is not a job id", id);
    return LOOM_EINVAL;
  }
  if (jobdir_of(id, dir, dirlen) < 0) {
    snprintf(err, errlen, "the job directory %s/%s is too long a path (set %s to a shorter one)",
             jobdir_root(), id, JOBDIR_HOME_ENV);
    return LOOM_ERANGE;
  }
  return jobdir_make(dir, err, errlen);
}

int jobdir_make(const char *dir, char *err, size_t errlen) {
  char p[PATH_MAX + 64];
  for (int f = -1; f < JOBDIR__COUNT; f++) {
    if (f >= 0 && !files[f].mkdir) continue;
    if (f < 0)
      loom__strlcpy(p, dir, sizeof p);
    else if (jobdir_path(dir, (jobdir_file)f, p, sizeof p) < 0)
      return LOOM_ERANGE;
    /* the owner only: the secret, the dashboard token (events) and logs */
    if (loom__mkdir_p(p, 0700) < 0) {
      snprintf(err, errlen, "cannot create %s: %s (set %s to a writable directory)", p,
               strerror(errno), JOBDIR_HOME_ENV);
      return LOOM_EIO;
    }
  }
  return 0;
}

int jobdir_write(const char *dir, jobdir_file f, const void *data, size_t len, bool durable) {
  char p[PATH_MAX + 64];
  if (jobdir_path(dir, f, p, sizeof p) < 0) return LOOM_ERANGE;
  return loom__write_atomic(p, data, len, 0600, durable);
}

FILE *jobdir_fopen(const char *dir, jobdir_file f, bool append) {
  char p[PATH_MAX + 64];
  if (jobdir_path(dir, f, p, sizeof p) < 0) {
    errno = ENAMETOOLONG;
    return NULL;
  }
  return loom__fopen_private(p, append);
}

int jobdir_read(const char *dir, jobdir_file f, size_t max, char **out, size_t *len) {
  char p[PATH_MAX + 64];
  *out = NULL;
  if (jobdir_path(dir, f, p, sizeof p) < 0) return LOOM_ERANGE;
  return loom__read_file(p, max, out, len);
}

json_t *jobdir_read_json(const char *dir, jobdir_file f, size_t max) {
  char *s = NULL;
  size_t n = 0;
  json_t *o = NULL;
  if (jobdir_read(dir, f, max, &s, &n) == 0) {
    o = json_loadb(s, n, 0, NULL);
    if (o && !json_is_object(o)) {
      json_decref(o);
      o = NULL;
    }
  }
  free(s);
  return o;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

json_t *jobdir_tensorboard_runs(const char *dir, size_t max, size_t *total) {
  enum { MAX_SORTED = 4096 }; /* names sorted; past these, only counted */
  char p[PATH_MAX];
  if (total) *total = 0;
  json_t *arr = json_array();
  if (!arr) return NULL;
  if (jobdir_path(dir, JOBDIR_TENSORBOARD, p, sizeof p) < 0) return arr;
  DIR *d = opendir(p);
  if (!d) return arr;
  char **names = malloc(MAX_SORTED * sizeof *names);
  size_t n = 0, all = 0;
  struct dirent *e;
  while (names && (e = readdir(d))) {
    struct stat st;
    if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISDIR(st.st_mode))
      continue;
    all++;
    if (n < MAX_SORTED && (names[n] = strdup(e->d_name))) n++;
  }
  closedir(d);
  if (names) qsort(names, n, sizeof *names, name_cmp);
  for (size_t i = 0; i < n; i++) {
    json_t *v = i < max ? json_string(names[i]) : NULL; /* NULL: not UTF-8 */
    if (v) json_array_append_new(arr, v);
    free(names[i]);
  }
  free(names);
  if (total) *total = all;
  return arr;
}

bool jobdir_valid_id(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= JOBDIR_ID_MAX) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '_' && c != '-'))) return false;
  }
  return true;
}

/* Newest first. An id ends in "yyyymmdd-hhmmss-xxxx": the time it was made
 * to the second; the spec's mtime orders jobs made in the same second. */
static int entry_cmp(const void *a, const void *b) {
  const jobdir_entry *x = a, *y = b;
  size_t lx = strlen(x->id), ly = strlen(y->id);
  int c = lx > 20 && ly > 20 ? strncmp(y->id + ly - 20, x->id + lx - 20, 15) : 0;
  if (c == 0) c = (y->mtime > x->mtime) - (y->mtime < x->mtime);
  return c ? c : strcmp(x->id, y->id);
}

int jobdir_list(const char *root, jobdir_entry **out, size_t *n) {
  if (!root) root = jobdir_root();
  *out = NULL;
  *n = 0;
  DIR *d = opendir(root);
  if (!d) return 0;
  jobdir_entry *all = NULL;
  size_t cnt = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!jobdir_valid_id(e->d_name)) continue;
    char p[PATH_MAX + 2 * JOBDIR_ID_MAX];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%s/%s/%s", root, e->d_name, jobdir_name(JOBDIR_SPEC)) >=
            sizeof p ||
        stat(p, &st) < 0)
      continue;
    if (cnt == cap) {
      cap = cap ? 2 * cap : 64;
      jobdir_entry *na = realloc(all, cap * sizeof *na);
      if (!na) {
        rc = LOOM_ENOMEM;
        break;
      }
      all = na;
    }
    loom__strlcpy(all[cnt].id, e->d_name, sizeof all[cnt].id);
    all[cnt].mtime = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
    cnt++;
  }
  closedir(d);
  if (rc < 0) {
    free(all);
    return rc;
  }
  if (cnt) qsort(all, cnt, sizeof *all, entry_cmp);
  *out = all;
  *n = cnt;
  return 0;
}

int jobdir_resolve(const char *root, const char *arg, char *id, size_t idlen, char *err,
                   size_t errlen) {
  if (!root) root = jobdir_root();
  jobdir_entry *all;
  size_t n;
  int rc = jobdir_list(root, &all, &n);
  if (rc < 0) {
    snprintf(err, errlen, "cannot list the jobs under %s: %s", root, loom_strerror(rc));
    return rc;
  }
  if (!strcmp(arg, "last")) {
    if (n == 0) {
      snprintf(err, errlen, "no jobs under %s, so no last one", root);
      rc = LOOM_ENOENT;
    } else {
      loom__strlcpy(id, all[0].id, idlen);
    }
    goto out;
  }
  size_t l = strlen(arg), matches = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(all[i].id, arg)) {
      loom__strlcpy(id, arg, idlen);
      goto out;
    }
    if (l && !strncmp(all[i].id, arg, l) && matches++ == 0) first = i;
  }
  if (matches == 0) {
    snprintf(err, errlen, "no job '%s' under %s: see `loom status` for the jobs there", arg, root);
    rc = LOOM_ENOENT;
  } else if (matches > 1) {
    /* name the candidates, newest first, as many as fit in a few lines */
    loom__buf b;
    loom__buf_init(&b, 2048);
    loom__buf_printf(&b, "'%s' matches %zu jobs:", arg, matches);
    size_t shown = 0;
    for (size_t i = first; i < n && shown < 8; i++)
      if (!strncmp(all[i].id, arg, l)) loom__buf_printf(&b, "%s %s", shown++ ? "," : "", all[i].id);
    if (matches > shown) loom__buf_printf(&b, " and %zu more", matches - shown);
    snprintf(err, errlen, "%s; give more of the id", b.p ? b.p : "");
    loom__buf_free(&b);
    rc = LOOM_EINVAL;
  } else {
    loom__strlcpy(id, all[first].id, idlen);
  }
out:
  free(all);
  return rc;
}
