/* tun.h: every tunable of loom, declared once: its name, its environment
 * variable, default, range, kind and what it does. The coordinator, the
 * agent, libloom's parts (comm, ps, feed) and the backends read them only
 * through loom__tun() and loom__tun_str(), which validate them the same
 * way (loom__tun_env() and loom__tun_check() for the one whose bad value
 * is an error); `loom help tunables` prints this table. Included by
 * core.h.
 *
 * A value that is not a number, or out of its range, or not one of its
 * choices, is reported once per process as a warning that names the
 * variable, the value and the range, and the default is used. Rows whose
 * doc starts "internal:" are what loom sets for its own processes (the
 * coordinator for an agent, an agent for `loom __exec`): their readers
 * take the value as set (loom__tun_raw) and give it their own meaning;
 * `loom help tunables` lists them only with --all. The variables that are
 * not tunables (loom's home, LOOM_LOG, LOOM_SECRET, LOOM_COORD, and what
 * the coordinator hands each task) are read where they are used. */
#ifndef LOOM_CORE_TUN_H
#define LOOM_CORE_TUN_H

#include <stdbool.h>
#include <stddef.h>

#define LOOM__MS_DAY (24LL * 3600 * 1000)
#define LOOM__KIB (1LL << 10)
#define LOOM__MIB (1LL << 20)
#define LOOM__GIB (1LL << 30)

/* Numbers: N(name, variable, default, min, max, kind, doc), kind one of MS,
 * BYTES, COUNT. Words: W(name, variable, default, choices, doc), choices
 * "a|b|c" or NULL for any value (a path, an address). */
