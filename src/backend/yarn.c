/* yarn.c: the YARN backend, its first part: the client half's checks.
 * `loom check --backend yarn` asks the ResourceManager (found through
 * HADOOP_CONF_DIR, as Hadoop's clients find it) over Hadoop IPC for its
 * metrics, nodes, node labels, resource types, and reports them; `loom
 * run` refuses, before anything is submitted, a spec the cluster can never
 * run: an unknown or stopped queue, a node label the cluster does not have
 * or the queue may not use, GPUs on a cluster without yarn.io/gpu, a task
 * larger than every RUNNING node of its partition (YARN itself would queue
 * such an application forever). Launching is not built yet: the table
 * marks the backend check_only, so `loom run` stops after the check (exit
 * 2, saying so); the application master (containers, tokens, SASL) comes
 * next. A role maps to one container a task: vcores -> virtual cores (at
 * least 1), memory -> MB (rounded up), gpus -> yarn.io/gpu, label -> node
 * label expression, queue -> queue ("default" when unset). */
#include "backend/backend.h"
#include "hadoop/yarn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Connecting to the ResourceManager, and each call, give up after this
 * long: a check that fails, fails in seconds. */
#define YARN_RPC_TIMEOUT_MS 10000
/* Nodes named in `loom check` and in a refusal. */
#define NODES_NAMED 16

static bool is_running(const hyarn_node *n) { return !strcmp(n->state, "RUNNING"); }

static const hyarn_label *find_label(const hyarn_cluster *c, const char *name) {
  for (int i = 0; i < c->nlabels; i++)
    if (!strcmp(c->labels[i].name, name)) return &c->labels[i];
  return NULL;
}

/* Whether a task asking for label (NULL: none) may run on node n: a
 * labelled request on its partition only; an unlabelled one on the
 * default partition and on non-exclusive partitions (their idle
 * resources). */
static bool node_serves(const hyarn_cluster *c, const hyarn_node *n, const char *label) {
  if (label) return !strcmp(n->label, label);
  if (!n->label[0]) return true;
  const hyarn_label *l = find_label(c, n->label);
  return l && !l->exclusive;
}

static void node_desc(const hyarn_node *n, char *buf, size_t len) {
  snprintf(buf, len, "%s %s: %lld MB, %d vcores, %lld GPUs%s%s", n->id, n->state,
           (long long)n->memory_mb, n->vcores, (long long)n->gpus, n->label[0] ? ", label " : "",
           n->label);
}

static void labels_desc(const hyarn_cluster *c, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = 0;
  for (int i = 0; i < c->nlabels && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s (%s)", i ? ", " : "", c->labels[i].name,
                            c->labels[i].exclusive ? "exclusive" : "non-exclusive");
  if (!c->nlabels) snprintf(buf, len, "none");
}

static bool queue_may_use(const hyarn_cluster *c, const char *label) {
  char list[sizeof c->queue_labels];
  loom__strlcpy(list, c->queue_labels, sizeof list);
  for (char *save = NULL, *l = strtok_r(list, ",", &save); l; l = strtok_r(NULL, ",", &save))
    if (!strcmp(l, "*") || !strcmp(l, label)) return true;
  return false;
}

/* Checks role r against the cluster: 0, or LOOM_ERESOURCE with err. */
static int check_role(const hyarn_cluster *c, const char *queue, const spec_role *r, char *err,
                      size_t errlen) {
  long long mb = (long long)((r->memory + (1 << 20) - 1) >> 20);
  int vcores = r->vcores > 0 ? r->vcores : 1;
  if (r->gpus > 0 && !c->gpu_type) {
    snprintf(err, errlen,
             "role '%s' asks for %d GPUs per task, but the YARN cluster has no %s resource "
             "(its resource types: %s): set roles.%s.gpus to 0, or use a cluster that schedules "
             "GPUs",
             r->name, r->gpus, HYARN_GPU, c->types, r->name);
    return LOOM_ERESOURCE;
  }
  if (r->label) {
    char labels[512];
    labels_desc(c, labels, sizeof labels);
    if (!find_label(c, r->label)) {
      snprintf(err, errlen,
               "role '%s' asks for node label '%s', which the YARN cluster does not have (its "
               "labels: %s): set roles.%s.label to one of them, or remove it",
               r->name, r->label, labels, r->name);
      return LOOM_ERESOURCE;
    }
    if (!queue_may_use(c, r->label)) {
      snprintf(err, errlen,
               "role '%s' asks for node label '%s', which queue '%s' may not use (its accessible "
               "labels: %s): set queue to one that may, or change roles.%s.label",
               r->name, r->label, queue, c->queue_labels[0] ? c->queue_labels : "none", r->name);
      return LOOM_ERESOURCE;
    }
  }
  int64_t best_mb = 0, best_gpus = 0;
  int best_vc = 0, eligible = 0;
  for (int i = 0; i < c->nnodes; i++) {
    const hyarn_node *n = &c->nodes[i];
    if (!is_running(n) || !node_serves(c, n, r->label)) continue;
    eligible++;
    if (n->memory_mb >= mb && n->vcores >= vcores && n->gpus >= r->gpus) return 0;
    if (n->memory_mb > best_mb) best_mb = n->memory_mb;
    if (n->vcores > best_vc) best_vc = n->vcores;
    if (n->gpus > best_gpus) best_gpus = n->gpus;
  }
  char part[200];
  if (r->label)
    snprintf(part, sizeof part, "with label %s", r->label);
  else
    snprintf(part, sizeof part, "of the default partition");
  size_t off;
  if (!eligible && r->label)
    off = (size_t)snprintf(err, errlen,
                           "role '%s' asks for node label '%s', but no RUNNING node of the YARN "
                           "cluster has it now (nodes: ",
                           r->name, r->label);
  else if (!eligible)
    off = (size_t)snprintf(err, errlen,
                           "role '%s' asks for no node label, but every RUNNING node of the YARN "
                           "cluster has an exclusive one (nodes: ",
                           r->name);
  else {
    char mem[64];
    if (mb)
      snprintf(mem, sizeof mem, "%lld MB of memory", mb);
    else
      snprintf(mem, sizeof mem, "no set memory");
    off = (size_t)snprintf(
        err, errlen,
        "role '%s' asks for %d vcores, %s and %d GPUs per task%s%s; no RUNNING node %s of the "
        "YARN cluster has that: the largest has %lld MB, %d vcores and %lld GPUs (nodes: ",
        r->name, vcores, mem, r->gpus, r->label ? " with label " : "", r->label ? r->label : "",
        part, (long long)best_mb, best_vc, (long long)best_gpus);
  }
  for (int i = 0, named = 0; i < c->nnodes && off < errlen; i++) {
    char d[512];
    node_desc(&c->nodes[i], d, sizeof d);
    if (named++ == NODES_NAMED) {
      off += (size_t)snprintf(err + off, errlen - off, ", and %d more", c->nnodes - NODES_NAMED);
      break;
    }
    off += (size_t)snprintf(err + off, errlen - off, "%s%s", i ? "; " : "", d);
  }
  if (off < errlen)
    snprintf(err + off, errlen - off, "): lower roles.%s's resources%s", r->name,
             r->label ? " or change its label" : "");
  return LOOM_ERESOURCE;
}

