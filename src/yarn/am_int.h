/* am_int.h: what the YARN client's files share: the application master's
 * state (am.c) and the ResourceManager client calls both the unmanaged
 * application master and a managed application's client make (submit.c).
 * Nothing outside src/yarn includes it. */
#ifndef LOOM_YARN_AM_INT_H
#define LOOM_YARN_AM_INT_H

#include "hadoop/ipc.h"
#include "yarn/am.h"
#include "yarn/yarn.h"
#include "yarn_protos.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The protocols' names, as Hadoop IPC's connection context gives them. */
#define ACP "org.apache.hadoop.yarn.api.ApplicationClientProtocolPB"
#define AMP "org.apache.hadoop.yarn.api.ApplicationMasterProtocolPB"
#define CMP "org.apache.hadoop.yarn.api.ContainerManagementProtocolPB"

typedef struct {
  uint8_t *id, *pw;
  size_t idlen, pwlen;
} token;

/* t as DIGEST-MD5 takes it (the bytes stay t's). */
static inline hsasl_token hyarn__token_sasl(const token *t) {
  return (hsasl_token){t->id, t->idlen, t->pw, t->pwlen};
}

typedef struct {
  char node[300];
  token tok;
} nmtoken;

struct hyarn_am {
  hyarn_rms rms;
  int rmi; /* the ResourceManager that took the application */
  char user[128];
  int timeout_ms;
  int64_t cluster_ts;
  int32_t app_seq, attempt;
  char app_id[64], attempt_id[80], tracking[600];
  token amrm;
  int32_t response_id;
  hipc_client *sched;
  nmtoken *nm;
  int nnm, capnm;
  int64_t max_mb;
  int max_vcores;
  bool registered, finished;
  int rolls; /* AMRMTokens the RM rolled over */
  /* what a resync (a restarted ResourceManager) must send again, as
   * AMRMClientImpl keeps it: the asks not granted yet (num left, by
   * allocation id; label copied) and the releases not yet seen completed */
  hyarn_ask *out;
  int nout, capout;
  hyarn_container *pend;
  int npend, cappend;
  int resyncs; /* re-registrations after a ResourceManager restart */
  /* yarn.resourcemanager.connect.max-wait.ms / retry-interval.ms, and
   * whether yarn.resourcemanager.recovery.enabled (for messages) */
  int64_t rm_wait_ms, rm_retry_ms;
  bool rm_recovery;
};

/* A container's environment as the NodeManager takes it. */
typedef struct {
  Hadoop__Yarn__StringStringMapProto *kv, **kvp;
  char **keys, **vals;
  size_t n;
} hyarn__clc_env;

/* Copies s from the cluster into out: printable ASCII, newlines kept as
 * "; ", cut to outlen. */
void hyarn__printable(char *out, size_t outlen, const char *s);
/* The word for an application state ("RUNNING", ...; "?" if unknown). */
const char *hyarn__app_state(Hadoop__Yarn__YarnApplicationStateProto s);

/* A connection to ResourceManager am->rmi's client protocol (SIMPLE, as
 * am->user). 0 with *rpc, or what hipc_connect returns (err). */
int hyarn__rm_connect(hyarn_am *am, hipc_client **rpc, char *err, size_t errlen);
/* getNewApplication, then submitApplication of an application named name
 * in queue (NULL: "default") whose AM container runs clc with memory_mb
 * and 1 vcore, or, unmanaged, whose AM is the caller's process. *aid gets
 * the id as soon as the RM gave one (has_id set), so that a failed submit
 * can still be named and killed. */
int hyarn__new_and_submit(hipc_client *rpc, int timeout_ms, const char *name, const char *queue,
                          Hadoop__Yarn__ContainerLaunchContextProto *clc, int64_t memory_mb,
                          bool unmanaged, int max_attempts, Hadoop__Yarn__ApplicationIdProto *aid,
                          char *err, size_t errlen);
/* forceKillApplication of aid over rpc, diagnostics why. */
int hyarn__force_kill(hipc_client *rpc, Hadoop__Yarn__ApplicationIdProto *aid, const char *why,
                      int timeout_ms, char *err, size_t errlen);

/* env ("K=V" strings, NULL-terminated) as a container launch context's
 * environment, values escaped for the NodeManager's launch script. 0 or
 * LOOM_ENOMEM; hyarn__clc_env_free in any case. */
int hyarn__clc_env_make(hyarn__clc_env *e, char *const *env);
void hyarn__clc_env_free(hyarn__clc_env *e);

/* A container's local resources as the NodeManager takes them. */
typedef struct {
  Hadoop__Yarn__StringLocalResourceMapProto *lr, **lrp;
  Hadoop__Yarn__LocalResourceProto *lv;
  Hadoop__Yarn__URLProto *url;
  size_t n;
} hyarn__clc_res;

/* res (nres of them) as a container launch context's local resources
 * (r->lrp, r->n), pointing into res: res must outlive r. 0, LOOM_ENOMEM
 * or LOOM_EBACKEND (a malformed hdfs:// URL), err filled; on failure r
 * holds nothing. */
int hyarn__clc_res_make(hyarn__clc_res *r, const hyarn_resource *res, int nres, char *err,
                        size_t errlen);
void hyarn__clc_res_free(hyarn__clc_res *r);

#endif
