/* sasl.c: DIGEST-MD5 for Hadoop tokens (see sasl.h). RFC 2831 section
 * 2.1.2.1 gives the response; Hadoop's SaslRpcServer names the realm
 * ("default") and the encoding of the token (base64 of identifier and
 * password). */
#include "hadoop/sasl.h"

#include "core/bytes.h"
#include "core/core.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
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
    } else if (!strcmp(key, "cipher")) {
      if (strlen(val) >= sizeof c->cipher) {
        snprintf(err, errlen, "the challenge's cipher list is too long");
        return -1;
      }
      loom__strlcpy(c->cipher, val, sizeof c->cipher);
    } else if (!strcmp(key, "maxbuf")) {
      long long mb;
      if (loom__parse_int(val, 64, 16777215, &mb) < 0) {
        snprintf(err, errlen, "the challenge's maxbuf is not a number from 64 to 16777215");
        return -1;
      }
      c->maxbuf = (uint32_t)mb;
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
  if (!c->maxbuf) c->maxbuf = 65536;
  /* qop-options: absent means "auth" */
  c->qops = c->qop[0] ? 0 : HSASL_QOP_AUTH;
  char q[sizeof c->qop];
  loom__strlcpy(q, c->qop, sizeof q);
  for (char *save = NULL, *t = strtok_r(q, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save))
    c->qops |= !strcmp(t, "auth")        ? HSASL_QOP_AUTH
               : !strcmp(t, "auth-int")  ? HSASL_QOP_INT
               : !strcmp(t, "auth-conf") ? HSASL_QOP_CONF
                                         : 0;
  if (!c->qops) {
    snprintf(err, errlen,
             "the server offers qop '%s', none of auth, auth-int and auth-conf that loom knows",
             c->qop);
    return -1;
  }
  return 0;
}

static bool has_token(const char *list, const char *want) {
  char q[256];
  loom__strlcpy(q, list, sizeof q);
  for (char *save = NULL, *t = strtok_r(q, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save))
    if (!strcmp(t, want)) return true;
  return false;
}

int hsasl_choose_qop(const hsasl_challenge *c, int allowed) {
  int ok = c->qops & allowed;
  if ((ok & HSASL_QOP_CONF) && has_token(c->cipher, "3des")) return HSASL_QOP_CONF;
  if (ok & HSASL_QOP_INT) return HSASL_QOP_INT;
  if (ok & HSASL_QOP_AUTH) return HSASL_QOP_AUTH;
  return 0;
}

const char *hsasl_qop_name(int qop) {
  return qop == HSASL_QOP_CONF ? "auth-conf" : qop == HSASL_QOP_INT ? "auth-int" : "auth";
}

void hsasl_digest(const hsasl_challenge *c, const char *user, const char *pass, const char *uri,
                  const char *cnonce, char response[33], char rspauth[33]) {
  hsasl_digest_qop(c, user, pass, uri, cnonce, HSASL_QOP_AUTH, response, rspauth, NULL);
}

void hsasl_digest_qop(const hsasl_challenge *c, const char *user, const char *pass, const char *uri,
                      const char *cnonce, int qop, char response[33], char rspauth[33],
                      uint8_t ha1_out[16]) {
  const char *nc = "00000001", *qn = hsasl_qop_name(qop);
  /* A2 ends in ":" and 32 zeros (an empty entity body's hash) above auth */
  const char *tail = qop == HSASL_QOP_AUTH ? "" : ":00000000000000000000000000000000";
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
  unsigned char ha1b[16];
  md5(b.p, b.len, ha1b);
  loom__hex(ha1b, 16, ha1);
  if (ha1_out) memcpy(ha1_out, ha1b, 16);
  /* A2 = "AUTHENTICATE:" digest-uri for the response, ":" digest-uri for
   * the server's rspauth */
  b.len = 0;
  loom__buf_printf(&b, "AUTHENTICATE:%s%s", uri, tail);
  md5_hex(b.p, b.len, ha2);
  b.len = 0;
  loom__buf_printf(&b, ":%s%s", uri, tail);
  md5_hex(b.p, b.len, ha2r);
  b.len = 0;
  loom__buf_printf(&b, "%s:%s:%s:%s:%s:%s", ha1, c->nonce, nc, cnonce, qn, ha2);
  md5_hex(b.p, b.len, response);
  b.len = 0;
  loom__buf_printf(&b, "%s:%s:%s:%s:%s:%s", ha1, c->nonce, nc, cnonce, qn, ha2r);
  md5_hex(b.p, b.len, rspauth);
  loom__buf_free(&b);
}

