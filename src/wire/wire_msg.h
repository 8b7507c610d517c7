/* wire_msg.h: the typed messages between the coordinator and its agents
 * and between libloom and the coordinator: one struct each, one table of
 * fields each (wire_msg.c), and one encoder and one decoder for all.
 *
 * A decoded message borrows from its frame: its strings and JSON values
 * point into f->json (or into what the decoder parsed from the blob, which
 * the message owns and wire_msg_free releases), so it is valid until both
 * wire_frame_free(f) and wire_msg_free(m). The decoder checks every field
 * it knows, its JSON type and its bounds, and fails with a located message
 * ("ASSIGN: field 'procs' must be an integer 1..1024"); fields it does not
 * know are ignored, so that a newer peer may add one. Optional fields have
 * a has_ flag (numbers) or are NULL (strings, JSON). */
#ifndef LOOM_WIRE_MSG_H
#define LOOM_WIRE_MSG_H

#include "wire/wire.h"

/* ---- agent <-> coordinator -------------------------------------------- */
typedef struct { /* agent: who it is and where its task will listen */
  const char *task;
  int64_t attempt, port;
  const char *host;
  bool has_pid;
  int64_t pid;
  bool inflate;         /* it takes a deflated cluster spec (blob_encoding "deflate") */
  const char *host_why; /* optional: why it advertises host, for people */
  /* attempt "any" (backends whose cluster manager starts agents, Spark):
   * the agent takes whichever attempt its task waits for; attempt is then
   * ignored */
  bool any_attempt;
  /* optional fencing token of the launch the agent belongs to (Spark: the
   * stage attempt); the coordinator refuses one below the highest seen */
  bool has_fence;
  int64_t fence;
  /* WIRE_PROTOCOL and loom's version; absent from agents before protocol 2 */
  bool has_protocol;
  int64_t protocol;
  const char *version;
} wire_register;

typedef struct { /* coord: what the agent is to run */
  const char *workdir, *job_id, *job_dir, *role;
  int64_t index;
  const char *shell; /* either shell */
  json_t *argv;      /* or argv: an array of strings, at least one */
  int64_t procs;
  json_t *env;   /* object: name -> string */
  json_t *files; /* object: target -> path, {"tar": path} for a directory, {"archive":
                    path} for an archive to unpack, {"cwd": name} for what the cluster
                    manager localized where the agent started */
  const char *cpus, *gpus;
  /* the role's GPU count: 0 hides every GPU from the task (an agent of a
   * coordinator that sends none keeps what the host gave) */
  bool has_gpu_count;
  int64_t gpu_count;
  int64_t memory;
  bool training;
  int64_t rank_base, world_size, heartbeat_timeout_ms;
  bool has_attempt; /* the task's attempt, for an agent that registered with "any" */
  int64_t attempt;
  bool has_protocol; /* the coordinator's WIRE_PROTOCOL and loom version */
  int64_t protocol;
  const char *version;
} wire_assign;

typedef struct { /* coord: the cluster spec, at the rendezvous or a rejoin */
  const char *master_addr;
  bool has_master_port, has_rank_base, has_world_size, has_generation;
  int64_t master_port, rank_base, world_size, generation;
  /* the blob: {"cluster": {role: [host:port...]}, "tf_cluster": {...}} */
  json_t *cluster, *tf_cluster; /* tf_cluster may be NULL */
} wire_cluster;

typedef struct {
  json_t *pids;
} wire_started; /* array of integers */
typedef struct {
  int64_t stream, proc;
} wire_log; /* blob: lines */
typedef struct {
  int64_t code, signal;
  const char *reason;
  bool lost;
} wire_exit;
typedef struct {
  int64_t grace_ms;
  bool ending; /* the job ends: no other attempt follows (a node's copies may go) */
} wire_stop;
typedef struct {
  const char *reason;
  int64_t code;
} wire_fail;

