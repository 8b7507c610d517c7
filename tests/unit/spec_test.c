/* spec_test.c: the spec parser: good specs resolve with their defaults,
 * bad ones name file:line:column and what to do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "spec/spec.h"

static spec_job *parse_ok(const char *text) {
  char err[1024];
  spec_job *s = NULL;
  int rc = spec_parse("t.yaml", text, strlen(text), NULL, 0, &s, err, sizeof err);
  if (rc != 0) fail_msg("unexpected error: %s", err);
  return s;
}

static void test_full_spec(void **state) {
  spec_job *s = parse_ok(
      "name: fashion-mlp\nretries: 2\nenv: {OMP_NUM_THREADS: \"1\"}\n"
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
    {"name: a\nroles:\n  w: {comand: x}\n", "t.yaml:3:7: unknown key 'comand' in role 'w': did you mean 'command'?"},
    {"name: a\nroles:\n  w: {command: x, instances: 0}\n", "t.yaml:3:30: roles.w.instances must be between 1"},
    {"name: a\nroles:\n  w: {command: x, memory: 12}\n", "t.yaml:3:27: roles.w.memory is 12 bytes"},
    {"name: a\nroles:\n  w: {command: x, memory: 3XB}\n", "t.yaml:3:27: roles.w.memory: '3XB' is not a size"},
    {"name: a\nname: b\nroles: {w: {command: x}}\n", "t.yaml:2:1: duplicate key 'name' (first at line 1)"},
    {"name: a\nroles: {w: {command: []}}\n", "t.yaml:2:22: roles.w.command is an empty list"},
    {"name: a\nbackend: yarn\nroles: {w: {command: x}}\n", "t.yaml:2:10: backend 'yarn' is not known"},
    {"name: a\nrestart: sometimes\nroles: {w: {command: x}}\n", "t.yaml:2:10: restart must be job or task"},
    {"name: a\nfeed: {format: csv, input: x}\nroles: {w: {command: x}}\n", "t.yaml:2:16: feed.format 'csv' is not known"},
    {"name: a\nroles: {W: {command: x}}\n", "t.yaml:2:9: role name 'W' is not valid"},
    {"name: a\nroles: {w: {command: x, shuffle: 1}}\n", "t.yaml:2:25: unknown key 'shuffle' in role 'w'"},
    {"name: [a]\nroles: {w: {command: x}}\n", "t.yaml:1:7: name must be a string, not a list"},
    {"name: a\nroles: {w: {command: x, service: maybe}}\n", "t.yaml:2:34: roles.w.service must be true or false"},
    {"name: a\n  bad indent: x\n", "t.yaml:2:13: YAML syntax error"},
    {"", "t.yaml:1:1: the spec has no name"},
    {"name: a\nretry_on: [0]\nroles: {w: {command: x}}\n", "t.yaml:2:12: each retry_on code must be between 1 and 255"},
    {"name: a\nretry_on: {a: 1}\nroles: {w: {command: x}}\n", "t.yaml:2:11: retry_on must be an exit code or a list"},
    {"name: a\nheartbeat_timeout: soon\nroles: {w: {command: x}}\n", "t.yaml:2:20: heartbeat_timeout must be a duration"},
    {"name: a\nroles: {w: {command: x, instances: 5, elastic: {min: 2, max: 4}}}\n", "t.yaml:2:48: roles.w: elastic needs min <= instances <= max, got 2 <= 5 <= 4"},
    {"name: a\nroles: {w: {command: x, elastic: {min: 1}}}\n", "t.yaml:2:34: roles.w.elastic needs both min and max"},
    {"name: a\nroles: {w: {command: x, elastic: {min: 1, maxx: 2}}}\n", "t.yaml:2:43: unknown key 'maxx' in elastic: did you mean 'max'?"},
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
  spec_job *s = parse_ok("name: a\nrestart: task\nmax_restarts: 3\nretry_on: [75, 143]\n"
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
  assert_int_equal(spec_parse("t.yaml", text, strlen(text), NULL, 0, &s, err, sizeof err), LOOM_ESPEC);
  static char big[2 << 20];
  memset(big, '#', sizeof big - 1);
  assert_int_equal(spec_parse("t.yaml", big, sizeof big - 1, NULL, 0, &s, err, sizeof err), LOOM_ESPEC);
  assert_non_null(strstr(err, "at most"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_spec),
      cmocka_unit_test(test_sets),
      cmocka_unit_test(test_bad_specs),
      cmocka_unit_test(test_restart_keys),
      cmocka_unit_test(test_deep_and_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
