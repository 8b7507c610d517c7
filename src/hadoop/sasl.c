/* sasl.c: DIGEST-MD5 for Hadoop tokens (see sasl.h). RFC 2831 section
 * 2.1.2.1 gives the response; Hadoop's SaslRpcServer names the realm
 * ("default") and the encoding of the token (base64 of identifier and
 * password). */
#include "hadoop/sasl.h"

#include "core/core.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#define MAX_DIRECTIVES 32

static void md5(const void *p, size_t n, unsigned char out[16]) {
  unsigned int len = 16;
  EVP_Digest(p, n, out, &len, EVP_md5(), NULL);
}

static void md5_hex(const void *p, size_t n, char out[33]) {
  unsigned char d[16];
  md5(p, n, d);
  loom__hex(d, 16, out);
}

static bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Copies a directive's value into out (outlen with the NUL): quoted (with
 * \-escapes) or a bare token up to the next comma. *at moves past it.
 * Returns -1 when it does not fit or a quote is not closed. */
static int take_value(const uint8_t *s, size_t len, size_t *at, char *out, size_t outlen) {
  size_t i = *at, n = 0;
  if (i < len && s[i] == '"') {
    for (i++;; i++) {
      if (i >= len) return -1;
      uint8_t c = s[i];
      if (c == '"') {
        i++;
        break;
      }
      if (c == '\\') {
        if (++i >= len) return -1;
        c = s[i];
      }
      if (c == 0 || n + 1 >= outlen) return -1;
      out[n++] = (char)c;
    }
  } else {
    for (; i < len && s[i] != ',' && !is_space(s[i]); i++) {
      if (s[i] == 0 || s[i] == '"' || n + 1 >= outlen) return -1;
      out[n++] = (char)s[i];
    }
  }
  out[n] = 0;
  *at = i;
  return 0;
}

int hsasl_parse_challenge(const uint8_t *s, size_t len, hsasl_challenge *c, char *err,
                          size_t errlen) {
  memset(c, 0, sizeof *c);
  size_t i = 0;
  int directives = 0;
  bool have_nonce = false, have_realm = false;
  for (;;) {
    while (i < len && (is_space(s[i]) || s[i] == ',')) i++;
    if (i >= len) break;
    if (++directives > MAX_DIRECTIVES) {
      snprintf(err, errlen, "the challenge has more than %d directives", MAX_DIRECTIVES);
      return -1;
    }
    char key[32];
    size_t k = 0;
    while (i < len && s[i] != '=' && !is_space(s[i]) && s[i] != ',') {
      if (k + 1 >= sizeof key) {
        snprintf(err, errlen, "a directive name in the challenge is too long");
        return -1;
      }
      key[k++] = (char)s[i++];
    }
    key[k] = 0;
    while (i < len && is_space(s[i])) i++;
    if (i >= len || s[i] != '=' || k == 0) {
      snprintf(err, errlen, "the challenge is not key=value pairs (at byte %zu)", i);
      return -1;
    }
    i++;
    while (i < len && is_space(s[i])) i++;
    char val[256];
    if (take_value(s, len, &i, val, sizeof val) < 0) {
      snprintf(err, errlen, "the value of '%s' in the challenge is malformed or too long", key);
      return -1;
    }
    if (!strcmp(key, "nonce")) {
      if (have_nonce) {
        snprintf(err, errlen, "the challenge has two nonces");
        return -1;
      }
      have_nonce = true;
      loom__strlcpy(c->nonce, val, sizeof c->nonce);
    } else if (!strcmp(key, "realm")) {
      if (!have_realm) loom__strlcpy(c->realm, val, sizeof c->realm);
      have_realm = true;
    } else if (!strcmp(key, "qop")) {
      if (strlen(val) >= sizeof c->qop) {
        snprintf(err, errlen, "the challenge's qop is too long");
        return -1;
      }
      loom__strlcpy(c->qop, val, sizeof c->qop);
    } else if (!strcmp(key, "charset")) {
      loom__strlcpy(c->charset, val, sizeof c->charset);
    } else if (!strcmp(key, "algorithm")) {
      loom__strlcpy(c->algorithm, val, sizeof c->algorithm);
    }
  }
  if (!have_nonce || !c->nonce[0]) {
    snprintf(err, errlen, "the challenge has no nonce");
    return -1;
  }
  if (strcmp(c->algorithm, "md5-sess") != 0) {
    snprintf(err, errlen, "the challenge's algorithm is '%s', not md5-sess", c->algorithm);
    return -1;
  }
  /* qop-options: absent means "auth"; otherwise "auth" must be offered */
  bool auth = !c->qop[0];
  char q[sizeof c->qop];
  loom__strlcpy(q, c->qop, sizeof q);
  for (char *save = NULL, *t = strtok_r(q, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save))
    auth |= !strcmp(t, "auth");
  if (!auth) {
    snprintf(err, errlen,
             "the server offers qop '%s' but not 'auth' (hadoop.rpc.protection other than "
             "authentication is not supported)",
             c->qop);
    return -1;
  }
  return 0;
}

