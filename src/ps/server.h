/* server.h: the built-in parameter server, run as `loom ps` by a ps role,
 * and the same server in-process for tests and benchmarks. */
#ifndef LOOM_PS_SERVER_H
#define LOOM_PS_SERVER_H

#include <stddef.h>

/* `loom ps` (argv[0] is "ps"): serves shard LOOM_INDEX of the job's
 * variables on the port LOOM_CLUSTER reserves for it until SIGTERM or
 * SIGINT (exit 0), the attempt's abort or the loss of the coordinator.
 * Returns the process exit status: 0, 1 (failed while serving), 2 (usage
 * or environment). */
int loom__ps_main(int argc, char **argv);

typedef struct ps_server ps_server;

typedef struct {
  int listen_fd;      /* listening; the server owns it from _new on */
  int stop_fd;        /* readable: run() returns 0; borrowed */
  int abort_fd;       /* -1, or readable when the job's attempt is over */
  int shard, nshards; /* this shard's index and the count */
  int world;          /* default number of workers (LOOM_WORLD_SIZE), 0 */
  int colocated;      /* ps tasks on this host, this one included (0: 1):
                         LOOM_PS_THREADS=0 shares the host's cores */
  const char *secret; /* the job's secret, copied */
} ps_server_cfg;

/* Creates a server over cfg (the listening fd is owned by it even when
 * this fails). *out is released with loom__ps_server_free(). */
int loom__ps_server_new(const ps_server_cfg *cfg, ps_server **out);
/* Serves until stop_fd or abort_fd becomes readable: 0; a negative
 * LOOM_E* if polling itself fails. One thread; blocking only in poll(). */
int loom__ps_server_run(ps_server *s);
void loom__ps_server_free(ps_server *s);
/* The threads a large sparse request is split over (LOOM_PS_THREADS). */
int loom__ps_server_threads(const ps_server *s);

/* For the fuzz harness (tests/fuzz/ps_proto_fuzz.c): serves n bytes as if
 * they had arrived on the server's one authenticated connection, made on
 * the first call over fd (a connected socket that replies go to, owned by
 * the server from then on), as the poll loop serves what a read brought:
 * every whole request in order, then parked connections tried again.
 * Returns 1 while the connection is open and not parked, else 0. */
int loom__ps_server_feed(ps_server *s, int fd, const void *data, size_t n);

#endif
