/* ps.h: the parameter server's insides, shared by the server (`loom ps`,
 * server.c, handlers.c), the client (client.c, batch.c) and their tests:
 * tunables, the wire protocol, hashing and placement, initializers and
 * optimizer kernels, the sparse row store, the shard's state and its
 * checkpoint files.
 *
 * Protocol. A TCP connection to a shard first authenticates with the
 * handshake of wire/wire_auth.h (wire_auth_ps; the server speaks first):
 *
 *   server: "LOOMPS01" | nonce_s[32]
 *   client: "LOOMPS01" | HMAC(secret, "loom-ps-c" nonce_s) | nonce_c[32]
 *   server: HMAC(secret, "loom-ps-s" nonce_c)
 *
 * (HMAC-SHA256 keyed with the job's secret.) The server reads at most
 * 72 bytes before that and closes on any mismatch or after
 * LOOM_AUTH_TIMEOUT. Then requests and replies, each a 48-byte header
 * (little-endian) and a payload of `len` bytes, at most LOOM_PS_MAX_MSG:
 *
 *   u32 len | u16 op | u16 flags | u32 var | i32 rc | u32 count | i32 rank
 *   | u64 id | u64 step | u64 off
 *
 * A reply echoes op and id; rc < 0 carries a message as payload. Requests
 * on one connection are answered in order; a request that must wait (a
 * SYNC pull for its step, a barrier) holds back the ones behind it. A
 * malformed header, an unknown op or a length past the cap closes the
 * connection; a well-formed request the shard cannot serve gets rc < 0. */
#ifndef LOOM_PS_PS_H
#define LOOM_PS_PS_H

#include "core/core.h"
#include "core/cursor.h"
#include "loom/ps.h"

#include <stdbool.h>
#include <stddef.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ps protocol sends floats in host order: little-endian hosts only"
#endif

/* ---- tunables (LOOM_PS_* in src/core/tun.h, where each is described) -- */
struct ps_tunables {
  long long timeout_ms, max_msg, max_memory, split_bytes, max_conns, ckpt_keep, spin_us, threads;
};

/* poll(), but first polling without sleeping (and yielding the CPU in
 * between, to whatever else wants it) until spin_until_ns: a reply or
 * request that comes within the window is seen without the wake-up of a
 * sleeping process (tens of microseconds on a VM, more than a small
 * request's round trip). */
int ps_poll_spin(struct pollfd *pfd, size_t n, int timeout_ms, uint64_t spin_until_ns);
/* Fills t from the tunables table (defaults and the environment). */
void ps_tunables_load(struct ps_tunables *t);

/* ---- protocol ---------------------------------------------------------- */
#define PS_MAGIC "LOOMPS01"
#define PS_MAGIC_LEN 8
#define PS_CHALLENGE_LEN 40 /* magic, nonce_s */
#define PS_AUTH_LEN 72      /* magic, mac, nonce_c */
#define PS_AUTH_OK_LEN 32   /* mac */
#define PS_HDR 48
#define PS_CHUNK (4u << 20) /* clients split payloads at this many bytes */
#define PS_MIN_MAX_MSG (PS_CHUNK + 65536)
#define PS_MAX_NAME 255
#define PS_MAX_DIMS 8
#define PS_MAX_DIM 65536          /* sparse row width */
#define PS_MAX_COUNT (1ULL << 40) /* dense elements */
#define PS_MAX_WORKERS 65536
#define PS_MAX_STALENESS 1000000
#define PS_MAX_ERRMSG 512
#define PS_MAX_PATH 3072
#define PS_STEP_LATEST UINT64_MAX

