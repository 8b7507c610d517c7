/* server.c: the dashboard's HTTP server on the caller's libuv loop. One
 * request per connection (Connection: close): read a head (parse.c), check
 * the token, route, answer, shut down. Every connection has a deadline, the
 * number of connections is capped, and no request can name a file: routes
 * are a fixed table and a job is found by a checked id under the root.
 *
 * Routes, for the coordinator's own job:
 *   /                the dashboard page
 *   /api/...         the JSON API (api.c)
 *   /metrics         Prometheus
 * and for `loom ui`:
 *   /                the list of jobs;  /api/jobs  the same as JSON
 *   /job/<id>/...    each job's page, API and metrics, as above
 *
 * Access: the token in ?token=, an "Authorization: Bearer" header, or the
 * cookie the page sets (loom_<port>). None: 401; a wrong one: 403. Under
 * `loom ui` the ui token opens everything and a job's own token opens only
 * that job. Tokens are compared in constant time. A coordinator's
 * dashboard may also trust a web proxy (http_allow_proxies: YARN's
 * ResourceManager proxy, as Hadoop's AmIpFilter does): a request from one
 * of its addresses that carries no token is served. Every route is read
 * only (GET and HEAD).
 *
 * Until a request with a right token has been read, a connection is
 * anyone's: such connections are kept apart, at most LOOM_PREAUTH_MAX
 * (the oldest closed when another arrives), each closed if its request has
 * not come within LOOM_AUTH_TIMEOUT. Connections past the token check have
 * their own cap, HTTP_MAX_CONNS. What is refused, evicted or timed out is
 * logged through a rate limiter (core/ratelog.h).
 *
 * HTTPS (LOOM_DASHBOARD_CERT): every connection runs a memory TLS session
 * (wire_tls.h) of the server's certificate: what arrives goes through
 * wire_uv_tls_read into the same request parsing, the answer through
 * wire_uv_write_tls, then a close_notify. The deadlines, caps and the
 * pre-authentication queue are the same: a handshake that never ends is a
 * request that never came. A connection that does not speak TLS (a plain
 * http:// request) is closed unanswered, logged as a refusal. */
#include "http/http_int.h"
#include "jobdir/jobdir.h"
#include "core/fifo.h"
#include "core/ratelog.h"
#include "http/tls_cert.h"
#include "wireuv/wire_uv.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct conn conn;

struct http_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  bool ui, stopping;
  char root[4096];
  char token[HTTP_TOKEN_LEN + 1];
  int port;
  http_job *self;                /* not ui: the job */
  http_job *jobs[HTTP_MAX_JOBS]; /* ui: the stores of recently asked-for jobs */
  char **only;                   /* ui: the only job ids served, or NULL */
  size_t nonly;
  conn *conns;
  int nconns;
  loom__fifo pa; /* connections before the token check, oldest first */
  int nauthed, pa_max;
  unsigned auth_ms;
  loom__ratelog refused;
  uv_timer_t tick; /* reports a flood of refusals that stopped */
  int handles;     /* the listener, the tick, each connection, each rejected socket: freed at 0 */
  uint64_t clock;
  http_tls_cert *cert;                /* HTTPS: the certificate, or NULL for plain HTTP */
  char proxies[HTTP_MAX_PROXIES][64]; /* trusted web proxies' addresses (numeric) */
  int nproxies;
  char slab[WIRE_READ_CHUNK]; /* HTTPS: ciphertext as read, before TLS */
};

struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_write_t wr;
  uv_shutdown_t sd;
  http_server *s;
  conn *prev, *next;
  loom__fifo_link pa; /* in the pre-authentication queue */
  bool authed;
  char peer[64];
  bool closing, answered, draining;
  size_t drained;
  int open; /* of tcp and timer */
  size_t inlen;
  char in[HTTP_MAX_HEAD + 1];
  http_req req;
  char *out;
  wire_tls *tls; /* HTTPS: the session, or NULL */
};

