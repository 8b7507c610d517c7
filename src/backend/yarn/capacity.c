/* capacity.c: the YARN backend's capacity checks, pure: what a spec asks
 * (queue, node labels, GPUs, each task's size, the whole gang) against
 * what the ResourceManager reported of the cluster (hyarn_cluster_get),
 * and the refusal text with the figures of both when the cluster could
 * never run it (YARN itself would queue such an application forever).
 * Nothing here talks to YARN: client.c asks, the unit test
 * (tests/unit/yarn_capacity_test.c) gives tables of clusters. */
#include "backend/yarn/capacity.h"

#include <stdio.h>
#include <string.h>

bool yarn_node_running(const hyarn_node *n) { return !strcmp(n->state, "RUNNING"); }

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

void yarn_node_desc(const hyarn_node *n, char *buf, size_t len) {
  snprintf(buf, len, "%s %s: %lld MB, %d vcores, %lld GPUs%s%s", n->id, n->state,
           (long long)n->memory_mb, n->vcores, (long long)n->gpus, n->label[0] ? ", label " : "",
           n->label);
}

void yarn_labels_desc(const hyarn_cluster *c, char *buf, size_t len) {
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
    yarn_labels_desc(c, labels, sizeof labels);
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
    if (!yarn_node_running(n) || !node_serves(c, n, r->label)) continue;
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
    yarn_node_desc(&c->nodes[i], d, sizeof d);
    if (named++ == YARN_NODES_NAMED) {
      off +=
          (size_t)snprintf(err + off, errlen - off, ", and %d more", c->nnodes - YARN_NODES_NAMED);
      break;
    }
    off += (size_t)snprintf(err + off, errlen - off, "%s%s", i ? "; " : "", d);
  }
  if (off < errlen)
    snprintf(err + off, errlen - off, "): lower roles.%s's resources%s", r->name,
             r->label ? " or change its label" : "");
  return LOOM_ERESOURCE;
}

/* A job starts all its containers at once (gang start): a job larger than
 * every RUNNING node together could never start, whatever each task's
 * size (YARN would grant part of it and the rest never). */
static int check_gang(const hyarn_cluster *c, const spec_job *s, long long default_mb, char *err,
                      size_t errlen) {
  long long mb = 0, vc = 0, gpus = 0, tasks = 0, have_mb = 0, have_vc = 0, have_gpus = 0;
  for (int i = 0; i < s->nroles; i++) {
    const spec_role *r = &s->roles[i];
    long long m = (long long)((r->memory + (1 << 20) - 1) >> 20);
    if (!m) m = default_mb;
    tasks += r->instances;
    mb += m * r->instances;
    vc += (long long)(r->vcores > 0 ? r->vcores : 1) * r->instances;
    gpus += (long long)r->gpus * r->instances;
  }
  for (int i = 0; i < c->nnodes; i++) {
    if (!yarn_node_running(&c->nodes[i])) continue;
    have_mb += c->nodes[i].memory_mb;
    have_vc += c->nodes[i].vcores;
    have_gpus += c->nodes[i].gpus;
  }
  const char *what = vc > have_vc ? "vcores" : mb > have_mb ? "MB of memory" : "GPUs";
  long long want = vc > have_vc ? vc : mb > have_mb ? mb : gpus;
  if (vc <= have_vc && mb <= have_mb && gpus <= have_gpus) return 0;
  snprintf(err, errlen,
           "the job's %lld containers ask for %lld vcores, %lld MB and %lld GPUs together, and "
           "start together (gang start); the YARN cluster's RUNNING nodes have %lld vcores, %lld "
           "MB and %lld GPUs in all: %lld %s is more than it could ever grant at once: ask for "
           "fewer instances or smaller roles",
           tasks, vc, mb, gpus, have_vc, have_mb, have_gpus, want, what);
  return LOOM_ERESOURCE;
}

int yarn_capacity_check(const hyarn_cluster *c, const spec_job *s, const char *queue,
                        long long default_mb, char *err, size_t errlen) {
  int rc = 0, running = 0;
  for (int i = 0; i < c->nnodes; i++) running += yarn_node_running(&c->nodes[i]);
  if (!c->queue_found) {
    snprintf(err, errlen,
             "queue '%s' is not a queue of the YARN cluster (its leaf queues: %s): set queue to "
             "one of them",
             queue, c->queues[0] ? c->queues : "none listed");
    rc = LOOM_ERESOURCE;
  } else if (strcmp(c->queue_state, "RUNNING")) {
    snprintf(err, errlen, "queue '%s' of the YARN cluster is %s: it takes no applications", queue,
             c->queue_state);
    rc = LOOM_ERESOURCE;
  } else if (!running) {
    snprintf(err, errlen,
             "the YARN cluster (ResourceManager %s) has no RUNNING NodeManager (%d known, %d "
             "lost, %d unhealthy)",
             c->rm, c->nnodes, c->lost, c->unhealthy);
    rc = LOOM_EBACKEND;
  }
  for (int i = 0; i < s->nroles && rc == 0; i++)
    rc = check_role(c, queue, &s->roles[i], err, errlen);
  if (rc == 0) rc = check_gang(c, s, default_mb, err, errlen);
  return rc;
}
