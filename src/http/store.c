/* store.c: what the dashboard knows of one job, read from its directory.
 * events.jsonl is read incrementally from where the last read stopped, so
 * serving a long job's metrics stays cheap; what is kept in memory is
 * capped (the last HTTP_MAX_POINTS points of each (task, tag) series, the
 * last HTTP_MAX_EVENTS other events). state.json, spec.yaml and logs are
 * read when asked for: they are small, or read from their end. */
#include "http/http_int.h"
#include "jobdir/jobdir.h"
#include "wire/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool http__safe_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= 160) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '_' && c != '-'))) return false;
  }
  return true;
}

void http__job_token(const char *dir, char out[HTTP_TOKEN_LEN + 1]) {
  out[0] = 0;
  char *sec = NULL;
  size_t n = 0;
  if (jobdir_read(dir, JOBDIR_SECRET, 256, &sec, &n) == 0) {
    while (n && (sec[n - 1] == '\n' || sec[n - 1] == ' ')) sec[--n] = 0;
    if (n) {
      unsigned char mac[WIRE_MAC], nonce[WIRE_NONCE] = {0};
      wire_mac(sec, "loom-ui", nonce, mac);
      loom__hex(mac, HTTP_TOKEN_LEN / 2, out);
    }
  }
  free(sec);
}

http_job *http__job_new(const char *dir, const char *id) {
  http_job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->series = calloc(HTTP_MAX_SERIES, sizeof *j->series);
  j->events = calloc(HTTP_MAX_EVENTS, sizeof *j->events);
  if (!j->series || !j->events) {
    http__job_free(j);
    return NULL;
  }
  loom__strlcpy(j->dir, dir, sizeof j->dir);
  loom__strlcpy(j->id, id, sizeof j->id);
  loom__buf_init(&j->carry, HTTP_MAX_EVENT_LINE);
  return j;
}

static void job_reset(http_job *j) {
  for (size_t i = 0; i < j->nseries; i++) free(j->series[i].pts);
  memset(j->series, 0, HTTP_MAX_SERIES * sizeof *j->series);
  j->nseries = 0;
  for (size_t i = 0; i < HTTP_MAX_EVENTS; i++) {
    free(j->events[i]);
    j->events[i] = NULL;
  }
  j->ev_head = j->ev_n = 0;
  j->ev_total = j->metric_total = j->lines_total = 0;
  j->off = 0;
  j->skipping = false;
  loom__buf_free(&j->carry);
}

void http__job_free(http_job *j) {
  if (!j) return;
  if (j->series && j->events) job_reset(j);
  free(j->series);
  free(j->events);
  free(j);
}

const http_point *http__series_at(const http_series *s, size_t i) {
  size_t start = (s->head + s->cap - s->n) % s->cap;
  return &s->pts[(start + i) % s->cap];
}

const char *http__event_at(const http_job *j, size_t i) {
  size_t start = (j->ev_head + HTTP_MAX_EVENTS - j->ev_n) % HTTP_MAX_EVENTS;
  return j->events[(start + i) % HTTP_MAX_EVENTS];
}

static http_series *series_get(http_job *j, const char *task, const char *tag, const char *src) {
  for (size_t i = j->nseries; i-- > 0;) {
    http_series *s = &j->series[i];
    if (!strcmp(s->task, task) && !strcmp(s->tag, tag)) return s;
  }
  if (j->nseries == HTTP_MAX_SERIES || strlen(task) >= sizeof j->series->task ||
      strlen(tag) >= sizeof j->series->tag)
    return NULL;
  http_series *s = &j->series[j->nseries];
  if (!(s->pts = malloc(64 * sizeof *s->pts))) return NULL;
  s->cap = 64;
  j->nseries++;
  loom__strlcpy(s->task, task, sizeof s->task);
  loom__strlcpy(s->tag, tag, sizeof s->tag);
  loom__strlcpy(s->source, src, sizeof s->source);
  return s;
}