static void server_release(http_server *s) {
  if (--s->handles > 0 || !s->stopping) return;
  http__job_free(s->self);
  for (size_t i = 0; i < HTTP_MAX_JOBS; i++) http__job_free(s->jobs[i]);
  for (size_t i = 0; i < s->nonly; i++) free(s->only[i]);
  free(s->only);
  http_tls_cert_free(s->cert);
  free(s);
}

static void on_conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->open > 0) return;
  http_server *s = c->s;
  free(c->out);
  wire_tls_mem_free(c->tls);
  free(c);
  server_release(s);
}

#define REFUSED "refused connections"

static void conn_close(conn *c) {
  if (c->closing) return;
  c->closing = true;
  if (c->prev)
    c->prev->next = c->next;
  else
    c->s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->s->nconns--;
  loom__fifo_remove(&c->s->pa, &c->pa);
  if (c->authed) c->s->nauthed--;
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_tick(uv_timer_t *t) {
  http_server *s = t->data;
  loom__ratelog_tick(&s->refused, "http", REFUSED);
  if (!s->refused.suppressed) uv_timer_stop(t);
}

/* A warning about someone's connection, through the rate limiter. */
static void refused(http_server *s, const char *peer, const char *done, const char *why) {
  loom__ratelog_warn(&s->refused, "http", REFUSED, peer, "dashboard: %s from %s: %s", done, peer,
                     why);
  if (s->refused.suppressed && !uv_is_active((uv_handle_t *)&s->tick) && !s->stopping)
    uv_timer_start(&s->tick, on_tick, 1000, 1000);
}

static const char *reason(int status) {
  switch (status) {
  case 200:
    return "OK";
  case 301:
    return "Moved Permanently";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 408:
    return "Request Timeout";
  case 413:
    return "Content Too Large";
  case 414:
    return "URI Too Long";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 503:
    return "Service Unavailable";
  case 505:
    return "HTTP Version Not Supported";
  default:
    return "Error";
  }
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_timeout(uv_timer_t *t);

/* The answer is sent and our side shut: read and drop what the client
 * still sends until it closes too (or HTTP_LINGER_MS pass), so that closing
 * with unread bytes does not reset the connection before the client has
 * read the answer. */
static void on_shutdown(uv_shutdown_t *req, int status) {
  conn *c = req->data;
  if (c->closing) return;
  c->draining = true;
  c->inlen = 0;
  if (status < 0 || uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
    conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_timeout, HTTP_LINGER_MS, 0);
}

static void on_written(uv_write_t *req, int status) {
  conn *c = req->data;
  if (c->closing) return;
  if (status < 0 || uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown) < 0) conn_close(c);
}

/* HTTPS: the answer's ciphertext is written (or failed: then so does what
 * follows, and the connection closes): end TLS, then TCP. */
static void on_tls_written(void *owner) {
  conn *c = owner;
  if (c->closing) return;
  if (wire_tls_mem_close(c->tls) < 0 || wire_uv_tls_flush((uv_stream_t *)&c->tcp, c->tls) < 0 ||
      uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
    conn_close(c);
}

static void on_timeout(uv_timer_t *t) {
  conn *c = t->data;
  if (!c->answered) refused(c->s, c->peer, "closed the connection", "no request in time");
  conn_close(c);
}

/* Sends r (and frees its body); the connection closes once it is sent. */
static void respond(conn *c, http_resp *r, bool head) {
  if (c->answered || c->closing) {
    loom__buf_free(&r->body);
    return;
  }
  c->answered = true;
  if (r->bad) http__error(r, 500, "the response was too large or memory ran out");
  bool html = r->type && !strncmp(r->type, "text/html", 9);
  char *hdr = loom__asprintf(
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
      "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
      "Referrer-Policy: no-referrer\r\nX-Frame-Options: DENY\r\n"
      "Content-Security-Policy: %s\r\n%sConnection: close\r\n\r\n",
      r->status, reason(r->status), r->type ? r->type : "application/json", r->body.len,
      html ? http__csp() : "default-src 'none'; frame-ancestors 'none'", r->extra);
  size_t hn = hdr ? strlen(hdr) : 0, bn = head ? 0 : r->body.len;
  c->out = hdr ? malloc(hn + bn + 1) : NULL;
  if (!c->out) {
    free(hdr);
    loom__buf_free(&r->body);
    conn_close(c);
    return;
  }
  memcpy(c->out, hdr, hn);
  if (bn) memcpy(c->out + hn, r->body.p, bn);
  free(hdr);
  loom__buf_free(&r->body);
  uv_read_stop((uv_stream_t *)&c->tcp);
  uv_timer_start(&c->timer, on_timeout, HTTP_WRITE_TIMEOUT_MS, 0);
  c->wr.data = c->sd.data = c;
  if (c->tls) {
    if (wire_uv_write_tls((uv_stream_t *)&c->tcp, c->tls, c->out, hn + bn, on_tls_written, c) < 0)
      conn_close(c);
    return;
  }
  uv_buf_t b = uv_buf_init(c->out, (unsigned)(hn + bn));
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) conn_close(c);
}

static void resp_init(http_resp *r) {
  memset(r, 0, sizeof *r);
  loom__buf_init(&r->body, HTTP_MAX_RESPONSE);
}

static void respond_error(conn *c, int status, const char *msg) {
  http_resp r;
  resp_init(&r);
  http__error(&r, status, msg);
  if (status == 405) snprintf(r.extra, sizeof r.extra, "Allow: GET, HEAD\r\n");
  if (status == 401)
    snprintf(r.extra, sizeof r.extra, "WWW-Authenticate: Bearer realm=\"loom\"\r\n");
  respond(c, &r, c->req.head);
}

/* ---- access ------------------------------------------------------------ */
static bool token_eq(const char *given, const char *want) {
  if (!want[0] || strlen(given) != HTTP_TOKEN_LEN || strlen(want) != HTTP_TOKEN_LEN) return false;
  return CRYPTO_memcmp(given, want, HTTP_TOKEN_LEN) == 0;
}

/* 0 when the request carries a token in tokens[]; 401 when it carries none,
 * 403 when none of those it carries is right. *from_query tells whether
 * the right one came in the URL (the page then sets the cookie). */
static int check_access(http_server *s, const http_req *q, const char *const *tokens, size_t n,
                        bool *from_query) {
  char given[4][HTTP_TOKEN_LEN + 1];
  int ng = 0, presented = 0;
  *from_query = false;
  int rc = http__query(q->query, "token", given[0], sizeof given[0]);
  bool in_query = rc > 0;
  if (rc != 0) presented++;
  if (rc > 0) ng++;
  if (q->authorization[0]) {
    presented++;
    if (!strncmp(q->authorization, "Bearer ", 7) &&
        loom__strlcpy(given[ng], q->authorization + 7, sizeof given[ng]) < sizeof given[ng])
      ng++;
  }
  /* Every cookie of our name (there is one per path) is a candidate. */
  char name[32];
  snprintf(name, sizeof name, "loom_%d", s->port);
  for (const char *p = q->cookie; *p && ng < 4;) {
    while (*p == ' ' || *p == ';') p++;
    const char *semi = strchr(p, ';');
    size_t len = semi ? (size_t)(semi - p) : strlen(p);
    char one[256];
    if (len < sizeof one) {
      memcpy(one, p, len);
      one[len] = 0;
      int cr = http__cookie(one, name, given[ng], sizeof given[ng]);
      if (cr != 0) presented++;
      if (cr > 0) ng++;
    }
    if (!semi) break;
    p = semi + 1;
  }
  if (presented == 0) return 401;
  bool ok = false;
  for (int g = 0; g < ng; g++)
    for (size_t k = 0; k < n; k++)
      if (tokens[k] && token_eq(given[g], tokens[k])) {
        ok = true;
        if (g == 0 && in_query) *from_query = true;
      }
  return ok ? 0 : 403;
}

/* Whether peer (a numeric address) is one of s's trusted web proxies; an
 * IPv4 address mapped into IPv6 counts as the IPv4 one. */
static bool from_proxy(const http_server *s, const char *peer) {
  if (!strncmp(peer, "::ffff:", 7) && strchr(peer, '.')) peer += 7;
  for (int i = 0; i < s->nproxies; i++)
    if (!strcmp(s->proxies[i], peer)) return true;
  return false;
}

/* check_access, and then the connection leaves the pre-authentication
 * queue for the authenticated ones: 503 when those are HTTP_MAX_CONNS. */
static int admit(conn *c, const char *const *tokens, size_t n, bool *from_query) {
  int deny = check_access(c->s, &c->req, tokens, n, from_query);
  /* no token at all, from a trusted web proxy: served, read only */
  if (deny == 401 && from_proxy(c->s, c->peer)) deny = 0;
  if (deny || c->authed) return deny;
  if (c->s->nauthed >= HTTP_MAX_CONNS) return 503;
  loom__fifo_remove(&c->s->pa, &c->pa);
  c->authed = true;
  c->s->nauthed++;
  return 0;
}

/* ---- jobs under `loom ui` --------------------------------------------- */
static http_job *ui_job(http_server *s, const char *id) {
  if (!http__safe_name(id)) return NULL;
  if (s->only) {
    bool listed = false;
    for (size_t i = 0; i < s->nonly && !listed; i++) listed = !strcmp(s->only[i], id);
    if (!listed) return NULL;
  }
  size_t victim = 0;
  for (size_t i = 0; i < HTTP_MAX_JOBS; i++) {
    http_job *j = s->jobs[i];
    if (j && !strcmp(j->id, id)) {
      j->used = ++s->clock;
      return j;
    }
    if (!j || (s->jobs[victim] && j->used < s->jobs[victim]->used)) victim = i;
  }
  char dir[sizeof s->root + 200], probe[sizeof dir + 16];
  snprintf(dir, sizeof dir, "%s/%s", s->root, id);
  jobdir_path(dir, JOBDIR_SPEC, probe, sizeof probe);
  struct stat st;
  if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || stat(probe, &st) < 0) return NULL;
  http_job *j = http__job_new(dir, id);
  if (!j) return NULL;
  http__job_token(dir, j->token);
  http__job_free(s->jobs[victim]);
  s->jobs[victim] = j;
  j->used = ++s->clock;
  return j;
}

