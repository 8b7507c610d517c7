/* ipc.h: Hadoop IPC (the RPC of the ResourceManager, NodeManagers and
 * NameNode), as a client. Two layers:
 *
 * - framing, with no I/O: the connection preamble, a call's frame and a
 *   reply's decoding, so that a blocking client (below) and an event-loop
 *   one (the application master's, to come) share them, and a fuzzer can
 *   drive the decoder. Messages are protobuf-c's, generated at build time
 *   from the .proto files in src/hadoop/proto/.
 * - a blocking client: one connection, one call at a time, every wait
 *   bounded, every error naming the peer, the call and what was waited
 *   for.
 *
 * On the wire (Hadoop's ipc.Client and ipc.Server, protocol version 9):
 * the client sends "hrpc", the version, the service class and the auth
 * protocol (0: none, SIMPLE authentication), then frames of a 4-byte
 * big-endian length and varint-delimited messages: first the connection
 * context (RpcRequestHeaderProto with call id -3, IpcConnectionContextProto
 * naming the user and the protocol), then each call (RpcRequestHeaderProto,
 * RequestHeaderProto naming the method, the request). A reply frame is an
 * RpcResponseHeaderProto, then on success the response message.
 *
 * SASL (auth protocol 0xDF, RpcSaslProto frames with call id -33, TOKEN /
 * DIGEST-MD5, sasl.h, or KERBEROS / GSSAPI, gss.h) goes between the preamble and the connection
 * context: the ApplicationMasterProtocol (the AMRMToken) and every
 * NodeManager (NMTokens) require it even on a cluster with SIMPLE
 * authentication (hipc_connect_token). ApplicationClientProtocol does
 * not (hipc_connect). When the negotiated qop is above auth
 * (hadoop.rpc.protection integrity or privacy), the request stream from
 * the connection context on (each frame with its 4-byte length) is
 * wrapped, at most the server's maxbuf at a time, and sent as frames of
 * the SASL call id holding an RpcSaslProto in state WRAP; the replies
 * come the same way and are unwrapped into a stream of frames (Hadoop's
 * SaslRpcClient WrappedOutputStream / WrappedInputStream). Under Kerberos
 * the same framing carries GSS-API wrap tokens (gss_wrap, with
 * confidentiality under privacy). */
#ifndef LOOM_HADOOP_IPC_H
#define LOOM_HADOOP_IPC_H

#include "core/core.h"
#include "hadoop/sasl.h"
#include <protobuf-c/protobuf-c.h>

#define HIPC_VERSION 9
/* The largest reply frame accepted (Hadoop's ipc.maximum.response.length
 * is 128 MiB; a cluster's node list is far below this). */
#define HIPC_MAX_FRAME (64u << 20)
/* Hadoop's call ids that are not calls. */
#define HIPC_CALL_CONTEXT (-3)
#define HIPC_CALL_PING (-4)
#define HIPC_CALL_SASL (-33)

/* ---- framing ----------------------------------------------------------- */

/* Appends the preamble and the connection context frame for protocol
 * (the Java interface name, "org.apache.hadoop.yarn.api.ApplicationClientProtocolPB")
 * as user to out. client_id is the connection's 16 random bytes. */
int hipc_encode_preamble(loom__buf *out, const char *protocol, const char *user,
                         const uint8_t client_id[16]);
/* Appends a SASL frame (call id -33) carrying sasl, an RpcSaslProto. */
int hipc_encode_sasl(loom__buf *out, const uint8_t client_id[16], const ProtobufCMessage *sasl);
/* Appends one call's frame: method of protocol with request req. */
int hipc_encode_call(loom__buf *out, int32_t call_id, const uint8_t client_id[16],
                     const char *protocol, const char *method, const ProtobufCMessage *req);

/* A decoded reply frame. The caller owns header and body
 * (hipc_response_free). */
typedef struct {
  ProtobufCMessage *header; /* Hadoop__Common__RpcResponseHeaderProto */
  uint32_t call_id;
  int status; /* 0 success, 1 error, 2 fatal: the call failed and the connection is done */
  /* on error: the remote exception's class and first line of its message,
   * printable characters only; "" when the server sent none */
  char exception[256];
  char message[512];
  ProtobufCMessage *body; /* on success: the response (of body_desc), else NULL */
} hipc_response;

/* The length a reply frame announces in its first 4 bytes, checked
 * against HIPC_MAX_FRAME. Returns 0, or LOOM_EPROTO with err saying what
 * the bytes look like (another protocol on that port). */
int hipc_frame_length(const uint8_t hdr[4], uint32_t *len, char *err, size_t errlen);
/* Decodes a reply frame's len bytes (after its length): the header and,
 * when it says success, a body of body_desc. Every length in it is
 * checked against what is there. Returns 0 with *out filled (also for a
 * remote error: see status), or LOOM_EPROTO (err says what is malformed)
 * or LOOM_ENOMEM. */
