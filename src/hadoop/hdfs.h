/* hdfs.h: a client of HDFS in C, with no JVM and no libhdfs: the
 * NameNode's ClientProtocol over Hadoop IPC (ipc.h) for the namespace and
 * block locations, and the DataNodes' DataTransferProtocol for the bytes.
 *
 * Reading goes straight to a DataNode holding the block (OP_READ_BLOCK),
 * checks every chunk's checksum (CRC32C or CRC32, as the DataNode kept
 * them) and, on a replica that is dead, refuses, or sends bytes that do not
 * match their checksum, goes on from the same offset on the next replica;
 * with no good replica left it fails naming the path and the block. Bytes
 * that failed their checksum are never handed out.
 *
 * Writing uses the DataNode write pipeline (OP_WRITE_BLOCK to the first
 * DataNode, which forwards to the others), as Hadoop's own client does:
 * one hop for the bytes instead of WebHDFS's redirect through an HTTP
 * server in each DataNode, and no HTTP stack in libloom. Packets of 126
 * chunks of 512 bytes with CRC32C, up to 80 unacknowledged. A DataNode
 * that fails while a block's pipeline is being set up is excluded and the
 * block asked for again; one that fails mid-block fails the write (the
 * half-written file is deleted): callers write whole files and retry.
 *
 * Authentication: SIMPLE (the user name, HADOOP_USER_NAME or the login).
 * Kerberos would add a SASL GSSAPI exchange on the NameNode connection and
 * block access tokens (and optionally SASL with data-transfer protection)
 * on each DataNode connection; it is not built.
 *
 * Every wait is bounded (HDFS_TIMEOUT_MS for a NameNode call or a
 * DataNode's reply) and every reply is bounds-checked before use. A
 * connection to a NameNode is shared by the threads of a process
 * (hdfs_get); one call at a time. Readers and writers are each one
 * thread's. */
#ifndef LOOM_HADOOP_HDFS_H
#define LOOM_HADOOP_HDFS_H

#include "core/core.h"

#define HDFS_DEFAULT_PORT 8020
#define HDFS_TIMEOUT_MS 60000
/* Hadoop's own bound on a data packet (PacketReceiver.MAX_PACKET_SIZE). */
#define HDFS_MAX_PACKET (16u << 20)
#define HDFS_MAX_PATH 4096

/* A parsed hdfs:// URL. */
typedef struct {
  char host[256];
  int port;
  char path[HDFS_MAX_PATH]; /* absolute, as given */
} hdfs_url;

/* True when s is an hdfs: URL (whatever is after it). */
bool hdfs_is_url(const char *s);
/* "hdfs://host:port/path", "hdfs://host/path" (port 8020) or "hdfs:///path"
 * (the NameNode of fs.defaultFS in $HADOOP_CONF_DIR's core-site.xml).
 * LOOM_EINVAL with err saying what is wrong with the URL, or LOOM_ENOENT
 * when hdfs:/// cannot find the configuration. */
int hdfs_parse_url(const char *url, hdfs_url *out, char *err, size_t errlen);

typedef struct hdfs hdfs;

/* The process's connection to the NameNode at host:port, made on first
 * use and kept (a later call that finds it closed makes it again). Never
 * freed but by hdfs_release_all. Returns 0, or LOOM_ENOMEM. No I/O: the
 * connection is made at the first call. */
int hdfs_get(const char *host, int port, hdfs **out);

/* Delegation tokens, as `hdfs fetchdt` handles them: fetched on the
 * NameNode connection (Kerberos: a NameNode gives tokens to no token
 * connection), written as a Hadoop credentials file holding one token of
 * kind HDFS_DT_KIND whose service is the NameNode's "address:port" (what
 * HADOOP_TOKEN_FILE_LOCATION names for loom's and Java's clients). A
 * process whose $HADOOP_TOKEN_FILE_LOCATION holds such a token for a
 * NameNode authenticates to it with the token. */
#define HDFS_DT_KIND "HDFS_DELEGATION_TOKEN"
/* A new token, renewable by renewer ("" : nobody), as the bytes of a
 * credentials file (*file, the caller frees). */