enum ps_op {
  PS_OP_CONFIG = 1, /* flags mode, count staleness, off workers, rank */
  PS_OP_DECLARE,    /* payload: a declaration; reply var, off lo, step hi */
  PS_OP_PULL,       /* var, off, count, step; reply count floats */
  PS_OP_PUSH,       /* var, off, count, step, flags FIRST; count floats */
  PS_OP_SPULL,      /* var, count keys, step; u64 keys; reply rows */
  PS_OP_SPUSH,      /* var, count keys, step, flags FIRST; keys, rows */
  PS_OP_STEP,       /* step just ended; reply step: the slowest's clock */
  PS_OP_BARRIER,
  PS_OP_SAVE,    /* step; payload the directory */
  PS_OP_COMMIT,  /* step, count shards; payload the directory */
  PS_OP_RESTORE, /* step (PS_STEP_LATEST); payload the directory */
  PS_OP_INFO,    /* reply: JSON */
  PS_OP__END
};
/* FIRST: a push's first message to a shard; NOWAIT: a pull that does not
 * wait for its step; CHECK: a restore that only verifies the checkpoint
 * (the first phase: nothing loads until every shard found its files
 * whole). */
enum { PS_F_FIRST = 1, PS_F_NOWAIT = 2, PS_F_CHECK = 4 };

typedef struct {
  uint32_t len;
  uint16_t op, flags;
  uint32_t var;
  int32_t rc;
  uint32_t count;
  int32_t rank;
  uint64_t id, step, off;
} ps_hdr;

void ps_hdr_put(unsigned char p[PS_HDR], const ps_hdr *h);
void ps_hdr_get(const unsigned char p[PS_HDR], ps_hdr *h);
const char *ps_op_name(int op);

/* Little-endian field writer for declarations and checkpoint records;
 * they are read back with core/cursor.h's loom__cur. */
typedef struct {
  unsigned char *p;
  size_t len, cap;
  bool bad;
} ps_wbuf;
void ps_put_u32(ps_wbuf *w, uint32_t v);
void ps_put_u64(ps_wbuf *w, uint64_t v);
void ps_put_f32(ps_wbuf *w, float v);
void ps_put_bytes(ps_wbuf *w, const void *p, size_t n);

/* ---- variables: declaration, placement, hashing ------------------------ */
enum { PS_DENSE = 1, PS_SPARSE = 2 };

typedef struct {
  uint32_t kind;  /* PS_DENSE or PS_SPARSE */
  uint32_t ndim;  /* dense: 1..8; sparse: 1 */
  uint64_t count; /* dense: elements; sparse: the row width */
  uint64_t shape[PS_MAX_DIMS];
  loom_ps_init init;
  loom_ps_opt opt;
  char name[PS_MAX_NAME + 1];
} ps_decl;

/* Serializes / parses a declaration. ps_decl_get checks every field and
 * says what is wrong in err. */
void ps_decl_put(ps_wbuf *w, const ps_decl *d);
int ps_decl_get(loom__cur *r, ps_decl *d, char *err, size_t errlen);
/* Whether two declarations name the same variable layout (kind, shape,
 * initializer, optimizer kind); hyperparameters may differ. */
bool ps_decl_compatible(const ps_decl *a, const ps_decl *b, char *why, size_t whylen);

/* splitmix64's finalizer; inline, as lookups hash every key. */
static inline uint64_t ps_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}
/* The shard that holds key, out of n. */
static inline int ps_key_shard(uint64_t key, int n) {
  return (int)(((ps_mix64(key) >> 32) * (uint64_t)n) >> 32);
}
/* The part [*lo, *hi) of a dense variable of count elements that shard of
 * nshards holds: all of it on one shard picked by the name's hash up to
 * split_bytes, else an even split (the first count % n shards get one
 * more). */
void ps_dense_part(const char *name, uint64_t count, int shard, int nshards, uint64_t split_bytes,
                   uint64_t *lo, uint64_t *hi);

/* ---- initializers and optimizers ----------------------------------------*/
/* The initial value of element i of row key (dense variables: key 0). */
float ps_init_value(const loom_ps_init *in, uint64_t key, uint64_t i);
void ps_init_fill(const loom_ps_init *in, uint64_t key, uint64_t first, float *out, size_t n);
/* Optimizer slots per value: 0 (SGD), 1 (Adagrad: a), 2 (Adam: m, v). */
int ps_opt_slots(int kind);
/* Applies one update with gradient g to n values w and their slots s1, s2
 * (NULL where the optimizer has none). t: the update's number (1 for the
 * first), for Adam's bias correction. */
