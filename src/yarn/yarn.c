/* yarn.c: the ResourceManager's address from HADOOP_CONF_DIR, and the
 * cluster as ApplicationClientProtocol tells it (see yarn.h). */
#include "yarn/yarn.h"

#include "applicationclient_protocol.pb-c.h"
#include "hadoop/conf.h"
#include "hadoop/ipc.h"
#include "yarn_service_protos.pb-c.h"

#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ACP "org.apache.hadoop.yarn.api.ApplicationClientProtocolPB"
#define RM_DEFAULT_PORT 8032
#define RM_SCHEDULER_PORT 8030

/* host:port (the last ':' splits, "[v6]:port" too) into rm. */
static int split_address(const char *v, char *host, size_t hostlen, int *port) {
  const char *c = strrchr(v, ':');
  if (!c || c == v) return -1;
  long long p;
  if (loom__parse_int(c + 1, 1, 65535, &p) < 0) return -1;
  size_t n = (size_t)(c - v);
  if (v[0] == '[' && n >= 2 && v[n - 1] == ']') v++, n -= 2;
  if (n == 0 || n >= hostlen) return -1;
  memcpy(host, v, n);
  host[n] = 0;
  *port = (int)p;
  return 0;
}

/* One address of a ResourceManager: address_key, else
 * hostname_key:default_port, into host, port and how. */
static int rm_address(const hconf *c, const char *file, const char *address_key,
                      const char *hostname_key, int default_port, char *host, size_t hostlen,
                      int *port, char *how, size_t howlen, char *err, size_t errlen) {
  char v[512];
  int found = hconf_get(c, address_key, NULL, v, sizeof v);
  const char *key = address_key;
  if (found == 0) {
    char h[300];
    found = hconf_get(c, hostname_key, NULL, h, sizeof h);
    key = hostname_key;
    if (found == 0) {
      /* Hadoop's default: yarn.resourcemanager.hostname is 0.0.0.0 */
      loom__strlcpy(h, "0.0.0.0", sizeof h);
    }
    snprintf(v, sizeof v, "%s:%d", h, default_port);
    snprintf(how, howlen, "%s%s:%d", hostname_key, found ? "" : " (unset: 0.0.0.0)", default_port);
  } else
    loom__strlcpy(how, address_key, howlen);
  if (found < 0 || split_address(v, host, hostlen, port) < 0) {
    snprintf(err, errlen, "%s: %s is '%s', not host:port", file, key, v);
    return LOOM_EBACKEND;
  }
  return 0;
}

/* The client (8032) and scheduler (8030) addresses of RM i; suffix is
 * "" or ".<rm-id>" with HA. */
static int rm_addresses(const hconf *c, const char *file, const char *suffix, hyarn_rms *out, int i,
                        char *err, size_t errlen) {
  char ak[160], hk[160], sk[160], how[160];
  snprintf(ak, sizeof ak, "yarn.resourcemanager.address%s", suffix);
  snprintf(hk, sizeof hk, "yarn.resourcemanager.hostname%s", suffix);
  snprintf(sk, sizeof sk, "yarn.resourcemanager.scheduler.address%s", suffix);
  int rc = rm_address(c, file, ak, hk, RM_DEFAULT_PORT, out->rm[i].host, sizeof out->rm[i].host,
                      &out->rm[i].port, out->rm[i].how, sizeof out->rm[i].how, err, errlen);
  if (rc == 0)
    rc = rm_address(c, file, sk, hk, RM_SCHEDULER_PORT, out->rm[i].sched_host,
                    sizeof out->rm[i].sched_host, &out->rm[i].sched_port, how, sizeof how, err,
                    errlen);
  return rc;
}

