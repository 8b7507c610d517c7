/* nm.c: the application master's calls to NodeManagers (the
 * ContainerManagementProtocol, as Hadoop's NMClientImpl makes them):
 * startContainers with a container's launch context (its command, its
 * environment, its local resources and the job's credentials) and
 * stopContainers, each over a SASL connection with the NodeManager's
 * NMToken, which the scheduler's allocate responses carried (am.c). */
#include "yarn/am_int.h"

#include "Security.pb-c.h"
#include "containermanagement_protocol.pb-c.h"
#include "hadoop/hdfs.h"
#include "hadoop/creds.h"
#include "yarn_service_protos.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A connection to c's NodeManager with its NMToken. */
static int nm_connect(hyarn_am *am, const hyarn_container *c, hipc_client **rpc, char *err,
                      size_t errlen) {
  const nmtoken *t = NULL;
  for (int i = 0; i < am->nnm && !t; i++)
    if (!strcmp(am->nm[i].node, c->node)) t = &am->nm[i];
  if (!t) {
    snprintf(err, errlen, "no NMToken for the NodeManager %s (the scheduler sent none)", c->node);
    return LOOM_EAUTH;
  }
  char peer[400];
  snprintf(peer, sizeof peer, "the NodeManager %s", c->node);
  hsasl_token st = hyarn__token_sasl(&t->tok);
  return hipc_connect_token(c->host, c->port, peer, CMP, am->attempt_id, &st, am->timeout_ms, rpc,
                            err, errlen);
}

static void exception_text(const Hadoop__Yarn__SerializedExceptionProto *e, char *out, size_t len) {
  char m[1024];
  hyarn__printable(m, sizeof m, e ? e->message : NULL);
  snprintf(out, len, "%s%s%s", e && e->class_name ? e->class_name : "an error", m[0] ? ": " : "",
           m);
}

void hyarn__clc_env_free(hyarn__clc_env *e) {
  for (size_t i = 0; e->keys && e->vals && i < e->n; i++) free(e->keys[i]), free(e->vals[i]);
  free(e->keys), free(e->vals), free(e->kv), free(e->kvp);
  memset(e, 0, sizeof *e);
}

int hyarn__clc_env_make(hyarn__clc_env *e, char *const *env) {
  memset(e, 0, sizeof *e);
  int nenv = 0;
  while (env && env[nenv]) nenv++;
  e->kv = calloc((size_t)nenv + 1, sizeof *e->kv);
  e->kvp = calloc((size_t)nenv + 1, sizeof *e->kvp);
  e->keys = calloc((size_t)nenv + 1, sizeof *e->keys);
  e->vals = calloc((size_t)nenv + 1, sizeof *e->vals);
  if (!e->kv || !e->kvp || !e->keys || !e->vals) {
    hyarn__clc_env_free(e);
    return LOOM_ENOMEM;
  }
  for (int i = 0; i < nenv; i++) {
    const char *eq = strchr(env[i], '=');
    if (!eq || eq == env[i]) continue;
    size_t n = e->n;
    if (!(e->keys[n] = strndup(env[i], (size_t)(eq - env[i])))) {
      hyarn__clc_env_free(e);
      return LOOM_ENOMEM;
    }
    /* The NodeManager writes `export K="V"` into launch_container.sh
     * without escaping V (Hadoop 3.5): escape what is special inside
     * double quotes, so that the task sees the value as it was. */
    loom__buf v;
    loom__buf_init(&v, 1 << 24);
    for (const char *q = eq + 1; *q; q++) {
      if (*q == '\\' || *q == '"' || *q == '$' || *q == '`') loom__buf_add(&v, "\\", 1);
      loom__buf_add(&v, q, 1);
      /* and YARN's own expansions ({{VAR}}, <CPS>, <LOG_DIR>): an empty
       * "" after the opening character breaks its pattern, not the
       * shell's string */
      if (*q == '{' || *q == '}' || *q == '<') loom__buf_add(&v, "\"\"", 2);
    }
    loom__buf_add(&v, "", 1);
    if (!v.p) {
      free(e->keys[n]);
      hyarn__clc_env_free(e);
      return LOOM_ENOMEM;
    }
    e->vals[n] = v.p;
    hadoop__yarn__string_string_map_proto__init(&e->kv[n]);
    e->kv[n].key = e->keys[n];
    e->kv[n].value = e->vals[n];
    e->kvp[n] = &e->kv[n];
    e->n++;
  }
  return 0;
}