void hsasl_digest(const hsasl_challenge *c, const char *user, const char *pass, const char *uri,
                  const char *cnonce, char response[33], char rspauth[33]) {
  const char *nc = "00000001";
  /* A1 = MD5(user:realm:password) ":" nonce ":" cnonce */
  loom__buf b;
  loom__buf_init(&b, 1 << 16);
  loom__buf_printf(&b, "%s:%s:%s", user, c->realm, pass);
  unsigned char h[16];
  md5(b.p, b.len, h);
  b.len = 0;
  loom__buf_add(&b, h, 16);
  loom__buf_printf(&b, ":%s:%s", c->nonce, cnonce);
  char ha1[33], ha2[33], ha2r[33];
  md5_hex(b.p, b.len, ha1);
  /* A2 = "AUTHENTICATE:" digest-uri for the response, ":" digest-uri for
   * the server's rspauth */
  b.len = 0;
  loom__buf_printf(&b, "AUTHENTICATE:%s", uri);
  md5_hex(b.p, b.len, ha2);
  b.len = 0;
  loom__buf_printf(&b, ":%s", uri);
  md5_hex(b.p, b.len, ha2r);
  b.len = 0;
  loom__buf_printf(&b, "%s:%s:%s:%s:auth:%s", ha1, c->nonce, nc, cnonce, ha2);
  md5_hex(b.p, b.len, response);
  b.len = 0;
  loom__buf_printf(&b, "%s:%s:%s:%s:auth:%s", ha1, c->nonce, nc, cnonce, ha2r);
  md5_hex(b.p, b.len, rspauth);
  loom__buf_free(&b);
}

int hsasl_response(const hsasl_challenge *c, const hsasl_token *t, const char *protocol,
                   const char *server_id, const char *cnonce, char *out, size_t outcap,
                   size_t *outlen, char rspauth[33]) {
  if (t->identifier_len > 8192 || t->password_len > 1024) return -1;
  /* Hadoop's SaslRpcServer: the user name is base64 of the identifier,
   * the password base64 of the token's password */
  unsigned char user[11000], pass[1400];
  EVP_EncodeBlock(user, t->identifier, (int)t->identifier_len);
  EVP_EncodeBlock(pass, t->password, (int)t->password_len);
  char uri[600], resp[33];
  if ((size_t)snprintf(uri, sizeof uri, "%s/%s", protocol ? protocol : "",
                       server_id ? server_id : "") >= sizeof uri)
    return -1;
  hsasl_digest(c, (const char *)user, (const char *)pass, uri, cnonce, resp, rspauth);
  int n = snprintf(out, outcap,
                   "%susername=\"%s\",realm=\"%s\",nonce=\"%s\",nc=00000001,cnonce=\"%s\","
                   "digest-uri=\"%s\",maxbuf=65536,response=%s,qop=auth",
                   strcmp(c->charset, "utf-8") == 0 ? "charset=utf-8," : "", (char *)user, c->realm,
                   c->nonce, cnonce, uri, resp);
  if (n < 0 || (size_t)n >= outcap) return -1;
  *outlen = (size_t)n;
  return 0;
}

int hsasl_check_rspauth(const uint8_t *s, size_t len, const char rspauth[33]) {
  static const char pre[] = "rspauth=";
  if (len != sizeof pre - 1 + 32 || memcmp(s, pre, sizeof pre - 1) != 0) return -1;
  return memcmp(s + sizeof pre - 1, rspauth, 32) == 0 ? 0 : -1;
}
