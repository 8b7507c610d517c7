/* server.c: placeholder until the parameter server lands. */
#include "ps/server.h"

#include <stdio.h>

int loom__ps_main(int argc, char **argv) {
  fprintf(stderr, "loom ps: the parameter server is not available in this build\n");
  return 2;
}
