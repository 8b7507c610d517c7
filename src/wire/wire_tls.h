/* wire_tls.h: TLS 1.3 on loom's TCP links, keyed by the job secret.
 *
 * Every loom link (client and agent to coordinator, libloom's feed and KV,
 * the parameter server, the collectives' TCP transport) may run inside TLS
 * 1.3 with an external pre-shared key: no certificates. The key of a
 * service is HMAC-SHA256(secret, "loom-tls-psk " label), its identity
 * "loom-tls/" label (label: the service's wire_auth label), so a key made
 * for one service opens no other. The only suite is TLS_AES_128_GCM_SHA256,
 * the key exchange psk_dhe_ke (ephemeral X25519 or P-256 on top of the
 * PSK: forward secrecy), no 0-RTT data, no session tickets. A peer without
 * the secret fails the handshake (its binder is wrong), and a recorded
 * connection cannot be replayed (each handshake has fresh randoms and key
 * shares). The services' own HMAC handshake (wire_auth.h) still runs inside
 * TLS, unchanged: TLS protects the bytes, the handshake binds what each
 * service binds (the collectives' ranks).
 *
 * Which links: LOOM_TLS (auto|on|off). auto encrypts a connection unless
 * both of its ends are loopback addresses (or it is a Unix socket): a link
 * that stays on the host may stay plain. Both ends decide from the same
 * pair of addresses, so they agree; on and off must be set alike on every
 * process of a job (a plain client of a TLS server fails its handshake
 * with a message that says so).
 *
 * Two ways to use a session:
 * - on a descriptor (wire_io_*): for blocking and poll-loop code (libloom,
 *   the CLI, the parameter server, the collectives). The session is
 *   attached to the descriptor, and wire_io_send / wire_io_recv behave as
 *   send / recv (flags MSG_DONTWAIT, errno EAGAIN) whether or not it has
 *   one; a caller that polls checks wire_io_pending() first, since TLS may
 *   hold decrypted bytes the socket no longer shows. One thread at a time
 *   sends and one receives on a descriptor (a session has a lock).
 * - in memory (wire_tls_mem_*): for libuv code (the coordinator, the
 *   agent): ciphertext in, plaintext out, and back. */
#ifndef LOOM_WIRE_TLS_H
#define LOOM_WIRE_TLS_H

#include "core/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Whether the connection on fd is to be encrypted under LOOM_TLS. */
bool wire_tls_wanted(int fd);
/* The same from its two addresses (struct sockaddr *, NULL when unknown). */
bool wire_tls_wanted_addrs(const void *local, const void *peer);
/* "on", "off" or "auto". */
const char *wire_tls_policy(void);

/* ---- on a descriptor ---- */

/* Attaches a session to fd (client or server side) keyed by secret and
 * label; the handshake runs on the first wire_io_handshake() (or the first
 * send or receive). The descriptor is made non-blocking; the send and
 * receive calls keep the blocking behaviour the caller asks for.
 * LOOM_ENOMEM, LOOM_EIO (TLS cannot start), LOOM_EINVAL (fd out of
 * range). A session still attached to the number is dropped as stale. */
int wire_io_attach(int fd, bool server, const char *secret, const char *label);
/* Whether fd has a session. */
bool wire_io_secure(int fd);
/* One step of the handshake, never blocking: 1 done, 0 when it needs the
 * descriptor readable (*want_write false) or writable (true), LOOM_EAUTH
 * (the peer has another key), LOOM_EPROTO (the peer does not speak TLS),
 * LOOM_ECONN (closed). why (may be NULL) gets a clause for the log. */
int wire_io_handshake(int fd, bool *want_write, char *why, size_t whylen);
/* Runs the handshake to its end before deadline_ms (loom__now_ms clock):
 * 0, LOOM_ETIMEDOUT, or wire_io_handshake's errors. */
int wire_io_handshake_wait(int fd, uint64_t deadline_ms, char *why, size_t whylen);
/* Client side in one call: when wire_tls_wanted(fd), attaches a session
 * and completes the handshake before the deadline; else does nothing.
 * Returns 0 or wire_io_handshake_wait's errors, with why filled in. */
int wire_io_client(int fd, const char *secret, const char *label, uint64_t deadline_ms, char *why,
                   size_t whylen);
/* send(2) and recv(2) through the session when fd has one (flags: only
 * MSG_DONTWAIT and MSG_NOSIGNAL count). recv returns 0 at the peer's end
 * of stream, -1 with errno ECONNRESET when TLS fails. */
ssize_t wire_io_send(int fd, const void *buf, size_t n, int flags);
ssize_t wire_io_recv(int fd, void *buf, size_t n, int flags);
/* sendmsg(2) of n pieces, through the session when fd has one. */
struct iovec;
ssize_t wire_io_sendv(int fd, const struct iovec *iov, int n, int flags);
/* Whether a receive would get bytes that the session holds already (a
 * poll on the socket would not show them): check it before polling. */
bool wire_io_pending(int fd);
/* Frees fd's session (nothing when it has none); call before close. */
void wire_io_detach(int fd);
/* wire_io_detach, then close(2). */
int wire_io_close(int fd);

/* ---- in memory ---- */

typedef struct wire_tls wire_tls;
/* Takes fd's session off the descriptor as a memory session (for a
 * connection that libuv takes over after a blocking start, as the agent's):
 * what it had read ahead stays in it, to be read with wire_tls_mem_read
 * before waiting for more. NULL when fd has none; *err LOOM_ENOMEM when it
 * had one that could not be moved (the session is then gone). */
wire_tls *wire_io_take(int fd, int *err);
wire_tls *wire_tls_mem_new(bool server, const char *secret, const char *label);
/* A server-side memory session of ssl_ctx, an SSL_CTX * the caller made
 * and keeps (the dashboard's, with a certificate: no PSK). */
wire_tls *wire_tls_mem_new_ctx(void *ssl_ctx);
void wire_tls_mem_free(wire_tls *t);
/* Ciphertext that arrived. LOOM_ENOMEM. */
int wire_tls_mem_feed(wire_tls *t, const void *data, size_t n);
/* Plaintext out, running the handshake while it is not done: *got 0 when
 * there is nothing more yet. 0; LOOM_ECONN (the peer closed TLS);
 * LOOM_EAUTH or LOOM_EPROTO as wire_io_handshake, with wire_tls_mem_why(). */
int wire_tls_mem_read(wire_tls *t, void *buf, size_t cap, size_t *got);
/* Plaintext to send (queued until the handshake is done). LOOM_ENOMEM,
 * LOOM_ECONN after a failure. */
int wire_tls_mem_write(wire_tls *t, const void *data, size_t n);
/* The ciphertext to send now, malloc'ed (*buf NULL and *len 0 when none). */
int wire_tls_mem_take(wire_tls *t, unsigned char **buf, size_t *len);
/* Ends the session: queues a close_notify alert (for wire_tls_mem_take)
 * once the handshake is done, so that the peer tells the end of the
 * stream from a cut. Nothing is sent or read through it after. 0, or
 * LOOM_ECONN after a failure. */
int wire_tls_mem_close(wire_tls *t);
bool wire_tls_mem_done(const wire_tls *t);
const char *wire_tls_mem_why(const wire_tls *t);

#endif
