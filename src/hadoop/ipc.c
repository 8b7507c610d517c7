/* ipc.c: Hadoop IPC framing and a blocking client (see ipc.h). Every
 * byte from the server is untrusted: a frame's length is checked against
 * HIPC_MAX_FRAME before anything is allocated, and every delimited
 * message's length against what the frame holds. */
#include "hadoop/ipc.h"

#include "IpcConnectionContext.pb-c.h"
#include "ProtobufRpcEngine2.pb-c.h"
#include "RpcHeader.pb-c.h"
#include "core/bytes.h"
#include "hadoop/gss.h"
#include "hadoop/sasl.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- framing ----------------------------------------------------------- */

/* Appends msg, preceded by its varint length. */
static int put_delimited(loom__buf *out, const ProtobufCMessage *msg) {
  if (!protobuf_c_message_check(msg)) return LOOM_EINVAL; /* a required field unset */
  size_t n = protobuf_c_message_get_packed_size(msg);
  if (n > HIPC_MAX_FRAME) return LOOM_ERANGE;
  uint8_t vb[10];
  int rc = loom__buf_add(out, vb, loom__varint_put(vb, n));
  if (rc < 0) return rc;
  uint8_t *tmp = malloc(n ? n : 1);
  if (!tmp) return LOOM_ENOMEM;
  protobuf_c_message_pack(msg, tmp);
  rc = loom__buf_add(out, tmp, n);
  free(tmp);
  return rc;
}

/* Appends a frame of the given messages: a 4-byte length, then each
 * delimited. */
static int put_frame(loom__buf *out, const ProtobufCMessage *const *msgs, int n) {
  size_t at = out->len;
  uint8_t len[4] = {0};
  int rc = loom__buf_add(out, len, 4);
  for (int i = 0; i < n && rc == 0; i++) rc = put_delimited(out, msgs[i]);
  if (rc < 0) {
    out->len = at;
    return rc;
  }
  loom__put_be32((unsigned char *)out->p + at, (uint32_t)(out->len - at - 4));
  return 0;
}

static void request_header(Hadoop__Common__RpcRequestHeaderProto *h, int32_t call_id,
                           const uint8_t client_id[16]) {
  hadoop__common__rpc_request_header_proto__init(h);
  h->has_rpckind = 1;
  h->rpckind = HADOOP__COMMON__RPC_KIND_PROTO__RPC_PROTOCOL_BUFFER;
  h->has_rpcop = 1;
  h->rpcop = HADOOP__COMMON__RPC_REQUEST_HEADER_PROTO__OPERATION_PROTO__RPC_FINAL_PACKET;
  h->callid = call_id;
  h->clientid.data = (uint8_t *)client_id;
  h->clientid.len = 16;
  h->has_retrycount = 1;
  h->retrycount = -1;
}

/* The connection context frame (call id -3): who the calls are for and
 * which protocol they belong to. */
static int put_context(loom__buf *out, const char *protocol, const char *user,
                       const uint8_t client_id[16]) {
  Hadoop__Common__RpcRequestHeaderProto h;
  request_header(&h, HIPC_CALL_CONTEXT, client_id);
  Hadoop__Common__UserInformationProto ui = HADOOP__COMMON__USER_INFORMATION_PROTO__INIT;
  ui.effectiveuser = (char *)user;
  Hadoop__Common__IpcConnectionContextProto ctx =
      HADOOP__COMMON__IPC_CONNECTION_CONTEXT_PROTO__INIT;
  /* no user (after Kerberos): the server takes the authenticated one */
  ctx.userinfo = user ? &ui : NULL;
  ctx.protocol = (char *)protocol;
  const ProtobufCMessage *msgs[] = {&h.base, &ctx.base};
  return put_frame(out, msgs, 2);
}

/* "hrpc", version, service class 0, auth protocol (0: none, SIMPLE;
 * 0xDF: SASL). */
static int put_hello(loom__buf *out, uint8_t auth) {
  const uint8_t pre[7] = {'h', 'r', 'p', 'c', HIPC_VERSION, 0, auth};
  return loom__buf_add(out, pre, sizeof pre);
}

int hipc_encode_preamble(loom__buf *out, const char *protocol, const char *user,
                         const uint8_t client_id[16]) {
  size_t at = out->len;
  int rc = put_hello(out, 0);
  if (rc == 0) rc = put_context(out, protocol, user, client_id);
  if (rc < 0) out->len = at;
  return rc;
}

int hipc_encode_sasl(loom__buf *out, const uint8_t client_id[16], const ProtobufCMessage *sasl) {
  Hadoop__Common__RpcRequestHeaderProto h;
  request_header(&h, HIPC_CALL_SASL, client_id);
  const ProtobufCMessage *msgs[] = {&h.base, sasl};
  return put_frame(out, msgs, 2);
}

int hipc_encode_call(loom__buf *out, int32_t call_id, const uint8_t client_id[16],
                     const char *protocol, const char *method, const ProtobufCMessage *req) {
  Hadoop__Common__RpcRequestHeaderProto h;
  request_header(&h, call_id, client_id);
  Hadoop__Common__RequestHeaderProto rh = HADOOP__COMMON__REQUEST_HEADER_PROTO__INIT;
  rh.methodname = (char *)method;
  rh.declaringclassprotocolname = (char *)protocol;
  rh.clientprotocolversion = 1;
  const ProtobufCMessage *msgs[] = {&h.base, &rh.base, req};
  return put_frame(out, msgs, 3);
}

