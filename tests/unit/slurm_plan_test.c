/* slurm_plan_test.c: the Slurm backend's placement plan (src/backend/
 * slurm/plan.c), one table of cases: a partition's nodes and a spec's
 * roles in; the components of the Slurm job (tasks, CPUs, memory per CPU,
 * GPUs, label) and each role's component out, or the exact refusal text.
 * The first cases are test_slurm_place.py's, on its cluster: two nodes of
 * 4 CPUs, 4 GiB and 2 GPUs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "backend/slurm/plan.h"
#include "core/core.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MIB (1024ull * 1024)

typedef struct {
  const char *name;
  int instances, vcores;
  uint64_t memory; /* bytes */
  int gpus;
  const char *label;
} role_row;

typedef struct {
  int ntasks, vcores;
  unsigned long long mem_per_cpu_mb;
  int gpus;
  const char *label;
} comp_row;

typedef struct {
  const char *what;
  const slurm_node *nodes;
  int nnodes;
  role_row roles[4];
  int nroles;
  /* 0: placed as comps and role_comp say; LOOM_ERESOURCE: refused */
  int rc;
  comp_row comps[4];
  int ncomp;
  int role_comp[4];
  const char *refusal;
} plan_case;

/* test_slurm_place.py's cluster */
static const slurm_node TWO[] = {
    {.name = "n1", .cpus = 4, .mem_mb = 4096, .gpus = 2},
    {.name = "n2", .cpus = 4, .mem_mb = 4096, .gpus = 2},
};
static const slurm_node THREE_LABELLED[] = {
    {.name = "a1", .cpus = 4, .mem_mb = 4096},
    {.name = "a2", .cpus = 4, .mem_mb = 4096},
    {.name = "big", .cpus = 8, .mem_mb = 16384, .gpus = 1, .features = "bigmem,fast"},
};
static const slurm_node TEN[] = {
    {.name = "m0", .cpus = 1, .mem_mb = 1000}, {.name = "m1", .cpus = 1, .mem_mb = 1000},
    {.name = "m2", .cpus = 1, .mem_mb = 1000}, {.name = "m3", .cpus = 1, .mem_mb = 1000},
    {.name = "m4", .cpus = 1, .mem_mb = 1000}, {.name = "m5", .cpus = 1, .mem_mb = 1000},
    {.name = "m6", .cpus = 1, .mem_mb = 1000}, {.name = "m7", .cpus = 1, .mem_mb = 1000},
    {.name = "m8", .cpus = 1, .mem_mb = 1000}, {.name = "m9", .cpus = 1, .mem_mb = 1000},
};
#define NODES(a) a, (int)(sizeof a / sizeof a[0])

#define TWO_NODES_HAVE                                                                             \
  "the partition has 2 nodes, 8 CPUs, 8 GiB and 4 GPUs in all: n1 4 CPUs 4 GiB 2 GPUs, n2 4 "      \
  "CPUs 4 GiB 2 GPUs. Ask for fewer or smaller tasks, or set queue to a larger partition"

