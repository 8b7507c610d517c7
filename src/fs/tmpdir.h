/* tmpdir.h: the local working directory of a writer to remote storage
 * (a checkpoint, summary, feed output or parameter-server shard on HDFS
 * is written here first, then uploaded): $TMPDIR/loom-<kind>-XXXXXX.
 *
 * A writer SIGKILLed cannot remove its directory. So each directory is
 * locked (flock) by its writer for as long as it lives, and making one
 * first removes every directory of the same kind whose lock no one holds:
 * its writer is dead. A live writer's directory, in this process or any
 * other (another pid namespace too: the lock is the kernel's), is never
 * removed. */
#ifndef LOOM_FS_TMPDIR_H
#define LOOM_FS_TMPDIR_H

#include <stddef.h>

/* Removes kind's directories under $TMPDIR (or /tmp) whose writers are
 * dead, then makes and locks a new one: its path into path[len] and the
 * descriptor that holds the lock into *lock_fd (close-on-exec). On
 * failure a negative LOOM_E* code, why in err, path "" and *lock_fd -1.
 * kind is a fixed word ("ckpt", "summary", "feed-out", "ps"). */
int loom__tmpdir_make(const char *kind, char *path, size_t len, int *lock_fd, char *err,
                      size_t errlen);

/* Removes path and all in it, then releases the lock (closes lock_fd);
 * nothing for path "" or lock_fd -1. The caller then forgets both. */
void loom__tmpdir_remove(const char *path, int lock_fd);

/* Removes kind's directories under base whose lock no one holds: the
 * number removed. loom__tmpdir_make calls it; tests call it alone. */
int loom__tmpdir_sweep(const char *base, const char *kind);

#endif