void ps_opt_apply(const loom_ps_opt *o, uint64_t t, float *w, float *s1, float *s2, const float *g,
                  size_t n);
/* Slot initial value (Adagrad's accumulator starts at initial_accumulator). */
float ps_opt_slot_init(const loom_ps_opt *o, int slot);

/* ---- memory accounting: every allocation the network can cause -------- */
typedef struct {
  uint64_t used, cap;
} ps_mem;
/* Reserves n bytes (LOOM_ERANGE past the cap) / gives them back. */
int ps_mem_take(ps_mem *m, uint64_t n);
void ps_mem_give(ps_mem *m, uint64_t n);

/* ---- the sparse row store: key -> row of `stride` floats ------------- */
typedef struct {
  uint64_t key, row; /* row + 1; 0: an empty slot */
} ps_rows_ent;

typedef struct {
  uint32_t stride;     /* floats per row */
  uint32_t page_shift; /* rows per page: 1 << page_shift */
  uint64_t n;          /* rows, numbered 0..n-1 in the order added */
  float **pages;       /* the rows' floats */
  uint64_t npages, pages_cap;
  uint64_t *keys; /* [keys_cap] the key of each row */
  uint64_t keys_cap;
  ps_rows_ent *index; /* open addressing, linear probing */
  uint64_t mask;      /* index size - 1 */
  uint64_t bytes;     /* what this store took from its ps_mem */
} ps_rows;

void ps_rows_init(ps_rows *r, uint32_t stride);
void ps_rows_free(ps_rows *r, ps_mem *m);
/* The row of key, or -1. */
int64_t ps_rows_find(const ps_rows *r, uint64_t key);
/* The rows of n keys (little-endian u64, maybe unaligned) into rows[],
 * -1 where absent; a block of lookups at a time in flight, for big tables. */
void ps_rows_find_many(const ps_rows *r, const unsigned char *keys, size_t n, int64_t *rows);
/* The row of key, added (uninitialized, *added set) if absent; a negative
 * LOOM_E* when memory runs out. Rows never move. */
int64_t ps_rows_add(ps_rows *r, uint64_t key, bool *added, ps_mem *m);
/* Row `row`'s floats, and its key. */
float *ps_rows_at(const ps_rows *r, uint64_t row);
uint64_t ps_rows_key(const ps_rows *r, uint64_t row);
/* Forgets every row, keeping the memory for reuse. */
void ps_rows_clear(ps_rows *r);

/* ---- a shard's helper threads (pool.c) ---------------------------------- */
typedef struct ps_pool ps_pool;
/* A pool of threads - 1 helpers (*out NULL when threads <= 1: every job
 * then runs on the caller); spin_ns: how long an idle helper polls for the
 * next job before sleeping. */
int ps_pool_new(int threads, uint64_t spin_ns, ps_pool **out);
void ps_pool_free(ps_pool *p);
/* The threads a job can use, the caller's included (1 for NULL). */
int ps_pool_threads(const ps_pool *p);
/* Runs fn(arg, i, parts) for every i in 0..parts-1 at once, part 0 on the
 * caller (parts is cut to the pool's threads); returns when all are done.
 * One caller at a time. */
void ps_pool_run(ps_pool *p, int parts, void (*fn)(void *arg, int part, int parts), void *arg);

/* ---- a shard's state ---------------------------------------------------- */
typedef struct {
  ps_decl d;
  int slots;
  uint64_t t; /* Adam's update count on this shard */
  /* dense: the part [lo, hi) */
  uint64_t lo, hi;
  float *w, *s1, *s2; /* [hi - lo] each; slots NULL when unused */
  float *pend;        /* SYNC: the open step's summed gradient, lazily */
  bool pend_dirty;
  /* sparse */
  ps_rows rows;      /* stride dim * (1 + slots): w | s1 | s2 */
  ps_rows pend_rows; /* SYNC: stride dim, summed gradients */
  bool pend_touched; /* SYNC: pushed to in the open step */
  bool loading;      /* ckpt.c: already reset by the restore under way */
} ps_var;

