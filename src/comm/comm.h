/* comm.h: libloom's collectives inside the library: the communicator, its
 * tunables, the engine the algorithms run on, and the reduction kernels.
 *
 * The public loom_allreduce() & co. (comm.c) create one communicator per
 * handle on first use, over the coordinator's KV store; unit tests create
 * them directly with comm_create() over a file store. */
#ifndef LOOM_COMM_COMM_H
#define LOOM_COMM_COMM_H

#include "comm/store.h"
#include "core/core.h"
#include "comm/transport.h"
#include "loom.h"
#include "loom/comm.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* The largest shm ring or slot: 1 GiB (bounds the segment layout). */
#define COMM_SHM_MAX (1L << 30)

/* The collectives' tunables (LOOM_COMM_* in src/core/tun.h, where each is
 * described), as the engine and the transports use them. */
struct comm_tunables {
  long timeout_ms, check_ms, spin, yield, small_bytes, bcast_small_bytes, shm_ring, shm_chunk,
      shm_slot, shm_small_bytes, tcp_sockbuf, tcp_stage;
};

/* Fills t from the tunables table (defaults and the environment), then
 * rounds what the shared-memory layout needs rounded. */
void comm_tunables_load(struct comm_tunables *t);

enum { COMM_TP_AUTO, COMM_TP_TCP };

struct comm {
  int rank, world;
  comm_store *store; /* borrowed */
  char prefix[96];   /* namespace of this communicator's store keys */
  char host[256];
  int abort_fd;              /* -1: none */
  const int64_t *latest_gen; /* membership announced; NULL: not elastic */
  int64_t gen;               /* the generation this communicator serves */
  int mode;                  /* COMM_TP_*, from LOOM_COMM_TRANSPORT */
  char **hosts;              /* [world], every rank's host */
  int *pids;                 /* [world], every rank's process id (on its host) */
  comm_pair *pairs;          /* [world]; pairs[rank] has no transport */
  void *shm, *tcp;           /* the transports' per-communicator state */
  /* A transport whose native collectives serve c (every rank linked by
   * it), or NULL: then the algorithms over the pairs do. */
  const struct comm_transport *native;
  struct comm_tunables t;
  int oversub;      /* more ranks on this machine than CPUs to run them */
  int same_machine; /* other ranks on this machine (its namespaces included) */
  int gone_seen;    /* a waited-for peer was seen gone and nothing moved
                    since: 1 the caller must look again, 2 it has */
  int err;          /* first error; the communicator is poisoned once set */
  char errmsg[256];
  uint64_t wait_ns;      /* time spent waiting for peers (nothing moved), summed */
  uint64_t wait_from_ns; /* when the current wait began */
  uint64_t deadline_ns, next_check_ns;
  void *tmp; /* scratch for algorithms, grown by comm__scratch() */
  size_t tmp_cap;
  void *apply_out; /* comm_allreduce_apply's result where no transport hands it over */
  size_t apply_cap;
};

/* Creates a communicator of world ranks, this one being rank. All ranks
 * call it with the same prefix (the key namespace; a fresh one for each
 * communicator) and store. Ranks with equal host strings share memory
 * unless LOOM_COMM_TRANSPORT=tcp. abort_fd, if >= 0, is polled while
 * waiting: once readable every call fails with LOOM_EABORTED. On failure
 * returns the error and, if errmsg is not NULL, its detail (errlen bytes). */
int comm_create(comm_store *store, const char *prefix, int rank, int world, const char *host,
                int abort_fd, comm_t **out, char *errmsg, size_t errlen);
/* The name of the transport c's pair to peer runs over ("shm", "tcp"),
 * "self" for c's own rank, NULL when peer is out of range. */
const char *comm_transport_of(const comm_t *c, int peer);
/* Frees c and everything it holds. Not collective. */
/* The same, for an elastic generation: while forming and afterwards, a
 * *latest_gen newer than gen fails every call with LOOM_ECHANGED. */
