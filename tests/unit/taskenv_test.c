/* taskenv_test.c: the variables a task's process starts with
 * (src/agent/taskenv.c, agent_taskenv_set), one table of cases: a job's
 * roles and instances, this task (role, index, process, ranks) in; the
 * LOOM_* variables, torchrun's (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), TF_CONFIG and
 * the limits for `loom __exec` (LOOM__*) out, and those that must be
 * absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "agent/agent_int.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXV 24

typedef struct {
  const char *role;
  int instances;
} role_row;

typedef struct {
  const char *what;
  role_row roles[4]; /* the job's roles, in the cluster spec's order */
  /* this task and process */
  const char *role;
  int index, local, procs;
  bool training;
  int rank_base, world;
  const char *master_addr; /* NULL: none */
  int master_port;         /* 0: none */
  const char *gpus, *cpus, *cgroup;
  int gpu_count; /* the role's GPUs, -1 when the coordinator did not say */
  long long memory;
  const char *want[MAXV]; /* "K=V" each, in any order */
  const char *absent[MAXV];
} env_case;

/* The cluster spec of roles: role -> ["<role>-<i>.example:<2000 + n>"],
 * n counting every instance of the job. */
static json_t *cluster_of(const role_row *roles) {
  json_t *c = json_object();
  int n = 0;
  for (int r = 0; r < 4 && roles[r].role; r++) {
    json_t *arr = json_array();
    for (int i = 0; i < roles[r].instances; i++, n++) {
      char addr[96];
      snprintf(addr, sizeof addr, "%s-%d.example:%d", roles[r].role, i, 2000 + n);
      json_array_append_new(arr, json_string(addr));
    }
    json_object_set_new(c, roles[r].role, arr);
  }
  return c;
}

#define TF_CHIEF_2W                                                                                \
  "{\"chief\":[\"chief-0.example:2000\"],\"worker\":[\"worker-0.example:2001\",\"worker-1."        \
  "example:2002\"]}"
#define TF_PS                                                                                      \
  "{\"ps\":[\"ps-0.example:2000\"],\"worker\":[\"worker-0.example:2001\",\"worker-1.example:"      \
  "2002\",\"worker-2.example:2003\"]}"