int hyarn_find_rm(const char *conf_dir, hyarn_rms *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const char *how = NULL;
  if (hconf_find_dir(conf_dir, out->conf_dir, sizeof out->conf_dir, &how, err, errlen) < 0)
    return LOOM_EBACKEND;
  conf_dir = out->conf_dir;
  hconf c = {0};
  char path[1100], why[1024];
  snprintf(path, sizeof path, "%s/core-site.xml", conf_dir);
  int rc = hconf_load(&c, path, why, sizeof why);
  if (rc < 0 && rc != LOOM_ENOENT) {
    snprintf(err, errlen, "%s", why);
    hconf_free(&c);
    return LOOM_EBACKEND;
  }
  snprintf(out->file, sizeof out->file, "%s/yarn-site.xml", conf_dir);
  if ((rc = hconf_load(&c, out->file, why, sizeof why)) < 0) {
    if (rc == LOOM_ENOENT)
      snprintf(err, errlen, "%s=%s has no yarn-site.xml: is it the cluster's configuration?", how,
               conf_dir);
    else
      snprintf(err, errlen, "%s", why);
    hconf_free(&c);
    return LOOM_EBACKEND;
  }
  char ha[16], ids[512];
  hconf_get(&c, "yarn.resourcemanager.ha.enabled", "false", ha, sizeof ha);
  if (!strcmp(ha, "true")) {
    hconf_get(&c, "yarn.resourcemanager.ha.rm-ids", "", ids, sizeof ids);
    for (char *save = NULL, *id = strtok_r(ids, ", \t\n", &save); id && rc >= 0;
         id = strtok_r(NULL, ", \t\n", &save)) {
      if (out->n == HYARN_MAX_RMS) break;
      char suffix[80];
      snprintf(suffix, sizeof suffix, ".%s", id);
      loom__strlcpy(out->rm[out->n].id, id, sizeof out->rm[0].id);
      rc = rm_addresses(&c, out->file, suffix, out, out->n, err, errlen);
      out->n++;
    }
    if (rc >= 0 && !out->n) {
      snprintf(err, errlen,
               "%s: yarn.resourcemanager.ha.enabled is true but "
               "yarn.resourcemanager.ha.rm-ids names no ResourceManager",
               out->file);
      rc = LOOM_EBACKEND;
    }
  } else {
    rc = rm_addresses(&c, out->file, "", out, 0, err, errlen);
    out->n = 1;
  }
  hconf_free(&c);
  return rc < 0 ? LOOM_EBACKEND : 0;
}

void hyarn_user(char *out, size_t len) { hconf_user(out, len); }

static const char *node_state(Hadoop__Yarn__NodeStateProto s) {
  switch (s) {
  case HADOOP__YARN__NODE_STATE_PROTO__NS_NEW:
    return "NEW";
  case HADOOP__YARN__NODE_STATE_PROTO__NS_RUNNING:
    return "RUNNING";
  case HADOOP__YARN__NODE_STATE_PROTO__NS_UNHEALTHY:
    return "UNHEALTHY";
  case HADOOP__YARN__NODE_STATE_PROTO__NS_DECOMMISSIONED:
    return "DECOMMISSIONED";
  case HADOOP__YARN__NODE_STATE_PROTO__NS_LOST:
    return "LOST";
  case HADOOP__YARN__NODE_STATE_PROTO__NS_REBOOTED:
    return "REBOOTED";
  case HADOOP__YARN__NODE_STATE_PROTO__NS_DECOMMISSIONING:
    return "DECOMMISSIONING";
  case HADOOP__YARN__NODE_STATE_PROTO__NS_SHUTDOWN:
    return "SHUTDOWN";
  default:
    return "UNKNOWN";
  }
}

static int64_t resource_value(const Hadoop__Yarn__ResourceProto *r, const char *key) {
  for (size_t i = 0; r && i < r->n_resource_value_map; i++)
    if (r->resource_value_map[i]->key && !strcmp(r->resource_value_map[i]->key, key))
      return r->resource_value_map[i]->value;
  return 0;
}

/* Appends s to a ", "-separated list in buf (cut when full). */
static void list_add(char *buf, size_t len, const char *sep, const char *s) {
  size_t off = strlen(buf);
  if (off + 1 < len) snprintf(buf + off, len - off, "%s%s", off ? sep : "", s);
}

static void leaf_queues(const Hadoop__Yarn__QueueInfoProto *q, char *buf, size_t len, int depth) {
  if (!q || depth > 32) return;
  if (!q->n_childqueues && q->queuename) list_add(buf, len, ", ", q->queuename);
  for (size_t i = 0; i < q->n_childqueues; i++) leaf_queues(q->childqueues[i], buf, len, depth + 1);
}

