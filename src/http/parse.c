/* parse.c: a strict HTTP/1.1 request-head parser for the dashboard. It
 * accepts origin-form GET and HEAD requests without bodies and nothing
 * else: every byte comes from an untrusted peer, so anything unusual is
 * refused with the status that says why rather than guessed at. */
#include "http/http_int.h"

#include <string.h>

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c |= 0x20;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Percent-decodes the path src[0..n) into out and checks it: no NUL,
 * control characters, backslashes or encoded slashes; no "." or ".."
 * segment; no empty segment but the last. */
static int decode_path(const char *src, size_t n, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)src[i];
    if (c == '%') {
      int h, l;
      if (i + 2 >= n) return -400;
      if ((h = hexval((unsigned char)src[i + 1])) < 0 ||
          (l = hexval((unsigned char)src[i + 2])) < 0)
        return -400;
      c = (unsigned char)(h * 16 + l);
      if (c == '/' || c < 0x20 || c == 0x7f) return -400;
      i += 2;
    }
    if (c == '\\') return -400;
    if (o + 1 >= outlen) return -414;
    out[o++] = (char)c;
  }
  out[o] = 0;
  if (out[0] != '/') return -400;
  /* segments */
  const char *p = out + 1;
  for (;;) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 0 && e) return -400; /* "//" */
    if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.')) return -400;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

static bool ieq(const char *a, size_t an, const char *b) {
  size_t bn = strlen(b);
  if (an != bn) return false;
  for (size_t i = 0; i < an; i++)
    if ((a[i] | 0x20) != (b[i] | 0x20)) return false;
  return true;
}

/* The request line: METHOD SP origin-form SP HTTP/1.x */
static int parse_line(const char *s, size_t n, http_req *r) {
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)s[i])) i++;
  if (i == 0 || i >= sizeof r->method || i >= n || s[i] != ' ') return -400;
  memcpy(r->method, s, i);
  r->method[i] = 0;
  size_t t0 = ++i;
  while (i < n && s[i] != ' ') {
    unsigned char c = (unsigned char)s[i];
    if (c <= 0x20 || c >= 0x7f || c == '#') return -400;
    i++;
  }
  size_t tn = i - t0;
  if (tn == 0 || i >= n) return -400;
  const char *t = s + t0;
  if (t[0] != '/') return -400; /* absolute-form, authority-form, "*" */
  const char *v = s + i + 1;
  size_t vn = n - i - 1;
  if (vn != 8 || memcmp(v, "HTTP/", 5) != 0) return -400;
  if (v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' || v[7] > '9') return -400;
  if (v[5] != '1') return -505;
  r->minor = v[7] - '0';
  if (r->minor > 1) return -505;
  const char *q = memchr(t, '?', tn);
  size_t pn = q ? (size_t)(q - t) : tn;
  int rc = decode_path(t, pn, r->path, sizeof r->path);
  if (rc < 0) return rc;
  if (q) {
    size_t qn = tn - pn - 1;
    if (qn >= sizeof r->query) return -414;
    memcpy(r->query, q + 1, qn);
    r->query[qn] = 0;
  } else {
    r->query[0] = 0;
  }
  return 0;
}

/* One field line "name: value" (without its CRLF). */
static int parse_field(const char *s, size_t n, http_req *r, bool *seen_cl) {
  if (n == 0) return -400;
  if (s[0] == ' ' || s[0] == '\t') return -400; /* obs-fold */
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)s[i])) i++;
  if (i == 0 || i >= n || s[i] != ':') return -400; /* also "name :" */
  size_t nn = i++;
  while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
  size_t v0 = i, vend = n;
  while (vend > v0 && (s[vend - 1] == ' ' || s[vend - 1] == '\t')) vend--;
  for (size_t k = v0; k < vend; k++) {
    unsigned char c = (unsigned char)s[k];
    if ((c < 0x20 && c != '\t') || c == 0x7f) return -400;
  }
  const char *v = s + v0;
  size_t vn = vend - v0;
  if (ieq(s, nn, "host")) {
    if (r->has_host || vn == 0) return -400;
    r->has_host = true;
  } else if (ieq(s, nn, "content-length")) {
    if (*seen_cl || vn == 0 || vn > 18) return -400;
    *seen_cl = true;
    for (size_t k = 0; k < vn; k++)
      if (v[k] < '0' || v[k] > '9') return -400;
    for (size_t k = 0; k < vn; k++)
      if (v[k] != '0') return -413; /* a body: nothing here takes one */
  } else if (ieq(s, nn, "transfer-encoding")) {
    return -413;
  } else if (ieq(s, nn, "cookie")) {
    size_t have = strlen(r->cookie);
    if (have + vn + 3 > sizeof r->cookie) return -431;
    if (have) memcpy(r->cookie + have, "; ", 2), have += 2;
    memcpy(r->cookie + have, v, vn);
    r->cookie[have + vn] = 0;
  } else if (ieq(s, nn, "authorization")) {
    if (r->authorization[0] || vn >= sizeof r->authorization) return -400;
    memcpy(r->authorization, v, vn);
    r->authorization[vn] = 0;
  }
  return 0;
}

