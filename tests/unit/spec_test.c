/* spec_test.c: the spec parser: good specs resolve with their defaults,
 * bad ones name file:line:column and what to do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spec/spec.h"

static spec_job *parse_ok(const char *text) {
  char err[1024];
  spec_job *s = NULL;
  int rc = spec_parse("t.yaml", text, strlen(text), NULL, 0, &s, err, sizeof err);
  if (rc != 0) fail_msg("unexpected error: %s", err);
  return s;
}

static void test_full_spec(void **state) {
  spec_job *s = parse_ok("name: fashion-mlp\nretries: 2\nenv: {OMP_NUM_THREADS: \"1\"}\n"
                         "roles:\n"
                         "  chief: {command: ./mlp --epochs 5, vcores: 1, memory: 1.5GiB}\n"
                         "  worker: {instances: 3, procs: 2, command: [./mlp, -v], env: {A: b}}\n"
                         "  ps: {command: sleep 1}\n"
                         "  evaluator: {command: eval}\n");
  assert_string_equal(s->name, "fashion-mlp");
  assert_int_equal(s->retries, 2);
  assert_string_equal(s->backend, "local");
  assert_int_equal(s->nroles, 4);
  assert_int_equal(spec_total_tasks(s), 6);
  const spec_role *c = spec_role_find(s, "chief"), *w = spec_role_find(s, "worker");
  assert_string_equal(c->shell, "./mlp --epochs 5");
  assert_null(c->argv);
  assert_int_equal(c->memory, (uint64_t)(1.5 * 1073741824.0));
  assert_int_equal(w->instances, 3);
  assert_int_equal(w->procs, 2);
  assert_string_equal(w->argv[1], "-v");
  assert_null(w->argv[2]);
  assert_true(spec_role_find(s, "ps")->service);
  assert_false(w->service);
  assert_true(spec_role_is_training(s, w));
  assert_false(spec_role_is_training(s, spec_role_find(s, "evaluator")));
  spec_free(s);
}

static void test_sets(void **state) {
  const char *sets[] = {"roles.worker.instances=5", "env.NEW=x", "retries=1"};
  char err[512];
  spec_job *s;
  const char *t = "name: a\nroles:\n  worker: {command: x}\n";
  assert_int_equal(spec_parse("t.yaml", t, strlen(t), sets, 3, &s, err, sizeof err), 0);
  assert_int_equal(s->roles[0].instances, 5);
  assert_int_equal(s->retries, 1);
  assert_int_equal(s->nenv, 1);
  assert_string_equal(s->env[0].value, "x");
  spec_free(s);
}

static const struct {
  const char *text, *want;
} BAD[] = {
    {"name: a\nroles:\n  w: {comand: x}\n",
     "t.yaml:3:7: unknown key 'comand' in role 'w': did you mean 'command'?"},
    {"name: a\nroles:\n  w: {command: x, instances: 0}\n",
     "t.yaml:3:30: roles.w.instances must be between 1"},
    {"name: a\nroles:\n  w: {command: x, memory: 12}\n", "t.yaml:3:27: roles.w.memory is 12 bytes"},
    {"name: a\nroles:\n  w: {command: x, memory: 3XB}\n",
     "t.yaml:3:27: roles.w.memory: '3XB' is not a size"},
    {"name: a\nname: b\nroles: {w: {command: x}}\n",
     "t.yaml:2:1: duplicate key 'name' (first at line 1)"},
    {"name: a\nroles: {w: {command: []}}\n", "t.yaml:2:22: roles.w.command is an empty list"},
    {"name: a\nbackend: k8s\nroles: {w: {command: x}}\n",
     "t.yaml:2:10: backend 'k8s' is not known"},
    {"name: a\nrestart: sometimes\nroles: {w: {command: x}}\n",
     "t.yaml:2:10: restart must be job or task"},
    {"name: a\nfeed: {format: csv, input: x}\nroles: {w: {command: x}}\n",
     "t.yaml:2:16: feed.format 'csv' is not known"},
    {"name: a\nfeed: {input: x, follow: []}\nroles: {w: {command: x}}\n",
     "t.yaml:2:26: feed.follow must be the path of the file whose appearance ends the input"},
    {"name: a\nfeed: {input: x, consume: soon}\nroles: {w: {command: x}}\n",
     "t.yaml:2:27: feed.consume must be true or false"},
    {"name: a\nroles: {W: {command: x}}\n", "t.yaml:2:9: role name 'W' is not valid"},
    {"name: a\nroles: {w: {command: x, shuffle: 1}}\n",
     "t.yaml:2:25: unknown key 'shuffle' in role 'w'"},
    {"name: [a]\nroles: {w: {command: x}}\n", "t.yaml:1:7: name must be a string, not a list"},
    {"name: a\nroles: {w: {command: x, service: maybe}}\n",
     "t.yaml:2:34: roles.w.service must be true or false"},
    {"name: a\n  bad indent: x\n", "t.yaml:2:13: YAML syntax error"},
    {"", "t.yaml:1:1: the spec has no name"},
    {"name: a\nretry_on: [0]\nroles: {w: {command: x}}\n",
     "t.yaml:2:12: each retry_on code must be between 1 and 255"},
    {"name: a\nretry_on: {a: 1}\nroles: {w: {command: x}}\n",
     "t.yaml:2:11: retry_on must be an exit code or a list"},
    {"name: a\nheartbeat_timeout: soon\nroles: {w: {command: x}}\n",
     "t.yaml:2:20: heartbeat_timeout must be a duration"},
    /* 10,000,000 ms with leading zeros: once cut at 31 characters and read as 100 ms */
    {"name: a\nheartbeat_timeout: 000000000000000000000000000010000000ms\nroles: {w: {command: "
     "x}}\n",
     "t.yaml:2:20: heartbeat_timeout must be a duration"},
    {"name: a\nheartbeat_timeout: 00000000000000000000000000000000030s\nroles: {w: {command: x}}\n",
     "t.yaml:2:20: heartbeat_timeout must be a duration"},
    {"name: a\nroles: {w: {command: x, instances: 5, elastic: {min: 2, max: 4}}}\n",
     "t.yaml:2:48: roles.w: elastic needs min <= instances <= max, got 2 <= 5 <= 4"},
    {"name: a\nroles: {w: {command: x, elastic: {min: 1}}}\n",
     "t.yaml:2:34: roles.w.elastic needs both min and max"},
    {"name: a\nroles: {w: {command: x, elastic: {min: 1, maxx: 2}}}\n",
     "t.yaml:2:43: unknown key 'maxx' in elastic: did you mean 'max'?"},
    {"name: a\nroles: {w: *nope}\n", "t.yaml:2:12: alias *nope has no anchor &nope before it"},
    {"name: &a a\nbackend: &a b\nroles: {w: {command: x}}\n",
     "t.yaml:2:10: anchor &a is defined twice (first at line 1)"},
    {"name: a\nroles: &r {w: *r}\n", "t.yaml:2:15: alias *r is inside the node it names"},
    {"name: a\nroles: {&k w: {command: x}, *k : {command: y}}\n",
     "t.yaml:2:29: duplicate key 'w' (first at line 2)"},
    {"name: a\n[b]: c\n", "t.yaml:2:1: a key must be a plain name, not a list or a map"},
    {"name: a\n? {b: c}\n: d\n", "t.yaml:2:3: a key must be a plain name, not a list or a map"},
};

