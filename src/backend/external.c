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
static int ext_launch(backend *b, int task_id, char *const *argv,
                      char *const *env, char *err, size_t errlen) {
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
    .launch = ext_launch,
    .signal = ext_signal,
    .host = ext_host,
    .destroy = ext_destroy,
};
