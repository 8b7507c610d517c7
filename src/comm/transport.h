/* transport.h: how the collectives move bytes to one peer.
 *
 * A transport (shared memory, TCP) is a table of operations filled with
 * designated initializers (nng's transport.h, gloo's Pair). setup() makes a
 * link ("pair") to each peer it is given; the algorithms then only call
 * comm__pipeline() (engine.c), which drives the pairs through send()/recv()
 * and blocks in the engine's one wait loop. A transport that links every
 * rank may also offer native collectives (the last members), which the
 * communicator then uses instead (comm.h: c->native).
 *
 * A pair carries one ordered byte stream in each direction. Every message
 * is sent and received with the same length on both sides, in the same
 * order; a transport frames nothing. send() and recv() never block: each
 * moves what it can now and advances *done; the engine waits (want() says
 * on what) and calls again. A pair belongs to its communicator, which is
 * used by one thread at a time, so transports take no locks. */
#ifndef LOOM_COMM_TRANSPORT_H
#define LOOM_COMM_TRANSPORT_H

#include "loom.h"
#include "loom/comm.h"

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

typedef struct comm comm_t;
typedef struct comm_pair comm_pair;

/* Where received bytes go. With direct set they are copied to direct +
 * offset (a transport may receive straight into it); otherwise fn is called
 * with each contiguous piece, which is only valid during the call. A piece
 * starts at an offset that is a multiple of 8 and is itself a multiple of 8
 * bytes long unless it ends the message, so fn can reduce whole elements. */
struct comm_sink {
  void *direct;
  void (*fn)(void *arg, const void *piece, size_t off, size_t n);
  void *arg;
};

/* What the engine should wait on when a pair cannot move: poll fds (TCP)
 * and/or this rank's shared-memory doorbell. */
#define COMM_WAIT_MAX_FDS 64
struct comm_waitset {
  struct pollfd fds[COMM_WAIT_MAX_FDS];
  int nfds;
  int bell;     /* nonzero: wait on the shm doorbell */
  int peers[4]; /* the ranks waited on, for liveness checks */
  int npeers;
};

struct comm_transport {
  const char *name;
  /* Makes c->pairs[peers[i]] for each of the n peers (never c->rank),
   * exchanging what it needs through c->store under c->prefix. Blocks up to
   * the communicator's timeout. On failure returns an error with c's
   * message set; teardown() still runs. */
  int (*setup)(comm_t *c, const int *peers, int n);
  /* Releases everything setup() made; safe after a failed setup. */
  void (*teardown)(comm_t *c);
  /* Sends bytes [*done, upto) of the len-byte message buf (upto <= len;
   * the rest is not ready yet). Does not block; advances *done. The caller
   * keeps buf valid and unchanged until *done == len. */
  int (*send)(comm_pair *p, const void *buf, size_t len, size_t upto, size_t *done);
  /* Receives more of a len-byte message into sink, advancing *done. Does
   * not block. LOOM_EPEER when the peer is gone. */
  int (*recv)(comm_pair *p, size_t len, size_t *done, const struct comm_sink *sink);
  /* Adds to ws what to wait on until send (dir 1) or recv (dir 0) on p can
   * move again. */
  void (*want)(comm_pair *p, int dir, struct comm_waitset *ws);
  /* Called by the engine before it sleeps: returns an error (with c's
   * message set through comm__fail) if another rank poisoned the
   * communicator, and with full set (about every LOOM_COMM_CHECK_MS) also
   * if a peer of this transport that ws waits on died. May be NULL. */
  int (*check)(comm_t *c, int full, const struct comm_waitset *ws);
  /* When the communicator fails: make every peer notice soon (poison the
   * shared segment, shut the sockets down). May be NULL. */
  void (*poison)(comm_t *c);
  /* Native collectives, for a transport that can do better than the
   * algorithms over its pairs when it links every rank of c (shared memory
   * on one host: slots in the segment instead of rings). coll_ok() says
   * whether it does for c; the others have the semantics of comm.h's, on
   * arguments already checked, world > 1. Each may be NULL. */
  int (*coll_ok)(const comm_t *c);
  int (*allreduce)(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                   loom_op op);
  /* allreduce handing the result to fn instead of recv (comm_allreduce_apply) */
  int (*allreduce_apply)(comm_t *c, const void *send, size_t count, loom_dtype dt, loom_op op,
                         loom_apply_fn fn, void *arg);
  /* where the next allreduce's send may be written in place (NULL: none) */
  void *(*allreduce_buffer)(comm_t *c, size_t count, loom_dtype dt);
  int (*barrier)(comm_t *c);
  int (*broadcast)(comm_t *c, void *buf, size_t bytes, int root);
  int (*allgather)(comm_t *c, const void *send, void *recv, size_t bytes);
  int (*reduce_scatter)(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                        loom_op op);
};

struct comm_pair {
  const struct comm_transport *tp; /* NULL: no link (self) */
  int peer;
  void *impl; /* the transport's, freed by its teardown() */
};

extern const struct comm_transport comm__shm_transport;
extern const struct comm_transport comm__tcp_transport;

/* The shm doorbell, for the engine's wait: read the token before trying to
 * progress, sleep on it when nothing moved. */
uint32_t comm__shm_bell_token(comm_t *c);
void comm__shm_bell_sleep(comm_t *c, uint32_t token, int timeout_ms);

#endif