static void test_bad_specs(void **state) {
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
    char err[1024];
    spec_job *s = NULL;
    int rc = spec_parse("t.yaml", BAD[i].text, strlen(BAD[i].text), NULL, 0, &s, err, sizeof err);
    if (rc != LOOM_ESPEC || strncmp(err, BAD[i].want, strlen(BAD[i].want)) != 0)
      fail_msg("case %zu: rc %d\n  got:  %s\n  want: %s", i, rc, err, BAD[i].want);
    assert_null(s);
  }
}

static void test_restart_keys(void **state) {
  spec_job *s =
      parse_ok("name: a\nrestart: task\nmax_restarts: 3\nretry_on: [75, 143]\n"
               "heartbeat_timeout: 500ms\n"
               "roles: {worker: {instances: 3, elastic: {min: 2, max: 4}, command: x}}\n");
  assert_string_equal(s->restart, "task");
  assert_int_equal(s->max_restarts, 3);
  assert_int_equal(s->nretry_on, 2);
  assert_true(spec_retryable(s, 75, 0));
  assert_true(spec_retryable(s, 1, 9)); /* signals always */
  assert_false(spec_retryable(s, 3, 0));
  assert_int_equal(s->heartbeat_timeout_ms, 500);
  assert_int_equal(s->roles[0].elastic_min, 2);
  assert_int_equal(s->roles[0].elastic_max, 4);
  spec_free(s);
  s = parse_ok("name: a\nheartbeat_timeout: 30\nroles: {w: {command: x}}\n");
  assert_int_equal(s->heartbeat_timeout_ms, 30000);
  assert_true(spec_retryable(s, 3, 0)); /* no retry_on: everything */
  spec_free(s);
}

