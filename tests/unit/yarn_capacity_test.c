/* yarn_capacity_test.c: the YARN backend's capacity checks (src/backend/
 * yarn/capacity.c), one table of cases: a cluster as the ResourceManager
 * reports it (nodes, labels, resource types, the queue) and a spec's roles
 * in; 0, or the error and its exact refusal text out, figures and all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "backend/yarn/capacity.h"
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
  const char *what;
  const hyarn_node *nodes;
  int nnodes;
  const hyarn_label *labels;
  int nlabels;
  bool no_gpu_type;        /* the cluster has no yarn.io/gpu */
  const char *queue;       /* as asked; "default" when the spec sets none */
  bool queue_missing;      /* not a queue of the cluster */
  const char *queue_state; /* NULL: RUNNING */
  const char *queue_labels;
  int unhealthy;
  role_row roles[2];
  int nroles;
  int rc;
  const char *err;
} cap_case;

static const hyarn_node ONE[] = {
    {.id = "n1:45454", .state = "RUNNING", .memory_mb = 4096, .vcores = 4},
};
static const hyarn_node ONE_GPU[] = {
    {.id = "n1:45454", .state = "RUNNING", .memory_mb = 8192, .vcores = 8, .gpus = 2},
};
static const hyarn_node TWO[] = {
    {.id = "n1:45454", .state = "RUNNING", .memory_mb = 4096, .vcores = 4},
    {.id = "n2:45454", .state = "RUNNING", .memory_mb = 4096, .vcores = 4},
};
static const hyarn_node ONE_SICK[] = {
    {.id = "n1:45454", .state = "RUNNING", .memory_mb = 4096, .vcores = 8},
    {.id = "n2:45454", .state = "UNHEALTHY", .memory_mb = 65536, .vcores = 64},
};
static const hyarn_node SICK[] = {
    {.id = "n1:45454", .state = "UNHEALTHY", .memory_mb = 4096, .vcores = 4},
};
static const hyarn_node LABELLED_X[] = {
    {.id = "n1:45454", .state = "RUNNING", .memory_mb = 4096, .vcores = 4, .label = "x"},
};
static const hyarn_label X_EXCL[] = {{"x", true}};
static const hyarn_label X_SHARED[] = {{"x", false}};
#define NODES(a) a, (int)(sizeof a / sizeof a[0])
#define LABELS(a) a, (int)(sizeof a / sizeof a[0])

