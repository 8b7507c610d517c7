/* collectives.c: broadcast, allgather, reduce-scatter and barrier, written
 * against the engine's pipelines like allreduce.c.
 *
 * broadcast: a binomial tree for small messages (log2(n) hops); a chain
 * for large ones, each rank forwarding every piece as it arrives, so the
 * time is about one message plus n-1 pieces.
 * allgather: the ring, each rank forwarding the block it just received.
 * reduce-scatter: the ring's first half, shifted so rank r ends with
 * block r.
 * barrier: dissemination, ceil(log2(n)) rounds of one byte; in round k a
 * rank signals rank + 2^k once it has heard from rank - 2^(k-1). */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mod(int a, int n) { return ((a % n) + n) % n; }

int comm_broadcast(comm_t *c, void *buf, size_t bytes, int root) {
  if (!c) return LOOM_EINVAL;
  if (root < 0 || root >= c->world || (bytes > 0 && !buf)) {
    if (!c->err)
      snprintf(c->errmsg, sizeof c->errmsg,
               "invalid argument: broadcast root %d of %d ranks, buf %p", root, c->world, buf);
    return LOOM_EINVAL;
  }
  int rc = comm__begin(c);
  if (rc < 0 || bytes == 0 || c->world == 1) return rc;
  if (c->native && c->native->broadcast) return c->native->broadcast(c, buf, bytes, root);
  int n = c->world, vr = mod(c->rank - root, n);
  struct comm_stage st[40];
  int k = 0;
  memset(st, 0, sizeof st);
  if (bytes <= (size_t)c->t.bcast_small_bytes) {
    /* Binomial tree over virtual ranks (root is 0). */
    int mask = 1;
    while (mask < n && !(vr & mask)) mask <<= 1;
    if (vr != 0)
      st[k++] = (struct comm_stage){
          .from = mod(vr - mask + root, n), .rlen = bytes, .sdep = -1, .sink = {.direct = buf}};
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (vr + mask >= n) continue;
      st[k++] = (struct comm_stage){
          .to = mod(vr + mask + root, n), .sbuf = buf, .slen = bytes, .sdep = vr != 0 ? 0 : -1};
    }
  } else {
    /* Chain: root -> root+1 -> ... */
    if (vr != 0)
      st[k++] = (struct comm_stage){
          .from = mod(c->rank - 1, n), .rlen = bytes, .sdep = -1, .sink = {.direct = buf}};
    if (vr != n - 1)
      st[k++] = (struct comm_stage){
          .to = mod(c->rank + 1, n), .sbuf = buf, .slen = bytes, .sdep = vr != 0 ? 0 : -1};
  }
  return comm__pipeline(c, st, k);
}

int comm_allgather(comm_t *c, const void *send, void *recv, size_t bytes) {
  if (!c) return LOOM_EINVAL;
  int n = c->world;
  if ((bytes > 0 && (!send || !recv)) || bytes > SIZE_MAX / 2 / (size_t)n) {
    if (!c->err)
      snprintf(c->errmsg, sizeof c->errmsg,
               "invalid argument: allgather of %zu bytes, send %p, recv %p", bytes, send, recv);
    return LOOM_EINVAL;
  }
  int rc = comm__begin(c);
  if (rc < 0 || bytes == 0) return rc;
  if (n > 1 && c->native && c->native->allgather) return c->native->allgather(c, send, recv, bytes);
  char *rb = recv;
  int r = c->rank;
  if (send != rb + (size_t)r * bytes) memmove(rb + (size_t)r * bytes, send, bytes);
  if (n == 1) return 0;
  struct comm_stage *st = calloc((size_t)(n - 1), sizeof *st);
  if (!st) return comm__fail(c, LOOM_ENOMEM, "out of memory");
  for (int s = 0; s < n - 1; s++) {
    int out = mod(r - s, n), in = mod(r - s - 1, n);
    st[s] = (struct comm_stage){.to = mod(r + 1, n),
                                .sbuf = rb + (size_t)out * bytes,
                                .slen = bytes,
                                .sdep = s - 1,
                                .from = mod(r - 1, n),
                                .rlen = bytes,
                                .sink = {.direct = rb + (size_t)in * bytes}};
  }
  rc = comm__pipeline(c, st, n - 1);
  free(st);
  return rc;
}

int comm_reduce_scatter(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                        loom_op op) {
  int n = c ? c->world : 1, r = c ? c->rank : 0;
  size_t es = comm_dtype_size(dt), mine = comm__block_len(count, n, r);
  int rc = comm__check_reduce(c, send, mine ? recv : send, count, dt, op);
  if (rc < 0 || count == 0) return rc;
  const char *sb = send;
  if (n == 1) {
    if (send != recv) memmove(recv, send, count * es);
    return 0;
  }
  if (c->native && c->native->reduce_scatter)
    return c->native->reduce_scatter(c, send, recv, count, dt, op);
  /* If recv lies inside send, the last step must not write where a
   * concurrent send still reads: finish in scratch, copy at the end. */
  const char *rb = recv;
  int overlap = mine > 0 && rb < sb + count * es && sb < rb + mine * es;
  char *tmp = comm__scratch(c, count * es);
  struct comm_stage *st = calloc((size_t)(n - 1), sizeof *st);
  struct comm_reduce_sink *rs = calloc((size_t)(n - 1), sizeof *rs);
  if (!tmp || !st || !rs) {
    free(st);
    free(rs);
    return comm__fail(c, LOOM_ENOMEM, "out of memory");
  }
  for (int s = 0; s < n - 1; s++) {
    int out = mod(r - s - 1, n), in = mod(r - s - 2, n), last = s == n - 2;
    size_t oo = comm__block_off(count, n, out) * es;
    size_t io = comm__block_off(count, n, in) * es;
    rs[s] = (struct comm_reduce_sink){.dst = last && !overlap ? recv : tmp + io,
                                      .a = sb + io,
                                      .dt = dt,
                                      .op = op,
                                      .div = last && op == LOOM_AVG ? n : 0};
    st[s] = (struct comm_stage){.to = mod(r + 1, n),
                                .sbuf = (s == 0 ? sb : tmp) + oo,
                                .slen = comm__block_len(count, n, out) * es,
                                .sdep = s - 1,
                                .from = mod(r - 1, n),
                                .rlen = comm__block_len(count, n, in) * es,
                                .sink = {.fn = comm__reduce_piece, .arg = &rs[s]}};
  }
  rc = comm__pipeline(c, st, n - 1);
  if (rc == 0 && overlap) memmove(recv, tmp + comm__block_off(count, n, r) * es, mine * es);
  free(st);
  free(rs);
  return rc;
}

int comm_barrier(comm_t *c) {
  if (!c) return LOOM_EINVAL;
  int rc = comm__begin(c);
  if (rc < 0 || c->world == 1) return rc;
  if (c->native && c->native->barrier) return c->native->barrier(c);
  static const char token = 1;
  char got[32];
  struct comm_stage st[32];
  int n = c->world, r = c->rank, k = 0;
  memset(st, 0, sizeof st);
  for (int d = 1; d < n; d <<= 1, k++)
    st[k] = (struct comm_stage){.to = mod(r + d, n),
                                .sbuf = &token,
                                .slen = 1,
                                .sdep = k - 1,
                                .from = mod(r - d, n),
                                .rlen = 1,
                                .sink = {.direct = &got[k]}};
  return comm__pipeline(c, st, k);
}