#define LOOM_TUNABLES(N, W)                                                                        \
  /* ---- coordinator and agents ---- */                                                           \
  N(RENDEZVOUS_TIMEOUT_MS, "LOOM_RENDEZVOUS_TIMEOUT", 60000, 1, 7 * LOOM__MS_DAY, MS,              \
    "every task of an attempt registers within this long, or the attempt fails")                   \
  N(STOP_GRACE_MS, "LOOM_STOP_GRACE", 1000, 0, 3600000, MS,                                        \
    "between SIGTERM and SIGKILL when stopping an attempt")                                        \
  N(SERVICE_GRACE_MS, "LOOM_SERVICE_GRACE", 3000, 0, 3600000, MS,                                  \
    "the same for services (ps, tensorboard) at the end of a job")                                 \
  N(HEARTBEAT_MS, "LOOM_HEARTBEAT", 1000, 10, 3600000, MS, "agents' heartbeat interval")           \
  N(HEARTBEAT_TIMEOUT_MS, "LOOM_HEARTBEAT_TIMEOUT", 15000, 1, 7 * LOOM__MS_DAY, MS,                \
    "a silent agent is lost after this long (the spec's heartbeat_timeout wins)")                  \
  N(AUTH_TIMEOUT_MS, "LOOM_AUTH_TIMEOUT", 5000, 1, 3600000, MS,                                    \
    "a connection authenticates within this long, or is closed")                                   \
  N(PREAUTH_MAX, "LOOM_PREAUTH_MAX", 64, 1, 1 << 20, COUNT,                                        \
    "connections waiting to authenticate, per coordinator, ps shard and dashboard; the "           \
    "oldest is closed for a new one")                                                              \
  N(CONNECT_TIMEOUT_MS, "LOOM_CONNECT_TIMEOUT", 10000, 1, 3600000, MS,                             \
    "connecting to the coordinator or a peer gives up after this long")                            \
  W(TLS, "LOOM_TLS", "auto", "auto|on|off",                                                        \
    "TLS 1.3 keyed by the job secret on loom's TCP links: auto encrypts every connection "         \
    "that is not loopback at both ends, on encrypts all, off none (every process of a job "        \
    "must agree)")                                                                                 \
  W(DASHBOARD_CERT, "LOOM_DASHBOARD_CERT", "", NULL,                                               \
    "the dashboard over HTTPS: a PEM certificate chain file, or self-signed (a P-256 "             \
    "certificate made at start, its SHA-256 fingerprint printed); empty: plain HTTP")              \
  W(DASHBOARD_KEY, "LOOM_DASHBOARD_KEY", "", NULL,                                                 \
    "the PEM private key file of LOOM_DASHBOARD_CERT's certificate (default: that file)")          \
  W(PORT_HOLD, "LOOM_PORT_HOLD", "listen", "listen|start",                                         \
    "agents: keep the task's reserved port bound until the task listens on it (listen), or "       \
    "let it go just before the command starts (start)")                                            \
  W(IFACE, "LOOM_IFACE", "", NULL,                                                                 \
    "agents: publish this interface's IPv4 address in the cluster spec (default: the one "         \
    "that reaches the coordinator)")                                                               \
  N(LAUNCH_RETRIES, "LOOM_LAUNCH_RETRIES", 3, 0, 100, COUNT,                                       \
    "Slurm: launches of a task tried again when srun fails before its agent registered")           \
  N(LAUNCH_RETRY_MS, "LOOM_LAUNCH_RETRY_MS", 500, 0, 30000, MS,                                    \
    "Slurm: the first pause before such a launch (doubled each time, at most 30 s)")               \
  N(LOSS_WAIT_MS, "LOOM_LOSS_WAIT", 5000, 1, 3600000, MS,                                          \
    "YARN: after an agent's connection closes, how long to wait for YARN's word on its container " \
    "before the task is lost without it")                                                          \
  N(YARN_GANG_TIMEOUT_MS, "LOOM_YARN_GANG_TIMEOUT", 45000, 1, 7 * LOOM__MS_DAY, MS,                \
    "YARN: how long the application master waits for every container of a launch before it "       \
    "releases those granted and fails, naming what is missing")                                    \
  N(YARN_SUBMIT_TIMEOUT_MS, "LOOM_YARN_SUBMIT_TIMEOUT", 60000, 1, 7 * LOOM__MS_DAY, MS,            \
    "YARN: how long to wait for the ResourceManager to accept the application")                    \
  N(YARN_DEFAULT_MB, "LOOM_YARN_DEFAULT_MB", 512, 1, 1 << 30, COUNT,                               \
    "YARN: the container memory (MB) of a role that sets no memory")                               \
  W(KERBEROS_PRINCIPAL, "LOOM_KERBEROS_PRINCIPAL", "", NULL,                                       \
    "Hadoop with Kerberos: log in as this principal from LOOM_KERBEROS_KEYTAB instead of "         \
    "using the ticket cache (loom fs --principal)")                                                \
  W(KERBEROS_KEYTAB, "LOOM_KERBEROS_KEYTAB", "", NULL,                                             \
    "Hadoop with Kerberos: the keytab file of LOOM_KERBEROS_PRINCIPAL; its tickets stay in "       \
    "the process's memory, never in a cache file (loom fs --keytab)")                              \
  N(MAX_FRAME, "LOOM_MAX_FRAME", 4 * LOOM__MIB, 4 * LOOM__KIB, LOOM__GIB, BYTES,                   \
    "the largest message to or from the coordinator")                                              \
  N(MAX_LOG_LINE, "LOOM_MAX_LOG_LINE", 64 * LOOM__KIB, 128, 16 * LOOM__MIB, BYTES,                 \
    "a task's longer output lines are cut")                                                        \
  N(KV_MAX_TOTAL, "LOOM_KV_MAX_TOTAL", 256 * LOOM__MIB, 1, 1LL << 40, BYTES,                       \
    "all of a job's KV store")                                                                     \
  N(METRIC_RATE, "LOOM_METRIC_RATE", 100, 1, 1 << 20, COUNT,                                       \
    "coordinator: metrics kept per task and second (10 s of them in a burst); the rest are "       \
    "dropped and counted")                                                                         \
  N(PHASE_MS, "LOOM_PHASE_MS", 5000, 100, 3600000, MS,                                             \
    "libloom: how often a task sends the shares of its time spent computing, communicating, "      \
    "waiting for peers and waiting for data (the loom/time_*_pct metrics)")                        \
  W(CGROUP_ROOT, "LOOM_CGROUP_ROOT", "", NULL,                                                     \
    "local: make memory cgroups under this directory (v2 or a v1 memory hierarchy) instead "       \
    "of the delegated one; none: the rlimit only")                                                 \
  W(SLURM_FILES, "LOOM_SLURM_FILES", "auto", "auto|shared|sbcast",                                 \
    "Slurm: how files reach the nodes; auto: sbcast unless the job directory is on a "             \
    "network filesystem")                                                                          \
  W(FAULT_STALL_TASK, "LOOM_FAULT_STALL_TASK", "", NULL,                                           \
    "fault injection for tests: this task's agent (worker:2) never registers")                     \
  /* ---- collectives (libloom); the defaults come from measurements on a 2-core host with  \
   * 2 and 4 ranks: recursive doubling beat the ring below 16-64 KiB; spinning helps only     \
   * while a host's ranks fit its CPUs ---- */      \
  W(COMM_TRANSPORT, "LOOM_COMM_TRANSPORT", "auto", "auto|shm|tcp",                                 \
    "collectives: tcp forces TCP between ranks on one host (another value is an error)")           \
  N(COMM_TIMEOUT_MS, "LOOM_COMM_TIMEOUT_MS", 300000, 1, 7 * LOOM__MS_DAY, MS,                      \
    "a collective (or its setup) gives up after this long")                                        \
  N(COMM_CHECK_MS, "LOOM_COMM_CHECK_MS", 100, 1, 60000, MS,                                        \
    "while waiting, peers' liveness and the abort are checked this often")                         \
  N(COMM_SPIN, "LOOM_COMM_SPIN", -1, -1, 1 << 30, COUNT,                                           \
    "busy polls before yielding the CPU when nothing moves; -1: 2000 when this host's ranks "      \
    "fit its CPUs, else 50")                                                                       \
  N(COMM_YIELD, "LOOM_COMM_YIELD", 100, 0, 1 << 30, COUNT, "sched_yield()s before sleeping")       \
  N(COMM_SMALL_BYTES, "LOOM_COMM_SMALL_BYTES", 32 * LOOM__KIB, 0, 1LL << 40, BYTES,                \
    "allreduce over the pairs: recursive doubling up to this size, ring above")                    \
  N(COMM_BCAST_SMALL_BYTES, "LOOM_COMM_BCAST_SMALL_BYTES", 64 * LOOM__KIB, 0, 1LL << 40, BYTES,    \
    "broadcast: binomial tree up to this size, pipelined chain above")                             \
  N(COMM_SHM_RING, "LOOM_COMM_SHM_RING", LOOM__MIB, 4 * LOOM__KIB, LOOM__GIB, BYTES,               \
    "each shared-memory ring (one per ordered pair on a host; rounded down to 4 KiB)")             \
  N(COMM_SHM_CHUNK, "LOOM_COMM_SHM_CHUNK", 128 * LOOM__KIB, 4 * LOOM__KIB, LOOM__GIB, BYTES,       \
    "shm: publish/consume at most this much at once (pipelining grain)")                           \
  N(COMM_SHM_SLOT, "LOOM_COMM_SHM_SLOT", LOOM__MIB, 0, LOOM__GIB, BYTES,                           \
    "one host: each rank's slots for the slot collectives (0: none; at least 4 KiB, "              \
    "rounded down to 4 KiB); the host's lowest rank decides")                                      \
  N(COMM_SHM_SMALL_BYTES, "LOOM_COMM_SHM_SMALL_BYTES", 32 * LOOM__KIB, 0, 1LL << 40, BYTES,        \
    "one-host allreduce: every rank reduces the whole vector up to this size, its slice "          \
    "above; the host's lowest rank decides")                                                       \
  N(COMM_TCP_SOCKBUF, "LOOM_COMM_TCP_SOCKBUF", -1, -1, LOOM__GIB, BYTES,                           \
    "TCP: SO_SNDBUF/SO_RCVBUF of peer sockets; 0: the kernel's autotuning; -1: 256 KiB on "        \
    "one host, autotuning across hosts")                                                           \
  N(COMM_TCP_STAGE, "LOOM_COMM_TCP_STAGE", 256 * LOOM__KIB, 4 * LOOM__KIB, LOOM__GIB, BYTES,       \
    "TCP: receive buffer for pieces that are reduced, not copied")                                 \
  /* ---- parameter server (libloom, loom ps) ---- */                                              \
  N(PS_SPIN_US, "LOOM_PS_SPIN_US", 100, 0, 1000000, COUNT,                                         \
    "microseconds: a parameter server call polls for its reply, and a shard for the next "         \
    "request after one, this long before sleeping (yielding the CPU meanwhile); 0: sleep at once") \
  N(PS_THREADS, "LOOM_PS_THREADS", 0, 0, 64, COUNT,                                                \
    "server: threads a shard splits the rows of one sparse pull or push of 1024 keys or more "     \
    "over; 0: the task's cores over the ps tasks on its host, 1 to 4")                             \
  N(PS_TIMEOUT_MS, "LOOM_PS_TIMEOUT", 300000, 1, 7 * LOOM__MS_DAY, MS,                             \
    "client: the longest any call waits (a SYNC pull waits for the slowest worker)")               \
  N(PS_MAX_MSG, "LOOM_PS_MAX_MSG", 16 * LOOM__MIB, 4 * LOOM__MIB + 64 * LOOM__KIB, LOOM__GIB,      \
    BYTES, "server: payload cap of one request (clients send at most 4 MiB)")                      \
  N(PS_MAX_MEMORY, "LOOM_PS_MAX_MEMORY", 16 * LOOM__GIB, 1, 1LL << 50, BYTES,                      \
    "server: variables, slots and rows one shard may hold")                                        \
  N(PS_SPLIT_BYTES, "LOOM_PS_SPLIT_BYTES", LOOM__MIB, 4, 1LL << 40, BYTES,                         \
    "a dense variable larger than this is split over every shard")                                 \
  N(PS_MAX_CONNS, "LOOM_PS_MAX_CONNS", 4096, 1, 1 << 20, COUNT,                                    \
    "server: authenticated connections")                                                           \
  N(PS_CKPT_KEEP, "LOOM_PS_CKPT_KEEP", 3, 1, 1 << 20, COUNT, "checkpoints kept in the directory")  \
  W(PS_CKPT_DIR, "LOOM_PS_CKPT_DIR", "", NULL,                                                     \
    "where ps checkpoints go (default: ps-ckpt in the job directory)")                             \
  W(PS_BIND, "LOOM_PS_BIND", "", NULL,                                                             \
    "the address a shard listens on (default: its task's; 0.0.0.0 for every interface)")           \
  /* ---- feed ---- */                                                                             \
  N(FEED_SPLIT_BYTES, "LOOM_FEED_SPLIT_BYTES", 16 * LOOM__MIB, 1, 1LL << 40, BYTES,                \
    "coordinator: a larger file is cut into record-aligned byte ranges")                           \
  N(FEED_LEASE_MS, "LOOM_FEED_LEASE_MS", 30000, 1, 7 * LOOM__MS_DAY, MS,                           \
    "coordinator: a lease not renewed for this long goes back to the dispatcher")                  \
  N(FEED_WAIT_MS, "LOOM_FEED_WAIT_MS", 600000, 1, 7 * LOOM__MS_DAY, MS,                            \
    "the longest a reader waits for a split while no task holds one")                              \
  N(FEED_READAHEAD, "LOOM_FEED_READAHEAD", 16 * LOOM__MIB, 1, 1LL << 40, BYTES,                    \
    "bytes a reader keeps read ahead of its consumer")                                             \
  N(FEED_AHEAD_SPLITS, "LOOM_FEED_AHEAD_SPLITS", 2, 1, 1 << 20, COUNT,                             \
    "splits a reader leases beyond the one being consumed")                                        \
  N(FEED_CHUNK, "LOOM_FEED_CHUNK", LOOM__MIB, 1, LOOM__GIB, BYTES,                                 \
    "bytes read and parsed at a time")                                                             \
  N(FEED_MAX_RECORD, "LOOM_FEED_MAX_RECORD", 256 * LOOM__MIB, 1, 1LL << 40, BYTES,                 \
    "the largest record (and the largest shuffled split) a reader holds")                          \
  /* ---- summaries (libloom) ---- */                                                              \
  N(SUMMARY_METRIC_MS, "LOOM_SUMMARY_METRIC_MS", 200, -1, 3600000, MS,                             \
    "a summary scalar also goes to the dashboard at most this often per tag (the latest "          \
    "value in between goes later); 0: every one; -1: none")                                        \
  N(SUMMARY_UPLOAD_MS, "LOOM_SUMMARY_UPLOAD_MS", 10000, 100, 3600000, MS,                          \
    "a summary writer in an hdfs:// directory copies its event file there this often (and at "     \
    "close)")                                                                                      \
  W(SUMMARY_DIR, "LOOM_SUMMARY_DIR", "", NULL,                                                     \
    "a task's default summary run directory is <this>/<role>-<index> (a path or hdfs:// URL, "     \
    "e.g. in the spec's env; default: tensorboard/ in the job directory)")                         \
  /* ---- debugging ---- */                                                                        \
  W(DEBUG, "LOOM_DEBUG", "", NULL,                                                                 \
    "agents: when set (to anything), also say when and why a task's reserved port is let go")      \
  /* ---- internal: what loom sets for its own processes, read as set (loom__tun_raw) ---- */      \
  N(PREV_PORT, "LOOM_PREV_PORT", 0, 0, 65535, COUNT,                                               \
    "internal: coordinator to a restarted task's agent: the port the task had, asked for again "   \
    "(unset, 0 or not a port: any)")                                                               \
  W(FENCE, "LOOM_FENCE", "", NULL,                                                                 \
    "internal: loom.spark to an agent Spark started: the launch (a number) it belongs to")         \
  W(RESPAWN, "LOOM_RESPAWN", "", NULL,                                                             \
    "internal: loom.spark to an agent: 1: started again by the same Spark task, so the "           \
    "coordinator is tried once")                                                                   \
  W(SPARK, "LOOM_SPARK", "", NULL,                                                                 \
    "internal: loom.spark to loom run/submit: the Spark application's facts as JSON (slots, "      \
    "executors, spark.task.maxFailures)")                                                          \
  W(YARN_MANAGED, "LOOM_YARN_MANAGED", "", NULL,                                                   \
    "internal: YARN client to the coordinator it submits: when set, it is the application "        \
    "master YARN started (else it submits an unmanaged one)")                                      \
  W(SLURM_GROUPS, "LOOM_SLURM_GROUPS", "", NULL,                                                   \
    "internal: Slurm batch script to its coordinator: each role's heterogeneous component, "       \
    "comma-separated (\"0,0,1\")")                                                                 \
  W(JOB_DIR_STAGE, "LOOM_JOB_DIR_STAGE", "", NULL,                                                 \
    "internal: coordinator to its Slurm backend: the job directory, to tell whether files must "   \
    "be staged on the nodes")                                                                      \
  W(EXEC_PPID, "LOOM__PPID", "", NULL,                                                             \
    "internal: agent to loom __exec: the agent's pid; the task does not start once it is gone")    \
  W(EXEC_CPUS, "LOOM__CPUS", "", NULL,                                                             \
    "internal: agent to loom __exec: the task's CPU list (its affinity)")                          \
  W(EXEC_CGROUP, "LOOM__CGROUP", "", NULL,                                                         \
    "internal: agent to loom __exec: the memory cgroup the task joins")                            \
  W(EXEC_MEM, "LOOM__MEM", "", NULL,                                                               \
    "internal: agent to loom __exec: the task's memory limit in bytes (RLIMIT_DATA) without a "    \
    "cgroup")

