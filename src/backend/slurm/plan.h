/* plan.h: the Slurm backend's placement plan (plan.c): how a spec is
 * asked of Slurm, given the partition's nodes. Pure: no command is run;
 * the unit test (tests/unit/slurm_plan_test.c) drives it with tables of
 * nodes and specs. Nothing outside src/backend/slurm includes it. */
#ifndef LOOM_BACKEND_SLURM_PLAN_H
#define LOOM_BACKEND_SLURM_PLAN_H

#include "spec/spec.h"

#include <stdbool.h>
#include <stddef.h>

/* One node of the partition, as sinfo lists it. */
typedef struct {
  char name[64];
  int cpus;
  unsigned long long mem_mb;
  int gpus;
  char features[192];
} slurm_node;

/* One component of the Slurm job: ntasks tasks of one shape. */
typedef struct {
  int ntasks, vcores, gpus;
  unsigned long long mem_per_cpu_mb; /* 0: no memory asked */
  const char *label;
} slurm_comp;

typedef struct {
  int ncomp;
  slurm_comp *comp; /* at most nroles */
  int *role_comp;   /* role index -> its component */
} slurm_plan;

/* Picks the plan for spec s on the n nodes of partition pname (exact,
 * else per shape, else packed). Returns 0 with *p made (free it with
 * slurm_plan_free), LOOM_ERESOURCE with err holding the refusal (a task
 * no node can hold, or the whole job against the whole partition), or
 * LOOM_ENOMEM. */
int slurm_plan_place(const spec_job *s, const slurm_node *nodes, int n, const char *pname,
                     slurm_plan *p, char *err, size_t errlen);

/* Frees what slurm_plan_place made in p; p may be freed twice. */
void slurm_plan_free(slurm_plan *p);

#endif
