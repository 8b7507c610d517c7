/* sasl.h: SASL DIGEST-MD5 (RFC 2831) as Hadoop uses it for tokens: the
 * ApplicationMasterProtocol (with the AMRMToken) and every NodeManager
 * (with an NMToken) accept only TOKEN authentication, even on a cluster
 * with SIMPLE authentication. The user name is base64 of the token's
 * identifier, the password base64 of its password, the realm and
 * digest-uri come from the server's challenge and its SaslAuth
 * (protocol "" and server id "default": "/default"). The qop is the
 * strongest the server offers (hadoop.rpc.protection: authentication ->
 * auth, integrity -> auth-int, privacy -> auth-conf); above auth every
 * message after the handshake goes through the security layer of RFC
 * 2831 section 2.3 and 2.4 (hsasl_wrap, hsasl_unwrap): HMAC-MD5 cut to
 * 10 bytes with sequence numbers, and under auth-conf 3DES (the "3des"
 * cipher, two-key EDE in CBC mode, the IV carried from message to
 * message), as Java's DigestMD5Base and cyrus-sasl do.
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
  char cipher[64]; /* the cipher-opts, ","-separated, or "" */
  uint32_t maxbuf; /* the largest wrapped message the server takes */
  int qops;        /* HSASL_QOP_* bits offered */
} hsasl_challenge;

/* The qops (bits, so that a set of them is a mask). */
#define HSASL_QOP_AUTH 1
#define HSASL_QOP_INT 2
#define HSASL_QOP_CONF 4
#define HSASL_QOP_ALL 7

/* Parses a challenge of len bytes. Returns 0, or -1 with err saying what
 * is wrong (no nonce, no qop loom knows among the qops, an algorithm
 * other than md5-sess, a malformed or oversized directive). */
int hsasl_parse_challenge(const uint8_t *s, size_t len, hsasl_challenge *c, char *err,
                          size_t errlen);

/* The token's credentials in Hadoop's encoding. */
typedef struct {
  const uint8_t *identifier;
  size_t identifier_len;
  const uint8_t *password;
  size_t password_len;
} hsasl_token;

/* The strongest qop of c that allowed (HSASL_QOP_* bits) admits:
 * auth-conf only when the server offers the "3des" cipher. 0 when none. */
int hsasl_choose_qop(const hsasl_challenge *c, int allowed);

/* The name of a qop ("auth", "auth-int", "auth-conf"). */
const char *hsasl_qop_name(int qop);

/* RFC 2831's digests for user and pass (as they go on the wire), with
 * digest-uri uri and client nonce cnonce, nc 00000001, qop auth: the
 * response the client sends and the rspauth the server must answer, 32
 * hex digits each. */
void hsasl_digest(const hsasl_challenge *c, const char *user, const char *pass, const char *uri,
                  const char *cnonce, char response[33], char rspauth[33]);

/* The same for a qop (HSASL_QOP_*), and H(A1) in binary (the key the
 * security layer's keys come from; NULL when not wanted). */
void hsasl_digest_qop(const hsasl_challenge *c, const char *user, const char *pass, const char *uri,
                      const char *cnonce, int qop, char response[33], char rspauth[33],
                      uint8_t ha1[16]);

/* The security layer of one side of a connection after the handshake. */
typedef struct {
  int qop;             /* HSASL_QOP_INT or HSASL_QOP_CONF */
  uint8_t ki_send[16]; /* HMAC keys: Kic and Kis, by side */
  uint8_t ki_recv[16];
  void *enc, *dec; /* EVP_CIPHER_CTX under auth-conf, else NULL */
  uint32_t send_seq, recv_seq;
  int broken; /* a message was refused: nothing more is taken */
} hsasl_layer;

/* What wrapping adds at most to a message (pad, MAC, type, sequence). */
#define HSASL_WRAP_OVERHEAD 24

/* Sets up l for qop from H(A1); server: the server's side (the keys the
 * other way round; for tests and oracles). 0, or -1 (qop not above auth,
 * or the cipher could not be set up). */
int hsasl_layer_init(hsasl_layer *l, int qop, const uint8_t ha1[16], int server);
void hsasl_layer_free(hsasl_layer *l);

/* Wraps n bytes into out (at least n + HSASL_WRAP_OVERHEAD bytes), the
 * length in *outlen. 0, or -1 (the layer broken, out too small). */
int hsasl_wrap(hsasl_layer *l, const uint8_t *in, size_t n, uint8_t *out, size_t outcap,
               size_t *outlen);

/* Unwraps a message of n bytes from the peer into out (at least n
 * bytes), the length in *outlen: checks the message type, the sequence
 * number (the next expected: a replayed, dropped or reordered message is
 * refused), and the MAC; under auth-conf decrypts and checks the padding.
 * 0, or -1 with err saying why; after a refusal the layer refuses all. */
int hsasl_unwrap(hsasl_layer *l, const uint8_t *in, size_t n, uint8_t *out, size_t outcap,
                 size_t *outlen, char *err, size_t errlen);

/* The client's response to challenge c for token t, with digest-uri
 * "protocol/server_id" and client nonce cnonce (printable, no quotes),
 * into out (NUL-terminated; its length in *outlen). rspauth gets the hex
 * digest the server's SUCCESS must carry (33 bytes). Returns 0, or -1 when
 * out is too small or an input too long. */
int hsasl_response(const hsasl_challenge *c, const hsasl_token *t, const char *protocol,
                   const char *server_id, const char *cnonce, char *out, size_t outcap,
                   size_t *outlen, char rspauth[33]);

/* The same for a qop (HSASL_QOP_*; under auth-conf with cipher="3des"),
 * H(A1) into ha1 for hsasl_layer_init. */
int hsasl_response_qop(const hsasl_challenge *c, const hsasl_token *t, const char *protocol,
                       const char *server_id, const char *cnonce, int qop, char *out, size_t outcap,
                       size_t *outlen, char rspauth[33], uint8_t ha1[16]);

/* The same with the user name and password as they go on the wire
 * (DataTransferProtocol's encrypted handshake: "keyId blockPoolId
 * base64(nonce)" and base64 of the data encryption key). -1 also for a
 * user name with a quote or a backslash. */
int hsasl_response_user(const hsasl_challenge *c, const char *user, const char *pass,
                        const char *protocol, const char *server_id, const char *cnonce, int qop,
                        char *out, size_t outcap, size_t *outlen, char rspauth[33],
                        uint8_t ha1[16]);

/* Checks the server's final message ("rspauth=<hex>") against the
 * expected digest. 0 when it matches, -1 otherwise. */
int hsasl_check_rspauth(const uint8_t *s, size_t len, const char rspauth[33]);

#endif