typedef enum {
#define LOOM__TUN_ENUM_N(name, env, def, min, max, kind, doc) LOOM_TUN_##name,
#define LOOM__TUN_ENUM_W(name, env, def, choices, doc) LOOM_TUN_##name,
  LOOM_TUNABLES(LOOM__TUN_ENUM_N, LOOM__TUN_ENUM_W)
#undef LOOM__TUN_ENUM_N
#undef LOOM__TUN_ENUM_W
      LOOM_TUN__COUNT
} loom__tunable;

typedef enum {
  LOOM_TUN_KIND_MS,
  LOOM_TUN_KIND_BYTES,
  LOOM_TUN_KIND_COUNT,
  LOOM_TUN_KIND_WORD
} loom__tun_kind;

/* One row of the table. For a word, def/min/max are 0 and sdef holds the
 * default ("" for none), choices its values or NULL. */
typedef struct {
  const char *env;
  loom__tun_kind kind;
  long long def, min, max;
  const char *sdef, *choices, *doc;
} loom__tun_info;

/* The row of t, or NULL when t is not a tunable. */
const loom__tun_info *loom__tun_info_of(loom__tunable t);

/* The number in variable t: its value when set (not empty), a whole
 * number within its range; else its default, with a warning (once per
 * process and tunable) when it was set to something else. */