int hipc_frame_length(const uint8_t hdr[4], uint32_t *len, char *err, size_t errlen) {
  *len = loom__get_be32(hdr);
  if (*len <= HIPC_MAX_FRAME) return 0;
  bool text = true;
  for (int i = 0; i < 4; i++) text &= hdr[i] >= 0x20 && hdr[i] < 0x7f;
  if (text)
    snprintf(err, errlen,
             "the reply does not look like Hadoop IPC: it starts with \"%c%c%c%c\" (another "
             "protocol on that port?)",
             hdr[0], hdr[1], hdr[2], hdr[3]);
  else
    snprintf(err, errlen, "a reply frame of %u bytes announced, more than the %u allowed", *len,
             HIPC_MAX_FRAME);
  return LOOM_EPROTO;
}

/* Copies a string from the server: at most the first line, printable
 * ASCII only (others become '?'), cut to outlen. */
static void copy_printable(char *out, size_t outlen, const char *s) {
  size_t n = 0;
  for (; s && *s && *s != '\n' && *s != '\r' && n + 1 < outlen; s++)
    out[n++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
  out[n] = 0;
}

int hipc_decode_response(const uint8_t *frame, size_t len,
                         const ProtobufCMessageDescriptor *body_desc, hipc_response *out, char *err,
                         size_t errlen) {
  memset(out, 0, sizeof *out);
  uint32_t hlen;
  size_t vn = loom__varint_get32(frame, len, &hlen);
  if (!vn || hlen > len - vn) {
    snprintf(err, errlen, "a reply whose header length is %s (the frame has %zu bytes)",
             vn ? "past its end" : "not a varint", len);
    return LOOM_EPROTO;
  }
  Hadoop__Common__RpcResponseHeaderProto *h =
      hadoop__common__rpc_response_header_proto__unpack(NULL, hlen, frame + vn);
  if (!h) {
    snprintf(err, errlen, "a reply whose header is not an RpcResponseHeaderProto (%u bytes)", hlen);
    return LOOM_EPROTO;
  }
  out->header = &h->base;
  out->call_id = h->callid;
  switch (h->status) {
  case HADOOP__COMMON__RPC_RESPONSE_HEADER_PROTO__RPC_STATUS_PROTO__SUCCESS:
    out->status = 0;
    break;
  case HADOOP__COMMON__RPC_RESPONSE_HEADER_PROTO__RPC_STATUS_PROTO__ERROR:
    out->status = 1;
    break;
  default:
    out->status = 2;
    break;
  }
  copy_printable(out->exception, sizeof out->exception, h->exceptionclassname);
  copy_printable(out->message, sizeof out->message, h->errormsg);
  if (out->status != 0) return 0;
  const uint8_t *p = frame + vn + hlen;
  size_t left = len - vn - hlen;
  uint32_t blen;
  vn = loom__varint_get32(p, left, &blen);
  if (!vn || blen > left - vn) {
    snprintf(err, errlen, "a reply to call %u whose response length is %s", h->callid,
             vn ? "past the frame's end" : "missing or not a varint");
    hipc_response_free(out);
    return LOOM_EPROTO;
  }
  out->body = protobuf_c_message_unpack(body_desc, NULL, blen, p + vn);
  if (!out->body) {
    snprintf(err, errlen, "a reply to call %u that is not a %s (%u bytes)", h->callid,
             body_desc->name, blen);
    hipc_response_free(out);
    return LOOM_EPROTO;
  }
  return 0;
}

void hipc_response_free(hipc_response *r) {
  if (r->header) protobuf_c_message_free_unpacked(r->header, NULL);
  if (r->body) protobuf_c_message_free_unpacked(r->body, NULL);
  r->header = r->body = NULL;
}

/* ---- the blocking client --------------------------------------------- */

struct hipc_client {
  int fd;
  char peer[2600];
  char protocol[256];
  uint8_t client_id[16];
  int32_t next_call;
  char exception[256];
  /* above qop auth: the SASL security layer, the largest message to wrap
   * at once, and what was unwrapped but not yet read */
  hsasl_layer *layer;
  hgss *gss; /* after Kerberos: the GSS-API context, wrapping when gss_wrap */
  bool gss_wrap;
  bool token_done; /* authenticated with a token (TOKEN/DIGEST-MD5) */
  size_t max_wrap;
  loom__buf plain;
};

static int remaining(uint64_t deadline) {
  uint64_t now = loom__now_ms();
  return now >= deadline ? 0 : (int)(deadline - now);
}

/* Waits until fd is ready for events, at most until deadline. 0 ready,
 * LOOM_ETIMEDOUT, or LOOM_ECONN (errno set). */
static int wait_fd(int fd, short events, uint64_t deadline) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, remaining(deadline));
    if (r > 0) return 0;
    if (r == 0) return LOOM_ETIMEDOUT;
    if (errno != EINTR) return LOOM_ECONN;
  }
}

