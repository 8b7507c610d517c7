/* ckpt_int.h: what the two halves of libloom's checkpoints share: the
 * handle, a checked file's parsed table, and the functions one half calls
 * in the other. ckpt.c is the directory and the API (open, save, prune,
 * list, latest, verify, restore); format.c is the file's bytes (checking a
 * file, restoring tensors from it, the dtypes). Not installed; nothing
 * outside src/ckpt includes it. */
#ifndef LOOM_CKPT_INT_H
#define LOOM_CKPT_INT_H

#include "core/core.h"
#include "loom/ckpt.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#define CKPT_MAGIC "LOOMCKPT"
#define CKPT_END "CEND"
#define CKPT_VERSION 1
#define CKPT_HEADER 64
#define CKPT_TRAILER 8
#define CKPT_ALIGN 64
#define CKPT_MAX_TABLE (32u << 20)
#define CKPT_MAX_FILES (1u << 20) /* checkpoint files a directory may list */
#define CKPT_IO_CHUNK (1u << 20)

struct loom_ckpt {
  loom_t *l; /* not owned; may be NULL */
  char dir[PATH_MAX];
  /* an hdfs:// checkpoint directory: dir is then a local directory of
   * this handle's own, where a save writes (and a read fetches) one file
   * at a time; the checkpoints themselves are only in remote */
  char *remote;
  int dir_lock; /* remote: the lock on dir (fs/tmpdir.h), -1 when none */
  char host[256];
  int keep;
  pthread_mutex_t mu; /* one call at a time */
  char errmsg[1024];
  /* The last file found whole, so that restore right after latest reads
   * it once for its checksum, not twice. */
  struct {
    bool valid;
    int64_t step;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
  } verified;
};

/* One entry of a file's table, pointing into the table's bytes. */
typedef struct {
  const char *name;
  size_t name_len;
  int dtype; /* file code, 1..4 */
  int ndim;
  int64_t shape[LOOM_CKPT_MAX_DIMS];
  uint64_t offset, bytes;
} ckpt_entry;

/* A checked file: its header fields and parsed table. */
typedef struct {
  int64_t step;
  uint64_t size;
  uint32_t count;
  unsigned char *table; /* table bytes; entries point into it */
  ckpt_entry *entries;
} ckpt_file;

/* ---- ckpt.c -------------------------------------------------------------- */

/* Sets c's message (and the loom handle's, when it has one) and returns
 * code. */
int ckpt_fail(loom_ckpt_t *c, int code, const char *fmt, ...) LOOM__PRINTF(3, 4);

/* ---- format.c ------------------------------------------------------------ */

typedef struct {
  loom_dtype dt;
  int code;
  size_t size;
  const char *name;
} ckpt_dtype_info;

/* The dtypes a file can hold, with their codes in the table. */
extern const ckpt_dtype_info ckpt_dtypes[4];

void ckpt_file_free(ckpt_file *f);
int ckpt_dtype_index_of(loom_dtype dt);
const char *ckpt_shape_str(int dtype_idx, int ndim, const int64_t *shape, char *buf, size_t len);
int64_t ckpt_tensor_bytes(size_t esize, int ndim, const int64_t *shape);
int ckpt_check(loom_ckpt_t *c, const char *path, int fd, int64_t step, ckpt_file *f);
int ckpt_restore_fd(loom_ckpt_t *c, const char *path, int fd, int64_t step, loom_tensor *t,
                    size_t n);

#endif
