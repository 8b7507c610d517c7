/* coord_test.c: the coordinator's parts that decide without I/O: the
 * rank-order rule (setup and elastic membership), device placement, and
 * the KV store's accounting and cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "coord/coord_int.h"
#include "testutil.h"

/* A job of roles (name, instances, procs, vcores, gpus, training). */
typedef struct {
  const char *name;
  int instances, procs, vcores, gpus;
  bool training;
} role_def;

typedef struct {
  spec_role roles[8];
  task tasks[32];
  int ntasks;
} job;

static void make_job(job *j, const role_def *defs, int n) {
  memset(j, 0, sizeof *j);
  for (int i = 0; i < n; i++) {
    spec_role *r = &j->roles[i];
    r->name = (char *)defs[i].name;
    r->instances = defs[i].instances;
    r->procs = defs[i].procs;
    r->vcores = defs[i].vcores;
    r->gpus = defs[i].gpus;
    for (int k = 0; k < r->instances; k++) {
      task *t = &j->tasks[j->ntasks];
      t->id = j->ntasks++;
      t->role = r;
      t->index = k;
      t->rank_base = -1;
      t->training = defs[i].training;
      snprintf(t->name, sizeof t->name, "%s:%d", r->name, k);
    }
  }
}

/* Spec order evaluator, worker, ps, chief: ranks go chief, worker, then the
 * other training roles in spec order; ps (not training) gets none. */
static void test_rank_order(void **state) {
  const role_def defs[] = {{"evaluator", 1, 1, 0, 0, true},
                           {"worker", 2, 2, 0, 0, true},
                           {"ps", 1, 1, 0, 0, false},
                           {"chief", 1, 1, 0, 0, true},
                           {"trainer", 2, 3, 0, 0, true}};
  job j;
  make_job(&j, defs, 5);
  int world = coord_rank_tasks(j.tasks, j.ntasks, NULL);
  /* chief 0; worker:0 1-2, worker:1 3-4; evaluator 5; trainer:0 6-8, trainer:1 9-11 */
  assert_int_equal(world, 12);
  const struct {
    const char *name;
    int rank;
  } want[] = {{"evaluator:0", 5}, {"worker:0", 1},  {"worker:1", 3}, {"ps:0", -1},
              {"chief:0", 0},     {"trainer:0", 6}, {"trainer:1", 9}};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    assert_string_equal(j.tasks[i].name, want[i].name);
    assert_int_equal(j.tasks[i].rank_base, want[i].rank);
  }
}

static bool not_worker0(const task *t) { return strcmp(t->name, "worker:0") != 0; }

/* An elastic membership without worker:0: the others close ranks. */
static void test_membership_ranks_close_up(void **state) {
  const role_def defs[] = {{"chief", 1, 1, 0, 0, true}, {"worker", 3, 2, 0, 0, true}};
  job j;
  make_job(&j, defs, 2);
  assert_int_equal(coord_rank_tasks(j.tasks, j.ntasks, NULL), 7);
  assert_int_equal(coord_rank_tasks(j.tasks, j.ntasks, not_worker0), 5);
  assert_int_equal(j.tasks[0].rank_base, 0); /* chief */
  assert_int_equal(j.tasks[2].rank_base, 1); /* worker:1 */
  assert_int_equal(j.tasks[3].rank_base, 3); /* worker:2 */
}

/* The local backend's placement: this machine's CPU and GPU ids handed
 * out round-robin, a role's vcores and gpus at a time. */
