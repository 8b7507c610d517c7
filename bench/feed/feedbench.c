/* feedbench.c: the data feed's throughput against the ceiling.
 *
 *   feedbench direct lines|fixed:N FILE...   a plain C loop over the files:
 *       read() 1 MiB at a time, find each record (memchr for lines), touch
 *       it. What a program reading its own files does; the ceiling.
 *   feedbench feed [BATCH]                   inside a loom job: read the
 *       job's feed to the end (loom_feed_next, or next_batch of BATCH),
 *       touching each record the same way.
 *
 * Both print "records=N bytes=B seconds=S cpu=C sum=X" (cpu: CPU seconds of
 * every thread of the process, the feed's reader included; sum: a checksum of the
 * records, so the work cannot be skipped and both read the same data).
 * LOOM_BENCH_WORK=N adds N iterations of compute per record (a model's
 * step, say), to measure how much of the reading the feed hides. */
#include <loom.h>
#include <loom/feed.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* CPU seconds of this process so far, every thread (the feed's reader too). */
static double cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Compute to do per record (LOOM_BENCH_WORK: loop iterations of a
 * dependent multiply-add, about 1 ns each), so that reading can overlap
 * with something. */
static long work_iters;

/* The per-record work: first and last byte and the size, then the compute. */
static inline unsigned long touch(const unsigned char *p, size_t n) {
  unsigned long x = n ? (unsigned long)p[0] + p[n - 1] + n : 0;
  for (long i = 0; i < work_iters; i++) x = x * 6364136223846793005ul + 1442695040888963407ul;
  return x;
}

static int direct(const char *format, int nfiles, char **files) {
  size_t rec = 0;
  if (!strncmp(format, "fixed:", 6))
    rec = (size_t)atol(format + 6);
  else if (strcmp(format, "lines"))
    return 2;
  size_t cap = 1 << 20;
  if (rec > cap) cap = rec;
  unsigned char *buf = malloc(cap + rec);
  unsigned long long records = 0, bytes = 0;
  unsigned long sum = 0;
  double t0 = now(), c0 = cpu();
  for (int i = 0; i < nfiles; i++) {
    int fd = open(files[i], O_RDONLY);
    if (fd < 0) {
      perror(files[i]);
      return 1;
    }
    size_t have = 0; /* bytes carried over: a record's start */
    for (;;) {
      ssize_t n = read(fd, buf + have, cap - have);
      if (n < 0) return 1;
      size_t len = have + (size_t)n, p = 0;
      if (rec) {
        for (; p + rec <= len; p += rec) sum += touch(buf + p, rec), records++;
      } else {
        for (;;) {
          unsigned char *nl = memchr(buf + p, '\n', len - p);
          if (!nl) break;
          size_t l = (size_t)(nl - (buf + p));
          sum += touch(buf + p, l);
          records++;
          p += l + 1;
        }
        if (n == 0 && p < len) sum += touch(buf + p, len - p), records++, p = len;
      }
      bytes += (size_t)n;
      memmove(buf, buf + p, len - p);
      have = len - p;
      if (n == 0) break;
    }
    close(fd);
  }
  double t = now() - t0;
  printf("records=%llu bytes=%llu seconds=%.6f cpu=%.6f sum=%lu\n", records, bytes, t, cpu() - c0,
         sum);
  free(buf);
  return 0;
}

static int feed(size_t batch) {
  loom_t *l;
  loom_feed_t *f;
  int rc = loom_init(&l);
  if (rc) return fprintf(stderr, "feedbench: %s\n", loom_strerror(rc)), 1;
  double t0 = now(), c0 = cpu();
  if ((rc = loom_feed_open(l, &f))) return fprintf(stderr, "feedbench: %s\n", loom_errmsg(l)), 1;
  unsigned long sum = 0;
  loom_record recs[1024];
  if (batch > 1024) batch = 1024;
  for (;;) {
    size_t n = 1;
    rc = batch ? loom_feed_next_batch(f, recs, batch, &n) : loom_feed_next(f, recs);
    if (rc == LOOM_FEED_END) break;
    if (rc == LOOM_FEED_EPOCH) continue;
    if (rc < 0) return fprintf(stderr, "feedbench: %s\n", loom_errmsg(l)), 1;
    for (size_t i = 0; i < n; i++) sum += touch(recs[i].data, recs[i].size);
  }
  double t = now() - t0, c = cpu() - c0;
  loom_feed_stats st;
  loom_feed_get_stats(f, &st);
  printf("records=%llu bytes=%llu seconds=%.6f cpu=%.6f sum=%lu wait_s=%.4f\n",
         (unsigned long long)st.records, (unsigned long long)st.bytes, t, c, sum,
         (double)st.wait_ns / 1e9);
  loom_feed_close(f);
  loom_finish(l);
  return 0;
}

int main(int argc, char **argv) {
  const char *w = getenv("LOOM_BENCH_WORK");
  work_iters = w ? atol(w) : 0;
  if (argc >= 4 && !strcmp(argv[1], "direct")) return direct(argv[2], argc - 3, argv + 3);
  if (argc >= 2 && !strcmp(argv[1], "feed")) return feed(argc > 2 ? (size_t)atol(argv[2]) : 0);
  fprintf(stderr, "usage: feedbench direct lines|fixed:N FILE... | feedbench feed [BATCH]\n");
  return 2;
}
