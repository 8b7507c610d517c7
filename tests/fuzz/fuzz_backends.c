/* fuzz_backends.c: the backend registry (src/backend/backend.c) as the
 * spec parser sees it, for the spec_parse harness: the names only, so that
 * the harness compiles spec.c without the backends' own code (libuv,
 * sbatch, the coordinator). Keep the names those of backend.c. */
#include "backend/backend.h"

#include <string.h>

static const backend_ops BACKENDS[] = {{.name = "local"}, {.name = "slurm"}, {.name = "external"}};

const backend_ops *backend_find(const char *name) {
  for (size_t i = 0; name && i < sizeof BACKENDS / sizeof BACKENDS[0]; i++)
    if (!strcmp(BACKENDS[i].name, name)) return &BACKENDS[i];
  return NULL;
}

const backend_ops *backend_default(void) { return &BACKENDS[0]; }

const char *backend_names(void) { return "local, slurm, external"; }