static void test_devices_round_robin(void **state) {
  const role_def defs[] = {
      {"chief", 1, 1, 1, 1, true}, {"worker", 2, 1, 2, 0, true}, {"evaluator", 1, 1, 0, 3, true}};
  job j;
  make_job(&j, defs, 3);
  int ncpu = backend_local_cpus(), ngpu = backend_local_gpus();
  int nc = ncpu > 0 ? ncpu : 1, ng = ngpu > 0 ? ngpu : 1;
  int cc = 0, gc = 0;
  for (int i = 0; i < j.ntasks; i++)
    loom__backend_round_robin(&cc, &gc, j.tasks[i].role, j.tasks[i].cpus, sizeof j.tasks[i].cpus,
                              j.tasks[i].gpus, sizeof j.tasks[i].gpus);
  char want[64];
  snprintf(want, sizeof want, "%d", 0);
  assert_string_equal(j.tasks[0].cpus, want);
  snprintf(want, sizeof want, "%d,%d", 1 % nc, 2 % nc);
  assert_string_equal(j.tasks[1].cpus, want);
  snprintf(want, sizeof want, "%d,%d", 3 % nc, 4 % nc);
  assert_string_equal(j.tasks[2].cpus, want);
  assert_string_equal(j.tasks[3].cpus, ""); /* vcores 0: not constrained */
  assert_string_equal(j.tasks[0].gpus, "0");
  assert_string_equal(j.tasks[1].gpus, "");
  snprintf(want, sizeof want, "%d,%d,%d", 1 % ng, 2 % ng, 3 % ng);
  assert_string_equal(j.tasks[3].gpus, want);
  assert_int_equal(cc, 5);
  assert_int_equal(gc, 4);
}

static void test_kv_store_accounting_and_cap(void **state) {
  setenv("LOOM_KV_MAX_TOTAL", "100", 1);
  coord *co = calloc(1, sizeof *co);
  assert_non_null(co);
  assert_int_equal(coord_kv_store(co, "a", "0123456789", 10), 0);
  assert_int_equal(coord_kv_store(co, "b", "xyz", 3), 0);
  assert_int_equal(co->kv_bytes, 13);
  kv_entry *e = coord_kv_find(co, "a");
  assert_non_null(e);
  assert_int_equal(e->len, 10);
  assert_memory_equal(e->val, "0123456789", 10);
  assert_int_equal(e->val[10], 0); /* values are kept NUL-terminated */
  /* replacing a value counts its new length only */
  assert_int_equal(coord_kv_store(co, "a", "ab", 2), 0);
  assert_int_equal(co->kv_bytes, 5);
  /* over the cap: refused, nothing changed */
  char big[96];
  memset(big, 'q', sizeof big);
  assert_int_equal(coord_kv_store(co, "c", big, sizeof big), LOOM_ERANGE);
  assert_null(coord_kv_find(co, "c"));
  assert_int_equal(co->kv_bytes, 5);
  assert_int_equal(coord_kv_store(co, "c", big, 95), 0); /* exactly 100 */
  assert_int_equal(co->kv_bytes, 100);
  /* many keys: every one found (hash buckets chain) */
  coord_kv_clear(co);
  setenv("LOOM_KV_MAX_TOTAL", "10000000", 1);
  char k[32];
  for (int i = 0; i < 5000; i++) {
    snprintf(k, sizeof k, "key/%d", i);
    assert_int_equal(coord_kv_store(co, k, k, strlen(k)), 0);
  }
  for (int i = 0; i < 5000; i++) {
    snprintf(k, sizeof k, "key/%d", i);
    e = coord_kv_find(co, k);
    assert_non_null(e);
    assert_memory_equal(e->val, k, strlen(k));
  }
  assert_null(coord_kv_find(co, "key/5000"));
  coord_kv_clear(co);
  assert_int_equal(co->kv_bytes, 0);
  free(co);
  unsetenv("LOOM_KV_MAX_TOTAL");
}

static json_t *load_state(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/state.json", dir);
  json_error_t e;
  json_t *j = json_load_file(p, 0, &e);
  if (!j) fail_msg("state.json does not parse: %s (line %d)", e.text, e.line);
  return j;
}

static const char *task_state_of(json_t *st, int i) {
  return json_string_value(
      json_object_get(json_array_get(json_object_get(st, "tasks"), i), "state"));
}

/* state.json mirrors the tasks, rewritten incrementally (only changed
 * tasks re-rendered) yet always whole and equal to a fresh rendering; each
 * event is one line of events.jsonl, there before the state that follows. */
