/* loom.h: the public API of libloom, the library a task's process links to
 * talk to its job: identity (rank, role, index), the coordinator's KV store,
 * events and metrics. Collectives are in loom/comm.h.
 *
 * Every function returns 0 or a negative LOOM_E* code; loom_strerror() names
 * it for people and loom_errmsg() gives the detail of the calling thread's
 * last error on a handle. One handle per process; calls on one handle are
 * thread-safe. */
#ifndef LOOM_H
#define LOOM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LOOM_EXPORT __attribute__((visibility("default")))
#else
#define LOOM_EXPORT
#endif

/* The error table: name, value, message. One place for all of them. */
#define LOOM_ERRNO_MAP(X)                                                                          \
  X(EINVAL, -1, "invalid argument")                                                                \
  X(ENOMEM, -2, "out of memory")                                                                   \
  X(EIO, -3, "input/output error")                                                                 \
  X(ETIMEDOUT, -4, "timed out")                                                                    \
  X(EABORTED, -5, "aborted: the job's attempt was stopped")                                        \
  X(ECONN, -6, "connection failed or lost")                                                        \
  X(EAUTH, -7, "authentication failed")                                                            \
  X(EPROTO, -8, "protocol error: malformed or unexpected message")                                 \
  X(ENOENT, -9, "not found")                                                                       \
  X(ENOTSUP, -10, "not supported")                                                                 \
  X(ERANGE, -11, "value too large")                                                                \
  X(EPEER, -12, "a peer failed")                                                                   \
  X(ESTATE, -13, "not allowed in this state")                                                      \
  X(ENOENV, -14, "not running inside a loom job (LOOM_* variables missing)")                       \
  X(ESPEC, -15, "invalid job spec")                                                                \
  X(EBACKEND, -16, "cluster manager error")                                                        \
  X(ERESOURCE, -17, "resources cannot be satisfied")                                               \
  X(ECHANGED, -18, "the job's membership changed: re-form with loom_comm_reform()")

typedef enum {
  LOOM_OK = 0,
#define LOOM__ERR_ENUM(name, val, msg) LOOM_##name = val,
  LOOM_ERRNO_MAP(LOOM__ERR_ENUM)
#undef LOOM__ERR_ENUM
} loom_err;

typedef struct loom loom_t;
typedef enum { LOOM_F32, LOOM_F64, LOOM_I32, LOOM_I64 } loom_dtype;
typedef enum { LOOM_SUM, LOOM_AVG, LOOM_MAX, LOOM_MIN } loom_op;

LOOM_EXPORT const char *loom_strerror(int code);
LOOM_EXPORT const char *loom_err_name(int code);
/* loom's version, "MAJOR.MINOR.PATCH" (the VERSION file at the top of the
 * source tree): a static string. */
LOOM_EXPORT const char *loom_version(void);

/* Reads the task's environment (LOOM_COORD, LOOM_SECRET, LOOM_RANK, ...),
 * connects to the coordinator and authenticates. On success *l is a new
 * handle owned by the caller, to be released with loom_finish(). Outside a
 * job returns LOOM_ENOENV. */
LOOM_EXPORT int loom_init(loom_t **l);
/* Closes the connections and frees the handle; l is invalid afterwards. */
LOOM_EXPORT void loom_finish(loom_t *l);
/* Detail text of the last error this thread got on this handle ("" if
 * none): each thread has its own, so another thread's error never
 * overwrites it. Valid until the next call on the handle from the same
 * thread, and at most until the thread exits. */
LOOM_EXPORT const char *loom_errmsg(const loom_t *l);

/* Identity. Rank and world size count the processes of the training roles
 * (chief, then worker, procs each); other roles have rank -1. */
LOOM_EXPORT int loom_rank(const loom_t *l);
LOOM_EXPORT int loom_world_size(const loom_t *l);
LOOM_EXPORT int loom_local_rank(const loom_t *l);
LOOM_EXPORT int loom_local_size(const loom_t *l);
LOOM_EXPORT const char *loom_role(const loom_t *l);
LOOM_EXPORT int loom_index(const loom_t *l);
LOOM_EXPORT int loom_attempt(const loom_t *l);
LOOM_EXPORT const char *loom_job_id(const loom_t *l);

/* The coordinator's key-value store, shared by all tasks of one attempt
 * (it starts empty at each attempt). Keys are 1..255 bytes of text, values
 * at most 1 MiB. */
#define LOOM_KV_MAX_KEY 255
#define LOOM_KV_MAX_VALUE (1u << 20)
LOOM_EXPORT int loom_kv_set(loom_t *l, const char *key, const void *val, size_t len);
/* Waits up to timeout_ms (-1: forever, 0: no wait) for key to exist. On
 * success *val is a malloc'ed copy (NUL-terminated past *len) that the
 * caller frees with free(). LOOM_ETIMEDOUT if the key did not appear. */
LOOM_EXPORT int loom_kv_get(loom_t *l, const char *key, int timeout_ms, void **val, size_t *len);
/* Atomically adds delta to the integer stored at key (0 if absent); the new
 * value goes to *result when result is not NULL. */
LOOM_EXPORT int loom_kv_add(loom_t *l, const char *key, int64_t delta, int64_t *result);

/* Records an event in the job's event log (events.jsonl). detail_json, if
 * not NULL, is a JSON object whose members are added to the event. */
LOOM_EXPORT int loom_event(loom_t *l, const char *name, const char *detail_json);

/* Records a metric value for this task at a step (a training step, an
 * epoch...): the coordinator keeps it in the event log and serves it to the
 * dashboard (/api/metrics, /metrics), which charts each tag. tag is 1..
 * LOOM_METRIC_MAX_TAG bytes; value must be finite (LOOM_EINVAL otherwise).
 * Does not wait for the coordinator. The coordinator keeps at most
 * LOOM_METRIC_RATE metrics per task and second (a burst of 10 s worth) and
 * counts the rest in a "metrics_dropped" event; loom/summary.h's scalars
 * reach it through this call, thinned per tag. Tags beginning with "loom/"
 * are libloom's own (LOOM_EINVAL). */
#define LOOM_METRIC_MAX_TAG 128
LOOM_EXPORT int loom_metric(loom_t *l, const char *tag, int64_t step, double value);

/* Where this process's time went since libloom first communicated or
 * read from the feed for it (all zero before that): inside collectives
 * moving data (comm_s) or waiting for slower ranks to arrive
 * (wait_peers_s), blocked on the feed waiting for records (wait_data_s),
 * and the rest (compute_s = wall_s minus those three: the program's own
 * work). The same shares go to the coordinator every LOOM_PHASE_MS as the
 * metrics loom/time_compute_pct, loom/time_comm_pct,
 * loom/time_wait_peers_pct and loom/time_wait_data_pct (source "loom" in
 * the event log; percent of that window, at the step of the
 * milliseconds since the first of these; the last window's on
 * loom_finish, if at least 100 ms long). */
typedef struct {
  double wall_s, compute_s, comm_s, wait_peers_s, wait_data_s;
} loom_phase_times;
LOOM_EXPORT int loom_phase_times_get(loom_t *l, loom_phase_times *out);

#ifdef __cplusplus
}
#endif
#endif
