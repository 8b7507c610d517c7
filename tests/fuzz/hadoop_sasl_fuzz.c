/* hadoop_sasl_fuzz.c: libFuzzer harness for the DIGEST-MD5 challenge
 * parser and the server-proof check (src/hadoop/sasl.c), the bytes a
 * ResourceManager or NodeManager sends before it is authenticated. Aborts
 * when a parse succeeds with a field that is not NUL-terminated within
 * its bounds, without a nonce, or when the response built from it is not
 * a bounded, NUL-terminated string. */
#include "hadoop/sasl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *copy = malloc(size ? size : 1); /* exact size: no NUL to lean on */
  if (!copy) return 0;
  memcpy(copy, data, size);
  hsasl_challenge c;
  char err[256] = "";
  int rc = hsasl_parse_challenge(copy, size, &c, err, sizeof err);
  if (rc < 0 && !err[0]) abort();
  if (rc == 0) {
    if (!memchr(c.nonce, 0, sizeof c.nonce) || !memchr(c.realm, 0, sizeof c.realm) ||
        !memchr(c.qop, 0, sizeof c.qop) || !c.nonce[0])
      abort();
    const uint8_t id[] = {1, 2, 3, 4}, pw[] = {5, 6, 7};
    hsasl_token t = {id, sizeof id, pw, sizeof pw};
    char out[2048], rsp[33];
    size_t n = 0;
    if (hsasl_response(&c, &t, "", "default", "abcdef", out, sizeof out, &n, rsp) == 0 &&
        (n >= sizeof out || strlen(out) != n || strlen(rsp) != 32))
      abort();
    if (hsasl_check_rspauth(copy, size, rsp) == 0 && size != 40) abort();
  }
  free(copy);
  return 0;
}