static void test_state_and_events_files(void **state) {
  char *dir = test_tmpdir("coordstate");
  const role_def defs[] = {
      {"chief", 1, 1, 0, 0, true}, {"worker", 3, 1, 0, 0, true}, {"ps", 1, 1, 0, 0, false}};
  job j;
  make_job(&j, defs, 3);
  spec_job sj = {0};
  sj.name = "statejob";
  sj.retries = 2;
  coord_opts o = {.job_dir = dir, .job_id = "statejob-20261124-000000-abcd"};
  coord *co = calloc(1, sizeof *co);
  assert_non_null(co);
  co->o = &o;
  co->s = &sj;
  co->tasks = j.tasks;
  co->ntasks = j.ntasks;
  co->root = -1;
  char ep[4200];
  snprintf(ep, sizeof ep, "%s/events.jsonl", dir);
  co->events = fopen(ep, "a");
  assert_non_null(co->events);
  coord_rank_tasks(co->tasks, co->ntasks, NULL);
  coord_state_write(co);
  json_t *st = load_state(dir);
  assert_string_equal(json_string_value(json_object_get(st, "name")), "statejob");
  assert_string_equal(json_string_value(json_object_get(st, "state")), "starting");
  assert_int_equal(json_integer_value(json_object_get(st, "retries")), 2);
  assert_int_equal(json_array_size(json_object_get(st, "tasks")), 5);
  for (int i = 0; i < 5; i++) assert_string_equal(task_state_of(st, i), "pending");
  assert_int_equal(
      json_integer_value(json_object_get(json_array_get(json_object_get(st, "tasks"), 3), "rank")),
      3);
  json_decref(st);
  /* one task changes: only it is re-rendered, the file stays whole */
  coord_task_set(co, &co->tasks[2], T_RUNNING);
  coord_event(co, &co->tasks[2], "started", json_pack("{s:i}", "pid", 42));
  assert_true(co->state_dirty);
  coord_state_write(co);
  assert_false(co->state_dirty);
  st = load_state(dir);
  assert_string_equal(task_state_of(st, 2), "running");
  assert_string_equal(task_state_of(st, 1), "pending");
  assert_string_equal(task_state_of(st, 4), "pending");
  json_decref(st);
  /* the event is in events.jsonl already (flushed before the state) */
  FILE *f = fopen(ep, "r");
  assert_non_null(f);
  char line[4096];
  assert_non_null(fgets(line, sizeof line, f));
  json_error_t e;
  json_t *ev = json_loads(line, 0, &e);
  assert_non_null(ev);
  assert_string_equal(json_string_value(json_object_get(ev, "event")), "started");
  assert_string_equal(json_string_value(json_object_get(ev, "task")), "worker:1");
  assert_int_equal(json_integer_value(json_object_get(ev, "pid")), 42);
  assert_null(fgets(line, sizeof line, f));
  json_decref(ev);
  fclose(f);
  /* every task changes many times: the last write equals the last states */
  for (int round = 0; round < 50; round++)
    for (int i = 0; i < co->ntasks; i++) {
      coord_task_set(co, &co->tasks[i], (round + i) % 2 ? T_RUNNING : T_READY);
      if (round % 7 == 0) coord_state_write(co);
    }
  coord_state_write(co);
  st = load_state(dir);
  for (int i = 0; i < co->ntasks; i++)
    assert_string_equal(task_state_of(st, i), (49 + i) % 2 ? "running" : "ready");
  json_decref(st);
  fclose(co->events);
  coord_state_free(co);
  free(co);
  test_rm_rf(dir);
  free(dir);
}

/* Elastic membership: the live training tasks re-ranked and published as
 * generation G in the KV store (what libloom's elastic API reads). */