/* ---- routing ----------------------------------------------------------- */
static void serve_page(conn *c, const char *page, const char *cookie_path, bool set_cookie) {
  http_resp r;
  resp_init(&r);
  r.status = 200;
  r.type = "text/html; charset=utf-8";
  if (loom__buf_add(&r.body, page, strlen(page)) < 0) r.bad = true;
  if (set_cookie) {
    char tok[HTTP_TOKEN_LEN + 1];
    if (http__query(c->req.query, "token", tok, sizeof tok) > 0)
      snprintf(r.extra, sizeof r.extra,
               "Set-Cookie: loom_%d=%s; Path=%s; HttpOnly; SameSite=Strict%s\r\n", c->s->port, tok,
               cookie_path, c->tls ? "; Secure" : "");
  }
  respond(c, &r, c->req.head);
}

static void redirect(conn *c, const char *to) {
  http_resp r;
  resp_init(&r);
  http__error(&r, 301, "moved");
  int n = snprintf(r.extra, sizeof r.extra, "Location: %s%s%s\r\n", to, c->req.query[0] ? "?" : "",
                   c->req.query);
  if (n < 0 || (size_t)n >= sizeof r.extra) {
    http__error(&r, 414, "the URL is too long");
    r.extra[0] = 0;
  }
  respond(c, &r, c->req.head);
}

