/* feedprobe.c: reads the job's data feed to the end and, when the spec has
 * feed.output, writes "out:<record>\n" for every record. Prints one line
 * "FEEDOK task=... records=... bytes=... splits=... stale=... epochs=..."
 * at the end. Knobs for tests and demos:
 *
 *   --batch N           read with loom_feed_next_batch, N at a time
 *   --read N            read with loom_feed_read_offsets, N at a time, each
 *                       record framed by its 4-byte length and a '\n', into
 *                       a buffer that starts at 16 bytes and doubles on
 *                       LOOM_ERANGE; checks the offsets and frames (exit 6
 *                       if wrong)
 *   --print             print every record as "REC <epoch> <record>"
 *   --sum               add " sum=S" to FEEDOK: S, every byte of every
 *                       record added up (a checksum across tasks)
 *   --sleep-us N        sleep N us a record (a slow task)
 *   --die-after K --marker PATH
 *                       if PATH does not exist: create it, and SIGKILL
 *                       this process after K records (mid-split)
 *   --fail-after K      on attempt 0, exit 3 after K records
 *   --pause-after K --go PATH
 *                       after K records write our pid to PATH.pid and wait
 *                       (up to 60 s) for PATH to exist
 *   --stop-after K      close the feed after K records (gives back the rest)
 */
#include <loom.h>
#include <loom/feed.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static long arg_long(char **argv, int *i, int argc) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "feedprobe: %s needs a value\n", argv[*i]);
    exit(2);
  }
  return atol(argv[++*i]);
}

/* What loom_feed_read_offsets promises for a batch of got records read
 * framed by a 4-byte length and a '\n': 1..max records, rising offsets from
 * 0 within cap, each frame its record's length, then the record, then a
 * '\n'. Prints what is wrong and returns 1. */
