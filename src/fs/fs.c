/* fs.c: local paths and hdfs:// URLs behind one set of calls (fs.h). */
#include "fs/fs.h"

#include "hadoop/hdfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GLOB_MAX (1u << 22)
#define COPY_BUF (1u << 20)

bool loom__fs_remote(const char *name) { return hdfs_is_url(name); }

/* The connection and path of an hdfs:// name. */
static int remote(const char *name, hdfs **fs, hdfs_url *u, char *err, size_t errlen) {
  int rc = hdfs_parse_url(name, u, err, errlen);
  if (rc == 0 && hdfs_get(u->host, u->port, fs) < 0) {
    snprintf(err, errlen, "out of memory");
    rc = LOOM_ENOMEM;
  }
  return rc;
}

static int errno_code(int e) {
  switch (e) {
  case ENOENT:
  case ENOTDIR:
    return LOOM_ENOENT;
  case EACCES:
  case EPERM:
    return LOOM_EAUTH;
  case EEXIST:
  case EISDIR:
  case ENOTEMPTY:
    return LOOM_ESTATE;
  case ENOMEM:
    return LOOM_ENOMEM;
  default:
    return LOOM_EIO;
  }
}

static int local_fail(const char *what, const char *name, char *err, size_t errlen) {
  int e = errno;
  snprintf(err, errlen, "%s: %s: %s", name, what, strerror(e));
  return errno_code(e);
}

/* ---- reading ------------------------------------------------------------ */

struct loom__rfile {
  int fd;
  hdfs_reader *r;
  uint64_t size;
  char *name;
};

int loom__rfile_open(const char *name, loom__rfile **out, char *err, size_t errlen) {
  *out = NULL;
  loom__rfile *f = calloc(1, sizeof *f);
  if (!f || !(f->name = strdup(name))) {
    free(f);
    return LOOM_ENOMEM;
  }
  f->fd = -1;
  int rc = 0;
  if (loom__fs_remote(name)) {
    hdfs *fs;
    hdfs_url u;
    if ((rc = remote(name, &fs, &u, err, errlen)) == 0 &&
        (rc = hdfs_open(fs, u.path, &f->r, err, errlen)) == 0)
      f->size = hdfs_reader_size(f->r);
  } else {
    struct stat st;
    if ((f->fd = open(name, O_RDONLY | O_CLOEXEC)) < 0 || fstat(f->fd, &st) < 0)
      rc = local_fail("cannot open", name, err, errlen);
    else if (S_ISDIR(st.st_mode)) {
      snprintf(err, errlen, "%s is a directory", name);
      rc = LOOM_ESTATE;
    } else
      f->size = (uint64_t)st.st_size;
  }
  if (rc < 0) {
    loom__rfile_close(f);
    return rc;
  }
  *out = f;
  return 0;
}

uint64_t loom__rfile_size(const loom__rfile *f) { return f->size; }

int loom__rfile_pread(loom__rfile *f, void *buf, size_t n, uint64_t off, size_t *got, char *err,
                      size_t errlen) {
  if (f->r) return hdfs_pread(f->r, buf, n, off, got, err, errlen);
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(f->fd, (char *)buf + done, n - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      *got = done;
      snprintf(err, errlen, "%s: cannot read %zu bytes at offset %llu: %s", f->name, n,
               (unsigned long long)off, strerror(errno));
      return LOOM_EIO;
    }
    if (r == 0) break;
    done += (size_t)r;
  }
  *got = done;
  return 0;
}

void loom__rfile_advise(loom__rfile *f, uint64_t off, uint64_t len, bool sequential) {
  if (f->fd >= 0)
    posix_fadvise(f->fd, (off_t)off, (off_t)len,
                  sequential ? POSIX_FADV_SEQUENTIAL : POSIX_FADV_WILLNEED);
}

int loom__rfile_hosts(loom__rfile *f, uint64_t off, char (*hosts)[64], int max) {
  if (!f->r) return 0;
  char err[256];
  int n = hdfs_reader_hosts(f->r, off, hosts, max, err, sizeof err);
  return n < 0 ? 0 : n;
}

