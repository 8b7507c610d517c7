/* capacity.h: the YARN backend's capacity checks (capacity.c): a spec
 * against the cluster the ResourceManager reported, and the words for its
 * nodes and labels that `loom check` and the refusals share. Pure. Nothing
 * outside src/backend/yarn includes it. */
#ifndef LOOM_BACKEND_YARN_CAPACITY_H
#define LOOM_BACKEND_YARN_CAPACITY_H

#include "yarn/yarn.h"
#include "spec/spec.h"

#include <stdbool.h>
#include <stddef.h>

/* Nodes named in `loom check` and in a refusal. */
#define YARN_NODES_NAMED 16

/* Checks spec s, asked of queue (its name as the spec gives it, "default"
 * when unset), against cluster c. default_mb is a task's memory when its
 * role sets none (LOOM_YARN_DEFAULT_MB). Returns 0 when the cluster could
 * run it; LOOM_ERESOURCE (a queue that is not there or not RUNNING, a
 * label the cluster lacks or the queue may not use, GPUs on a cluster
 * without yarn.io/gpu, a task larger than every RUNNING node of its
 * partition, a gang larger than every RUNNING node together) or
 * LOOM_EBACKEND (no RUNNING NodeManager), with err saying what the spec
 * asks against what the cluster has. */
int yarn_capacity_check(const hyarn_cluster *c, const spec_job *s, const char *queue,
                        long long default_mb, char *err, size_t errlen);

/* Whether node n is RUNNING (only those take containers). */
bool yarn_node_running(const hyarn_node *n);

/* "host:port STATE: MB, vcores, GPUs[, label L]" of node n, into buf. */
void yarn_node_desc(const hyarn_node *n, char *buf, size_t len);

/* The cluster's node labels, "name (exclusive), ..." or "none", into buf. */
void yarn_labels_desc(const hyarn_cluster *c, char *buf, size_t len);

#endif
