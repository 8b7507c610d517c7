/* wire_auth_fuzz.c: libFuzzer harness for the authentication handshake
 * (src/wire/wire_auth.c), the one decoder every service (coordinator,
 * parameter server, collectives' TCP links) runs on bytes from anyone who
 * can connect. The first byte picks the service's framing (bits 0-1), the
 * piece size the bytes arrive in (bits 2-7: 1..64) and, with the second
 * byte's bit 0, an answer made by the real client (wire_auth_client_answer)
 * that the rest of the input is XORed onto, so that answers right, nearly
 * right and wrong are all fed; with bit 1, the client's side instead: the
 * input as a challenge, then as a proof. Aborts when the server state
 * machine breaks wire_auth.h's contract: consumes more than it was given
 * or stops short while waiting, accepts an answer whose prefix or MAC is
 * not the right one, refuses the right one, makes a proof the client
 * refuses, or leaves a failed handshake. Built by LOOM_FUZZ=ON with clang;
 * driver.c runs it over the committed corpus in every build. */
#include "wire/wire_auth.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SECRET "fuzz-secret"

static const wire_auth_proto *const PROTOS[] = {&wire_auth_coord, &wire_auth_ps, &wire_auth_comm,
                                                &wire_auth_ps};

static void client_side(const wire_auth_proto *p, const uint8_t *data, size_t size) {
  unsigned char cnonce[WIRE_NONCE], ans[WIRE_AUTH_MSG_MAX];
  size_t alen = 0;
  int rc = wire_auth_client_answer(p, SECRET, NULL, 0, data, size, cnonce, ans, &alen);
  bool challenge =
      size == wire_auth_challenge_len(p) && !memcmp(data, p->challenge_pre, p->challenge_pre_len);
  if (challenge ? rc != 0 || alen != wire_auth_answer_len(p) : rc != LOOM_EPROTO) abort();
  if (wire_auth_client_check(p, SECRET, NULL, 0, cnonce, data, size) != LOOM_EAUTH) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  const wire_auth_proto *p = PROTOS[data[0] & 3];
  size_t piece = (size_t)(data[0] >> 2) + 1;
  bool splice = data[1] & 1;
  if (data[1] & 2) {
    client_side(p, data + 2, size - 2);
    return 0;
  }
  data += 2, size -= 2;
  const char *ctx = p == &wire_auth_comm ? "the connector's hello" : NULL;
  size_t ctx_len = ctx ? strlen(ctx) : 0;
  wire_auth_server s;
  unsigned char ch[WIRE_AUTH_MSG_MAX], out[WIRE_AUTH_MSG_MAX];
  size_t chlen, olen;
  if (wire_auth_server_start(&s, p, SECRET, ctx, ctx_len, ch, &chlen) < 0) abort();

  /* what arrives: the input, or a real answer with the input XORed on */
  size_t alen = wire_auth_answer_len(p), n = size;
  unsigned char *in = malloc(size > alen ? size : alen);
  if (!in) abort();
  memcpy(in, data, size);
  bool right = false; /* the prefix and MAC are the real answer's */
  unsigned char cnonce[WIRE_NONCE];
  if (splice) {
    unsigned char ans[WIRE_AUTH_MSG_MAX];
    size_t l;
    if (wire_auth_client_answer(p, SECRET, ctx, ctx_len, ch, chlen, cnonce, ans, &l) < 0) abort();
    if (n < alen) memset(in + n, 0, alen - n), n = alen;
    for (size_t i = 0; i < alen; i++) in[i] ^= ans[i];
    right = !memcmp(in, ans, alen - WIRE_NONCE);
    memcpy(cnonce, in + alen - WIRE_NONCE, WIRE_NONCE); /* as it arrives */
  }
  size_t fed = 0;
  int rc = 0;
  for (size_t off = 0; off < n && rc == 0; off += piece) {
    size_t k = n - off < piece ? n - off : piece, used;
    rc = wire_auth_server_feed(&s, in + off, k, &used, out, &olen);
    if (used > k || (rc == 0 && used != k) || (rc != 1 && olen != 0)) abort();
    fed += used;
  }
  bool whole = fed == alen; /* the answer's bytes all arrived */
  if (rc == 1) {
    if (!whole || !splice || !right || olen != wire_auth_proof_len(p)) abort();
    if (wire_auth_client_check(p, SECRET, ctx, ctx_len, cnonce, out, olen) != 0) abort();
  } else if (rc < 0) {
    if ((rc != LOOM_EPROTO && rc != LOOM_EAUTH) || !s.why || (splice && right)) abort();
    size_t used;
    if (wire_auth_server_feed(&s, ch, 1, &used, out, &olen) >= 0) abort(); /* stays failed */
  } else if (whole || (splice && fed >= alen)) {
    abort(); /* a whole answer was not decided on */
  }
  free(in);
  return 0;
}