void loom__rfile_close(loom__rfile *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  hdfs_reader_close(f->r);
  free(f->name);
  free(f);
}

/* ---- the namespace ------------------------------------------------------ */

int loom__fs_stat(const char *name, loom__fs_info *st, char *err, size_t errlen) {
  memset(st, 0, sizeof *st);
  if (loom__fs_remote(name)) {
    hdfs *fs;
    hdfs_url u;
    hdfs_stat hs;
    int rc = remote(name, &fs, &u, err, errlen);
    if (rc == 0) rc = hdfs_stat_path(fs, u.path, &hs, err, errlen);
    if (rc == 0) {
      st->dir = hs.dir;
      st->size = hs.length;
      st->mtime_ms = (int64_t)hs.mtime_ms;
    }
    return rc;
  }
  struct stat s;
  if (stat(name, &s) < 0) return local_fail("cannot stat", name, err, errlen);
  st->dir = S_ISDIR(s.st_mode);
  st->size = (uint64_t)s.st_size;
  st->mtime_ms = (int64_t)s.st_mtim.tv_sec * 1000 + s.st_mtim.tv_nsec / 1000000;
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct {
  char **v;
  size_t n, cap;
} names;

static int names_add(names *ns, char *s) {
  if (!s) return LOOM_ENOMEM;
  if (ns->n == ns->cap) {
    size_t nc = ns->cap ? ns->cap * 2 : 32;
    char **nv = nc <= GLOB_MAX ? realloc(ns->v, nc * sizeof *nv) : NULL;
    if (!nv) {
      free(s);
      return nc > GLOB_MAX ? LOOM_ERANGE : LOOM_ENOMEM;
    }
    ns->v = nv;
    ns->cap = nc;
  }
  ns->v[ns->n++] = s;
  return 0;
}

static void names_free(names *ns) {
  for (size_t i = 0; i < ns->n; i++) free(ns->v[i]);
  free(ns->v);
  ns->v = NULL;
  ns->n = ns->cap = 0;
}

static bool has_wild(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] == '*' || s[i] == '?' || s[i] == '[') return true;
  return false;
}

/* HDFS globbing: component by component, listing the directories where a
 * component has a wildcard. */
static int remote_glob(const char *pattern, names *out, char *err, size_t errlen) {
  hdfs *fs;
  hdfs_url u;
  int rc = remote(pattern, &fs, &u, err, errlen);
  if (rc < 0) return rc;
  size_t pre = strlen(pattern) - strlen(u.path); /* "hdfs://host:port" as written */
  names cur = {0}, next = {0};
  if ((rc = names_add(&cur, strdup(""))) < 0) return rc;
  const char *p = u.path;
  bool wild_any = false;
  while (rc == 0 && *p) {
    while (*p == '/') p++;
    if (!*p) break;
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char comp[1024];
    if (len >= sizeof comp) {
      snprintf(err, errlen, "%s: a path component longer than %zu bytes", pattern, sizeof comp - 1);
      rc = LOOM_EINVAL;
      break;
    }
    memcpy(comp, p, len);
    comp[len] = 0;
    bool wild = has_wild(comp, len);
    wild_any |= wild;
    for (size_t i = 0; i < cur.n && rc == 0; i++) {
      if (!wild) {
        rc = names_add(&next, loom__asprintf("%s/%s", cur.v[i], comp));
        continue;
      }
      hdfs_stat *ents = NULL;
      size_t ne = 0;
      char why[1024];
      int lrc = hdfs_list(fs, cur.v[i][0] ? cur.v[i] : "/", &ents, &ne, why, sizeof why);
      if (lrc == LOOM_ENOENT) continue;
      if (lrc < 0) {
        snprintf(err, errlen, "%s", why);
        rc = lrc;
        break;
      }
      for (size_t k = 0; k < ne && rc == 0; k++)
        if (fnmatch(comp, ents[k].name, FNM_PERIOD) == 0 && (e == NULL || ents[k].dir))
          rc = names_add(&next, loom__asprintf("%s/%s", cur.v[i], ents[k].name));
      free(ents);
    }
    names_free(&cur);
    cur = next;
    next = (names){0};
    p += len;
  }
  /* without a wildcard the path is itself, when it exists */
  if (rc == 0 && !wild_any && cur.n == 1) {
    hdfs_stat st;
    char why[1024];
    int src = hdfs_stat_path(fs, cur.v[0][0] ? cur.v[0] : "/", &st, why, sizeof why);
    if (src == LOOM_ENOENT)
      names_free(&cur);
    else if (src < 0) {
      snprintf(err, errlen, "%s", why);
      rc = src;
    }
  }
  for (size_t i = 0; i < cur.n && rc == 0; i++)
    rc = names_add(out, loom__asprintf("%.*s%s", (int)pre, pattern, cur.v[i][0] ? cur.v[i] : "/"));
  names_free(&cur);
  names_free(&next);
  return rc;
}

