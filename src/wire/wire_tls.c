/* wire_tls.c: TLS 1.3 with the job secret as external PSK (wire_tls.h). */
#include "wire/wire_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PSK_LEN 32
#ifndef READ_AHEAD
#define READ_AHEAD (64 * 1024)
#endif
#define ID_MAX 32

struct wire_tls {
  SSL *ssl;
  bool server, failed;
  unsigned char key[PSK_LEN];
  char id[ID_MAX];
  size_t idlen;
  pthread_mutex_t mu;    /* descriptor sessions: one SSL call at a time */
  BIO *out;              /* in memory: the ciphertext to send */
  unsigned char *queued; /* in memory: plaintext written before the handshake ended */
  size_t queued_len;
  char why[320];
};

/* ---- policy ---- */

const char *wire_tls_policy(void) { return loom__tun_str(LOOM_TUN_TLS); }

static bool loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_UNIX) return true;
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(a)) return true;
    if (IN6_IS_ADDR_V4MAPPED(a)) return a->s6_addr[12] == 127;
  }
  return false;
}

bool wire_tls_wanted_addrs(const void *local, const void *peer) {
  const char *p = wire_tls_policy();
  if (strcmp(p, "on") == 0) return true;
  if (strcmp(p, "off") == 0) return false;
  return !(local && peer && loopback(local) && loopback(peer));
}

bool wire_tls_wanted(int fd) {
  struct sockaddr_storage l, p;
  socklen_t ll = sizeof l, pl = sizeof p;
  bool ok = getsockname(fd, (struct sockaddr *)&l, &ll) == 0 &&
            getpeername(fd, (struct sockaddr *)&p, &pl) == 0;
  return wire_tls_wanted_addrs(ok ? (void *)&l : NULL, ok ? (void *)&p : NULL);
}

/* ---- contexts and keys ---- */

static SSL_CTX *ctx_client, *ctx_server;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static int ex_index = -1;

static SSL_SESSION *psk_session(SSL *ssl, const wire_tls *t) {
  static const unsigned char aes128gcm[2] = {0x13, 0x01};
  const SSL_CIPHER *ci = SSL_CIPHER_find(ssl, aes128gcm);
  SSL_SESSION *s = ci ? SSL_SESSION_new() : NULL;
  if (!s) return NULL;
  if (!SSL_SESSION_set1_master_key(s, t->key, PSK_LEN) || !SSL_SESSION_set_cipher(s, ci) ||
      !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
    SSL_SESSION_free(s);
    return NULL;
  }
  return s;
}

static int use_cb(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                  SSL_SESSION **sess) {
  const wire_tls *t = SSL_get_ex_data(ssl, ex_index);
  *sess = NULL;
  if (!t) return 0;
  if (md && md != EVP_sha256()) return 1; /* the server picked a suite we have no key for */
  if (!(*sess = psk_session(ssl, t))) return 0;
  *id = (const unsigned char *)t->id;
  *idlen = t->idlen;
  return 1;
}

static int find_cb(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess) {
  const wire_tls *t = SSL_get_ex_data(ssl, ex_index);
  *sess = NULL;
  if (!t) return 0;
  /* another identity: no key, and the handshake fails (no certificate) */
  if (idlen != t->idlen || memcmp(id, t->id, idlen) != 0) return 1;
  return (*sess = psk_session(ssl, t)) ? 1 : 0;
}

static SSL_CTX *make_ctx(bool server) {
  SSL_CTX *c = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!c) return NULL;
  if (!SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) ||
      !SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION) ||
      !SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256")) {
    SSL_CTX_free(c);
    return NULL;
  }
  SSL_CTX_set_options(c, SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  if (server) {
    SSL_CTX_set_num_tickets(c, 0);
    SSL_CTX_set_psk_find_session_callback(c, find_cb);
  } else {
    SSL_CTX_set_psk_use_session_callback(c, use_cb);
  }
  return c;
}

static void ctx_init(void) {
  ex_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
  ctx_client = make_ctx(false);
  ctx_server = make_ctx(true);
}