int hsasl_response(const hsasl_challenge *c, const hsasl_token *t, const char *protocol,
                   const char *server_id, const char *cnonce, char *out, size_t outcap,
                   size_t *outlen, char rspauth[33]) {
  return hsasl_response_qop(c, t, protocol, server_id, cnonce, HSASL_QOP_AUTH, out, outcap, outlen,
                            rspauth, NULL);
}

int hsasl_response_qop(const hsasl_challenge *c, const hsasl_token *t, const char *protocol,
                       const char *server_id, const char *cnonce, int qop, char *out, size_t outcap,
                       size_t *outlen, char rspauth[33], uint8_t ha1[16]) {
  if (t->identifier_len > 8192 || t->password_len > 1024) return -1;
  /* Hadoop's SaslRpcServer: the user name is base64 of the identifier,
   * the password base64 of the token's password */
  unsigned char user[11000], pass[1400];
  EVP_EncodeBlock(user, t->identifier, (int)t->identifier_len);
  EVP_EncodeBlock(pass, t->password, (int)t->password_len);
  return hsasl_response_user(c, (const char *)user, (const char *)pass, protocol, server_id, cnonce,
                             qop, out, outcap, outlen, rspauth, ha1);
}

int hsasl_response_user(const hsasl_challenge *c, const char *user, const char *pass,
                        const char *protocol, const char *server_id, const char *cnonce, int qop,
                        char *out, size_t outcap, size_t *outlen, char rspauth[33],
                        uint8_t ha1[16]) {
  if (strlen(user) > 11000 || strlen(pass) > 1400 || strpbrk(user, "\"\\")) return -1;
  char uri[600], resp[33];
  if ((size_t)snprintf(uri, sizeof uri, "%s/%s", protocol ? protocol : "",
                       server_id ? server_id : "") >= sizeof uri)
    return -1;
  hsasl_digest_qop(c, user, pass, uri, cnonce, qop, resp, rspauth, ha1);
  int n = snprintf(out, outcap,
                   "%susername=\"%s\",realm=\"%s\",nonce=\"%s\",nc=00000001,cnonce=\"%s\","
                   "digest-uri=\"%s\",maxbuf=65536,response=%s,qop=%s%s",
                   strcmp(c->charset, "utf-8") == 0 ? "charset=utf-8," : "", user, c->realm,
                   c->nonce, cnonce, uri, resp, hsasl_qop_name(qop),
                   qop == HSASL_QOP_CONF ? ",cipher=\"3des\"" : "");
  if (n < 0 || (size_t)n >= outcap) return -1;
  *outlen = (size_t)n;
  return 0;
}

int hsasl_check_rspauth(const uint8_t *s, size_t len, const char rspauth[33]) {
  static const char pre[] = "rspauth=";
  if (len != sizeof pre - 1 + 32 || memcmp(s, pre, sizeof pre - 1) != 0) return -1;
  return memcmp(s + sizeof pre - 1, rspauth, 32) == 0 ? 0 : -1;
}

/* ---- the security layer (RFC 2831 sections 2.3 and 2.4) --------------- */