int loom__fs_glob(const char *pattern, char ***out, size_t *n, char *err, size_t errlen) {
  *out = NULL;
  *n = 0;
  names ns = {0};
  int rc = 0;
  if (loom__fs_remote(pattern)) {
    rc = remote_glob(pattern, &ns, err, errlen);
  } else {
    glob_t gl;
    int grc = glob(pattern, 0, NULL, &gl);
    if (grc != 0 && grc != GLOB_NOMATCH) {
      snprintf(err, errlen, "%s: cannot read a directory on the way: %s", pattern, strerror(errno));
      rc = LOOM_EIO;
    }
    for (size_t i = 0; grc == 0 && rc == 0 && i < gl.gl_pathc; i++)
      rc = names_add(&ns, strdup(gl.gl_pathv[i]));
    if (grc == 0) globfree(&gl);
  }
  if (rc < 0) {
    if (rc == LOOM_ERANGE)
      snprintf(err, errlen, "%s matches more than %u files", pattern, GLOB_MAX);
    names_free(&ns);
    return rc;
  }
  if (ns.n) qsort(ns.v, ns.n, sizeof *ns.v, cmp_str);
  *out = ns.v;
  *n = ns.n;
  return 0;
}

int loom__fs_mkdirs(const char *name, char *err, size_t errlen) {
  if (loom__fs_remote(name)) {
    hdfs *fs;
    hdfs_url u;
    int rc = remote(name, &fs, &u, err, errlen);
    return rc < 0 ? rc : hdfs_mkdirs(fs, u.path, 0755, err, errlen);
  }
  if (loom__mkdir_p(name, 0755) < 0) return local_fail("cannot create it", name, err, errlen);
  return 0;
}

/* Both names on the same filesystem: the NameNode of each. */
static int same_remote(const char *a, const char *b, hdfs **fs, hdfs_url *ua, hdfs_url *ub,
                       char *err, size_t errlen) {
  int rc = remote(a, fs, ua, err, errlen);
  if (rc == 0) rc = hdfs_parse_url(b, ub, err, errlen);
  if (rc == 0 && (strcmp(ua->host, ub->host) || ua->port != ub->port)) {
    snprintf(err, errlen, "cannot rename %s to %s: another NameNode", a, b);
    rc = LOOM_EINVAL;
  }
  return rc;
}

