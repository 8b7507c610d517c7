/* backend.c: the registry of backends, and facts about this machine. */
#include "backend/backend.h"
#include "jobdir/jobdir.h"

#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const backend_ops loom__backend_local;
extern const backend_ops loom__backend_external;
extern const backend_ops loom__backend_slurm;
extern const backend_ops loom__backend_yarn;
extern const backend_ops loom__backend_spark;

/* Every backend, the default first. */
static const backend_ops *const backends[] = {&loom__backend_local, &loom__backend_slurm,
                                              &loom__backend_yarn, &loom__backend_spark,
                                              &loom__backend_external};

const backend_ops *backend_find(const char *name) {
  for (size_t i = 0; name && i < LOOM__ARRAY_LEN(backends); i++)
    if (!strcmp(backends[i]->name, name)) return backends[i];
  return NULL;
}

const backend_ops *backend_default(void) { return backends[0]; }

const char *backend_names(void) {
  static char names[256];
  if (!names[0]) {
    size_t off = 0;
    for (size_t i = 0; i < LOOM__ARRAY_LEN(backends) && off < sizeof names; i++)
      off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "",
                              backends[i]->name);
  }
  return names;
}

/* What the spec parser asks of the program (spec.h): the registry's names. */
const char *spec_backend_default(void) { return backend_default()->name; }
bool spec_backend_known(const char *name) { return backend_find(name) != NULL; }
const char *spec_backend_names(void) { return backend_names(); }

const backend_ops *backend_of_job(const char *job_dir) {
  char p[4096];
  json_error_t e;
  json_t *j = jobdir_path(job_dir, JOBDIR_SPEC, p, sizeof p) < 0
                  ? NULL
                  : json_load_file(p, 0, &e); /* spec.yaml is written as JSON, a subset of YAML */
  const backend_ops *ops =
      j ? backend_find(json_string_value(json_object_get(j, "backend"))) : NULL;
  json_decref(j);
  return ops;
}

int backend_create(const char *name, const spec_job *s, uv_loop_t *loop, int ntasks,
                   backend_exit_cb on_exit, void *arg, const char *ui_url, backend **out) {
  const backend_ops *ops = backend_find(name);
  if (!ops) return LOOM_EINVAL;
  if (!ops->create) return LOOM_ENOTSUP; /* check_only */
  backend *b = calloc(1, sizeof *b);
  if (!b) return LOOM_ENOMEM;
  b->ops = ops;
  b->loop = loop;
  b->on_exit = on_exit;
  b->arg = arg;
  b->ui_url = ui_url;
  int rc = ops->create(b, s, ntasks);
  if (rc < 0) {
    free(b);
    return rc;
  }
  *out = b;
  return 0;
}

int backend_local_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

uint64_t backend_local_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

int backend_local_gpus(void) {
  DIR *d = opendir("/dev");
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *s = e->d_name;
    if (strncmp(s, "nvidia", 6) || !s[6]) continue;
    bool digits = true;
    for (const char *p = s + 6; *p; p++) digits &= *p >= '0' && *p <= '9';
    n += digits;
  }
  closedir(d);
  return n;
}

void loom__backend_round_robin(int *cpu_cursor, int *gpu_cursor, const spec_role *r, char *cpus,
                               size_t cpuslen, char *gpus, size_t gpuslen) {
  int ncpu = backend_local_cpus(), ngpu = backend_local_gpus();
  size_t off = 0;
  cpus[0] = gpus[0] = 0;
  for (int v = 0; v < r->vcores && off + 8 < cpuslen; v++)
    off += (size_t)snprintf(cpus + off, cpuslen - off, "%s%d", v ? "," : "",
                            (*cpu_cursor)++ % (ncpu > 0 ? ncpu : 1));
  off = 0;
  for (int g = 0; g < r->gpus && off + 8 < gpuslen; g++)
    off += (size_t)snprintf(gpus + off, gpuslen - off, "%s%d", g ? "," : "",
                            (*gpu_cursor)++ % (ngpu > 0 ? ngpu : 1));
}
