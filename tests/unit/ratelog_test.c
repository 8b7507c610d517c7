/* ratelog_test.c: the rate-limited warning, with its clock given and the
 * log captured through a sink: a flood logs the first five in full and then
 * one line with the count of the rest; a new window logs five again; a
 * flush or a tick reports a flood that stopped; a quiet limiter logs
 * nothing on a flush. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/core.h"
#include "core/ratelog.h"

#include <stdio.h>
#include <string.h>

#define MAXLINES 64
static char lines[MAXLINES][256];
static int nlines;

static void sink(int level, const char *subsys, const char *msg, void *arg) {
  (void)arg;
  assert_int_equal(level, LOOM_LOG_WARN);
  assert_string_equal(subsys, "ps");
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

#define WHAT "refused connections"

static void flood(loom__ratelog *rl, uint64_t t0, int n, const char *from) {
  for (int i = 0; i < n; i++)
    loom__ratelog_warn_at(rl, t0 + (uint64_t)i, "ps", WHAT, from,
                          "refused a connection from %s (#%d)", from, i);
}

/* 1,000 in one window: five lines, then the count on the next window. */
static void test_flood_counts(void **state) {
  (void)state;
  loom__ratelog rl = {0};
  flood(&rl, 1000, 1000, "127.0.0.1");
  assert_int_equal(nlines, 5);
  for (int i = 0; i < 5; i++) {
    char want[64];
    snprintf(want, sizeof want, "refused a connection from 127.0.0.1 (#%d)", i);
    assert_string_equal(lines[i], want);
  }
  /* still inside the window: counted, not logged */
  loom__ratelog_warn_at(&rl, 1000 + 9999, "ps", WHAT, "10.0.0.9", "x");
  assert_int_equal(nlines, 5);
  /* the window ended: the count first, then the message itself */
  loom__ratelog_warn_at(&rl, 1000 + 10000, "ps", WHAT, "10.0.0.9", "late");
  assert_int_equal(nlines, 7);
  assert_string_equal(lines[5], "996 more refused connections from 10.0.0.9 in the "
                                "last 10 s");
  assert_string_equal(lines[6], "late");
}

/* Over 25 s of flood, at most burst + 1 lines a window. */
static void test_long_flood_bounded(void **state) {
  (void)state;
  loom__ratelog rl = {0};
  unsigned total = 0;
  for (uint64_t t = 0; t < 25000; t += 2, total++)
    loom__ratelog_warn_at(&rl, t, "ps", WHAT, "127.0.0.1", "refused %u", total);
  loom__ratelog_flush(&rl, "ps", WHAT);
  assert_true(nlines <= 3 * (LOOM__RATELOG_BURST + 1));
  /* every event is either logged or counted */
  unsigned seen = 0;
  for (int i = 0; i < nlines; i++) {
    unsigned n;
    if (sscanf(lines[i], "%u more " WHAT " from 127.0.0.1 in the last 10 s", &n) == 1)
      seen += n;
    else
      seen++;
  }
  assert_int_equal(seen, total);
}

/* A flood that stops is reported by the tick once its window ended, by a
 * flush at once; a quiet limiter reports nothing. */
static void test_flush_and_tick(void **state) {
  (void)state;
  loom__ratelog rl = {0};
  loom__ratelog_flush(&rl, "ps", WHAT);
  loom__ratelog_tick_at(&rl, 50000, "ps", WHAT);
  assert_int_equal(nlines, 0);

  flood(&rl, 0, 12, "192.168.1.2");
  assert_int_equal(nlines, 5);
  loom__ratelog_tick_at(&rl, 9000, "ps", WHAT);
  assert_int_equal(nlines, 5);
  loom__ratelog_tick_at(&rl, 10000, "ps", WHAT);
  assert_int_equal(nlines, 6);
  assert_string_equal(lines[5], "7 more refused connections from "
                                "192.168.1.2 in the last 10 s");
  loom__ratelog_tick_at(&rl, 30000, "ps", WHAT); /* nothing left */
  assert_int_equal(nlines, 6);

  /* a fresh window logs five again; a flush reports at once */
  flood(&rl, 40000, 8, "::1");
  assert_int_equal(nlines, 11);
  loom__ratelog_flush(&rl, "ps", WHAT);
  assert_int_equal(nlines, 12);
  assert_string_equal(lines[11], "3 more refused connections from ::1 in the last 10 s");
  loom__ratelog_flush(&rl, "ps", WHAT);
  assert_int_equal(nlines, 12);
}

/* A long peer name is cut to fit, not overflowed. */
static void test_long_from(void **state) {
  (void)state;
  loom__ratelog rl = {0};
  char from[200];
  memset(from, 'a', sizeof from - 1);
  from[sizeof from - 1] = 0;
  flood(&rl, 0, 6, from);
  loom__ratelog_flush(&rl, "ps", WHAT);
  assert_int_equal(nlines, 6);
  assert_non_null(strstr(lines[5], "1 more " WHAT " from aaaa"));
  assert_int_equal(strlen(rl.last_from), sizeof rl.last_from - 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_flood_counts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_long_flood_bounded, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flush_and_tick, setup, teardown),
      cmocka_unit_test_setup_teardown(test_long_from, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
