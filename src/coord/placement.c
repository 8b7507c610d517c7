/* placement.c: the tasks of the spec and their ranks. (Where a task's CPU
 * and GPU ids come from is the backend's: its place operation.)
 *
 * The rank-order rule is written once, here: training tasks only, chief
 * first, then worker, then every other training role in spec order; a
 * task takes as many consecutive ranks as it has processes. Setup ranks
 * every training task; an elastic membership ranks the live ones. */
#include "coord/coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 0 for chief, 1 for worker, 2 for any other role. */
static int rank_class(const task *t) {
  return !strcmp(t->role->name, "chief") ? 0 : !strcmp(t->role->name, "worker") ? 1 : 2;
}

int coord_rank_tasks(task *tasks, int ntasks, bool (*member)(const task *t)) {
  int rank = 0;
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < ntasks; i++) {
      task *t = &tasks[i];
      if (!t->training || rank_class(t) != pass || (member && !member(t))) continue;
      t->rank_base = rank;
      rank += t->role->procs;
    }
  return rank;
}

int coord_setup_tasks(coord *co) {
  co->ntasks = spec_total_tasks(co->s);
  co->tasks = calloc((size_t)co->ntasks, sizeof *co->tasks);
  if (!co->tasks) return LOOM_ENOMEM;
  int k = 0;
  for (int i = 0; i < co->s->nroles; i++) {
    const spec_role *r = &co->s->roles[i];
    for (int j = 0; j < r->instances; j++, k++) {
      task *t = &co->tasks[k];
      t->id = k;
      t->role = r;
      t->index = j;
      t->rank_base = -1;
      t->fence = t->fence_max = -1;
      snprintf(t->name, sizeof t->name, "%s:%d", r->name, j);
      snprintf(t->file, sizeof t->file, "%s-%d", r->name, j);
      t->training = spec_role_is_training(co->s, r);
      co->nunfinished += !r->service; /* T_PENDING */
    }
    if (r->elastic_min > 0) co->any_elastic = true;
  }
  /* names to tasks: a registration looks its task up in O(1), not O(N) */
  unsigned size = 16;
  while (size < 2u * (unsigned)co->ntasks) size *= 2;
  co->task_hash = malloc(size * sizeof *co->task_hash);
  if (!co->task_hash) return LOOM_ENOMEM;
  co->task_hash_mask = size - 1;
  for (unsigned h = 0; h < size; h++) co->task_hash[h] = -1;
  for (int i = 0; i < co->ntasks; i++) {
    unsigned h = coord_name_hash(co->tasks[i].name) & co->task_hash_mask;
    while (co->task_hash[h] >= 0) h = (h + 1) & co->task_hash_mask;
    co->task_hash[h] = i;
  }
  co->world_size = coord_rank_tasks(co->tasks, co->ntasks, NULL);
  return 0;
}
