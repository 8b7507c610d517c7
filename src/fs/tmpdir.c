/* tmpdir.c: writers' local working directories, locked for their
 * writers' lives and removed by the next writer of the same kind once
 * their writer is dead (see tmpdir.h).
 *
 * A directory is made under a hidden name (.loom-<kind>-XXXXXX, which no
 * sweep looks at), locked, and only then renamed to loom-<kind>-XXXXXX
 * (without replacing anything): a sweep never sees a directory that is
 * not locked yet. */
#include "fs/tmpdir.h"

#include "core/core.h"
#include "fs/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMPDIR_TRIES 8

static const char *tmp_base(void) {
  const char *td = getenv("TMPDIR");
  return td && *td ? td : "/tmp";
}

int loom__tmpdir_sweep(const char *base, const char *kind) {
  char *pat = loom__asprintf("%s/loom-%s-??????", base, kind);
  glob_t gl;
  int removed = 0;
  if (pat && glob(pat, GLOB_NOSORT, NULL, &gl) == 0) {
    for (size_t i = 0; i < gl.gl_pathc; i++) {
      const char *p = gl.gl_pathv[i];
      struct stat st;
      /* only this user's directories (a link is never followed) */
      if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
      int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) continue;
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        char err[512];
        if (loom__fs_remove(p, true, err, sizeof err) == 0) {
          removed++;
          loom__log(LOOM_LOG_INFO, "fs", "removed %s, left by a writer that died", p);
        } else if (!strstr(err, "No such file")) { /* another sweep was first */
          loom__log(LOOM_LOG_WARN, "fs", "cannot remove a dead writer's directory: %s", err);
        }
      }
      close(fd);
    }
    globfree(&gl);
  }
  free(pat);
  return removed;
}

int loom__tmpdir_make(const char *kind, char *path, size_t len, int *lock_fd, char *err,
                      size_t errlen) {
  const char *base = tmp_base();
  *lock_fd = -1;
  if (len) path[0] = 0;
  loom__tmpdir_sweep(base, kind);
  char hidden[PATH_MAX];
  for (int t = 0; t < TMPDIR_TRIES; t++) {
    if ((size_t)snprintf(hidden, sizeof hidden, "%s/.loom-%s-XXXXXX", base, kind) >=
        sizeof hidden) {
      snprintf(err, errlen, "the temporary directory's path under %.200s is too long", base);
      return LOOM_ERANGE;
    }
    if (!mkdtemp(hidden)) {
      snprintf(err, errlen, "cannot make a directory in %.200s: %s (set TMPDIR to another)", base,
               strerror(errno));
      return LOOM_EIO;
    }
    int fd = open(hidden, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
      snprintf(err, errlen, "cannot lock %s: %s", hidden, strerror(errno));
      if (fd >= 0) close(fd);
      rmdir(hidden);
      return LOOM_EIO;
    }
    const char *suffix = hidden + strlen(hidden) - 6;
    if ((size_t)snprintf(path, len, "%s/loom-%s-%s", base, kind, suffix) >= len) {
      snprintf(err, errlen, "the temporary directory's path under %.200s is too long", base);
      close(fd);
      rmdir(hidden);
      path[0] = 0;
      return LOOM_ERANGE;
    }
    if (renameat2(AT_FDCWD, hidden, AT_FDCWD, path, RENAME_NOREPLACE) == 0) {
      *lock_fd = fd;
      return 0;
    }
    int e = errno;
    if (e == EINVAL || e == ENOSYS) { /* a file system without it: stays hidden, unswept */
      loom__strlcpy(path, hidden, len);
      *lock_fd = fd;
      return 0;
    }
    close(fd);
    rmdir(hidden);
    path[0] = 0;
    if (e != EEXIST) {
      snprintf(err, errlen, "cannot make a directory in %.200s: %s", base, strerror(e));
      return LOOM_EIO;
    }
  }
  snprintf(err, errlen, "cannot make a directory in %.200s: every name tried exists", base);
  return LOOM_EIO;
}

void loom__tmpdir_remove(const char *path, int lock_fd) {
  if (path && path[0]) {
    char why[512];
    if (loom__fs_remove(path, true, why, sizeof why) < 0)
      loom__log(LOOM_LOG_WARN, "fs", "cannot remove a temporary directory: %s", why);
  }
  if (lock_fd >= 0) close(lock_fd);
}
