/* hadoop_conf_fuzz.c: libFuzzer harness for the Hadoop configuration
 * reader (src/hadoop/conf.c): arbitrary bytes parsed as one file, then
 * every property read back with ${...} expansion. Aborts when a parse
 * succeeds with a property that breaks conf.h's bounds, or fails without
 * a located message. */
#include "hadoop/conf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hconf c = {0};
  char err[512] = "";
  /* an exact-size copy: the reader must not need a terminating NUL */
  char *text = malloc(size ? size : 1);
  if (!text) return 0;
  memcpy(text, data, size);
  int rc = hconf_parse(&c, text, size, "f.xml", err, sizeof err);
  if (rc < 0 && strncmp(err, "f.xml", 5)) abort();
  if (rc == 0) {
    if (c.n > HCONF_MAX_PROPS) abort();
    for (int i = 0; i < c.n; i++) {
      const hconf_prop *p = &c.props[i];
      if (!p->name || !p->value || strlen(p->value) > HCONF_MAX_TEXT) abort();
      if (hconf_find(&c, p->name) == NULL) abort();
      char v[256];
      (void)hconf_get(&c, p->name, NULL, v, sizeof v);
    }
  }
  hconf_free(&c);
  free(text);
  return 0;
}
