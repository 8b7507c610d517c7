/* comm_testutil.h: what the collectives' tests share. */
#ifndef LOOM_COMM_TESTUTIL_H
#define LOOM_COMM_TESTUTIL_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

/* Segments left in /dev/shm by these ranks: their names carry the
 * creating rank's pid, so other jobs on the machine do not count. */
static inline int dev_shm_left(const pid_t *pids, int n) {
  DIR *d = opendir("/dev/shm");
  int left = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    for (int r = 0; r < n; r++) {
      char prefix[48];
      snprintf(prefix, sizeof prefix, "loom-comm-%d-", (int)pids[r]);
      if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) left++;
    }
  if (d) closedir(d);
  return left;
}

#endif
