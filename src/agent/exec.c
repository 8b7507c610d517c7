/* exec.c: the last step before the user's command, run in the child that
 * becomes it: limits that must be set from inside the process (affinity,
 * memory cgroup or rlimit, parent-death signal), the task's guard, then
 * exec.
 *
 * The guard: the agent starts each process of a task in a session of its
 * own, so a cluster manager that kills the agent's process group (YARN's
 * NodeManager) misses the task, and the parent-death signal reaches the
 * first process only, not what it started (`sh -c 'sleep 1000 & wait'`).
 * So __exec leaves a small process behind in the task's session, in a
 * process group of its own (the agent's kill of the task's group does not
 * reach it), holding one end of a socket pair whose other end only the
 * agent holds. The agent writes one byte to it when it has reaped the
 * task's first process: the guard then exits. The end of the socket
 * without that byte means the agent died: the guard SIGKILLs every process
 * left in the task's session, then exits. The agent sees the guard gone
 * when its end of the socket reads the end: it waits for that before it
 * reports the task's end, so no guard outlives its task. */
#include "agent/agent.h"
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

/* ---- the guard ----------------------------------------------------------- */
/* SIGKILLs every live process of session sid but the caller, counting them. */
typedef struct {
  int sid, self, left;
} session_kill;

static void kill_one(int pid, const loom__pstat *st, void *arg) {
  session_kill *k = arg;
  if (st->sid != k->sid || pid == k->self || st->state == 'Z' || st->state == 'X') return;
  kill((pid_t)pid, SIGKILL);
  k->left++;
}

/* SIGKILLs every live process of this session but the caller, until none
 * is left (a process may fork while the others die): at most about 5 s. */
static void kill_session(void) {
  session_kill k = {.sid = (int)getsid(0), .self = (int)getpid()};
  if (k.sid <= 0) return;
  kill(-k.sid, SIGKILL); /* the task's first process group: the session leader's */
  for (int round = 0; round < 500; round++) {
    k.left = 0;
    loom__proc_each(kill_one, &k);
    if (!k.left) return;
    usleep(10000);
  }
}

/* `loom __exec --guarding FD`: the guard's own program (see the top). */
static int guard_main(int fd) {
  int ignored[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
                   SIGPIPE, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU};
  for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++) signal(ignored[i], SIG_IGN);
  for (;;) {
    char c;
    ssize_t n = read(fd, &c, 1);
    if (n == 1) return 0; /* the agent reaped the task's first process */
    if (n < 0 && errno == EINTR) continue;
    break; /* the end: the agent is gone */
  }
  kill_session();
  return 0;
}

/* Leaves the guard behind: a grandchild (its parent exits at once, so
 * that the command, which this process becomes, has no child it did not
 * start), in a process group of its own, running `loom __exec --guarding`
 * with fd (its end of the agent's socket) as its only file besides
 * /dev/null. A guard that cannot start leaves the task unguarded. */
static void start_guard(int fd) {
  pid_t mid = fork();
  if (mid < 0) {
    fprintf(stderr, "loom: cannot start the task's guard: %s\n", strerror(errno));
    return;
  }
  if (mid == 0) {
    pid_t g = fork();
    if (g < 0) fprintf(stderr, "loom: cannot start the task's guard: %s\n", strerror(errno));
    if (g != 0) _exit(0);
    setpgid(0, 0);
    int null = open("/dev/null", O_RDWR);
    for (int s = 0; s < 3 && null >= 0; s++)
      if (s != fd) dup2(null, s);
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
      int f = atoi(e->d_name);
      if (f > 2 && f != fd && f != dirfd(d)) close(f);
    }
    if (d) closedir(d);
    char num[16];
    snprintf(num, sizeof num, "%d", fd);
    char *args[] = {"loom", "__exec", "--guarding", num, NULL};
    execv("/proc/self/exe", args);
    _exit(guard_main(fd)); /* the same without a fresh image */
  }
  while (waitpid(mid, NULL, 0) < 0 && errno == EINTR) {
  }
}

int agent_exec_main(int argc, char **argv) {
  long long gfd = -1;
  if (argc == 3 && !strcmp(argv[1], "--guarding") &&
      loom__parse_int(argv[2], 0, INT32_MAX, &gfd) == 0)
    return guard_main((int)gfd);
  int i = 1;
  if (i + 1 < argc && !strcmp(argv[i], "--guard")) {
    if (loom__parse_int(argv[i + 1], 0, INT32_MAX, &gfd) < 0) gfd = -1;
    i += 2;
  }
  while (i < argc && strcmp(argv[i], "--")) i++;
  if (i + 1 >= argc) {
    fprintf(stderr, "loom __exec: no command after --\n");
    return 126;
  }
  char **cmd = argv + i + 1;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char *ppid = loom__tun_raw(LOOM_TUN_EXEC_PPID);
  if (ppid && atoi(ppid) != (int)getppid()) return 126; /* the agent is already gone */
  if (gfd >= 0) { /* before the limits: the guard stays out of the task's cgroup */
    start_guard((int)gfd);
    close((int)gfd);
  }
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
