/* http.c: placeholder until the dashboard lands. */
#include "http/http.h"
#include "loom.h"

#include <stdio.h>

int http_start(uv_loop_t *loop, const char *bind, const char *job_dir, const char *token,
               http_server **out, int *port, char *err, size_t errlen) {
  snprintf(err, errlen, "the dashboard is not available in this build");
  *out = NULL;
  return LOOM_ENOTSUP;
}
void http_stop(http_server *s) {}
int loom__ui_main(int argc, char **argv) {
  fprintf(stderr, "loom ui: the dashboard is not available in this build\n");
  return 2;
}
