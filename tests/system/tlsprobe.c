/* tlsprobe.c: a task that sends a marker over every kind of loom link, for
 * the capture test (test_tls.py): a log line, a KV value (to the
 * coordinator and back), a broadcast over the collectives (64 KiB of the
 * marker from rank 0), a gradient pushed to the parameter server (the
 * marker's bytes as floats; with "ps" as argument), and the feed's
 * records written back as output (with "feed"). Checks what comes back and
 * prints "TLSOK rank=R" at the end; exits non-zero with the reason
 * otherwise; "slow" takes 1 ms a record, so that every task gets splits.
 *   tlsprobe MARKER [ps] [feed] [slow] */
#include <loom.h>
#include <loom/comm.h>
#include <loom/feed.h>
#include <loom/ps.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "tlsprobe: %s:%d: ", __FILE__, __LINE__);                                    \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* fills buf with "<mark>-<what>-" over and over */
static void fill(char *buf, size_t n, const char *mark, const char *what) {
  char unit[128];
  int u = snprintf(unit, sizeof unit, "%s-%s-", mark, what);
  for (size_t i = 0; i < n; i++) buf[i] = unit[i % (size_t)u];
}

int main(int argc, char **argv) {
  CHECK(argc >= 2, "usage: tlsprobe MARKER [ps] [feed]");
  const char *mark = argv[1];
  int want_ps = 0, want_feed = 0, slow = 0;
  for (int i = 2; i < argc; i++) {
    want_ps |= !strcmp(argv[i], "ps");
    want_feed |= !strcmp(argv[i], "feed");
    slow |= !strcmp(argv[i], "slow");
  }
  loom_t *l;
  int rc = loom_init(&l);
  CHECK(rc == 0, "loom_init: %s", loom_strerror(rc));
  int r = loom_rank(l), n = loom_world_size(l);
  printf("LOGLINE %s-log-%d\n", mark, r);
  fflush(stdout);

  char key[64], val[128];
  snprintf(key, sizeof key, "tlsprobe/%d", r);
  snprintf(val, sizeof val, "%s-kv-%d", mark, r);
  CHECK(loom_kv_set(l, key, val, strlen(val)) == 0, "kv_set: %s", loom_errmsg(l));
  for (int p = 0; p < n; p++) {
    void *v;
    size_t len;
    snprintf(key, sizeof key, "tlsprobe/%d", p);
    snprintf(val, sizeof val, "%s-kv-%d", mark, p);
    CHECK(loom_kv_get(l, key, 30000, &v, &len) == 0, "kv_get: %s", loom_errmsg(l));
    CHECK(len == strlen(val) && !memcmp(v, val, len), "kv %s: %.*s", key, (int)len, (char *)v);
    free(v);
  }

  enum { B = 64 << 10 };
  static char buf[B], want[B];
  fill(want, B, mark, "grad");
  if (r == 0) memcpy(buf, want, B);
  CHECK(loom_broadcast(l, buf, B, 0) == 0, "broadcast: %s", loom_errmsg(l));
  CHECK(!memcmp(buf, want, B), "broadcast: wrong bytes");
  static float x[4096], sum[4096];
  for (int i = 0; i < 4096; i++) x[i] = (float)(r + 1);
  CHECK(loom_allreduce(l, x, sum, 4096, LOOM_F32, LOOM_SUM) == 0, "allreduce: %s", loom_errmsg(l));
  CHECK(sum[7] == (float)(n * (n + 1) / 2), "allreduce: %f", sum[7]);

  if (want_ps) {
    loom_ps_t *ps;
    CHECK(loom_ps_connect(l, NULL, &ps) == 0, "ps_connect: %s", loom_errmsg(l));
    size_t shape[1] = {4096};
    loom_ps_init init = {.kind = LOOM_PS_ZEROS};
    loom_ps_opt opt = LOOM_PS_OPT_SGD(1e-12f);
    loom_ps_var_t *w;
    CHECK(loom_ps_dense(ps, "w", shape, 1, &init, &opt, &w) == 0, "ps_dense: %s",
          loom_ps_errmsg(ps));
    static float g[4096], got[4096];
    fill((char *)g, sizeof g, mark, "push"); /* printable bytes: finite floats */
    CHECK(loom_ps_push(ps, w, g) == 0, "ps_push: %s", loom_ps_errmsg(ps));
    CHECK(loom_ps_pull(ps, w, got) == 0, "ps_pull: %s", loom_ps_errmsg(ps));
    CHECK(isfinite(got[0]) && isfinite(got[4095]), "ps values not finite");
    loom_ps_close(ps);
  }

  if (want_feed) {
    loom_feed_t *f;
    CHECK(loom_feed_open(l, &f) == 0, "feed_open: %s", loom_errmsg(l));
    long recs = 0;
    for (;;) {
      loom_record rec;
      rc = loom_feed_next(f, &rec);
      if (rc == LOOM_FEED_END) break;
      if (rc == LOOM_FEED_EPOCH) continue;
      CHECK(rc == 0, "feed_next: %s", loom_errmsg(l));
      char line[512];
      int k = snprintf(line, sizeof line, "%.*s-out\n", (int)rec.size, (const char *)rec.data);
      CHECK(k > 0 && (size_t)k < sizeof line, "record too long");
      CHECK(loom_feed_write(f, line, (size_t)k) == 0, "feed_write: %s", loom_errmsg(l));
      recs++;
      if (slow) usleep(1000);
    }
    CHECK(loom_feed_close(f) == 0, "feed_close: %s", loom_errmsg(l));
    printf("FEEDRECS rank=%d %ld\n", r, recs);
  }
  printf("TLSOK rank=%d\n", r);
  fflush(stdout);
  loom_finish(l);
  return 0;
}
