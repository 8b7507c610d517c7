/* job.c: a resolved spec_job: freeing it, its JSON (what the coordinator
 * is given), and the questions the rest of loom asks it. */
#include "spec/spec.h"

#include <stdlib.h>
#include <string.h>

static void kv_free(spec_kv *kv, int n) {
  for (int i = 0; kv && i < n; i++) {
    free(kv[i].key);
    free(kv[i].value);
  }
  free(kv);
}

void spec_free(spec_job *s) {
  if (!s) return;
  free(s->warning);
  for (int i = 0; i < s->nroles; i++) {
    spec_role *r = &s->roles[i];
    free(r->name);
    free(r->shell);
    for (int j = 0; r->argv && r->argv[j]; j++) free(r->argv[j]);
    free(r->argv);
    free(r->label);
    free(r->restart);
    kv_free(r->env, r->nenv);
  }
  free(s->roles);
  free(s->retry_on);
  kv_free(s->env, s->nenv);
  kv_free(s->files, s->nfiles);
  kv_free(s->archives, s->narchives);
  if (s->feed) json_decref(s->feed);
  free(s->path);
  free(s->name);
  free(s->backend);
  free(s->queue);
  free(s->restart);
  free(s);
}

static json_t *kv_json(const spec_kv *kv, int n) {
  json_t *o = json_object();
  for (int i = 0; i < n; i++) json_object_set_new(o, kv[i].key, json_string(kv[i].value));
  return o;
}

json_t *spec_to_json(const spec_job *s) {
  json_t *j = json_object();
  json_object_set_new(j, "name", json_string(s->name));
  json_object_set_new(j, "backend", json_string(s->backend));
  if (s->queue) json_object_set_new(j, "queue", json_string(s->queue));
  json_object_set_new(j, "retries", json_integer(s->retries));
  json_object_set_new(j, "restart", json_string(s->restart));
  json_object_set_new(j, "max_restarts", json_integer(s->max_restarts));
  if (s->nretry_on) {
    json_t *a = json_array();
    for (int i = 0; i < s->nretry_on; i++) json_array_append_new(a, json_integer(s->retry_on[i]));
    json_object_set_new(j, "retry_on", a);
  }
  if (s->heartbeat_timeout_ms)
    json_object_set_new(j, "heartbeat_timeout", json_sprintf("%dms", s->heartbeat_timeout_ms));
  json_object_set_new(j, "env", kv_json(s->env, s->nenv));
  json_object_set_new(j, "files", kv_json(s->files, s->nfiles));
  json_object_set_new(j, "archives", kv_json(s->archives, s->narchives));
  json_t *roles = json_object();
  for (int i = 0; i < s->nroles; i++) {
    const spec_role *r = &s->roles[i];
    json_t *o = json_object();
    json_object_set_new(o, "instances", json_integer(r->instances));
    if (r->shell) {
      json_object_set_new(o, "command", json_string(r->shell));
    } else {
      json_t *a = json_array();
      for (int k = 0; r->argv[k]; k++) json_array_append_new(a, json_string(r->argv[k]));
      json_object_set_new(o, "command", a);
    }
    if (r->restart) json_object_set_new(o, "restart", json_string(r->restart));
    if (r->vcores) json_object_set_new(o, "vcores", json_integer(r->vcores));
    if (r->memory) json_object_set_new(o, "memory", json_integer((json_int_t)r->memory));
    json_object_set_new(o, "gpus", json_integer(r->gpus));
    if (r->label) json_object_set_new(o, "label", json_string(r->label));
    json_object_set_new(o, "procs", json_integer(r->procs));
    json_object_set_new(o, "service", json_boolean(r->service));
    if (r->elastic_min)
      json_object_set_new(o, "elastic",
                          json_pack("{s:i, s:i}", "min", r->elastic_min, "max", r->elastic_max));
    json_object_set_new(o, "env", kv_json(r->env, r->nenv));
    json_object_set_new(roles, r->name, o);
  }
  json_object_set_new(j, "roles", roles);
  if (s->feed) json_object_set(j, "feed", s->feed);
  return j;
}

bool spec_retryable(const spec_job *s, int code, int sig) {
  if (sig || s->nretry_on == 0) return true;
  for (int i = 0; i < s->nretry_on; i++)
    if (s->retry_on[i] == code) return true;
  return false;
}

const char *spec_role_restart(const spec_job *s, const spec_role *r) {
  return r->restart ? r->restart : s->restart;
}

const spec_role *spec_role_find(const spec_job *s, const char *name) {
  for (int i = 0; i < s->nroles; i++)
    if (!strcmp(s->roles[i].name, name)) return &s->roles[i];
  return NULL;
}

bool spec_role_is_training(const spec_job *s, const spec_role *r) {
  if (spec_role_find(s, "chief") || spec_role_find(s, "worker"))
    return !strcmp(r->name, "chief") || !strcmp(r->name, "worker");
  return !r->service && strcmp(r->name, "evaluator") && strcmp(r->name, "tensorboard");
}

int spec_total_tasks(const spec_job *s) {
  int n = 0;
  for (int i = 0; i < s->nroles; i++) n += s->roles[i].instances;
  return n;
}
