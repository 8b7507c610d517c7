/* core_cursor_test.c: core/cursor.h's bounds-checked reader (every width
 * in both byte orders, a get past the end marks the cursor bad and yields 0
 * from then on, done() refuses trailing bytes) and ckpt/dir.c's checkpoint
 * directory (names, the steps of a local directory, pruning to keep N with
 * and without the later steps). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ckpt/dir.h"
#include "core/core.h"
#include "core/cursor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_reads_every_width(void **state) {
  (void)state;
  const unsigned char b[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b,
                             0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
                             0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21};
  loom__cur c = loom__cur_make(b, sizeof b);
  assert_int_equal(loom__cur_u8(&c), 0x01);
  assert_int_equal(loom__cur_le16(&c), 0x0302);
  assert_int_equal(loom__cur_le32(&c), 0x07060504u);
  assert_true(loom__cur_le64(&c) == 0x0f0e0d0c0b0a0908ull);
  assert_int_equal(loom__cur_be16(&c), 0x1011);
  assert_int_equal(loom__cur_be32(&c), 0x12131415u);
  assert_true(loom__cur_be64(&c) == 0x161718191a1b1c1dull);
  assert_int_equal(loom__cur_left(&c), 4);
  float one = 1.0f;
  unsigned char f[4];
  uint32_t u;
  memcpy(&u, &one, 4);
  loom__put_le32(f, u);
  loom__cur fc = loom__cur_make(f, 4);
  assert_true(loom__cur_lef32(&fc) == 1.0f);
  assert_true(loom__cur_done(&fc));
  assert_false(loom__cur_done(&c));
  const unsigned char *p = loom__cur_bytes(&c, 4);
  assert_ptr_equal(p, b + 29);
  assert_true(loom__cur_done(&c));
  assert_non_null(loom__cur_bytes(&c, 0));
}

static void test_past_the_end_is_bad_and_stays_bad(void **state) {
  (void)state;
  const unsigned char b[] = {1, 2, 3, 4, 5, 6, 7};
  loom__cur c = loom__cur_make(b, sizeof b);
  assert_int_equal(loom__cur_le32(&c), 0x04030201u);
  assert_true(loom__cur_le64(&c) == 0); /* 3 left: takes nothing */
  assert_true(c.bad);
  assert_int_equal(c.off, 4);
  assert_int_equal(loom__cur_left(&c), 0);
  assert_int_equal(loom__cur_u8(&c), 0); /* there is a byte, but bad stays */
  assert_null(loom__cur_bytes(&c, 0));
  assert_false(loom__cur_done(&c));
  loom__cur e = loom__cur_make(NULL, 0);
  assert_true(loom__cur_done(&e));
  assert_null(loom__cur_bytes(&e, 1));
  assert_false(loom__cur_done(&e));
  loom__cur h = loom__cur_make(b, sizeof b);
  assert_null(loom__cur_bytes(&h, SIZE_MAX)); /* no overflow in the check */
  assert_true(h.bad);
}

static void touch(const char *dir, const char *name, bool is_dir) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  if (is_dir) {
    assert_int_equal(mkdir(p, 0755), 0);
    char f[600];
    snprintf(f, sizeof f, "%s/shard-0-of-1.bin", p);
    FILE *fp = fopen(f, "w");
    assert_non_null(fp);
    fclose(fp);
  } else {
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fclose(fp);
  }
}

/* The steps left in d, as "1,2,3". */
static void left(const ckpt_dir *d, char *out, size_t len) {
  int64_t *s;
  size_t n;
  char why[256];
  assert_int_equal(ckpt_dir_steps(d, &s, &n, why, sizeof why), 0);
  size_t k = 0;
  out[0] = 0;
  for (size_t i = 0; i < n; i++)
    k += (size_t)snprintf(out + k, len - k, "%s%lld", i ? "," : "", (long long)s[i]);
  free(s);
}

static void prune(const ckpt_dir *d, int64_t step, int keep) {
  int64_t *s;
  size_t n;
  char why[256];
  assert_int_equal(ckpt_dir_steps(d, &s, &n, why, sizeof why), 0);
  ckpt_dir_prune(d, s, n, step, keep, NULL, NULL);
  free(s);
}

static void test_dir_prunes_both_kinds(void **state) {
  (void)state;
  char tmpl[] = "/tmp/loom-ckptdir-XXXXXX";
  char *root = mkdtemp(tmpl);
  assert_non_null(root);
  char got[256];

  /* libloom's: files, later steps dropped, keep counts the committed one */
  ckpt_dir f = {.dir = root, .prefix = "ckpt-", .suffix = ".ckpt", .drop_later = true, .tag = "t"};
  char path[512];
  assert_int_equal(ckpt_dir_path(&f, 7, path, sizeof path), 0);
  snprintf(got, sizeof got, "%s/ckpt-000000000007.ckpt", root);
  assert_string_equal(path, got);
  assert_int_equal(ckpt_dir_step_of(&f, "ckpt-000000000007.ckpt"), 7);
  assert_int_equal(ckpt_dir_step_of(&f, "ckpt-7.ckpt"), 7);
  assert_int_equal(ckpt_dir_step_of(&f, "ckpt-.ckpt"), -1);
  assert_int_equal(ckpt_dir_step_of(&f, "ckpt-7.ckpt.tmp"), -1);
  assert_int_equal(ckpt_dir_step_of(&f, "ckpt-1234567890123456789.ckpt"), -1);
  for (int s = 1; s <= 6; s++) {
    char name[64];
    snprintf(name, sizeof name, "ckpt-%012d.ckpt", s);
    touch(root, name, false);
  }
  touch(root, "other.txt", false);
  prune(&f, 4, 2); /* keeps 3 and 4; drops 5 and 6, later */
  left(&f, got, sizeof got);
  assert_string_equal(got, "3,4");
  prune(&f, 4, 0); /* keep < 1: every one */
  left(&f, got, sizeof got);
  assert_string_equal(got, "3,4");

  /* the parameter server's: directories, later steps count as newer */
  ckpt_dir s = {.dir = root, .prefix = "step-", .suffix = "", .is_dir = true, .tag = "t"};
  for (int i = 1; i <= 5; i++) {
    char name[64];
    snprintf(name, sizeof name, "step-%012d", i);
    touch(root, name, true);
  }
  prune(&s, 2, 2); /* keeps 4 and 5 (the newest two) and 2 (committed) */
  left(&s, got, sizeof got);
  assert_string_equal(got, "2,4,5");
  prune(&s, 5, 1);
  left(&s, got, sizeof got);
  assert_string_equal(got, "5");
  left(&f, got, sizeof got); /* the other kind's entries untouched */
  assert_string_equal(got, "3,4");

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reads_every_width),
      cmocka_unit_test(test_past_the_end_is_bad_and_stays_bad),
      cmocka_unit_test(test_dir_prunes_both_kinds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
