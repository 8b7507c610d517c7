/* loom/ckpt.h: atomic checkpoints of named tensors.
 *
 * A checkpoint is one file per step, ckpt-<step, 12 digits>.ckpt, in the
 * checkpoint directory: by default $LOOM_JOB_DIR/ckpt/, which every task and
 * every attempt of the job sees (typically rank 0 saves and, after a
 * restart, every rank resumes from the same step), or any directory the
 * caller names.
 *
 * A save writes a temporary file, fsyncs it, renames it into place and
 * fsyncs the directory, so a crash at any moment leaves the previous
 * checkpoints as they were and the new one either whole or absent. Every
 * file carries a CRC-32C over all its bytes; restore refuses a file that is
 * truncated, corrupt or not a checkpoint, and latest skips such files (with
 * a warning in the log) to find the newest valid one. Temporary files left
 * by a saver that died are removed by the next open or save on that host.
 *
 * Every call returns 0 or a negative LOOM_E* code; loom_ckpt_errmsg() (and
 * loom_errmsg() of the loom handle given to open) says what went wrong.
 * Calls on one handle are thread-safe. The file format is in docs/checkpoints.md. */
#ifndef LOOM_CKPT_H
#define LOOM_CKPT_H

#include "../loom.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_CKPT_MAX_DIMS 8
#define LOOM_CKPT_MAX_NAME 255      /* bytes of a tensor name */
#define LOOM_CKPT_MAX_TENSORS 65536 /* in one checkpoint */

/* A tensor: a name unique within the checkpoint, its element type and
 * shape, and its data: the product of the shape's ndim sizes (1 for a
 * scalar, ndim 0) elements in C (row-major) order, in host byte order
 * (checkpoints are little-endian). The caller owns the memory; save only
 * reads data, restore writes it. */
typedef struct {
  const char *name;
  loom_dtype dtype;
  int ndim;
  int64_t shape[LOOM_CKPT_MAX_DIMS];
  void *data;
} loom_tensor;

typedef struct loom_ckpt loom_ckpt_t;

/* Opens (creating it if missing) the checkpoint directory dir, or with dir
 * NULL the job's $LOOM_JOB_DIR/ckpt (LOOM_ENOENV outside a job). keep is
 * how many checkpoints a save leaves (the one it wrote and the keep - 1
 * newest before it); 0 keeps every one. l may be NULL; when given it
 * receives the error detail too. On success *c is a handle the caller owns
 * and releases with loom_ckpt_close(). */
LOOM_EXPORT int loom_ckpt_open(loom_t *l, const char *dir, int keep, loom_ckpt_t **c);

/* Saves the n tensors t as the checkpoint of step (>= 0), atomically and
 * durably; a checkpoint of the same step is replaced. The saved step
 * becomes the newest: checkpoints of later steps (from a run that went
 * further before it failed) are deleted, and the oldest beyond keep. */
LOOM_EXPORT int loom_ckpt_save(loom_ckpt_t *c, int64_t step, const loom_tensor *t, size_t n);

/* The step of the newest checkpoint whose file is whole and whose checksum
 * holds, into *step; LOOM_ENOENT when there is none. Reads the candidate
 * files through. */
LOOM_EXPORT int loom_ckpt_latest(loom_ckpt_t *c, int64_t *step);

/* Fills the n tensors t from the checkpoint of step, by name: each must be
 * in the checkpoint with the same dtype and shape (the checkpoint may hold
 * others, which are not read). The whole file is checked (size, structure,
 * checksum) and every tensor matched before any data is written, so on an
 * error no tensor's data has changed. LOOM_ENOENT: no such step or tensor;
 * LOOM_EINVAL: a dtype or shape differs; LOOM_EIO: the file is truncated,
 * corrupt or unreadable. */
LOOM_EXPORT int loom_ckpt_restore(loom_ckpt_t *c, int64_t step, loom_tensor *t, size_t n);

/* Checks the checkpoint of step as restore would, without reading tensors
 * out. */
LOOM_EXPORT int loom_ckpt_verify(loom_ckpt_t *c, int64_t step);

/* The steps of the checkpoint files present, ascending, by name only (use
 * loom_ckpt_verify to check one): the first max go to steps, and *count
 * gets how many there are (which may be more than max). */
LOOM_EXPORT int loom_ckpt_list(loom_ckpt_t *c, int64_t *steps, size_t max, size_t *count);

/* The checkpoint directory. Valid until loom_ckpt_close(). */
LOOM_EXPORT const char *loom_ckpt_dir(const loom_ckpt_t *c);
/* Detail text of the last error on this handle ("" if none). */
LOOM_EXPORT const char *loom_ckpt_errmsg(const loom_ckpt_t *c);
/* Frees the handle; c is invalid afterwards. */
LOOM_EXPORT void loom_ckpt_close(loom_ckpt_t *c);

#ifdef __cplusplus
}
#endif
#endif