int hipc_send_fd(int fd, const char *peer, const void *buf, size_t n, uint64_t deadline,
                 const char *what, char *err, size_t errlen) {
  const char *p = buf;
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int rc = wait_fd(fd, POLLOUT, deadline);
      if (rc == LOOM_ETIMEDOUT) {
        snprintf(err, errlen, "%s: could not send %s within the timeout", peer, what);
        return rc;
      }
      if (rc == 0) continue;
    }
    snprintf(err, errlen, "%s: sending %s failed: %s", peer, what, strerror(errno));
    return LOOM_ECONN;
  }
  return 0;
}

static int send_all(hipc_client *c, const void *buf, size_t n, uint64_t deadline, const char *what,
                    char *err, size_t errlen) {
  return hipc_send_fd(c->fd, c->peer, buf, n, deadline, what, err, errlen);
}

int hipc_recv_fd(int fd, const char *peer, void *buf, size_t n, uint64_t deadline, int timeout_ms,
                 const char *what, char *err, size_t errlen) {
  char *p = buf;
  while (n) {
    ssize_t r = recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= (size_t)r;
      continue;
    }
    if (r == 0) {
      snprintf(err, errlen, "%s closed the connection while loom waited for %s", peer, what);
      return LOOM_ECONN;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int rc = wait_fd(fd, POLLIN, deadline);
      if (rc == LOOM_ETIMEDOUT) {
        snprintf(err, errlen, "%s: no %s within %d ms", peer, what, timeout_ms);
        return rc;
      }
      if (rc == 0) continue;
    }
    snprintf(err, errlen, "%s: reading %s failed: %s", peer, what, strerror(errno));
    return LOOM_ECONN;
  }
  return 0;
}

static int recv_all(hipc_client *c, void *buf, size_t n, uint64_t deadline, int timeout_ms,
                    const char *what, char *err, size_t errlen) {
  return hipc_recv_fd(c->fd, c->peer, buf, n, deadline, timeout_ms, what, err, errlen);
}

/* One WRAP message from the server (Hadoop's Server.wrapWithSasl: a
 * frame whose header has the SASL call id and whose body is an
 * RpcSaslProto in state WRAP), unwrapped onto c->plain. */
static int recv_wrapped(hipc_client *c, uint64_t deadline, int timeout_ms, const char *what,
                        char *err, size_t errlen) {
  uint8_t hdr[4];
  uint32_t len = 0;
  uint8_t *frame = NULL, *plain = NULL;
  hipc_response r = {0};
  char why[256];
  int rc = recv_all(c, hdr, 4, deadline, timeout_ms, what, err, errlen);
  if (rc == 0 && (rc = hipc_frame_length(hdr, &len, why, sizeof why)) < 0)
    snprintf(err, errlen, "%s: %s", c->peer, why);
  if (rc == 0 && !(frame = malloc(len ? len : 1))) rc = LOOM_ENOMEM;
  if (rc == 0) rc = recv_all(c, frame, len, deadline, timeout_ms, what, err, errlen);
  if (rc == 0 && (rc = hipc_decode_response(frame, len, &hadoop__common__rpc_sasl_proto__descriptor,
                                            &r, why, sizeof why)) < 0)
    snprintf(err, errlen, "%s: a wrapped reply: %s", c->peer, why);
  Hadoop__Common__RpcSaslProto *m = rc == 0 ? (Hadoop__Common__RpcSaslProto *)r.body : NULL;
  if (rc == 0 && r.status != 0) {
    /* an error the server did not wrap: it ends the connection */
    snprintf(err, errlen, "%s: %s (not integrity-protected): %s%s%s", c->peer, what,
             r.exception[0] ? r.exception : "an error", r.message[0] ? ": " : "", r.message);
    rc = LOOM_EPEER;
  } else if (rc == 0 &&
             (r.call_id != (uint32_t)HIPC_CALL_SASL ||
              m->state != HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__WRAP || !m->has_token)) {
    snprintf(err, errlen,
             "%s: %s: a reply that is not SASL-wrapped (call %u) where the "
             "connection is protected",
             c->peer, what, r.call_id);
    rc = LOOM_EPROTO;
  }
  size_t n = 0;
  if (rc == 0 && c->gss_wrap) {
    if (hgss_unwrap(c->gss, m->token.data, m->token.len, &plain, &n, why, sizeof why) < 0) {
      snprintf(err, errlen, "%s: %s: %s", c->peer, what, why);
      rc = LOOM_EPROTO;
    }
  } else {
    if (rc == 0 && !(plain = malloc(m->token.len ? m->token.len : 1))) rc = LOOM_ENOMEM;
    if (rc == 0 && hsasl_unwrap(c->layer, m->token.data, m->token.len, plain, m->token.len, &n, why,
                                sizeof why) < 0) {
      snprintf(err, errlen, "%s: %s: %s", c->peer, what, why);
      rc = LOOM_EPROTO;
    }
  }
  if (rc == 0 && loom__buf_add(&c->plain, plain, n) < 0) {
    snprintf(err, errlen, "%s: %s: more unwrapped data than a frame may hold", c->peer, what);
    rc = LOOM_EPROTO;
  }
  hipc_response_free(&r);
  free(plain);
  free(frame);
  return rc;
}