/* A job's own paths: rest is what follows its root ("" for the page). */
static void serve_job(conn *c, http_job *j, const char *rest, const char *prefix, bool from_query) {
  if (!rest[0]) {
    serve_page(c, http__job_page, prefix, from_query);
    return;
  }
  http_resp r;
  resp_init(&r);
  if (!http__api(j, rest, c->req.query, &r)) http__error(&r, 404, "no such page");
  respond(c, &r, c->req.head);
}

static void route(conn *c) {
  http_server *s = c->s;
  const http_req *q = &c->req;
  const char *path = q->path;
  bool from_query = false;
  int deny;

  /* /job/<id>[/rest] */
  char id[160] = "";
  const char *rest = NULL;
  if (!strncmp(path, "/job/", 5)) {
    const char *e = strchr(path + 5, '/');
    size_t n = e ? (size_t)(e - (path + 5)) : strlen(path + 5);
    if (n == 0 || n >= sizeof id) {
      respond_error(c, 404, "no such job");
      return;
    }
    memcpy(id, path + 5, n);
    id[n] = 0;
    rest = e ? e + 1 : NULL;
  }

  if (!s->ui) {
    const char *tokens[] = {s->token};
    if ((deny = admit(c, tokens, 1, &from_query))) goto denied;
    serve_job(c, s->self, path + 1, "/", from_query);
    return;
  }

  if (!id[0]) {
    const char *tokens[] = {s->token};
    if ((deny = admit(c, tokens, 1, &from_query))) goto denied;
    if (!strcmp(path, "/")) {
      serve_page(c, http__index_page, "/", from_query);
    } else if (!strcmp(path, "/api/jobs")) {
      http_resp r;
      resp_init(&r);
      http__api_jobs(s->root, &r);
      if (s->only) {
        /* only the jobs named on the command line */
        json_t *all = json_loadb(r.body.p ? r.body.p : "", r.body.len, 0, NULL), *jobs, *j;
        jobs = json_object_get(all, "jobs");
        size_t i;
        json_t *keep = json_array();
        json_array_foreach(jobs, i, j) {
          const char *jid = json_string_value(json_object_get(j, "id"));
          for (size_t k = 0; jid && k < s->nonly; k++)
            if (!strcmp(jid, s->only[k])) json_array_append(keep, j);
        }
        json_object_set_new(all, "jobs", keep);
        json_object_set_new(all, "total", json_integer((json_int_t)json_array_size(keep)));
        char *txt = json_dumps(all, JSON_COMPACT);
        r.body.len = 0;
        if (!txt || loom__buf_add(&r.body, txt, strlen(txt)) < 0) r.bad = true;
        free(txt);
        json_decref(all);
      }
      respond(c, &r, q->head);
    } else {
      respond_error(c, 404, "no such page: jobs are under /job/<id>/");
    }
    return;
  }

  http_job *j = ui_job(s, id);
  const char *tokens[] = {s->token, j ? j->token : NULL};
  if ((deny = admit(c, tokens, 2, &from_query))) goto denied;
  if (!j) {
    respond_error(c, 404, "no such job");
    return;
  }
  char prefix[200];
  snprintf(prefix, sizeof prefix, "/job/%s/", id);
  if (!rest)
    redirect(c, prefix);
  else
    serve_job(c, j, rest, prefix, from_query);
  return;

denied:
  if (deny == 503) {
    respond_error(c, 503, "too many open connections; try again");
    return;
  }
  refused(s, c->peer, "refused a request", deny == 401 ? "no token" : "wrong token");
  respond_error(c, deny,
                deny == 401 ? "this dashboard needs its token: open the URL loom printed "
                              "(it ends in ?token=...)"
                            : "wrong token for this dashboard");
}

