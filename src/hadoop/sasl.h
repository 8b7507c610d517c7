/* sasl.h: SASL DIGEST-MD5 (RFC 2831) as Hadoop uses it for tokens: the
 * ApplicationMasterProtocol (with the AMRMToken) and every NodeManager
 * (with an NMToken) accept only TOKEN authentication, even on a cluster
 * with SIMPLE authentication. The user name is base64 of the token's
 * identifier, the password base64 of its password, the realm and
 * digest-uri come from the server's challenge and its SaslAuth
 * (protocol "" and server id "default": "/default"), qop=auth only, so
 * nothing after the handshake is wrapped.
 *
 * No I/O here: the challenge in, the response out, so that the blocking
 * client (ipc.c) uses it and a fuzzer can drive the parser. Every field
 * of the challenge is untrusted: lengths are bounded, quoted strings
 * unescaped within their bounds. */
#ifndef LOOM_HADOOP_SASL_H
#define LOOM_HADOOP_SASL_H

#include <stddef.h>
#include <stdint.h>

/* What a DIGEST-MD5 challenge says. */
typedef struct {
  char realm[256];
  char nonce[256];
  char qop[64];     /* the qop-options, ","-separated */
  char charset[16]; /* "utf-8" or "" */
  char algorithm[16];
} hsasl_challenge;

/* Parses a challenge of len bytes. Returns 0, or -1 with err saying what
 * is wrong (no nonce, no "auth" among the qops, an algorithm other than
 * md5-sess, a malformed or oversized directive). */
int hsasl_parse_challenge(const uint8_t *s, size_t len, hsasl_challenge *c, char *err,
                          size_t errlen);

/* The token's credentials in Hadoop's encoding. */
typedef struct {
  const uint8_t *identifier;
  size_t identifier_len;
  const uint8_t *password;
  size_t password_len;
} hsasl_token;

/* RFC 2831's digests for user and pass (as they go on the wire), with
 * digest-uri uri and client nonce cnonce, nc 00000001, qop auth: the
 * response the client sends and the rspauth the server must answer, 32
 * hex digits each. */
void hsasl_digest(const hsasl_challenge *c, const char *user, const char *pass, const char *uri,
                  const char *cnonce, char response[33], char rspauth[33]);

/* The client's response to challenge c for token t, with digest-uri
 * "protocol/server_id" and client nonce cnonce (printable, no quotes),
 * into out (NUL-terminated; its length in *outlen). rspauth gets the hex
 * digest the server's SUCCESS must carry (33 bytes). Returns 0, or -1 when
 * out is too small or an input too long. */
int hsasl_response(const hsasl_challenge *c, const hsasl_token *t, const char *protocol,
                   const char *server_id, const char *cnonce, char *out, size_t outcap,
                   size_t *outlen, char rspauth[33]);

/* Checks the server's final message ("rspauth=<hex>") against the
 * expected digest. 0 when it matches, -1 otherwise. */
int hsasl_check_rspauth(const uint8_t *s, size_t len, const char rspauth[33]);

#endif