/* ---- libloom <-> coordinator ------------------------------------------ */
typedef struct {
  const char *task;
  int64_t rank, pid;
} wire_hello;
typedef struct { /* blob: the value */
  int64_t id;
  const char *key;
} wire_kv_set;
typedef struct {
  int64_t id;
  const char *key;
  int64_t timeout_ms; /* < 0: forever */
} wire_kv_get;
typedef struct {
  int64_t id;
  const char *key;
  int64_t delta;
} wire_kv_add;
typedef struct {
  int64_t id;
  const char *name;
  json_t *detail; /* an object, or NULL */
} wire_event;
typedef struct { /* blob: KV_GET's value */
  int64_t id, rc;
  bool has_value;
  int64_t value;
  const char *msg;
  json_t *json; /* decoded: the whole object (the feed's replies carry more
                 * fields); encoded: fields sent besides these, or NULL */
} wire_reply;
typedef struct {
  const char *reason;
  /* to a refused agent: final when trying again cannot succeed (the job is
   * ending, or stale: it belongs to a launch the job has moved past);
   * neither when its task may wait for it later */
  bool final, stale;
} wire_abort;
typedef struct {
  bool has_id;
  int64_t id;
  const char *tag;
  int64_t step;
  double value;
} wire_metric;
typedef struct {
  int64_t generation;
} wire_membership;

/* ---- libloom <-> coordinator: the data feed (src/feed/client.c, reader.c
 * and src/coord/feed_dispatch.c) ---------------------------------------- *
 * Each is a request answered by a WIRE_REPLY whose further fields (in
 * wire_reply.json) are the answer: see each type. */
enum {
  WIRE_FEED_OPEN = WIRE_FEED_FIRST, /* -> {format, epochs, epoch, splits, output,
                                     * lease_ms, shuffle, growing} */
  WIRE_FEED_LEASE,                  /* -> {end} or {splits: [{split, epoch, lease, path, off, len,
                    * rec, rseed?, tmp?}]}; rc LOOM_ETIMEDOUT: nothing free yet
                    * ({msg, leased}), ask again */
  WIRE_FEED_DONE,                   /* -> rc 0 committed, LOOM_ESTATE: the lease was taken back
                    * (msg), LOOM_EIO: the output could not be committed (msg) */
  WIRE_FEED_RENEW,                  /* -> {stale: [lease ids no longer this task's]} */
  WIRE_FEED_RELEASE                 /* give back unfinished splits -> {} */
};
#define FEED_MAX_BATCH_LEASES 16 /* splits in one LEASE reply */
#define FEED_MAX_LIST 256        /* lease ids in one RENEW / RELEASE */
#define FEED_MAX_WAIT_MS 60000   /* longest a LEASE request is held */

typedef struct {
  int64_t id;
} wire_feed_open;
typedef struct {
  int64_t id;
  bool has_max; /* splits wanted, 1..FEED_MAX_BATCH_LEASES; absent: 1 */
  int64_t max;
  int64_t wait_ms; /* 0..FEED_MAX_WAIT_MS to hold the request; absent: 0 */
} wire_feed_lease;
typedef struct {
  int64_t id;
  int64_t lease;   /* the lease id, from 1 */
  int64_t records; /* read from the split; absent: 0 */
  bool wrote;      /* the split's output was written (to its lease's tmp) */
} wire_feed_done;
typedef struct { /* RENEW (keep these leases) and RELEASE (give them back) */
  int64_t id;
  json_t *leases; /* an array of 0..FEED_MAX_LIST lease ids, each from 1 */
} wire_feed_leases;

/* ---- the feed's answers: typed fields of a WIRE_REPLY ------------------ *
 * The REPLY stays the carrier (its id, rc and msg are wire_reply's); the
 * answer's fields sit beside them in the same JSON object. Each decoder
 * takes that object (wire_reply.json, or what loom__call hands back), checks
 * every field it knows as wire_msg_decode does and fills the struct, whose
 * strings and arrays borrow from the object; or fails with LOOM_EPROTO and a
 * located message ("FEED_LEASE reply: splits[2].off must be ..."). Each
 * encoder makes the answer's fields (a new object, for the coordinator's
 * reply function), or NULL when out of memory or a required string is NULL. */
