/* fuzz_backends.c: the backends as the spec parser asks for them (the
 * spec_backend_* functions spec.h declares, defined by the backend
 * registry in src/backend/backend.c), for the spec_parse harness: the
 * names only, so that the harness compiles the spec parser without the
 * backends' own code (libuv, sbatch, the coordinator). Keep the names
 * those of backend.c. */
#include "spec/spec.h"

#include <string.h>

static const char *const BACKENDS[] = {"local", "slurm", "external"};

const char *spec_backend_default(void) { return BACKENDS[0]; }

bool spec_backend_known(const char *name) {
  for (size_t i = 0; name && i < sizeof BACKENDS / sizeof BACKENDS[0]; i++)
    if (!strcmp(BACKENDS[i], name)) return true;
  return false;
}

const char *spec_backend_names(void) { return "local, slurm, external"; }
