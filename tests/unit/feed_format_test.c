/* feed_format_test.c: every record format of the feed: CRC32C against the
 * standard's vectors (the hardware and table paths agree), lines, fixed,
 * idx header validation, and TFRecord with both CRCs checked: a corrupt or
 * truncated record is an error that names the file and the offset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feed/feed.h"

static char *put(const char *name, const void *data, size_t len) {
  return test_put_file(test_dir, name, data, len);
}

/* Probes a file (as the splitter does). */
static int probe(const char *path, const char *format, feed_file *ff, char *err, size_t n) {
  feed_format fmt;
  assert_int_equal(loom__feed_format_parse(format, &fmt), 0);
  loom__rfile *f = NULL;
  assert_int_equal(loom__rfile_open(path, &f, err, n), 0);
  memset(ff, 0, sizeof *ff);
  ff->path = (char *)path;
  ff->size = loom__rfile_size(f);
  int rc = loom__feed_format_ops(&fmt)->probe(f, &fmt, ff, err, n);
  loom__rfile_close(f);
  return rc;
}

/* ---- CRC32C ---------------------------------------------------------- */
static void test_crc32c_vectors(void **state) {
  (void)state;
  unsigned char z[32] = {0}, ff[32];
  memset(ff, 0xff, sizeof ff);
  assert_int_equal(loom__crc32c(0, "123456789", 9), 0xe3069283u);
  assert_int_equal(loom__crc32c(0, z, 32), 0x8a9136aau);
  assert_int_equal(loom__crc32c(0, ff, 32), 0x62a8ab43u);
  assert_int_equal(loom__crc32c(0, "", 0), 0);
  /* incremental equals whole */
  uint32_t c = loom__crc32c(0, "1234", 4);
  assert_int_equal(loom__crc32c(c, "56789", 5), 0xe3069283u);
}

static void test_crc32c_paths_agree(void **state) {
  (void)state;
  unsigned char buf[1100];
  uint64_t s = 7;
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)loom__feed_mix(&s);
  for (size_t off = 0; off < 9; off++)
    for (size_t n = 0; n + off <= sizeof buf; n += 37)
      assert_int_equal(loom__crc32c(0, buf + off, n), loom__crc32c_sw(0, buf + off, n));
}

/* ---- lines ------------------------------------------------------------ */
static const struct {
  const char *in;
  bool eof;
  int n;
  const char *recs[5];
  size_t used;
} LINES[] = {
    {"a\nbb\n\nccc", true, 4, {"a", "bb", "", "ccc"}, 9},
    {"a\nbb\n\nccc", false, 3, {"a", "bb", ""}, 6},
    {"", true, 0, {NULL}, 0},
    {"\n", true, 1, {""}, 1},
    {"x\r\n", true, 1, {"x\r"}, 3},
    {"no newline", false, 0, {NULL}, 0},
    {"no newline", true, 1, {"no newline"}, 10},
};

static void test_lines_parse(void **state) {
  (void)state;
  for (size_t t = 0; t < LOOM__ARRAY_LEN(LINES); t++) {
    feed_recs r = {0};
    size_t used = 99;
    char err[256] = "";
    feed_parse_ctx ctx = {.path = "x", .err = err, .errlen = sizeof err};
    const unsigned char *in = (const unsigned char *)LINES[t].in;
    assert_int_equal(loom__feed_lines.parse(in, strlen(LINES[t].in), LINES[t].eof, &ctx, &r, &used),
                     0);
    assert_int_equal(r.n, LINES[t].n);
    assert_int_equal(used, LINES[t].used);
    for (int i = 0; i < LINES[t].n; i++) {
      feed_rec x = loom__feed_rec_at(&r, (size_t)i);
      assert_int_equal(x.len, strlen(LINES[t].recs[i]));
      assert_memory_equal(in + x.off, LINES[t].recs[i], x.len);
    }
    loom__feed_recs_free(&r);
  }
}

/* ---- fixed ------------------------------------------------------------ */
static void test_fixed(void **state) {
  (void)state;
  char err[512] = "";
  feed_recs r = {0};
  size_t used;
  feed_parse_ctx ctx = {
      .path = "/data/f.bin", .base = 1000, .rec = 3, .err = err, .errlen = sizeof err};
  const unsigned char *buf = (const unsigned char *)"abcdefghij";
  assert_int_equal(loom__feed_fixed.parse(buf, 10, false, &ctx, &r, &used), 0);
  assert_int_equal(r.n, 3);
  assert_int_equal(used, 9);
  assert_int_equal(loom__feed_rec_at(&r, 2).off, 6);
  assert_int_equal(loom__feed_rec_at(&r, 2).len, 3);
  r.n = 0;
  assert_int_equal(loom__feed_fixed.parse(buf, 10, true, &ctx, &r, &used), LOOM_EIO);
  assert_non_null(strstr(err, "/data/f.bin"));
  assert_non_null(strstr(err, "offset 1009"));
  loom__feed_recs_free(&r);

  feed_file ff;
  char *p = put("seven.bin", "1234567", 7);
  assert_int_equal(probe(p, "fixed:3", &ff, err, sizeof err), LOOM_ESPEC);
  assert_non_null(strstr(err, "not a multiple of the record size 3"));
  assert_int_equal(probe(p, "fixed:7", &ff, err, sizeof err), 0);
  assert_int_equal(ff.rec, 7);
  free(p);
}

