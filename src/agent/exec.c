/* exec.c: the last step before the user's command, run in the child that
 * becomes it: limits that must be set from inside the process (affinity,
 * memory cgroup or rlimit, parent-death signal), then exec. */
#include "agent/agent.h"
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

static int set_cpus(const char *list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  char *copy = strdup(list), *save = NULL;
  if (!copy) return -1;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    long long c;
    if (loom__parse_int(tok, 0, CPU_SETSIZE - 1, &c) == 0) CPU_SET((int)c, &set);
  }
  free(copy);
  return sched_setaffinity(0, sizeof set, &set);
}

static int join_cgroup(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
  int rc = write(fd, pid, (size_t)n) == n ? 0 : -1;
  close(fd);
  return rc;
}

int agent_exec_main(int argc, char **argv) {
  int i = 1;
  while (i < argc && strcmp(argv[i], "--")) i++;
  if (i + 1 >= argc) {
    fprintf(stderr, "loom __exec: no command after --\n");
    return 126;
  }
  char **cmd = argv + i + 1;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char *ppid = loom__tun_raw(LOOM_TUN_EXEC_PPID);
  if (ppid && atoi(ppid) != (int)getppid()) return 126; /* the agent is already gone */
  const char *cpus = loom__tun_raw(LOOM_TUN_EXEC_CPUS);
  if (cpus && *cpus && set_cpus(cpus) < 0)
    fprintf(stderr, "loom: cannot set CPU affinity to %s: %s\n", cpus, strerror(errno));
  const char *cg = loom__tun_raw(LOOM_TUN_EXEC_CGROUP);
  const char *mem = loom__tun_raw(LOOM_TUN_EXEC_MEM);
  if (cg && *cg) {
    if (join_cgroup(cg) < 0) {
      fprintf(stderr, "loom: cannot join the memory cgroup %s: %s\n", cg, strerror(errno));
      return 126;
    }
  } else if (mem && *mem) {
    long long bytes;
    if (loom__parse_int(mem, 1, (long long)1 << 62, &bytes) == 0) {
      struct rlimit rl = {(rlim_t)bytes, (rlim_t)bytes};
      setrlimit(RLIMIT_DATA, &rl);
    }
  }
  unsetenv("LOOM__PPID");
  unsetenv("LOOM__CPUS");
  unsetenv("LOOM__CGROUP");
  unsetenv("LOOM__MEM");
  execvp(cmd[0], cmd);
  int e = errno;
  fprintf(stderr, "loom: cannot run '%s': %s\n", cmd[0], strerror(e));
  return e == ENOENT ? 127 : 126;
}