static int yarn_check(const spec_job *s, char *err, size_t errlen) {
  const char *queue = s->queue ? s->queue : "default";
  hyarn_cluster c;
  char why[4096];
  if (hyarn_cluster_get(NULL, queue, YARN_RPC_TIMEOUT_MS, &c, why, sizeof why) < 0) {
    snprintf(err, errlen, "cannot ask YARN for its nodes: %s", why);
    return LOOM_EBACKEND;
  }
  int rc = 0, running = 0;
  for (int i = 0; i < c.nnodes; i++) running += is_running(&c.nodes[i]);
  if (!c.queue_found) {
    snprintf(err, errlen,
             "queue '%s' is not a queue of the YARN cluster (its leaf queues: %s): set queue to "
             "one of them",
             queue, c.queues[0] ? c.queues : "none listed");
    rc = LOOM_ERESOURCE;
  } else if (strcmp(c.queue_state, "RUNNING")) {
    snprintf(err, errlen, "queue '%s' of the YARN cluster is %s: it takes no applications", queue,
             c.queue_state);
    rc = LOOM_ERESOURCE;
  } else if (!running) {
    snprintf(err, errlen,
             "the YARN cluster (ResourceManager %s) has no RUNNING NodeManager (%d known, %d "
             "lost, %d unhealthy)",
             c.rm, c.nnodes, c.lost, c.unhealthy);
    rc = LOOM_EBACKEND;
  }
  for (int i = 0; i < s->nroles && rc == 0; i++)
    rc = check_role(&c, queue, &s->roles[i], err, errlen);
  hyarn_cluster_free(&c);
  return rc;
}

static int yarn_probe(char *msg, size_t len) {
  hyarn_cluster c;
  char why[4096];
  if (hyarn_cluster_get(NULL, NULL, YARN_RPC_TIMEOUT_MS, &c, why, sizeof why) < 0) {
    snprintf(msg, len, "yarn: %s", why);
    return -1;
  }
  int running = 0, vcores = 0;
  long long mb = 0, gpus = 0;
  for (int i = 0; i < c.nnodes; i++) {
    if (!is_running(&c.nodes[i])) continue;
    running++;
    mb += c.nodes[i].memory_mb;
    vcores += c.nodes[i].vcores;
    gpus += c.nodes[i].gpus;
  }
  char labels[512];
  labels_desc(&c, labels, sizeof labels);
  size_t off = (size_t)snprintf(
      msg, len,
      "yarn: ResourceManager %s (%s): %d of %d nodes RUNNING, %lld MB, %d vcores, %lld GPUs%s; "
      "node labels: %s",
      c.rm, c.conf_file, running, c.nnodes, mb, vcores, gpus,
      c.gpu_type ? "" : " (no " HYARN_GPU " resource type)", labels);
  for (int i = 0; i < c.nnodes && off < len; i++) {
    if (i == NODES_NAMED) {
      off += (size_t)snprintf(msg + off, len - off, "\n     and %d more nodes", c.nnodes - i);
      break;
    }
    char d[512];
    node_desc(&c.nodes[i], d, sizeof d);
    off += (size_t)snprintf(msg + off, len - off, "\n     node %s", d);
  }
  hyarn_cluster_free(&c);
  if (!running) {
    if (off < len) snprintf(msg + off, len - off, "\n     no RUNNING NodeManager: nothing can run");
    return -1;
  }
  return 0;
}

const backend_ops loom__backend_yarn = {
    .name = "yarn",
    .check_only = "launching on YARN is not built yet (the application master that starts "
                  "containers comes next); `loom check --backend yarn` reports the cluster",
    .check = yarn_check,
    .probe = yarn_probe,
};