/* n bytes of the reply stream: from the socket, or above qop auth from
 * the unwrapped messages. */
static int recv_stream(hipc_client *c, void *buf, size_t n, uint64_t deadline, int timeout_ms,
                       const char *what, char *err, size_t errlen) {
  if (!c->layer && !c->gss_wrap)
    return recv_all(c, buf, n, deadline, timeout_ms, what, err, errlen);
  while (c->plain.len < n) {
    int rc = recv_wrapped(c, deadline, timeout_ms, what, err, errlen);
    if (rc < 0) return rc;
  }
  memcpy(buf, c->plain.p, n);
  loom__buf_consume(&c->plain, n);
  return 0;
}

/* Sends n bytes of the request stream: as they are, or above qop auth
 * wrapped, in pieces no larger than the server takes, each in a WRAP
 * message (Hadoop's SaslRpcClient.WrappedOutputStream). */
static int send_stream(hipc_client *c, const void *buf, size_t n, uint64_t deadline,
                       const char *what, char *err, size_t errlen) {
  if (!c->layer && !c->gss_wrap) return send_all(c, buf, n, deadline, what, err, errlen);
  const uint8_t *p = buf;
  uint8_t *w = c->gss_wrap ? NULL : malloc(c->max_wrap + HSASL_WRAP_OVERHEAD), *gw = NULL;
  loom__buf b;
  loom__buf_init(&b, HIPC_MAX_FRAME);
  int rc = w || c->gss_wrap ? 0 : LOOM_ENOMEM;
  while (rc == 0 && n) {
    size_t k = n < c->max_wrap ? n : c->max_wrap, wl = 0;
    char why[600];
    free(gw);
    gw = NULL;
    if (c->gss_wrap ? hgss_wrap(c->gss, p, k, &gw, &wl, why, sizeof why) < 0
                    : hsasl_wrap(c->layer, p, k, w, c->max_wrap + HSASL_WRAP_OVERHEAD, &wl) < 0) {
      snprintf(err, errlen, "%s: cannot wrap %s%s%s", c->peer, what, c->gss_wrap ? ": " : "",
               c->gss_wrap ? why : "");
      rc = LOOM_EIO;
      break;
    }
    Hadoop__Common__RpcSaslProto m = HADOOP__COMMON__RPC_SASL_PROTO__INIT;
    m.state = HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__WRAP;
    m.has_token = 1;
    m.token.data = c->gss_wrap ? gw : w;
    m.token.len = wl;
    b.len = 0;
    rc = hipc_encode_sasl(&b, c->client_id, &m.base);
    if (rc < 0)
      snprintf(err, errlen, "%s: cannot encode %s", c->peer, what);
    else
      rc = send_all(c, b.p, b.len, deadline, what, err, errlen);
    p += k;
    n -= k;
  }
  loom__buf_free(&b);
  free(w);
  free(gw);
  return rc;
}

/* A non-blocking socket connected to ai within the deadline, or -1 with
 * *why set (an errno, or ETIMEDOUT). */
static int connect_one(const struct addrinfo *ai, uint64_t deadline, int *why) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    *why = errno;
    return -1;
  }
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
    *why = errno;
    close(fd);
    return -1;
  }
  int rc = wait_fd(fd, POLLOUT, deadline);
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }
  *why = rc == LOOM_ETIMEDOUT ? ETIMEDOUT : soerr ? soerr : errno;
  close(fd);
  return -1;
}

/* Reads one reply frame and decodes it (header, and a body of desc on
 * success) into *r. what names what is waited for, method the call in
 * messages. */
static int read_frame(hipc_client *c, uint64_t deadline, int timeout_ms, const char *what,
                      const char *method, const ProtobufCMessageDescriptor *desc, hipc_response *r,
                      char *err, size_t errlen) {
  uint8_t hdr[4];
  uint32_t len = 0;
  uint8_t *frame = NULL;
  int rc = recv_stream(c, hdr, 4, deadline, timeout_ms, what, err, errlen);
  if (rc == 0) {
    char why[256];
    if ((rc = hipc_frame_length(hdr, &len, why, sizeof why)) < 0)
      snprintf(err, errlen, "%s: %s: %s", c->peer, method, why);
  }
  if (rc == 0 && !(frame = malloc(len ? len : 1))) rc = LOOM_ENOMEM;
  if (rc == 0) rc = recv_stream(c, frame, len, deadline, timeout_ms, what, err, errlen);
  if (rc == 0) {
    char why[256];
    if ((rc = hipc_decode_response(frame, len, desc, r, why, sizeof why)) < 0)
      snprintf(err, errlen, "%s: %s: %s", c->peer, method, why);
  }
  free(frame);
  return rc;
}

/* TOKEN / DIGEST-MD5 with tok, the server's offer auth (its challenge):
 * the client answers (INITIATE) and the server says SUCCESS with its own
 * proof (rspauth), which is checked. */