static const env_case CASES[] = {
    {.what = "the chief of a chief and two workers, one process each",
     .roles = {{"chief", 1}, {"worker", 2}},
     .role = "chief",
     .index = 0,
     .local = 0,
     .procs = 1,
     .training = true,
     .rank_base = 0,
     .world = 3,
     .master_addr = "chief-0.example",
     .master_port = 29500,
     .gpus = "",
     .gpu_count = -1,
     .cpus = "",
     .cgroup = "",
     .want = {"LOOM_ROLE=chief",
              "LOOM_INDEX=0",
              "LOOM_TASK=chief:0",
              "LOOM_ATTEMPT=2",
              "LOOM_JOB_ID=job-1",
              "LOOM_JOB_DIR=/jobs/job-1",
              "LOOM_HOST=10.0.0.5",
              "LOOM_PORT=40000",
              "LOOM_TENSORBOARD_DIR=/jobs/job-1/tensorboard",
              "LOOM_CLUSTER=" TF_CHIEF_2W,
              "LOOM_LOCAL_RANK=0",
              "LOOM_WORLD_SIZE=3",
              "LOOM_GENERATION=7",
              "LOOM_RANK=0",
              "RANK=0",
              "WORLD_SIZE=3",
              "LOCAL_RANK=0",
              "LOCAL_WORLD_SIZE=1",
              "GROUP_RANK=0",
              "MASTER_ADDR=chief-0.example",
              "MASTER_PORT=29500",
              "TF_CONFIG={\"cluster\":" TF_CHIEF_2W ",\"task\":{\"type\":\"chief\",\"index\":0}}",
              "LOOM__PPID=4242"},
     .absent = {"CUDA_VISIBLE_DEVICES", "LOOM__CPUS", "LOOM__MEM", "LOOM__CGROUP"}},
    {.what = "worker 1's third of four processes: ranks 4..7 of 12",
     .roles = {{"chief", 1}, {"worker", 2}},
     .role = "worker",
     .index = 1,
     .local = 2,
     .procs = 4,
     .training = true,
     .rank_base = 8,
     .world = 12,
     .master_addr = "chief-0.example",
     .master_port = 29500,
     .gpus = "2",
     .gpu_count = 1,
     .cpus = "8-11",
     .cgroup = "",
     .want = {"LOOM_ROLE=worker", "LOOM_INDEX=1", "LOOM_LOCAL_RANK=2", "LOCAL_RANK=2",
              "LOCAL_WORLD_SIZE=4", "LOOM_WORLD_SIZE=12", "LOOM_RANK=10", "RANK=10",
              "WORLD_SIZE=12", "GROUP_RANK=2", "MASTER_ADDR=chief-0.example", "MASTER_PORT=29500",
              "CUDA_VISIBLE_DEVICES=2", "LOOM__CPUS=8-11",
              "TF_CONFIG={\"cluster\":" TF_CHIEF_2W ",\"task\":{\"type\":\"worker\",\"index\":1}}"},
     .absent = {"LOOM__MEM", "LOOM__CGROUP"}},
    {.what = "a parameter server: no ranks, but the workers' world size",
     .roles = {{"ps", 1}, {"worker", 3}},
     .role = "ps",
     .index = 0,
     .local = 0,
     .procs = 1,
     .training = false,
     .rank_base = 0,
     .world = 3,
     .master_addr = "worker-0.example",
     .master_port = 29500,
     .gpus = "",
     .gpu_count = -1,
     .cpus = "",
     .cgroup = "",
     .memory = 1LL << 30,
     .want = {"LOOM_ROLE=ps", "LOOM_INDEX=0", "LOOM_WORLD_SIZE=3", "LOOM_LOCAL_RANK=0",
              "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "LOOM__MEM=1073741824", "LOOM_CLUSTER=" TF_PS,
              "TF_CONFIG={\"cluster\":" TF_PS ",\"task\":{\"type\":\"ps\",\"index\":0}}"},
     .absent = {"RANK", "WORLD_SIZE", "LOOM_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                "LOOM__CGROUP", "CUDA_VISIBLE_DEVICES"}},
    {.what = "a training worker before the rendezvous names a master",
     .roles = {{"worker", 3}},
     .role = "worker",
     .index = 2,
     .local = 0,
     .procs = 1,
     .training = true,
     .rank_base = 2,
     .world = 3,
     .gpus = "0,1",
     .gpu_count = 2,
     .cpus = "",
     .cgroup = "/sys/fs/cgroup/loom-job-1/worker-2",
     .memory = 512LL << 20,
     .want = {"RANK=2", "LOOM_RANK=2", "WORLD_SIZE=3", "GROUP_RANK=2", "CUDA_VISIBLE_DEVICES=0,1",
              "LOOM__CGROUP=/sys/fs/cgroup/loom-job-1/worker-2"},
     .absent = {"MASTER_ADDR", "MASTER_PORT", "LOOM__MEM", "LOOM__CPUS"}},
    {.what = "no processes said (procs 0): GROUP_RANK divides by one",
     .roles = {{"worker", 2}},
     .role = "worker",
     .index = 1,
     .local = 0,
     .procs = 0,
     .training = true,
     .rank_base = 1,
     .world = 2,
     .master_addr = "worker-0.example",
     .master_port = 1234,
     .gpus = "",
     .gpu_count = -1,
     .cpus = "",
     .cgroup = "",
     .want = {"GROUP_RANK=1", "RANK=1", "LOCAL_WORLD_SIZE=0", "MASTER_PORT=1234"},
     .absent = {"LOOM__MEM"}},
    {.what = "a role with gpus: 0 sees no GPU (CUDA_VISIBLE_DEVICES set, empty)",
     .roles = {{"worker", 2}},
     .role = "worker",
     .index = 0,
     .local = 0,
     .procs = 1,
     .training = true,
     .rank_base = 0,
     .world = 2,
     .gpus = "",
     .gpu_count = 0,
     .cpus = "",
     .cgroup = "",
     .want = {"CUDA_VISIBLE_DEVICES="}},
    {.what = "gpus: 0 on a backend that placed nothing (Slurm, YARN, Spark): still none",
     .roles = {{"ps", 1}, {"worker", 1}},
     .role = "ps",
     .index = 0,
     .local = 0,
     .procs = 1,
     .training = false,
     .rank_base = 0,
     .world = 1,
     .gpus = "",
     .gpu_count = 0,
     .cpus = "",
     .cgroup = "",
     .want = {"CUDA_VISIBLE_DEVICES="}},
    {.what = "GPUs the host gave (a Slurm step, a YARN container): loom sets none",
     .roles = {{"worker", 1}},
     .role = "worker",
     .index = 0,
     .local = 0,
     .procs = 1,
     .training = true,
     .rank_base = 0,
     .world = 1,
     .gpus = "",
     .gpu_count = 2,
     .cpus = "",
     .cgroup = "",
     .absent = {"CUDA_VISIBLE_DEVICES"}},
};

/* The value of k in e, or NULL; fails when k is there more than once. */
static const char *env_get(const envv *e, const char *k) {
  size_t kl = strlen(k);
  const char *found = NULL;
  for (int i = 0; i < e->n; i++)
    if (!strncmp(e->v[i], k, kl) && e->v[i][kl] == '=') {
      assert_null(found);
      found = e->v[i] + kl + 1;
    }
  return found;
}

static void run_case(const env_case *c, envv *e) {
  json_t *cluster = cluster_of(c->roles);
  char *cluster_s = json_dumps(cluster, JSON_COMPACT);
  char task[64];
  snprintf(task, sizeof task, "%s:%d", c->role, c->index);
  agent_taskenv t = {.role = c->role,
                     .index = c->index,
                     .task = task,
                     .attempt = 2,
                     .job_id = "job-1",
                     .job_dir = "/jobs/job-1",
                     .host = "10.0.0.5",
                     .port = 40000,
                     .cluster_s = cluster_s,
                     .tf_cluster = cluster,
                     .local = c->local,
                     .procs = c->procs,
                     .training = c->training,
                     .rank_base = c->rank_base,
                     .world = c->world,
                     .generation = 7,
                     .master_addr = c->master_addr,
                     .has_master_port = c->master_port != 0,
                     .master_port = c->master_port,
                     .gpus = c->gpus,
                     .gpu_count = c->gpu_count,
                     .cpus = c->cpus,
                     .cgroup = c->cgroup,
                     .memory = c->memory,
                     .ppid = 4242};
  agent_taskenv_set(e, &t);
  for (int i = 0; i < MAXV && c->want[i]; i++) {
    const char *eq = strchr(c->want[i], '=');
    assert_non_null(eq);
    char k[64];
    snprintf(k, sizeof k, "%.*s", (int)(eq - c->want[i]), c->want[i]);
    const char *v = env_get(e, k);
    if (!v || strcmp(v, eq + 1))
      fail_msg("%s: %s is %s, wanted %s", c->what, k, v ? v : "(absent)", eq + 1);
  }
  for (int i = 0; i < MAXV && c->absent[i]; i++) {
    const char *v = env_get(e, c->absent[i]);
    if (v) fail_msg("%s: %s is %s, wanted it absent", c->what, c->absent[i], v);
  }
  assert_null(e->v[e->n]);
  free(cluster_s);
  json_decref(cluster);
}

static void test_cases(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
    envv e = {0};
    run_case(&CASES[i], &e);
    agent_env_free(&e);
  }
}

/* What the agent inherited under the same names is replaced, in place,
 * never set twice; other variables are left as they are. */
static void test_inherited_variables_are_replaced(void **state) {
  (void)state;
  envv e = {.cap = 8};
  e.v = calloc((size_t)e.cap, sizeof *e.v);
  assert_non_null(e.v);
  const char *before[] = {"HOME=/home/u", "RANK=99", "TF_CONFIG={}", "LOOM_ROLE=old"};
  for (int i = 0; i < 4; i++) e.v[e.n++] = strdup(before[i]);
  run_case(&CASES[1], &e);
  assert_string_equal(e.v[0], "HOME=/home/u");
  assert_string_equal(e.v[1], "RANK=10");
  assert_string_equal(env_get(&e, "LOOM_ROLE"), "worker");
  agent_env_free(&e);
}

/* The host's CUDA_VISIBLE_DEVICES (a Slurm step's, a GPU node's login
 * environment) is replaced by the empty string for a role without GPUs
 * (the case of index gpus0) and kept for one whose GPUs the host gave
 * (index kept). */
static void test_inherited_gpus(void **state) {
  (void)state;
  const size_t gpus0 = sizeof CASES / sizeof *CASES - 3, kept = gpus0 + 2;
  assert_int_equal(CASES[gpus0].gpu_count, 0);
  assert_int_equal(CASES[kept].gpu_count, 2);
  for (int k = 0; k < 2; k++) {
    envv e = {.cap = 8};
    e.v = calloc((size_t)e.cap, sizeof *e.v);
    assert_non_null(e.v);
    e.v[e.n++] = strdup("CUDA_VISIBLE_DEVICES=0,1");
    e.v[e.n++] = strdup("HOME=/home/u");
    const env_case *c = &CASES[k ? kept : gpus0];
    /* run_case checks CUDA_VISIBLE_DEVICES against the case's want and
     * absent: give it a copy without those */
    env_case copy = *c;
    memset(copy.want, 0, sizeof copy.want);
    memset(copy.absent, 0, sizeof copy.absent);
    run_case(&copy, &e);
    const char *v = env_get(&e, "CUDA_VISIBLE_DEVICES");
    assert_non_null(v);
    assert_string_equal(v, k ? "0,1" : "");
    assert_string_equal(env_get(&e, "HOME"), "/home/u");
    agent_env_free(&e);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases),
      cmocka_unit_test(test_inherited_variables_are_replaced),
      cmocka_unit_test(test_inherited_gpus),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
