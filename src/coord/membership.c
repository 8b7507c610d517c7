/* membership.c: elastic membership: the live training tasks, re-ranked, published as
 * a new generation in the KV store. */
#include "coord/coord_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

/* Elastic membership: the live training tasks, ranked chief first, then
 * workers (procs each), as the KV store's loom/membership/g<G> and a
 * WIRE_MEMBERSHIP to every libloom client. Returns the world size. */
static bool live_member(const task *t) { return !t->left && !coord_terminal(t); }

int coord_publish_membership(coord *co) {
  int rank = coord_rank_tasks(co->tasks, co->ntasks, live_member);
  for (int i = 0; i < co->ntasks; i++) coord_task_touch(co, &co->tasks[i]); /* their ranks */
  json_t *ranks = json_object();
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (t->training && live_member(t))
      json_object_set_new(ranks, t->name, json_integer(t->rank_base));
  }
  json_t *m = json_pack("{s:I, s:i, s:o}", "generation", (json_int_t)co->generation, "world_size",
                        rank, "ranks", ranks);
  char *ms = json_dumps(m, JSON_COMPACT);
  json_decref(m);
  char key[64], gen[32];
  snprintf(key, sizeof key, "loom/membership/g%lld", (long long)co->generation);
  int gl = snprintf(gen, sizeof gen, "%lld", (long long)co->generation);
  if (ms) coord_kv_store(co, key, ms, strlen(ms));
  coord_kv_store(co, "loom/generation", gen, (size_t)gl);
  free(ms);
  co->world_size = rank;
  for (conn *c = co->conns; c; c = c->next)
    if (c->kind == C_CLIENT)
      coord_conn_send_msg(
          c, &(wire_msg){.type = WIRE_MEMBERSHIP, .u.membership.generation = co->generation});
  return rank;
}

int coord_live_members(coord *co, const spec_role *r, const task *except) {
  int n = 0;
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    n += t->role == r && t != except && !t->left && t->state == T_RUNNING;
  }
  return n;
}

/* A lost agent cannot stop its task's processes any more. On this
 * machine (local backend) its process groups are ours to kill: every
 * process of a task leads its own group. */
void coord_kill_task_groups(coord *co, task *t) {
  if (!co->be->ops->same_host || !t->pids) return;
  size_t i;
  json_t *v;
  json_array_foreach(t->pids, i, v) {
    json_int_t pid = json_integer_value(v);
    if (pid > 1) kill(-(pid_t)pid, SIGKILL);
  }
}
