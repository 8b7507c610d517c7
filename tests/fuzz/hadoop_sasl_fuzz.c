/* hadoop_sasl_fuzz.c: libFuzzer harness for the DIGEST-MD5 challenge
 * parser and the server-proof check (src/hadoop/sasl.c), the bytes a
 * ResourceManager or NodeManager sends before it is authenticated, and
 * for the security layer's unwrap (auth-int, auth-conf), the bytes every
 * WRAP message of a protected connection carries. Aborts when a parse
 * succeeds with a field that is not NUL-terminated within its bounds,
 * without a nonce, or when the response built from it is not a bounded,
 * NUL-terminated string; when an unwrap takes a message and gives more
 * bytes than it had, or what it gives does not wrap and unwrap back to
 * itself.
 *
 * An input that starts with "WRAP" is for unwrap: its fifth byte picks
 * the qop (odd: auth-int, even: auth-conf), then messages, each a 2-byte
 * big-endian length and its bytes, go to one server-side layer on a fixed
 * H(A1) (corpus/hadoop_sasl/wrap-*: a client's real messages on it). */
#include "hadoop/sasl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t HA1[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static void unwrap_all(const uint8_t *data, size_t size) {
  if (size < 5) return;
  int qop = data[4] & 1 ? HSASL_QOP_INT : HSASL_QOP_CONF;
  hsasl_layer sv, c2, s2;
  if (hsasl_layer_init(&sv, qop, HA1, 1) < 0 || hsasl_layer_init(&c2, qop, HA1, 0) < 0 ||
      hsasl_layer_init(&s2, qop, HA1, 1) < 0)
    abort();
  size_t at = 5;
  while (at + 2 <= size) {
    size_t n = (size_t)data[at] << 8 | data[at + 1];
    at += 2;
    if (n > size - at) n = size - at;
    uint8_t *m = malloc(n ? n : 1), *out = malloc(n ? n : 1);
    if (!m || !out) abort();
    memcpy(m, data + at, n); /* exact size: no slack to lean on */
    at += n;
    size_t ol = 0;
    char err[256] = "";
    int rc = hsasl_unwrap(&sv, m, n, out, n, &ol, err, sizeof err);
    if (rc < 0 && !err[0]) abort();
    if (rc == 0) {
      if (ol > n) abort();
      /* what came out goes back in and out again on a fresh pair */
      uint8_t *w = malloc(ol + HSASL_WRAP_OVERHEAD), *back = malloc(ol + HSASL_WRAP_OVERHEAD);
      size_t wl = 0, bl = 0;
      if (!w || !back || hsasl_wrap(&c2, out, ol, w, ol + HSASL_WRAP_OVERHEAD, &wl) < 0 ||
          hsasl_unwrap(&s2, w, wl, back, ol + HSASL_WRAP_OVERHEAD, &bl, err, sizeof err) < 0 ||
          bl != ol || (ol && memcmp(back, out, ol)))
        abort();
      free(w);
      free(back);
    }
    free(m);
    free(out);
  }
  hsasl_layer_free(&sv);
  hsasl_layer_free(&c2);
  hsasl_layer_free(&s2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 4 && !memcmp(data, "WRAP", 4)) {
    unwrap_all(data, size);
    return 0;
  }
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
    int qop = hsasl_choose_qop(&c, HSASL_QOP_ALL);
    uint8_t ha1[16];
    if (qop && !(c.qops & qop)) abort();
    if (qop &&
        hsasl_response_qop(&c, &t, "", "default", "abcdef", qop, out, sizeof out, &n, rsp, ha1) ==
            0 &&
        (n >= sizeof out || strlen(out) != n || strlen(rsp) != 32 ||
         !strstr(out, hsasl_qop_name(qop))))
      abort();
    if (hsasl_check_rspauth(copy, size, rsp) == 0 && size != 40) abort();
  }
  free(copy);
  return 0;
}