static void test_membership_published(void **state) {
  const role_def defs[] = {
      {"chief", 1, 1, 0, 0, true}, {"worker", 3, 2, 0, 0, true}, {"ps", 1, 1, 0, 0, false}};
  job j;
  make_job(&j, defs, 2 + 1);
  spec_job sj = {0};
  sj.name = "m";
  coord_opts o = {.job_dir = "/nonexistent", .job_id = "m-1"};
  coord *co = calloc(1, sizeof *co);
  assert_non_null(co);
  co->o = &o;
  co->s = &sj;
  co->tasks = j.tasks;
  co->ntasks = j.ntasks;
  co->generation = 3;
  j.tasks[2].left = true; /* worker:1 left */
  assert_int_equal(coord_publish_membership(co), 5);
  assert_int_equal(co->world_size, 5);
  kv_entry *e = coord_kv_find(co, "loom/membership/g3");
  assert_non_null(e);
  json_error_t err;
  json_t *m = json_loadb((const char *)e->val, e->len, 0, &err);
  assert_non_null(m);
  assert_int_equal(json_integer_value(json_object_get(m, "generation")), 3);
  assert_int_equal(json_integer_value(json_object_get(m, "world_size")), 5);
  json_t *ranks = json_object_get(m, "ranks");
  assert_int_equal(json_object_size(ranks), 3); /* chief, worker:0, worker:2; no ps */
  assert_int_equal(json_integer_value(json_object_get(ranks, "chief:0")), 0);
  assert_int_equal(json_integer_value(json_object_get(ranks, "worker:0")), 1);
  assert_int_equal(json_integer_value(json_object_get(ranks, "worker:2")), 3);
  assert_null(json_object_get(ranks, "worker:1"));
  json_decref(m);
  e = coord_kv_find(co, "loom/generation");
  assert_non_null(e);
  assert_string_equal((const char *)e->val, "3");
  coord_kv_clear(co);
  free(co);
}

/* A task's output: each line to its log (after the attempt header) and,
 * prefixed, to logs/all.log; stderr lines kept for the root cause. */
static void test_log_lines_reach_the_files(void **state) {
  char *dir = test_tmpdir("coordlog");
  char sub[4200];
  snprintf(sub, sizeof sub, "%s/logs", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  const role_def defs[] = {{"worker", 2, 1, 0, 0, true}};
  job j;
  make_job(&j, defs, 1);
  for (int i = 0; i < j.ntasks; i++)
    snprintf(j.tasks[i].file, sizeof j.tasks[i].file, "worker-%d", i);
  spec_job sj = {0};
  sj.name = "logs";
  coord_opts o = {.job_dir = dir, .job_id = "logs-1"};
  coord *co = calloc(1, sizeof *co);
  assert_non_null(co);
  co->o = &o;
  co->s = &sj;
  co->tasks = j.tasks;
  co->ntasks = j.ntasks;
  char ap[4300];
  snprintf(ap, sizeof ap, "%s/all.log", sub);
  co->alllog = fopen(ap, "w");
  assert_non_null(co->alllog);
  task *t = &co->tasks[1];
  coord_open_logs(co, t);
  const char out[] = "first\nsecond\n", err[] = "boom\n";
  wire_msg m = {.type = WIRE_LOG, .u.log = {.stream = 1, .proc = 0}};
  m.blob = (const unsigned char *)out;
  m.blob_len = sizeof out - 1;
  coord_on_log(co, t, &m);
  m.u.log.stream = 2;
  m.blob = (const unsigned char *)err;
  m.blob_len = sizeof err - 1;
  coord_on_log(co, t, &m);
  fclose(co->alllog);
  coord_close_log(co, t);
  char lp[4300], *txt = NULL;
  snprintf(lp, sizeof lp, "%s/worker-1.log", sub);
  assert_int_equal(loom__read_file(lp, 1 << 20, &txt, NULL), 0);
  assert_non_null(strstr(txt, "=== loom: worker:1 attempt 0, "));
  assert_non_null(strstr(txt, " ===\nfirst\nsecond\nboom\n"));
  free(txt);
  assert_int_equal(loom__read_file(ap, 1 << 20, &txt, NULL), 0);
  assert_string_equal(txt, "[worker:1] first\n[worker:1] second\n[worker:1] boom\n");
  free(txt);
  assert_int_equal(t->ring_n, 1); /* one stderr line kept */
  coord_ring_clear(t);
  free(co);
  test_rm_rf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rank_order),
      cmocka_unit_test(test_membership_ranks_close_up),
      cmocka_unit_test(test_devices_round_robin),
      cmocka_unit_test(test_kv_store_accounting_and_cap),
      cmocka_unit_test(test_state_and_events_files),
      cmocka_unit_test(test_membership_published),
      cmocka_unit_test(test_log_lines_reach_the_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
