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
#include "hadoop/creds.h"
#include "hadoop/ipc.h"
#include "hadoop/sasl.h"

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
  /* dfs.encrypt.data.transfer.cipher.suites ("" when not set): with
   * AES/CTR/NoPadding, a handshake at privacy asks for AES */
  char dt_suites[64];
  /* getServerDefaults' encryptDataTransfer (dfs.encrypt.data.transfer on
   * the cluster): every DataNode connection's SASL is then with the
   * NameNode's data encryption key, at privacy */
  bool encrypt_dt;
  /* that key as the handshake uses it (user "keyId blockPoolId
   * base64(nonce)", password base64(key)), its cipher, and when it
   * expires (wall-clock ms; 0: none yet); under dek_mu */
  pthread_mutex_t dek_mu;
  char dek_user[600];
  char dek_pass[200];
  char dek_alg[32];
  uint64_t dek_expiry_ms;
  /* an HDFS delegation token for this NameNode from the credentials file
   * $HADOOP_TOKEN_FILE_LOCATION names (as Java's UserGroupInformation
   * reads it): the NameNode connection then authenticates with it
   * (TOKEN, DIGEST-MD5) before Kerberos. dt_from: the file. */
  bool have_dt;
  hyarn_cred_token dt;
  char dt_from[512];
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

/* A DataNode connection: the socket (non-blocking, as hipc_dial gives it)
 * and, where DataTransferProtocol's SASL settled on integrity or privacy,
 * the security layer every byte after the handshake goes through, each
 * way: [4-byte length][SASL-wrapped bytes], as Hadoop's SaslOutputStream
 * and SaslInputStream frame them. Without a layer the bytes go as they
 * are. */
typedef struct {
  int fd;
  hsasl_layer *sl; /* NULL: none (no SASL, or at authentication) */
  size_t send_max; /* the most bytes one wrapped message carries */
  uint8_t *raw;    /* received bytes not yet a whole wrapped message */
  size_t raw_len, raw_cap;
  uint8_t *plain; /* unwrapped bytes not yet taken */
  size_t plain_off, plain_len, plain_cap;
  /* AES/CTR streams (EVP_CIPHER_CTX) where the handshake negotiated the
   * cipher option: then no SASL layer; NULL otherwise */
  void *aes_out, *aes_in;
} hdfs_dn;

/* The largest wrapped message a DataNode may send (its SaslOutputStream
 * wraps each write whole: a packet, 64 KiB and its checksums, at most). */
#define HDFS_DN_MAX_WRAPPED (16u << 20)

/* c on fd, no layer yet. */
void hdfs_dn_init(hdfs_dn *c, int fd);
/* Closes the socket and frees the layer and buffers; c is as after
 * hdfs_dn_init(c, -1). */
void hdfs_dn_close(hdfs_dn *c);
/* hipc_send_fd and hipc_recv_fd through c's layer. */
int hdfs_dn_send(hdfs_dn *c, const char *peer, const void *buf, size_t n, uint64_t deadline,
                 const char *what, char *err, size_t errlen);
int hdfs_dn_recv(hdfs_dn *c, const char *peer, void *buf, size_t n, uint64_t deadline,
                 int timeout_ms, const char *what, char *err, size_t errlen);
/* What can be had without waiting, at most cap bytes: 0 with *got bytes
 * (0: nothing yet), LOOM_ECONN (err "closed": the DataNode closed the
 * connection), or another error with err saying what. */
int hdfs_dn_recv_now(hdfs_dn *c, const char *peer, void *buf, size_t cap, size_t *got, char *err,
                     size_t errlen);
/* Sets c up from the cipher option a DataNode answered (a
 * Hadoop__Hdfs__CipherOptionProto): its keys unwrapped through c's SASL
 * layer (inKey, then outKey), checked (AES/CTR/NoPadding, keys of 16, 24
 * or 32 bytes, IVs of 16), c's writes then encrypted with inKey/inIv and
 * its reads decrypted with outKey/outIv, the SASL layer dropped. 0, or an
 * error with err saying what (c unchanged but for the layer's sequence
 * numbers). */
int hdfs_dn_cipher(hdfs_dn *c, const void *cipher_option, char *err, size_t errlen);

/* Takes n received bytes into c's wrapped messages and unwraps each whole
 * one (the part of hdfs_dn_recv* a fuzzer drives): 0, or an error with err
 * saying what (a length over HDFS_DN_MAX_WRAPPED, a message the layer
 * refuses). */
int hdfs_dn_take(hdfs_dn *c, const uint8_t *p, size_t n, char *err, size_t errlen);

int hdfs_recv_delimited(hdfs_dn *c, const char *peer, const ProtobufCMessageDescriptor *desc,
                        ProtobufCMessage **out, const char *what, char *err, size_t errlen);
const char *hdfs_status_name(int s);
void hdfs_op_header_init(op_header *h, Hadoop__Hdfs__ExtendedBlockProto *b,
                         Hadoop__Common__TokenProto *tok, const char *client);

/* DataTransferProtocol's SASL handshake on a new DataNode connection c
 * (xferport: the DataNode's data port), with the block's access token, as
 * Hadoop's SaslDataTransferClient does: only when the configuration sets
 * dfs.data.transfer.protection and the port is not privileged (< 1024);
 * DIGEST-MD5 for "hdfs/0" with the token, at the strongest qop both
 * allow; at integrity or privacy c gets the layer. 0 (nothing to do, or
 * done), or an error that names the DataNode. */
int hdfs_dt_sasl(hdfs *fs, hdfs_dn *c, const char *peer, uint32_t xferport,
                 const Hadoop__Common__TokenProto *tok, char *err, size_t errlen);

/* hdfs_read.c */
void hdfs_dn_name(const Hadoop__Hdfs__DatanodeInfoProto *d, char *out, size_t len);

#endif