int hdfs_dt_fetch(hdfs *fs, const char *renewer, uint8_t **file, size_t *len, char *err,
                  size_t errlen);
/* The NameNode a credentials file's HDFS token is for (its service). */
int hdfs_dt_service(const uint8_t *file, size_t len, char *host, size_t hostlen, int *port,
                    char *err, size_t errlen);
/* Renews the file's token (the caller must be its renewer): its new
 * expiry (ms since the epoch) into *expiry_ms. */
int hdfs_dt_renew(hdfs *fs, const uint8_t *file, size_t len, uint64_t *expiry_ms, char *err,
                  size_t errlen);
/* Cancels the file's token: no one can use it after. */
int hdfs_dt_cancel(hdfs *fs, const uint8_t *file, size_t len, char *err, size_t errlen);
/* Closes and frees every connection (at exit, for leak checkers). */
void hdfs_release_all(void);
/* "the NameNode at 127.0.0.1:9000", for messages. */
const char *hdfs_peer(const hdfs *fs);

typedef struct {
  bool dir;
  uint64_t length, blocksize, fileid;
  uint64_t mtime_ms, atime_ms;
  uint32_t perm; /* 0755 */
  uint32_t replication;
  char owner[128], group[128];
  char name[1024]; /* the last component (hdfs_list), "" for hdfs_stat */
} hdfs_stat;

/* Error codes of everything below: 0, or
 *   LOOM_ENOENT  no such file or directory
 *   LOOM_EAUTH   permission denied (the NameNode's AccessControlException)
 *   LOOM_ESTATE  the path exists already, or is a directory / not one
 *   LOOM_EIO     no good replica of a block (the path and block named)
 *   LOOM_ECONN, LOOM_ETIMEDOUT  the NameNode (or every DataNode) cannot be
 *                reached or did not answer in time
 *   LOOM_EPEER   any other refusal of the NameNode (its exception named)
 *   LOOM_EPROTO  a malformed reply
 * with err saying what, naming the path. */

int hdfs_stat_path(hdfs *fs, const char *path, hdfs_stat *st, char *err, size_t errlen);
/* The entries of directory path (or the file itself), sorted by name as
 * the NameNode gives them, into a malloc'ed array (free()). */
int hdfs_list(hdfs *fs, const char *path, hdfs_stat **out, size_t *n, char *err, size_t errlen);
/* Makes path and its parents (like mkdir -p), mode perm. */
int hdfs_mkdirs(hdfs *fs, const char *path, uint32_t perm, char *err, size_t errlen);
/* Deletes path (a directory only with recursive). LOOM_ENOENT when it is
 * not there. */
int hdfs_delete(hdfs *fs, const char *path, bool recursive, char *err, size_t errlen);
/* Renames src to dst, atomically, replacing dst (a file or an empty
 * directory) with overwrite, else LOOM_ESTATE when dst exists. */
int hdfs_rename(hdfs *fs, const char *src, const char *dst, bool overwrite, char *err,
                size_t errlen);

/* ---- reading ----------------------------------------------------------- */
typedef struct hdfs_reader hdfs_reader;

int hdfs_open(hdfs *fs, const char *path, hdfs_reader **out, char *err, size_t errlen);
uint64_t hdfs_reader_size(const hdfs_reader *r);
/* Reads min(n, size - off) bytes at off into buf, exactly: *got says how
 * many. Consecutive reads that continue each other stream one DataNode
 * connection. */
int hdfs_pread(hdfs_reader *r, void *buf, size_t n, uint64_t off, size_t *got, char *err,
               size_t errlen);
/* The hosts (ipAddr) holding the block with byte off, up to max of them,
 * into hosts[]: the count, or a negative error. */
int hdfs_reader_hosts(hdfs_reader *r, uint64_t off, char (*hosts)[64], int max, char *err,
                      size_t errlen);
/* Replicas given up on so far (counted for tests and events). */
int hdfs_reader_failovers(const hdfs_reader *r);
void hdfs_reader_close(hdfs_reader *r);

/* ---- writing ----------------------------------------------------------- */
typedef struct hdfs_writer hdfs_writer;

