/* cgroup.c: how the local backend enforces a task's memory limit, and the
 * per-task cgroups it makes for it.
 *
 * In order of preference: cgroup v2 (memory.max, plus cpuset.cpus for the
 * task's cores) under the cgroup this process runs in, where that cgroup
 * has the memory controller and is writable; a cgroup v1 memory hierarchy
 * (memory.limit_in_bytes) where one is mounted and writable; else nothing
 * here, and __exec sets RLIMIT_DATA. LOOM_CGROUP_ROOT names the directory
 * to make cgroups under instead (a v2 cgroup or a v1 memory hierarchy,
 * told apart by their files); LOOM_CGROUP_ROOT=none forces the rlimit.
 *
 * A task's cgroup is <base>/loom-<job>/<role>-<index>; the job's cgroup goes
 * with its last task. */
#include "agent/agent.h"
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CG_LEAF "loom-leaf"

/* dir/file in p (PATH_MAX bytes); -1 if it does not fit. */
static int cg_path(char *p, const char *dir, const char *file) {
  int n = snprintf(p, PATH_MAX, "%s/%s", dir, file);
  return n < 0 || n >= PATH_MAX ? -1 : 0;
}

static bool cg_exists(const char *dir, const char *file) {
  char p[PATH_MAX];
  return cg_path(p, dir, file) == 0 && access(p, F_OK) == 0;
}

