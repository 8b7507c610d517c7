/* hadoop_creds_fuzz.c: libFuzzer harness for the Hadoop credentials-file
 * readers (src/yarn/creds.c, hyarn_creds_find and
 * hyarn_creds_find_secret): the file a NodeManager writes into a
 * container, both formats (WRITABLE with Hadoop's VInts, and the
 * delimited CredentialsProto). Aborts when a token or secret is returned
 * whose lengths reach past the input, or when a failure says nothing. */
#include "hadoop/creds.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  hyarn_cred_token t;
  char err[256] = "";
  int rc = hyarn_creds_find(copy, size, "YARN_AM_RM_TOKEN", &t, err, sizeof err);
  if (rc == 0) {
    if (t.identifier_len > size || t.password_len > size || !memchr(t.kind, 0, sizeof t.kind) ||
        strcmp(t.kind, "YARN_AM_RM_TOKEN") != 0)
      abort();
    hyarn_cred_token_free(&t);
  } else if (!err[0] && rc != LOOM_ENOMEM) {
    abort();
  }
  uint8_t *v = NULL;
  size_t vl = 0;
  err[0] = 0;
  rc = hyarn_creds_find_secret(copy, size, HYARN_CREDS_JOB_SECRET, &v, &vl, err, sizeof err);
  if (rc == 0) {
    if (vl > size || v[vl] != 0) abort();
    free(v);
  } else if (v || (!err[0] && rc != LOOM_ENOMEM)) {
    abort();
  }
  free(copy);
  return 0;
}
