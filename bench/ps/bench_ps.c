/* bench_ps.c: parameter server pull/push throughput next to its ceiling,
 * a plain TCP exchange of the same bytes. run.sh drives it:
 *
 *   bench_ps ports N            prints N free loopback ports
 *   bench_ps echo PORT          the baseline server: reads a 48-byte header
 *                               (u32 len at 0, u64 reply bytes at 40) and len
 *                               bytes, answers 48 + reply bytes
 *   bench_ps run --servers H:P,... --echo H:P --label L
 *                               times dense pull/push (4 KiB .. 64 MiB) and
 *                               sparse pull/push (4096 keys x 16 floats)
 *                               against `loom ps` shards, and the same bytes
 *                               through the echo server, interleaved in
 *                               rounds so that load falls on both alike;
 *                               --only NAMES: just the figures named (e.g.
 *                               "sparse_pull,dense_push"), for profiling
 *
 * One line per figure on stdout:
 *   name=ps_dense_pull shards=2 n=<floats> bytes=<payload> iters=...
 *        median_s=... GBps=... ratio=<echo median / ps median>
 *   name=tcp_echo_pull shards=2 n=... bytes=... iters=... median_s=... GBps=... ratio=1
 * ratio > 1: the ps is faster than plain TCP (the benchmarks' convention:
 * > 1 is better for loom); 0.8: it takes 1/0.8 = 1.25 times as long.
 * Sparse figures add a third line, timed in the same rounds:
 *   name=store_sparse_pull shards=2 n=4096 bytes=... median_s=... ratio=...
 * the shard's own work on the request, in this process on one thread, with
 * no network: ps_sparse_read (pull) or ps_sparse_apply (push, SGD) on a
 * copy of the same 1M-row table, for the same number of random keys.
 * Its ratio (echo median / store median) is the most a shard holding all
 * the keys could reach if its transport cost nothing. And a fourth:
 *   name=floor_sparse_pull shards=2 n=4096 bytes=... median_s=... ratio=...
 * the least memory work any store must do for the request: each row read
 * once (pull: copied out; push: w -= lr * g) from a plain array of the
 * table's 1M rows of 16 floats (64 MiB, 2 MiB pages), no index at all. */
#include <loom.h>
#include <loom/ps.h>

#include "ps/ps.h" /* the shard's row store, for the store_ figures */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int full(int fd, void *p, size_t n, int wr) {
  char *c = p;
  while (n) {
    ssize_t r = wr ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, 0);
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Header and payload in one go (one syscall when the socket takes it),
 * as the ps client and server send theirs. */
static int sendv(int fd, unsigned char *h, char *p, size_t n) {
  struct iovec iov[2] = {{h, 48}, {p, n}};
  size_t left = 48 + n;
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = n ? 2 : 1};
  while (left) {
    ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (r <= 0) return -1;
    left -= (size_t)r;
    while (mh.msg_iovlen && (size_t)r >= mh.msg_iov->iov_len) {
      r -= (ssize_t)mh.msg_iov->iov_len;
      mh.msg_iov++;
      mh.msg_iovlen--;
    }
    if (mh.msg_iovlen) {
      mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + r;
      mh.msg_iov->iov_len -= (size_t)r;
    }
  }
  return 0;
}

/* ---- the echo baseline -------------------------------------------------- */
static void *echo_conn(void *arg) {
  int fd = (int)(intptr_t)arg;
  unsigned char h[48];
  size_t cap = 1 << 20;
  char *buf = malloc(cap);
  while (buf && full(fd, h, 48, 0) == 0) {
    uint32_t len;
    uint64_t rep;
    memcpy(&len, h, 4);
    memcpy(&rep, h + 40, 8);
    size_t need = len > rep ? len : rep;
    if (need > cap) {
      cap = need;
      free(buf);
      if (!(buf = malloc(cap))) break;
    }
    if (full(fd, buf, len, 0) < 0) break;
    uint32_t rl = (uint32_t)rep;
    memcpy(h, &rl, 4);
    if (sendv(fd, h, buf, rep) < 0) break;
  }
  free(buf);
  close(fd);
  return NULL;
}

static int echo_server(int port) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 16) < 0) {
    perror("bench_ps echo");
    return 1;
  }
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) continue;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_t t;
    pthread_create(&t, NULL, echo_conn, (void *)(intptr_t)fd);
    pthread_detach(t);
  }
}