int loom__fs_rename(const char *src, const char *dst, bool replace, char *err, size_t errlen) {
  if (loom__fs_remote(src) != loom__fs_remote(dst)) {
    snprintf(err, errlen, "cannot rename %s to %s: another filesystem", src, dst);
    return LOOM_EINVAL;
  }
  if (loom__fs_remote(src)) {
    hdfs *fs;
    hdfs_url us, ud;
    int rc = same_remote(src, dst, &fs, &us, &ud, err, errlen);
    return rc < 0 ? rc : hdfs_rename(fs, us.path, ud.path, replace, err, errlen);
  }
  int rc = replace ? rename(src, dst) : renameat2(AT_FDCWD, src, AT_FDCWD, dst, RENAME_NOREPLACE);
  if (rc < 0 && !replace && errno == EINVAL) {
    /* a filesystem without RENAME_NOREPLACE: link, then unlink */
    rc = link(src, dst);
    if (rc == 0) unlink(src);
  }
  if (rc < 0) {
    int e = errno;
    snprintf(err, errlen, "cannot rename %s to %s: %s", src, dst, strerror(e));
    return errno_code(e);
  }
  return 0;
}

static int remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0) return -1;
  if (!S_ISDIR(st.st_mode)) return unlink(path);
  char *pat = loom__asprintf("%s/*", path);
  glob_t gl;
  if (pat && glob(pat, GLOB_PERIOD, NULL, &gl) == 0) {
    for (size_t i = 0; i < gl.gl_pathc; i++) {
      const char *b = strrchr(gl.gl_pathv[i], '/');
      b = b ? b + 1 : gl.gl_pathv[i];
      if (!strcmp(b, ".") || !strcmp(b, "..")) continue;
      remove_tree(gl.gl_pathv[i]);
    }
    globfree(&gl);
  }
  free(pat);
  return rmdir(path);
}

int loom__fs_remove(const char *name, bool recursive, char *err, size_t errlen) {
  if (loom__fs_remote(name)) {
    hdfs *fs;
    hdfs_url u;
    int rc = remote(name, &fs, &u, err, errlen);
    return rc < 0 ? rc : hdfs_delete(fs, u.path, recursive, err, errlen);
  }
  struct stat st;
  if (lstat(name, &st) < 0) return local_fail("cannot remove", name, err, errlen);
  int rc = S_ISDIR(st.st_mode) ? (recursive ? remove_tree(name) : rmdir(name)) : unlink(name);
  if (rc < 0) return local_fail("cannot remove", name, err, errlen);
  return 0;
}

/* ---- whole files -------------------------------------------------------- */

/* Writes to name + "._COPYING_" what next() gives, then renames it over
 * (or onto) name. */
typedef int (*fill_fn)(void *arg, void *buf, size_t cap, size_t *got, char *err, size_t errlen);

static int remote_put(const char *name, fill_fn fill, void *arg, bool replace, char *err,
                      size_t errlen) {
  hdfs *fs;
  hdfs_url u;
  int rc = remote(name, &fs, &u, err, errlen);
  if (rc < 0) return rc;
  if (!replace) {
    hdfs_stat st;
    char why[512];
    rc = hdfs_stat_path(fs, u.path, &st, why, sizeof why);
    if (rc == 0) {
      snprintf(err, errlen, "%s exists already", name);
      return LOOM_ESTATE;
    }
    if (rc != LOOM_ENOENT) {
      snprintf(err, errlen, "%s", why);
      return rc;
    }
  }
  char tmp[HDFS_MAX_PATH + 16];
  snprintf(tmp, sizeof tmp, "%s._COPYING_", u.path);
  hdfs_writer *w = NULL;
  rc = hdfs_create(fs, tmp, true, 0, 0, &w, err, errlen);
  if (rc < 0) return rc;
  char *buf = malloc(COPY_BUF);
  if (!buf) {
    hdfs_abort(w);
    return LOOM_ENOMEM;
  }
  for (;;) {
    size_t got = 0;
    rc = fill(arg, buf, COPY_BUF, &got, err, errlen);
    if (rc < 0 || !got) break;
    if ((rc = hdfs_write(w, buf, got, err, errlen)) < 0) break;
  }
  free(buf);
  if (rc < 0) {
    hdfs_abort(w);
    return rc;
  }
  if ((rc = hdfs_close_file(w, err, errlen)) < 0) return rc;
  rc = hdfs_rename(fs, tmp, u.path, replace, err, errlen);
  if (rc < 0) {
    char why[256];
    hdfs_delete(fs, tmp, false, why, sizeof why);
  }
  return rc;
}