/* ---- connections ------------------------------------------------------- */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn *c = h->data;
  if (c->tls) {
    /* ciphertext: its plaintext is copied into c->in (on_plain) */
    *buf = uv_buf_init(c->s->slab, sizeof c->s->slab);
    return;
  }
  if (c->draining) c->inlen = 0;
  size_t room = sizeof c->in - 1 - c->inlen;
  if (room == 0) {
    /* full: parse once more (it refuses the oversized head) */
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = c->in + c->inlen;
  buf->len = room;
}

/* n bytes of the request in the clear: at data, or (data NULL) read into
 * c->in already. Parses what has come and answers once a head is whole
 * or refused. Returns false once the connection is answered or closing
 * (a wire_uv_plain). */
static bool on_plain(void *arg, const char *data, size_t n) {
  conn *c = arg;
  if (c->closing || c->answered) return false;
  if (data) {
    /* past the room, the head is too large: 431 below */
    size_t room = sizeof c->in - 1 - c->inlen;
    if (n > room) n = room;
    memcpy(c->in + c->inlen, data, n);
  }
  c->inlen += n;
  c->in[c->inlen] = 0;
  int rc = http__parse(c->in, c->inlen, &c->req);
  if (rc == 0) {
    if (c->inlen >= HTTP_MAX_HEAD) respond_error(c, 431, "the request head is too large");
    return !c->answered;
  }
  if (rc < 0) {
    static const struct {
      int status;
      const char *msg;
    } why[] = {
        {400, "malformed request"},
        {405, "only GET and HEAD"},
        {413, "requests here have no body"},
        {414, "the request line is too long"},
        {431, "the request head is too large"},
        {505, "only HTTP/1.0 and HTTP/1.1"},
    };
    const char *msg = "bad request";
    for (size_t i = 0; i < LOOM__ARRAY_LEN(why); i++)
      if (why[i].status == -rc) msg = why[i].msg;
    loom__log(LOOM_LOG_DEBUG, "http", "refused a request: %d %s", -rc, msg);
    respond_error(c, -rc, msg);
    return false;
  }
  loom__log(LOOM_LOG_DEBUG, "http", "%s %s", c->req.method, c->req.path);
  route(c);
  return false;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn *c = st->data;
  if (c->closing) return;
  if (c->draining) {
    if (nread < 0 || (c->drained += (size_t)nread) > HTTP_MAX_DRAIN) conn_close(c);
    return;
  }
  if (c->answered) return;
  if (nread == UV_ENOBUFS) {
    respond_error(c, 431, "the request head is too large");
    return;
  }
  if (nread < 0) {
    conn_close(c);
    return;
  }
  if (!c->tls) {
    on_plain(c, NULL, (size_t)nread);
    return;
  }
  int rc = wire_uv_tls_read(st, c->tls, buf->base, (size_t)nread, on_plain, c);
  if (rc < 0 && !c->closing) {
    char why[400];
    snprintf(why, sizeof why, "TLS: %s", wire_tls_mem_why(c->tls));
    refused(c->s, c->peer, "closed the connection", why);
    conn_close(c);
  }
}

