/* plan.c: the Slurm backend's placement plan, pure: a spec's roles and a
 * partition's nodes (as sinfo lists them) in, the components of the Slurm
 * job or the refusal text out. Slurm never puts two components of a
 * heterogeneous job on one node, so the ways of asking are tried in turn:
 * one component per role when those fit on separate nodes; else one per
 * distinct task shape (vcores, memory, gpus, label; roles of one shape
 * share a component and its nodes); else one per label holding every task
 * at the largest shape of its roles; else a refusal with what the spec
 * needs against what the partition has. Nothing here runs a command: the
 * backend (slurm.c) asks sinfo for the nodes. */
#include "backend/slurm/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nodes named in a refusal. */
#define NODES_NAMED 8

/* Whether node nd can take a task constrained to label: a plain feature
 * name must be one of its features; an expression ("a&b", "a|b") is left
 * to Slurm. */
static bool node_has(const slurm_node *nd, const char *label) {
  if (!label || !*label) return true;
  if (label[strspn(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")])
    return true;
  size_t ll = strlen(label);
  for (const char *f = nd->features; *f;) {
    size_t fl = strcspn(f, ",");
    if (fl == ll && !strncmp(f, label, ll)) return true;
    f += fl + (f[fl] == ',');
  }
  return false;
}

static int role_vc(const spec_role *r) { return r->vcores > 0 ? r->vcores : 1; }

static unsigned long long mem_per_cpu(uint64_t memory, int vc) {
  uint64_t unit = (uint64_t)vc * 1048576;
  return memory ? (unsigned long long)((memory + unit - 1) / unit) : 0;
}

static bool same_label(const char *a, const char *b) {
  return (!a && !b) || (a && b && !strcmp(a, b));
}

void slurm_plan_free(slurm_plan *p) {
  free(p->comp);
  free(p->role_comp);
  p->comp = NULL;
  p->role_comp = NULL;
}

/* The ways of asking, tried in turn: one component per role (each role
 * on nodes of its own); one per distinct task shape; one per label, at the
 * largest shape of its roles (roles share nodes, some tasks get more than
 * they asked for). */
enum { PLAN_PER_ROLE, PLAN_PER_SHAPE, PLAN_PACKED, PLAN_KINDS };

static int plan_make(const spec_job *s, int kind, slurm_plan *p) {
  bool packed = kind == PLAN_PACKED;
  p->ncomp = 0;
  p->comp = calloc((size_t)s->nroles + 1, sizeof *p->comp);
  p->role_comp = calloc((size_t)s->nroles + 1, sizeof *p->role_comp);
  if (!p->comp || !p->role_comp) {
    slurm_plan_free(p);
    return LOOM_ENOMEM;
  }
  for (int i = 0; i < s->nroles; i++) {
    const spec_role *r = &s->roles[i];
    int vc = role_vc(r);
    unsigned long long mpc = mem_per_cpu(r->memory, vc);
    int c = kind == PLAN_PER_ROLE ? p->ncomp : 0;
    for (; c < p->ncomp; c++) {
      slurm_comp *k = &p->comp[c];
      if (!same_label(k->label, r->label)) continue;
      if (packed || (k->vcores == vc && k->mem_per_cpu_mb == mpc && k->gpus == r->gpus)) break;
    }
    slurm_comp *k = &p->comp[c];
    if (c == p->ncomp) {
      p->ncomp++;
      *k = (slurm_comp){.vcores = vc, .gpus = r->gpus, .mem_per_cpu_mb = mpc, .label = r->label};
    } else if (packed) {
      /* the largest of both, memory per task kept at least */
      unsigned long long mem_task = k->mem_per_cpu_mb * (unsigned long long)k->vcores;
      unsigned long long rmem = mpc * (unsigned long long)vc;
      if (rmem > mem_task) mem_task = rmem;
      if (vc > k->vcores) k->vcores = vc;
      if (r->gpus > k->gpus) k->gpus = r->gpus;
      k->mem_per_cpu_mb =
          mem_task ? (mem_task + (unsigned long long)k->vcores - 1) / (unsigned long long)k->vcores
                   : 0;
    }
    k->ntasks += r->instances;
    p->role_comp[i] = c;
  }
  return 0;
}

/* How many tasks of component c fit on node nd (empty). */
static int node_takes(const slurm_node *nd, const slurm_comp *c) {
  if (!node_has(nd, c->label)) return 0;
  int k = nd->cpus / c->vcores;
  if (c->mem_per_cpu_mb) {
    unsigned long long per = c->mem_per_cpu_mb * (unsigned long long)c->vcores;
    if (nd->mem_mb / per < (unsigned long long)k) k = (int)(nd->mem_mb / per);
  }
  if (c->gpus && nd->gpus / c->gpus < k) k = nd->gpus / c->gpus;
  return k;
}

/* Whether plan p fits on the nodes, the components of a heterogeneous job
 * on separate nodes as Slurm places them. */
static bool plan_fits(const slurm_plan *p, const slurm_node *nodes, int n) {
  bool *taken = calloc((size_t)n + 1, sizeof *taken);
  if (!taken) return false;
  bool ok = true;
  for (int c = 0; c < p->ncomp && ok; c++) {
    int left = p->comp[c].ntasks;
    for (int i = 0; i < n && left > 0; i++) {
      if (taken[i]) continue;
      int k = node_takes(&nodes[i], &p->comp[c]);
      if (k <= 0) continue;
      taken[i] = p->ncomp > 1;
      left -= k;
    }
    ok = left <= 0;
  }
  free(taken);
  return ok;
}

static void fmt_mib(unsigned long long mb, char *buf, size_t len) {
  if (mb >= 1024 && mb % 1024 == 0)
    snprintf(buf, len, "%llu GiB", mb / 1024);
  else if (mb >= 1024)
    snprintf(buf, len, "%.1f GiB", (double)mb / 1024.0);
  else
    snprintf(buf, len, "%llu MiB", mb);
}

/* What the spec needs against what the partition has, into err. */
static void refusal(const spec_job *s, const slurm_node *nodes, int n, const char *pname, char *err,
                    size_t errlen) {
  size_t off = 0;
  int tasks = 0, cpus = 0, gpus = 0;
  unsigned long long mem = 0;
  for (int i = 0; i < s->nroles; i++) {
    const spec_role *r = &s->roles[i];
    tasks += r->instances;
    cpus += r->instances * role_vc(r);
    gpus += r->instances * r->gpus;
    mem += (unsigned long long)r->instances * (r->memory >> 20);
  }
  int pcpus = 0, pgpus = 0;
  unsigned long long pmem = 0;
  for (int i = 0; i < n; i++) {
    pcpus += nodes[i].cpus;
    pgpus += nodes[i].gpus;
    pmem += nodes[i].mem_mb;
  }
  char m1[32], m2[32];
  fmt_mib(mem, m1, sizeof m1);
  fmt_mib(pmem, m2, sizeof m2);
  off += (size_t)snprintf(err + off, errlen - off,
                          "the job cannot be placed on Slurm partition '%s': it needs %d tasks, "
                          "%d CPUs, %s of memory and %d GPUs (",
                          pname, tasks, cpus, mem ? m1 : "no set amount", gpus);
  for (int i = 0; i < s->nroles && off < errlen; i++) {
    const spec_role *r = &s->roles[i];
    fmt_mib(r->memory >> 20, m1, sizeof m1);
    off += (size_t)snprintf(err + off, errlen - off, "%s%s: %d x %d CPUs%s%s, %d GPUs%s%s",
                            i ? "; " : "", r->name, r->instances, role_vc(r), r->memory ? " " : "",
                            r->memory ? m1 : "", r->gpus, r->label ? ", label " : "",
                            r->label ? r->label : "");
  }
  if (off < errlen)
    off += (size_t)snprintf(err + off, errlen - off,
                            "); the partition has %d nodes, %d CPUs, %s "
                            "and %d GPUs in all:",
                            n, pcpus, m2, pgpus);
  for (int i = 0; i < n && i < NODES_NAMED && off < errlen; i++) {
    fmt_mib(nodes[i].mem_mb, m1, sizeof m1);
    off += (size_t)snprintf(err + off, errlen - off, "%s %s %d CPUs %s %d GPUs%s%s", i ? "," : "",
                            nodes[i].name, nodes[i].cpus, m1, nodes[i].gpus,
                            nodes[i].features[0] ? " features " : "", nodes[i].features);
  }
  if (n > NODES_NAMED && off < errlen)
    off += (size_t)snprintf(err + off, errlen - off, ", and %d more", n - NODES_NAMED);
  if (off < errlen)
    snprintf(err + off, errlen - off,
             ". Ask for fewer or smaller tasks, or set queue to a larger "
             "partition");
}

int slurm_plan_place(const spec_job *s, const slurm_node *nodes, int n, const char *pname,
                     slurm_plan *p, char *err, size_t errlen) {
  int rc = 0;
  /* first, a task no node can hold: the plainest refusal */
  for (int i = 0; i < s->nroles && rc == 0; i++) {
    const spec_role *r = &s->roles[i];
    slurm_comp one = {.ntasks = 1,
                      .vcores = role_vc(r),
                      .gpus = r->gpus,
                      .mem_per_cpu_mb = mem_per_cpu(r->memory, role_vc(r)),
                      .label = r->label};
    int best_cpu = 0, best_gpu = 0;
    unsigned long long best_mem = 0;
    bool any = false;
    for (int k = 0; k < n; k++) {
      any |= node_takes(&nodes[k], &one) > 0;
      if (!node_has(&nodes[k], r->label)) continue;
      if (nodes[k].cpus > best_cpu) best_cpu = nodes[k].cpus;
      if (nodes[k].gpus > best_gpu) best_gpu = nodes[k].gpus;
      if (nodes[k].mem_mb > best_mem) best_mem = nodes[k].mem_mb;
    }
    if (any) continue;
    char m1[32], m2[32];
    fmt_mib(r->memory >> 20, m1, sizeof m1);
    fmt_mib(best_mem, m2, sizeof m2);
    snprintf(err, errlen,
             "role '%s' asks for %d vcores, %s of memory and %d GPUs per task%s%s; "
             "no node of Slurm partition '%s' has that: its largest%s%s has %d CPUs, %s and %d "
             "GPUs (%d nodes): lower roles.%s's resources or set queue to another partition",
             r->name, role_vc(r), r->memory ? m1 : "no set amount", r->gpus,
             r->label ? " with label " : "", r->label ? r->label : "", pname,
             r->label ? " node with label " : " node", r->label ? r->label : "", best_cpu, m2,
             best_gpu, n, r->name);
    rc = LOOM_ERESOURCE;
  }
  bool fits = false;
  for (int kind = 0; kind < PLAN_KINDS && rc == 0 && !fits; kind++) {
    if ((rc = plan_make(s, kind, p)) < 0) break;
    fits = plan_fits(p, nodes, n);
    if (!fits) slurm_plan_free(p);
  }
  if (rc == 0 && !fits) {
    refusal(s, nodes, n, pname, err, errlen);
    rc = LOOM_ERESOURCE;
  }
  return rc;
}