static int read_check(const char *buf, size_t cap, const size_t *offs, size_t got, size_t max) {
  if (got < 1 || got > max || offs[0] != 0 || offs[got] > cap) {
    fprintf(stderr, "feedprobe: read_offsets gave %zu records (max %zu), offs[0]=%zu, end %zu\n",
            got, max, offs[0], offs[got]);
    return 1;
  }
  for (size_t k = 0; k < got; k++) {
    const unsigned char *p = (const unsigned char *)buf + offs[k];
    size_t len = p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
    if (offs[k + 1] < offs[k] + 5 || len != offs[k + 1] - offs[k] - 5 ||
        buf[offs[k + 1] - 1] != '\n') {
      fprintf(stderr, "feedprobe: read_offsets: record %zu at [%zu, %zu) framed wrong\n", k,
              offs[k], offs[k + 1]);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  long batch = 0, readn = 0, sleep_us = 0, die_after = -1, fail_after = -1, pause_after = -1,
       stop_after = -1;
  const char *marker = NULL, *go = NULL;
  int print = 0, sum = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--batch"))
      batch = arg_long(argv, &i, argc);
    else if (!strcmp(argv[i], "--read"))
      readn = arg_long(argv, &i, argc);
    else if (!strcmp(argv[i], "--sum"))
      sum = 1;
    else if (!strcmp(argv[i], "--print"))
      print = 1;
    else if (!strcmp(argv[i], "--sleep-us"))
      sleep_us = arg_long(argv, &i, argc);
    else if (!strcmp(argv[i], "--die-after"))
      die_after = arg_long(argv, &i, argc);
    else if (!strcmp(argv[i], "--fail-after"))
      fail_after = arg_long(argv, &i, argc);
    else if (!strcmp(argv[i], "--pause-after"))
      pause_after = arg_long(argv, &i, argc);
    else if (!strcmp(argv[i], "--stop-after"))
      stop_after = arg_long(argv, &i, argc);
    else if (!strcmp(argv[i], "--marker") && i + 1 < argc)
      marker = argv[++i];
    else if (!strcmp(argv[i], "--go") && i + 1 < argc)
      go = argv[++i];
    else {
      fprintf(stderr, "feedprobe: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  struct stat st;
  if (die_after >= 0 && marker) {
    if (stat(marker, &st) == 0)
      die_after = -1; /* died once already */
    else
      fclose(fopen(marker, "w"));
  }
  const char *att = getenv("LOOM_ATTEMPT");
  if (fail_after >= 0 && att && strcmp(att, "0")) fail_after = -1;

  loom_t *l;
  int rc = loom_init(&l);
  if (rc) {
    fprintf(stderr, "feedprobe: loom_init: %s\n", loom_strerror(rc));
    return 1;
  }
  loom_feed_t *f;
  if ((rc = loom_feed_open(l, &f))) {
    fprintf(stderr, "feedprobe: %s: %s\n", loom_err_name(rc), loom_errmsg(l));
    loom_finish(l);
    return 1;
  }
  long n = 0;
  unsigned long long total = 0;
  int epochs_seen = 1;
  loom_record recs[256];
  if (batch > 256) batch = 256;
  if (readn > 256) readn = 256;
  if (readn > 0) { /* frame bits it does not know, a byte without FRAME_SEP: refused */
    size_t o[2], k0;
    char b1[8];
    int bad1 = loom_feed_read_offsets(f, b1, sizeof b1, o, 1, 0x400, &k0);
    int bad2 = loom_feed_read_offsets(f, b1, sizeof b1, o, 1, '\n', &k0);
    if (bad1 != LOOM_EINVAL || bad2 != LOOM_EINVAL) {
      fprintf(stderr, "feedprobe: read_offsets took bad frames: %d %d\n", bad1, bad2);
      return 6;
    }
  }
  char *line = NULL, *rbuf = NULL;
  size_t line_cap = 0, rcap = 16, offs[257];
  for (;;) {
    size_t got = 1;
    if (readn > 0) {
      if (!rbuf && !(rbuf = malloc(rcap))) return 4;
      unsigned frame = LOOM_FEED_FRAME_LEN32 | LOOM_FEED_FRAME_SEP | '\n';
      while ((rc = loom_feed_read_offsets(f, rbuf, rcap, offs, (size_t)readn, frame, &got)) ==
             LOOM_ERANGE) {
        size_t need = offs[0];
        while (rcap < need) rcap *= 2;
        free(rbuf);
        if (!(rbuf = malloc(rcap))) return 4;
      }
      if (rc == 0 && read_check(rbuf, rcap, offs, got, (size_t)readn)) return 6;
      for (size_t k = 0; rc == 0 && k < got; k++) {
        recs[k].data = rbuf + offs[k] + 4;
        recs[k].size = offs[k + 1] - offs[k] - 5;
      }
    } else if (batch > 0) {
      rc = loom_feed_next_batch(f, recs, (size_t)batch, &got);
    } else {
      rc = loom_feed_next(f, &recs[0]);
    }
    if (rc == LOOM_FEED_END) break;
    if (rc == LOOM_FEED_EPOCH) {
      epochs_seen++;
      continue;
    }
    if (rc < 0) {
      fprintf(stderr, "feedprobe: %s: %s\n", loom_err_name(rc), loom_errmsg(l));
      loom_feed_close(f);
      loom_finish(l);
      return 4;
    }
    for (size_t k = 0; k < got; k++) {
      const loom_record *r = &recs[k];
      for (size_t b = 0; sum && b < r->size; b++) total += ((const unsigned char *)r->data)[b];
      if (print) {
        printf("REC %d %.*s\n", loom_feed_epoch(f), (int)r->size, (const char *)r->data);
      }
      if (line_cap < r->size + 6) {
        line_cap = r->size + 64;
        line = realloc(line, line_cap);
      }
      memcpy(line, "out:", 4);
      memcpy(line + 4, r->data, r->size);
      line[4 + r->size] = '\n';
      rc = loom_feed_write(f, line, r->size + 5);
      if (rc < 0 && rc != LOOM_ESTATE) {
        fprintf(stderr, "feedprobe: write: %s\n", loom_errmsg(l));
        return 4;
      }
      n++;
      if (sleep_us) usleep((useconds_t)sleep_us);
      if (n == die_after) {
        fflush(stdout);
        raise(SIGKILL);
      }
      if (n == fail_after) {
        fprintf(stderr, "feedprobe: failing on purpose after %ld records\n", n);
        fflush(stdout);
        _exit(3);
      }
      if (n == pause_after && go) {
        char p[4096];
        snprintf(p, sizeof p, "%s.pid", go);
        FILE *pf = fopen(p, "w");
        fprintf(pf, "%d\n", (int)getpid());
        fclose(pf);
        for (int t = 0; t < 6000 && stat(go, &st) != 0; t++) usleep(10000);
      }
    }
    if (stop_after >= 0 && n >= stop_after) break;
  }
  loom_feed_stats s;
  loom_feed_get_stats(f, &s);
  printf("FEEDOK task=%s records=%llu bytes=%llu splits=%llu stale=%llu epochs=%d wait_ms=%.1f",
         getenv("LOOM_TASK"), (unsigned long long)s.records, (unsigned long long)s.bytes,
         (unsigned long long)s.splits, (unsigned long long)s.stale, epochs_seen,
         (double)s.wait_ns / 1e6);
  if (sum) printf(" sum=%llu", total);
  printf("\n");
  free(line);
  free(rbuf);
  rc = loom_feed_close(f);
  loom_finish(l);
  return rc < 0 ? 5 : 0;
}
