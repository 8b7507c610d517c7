/* tfile_fuzz.c: libFuzzer harness for the TFile reader and YARN's
 * aggregated log format (src/hadoop/tfile.c): arbitrary bytes read as an
 * aggregated log file (an exact-size copy, so that ASan sees a read past
 * its end). Aborts when a walk hands out a log whose bytes are not inside
 * what was read, or fails with no message. */
#include "hadoop/tfile.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_log(void *arg, const char *container, const char *type, const uint8_t *d,
                  size_t len) {
  size_t *sum = arg;
  if (strncmp(container, "container_", 10) || !type) abort();
  /* touch every byte: ASan checks they are there */
  for (size_t i = 0; i < len; i++) *sum += d[i];
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *b = malloc(size ? size : 1);
  if (!b) return 0;
  memcpy(b, data, size);
  size_t sum = 0;
  char owner[64], err[512] = "";
  int rc = tfile_logs_each(b, size, on_log, &sum, owner, sizeof owner, err, sizeof err);
  if (rc < 0 && rc != LOOM_ENOMEM && !err[0]) abort();
  if (rc == 0 && strlen(owner) >= sizeof owner) abort();
  free(b);
  return 0;
}
