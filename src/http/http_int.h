/* http_int.h: the dashboard's parts, shared by the files under src/http/ and
 * nothing else: the strict request parser (parse.c), the per-job reader of
 * the job directory (store.c), the JSON and Prometheus renderers (api.c),
 * the embedded pages (page.c) and the libuv server (server.c). */
#ifndef LOOM_HTTP_INT_H
#define LOOM_HTTP_INT_H

#include "core/core.h"
#include "http/http.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Caps. Every request is untrusted and every job directory may be large:
 * what a request or a file can grow is bounded here. */
#define HTTP_MAX_LINE 8192            /* request line (414 past it) */
#define HTTP_MAX_HEAD 16384           /* request line + headers (431 past it) */
#define HTTP_MAX_HEADERS 64           /* header fields (431 past it) */
#define HTTP_MAX_CONNS 128            /* past the token check (503 beyond) */
#define HTTP_HEAD_TIMEOUT_MS 10000    /* to receive a whole request head */
#define HTTP_WRITE_TIMEOUT_MS 30000   /* to send a whole response */
#define HTTP_LINGER_MS 2000           /* to drain a client after answering */
#define HTTP_MAX_DRAIN (1u << 20)     /* bytes drained before closing anyway */
#define HTTP_MAX_RESPONSE (64u << 20) /* one response body */
#define HTTP_MAX_POINTS 2000          /* kept per (task, tag) series */
#define HTTP_MAX_SERIES 1024          /* (task, tag) series kept per job */
#define HTTP_MAX_EVENTS 1000          /* non-metric events kept per job */
#define HTTP_MAX_EVENT_LINE 65536     /* longer events.jsonl lines are skipped */
#define HTTP_MAX_KEPT_EVENT 4096      /* longer events are kept abridged */
#define HTTP_REFRESH_BYTES (8u << 20) /* events.jsonl read per request, at most */
#define HTTP_MAX_STATE (8u << 20)     /* state.json, spec.yaml */
#define HTTP_MAX_LOG_TAIL (1u << 20)  /* bytes read from a log's end */
#define HTTP_MAX_LOG_LINES 1000
#define HTTP_MAX_JOBS 16    /* job stores cached by `loom ui` */
#define HTTP_MAX_LISTED 200 /* jobs on the index page (newest first) */
#define HTTP_TOKEN_LEN 32   /* hex characters */

/* ---- parse.c: one request head ------------------------------------------ */
typedef struct {
  char method[17];
  char path[HTTP_MAX_LINE];  /* percent-decoded, checked: no "." or ".." */
  char query[HTTP_MAX_LINE]; /* raw, after '?' */
  int minor;                 /* HTTP/1.minor */
  bool head;                 /* method HEAD */
  bool has_host;
  char cookie[HTTP_MAX_LINE];
  char authorization[512];
} http_req;

/* Looks for a complete head in buf[0..len). Returns the head's length when
 * one was parsed into *r, 0 when more bytes are needed, or a negated HTTP
 * status (-400, -405, -413, -414, -431, -505) when the request must be
 * refused. A method other than GET and HEAD is -405 only once the head is
 * otherwise valid. */
int http__parse(const char *buf, size_t len, http_req *r);
/* The value of query parameter name (percent- and '+'-decoded) into out.
 * Returns 1 when found, 0 when absent, -1 when malformed or longer than
 * outlen - 1. */
int http__query(const char *query, const char *name, char *out, size_t outlen);
/* The value of cookie name from a Cookie header, as above. */
int http__cookie(const char *cookies, const char *name, char *out, size_t outlen);

/* ---- store.c: what a job directory holds, read incrementally ------------ */
typedef struct {
  int64_t step;
  double value, t;
  int attempt;
} http_point;

typedef struct {
  char task[64], tag[129], source[16];
  http_point *pts; /* grows to HTTP_MAX_POINTS, then a ring */
  size_t head, n, cap;
  uint64_t total;
} http_series;