static wire_tls *tls_new(bool server, const char *secret, const char *label) {
  pthread_once(&ctx_once, ctx_init);
  SSL_CTX *ctx = server ? ctx_server : ctx_client;
  if (!ctx || ex_index < 0) return NULL;
  wire_tls *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->server = server;
  int n = snprintf(t->id, sizeof t->id, "loom-tls/%.16s", label);
  t->idlen = (size_t)n < sizeof t->id ? (size_t)n : sizeof t->id - 1;
  char info[64];
  int il = snprintf(info, sizeof info, "loom-tls-psk %.16s", label);
  unsigned int kl = 0;
  HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)info, (size_t)il, t->key,
       &kl);
  pthread_mutex_init(&t->mu, NULL);
  if (kl != PSK_LEN || !(t->ssl = SSL_new(ctx)) || !SSL_set_ex_data(t->ssl, ex_index, t)) {
    if (t->ssl) SSL_free(t->ssl);
    pthread_mutex_destroy(&t->mu);
    OPENSSL_cleanse(t->key, sizeof t->key);
    free(t);
    return NULL;
  }
  if (server)
    SSL_set_accept_state(t->ssl);
  else
    SSL_set_connect_state(t->ssl);
  return t;
}

static void tls_free(wire_tls *t) {
  if (!t) return;
  SSL_free(t->ssl); /* frees the BIOs it owns */
  pthread_mutex_destroy(&t->mu);
  OPENSSL_cleanse(t->key, sizeof t->key);
  free(t->queued);
  free(t);
}

/* What a failed SSL call means, with a clause for the log in t->why. */
static int tls_error(wire_tls *t, int ret) {
  int e = SSL_get_error(t->ssl, ret);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    ERR_clear_error();
    return 0;
  }
  if (e == SSL_ERROR_ZERO_RETURN) {
    snprintf(t->why, sizeof t->why, "the peer closed the TLS connection");
    ERR_clear_error();
    return LOOM_ECONN;
  }
  unsigned long err = ERR_peek_last_error();
  int reason = ERR_GET_REASON(err);
  char buf[120] = "";
  if (err) ERR_error_string_n(err, buf, sizeof buf);
  ERR_clear_error();
  t->failed = true;
  bool done = SSL_is_init_finished(t->ssl);
  if (e == SSL_ERROR_SYSCALL && !err) {
    snprintf(t->why, sizeof t->why, "the connection closed%s",
             done ? "" : " during the TLS handshake (a peer with LOOM_TLS=off, or another job?)");
    return LOOM_ECONN;
  }
  /* a session of a caller's context (a certificate, no PSK): no secret to blame */
  bool psk = t->idlen > 0;
  if (!done && !psk && reason == SSL_R_HTTP_REQUEST) {
    snprintf(t->why, sizeof t->why, "a plain HTTP request, not TLS (%s)", buf);
    return LOOM_EPROTO;
  }
  if (!done && (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
                reason == SSL_R_UNEXPECTED_MESSAGE || reason == SSL_R_HTTP_REQUEST ||
                reason == SSL_R_UNSUPPORTED_PROTOCOL)) {
    if (!psk) {
      snprintf(t->why, sizeof t->why, "the peer does not speak TLS (%s)", buf);
      return LOOM_EPROTO;
    }
    snprintf(t->why, sizeof t->why,
             "the peer does not speak TLS (LOOM_TLS=off there? this side's is %s): %s",
             wire_tls_policy(), buf);
    return LOOM_EPROTO;
  }
  if (!done && reason == SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC) {
    snprintf(t->why, sizeof t->why,
             "the TLS handshake failed: the peer's records do not decrypt (a replayed or altered "
             "connection) (%s)",
             buf);
    return LOOM_EAUTH;
  }
  if (!done && !psk) {
    snprintf(t->why, sizeof t->why, "the TLS handshake failed (%s)", buf);
    return LOOM_EAUTH;
  }
  if (!done) {
    snprintf(t->why, sizeof t->why,
             "the TLS handshake failed: the two sides do not hold the same job secret (%s)", buf);
    return LOOM_EAUTH;
  }
  snprintf(t->why, sizeof t->why, "TLS failed: %s", buf[0] ? buf : "I/O error");
  return LOOM_ECONN;
}

