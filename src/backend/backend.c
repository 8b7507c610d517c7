/* backend.c: the registry of backends, and facts about this machine. */
#include "backend/backend.h"

#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const backend_ops loom__backend_local;
extern const backend_ops loom__backend_external;
extern const backend_ops loom__backend_slurm;
int backend_slurm_setup(backend *b, const spec_job *s, int ntasks);

static const backend_ops *const backends[] = {&loom__backend_local, &loom__backend_external,
                                              &loom__backend_slurm};

const backend_ops *backend_find(const char *name) {
  for (size_t i = 0; i < LOOM__ARRAY_LEN(backends); i++)
    if (!strcmp(backends[i]->name, name)) return backends[i];
  return NULL;
}

int backend_create(const char *name, const spec_job *s, uv_loop_t *loop, int ntasks,
                   backend_exit_cb on_exit, void *arg, backend **out) {
  const backend_ops *ops = backend_find(name);
  if (!ops) return LOOM_EINVAL;
  backend *b = calloc(1, sizeof *b);
  if (!b) return LOOM_ENOMEM;
  b->ops = ops;
  b->loop = loop;
  b->on_exit = on_exit;
  b->arg = arg;
  b->priv = calloc((size_t)ntasks + 1, sizeof(void *));
  if (!b->priv) {
    free(b);
    return LOOM_ENOMEM;
  }
  if (ops == &loom__backend_slurm && backend_slurm_setup(b, s, ntasks) < 0) {
    free(b->priv);
    free(b);
    return LOOM_ENOMEM;
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
