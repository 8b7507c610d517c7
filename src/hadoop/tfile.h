/* tfile.h: a reader of Hadoop's TFile (org.apache.hadoop.io.file.tfile), in
 * memory, and of the aggregated container logs YARN's NodeManagers write in
 * it (org.apache.hadoop.yarn.logaggregation.AggregatedLogFormat, the
 * "TFile" log aggregation file controller, Hadoop's default).
 *
 * A TFile is a BCFile: data blocks, then meta blocks, then the meta index,
 * then a tail of the meta index's offset (8 bytes), the BCFile version (two
 * shorts, major 1) and a 16-byte magic. The meta index names each meta
 * block ("data:" + name), its compression ("none", "gz") and its region
 * (offset, compressed and raw size, Hadoop's TFile VLongs); the meta block
 * "BCFile.index" lists the data blocks' regions and their compression. A
 * data block, decompressed, is records: a key (VInt length, bytes) and a
 * value in chunks (VInt -n: n bytes and more chunks follow; VInt n >= 0:
 * the last n bytes).
 *
 * In an aggregated log file the keys are Java writeUTF strings (2-byte
 * length, bytes): "VERSION", "APPLICATION_ACL", "APPLICATION_OWNER" (a
 * writeUTF user) and, for each container, its id, whose value is, per log
 * file of the container: writeUTF(name), writeUTF(decimal length), that
 * many bytes.
 *
 * Everything read is untrusted (a file on HDFS anyone may have written):
 * every length is checked against what is there and against the bounds
 * below before anything is allocated or copied. Fuzzed
 * (tests/fuzz/tfile_fuzz.c). */
#ifndef LOOM_HADOOP_TFILE_H
#define LOOM_HADOOP_TFILE_H

#include "core/core.h"

/* Bounds: the file as a whole (the caller reads it into memory), one
 * decompressed block, and the number of data and meta blocks. */
#define TFILE_MAX_FILE (1ull << 30)
#define TFILE_MAX_BLOCK (256u << 20)
#define TFILE_MAX_BLOCKS 1000000

/* Called with each record of a TFile in order: the key and the value
 * (chunks joined), valid during the call only. A nonzero return stops the
 * walk and is what tfile_each returns. */
typedef int (*tfile_record_fn)(void *arg, const uint8_t *key, size_t klen, const uint8_t *val,
                               size_t vlen);

/* Walks the records of the TFile of len bytes at file. Returns 0, what fn
 * returned, or LOOM_EPROTO (not a TFile, or malformed: err says what and
 * where), LOOM_ENOTSUP (a compression other than none and gz), LOOM_ERANGE
 * (a bound passed) or LOOM_ENOMEM. */
int tfile_each(const uint8_t *file, size_t len, tfile_record_fn fn, void *arg, char *err,
               size_t errlen);

/* Called with each log file of each container of an aggregated log file,
 * in the file's order: the container's id, the log's name ("stdout",
 * "stderr", "launch_container.sh", ...) and its bytes, valid during the
 * call only. Nonzero stops the walk, as above. */
typedef int (*tfile_log_fn)(void *arg, const char *container, const char *logtype,
                            const uint8_t *data, size_t len);

/* Walks an aggregated log file (a TFile as above). owner, when not NULL,
 * gets the APPLICATION_OWNER ("" when the file has none). Errors as
 * tfile_each's. */
int tfile_logs_each(const uint8_t *file, size_t len, tfile_log_fn fn, void *arg, char *owner,
                    size_t ownerlen, char *err, size_t errlen);

/* Hadoop's TFile VLong at p (end: one past the last byte there): the
 * value into *v and the bytes it took into *used. LOOM_EPROTO when it runs
 * past end. */
int tfile_vlong(const uint8_t *p, const uint8_t *end, int64_t *v, size_t *used);

#endif