/* ---- on a descriptor ---- */

/* Sessions by descriptor: 1024 pages of 1024, a page made on first use. */
#define FD_PAGE 1024
#define FD_PAGES 1024
static _Atomic(wire_tls *) *fd_pages[FD_PAGES];
static pthread_mutex_t fd_mu = PTHREAD_MUTEX_INITIALIZER;

static _Atomic(wire_tls *) *fd_slot(int fd, bool make) {
  if (fd < 0 || fd >= FD_PAGE * FD_PAGES) return NULL;
  _Atomic(wire_tls *) *page = __atomic_load_n(&fd_pages[fd / FD_PAGE], __ATOMIC_ACQUIRE);
  if (!page && make) {
    pthread_mutex_lock(&fd_mu);
    page = fd_pages[fd / FD_PAGE];
    if (!page && (page = calloc(FD_PAGE, sizeof *page)))
      __atomic_store_n(&fd_pages[fd / FD_PAGE], page, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fd_mu);
  }
  return page ? &page[fd % FD_PAGE] : NULL;
}

static wire_tls *fd_tls(int fd) {
  _Atomic(wire_tls *) *s = fd_slot(fd, false);
  return s ? atomic_load(s) : NULL;
}

/* A socket BIO that never raises SIGPIPE (OpenSSL's writes with write(2),
 * and a peer gone would kill a libloom program that does not ignore it). */
static BIO_METHOD *sock_method;

static int sock_fd(BIO *b) { return (int)(intptr_t)BIO_get_data(b); }

static int sock_write(BIO *b, const char *buf, int len) {
  ssize_t r = send(sock_fd(b), buf, (size_t)len, MSG_NOSIGNAL);
  BIO_clear_retry_flags(b);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
  return (int)r;
}

static int sock_read(BIO *b, char *buf, int len) {
  ssize_t r = recv(sock_fd(b), buf, (size_t)len, 0);
  BIO_clear_retry_flags(b);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
  if (r == 0 && len > 0) BIO_set_flags(b, BIO_FLAGS_IN_EOF);
  return (int)r;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)num, (void)ptr;
  if (cmd == BIO_CTRL_FLUSH) return 1;
  if (cmd == BIO_CTRL_EOF) return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
  return 0;
}

static int sock_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static void sock_method_init(void) {
  BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "loom socket");
  if (m && BIO_meth_set_write(m, sock_write) && BIO_meth_set_read(m, sock_read) &&
      BIO_meth_set_ctrl(m, sock_ctrl) && BIO_meth_set_create(m, sock_create))
    sock_method = m;
  else
    BIO_meth_free(m);
}

int wire_io_attach(int fd, bool server, const char *secret, const char *label) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, sock_method_init);
  _Atomic(wire_tls *) *slot = fd_slot(fd, true);
  if (!slot) return fd < 0 || fd >= FD_PAGE * FD_PAGES ? LOOM_EINVAL : LOOM_ENOMEM;
  /* a session left on this number belonged to a descriptor closed without
   * wire_io_close: fd is a new one, the old session is stale */
  tls_free(atomic_exchange(slot, NULL));
  wire_tls *t = tls_new(server, secret, label);
  if (!t) return LOOM_EIO;
  int fl = fcntl(fd, F_GETFL);
  BIO *b = sock_method ? BIO_new(sock_method) : NULL;
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || !b) {
    BIO_free(b);
    tls_free(t);
    return LOOM_EIO;
  }
  BIO_set_data(b, (void *)(intptr_t)fd);
  SSL_set_bio(t->ssl, b, b); /* one reference, owned by t->ssl */
  /* read as much as the socket has: a recv per record costs twice the
   * syscalls (measured: a 64 MiB allreduce 2.3x slower without) */
  SSL_set_read_ahead(t->ssl, 1);
  SSL_set_default_read_buffer_len(t->ssl, READ_AHEAD);
  atomic_store(slot, t);
  return 0;
}