/* ---- idx -------------------------------------------------------------- */
static const struct {
  const char *what;
  unsigned char hdr[16];
  size_t hlen, data; /* header bytes, then data bytes (zeros) */
  int rc;
  const char *msg;
  uint64_t rec, off;
} IDX[] = {
    {"u8 2x3x4", {0, 0, 0x08, 3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4}, 16, 24, 0, NULL, 12, 16},
    {"i32 1-d", {0, 0, 0x0c, 1, 0, 0, 0, 5}, 8, 20, 0, NULL, 4, 8},
    {"f64 5x2", {0, 0, 0x0e, 2, 0, 0, 0, 5, 0, 0, 0, 2}, 12, 80, 0, NULL, 16, 12},
    {"truncated",
     {0, 0, 0x08, 3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4},
     16,
     23,
     LOOM_ESPEC,
     "truncated",
     0,
     0},
    {"bad magic", {1, 0, 0x08, 1, 0, 0, 0, 1}, 8, 1, LOOM_ESPEC, "not an idx file", 0, 0},
    {"gzip", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0}, 8, 10, LOOM_ESPEC, "gunzip", 0, 0},
    {"bad type", {0, 0, 0x07, 1, 0, 0, 0, 1}, 8, 1, LOOM_ESPEC, "element type 0x07", 0, 0},
    {"no dims", {0, 0, 0x08, 0}, 4, 0, LOOM_ESPEC, "0 dimensions", 0, 0},
    {"short header", {0, 0, 0x08, 3, 0, 0, 0, 2}, 8, 0, LOOM_ESPEC, "inside its idx header", 0, 0},
    {"zero dim",
     {0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 0},
     12,
     0,
     LOOM_ESPEC,
     "dimension 1 is 0",
     0,
     0},
    {"too short", {0, 0}, 2, 0, LOOM_ESPEC, "too short", 0, 0},
};

static void test_idx_headers(void **state) {
  (void)state;
  for (size_t t = 0; t < LOOM__ARRAY_LEN(IDX); t++) {
    unsigned char buf[128] = {0};
    memcpy(buf, IDX[t].hdr, IDX[t].hlen);
    char *p = put("x.idx", buf, IDX[t].hlen + IDX[t].data);
    feed_file ff;
    char err[512] = "";
    int rc = probe(p, "idx", &ff, err, sizeof err);
    if (rc != IDX[t].rc) fail_msg("%s: rc %d, want %d (%s)", IDX[t].what, rc, IDX[t].rc, err);
    if (IDX[t].msg) {
      if (!strstr(err, IDX[t].msg) || !strstr(err, p))
        fail_msg("%s: message '%s' lacks '%s' or the path", IDX[t].what, err, IDX[t].msg);
    } else {
      assert_int_equal(ff.rec, IDX[t].rec);
      assert_int_equal(ff.data_off, IDX[t].off);
      assert_int_equal(ff.data_end, IDX[t].hlen + IDX[t].data);
    }
    free(p);
  }
}

/* ---- TFRecord --------------------------------------------------------- */

static int tf_parse_file(const unsigned char *buf, size_t len, feed_recs *r, char *err,
                         size_t errlen) {
  size_t used;
  feed_parse_ctx ctx = {.path = "/in/a.tfrecord", .base = 0, .err = err, .errlen = errlen};
  return loom__feed_tfrecord.parse(buf, len, true, &ctx, r, &used);
}