long long loom__tun(loom__tunable t);
/* The word in variable t: its value when set (not empty) and, where t has
 * choices, one of them; else its default (a warning as for loom__tun). */
const char *loom__tun_str(loom__tunable t);

/* The raw value of t's variable, NULL when unset or empty: for a caller
 * that makes a bad value an error (after loom__tun_check) rather than a
 * warning. */
const char *loom__tun_env(loom__tunable t);
/* The value of t's variable exactly as set (NULL when unset, "" when set
 * empty), unchecked: for the rows loom sets for its own processes, whose
 * readers give a value their own meaning. */
const char *loom__tun_raw(loom__tunable t);
/* Whether t is loom's word to its own processes (its doc starts with
 * "internal:"), not a knob for users: `loom help tunables` lists it only
 * with --all. */
bool loom__tun_internal(loom__tunable t);
/* Checks value v for t without reading the environment or logging: 0 with
 * the number in *out (or the word left in v); LOOM_EINVAL when v is not a
 * number, or not one of t's choices; LOOM_ERANGE when out of range. On an
 * error, why (when not NULL) gets the sentence a warning says, e.g.
 * "LOOM_MAX_FRAME=12 is out of range (4 KiB..1 GiB); using the default
 * 4 MiB". */
int loom__tun_check(loom__tunable t, const char *v, long long *out, char *why, size_t whylen);
/* A number of t's kind for people: "4 MiB", "60000 ms", "3". */
void loom__tun_fmt(loom__tun_kind kind, long long v, char *buf, size_t len);

#endif
