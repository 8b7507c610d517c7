/* am.c: an unmanaged YARN application master (see am.h). The calls and
 * their order follow Hadoop's own UnmanagedAMLauncher, AMRMClientImpl and
 * NMClientImpl: getNewApplication, submitApplication (unmanaged_am),
 * getApplicationReport until the attempt's AMRMToken appears, then over
 * SASL registerApplicationMaster, allocate (response ids in sequence,
 * asks as a table of outstanding requests keyed by allocation id), and
 * finishApplicationMaster; startContainers/stopContainers per NodeManager
 * with its NMToken are nm.c's. A token's user is the attempt's id, so that is
 * the user every SASL connection names. A managed application master
 * (hyarn_am_attach) reads its AMRMToken from the credentials file
 * (creds.c); the ResourceManager's client calls are submit.c's. */
#include "yarn/am_int.h"

#include "Security.pb-c.h"
#include "applicationclient_protocol.pb-c.h"
#include "applicationmaster_protocol.pb-c.h"
#include "containermanagement_protocol.pb-c.h"
#include "hadoop/conf.h"
#include "hadoop/hdfs.h"
#include "hadoop/creds.h"
#include "yarn_service_protos.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static void token_free(token *t) {
  free(t->id);
  free(t->pw);
  memset(t, 0, sizeof *t);
}

static int token_set(token *t, const Hadoop__Common__TokenProto *p) {
  token n = {0};
  n.id = malloc(p->identifier.len ? p->identifier.len : 1);
  n.pw = malloc(p->password.len ? p->password.len : 1);
  if (!n.id || !n.pw) {
    token_free(&n);
    return LOOM_ENOMEM;
  }
  /* an empty bytes field unpacks as NULL data: nothing to copy */
  if (p->identifier.len) memcpy(n.id, p->identifier.data, p->identifier.len);
  if (p->password.len) memcpy(n.pw, p->password.data, p->password.len);
  n.idlen = p->identifier.len;
  n.pwlen = p->password.len;
  token_free(t);
  *t = n;
  return 0;
}

static void container_id_str(const Hadoop__Yarn__ContainerIdProto *c, char *out, size_t len) {
  const Hadoop__Yarn__ApplicationAttemptIdProto *a = c ? c->app_attempt_id : NULL;
  const Hadoop__Yarn__ApplicationIdProto *app = a ? a->application_id : c ? c->app_id : NULL;
  int64_t id = c ? c->id : 0, epoch = id >> 40;
  char e[32] = "";
  if (epoch) snprintf(e, sizeof e, "e%02lld_", (long long)epoch);
  snprintf(out, len, "container_%s%lld_%04d_%02d_%06lld", e,
           app ? (long long)app->cluster_timestamp : 0LL, app ? app->id : 0, a ? a->attemptid : 0,
           (long long)(id & 0xFFFFFFFFFFLL));
}

static void app_id_proto(const hyarn_am *am, Hadoop__Yarn__ApplicationIdProto *p) {
  hadoop__yarn__application_id_proto__init(p);
  p->has_id = p->has_cluster_timestamp = 1;
  p->id = am->app_seq;
  p->cluster_timestamp = am->cluster_ts;
}

/* (Re)connects to the scheduler with the current AMRMToken. */
static int sched_connect(hyarn_am *am, char *err, size_t errlen) {
  hipc_close(am->sched);
  am->sched = NULL;
  char peer[700];
  const int i = am->rmi;
  snprintf(peer, sizeof peer, "the ResourceManager's scheduler at %s:%d", am->rms.rm[i].sched_host,
           am->rms.rm[i].sched_port);
  hsasl_token t = hyarn__token_sasl(&am->amrm);
  return hipc_connect_token(am->rms.rm[i].sched_host, am->rms.rm[i].sched_port, peer, AMP,
                            am->attempt_id, &t, am->timeout_ms, &am->sched, err, errlen);
}

/* A scheduler call, reconnecting once if the connection was lost (the RM
 * closes idle connections; a rolled AMRMToken is used for the new one). */
static int sched_call(hyarn_am *am, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp, char *err,
                      size_t errlen) {
  int rc = am->sched ? 0 : sched_connect(am, err, errlen);
  if (rc == 0) rc = hipc_call(am->sched, method, req, desc, resp, am->timeout_ms, err, errlen);
  if (rc == LOOM_ECONN) {
    if ((rc = sched_connect(am, err, errlen)) == 0)
      rc = hipc_call(am->sched, method, req, desc, resp, am->timeout_ms, err, errlen);
  }
  return rc;
}

/* How long a lost ResourceManager is waited for, as Hadoop's clients read
 * it (yarn.resourcemanager.connect.max-wait.ms, -1: for ever; the retry
 * interval caps the backoff), and whether the cluster says it recovers
 * applications (for messages). */
