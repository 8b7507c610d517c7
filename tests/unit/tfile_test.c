/* tfile_test.c: the TFile reader and YARN's aggregated log format
 * (src/hadoop/tfile.c). Hadoop's VLong against its documented encodings
 * and a writer's round trip over every length class; aggregated log files
 * built here the way Hadoop's writer lays them out (BCFile blocks,
 * "none" and "gz", values in one chunk and in several, records over
 * several data blocks) read back container by container; every
 * truncation and a table of corruptions refused with a message; and the
 * real file a Hadoop 3 NodeManager wrote (the fuzz seed
 * tests/fuzz/corpus/tfile/) read as `yarn logs` printed it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "hadoop/tfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- a writer, as Hadoop's (Utils.writeVLong, BCFile.Writer) ---------- */
typedef struct {
  uint8_t *p;
  size_t n, cap;
} wbuf;

static void put(wbuf *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  if (n) memcpy(b->p + b->n, d, n);
  b->n += n;
}
static void put8(wbuf *b, int v) {
  uint8_t c = (uint8_t)v;
  put(b, &c, 1);
}
static void putbe(wbuf *b, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; i--) put8(b, (int)(v >> (8 * i)));
}

static void put_vlong(wbuf *b, int64_t n) {
  if (n < 128 && n >= -32) {
    put8(b, (int)n);
    return;
  }
  uint64_t un = (uint64_t)(n < 0 ? ~n : n);
  int bits = un ? 64 - __builtin_clzll(un) : 0;
  int len = bits / 8 + 1;
  int fb = (int)(n >> ((len - 1) * 8));
  switch (len) {
  case 1:
    fb >>= 8; /* fall through */
  case 2:
    if (fb < 20 && fb >= -20) {
      put8(b, fb - 52), put8(b, (int)n);
      return;
    }
    fb >>= 8; /* fall through */
  case 3:
    if (fb < 16 && fb >= -16) {
      put8(b, fb - 88), putbe(b, (uint64_t)n, 2);
      return;
    }
    fb >>= 8; /* fall through */
  case 4:
    if (fb < 8 && fb >= -8) {
      put8(b, fb - 112), putbe(b, (uint64_t)n, 3);
      return;
    }
    put8(b, len - 129), putbe(b, (uint64_t)n, 4);
    return;
  default:
    put8(b, len - 129), putbe(b, (uint64_t)n, len);
  }
}
static void put_string(wbuf *b, const char *s) {
  put_vlong(b, (int64_t)strlen(s));
  put(b, s, strlen(s));
}
static void put_utf(wbuf *b, const char *s) {
  putbe(b, strlen(s), 2);
  put(b, s, strlen(s));
}

/* A record: the key (writeUTF) and the value in chunks of at most chunk
 * bytes (0: one chunk of known length). */
static void put_record(wbuf *b, const char *key, const wbuf *val, size_t chunk) {
  wbuf k = {0};
  put_utf(&k, key);
  put_vlong(b, (int64_t)k.n);
  put(b, k.p, k.n);
  free(k.p);
  size_t at = 0;
  if (chunk)
    for (; val->n - at > chunk; at += chunk) {
      put_vlong(b, -(int64_t)chunk);
      put(b, val->p + at, chunk);
    }
  put_vlong(b, (int64_t)(val->n - at));
  put(b, val->p + at, val->n - at);
}

/* Appends block raw to file, compressed with algo; its region into r. */
static void put_block(wbuf *file, const wbuf *raw, const char *algo, int64_t r[3]) {
  r[0] = (int64_t)file->n, r[2] = (int64_t)raw->n;
  if (!strcmp(algo, "gz")) {
    uLongf zn = compressBound(raw->n);
    uint8_t *z = malloc(zn);
    assert_int_equal(compress(z, &zn, raw->p, raw->n), Z_OK);
    put(file, z, zn);
    free(z);
    r[1] = (int64_t)zn;
  } else {
    put(file, raw->p, raw->n);
    r[1] = (int64_t)raw->n;
  }
}