static int echo_dial(const char *hp) {
  char host[64];
  int port;
  const char *c = strrchr(hp, ':');
  if (!c) return -1;
  snprintf(host, sizeof host, "%.*s", (int)(c - hp), hp);
  port = atoi(c + 1);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, host, &sa.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  for (int i = 0; i < 200 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0; i++) usleep(20000);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* One exchange: send bytes_out after a header, receive bytes_in after one. */
static int echo_once(int fd, char *buf, size_t out, size_t in) {
  unsigned char h[48] = {0};
  uint32_t len = (uint32_t)out;
  uint64_t rep = in;
  memcpy(h, &len, 4);
  memcpy(h + 40, &rep, 8);
  if (sendv(fd, h, buf, out) < 0) return -1;
  if (full(fd, h, 48, 0) < 0 || full(fd, buf, in, 0) < 0) return -1;
  return 0;
}

/* ---- figures ------------------------------------------------------------- */
typedef struct {
  const char *name;
  int sparse, push;
  size_t n; /* floats (dense) or keys (sparse) */
} figure;

enum { DIM = 16, ROUNDS = 3 };

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* One figure's line: kind (ps, tcp_echo, store, floor) and its times
 * against the echo's median (echo 0: this is the echo, ratio 1). */
static void report(const char *kind, const figure *g, const char *label, size_t moved, double *t,
                   int n, double echo) {
  double m = median(t, n);
  printf("name=%s_%s shards=%s n=%zu bytes=%zu iters=%d median_s=%.6g GBps=%.3f ", kind, g->name,
         label, g->n, moved, n, m, moved / m / 1e9);
  if (echo == 0)
    printf("ratio=1\n");
  else
    printf("ratio=%.2f\n", echo / m);
}

/* n random keys of the 1M-row table. */
static void random_keys(uint64_t *keys, size_t n) {
  for (size_t i = 0; i < n; i++) keys[i] = (uint64_t)rand() % 1000000;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc == 3 && !strcmp(argv[1], "ports")) {
    for (int i = 0; i < atoi(argv[2]); i++) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      socklen_t sl = sizeof sa;
      bind(fd, (struct sockaddr *)&sa, sizeof sa);
      getsockname(fd, (struct sockaddr *)&sa, &sl);
      printf("%d\n", ntohs(sa.sin_port));
      close(fd);
    }
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "echo")) return echo_server(atoi(argv[2]));
  const char *servers = NULL, *echo = NULL, *label = "?", *only = NULL;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--servers"))
      servers = argv[i + 1];
    else if (!strcmp(argv[i], "--echo"))
      echo = argv[i + 1];
    else if (!strcmp(argv[i], "--label"))
      label = argv[i + 1];
    else if (!strcmp(argv[i], "--only"))
      only = argv[i + 1];
  }
  if (argc < 2 || strcmp(argv[1], "run") || !servers || !echo) {
    fprintf(stderr, "usage: bench_ps ports N | echo PORT | run --servers H:P,... --echo H:P "
                    "--label L [--only NAMES]\n");
    return 2;
  }
  loom_ps_opts o = {.mode = LOOM_PS_ASYNC, .workers = 1, .rank_given = 1, .servers = servers};
  loom_ps_t *ps;
  int rc = loom_ps_connect(NULL, &o, &ps);
  if (rc != 0) {
    fprintf(stderr, "bench_ps: connect: %s: %s\n", loom_strerror(rc), loom_ps_errmsg(ps));
    return 1;
  }
  int efd = echo_dial(echo);
  const figure figs[] = {
      {"dense_pull", 0, 0, 1024},     {"dense_push", 0, 1, 1024},     {"dense_pull", 0, 0, 65536},
      {"dense_push", 0, 1, 65536},    {"dense_pull", 0, 0, 1 << 20},  {"dense_push", 0, 1, 1 << 20},
      {"dense_pull", 0, 0, 16 << 20}, {"dense_push", 0, 1, 16 << 20}, {"sparse_push", 1, 1, 4096},
      {"sparse_pull", 1, 0, 4096},
  };
  size_t maxb = (size_t)(16 << 20) * 4 + 4096 * (8 + 4 * DIM);
  float *buf = calloc(maxb / 4, 4);
  uint64_t *keys = malloc(4096 * sizeof *keys);
  loom_ps_opt sgd = LOOM_PS_OPT_SGD(1e-6f);
  loom_ps_var_t *table;
  rc = loom_ps_sparse(ps, "bench/emb", DIM, NULL, &sgd, &table);
  /* The same table in this process, for the store_ figures: the rows a
   * single shard holds, made by the shard's code. */
  ps_state st;
  ps_state_init(&st, 0, 1, 1 << 20, UINT64_MAX);
  ps_decl sd = {.kind = PS_SPARSE, .ndim = 1, .count = DIM, .shape = {DIM}, .opt = sgd};
  snprintf(sd.name, sizeof sd.name, "bench/emb");
  uint32_t sid = 0;
  char serr[256];
  if (rc == 0 && ps_state_declare(&st, &sd, &sid, serr, sizeof serr) < 0) {
    fprintf(stderr, "bench_ps: the in-process store: %s\n", serr);
    rc = -1;
  }
  /* every row of both tables exists before anything is timed: sparse
   * figures are lookups in a 1M-row table (64 MiB of rows), not inserts */
  for (uint64_t b = 0; rc == 0 && b < 1000000; b += 4096) {
    for (size_t i = 0; i < 4096; i++) keys[i] = (b + i) % 1000000;
    rc = loom_ps_sparse_push(ps, table, keys, 4096, buf);
    if (rc == 0)
      rc = ps_sparse_apply(&st, st.vars[sid], (const unsigned char *)keys, buf, 4096, true);
  }
  /* The floor_ figures' plain array of rows. */
  size_t abytes = (size_t)1000000 * DIM * sizeof(float);
  abytes = (abytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
  float *arr = rc == 0 ? aligned_alloc(2u << 20, abytes) : NULL;
  if (arr) {
    madvise(arr, abytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < abytes / sizeof(float); i++) arr[i] = (float)(i % 1000);
  } else if (rc == 0) {
    rc = -1;
  }
  for (size_t f = 0; rc == 0 && f < sizeof figs / sizeof figs[0]; f++) {
    const figure *g = &figs[f];
    if (only && !strstr(only, g->name)) continue;
    loom_ps_var_t *v = table;
    if (!g->sparse) {
      char name[64];
      snprintf(name, sizeof name, "bench/w%zu", g->n);
      rc = loom_ps_dense(ps, name, &g->n, 1, NULL, &sgd, &v);
    }
    size_t bytes = g->sparse ? g->n * 4 * DIM : g->n * 4;
    size_t out = g->push ? bytes : 0, in = g->push ? 0 : bytes;
    if (g->sparse) out += g->n * 8; /* the keys */
    /* iterations: ~0.3 s of each per round, at least 5, at most 400 */
    double t0 = now();
    for (int w = 0; w < 3; w++) {
      if (g->sparse) random_keys(keys, g->n);
      if (g->sparse)
        rc = g->push ? loom_ps_sparse_push(ps, v, keys, g->n, buf)
                     : loom_ps_sparse_pull(ps, v, keys, g->n, buf);
      else
        rc = g->push ? loom_ps_push(ps, v, buf) : loom_ps_pull(ps, v, buf);
    }
    int iters = (int)(0.3 / ((now() - t0) / 3 + 1e-9));
    if (iters < 5) iters = 5;
    if (iters > 400) iters = 400;
    double *tp = malloc((size_t)iters * ROUNDS * sizeof *tp),
           *te = malloc((size_t)iters * ROUNDS * sizeof *te),
           *ts = malloc((size_t)iters * ROUNDS * sizeof *ts),
           *tf = malloc((size_t)iters * ROUNDS * sizeof *tf);
    int np = 0, ne = 0, ns = 0, nf = 0;
    for (int r = 0; rc == 0 && r < ROUNDS; r++) {
      for (int i = 0; i < iters; i++) {
        double a = now();
        if (echo_once(efd, (char *)buf, out, in) < 0) rc = -1;
        te[ne++] = now() - a;
      }
      for (int i = 0; rc == 0 && i < iters; i++) {
        if (g->sparse) random_keys(keys, g->n);
        double a = now();
        if (g->sparse)
          rc = g->push ? loom_ps_sparse_push(ps, v, keys, g->n, buf)
                       : loom_ps_sparse_pull(ps, v, keys, g->n, buf);
        else
          rc = g->push ? loom_ps_push(ps, v, buf) : loom_ps_pull(ps, v, buf);
        tp[np++] = now() - a;
      }
      for (int i = 0; rc == 0 && g->sparse && i < iters; i++) {
        random_keys(keys, g->n);
        double a = now();
        if (g->push)
          rc = ps_sparse_apply(&st, st.vars[sid], (const unsigned char *)keys, buf, g->n, true);
        else
          ps_sparse_read(&st, st.vars[sid], (const unsigned char *)keys, g->n, buf);
        ts[ns++] = now() - a;
      }
      for (int i = 0; rc == 0 && g->sparse && i < iters; i++) {
        random_keys(keys, g->n);
        double a = now();
        for (size_t k = 0; k < g->n; k++) {
          float *row = arr + keys[k] * DIM, *cell = buf + k * DIM;
          if (g->push)
            for (int j = 0; j < DIM; j++) row[j] -= 1e-6f * cell[j];
          else
            memcpy(cell, row, DIM * sizeof(float));
        }
        tf[nf++] = now() - a;
      }
    }
    if (rc == 0) {
      double me = median(te, ne);
      size_t moved = g->sparse ? out + in : bytes;
      report("ps", g, label, moved, tp, np, me);
      report("tcp_echo", g, label, moved, te, ne, 0);
      if (ns) report("store", g, label, moved, ts, ns, me);
      if (nf) report("floor", g, label, moved, tf, nf, me);
      fflush(stdout);
    }
    free(tp);
    free(te);
    free(ts);
    free(tf);
  }
  if (rc != 0) fprintf(stderr, "bench_ps: %s: %s\n", loom_strerror(rc), loom_ps_errmsg(ps));
  loom_ps_close(ps);
  ps_state_free(&st);
  free(arr);
  free(buf);
  free(keys);
  close(efd);
  return rc != 0;
}