bool wire_io_secure(int fd) { return fd_tls(fd) != NULL; }

static int handshake_step(wire_tls *t, bool *want_write) {
  int r = SSL_do_handshake(t->ssl);
  if (r == 1) return 1;
  int e = SSL_get_error(t->ssl, r);
  if (want_write) *want_write = e == SSL_ERROR_WANT_WRITE;
  return tls_error(t, r);
}

static void copy_why(const wire_tls *t, char *why, size_t whylen) {
  if (why && whylen) snprintf(why, whylen, "%s", t->why[0] ? t->why : "TLS failed");
}

int wire_io_handshake(int fd, bool *want_write, char *why, size_t whylen) {
  wire_tls *t = fd_tls(fd);
  if (!t) return 1;
  pthread_mutex_lock(&t->mu);
  int rc = t->failed ? LOOM_ECONN : handshake_step(t, want_write);
  pthread_mutex_unlock(&t->mu);
  if (rc < 0) copy_why(t, why, whylen);
  return rc;
}

int wire_io_handshake_wait(int fd, uint64_t deadline_ms, char *why, size_t whylen) {
  for (;;) {
    bool ww = false;
    int rc = wire_io_handshake(fd, &ww, why, whylen);
    if (rc != 0) return rc < 0 ? rc : 0;
    uint64_t now = loom__now_ms();
    if (now >= deadline_ms) {
      if (why && whylen)
        snprintf(why, whylen, "no TLS handshake before the deadline (a peer with LOOM_TLS=off?)");
      return LOOM_ETIMEDOUT;
    }
    uint64_t wait = deadline_ms - now;
    struct pollfd p = {.fd = fd, .events = ww ? POLLOUT : POLLIN};
    if (poll(&p, 1, wait > 1000000 ? 1000000 : (int)wait) < 0 && errno != EINTR) {
      if (why && whylen) snprintf(why, whylen, "poll: %s", strerror(errno));
      return LOOM_EIO;
    }
  }
}

int wire_io_client(int fd, const char *secret, const char *label, uint64_t deadline_ms, char *why,
                   size_t whylen) {
  if (!wire_tls_wanted(fd)) return 0;
  int rc = wire_io_attach(fd, false, secret, label);
  if (rc < 0) {
    if (why && whylen) snprintf(why, whylen, "cannot start TLS");
    return rc;
  }
  return wire_io_handshake_wait(fd, deadline_ms, why, whylen);
}

/* One SSL_read or SSL_write; waits for the descriptor (outside the lock)
 * unless the caller said MSG_DONTWAIT. */