/* Creates path (its parent directories too), replacing a file there with
 * overwrite (else LOOM_ESTATE when it exists). replication and blocksize
 * 0: the NameNode's defaults. */
int hdfs_create(hdfs *fs, const char *path, bool overwrite, uint32_t replication,
                uint64_t blocksize, hdfs_writer **out, char *err, size_t errlen);
int hdfs_write(hdfs_writer *w, const void *buf, size_t n, char *err, size_t errlen);
/* Sends what is buffered, waits until every DataNode acknowledged it and
 * the NameNode completed the file, and frees w. On any error the file is
 * deleted (and w freed too). */
int hdfs_close_file(hdfs_writer *w, char *err, size_t errlen);
/* Gives up the file: deletes it, frees w. */
void hdfs_abort(hdfs_writer *w);

/* ---- DataTransferProtocol framing, with no I/O (fuzzed) ----------------- */

/* A packet's fixed prefix: the 4-byte payload length (itself, checksums,
 * data) and the 2-byte header length. Returns 0 or LOOM_EPROTO. */
int hdfs_packet_lengths(const uint8_t pre[6], uint32_t *plen, uint16_t *hlen, char *err,
                        size_t errlen);
typedef struct {
  int64_t offset; /* in the block */
  int64_t seqno;
  bool last;
  uint32_t datalen;
} hdfs_packet;
/* Decodes a packet's header (hlen bytes) and checks it against the payload
 * length plen and the checksum layout (bpc bytes a chunk, csize bytes a
 * checksum): the checksums take plen - 4 - datalen bytes, one per chunk.
 * Returns 0 or LOOM_EPROTO. */
int hdfs_packet_decode(const uint8_t *hdr, size_t hlen, uint32_t plen, uint32_t bpc, uint32_t csize,
                       hdfs_packet *out, char *err, size_t errlen);
/* Checks the data's chunks against their checksums (type 0 none, 1 CRC32,
 * 2 CRC32C): the index of the first bad chunk, or -1 when all match. */
long hdfs_checksums_bad(int type, uint32_t bpc, const uint8_t *sums, const uint8_t *data,
                        size_t len);

/* ---- checks of the NameNode's and DataNodes' messages (fuzzed) --------- *
 * Each takes a decoded message (the protobuf-c struct named) and returns 0
 * or LOOM_EPROTO (LOOM_ENOTSUP, LOOM_EPEER, LOOM_EIO where said) with err
 * saying what is wrong. */

/* A file status (HdfsFileStatusProto) into st; name: also its path's last
 * component, non-printable bytes replaced. */
void hdfs_stat_of(const void *status, hdfs_stat *st, bool name);
/* LocatedBlocksProto: blocks in order, inside the file, usable DataNode
 * addresses; LOOM_ENOTSUP for erasure-coded or encrypted files. */
int hdfs_check_located(const void *located_blocks, char *err, size_t errlen);
/* One LocatedBlockProto (addBlock's): usable DataNode addresses. */
int hdfs_check_block(const void *located, char *err, size_t errlen);
/* BlockOpResponseProto of a read from block offset offset: success
 * (else LOOM_EPEER) and usable checksum information, into *type, *bpc
 * and *chunk (the offset the stream starts at). */
int hdfs_check_read_reply(const void *block_op_response, uint64_t offset, int *type, uint32_t *bpc,
                          uint64_t *chunk, char *err, size_t errlen);
/* PipelineAckProto: every DataNode said SUCCESS (else LOOM_EIO), for
 * packet seqno, from a pipeline of nodes. */
int hdfs_check_ack(const void *pipeline_ack, int64_t seqno, size_t nodes, char *err, size_t errlen);
/* DataTransferEncryptorMessageProto, a DataNode's step of the SASL
 * handshake (hdfs_dtp.c): SUCCESS with a payload, which *payload and
 * *len then point into (else LOOM_EAUTH for the DataNode's refusal, its
 * message and whether it was the block token's; LOOM_EPROTO for no
 * payload). */
int hdfs_check_dt_sasl(const void *encryptor_message, const uint8_t **payload, size_t *len,
                       char *err, size_t errlen);

#endif
