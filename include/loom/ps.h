/* loom/ps.h: the parameter server client. A job's ps role runs `loom ps`;
 * every worker connects to all of its tasks (shards) and trains against
 * variables that live there:
 *
 *   - dense variables: a float32 tensor of a fixed shape. A small one lives
 *     whole on one shard (chosen by a hash of its name); one larger than
 *     LOOM_PS_SPLIT_BYTES (1 MiB) is split over all shards in contiguous
 *     ranges.
 *   - sparse tables: uint64 key -> a row of dim float32, for embeddings of
 *     huge vocabularies. A key's row lives on the shard its hash picks. A
 *     row nobody has pushed to reads as its initial value (a function of
 *     the table's seed, the key and the column, so the same on any number
 *     of shards); it is stored from its first push on.
 *
 * Gradients are pushed, the server applies the variable's optimizer (SGD,
 * Adagrad or Adam, with the variable's hyperparameters). Three modes, one
 * per job, set by the first worker to connect:
 *
 *   LOOM_PS_ASYNC    each push is applied when it arrives.
 *   LOOM_PS_SYNC     a step: every worker pushes (any number of pushes, all
 *                    summed), then calls loom_ps_step(); once every worker
 *                    has, the summed gradients are applied as one update.
 *                    A pull waits until every step before the caller's is
 *                    applied, so every worker reads the same parameters,
 *                    exactly those of a single process applying the summed
 *                    gradients in order.
 *   LOOM_PS_BOUNDED  pushes are applied as in ASYNC; loom_ps_step() blocks
 *                    while the caller is more than `staleness` steps ahead
 *                    of the slowest worker.
 *
 * Workers are the job's training processes (LOOM_RANK 0..LOOM_WORLD_SIZE-1
 * by default). Other processes (an evaluator) may connect with rank -1:
 * they pull the latest values without waiting and do not take part in
 * steps.
 *
 * Optimizers, per element (per row for sparse tables; rows that get no
 * gradient in an update are left alone):
 *   SGD      w -= lr * g
 *   ADAGRAD  a += g*g;  w -= lr * g / (sqrt(a) + eps)        a starts at
 *            initial_accumulator (torch.optim.Adagrad)
 *   ADAM     t += 1;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
 *            w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 *            (torch.optim.Adam). t counts the updates of the variable (of
 *            the table on each shard, as torch.optim.SparseAdam).
 *
 * Every call returns 0 or a negative LOOM_E* code; loom_ps_errmsg() (and
 * loom_errmsg() of the loom_t it was connected with) has the detail. Calls
 * block; every wait is bounded by the handle's timeout (LOOM_PS_TIMEOUT,
 * 300000 ms). A shard that dies makes pending and later calls fail with
 * LOOM_ECONN at once; an aborted attempt with LOOM_EABORTED. After a
 * transport error (ECONN, EPROTO, ETIMEDOUT, EABORTED) the handle is
 * unusable: every later call returns the same error. Errors the server
 * reports about a request (EINVAL, ESTATE, ERANGE...) leave it usable.
 * Calls on one handle are serialized; use one handle per thread for
 * parallel requests. Values are float32 in the host's byte order (little-
 * endian hosts). */
#ifndef LOOM_PS_H
#define LOOM_PS_H

#include "../loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_ps loom_ps_t;
/* A variable's handle: owned by its loom_ps_t, valid until loom_ps_close. */
typedef struct loom_ps_var loom_ps_var_t;

typedef enum { LOOM_PS_ASYNC = 0, LOOM_PS_SYNC = 1, LOOM_PS_BOUNDED = 2 } loom_ps_mode;

typedef struct {
  loom_ps_mode mode;
  int staleness; /* LOOM_PS_BOUNDED: steps ahead of the slowest */
  int workers;   /* processes taking part in steps; 0: LOOM_WORLD_SIZE */
  int rank;      /* this process's rank; 0: loom_rank(l) or LOOM_RANK
                           (-1 outside the training roles); set
                           rank_given to use it as is */
  int rank_given;
  int timeout_ms;       /* 0: LOOM_PS_TIMEOUT */
  const char *servers;  /* "host:port,host:port,..."; NULL: LOOM_CLUSTER's
                           "ps" list */
  const char *ckpt_dir; /* NULL: LOOM_PS_CKPT_DIR, else $LOOM_JOB_DIR/ps-ckpt */
} loom_ps_opts;

typedef enum {
  LOOM_PS_ZEROS = 0,
  LOOM_PS_CONSTANT, /* every value a */
  LOOM_PS_UNIFORM,  /* uniform in [a, b) */
  LOOM_PS_NORMAL    /* normal, mean a, standard deviation b */
} loom_ps_init_kind;

typedef struct {
  loom_ps_init_kind kind;
  float a, b;
  uint64_t seed;
} loom_ps_init;

typedef enum { LOOM_PS_SGD = 0, LOOM_PS_ADAGRAD, LOOM_PS_ADAM } loom_ps_optimizer;

typedef struct {
  loom_ps_optimizer kind;
  float lr;
  float beta1, beta2;        /* Adam */
  float eps;                 /* Adagrad, Adam */
  float initial_accumulator; /* Adagrad */
} loom_ps_opt;

/* The usual hyperparameters (torch.optim's defaults). */
#define LOOM_PS_OPT_SGD(rate) ((loom_ps_opt){LOOM_PS_SGD, (rate), 0, 0, 0, 0})
#define LOOM_PS_OPT_ADAGRAD(rate) ((loom_ps_opt){LOOM_PS_ADAGRAD, (rate), 0, 0, 1e-10f, 0})
#define LOOM_PS_OPT_ADAM(rate) ((loom_ps_opt){LOOM_PS_ADAM, (rate), 0.9f, 0.999f, 1e-8f, 0})