static void read_rm_conf(hyarn_am *am) {
  am->rm_wait_ms = 900000;
  am->rm_retry_ms = 30000;
  hconf c = {0};
  char why[512], v[64];
  if (hconf_load(&c, am->rms.file, why, sizeof why) == 0) {
    if (hconf_get(&c, "yarn.resourcemanager.connect.max-wait.ms", NULL, v, sizeof v) == 1)
      am->rm_wait_ms = strtoll(v, NULL, 10);
    if (hconf_get(&c, "yarn.resourcemanager.connect.retry-interval.ms", NULL, v, sizeof v) == 1)
      am->rm_retry_ms = strtoll(v, NULL, 10);
    if (hconf_get(&c, "yarn.resourcemanager.recovery.enabled", "false", v, sizeof v) >= 0)
      am->rm_recovery = !strcasecmp(v, "true");
  }
  hconf_free(&c);
  if (am->rm_retry_ms < 100) am->rm_retry_ms = 100;
}

/* What a ResourceManager that forgot the attempt means, and the cure. */
#define RM_LOST_HOW                                                                                \
  "for applications to survive a ResourceManager restart, the ResourceManager needs "              \
  "yarn.resourcemanager.recovery.enabled=true, a state store "                                     \
  "(yarn.resourcemanager.store.class: FileSystemRMStateStore, LeveldbRMStateStore or "             \
  "ZKRMStateStore) and yarn.resourcemanager.work-preserving-recovery.enabled=true, and each "      \
  "NodeManager yarn.nodemanager.recovery.enabled=true with a yarn.nodemanager.recovery.dir and a " \
  "fixed yarn.nodemanager.address port"

static bool conn_lost(int rc) { return rc == LOOM_ECONN || rc == LOOM_ETIMEDOUT; }

/* sched_call, waiting for a ResourceManager that went away (restarted,
 * failed over) with a backoff from 100 ms to the retry interval, at most
 * the max wait; a restarted ResourceManager that no longer knows the
 * attempt's AMRMToken (no recovery) ends the wait at once. */
static int sched_call_wait(hyarn_am *am, const char *method, const ProtobufCMessage *req,
                           const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp,
                           char *err, size_t errlen) {
  int rc = sched_call(am, method, req, desc, resp, err, errlen);
  if (!conn_lost(rc)) return rc;
  const int i = am->rmi;
  const uint64_t t0 = loom__now_ms();
  int64_t backoff = 100;
  loom__log(LOOM_LOG_WARN, "hadoop",
            "%s: lost the ResourceManager's scheduler at %s:%d (%s); waiting for it to come back, "
            "at most %lld ms (yarn.resourcemanager.connect.max-wait.ms)",
            am->attempt_id, am->rms.rm[i].sched_host, am->rms.rm[i].sched_port, err,
            (long long)am->rm_wait_ms);
  while (conn_lost(rc)) {
    const int64_t waited = (int64_t)(loom__now_ms() - t0);
    if (am->rm_wait_ms >= 0 && waited >= am->rm_wait_ms) {
      char last[1024];
      loom__strlcpy(last, err, sizeof last);
      snprintf(err, errlen,
               "the ResourceManager was lost: its scheduler at %s:%d did not answer for %lld ms "
               "(yarn.resourcemanager.connect.max-wait.ms %lld): %s",
               am->rms.rm[i].sched_host, am->rms.rm[i].sched_port, (long long)waited,
               (long long)am->rm_wait_ms, last);
      return LOOM_ECONN;
    }
    int64_t nap = backoff;
    if (am->rm_wait_ms >= 0 && nap > am->rm_wait_ms - waited) nap = am->rm_wait_ms - waited;
    usleep((useconds_t)(nap > 0 ? nap : 1) * 1000);
    backoff = backoff * 2 > am->rm_retry_ms ? am->rm_retry_ms : backoff * 2;
    rc = sched_call(am, method, req, desc, resp, err, errlen);
  }
  if (rc == LOOM_EAUTH) {
    char last[1024];
    loom__strlcpy(last, err, sizeof last);
    snprintf(err, errlen,
             "the ResourceManager was lost: it came back after %lld ms without %s (%s): %s%s",
             (long long)(loom__now_ms() - t0), am->attempt_id, last, RM_LOST_HOW,
             am->rm_recovery ? "" : " (this client's yarn-site.xml has recovery off)");
    return rc;
  }
  loom__log(LOOM_LOG_WARN, "hadoop", "%s: the ResourceManager answers again after %llu ms",
            am->attempt_id, (unsigned long long)(loom__now_ms() - t0));
  return rc;
}