static const char KIC[] = "Digest session key to client-to-server signing key magic constant";
static const char KIS[] = "Digest session key to server-to-client signing key magic constant";
static const char KCC[] = "Digest H(A1) to client-to-server sealing key magic constant";
static const char KCS[] = "Digest H(A1) to server-to-client sealing key magic constant";

/* MD5(H(A1) magic): a signing or (for 3des, all 16 bytes of H(A1)) a
 * sealing key. */
static void derive(const uint8_t ha1[16], const char *magic, uint8_t out[16]) {
  uint8_t b[16 + 80];
  size_t m = strlen(magic);
  memcpy(b, ha1, 16);
  memcpy(b + 16, magic, m);
  md5(b, 16 + m, out);
}

/* A DES key from 7 bytes: 7 bits a byte, the low bit odd parity
 * (cyrus' slidebits, Java's addDesParity). */
static void des_key(const uint8_t in[7], uint8_t k[8]) {
  k[0] = in[0];
  for (int i = 1; i < 7; i++) k[i] = (uint8_t)(in[i - 1] << (8 - i) | in[i] >> i);
  k[7] = (uint8_t)(in[6] << 1);
  for (int i = 0; i < 8; i++) {
    int ones = __builtin_popcount(k[i] & 0xfe);
    k[i] = (uint8_t)((k[i] & 0xfe) | (ones % 2 == 0));
  }
}

/* The "3des" cipher of a sealing key: two-key EDE (K1 K2 K1 from its
 * first 14 bytes) in CBC mode, the IV its last 8 bytes. */
static void *des3_ctx(const uint8_t kc[16], int encrypt) {
  uint8_t key[24];
  des_key(kc, key);
  des_key(kc + 7, key + 8);
  memcpy(key + 16, key, 8);
  EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
  if (x && EVP_CipherInit_ex(x, EVP_des_ede3_cbc(), NULL, key, kc + 8, encrypt) == 1 &&
      EVP_CIPHER_CTX_set_padding(x, 0) == 1) {
    OPENSSL_cleanse(key, sizeof key);
    return x;
  }
  OPENSSL_cleanse(key, sizeof key);
  EVP_CIPHER_CTX_free(x);
  return NULL;
}

int hsasl_layer_init(hsasl_layer *l, int qop, const uint8_t ha1[16], int server) {
  memset(l, 0, sizeof *l);
  if (qop != HSASL_QOP_INT && qop != HSASL_QOP_CONF) return -1;
  l->qop = qop;
  derive(ha1, server ? KIS : KIC, l->ki_send);
  derive(ha1, server ? KIC : KIS, l->ki_recv);
  if (qop == HSASL_QOP_CONF) {
    uint8_t kc_send[16], kc_recv[16];
    derive(ha1, server ? KCS : KCC, kc_send);
    derive(ha1, server ? KCC : KCS, kc_recv);
    l->enc = des3_ctx(kc_send, 1);
    l->dec = des3_ctx(kc_recv, 0);
    OPENSSL_cleanse(kc_send, sizeof kc_send);
    OPENSSL_cleanse(kc_recv, sizeof kc_recv);
    if (!l->enc || !l->dec) {
      hsasl_layer_free(l);
      return -1;
    }
  }
  return 0;
}

void hsasl_layer_free(hsasl_layer *l) {
  EVP_CIPHER_CTX_free(l->enc);
  EVP_CIPHER_CTX_free(l->dec);
  OPENSSL_cleanse(l, sizeof *l);
}

/* HMAC-MD5(key, seq msg), its first 10 bytes. */
static int mac10(const uint8_t key[16], uint32_t seq, const uint8_t *msg, size_t n,
                 uint8_t out[10]) {
  uint8_t full[EVP_MAX_MD_SIZE];
  unsigned int fl = 0;
  uint8_t *b = malloc(n + 4);
  if (!b) return -1;
  loom__put_be32(b, seq);
  if (n) memcpy(b + 4, msg, n);
  int ok = HMAC(EVP_md5(), key, 16, b, n + 4, full, &fl) != NULL && fl >= 10;
  free(b);
  if (ok) memcpy(out, full, 10);
  return ok ? 0 : -1;
}