int http__parse(const char *buf, size_t len, http_req *r) {
  /* The request line must end within HTTP_MAX_LINE, the head within
   * HTTP_MAX_HEAD, whether or not the rest has arrived yet. */
  const char *crlf = NULL;
  for (size_t i = 0; i + 1 < len && i < HTTP_MAX_LINE + 1; i++)
    if (buf[i] == '\r' && buf[i + 1] == '\n') {
      crlf = buf + i;
      break;
    }
  if (!crlf) return len > HTTP_MAX_LINE ? -414 : 0;
  const char *end = NULL;
  size_t lim = len < HTTP_MAX_HEAD ? len : HTTP_MAX_HEAD;
  for (size_t i = 0; i + 3 < lim; i++)
    if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
      end = buf + i;
      break;
    }
  if (!end) return len >= HTTP_MAX_HEAD ? -431 : 0;
  memset(r, 0, sizeof *r);
  int rc = parse_line(buf, (size_t)(crlf - buf), r);
  if (rc < 0) return rc;
  bool seen_cl = false;
  int nfields = 0;
  /* Field lines lie between the request line's CRLF and end; the last
   * one's CRLF is the first half of the blank line's. */
  for (const char *p = crlf + 2; p <= end;) {
    const char *e = p;
    while (!(e[0] == '\r' && e[1] == '\n')) e++;
    for (const char *k = p; k < e; k++)
      if (*k == '\r' || *k == '\n') return -400; /* a bare CR or LF */
    if (++nfields > HTTP_MAX_HEADERS) return -431;
    if ((rc = parse_field(p, (size_t)(e - p), r, &seen_cl)) < 0) return rc;
    p = e + 2;
  }
  if (r->minor == 1 && !r->has_host) return -400;
  r->head = !strcmp(r->method, "HEAD");
  if (strcmp(r->method, "GET") != 0 && !r->head) return -405;
  return (int)(end - buf) + 4;
}

/* Decodes a query or cookie value s[0..n) into out. */
static int decode_value(const char *s, size_t n, bool plus, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '%') {
      int h, l;
      if (i + 2 >= n || (h = hexval((unsigned char)s[i + 1])) < 0 ||
          (l = hexval((unsigned char)s[i + 2])) < 0)
        return -1;
      c = (unsigned char)(h * 16 + l);
      if (c == 0) return -1;
      i += 2;
    } else if (c == '+' && plus) {
      c = ' ';
    }
    if (o + 1 >= outlen) return -1;
    out[o++] = (char)c;
  }
  out[o] = 0;
  return 1;
}

int http__query(const char *query, const char *name, char *out, size_t outlen) {
  size_t nl = strlen(name);
  for (const char *p = query; p && *p;) {
    const char *amp = strchr(p, '&');
    size_t n = amp ? (size_t)(amp - p) : strlen(p);
    const char *eq = memchr(p, '=', n);
    size_t kn = eq ? (size_t)(eq - p) : n;
    if (kn == nl && !memcmp(p, name, nl)) {
      if (!eq) {
        if (!outlen) return -1;
        out[0] = 0;
        return 1;
      }
      return decode_value(eq + 1, n - kn - 1, true, out, outlen);
    }
    p = amp ? amp + 1 : NULL;
  }
  return 0;
}

int http__cookie(const char *cookies, const char *name, char *out, size_t outlen) {
  size_t nl = strlen(name);
  for (const char *p = cookies; p && *p;) {
    while (*p == ' ' || *p == ';') p++;
    const char *semi = strchr(p, ';');
    size_t n = semi ? (size_t)(semi - p) : strlen(p);
    const char *eq = memchr(p, '=', n);
    if (eq && (size_t)(eq - p) == nl && !memcmp(p, name, nl)) {
      size_t vn = n - nl - 1;
      while (vn && eq[vn] == ' ') vn--;
      return decode_value(eq + 1, vn, false, out, outlen);
    }
    p = semi ? semi + 1 : NULL;
  }
  return 0;
}
