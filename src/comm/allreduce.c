/* allreduce.c: allreduce, written once against the engine's pipelines.
 *
 * Small messages: recursive doubling, log2(n) rounds each exchanging the
 * whole vector with one partner. A world size that is not a power of two
 * folds first: of the first 2*rem ranks, each even one hands its vector to
 * the odd one above it and sits out, and gets the result back at the end.
 *
 * Large messages: the ring. The vector is cut into n blocks; in n-1
 * reduce-scatter steps each rank sends one block to its right neighbour
 * and reduces the block arriving from its left into place, after which
 * rank r holds block r+1 fully reduced; n-1 allgather steps then pass the
 * finished blocks around. The steps are one pipeline: what arrives is
 * reduced piece by piece straight from the transport (from the shm ring,
 * or TCP's staging buffer), and the next step forwards each piece as soon
 * as it is reduced, so sending, receiving and reducing overlap. */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Exchanges with one peer: send slen bytes of sbuf to `to` while receiving
 * rlen bytes from `from` into sink. */
static int sendrecv(comm_t *c, int to, const void *sbuf, size_t slen, int from, size_t rlen,
                    struct comm_sink sink) {
  struct comm_stage st = {
      .to = to, .sbuf = sbuf, .slen = slen, .sdep = -1, .from = from, .rlen = rlen, .sink = sink};
  return comm__pipeline(c, &st, 1);
}

static int allreduce_rd(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                        loom_op op) {
  int n = c->world, r = c->rank, rc = 0;
  size_t bytes = count * comm_dtype_size(dt);
  if (send != recv) memcpy(recv, send, bytes);
  void *tmp = comm__scratch(c, bytes);
  if (!tmp) return comm__fail(c, LOOM_ENOMEM, "out of memory");
  struct comm_reduce_sink into = {.dst = recv, .a = recv, .dt = dt, .op = op};
  struct comm_sink reduce = {.fn = comm__reduce_piece, .arg = &into};
  struct comm_sink none = {0}, to_tmp = {.direct = tmp}, to_recv = {.direct = recv};
  int p = 1;
  while (p * 2 <= n) p *= 2;
  int rem = n - p, vr = r < 2 * rem ? (r % 2 ? r / 2 : -1) : r - rem;
  /* Fold: even ranks below 2*rem hand their vector up. */
  if (r < 2 * rem && r % 2 == 0)
    rc = sendrecv(c, r + 1, recv, bytes, -1, 0, none);
  else if (r < 2 * rem)
    rc = sendrecv(c, -1, NULL, 0, r - 1, bytes, reduce);
  for (int mask = 1; rc == 0 && vr >= 0 && mask < p; mask <<= 1) {
    int pv = vr ^ mask, partner = pv < rem ? pv * 2 + 1 : pv + rem;
    rc = sendrecv(c, partner, recv, bytes, partner, bytes, to_tmp);
    if (rc == 0) comm_reduce(dt, op, recv, recv, tmp, count);
  }
  /* Unfold: the odd ones hand the result back down. */
  if (rc == 0 && r < 2 * rem && r % 2 == 0)
    rc = sendrecv(c, -1, NULL, 0, r + 1, bytes, to_recv);
  else if (rc == 0 && r < 2 * rem)
    rc = sendrecv(c, r - 1, recv, bytes, -1, 0, none);
  if (rc == 0 && op == LOOM_AVG) comm_scale(dt, recv, count, n);
  return rc;
}