static ssize_t tls_io(int fd, wire_tls *t, void *buf, size_t n, int flags, bool wr) {
  for (;;) {
    pthread_mutex_lock(&t->mu);
    if (t->failed) {
      pthread_mutex_unlock(&t->mu);
      errno = ECONNRESET;
      return -1;
    }
    size_t got = 0;
    int r = wr ? SSL_write_ex(t->ssl, buf, n, &got) : SSL_read_ex(t->ssl, buf, n, &got);
    int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(t->ssl, 0);
    int rc = r == 1 ? 0 : tls_error(t, 0);
    pthread_mutex_unlock(&t->mu);
    if (r == 1) return (ssize_t)got;
    if (rc == LOOM_ECONN && !wr && e == SSL_ERROR_ZERO_RETURN) return 0;
    if (rc < 0) {
      loom__log(LOOM_LOG_DEBUG, "wire", "fd %d: %s", fd, t->why);
      errno = ECONNRESET;
      return -1;
    }
    if (flags & MSG_DONTWAIT) {
      errno = EAGAIN;
      return -1;
    }
    struct pollfd p = {.fd = fd, .events = e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
  }
}

ssize_t wire_io_send(int fd, const void *buf, size_t n, int flags) {
  wire_tls *t = fd_tls(fd);
  if (!t) return send(fd, buf, n, flags | MSG_NOSIGNAL);
  if (n == 0) return 0;
  return tls_io(fd, t, (void *)buf, n, flags, true);
}

ssize_t wire_io_recv(int fd, void *buf, size_t n, int flags) {
  wire_tls *t = fd_tls(fd);
  if (!t) return recv(fd, buf, n, flags);
  if (n == 0) return 0;
  return tls_io(fd, t, buf, n, flags, false);
}

ssize_t wire_io_sendv(int fd, const struct iovec *iov, int n, int flags) {
  if (!fd_tls(fd)) {
    struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    return sendmsg(fd, &mh, flags | MSG_NOSIGNAL);
  }
  /* small messages in one record; large ones piece by piece, stopping at
   * the first piece not taken whole (a retry starts where this stopped,
   * with the same bytes, as TLS requires) */
  unsigned char small[4096];
  size_t total = 0;
  for (int i = 0; i < n; i++) total += iov[i].iov_len;
  if (total <= sizeof small) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
      memcpy(small + off, iov[i].iov_base, iov[i].iov_len);
      off += iov[i].iov_len;
    }
    return wire_io_send(fd, small, total, flags);
  }
  ssize_t done = 0;
  for (int i = 0; i < n; i++) {
    if (!iov[i].iov_len) continue;
    ssize_t w = wire_io_send(fd, iov[i].iov_base, iov[i].iov_len, flags);
    if (w < 0) return done ? done : -1;
    done += w;
    if ((size_t)w < iov[i].iov_len) break;
  }
  return done;
}

bool wire_io_pending(int fd) {
  wire_tls *t = fd_tls(fd);
  if (!t) return false;
  pthread_mutex_lock(&t->mu);
  /* decrypted bytes; or read-ahead bytes, which are worth a read only when
   * they hold a whole record (peeking decrypts it, or says it needs more) */
  bool p = SSL_pending(t->ssl) > 0;
  if (!p && !t->failed && SSL_has_pending(t->ssl)) {
    unsigned char b;
    size_t got = 0;
    int r = SSL_peek_ex(t->ssl, &b, 1, &got);
    int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(t->ssl, 0);
    /* an error is for the next read to report */
    p = r == 1 || (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE);
    ERR_clear_error();
  }
  pthread_mutex_unlock(&t->mu);
  return p;
}

void wire_io_detach(int fd) {
  _Atomic(wire_tls *) *s = fd_slot(fd, false);
  if (!s) return;
  wire_tls *t = atomic_exchange(s, NULL);
  tls_free(t);
}

int wire_io_close(int fd) {
  wire_io_detach(fd);
  return close(fd);
}

/* ---- in memory ---- */

static wire_tls *mem_bios(wire_tls *t);

wire_tls *wire_tls_mem_new(bool server, const char *secret, const char *label) {
  return mem_bios(tls_new(server, secret, label));
}

wire_tls *wire_tls_mem_new_ctx(void *ssl_ctx) {
  pthread_once(&ctx_once, ctx_init);
  wire_tls *t = ex_index >= 0 ? calloc(1, sizeof *t) : NULL;
  if (!t) return NULL;
  t->server = true;
  pthread_mutex_init(&t->mu, NULL);
  if (!(t->ssl = SSL_new(ssl_ctx)) || !SSL_set_ex_data(t->ssl, ex_index, t)) {
    tls_free(t);
    return NULL;
  }
  SSL_set_accept_state(t->ssl);
  return mem_bios(t);
}

static wire_tls *mem_bios(wire_tls *t) {
  if (!t) return NULL;
  BIO *in = BIO_new(BIO_s_mem()), *out = BIO_new(BIO_s_mem());
  if (!in || !out) {
    BIO_free(in);
    BIO_free(out);
    tls_free(t);
    return NULL;
  }
  BIO_set_mem_eof_return(in, -1); /* empty: "retry", not end of stream */
  SSL_set_bio(t->ssl, in, out);   /* t->ssl owns both */
  t->out = out;
  /* a coordinator holds thousands: no buffers while idle */
  SSL_set_mode(t->ssl, SSL_MODE_RELEASE_BUFFERS);
  /* a fresh client's ClientHello, for take() */
  if (!t->server && !SSL_is_init_finished(t->ssl)) SSL_do_handshake(t->ssl);
  ERR_clear_error();
  return t;
}

