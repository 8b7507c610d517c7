/* wire_auth.h: the one authentication handshake every loom service speaks
 * (the coordinator, the parameter server, the collectives' TCP transport).
 * Each service keeps its own framing; only the handshake is shared:
 *
 *   server -> client: challenge_pre | nonce_s[32]
 *   client -> server: answer_pre | HMAC(secret, label "-c" nonce_s ctx)
 *                                | nonce_c[32]
 *   server -> client: proof_pre  | HMAC(secret, label "-s" nonce_c ctx)
 *
 * The prefixes are the service's framing of each message (a frame header
 * for the coordinator, a magic for the others); every message has a fixed
 * length, so a server never holds more than WIRE_AUTH_MSG_MAX bytes of a
 * peer that has not authenticated, and rejects a byte that cannot begin the
 * answer as soon as it arrives. label is the service's domain: a MAC made
 * for one service is never accepted by another. The labels with "-c" and
 * "-s" appended are prefix-free across services (each differs from the
 * others within its first 6 bytes), and nonces are fixed-length, so the
 * MAC's input names its service unambiguously. ctx (may be empty) is what
 * both sides already agree on and bind into the MACs (the collectives
 * bind the ranks, world size and communicator).
 *
 * The server side is a state machine with no I/O: start it for the
 * challenge, feed it what arrives (from libuv's read callback or a poll
 * loop) until it says the peer authenticated or failed. The client side
 * has the same two pure steps and a blocking helper over a socket. */
#ifndef LOOM_WIRE_AUTH_H
#define LOOM_WIRE_AUTH_H

#include "wire/wire.h"

/* The longest prefix a service may put before a handshake message. */
#define WIRE_AUTH_PRE_MAX 16
/* The longest handshake message, and so the most bytes a server buffers
 * for a peer that has not authenticated. */
#define WIRE_AUTH_MSG_MAX (WIRE_AUTH_PRE_MAX + WIRE_MAC + WIRE_NONCE)
/* The most context bytes a handshake binds (more is LOOM_EINVAL). */
#define WIRE_AUTH_CTX_MAX 128

typedef struct {
  const char *name;  /* for messages: "coordinator", "ps", ... */
  const char *label; /* the MAC domain, at most 12 characters */
  const unsigned char *challenge_pre, *answer_pre, *proof_pre; /* never NULL ("" for none) */
  size_t challenge_pre_len, answer_pre_len, proof_pre_len;
} wire_auth_proto;

/* The coordinator's: CHALLENGE, AUTH and AUTH_OK frames (wire.h),
 * label "loom". */
extern const wire_auth_proto wire_auth_coord;
/* The parameter server's: "LOOMPS01" before the challenge and the
 * answer, nothing before the proof, label "loom-ps". */
extern const wire_auth_proto wire_auth_ps;
/* The collectives' TCP links: "LOOMCOM2" before the challenge and the
 * answer, nothing before the proof, label "loom-tcp"; ctx is the
 * connector's hello. */
extern const wire_auth_proto wire_auth_comm;

size_t wire_auth_challenge_len(const wire_auth_proto *p);
size_t wire_auth_answer_len(const wire_auth_proto *p);
size_t wire_auth_proof_len(const wire_auth_proto *p);

/* HMAC-SHA256(secret, label side nonce ctx), side "-c" or "-s"; label is
 * cut at 12 characters and ctx at WIRE_AUTH_CTX_MAX bytes. */
void wire_auth_mac(const char *secret, const char *label, const char *side,
                   const unsigned char nonce[WIRE_NONCE], const void *ctx, size_t ctx_len,
                   unsigned char out[WIRE_MAC]);

enum { WIRE_AUTH_FRESH, WIRE_AUTH_WAIT, WIRE_AUTH_DONE, WIRE_AUTH_FAILED };

/* One server-side handshake. The caller owns it; secret and ctx are
 * borrowed and must outlive it. */
typedef struct {
  const wire_auth_proto *p;
  const char *secret;
  const unsigned char *ctx;
  size_t ctx_len;
  int state;
  unsigned char nonce[WIRE_NONCE];
  unsigned char in[WIRE_AUTH_MSG_MAX]; /* the answer so far */
  size_t have;
  const char *why; /* after a failure: why, a clause for a log line ("its
                    * MAC is wrong (not this job's secret?)") */
} wire_auth_server;

/* Starts a handshake: draws the nonce and writes the challenge (at most
 * WIRE_AUTH_MSG_MAX bytes) to out, its length to *out_len, for the caller
 * to send. Returns 0 or LOOM_EIO (no randomness). */
int wire_auth_server_start(wire_auth_server *s, const wire_auth_proto *p, const char *secret,
                           const void *ctx, size_t ctx_len, unsigned char *out, size_t *out_len);

/* Feeds bytes that arrived after the challenge. Consumes at most what
 * completes the answer and says how much in *used (bytes past it belong to
 * the service's own protocol). Returns 0 when it needs more (all n used),
 * 1 when the peer proved it holds the secret (out: the proof to send, at
 * most WIRE_AUTH_MSG_MAX bytes), LOOM_EPROTO when the bytes are not an
 * answer, LOOM_EAUTH when the MAC is wrong (s->why says which, and a
 * failed handshake stays failed). */
int wire_auth_server_feed(wire_auth_server *s, const void *data, size_t n, size_t *used,
                          unsigned char *out, size_t *out_len);

/* Client side, pure: checks the challenge and writes the answer (at most
 * WIRE_AUTH_MSG_MAX bytes) and the nonce that the proof must cover.
 * LOOM_EPROTO when the challenge is not one, LOOM_EIO without randomness. */
int wire_auth_client_answer(const wire_auth_proto *p, const char *secret, const void *ctx,
                            size_t ctx_len, const unsigned char *challenge, size_t len,
                            unsigned char cnonce[WIRE_NONCE], unsigned char *out, size_t *out_len);
/* 0 when proof is the server's over cnonce, LOOM_EAUTH otherwise. */
int wire_auth_client_check(const wire_auth_proto *p, const char *secret, const void *ctx,
                           size_t ctx_len, const unsigned char cnonce[WIRE_NONCE],
                           const unsigned char *proof, size_t len);

/* Client side over a connected socket (blocking or not): reads the
 * challenge, answers, reads and checks the proof, reading exactly the
 * handshake's bytes and nothing past them; everything before the deadline
 * (loom__now_ms() clock). Returns 0; LOOM_ETIMEDOUT; LOOM_ECONN when the
 * connection failed before the challenge came; LOOM_EPROTO when the peer
 * does not speak p; LOOM_EAUTH when the server refused the answer (closed
 * the connection) or its proof is wrong. */
int wire_auth_client_fd(int fd, const wire_auth_proto *p, const char *secret, const void *ctx,
                        size_t ctx_len, uint64_t deadline_ms);

#endif