int hyarn__clc_res_make(hyarn__clc_res *r, const hyarn_resource *res, int nres, char *err,
                        size_t errlen) {
  memset(r, 0, sizeof *r);
  r->lr = calloc((size_t)nres + 1, sizeof *r->lr);
  r->lrp = calloc((size_t)nres + 1, sizeof *r->lrp);
  r->lv = calloc((size_t)nres + 1, sizeof *r->lv);
  r->url = calloc((size_t)nres + 1, sizeof *r->url);
  if (!r->lr || !r->lrp || !r->lv || !r->url) {
    hyarn__clc_res_free(r);
    snprintf(err, errlen, "out of memory");
    return LOOM_ENOMEM;
  }
  for (int i = 0; i < nres; i++) {
    Hadoop__Yarn__URLProto *url = &r->url[i];
    Hadoop__Yarn__LocalResourceProto *lv = &r->lv[i];
    hadoop__yarn__urlproto__init(url);
    url->scheme = "file";
    url->file = (char *)res[i].path;
    hdfs_url hu;
    char why[512];
    if (hdfs_is_url(res[i].path)) {
      /* staged on HDFS: the NodeManagers fetch it from there */
      if (hdfs_parse_url(res[i].path, &hu, why, sizeof why) < 0) {
        snprintf(err, errlen, "resource %s: %s", res[i].name, why);
        hyarn__clc_res_free(r);
        return LOOM_EBACKEND;
      }
      url->scheme = "hdfs";
      url->host = strdup(hu.host);
      url->has_port = 1;
      url->port = hu.port;
      url->file = strdup(hu.path);
      if (!url->host || !url->file) {
        r->n = (size_t)i + 1;
        hyarn__clc_res_free(r);
        snprintf(err, errlen, "out of memory");
        return LOOM_ENOMEM;
      }
    }
    hadoop__yarn__local_resource_proto__init(lv);
    lv->resource = url;
    lv->has_size = lv->has_timestamp = lv->has_type = lv->has_visibility = 1;
    lv->size = res[i].size;
    lv->timestamp = res[i].mtime_ms;
    lv->type = res[i].archive ? HADOOP__YARN__LOCAL_RESOURCE_TYPE_PROTO__ARCHIVE
                              : HADOOP__YARN__LOCAL_RESOURCE_TYPE_PROTO__FILE;
    lv->visibility = res[i].user_cache ? HADOOP__YARN__LOCAL_RESOURCE_VISIBILITY_PROTO__PRIVATE
                                       : HADOOP__YARN__LOCAL_RESOURCE_VISIBILITY_PROTO__APPLICATION;
    hadoop__yarn__string_local_resource_map_proto__init(&r->lr[i]);
    r->lr[i].key = (char *)res[i].name;
    r->lr[i].value = lv;
    r->lrp[i] = &r->lr[i];
    r->n = (size_t)i + 1;
  }
  return 0;
}

void hyarn__clc_res_free(hyarn__clc_res *r) {
  for (size_t i = 0; r->url && i < r->n; i++)
    if (r->url[i].scheme && !strcmp(r->url[i].scheme, "hdfs"))
      free(r->url[i].host), free(r->url[i].file);
  free(r->lr), free(r->lrp), free(r->lv), free(r->url);
  memset(r, 0, sizeof *r);
}