static void on_reject_closed(uv_handle_t *h) {
  http_server *s = h->data;
  free(h);
  server_release(s);
}

/* Closes the oldest connection that has not shown a token yet. */
static void evict_oldest(http_server *s, const char *why) {
  conn *old = loom__fifo_oldest(&s->pa);
  if (!old) return;
  refused(s, old->peer, "closed the connection", why);
  conn_close(old);
}

static void on_connection(uv_stream_t *server, int status) {
  http_server *s = server->data;
  if (s->stopping) return;
  if (status < 0) {
    /* out of descriptors (libuv has closed the one waiting): make room */
    if (status == UV_EMFILE || status == UV_ENFILE)
      evict_oldest(s, "evicted: out of file descriptors");
    return;
  }
  if (s->nconns >= s->pa_max + HTTP_MAX_CONNS) {
    /* Accept and close at once, so the backlog does not fill. */
    uv_tcp_t *t = malloc(sizeof *t);
    if (!t || uv_tcp_init(s->loop, t) < 0) {
      free(t);
      return;
    }
    t->data = s;
    s->handles++;
    uv_accept(server, (uv_stream_t *)t);
    uv_close((uv_handle_t *)t, on_reject_closed);
    refused(s, "?", "refused a connection", "too many open");
    return;
  }
  if (s->pa.n >= (size_t)s->pa_max) {
    char why[96];
    snprintf(why, sizeof why, "evicted: LOOM_PREAUTH_MAX (%d) connections wait for their request",
             s->pa_max);
    evict_oldest(s, why);
  }
  conn *c = calloc(1, sizeof *c);
  if (!c) return;
  c->s = s;
  if (uv_tcp_init(s->loop, &c->tcp) < 0) {
    free(c);
    return;
  }
  uv_timer_init(s->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->open = 2;
  s->handles++; /* released once both of its handles are closed */
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  s->nconns++;
  loom__fifo_push(&s->pa, &c->pa, c);
  snprintf(c->peer, sizeof c->peer, "?");
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 ||
      (s->cert && !(c->tls = wire_tls_mem_new_ctx(s->cert->ssl_ctx))) ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
    conn_close(c);
    return;
  }
  struct sockaddr_storage sa;
  int salen = sizeof sa;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &salen) == 0) {
    if (sa.ss_family == AF_INET)
      uv_ip4_name((struct sockaddr_in *)&sa, c->peer, sizeof c->peer);
    else if (sa.ss_family == AF_INET6)
      uv_ip6_name((struct sockaddr_in6 *)&sa, c->peer, sizeof c->peer);
  }
  uv_timer_start(&c->timer, on_timeout, s->auth_ms, 0);
}

