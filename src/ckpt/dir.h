/* dir.h: a directory of checkpoints, one entry per step, local or on HDFS,
 * for both of loom's kinds: libloom's (ckpt.c: files ckpt-<step>.ckpt)
 * and the parameter server's (src/ps/ckpt.c: directories step-<step>,
 * committed by their manifest). A save writes its entry (a file, or the
 * manifest of a directory) under a temporary name in its own format, then
 * ckpt_dir_commit puts it in place atomically and ckpt_dir_prune keeps the
 * newest ones. */
#ifndef LOOM_CKPT_DIR_H
#define LOOM_CKPT_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  const char *dir;      /* a local directory or an hdfs:// URL */
  const char *prefix;   /* an entry's name: prefix, the step in 12 digits (or more), */
  const char *suffix;   /* then suffix ("" for none) */
  bool is_dir;          /* entries are directories, removed with all they hold */
  bool drop_later;      /* a commit of step removes the entries of later steps */
  const char *tag;      /* the log's subsystem for warnings */
  const char *manifest; /* is_dir: the file in an entry whose arrival commits it */
  const char *latest;   /* a file in dir naming the newest committed step ("S\n"),
                           or NULL for none */
} ckpt_dir;

/* Writes the path of step's entry into out[len]; LOOM_ERANGE when it does
 * not fit. */
int ckpt_dir_path(const ckpt_dir *d, int64_t step, char *out, size_t len);

/* The step in an entry's name (no directory), or -1 when name is not
 * prefix, 1 to 18 digits, suffix. */
int64_t ckpt_dir_step_of(const ckpt_dir *d, const char *name);

/* The steps of the entries in the directory, ascending, into a malloc'ed
 * *steps the caller frees. On failure a negative code and why. */
int ckpt_dir_steps(const ckpt_dir *d, int64_t **steps, size_t *n, char *why, size_t whylen);

/* After step was committed: of steps[0..n) (the directory's, any order),
 * keeps step and the keep - 1 newest before it (every one when keep < 1),
 * and, unless d->drop_later, those after it among the keep newest; removes
 * the others, calling dropped(arg, s) for each step s it removes (arg and
 * dropped may be NULL). A removal that fails is a warning in the log, not
 * an error: the save itself succeeded. */
void ckpt_dir_prune(const ckpt_dir *d, const int64_t *steps, size_t n, int64_t step, int keep,
                    void (*dropped)(void *arg, int64_t step), void *arg);

/* Commits step: tmp, a complete file under a temporary name, becomes the
 * step's entry (or, with d->manifest, the manifest in the step's entry
 * directory), atomically, replacing one there:
 *   tmp and d->dir local: rename(2), then fsync of the parent directory;
 *   d->dir remote, tmp local: uploaded beside the entry under tmp's own
 *     file name (its writer's: two savers of one step never share it),
 *     renamed over the entry by the NameNode, tmp removed;
 *   both remote: renamed over it (loom__fs_rename).
 * Then d->latest, when set, is written atomically; then the directory is
 * listed and pruned (ckpt_dir_steps, ckpt_dir_prune with keep, dropped and
 * arg), where failing is a warning in the log, not an error. On failure a
 * negative code and why, tmp removed, nothing pruned. */
int ckpt_dir_commit(const ckpt_dir *d, int64_t step, const char *tmp, int keep,
                    void (*dropped)(void *arg, int64_t step), void *arg, char *why, size_t whylen);

#endif