static int allreduce_ring(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                          loom_op op) {
  int n = c->world, r = c->rank, steps = n - 1;
  size_t es = comm_dtype_size(dt);
  const char *sb = send;
  char *rb = recv;
  struct comm_stage *st = calloc((size_t)(2 * steps), sizeof *st);
  struct comm_reduce_sink *rs = calloc((size_t)steps, sizeof *rs);
  if (!st || !rs) {
    free(st);
    free(rs);
    return comm__fail(c, LOOM_ENOMEM, "out of memory");
  }
  int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < steps; s++) { /* reduce-scatter */
    int out = mod(r - s, n), in = mod(r - s - 1, n);
    size_t oo = comm__block_off(count, n, out) * es;
    size_t io = comm__block_off(count, n, in) * es;
    rs[s] = (struct comm_reduce_sink){.dst = rb + io,
                                      .a = sb + io,
                                      .dt = dt,
                                      .op = op,
                                      .div = s == steps - 1 && op == LOOM_AVG ? n : 0};
    st[s] = (struct comm_stage){.to = right,
                                .sbuf = (s == 0 ? sb : rb) + oo,
                                .slen = comm__block_len(count, n, out) * es,
                                .sdep = s - 1,
                                .from = left,
                                .rlen = comm__block_len(count, n, in) * es,
                                .sink = {.fn = comm__reduce_piece, .arg = &rs[s]}};
  }
  for (int s = 0; s < steps; s++) { /* allgather */
    int out = mod(r + 1 - s, n), in = mod(r - s, n);
    st[steps + s] =
        (struct comm_stage){.to = right,
                            .sbuf = rb + comm__block_off(count, n, out) * es,
                            .slen = comm__block_len(count, n, out) * es,
                            .sdep = steps + s - 1,
                            .from = left,
                            .rlen = comm__block_len(count, n, in) * es,
                            .sink = {.direct = rb + comm__block_off(count, n, in) * es}};
  }
  int rc = comm__pipeline(c, st, 2 * steps);
  free(st);
  free(rs);
  return rc;
}

int comm__check_reduce(comm_t *c, const void *send, const void *recv, size_t count, loom_dtype dt,
                       loom_op op) {
  if (!c) return LOOM_EINVAL;
  if ((unsigned)dt > LOOM_I64 || (unsigned)op > LOOM_MIN || (count > 0 && (!send || !recv)) ||
      count > SIZE_MAX / 16 / comm_dtype_size(dt)) {
    if (!c->err)
      snprintf(c->errmsg, sizeof c->errmsg,
               "invalid argument: dtype %d, op %d, count %zu, send %p, "
               "recv %p",
               (int)dt, (int)op, count, send, recv);
    return LOOM_EINVAL;
  }
  return comm__begin(c);
}

int comm_allreduce(comm_t *c, const void *send, void *recv, size_t count, loom_dtype dt,
                   loom_op op) {
  int rc = comm__check_reduce(c, send, recv, count, dt, op);
  if (rc < 0 || count == 0) return rc;
  size_t bytes = count * comm_dtype_size(dt);
  if (c->world == 1) {
    if (send != recv) memmove(recv, send, bytes);
    return 0;
  }
  if (c->native && c->native->allreduce) return c->native->allreduce(c, send, recv, count, dt, op);
  if (bytes <= (size_t)c->t.small_bytes || count < (size_t)c->world)
    return allreduce_rd(c, send, recv, count, dt, op);
  return allreduce_ring(c, send, recv, count, dt, op);
}

/* One rank hands its own vector over as it is; a native collective hands
 * pieces straight from where it reduced them; otherwise the result goes
 * through scratch and is handed over whole. */
int comm_allreduce_apply(comm_t *c, const void *send, size_t count, loom_dtype dt, loom_op op,
                         loom_apply_fn fn, void *arg) {
  if (!fn) {
    if (c && !c->err) snprintf(c->errmsg, sizeof c->errmsg, "invalid argument: no function");
    return LOOM_EINVAL;
  }
  int rc = comm__check_reduce(c, send, send, count, dt, op);
  if (rc < 0 || count == 0) return rc;
  if (c->world == 1) { /* sum, max, min or average of one vector: itself */
    fn(arg, 0, send, count);
    return 0;
  }
  if (c->native && c->native->allreduce_apply)
    return c->native->allreduce_apply(c, send, count, dt, op, fn, arg);
  size_t bytes = count * comm_dtype_size(dt);
  if (bytes > c->apply_cap) {
    void *p = realloc(c->apply_out, bytes);
    if (!p) return comm__fail(c, LOOM_ENOMEM, "out of memory");
    c->apply_out = p;
    c->apply_cap = bytes;
  }
  if ((rc = comm_allreduce(c, send, c->apply_out, count, dt, op)) < 0) return rc;
  fn(arg, 0, c->apply_out, count);
  return 0;
}

void *comm_allreduce_buffer(comm_t *c, size_t count, loom_dtype dt) {
  if (!c || c->err || c->world == 1 || !count || comm_dtype_size(dt) == 0) return NULL;
  if (c->native && c->native->allreduce_buffer) return c->native->allreduce_buffer(c, count, dt);
  return NULL;
}
