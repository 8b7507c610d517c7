/* client_int.h: what the two parts of the ps client share: the handle,
 * a request of a batch and a connection's lane. client.c is the public
 * loom_ps_* API (connecting, declaring, dense and sparse calls, steps,
 * checkpoints); batch.c is the batch engine that drives a batch of
 * requests over every shard's connection at once. Not installed; nothing
 * outside src/ps includes it. */
#ifndef LOOM_PS_CLIENT_INT_H
#define LOOM_PS_CLIENT_INT_H

#include "core/core.h"
#include "loom/ps.h"
#include "ps/ps.h"

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PS_MAX_SHARDS 4096
#define INFO_MAX (64u << 20)

struct loom_ps_var {
  ps_decl d;
  uint32_t *id;      /* [nshards] the variable's id on each shard */
  uint64_t *lo, *hi; /* [nshards] dense: the part each shard holds */
};

typedef struct {
  int fd;
  char addr[264];
} ps_link;

struct loom_ps {
  loom_t *l; /* borrowed, may be NULL */
  int nshards;
  ps_link *links;
  int rank, workers, mode, staleness;
  int64_t step;
  int timeout_ms;
  uint64_t spin_ns; /* LOOM_PS_SPIN_US: how long a wait polls before sleeping */
  char ckpt_dir[PS_MAX_PATH + 1];
  uint64_t next_id;
  int dead; /* a transport error: the streams are out of step for good */
  loom_ps_var_t **vars;
  int nvars, vcap;
  pthread_mutex_t mu;
  char errmsg[PS_MAX_ERRMSG + 128];
  void *arena; /* sparse calls' scratch, reused (see arena()) */
  size_t arena_cap;
  /* ps_exec's scratch, kept from call to call so that the steady state
   * allocates nothing: the lanes ([nshards], each with its receive
   * stash), their poll entries and the calls' order */
  struct ps_lane *lanes;
  struct pollfd *pfd;
  int *who;
  size_t *order, order_cap;
  struct ps_call *calls; /* dense and sparse calls, reused (see calls_get()) */
  size_t calls_cap;
};

/* One request of a batch, and where its reply goes. */
typedef struct ps_call {
  int shard;
  ps_hdr h;
  const void *p1, *p2; /* request payload: p1[n1] then p2[n2] */
  size_t n1, n2;
  void *dst; /* where the reply's payload goes: exactly dst_len bytes */
  size_t dst_len;
  bool any_len; /* INFO: any length, into a malloc'ed `alloc` */
  char *alloc;
  ps_hdr rep;
  char err[PS_MAX_ERRMSG + 1];
} ps_call;

/* Bytes a lane reads ahead of what it needs: a small reply's header and
 * payload (and the next reply's header) come in one recv; a payload
 * bigger than half of it is read straight into its destination. */
#define STASH (16u << 10)

typedef struct ps_lane {
  size_t *q, nq;   /* this shard's calls, in order */
  size_t si, soff; /* sending q[si], soff bytes of it out */
  unsigned char shdr[PS_HDR];
  size_t ri, rhave; /* receiving q[ri]: header bytes, then payload */
  unsigned char rhdr[PS_HDR];
  bool in_payload;
  size_t phave;
  bool readable;        /* poll said so and no recv has come up short since */
  unsigned char *stash; /* [STASH], read ahead: [st_off, st_len) */
  size_t st_off, st_len;
} ps_lane;

/* ---- client.c ------------------------------------------------------------ */

/* Sets the handle's (and the loom handle's) detail text; returns code. */
int ps_fail(loom_ps_t *ps, int code, const char *fmt, ...) LOOM__PRINTF(3, 4);
/* A transport failure: the handle is unusable from now on. */
int ps_die(loom_ps_t *ps, int code, const char *fmt, ...) LOOM__PRINTF(3, 4);

/* ---- batch.c ------------------------------------------------------------- */

/* Sends every call and waits for every reply, up to the handle's timeout.
 * Returns 0 when all replies are in (each call's rep.rc says how it went),
 * or a transport error (the handle is then dead). */
int ps_exec(loom_ps_t *ps, ps_call *calls, size_t n);
/* The first refusal among calls, as the handle's error; 0 if none. */
int ps_first_refusal(loom_ps_t *ps, ps_call *calls, size_t n);
/* ps_exec, then the first refusal as the handle's error. */
int ps_run(loom_ps_t *ps, ps_call *calls, size_t n);

#endif
