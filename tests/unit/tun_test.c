/* tun_test.c: the tunables table and its accessor. The table: every row a
 * LOOM_ variable, named once, its default within its range. The accessor:
 * unset or empty gives the default silently; a value in range is used;
 * out of range, not a whole number, or not one of a word's choices gives
 * the default and one warning naming the variable, the value and the
 * range (once per process and tunable). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXLINES 16
static char lines[MAXLINES][512];
static int nlines;

static void sink(int level, const char *subsys, const char *msg, void *arg) {
  (void)arg;
  (void)subsys;
  assert_int_equal(level, LOOM_LOG_WARN);
  assert_true(nlines < MAXLINES);
  snprintf(lines[nlines++], sizeof lines[0], "%s", msg);
}

static int setup(void **state) {
  (void)state;
  nlines = 0;
  loom__log_set_sink(sink, NULL);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  loom__log_set_sink(NULL, NULL);
  return 0;
}

static void test_table(void **state) {
  (void)state;
  for (int t = 0; t < LOOM_TUN__COUNT; t++) {
    const loom__tun_info *i = loom__tun_info_of((loom__tunable)t);
    assert_non_null(i);
    assert_int_equal(strncmp(i->env, "LOOM_", 5), 0);
    assert_true(i->doc && *i->doc);
    for (int u = 0; u < t; u++)
      assert_string_not_equal(i->env, loom__tun_info_of((loom__tunable)u)->env);
    if (i->kind == LOOM_TUN_KIND_WORD) {
      /* a default with choices is one of them */
      if (i->choices && *i->sdef)
        assert_int_equal(loom__tun_check((loom__tunable)t, i->sdef, NULL, NULL, 0), 0);
    } else {
      assert_true(i->min <= i->def && i->def <= i->max);
    }
  }
  assert_null(loom__tun_info_of(LOOM_TUN__COUNT));
}

/* One variable at a time: set it to v, read it, and what was logged. */
static long long read_num(loom__tunable t, const char *v) {
  const char *env = loom__tun_info_of(t)->env;
  if (v)
    setenv(env, v, 1);
  else
    unsetenv(env);
  long long x = loom__tun(t);
  unsetenv(env);
  return x;
}

static void test_number(void **state) {
  (void)state;
  /* unset and empty: the default, nothing said */
  assert_int_equal(read_num(LOOM_TUN_RENDEZVOUS_TIMEOUT_MS, NULL), 60000);
  assert_int_equal(read_num(LOOM_TUN_RENDEZVOUS_TIMEOUT_MS, ""), 60000);
  assert_int_equal(nlines, 0);
  /* in range, the bounds included */
  assert_int_equal(read_num(LOOM_TUN_RENDEZVOUS_TIMEOUT_MS, "1500"), 1500);
  assert_int_equal(read_num(LOOM_TUN_RENDEZVOUS_TIMEOUT_MS, "1"), 1);
  assert_int_equal(read_num(LOOM_TUN_STOP_GRACE_MS, "0"), 0);
  assert_int_equal(read_num(LOOM_TUN_COMM_SPIN, "-1"), -1);
  assert_int_equal(nlines, 0);
  /* out of range: the default, one warning with the value and the range */
  assert_int_equal(read_num(LOOM_TUN_MAX_FRAME, "12"), 4 << 20);
  assert_int_equal(nlines, 1);
  assert_string_equal(lines[0], "LOOM_MAX_FRAME=12 is out of range (4 KiB..1 GiB); using the "
                                "default 4 MiB");
  /* once per process and tunable */
  assert_int_equal(read_num(LOOM_TUN_MAX_FRAME, "-5"), 4 << 20);
  assert_int_equal(nlines, 1);
  /* not a whole number */
  assert_int_equal(read_num(LOOM_TUN_HEARTBEAT_MS, "abc"), 1000);
  assert_int_equal(nlines, 2);
  assert_string_equal(lines[1], "LOOM_HEARTBEAT=abc is not a whole number (10 ms..3600000 ms); "
                                "using the default 1000 ms");
  assert_int_equal(read_num(LOOM_TUN_FEED_CHUNK, "1.5"), 1 << 20);
  assert_int_equal(read_num(LOOM_TUN_PS_MAX_CONNS, "12x"), 4096);
  assert_int_equal(read_num(LOOM_TUN_KV_MAX_TOTAL, "99999999999999999999999"), 256 << 20);
  assert_int_equal(nlines, 5);
  assert_non_null(strstr(lines[4], "LOOM_KV_MAX_TOTAL=99999999999999999999999 is"));
  /* a good value after a bad one is used */
  assert_int_equal(read_num(LOOM_TUN_MAX_FRAME, "200000"), 200000);
}

