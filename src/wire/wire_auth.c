/* wire_auth.c: the handshake of wire_auth.h: the services' framings of it,
 * the server's state machine, the client's steps and its blocking helper.
 * Nothing here reads a socket except wire_auth_client_fd. */
#include "wire/wire_auth.h"
#include "wire/wire_tls.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

/* The coordinator's frame headers (wire.h): u32 len | u16 type | u16 flags
 * | u32 jlen, with no JSON and the nonce or MAC as the blob. */
#define COORD_HDR(len, type)                                                                       \
  { 0, 0, 0, (len), 0, (type), 0, 0, 0, 0, 0, 0 }
static const unsigned char coord_challenge[] = COORD_HDR(8 + WIRE_NONCE, WIRE_CHALLENGE);
static const unsigned char coord_answer[] = COORD_HDR(8 + WIRE_MAC + WIRE_NONCE, WIRE_AUTH);
static const unsigned char coord_proof[] = COORD_HDR(8 + WIRE_MAC, WIRE_AUTH_OK);

const wire_auth_proto wire_auth_coord = {
    .name = "coordinator",
    .label = "loom",
    .challenge_pre = coord_challenge,
    .challenge_pre_len = sizeof coord_challenge,
    .answer_pre = coord_answer,
    .answer_pre_len = sizeof coord_answer,
    .proof_pre = coord_proof,
    .proof_pre_len = sizeof coord_proof,
};

const wire_auth_proto wire_auth_ps = {
    .name = "parameter server",
    .label = "loom-ps",
    .challenge_pre = (const unsigned char *)"LOOMPS01",
    .challenge_pre_len = 8,
    .answer_pre = (const unsigned char *)"LOOMPS01",
    .answer_pre_len = 8,
    .proof_pre = (const unsigned char *)"",
};

const wire_auth_proto wire_auth_comm = {
    .name = "collectives' TCP link",
    .label = "loom-tcp",
    .challenge_pre = (const unsigned char *)"LOOMCOM2",
    .challenge_pre_len = 8,
    .answer_pre = (const unsigned char *)"LOOMCOM2",
    .answer_pre_len = 8,
    .proof_pre = (const unsigned char *)"",
};

size_t wire_auth_challenge_len(const wire_auth_proto *p) {
  return p->challenge_pre_len + WIRE_NONCE;
}
size_t wire_auth_answer_len(const wire_auth_proto *p) {
  return p->answer_pre_len + WIRE_MAC + WIRE_NONCE;
}
size_t wire_auth_proof_len(const wire_auth_proto *p) { return p->proof_pre_len + WIRE_MAC; }

void wire_auth_mac(const char *secret, const char *label, const char *side,
                   const unsigned char nonce[WIRE_NONCE], const void *ctx, size_t ctx_len,
                   unsigned char out[WIRE_MAC]) {
  unsigned char msg[12 + 2 + WIRE_NONCE + WIRE_AUTH_CTX_MAX];
  size_t ll = strnlen(label, 12), sl = strnlen(side, 2), n = 0;
  if (ctx_len > WIRE_AUTH_CTX_MAX) ctx_len = WIRE_AUTH_CTX_MAX;
  memcpy(msg, label, ll);
  n += ll;
  memcpy(msg + n, side, sl);
  n += sl;
  memcpy(msg + n, nonce, WIRE_NONCE);
  n += WIRE_NONCE;
  if (ctx_len) memcpy(msg + n, ctx, ctx_len);
  n += ctx_len;
  unsigned int outlen = WIRE_MAC;
  HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, n, out, &outlen);
}

/* ---- server --------------------------------------------------------------- */
int wire_auth_server_start(wire_auth_server *s, const wire_auth_proto *p, const char *secret,
                           const void *ctx, size_t ctx_len, unsigned char *out, size_t *out_len) {
  memset(s, 0, sizeof *s);
  s->p = p;
  s->secret = secret;
  s->ctx = ctx;
  s->ctx_len = ctx_len;
  s->state = WIRE_AUTH_FAILED;
  if (ctx_len > WIRE_AUTH_CTX_MAX || p->challenge_pre_len > WIRE_AUTH_PRE_MAX ||
      p->answer_pre_len > WIRE_AUTH_PRE_MAX || p->proof_pre_len > WIRE_AUTH_PRE_MAX) {
    s->why = "the handshake is misconfigured";
    return LOOM_EINVAL;
  }
  if (wire_random(s->nonce, WIRE_NONCE) < 0) {
    s->why = "no randomness for its challenge";
    return LOOM_EIO;
  }
  memcpy(out, p->challenge_pre, p->challenge_pre_len);
  memcpy(out + p->challenge_pre_len, s->nonce, WIRE_NONCE);
  *out_len = wire_auth_challenge_len(p);
  s->state = WIRE_AUTH_WAIT;
  return 0;
}

