/* external.c: the external backend starts nothing: someone else (a test
 * harness, a cluster manager's own launcher, a person) runs `loom agent`
 * for each task with LOOM_COORD, LOOM_SECRET, LOOM_TASK and LOOM_ATTEMPT
 * set. The coordinator learns of an agent's end from its connection. */
#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>

static int ext_check(const spec_job *s, char *err, size_t errlen) { return 0; }
static int ext_probe(char *msg, size_t len) {
  snprintf(msg, len, "external: agents are started by you (`loom agent`)");
  return 0;
}
static int ext_create(backend *b, const spec_job *s, int ntasks) {
  b->priv = calloc(2, sizeof(int)); /* the placement cursors */
  return b->priv ? 0 : LOOM_ENOMEM;
}
/* Agents usually run beside the coordinator (tests, one machine): CPUs and
 * GPUs of this machine, round-robin, as before the backend table had
 * placement. Agents started on other hosts should run with a spec that
 * asks for no GPUs. */
static void ext_place(backend *b, int task_id, const spec_role *r, char *cpus, size_t cpuslen,
                      char *gpus, size_t gpuslen) {
  int *cur = b->priv;
  loom__backend_round_robin(&cur[0], &cur[1], r, cpus, cpuslen, gpus, gpuslen);
}
static int ext_launch(backend *b, int task_id, char *const *argv, char *const *env, char *err,
                      size_t errlen) {
  return 0;
}
static void ext_signal(backend *b, int task_id, int sig) {}
static const char *ext_host(backend *b, int task_id) { return NULL; }
static void ext_destroy(backend *b) {
  free(b->priv);
  free(b);
}

const backend_ops loom__backend_external = {
    .name = "external",
    .tracks_processes = false,
    .check = ext_check,
    .probe = ext_probe,
    .create = ext_create,
    .place = ext_place,
    .launch = ext_launch,
    .signal = ext_signal,
    .host = ext_host,
    .destroy = ext_destroy,
};