/* ---- start, stop ------------------------------------------------------- */
static void on_listener_closed(uv_handle_t *h) { server_release(h->data); }

/* The HTTPS settings: *out NULL for plain HTTP. bind NULL: only checks
 * them (a self-signed certificate is made for the address bound). */
static int tls_config(const char *bind, http_tls_cert **out, char *err, size_t errlen) {
  const char *cert = loom__tun_str(LOOM_TUN_DASHBOARD_CERT);
  const char *key = loom__tun_str(LOOM_TUN_DASHBOARD_KEY);
  *out = NULL;
  if (!cert[0]) {
    if (!key[0]) return 0;
    snprintf(err, errlen,
             "LOOM_DASHBOARD_KEY=%s is set but LOOM_DASHBOARD_CERT is not: set it to the key's "
             "certificate file (or unset LOOM_DASHBOARD_KEY)",
             key);
    return LOOM_EINVAL;
  }
  if (strcmp(cert, "self-signed") != 0)
    return http_tls_cert_load("LOOM_DASHBOARD_CERT", cert, "LOOM_DASHBOARD_KEY", key, out, err,
                              errlen);
  if (key[0]) {
    snprintf(err, errlen,
             "LOOM_DASHBOARD_KEY=%s: with LOOM_DASHBOARD_CERT=self-signed loom makes its own key; "
             "unset LOOM_DASHBOARD_KEY, or set LOOM_DASHBOARD_CERT to the key's certificate",
             key);
    return LOOM_EINVAL;
  }
  if (!bind) return 0;
  /* the names a browser may reach it by: the address, or for every
   * interface loopback (the URL printed) and this host's name */
  const char *names[4];
  size_t n = 0;
  char host[256] = "";
  if (strcmp(bind, "0.0.0.0") && strcmp(bind, "::")) {
    names[n++] = bind;
  } else {
    names[n++] = "127.0.0.1";
    names[n++] = "::1";
    if (gethostname(host, sizeof host - 1) == 0 && host[0] &&
        strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") ==
            strlen(host) &&
        strcmp(host, "localhost"))
      names[n++] = host;
  }
  names[n++] = "localhost";
  return http_tls_cert_self_signed(names, n, out, err, errlen);
}

int http_tls_check(char *err, size_t errlen) {
  http_tls_cert *c = NULL;
  int rc = tls_config(NULL, &c, err, errlen);
  http_tls_cert_free(c);
  return rc;
}

const char *http_scheme(const http_server *s) { return s && s->cert ? "https" : "http"; }

const char *http_fingerprint(const http_server *s) {
  return s && s->cert && s->cert->self_signed ? s->cert->fingerprint : NULL;
}

