/* lib.h: what libloom's parts (comm, and later ps, feed) may use of the
 * handle beyond the public API. Only libloom's own files include this. */
#ifndef LOOM_LIB_H
#define LOOM_LIB_H

#include "loom.h"
#include "wire/wire_msg.h"
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>

/* Sets the handle's detail text and returns code, for `return
 * loom__fail(l, LOOM_EPEER, "rank %d closed its connection", r);`. */
int loom__fail(loom_t *l, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A file descriptor that becomes readable (and stays readable) once the
 * coordinator has aborted this attempt or the connection to it is lost.
 * Collectives poll it next to their peers' sockets. -1 without a
 * coordinator. */
int loom__abort_fd(const loom_t *l);
/* 0 while the attempt is live; LOOM_EABORTED or LOOM_ECONN afterwards. */
int loom__aborted(const loom_t *l);

/* The name of this host as the job knows it (LOOM_HOST, else gethostname),
 * used to decide which peers share memory with us. */
const char *loom__host(const loom_t *l);

/* Sends the request m (a message whose first field is its int64_t id, which
 * this sets: the feed's wire_feed_*) to the coordinator and waits up to
 * wait_ms (-1: forever) for its WIRE_REPLY; m stays the caller's. On
 * success returns the reply's rc and, when not NULL, *reply_json (a
 * reference the caller decrefs) and *reply_blob (a malloc'ed copy,
 * NUL-terminated past *reply_len, that the caller frees).
 * Returns LOOM_EABORTED / LOOM_ECONN when the attempt ends while waiting. */
int loom__call(loom_t *l, wire_msg *m, int wait_ms, json_t **reply_json, void **reply_blob,
               size_t *reply_len);

/* Elastic membership: the newest generation the coordinator announced
 * (read atomically by collectives while they wait), and the switch to a
 * new one (rank and world size of this process in it). */
const int64_t *loom__latest_generation(const loom_t *l);
void loom__set_membership(loom_t *l, int rank, int world, int64_t generation);

/* A slot for the collectives' private state, created on first use and torn
 * down by loom__comm_fini() from loom_finish(). */
void **loom__comm_slot(loom_t *l);
void loom__comm_fini(loom_t *l);
/* The transport this process's communicator really uses to reach peer
 * ("shm" or "tcp"; "self" for its own rank), joining the communicator
 * first if it has not yet. NULL (message in loom_errmsg) when there is no
 * communicator or peer is out of range. For tests, which link libloom
 * statically: not exported from the shared library. */
const char *loom__comm_transport_of(loom_t *l, int peer);

/* Where the process's time goes (loom_phase_times_get): libloom's parts
 * add the nanoseconds they spent inside collectives moving data
 * (LOOM__PHASE_COMM) or waiting for slower ranks (LOOM__PHASE_PEERS), and
 * blocked on the feed (LOOM__PHASE_DATA). Every LOOM_PHASE_MS of wall
 * time after the first of these, the shares of the window go to the
 * coordinator as metrics (time_*_pct). Thread-safe and cheap: an atomic
 * add and a clock read. */
enum { LOOM__PHASE_COMM, LOOM__PHASE_PEERS, LOOM__PHASE_DATA, LOOM__PHASE_N };
void loom__phase_add(loom_t *l, int phase, uint64_t ns);

#endif
