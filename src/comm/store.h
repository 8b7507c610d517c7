/* store.h: the rendezvous store the collectives find their peers through.
 *
 * A store is a table of operations (gloo's rendezvous::Store): set a key,
 * get a key waiting up to a timeout, add to a counter. Two implementations:
 * comm_store_loom() over the coordinator's KV store (production), and
 * comm_store_file() over a directory of files (unit tests that fork N
 * processes without a coordinator). Keys are short text; values are bytes. */
#ifndef LOOM_COMM_STORE_H
#define LOOM_COMM_STORE_H

#include "loom.h"

#include <stddef.h>
#include <stdint.h>

typedef struct comm_store comm_store;

struct comm_store_ops {
  /* Stores a copy of len bytes of val under key, replacing any old value. */
  int (*set)(comm_store *s, const char *key, const void *val, size_t len);
  /* Waits up to timeout_ms (-1: forever) for key. On success *val is a
   * malloc'ed copy (NUL-terminated past *len) the caller frees.
   * LOOM_ETIMEDOUT when the key did not appear in time. */
  int (*get)(comm_store *s, const char *key, int timeout_ms, void **val, size_t *len);
  /* Atomically adds delta to the integer at key (0 if absent) and returns
   * the new value in *result. */
  int (*add)(comm_store *s, const char *key, int64_t delta, int64_t *result);
  /* Frees the store (not what it holds). */
  void (*destroy)(comm_store *s);
};

struct comm_store {
  const struct comm_store_ops *ops;
};

/* A store over the files of dir, which must exist and be shared by all
 * ranks (same host). Values are written to a temporary file and renamed, so
 * a reader never sees half a value. */
int comm_store_file(const char *dir, comm_store **out);
/* A store over the handle's KV store; the handle must outlive the store. */
int comm_store_loom(loom_t *l, comm_store **out);

#endif
