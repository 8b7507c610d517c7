/* hdfs_int.h: what the parts of the HDFS client share: the NameNode
 * connection (struct hdfs), DataTransferProtocol's constants and framing,
 * and the functions one part calls in another. hdfs.c holds the URLs, the
 * NameNode's calls and the checks of what it says; hdfs_dtp.c the
 * DataTransferProtocol framing and checksums; hdfs_read.c the DataNode
 * read; hdfs_write.c the write pipeline. Not installed; only src/hadoop's
 * hdfs*.c include it. */
#ifndef LOOM_HADOOP_HDFS_INT_H
#define LOOM_HADOOP_HDFS_INT_H

#include "hadoop/hdfs.h"

#include "ClientNamenodeProtocol.pb-c.h"
#include "datatransfer.pb-c.h"
#include "hdfs.pb-c.h"
#include "core/core.h"
#include "hadoop/ipc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define NN_PROTOCOL "org.apache.hadoop.hdfs.protocol.ClientProtocol"
#define DT_VERSION 28
#define OP_WRITE_BLOCK 80
#define OP_READ_BLOCK 81
#define BPC 512        /* bytes a chunk, written */
#define PKT_CHUNKS 126 /* chunks a packet: 64512 bytes, Hadoop's */
#define PKT_DATA (BPC * PKT_CHUNKS)
#define MAX_INFLIGHT 80      /* unacknowledged packets, Hadoop's */
#define MAX_REPLY (1u << 20) /* a delimited DataNode reply */
#define MAX_HEADER 1024      /* a packet header */
#define NN_IDLE_MS 5000      /* reconnect before a call after this idle */
#define LEASE_RENEW_MS 20000

struct hdfs {
  struct hdfs *next;
  char host[256];
  int port;
  char peer[320];
  char user[256];
  char client[96]; /* the lease holder's name */
  pthread_mutex_t mu;
  hipc_client *ipc;
  uint64_t used_ms; /* the last call's end */
  /* the NameNode's defaults (getServerDefaults), 0 until asked */
  uint64_t def_blocksize;
  uint32_t def_replication;
  /* the client configuration's dfs.blocksize and dfs.replication, 0 when
   * not set: they win over the NameNode's, as in Hadoop's own client */
  uint64_t conf_blocksize;
  uint32_t conf_replication;
  /* security: Kerberos (hadoop.security.authentication=kerberos in the
   * configuration, or the NameNode refused SIMPLE), the configured
   * NameNode principal (dfs.namenode.kerberos.principal, "" if none) and
   * the levels hadoop.rpc.protection allows (HSASL_QOP_* bits, 0: all) */
  bool kerberos;
  char nn_principal[512];
  int qops;
  /* dfs.data.transfer.protection (HSASL_QOP_* bits; 0: not set, no SASL
   * handshake with DataNodes) */
  int dt_qops;
};

/* hdfs.c: the NameNode's calls */
int hdfs_nn_call(hdfs *fs, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp, bool idempotent,
                 char *err, size_t errlen);
int hdfs_server_defaults(hdfs *fs, char *err, size_t errlen);
void hdfs_renew_lease(hdfs *fs);

/* hdfs_dtp.c: DataTransferProtocol framing */
/* The header every operation carries: the block, its token, us. */
typedef struct {
  Hadoop__Hdfs__ClientOperationHeaderProto coh;
  Hadoop__Hdfs__BaseHeaderProto base;
} op_header;

int hdfs_put_op(loom__buf *b, uint8_t op, const ProtobufCMessage *msg);
int hdfs_recv_delimited(int fd, const char *peer, const ProtobufCMessageDescriptor *desc,
                        ProtobufCMessage **out, const char *what, char *err, size_t errlen);
const char *hdfs_status_name(int s);
void hdfs_op_header_init(op_header *h, Hadoop__Hdfs__ExtendedBlockProto *b,
                         Hadoop__Common__TokenProto *tok, const char *client);

/* DataTransferProtocol's SASL handshake on a new DataNode connection fd
 * (xferport: the DataNode's data port), with the block's access token, as
 * Hadoop's SaslDataTransferClient does: only when the configuration sets
 * dfs.data.transfer.protection and the port is not privileged (< 1024);
 * DIGEST-MD5 for "hdfs/0" with the token, at authentication. 0 (nothing
 * to do, or done), or an error that names the DataNode. */
int hdfs_dt_sasl(hdfs *fs, int fd, const char *peer, uint32_t xferport,
                 const Hadoop__Common__TokenProto *tok, char *err, size_t errlen);

/* hdfs_read.c */
void hdfs_dn_name(const Hadoop__Hdfs__DatanodeInfoProto *d, char *out, size_t len);

#endif
