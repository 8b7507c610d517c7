/* summary_pb_test.c: the pieces TensorBoard's event files are built from:
 * CRC-32C against published vectors (hardware and table paths agree over
 * lengths and alignments), TensorFlow's CRC mask, protocol buffer varints,
 * the Event records pb.c builds (byte for byte where the layout is fixed,
 * and decoded back with protobuf-c), and the writer's own framing and
 * argument checks. (tests/system/test_summary.py decodes whole files with a separate
 * CRC and protoc.) */
#include "core/bytes.h"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "loom/summary.h"
#include "core/crc32c.h"
#include "summary/pb.h"

/* ---- CRC-32C -------------------------------------------------------------- */

static void test_crc32c_vectors(void **state) {
  /* RFC 3720 (iSCSI) appendix B.4, and the classic check value */
  unsigned char buf[48];
  assert_int_equal(loom__crc32c(0, "123456789", 9), 0xe3069283u);
  assert_int_equal(loom__crc32c(0, "", 0), 0);
  memset(buf, 0, 32);
  assert_int_equal(loom__crc32c(0, buf, 32), 0x8a9136aau);
  memset(buf, 0xff, 32);
  assert_int_equal(loom__crc32c(0, buf, 32), 0x62a8ab43u);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
  assert_int_equal(loom__crc32c(0, buf, 32), 0x46dd794eu);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
  assert_int_equal(loom__crc32c(0, buf, 32), 0x113fdb5cu);
  static const unsigned char iscsi[48] = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
      0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  assert_int_equal(loom__crc32c(0, iscsi, 48), 0xd9963a56u);
  assert_int_equal(loom__crc32c_sw(0, iscsi, 48), 0xd9963a56u);
  assert_int_equal(loom__crc32c_sw(0, "123456789", 9), 0xe3069283u);
}

/* Both implementations, every length 0..300 at every alignment 0..7, and
 * the CRC of a split buffer extended piece by piece. */
static void test_crc32c_paths_agree(void **state) {
  unsigned char *buf = malloc(512);
  assert_non_null(buf);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 512; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = (unsigned char)x;
  }
  for (size_t align = 0; align < 8; align++)
    for (size_t n = 0; n <= 300; n++) {
      uint32_t hw = loom__crc32c(0, buf + align, n);
      uint32_t sw = loom__crc32c_sw(0, buf + align, n);
      if (hw != sw) fail_msg("align %zu len %zu: 0x%08x vs 0x%08x", align, n, hw, sw);
      size_t cut = n / 3;
      uint32_t split = loom__crc32c(loom__crc32c(0, buf + align, cut), buf + align + cut, n - cut);
      assert_int_equal(split, hw);
    }
  free(buf);
}

static void test_crc32c_mask(void **state) {
  static const uint32_t crcs[] = {0, 1, 0xe3069283u, 0xffffffffu, 0x80000000u};
  for (size_t i = 0; i < LOOM__ARRAY_LEN(crcs); i++) {
    uint32_t m = loom__crc32c_mask(crcs[i]);
    assert_int_not_equal(m, crcs[i]);
    assert_int_equal(loom__crc32c_unmask(m), crcs[i]);
  }
  /* by hand: rotate right 15, add 0xa282ead8 */
  assert_int_equal(loom__crc32c_mask(0), 0xa282ead8u);
  assert_int_equal(loom__crc32c_mask(0x8000u), 0xa282ead9u);
}

/* ---- protocol buffers -------------------------------------------------- */

