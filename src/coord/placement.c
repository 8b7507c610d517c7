/* placement.c: placement: the tasks of the spec, their ranks (the rank-order rule,
 * written once here), and the CPU and GPU ids each task gets. */
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



/* ---- setup ------------------------------------------------------------- */
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
      snprintf(t->name, sizeof t->name, "%s:%d", r->name, j);
      snprintf(t->file, sizeof t->file, "%s-%d", r->name, j);
      t->training = spec_role_is_training(co->s, r);
    }
  }
  /* Ranks: chief first, then worker, then other training roles. */
  int rank = 0;
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < co->ntasks; i++) {
      task *t = &co->tasks[i];
      if (!t->training) continue;
      int which = !strcmp(t->role->name, "chief") ? 0 : !strcmp(t->role->name, "worker") ? 1 : 2;
      if (which != pass) continue;
      t->rank_base = rank;
      rank += t->role->procs;
    }
  co->world_size = rank;
  /* CPUs and GPUs: hand them out round-robin. */
  int ncpu = backend_local_cpus(), cursor = 0, gcursor = 0, ngpu = backend_local_gpus();
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    size_t off = 0;
    for (int v = 0; v < t->role->vcores && off + 8 < sizeof t->cpus; v++)
      off += (size_t)snprintf(t->cpus + off, sizeof t->cpus - off, "%s%d", v ? "," : "",
                              cursor++ % (ncpu > 0 ? ncpu : 1));
    off = 0;
    for (int g = 0; g < t->role->gpus && off + 8 < sizeof t->gpus; g++)
      off += (size_t)snprintf(t->gpus + off, sizeof t->gpus - off, "%s%d", g ? "," : "",
                              gcursor++ % (ngpu > 0 ? ngpu : 1));
  }
  return 0;
}
