/* wire.h: how loom's processes talk to the coordinator. The messages'
 * fields are typed in wire_msg.h (one struct and codec each); the
 * handshake is wire_auth.h's. A frame is
 *
 *   u32 len | u16 type | u16 flags | u32 jlen | json[jlen] | blob[len-8-jlen]
 *
 * (big-endian; len counts what follows it). json is a JSON object (may be
 * empty, jlen 0), blob raw bytes. Every frame is bounds-checked against a
 * cap before anything is allocated. Before anything else, a connection
 * authenticates with the handshake of wire_auth.h (wire_auth_coord): the
 * server sends CHALLENGE (blob: 32-byte nonce), the client answers AUTH
 * (blob: HMAC-SHA256(secret, "loom-c" nonce) | its own 32-byte nonce), the
 * server answers AUTH_OK (blob: HMAC-SHA256(secret, "loom-s" client
 * nonce)), so each side proves it holds the job secret. Each of them is a
 * frame with no JSON, of exactly that length. */
#ifndef LOOM_WIRE_H
#define LOOM_WIRE_H

#include "core/core.h"
#include <jansson.h>

/* The agent <-> coordinator protocol's version: raised with every change
 * that an older peer would misread. An agent says it in REGISTER and the
 * coordinator in ASSIGN (with loom's version, LOOM__VERSION); each refuses
 * a peer of another, naming both (a node running another loom than the
 * client's). */
#define WIRE_PROTOCOL 2

#define WIRE_HDR 12
#define WIRE_NONCE 32
#define WIRE_MAC 32

typedef enum {
  WIRE_CHALLENGE = 1,
  WIRE_AUTH,
  WIRE_AUTH_OK,
  /* agent <-> coordinator */
  WIRE_REGISTER = 10, /* agent: {task, attempt, host, port, pid, inflate?} */
  WIRE_ASSIGN,        /* coord: the task's spec {argv|shell, procs, env, ...} */
  WIRE_READY,         /* agent: working dir and command checked */
  WIRE_CLUSTER,       /* coord: {rank_base, world_size, ..., blob_encoding?, blob_size?}
                         blob: cluster, zlib-deflated to blob_size bytes when
                         blob_encoding is "deflate" (to agents that said inflate) */
  WIRE_STARTED,       /* agent: {pids} */
  WIRE_LOG,           /* agent: {s: 1|2, p: proc} blob: lines, '\n' ended */
  WIRE_EXIT,          /* agent: {code, signal, reason} */
  WIRE_STOP,          /* coord: {grace_ms, ending?} stop the task's processes */
  WIRE_HEARTBEAT,     /* both ways */
  WIRE_FAIL,          /* agent: {reason, code} before the command started */
  /* libloom <-> coordinator */
  WIRE_HELLO = 30, /* lib: {task, rank, pid} */
  WIRE_KV_SET,     /* {id, key} blob: value */
  WIRE_KV_GET,     /* {id, key, timeout_ms} */
  WIRE_KV_ADD,     /* {id, key, delta} */
  WIRE_EVENT,      /* {id, name, detail} */
  WIRE_REPLY,      /* {id, rc, value?, msg?} blob: value for KV_GET */
  WIRE_ABORT,      /* coord: {reason}: the attempt is over */
  WIRE_METRIC,     /* lib: {id, tag, step, value} */
  WIRE_MEMBERSHIP, /* coord: {generation}: a new elastic membership */
  /* libloom <-> coordinator: the data feed (src/feed/); each a request
   * with an id answered by WIRE_REPLY */
  WIRE_FEED_FIRST = 40,
  WIRE_FEED_LAST = 49,
  /* loom CLI <-> coordinator */
  WIRE_CTL_KILL = 50, /* {} */
  WIRE_TYPE_MAX = 64
} wire_type;

typedef struct {
  uint16_t type;
  uint16_t flags;
  json_t *json;        /* owned by the frame; an empty object when jlen was 0 */
  unsigned char *blob; /* points into the frame's storage */
  size_t blob_len;
  unsigned char *raw; /* the storage */
} wire_frame;

void wire_frame_free(wire_frame *f);

/* Encodes one frame into a malloc'ed buffer the caller owns. */
int wire_encode(uint16_t type, const json_t *json, const void *blob, size_t blob_len,
                unsigned char **out, size_t *out_len);

/* The most bytes one read from a socket hands to a reader. */
#define WIRE_READ_CHUNK 65536
/* The largest frame a connection may send before it has authenticated:
 * CHALLENGE, AUTH and AUTH_OK fit in it. */
#define WIRE_HANDSHAKE_MAX (WIRE_HDR + WIRE_MAC + WIRE_NONCE)

/* An incremental reader: push the bytes as they arrive, pop whole frames.
 * A length over max (or under the header) or JSON that is not an object
 * is LOOM_EPROTO: the caller closes the connection. A caller pops every
 * whole frame after each push of at most WIRE_READ_CHUNK bytes, so the
 * reader never holds more than one partial frame and one chunk: its
 * buffer's cap is max_frame + 4 + WIRE_READ_CHUNK, and it follows
 * max_frame (wire_reader_limit) as the connection changes state. */
typedef struct {
  loom__buf in;
  size_t max_frame;
} wire_reader;
void wire_reader_init(wire_reader *r, size_t max_frame);
/* Sets the largest frame the reader accepts from now on, and its buffer's
 * cap with it (a connection that authenticated is allowed more than one
 * that has not). Bytes already held are kept. */
void wire_reader_limit(wire_reader *r, size_t max_frame);
int wire_reader_push(wire_reader *r, const void *data, size_t n);
/* 1 and a frame, 0 when more bytes are needed, <0 on a bad frame. */
int wire_reader_pop(wire_reader *r, wire_frame *f);
void wire_reader_free(wire_reader *r);

/* Authentication pieces (the handshake itself is wire_auth.h's). */
int wire_random(void *buf, size_t n);
void wire_mac(const char *secret, const char *label, const unsigned char *nonce,
              unsigned char out[WIRE_MAC]);
bool wire_mac_equal(const unsigned char *a, const unsigned char *b);

/* Blocking helpers for clients (libloom, CLI). fd is a connected socket. */
int wire_dial(const char *hostport, int timeout_ms, int *fd);
int wire_send(int fd, uint16_t type, const json_t *json, const void *blob, size_t blob_len);
/* Writes bytes already encoded (wire_encode, wire_msg_encode) in full. */
int wire_send_raw(int fd, const void *buf, size_t len);
/* Reads one frame, waiting at most timeout_ms (-1: forever). */
int wire_recv(int fd, wire_reader *r, wire_frame *f, int timeout_ms);
/* Client side of the handshake (wire_auth_coord) on a fresh connection,
 * inside TLS where the connection leaves the host (wire_tls.h; the
 * descriptor then has a session, and wire_send / wire_recv go through it):
 * reads exactly the handshake's bytes, so r (which must be empty) receives
 * nothing of it and is the connection's reader afterwards. timeout_ms -1
 * waits forever. LOOM_EAUTH when the server refused this secret or could
 * not prove it holds it; why (may be NULL) says what failed, TLS's reason
 * included. Close the descriptor with wire_io_close. */
int wire_client_auth(int fd, wire_reader *r, const char *secret, int timeout_ms, char *why,
                     size_t whylen);
/* Splits "host:port". */
int wire_split_hostport(const char *hp, char *host, size_t hostlen, int *port);

#endif