static const plan_case CASES[] = {
    {"more roles than nodes: one shape, one component",
     NODES(TWO),
     {{"chief", 1, 0, 0, 0, NULL},
      {"worker", 2, 0, 0, 0, NULL},
      {"ps", 1, 0, 0, 0, NULL},
      {"evaluator", 1, 0, 0, 0, NULL}},
     4,
     0,
     {{5, 1, 0, 0, NULL}},
     1,
     {0, 0, 0, 0},
     NULL},
    {"three shapes on two nodes: packed at the largest, memory per task kept",
     NODES(TWO),
     {{"chief", 1, 1, 0, 0, NULL},
      {"worker", 2, 2, 0, 0, NULL},
      {"evaluator", 1, 1, 512 * MIB, 0, NULL}},
     3,
     0,
     {{4, 2, 256, 0, NULL}},
     1,
     {0, 0, 0},
     NULL},
    {"a role per node: one component per role",
     NODES(TWO),
     {{"chief", 1, 4, 0, 0, NULL}, {"worker", 1, 4, 1024 * MIB, 2, NULL}},
     2,
     0,
     {{1, 4, 0, 0, NULL}, {1, 4, 256, 2, NULL}},
     2,
     {0, 1},
     NULL},
    {"four roles of two shapes: one component per shape",
     NODES(TWO),
     {{"a", 1, 2, 0, 0, NULL},
      {"b", 1, 2, 0, 0, NULL},
      {"c", 1, 1, 0, 0, NULL},
      {"d", 1, 1, 0, 0, NULL}},
     4,
     0,
     {{2, 2, 0, 0, NULL}, {2, 1, 0, 0, NULL}},
     2,
     {0, 0, 1, 1},
     NULL},
    {"a label: its role on the node with that feature",
     NODES(THREE_LABELLED),
     {{"w", 2, 1, 0, 0, NULL}, {"big", 1, 2, 8192 * MIB, 1, "bigmem"}},
     2,
     0,
     {{2, 1, 0, 0, NULL}, {1, 2, 4096, 1, "bigmem"}},
     2,
     {0, 1},
     NULL},
    {"a label expression is left to Slurm",
     NODES(TWO),
     {{"w", 2, 1, 0, 0, "a|b"}},
     1,
     0,
     {{2, 1, 0, 0, "a|b"}},
     1,
     {0},
     NULL},
    {"every task fits a node, not all of them together",
     NODES(TWO),
     {{"worker", 3, 4, 0, 1, NULL}},
     1,
     LOOM_ERESOURCE,
     {{0}},
     0,
     {0},
     "the job cannot be placed on Slurm partition 'cpu': it needs 3 tasks, 12 CPUs, no set amount "
     "of memory and 3 GPUs (worker: 3 x 4 CPUs, 1 GPUs); " TWO_NODES_HAVE},
    {"memory bounds the tasks a node takes",
     NODES(TWO),
     {{"w", 5, 1, 1536 * MIB, 0, NULL}},
     1,
     LOOM_ERESOURCE,
     {{0}},
     0,
     {0},
     "the job cannot be placed on Slurm partition 'cpu': it needs 5 tasks, 5 CPUs, 7.5 GiB of "
     "memory and 0 GPUs (w: 5 x 1 CPUs 1.5 GiB, 0 GPUs); " TWO_NODES_HAVE},
    {"a task larger than any node",
     NODES(TWO),
     {{"w", 1, 0, 0, 3, NULL}},
     1,
     LOOM_ERESOURCE,
     {{0}},
     0,
     {0},
     "role 'w' asks for 1 vcores, no set amount of memory and 3 GPUs per task; no node of Slurm "
     "partition 'cpu' has that: its largest node has 4 CPUs, 4 GiB and 2 GPUs (2 nodes): lower "
     "roles.w's resources or set queue to another partition"},
    {"a label no node has",
     NODES(THREE_LABELLED),
     {{"w", 1, 0, 0, 0, NULL}, {"x", 1, 1, 512 * MIB, 0, "gpu"}},
     2,
     LOOM_ERESOURCE,
     {{0}},
     0,
     {0},
     "role 'x' asks for 1 vcores, 512 MiB of memory and 0 GPUs per task with label gpu; no node "
     "of Slurm partition 'cpu' has that: its largest node with label gpu has 0 CPUs, 0 MiB and 0 "
     "GPUs (3 nodes): lower roles.x's resources or set queue to another partition"},
    {"more nodes than a refusal names",
     NODES(TEN),
     {{"w", 11, 1, 0, 0, NULL}},
     1,
     LOOM_ERESOURCE,
     {{0}},
     0,
     {0},
     "the job cannot be placed on Slurm partition 'cpu': it needs 11 tasks, 11 CPUs, no set amount "
     "of memory and 0 GPUs (w: 11 x 1 CPUs, 0 GPUs); the partition has 10 nodes, 10 CPUs, 9.8 GiB "
     "and 0 GPUs in all: m0 1 CPUs 1000 MiB 0 GPUs, m1 1 CPUs 1000 MiB 0 GPUs, m2 1 CPUs 1000 MiB "
     "0 GPUs, m3 1 CPUs 1000 MiB 0 GPUs, m4 1 CPUs 1000 MiB 0 GPUs, m5 1 CPUs 1000 MiB 0 GPUs, m6 "
     "1 CPUs 1000 MiB 0 GPUs, m7 1 CPUs 1000 MiB 0 GPUs, and 2 more. Ask for fewer or smaller "
     "tasks, or set queue to a larger partition"},
};

static void run_case(const plan_case *c) {
  spec_role roles[4];
  memset(roles, 0, sizeof roles);
  for (int i = 0; i < c->nroles; i++)
    roles[i] = (spec_role){.name = (char *)c->roles[i].name,
                           .instances = c->roles[i].instances,
                           .vcores = c->roles[i].vcores,
                           .memory = c->roles[i].memory,
                           .gpus = c->roles[i].gpus,
                           .label = (char *)c->roles[i].label};
  spec_job s = {.roles = roles, .nroles = c->nroles};
  slurm_plan p = {0};
  char err[2048] = "";
  int rc = slurm_plan_place(&s, c->nodes, c->nnodes, "cpu", &p, err, sizeof err);
  assert_int_equal(rc, c->rc);
  if (rc < 0) {
    assert_string_equal(err, c->refusal);
    return;
  }
  assert_string_equal(err, "");
  assert_int_equal(p.ncomp, c->ncomp);
  for (int k = 0; k < c->ncomp; k++) {
    assert_int_equal(p.comp[k].ntasks, c->comps[k].ntasks);
    assert_int_equal(p.comp[k].vcores, c->comps[k].vcores);
    assert_int_equal(p.comp[k].mem_per_cpu_mb, c->comps[k].mem_per_cpu_mb);
    assert_int_equal(p.comp[k].gpus, c->comps[k].gpus);
    if (c->comps[k].label)
      assert_string_equal(p.comp[k].label, c->comps[k].label);
    else
      assert_null(p.comp[k].label);
  }
  for (int i = 0; i < c->nroles; i++) assert_int_equal(p.role_comp[i], c->role_comp[i]);
  slurm_plan_free(&p);
  slurm_plan_free(&p);
}

static void test_cases(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    print_message("case: %s\n", CASES[i].what);
    run_case(&CASES[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
