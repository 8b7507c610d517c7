/* files.c: the task's working directory before the command starts: the
 * spec's files and archives placed (linked or unpacked), and the command
 * checked; see agent_int.h. */
#include "agent/agent_int.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs tar -C dir -xf file (gzip or not: tar tells), or unzip -q -o file
 * -d dir; 0 when it exited 0. */
static int unpack(const char *file, const char *dir) {
  size_t n = strlen(file);
  bool zip = n > 4 && !strcmp(file + n - 4, ".zip");
  int wst = -1;
  pid_t pid = loom__mkdir_p(dir, 0755) == 0 ? fork() : -1;
  if (pid == 0) {
    if (zip)
      execlp("unzip", "unzip", "-q", "-o", file, "-d", dir, (char *)NULL);
    else
      execlp("tar", "tar", "-C", dir, "-xf", file, (char *)NULL);
    _exit(127);
  }
  if (pid > 0)
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
    }
  return pid > 0 && WIFEXITED(wst) && WEXITSTATUS(wst) == 0 ? 0 : -1;
}

int agent_place_files(agent *a, const char *wd, char *err, size_t errlen) {
  const char *target;
  json_t *src;
  json_object_foreach(a->as.files, target, src) {
    char *dst = loom__asprintf("%s/%s", wd, target);
    if (!dst) return LOOM_ENOMEM;
    char dir[PATH_MAX];
    loom__strlcpy(dir, dst, sizeof dir);
    loom__mkdir_p(dirname(dir), 0755);
    struct stat st;
    if (lstat(dst, &st) == 0 && S_ISLNK(st.st_mode)) unlink(dst);
    const char *tar = json_string_value(json_object_get(src, "tar"));
    const char *arch = json_string_value(json_object_get(src, "archive"));
    const char *cwd = json_string_value(json_object_get(src, "cwd"));
    if (tar || arch) {
      /* a directory staged as a tar on this node, or an archive of the
       * spec's archives: unpacked in place */
      if (unpack(tar ? tar : arch, dst) < 0) {
        snprintf(err, errlen, "cannot unpack %s.%s from %s into %s", tar ? "files" : "archives",
                 target, tar ? tar : arch, dst);
        free(dst);
        return LOOM_EIO;
      }
      free(dst);
      continue;
    }
    if (cwd) {
      /* localized by the cluster manager into the directory the agent
       * started in (YARN's LocalResources: files, and archives it
       * unpacked) */
      char *p = strchr(cwd, '/') ? NULL : loom__asprintf("%s/%s", a->start_cwd, cwd);
      int rc = -1;
      if (p && (symlink(p, dst) == 0 || errno == EEXIST)) rc = 0;
      if (rc < 0)
        snprintf(err, errlen, "cannot place files.%s at %s from %s", target, dst, p ? p : cwd);
      free(p);
      free(dst);
      if (rc < 0) return LOOM_EIO;
      continue;
    }
    if (!json_is_string(src)) {
      snprintf(err, errlen, "files.%s: malformed source from the coordinator", target);
      free(dst);
      return LOOM_EPROTO;
    }
    if (symlink(json_string_value(src), dst) < 0 && errno != EEXIST) {
      snprintf(err, errlen, "cannot place files.%s at %s: %s", target, dst, strerror(errno));
      free(dst);
      return LOOM_EIO;
    }
    free(dst);
  }
  return 0;
}

/* A command given as a path that does not exist is known before anything
 * starts: report it now rather than after the rendezvous. */
int agent_check_command(agent *a, const char *wd, char *err, size_t errlen) {
  const char *shell = a->as.shell;
  char first[PATH_MAX] = "";
  if (shell) {
    const char *p = shell;
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strcspn(p, " \t\n;&|<>()$`\"'\\*?[]{}=");
    if (n == 0 || n >= sizeof first || (p[n] && !strchr(" \t\n", p[n]))) return 0;
    memcpy(first, p, n);
    first[n] = 0;
    if (!strchr(first, '/')) return 0; /* builtins and PATH: the shell decides */
  } else {
    const char *a0 = json_string_value(json_array_get(a->as.argv, 0));
    if (!a0) return LOOM_EPROTO;
    loom__strlcpy(first, a0, sizeof first);
  }
  char path[PATH_MAX * 2];
  if (strchr(first, '/')) {
    if (first[0] == '/')
      snprintf(path, sizeof path, "%s", first);
    else
      snprintf(path, sizeof path, "%s/%s", wd, first);
    if (access(path, X_OK) == 0) return 0;
    snprintf(err, errlen, "command not found: %s (%s in %s)", first,
             access(path, F_OK) == 0 ? "not executable" : "no such file", wd);
    return access(path, F_OK) == 0 ? 126 : 127;
  }
  const char *pathenv = getenv("PATH");
  char *copy = strdup(pathenv ? pathenv : "/usr/bin:/bin"), *save = NULL;
  for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(path, sizeof path, "%s/%s", *d ? d : ".", first);
    if (access(path, X_OK) == 0) {
      free(copy);
      return 0;
    }
  }
  free(copy);
  snprintf(err, errlen, "command not found: %s (not in PATH)", first);
  return 127;
}
