/* http.h: the job's web dashboard and JSON API, served from what the
 * coordinator writes to the job directory (state.json, events.jsonl with
 * metric events, logs/). The coordinator runs one for its live job; `loom
 * ui` runs one over finished jobs. Every request needs the job's token.
 *
 * A job's paths ("/" for the coordinator's, "/job/<id>/" under `loom ui`):
 * the page itself, api/job, api/tasks, api/metrics, api/events, api/logs
 * (JSON) and metrics (Prometheus text); `loom ui` adds "/" (the list of
 * jobs) and api/jobs. See api.c for each one's query parameters. */
#ifndef LOOM_HTTP_H
#define LOOM_HTTP_H

#include <uv.h>

typedef struct http_server http_server;

/* Serves the job in job_dir on loop, listening on bind (e.g. "127.0.0.1")
 * with an ephemeral port written to *port. Requests must carry token
 * (?token=... or the cookie the page sets); others get 401/403. On error
 * returns a negative LOOM_E* code with a message in err (LOOM_EINVAL for
 * bad HTTPS settings, see below). */
int http_start(uv_loop_t *loop, const char *bind, const char *job_dir, const char *token,
               http_server **out, int *port, char *err, size_t errlen);
/* At most this many trusted web proxy addresses. */
#define HTTP_MAX_PROXIES 16
/* Trusts the web proxy at addrs (n numeric IPv4 or IPv6 addresses, e.g.
 * YARN's ResourceManager web proxy, which shows the dashboard at its
 * application's tracking URL): a request whose peer is one of them and
 * that carries no token at all is served as if it carried the token.
 * Every route is read only (GET, HEAD). Replaces an earlier list; n 0
 * trusts none. Returns 0, or LOOM_EINVAL for an address that is not
 * numeric, more than HTTP_MAX_PROXIES, or `loom ui`'s server. */
int http_allow_proxies(http_server *s, const char *const *addrs, int n);
/* Stops serving and closes every connection; the loop may then end. */
void http_stop(http_server *s);

/* HTTPS: with LOOM_DASHBOARD_CERT set (a PEM certificate chain file, with
 * LOOM_DASHBOARD_KEY its key's file; or "self-signed": one made at start
 * for the address bound), http_start serves HTTPS only, and a plain HTTP
 * request is closed unanswered. Its failure to load them is an error,
 * never a fall back to plain HTTP. */

/* Checks those settings before anything starts (`loom run`, `loom ui`):
 * 0 when there are none, or "self-signed", or a certificate and key that
 * load and match; else LOOM_EINVAL (or LOOM_ENOMEM, LOOM_EIO) with a
 * message in err that names the variable, the file and why. */
int http_tls_check(char *err, size_t errlen);
/* "https" when s serves HTTPS, else "http". */
const char *http_scheme(const http_server *s);
/* The SHA-256 fingerprint ("AB:CD:...") of s's self-signed certificate;
 * NULL when s has none (plain HTTP, or the user's certificate). */
const char *http_fingerprint(const http_server *s);

/* `loom ui [--port P] [--bind A] [JOB...]`: serves finished (and running)
 * jobs from <home>/jobs until interrupted. argv[0] is "ui". */
int loom__ui_main(int argc, char **argv);

#endif
