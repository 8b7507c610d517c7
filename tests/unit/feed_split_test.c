/* feed_split_test.c: making splits. For every format, a file larger than
 * the split size is cut into byte ranges that start and end on record
 * boundaries: each split parses on its own, and the records of all splits,
 * in order, are exactly the records of the whole file. Small files are one
 * split each, empty files none, globs are sorted and each file counted
 * once, and bad input is refused with a message naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feed/feed.h"

static char *put(const char *name, const void *data, size_t len) {
  return test_put_file(test_dir, name, data, len);
}

/* The records of a byte range, parsed as the reader does at a split's end,
 * appended to out as (length, bytes) so ranges can be compared. */
static void parse_range(const feed_input *in, const char *path, uint64_t rec, uint64_t off,
                        uint64_t len, loom__buf *out) {
  unsigned char *buf = malloc(len ? len : 1);
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, buf, len, (off_t)off), (ssize_t)len);
  close(fd);
  feed_recs r = {0};
  size_t used;
  char err[512] = "";
  feed_parse_ctx ctx = {.path = path, .base = off, .rec = rec, .err = err, .errlen = sizeof err};
  int rc = loom__feed_format_ops(&in->fmt)->parse(buf, len, true, &ctx, &r, &used);
  if (rc != 0)
    fail_msg("range [%llu, +%llu) of %s does not parse alone: %s", (unsigned long long)off,
             (unsigned long long)len, path, err);
  assert_int_equal(used, len);
  for (size_t i = 0; i < r.n; i++) {
    uint32_t l = loom__feed_rec_at(&r, i).len;
    loom__buf_add(out, &l, sizeof l);
    loom__buf_add(out, buf + loom__feed_rec_at(&r, i).off, l);
  }
  loom__feed_recs_free(&r);
  free(buf);
}

/* Cuts path with the given format and step and checks the splits. */
static void check_cut(const char *path, const char *format, uint64_t step, size_t min_splits) {
  feed_format fmt;
  assert_int_equal(loom__feed_format_parse(format, &fmt), 0);
  feed_input *in;
  char err[512] = "";
  const char *globs[] = {path};
  int rc = loom__feed_input_make(globs, 1, &fmt, false, step, &in, err, sizeof err);
  if (rc) fail_msg("%s: %s", format, err);
  assert_int_equal(in->nfiles, 1);
  const feed_file *ff = &in->files[0];
  if (in->nsplits < min_splits)
    fail_msg("%s: %zu splits, want at least %zu", format, in->nsplits, min_splits);
  loom__buf whole, parts;
  loom__buf_init(&whole, 1 << 30);
  loom__buf_init(&parts, 1 << 30);
  parse_range(in, path, ff->rec, ff->data_off, ff->data_end - ff->data_off, &whole);
  uint64_t at = ff->data_off;
  for (size_t i = 0; i < in->nsplits; i++) {
    const feed_split *s = &in->splits[i];
    assert_int_equal(s->file, 0);
    assert_int_equal(s->off, at); /* contiguous, in order */
    assert_true(s->len > 0);
    parse_range(in, path, ff->rec, s->off, s->len, &parts);
    at += s->len;
  }
  assert_int_equal(at, ff->data_end);
  assert_int_equal(parts.len, whole.len);
  assert_memory_equal(parts.p, whole.p, whole.len);
  loom__buf_free(&whole);
  loom__buf_free(&parts);
  loom__feed_input_free(in);
}

static void test_cut_lines(void **state) {
  (void)state;
  loom__buf b;
  loom__buf_init(&b, 1 << 24);
  uint64_t s = 1;
  for (int i = 0; i < 3000; i++) {
    int n = (int)(loom__feed_mix(&s) % 200);
    for (int k = 0; k < n; k++) loom__buf_add(&b, "abcdefghij" + (k % 10), 1);
    loom__buf_add(&b, "\n", 1);
  }
  loom__buf_add(&b, "last line without newline", 25);
  char *p = put("big.txt", b.p, b.len);
  check_cut(p, "lines", 4096, b.len / (4096 + 200));
  check_cut(p, "lines", 1, 2000); /* every line its own split */
  free(p);
  /* one line much longer than the step: cuts still fall after newlines */
  loom__buf_free(&b);
  loom__buf_init(&b, 1 << 24);
  loom__buf_add(&b, "a\n", 2);
  for (int i = 0; i < 50000; i++) loom__buf_add(&b, "x", 1);
  loom__buf_add(&b, "\nb\nc\n", 5);
  p = put("long.txt", b.p, b.len);
  check_cut(p, "lines", 1000, 2);
  free(p);
  loom__buf_free(&b);
}