static int digest_exchange(hipc_client *c, const hsasl_token *tok,
                           const Hadoop__Common__RpcSaslProto__SaslAuth *auth, uint64_t deadline,
                           int timeout_ms, char *err, size_t errlen) {
  loom__buf b;
  loom__buf_init(&b, 1 << 16);
  hipc_response r = {0};
  Hadoop__Common__RpcSaslProto *m = NULL;
  int rc = 0;
  hsasl_challenge ch;
  char why[256], resp[12000], rspauth[33];
  uint8_t ha1[16];
  int qop = 0;
  size_t resplen = 0;
  if (rc == 0 &&
      (!auth->has_challenge || hsasl_parse_challenge(auth->challenge.data, auth->challenge.len, &ch,
                                                     why, sizeof why) < 0)) {
    snprintf(err, errlen, "%s: SASL: %s", c->peer,
             auth->has_challenge ? why : "DIGEST-MD5 offered without a challenge");
    rc = LOOM_EPROTO;
  }
  if (rc == 0) {
    uint8_t raw[12];
    char cnonce[17];
    if (RAND_bytes(raw, sizeof raw) != 1) rc = LOOM_EIO;
    EVP_EncodeBlock((unsigned char *)cnonce, raw, sizeof raw);
    qop = hsasl_choose_qop(&ch, HSASL_QOP_ALL);
    if (rc == 0 && !qop) {
      /* auth-conf offered without 3des: not a cipher loom has */
      snprintf(err, errlen,
               "%s: SASL: the server wants privacy (qop auth-conf) with ciphers '%s' and loom "
               "has only 3des",
               c->peer, ch.cipher);
      rc = LOOM_EPROTO;
    } else if (rc == 0 && hsasl_response_qop(&ch, tok, auth->protocol, auth->serverid, cnonce, qop,
                                             resp, sizeof resp, &resplen, rspauth, ha1) < 0) {
      snprintf(err, errlen, "%s: SASL: the token is too large for a DIGEST-MD5 response", c->peer);
      rc = LOOM_EINVAL;
    }
  }
  if (rc == 0) {
    Hadoop__Common__RpcSaslProto__SaslAuth chosen = HADOOP__COMMON__RPC_SASL_PROTO__SASL_AUTH__INIT;
    chosen.method = auth->method;
    chosen.mechanism = auth->mechanism;
    chosen.protocol = auth->protocol;
    chosen.serverid = auth->serverid;
    Hadoop__Common__RpcSaslProto__SaslAuth *auths[] = {&chosen};
    Hadoop__Common__RpcSaslProto ini = HADOOP__COMMON__RPC_SASL_PROTO__INIT;
    ini.state = HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__INITIATE;
    ini.has_token = 1;
    ini.token.data = (uint8_t *)resp;
    ini.token.len = resplen;
    ini.n_auths = 1;
    ini.auths = auths;
    b.len = 0;
    rc = hipc_encode_sasl(&b, c->client_id, &ini.base);
    if (rc == 0) rc = send_all(c, b.p, b.len, deadline, "the SASL response", err, errlen);
  }
  hipc_response_free(&r);
  if (rc == 0)
    rc = read_frame(c, deadline, timeout_ms, "the SASL outcome", "SASL authentication",
                    &hadoop__common__rpc_sasl_proto__descriptor, &r, err, errlen);
  if (rc == 0 && r.status != 0) {
    /* a wrong or expired token: Hadoop answers a fatal error, the class
     * saying why (InvalidToken, SaslException) */
    snprintf(err, errlen, "%s: the token was refused: %s%s%s", c->peer,
             r.exception[0] ? r.exception : "an error", r.message[0] ? ": " : "", r.message);
    rc = LOOM_EAUTH;
  }
  m = rc == 0 ? (Hadoop__Common__RpcSaslProto *)r.body : NULL;
  if (m && m->state != HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__SUCCESS) {
    snprintf(err, errlen, "%s: SASL: the server answered state %d where SUCCESS was expected",
             c->peer, (int)m->state);
    rc = LOOM_EPROTO;
  } else if (m && (!m->has_token || hsasl_check_rspauth(m->token.data, m->token.len, rspauth))) {
    snprintf(err, errlen,
             "%s: SASL: the server's proof (rspauth) does not match the token: not "
             "the server the token is for",
             c->peer);
    rc = LOOM_EAUTH;
  }
  if (rc == 0 && qop != HSASL_QOP_AUTH) {
    /* integrity or privacy: from here on everything goes through the
     * security layer, both ways */
    c->layer = malloc(sizeof *c->layer);
    if (!c->layer || hsasl_layer_init(c->layer, qop, ha1, 0) < 0) {
      free(c->layer);
      c->layer = NULL;
      snprintf(err, errlen, "%s: SASL: cannot set up the %s security layer", c->peer,
               hsasl_qop_name(qop));
      rc = LOOM_EIO;
    }
    c->max_wrap = ch.maxbuf - HSASL_WRAP_OVERHEAD;
  }
  OPENSSL_cleanse(ha1, sizeof ha1);
  hipc_response_free(&r);
  loom__buf_free(&b);
  return rc;
}

/* KERBEROS / GSSAPI (gss.h): the server principal from the server's
 * offer krb, checked against the configured one; INITIATE with the first
 * context token, a RESPONSE to each CHALLENGE until the context is
 * complete (mutual authentication), then the security layer: the
 * server's wrapped offer answered with the strongest layer want->qops
 * allows; SUCCESS ends it. Above "none" the connection wraps with GSS. */
