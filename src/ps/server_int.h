/* server_int.h: what the two parts of a ps shard share: a connection, the
 * server, and the functions one part calls in the other. server.c is the
 * connections, the poll loop and `loom ps`'s main; handlers.c is what the
 * shard does with each request (replies, steps and clocks, one handler per
 * op). Not installed; nothing outside src/ps includes it. */
#ifndef LOOM_PS_SERVER_INT_H
#define LOOM_PS_SERVER_INT_H

#include "ps/server.h"
#include "ps/ps.h"
#include "core/fifo.h"
#include "core/ratelog.h"
#include "wire/wire_auth.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IN_MIN (64u << 10)
#define OUT_HIGH (256u << 10)
#define SHRINK_AT (1u << 20)

enum { DONE = 0, PARK = 1, GO = 2, CLOSE = -1 };

typedef struct conn {
  int fd;
  bool authed, configured, closing;
  bool parked, admitted; /* the head request waits / had its side effects */
  int rank;
  wire_auth_server auth; /* the handshake, until authed */
  uint64_t deadline_ms;  /* authenticate by then */
  char peer[64];
  unsigned char *in; /* unread bytes: [in_off, in_len) */
  size_t in_off, in_len, in_cap;
  unsigned char *out; /* unsent bytes: [out_off, out_len) */
  size_t out_off, out_len, out_cap;
  uint64_t bar_target; /* the barrier generation it waits for, or 0 */
  bool tls;            /* inside TLS (wire_tls.h): the link leaves the host */
  bool tls_hs;         /* its TLS handshake is not done: nothing else moves */
  bool tls_ww;         /* the handshake waits to write */
  bool tls_held;       /* TLS holds bytes the socket does not show */
  struct conn *next;
  loom__fifo_link pa; /* in the pre-authentication queue */
} conn;

struct ps_server {
  ps_server_cfg cfg;
  char secret[256];
  struct ps_tunables tun;
  int auth_ms;
  ps_state st;
  ps_pool *pool; /* LOOM_PS_THREADS - 1 helpers; NULL: one thread */
  bool configured;
  int mode, staleness, workers;
  uint64_t step;   /* SYNC: steps applied; else the last restored step */
  uint64_t *clock; /* [workers]: steps each worker has ended */
  uint64_t bar_gen, bar_arrived;
  bool restored;
  int restore_rc;
  uint64_t restore_step;
  char restore_err[PS_MAX_ERRMSG];
  conn *conns;
  size_t nconns;
  loom__fifo pa; /* connections not authenticated yet, oldest first */
  size_t nauthed, pa_max;
  uint64_t accept_paused_until; /* out of descriptors: wait a little */
  loom__ratelog refused;
  bool changed; /* the step, a clock or the barrier moved */
  char err[PS_MAX_ERRMSG];
};

/* ---- server.c ------------------------------------------------------------ */

/* Closes c once this turn of the loop is over. A connection that never
 * authenticated is anyone's: its warning goes through the rate limiter. */
void ps_conn_close(ps_server *s, conn *c, const char *why);

/* ---- handlers.c ---------------------------------------------------------- */

/* The bytes queued on c and not sent yet. */
size_t ps_out_pending(const conn *c);
/* Makes room for n more bytes at the end of c's output buffer: 0 or
 * LOOM_ENOMEM. */
int ps_out_room(conn *c, size_t n);
/* Writes what c has queued as far as the socket takes it. */
void ps_conn_flush(conn *c);
/* Serves the request h (payload p) that heads c: DONE (a reply is
 * queued), PARK (it waits; nothing behind it is served) or CLOSE. */
int ps_dispatch(ps_server *s, conn *c, const ps_hdr *h, const unsigned char *p);

#endif