int hyarn_am_launch(hyarn_am *am, const hyarn_container *c, const char *command, char *const *env,
                    const hyarn_resource *res, int nres, const uint8_t *tokens, size_t tokens_len,
                    char *err, size_t errlen) {
  Hadoop__Yarn__ContainerProto *cp =
      hadoop__yarn__container_proto__unpack(NULL, c->proto_len, c->proto);
  if (!cp) {
    snprintf(err, errlen, "container %s: its record does not decode", c->id);
    return LOOM_EBACKEND;
  }
  hyarn__clc_env ce;
  int rc = hyarn__clc_env_make(&ce, env);
  Hadoop__Yarn__ContainerLaunchContextProto clc =
      HADOOP__YARN__CONTAINER_LAUNCH_CONTEXT_PROTO__INIT;
  clc.n_environment = ce.n;
  clc.environment = ce.kvp;
  char *cmds[] = {(char *)command};
  clc.n_command = 1;
  clc.command = cmds;
  char why[2048] = "";
  hyarn__clc_res cr;
  memset(&cr, 0, sizeof cr);
  if (rc == 0) rc = hyarn__clc_res_make(&cr, res, nres, why, sizeof why);
  clc.n_localresources = cr.n;
  clc.localresources = cr.lrp;
  if (tokens_len) {
    clc.has_tokens = 1;
    clc.tokens.data = (uint8_t *)tokens;
    clc.tokens.len = tokens_len;
  }
  Hadoop__Yarn__StartContainerRequestProto one = HADOOP__YARN__START_CONTAINER_REQUEST_PROTO__INIT;
  one.container_launch_context = &clc;
  one.container_token = cp->container_token;
  Hadoop__Yarn__StartContainerRequestProto *onep[] = {&one};
  Hadoop__Yarn__StartContainersRequestProto req =
      HADOOP__YARN__START_CONTAINERS_REQUEST_PROTO__INIT;
  req.n_start_container_request = 1;
  req.start_container_request = onep;
  hipc_client *rpc = NULL;
  ProtobufCMessage *resp = NULL;
  if (rc == 0) rc = nm_connect(am, c, &rpc, why, sizeof why);
  if (rc == 0)
    rc = hipc_call(rpc, "startContainers", &req.base,
                   &hadoop__yarn__start_containers_response_proto__descriptor, &resp,
                   am->timeout_ms, why, sizeof why);
  hipc_close(rpc);
  if (rc == 0) {
    Hadoop__Yarn__StartContainersResponseProto *r = (void *)resp;
    if (r->n_failed_requests) {
      exception_text(r->failed_requests[0]->exception, why, sizeof why);
      rc = LOOM_EBACKEND;
    } else if (!r->n_succeeded_requests) {
      snprintf(why, sizeof why, "the NodeManager neither started nor refused it");
      rc = LOOM_EBACKEND;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
  }
  if (rc < 0)
    snprintf(err, errlen, "container %s on %s: %s", c->id, c->node,
             why[0] ? why : loom_strerror(rc));
  hyarn__clc_env_free(&ce);
  hyarn__clc_res_free(&cr);
  protobuf_c_message_free_unpacked(&cp->base, NULL);
  return rc < 0 ? LOOM_EBACKEND : 0;
}

int hyarn_am_stop(hyarn_am *am, const hyarn_container *c, char *err, size_t errlen) {
  Hadoop__Yarn__ContainerProto *cp =
      hadoop__yarn__container_proto__unpack(NULL, c->proto_len, c->proto);
  if (!cp || !cp->id) {
    if (cp) protobuf_c_message_free_unpacked(&cp->base, NULL);
    snprintf(err, errlen, "container %s: its record does not decode", c->id);
    return LOOM_EBACKEND;
  }
  Hadoop__Yarn__ContainerIdProto *ids[] = {cp->id};
  Hadoop__Yarn__StopContainersRequestProto req = HADOOP__YARN__STOP_CONTAINERS_REQUEST_PROTO__INIT;
  req.n_container_id = 1;
  req.container_id = ids;
  hipc_client *rpc = NULL;
  ProtobufCMessage *resp = NULL;
  char why[2048] = "";
  int rc = nm_connect(am, c, &rpc, why, sizeof why);
  if (rc == 0)
    rc = hipc_call(rpc, "stopContainers", &req.base,
                   &hadoop__yarn__stop_containers_response_proto__descriptor, &resp, am->timeout_ms,
                   why, sizeof why);
  hipc_close(rpc);
  if (rc == 0) {
    Hadoop__Yarn__StopContainersResponseProto *r = (void *)resp;
    if (r->n_failed_requests) {
      exception_text(r->failed_requests[0]->exception, why, sizeof why);
      rc = LOOM_EBACKEND;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
  }
  protobuf_c_message_free_unpacked(&cp->base, NULL);
  if (rc < 0) {
    snprintf(err, errlen, "stopping container %s on %s: %s", c->id, c->node, why);
    return LOOM_EBACKEND;
  }
  return 0;
}