static void add_metric(http_job *j, json_t *o) {
  const char *task = json_string_value(json_object_get(o, "task"));
  const char *tag = json_string_value(json_object_get(o, "tag"));
  const char *src = json_string_value(json_object_get(o, "source"));
  json_t *step = json_object_get(o, "step"), *val = json_object_get(o, "value");
  if (!task || !tag || !*tag || !json_is_integer(step) || !json_is_number(val)) return;
  http_series *s = series_get(j, task, tag, src ? src : "");
  if (!s) return;
  if (s->n == s->cap && s->head == 0 && s->cap < HTTP_MAX_POINTS) {
    /* Full and in order (pts[0] the oldest, head back at 0): grow, and the
     * next point goes after the last, not over the oldest. */
    size_t cap = s->cap * 2 < HTTP_MAX_POINTS ? s->cap * 2 : HTTP_MAX_POINTS;
    http_point *np = realloc(s->pts, cap * sizeof *np);
    if (np) {
      s->pts = np;
      s->cap = cap;
      s->head = s->n;
    }
  }
  http_point *p = &s->pts[s->head];
  p->step = json_integer_value(step);
  p->value = json_number_value(val);
  p->t = json_number_value(json_object_get(o, "t"));
  p->attempt = (int)json_integer_value(json_object_get(o, "attempt"));
  s->head = (s->head + 1) % s->cap;
  if (s->n < s->cap) s->n++;
  s->total++;
  j->metric_total++;
}

static void add_event(http_job *j, json_t *o, const char *line, size_t n) {
  char *keep;
  if (n <= HTTP_MAX_KEPT_EVENT) {
    keep = malloc(n + 1);
    if (keep) {
      memcpy(keep, line, n);
      keep[n] = 0;
    }
  } else {
    /* Abridged: who, when and what, without the details. */
    json_t *a = json_object();
    const char *keys[] = {"t", "job", "task", "attempt", "event"};
    for (size_t i = 0; a && i < LOOM__ARRAY_LEN(keys); i++) {
      json_t *v = json_object_get(o, keys[i]);
      if (v && (json_is_number(v) || (json_is_string(v) && json_string_length(v) < 256)))
        json_object_set(a, keys[i], v);
    }
    if (a) json_object_set_new(a, "abridged", json_true());
    keep = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
  }
  if (!keep) return;
  free(j->events[j->ev_head]);
  j->events[j->ev_head] = keep;
  j->ev_head = (j->ev_head + 1) % HTTP_MAX_EVENTS;
  if (j->ev_n < HTTP_MAX_EVENTS) j->ev_n++;
  j->ev_total++;
}

static void add_line(http_job *j, const char *line, size_t n) {
  if (n == 0) return;
  json_t *o = json_loadb(line, n, 0, NULL);
  if (!json_is_object(o)) {
    json_decref(o);
    return;
  }
  const char *ev = json_string_value(json_object_get(o, "event"));
  if (ev && !strcmp(ev, "metric"))
    add_metric(j, o);
  else if (ev)
    add_event(j, o, line, n);
  json_decref(o);
}

/* Splits data into lines; a line's start may be in j->carry. */
static void feed(http_job *j, const char *data, size_t n) {
  while (n) {
    const char *nl = memchr(data, '\n', n);
    size_t k = nl ? (size_t)(nl - data) : n;
    if (j->skipping) {
      if (nl) j->skipping = false;
    } else if (!nl) {
      if (loom__buf_add(&j->carry, data, k) < 0) {
        loom__buf_free(&j->carry);
        j->skipping = true;
      }
    } else if (j->carry.len) {
      if (loom__buf_add(&j->carry, data, k) == 0) add_line(j, j->carry.p, j->carry.len);
      loom__buf_free(&j->carry);
    } else {
      if (k <= HTTP_MAX_EVENT_LINE) add_line(j, data, k);
    }
    if (!nl) break;
    j->lines_total++;
    data += k + 1;
    n -= k + 1;
  }
}