static int local_put(const char *name, fill_fn fill, void *arg, bool replace, char *err,
                     size_t errlen) {
  char *tmp = loom__asprintf("%s._COPYING_", name);
  if (!tmp) return LOOM_ENOMEM;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int rc = local_fail("cannot create", tmp, err, errlen);
    free(tmp);
    return rc;
  }
  char *buf = malloc(COPY_BUF);
  int rc = buf ? 0 : LOOM_ENOMEM;
  while (rc == 0) {
    size_t got = 0;
    rc = fill(arg, buf, COPY_BUF, &got, err, errlen);
    if (rc < 0 || !got) break;
    for (size_t at = 0; at < got && rc == 0;) {
      ssize_t w = write(fd, buf + at, got - at);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0)
        rc = local_fail("cannot write", tmp, err, errlen);
      else
        at += (size_t)w;
    }
  }
  free(buf);
  if (rc == 0 && fsync(fd) < 0) rc = local_fail("cannot write", tmp, err, errlen);
  if (close(fd) < 0 && rc == 0) rc = local_fail("cannot write", tmp, err, errlen);
  if (rc == 0) rc = loom__fs_rename(tmp, name, replace, err, errlen);
  if (rc < 0) unlink(tmp);
  free(tmp);
  return rc;
}

static int put_with(const char *name, fill_fn fill, void *arg, bool replace, char *err,
                    size_t errlen) {
  return loom__fs_remote(name) ? remote_put(name, fill, arg, replace, err, errlen)
                               : local_put(name, fill, arg, replace, err, errlen);
}

typedef struct {
  loom__rfile *f;
  uint64_t at, end; /* fill_file: up to end */
  const char *data;
  size_t len;
} src_state;

static int fill_file(void *arg, void *buf, size_t cap, size_t *got, char *err, size_t errlen) {
  src_state *s = arg;
  if (cap > s->end - s->at) cap = (size_t)(s->end - s->at);
  int rc = loom__rfile_pread(s->f, buf, cap, s->at, got, err, errlen);
  s->at += *got;
  return rc;
}

static int fill_mem(void *arg, void *buf, size_t cap, size_t *got, char *err, size_t errlen) {
  src_state *s = arg;
  size_t k = s->len - s->at < cap ? (size_t)(s->len - s->at) : cap;
  memcpy(buf, s->data + s->at, k);
  s->at += k;
  *got = k;
  return 0;
}

int loom__fs_put(const char *local, const char *name, bool replace, char *err, size_t errlen) {
  return loom__fs_put_n(local, UINT64_MAX, name, replace, err, errlen);
}

int loom__fs_put_n(const char *local, uint64_t len, const char *name, bool replace, char *err,
                   size_t errlen) {
  src_state s = {0};
  int rc = loom__rfile_open(local, &s.f, err, errlen);
  if (rc < 0) return rc;
  s.end = len < loom__rfile_size(s.f) ? len : loom__rfile_size(s.f);
  rc = put_with(name, fill_file, &s, replace, err, errlen);
  loom__rfile_close(s.f);
  return rc;
}

#define TREE_DEPTH 64

static int put_tree(const char *local, const char *name, int depth, char *err, size_t errlen) {
  if (depth > TREE_DEPTH) {
    snprintf(err, errlen, "%s: deeper than %d directories", local, TREE_DEPTH);
    return LOOM_ERANGE;
  }
  int rc = loom__fs_mkdirs(name, err, errlen);
  DIR *d = rc == 0 ? opendir(local) : NULL;
  if (rc == 0 && !d) return local_fail("cannot read the directory", local, err, errlen);
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *src = loom__asprintf("%s/%s", local, e->d_name);
    char *dst = loom__asprintf("%s/%s", name, e->d_name);
    struct stat st;
    if (!src || !dst)
      rc = LOOM_ENOMEM;
    else if (stat(src, &st) < 0)
      rc = local_fail("cannot stat", src, err, errlen);
    else if (S_ISDIR(st.st_mode))
      rc = put_tree(src, dst, depth + 1, err, errlen);
    else if (S_ISREG(st.st_mode))
      rc = loom__fs_put(src, dst, true, err, errlen);
    free(src);
    free(dst);
  }
  if (d) closedir(d);
  return rc;
}