static int gss_exchange(hipc_client *c, const hipc_auth *want,
                        const Hadoop__Common__RpcSaslProto__SaslAuth *krb, uint64_t deadline,
                        int timeout_ms, char *err, size_t errlen) {
  char target[600], why[1200];
  if (hgss_target(krb->protocol, krb->serverid, want->principal, want->host, target, sizeof target,
                  why, sizeof why) < 0) {
    snprintf(err, errlen, "%s: %s", c->peer, why);
    return LOOM_EAUTH;
  }
  uint8_t *tok = NULL;
  size_t toklen = 0;
  int rc = hgss_start(target, false, &c->gss, &tok, &toklen, why, sizeof why);
  if (rc < 0) {
    snprintf(err, errlen, "%s: %s", c->peer, why);
    return rc;
  }
  loom__buf b;
  loom__buf_init(&b, HIPC_MAX_FRAME);
  hipc_response r = {0};
  bool done = false, layered = false;
  int layer = 0;
  size_t max_send = 0;
  Hadoop__Common__RpcSaslProto__SaslAuth chosen = HADOOP__COMMON__RPC_SASL_PROTO__SASL_AUTH__INIT;
  chosen.method = krb->method;
  chosen.mechanism = krb->mechanism;
  chosen.protocol = krb->protocol;
  chosen.serverid = krb->serverid;
  Hadoop__Common__RpcSaslProto__SaslAuth *auths[] = {&chosen};
  Hadoop__Common__RpcSaslProto out = HADOOP__COMMON__RPC_SASL_PROTO__INIT;
  out.state = HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__INITIATE;
  out.n_auths = 1;
  out.auths = auths;
  /* a handful of rounds at most: INITIATE, the AP-REP's, the layer's */
  for (int round = 0; rc == 0; round++) {
    out.has_token = 1;
    static uint8_t none[1];
    out.token.data = tok ? tok : none;
    out.token.len = toklen;
    b.len = 0;
    rc = hipc_encode_sasl(&b, c->client_id, &out.base);
    if (rc == 0) rc = send_all(c, b.p, b.len, deadline, "a Kerberos SASL message", err, errlen);
    free(tok);
    tok = NULL;
    toklen = 0;
    out.state = HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__RESPONSE;
    out.n_auths = 0;
    out.auths = NULL;
    hipc_response_free(&r);
    if (rc == 0)
      rc = read_frame(c, deadline, timeout_ms, "the Kerberos SASL answer", "SASL authentication",
                      &hadoop__common__rpc_sasl_proto__descriptor, &r, err, errlen);
    if (rc < 0) break;
    if (r.status != 0) {
      snprintf(err, errlen, "%s: Kerberos authentication was refused: %s%s%s", c->peer,
               r.exception[0] ? r.exception : "an error", r.message[0] ? ": " : "", r.message);
      rc = LOOM_EAUTH;
      break;
    }
    Hadoop__Common__RpcSaslProto *m = (Hadoop__Common__RpcSaslProto *)r.body;
    const uint8_t *in = m->has_token ? m->token.data : NULL;
    size_t n = m->has_token ? m->token.len : 0;
    if (m->state == HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__SUCCESS && done && layered) break;
    if (m->state != HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__CHALLENGE || round >= 8 ||
        layered) {
      snprintf(err, errlen, "%s: Kerberos SASL: the server answered state %d where %s was expected",
               c->peer, (int)m->state, layered ? "SUCCESS" : "CHALLENGE");
      rc = LOOM_EPROTO;
      break;
    }
    if (!done) {
      rc = hgss_step(c->gss, in, n, &tok, &toklen, &done, why, sizeof why);
    } else {
      rc = hgss_negotiate(c->gss, in, n, want->qops ? want->qops : HSASL_QOP_ALL, &layer, &max_send,
                          &tok, &toklen, why, sizeof why);
      layered = rc == 0;
    }
    if (rc < 0) snprintf(err, errlen, "%s: %s", c->peer, why);
  }
  free(tok);
  hipc_response_free(&r);
  loom__buf_free(&b);
  if (rc == 0 && layer != HGSS_LAYER_NONE) {
    c->gss_wrap = true;
    c->max_wrap = max_send;
  }
  if (rc == 0)
    loom__log(LOOM_LOG_DEBUG, "hadoop", "%s: Kerberos: %s authenticated to %s, security layer %s",
              c->peer, hgss_principal(c->gss), target,
              layer == HGSS_LAYER_PRIVACY     ? "privacy"
              : layer == HGSS_LAYER_INTEGRITY ? "integrity"
                                              : "none");
  return rc;
}

/* The SASL exchange (Hadoop's SaslRpcClient): the client asks
 * (NEGOTIATE), the server offers its mechanisms (TOKEN/DIGEST-MD5 with a
 * challenge first when it has a secret manager, then KERBEROS/GSSAPI with
 * its principal); the client takes the first one it has credentials for
 * and runs its exchange (digest_exchange, gss_exchange): a server that
 * does not know the token's password, or the service key, cannot pass. */