/* An aggregated log file of blocks (each a wbuf of records), with algo. */
static wbuf make_file(wbuf *blocks, int nblocks, const char *algo) {
  wbuf f = {0};
  int64_t(*regs)[3] = calloc((size_t)nblocks + 1, sizeof *regs);
  for (int i = 0; i < nblocks; i++) put_block(&f, &blocks[i], algo, regs[i]);
  wbuf idx = {0};
  put_string(&idx, algo);
  put_vlong(&idx, nblocks);
  for (int i = 0; i < nblocks; i++)
    for (int j = 0; j < 3; j++) put_vlong(&idx, regs[i][j]);
  int64_t ir[3];
  put_block(&f, &idx, algo, ir);
  wbuf tmeta = {0}; /* TFile.meta, which the reader skips */
  putbe(&tmeta, 1, 2), putbe(&tmeta, 0, 2), put_vlong(&tmeta, 4), put_string(&tmeta, "");
  int64_t mr[3];
  put_block(&f, &tmeta, "none", mr);
  uint64_t metaoff = f.n;
  put_vlong(&f, 2);
  put_string(&f, "data:BCFile.index"), put_string(&f, algo);
  for (int j = 0; j < 3; j++) put_vlong(&f, ir[j]);
  put_string(&f, "data:TFile.meta"), put_string(&f, "none");
  for (int j = 0; j < 3; j++) put_vlong(&f, mr[j]);
  putbe(&f, metaoff, 8);
  putbe(&f, 1, 2), putbe(&f, 0, 2);
  static const uint8_t magic[16] = {0xd1, 0x11, 0xd3, 0x68, 0x91, 0xb5, 0xd7, 0xb6,
                                    0x39, 0xdf, 0x41, 0x40, 0x92, 0xba, 0xe1, 0x50};
  put(&f, magic, 16);
  free(idx.p), free(tmeta.p), free(regs);
  return f;
}

/* A container's value: its logs, name and contents each. */
static wbuf logs_value(const char *const *kv) {
  wbuf v = {0};
  for (int i = 0; kv[i]; i += 2) {
    char n[32];
    snprintf(n, sizeof n, "%zu", strlen(kv[i + 1]));
    put_utf(&v, kv[i]), put_utf(&v, n);
    put(&v, kv[i + 1], strlen(kv[i + 1]));
  }
  return v;
}

/* ---- reading back ------------------------------------------------------ */
typedef struct {
  char text[1 << 16]; /* "container/type=contents|" for each */
  size_t n;
  int stop_after; /* > 0: return 7 after that many */
} seen;

static int on_log(void *arg, const char *container, const char *type, const uint8_t *data,
                  size_t len) {
  seen *s = arg;
  int w = snprintf(s->text + s->n, sizeof s->text - s->n, "%s/%s=%.*s|", container, type, (int)len,
                   (const char *)data);
  assert_true(w > 0 && (size_t)w < sizeof s->text - s->n);
  s->n += (size_t)w;
  if (s->stop_after > 0 && --s->stop_after == 0) return 7;
  return 0;
}

static void test_vlong(void **state) {
  (void)state;
  /* Hadoop's documented encodings (Utils.writeVLong's comment) */
  static const struct {
    int64_t v;
    uint8_t b[9];
    size_t n;
  } known[] = {
      {0, {0x00}, 1},
      {127, {0x7f}, 1},
      {-32, {0xe0}, 1},
      {128, {0xcc, 0x80}, 2},                         /* 128/256 - 52 = -52 */
      {-33, {0xcb, 0xdf}, 2},                         /* -1 - 52 = -53 */
      {5120, {0xa8, 0x14, 0x00}, 3},                  /* 20*256: 0 - 88 = -88 */
      {1048576, {0x90, 0x10, 0x00, 0x00}, 4},         /* 0 - 112 */
      {INT32_MAX, {0x83, 0x7f, 0xff, 0xff, 0xff}, 5}, /* 4 - 129: 4 bytes after */
      {INT64_MAX, {0x87, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 9},
  };
  for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
    wbuf b = {0};
    put_vlong(&b, known[i].v);
    int64_t v;
    size_t used;
    assert_int_equal(tfile_vlong(known[i].b, known[i].b + known[i].n, &v, &used), 0);
    assert_int_equal(v, known[i].v);
    assert_int_equal(used, known[i].n);
    /* the writer here is Hadoop's: same bytes */
    assert_int_equal(b.n, known[i].n);
    assert_memory_equal(b.p, known[i].b, b.n);
    /* one byte short: refused */
    assert_int_equal(tfile_vlong(known[i].b, known[i].b + known[i].n - 1, &v, &used), LOOM_EPROTO);
    free(b.p);
  }
  /* a round trip over every length class, both signs */
  for (int sh = 0; sh < 63; sh++)
    for (int d = -1; d <= 1; d++)
      for (int sign = -1; sign <= 1; sign += 2) {
        int64_t x = sign * (int64_t)((1ull << sh) + (uint64_t)d);
        wbuf b = {0};
        put_vlong(&b, x);
        int64_t v;
        size_t used;
        assert_int_equal(tfile_vlong(b.p, b.p + b.n, &v, &used), 0);
        assert_int_equal(v, x);
        assert_int_equal(used, b.n);
        free(b.p);
      }
  /* a first byte of -128..-126 would name 1..3 bytes after: no form */
  uint8_t bad[9] = {0x80};
  int64_t v;
  size_t used;
  assert_int_equal(tfile_vlong(bad, bad + 9, &v, &used), LOOM_EPROTO);
}