static void test_check(void **state) {
  (void)state;
  long long x = 0;
  char why[256] = "";
  assert_int_equal(loom__tun_check(LOOM_TUN_FEED_SPLIT_BYTES, "3000", &x, why, sizeof why), 0);
  assert_int_equal(x, 3000);
  assert_int_equal(loom__tun_check(LOOM_TUN_FEED_SPLIT_BYTES, "0", &x, why, sizeof why),
                   LOOM_ERANGE);
  assert_string_equal(why, "LOOM_FEED_SPLIT_BYTES=0 is out of range (1..1 TiB); using the "
                           "default 16 MiB");
  assert_int_equal(loom__tun_check(LOOM_TUN_FEED_SPLIT_BYTES, "", &x, why, sizeof why),
                   LOOM_EINVAL);
  assert_int_equal(loom__tun_check(LOOM_TUN_COMM_TRANSPORT, "tcp", NULL, why, sizeof why), 0);
  assert_int_equal(loom__tun_check(LOOM_TUN_COMM_TRANSPORT, "tc", NULL, why, sizeof why),
                   LOOM_EINVAL);
  assert_string_equal(why, "LOOM_COMM_TRANSPORT=tc is not one of auto|shm|tcp; using the "
                           "default auto");
  assert_int_equal(nlines, 0); /* checking says nothing */
}

static void test_word(void **state) {
  (void)state;
  unsetenv("LOOM_SLURM_FILES");
  assert_string_equal(loom__tun_str(LOOM_TUN_SLURM_FILES), "auto");
  setenv("LOOM_SLURM_FILES", "sbcast", 1);
  assert_string_equal(loom__tun_str(LOOM_TUN_SLURM_FILES), "sbcast");
  assert_int_equal(nlines, 0);
  setenv("LOOM_SLURM_FILES", "nfs", 1);
  assert_string_equal(loom__tun_str(LOOM_TUN_SLURM_FILES), "auto");
  assert_int_equal(nlines, 1);
  assert_string_equal(lines[0], "LOOM_SLURM_FILES=nfs is not one of auto|shared|sbcast; using "
                                "the default auto");
  unsetenv("LOOM_SLURM_FILES");
  /* any value: a path */
  setenv("LOOM_PS_CKPT_DIR", "/x/y", 1);
  assert_string_equal(loom__tun_str(LOOM_TUN_PS_CKPT_DIR), "/x/y");
  unsetenv("LOOM_PS_CKPT_DIR");
  assert_string_equal(loom__tun_str(LOOM_TUN_PS_CKPT_DIR), "");
  assert_null(loom__tun_env(LOOM_TUN_PS_CKPT_DIR));
  /* the wrong accessor for a row's kind */
  assert_int_equal(loom__tun(LOOM_TUN_PS_CKPT_DIR), 0);
  assert_string_equal(loom__tun_str(LOOM_TUN_MAX_FRAME), "");
  assert_int_equal(nlines, 1);
}

/* The rows loom sets for its own processes: read as set, an empty value
 * too, never checked nor warned about; marked internal by their doc. */
static void test_raw_internal(void **state) {
  (void)state;
  unsetenv("LOOM_PREV_PORT");
  assert_null(loom__tun_raw(LOOM_TUN_PREV_PORT));
  setenv("LOOM_PREV_PORT", "", 1);
  assert_string_equal(loom__tun_raw(LOOM_TUN_PREV_PORT), "");
  setenv("LOOM_PREV_PORT", "not a port", 1);
  assert_string_equal(loom__tun_raw(LOOM_TUN_PREV_PORT), "not a port");
  unsetenv("LOOM_PREV_PORT");
  assert_int_equal(nlines, 0);
  assert_true(loom__tun_internal(LOOM_TUN_PREV_PORT));
  assert_true(loom__tun_internal(LOOM_TUN_EXEC_MEM));
  assert_false(loom__tun_internal(LOOM_TUN_MAX_FRAME));
  assert_false(loom__tun_internal(LOOM_TUN_DEBUG));
  assert_false(loom__tun_internal(LOOM_TUN__COUNT));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test_setup_teardown(test_number, setup, teardown),
      cmocka_unit_test_setup_teardown(test_check, setup, teardown),
      cmocka_unit_test_setup_teardown(test_word, setup, teardown),
      cmocka_unit_test_setup_teardown(test_raw_internal, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