static int sasl_handshake(hipc_client *c, const hipc_auth *want, uint64_t deadline, int timeout_ms,
                          char *err, size_t errlen) {
  loom__buf b;
  loom__buf_init(&b, 1 << 16);
  Hadoop__Common__RpcSaslProto neg = HADOOP__COMMON__RPC_SASL_PROTO__INIT;
  neg.state = HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__NEGOTIATE;
  int rc = put_hello(&b, 0xDF);
  if (rc == 0) rc = hipc_encode_sasl(&b, c->client_id, &neg.base);
  if (rc == 0) rc = send_all(c, b.p, b.len, deadline, "the SASL negotiation", err, errlen);
  hipc_response r = {0};
  if (rc == 0)
    rc = read_frame(c, deadline, timeout_ms, "the SASL negotiation's answer", "SASL negotiation",
                    &hadoop__common__rpc_sasl_proto__descriptor, &r, err, errlen);
  if (rc == 0 && r.status != 0) {
    snprintf(err, errlen, "%s: SASL negotiation refused: %s%s%s", c->peer,
             r.exception[0] ? r.exception : "an error", r.message[0] ? ": " : "", r.message);
    rc = LOOM_EPEER;
  }
  Hadoop__Common__RpcSaslProto *m = rc == 0 ? (Hadoop__Common__RpcSaslProto *)r.body : NULL;
  Hadoop__Common__RpcSaslProto__SaslAuth *auth = NULL, *krb = NULL;
  if (m && m->state != HADOOP__COMMON__RPC_SASL_PROTO__SASL_STATE__NEGOTIATE) {
    snprintf(err, errlen, "%s: SASL: the server answered state %d to NEGOTIATE", c->peer,
             (int)m->state);
    rc = LOOM_EPROTO;
  }
  char offered[256] = "";
  for (size_t i = 0; rc == 0 && i < m->n_auths; i++) {
    Hadoop__Common__RpcSaslProto__SaslAuth *a = m->auths[i];
    size_t o = strlen(offered);
    snprintf(offered + o, sizeof offered - o, "%s%.40s/%.40s", o ? ", " : "", a->method,
             a->mechanism);
    if (!auth && want->token && !strcmp(a->method, "TOKEN") && !strcmp(a->mechanism, "DIGEST-MD5"))
      auth = a;
    if (!krb && want->kerberos && !strcmp(a->method, "KERBEROS") && !strcmp(a->mechanism, "GSSAPI"))
      krb = a;
  }
  if (rc == 0 && !auth && !krb) {
    char clean[256];
    copy_printable(clean, sizeof clean, offered);
    snprintf(err, errlen, "%s: SASL: the server offers %s, not %s", c->peer,
             clean[0] ? clean : "nothing",
             want->token && want->kerberos ? "TOKEN/DIGEST-MD5 or KERBEROS/GSSAPI"
             : want->token                 ? "TOKEN/DIGEST-MD5"
                                           : "KERBEROS/GSSAPI");
    rc = want->kerberos && !want->token ? LOOM_EAUTH : LOOM_EPROTO;
  }
  /* a token the server takes first (Hadoop's own order), else Kerberos */
  if (rc == 0 && auth) {
    rc = digest_exchange(c, want->token, auth, deadline, timeout_ms, err, errlen);
    c->token_done = rc == 0;
  } else if (rc == 0)
    rc = gss_exchange(c, want, krb, deadline, timeout_ms, err, errlen);
  hipc_response_free(&r);
  loom__buf_free(&b);
  return rc;
}