static void test_deep_and_large(void **state) {
  char text[4096] = "name: a\nroles: {w: {command: x}}\nenv: ";
  for (int i = 0; i < 100; i++) strcat(text, "[");
  char err[512];
  spec_job *s;
  assert_int_equal(spec_parse("t.yaml", text, strlen(text), NULL, 0, &s, err, sizeof err),
                   LOOM_ESPEC);
  static char big[2 << 20];
  memset(big, '#', sizeof big - 1);
  assert_int_equal(spec_parse("t.yaml", big, sizeof big - 1, NULL, 0, &s, err, sizeof err),
                   LOOM_ESPEC);
  assert_non_null(strstr(err, "at most"));
}

/* The tree is built from libyaml's events so every limit is checked as the
 * text is read: a spec under the size cap is refused or accepted in well
 * under a second (libyaml's document loader took seconds on deep nesting,
 * and a duplicate-key check by scanning took seconds on many keys). */
static double cpu_now(void) { /* CPU time, not wall: the machine may be busy */
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#define FAST_S 2.0 /* generous: the new parser takes milliseconds, even under ASan */

static void parse_fast(const char *text, int want_rc, const char *want) {
  char err[1024] = "";
  spec_job *s = NULL;
  double t0 = cpu_now();
  int rc = spec_parse("t.yaml", text, strlen(text), NULL, 0, &s, err, sizeof err);
  double took = cpu_now() - t0;
  spec_free(s);
  if (rc != want_rc || (want && !strstr(err, want)))
    fail_msg("rc %d (want %d)\n  got:  %s\n  want: %s", rc, want_rc, err, want ? want : "");
  if (took > FAST_S) fail_msg("took %.2f s of CPU (at most %.1f): %s", took, FAST_S, err);
}

/* head, then open n times, mid, then close n times. */
static char *repeat(const char *head, const char *open, int n, const char *mid, const char *close) {
  size_t len = strlen(head) + n * (strlen(open) + strlen(close)) + strlen(mid) + 2;
  char *t = malloc(len), *p = t;
  assert_non_null(t);
  p += sprintf(p, "%s", head);
  for (int i = 0; i < n; i++) p += sprintf(p, "%s", open);
  p += sprintf(p, "%s", mid);
  for (int i = 0; i < n; i++) p += sprintf(p, "%s", close);
  sprintf(p, "\n");
  return t;
}

static void test_deep_fast(void **state) {
  const char *head = "name: a\nroles: {w: {command: x}}\nenv: ";
  static const struct {
    const char *open, *mid, *close;
    int n;
    const char *want;
  } CASES[] = {
      /* the root map is level 0, env's value level 1: level 33 is column 6 + 32 */
      {"[", "", "]", 40000, "t.yaml:3:38: nested too deeply (at most 32 levels"},
      {"[", "", "]", 100000, "t.yaml:3:38: nested too deeply (at most 32 levels"},
      {"[", "", "", 100000, "t.yaml:3:38: nested too deeply"}, /* never closed */
      {"{a: ", "b", "}", 60000, "t.yaml:3:131: nested too deeply"},
      {"[", "x", "]", 32, "t.yaml:3:38: nested too deeply"}, /* a scalar at 33 */
      {"[", "", "]", 33, "t.yaml:3:38: nested too deeply"},  /* a list at 33 */
      {"[", "", "]", 32, "t.yaml:3:6: env must be a map"},   /* 32 is fine */
  };
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    char *t = repeat(head, CASES[i].open, CASES[i].n, CASES[i].mid, CASES[i].close);
    parse_fast(t, LOOM_ESPEC, CASES[i].want);
    free(t);
  }
  /* block style, one more level a line */
  char *t = malloc(1 << 20), *p = t;
  p += sprintf(p, "name: a\nroles: {w: {command: x}}\nenv:\n");
  for (int i = 1; i < 100; i++) p += sprintf(p, "%*s- \n", i, "");
  parse_fast(t, LOOM_ESPEC, "t.yaml:36:34: nested too deeply");
  /* an alias that would nest its anchor too deeply is refused where it is */
  char *a = repeat("name: a\nx: &d ", "[", 20, "", "]");
  char *b = repeat("feed: ", "[", 20, "*d", "]");
  sprintf(t, "%s%s", a, b);
  parse_fast(t, LOOM_ESPEC, "t.yaml:3:27: nested too deeply");
  free(a);
  free(b);
  free(t);
}