typedef struct http_job {
  char id[160];
  char dir[4096];
  char token[HTTP_TOKEN_LEN + 1]; /* derived from the job's secret; "" if none */
  /* events.jsonl, read from where the last read stopped */
  uint64_t off;
  dev_t dev;
  ino_t ino;
  loom__buf carry; /* a line not yet ended */
  bool skipping;   /* inside a line past HTTP_MAX_EVENT_LINE */
  http_series *series;
  size_t nseries;
  char **events; /* ring of HTTP_MAX_EVENTS compact JSON objects */
  size_t ev_head, ev_n;
  uint64_t ev_total, metric_total, lines_total;
  uint64_t used; /* for eviction */
} http_job;

/* A store for the job in dir (id: its directory's name). NULL on no memory. */
http_job *http__job_new(const char *dir, const char *id);
void http__job_free(http_job *j);
/* Reads what events.jsonl gained since the last call (at most
 * HTTP_REFRESH_BYTES); starts over when the file was replaced. */
void http__job_refresh(http_job *j);
/* state.json as JSON, or NULL when missing or malformed. */
json_t *http__job_state(const http_job *j);
/* spec.yaml (written as JSON), or NULL. */
json_t *http__job_spec(const http_job *j);
/* The last n lines of logs/<file> as a JSON array of strings, or NULL
 * when the log does not exist. file must be checked by the caller. */
json_t *http__log_tail(const http_job *j, const char *file, int n, uint64_t *size);
/* The i-th point of s, oldest first. */
const http_point *http__series_at(const http_series *s, size_t i);
/* The i-th kept event, oldest first. */
const char *http__event_at(const http_job *j, size_t i);
/* The token a job's own dashboard accepts: 32 hex characters of
 * HMAC-SHA256(secret, "loom-ui" || 32 zero bytes), as the coordinator makes
 * it. "" when the job has no readable secret. */
void http__job_token(const char *dir, char out[HTTP_TOKEN_LEN + 1]);
/* true for a job id or role name we are willing to put in a path:
 * 1..159 of [A-Za-z0-9_-], the first alphanumeric. */
bool http__safe_name(const char *s);

/* ---- json helpers (api.c) ------------------------------------------------ */
/* Appends s as a JSON string: escaped, invalid UTF-8 replaced by U+FFFD. */
int http__json_str(loom__buf *b, const char *s, size_t n);
/* A JSON string of s[0..n), invalid UTF-8 replaced by U+FFFD (logs are
 * whatever bytes the tasks wrote). */
json_t *http__json_text(const char *s, size_t n);

/* ---- api.c: responses ---------------------------------------------------- */
typedef struct {
  int status;
  const char *type; /* Content-Type */
  loom__buf body;
  char extra[512]; /* further header lines, each ending in \r\n */
  bool bad;        /* the body hit its cap or memory ran out: send 500 */
} http_resp;

/* Fills r for the job's API path ("api/job", "api/tasks", "api/metrics",
 * "api/events", "api/logs", "metrics"), query the raw query. Returns false
 * when the path is not one of them. */
bool http__api(http_job *j, const char *path, const char *query, http_resp *r);
/* The index of `loom ui`: every job under jobs_root as JSON. */
void http__api_jobs(const char *jobs_root, http_resp *r);
/* A JSON error body {"error": msg}. */
void http__error(http_resp *r, int status, const char *msg);

/* ---- server.c ------------------------------------------------------------ */
typedef struct {
  bool ui;                 /* every job under root (`loom ui`), or the one job in root */
  const char *root;        /* <home>/jobs, or the job directory */
  const char *token;       /* HTTP_TOKEN_LEN hex characters */
  int port;                /* 0: an ephemeral one */
  const char *const *only; /* ui: serve only these job ids (NULL: all) */
  size_t nonly;
} http_opts;

/* http_start with every option: see http.h. */
int http__start(uv_loop_t *loop, const char *bind, const http_opts *o, http_server **out, int *port,
                char *err, size_t errlen);

/* ---- page.c -------------------------------------------------------------- */
extern const char http__job_page[];
extern const char http__index_page[];
/* The Content-Security-Policy for the pages: only their own inline script
 * (by hash) and style, and fetches to this server. */
const char *http__csp(void);

#endif