/* Submits as an unmanaged AM and waits for the AMRMToken. */
static int submit(hyarn_am *am, hipc_client *rpc, const char *name, const char *queue, char *err,
                  size_t errlen) {
  Hadoop__Yarn__ContainerLaunchContextProto clc =
      HADOOP__YARN__CONTAINER_LAUNCH_CONTEXT_PROTO__INIT;
  Hadoop__Yarn__ApplicationIdProto aid;
  int rc =
      hyarn__new_and_submit(rpc, am->timeout_ms, name, queue, &clc, 64, true, 1, &aid, err, errlen);
  if (aid.has_id) {
    am->cluster_ts = aid.cluster_timestamp;
    am->app_seq = aid.id;
    snprintf(am->app_id, sizeof am->app_id, "application_%lld_%04d", (long long)am->cluster_ts,
             am->app_seq);
  }
  if (rc < 0) return rc;
  ProtobufCMessage *resp = NULL;

  uint64_t deadline = loom__now_ms() + (uint64_t)am->timeout_ms;
  const char *last = "SUBMITTED";
  for (;;) {
    Hadoop__Yarn__GetApplicationReportRequestProto rreq =
        HADOOP__YARN__GET_APPLICATION_REPORT_REQUEST_PROTO__INIT;
    rreq.application_id = &aid;
    if ((rc = hipc_call(rpc, "getApplicationReport", &rreq.base,
                        &hadoop__yarn__get_application_report_response_proto__descriptor, &resp,
                        am->timeout_ms, err, errlen)) < 0)
      return rc;
    Hadoop__Yarn__ApplicationReportProto *r =
        ((Hadoop__Yarn__GetApplicationReportResponseProto *)resp)->application_report;
    rc = 1;
    if (r) {
      last = hyarn__app_state(r->yarn_application_state);
      if (r->yarn_application_state >= HADOOP__YARN__YARN_APPLICATION_STATE_PROTO__FINISHED) {
        char d[1024];
        hyarn__printable(d, sizeof d, r->diagnostics);
        snprintf(err, errlen, "YARN ended %s before it started: %s: %s", am->app_id, last, d);
        rc = LOOM_ERESOURCE;
      } else if (r->am_rm_token && r->currentapplicationattemptid) {
        am->attempt = r->currentapplicationattemptid->attemptid;
        hyarn__printable(am->tracking, sizeof am->tracking, r->trackingurl);
        rc = token_set(&am->amrm, r->am_rm_token);
      }
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    if (rc <= 0) break;
    if (loom__now_ms() >= deadline) {
      snprintf(err, errlen,
               "%s is still %s after %d ms: the queue does not start it (full, or its AM share "
               "used up: yarn.scheduler.capacity.maximum-am-resource-percent)",
               am->app_id, last, am->timeout_ms);
      return LOOM_ETIMEDOUT;
    }
    usleep(50 * 1000);
  }
  if (rc < 0) return rc;
  snprintf(am->attempt_id, sizeof am->attempt_id, "appattempt_%lld_%04d_%06d",
           (long long)am->cluster_ts, am->app_seq, am->attempt);
  return 0;
}

/* The tracking URL registrations give the ResourceManager (hyarn_am_set_tracking_url). */
static char tracking_url[512];

void hyarn_am_set_tracking_url(const char *url) {
  loom__strlcpy(tracking_url, url ? url : "", sizeof tracking_url);
}

static int do_register(hyarn_am *am, char *err, size_t errlen) {
  char host[256] = "";
  gethostname(host, sizeof host);
  Hadoop__Yarn__RegisterApplicationMasterRequestProto req =
      HADOOP__YARN__REGISTER_APPLICATION_MASTER_REQUEST_PROTO__INIT;
  req.host = host;
  req.has_rpc_port = 1;
  req.rpc_port = -1;
  req.tracking_url = tracking_url;
  ProtobufCMessage *resp = NULL;
  int rc = sched_call(am, "registerApplicationMaster", &req.base,
                      &hadoop__yarn__register_application_master_response_proto__descriptor, &resp,
                      err, errlen);
  if (rc < 0) return rc;
  Hadoop__Yarn__RegisterApplicationMasterResponseProto *r = (void *)resp;
  if (r->maximumcapability) {
    am->max_mb = r->maximumcapability->memory;
    am->max_vcores = r->maximumcapability->virtual_cores;
  }
  protobuf_c_message_free_unpacked(resp, NULL);
  am->registered = true;
  return 0;
}

int hyarn_am_start(const char *conf_dir, const char *name, const char *queue, int timeout_ms,
                   hyarn_am **out, char *err, size_t errlen) {
  *out = NULL;
  hyarn_am *am = calloc(1, sizeof *am);
  if (!am) return LOOM_ENOMEM;
  am->timeout_ms = timeout_ms;
  hyarn_user(am->user, sizeof am->user);
  int rc = hyarn_find_rm(conf_dir, &am->rms, err, errlen);
  if (rc < 0) {
    free(am);
    return LOOM_EBACKEND;
  }
  read_rm_conf(am);
  hipc_client *rpc = NULL;
  char why[4096] = "";
  /* with HA, the first ResourceManager that answers as active */
  for (am->rmi = 0; am->rmi < am->rms.n; am->rmi++) {
    rc = hyarn__rm_connect(am, &rpc, why, sizeof why);
    if (rc == 0) rc = submit(am, rpc, name, queue, why, sizeof why);
    bool standby = rc < 0 && rpc && strstr(hipc_exception(rpc), "StandbyException");
    bool unreachable = rc == LOOM_ECONN || rc == LOOM_ETIMEDOUT;
    if (rc == 0 || am->app_id[0] || !(standby || unreachable) || am->rmi + 1 == am->rms.n) break;
    hipc_close(rpc);
    rpc = NULL;
  }
  if (am->rmi == am->rms.n) am->rmi = 0;
  if (rc == 0) rc = do_register(am, why, sizeof why);
  hipc_close(rpc);
  if (rc < 0) {
    snprintf(err, errlen, "%s%s%s", am->app_id[0] ? am->app_id : "", am->app_id[0] ? ": " : "",
             why);
    hyarn_am_free(am, am->app_id[0] != 0);
    return rc == LOOM_ERESOURCE || rc == LOOM_ETIMEDOUT ? LOOM_ERESOURCE : LOOM_EBACKEND;
  }
  *out = am;
  return 0;
}

const char *hyarn_am_app_id(const hyarn_am *am) { return am->app_id; }
const char *hyarn_am_attempt_id(const hyarn_am *am) { return am->attempt_id; }
const char *hyarn_am_tracking(const hyarn_am *am) { return am->tracking; }
void hyarn_am_max(const hyarn_am *am, int64_t *memory_mb, int *vcores) {
  *memory_mb = am->max_mb;
  *vcores = am->max_vcores;
}

static void nm_token_keep(hyarn_am *am, const Hadoop__Yarn__NMTokenProto *p) {
  if (!p->nodeid || !p->nodeid->host || !p->token) return;
  char node[300];
  snprintf(node, sizeof node, "%s:%d", p->nodeid->host, p->nodeid->port);
  for (int i = 0; i < am->nnm; i++)
    if (!strcmp(am->nm[i].node, node)) {
      token_set(&am->nm[i].tok, p->token); /* a newer one (roll-over) */
      return;
    }
  if (am->nnm == am->capnm) {
    int cap = am->capnm ? am->capnm * 2 : 8;
    nmtoken *n = realloc(am->nm, (size_t)cap * sizeof *n);
    if (!n) return;
    am->nm = n;
    am->capnm = cap;
  }
  nmtoken *t = &am->nm[am->nnm];
  memset(t, 0, sizeof *t);
  loom__strlcpy(t->node, node, sizeof t->node);
  if (token_set(&t->tok, p->token) == 0) am->nnm++;
}

static int64_t gpu_value(const Hadoop__Yarn__ResourceProto *r) {
  for (size_t i = 0; r && i < r->n_resource_value_map; i++)
    if (r->resource_value_map[i]->key && !strcmp(r->resource_value_map[i]->key, HYARN_GPU))
      return r->resource_value_map[i]->value;
  return 0;
}

/* The outstanding asks: a's num replaces what its allocation id had (0
 * withdraws it). */
static void ask_keep(hyarn_am *am, const hyarn_ask *a) {
  int i = 0;
  while (i < am->nout && am->out[i].alloc_id != a->alloc_id) i++;
  if (i < am->nout) {
    if (a->num > 0) {
      am->out[i].num = a->num;
      return;
    }
    free((char *)am->out[i].label);
    am->out[i] = am->out[--am->nout];
    return;
  }
  if (a->num <= 0) return;
  if (am->nout == am->capout) {
    int cap = am->capout ? am->capout * 2 : 8;
    hyarn_ask *n = realloc(am->out, (size_t)cap * sizeof *n);
    if (!n) return;
    am->out = n;
    am->capout = cap;
  }
  hyarn_ask *o = &am->out[am->nout];
  *o = *a;
  o->label = NULL;
  if (a->label && !(o->label = strdup(a->label))) return;
  am->nout++;
}

/* A container granted for allocation id: one ask fewer outstanding. */
static void ask_granted(hyarn_am *am, int64_t alloc_id) {
  for (int i = 0; i < am->nout; i++)
    if (am->out[i].alloc_id == alloc_id) {
      hyarn_ask a = am->out[i];
      a.num--;
      ask_keep(am, &a);
      return;
    }
}

static void release_keep(hyarn_am *am, const hyarn_container *c) {
  if (am->npend == am->cappend) {
    int cap = am->cappend ? am->cappend * 2 : 8;
    hyarn_container *n = realloc(am->pend, (size_t)cap * sizeof *n);
    if (!n) return;
    am->pend = n;
    am->cappend = cap;
  }
  if (hyarn_container_copy(&am->pend[am->npend], c) == 0) am->npend++;
}

static void release_done(hyarn_am *am, const char *id) {
  for (int i = 0; i < am->npend; i++)
    if (!strcmp(am->pend[i].id, id)) {
      hyarn_container_free(&am->pend[i]);
      am->pend[i] = am->pend[--am->npend];
      return;
    }
}

/* One allocate call with these asks and releases; *resp as sched_call. */
static int alloc_send(hyarn_am *am, const hyarn_ask *asks, int nasks,
                      const hyarn_container *const *release, int nrelease, float progress,
                      ProtobufCMessage **resp, char *err, size_t errlen) {
  Hadoop__Yarn__ResourceRequestProto *rr = calloc((size_t)nasks + 1, sizeof *rr);
  Hadoop__Yarn__ResourceRequestProto **rrp = calloc((size_t)nasks + 1, sizeof *rrp);
  Hadoop__Yarn__ResourceProto *cap = calloc((size_t)nasks + 1, sizeof *cap);
  Hadoop__Yarn__ResourceInformationProto *gi = calloc((size_t)nasks + 1, sizeof *gi);
  Hadoop__Yarn__ResourceInformationProto **gip = calloc((size_t)nasks + 1, sizeof *gip);
  Hadoop__Yarn__PriorityProto *pri = calloc((size_t)nasks + 1, sizeof *pri);
  Hadoop__Yarn__ContainerIdProto **rel = calloc((size_t)nrelease + 1, sizeof *rel);
  Hadoop__Yarn__ContainerProto **relc = calloc((size_t)nrelease + 1, sizeof *relc);
  int rc = (rr && rrp && cap && gi && gip && pri && rel && relc) ? 0 : LOOM_ENOMEM;
  for (int i = 0; rc == 0 && i < nasks; i++) {
    const hyarn_ask *a = &asks[i];
    hadoop__yarn__resource_request_proto__init(&rr[i]);
    hadoop__yarn__resource_proto__init(&cap[i]);
    hadoop__yarn__priority_proto__init(&pri[i]);
    pri[i].has_priority = 1;
    pri[i].priority = a->priority;
    cap[i].has_memory = cap[i].has_virtual_cores = 1;
    cap[i].memory = a->memory_mb;
    cap[i].virtual_cores = a->vcores;
    if (a->gpus > 0) {
      hadoop__yarn__resource_information_proto__init(&gi[i]);
      gi[i].key = HYARN_GPU;
      gi[i].has_value = 1;
      gi[i].value = a->gpus;
      gi[i].units = "";
      gip[i] = &gi[i];
      cap[i].n_resource_value_map = 1;
      cap[i].resource_value_map = &gip[i];
    }
    rr[i].priority = &pri[i];
    rr[i].resource_name = "*";
    rr[i].capability = &cap[i];
    rr[i].has_num_containers = 1;
    rr[i].num_containers = a->num;
    rr[i].has_relax_locality = rr[i].relax_locality = 1;
    rr[i].node_label_expression = (char *)a->label;
    rr[i].has_allocation_request_id = 1;
    rr[i].allocation_request_id = a->alloc_id;
    rrp[i] = &rr[i];
  }
  for (int i = 0; rc == 0 && i < nrelease; i++) {
    relc[i] = hadoop__yarn__container_proto__unpack(NULL, release[i]->proto_len, release[i]->proto);
    if (!relc[i] || !relc[i]->id)
      rc = LOOM_EPROTO;
    else
      rel[i] = relc[i]->id;
  }
  Hadoop__Yarn__AllocateRequestProto req = HADOOP__YARN__ALLOCATE_REQUEST_PROTO__INIT;
  req.n_ask = (size_t)nasks;
  req.ask = rrp;
  req.n_release = (size_t)nrelease;
  req.release = rel;
  req.has_response_id = req.has_progress = 1;
  req.response_id = am->response_id;
  req.progress = progress;
  if (rc == 0)
    rc = sched_call_wait(am, "allocate", &req.base,
                         &hadoop__yarn__allocate_response_proto__descriptor, resp, err, errlen);
  else
    snprintf(err, errlen, "allocate: %s", loom_strerror(rc));
  for (int i = 0; relc && i < nrelease; i++)
    if (relc[i]) protobuf_c_message_free_unpacked(&relc[i]->base, NULL);
  free(rr), free(rrp), free(cap), free(gi), free(gip), free(pri), free(rel), free(relc);
  return rc;
}

/* A restarted ResourceManager recovered the attempt but not its
 * registration (ApplicationMasterNotRegisteredException, or the AM_RESYNC
 * command): register again, start the response ids over, and send every
 * outstanding ask and release again (AMRMClientImpl's resync). */
static int resync(hyarn_am *am, float progress, ProtobufCMessage **resp, char *err, size_t errlen) {
  char why[2048];
  am->registered = false;
  int rc = do_register(am, why, sizeof why);
  if (rc < 0) {
    snprintf(err, errlen, "registering %s again with the restarted ResourceManager: %s",
             am->attempt_id, why);
    return rc;
  }
  am->response_id = 0;
  am->resyncs++;
  loom__log(LOOM_LOG_WARN, "hadoop",
            "%s: registered again with the restarted ResourceManager (resync %d); sending %d "
            "outstanding asks and %d releases again",
            am->attempt_id, am->resyncs, am->nout, am->npend);
  const hyarn_container **relp = calloc((size_t)am->npend + 1, sizeof *relp);
  if (!relp) return LOOM_ENOMEM;
  for (int i = 0; i < am->npend; i++) relp[i] = &am->pend[i];
  rc = alloc_send(am, am->out, am->nout, relp, am->npend, progress, resp, err, errlen);
  free(relp);
  return rc;
}

int hyarn_am_allocate(hyarn_am *am, const hyarn_ask *asks, int nasks,
                      const hyarn_container *const *release, int nrelease, float progress,
                      hyarn_alloc *res, char *err, size_t errlen) {
  memset(res, 0, sizeof *res);
  for (int i = 0; i < nasks; i++) ask_keep(am, &asks[i]);
  for (int i = 0; i < nrelease; i++) release_keep(am, release[i]);
  ProtobufCMessage *resp = NULL;
  int rc = alloc_send(am, asks, nasks, release, nrelease, progress, &resp, err, errlen);
  for (int round = 0; round < 3; round++) {
    const Hadoop__Yarn__AllocateResponseProto *r = (const void *)resp;
    bool again = rc == LOOM_EPEER && strstr(err, "ApplicationMasterNotRegistered");
    bool told =
        rc == 0 && r->has_a_m_command && r->a_m_command == HADOOP__YARN__AMCOMMAND_PROTO__AM_RESYNC;
    if (!again && !told) break;
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    resp = NULL;
    rc = resync(am, progress, &resp, err, errlen);
  }
  if (rc < 0) {
    if (rc == LOOM_EPEER &&
        (strstr(err, "ApplicationAttemptNotFound") || strstr(err, "ApplicationNotFound"))) {
      char last[1024];
      loom__strlcpy(last, err, sizeof last);
      snprintf(err, errlen, "the ResourceManager lost %s (%s): %s", am->attempt_id, last,
               RM_LOST_HOW);
    }
    /* the attempt is over in the RM's eyes: nothing will come back */
    if (rc == LOOM_EPEER || rc == LOOM_EAUTH || conn_lost(rc)) res->shutdown = true;
    return LOOM_EBACKEND;
  }
  Hadoop__Yarn__AllocateResponseProto *r = (void *)resp;
  if (r->has_response_id) am->response_id = r->response_id;
  if (r->has_a_m_command) res->shutdown = true;
  res->nodes = r->num_cluster_nodes;
  if (r->am_rm_token &&
      (r->am_rm_token->password.len != am->amrm.pwlen ||
       memcmp(r->am_rm_token->password.data, am->amrm.pw, am->amrm.pwlen) != 0) &&
      token_set(&am->amrm, r->am_rm_token) == 0) {
    /* the RM rolled its master key: authenticate with the new token now,
     * before the old key is retired (AMRMClientImpl does the same) */
    am->rolls++;
    hipc_close(am->sched);
    am->sched = NULL;
    loom__log(LOOM_LOG_INFO, "hadoop", "%s: the ResourceManager rolled the AMRMToken (%d so far)",
              am->attempt_id, am->rolls);
  }
  for (size_t i = 0; i < r->n_nm_tokens; i++) nm_token_keep(am, r->nm_tokens[i]);
  res->allocated = calloc(r->n_allocated_containers + 1, sizeof *res->allocated);
  res->done = calloc(r->n_completed_container_statuses + 1, sizeof *res->done);
  if (!res->allocated || !res->done) {
    protobuf_c_message_free_unpacked(resp, NULL);
    hyarn_alloc_free(res);
    snprintf(err, errlen, "allocate: out of memory");
    return LOOM_ENOMEM;
  }
  for (size_t i = 0; i < r->n_allocated_containers; i++) {
    const Hadoop__Yarn__ContainerProto *c = r->allocated_containers[i];
    hyarn_container *o = &res->allocated[res->nallocated];
    if (!c->id || !c->nodeid || !c->nodeid->host || !c->container_token) continue;
    o->alloc_id = c->has_allocation_request_id ? c->allocation_request_id : -1;
    if (o->alloc_id >= 0) ask_granted(am, o->alloc_id);
    container_id_str(c->id, o->id, sizeof o->id);
    hyarn__printable(o->host, sizeof o->host, c->nodeid->host);
    o->port = c->nodeid->port;
    snprintf(o->node, sizeof o->node, "%s:%d", c->nodeid->host, c->nodeid->port);
    if (c->resource) {
      o->memory_mb = c->resource->memory;
      o->vcores = c->resource->virtual_cores;
      o->gpus = gpu_value(c->resource);
    }
    o->proto_len = protobuf_c_message_get_packed_size(&c->base);
    if (!(o->proto = malloc(o->proto_len ? o->proto_len : 1))) continue;
    protobuf_c_message_pack(&c->base, o->proto);
    res->nallocated++;
  }
  for (size_t i = 0; i < r->n_completed_container_statuses; i++) {
    const Hadoop__Yarn__ContainerStatusProto *s = r->completed_container_statuses[i];
    hyarn_done *d = &res->done[res->ndone++];
    container_id_str(s->container_id, d->id, sizeof d->id);
    d->exit_status = s->has_exit_status ? s->exit_status : -1000;
    hyarn__printable(d->diagnostics, sizeof d->diagnostics, s->diagnostics);
    release_done(am, d->id);
  }
  protobuf_c_message_free_unpacked(resp, NULL);
  return 0;
}

void hyarn_container_free(hyarn_container *c) {
  free(c->proto);
  c->proto = NULL;
}

int hyarn_container_copy(hyarn_container *dst, const hyarn_container *src) {
  *dst = *src;
  dst->proto = malloc(src->proto_len ? src->proto_len : 1);
  if (!dst->proto) return LOOM_ENOMEM;
  if (src->proto_len) memcpy(dst->proto, src->proto, src->proto_len);
  return 0;
}

void hyarn_alloc_free(hyarn_alloc *res) {
  for (int i = 0; res->allocated && i < res->nallocated; i++)
    hyarn_container_free(&res->allocated[i]);
  free(res->allocated);
  free(res->done);
  memset(res, 0, sizeof *res);
}

int hyarn_am_finish(hyarn_am *am, int status, const char *diagnostics, char *err, size_t errlen) {
  static const Hadoop__Yarn__FinalApplicationStatusProto fs[] = {
      HADOOP__YARN__FINAL_APPLICATION_STATUS_PROTO__APP_SUCCEEDED,
      HADOOP__YARN__FINAL_APPLICATION_STATUS_PROTO__APP_FAILED,
      HADOOP__YARN__FINAL_APPLICATION_STATUS_PROTO__APP_KILLED};
  Hadoop__Yarn__FinishApplicationMasterRequestProto req =
      HADOOP__YARN__FINISH_APPLICATION_MASTER_REQUEST_PROTO__INIT;
  req.diagnostics = (char *)(diagnostics ? diagnostics : "");
  req.tracking_url = "";
  req.has_final_application_status = 1;
  req.final_application_status = fs[status < 0 || status > 2 ? 1 : status];
  /* the RM may answer "not yet" (isUnregistered false) while it saves the
   * state: ask again, as AMRMClientImpl does */
  int rc = 0;
  for (int i = 0; i < 50; i++) {
    ProtobufCMessage *resp = NULL;
    rc = sched_call_wait(am, "finishApplicationMaster", &req.base,
                         &hadoop__yarn__finish_application_master_response_proto__descriptor, &resp,
                         err, errlen);
    if (rc == LOOM_EPEER && strstr(err, "ApplicationMasterNotRegistered") && i < 3) {
      /* a restarted ResourceManager: register again, then finish */
      char why[2048];
      if (do_register(am, why, sizeof why) == 0) {
        am->response_id = 0;
        am->resyncs++;
        continue;
      }
    }
    if (rc < 0) return LOOM_EBACKEND;
    Hadoop__Yarn__FinishApplicationMasterResponseProto *r = (void *)resp;
    bool done = !r->has_isunregistered || r->isunregistered;
    protobuf_c_message_free_unpacked(resp, NULL);
    if (done) {
      am->finished = true;
      return 0;
    }
    usleep(100 * 1000);
  }
  snprintf(err, errlen, "finishApplicationMaster: %s not unregistered after 5 s", am->app_id);
  return LOOM_EBACKEND;
}

void hyarn_am_free(hyarn_am *am, bool kill) {
  if (!am) return;
  if (kill && !am->finished && am->app_id[0]) {
    hipc_client *rpc = NULL;
    char err[1024];
    Hadoop__Yarn__ApplicationIdProto aid;
    app_id_proto(am, &aid);
    if (hyarn__rm_connect(am, &rpc, err, sizeof err) < 0 ||
        hyarn__force_kill(rpc, &aid, "killed by loom", am->timeout_ms, err, sizeof err) < 0)
      loom__log(LOOM_LOG_WARN, "hadoop", "%s", err);
    hipc_close(rpc);
  }
  hipc_close(am->sched);
  for (int i = 0; i < am->nnm; i++) token_free(&am->nm[i].tok);
  free(am->nm);
  for (int i = 0; i < am->nout; i++) free((char *)am->out[i].label);
  free(am->out);
  for (int i = 0; i < am->npend; i++) hyarn_container_free(&am->pend[i]);
  free(am->pend);
  token_free(&am->amrm);
  free(am);
}

/* ---- the managed application master ------------------------------------- */

int hyarn_am_attempt(const hyarn_am *am) { return am->attempt; }
int hyarn_am_token_rolls(const hyarn_am *am) { return am->rolls; }
int hyarn_am_resyncs(const hyarn_am *am) { return am->resyncs; }

/* "container_[e17_]1764200000000_0001_01_000001" into the application and
 * attempt. */
static int parse_container_id(const char *s, int64_t *ts, int32_t *app, int32_t *attempt) {
  long long t;
  int a, at, n = 0;
  if (!strncmp(s, "container_e", 11)) {
    const char *u = strchr(s + 11, '_');
    if (!u) return -1;
    s = u + 1;
  } else if (!strncmp(s, "container_", 10)) {
    s += 10;
  } else
    return -1;
  if (sscanf(s, "%lld_%d_%d_%*d%n", &t, &a, &at, &n) != 3 || n == 0 || s[n]) return -1;
  *ts = t;
  *app = a;
  *attempt = at;
  return 0;
}

int hyarn_am_attach(const char *conf_dir, int timeout_ms, hyarn_am **out, char *err,
                    size_t errlen) {
  *out = NULL;
  const char *cid = getenv("CONTAINER_ID"), *tf = getenv("HADOOP_TOKEN_FILE_LOCATION");
  if (!cid || !tf) {
    snprintf(err, errlen,
             "not inside a YARN container: CONTAINER_ID and HADOOP_TOKEN_FILE_LOCATION unset");
    return LOOM_EBACKEND;
  }
  hyarn_am *am = calloc(1, sizeof *am);
  if (!am) return LOOM_ENOMEM;
  am->timeout_ms = timeout_ms;
  hyarn_user(am->user, sizeof am->user);
  if (parse_container_id(cid, &am->cluster_ts, &am->app_seq, &am->attempt) < 0) {
    snprintf(err, errlen, "CONTAINER_ID=%.100s is not a YARN container id", cid);
    free(am);
    return LOOM_EBACKEND;
  }
  snprintf(am->app_id, sizeof am->app_id, "application_%lld_%04d", (long long)am->cluster_ts,
           am->app_seq);
  snprintf(am->attempt_id, sizeof am->attempt_id, "appattempt_%lld_%04d_%06d",
           (long long)am->cluster_ts, am->app_seq, am->attempt);
  char *file = NULL;
  size_t flen = 0;
  char why[1024];
  int rc = loom__read_file(tf, 16 << 20, &file, &flen);
  hyarn_cred_token t;
  if (rc < 0) {
    snprintf(err, errlen, "cannot read the credentials %s: %s", tf, loom_strerror(rc));
  } else if ((rc = hyarn_creds_find((const uint8_t *)file, flen, "YARN_AM_RM_TOKEN", &t, why,
                                    sizeof why)) < 0) {
    snprintf(err, errlen, "the credentials %s: %s", tf, why);
  } else {
    am->amrm.id = t.identifier;
    am->amrm.idlen = t.identifier_len;
    am->amrm.pw = t.password;
    am->amrm.pwlen = t.password_len;
  }
  free(file);
  if (rc == 0 && (rc = hyarn_find_rm(conf_dir, &am->rms, why, sizeof why)) < 0)
    snprintf(err, errlen, "%s", why);
  if (rc == 0) read_rm_conf(am);
  if (rc == 0 && (rc = do_register(am, why, sizeof why)) < 0)
    snprintf(err, errlen, "%s: %s", am->attempt_id, why);
  if (rc < 0) {
    hyarn_am_free(am, false);
    return LOOM_EBACKEND;
  }
  *out = am;
  return 0;
}
