/* wire.c: frame codec, the incremental reader, the authentication
 * handshake's pieces and blocking socket helpers. */
#include "wire/wire.h"

#include "core/bytes.h"
#include "wire/wire_auth.h"
#include "wire/wire_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void wire_frame_free(wire_frame *f) {
  if (f->json) json_decref(f->json);
  free(f->raw);
  memset(f, 0, sizeof *f);
}

int wire_encode(uint16_t type, const json_t *json, const void *blob, size_t blob_len,
                unsigned char **out, size_t *out_len) {
  char *js = NULL;
  size_t jlen = 0;
  if (json) {
    js = json_dumps(json, JSON_COMPACT);
    if (!js) return LOOM_ENOMEM;
    jlen = strlen(js);
  }
  size_t total = WIRE_HDR + jlen + blob_len;
  if (total - 4 > UINT32_MAX) {
    free(js);
    return LOOM_ERANGE;
  }
  unsigned char *p = malloc(total);
  if (!p) {
    free(js);
    return LOOM_ENOMEM;
  }
  loom__put_be32(p, (uint32_t)(total - 4));
  loom__put_be16(p + 4, type);
  loom__put_be16(p + 6, 0);
  loom__put_be32(p + 8, (uint32_t)jlen);
  if (jlen) memcpy(p + WIRE_HDR, js, jlen);
  if (blob_len) memcpy(p + WIRE_HDR + jlen, blob, blob_len);
  free(js);
  *out = p;
  *out_len = total;
  return 0;
}

void wire_reader_init(wire_reader *r, size_t max_frame) {
  loom__buf_init(&r->in, max_frame + 4 + WIRE_READ_CHUNK);
  r->max_frame = max_frame;
}

void wire_reader_limit(wire_reader *r, size_t max_frame) {
  r->max_frame = max_frame;
  r->in.max = max_frame + 4 + WIRE_READ_CHUNK;
}

void wire_reader_free(wire_reader *r) { loom__buf_free(&r->in); }

int wire_reader_push(wire_reader *r, const void *data, size_t n) {
  return loom__buf_add(&r->in, data, n) < 0 ? LOOM_EPROTO : 0;
}

int wire_reader_pop(wire_reader *r, wire_frame *f) {
  memset(f, 0, sizeof *f);
  if (r->in.len < 4) return 0;
  const unsigned char *p = (const unsigned char *)r->in.p;
  uint32_t len = loom__get_be32(p);
  if (len < WIRE_HDR - 4 || len > r->max_frame) return LOOM_EPROTO;
  if (r->in.len < 4 + (size_t)len) {
    if (r->in.len >= WIRE_HDR) {
      uint16_t type = loom__get_be16(p + 4);
      uint32_t jlen = loom__get_be32(p + 8);
      if (type == 0 || type >= WIRE_TYPE_MAX || jlen > len - 8) return LOOM_EPROTO;
    }
    return 0;
  }
  uint16_t type = loom__get_be16(p + 4);
  uint32_t jlen = loom__get_be32(p + 8);
  if (type == 0 || type >= WIRE_TYPE_MAX || jlen > len - 8) return LOOM_EPROTO;
  size_t total = 4 + (size_t)len;
  unsigned char *raw = malloc(total + 1);
  if (!raw) return LOOM_ENOMEM;
  memcpy(raw, p, total);
  raw[total] = 0;
  loom__buf_consume(&r->in, total);
  f->type = type;
  f->flags = loom__get_be16(raw + 6);
  f->raw = raw;
  if (jlen) {
    json_error_t err;
    f->json = json_loadb((const char *)raw + WIRE_HDR, jlen, JSON_REJECT_DUPLICATES, &err);
    if (!f->json || !json_is_object(f->json)) {
      wire_frame_free(f);
      return LOOM_EPROTO;
    }
  } else {
    f->json = json_object();
  }
  f->blob = raw + WIRE_HDR + jlen;
  f->blob_len = total - WIRE_HDR - jlen;
  return 1;
}

int wire_random(void *buf, size_t n) { return RAND_bytes(buf, (int)n) == 1 ? 0 : LOOM_EIO; }