int hsasl_wrap(hsasl_layer *l, const uint8_t *in, size_t n, uint8_t *out, size_t outcap,
               size_t *outlen) {
  if (l->broken || n > (size_t)INT32_MAX - 64 || outcap < n + HSASL_WRAP_OVERHEAD) return -1;
  uint8_t mac[10];
  if (mac10(l->ki_send, l->send_seq, in, n, mac) < 0) return -1;
  size_t at;
  if (l->qop == HSASL_QOP_CONF) {
    /* CIPHER(Kc, msg pad HMAC[0..9]), pad 1 to 8 bytes of its length */
    size_t pad = 8 - (n + 10) % 8;
    size_t plen = n + pad + 10;
    uint8_t *p = malloc(plen);
    if (!p) return -1;
    memcpy(p, in, n);
    memset(p + n, (int)pad, pad);
    memcpy(p + n + pad, mac, 10);
    int ol = 0;
    int ok = EVP_CipherUpdate(l->enc, out, &ol, p, (int)plen) == 1 && (size_t)ol == plen;
    OPENSSL_cleanse(p, plen);
    free(p);
    if (!ok) {
      l->broken = 1;
      return -1;
    }
    at = plen;
  } else {
    memmove(out, in, n);
    memcpy(out + n, mac, 10);
    at = n + 10;
  }
  out[at] = 0;
  out[at + 1] = 1; /* message type 1 */
  loom__put_be32(out + at + 2, l->send_seq++);
  *outlen = at + 6;
  return 0;
}

static int refuse(hsasl_layer *l, char *err, size_t errlen, const char *why) {
  l->broken = 1;
  snprintf(err, errlen, "a SASL-wrapped message refused: %s", why);
  return -1;
}

int hsasl_unwrap(hsasl_layer *l, const uint8_t *in, size_t n, uint8_t *out, size_t outcap,
                 size_t *outlen, char *err, size_t errlen) {
  if (l->broken) {
    snprintf(err, errlen, "the SASL security layer refused an earlier message");
    return -1;
  }
  if (n < 16 || n > (size_t)INT32_MAX || outcap < n) return refuse(l, err, errlen, "too short");
  if (in[n - 6] != 0 || in[n - 5] != 1) return refuse(l, err, errlen, "message type is not 1");
  uint32_t seq = loom__get_be32(in + n - 4);
  if (seq != l->recv_seq) return refuse(l, err, errlen, "sequence number out of order");
  size_t body = n - 6, mlen;
  const uint8_t *mac;
  if (l->qop == HSASL_QOP_CONF) {
    if (body % 8) return refuse(l, err, errlen, "not whole cipher blocks");
    int ol = 0;
    if (EVP_CipherUpdate(l->dec, out, &ol, in, (int)body) != 1 || (size_t)ol != body)
      return refuse(l, err, errlen, "cannot decrypt");
    size_t pad = out[body - 11];
    if (pad < 1 || pad > 8 || pad + 10 > body) return refuse(l, err, errlen, "bad padding");
    for (size_t i = 0; i < pad; i++)
      if (out[body - 11 - i] != pad) return refuse(l, err, errlen, "bad padding");
    mlen = body - 10 - pad;
    mac = out + body - 10;
  } else {
    mlen = body - 10;
    memmove(out, in, mlen);
    mac = in + mlen;
  }
  uint8_t want[10];
  if (mac10(l->ki_recv, seq, out, mlen, want) < 0 || CRYPTO_memcmp(want, mac, 10) != 0)
    return refuse(l, err, errlen, "MAC does not match");
  l->recv_seq++;
  *outlen = mlen;
  return 0;
}
