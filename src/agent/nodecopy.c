/* nodecopy.c: an agent's share of a Slurm job's node-local copies (see
 * agent_int.h): a shared flock on JOBDIR_NODE_EXE_DIR<id>/.agents while it
 * runs; an agent that knows the job ends (Slurm signalled it, or its
 * coordinator's STOP said so) marks the copies (.ending), and the last
 * agent out removes marked copies. */
#include "agent/agent_int.h"
#include "fs/fs.h"
#include "jobdir/jobdir.h"

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define LOCK_NAME ".agents"
#define ENDING_NAME ".ending"
/* how long an agent that knows the job ends waits for the node's other agents */
#define LAST_WAIT_MS 1000

int agent_nodecopy_hold(char *id, size_t idlen) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = 0;
  size_t pre = strlen(JOBDIR_NODE_EXE_DIR);
  if (strncmp(exe, JOBDIR_NODE_EXE_DIR, pre)) return -1;
  /* JOBDIR_NODE_EXE_DIR<digits>/<name>: the id is the digits */
  const char *d = exe + pre, *slash = strchr(d, '/');
  if (!slash || slash == d || (size_t)(slash - d) >= idlen || strchr(slash + 1, '/')) return -1;
  for (const char *c = d; c < slash; c++)
    if (!isdigit((unsigned char)*c)) return -1;
  memcpy(id, d, (size_t)(slash - d));
  id[slash - d] = 0;
  char lock[PATH_MAX];
  snprintf(lock, sizeof lock, JOBDIR_NODE_EXE_DIR "%s/" LOCK_NAME, id);
  int fd = open(lock, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_SH) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void agent_nodecopy_release(int fd, const char *id, bool ending) {
  if (fd < 0) return;
  char mark[PATH_MAX];
  snprintf(mark, sizeof mark, JOBDIR_NODE_EXE_DIR "%s/" ENDING_NAME, id);
  /* Slurm signals a step's processes when the job (or the step) ends;
   * an agent of the node may end by another way first (its task killed,
   * its coordinator gone), and learns from the mark that the job ends */
  if (ending) {
    int m = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (m >= 0) close(m);
  }
  /* unlock first, then try for the whole lock: of agents ending together
   * the last to try always gets it (a failed try holds nothing). Knowing
   * the job ends, an agent waits a little for the others: one whose
   * handlers were already closed dies of the same signal holding its
   * share, and tries nothing. */
  flock(fd, LOCK_UN);
  bool last = flock(fd, LOCK_EX | LOCK_NB) == 0;
  for (int waited = 0; !last && ending && waited < LAST_WAIT_MS; waited += 10) {
    nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000L}, NULL);
    last = flock(fd, LOCK_EX | LOCK_NB) == 0;
  }
  if (last && (ending || access(mark, F_OK) == 0)) {
    const char *dirs[] = {JOBDIR_NODE_FILES_DIR, JOBDIR_NODE_EXE_DIR};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
      char path[PATH_MAX], err[512];
      snprintf(path, sizeof path, "%s%s", dirs[i], id);
      if (access(path, F_OK) == 0 && loom__fs_remove(path, true, err, sizeof err) < 0)
        agent_log("cannot remove %s, Slurm job %s's copy on this node: %s", path, id, err);
    }
  }
  close(fd);
}
