/* hadoop_gss_fuzz.c: libFuzzer harness for what src/hadoop/gss.c decides
 * from the server's bytes without the GSS-API library: the security
 * layer offer (4 bytes, after gss_unwrap) and the service principal built
 * from NEGOTIATE's protocol and server id, checked against a configured
 * principal. The input: 4 bytes of offer, a mask of allowed layers, then
 * protocol, server id and configured principal separated by NUL bytes.
 * Aborts when a parse accepts what RFC 4752 does not define, a chosen
 * layer is outside the offer or the allowed mask, or a target is built
 * that does not name the server's protocol and server id. */
#include "hadoop/gss.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int mask = 0;
  uint32_t maxbuf = 0;
  size_t on = size < 4 ? size : 4;
  /* an exact-size copy: no reading past what the server sent */
  uint8_t *offer = malloc(on ? on : 1);
  if (!offer) return 0;
  memcpy(offer, data, on);
  if (hgss_parse_offer(offer, on, &mask, &maxbuf) == 0) {
    if (on != 4 || mask < 1 || mask > 7 || maxbuf > 0xFFFFFF) abort();
    int allowed = size > 4 ? data[4] & 7 : 7;
    int l = hgss_choose_layer(mask, allowed);
    if (l && (!(l & mask) || !(l & allowed) || (l != 1 && l != 2 && l != 4))) abort();
    if (!l && (mask & allowed)) abort();
  }
  free(offer);
  if (size <= 5) return 0;
  /* three NUL-separated strings (a missing one is "") */
  char *rest = malloc(size - 5 + 1);
  if (!rest) return 0;
  memcpy(rest, data + 5, size - 5);
  rest[size - 5] = 0;
  const char *parts[3] = {"", "", ""};
  size_t at = 0;
  for (int i = 0; i < 3 && at <= size - 5; i++) {
    parts[i] = rest + at;
    at += strlen(rest + at) + 1;
  }
  char out[600], err[512] = "";
  bool conf = parts[2][0] != 0;
  if (hgss_target(parts[0], parts[1], conf ? parts[2] : NULL, "Host.Example", out, sizeof out, err,
                  sizeof err) == 0) {
    size_t pl = strlen(parts[0]), sl = strlen(parts[1]);
    /* protocol/serverId, then the configured realm or nothing */
    if (strncmp(out, parts[0], pl) || out[pl] != '/' || strncmp(out + pl + 1, parts[1], sl))
      abort();
    if (out[pl + 1 + sl] && (!conf || out[pl + 1 + sl] != '@')) abort();
  } else if (!err[0]) {
    abort();
  }
  free(rest);
  return 0;
}