static void test_cut_tfrecord(void **state) {
  (void)state;
  unsigned char *buf = malloc(2 << 20), data[700];
  size_t n = 0;
  uint64_t s = 2;
  for (int i = 0; i < 4000; i++) {
    size_t len = (size_t)(loom__feed_mix(&s) % sizeof data);
    for (size_t k = 0; k < len; k++) data[k] = (unsigned char)(i + k);
    n += tfrecord_frame(buf + n, data, len);
  }
  char *p = put("big.tfrecord", buf, n);
  check_cut(p, "tfrecord", 10000, n / (10000 + 16 + sizeof data));
  check_cut(p, "tfrecord", 1, 4000);
  free(p);
  /* a corrupt header in the middle is found when the splits are made */
  size_t at = 0;
  for (int i = 0; i < 2000; i++) {
    uint64_t len = 0;
    for (int k = 0; k < 8; k++) len |= (uint64_t)buf[at + k] << (8 * k);
    at += 16 + len;
  }
  buf[at + 3] ^= 0x40;
  p = put("bad.tfrecord", buf, n);
  feed_format fmt = {.kind = FEED_TFRECORD};
  feed_input *in;
  char err[512] = "", want[64];
  const char *globs[] = {p};
  assert_int_equal(loom__feed_input_make(globs, 1, &fmt, false, 10000, &in, err, sizeof err),
                   LOOM_ESPEC);
  snprintf(want, sizeof want, "offset %zu", at);
  assert_non_null(strstr(err, p));
  assert_non_null(strstr(err, want));
  free(p);
  free(buf);
}

static void test_cut_fixed_and_idx(void **state) {
  (void)state;
  unsigned char *buf = malloc(100000);
  for (int i = 0; i < 100000; i++) buf[i] = (unsigned char)(i * 7);
  char *p = put("f.bin", buf, 7 * 10000);
  check_cut(p, "fixed:7", 1000, 69);
  check_cut(p, "fixed:7", 3, 10000); /* a step below one record: a record a split */
  free(p);
  unsigned char hdr[12] = {0, 0, 0x08, 2, 0, 0, 0x1b, 0x58 /* 7000 */, 0, 0, 0, 13};
  memcpy(buf, hdr, sizeof hdr);
  p = put("i.idx", buf, 12 + 7000 * 13);
  check_cut(p, "idx", 5000, 18);
  free(p);
  free(buf);
}

static void test_files_globs_and_errors(void **state) {
  (void)state;
  char sub[128];
  snprintf(sub, sizeof sub, "%s/g", test_dir);
  mkdir(sub, 0755);
  char *a = put("g/b.txt", "1\n2\n", 4), *b = put("g/a.txt", "3\n", 2), *e = put("g/c.txt", "", 0);
  feed_format fmt = {.kind = FEED_LINES};
  feed_input *in;
  char err[512] = "", g1[160], g2[160];
  snprintf(g1, sizeof g1, "%s/g/*.txt", test_dir);
  snprintf(g2, sizeof g2, "%s/g/b.*", test_dir);
  const char *globs[] = {g1, g2};
  assert_int_equal(loom__feed_input_make(globs, 2, &fmt, false, 1 << 20, &in, err, sizeof err), 0);
  assert_int_equal(in->nfiles, 3);           /* b.txt once, though two globs match it */
  assert_string_equal(in->files[0].path, b); /* sorted: a, b, c */
  assert_string_equal(in->files[1].path, a);
  assert_int_equal(in->nsplits, 2); /* the empty c.txt has none */
  assert_int_equal(in->splits[0].file, 0);
  assert_int_equal(in->splits[1].file, 1);
  assert_int_equal(in->splits[1].len, 4);
  assert_int_equal(in->bytes, 6);
  loom__feed_input_free(in);

  char nomatch[160];
  snprintf(nomatch, sizeof nomatch, "%s/nothing-*.txt", test_dir);
  const char *g3[] = {nomatch};
  assert_int_equal(loom__feed_input_make(g3, 1, &fmt, false, 1 << 20, &in, err, sizeof err),
                   LOOM_ESPEC);
  assert_non_null(strstr(err, "matches no file"));
  assert_non_null(strstr(err, nomatch));

  char d[160];
  snprintf(d, sizeof d, "%s/*", test_dir); /* matches the directory g */
  const char *g4[] = {d};
  assert_int_equal(loom__feed_input_make(g4, 1, &fmt, false, 1 << 20, &in, err, sizeof err),
                   LOOM_ESPEC);
  assert_non_null(strstr(err, "not a regular file"));

  const char *g5[] = {e};
  assert_int_equal(loom__feed_input_make(g5, 1, &fmt, false, 1 << 20, &in, err, sizeof err),
                   LOOM_ESPEC);
  assert_non_null(strstr(err, "only empty files"));

  feed_format f3 = {.kind = FEED_FIXED, .rec = 3};
  const char *g6[] = {a};
  assert_int_equal(loom__feed_input_make(g6, 1, &f3, false, 1 << 20, &in, err, sizeof err),
                   LOOM_ESPEC);
  assert_non_null(strstr(err, a));
  free(a);
  free(b);
  free(e);
}