int http__start(uv_loop_t *loop, const char *bind, const http_opts *o, http_server **out, int *port,
                char *err, size_t errlen) {
  *out = NULL;
  if (!loop || !bind || !o || !o->root || !o->token || strlen(o->token) != HTTP_TOKEN_LEN) {
    snprintf(err, errlen, "http: bad arguments");
    return LOOM_EINVAL;
  }
  http_server *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return LOOM_ENOMEM;
  }
  s->loop = loop;
  s->ui = o->ui;
  loom__strlcpy(s->root, o->root, sizeof s->root);
  for (size_t n = strlen(s->root); n > 1 && s->root[n - 1] == '/';) s->root[--n] = 0;
  loom__strlcpy(s->token, o->token, sizeof s->token);
  long long pa_max = loom__tun(LOOM_TUN_PREAUTH_MAX);
  s->pa_max = pa_max < 1 ? 1 : pa_max > 1 << 20 ? 1 << 20 : (int)pa_max;
  long long auth_ms = loom__tun(LOOM_TUN_AUTH_TIMEOUT_MS);
  s->auth_ms = auth_ms < 1                      ? 1
               : auth_ms > HTTP_HEAD_TIMEOUT_MS ? HTTP_HEAD_TIMEOUT_MS
                                                : (unsigned)auth_ms;
  if (!s->ui) {
    const char *slash = strrchr(s->root, '/');
    s->self = http__job_new(s->root, slash ? slash + 1 : s->root);
    if (!s->self) goto nomem;
    loom__strlcpy(s->self->token, o->token, sizeof s->self->token);
  }
  if (o->only) {
    if (!(s->only = calloc(o->nonly + 1, sizeof *s->only))) goto nomem;
    for (size_t i = 0; i < o->nonly; i++)
      if (!(s->only[s->nonly++] = strdup(o->only[i]))) goto nomem;
  }
  struct sockaddr_storage sa;
  if (uv_ip4_addr(bind, o->port, (struct sockaddr_in *)&sa) != 0 &&
      uv_ip6_addr(bind, o->port, (struct sockaddr_in6 *)&sa) != 0) {
    snprintf(err, errlen, "'%s' is not an IP address to listen on", bind);
    s->stopping = true;
    s->handles = 1;
    server_release(s);
    return LOOM_EINVAL;
  }
  int trc = tls_config(bind, &s->cert, err, errlen);
  if (trc < 0) {
    s->stopping = true;
    s->handles = 1;
    server_release(s);
    return trc;
  }
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  s->handles = 1;
  int rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&sa, 0);
  /* a deep backlog: a flood is accepted and evicted, not left to drop SYNs */
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection);
  if (rc < 0) {
    snprintf(err, errlen, "cannot listen on %s:%d: %s%s", bind, o->port, uv_strerror(rc),
             rc == UV_EADDRINUSE ? " (choose another port with --port)" : "");
    s->stopping = true;
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
    return LOOM_EIO;
  }
  struct sockaddr_storage got;
  int len = sizeof got;
  uv_tcp_getsockname(&s->listener, (struct sockaddr *)&got, &len);
  s->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                            : ((struct sockaddr_in *)&got)->sin_port);
  *port = s->port;
  uv_timer_init(loop, &s->tick);
  s->tick.data = s;
  uv_unref((uv_handle_t *)&s->tick);
  s->handles++;
  *out = s;
  return 0;
nomem:
  snprintf(err, errlen, "out of memory");
  s->stopping = true;
  s->handles = 1;
  server_release(s);
  return LOOM_ENOMEM;
}

int http_allow_proxies(http_server *s, const char *const *addrs, int n) {
  if (n > HTTP_MAX_PROXIES || s->ui) return LOOM_EINVAL;
  s->nproxies = 0;
  for (int i = 0; i < n; i++) {
    unsigned char bin[sizeof(struct in6_addr)];
    int af = strchr(addrs[i], ':') ? AF_INET6 : AF_INET;
    /* the form the peer's address is written in (inet_ntop's) */
    if (inet_pton(af, addrs[i], bin) != 1 ||
        !inet_ntop(af, bin, s->proxies[s->nproxies], sizeof s->proxies[0]))
      return LOOM_EINVAL;
    s->nproxies++;
  }
  return 0;
}

int http_start(uv_loop_t *loop, const char *bind, const char *job_dir, const char *token,
               http_server **out, int *port, char *err, size_t errlen) {
  http_opts o = {.ui = false, .root = job_dir, .token = token};
  return http__start(loop, bind, &o, out, port, err, errlen);
}

void http_stop(http_server *s) {
  if (!s || s->stopping) return;
  s->stopping = true;
  while (s->conns) conn_close(s->conns);
  loom__ratelog_flush(&s->refused, "http", REFUSED);
  uv_close((uv_handle_t *)&s->tick, on_listener_closed);
  uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}