/* Writes s to dir/file; 0, or -1 with errno set. */
static int cg_write(const char *dir, const char *file, const char *s) {
  char p[PATH_MAX];
  if (cg_path(p, dir, file) < 0) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int fd = open(p, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = strlen(s);
  int rc = write(fd, s, n) == (ssize_t)n ? 0 : -1;
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

/* Whether the whitespace-separated list in dir/file holds word. */
static bool cg_has_word(const char *dir, const char *file, const char *word) {
  char p[PATH_MAX], *txt = NULL;
  if (cg_path(p, dir, file) < 0 || loom__read_file(p, 4096, &txt, NULL) < 0) return false;
  bool found = false;
  char *save = NULL;
  for (char *t = strtok_r(txt, " \t\n", &save); t && !found; t = strtok_r(NULL, " \t\n", &save))
    found = !strcmp(t, word);
  free(txt);
  return found;
}

/* The value of "key N" in a flat-keyed file (memory.events, oom_control). */
static long long cg_key(const char *dir, const char *file, const char *key) {
  char p[PATH_MAX], *txt = NULL;
  if (cg_path(p, dir, file) < 0 || loom__read_file(p, 65536, &txt, NULL) < 0) return -1;
  long long v = -1;
  size_t kl = strlen(key);
  for (char *l = txt; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (!strncmp(l, key, kl) && l[kl] == ' ') {
      v = atoll(l + kl + 1);
      break;
    }
  free(txt);
  return v;
}

/* The mount point of the first mount of type (and, for v1, with option
 * opt) in /proc/self/mounts. */
static int cg_find_mount(const char *type, const char *opt, char *out, size_t outlen) {
  char *txt = NULL;
  if (loom__read_file("/proc/self/mounts", 1 << 20, &txt, NULL) < 0) return -1;
  int rc = -1;
  char *save = NULL;
  for (char *l = strtok_r(txt, "\n", &save); l && rc < 0; l = strtok_r(NULL, "\n", &save)) {
    char dev[256], mnt[PATH_MAX], ty[64], opts[1024];
    if (sscanf(l, "%255s %4095s %63s %1023s", dev, mnt, ty, opts) != 4 || strcmp(ty, type))
      continue;
    bool ok = !opt;
    char *s2 = NULL;
    for (char *o = strtok_r(opts, ",", &s2); o && !ok; o = strtok_r(NULL, ",", &s2))
      ok = !strcmp(o, opt);
    if (ok && strlen(mnt) < outlen) {
      loom__strlcpy(out, mnt, outlen);
      rc = 0;
    }
  }
  free(txt);
  return rc;
}

/* This process's cgroup v2 directory: the mount plus the "0::" path, or its
 * parent if that is the leaf an earlier agent moved everything into. */
static int cg_own_v2(const char *mnt, char *out, size_t outlen) {
  char *txt = NULL;
  if (loom__read_file("/proc/self/cgroup", 65536, &txt, NULL) < 0) return -1;
  int rc = -1;
  char *l = !strncmp(txt, "0::", 3) ? txt : strstr(txt, "\n0::");
  if (l) {
    char *path = l + (*l == '\n' ? 4 : 3);
    path[strcspn(path, "\n")] = 0;
    char *last = strrchr(path, '/');
    if (last && !strcmp(last + 1, CG_LEAF)) *last = 0;
    if (!strcmp(path, "/")) *path = 0;
    if ((size_t)snprintf(out, outlen, "%s%s", mnt, path) < outlen) rc = 0;
  }
  free(txt);
  return rc;
}

/* cgroup v2's "no internal processes" rule: a cgroup with processes of its
 * own cannot hand a controller down. Moves them into <dir>/loom-leaf. */
static int cg_move_to_leaf(const char *dir) {
  char leaf[PATH_MAX], p[PATH_MAX];
  if (cg_path(leaf, dir, CG_LEAF) < 0 || cg_path(p, dir, "cgroup.procs") < 0) return -1;
  if (mkdir(leaf, 0755) < 0 && errno != EEXIST) return -1;
  for (int round = 0; round < 5; round++) {
    char *txt = NULL;
    size_t len = 0;
    if (loom__read_file(p, 1 << 20, &txt, &len) < 0) return -1;
    bool moved = false;
    char *save = NULL;
    for (char *t = strtok_r(txt, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
      if (cg_write(leaf, "cgroup.procs", t) < 0 && errno != ESRCH) {
        free(txt);
        return -1;
      }
      moved = true;
    }
    free(txt);
    if (!moved) return 0;
  }
  return 0;
}

/* Makes dir hand the memory controller (and cpuset, where it can) down to
 * the cgroups made under it. */
static int cg_enable_v2(const char *dir, char *why, size_t whylen) {
  if (!cg_has_word(dir, "cgroup.subtree_control", "memory") &&
      cg_write(dir, "cgroup.subtree_control", "+memory") < 0) {
    if (errno != EBUSY || cg_move_to_leaf(dir) < 0 ||
        cg_write(dir, "cgroup.subtree_control", "+memory") < 0) {
      snprintf(why, whylen, "cannot enable the memory controller in %s/cgroup.subtree_control: %s",
               dir, strerror(errno));
      return -1;
    }
  }
  if (cg_has_word(dir, "cgroup.controllers", "cpuset") &&
      !cg_has_word(dir, "cgroup.subtree_control", "cpuset"))
    (void)cg_write(dir, "cgroup.subtree_control", "+cpuset"); /* affinity covers it */
  return 0;
}

static int cg_try_v2(const char *base, cg_probe *p) {
  if (!cg_has_word(base, "cgroup.controllers", "memory")) {
    snprintf(p->why, sizeof p->why, "cgroup v2 at %s has no memory controller", base);
    return -1;
  }
  if (access(base, W_OK) != 0) {
    snprintf(p->why, sizeof p->why, "cgroup v2 at %s is not writable", base);
    return -1;
  }
  if (cg_enable_v2(base, p->why, sizeof p->why) < 0) return -1;
  p->kind = CG_V2;
  loom__strlcpy(p->base, base, sizeof p->base);
  return 0;
}

static int cg_try_v1(const char *base, cg_probe *p) {
  if (!cg_exists(base, "memory.limit_in_bytes") || access(base, W_OK) != 0) {
    snprintf(p->why, sizeof p->why, "the cgroup v1 memory hierarchy %s is not writable", base);
    return -1;
  }
  p->kind = CG_V1;
  loom__strlcpy(p->base, base, sizeof p->base);
  return 0;
}

int cg_probe_memory(cg_probe *p) {
  memset(p, 0, sizeof *p);
  p->kind = CG_RLIMIT;
  const char *root = loom__tun_str(LOOM_TUN_CGROUP_ROOT);
  if (!*root) root = NULL;
  if (root && !strcmp(root, "none")) {
    snprintf(p->why, sizeof p->why, "LOOM_CGROUP_ROOT=none");
    return 0;
  }
  if (root && *root) {
    if (cg_exists(root, "cgroup.controllers")) return cg_try_v2(root, p), 0;
    if (cg_exists(root, "memory.limit_in_bytes")) return cg_try_v1(root, p), 0;
    snprintf(p->why, sizeof p->why,
             "LOOM_CGROUP_ROOT=%s is neither a cgroup v2 cgroup nor a "
             "cgroup v1 memory hierarchy",
             root);
    return 0;
  }
  char mnt[PATH_MAX], dir[PATH_MAX], why2[sizeof p->why] = "";
  if (cg_find_mount("cgroup2", NULL, mnt, sizeof mnt) == 0 &&
      cg_own_v2(mnt, dir, sizeof dir) == 0 && cg_try_v2(dir, p) == 0)
    return 0;
  loom__strlcpy(why2, p->why[0] ? p->why : "no cgroup v2 mount", sizeof why2);
  if (cg_find_mount("cgroup", "memory", mnt, sizeof mnt) == 0) {
    if (cg_try_v1(mnt, p) == 0) return 0;
  } else {
    snprintf(p->why, sizeof p->why, "no cgroup v1 memory hierarchy");
  }
  char why1[sizeof p->why];
  loom__strlcpy(why1, p->why, sizeof why1);
  loom__strlcpy(p->why, why2, sizeof p->why);
  size_t n = strlen(p->why);
  if (n + 2 < sizeof p->why) {
    memcpy(p->why + n, "; ", 3);
    loom__strlcpy(p->why + n + 2, why1, sizeof p->why - n - 2);
  }
  return 0;
}

const char *cg_kind_name(cg_kind k) {
  return k == CG_V2 ? "cgroup v2" : k == CG_V1 ? "cgroup v1" : "rlimit";
}

const char *cg_limit_file(cg_kind k) {
  return k == CG_V2 ? "memory.max" : k == CG_V1 ? "memory.limit_in_bytes" : "RLIMIT_DATA";
}

int cg_create(const cg_probe *p, const char *job, const char *task, long long bytes,
              const char *cpus, char *out, size_t outlen) {
  char jdir[PATH_MAX], tdir[PATH_MAX], num[32];
  snprintf(jdir, sizeof jdir, "%s/loom-%s", p->base, job);
  if ((size_t)snprintf(tdir, sizeof tdir, "%s/%s", jdir, task) >= outlen) return LOOM_ERANGE;
  /* a sibling task ending may remove the job's cgroup between our two
   * mkdirs: try again */
  int tries = 0;
  for (;;) {
    if (mkdir(jdir, 0755) < 0 && errno != EEXIST) return LOOM_EIO;
    if (p->kind == CG_V2) {
      (void)cg_write(jdir, "cgroup.subtree_control", "+memory");
      if (cpus && *cpus && cg_has_word(jdir, "cgroup.controllers", "cpuset"))
        (void)cg_write(jdir, "cgroup.subtree_control", "+cpuset");
    }
    if (mkdir(tdir, 0755) == 0 || errno == EEXIST) break;
    if (errno != ENOENT || ++tries == 5) goto fail;
  }
  snprintf(num, sizeof num, "%lld", bytes);
  if (cg_write(tdir, cg_limit_file(p->kind), num) < 0) goto fail;
  if (p->kind == CG_V2) {
    /* swap would let the task run past its limit instead of being killed */
    if (cg_exists(tdir, "memory.swap.max")) (void)cg_write(tdir, "memory.swap.max", "0");
    if (cg_exists(tdir, "memory.oom.group")) (void)cg_write(tdir, "memory.oom.group", "1");
    if (cpus && *cpus && cg_exists(tdir, "cpuset.cpus")) (void)cg_write(tdir, "cpuset.cpus", cpus);
  } else if (cg_exists(tdir, "memory.memsw.limit_in_bytes")) {
    (void)cg_write(tdir, "memory.memsw.limit_in_bytes", num);
  }
  loom__strlcpy(out, tdir, outlen);
  return 0;
fail:
  rmdir(tdir);
  rmdir(jdir);
  return LOOM_EIO;
}

bool cg_oom_killed(cg_kind k, const char *dir) {
  if (k == CG_V2) return cg_key(dir, "memory.events", "oom_kill") > 0;
  long long n = cg_key(dir, "memory.oom_control", "oom_kill");
  if (n >= 0) return n > 0;
  char p[PATH_MAX], *txt = NULL;
  long long hits = 0;
  if (cg_path(p, dir, "memory.failcnt") == 0 && loom__read_file(p, 64, &txt, NULL) == 0)
    hits = atoll(txt);
  free(txt);
  return hits > 0;
}

void cg_remove(const char *dir) {
  /* a process that left the task's process groups still holds the cgroup:
   * nothing of the task may outlive it */
  for (int i = 0; i < 50 && rmdir(dir) < 0 && errno == EBUSY; i++) {
    if (cg_write(dir, "cgroup.kill", "1") < 0) {
      char p[PATH_MAX], *txt = NULL;
      if (cg_path(p, dir, "cgroup.procs") == 0 && loom__read_file(p, 1 << 20, &txt, NULL) == 0)
        for (char *t = txt; t && *t; t = strchr(t, '\n') ? strchr(t, '\n') + 1 : NULL)
          if (atoi(t) > 0) kill(atoi(t), SIGKILL);
      free(txt);
    }
    usleep(20000);
  }
  char parent[PATH_MAX];
  loom__strlcpy(parent, dir, sizeof parent);
  char *slash = strrchr(parent, '/');
  if (slash) {
    *slash = 0;
    rmdir(parent); /* the job's cgroup, once its last task is gone */
  }
}
