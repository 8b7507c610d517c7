/* http_parse_fuzz.c: libFuzzer harness for the dashboard's request parser
 * (src/http/parse.c): http__parse() over arbitrary bytes, then the query
 * and cookie decoders over what it parsed. Aborts when a result breaks the
 * parser's contract (http_int.h), so the fuzzer reports it. Built by
 * LOOM_FUZZ=ON with clang; driver.c runs it over the committed corpus in
 * every build. */
#include "http/http_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_path(const char *path) {
  /* the contract: the path is percent-decoded and has no "." or ".." segment */
  if (path[0] != '/') abort();
  for (const char *s = path; *s; s++) {
    if (*s != '/') continue;
    const char *seg = s + 1;
    size_t n = strcspn(seg, "/");
    if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.')) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static http_req r; /* ~40 KB: not on the stack */
  char out[256];
  memset(&r, 0, sizeof r);
  int rc = http__parse((const char *)data, size, &r);
  if (rc > 0) {
    if ((size_t)rc > size) abort();
    if (strcmp(r.method, "GET") && strcmp(r.method, "HEAD")) abort();
    check_path(r.path);
    http__query(r.query, "token", out, sizeof out);
    http__query(r.query, "n", out, 4);
    http__cookie(r.cookie, "loom_token", out, sizeof out);
  } else if (rc < 0 && rc != -400 && rc != -405 && rc != -413 && rc != -414 && rc != -431 &&
             rc != -505) {
    abort();
  }
  return 0;
}