static const cap_case CASES[] = {
    {"tasks that fit",
     NODES(TWO),
     NULL,
     0,
     false,
     "default",
     false,
     NULL,
     "",
     0,
     {{"w", 2, 2, 1024 * MIB, 0, NULL}},
     1,
     0,
     NULL},
    {"GPUs on a cluster that schedules them",
     NODES(ONE_GPU),
     NULL,
     0,
     false,
     "default",
     false,
     NULL,
     "",
     0,
     {{"w", 1, 4, 0, 2, NULL}},
     1,
     0,
     NULL},
    {"an unlabelled task on a non-exclusive partition's node",
     NODES(LABELLED_X),
     LABELS(X_SHARED),
     false,
     "default",
     false,
     NULL,
     "",
     0,
     {{"w", 1, 1, 0, 0, NULL}},
     1,
     0,
     NULL},
    {"a labelled task on its partition",
     NODES(LABELLED_X),
     LABELS(X_EXCL),
     false,
     "default",
     false,
     NULL,
     "x",
     0,
     {{"w", 1, 4, 4096 * MIB, 0, "x"}},
     1,
     0,
     NULL},
    {"a queue that is not there",
     NODES(ONE),
     NULL,
     0,
     false,
     "q",
     true,
     NULL,
     "",
     0,
     {{"w", 1, 1, 0, 0, NULL}},
     1,
     LOOM_ERESOURCE,
     "queue 'q' is not a queue of the YARN cluster (its leaf queues: default,prod): set queue to "
     "one of them"},
    {"a stopped queue",
     NODES(ONE),
     NULL,
     0,
     false,
     "default",
     false,
     "STOPPED",
     "",
     0,
     {{"w", 1, 1, 0, 0, NULL}},
     1,
     LOOM_ERESOURCE,
     "queue 'default' of the YARN cluster is STOPPED: it takes no applications"},
    {"no RUNNING NodeManager",
     NODES(SICK),
     NULL,
     0,
     false,
     "default",
     false,
     NULL,
     "",
     1,
     {{"w", 1, 1, 0, 0, NULL}},
     1,
     LOOM_EBACKEND,
     "the YARN cluster (ResourceManager 127.0.0.1:8032) has no RUNNING NodeManager (1 known, 0 "
     "lost, 1 unhealthy)"},
    {"GPUs on a cluster without yarn.io/gpu",
     NODES(ONE),
     NULL,
     0,
     true,
     "default",
     false,
     NULL,
     "",
     0,
     {{"w", 1, 1, 0, 1, NULL}},
     1,
     LOOM_ERESOURCE,
     "role 'w' asks for 1 GPUs per task, but the YARN cluster has no yarn.io/gpu resource (its "
     "resource types: memory-mb, vcores): set roles.w.gpus to 0, or use a cluster that schedules "
     "GPUs"},
    {"a label the cluster does not have",
     NODES(LABELLED_X),
     LABELS(X_EXCL),
     false,
     "default",
     false,
     NULL,
     "*",
     0,
     {{"w", 1, 1, 0, 0, "gpu"}},
     1,
     LOOM_ERESOURCE,
     "role 'w' asks for node label 'gpu', which the YARN cluster does not have (its labels: x "
     "(exclusive)): set roles.w.label to one of them, or remove it"},
    {"a label the queue may not use",
     NODES(LABELLED_X),
     LABELS(X_EXCL),
     false,
     "default",
     false,
     NULL,
     "",
     0,
     {{"w", 1, 1, 0, 0, "x"}},
     1,
     LOOM_ERESOURCE,
     "role 'w' asks for node label 'x', which queue 'default' may not use (its accessible labels: "
     "none): set queue to one that may, or change roles.w.label"},
    {"a task larger than every node",
     NODES(ONE),
     NULL,
     0,
     false,
     "default",
     false,
     NULL,
     "",
     0,
     {{"w", 1, 8, 2048 * MIB, 0, NULL}},
     1,
     LOOM_ERESOURCE,
     "role 'w' asks for 8 vcores, 2048 MB of memory and 0 GPUs per task; no RUNNING node of the "
     "default partition of the YARN cluster has that: the largest has 4096 MB, 4 vcores and 0 "
     "GPUs (nodes: n1:45454 RUNNING: 4096 MB, 4 vcores, 0 GPUs): lower roles.w's resources"},
    {"a labelled task larger than its partition's nodes",
     NODES(LABELLED_X),
     LABELS(X_EXCL),
     false,
     "default",
     false,
     NULL,
     "x",
     0,
     {{"w", 1, 1, 0, 2, "x"}},
     1,
     LOOM_ERESOURCE,
     "role 'w' asks for 1 vcores, no set memory and 2 GPUs per task with label x; no RUNNING node "
     "with label x of the YARN cluster has that: the largest has 4096 MB, 4 vcores and 0 GPUs "
     "(nodes: n1:45454 RUNNING: 4096 MB, 4 vcores, 0 GPUs, label x): lower roles.w's resources or "
     "change its label"},
    {"a label no RUNNING node has now",
     NODES(ONE),
     LABELS(X_SHARED),
     false,
     "default",
     false,
     NULL,
     "*",
     0,
     {{"w", 1, 1, 0, 0, "x"}},
     1,
     LOOM_ERESOURCE,
     "role 'w' asks for node label 'x', but no RUNNING node of the YARN cluster has it now (nodes: "
     "n1:45454 RUNNING: 4096 MB, 4 vcores, 0 GPUs): lower roles.w's resources or change its "
     "label"},
    {"no label, every node exclusive",
     NODES(LABELLED_X),
     LABELS(X_EXCL),
     false,
     "default",
     false,
     NULL,
     "",
     0,
     {{"w", 1, 1, 0, 0, NULL}},
     1,
     LOOM_ERESOURCE,
     "role 'w' asks for no node label, but every RUNNING node of the YARN cluster has an "
     "exclusive one (nodes: n1:45454 RUNNING: 4096 MB, 4 vcores, 0 GPUs, label x): lower "
     "roles.w's resources"},
    {"a gang larger than the cluster: vcores",
     NODES(TWO),
     NULL,
     0,
     false,
     "default",
     false,
     NULL,
     "",
     0,
     {{"w", 3, 4, 0, 0, NULL}},
     1,
     LOOM_ERESOURCE,
     "the job's 3 containers ask for 12 vcores, 3072 MB and 0 GPUs together, and start together "
     "(gang start); the YARN cluster's RUNNING nodes have 8 vcores, 8192 MB and 0 GPUs in all: "
     "12 vcores is more than it could ever grant at once: ask for fewer instances or smaller "
     "roles"},
    {"a gang larger than the RUNNING nodes: memory, the default counted",
     NODES(ONE_SICK),
     NULL,
     0,
     false,
     "default",
     false,
     NULL,
     "",
     1,
     {{"a", 2, 1, 0, 0, NULL}, {"b", 3, 1, 0, 0, NULL}},
     2,
     LOOM_ERESOURCE,
     "the job's 5 containers ask for 5 vcores, 5120 MB and 0 GPUs together, and start together "
     "(gang start); the YARN cluster's RUNNING nodes have 8 vcores, 4096 MB and 0 GPUs in all: "
     "5120 MB of memory is more than it could ever grant at once: ask for fewer instances or "
     "smaller roles"},
    {"a gang larger than the cluster: GPUs",
     NODES(ONE_GPU),
     NULL,
     0,
     false,
     "default",
     false,
     NULL,
     "",
     0,
     {{"w", 2, 1, 0, 2, NULL}},
     1,
     LOOM_ERESOURCE,
     "the job's 2 containers ask for 2 vcores, 2048 MB and 4 GPUs together, and start together "
     "(gang start); the YARN cluster's RUNNING nodes have 8 vcores, 8192 MB and 2 GPUs in all: 4 "
     "GPUs is more than it could ever grant at once: ask for fewer instances or smaller roles"},
};