int wire_auth_server_feed(wire_auth_server *s, const void *data, size_t n, size_t *used,
                          unsigned char *out, size_t *out_len) {
  const wire_auth_proto *p = s->p;
  *used = 0;
  *out_len = 0;
  if (s->state == WIRE_AUTH_DONE) return 1;
  if (s->state != WIRE_AUTH_WAIT) {
    if (!s->why) s->why = "it spoke before the challenge";
    return LOOM_EPROTO;
  }
  size_t want = wire_auth_answer_len(p);
  size_t take = want - s->have < n ? want - s->have : n;
  memcpy(s->in + s->have, data, take);
  /* The prefix is known in advance: a byte that cannot begin an answer
   * ends the handshake now, before the rest arrives. */
  size_t pre_from = s->have, pre_to = s->have + take;
  if (pre_to > p->answer_pre_len) pre_to = p->answer_pre_len;
  s->have += take;
  *used = take;
  if (pre_from < pre_to &&
      memcmp(s->in + pre_from, p->answer_pre + pre_from, pre_to - pre_from) != 0) {
    s->state = WIRE_AUTH_FAILED;
    s->why = "it sent something other than the handshake's answer";
    return LOOM_EPROTO;
  }
  if (s->have < want) return 0;
  const unsigned char *mac = s->in + p->answer_pre_len, *cnonce = mac + WIRE_MAC;
  unsigned char expect[WIRE_MAC];
  wire_auth_mac(s->secret, p->label, "-c", s->nonce, s->ctx, s->ctx_len, expect);
  if (!wire_mac_equal(mac, expect)) {
    s->state = WIRE_AUTH_FAILED;
    s->why = "its MAC is wrong (not this job's secret?)";
    return LOOM_EAUTH;
  }
  memcpy(out, p->proof_pre, p->proof_pre_len);
  wire_auth_mac(s->secret, p->label, "-s", cnonce, s->ctx, s->ctx_len, out + p->proof_pre_len);
  *out_len = wire_auth_proof_len(p);
  s->state = WIRE_AUTH_DONE;
  return 1;
}

/* ---- client --------------------------------------------------------------- */
int wire_auth_client_answer(const wire_auth_proto *p, const char *secret, const void *ctx,
                            size_t ctx_len, const unsigned char *challenge, size_t len,
                            unsigned char cnonce[WIRE_NONCE], unsigned char *out, size_t *out_len) {
  if (ctx_len > WIRE_AUTH_CTX_MAX) return LOOM_EINVAL;
  if (len != wire_auth_challenge_len(p) ||
      memcmp(challenge, p->challenge_pre, p->challenge_pre_len) != 0)
    return LOOM_EPROTO;
  if (wire_random(cnonce, WIRE_NONCE) < 0) return LOOM_EIO;
  memcpy(out, p->answer_pre, p->answer_pre_len);
  wire_auth_mac(secret, p->label, "-c", challenge + p->challenge_pre_len, ctx, ctx_len,
                out + p->answer_pre_len);
  memcpy(out + p->answer_pre_len + WIRE_MAC, cnonce, WIRE_NONCE);
  *out_len = wire_auth_answer_len(p);
  return 0;
}

int wire_auth_client_check(const wire_auth_proto *p, const char *secret, const void *ctx,
                           size_t ctx_len, const unsigned char cnonce[WIRE_NONCE],
                           const unsigned char *proof, size_t len) {
  if (len != wire_auth_proof_len(p) || memcmp(proof, p->proof_pre, p->proof_pre_len) != 0)
    return LOOM_EAUTH;
  unsigned char want[WIRE_MAC];
  wire_auth_mac(secret, p->label, "-s", cnonce, ctx, ctx_len, want);
  return wire_mac_equal(proof + p->proof_pre_len, want) ? 0 : LOOM_EAUTH;
}

/* Moves exactly n bytes before the deadline; the fd may be non-blocking. */
static int io_exact(int fd, void *buf, size_t n, bool wr, uint64_t deadline) {
  size_t done = 0;
  while (done < n) {
    uint64_t now = loom__now_ms();
    if (now >= deadline) return LOOM_ETIMEDOUT;
    struct pollfd pf = {.fd = fd, .events = wr ? POLLOUT : POLLIN};
    uint64_t wait = deadline - now;
    /* bytes TLS holds already are not on the socket */
    int pr = !wr && wire_io_pending(fd) ? 1 : poll(&pf, 1, wait > 1000000 ? 1000000 : (int)wait);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return LOOM_EIO;
    if (pr == 0) continue; /* the deadline check above ends it */
    ssize_t r = wr ? wire_io_send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                   : wire_io_recv(fd, (char *)buf + done, n - done, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r <= 0) return LOOM_ECONN;
    done += (size_t)r;
  }
  return 0;
}

int wire_auth_client_fd(int fd, const wire_auth_proto *p, const char *secret, const void *ctx,
                        size_t ctx_len, uint64_t deadline_ms) {
  unsigned char ch[WIRE_AUTH_MSG_MAX], ans[WIRE_AUTH_MSG_MAX], proof[WIRE_AUTH_MSG_MAX];
  unsigned char cnonce[WIRE_NONCE];
  size_t ans_len;
  size_t ch_len = wire_auth_challenge_len(p), proof_len = wire_auth_proof_len(p);
  if (ch_len > sizeof ch || proof_len > sizeof proof) return LOOM_EINVAL;
  int rc = io_exact(fd, ch, ch_len, false, deadline_ms);
  if (rc < 0) return rc;
  if ((rc = wire_auth_client_answer(p, secret, ctx, ctx_len, ch, ch_len, cnonce, ans, &ans_len)) <
      0)
    return rc;
  if ((rc = io_exact(fd, ans, ans_len, true, deadline_ms)) < 0) return rc;
  /* a server that refuses the answer closes the connection */
  if ((rc = io_exact(fd, proof, proof_len, false, deadline_ms)) < 0)
    return rc == LOOM_ECONN ? LOOM_EAUTH : rc;
  return wire_auth_client_check(p, secret, ctx, ctx_len, cnonce, proof, proof_len);
}