static const char *const C1[] = {"stdout",
                                 "OUT-chief:0\n",
                                 "stderr",
                                 "ERR-chief:0\n",
                                 "launch_container.sh",
                                 "export LOOM_TASK=\"chief:0\"\n",
                                 NULL};
static const char *const C2[] = {"stderr", "", "stdout", "a\nb\nc\n", NULL};
#define WANT                                                                                       \
  "container_1_0001_01_000002/stdout=OUT-chief:0\n|container_1_0001_01_000002/stderr=ERR-"         \
  "chief:0\n|container_1_0001_01_000002/launch_container.sh=export LOOM_TASK=\"chief:0\"\n|"       \
  "container_1_0001_01_000003/stderr=|container_1_0001_01_000003/stdout=a\nb\nc\n|"

/* Blocks: [VERSION, ACL, OWNER, c1] [c2] (two data blocks), c1's value in
 * chunks of chunk bytes. */
static wbuf sample(const char *algo, size_t chunk) {
  wbuf blocks[2] = {{0}, {0}}, v = {0};
  putbe(&v, 1, 4);
  put_record(&blocks[0], "VERSION", &v, 0);
  v.n = 0;
  putbe(&v, 1, 4), put_utf(&v, "VIEW_APP"), put_utf(&v, "alice ");
  put_record(&blocks[0], "APPLICATION_ACL", &v, 0);
  v.n = 0;
  put_utf(&v, "alice");
  put_record(&blocks[0], "APPLICATION_OWNER", &v, 0);
  free(v.p);
  wbuf c1 = logs_value(C1), c2 = logs_value(C2);
  put_record(&blocks[0], "container_1_0001_01_000002", &c1, chunk);
  put_record(&blocks[1], "container_1_0001_01_000003", &c2, 0);
  wbuf f = make_file(blocks, 2, algo);
  free(c1.p), free(c2.p), free(blocks[0].p), free(blocks[1].p);
  return f;
}

static void test_reads_back(void **state) {
  (void)state;
  const char *algos[] = {"none", "gz"};
  size_t chunks[] = {0, 1, 5, 1000};
  for (int a = 0; a < 2; a++)
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
      wbuf f = sample(algos[a], chunks[c]);
      seen s = {0};
      char owner[64], err[256] = "";
      assert_int_equal(tfile_logs_each(f.p, f.n, on_log, &s, owner, sizeof owner, err, sizeof err),
                       0);
      assert_string_equal(owner, "alice");
      assert_string_equal(s.text, WANT);
      /* a nonzero return stops the walk and is returned */
      seen t = {.stop_after = 2};
      assert_int_equal(tfile_logs_each(f.p, f.n, on_log, &t, NULL, 0, err, sizeof err), 7);
      assert_int_equal(strchr(strchr(t.text, '|') + 1, '|')[1], 0);
      free(f.p);
    }
}