static void test_aliases(void **state) {
  /* an alias is a copy of its anchor's node */
  spec_job *s = parse_ok("name: a\nenv: &e {A: '1', B: x}\n"
                         "roles: {w: {command: x, env: *e}, v: {command: &c y, label: *c}}\n");
  assert_int_equal(s->nenv, 2);
  const spec_role *w = spec_role_find(s, "w"), *v = spec_role_find(s, "v");
  assert_int_equal(w->nenv, 2);
  assert_string_equal(w->env[1].key, "B");
  assert_string_equal(w->env[1].value, "x");
  assert_string_equal(v->label, "y");
  spec_free(s);
  /* --set replaces an aliased copy without touching the original */
  const char *sets[] = {"roles.w.env.A=2"};
  char err[512];
  const char *t = "name: a\nenv: &e {A: '1'}\nroles: {w: {command: x, env: *e}}\n";
  assert_int_equal(spec_parse("t.yaml", t, strlen(t), sets, 1, &s, err, sizeof err), 0);
  assert_string_equal(s->env[0].value, "1");
  assert_string_equal(s->roles[0].env[0].value, "2");
  spec_free(s);
  /* "billion laughs": nine levels of nine aliases is refused as too large,
   * after copying at most SPEC_MAX_NODES nodes */
  char *lol = malloc(4096), *p = lol;
  p += sprintf(p, "name: a\nroles: {w: {command: x}}\nx0: &a0 [l, l, l, l, l, l, l, l, l]\n");
  for (int i = 1; i < 10; i++) {
    p += sprintf(p, "x%d: &a%d [", i, i);
    for (int j = 0; j < 9; j++) p += sprintf(p, "%s*a%d", j ? ", " : "", i - 1);
    p += sprintf(p, "]\n");
  }
  parse_fast(lol, LOOM_ESPEC, "t.yaml: the document is too large (more than 100000 nodes)");
  free(lol);
}

/* Near the 1 MiB cap: many keys, a long list, many anchors, long values. */
static void test_large_fast(void **state) {
  size_t cap = 1 << 20;
  char *t = malloc(cap + 64), *p;
  /* 45,000 environment variables (90,000 nodes) are accepted */
  p = t + sprintf(t, "name: a\nroles: {w: {command: x}}\nenv:\n");
  for (int i = 0; i < 45000; i++) p += sprintf(p, "  K%d: v\n", i);
  parse_fast(t, 0, NULL);
  /* ... and a duplicate among them is found, with both lines */
  sprintf(p, "  K7: w\n");
  parse_fast(t, LOOM_ESPEC, "t.yaml:45004:3: duplicate key 'K7' (first at line 11)");
  /* 80,000 keys in one flow map: too many nodes */
  p = t + sprintf(t, "name: a\nroles: {w: {command: x}}\nenv: {");
  for (int i = 0; i < 80000; i++) p += sprintf(p, "K%d: v,", i);
  sprintf(p, "}\n");
  parse_fast(t, LOOM_ESPEC, "too large (more than 100000 nodes)");
  /* a flat list of 300,000 codes: too many nodes */
  p = t + sprintf(t, "name: a\nroles: {w: {command: x}}\nretry_on: [");
  for (int i = 0; i < 300000; i++) p += sprintf(p, "1,");
  sprintf(p, "]\n");
  parse_fast(t, LOOM_ESPEC, "too large (more than 100000 nodes)");
  /* 40,000 anchors, then an alias to each */
  p = t + sprintf(t, "name: a\nroles: {w: {command: x}}\nfeed: [");
  for (int i = 0; i < 40000; i++) p += sprintf(p, "&a%d x,", i);
  p += sprintf(p, "]\nretry_on: [");
  for (int i = 0; i < 40000; i++) p += sprintf(p, "*a%d,", i);
  sprintf(p, "]\n");
  parse_fast(t, LOOM_ESPEC, "t.yaml:3:8: each retry_on code must be a whole number, got 'x'");
  /* one value of almost 1 MiB */
  p = t + sprintf(t, "name: a\nroles: {w: {command: x}}\nenv: {A: '");
  memset(p, 'x', cap - 100);
  sprintf(p + cap - 100, "'}\n");
  parse_fast(t, 0, NULL);
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_spec),      cmocka_unit_test(test_sets),
      cmocka_unit_test(test_bad_specs),      cmocka_unit_test(test_restart_keys),
      cmocka_unit_test(test_deep_and_large), cmocka_unit_test(test_deep_fast),
      cmocka_unit_test(test_aliases),        cmocka_unit_test(test_large_fast),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