static void run_case(const cap_case *k) {
  hyarn_cluster c;
  memset(&c, 0, sizeof c);
  snprintf(c.rm, sizeof c.rm, "127.0.0.1:8032");
  c.nodes = (hyarn_node *)k->nodes;
  c.nnodes = k->nnodes;
  c.labels = (hyarn_label *)k->labels;
  c.nlabels = k->nlabels;
  c.unhealthy = k->unhealthy;
  c.gpu_type = !k->no_gpu_type;
  snprintf(c.types, sizeof c.types, "memory-mb, vcores%s", k->no_gpu_type ? "" : ", yarn.io/gpu");
  snprintf(c.queue_asked, sizeof c.queue_asked, "%s", k->queue);
  c.queue_found = !k->queue_missing;
  snprintf(c.queue_state, sizeof c.queue_state, "%s", k->queue_state ? k->queue_state : "RUNNING");
  snprintf(c.queue_labels, sizeof c.queue_labels, "%s", k->queue_labels);
  if (k->queue_missing) snprintf(c.queues, sizeof c.queues, "default,prod");
  spec_role roles[2];
  memset(roles, 0, sizeof roles);
  for (int i = 0; i < k->nroles; i++)
    roles[i] = (spec_role){.name = (char *)k->roles[i].name,
                           .instances = k->roles[i].instances,
                           .vcores = k->roles[i].vcores,
                           .memory = k->roles[i].memory,
                           .gpus = k->roles[i].gpus,
                           .label = (char *)k->roles[i].label};
  spec_job s = {.roles = roles, .nroles = k->nroles};
  char err[4096] = "";
  int rc = yarn_capacity_check(&c, &s, k->queue, 1024, err, sizeof err);
  assert_int_equal(rc, k->rc);
  assert_string_equal(err, k->err ? k->err : "");
}

static void test_cases(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    print_message("case: %s\n", CASES[i].what);
    run_case(&CASES[i]);
  }
}

/* `loom check`'s words for a node and the labels. */
static void test_descriptions(void **state) {
  (void)state;
  char buf[512];
  yarn_node_desc(&LABELLED_X[0], buf, sizeof buf);
  assert_string_equal(buf, "n1:45454 RUNNING: 4096 MB, 4 vcores, 0 GPUs, label x");
  yarn_node_desc(&ONE_GPU[0], buf, sizeof buf);
  assert_string_equal(buf, "n1:45454 RUNNING: 8192 MB, 8 vcores, 2 GPUs");
  hyarn_label two[] = {{"x", true}, {"y", false}};
  hyarn_cluster c = {.labels = two, .nlabels = 2};
  yarn_labels_desc(&c, buf, sizeof buf);
  assert_string_equal(buf, "x (exclusive), y (non-exclusive)");
  c.nlabels = 0;
  yarn_labels_desc(&c, buf, sizeof buf);
  assert_string_equal(buf, "none");
  assert_true(yarn_node_running(&ONE[0]));
  assert_false(yarn_node_running(&SICK[0]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases),
      cmocka_unit_test(test_descriptions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