/* Connects to every shard (waiting up to LOOM_CONNECT_TIMEOUT for each to
 * listen), authenticates with the job's secret (LOOM_SECRET) and agrees on
 * the mode: LOOM_ESTATE if the ps already runs in another one. l, if not
 * NULL, gives the rank, the abort signal and a second place for error
 * detail; it must outlive the handle. opts may be NULL (ASYNC, defaults).
 * On success *ps is a new handle the caller releases with loom_ps_close().
 * The handle's step starts where this rank left off on the ps (0 for a
 * fresh ps). */
LOOM_EXPORT int loom_ps_connect(loom_t *l, const loom_ps_opts *opts, loom_ps_t **ps);
/* Closes the connections and frees the handle and its variables. The
 * variables stay on the ps. */
LOOM_EXPORT void loom_ps_close(loom_ps_t *ps);
/* Detail of the last error on ps ("" if none), valid until the next call. */
LOOM_EXPORT const char *loom_ps_errmsg(const loom_ps_t *ps);
LOOM_EXPORT int loom_ps_shards(const loom_ps_t *ps);
/* This worker's step: the number of loom_ps_step() calls, counted from
 * where the ps (or a restored checkpoint) had it. */
LOOM_EXPORT int64_t loom_ps_clock(const loom_ps_t *ps);

/* Declares a dense variable of shape[0] x ... x shape[ndim-1] floats
 * (1 <= ndim <= 8), or finds it if it exists: then the shape, the
 * initializer and the optimizer kind must match (LOOM_EINVAL otherwise);
 * the hyperparameters given replace the old ones. Every worker declares
 * the variables it uses. name: 1..255 printable bytes. *var is owned by
 * ps. */
LOOM_EXPORT int loom_ps_dense(loom_ps_t *ps, const char *name, const size_t *shape, int ndim,
                              const loom_ps_init *init, const loom_ps_opt *opt,
                              loom_ps_var_t **var);
/* Declares (or finds) a sparse table whose rows have dim floats
 * (1..65536). */
LOOM_EXPORT int loom_ps_sparse(loom_ps_t *ps, const char *name, size_t dim,
                               const loom_ps_init *init, const loom_ps_opt *opt,
                               loom_ps_var_t **var);
/* Elements of a dense variable, or the row width of a table. */
LOOM_EXPORT size_t loom_ps_var_size(const loom_ps_var_t *var);

/* Reads the whole dense variable into out (its element count of floats).
 * SYNC: waits until every step before this worker's is applied. */
LOOM_EXPORT int loom_ps_pull(loom_ps_t *ps, loom_ps_var_t *var, float *out);
/* Sends a gradient for the whole dense variable (its count of floats). */
LOOM_EXPORT int loom_ps_push(loom_ps_t *ps, loom_ps_var_t *var, const float *grad);
/* Reads the rows of n keys into out (n * dim floats, row i at out + i*dim).
 * Keys may repeat. */
LOOM_EXPORT int loom_ps_sparse_pull(loom_ps_t *ps, loom_ps_var_t *var, const uint64_t *keys,
                                    size_t n, float *out);
/* Sends gradients for the rows of n keys (grad: n * dim floats). The
 * gradients of a key that repeats are summed into one before the update. */
LOOM_EXPORT int loom_ps_sparse_push(loom_ps_t *ps, loom_ps_var_t *var, const uint64_t *keys,
                                    size_t n, const float *grad);

/* Ends this worker's step. SYNC: the step's summed gradients are applied
 * once every worker has ended it (this call does not wait for that; the
 * next pull does). BOUNDED: returns once the slowest worker is at most
 * `staleness` steps behind. ASYNC: only counts. */
LOOM_EXPORT int loom_ps_step(loom_ps_t *ps);
/* Waits until every worker has called loom_ps_barrier() as many times. */
LOOM_EXPORT int loom_ps_barrier(loom_ps_t *ps);

/* Saves the whole state of the ps (values, optimizer slots, steps) as
 * checkpoint `step` under the handle's checkpoint directory:
 * step-<step>/shard-<i>-of-<n>.bin, each written to a temporary file,
 * fsync'ed and renamed, then step-<step>/MANIFEST.json and LATEST, so a
 * checkpoint is either complete and named by LATEST or ignored. Older
 * checkpoints beyond LOOM_PS_CKPT_KEEP (3) are removed. One process calls
 * it (typically rank 0). SYNC: step must be the caller's loom_ps_clock();
 * every shard saves exactly the state after `step` steps (waiting for the
 * slower workers to end step-1 if needed), so the shards agree. ASYNC and
 * BOUNDED: each shard saves its state when the request reaches it; call
 * it after loom_ps_barrier() for a cut that no push straddles. */
LOOM_EXPORT int loom_ps_save(loom_ps_t *ps, int64_t step);
/* Loads a checkpoint into every shard: the latest (*step < 0) or the given
 * one; on return *step is the step restored and the handle's clock. Every
 * worker calls it before training: the first request loads, the others
 * find it done (the ps loads at most once per `latest` request in its
 * life, so a late worker cannot rewind the others). The number of shards
 * may differ from the checkpoint's. LOOM_ENOENT when there is none. */
LOOM_EXPORT int loom_ps_restore(loom_ps_t *ps, int64_t *step);

/* A JSON description of one shard (its variables, rows, bytes, step,
 * clocks). *json is malloc'ed; the caller frees it. */
LOOM_EXPORT int loom_ps_info(loom_ps_t *ps, int shard, char **json);

#ifdef __cplusplus
}
#endif
#endif