int loom__fs_put_tree(const char *local, const char *name, char *err, size_t errlen) {
  return put_tree(local, name, 0, err, errlen);
}

static int get_tree(const char *name, const char *local, int depth, char *err, size_t errlen) {
  loom__fs_info st;
  int rc = loom__fs_stat(name, &st, err, errlen);
  if (rc < 0) return rc;
  if (!st.dir) return loom__fs_get(name, local, err, errlen);
  if (depth > TREE_DEPTH) {
    snprintf(err, errlen, "%s: deeper than %d directories", name, TREE_DEPTH);
    return LOOM_ERANGE;
  }
  if (mkdir(local, 0755) < 0 && errno != EEXIST)
    return local_fail("cannot create", local, err, errlen);
  if (!loom__fs_remote(name)) {
    snprintf(err, errlen, "%s: a local directory (copy it with cp)", name);
    return LOOM_EINVAL;
  }
  hdfs *fs;
  hdfs_url u;
  hdfs_stat *v = NULL;
  size_t n = 0;
  if ((rc = remote(name, &fs, &u, err, errlen)) < 0) return rc;
  if ((rc = hdfs_list(fs, u.path, &v, &n, err, errlen)) < 0) return rc;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (strchr(v[i].name, '/') || !strcmp(v[i].name, ".") || !strcmp(v[i].name, "..")) continue;
    char *src = loom__asprintf("%s/%s", name, v[i].name);
    char *dst = loom__asprintf("%s/%s", local, v[i].name);
    rc = src && dst ? get_tree(src, dst, depth + 1, err, errlen) : LOOM_ENOMEM;
    free(src);
    free(dst);
  }
  free(v);
  return rc;
}

int loom__fs_get_tree(const char *name, const char *local, char *err, size_t errlen) {
  return get_tree(name, local, 0, err, errlen);
}

int loom__fs_get(const char *name, const char *local, char *err, size_t errlen) {
  src_state s = {0};
  int rc = loom__rfile_open(name, &s.f, err, errlen);
  if (rc < 0) return rc;
  s.end = loom__rfile_size(s.f);
  rc = local_put(local, fill_file, &s, true, err, errlen);
  loom__rfile_close(s.f);
  return rc;
}

int loom__fs_write_all(const char *name, const void *data, size_t len, bool replace, char *err,
                       size_t errlen) {
  src_state s = {.data = data, .len = len};
  return put_with(name, fill_mem, &s, replace, err, errlen);
}

int loom__fs_read_all(const char *name, size_t max, void **data, size_t *len, char *err,
                      size_t errlen) {
  *data = NULL;
  *len = 0;
  loom__rfile *f = NULL;
  int rc = loom__rfile_open(name, &f, err, errlen);
  if (rc < 0) return rc;
  uint64_t size = loom__rfile_size(f);
  if (size > max) {
    snprintf(err, errlen, "%s: %llu bytes, more than %zu", name, (unsigned long long)size, max);
    loom__rfile_close(f);
    return LOOM_ERANGE;
  }
  char *buf = malloc(size + 1);
  size_t got = 0;
  rc = buf ? loom__rfile_pread(f, buf, (size_t)size, 0, &got, err, errlen) : LOOM_ENOMEM;
  if (rc == 0 && got != size) {
    snprintf(err, errlen, "%s: read %zu of its %llu bytes", name, got, (unsigned long long)size);
    rc = LOOM_EIO;
  }
  loom__rfile_close(f);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  buf[size] = 0;
  *data = buf;
  *len = (size_t)size;
  return 0;
}