void http__job_refresh(http_job *j) {
  char p[sizeof j->dir + 32];
  if (jobdir_path(j->dir, JOBDIR_EVENTS, p, sizeof p) < 0) return;
  int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) goto out;
  if (st.st_dev != j->dev || st.st_ino != j->ino || (uint64_t)st.st_size < j->off) {
    job_reset(j);
    j->dev = st.st_dev;
    j->ino = st.st_ino;
  }
  enum { CHUNK = 1 << 16 };
  char *chunk = malloc(CHUNK);
  uint64_t budget = chunk ? HTTP_REFRESH_BYTES : 0;
  while (budget) {
    size_t want = budget < CHUNK ? (size_t)budget : CHUNK;
    ssize_t r = pread(fd, chunk, want, (off_t)j->off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    feed(j, chunk, (size_t)r);
    j->off += (uint64_t)r;
    budget -= (uint64_t)r;
  }
  free(chunk);
out:
  close(fd);
}

json_t *http__job_state(const http_job *j) {
  return jobdir_read_json(j->dir, JOBDIR_STATE, HTTP_MAX_STATE);
}
json_t *http__job_spec(const http_job *j) {
  return jobdir_read_json(j->dir, JOBDIR_SPEC, HTTP_MAX_STATE);
}

json_t *http__log_tail(const http_job *j, const char *file, int n, uint64_t *size) {
  char p[sizeof j->dir + 200];
  snprintf(p, sizeof p, "%s/%s/%s", j->dir, jobdir_name(JOBDIR_LOGS), file);
  int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return NULL;
  struct stat st;
  json_t *lines = NULL;
  char *buf = NULL;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) goto out;
  *size = (uint64_t)st.st_size;
  /* Read a window from the end, four times larger until it holds n lines
   * (or HTTP_MAX_LOG_TAIL bytes, or the whole file). */
  off_t from;
  size_t got = 0;
  for (size_t win = 16384;; win *= 4) {
    if (win > HTTP_MAX_LOG_TAIL) win = HTTP_MAX_LOG_TAIL;
    from = st.st_size > (off_t)win ? st.st_size - (off_t)win : 0;
    size_t want = (size_t)(st.st_size - from);
    char *nb = realloc(buf, want + 1);
    if (!nb) goto out;
    buf = nb;
    got = 0;
    while (got < want) {
      ssize_t r = pread(fd, buf + got, want - got, from + (off_t)got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    int nls = 0;
    for (size_t k = 0; k < got && nls <= n; k++) nls += buf[k] == '\n';
    if (nls > n || from == 0 || win == HTTP_MAX_LOG_TAIL) break;
  }
  /* The last n whole lines: walk back from the end. */
  size_t end = got, start = 0;
  if (end && buf[end - 1] == '\n') end--;
  int count = 0;
  size_t i = end;
  while (i > 0 && count < n) {
    i--;
    if (buf[i] == '\n') {
      count++;
      if (count == n) {
        i++;
        break;
      }
    }
  }
  start = i;
  /* A line cut by the tail window is not shown. */
  if (start == 0 && from > 0) {
    char *nl = memchr(buf, '\n', end);
    start = nl ? (size_t)(nl - buf) + 1 : end;
  }
  lines = json_array();
  for (size_t k = start; lines && k < end;) {
    char *nl = memchr(buf + k, '\n', end - k);
    size_t len = nl ? (size_t)(nl - (buf + k)) : end - k;
    if (len && buf[k + len - 1] == '\r') len--;
    json_array_append_new(lines, http__json_text(buf + k, len));
    k += (nl ? (size_t)(nl - (buf + k)) + 1 : end - k);
  }
out:
  free(buf);
  close(fd);
  return lines;
}
