/* fs.h: files by name, where a name is a local path or an hdfs:// URL
 * (hadoop/hdfs.h): what the feed reads, where outputs, checkpoints and
 * summaries go. Local paths go to the kernel as they are; HDFS URLs to
 * loom's HDFS client. Every function returns 0 or a negative LOOM_E* code
 * with err saying what failed, naming the path:
 *   LOOM_ENOENT  no such file or directory
 *   LOOM_EAUTH   permission denied
 *   LOOM_ESTATE  exists already / is (not) a directory
 *   LOOM_EIO     the bytes cannot be read or written
 *   LOOM_ECONN, LOOM_ETIMEDOUT  the cluster cannot be reached
 *   LOOM_EINVAL  a malformed URL */
#ifndef LOOM_FS_FS_H
#define LOOM_FS_FS_H

#include "core/core.h"

/* True for hdfs: URLs (the only remote kind so far). */
bool loom__fs_remote(const char *name);

/* ---- reading ----------------------------------------------------------- */
typedef struct loom__rfile loom__rfile;

int loom__rfile_open(const char *name, loom__rfile **out, char *err, size_t errlen);
uint64_t loom__rfile_size(const loom__rfile *f);
/* Reads min(n, size - off) bytes at off, exactly (*got says how many;
 * fewer than asked only at the end of the file). */
int loom__rfile_pread(loom__rfile *f, void *buf, size_t n, uint64_t off, size_t *got, char *err,
                      size_t errlen);
/* Says the range [off, off + len) will be read soon, in order (the page
 * cache's read-ahead; nothing for HDFS, whose reads stream anyway). */
void loom__rfile_advise(loom__rfile *f, uint64_t off, uint64_t len, bool sequential);
/* The hosts holding byte off (HDFS: the DataNodes of its block; local:
 * none), up to max, into hosts: the count. */
int loom__rfile_hosts(loom__rfile *f, uint64_t off, char (*hosts)[64], int max);
void loom__rfile_close(loom__rfile *f);

/* ---- the namespace ------------------------------------------------------ */
typedef struct {
  bool dir;
  uint64_t size;
  int64_t mtime_ms; /* modification time, ms since the epoch */
} loom__fs_info;

int loom__fs_stat(const char *name, loom__fs_info *st, char *err, size_t errlen);
/* Every file name the glob pattern matches (*, ?, [...] in any component;
 * for HDFS matched by fnmatch against the NameNode's listings), sorted,
 * into a malloc'ed array of malloc'ed names. A pattern with no wildcard
 * is itself when it exists. 0 matches is not an error (*n = 0). */
int loom__fs_glob(const char *pattern, char ***names, size_t *n, char *err, size_t errlen);
int loom__fs_mkdirs(const char *name, char *err, size_t errlen);
/* Renames atomically; replace: dst may exist (a file), else LOOM_ESTATE. */
int loom__fs_rename(const char *src, const char *dst, bool replace, char *err, size_t errlen);
/* Removes a file (recursive: a directory and all in it). LOOM_ENOENT when
 * absent. */
int loom__fs_remove(const char *name, bool recursive, char *err, size_t errlen);

/* ---- whole files -------------------------------------------------------- */
/* Copies the local file local to name atomically: written beside it as
 * name + "._COPYING_" then renamed over name (replace) or onto it (not:
 * LOOM_ESTATE when name exists). */
int loom__fs_put(const char *local, const char *name, bool replace, char *err, size_t errlen);
/* The same for the first len bytes of local (all of it when shorter). */
int loom__fs_put_n(const char *local, uint64_t len, const char *name, bool replace, char *err,
                   size_t errlen);
/* Copies the local directory tree local to name (made, with its
 * subdirectories; files as loom__fs_put with replace). */
int loom__fs_put_tree(const char *local, const char *name, char *err, size_t errlen);
/* Copies name, a file or a directory tree, to local (made). */
int loom__fs_get_tree(const char *name, const char *local, char *err, size_t errlen);
/* Copies name to the local file local (written beside it, then renamed). */
int loom__fs_get(const char *name, const char *local, char *err, size_t errlen);
/* Writes len bytes of data to name atomically, as loom__fs_put. */
int loom__fs_write_all(const char *name, const void *data, size_t len, bool replace, char *err,
                       size_t errlen);
/* Reads all of name (at most max bytes) into a malloc'ed buffer. */
int loom__fs_read_all(const char *name, size_t max, void **data, size_t *len, char *err,
                      size_t errlen);

#endif