/* A growing input takes each new file once, in path order after the
 * others, whatever order the names sort in against the files it has. */
static void test_growing_takes_each_file_once(void **state) {
  (void)state;
  char sub[160], glob[160], err[512] = "";
  snprintf(sub, sizeof sub, "%s/grow", test_dir);
  mkdir(sub, 0755);
  snprintf(glob, sizeof glob, "%s/grow/*.txt", test_dir);
  const char *globs[] = {glob};
  feed_format fmt = {.kind = FEED_LINES};
  feed_input *in;
  assert_int_equal(loom__feed_input_make(globs, 1, &fmt, true, 1 << 20, &in, err, sizeof err), 0);
  assert_int_equal(in->nfiles, 0); /* growing: nothing yet is no error */
  size_t added;
  free(put("grow/b.txt", "b\n", 2));
  free(put("grow/d.txt", "d\n", 2));
  assert_int_equal(loom__feed_input_grow(in, globs, 1, 1 << 20, &added, err, sizeof err), 0);
  assert_int_equal(added, 2);
  /* a and c sort around b and d: each is new, b and d are not */
  free(put("grow/a.txt", "a\n", 2));
  free(put("grow/c.txt", "c\n", 2));
  for (int round = 0; round < 2; round++) {
    assert_int_equal(loom__feed_input_grow(in, globs, 1, 1 << 20, &added, err, sizeof err), 0);
    assert_int_equal(added, round == 0 ? 2 : 0);
  }
  assert_int_equal(in->nfiles, 4);
  assert_int_equal(in->nsplits, 4);
  const char *order[] = {"b.txt", "d.txt", "a.txt", "c.txt"};
  for (int i = 0; i < 4; i++) {
    assert_non_null(strstr(in->files[in->splits[i].file].path, order[i]));
  }
  /* a bad file is an error naming it; the others stay */
  feed_format f3 = {.kind = FEED_FIXED, .rec = 2};
  loom__feed_input_free(in);
  assert_int_equal(loom__feed_input_make(globs, 1, &f3, true, 1 << 20, &in, err, sizeof err), 0);
  assert_int_equal(in->nfiles, 4);
  free(put("grow/e.txt", "eee", 3));
  assert_int_equal(loom__feed_input_grow(in, globs, 1, 1 << 20, &added, err, sizeof err),
                   LOOM_ESPEC);
  assert_non_null(strstr(err, "e.txt"));
  assert_int_equal(in->nfiles, 4);
  loom__feed_input_free(in);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cut_lines),
      cmocka_unit_test(test_cut_tfrecord),
      cmocka_unit_test(test_cut_fixed_and_idx),
      cmocka_unit_test(test_files_globs_and_errors),
      cmocka_unit_test(test_growing_takes_each_file_once),
  };
  return cmocka_run_group_tests(tests, test_dir_setup, test_dir_teardown);
}