int hipc_decode_response(const uint8_t *frame, size_t len,
                         const ProtobufCMessageDescriptor *body_desc, hipc_response *out, char *err,
                         size_t errlen);
void hipc_response_free(hipc_response *r);

/* The varints between messages: core/bytes.h (loom__varint_put,
 * loom__varint_get32). */

/* ---- the blocking client --------------------------------------------- */

typedef struct hipc_client hipc_client;

/* Connects to host:port and sends the preamble and connection context for
 * protocol as user. peer names the server in messages ("the
 * ResourceManager at 127.0.0.1:8032"). Waits at most timeout_ms. Returns 0
 * with *out made, or LOOM_ECONN / LOOM_ETIMEDOUT with err saying what
 * failed (refused, no answer, unknown host). */
int hipc_connect(const char *host, int port, const char *peer, const char *protocol,
                 const char *user, int timeout_ms, hipc_client **out, char *err, size_t errlen);
/* As hipc_connect, authenticating with tok (TOKEN / DIGEST-MD5) before the
 * connection context; the server must prove it knows the token too.
 * Returns as hipc_connect, or LOOM_EAUTH when the server refused the
 * token (expired, unknown: err says which) or failed its own proof. */
int hipc_connect_token(const char *host, int port, const char *peer, const char *protocol,
                       const char *user, const hsasl_token *tok, int timeout_ms, hipc_client **out,
                       char *err, size_t errlen);
/* How a connection authenticates (SASL, auth protocol 0xDF), or NULL for
 * SIMPLE: with token when the server offers TOKEN/DIGEST-MD5 (it does
 * first, when it has a secret manager), else with Kerberos
 * (KERBEROS/GSSAPI, gss.h: the user's ticket cache) when kerberos is set.
 * principal: the configured server principal (dfs.namenode.kerberos.principal,
 * "_HOST" standing for host), or NULL: the server's own word is taken.
 * qops: the HSASL_QOP_* levels hadoop.rpc.protection allows, 0 for all. */
typedef struct {
  const hsasl_token *token;
  bool kerberos;
  const char *principal;
  const char *host;
  int qops;
  /* after the token, the connection context names no user (as Java's
   * client: the server takes the token's owner; a NameNode refuses a user
   * that is not it), instead of user */
  bool token_no_user;
} hipc_auth;
/* As hipc_connect_token with a's credentials. After Kerberos the
 * connection context names no user (the server takes the authenticated
 * principal); LOOM_EAUTH with err saying so when there is no ticket
 * ("Kerberos: no valid ticket in the credentials cache ...: run kinit"),
 * the server refused the ticket, or proved nothing. */
int hipc_connect_auth(const char *host, int port, const char *peer, const char *protocol,
                      const char *user, const hipc_auth *a, int timeout_ms, hipc_client **out,
                      char *err, size_t errlen);
/* Calls method with req and waits at most timeout_ms for its reply, a
 * message of resp_desc that *resp then holds (the caller frees it with
 * protobuf_c_message_free_unpacked). Returns 0, or:
 * LOOM_EPEER: the server answered with an exception: err names the call,
 * the exception class and message (hipc_exception() gives the class);
 * LOOM_ETIMEDOUT, LOOM_ECONN: no answer in time, connection lost;
 * LOOM_EPROTO: the reply is malformed. After anything but 0 or a
 * non-fatal LOOM_EPEER the connection is closed and further calls fail. */
int hipc_call(hipc_client *c, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, int timeout_ms,
              char *err, size_t errlen);
/* The class of the exception of the last call that failed with
 * LOOM_EPEER ("org.apache.hadoop.ipc.StandbyException"), or "". */
const char *hipc_exception(const hipc_client *c);
void hipc_close(hipc_client *c);

/* ---- sockets, for the other protocols of a Hadoop cluster (HDFS's data
 * transfer) ---------------------------------------------------------- */

/* A non-blocking TCP connection to host:port within timeout_ms (TCP_NODELAY
 * set) into *fd. LOOM_ECONN / LOOM_ETIMEDOUT with err naming peer. */
int hipc_dial(const char *host, int port, const char *peer, int timeout_ms, int *fd, char *err,
              size_t errlen);
/* Sends / receives exactly n bytes on the non-blocking fd by the deadline
 * (loom__now_ms()). LOOM_ECONN (closed, reset), LOOM_ETIMEDOUT; err names
 * peer and what (timeout_ms only for the message). */
int hipc_send_fd(int fd, const char *peer, const void *buf, size_t n, uint64_t deadline,
                 const char *what, char *err, size_t errlen);
int hipc_recv_fd(int fd, const char *peer, void *buf, size_t n, uint64_t deadline, int timeout_ms,
                 const char *what, char *err, size_t errlen);

#endif
