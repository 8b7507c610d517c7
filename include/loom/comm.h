/* loom/comm.h: collectives over all processes of the job's training roles
 * (chief, then worker, procs each), ranked as LOOM_RANK.
 *
 * Peers find each other through the coordinator's KV store on the first
 * call; no address or port is configured. Processes on the same host talk
 * over shared memory, others over TCP; LOOM_COMM_TRANSPORT=tcp forces TCP.
 * Every call is collective: all ranks make the same calls in the same order
 * with the same count, dtype and op. Any count works, 0 included. send ==
 * recv means in place. When a peer dies or the coordinator aborts the
 * attempt, pending and later calls return LOOM_EABORTED, LOOM_EPEER or
 * LOOM_ETIMEDOUT (loom_errmsg() names the peer) within 2 seconds; the
 * collectives are then unusable for the rest of the process (every later
 * call returns the same error at once). A call that never completes
 * because a peer hangs fails after LOOM_COMM_TIMEOUT_MS (default 300000).
 *
 * LOOM_AVG is the sum divided by the world size; for integer types the
 * division truncates toward zero, as C's /. Calls on one handle from
 * several threads are serialized. send and recv must be equal or not
 * overlap. */
#ifndef LOOM_COMM_H
#define LOOM_COMM_H

#include "../loom.h"

#ifdef __cplusplus
extern "C" {
#endif

LOOM_EXPORT int loom_allreduce(loom_t *l, const void *send, void *recv, size_t count, loom_dtype dt,
                               loom_op op);
LOOM_EXPORT int loom_broadcast(loom_t *l, void *buf, size_t bytes, int root);
/* recv holds world_size * bytes: rank r's send lands at recv + r * bytes
 * (send may already be that slot: in place). */
LOOM_EXPORT int loom_allgather(loom_t *l, const void *send, void *recv, size_t bytes);
/* send holds count elements; the result is split into world_size blocks as
 * evenly as possible (the first count % n blocks get one more element) and
 * rank r receives block r into recv. */
LOOM_EXPORT int loom_reduce_scatter(loom_t *l, const void *send, void *recv, size_t count,
                                    loom_dtype dt, loom_op op);
LOOM_EXPORT int loom_barrier(loom_t *l);
/* Elastic membership (a role with `elastic: {min, max}`): when a member is
 * lost, or a restarted one comes back, the coordinator announces a new
 * membership generation with new ranks and world size. Pending and later
 * collectives of the old generation then fail with LOOM_ECHANGED (or
 * LOOM_EPEER when a peer died first); the program calls loom_comm_reform()
 * and continues, typically after re-broadcasting its state from rank 0. */

/* The generation this process's rank and world size belong to (0 at the
 * job's start; a restarted task starts in the generation it joins). */
LOOM_EXPORT int64_t loom_generation(const loom_t *l);
/* Non-zero once a newer generation than loom_generation() is announced. */
LOOM_EXPORT int loom_membership_changed(const loom_t *l);
/* Leaves the current collectives and joins the newest generation newer
 * than the current one, waiting up to timeout_ms for the coordinator to
 * announce it; afterwards loom_rank() and loom_world_size() are the new
 * generation's. Collective over that generation's members. LOOM_ENOENT if
 * this task is not a member of it (it was declared lost). */
LOOM_EXPORT int loom_comm_reform(loom_t *l, int timeout_ms);

/* An allreduce that hands its result over piece by piece instead of
 * writing it out: once the whole result is there, fn(arg, offset, piece,
 * n) is called for every piece of it, with piece pointing at its n
 * elements, elements offset .. offset + n - 1 of the result. Every element
 * is handed over exactly once (pieces in no particular order, from the
 * calling thread, never concurrently); piece is valid only during the call
 * and must not be written. send (count elements) is only read. All or
 * nothing: fn runs after the collective's last wait, so a call that fails
 * (LOOM_EPEER, LOOM_ECHANGED, ...) has handed over nothing, and fn may
 * update state in place (an optimizer's parameters) with no way to be
 * left half done. Made for fusing what follows the reduction into it: on
 * one host, for a vector that fits a slot (LOOM_COMM_SHM_SLOT, 1 MiB),
 * each piece is read in the slot where it was reduced, so the copy of the
 * result into a buffer and the pass that reads it back are saved. fn must
 * not call libloom's collectives. */
typedef void (*loom_apply_fn)(void *arg, size_t offset, const void *piece, size_t n);
LOOM_EXPORT int loom_allreduce_apply(loom_t *l, const void *send, size_t count, loom_dtype dt,
                                     loom_op op, loom_apply_fn fn, void *arg);

/* Where to write the vector that the next allreduce (loom_allreduce or
 * loom_allreduce_apply, count elements of dt, the pointer returned as its
 * send) will send, so that it is not copied: on one host, for a vector
 * that fits a slot (LOOM_COMM_SHM_SLOT), this process's shared-memory
 * slot of that collective. NULL where there is no such place (one
 * process, ranks on several hosts, a larger vector, an error): write it
 * in memory of your own. Valid until that collective begins: no other
 * collective of this handle may run in between (one that does makes the
 * allreduce fail with LOOM_EINVAL, sending nothing, on the ranks that did
 * so: every rank must use the buffer alike, or the others wait in the
 * round), nor loom_comm_reform (which unmaps it: get a new one after), and
 * the buffer must not be written once the allreduce has begun (peers read
 * it). recv may be the buffer itself (in place). May wait for peers to
 * finish the collective before. */
LOOM_EXPORT void *loom_allreduce_buffer(loom_t *l, size_t count, loom_dtype dt);

/* The size in elements of rank r's block in loom_reduce_scatter(). */
LOOM_EXPORT size_t loom_reduce_scatter_count(size_t count, int world_size, int rank);

#ifdef __cplusplus
}
#endif
#endif
