/* gss.h: SASL GSSAPI (RFC 4752) as Hadoop's KERBEROS authentication uses
 * it, over MIT Kerberos' GSS-API library (libgssapi_krb5.so.2), which is
 * loaded with dlopen at the first use: a node without Kerberos libraries
 * still runs loom, and only a Kerberos connection says the library is
 * missing. The client's credentials are the user's ticket cache
 * (KRB5CCNAME, after kinit); KRB5_CONFIG names the krb5.conf.
 *
 * The exchange (Hadoop's SaslRpcClient against the JDK's GssKrb5Server):
 * the client's initial context token goes in INITIATE; each CHALLENGE
 * until the context is complete carries the server's token (with mutual
 * authentication, the AP-REP) and is answered by a RESPONSE with the next
 * client token (empty when there is none); then the server sends, wrapped
 * without confidentiality, its offer of security layers (a bit mask: 1
 * none, 2 integrity, 4 privacy) and its largest receive buffer (3 bytes),
 * and the client answers, wrapped the same way, with the layer it chose
 * and its own receive buffer, no authorization id (Hadoop takes an
 * authzid only when it equals the authenticated principal). Above "none"
 * every message after SUCCESS goes through gss_wrap / gss_unwrap
 * (hgss_wrap, hgss_unwrap), with confidentiality under privacy.
 *
 * No I/O here: tokens in, tokens out (ipc.c sends and receives them). The
 * server's tokens are checked by the GSS-API library; the offer's four
 * bytes by hgss_parse_offer, a pure function the hadoop_gss fuzz harness
 * drives together with the principal check. */
#ifndef LOOM_HADOOP_GSS_H
#define LOOM_HADOOP_GSS_H

#include "core/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The security layers of RFC 4752 (bits, so that a set is a mask); the
 * same values as sasl.h's HSASL_QOP_AUTH, _INT and _CONF. */
#define HGSS_LAYER_NONE 1
#define HGSS_LAYER_INTEGRITY 2
#define HGSS_LAYER_PRIVACY 4

/* The receive buffer loom announces (the most 3 bytes hold). */
#define HGSS_MAXBUF 0xFFFFFF

/* The offer's 4 bytes, unwrapped: the mask of layers and the server's
 * largest receive buffer. Returns 0, or -1 (not 4 bytes, no layer
 * offered, a bit RFC 4752 does not define). */
int hgss_parse_offer(const uint8_t *p, size_t n, int *mask, uint32_t *maxbuf);

/* The strongest layer of mask that allowed (a mask too) admits, or 0. */
int hgss_choose_layer(int mask, int allowed);

/* The server principal to ask a ticket for (a krb5 principal name), from
 * what the server said in NEGOTIATE (protocol "nn", server id
 * "localhost": its own principal nn/localhost@REALM) and the configured
 * principal conf (dfs.namenode.kerberos.principal; NULL or "" when not
 * configured), whose "_HOST" stands for host (the host of the URL,
 * lowercased as Hadoop does). With conf, the server's protocol/serverId
 * must be conf's primary/instance, and out is conf with _HOST replaced;
 * without it, out is "protocol/serverId", which the library completes
 * with krb5.conf's default realm: Hadoop's own client does the same, and
 * neither looks the host up in DNS. Returns 0, or -1 with err saying what
 * does not match or what is malformed (every input may come from the
 * server: printable characters only, bounded). */
int hgss_target(const char *protocol, const char *server_id, const char *conf, const char *host,
                char *out, size_t outlen, char *err, size_t errlen);

/* One GSS-API security context, client side. */
typedef struct hgss hgss;

/* Starts a context for target (a krb5 principal name as hgss_target gives
 * it, or with hostbased a GSS host-based service name, "HTTP@host"), asking for
 * mutual authentication, confidentiality and integrity: the first token
 * goes into *tok (the caller frees it with free()). Returns 0, or
 * LOOM_EAUTH with err saying why: no ticket or an expired one ("no valid
 * ticket in the credentials cache ... run kinit"), a service the KDC does
 * not know, the library missing (LOOM_ENOTSUP). err does not name the
 * peer: the caller prefixes it. */
int hgss_start(const char *target, bool hostbased, hgss **out, uint8_t **tok, size_t *toklen,
               char *err, size_t errlen);

/* Takes the server's token in (len n): the next token into *tok (NULL and
 * 0 when there is none; free() it), *done true when the context is
 * complete (mutual authentication done). 0, or LOOM_EAUTH with err. */
int hgss_step(hgss *g, const uint8_t *in, size_t n, uint8_t **tok, size_t *toklen, bool *done,
              char *err, size_t errlen);

/* Takes the server's wrapped offer (after the context is complete),
 * chooses the strongest layer allowed admits, and makes the wrapped
 * answer (*tok, free() it). *layer: the chosen layer; *max_send: the most
 * plain bytes one wrapped message to the server may hold (its buffer less
 * the wrapping). 0, or LOOM_EAUTH (no common layer: err names what each
 * side allows) or LOOM_EPROTO (a malformed offer). */
int hgss_negotiate(hgss *g, const uint8_t *in, size_t n, int allowed, int *layer, size_t *max_send,
                   uint8_t **tok, size_t *toklen, char *err, size_t errlen);

/* The authenticated client principal ("alice@LOOM.TEST"), "" before the
 * context is complete. */
const char *hgss_principal(const hgss *g);

/* Wraps n bytes (with confidentiality under privacy) into *out (free()
 * it). 0, or -1 with err. */
int hgss_wrap(hgss *g, const uint8_t *in, size_t n, uint8_t **out, size_t *outlen, char *err,
              size_t errlen);

/* Unwraps a message from the server into *out (free() it): refuses a
 * message whose checksum fails, replayed, out of order, or without
 * confidentiality where privacy was chosen. 0, or -1 with err. */
int hgss_unwrap(hgss *g, const uint8_t *in, size_t n, uint8_t **out, size_t *outlen, char *err,
                size_t errlen);

void hgss_free(hgss *g);

#endif