static void test_tfrecord(void **state) {
  (void)state;
  unsigned char buf[256];
  size_t n = 0, at2;
  n += tfrecord_frame(buf + n, "hello", 5);
  n += tfrecord_frame(buf + n, "", 0);
  at2 = n;
  n += tfrecord_frame(buf + n, "world!", 6);
  feed_recs r = {0};
  char err[512] = "";
  assert_int_equal(tf_parse_file(buf, n, &r, err, sizeof err), 0);
  assert_int_equal(r.n, 3);
  assert_int_equal(loom__feed_rec_at(&r, 0).len, 5);
  assert_memory_equal(buf + loom__feed_rec_at(&r, 0).off, "hello", 5);
  assert_int_equal(loom__feed_rec_at(&r, 1).len, 0);
  assert_memory_equal(buf + loom__feed_rec_at(&r, 2).off, "world!", 6);

  /* not at eof: a partial record waits for more bytes */
  size_t used;
  feed_parse_ctx ctx = {.path = "p", .err = err, .errlen = sizeof err};
  r.n = 0;
  assert_int_equal(loom__feed_tfrecord.parse(buf, n - 1, false, &ctx, &r, &used), 0);
  assert_int_equal(r.n, 2);
  assert_int_equal(used, at2);

  /* a flipped data byte: data CRC mismatch at record 3's offset */
  unsigned char bad[256];
  memcpy(bad, buf, n);
  bad[at2 + 12 + 2] ^= 0x20;
  r.n = 0;
  assert_int_equal(tf_parse_file(bad, n, &r, err, sizeof err), LOOM_EIO);
  char want[64];
  snprintf(want, sizeof want, "offset %zu", at2);
  assert_non_null(strstr(err, "/in/a.tfrecord"));
  assert_non_null(strstr(err, want));
  assert_non_null(strstr(err, "data CRC mismatch"));

  /* a flipped length byte: length CRC mismatch */
  memcpy(bad, buf, n);
  bad[at2] ^= 0x01;
  r.n = 0;
  assert_int_equal(tf_parse_file(bad, n, &r, err, sizeof err), LOOM_EIO);
  assert_non_null(strstr(err, want));
  assert_non_null(strstr(err, "length CRC mismatch"));

  /* truncated in the last record, and in a header */
  r.n = 0;
  assert_int_equal(tf_parse_file(buf, n - 3, &r, err, sizeof err), LOOM_EIO);
  assert_non_null(strstr(err, want));
  assert_non_null(strstr(err, "truncated"));
  r.n = 0;
  assert_int_equal(tf_parse_file(buf, at2 + 5, &r, err, sizeof err), LOOM_EIO);
  assert_non_null(strstr(err, "truncated"));
  loom__feed_recs_free(&r);

  /* probe: a text file is not a TFRecord file; a good one is */
  feed_file ff;
  char *p = put("text.tfrecord", "this is not a tfrecord file at all\n", 35);
  assert_int_equal(probe(p, "tfrecord", &ff, err, sizeof err), LOOM_ESPEC);
  assert_non_null(strstr(err, "not a TFRecord file"));
  assert_non_null(strstr(err, p));
  free(p);
  p = put("good.tfrecord", buf, n);
  assert_int_equal(probe(p, "tfrecord", &ff, err, sizeof err), 0);
  assert_int_equal(ff.data_end, n);
  free(p);
}

static void test_format_names(void **state) {
  (void)state;
  feed_format f;
  assert_int_equal(loom__feed_format_parse("lines", &f), 0);
  assert_int_equal(f.kind, FEED_LINES);
  assert_int_equal(loom__feed_format_parse("fixed:785", &f), 0);
  assert_int_equal(f.kind, FEED_FIXED);
  assert_int_equal(f.rec, 785);
  assert_int_equal(loom__feed_format_parse("fixed:0", &f), LOOM_EINVAL);
  assert_int_equal(loom__feed_format_parse("fixed:", &f), LOOM_EINVAL);
  assert_int_equal(loom__feed_format_parse("csv", &f), LOOM_EINVAL);
  assert_int_equal(loom__feed_format_parse(NULL, &f), LOOM_EINVAL);
}

static void test_permute_is_a_reproducible_permutation(void **state) {
  (void)state;
  uint32_t a[1000], b[1000], seen[1000] = {0};
  for (uint32_t i = 0; i < 1000; i++) a[i] = b[i] = i;
  loom__feed_permute(a, 1000, 42);
  loom__feed_permute(b, 1000, 42);
  assert_memory_equal(a, b, sizeof a);
  int moved = 0;
  for (uint32_t i = 0; i < 1000; i++) {
    seen[a[i]]++;
    moved += a[i] != i;
  }
  for (int i = 0; i < 1000; i++) assert_int_equal(seen[i], 1);
  assert_true(moved > 900);
  for (uint32_t i = 0; i < 1000; i++) b[i] = i;
  loom__feed_permute(b, 1000, 43);
  assert_true(memcmp(a, b, sizeof a) != 0);
  assert_true(loom__feed_seed(1, 0, 0) != loom__feed_seed(1, 1, 0));
  assert_true(loom__feed_seed(1, 0, 1) != loom__feed_seed(1, 1, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32c_vectors),
      cmocka_unit_test(test_crc32c_paths_agree),
      cmocka_unit_test(test_lines_parse),
      cmocka_unit_test(test_fixed),
      cmocka_unit_test(test_idx_headers),
      cmocka_unit_test(test_tfrecord),
      cmocka_unit_test(test_format_names),
      cmocka_unit_test(test_permute_is_a_reproducible_permutation),
  };
  return cmocka_run_group_tests(tests, test_dir_setup, test_dir_teardown);
}