void wire_tls_mem_free(wire_tls *t) { tls_free(t); }

wire_tls *wire_io_take(int fd, int *err) {
  *err = 0;
  _Atomic(wire_tls *) *s = fd_slot(fd, false);
  wire_tls *t = s ? atomic_exchange(s, NULL) : NULL;
  if (!t) return NULL;
  /* the socket BIO is freed; what it read ahead stays in the SSL */
  if (!(t = mem_bios(t))) *err = LOOM_ENOMEM;
  return t;
}

int wire_tls_mem_feed(wire_tls *t, const void *data, size_t n) {
  while (n) {
    size_t w = 0;
    if (!BIO_write_ex(SSL_get_rbio(t->ssl), data, n, &w)) return LOOM_ENOMEM;
    data = (const char *)data + w;
    n -= w;
  }
  return 0;
}

static int flush_queued(wire_tls *t) {
  while (t->queued_len) {
    size_t w = 0;
    if (SSL_write_ex(t->ssl, t->queued, t->queued_len, &w) != 1) {
      int rc = tls_error(t, 0);
      return rc < 0 ? rc : 0;
    }
    memmove(t->queued, t->queued + w, t->queued_len - w);
    t->queued_len -= w;
  }
  return 0;
}

int wire_tls_mem_read(wire_tls *t, void *buf, size_t cap, size_t *got) {
  *got = 0;
  if (t->failed) return LOOM_ECONN;
  if (!SSL_is_init_finished(t->ssl)) {
    int rc = handshake_step(t, NULL);
    if (rc <= 0) return rc;
  }
  int rc = flush_queued(t);
  if (rc < 0 || cap == 0) return rc;
  if (SSL_read_ex(t->ssl, buf, cap, got) == 1) return 0;
  *got = 0;
  return tls_error(t, 0);
}

int wire_tls_mem_write(wire_tls *t, const void *data, size_t n) {
  if (t->failed) return LOOM_ECONN;
  if (!SSL_is_init_finished(t->ssl) || t->queued_len) {
    unsigned char *q = realloc(t->queued, t->queued_len + n);
    if (!q) return LOOM_ENOMEM;
    memcpy(q + t->queued_len, data, n);
    t->queued = q;
    t->queued_len += n;
    return SSL_is_init_finished(t->ssl) ? flush_queued(t) : 0;
  }
  while (n) {
    size_t w = 0;
    if (SSL_write_ex(t->ssl, data, n, &w) != 1) {
      int rc = tls_error(t, 0);
      return rc < 0 ? rc : LOOM_EIO; /* a memory BIO never wants more */
    }
    data = (const char *)data + w;
    n -= w;
  }
  return 0;
}

int wire_tls_mem_take(wire_tls *t, unsigned char **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  size_t n = BIO_ctrl_pending(t->out);
  if (!n) return 0;
  unsigned char *b = malloc(n);
  if (!b) return LOOM_ENOMEM;
  size_t r = 0;
  if (!BIO_read_ex(t->out, b, n, &r) || r != n) {
    free(b);
    return LOOM_EIO;
  }
  *buf = b;
  *len = n;
  return 0;
}

int wire_tls_mem_close(wire_tls *t) {
  if (t->failed || !SSL_is_init_finished(t->ssl)) return 0;
  int r = SSL_shutdown(t->ssl);
  if (r < 0) {
    int rc = tls_error(t, r);
    return rc < 0 ? rc : 0;
  }
  return 0;
}

bool wire_tls_mem_done(const wire_tls *t) { return SSL_is_init_finished(t->ssl); }

const char *wire_tls_mem_why(const wire_tls *t) { return t->why[0] ? t->why : "TLS failed"; }