/* The calls, over one connection; 0 or an hipc_call code (err filled). */
static int ask(hipc_client *rpc, const char *queue, int timeout_ms, hyarn_cluster *out, char *err,
               size_t errlen) {
  ProtobufCMessage *resp = NULL;
  Hadoop__Yarn__GetClusterMetricsRequestProto mreq =
      HADOOP__YARN__GET_CLUSTER_METRICS_REQUEST_PROTO__INIT;
  int rc = hipc_call(rpc, "getClusterMetrics", &mreq.base,
                     &hadoop__yarn__get_cluster_metrics_response_proto__descriptor, &resp,
                     timeout_ms, err, errlen);
  if (rc < 0) return rc;
  Hadoop__Yarn__YarnClusterMetricsProto *m =
      ((Hadoop__Yarn__GetClusterMetricsResponseProto *)resp)->cluster_metrics;
  if (m) {
    out->nms = m->num_node_managers;
    out->active = m->num_active_nms;
    out->lost = m->num_lost_nms;
    out->unhealthy = m->num_unhealthy_nms;
    out->decommissioned = m->num_decommissioned_nms;
    out->decommissioning = m->num_decommissioning_nms;
    out->rebooted = m->num_rebooted_nms;
    out->shutdown = m->num_shutdown_nms;
  }
  protobuf_c_message_free_unpacked(resp, NULL);

  Hadoop__Yarn__GetClusterNodesRequestProto nreq =
      HADOOP__YARN__GET_CLUSTER_NODES_REQUEST_PROTO__INIT;
  if ((rc = hipc_call(rpc, "getClusterNodes", &nreq.base,
                      &hadoop__yarn__get_cluster_nodes_response_proto__descriptor, &resp,
                      timeout_ms, err, errlen)) < 0)
    return rc;
  Hadoop__Yarn__GetClusterNodesResponseProto *nr =
      (Hadoop__Yarn__GetClusterNodesResponseProto *)resp;
  out->nodes = calloc(nr->n_nodereports ? nr->n_nodereports : 1, sizeof *out->nodes);
  if (!out->nodes) {
    protobuf_c_message_free_unpacked(resp, NULL);
    return LOOM_ENOMEM;
  }
  for (size_t i = 0; i < nr->n_nodereports; i++) {
    const Hadoop__Yarn__NodeReportProto *r = nr->nodereports[i];
    hyarn_node *n = &out->nodes[out->nnodes++];
    if (r->nodeid)
      snprintf(n->id, sizeof n->id, "%s:%d", r->nodeid->host ? r->nodeid->host : "?",
               r->nodeid->port);
    loom__strlcpy(n->state, r->has_node_state ? node_state(r->node_state) : "UNKNOWN",
                  sizeof n->state);
    if (r->capability) {
      n->memory_mb = r->capability->memory;
      n->vcores = r->capability->virtual_cores;
      n->gpus = resource_value(r->capability, HYARN_GPU);
    }
    if (r->used) {
      n->used_mb = r->used->memory;
      n->used_vcores = r->used->virtual_cores;
    }
    n->containers = r->numcontainers;
    /* a node has one partition; YARN sends it as a list */
    if (r->n_node_labels && r->node_labels[0])
      loom__strlcpy(n->label, r->node_labels[0], sizeof n->label);
  }
  protobuf_c_message_free_unpacked(resp, NULL);

  Hadoop__Yarn__GetClusterNodeLabelsRequestProto lreq =
      HADOOP__YARN__GET_CLUSTER_NODE_LABELS_REQUEST_PROTO__INIT;
  if ((rc = hipc_call(rpc, "getClusterNodeLabels", &lreq.base,
                      &hadoop__yarn__get_cluster_node_labels_response_proto__descriptor, &resp,
                      timeout_ms, err, errlen)) < 0)
    return rc;
  Hadoop__Yarn__GetClusterNodeLabelsResponseProto *lr =
      (Hadoop__Yarn__GetClusterNodeLabelsResponseProto *)resp;
  out->labels = calloc(lr->n_nodelabels ? lr->n_nodelabels : 1, sizeof *out->labels);
  if (!out->labels) {
    protobuf_c_message_free_unpacked(resp, NULL);
    return LOOM_ENOMEM;
  }
  for (size_t i = 0; i < lr->n_nodelabels; i++) {
    if (!lr->nodelabels[i]->name) continue;
    hyarn_label *l = &out->labels[out->nlabels++];
    loom__strlcpy(l->name, lr->nodelabels[i]->name, sizeof l->name);
    /* the proto's default is exclusive */
    l->exclusive = !lr->nodelabels[i]->has_isexclusive || lr->nodelabels[i]->isexclusive;
  }
  protobuf_c_message_free_unpacked(resp, NULL);

  Hadoop__Yarn__GetAllResourceTypeInfoRequestProto treq =
      HADOOP__YARN__GET_ALL_RESOURCE_TYPE_INFO_REQUEST_PROTO__INIT;
  if ((rc = hipc_call(rpc, "getResourceTypeInfo", &treq.base,
                      &hadoop__yarn__get_all_resource_type_info_response_proto__descriptor, &resp,
                      timeout_ms, err, errlen)) < 0)
    return rc;
  Hadoop__Yarn__GetAllResourceTypeInfoResponseProto *tr =
      (Hadoop__Yarn__GetAllResourceTypeInfoResponseProto *)resp;
  for (size_t i = 0; i < tr->n_resource_type_info; i++) {
    const char *name = tr->resource_type_info[i]->name;
    list_add(out->types, sizeof out->types, ", ", name);
    out->gpu_type |= !strcmp(name, HYARN_GPU);
  }
  protobuf_c_message_free_unpacked(resp, NULL);

  if (!queue) return 0;
  loom__strlcpy(out->queue_asked, queue, sizeof out->queue_asked);
  Hadoop__Yarn__GetQueueInfoRequestProto qreq = HADOOP__YARN__GET_QUEUE_INFO_REQUEST_PROTO__INIT;
  qreq.queuename = (char *)queue;
  rc = hipc_call(rpc, "getQueueInfo", &qreq.base,
                 &hadoop__yarn__get_queue_info_response_proto__descriptor, &resp, timeout_ms, err,
                 errlen);
  const Hadoop__Yarn__QueueInfoProto *q = NULL;
  if (rc == 0) {
    q = ((Hadoop__Yarn__GetQueueInfoResponseProto *)resp)->queueinfo;
    if (q) {
      static const char *states[] = {"?", "STOPPED", "RUNNING", "DRAINING"};
      loom__strlcpy(out->queue_state,
                    q->has_state && q->state >= 1 && q->state <= 3 ? states[q->state] : "RUNNING",
                    sizeof out->queue_state);
      for (size_t i = 0; i < q->n_accessiblenodelabels; i++)
        list_add(out->queue_labels, sizeof out->queue_labels, ",", q->accessiblenodelabels[i]);
      out->queue_found = true;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    if (q) return 0;
  } else if (rc != LOOM_EPEER || !strstr(err, "Unknown queue"))
    return rc;
  /* An unknown queue: the RM logs it and answers with no queue (3.5), or
   * an "Unknown queue" exception (others). List the leaf queues. */
  err[0] = 0;
  qreq.queuename = "root";
  qreq.has_includechildqueues = qreq.includechildqueues = 1;
  qreq.has_recursive = qreq.recursive = 1;
  if ((rc = hipc_call(rpc, "getQueueInfo", &qreq.base,
                      &hadoop__yarn__get_queue_info_response_proto__descriptor, &resp, timeout_ms,
                      err, errlen)) < 0)
    return rc;
  leaf_queues(((Hadoop__Yarn__GetQueueInfoResponseProto *)resp)->queueinfo, out->queues,
              sizeof out->queues, 0);
  protobuf_c_message_free_unpacked(resp, NULL);
  return 0;
}

int hyarn_cluster_get(const char *conf_dir, const char *queue, int timeout_ms, hyarn_cluster *out,
                      char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  hyarn_rms rms;
  int rc = hyarn_find_rm(conf_dir, &rms, err, errlen);
  if (rc < 0) return rc;
  loom__strlcpy(out->conf_file, rms.file, sizeof out->conf_file);
  char user[128];
  hyarn_user(user, sizeof user);
  size_t off = 0;
  err[0] = 0;
  for (int i = 0; i < rms.n; i++) {
    char peer[2600], why[4096];
    snprintf(peer, sizeof peer, "the ResourceManager%s%s at %s:%d (%s in %s)",
             rms.rm[i].id[0] ? " " : "", rms.rm[i].id, rms.rm[i].host, rms.rm[i].port,
             rms.rm[i].how, rms.file);
    hipc_client *rpc;
    rc = hipc_connect(rms.rm[i].host, rms.rm[i].port, peer, ACP, user, timeout_ms, &rpc, why,
                      sizeof why);
    if (rc == LOOM_ECONN || rc == LOOM_ETIMEDOUT) {
      size_t l = strlen(why);
      snprintf(why + l, sizeof why - l,
               ": is the ResourceManager running, and HADOOP_CONF_DIR the cluster's?");
    }
    if (rc == 0) {
      hyarn_cluster_free(out);
      memset(out, 0, sizeof *out);
      loom__strlcpy(out->conf_file, rms.file, sizeof out->conf_file);
      snprintf(out->rm, sizeof out->rm, "%s:%d", rms.rm[i].host, rms.rm[i].port);
      rc = ask(rpc, queue, timeout_ms, out, why, sizeof why);
      hipc_close(rpc);
      if (rc == 0) {
        err[0] = 0;
        return 0;
      }
      if (rc == LOOM_ENOMEM) snprintf(why, sizeof why, "%s: out of memory", peer);
    }
    if (rms.n == 1) {
      snprintf(err, errlen, "%s", why);
      hyarn_cluster_free(out);
      return LOOM_EBACKEND;
    }
    if (off < errlen)
      off += (size_t)snprintf(err + off, errlen - off, "%s%s", off ? "; " : "", why);
  }
  hyarn_cluster_free(out);
  return LOOM_EBACKEND;
}

void hyarn_cluster_free(hyarn_cluster *c) {
  free(c->nodes);
  free(c->labels);
  c->nodes = NULL;
  c->labels = NULL;
  c->nnodes = c->nlabels = 0;
}