int comm_create_gen(comm_store *store, const char *prefix, int rank, int world, const char *host,
                    int abort_fd, const int64_t *latest_gen, int64_t gen, comm_t **out,
                    char *errmsg, size_t errlen);
void comm_destroy(comm_t *c);
/* Detail of the error that poisoned c, "" if none. */
const char *comm_errmsg(const comm_t *c);

/* The collectives; semantics as in include/loom/comm.h. */
int comm_allreduce(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                   loom_op op);
int comm_allreduce_apply(comm_t *c, const void *send, size_t count, loom_dtype dt, loom_op op,
                         loom_apply_fn fn, void *arg);
/* A buffer to write the next allreduce's send into, in place (NULL: the
 * transport has none for count elements). */
void *comm_allreduce_buffer(comm_t *c, size_t count, loom_dtype dt);
int comm_broadcast(comm_t *c, void *buf, size_t bytes, int root);
int comm_allgather(comm_t *c, const void *send, void *recv, size_t bytes);
int comm_reduce_scatter(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                        loom_op op);
int comm_barrier(comm_t *c);

/* ---- internal to src/comm ------------------------------------------- */

/* Records the first error (its code and message) and poisons c: peers are
 * told, and every later call returns the same code. Returns c->err. */
int comm__fail(comm_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Starts a collective: 0, or the poisoning error. Arms the deadline. */
int comm__begin(comm_t *c);
uint64_t comm__now_ns(void);
/* A scratch buffer of at least n bytes, valid until the next call. */
void *comm__scratch(comm_t *c, size_t n);

/* One step of a pipeline: an optional send to `to` and an optional receive
 * from `from` (length 0: none). Sends run in stage order, one at a time;
 * so do receives. The send of a stage with sdep >= 0 only sends bytes that
 * the receive of stage sdep has delivered already (it forwards them, so
 * slen <= that stage's rlen); a receive of stage k starts only once the
 * sends of stages < k are complete, so it may overwrite what they read. */
struct comm_stage {
  int to;
  const void *sbuf;
  size_t slen;
  int sdep;
  int from;
  size_t rlen;
  struct comm_sink sink;
  size_t sdone, rdone; /* the engine's progress; start at 0 */
};
/* Runs stages until all are complete, waiting with the engine's policy
 * (spin, yield, sleep; liveness and abort checks; the deadline). */
int comm__pipeline(comm_t *c, struct comm_stage *st, int n);
/* Waits with the same policy until *v >= target, where v is a counter in
 * the shared segment that rank peer advances (and rings this rank's
 * doorbell after). */
int comm__wait_counter(comm_t *c, const _Atomic uint64_t *v, uint64_t target, int peer);

/* Reduction kernels. dst = a op b elementwise over n elements; dst may be
 * a (in place) but must not otherwise overlap a or b. */
size_t comm_dtype_size(loom_dtype dt);
void comm_reduce(loom_dtype dt, loom_op op, void *dst, const void *a, const void *b, size_t n);
/* AVG's second half: dst[i] /= div. Integers divide truncating toward
 * zero (C's /), so AVG of integers is the truncated mean of the sum. */
void comm_scale(loom_dtype dt, void *dst, size_t n, int div);

/* A sink that reduces what arrives into dst = a op piece at the same
 * offset, then divides by div when div > 1 (AVG's last step). */
struct comm_reduce_sink {
  char *dst;
  const char *a;
  loom_dtype dt;
  loom_op op;
  int div;
};
void comm__reduce_piece(void *arg, const void *piece, size_t off, size_t n);

/* Checks a reduction's arguments (c's message says what is wrong) and
 * starts the collective. */
int comm__check_reduce(comm_t *c, const void *send, const void *recv, size_t count, loom_dtype dt,
                       loom_op op);

/* Block b of count elements split n ways (first count % n blocks one
 * larger): its first element and its length. */
size_t comm__block_off(size_t count, int n, int b);
size_t comm__block_len(size_t count, int n, int b);

#endif