static void test_every_truncation_and_corruption_refused(void **state) {
  (void)state;
  const char *algos[] = {"none", "gz"};
  for (int a = 0; a < 2; a++) {
    wbuf f = sample(algos[a], 3);
    for (size_t n = 0; n < f.n; n++) {
      uint8_t *cut = malloc(n ? n : 1); /* exact size: ASan sees an overread */
      memcpy(cut, f.p, n);
      seen s = {0};
      char err[256] = "";
      int rc = tfile_logs_each(cut, n, on_log, &s, NULL, 0, err, sizeof err);
      assert_true(rc < 0);
      assert_true(err[0] != 0);
      free(cut);
    }
    /* every byte flipped: a clean error or a walk, never a crash; a walk
     * hands out only bytes within the file (ASan) */
    for (size_t i = 0; i < f.n; i++) {
      uint8_t *g = malloc(f.n);
      memcpy(g, f.p, f.n);
      g[i] ^= 0xff;
      seen s = {0};
      char err[256] = "";
      int rc = tfile_logs_each(g, f.n, on_log, &s, NULL, 0, err, sizeof err);
      if (rc < 0) assert_true(err[0] != 0);
      free(g);
    }
    free(f.p);
  }
  /* an unknown compression: named */
  wbuf f = sample("none", 0);
  wbuf blocks[1] = {{0}};
  wbuf v = {0};
  putbe(&v, 1, 4);
  put_record(&blocks[0], "VERSION", &v, 0);
  wbuf l = make_file(blocks, 1, "lzo");
  char err[256] = "";
  seen s = {0};
  assert_int_equal(tfile_logs_each(l.p, l.n, on_log, &s, NULL, 0, err, sizeof err), LOOM_ENOTSUP);
  assert_non_null(strstr(err, "lzo"));
  /* not a TFile */
  assert_int_equal(
      tfile_logs_each((const uint8_t *)"hello", 5, on_log, &s, NULL, 0, err, sizeof err),
      LOOM_EPROTO);
  assert_non_null(strstr(err, "not a TFile"));
  free(f.p), free(l.p), free(v.p), free(blocks[0].p);
}

/* The fuzz seed: a file a Hadoop 3 NodeManager aggregated (a job of
 * tests/system/test_yarn_hosts_logs.py: chief:0 echoing OUT-<task>,
 * worker:0 and :1 OUT1..3-<task>, each ERR-<task> to stderr; the job's
 * secret in launch_container.sh replaced by x's). */
static void test_real_file(void **state) {
  (void)state;
  char path[4096];
  snprintf(path, sizeof path, "%s", __FILE__);
  char *slash = strrchr(path, '/');
  assert_non_null(slash);
  snprintf(slash, sizeof path - (size_t)(slash - path), "/../fuzz/corpus/tfile/hadoop3-node");
  FILE *fp = fopen(path, "rb");
  if (!fp) skip();
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  uint8_t *exact = malloc(n);
  memcpy(exact, buf, n);
  seen s = {0};
  char owner[64], err[256] = "";
  assert_int_equal(tfile_logs_each(exact, n, on_log, &s, owner, sizeof owner, err, sizeof err), 0);
  assert_true(owner[0] != 0);
  /* each container with a LOOM_TASK has that task's lines in its stdout
   * and stderr */
  int tasks = 0;
  for (const char *p = s.text; (p = strstr(p, "/launch_container.sh=")) != NULL; p++) {
    const char *t = strstr(p, "export LOOM_TASK=\"");
    if (!t || t > strchr(p, '|')) continue;
    t += 18;
    char task[64], want[128];
    snprintf(task, sizeof task, "%.*s", (int)(strchr(t, '"') - t), t);
    snprintf(want, sizeof want, "/stdout=OUT-%s\n", task);
    char want1[256];
    snprintf(want1, sizeof want1, "/stdout=OUT1-%s\nOUT2-%s\nOUT3-%s\n|", task, task, task);
    assert_true(strstr(s.text, want) || strstr(s.text, want1));
    snprintf(want, sizeof want, "/stderr=ERR-%s\n", task);
    assert_non_null(strstr(s.text, want));
    tasks++;
  }
  assert_true(tasks >= 1);
  free(exact);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vlong),
      cmocka_unit_test(test_reads_back),
      cmocka_unit_test(test_every_truncation_and_corruption_refused),
      cmocka_unit_test(test_real_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
