/* spec_parse_fuzz.c: libFuzzer harness for the job spec parser
 * (src/spec/): spec_parse() over arbitrary bytes, the YAML text up
 * to the first NUL and up to four --set overrides after it (each ended by
 * a NUL), as `loom run --set` passes them. A refusal must say why. A spec
 * that parses is resolved to JSON and dumped as `loom run` writes the job
 * directory's spec.yaml, then parsed again as `loom coordinator` loads it:
 * aborts when that is refused or resolves to something else. Backends come
 * from fuzz_backends.c (names only). Built by LOOM_FUZZ=ON with clang;
 * driver.c runs it over the committed corpus in every build. */
#include "spec/spec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAME "/tmp/spec.yaml" /* relative paths in it start at /tmp */
#define MAX_SETS 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  size_t tlen = strnlen(buf, size);
  const char *sets[MAX_SETS];
  int nsets = 0;
  for (size_t off = tlen + 1; off < size && nsets < MAX_SETS;) {
    size_t n = strnlen(buf + off, size - off);
    if (off + n == size) break; /* an override ends with a NUL */
    sets[nsets++] = buf + off;
    off += n + 1;
  }
  spec_job *s = NULL;
  char err[2048];
  int rc = spec_parse(NAME, buf, tlen, sets, nsets, &s, err, sizeof err);
  if (rc < 0) {
    if (s || !err[0] || (rc != LOOM_ESPEC && rc != LOOM_ENOMEM)) abort();
    free(buf);
    return 0;
  }
  json_t *j = spec_to_json(s);
  char *txt = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
  if (!txt) abort();
  spec_job *again = NULL;
  if (spec_parse(NAME, txt, strlen(txt), NULL, 0, &again, err, sizeof err) < 0) {
    fprintf(stderr, "spec.yaml as written:\n%s\nrefused: %s\n", txt, err);
    abort();
  }
  json_t *j2 = spec_to_json(again);
  if (!json_equal(j, j2)) {
    char *txt2 = json_dumps(j2, JSON_INDENT(2));
    fprintf(stderr, "spec.yaml as written:\n%s\nread back as:\n%s\n", txt, txt2 ? txt2 : "?");
    abort();
  }
  json_decref(j2);
  spec_free(again);
  free(txt);
  json_decref(j);
  spec_free(s);
  free(buf);
  return 0;
}