void wire_mac(const char *secret, const char *label, const unsigned char *nonce,
              unsigned char out[WIRE_MAC]) {
  unsigned char msg[16 + WIRE_NONCE];
  size_t ll = strlen(label);
  if (ll > 16) ll = 16;
  memcpy(msg, label, ll);
  memcpy(msg + ll, nonce, WIRE_NONCE);
  unsigned int outlen = WIRE_MAC;
  HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, ll + WIRE_NONCE, out, &outlen);
}

bool wire_mac_equal(const unsigned char *a, const unsigned char *b) {
  return CRYPTO_memcmp(a, b, WIRE_MAC) == 0;
}

int wire_split_hostport(const char *hp, char *host, size_t hostlen, int *port) {
  const char *c = strrchr(hp, ':');
  if (!c || c == hp || (size_t)(c - hp) >= hostlen) return LOOM_EINVAL;
  long long p;
  if (loom__parse_int(c + 1, 1, 65535, &p) < 0) return LOOM_EINVAL;
  memcpy(host, hp, (size_t)(c - hp));
  host[c - hp] = 0;
  *port = (int)p;
  return 0;
}

int wire_dial(const char *hostport, int timeout_ms, int *out) {
  char host[256];
  int port;
  if (wire_split_hostport(hostport, host, sizeof host, &port) < 0) return LOOM_EINVAL;
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(host, ps, &hints, &res) != 0 || !res) return LOOM_ECONN;
  int rc = LOOM_ECONN;
  uint64_t deadline = loom__now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      *out = fd;
      rc = 0;
      break;
    }
    close(fd);
    /* The coordinator may not listen yet; retry until the deadline. */
    if (loom__now_ms() >= deadline) break;
    usleep(20000);
  }
  freeaddrinfo(res);
  return rc;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
  while (n) {
    ssize_t w = wire_io_send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return LOOM_ECONN;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int wire_send_raw(int fd, const void *buf, size_t len) { return write_all(fd, buf, len); }

int wire_send(int fd, uint16_t type, const json_t *json, const void *blob, size_t blob_len) {
  unsigned char *buf;
  size_t len;
  int rc = wire_encode(type, json, blob, blob_len, &buf, &len);
  if (rc < 0) return rc;
  rc = write_all(fd, buf, len);
  free(buf);
  return rc;
}

int wire_recv(int fd, wire_reader *r, wire_frame *f, int timeout_ms) {
  uint64_t deadline = loom__now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
  for (;;) {
    int rc = wire_reader_pop(r, f);
    if (rc != 0) return rc < 0 ? rc : 0;
    int wait = -1;
    if (timeout_ms >= 0) {
      uint64_t now = loom__now_ms();
      if (now >= deadline) return LOOM_ETIMEDOUT;
      wait = (int)(deadline - now);
    }
    if (!wire_io_pending(fd)) { /* TLS may hold bytes the socket no longer shows */
      struct pollfd pfd = {.fd = fd, .events = POLLIN};
      int pr = poll(&pfd, 1, wait);
      if (pr < 0 && errno == EINTR) continue;
      if (pr < 0) return LOOM_EIO;
      if (pr == 0) return LOOM_ETIMEDOUT;
    }
    char buf[WIRE_READ_CHUNK];
    ssize_t n = wire_io_recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return LOOM_ECONN;
    if (wire_reader_push(r, buf, (size_t)n) < 0) return LOOM_EPROTO;
  }
}

int wire_client_auth(int fd, wire_reader *r, const char *secret, int timeout_ms, char *why,
                     size_t whylen) {
  /* The handshake reads exactly its own bytes from fd, so r holds nothing
   * of it; r is the connection's reader from here on. */
  if (why && whylen) why[0] = 0;
  if (r->in.len != 0) return LOOM_EPROTO;
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : loom__now_ms() + (uint64_t)timeout_ms;
  int rc = wire_io_client(fd, secret, wire_auth_coord.label, deadline, why, whylen);
  if (rc < 0) return rc;
  rc = wire_auth_client_fd(fd, &wire_auth_coord, secret, NULL, 0, deadline);
  if (rc < 0 && why && whylen)
    snprintf(why, whylen, "%s%s", loom_strerror(rc),
             rc == LOOM_EAUTH ? " (the coordinator refused this job's secret)" : "");
  return rc;
}