int hipc_dial(const char *host, int port, const char *peer, int timeout_ms, int *out, char *err,
              size_t errlen) {
  *out = -1;
  uint64_t deadline = loom__now_ms() + (uint64_t)timeout_ms;
  char ports[16];
  snprintf(ports, sizeof ports, "%d", port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int g = getaddrinfo(host, ports, &hints, &res);
  if (g != 0) {
    snprintf(err, errlen, "%s: cannot resolve %s: %s", peer, host, gai_strerror(g));
    return LOOM_ECONN;
  }
  int fd = -1, why = 0;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
    fd = connect_one(ai, deadline, &why);
  freeaddrinfo(res);
  if (fd < 0) {
    if (why == ETIMEDOUT)
      snprintf(err, errlen, "%s: no connection within %d ms", peer, timeout_ms);
    else
      snprintf(err, errlen, "%s: cannot connect: %s", peer, strerror(why));
    return why == ETIMEDOUT ? LOOM_ETIMEDOUT : LOOM_ECONN;
  }
  *out = fd;
  return 0;
}

int hipc_connect_auth(const char *host, int port, const char *peer, const char *protocol,
                      const char *user, const hipc_auth *a, int timeout_ms, hipc_client **out,
                      char *err, size_t errlen) {
  bool sasl = a && (a->token || a->kerberos);
  *out = NULL;
  uint64_t deadline = loom__now_ms() + (uint64_t)timeout_ms;
  int fd = -1;
  int rc0 = hipc_dial(host, port, peer, timeout_ms, &fd, err, errlen);
  if (rc0 < 0) return rc0;
  hipc_client *c = calloc(1, sizeof *c);
  if (!c) {
    close(fd);
    return LOOM_ENOMEM;
  }
  c->fd = fd;
  loom__buf_init(&c->plain, 2 * (size_t)HIPC_MAX_FRAME);
  loom__strlcpy(c->peer, peer, sizeof c->peer);
  loom__strlcpy(c->protocol, protocol, sizeof c->protocol);
  if (RAND_bytes(c->client_id, sizeof c->client_id) != 1) {
    for (size_t i = 0; i < sizeof c->client_id; i++) c->client_id[i] = (uint8_t)rand();
  }
  int rc = sasl ? sasl_handshake(c, a, deadline, timeout_ms, err, errlen) : 0;
  loom__buf b;
  loom__buf_init(&b, 1 << 16);
  if (rc == 0) {
    /* after Kerberos no user: the server takes the principal it
     * authenticated (a short name there would ask to impersonate it) */
    bool nobody = c->gss || (c->token_done && a->token_no_user);
    rc = sasl ? put_context(&b, protocol, nobody ? NULL : user, c->client_id)
              : hipc_encode_preamble(&b, protocol, user, c->client_id);
    if (rc == 0)
      rc = send_stream(c, b.p, b.len, deadline, "the connection header", err, errlen);
    else
      snprintf(err, errlen, "%s: cannot encode the connection header", peer);
  }
  loom__buf_free(&b);
  if (rc < 0) {
    hipc_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

int hipc_connect_token(const char *host, int port, const char *peer, const char *protocol,
                       const char *user, const hsasl_token *tok, int timeout_ms, hipc_client **out,
                       char *err, size_t errlen) {
  hipc_auth a = {.token = tok};
  return hipc_connect_auth(host, port, peer, protocol, user, &a, timeout_ms, out, err, errlen);
}

int hipc_connect(const char *host, int port, const char *peer, const char *protocol,
                 const char *user, int timeout_ms, hipc_client **out, char *err, size_t errlen) {
  return hipc_connect_auth(host, port, peer, protocol, user, NULL, timeout_ms, out, err, errlen);
}

int hipc_call(hipc_client *c, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, int timeout_ms,
              char *err, size_t errlen) {
  *resp = NULL;
  c->exception[0] = 0;
  if (c->fd < 0) {
    snprintf(err, errlen, "%s: %s: the connection was closed after an earlier error", c->peer,
             method);
    return LOOM_ECONN;
  }
  uint64_t deadline = loom__now_ms() + (uint64_t)timeout_ms;
  int32_t id = c->next_call++;
  loom__buf b;
  loom__buf_init(&b, HIPC_MAX_FRAME);
  int rc = hipc_encode_call(&b, id, c->client_id, c->protocol, method, req);
  char what[160];
  snprintf(what, sizeof what, "the %s call", method);
  if (rc < 0)
    snprintf(err, errlen, "%s: cannot encode %s (%s)", c->peer, what, loom_strerror(rc));
  else
    rc = send_stream(c, b.p, b.len, deadline, what, err, errlen);
  loom__buf_free(&b);
  snprintf(what, sizeof what, "reply to %s", method);
  hipc_response r = {0};
  if (rc == 0) {
    rc = read_frame(c, deadline, timeout_ms, what, method, resp_desc, &r, err, errlen);
  } else if (rc == LOOM_ECONN) {
    /* A server that refuses the connection (SIMPLE where it wants TOKEN)
     * answers the connection header with a fatal error and closes, maybe
     * before the call is sent: its answer, when it is there, says why
     * better than the broken pipe does. */
    char why[1024];
    hipc_response early = {0};
    uint64_t soon = loom__now_ms() + 1000;
    if (read_frame(c, soon, 1000, what, method, resp_desc, &early, why, sizeof why) == 0 &&
        early.status != 0) {
      r = early;
      rc = 0;
    } else {
      hipc_response_free(&early);
    }
  }
  /* a connection-level error (refused connection context, SASL wanted)
   * comes as call -1, Hadoop's INVALID_CALL_ID */
  if (rc == 0 && r.call_id != (uint32_t)id && !(r.status != 0 && r.call_id == UINT32_MAX)) {
    snprintf(err, errlen, "%s: %s: a reply to call %u where call %d was waited for", c->peer,
             method, r.call_id, id);
    rc = LOOM_EPROTO;
  } else if (rc == 0 && r.status != 0) {
    loom__strlcpy(c->exception, r.exception, sizeof c->exception);
    snprintf(err, errlen, "%s: %s failed%s: %s%s%s", c->peer, method,
             r.status == 2 ? " (fatal: connection closed)" : "",
             r.exception[0] ? r.exception : "an error without an exception class",
             r.message[0] ? ": " : "", r.message);
    rc = LOOM_EPEER;
  } else if (rc == 0) {
    *resp = r.body;
    r.body = NULL;
  }
  bool fatal = rc < 0 && !(rc == LOOM_EPEER && r.status == 1);
  hipc_response_free(&r);
  if (fatal && c->fd >= 0) {
    close(c->fd);
    c->fd = -1;
  }
  return rc;
}

const char *hipc_exception(const hipc_client *c) { return c->exception; }

void hipc_close(hipc_client *c) {
  if (!c) return;
  if (c->fd >= 0) close(c->fd);
  if (c->layer) hsasl_layer_free(c->layer);
  free(c->layer);
  hgss_free(c->gss);
  loom__buf_free(&c->plain);
  free(c);
}