typedef struct {
  int shard, nshards;
  uint64_t split_bytes;
  ps_var **vars;
  uint32_t nvars, cap;
  ps_mem mem;
  int64_t *scratch; /* row numbers of a message's keys */
  size_t scratch_cap;
  ps_pool *pool; /* borrowed; NULL: one thread. Reads and applies of
                    PS_PAR_KEYS keys or more are split over it */
} ps_state;

#define PS_PAR_KEYS 1024 /* fewer keys than this: one thread */

void ps_state_init(ps_state *st, int shard, int nshards, uint64_t split_bytes, uint64_t max_memory);
void ps_state_free(ps_state *st);
/* Declares a variable or finds it (see loom_ps_dense); *id its index. */
int ps_state_declare(ps_state *st, const ps_decl *d, uint32_t *id, char *err, size_t errlen);
int ps_state_find(const ps_state *st, const char *name);

/* Dense [off, off+n) (global element offsets, inside the part). */
void ps_dense_read(const ps_var *v, uint64_t off, float *out, size_t n);
/* Applies a gradient now; first: this push's first message to this shard
 * (Adam's t moves once per push). */
void ps_dense_apply(ps_var *v, uint64_t off, const float *g, size_t n, bool first);
int ps_dense_accum(ps_state *st, ps_var *v, uint64_t off, const float *g, size_t n);
/* Sparse: rows of n keys into out (n * dim), stored or initial. */
void ps_sparse_read(ps_state *st, const ps_var *v, const unsigned char *keys, size_t n, float *out);
/* keys (here and above) are n little-endian u64, maybe unaligned. */
int ps_sparse_apply(ps_state *st, ps_var *v, const unsigned char *keys, const float *g, size_t n,
                    bool first);
int ps_sparse_accum(ps_state *st, ps_var *v, const unsigned char *keys, const float *g, size_t n);
/* SYNC: applies every variable's summed gradients of the open step as one
 * update and clears them. */
int ps_state_close_step(ps_state *st);
void ps_state_drop_pending(ps_state *st);

/* ---- checkpoints (ckpt.c) ----------------------------------------------- */
/* Writes this shard's file of checkpoint step under dir, atomically. */
int ps_ckpt_write(const ps_state *st, const char *dir, uint64_t step, char *err, size_t errlen);
/* Shard 0, once every shard wrote: MANIFEST.json, then LATEST; prunes all
 * but the newest keep checkpoints. */
int ps_ckpt_commit(const char *dir, uint64_t step, int nshards, int keep, char *err, size_t errlen);
/* The step LATEST names; LOOM_ENOENT if none. */
int ps_ckpt_latest(const char *dir, uint64_t *step);
/* Checks that the files ps_ckpt_load would read are there and whole
 * (manifest, headers, SHA-256), reading them through once. */
int ps_ckpt_verify(const ps_state *st, const char *dir, uint64_t step, char *err, size_t errlen);
/* Loads checkpoint step into st: the files of every old shard whose data
 * this shard now holds (its own when the count is the same). Variables in
 * the checkpoint replace the state's (declared ones must be compatible;
 * their hyperparameters stay); others are kept. All or nothing. */
int ps_ckpt_load(ps_state *st, const char *dir, uint64_t step, char *err, size_t errlen);
/* The decoders under ps_ckpt_verify and ps_ckpt_load, on bytes already at
 * hand: a manifest's text (its shard count into *shards; LOOM_EIO when it
 * is not one of step), and one shard file of size bytes read from f, the
 * file of shard of nshards at step (name: for messages). load merges it
 * into st as ps_ckpt_load does each file (the caller resets the variables'
 * loading flags and drops pending gradients around a whole restore). The
 * fuzz harness (tests/fuzz/ckpt_fuzz.c) feeds them memory. */
int ps_ckpt_manifest_parse(const char *text, size_t len, uint64_t step, int *shards);
int ps_ckpt_verify_stream(FILE *f, uint64_t size, const char *name, int shard, int nshards,
                          uint64_t step, char *err, size_t errlen);
int ps_ckpt_load_stream(ps_state *st, FILE *f, uint64_t size, const char *name, int shard,
                        int nshards, uint64_t step, char *err, size_t errlen);

#endif