static const struct {
  uint64_t v;
  size_t len;
  unsigned char bytes[10];
} VARINTS[] = {
    {0, 1, {0x00}},
    {1, 1, {0x01}},
    {127, 1, {0x7f}},
    {128, 2, {0x80, 0x01}},
    {150, 2, {0x96, 0x01}},
    {300, 2, {0xac, 0x02}},
    {16383, 2, {0xff, 0x7f}},
    {16384, 3, {0x80, 0x80, 0x01}},
    {0xffffffffull, 5, {0xff, 0xff, 0xff, 0xff, 0x0f}},
    {(uint64_t)INT64_MAX, 9, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
    /* int64 -1: two's complement, always 10 bytes */
    {UINT64_MAX, 10, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
    {(uint64_t)INT64_MIN, 10, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
};

static void test_varints(void **state) {
  for (size_t i = 0; i < LOOM__ARRAY_LEN(VARINTS); i++) {
    uint8_t out[10];
    size_t n = loom__varint_put(out, VARINTS[i].v);
    if (n != VARINTS[i].len || memcmp(out, VARINTS[i].bytes, n) != 0)
      fail_msg("varint %llu: %zu bytes, expected %zu", (unsigned long long)VARINTS[i].v, n,
               VARINTS[i].len);
  }
}

/* Packs e, checks the bytes are want (n of them) when want is not NULL,
 * and returns them decoded by protobuf-c. */
static Tensorflow__Event *pack_and_decode(const loom__sum_event *e, const void *want, size_t n) {
  uint8_t *data;
  size_t len;
  assert_int_equal(loom__sum_pack(e, 1 << 20, &data, &len), 0);
  assert_int_equal(len, tensorflow__event__get_packed_size(&e->ev));
  if (want) {
    assert_int_equal(len, n);
    assert_memory_equal(data, want, n);
  }
  Tensorflow__Event *ev = tensorflow__event__unpack(NULL, len, data);
  assert_non_null(ev);
  free(data);
  return ev;
}

/* Packs e and checks that its bytes contain want (n bytes). */
static void expect_within(const loom__sum_event *e, const void *want, size_t n) {
  uint8_t *data;
  size_t len;
  assert_int_equal(loom__sum_pack(e, 1 << 20, &data, &len), 0);
  if (!memmem(data, len, want, n)) fail_msg("%zu bytes not found in the %zu packed", n, len);
  free(data);
}

static void test_version_event(void **state) {
  loom__sum_event e;
  loom__sum_event_version(&e, 1.0);
  /* wall_time = 1 (double 1.0), file_version = 3 */
  Tensorflow__Event *ev = pack_and_decode(&e,
                                          "\x09\x00\x00\x00\x00\x00\x00\xf0\x3f"
                                          "\x1a\x0d"
                                          "brain.Event:2",
                                          24);
  assert_int_equal(ev->what_case, TENSORFLOW__EVENT__WHAT_FILE_VERSION);
  assert_string_equal(ev->file_version, "brain.Event:2");
  tensorflow__event__free_unpacked(ev, NULL);
}

static void test_scalar_event(void **state) {
  loom__sum_event e;
  loom__sum_event_scalar(&e, 1.0, 150, "loss", 1.0f);
  /* wall_time, step = 2 (varint 150), summary = 5 { value = 1 { tag = 1,
   * simple_value = 2 (float 1.0) } }, byte for byte */
  Tensorflow__Event *ev = pack_and_decode(&e,
                                          "\x09\x00\x00\x00\x00\x00\x00\xf0\x3f"
                                          "\x10\x96\x01"
                                          "\x2a\x0d"
                                          "\x0a\x0b"
                                          "\x0a\x04loss"
                                          "\x15\x00\x00\x80\x3f",
                                          27);
  assert_true(ev->wall_time == 1.0);
  assert_int_equal(ev->step, 150);
  assert_int_equal(ev->what_case, TENSORFLOW__EVENT__WHAT_SUMMARY);
  assert_int_equal(ev->summary->n_value, 1);
  Tensorflow__Summary__Value *v = ev->summary->value[0];
  assert_string_equal(v->tag, "loss");
  assert_int_equal(v->value_case, TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
  assert_true(v->simple_value == 1.0f);
  tensorflow__event__free_unpacked(ev, NULL);

  /* a negative step is a 10-byte varint; a value of 0 is still written
   * (a oneof member), so a reader sees a scalar */
  loom__sum_event_scalar(&e, 2.5, -1, "zero", 0.0f);
  expect_within(&e, "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
  expect_within(&e, "\x15\x00\x00\x00\x00", 5);
  ev = pack_and_decode(&e, NULL, 0);
  assert_int_equal(ev->step, -1);
  assert_true(ev->wall_time == 2.5);
  assert_int_equal(ev->summary->value[0]->value_case,
                   TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
  assert_true(ev->summary->value[0]->simple_value == 0.0f);
  tensorflow__event__free_unpacked(ev, NULL);
}

static void test_histogram_event(void **state) {
  loom__sum_event e;
  double limits[2] = {1.0, -2.0}, counts[2] = {3.0, 0.0};
  loom__sum_event_histogram(&e, 1.0, 7, "w", -1.5, 0.5, 3.0, -1.0, 2.75, limits, counts, 2);
  /* packed doubles: key (6 << 3 | 2), byte length, little-endian values */
  expect_within(&e,
                "\x32\x10"
                "\x00\x00\x00\x00\x00\x00\xf0\x3f"
                "\x00\x00\x00\x00\x00\x00\x00\xc0"
                "\x3a\x10"
                "\x00\x00\x00\x00\x00\x00\x08\x40"
                "\x00\x00\x00\x00\x00\x00\x00\x00",
                36);
  Tensorflow__Event *ev = pack_and_decode(&e, NULL, 0);
  assert_int_equal(ev->step, 7);
  Tensorflow__Summary__Value *v = ev->summary->value[0];
  assert_string_equal(v->tag, "w");
  assert_int_equal(v->value_case, TENSORFLOW__SUMMARY__VALUE__VALUE_HISTO);
  Tensorflow__HistogramProto *h = v->histo;
  assert_true(h->min == -1.5 && h->max == 0.5 && h->num == 3.0);
  assert_true(h->sum == -1.0 && h->sum_squares == 2.75);
  assert_int_equal(h->n_bucket_limit, 2);
  assert_int_equal(h->n_bucket, 2);
  assert_memory_equal(h->bucket_limit, limits, sizeof limits);
  assert_memory_equal(h->bucket, counts, sizeof counts);
  tensorflow__event__free_unpacked(ev, NULL);
}

static void test_text_event(void **state) {
  loom__sum_event e;
  loom__sum_event_text(&e, 1.0, 3, "note", "hello *world*", 13);
  /* Value: tag = 1, tensor = 8 { dtype = 1 (DT_STRING = 7), tensor_shape
   * = 2 (empty: a scalar), string_val = 8 }, metadata = 9 { plugin_data =
   * 1 { plugin_name = 1 "text" } } */
  expect_within(&e,
                "\x0a\x04note"
                "\x42\x13"
                "\x08\x07"
                "\x12\x00"
                "\x42\x0dhello *world*"
                "\x4a\x08"
                "\x0a\x06"
                "\x0a\x04text",
                37);
  Tensorflow__Event *ev = pack_and_decode(&e, NULL, 0);
  Tensorflow__Summary__Value *v = ev->summary->value[0];
  assert_string_equal(v->tag, "note");
  assert_int_equal(v->value_case, TENSORFLOW__SUMMARY__VALUE__VALUE_TENSOR);
  assert_int_equal(v->tensor->dtype, TENSORFLOW__DATA_TYPE__DT_STRING);
  assert_non_null(v->tensor->tensor_shape);
  assert_int_equal(v->tensor->tensor_shape->n_dim, 0);
  assert_int_equal(v->tensor->n_string_val, 1);
  assert_int_equal(v->tensor->string_val[0].len, 13);
  assert_memory_equal(v->tensor->string_val[0].data, "hello *world*", 13);
  assert_string_equal(v->metadata->plugin_data->plugin_name, "text");
  tensorflow__event__free_unpacked(ev, NULL);
}

/* An event over the cap is refused, with nothing allocated; one of
 * exactly the cap is packed. */
static void test_pack_cap(void **state) {
  loom__sum_event e;
  loom__sum_event_version(&e, 1.0); /* 24 bytes */
  uint8_t *data = (uint8_t *)1;
  size_t len = 1;
  assert_int_equal(loom__sum_pack(&e, 23, &data, &len), LOOM_ERANGE);
  assert_null(data);
  assert_int_equal(len, 0);
  assert_int_equal(loom__sum_pack(&e, 24, &data, &len), 0);
  assert_int_equal(len, 24);
  free(data);
}

/* ---- the writer ---------------------------------------------------------- */

static uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Counts the records of an event file, checking each one's framing. */
static int count_records(const char *path) {
  char *raw;
  size_t len;
  assert_int_equal(loom__read_file(path, 1 << 24, &raw, &len), 0);
  const unsigned char *p = (const unsigned char *)raw;
  size_t off = 0;
  int n = 0;
  while (off < len) {
    assert_true(len - off >= 16);
    uint64_t dlen = le(p + off, 8);
    assert_int_equal(le(p + off + 8, 4), loom__crc32c_mask(loom__crc32c(0, p + off, 8)));
    assert_true(len - off - 16 >= dlen);
    assert_int_equal(le(p + off + 12 + dlen, 4),
                     loom__crc32c_mask(loom__crc32c(0, p + off + 12, dlen)));
    if (n == 0) /* file_version = 3 */
      assert_non_null(memmem(p + off + 12, dlen,
                             "\x1a\x0d"
                             "brain.Event:2",
                             15));
    off += 16 + dlen;
    n++;
  }
  free(raw);
  return n;
}

static void test_writer_records_and_flush(void **state) {
  char *dir = test_tmpdir("loom-summary-test");
  char sub[512];
  snprintf(sub, sizeof sub, "%s/a/b", dir); /* created */
  loom_summary_t *s;
  assert_int_equal(loom_summary_open(NULL, sub, &s), 0);
  const char *path = loom_summary_path(s);
  assert_non_null(strstr(path, "/a/b/events.out.tfevents."));
  assert_int_equal(count_records(path), 1); /* the version, written at once */
  float vals[5] = {0.5f, -1.0f, 0.0f, 3.0f, 1e30f};
  assert_int_equal(loom_summary_scalar(s, "loss", 1, 0.25), 0);
  assert_int_equal(loom_summary_histogram(s, "w", 1, vals, 5), 0);
  assert_int_equal(loom_summary_histogram(s, "empty", 1, NULL, 0), 0);
  assert_int_equal(loom_summary_text(s, "note", 1, "hello *world*"), 0);
  assert_int_equal(loom_summary_flush(s), 0);
  assert_int_equal(count_records(path), 5);
  /* a second writer in the same second gets its own file */
  loom_summary_t *s2;
  assert_int_equal(loom_summary_open(NULL, sub, &s2), 0);
  assert_string_not_equal(loom_summary_path(s2), path);
  assert_int_equal(loom_summary_close(s2), 0);
  for (int i = 0; i < 3000; i++) /* past the 64 KiB buffer: written early */
    assert_int_equal(loom_summary_scalar(s, "many/steps", i, i * 0.5), 0);
  assert_true(count_records(path) > 5);
  assert_int_equal(loom_summary_close(s), 0);
  test_rm_rf(dir);
  free(dir);
}

static void test_writer_arguments(void **state) {
  char *dir = test_tmpdir("loom-summary-test");
  loom_summary_t *s;
  char tag[LOOM_SUMMARY_MAX_TAG + 2];
  memset(tag, 'x', sizeof tag - 1);
  tag[sizeof tag - 1] = 0;
  assert_int_equal(loom_summary_open(NULL, dir, NULL), LOOM_EINVAL);
  assert_int_equal(loom_summary_open(NULL, dir, &s), 0);
  assert_int_equal(loom_summary_scalar(s, "", 0, 1.0), LOOM_EINVAL);
  assert_non_null(strstr(loom_summary_errmsg(s), "tag must be 1.."));
  assert_int_equal(loom_summary_scalar(s, NULL, 0, 1.0), LOOM_EINVAL);
  assert_int_equal(loom_summary_scalar(s, tag, 0, 1.0), LOOM_EINVAL);
  assert_int_equal(loom_summary_histogram(s, "h", 0, NULL, 3), LOOM_EINVAL);
  assert_int_equal(loom_summary_text(s, "t", 0, NULL), LOOM_EINVAL);
  assert_int_equal(loom_summary_close(s), 0);
  assert_int_equal(loom_summary_scalar(NULL, "x", 0, 1.0), LOOM_EINVAL);
  /* a directory that cannot exist: under a regular file */
  char bad[512];
  snprintf(bad, sizeof bad, "%s/file", dir);
  FILE *f = fopen(bad, "w");
  assert_non_null(f);
  fclose(f);
  snprintf(bad, sizeof bad, "%s/file/sub", dir);
  s = (loom_summary_t *)1;
  assert_int_equal(loom_summary_open(NULL, bad, &s), LOOM_EIO);
  assert_null(s);
  test_rm_rf(dir);
  free(dir);
}

static void test_default_dir_needs_a_job(void **state) {
  char *dir = test_tmpdir("loom-summary-test");
  loom_summary_t *s;
  unsetenv("LOOM_JOB_DIR");
  assert_int_equal(loom_summary_open(NULL, NULL, &s), LOOM_ENOENV);
  setenv("LOOM_JOB_DIR", dir, 1);
  setenv("LOOM_ROLE", "worker", 1);
  setenv("LOOM_INDEX", "2", 1);
  assert_int_equal(loom_summary_open(NULL, NULL, &s), 0);
  char want[512];
  snprintf(want, sizeof want, "%s/tensorboard/worker-2/events.out.tfevents.", dir);
  assert_memory_equal(loom_summary_path(s), want, strlen(want));
  assert_int_equal(loom_summary_close(s), 0);
  unsetenv("LOOM_JOB_DIR");
  unsetenv("LOOM_ROLE");
  unsetenv("LOOM_INDEX");
  test_rm_rf(dir);
  free(dir);
}

/* A write that fails (the file size limit stands in for a full disk) is
 * reported, with the file's name and the reason, by the call that meets it
 * and by close. */
static void test_write_failure_is_reported(void **state) {
  char *dir = test_tmpdir("loom-summary-test");
  loom_summary_t *s;
  assert_int_equal(loom_summary_open(NULL, dir, &s), 0);
  struct rlimit old, small = {4096, 0};
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  small.rlim_max = old.rlim_max;
  signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  int rc = 0;
  for (int i = 0; i < 10000 && rc == 0; i++) rc = loom_summary_scalar(s, "loss", i, 1.0);
  int frc = loom_summary_flush(s);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_DFL);
  assert_int_equal(rc, LOOM_EIO);
  assert_int_equal(frc, LOOM_EIO);
  assert_non_null(strstr(loom_summary_errmsg(s), "cannot write TensorBoard events to"));
  assert_non_null(strstr(loom_summary_errmsg(s), "File too large"));
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  signal(SIGXFSZ, SIG_IGN);
  rc = loom_summary_close(s);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_DFL);
  assert_int_equal(rc, LOOM_EIO);

  /* met by the background flush: returned by the next call, once */
  assert_int_equal(loom_summary_open(NULL, dir, &s), 0);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  signal(SIGXFSZ, SIG_IGN);
  for (int i = 0; i < 1000; i++) assert_int_equal(loom_summary_scalar(s, "x", i, 1.0), 0);
  usleep(2300 * 1000); /* past the 2 s flush period */
  rc = loom_summary_scalar(s, "x", 1000, 1.0);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_DFL);
  assert_int_equal(rc, LOOM_EIO);
  assert_int_equal(loom_summary_close(s), 0); /* the limit is gone: all written */
  test_rm_rf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32c_vectors),
      cmocka_unit_test(test_crc32c_paths_agree),
      cmocka_unit_test(test_crc32c_mask),
      cmocka_unit_test(test_varints),
      cmocka_unit_test(test_version_event),
      cmocka_unit_test(test_scalar_event),
      cmocka_unit_test(test_histogram_event),
      cmocka_unit_test(test_text_event),
      cmocka_unit_test(test_pack_cap),
      cmocka_unit_test(test_writer_records_and_flush),
      cmocka_unit_test(test_writer_arguments),
      cmocka_unit_test(test_default_dir_needs_a_job),
      cmocka_unit_test(test_write_failure_is_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