typedef struct { /* FEED_OPEN's answer */
  const char *format;
  int64_t epochs; /* 1..1000000 */
  int64_t epoch;  /* the current one, below epochs */
  int64_t splits; /* 1..UINT32_MAX, or 0 when growing */
  bool output;    /* the job writes an output per split */
  int64_t lease_ms;
  bool shuffle, growing;
} wire_feed_opened;

typedef struct { /* one leased split */
  int64_t split, epoch, lease;
  const char *path;
  int64_t off, len, rec; /* len from 1 */
  bool has_rseed;        /* the split's shuffle seed, when the feed shuffles */
  int64_t rseed;
  const char *tmp; /* where its output goes, or NULL */
} wire_feed_split;

typedef struct {  /* FEED_LEASE's answer */
  bool end;       /* rc 0: the feed is over */
  size_t nsplits; /* rc 0 and not end: 1..FEED_MAX_BATCH_LEASES */
  wire_feed_split splits[FEED_MAX_BATCH_LEASES];
  bool has_leased; /* rc LOOM_ETIMEDOUT: how many leases other tasks hold */
  int64_t leased;
} wire_feed_leased;

typedef struct { /* FEED_RENEW's answer */
  json_t *stale; /* an array of 0..FEED_MAX_LIST lease ids no longer this task's */
} wire_feed_renewed;

int wire_feed_opened_decode(const json_t *reply, wire_feed_opened *o, char *err, size_t errlen);
/* rc is the reply's: with 0 the answer is the end or 1.. splits. */
int wire_feed_leased_decode(const json_t *reply, int rc, wire_feed_leased *o, char *err,
                            size_t errlen);
int wire_feed_renewed_decode(const json_t *reply, wire_feed_renewed *o, char *err, size_t errlen);
json_t *wire_feed_opened_encode(const wire_feed_opened *o);
json_t *wire_feed_leased_encode(const wire_feed_leased *o);
json_t *wire_feed_renewed_encode(const wire_feed_renewed *o);

typedef struct {
  uint16_t type; /* a wire_type */
  union {
    wire_register reg;
    wire_assign assign;
    wire_cluster cluster;
    wire_started started;
    wire_log log;
    wire_exit exit;
    wire_stop stop;
    wire_fail fail;
    wire_hello hello;
    wire_kv_set kv_set;
    wire_kv_get kv_get;
    wire_kv_add kv_add;
    wire_event event;
    wire_reply reply;
    wire_abort abort;
    wire_metric metric;
    wire_membership membership;
    wire_feed_open feed_open;
    wire_feed_lease feed_lease;
    wire_feed_done feed_done;
    wire_feed_leases feed_renew, feed_release;
  } u;                       /* READY, HEARTBEAT: no fields */
  const unsigned char *blob; /* LOG, KV_SET, REPLY; borrowed */
  size_t blob_len;
  json_t *owned; /* what the decoder parsed (CLUSTER's blob) */
} wire_msg;

/* The message's name ("ASSIGN"), or NULL for a type without a codec. */
const char *wire_msg_name(uint16_t type);

/* Decodes f into m (see the top of this file for what m borrows). Returns
 * 0, or LOOM_EPROTO with a message naming the message and the field in
 * err; a type without a codec is LOOM_EPROTO too. */
int wire_msg_decode(const wire_frame *f, wire_msg *m, char *err, size_t errlen);

/* Releases what the decoder allocated; m's fields are invalid after it. */
void wire_msg_free(wire_msg *m);

/* Encodes m into one frame (a malloc'ed buffer the caller owns). A
 * required string or JSON value left NULL is LOOM_EINVAL. */
int wire_msg_encode(const wire_msg *m, unsigned char **out, size_t *out_len);

/* Encodes m and writes it on a blocking socket (see wire_send). */
int wire_msg_send(int fd, const wire_msg *m);

#endif
