/* testutil.h: what the unit tests share for files: a temporary directory,
 * its removal, a file written into it, a TFRecord framed by hand. Include
 * after <cmocka.h> (the helpers assert). */
#ifndef LOOM_TESTUTIL_H
#define LOOM_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/crc32c.h"

/* A fresh directory /tmp/<prefix>-XXXXXX; free() it after test_rm_rf(). */
static inline char *test_tmpdir(const char *prefix) {
  char *d = loom__asprintf("/tmp/%s-XXXXXX", prefix);
  assert_non_null(d);
  assert_non_null(mkdtemp(d));
  return d;
}

static inline void test_rm_rf(const char *path) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  assert_int_equal(system(cmd), 0);
}

/* A copy of p's first n bytes in a block of exactly n (1 if n is 0), so
 * that a decoder reading past them is an ASan report; free() it. */
static inline uint8_t *test_prefix(const void *p, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  assert_non_null(c);
  if (n) memcpy(c, p, n);
  return c;
}

/* Writes len bytes to dir/name; returns the path (free() it). */
static inline char *test_put_file(const char *dir, const char *name, const void *data, size_t len) {
  char *p = loom__asprintf("%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  if (len) assert_int_equal(fwrite(data, 1, len, f), len);
  fclose(f);
  return p;
}

/* A group's directory, for tests that share one: test_dir_setup and
 * test_dir_teardown are cmocka group fixtures. */
static char *test_dir __attribute__((unused));

static inline int test_dir_setup(void **state) {
  (void)state;
  test_dir = test_tmpdir("loom-unit");
  return 0;
}

static inline int test_dir_teardown(void **state) {
  (void)state;
  test_rm_rf(test_dir);
  free(test_dir);
  test_dir = NULL;
  return 0;
}

/* One TFRecord (length, masked CRC-32C of it, data, masked CRC-32C of the
 * data) into out, which has room for n + 16 bytes; returns its size. */
static inline size_t tfrecord_frame(unsigned char *out, const void *data, uint64_t n) {
  unsigned char *p = out;
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(n >> (8 * i));
  uint32_t c = loom__crc32c_mask(loom__crc32c(0, p, 8));
  for (int i = 0; i < 4; i++) p[8 + i] = (unsigned char)(c >> (8 * i));
  memcpy(p + 12, data, n);
  c = loom__crc32c_mask(loom__crc32c(0, data, n));
  for (int i = 0; i < 4; i++) p[12 + n + i] = (unsigned char)(c >> (8 * i));
  return 16 + n;
}

#endif
