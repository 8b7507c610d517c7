/* yarn.h: what a YARN client asks the ResourceManager, over Hadoop IPC
 * (ApplicationClientProtocol: SIMPLE authentication, no SASL), in plain C
 * structures: where the ResourceManager is (from HADOOP_CONF_DIR, as
 * Hadoop's own clients find it) and what the cluster has (nodes, their
 * resources and labels, the labels, the resource types, a queue). The
 * yarn backend (src/backend/yarn/) is its user. */
#ifndef LOOM_YARN_YARN_H
#define LOOM_YARN_YARN_H

#include "core/core.h"

#define HYARN_GPU "yarn.io/gpu"
#define HYARN_MAX_RMS 8

/* Where the ResourceManager(s) are, from a configuration directory. */
typedef struct {
  char conf_dir[1024];
  char file[1100]; /* the yarn-site.xml read */
  int n;           /* more than one with ResourceManager HA */
  struct {
    char id[64]; /* the HA rm-id, "" without HA */
    char host[256];
    int port;
    char how[160]; /* which property gave it: "yarn.resourcemanager.address" */
    /* the scheduler (ApplicationMasterProtocol): yarn.resourcemanager.scheduler.address,
     * else the hostname's :8030 */
    char sched_host[256];
    int sched_port;
  } rm[HYARN_MAX_RMS];
} hyarn_rms;

/* Reads conf_dir's core-site.xml (if present) and yarn-site.xml: the
 * ResourceManager's client address is yarn.resourcemanager.address, else
 * yarn.resourcemanager.hostname:8032 (with HA, the same suffixed with each
 * of yarn.resourcemanager.ha.rm-ids). conf_dir NULL: $HADOOP_CONF_DIR,
 * else $HADOOP_HOME/etc/hadoop. Returns 0, or LOOM_EBACKEND with err
 * naming the directory or file and what is wrong with it. */
int hyarn_find_rm(const char *conf_dir, hyarn_rms *out, char *err, size_t errlen);

/* The user Hadoop's SIMPLE authentication names: HADOOP_USER_NAME, else
 * the login of this process's uid. */
void hyarn_user(char *out, size_t len);

typedef struct {
  char id[300];      /* host:port, the node's id */
  char state[24];    /* "RUNNING", "UNHEALTHY", ... */
  int64_t memory_mb; /* capability */
  int vcores;
  int64_t gpus; /* yarn.io/gpu; 0 if the node has none */
  int64_t used_mb;
  int used_vcores;
  int containers;
  char label[128]; /* its node label (partition), "" for the default */
} hyarn_node;

typedef struct {
  char name[128];
  bool exclusive;
} hyarn_label;

typedef struct {
  char rm[320]; /* "127.0.0.1:8032", the ResourceManager that answered */
  char conf_file[1100];
  /* getClusterMetrics */
  int nms, active, lost, unhealthy, decommissioned, decommissioning, rebooted, shutdown;
  /* getClusterNodes: every node, in the RM's order */
  hyarn_node *nodes;
  int nnodes;
  /* getClusterNodeLabels */
  hyarn_label *labels;
  int nlabels;
  /* getResourceTypeInfo: the cluster knows yarn.io/gpu */
  bool gpu_type;
  char types[256]; /* every resource type's name, ", "-separated */
  /* getQueueInfo of the queue asked for (none: queue_asked is "") */
  char queue_asked[128];
  bool queue_found;
  char queue_state[16];   /* "RUNNING", "STOPPED", "DRAINING" */
  char queue_labels[256]; /* its accessible node labels, ","-separated; "*" for all */
  char queues[1024];      /* when it was not found: the cluster's leaf queues */
} hyarn_cluster;

/* Asks the ResourceManager found by hyarn_find_rm(conf_dir) for the
 * cluster: metrics, nodes, labels, resource types, and the queue named
 * queue (NULL: none). Every connection and call waits at most timeout_ms;
 * with HA, a standby ResourceManager sends it to the next. Returns 0 with
 * *out filled (hyarn_cluster_free), or LOOM_EBACKEND with err saying
 * which ResourceManager, which call and what went wrong. */
int hyarn_cluster_get(const char *conf_dir, const char *queue, int timeout_ms, hyarn_cluster *out,
                      char *err, size_t errlen);
void hyarn_cluster_free(hyarn_cluster *c);

#endif
