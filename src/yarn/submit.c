/* submit.c: the ResourceManager's client protocol for applications (see
 * submit.h): submitting an application (managed here; am.c submits its
 * unmanaged one through hyarn__new_and_submit), its report and its kill,
 * each call bounded by its timeout; with ResourceManager HA, the first
 * that answers. */
#include "yarn/submit.h"

#include "yarn/am_int.h"

#include "applicationclient_protocol.pb-c.h"
#include "yarn_service_protos.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies s from the cluster into out: printable ASCII, newlines kept as
 * "; ", cut to outlen. */
void hyarn__printable(char *out, size_t outlen, const char *s) {
  size_t n = 0;
  for (; s && *s && n + 1 < outlen; s++) {
    char c = *s;
    if (c == '\n') {
      if (n + 3 >= outlen) break;
      out[n++] = ';';
      c = ' ';
    }
    out[n++] = (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  out[n] = 0;
}

/* A connection to the ResourceManager's client protocol (SIMPLE). */
int hyarn__rm_connect(hyarn_am *am, hipc_client **rpc, char *err, size_t errlen) {
  char peer[700];
  const int i = am->rmi;
  snprintf(peer, sizeof peer, "the ResourceManager at %s:%d", am->rms.rm[i].host,
           am->rms.rm[i].port);
  return hipc_connect(am->rms.rm[i].host, am->rms.rm[i].port, peer, ACP, am->user, am->timeout_ms,
                      rpc, err, errlen);
}

const char *hyarn__app_state(Hadoop__Yarn__YarnApplicationStateProto s) {
  static const char *const n[] = {"?",       "NEW",      "NEW_SAVING", "SUBMITTED", "ACCEPTED",
                                  "RUNNING", "FINISHED", "FAILED",     "KILLED"};
  return s >= 1 && s <= 8 ? n[s] : "?";
}

/* getNewApplication, then submitApplication of an application named name
 * in queue (NULL: "default") whose AM container runs clc with memory_mb
 * and 1 vcore, or, unmanaged, whose AM is the caller's process. *aid gets
 * the id as soon as the RM gave one (has_id set), so that a failed submit
 * can still be named and killed. */
int hyarn__new_and_submit(hipc_client *rpc, int timeout_ms, const char *name, const char *queue,
                          Hadoop__Yarn__ContainerLaunchContextProto *clc, int64_t memory_mb,
                          bool unmanaged, int max_attempts, Hadoop__Yarn__ApplicationIdProto *aid,
                          char *err, size_t errlen) {
  hadoop__yarn__application_id_proto__init(aid);
  ProtobufCMessage *resp = NULL;
  Hadoop__Yarn__GetNewApplicationRequestProto nreq =
      HADOOP__YARN__GET_NEW_APPLICATION_REQUEST_PROTO__INIT;
  int rc = hipc_call(rpc, "getNewApplication", &nreq.base,
                     &hadoop__yarn__get_new_application_response_proto__descriptor, &resp,
                     timeout_ms, err, errlen);
  if (rc < 0) return rc;
  Hadoop__Yarn__GetNewApplicationResponseProto *nr = (void *)resp;
  if (nr->application_id) {
    aid->has_id = aid->has_cluster_timestamp = 1;
    aid->id = nr->application_id->id;
    aid->cluster_timestamp = nr->application_id->cluster_timestamp;
  }
  protobuf_c_message_free_unpacked(resp, NULL);
  if (!aid->has_id) {
    snprintf(err, errlen, "getNewApplication: the ResourceManager gave no application id");
    return LOOM_EPROTO;
  }
  Hadoop__Yarn__ResourceProto res = HADOOP__YARN__RESOURCE_PROTO__INIT;
  res.has_memory = res.has_virtual_cores = 1;
  res.memory = memory_mb;
  res.virtual_cores = 1;
  Hadoop__Yarn__ApplicationSubmissionContextProto ctx =
      HADOOP__YARN__APPLICATION_SUBMISSION_CONTEXT_PROTO__INIT;
  ctx.application_id = aid;
  ctx.application_name = (char *)name;
  ctx.queue = (char *)(queue ? queue : "default");
  ctx.am_container_spec = clc;
  ctx.has_unmanaged_am = ctx.unmanaged_am = unmanaged;
  ctx.has_maxappattempts = 1;
  ctx.maxappattempts = max_attempts;
  ctx.resource = &res;
  ctx.applicationtype = "LOOM";
  Hadoop__Yarn__SubmitApplicationRequestProto sreq =
      HADOOP__YARN__SUBMIT_APPLICATION_REQUEST_PROTO__INIT;
  sreq.application_submission_context = &ctx;
  rc = hipc_call(rpc, "submitApplication", &sreq.base,
                 &hadoop__yarn__submit_application_response_proto__descriptor, &resp, timeout_ms,
                 err, errlen);
  if (rc == 0) protobuf_c_message_free_unpacked(resp, NULL);
  return rc;
}

/* A client connection to the first ResourceManager that answers. */
static int client_connect(const char *conf_dir, int timeout_ms, hyarn_am *am, hipc_client **rpc,
                          char *err, size_t errlen) {
  memset(am, 0, sizeof *am);
  am->timeout_ms = timeout_ms;
  hyarn_user(am->user, sizeof am->user);
  int rc = hyarn_find_rm(conf_dir, &am->rms, err, errlen);
  if (rc < 0) return LOOM_EBACKEND;
  for (am->rmi = 0; am->rmi < am->rms.n; am->rmi++)
    if ((rc = hyarn__rm_connect(am, rpc, err, errlen)) == 0) return 0;
  return LOOM_EBACKEND;
}

static int parse_app_id(const char *s, Hadoop__Yarn__ApplicationIdProto *p) {
  long long ts;
  int id, n = 0;
  if (sscanf(s, "application_%lld_%d%n", &ts, &id, &n) != 2 || s[n]) return -1;
  hadoop__yarn__application_id_proto__init(p);
  p->has_id = p->has_cluster_timestamp = 1;
  p->id = id;
  p->cluster_timestamp = ts;
  return 0;
}

int hyarn_submit_managed(const char *conf_dir, const char *name, const char *queue,
                         const char *command, char *const *env, const hyarn_resource *res, int nres,
                         int64_t memory_mb, int max_attempts, int timeout_ms, char app_id[64],
                         char *err, size_t errlen) {
  hyarn_am am;
  hipc_client *rpc = NULL;
  app_id[0] = 0;
  int rc = client_connect(conf_dir, timeout_ms, &am, &rpc, err, errlen);
  if (rc < 0) return rc;
  hyarn__clc_env ce;
  hyarn__clc_res cr;
  memset(&cr, 0, sizeof cr);
  rc = hyarn__clc_env_make(&ce, env);
  if (rc == 0) rc = hyarn__clc_res_make(&cr, res, nres, err, errlen);
  if (rc == 0) {
    Hadoop__Yarn__ContainerLaunchContextProto clc =
        HADOOP__YARN__CONTAINER_LAUNCH_CONTEXT_PROTO__INIT;
    clc.n_environment = ce.n;
    clc.environment = ce.kvp;
    clc.n_localresources = cr.n;
    clc.localresources = cr.lrp;
    char *cmds[] = {(char *)command};
    clc.n_command = 1;
    clc.command = cmds;
    Hadoop__Yarn__ApplicationIdProto aid;
    rc = hyarn__new_and_submit(rpc, timeout_ms, name, queue, &clc, memory_mb, false, max_attempts,
                               &aid, err, errlen);
    if (aid.has_id)
      snprintf(app_id, 64, "application_%lld_%04d", (long long)aid.cluster_timestamp, aid.id);
  }
  hyarn__clc_env_free(&ce);
  hyarn__clc_res_free(&cr);
  hipc_close(rpc);
  if (rc == LOOM_EPEER && strstr(err, "InvalidResourceRequest")) return LOOM_ERESOURCE;
  return rc < 0 ? LOOM_EBACKEND : 0;
}

/* A client connection for the application app_id: its id in *aid. */
static int app_client(const char *conf_dir, const char *app_id, int timeout_ms,
                      Hadoop__Yarn__ApplicationIdProto *aid, hipc_client **rpc, char *err,
                      size_t errlen) {
  *rpc = NULL;
  if (parse_app_id(app_id, aid) < 0) {
    snprintf(err, errlen, "'%.80s' is not a YARN application id", app_id);
    return LOOM_EBACKEND;
  }
  hyarn_am am;
  return client_connect(conf_dir, timeout_ms, &am, rpc, err, errlen);
}

/* forceKillApplication of aid over rpc. */
int hyarn__force_kill(hipc_client *rpc, Hadoop__Yarn__ApplicationIdProto *aid, const char *why,
                      int timeout_ms, char *err, size_t errlen) {
  Hadoop__Yarn__KillApplicationRequestProto req =
      HADOOP__YARN__KILL_APPLICATION_REQUEST_PROTO__INIT;
  req.application_id = aid;
  req.diagnostics = (char *)why;
  ProtobufCMessage *resp = NULL;
  int rc = hipc_call(rpc, "forceKillApplication", &req.base,
                     &hadoop__yarn__kill_application_response_proto__descriptor, &resp, timeout_ms,
                     err, errlen);
  if (rc == 0) protobuf_c_message_free_unpacked(resp, NULL);
  return rc;
}

int hyarn_app_report(const char *conf_dir, const char *app_id, int timeout_ms, char state[16],
                     char final[16], char *diag, size_t diaglen, char *err, size_t errlen) {
  static const char *const fin[] = {"UNDEFINED", "SUCCEEDED", "FAILED", "KILLED", "ENDED"};
  state[0] = final[0] = 0;
  if (diaglen) diag[0] = 0;
  Hadoop__Yarn__ApplicationIdProto aid;
  hipc_client *rpc;
  int rc = app_client(conf_dir, app_id, timeout_ms, &aid, &rpc, err, errlen);
  if (rc < 0) return rc;
  Hadoop__Yarn__GetApplicationReportRequestProto rreq =
      HADOOP__YARN__GET_APPLICATION_REPORT_REQUEST_PROTO__INIT;
  rreq.application_id = &aid;
  ProtobufCMessage *resp = NULL;
  rc = hipc_call(rpc, "getApplicationReport", &rreq.base,
                 &hadoop__yarn__get_application_report_response_proto__descriptor, &resp,
                 timeout_ms, err, errlen);
  if (rc == LOOM_EPEER && strstr(hipc_exception(rpc), "ApplicationNotFound")) rc = LOOM_ENOENT;
  hipc_close(rpc);
  if (rc < 0) return rc == LOOM_ENOENT ? rc : LOOM_EBACKEND;
  Hadoop__Yarn__ApplicationReportProto *r =
      ((Hadoop__Yarn__GetApplicationReportResponseProto *)resp)->application_report;
  if (r) {
    loom__strlcpy(state, hyarn__app_state(r->yarn_application_state), 16);
    int f = r->has_final_application_status ? (int)r->final_application_status : 0;
    loom__strlcpy(final, f >= 0 && f <= 4 ? fin[f] : "?", 16);
    if (diaglen) hyarn__printable(diag, diaglen, r->diagnostics);
  }
  protobuf_c_message_free_unpacked(resp, NULL);
  return r ? 0 : LOOM_ENOENT;
}

int hyarn_app_kill(const char *conf_dir, const char *app_id, const char *why, int timeout_ms,
                   char *err, size_t errlen) {
  Hadoop__Yarn__ApplicationIdProto aid;
  hipc_client *rpc;
  int rc = app_client(conf_dir, app_id, timeout_ms, &aid, &rpc, err, errlen);
  if (rc == 0) rc = hyarn__force_kill(rpc, &aid, why, timeout_ms, err, errlen);
  hipc_close(rpc);
  return rc < 0 ? LOOM_EBACKEND : 0;
}

void hyarn_shell_quote(loom__buf *b, const char *s) {
  loom__buf_add(b, "'", 1);
  for (; *s; s++) {
    if (*s == '\'')
      loom__buf_add(b, "'\\''", 4);
    else
      loom__buf_add(b, s, 1);
  }
  loom__buf_add(b, "'", 1);
}
