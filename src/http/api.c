/* api.c: the dashboard's JSON API and Prometheus exposition, rendered from
 * a job's store (store.c). Paths are relative to the job's root ("/" for
 * the coordinator's own dashboard, "/job/<id>/" under `loom ui`):
 *
 *   api/job       state.json without its tasks, plus the roles and counts
 *   api/tasks     the tasks, each with its latest value of every metric
 *   api/metrics   series of (step, value, t, attempt) per task and tag;
 *                 ?tag=&task= filter, ?n= keeps each series' last n points,
 *                 ?max= thins each to at most max (always with its last)
 *   api/events    the last events other than metrics; ?n=, ?task=, ?event=
 *   api/logs      the last lines of a task's log; ?task=worker:0, ?n=
 *   metrics       Prometheus text format 0.0.4
 */
#include "http/http_int.h"
#include "jobdir/jobdir.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- output helpers ---------------------------------------------------- */
static void put(http_resp *r, const char *fmt, ...) LOOM__PRINTF(2, 3);
static void put(http_resp *r, const char *fmt, ...) {
  if (r->bad) return;
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof tmp || loom__buf_add(&r->body, tmp, (size_t)n) < 0)
    r->bad = true;
}

static void put_str(http_resp *r, const char *s) {
  if (!r->bad && http__json_str(&r->body, s, strlen(s)) < 0) r->bad = true;
}

/* A value (the shortest text that reads back as the same double) or a
 * time (to the ms); null when not finite, which JSON cannot say. */
static void put_num(http_resp *r, double v, bool time) {
  if (!isfinite(v)) {
    put(r, "null");
  } else if (time) {
    put(r, "%.3f", v);
  } else {
    char s[32];
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(s, sizeof s, "%.*g", prec, v);
      if (strtod(s, NULL) == v) break;
    }
    put(r, "%s", s);
  }
}

static void put_json(http_resp *r, json_t *o) {
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  if (!s || loom__buf_add(&r->body, s, strlen(s)) < 0) r->bad = true;
  free(s);
}

/* The length of the valid UTF-8 sequence at s (at most n bytes), 0 when
 * the bytes there are not one. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return len;
}

int http__json_str(loom__buf *b, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  int rc = loom__buf_add(b, "\"", 1);
  size_t i = 0, run = 0;
  while (rc == 0 && i < n) {
    unsigned char c = u[i];
    size_t l = c >= 0x20 && c != '"' && c != '\\' ? utf8_len(u + i, n - i) : 0;
    if (l) {
      i += l;
      run += l;
      continue;
    }
    if (run) rc = loom__buf_add(b, s + i - run, run);
    run = 0;
    if (rc) break;
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      esc[2] = 0;
    } else if (c == '\n') {
      strcpy(esc, "\\n");
    } else if (c == '\t') {
      strcpy(esc, "\\t");
    } else if (c == '\r') {
      strcpy(esc, "\\r");
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
    } else {
      strcpy(esc, "\\ufffd"); /* not UTF-8 */
    }
    rc = loom__buf_add(b, esc, strlen(esc));
    i++;
  }
  if (rc == 0 && run) rc = loom__buf_add(b, s + i - run, run);
  if (rc == 0) rc = loom__buf_add(b, "\"", 1);
  return rc;
}

json_t *http__json_text(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    size_t l = u[i] ? utf8_len(u + i, n - i) : 0;
    if (!l) break;
    i += l;
  }
  if (i == n) return json_stringn(s, n);
  loom__buf b;
  loom__buf_init(&b, 4 * n + 16);
  for (i = 0; i < n;) {
    size_t l = u[i] ? utf8_len(u + i, n - i) : 0;
    if (loom__buf_add(&b, l ? s + i : "\xef\xbf\xbd", l ? l : 3) < 0) break;
    i += l ? l : 1;
  }
  json_t *o = json_stringn(b.p ? b.p : "", b.len);
  loom__buf_free(&b);
  return o;
}

void http__error(http_resp *r, int status, const char *msg) {
  r->status = status;
  r->type = "application/json";
  r->body.len = 0;
  r->bad = false;
  put(r, "{\"error\":");
  put_str(r, msg);
  put(r, "}");
}

static int query_int(const char *query, const char *name, int def, int lo, int hi, bool *ok) {
  char v[32];
  int rc = http__query(query, name, v, sizeof v);
  if (rc == 0) return def;
  long long x;
  if (rc < 0 || loom__parse_int(v, lo, hi, &x) < 0) {
    *ok = false;
    return def;
  }
  return (int)x;
}

/* ---- api/job, api/tasks ------------------------------------------------ */
static json_t *latest_of(http_job *j, const char *task) {
  json_t *o = json_object();
  for (size_t i = 0; o && i < j->nseries; i++) {
    http_series *s = &j->series[i];
    if (strcmp(s->task, task) != 0 || !s->n) continue;
    const http_point *p = http__series_at(s, s->n - 1);
    json_object_set_new(o, s->tag,
                        json_pack("{s:I, s:f, s:i}", "step", (json_int_t)p->step, "value",
                                  isfinite(p->value) ? p->value : 0.0, "attempt", p->attempt));
  }
  return o;
}

static void api_job(http_job *j, http_resp *r) {
  json_t *st = http__job_state(j);
  json_t *o = st ? st : json_object();
  json_t *counts = json_object(), *tasks = json_object_get(o, "tasks");
  size_t i;
  json_t *t;
  json_array_foreach(tasks, i, t) {
    const char *s = json_string_value(json_object_get(t, "state"));
    if (!s) continue;
    json_object_set_new(counts, s,
                        json_integer(json_integer_value(json_object_get(counts, s)) + 1));
  }
  json_object_set_new(o, "ntasks", json_integer((json_int_t)json_array_size(tasks)));
  json_object_del(o, "tasks");
  json_object_set_new(o, "counts", counts);
  json_object_set_new(o, "id", json_string(j->id));
  if (!json_object_get(o, "state")) json_object_set_new(o, "state", json_string("starting"));
  /* The roles, but not the spec's environment: a dashboard URL may be
   * shared more widely than the values a job was given. */
  json_t *spec = http__job_spec(j), *roles = json_object();
  const char *rn;
  json_t *rv;
  json_object_foreach(json_object_get(spec, "roles"), rn, rv) {
    static const char *keys[] = {"instances", "command", "procs", "service",
                                 "vcores",    "memory",  "gpus"};
    json_t *one = json_object();
    for (size_t k = 0; k < LOOM__ARRAY_LEN(keys); k++) {
      json_t *v = json_object_get(rv, keys[k]);
      if (v) json_object_set(one, keys[k], v);
    }
    json_object_set_new(roles, rn, one);
  }
  json_object_set_new(o, "roles", roles);
  json_decref(spec);
  json_t *tags = json_array();
  for (i = 0; i < j->nseries; i++) {
    bool dup = false;
    for (size_t k = 0; k < i && !dup; k++) dup = !strcmp(j->series[k].tag, j->series[i].tag);
    if (!dup) json_array_append_new(tags, json_string(j->series[i].tag));
  }
  json_object_set_new(o, "metric_tags", tags);
  /* TensorBoard: the role's URL (from state.json, while it runs), the runs
   * written, and where they are for a TensorBoard started by hand. */
  size_t nruns = 0;
  json_t *runs = jobdir_tensorboard_runs(j->dir, 100, &nruns);
  if (runs) json_object_set_new(o, "tensorboard_runs", runs);
  json_object_set_new(o, "tensorboard_runs_total", json_integer((json_int_t)nruns));
  char *tbdir = jobdir_apath(j->dir, JOBDIR_TENSORBOARD);
  if (tbdir) json_object_set_new(o, "tensorboard_logdir", json_string(tbdir));
  free(tbdir);
  json_object_set_new(o, "events_total", json_integer((json_int_t)j->ev_total));
  json_object_set_new(o, "metrics_total", json_integer((json_int_t)j->metric_total));
  json_object_set_new(o, "now", json_real(loom__wall()));
  put_json(r, o);
  json_decref(o);
}

static void api_tasks(http_job *j, http_resp *r) {
  json_t *st = http__job_state(j);
  json_t *tasks = json_object_get(st, "tasks");
  const char *state = json_string_value(json_object_get(st, "state"));
  json_t *out =
      json_pack("{s:s, s:s, s:I, s:f}", "job", j->id, "state", state ? state : "starting",
                "attempt", json_integer_value(json_object_get(st, "attempt")), "now", loom__wall());
  json_t *arr = json_array();
  size_t i;
  json_t *t;
  json_array_foreach(tasks, i, t) {
    const char *name = json_string_value(json_object_get(t, "task"));
    json_t *c = json_deep_copy(t);
    if (!c) continue;
    json_object_set_new(c, "latest", latest_of(j, name ? name : ""));
    json_array_append_new(arr, c);
  }
  json_object_set_new(out, "tasks", arr);
  put_json(r, out);
  json_decref(out);
  json_decref(st);
}

/* ---- api/metrics ------------------------------------------------------- */
static int series_cmp(const void *a, const void *b) {
  const http_series *x = *(const http_series *const *)a, *y = *(const http_series *const *)b;
  int c = strcmp(x->tag, y->tag);
  return c ? c : strcmp(x->task, y->task);
}

static void api_metrics(http_job *j, const char *query, http_resp *r) {
  char tag[130] = "", task[64] = "";
  bool ok = true;
  if (http__query(query, "tag", tag, sizeof tag) < 0 ||
      http__query(query, "task", task, sizeof task) < 0)
    ok = false;
  int n = query_int(query, "n", HTTP_MAX_POINTS, 0, HTTP_MAX_POINTS, &ok);
  int max = query_int(query, "max", HTTP_MAX_POINTS, 1, HTTP_MAX_POINTS, &ok);
  if (!ok) {
    http__error(r, 400, "bad query: tag=TAG, task=ROLE:INDEX, n=0..2000, max=1..2000");
    return;
  }
  const http_series **v = malloc((j->nseries + 1) * sizeof *v);
  if (!v) {
    r->bad = true;
    return;
  }
  size_t m = 0;
  for (size_t i = 0; i < j->nseries; i++) {
    const http_series *s = &j->series[i];
    if ((*tag && strcmp(tag, s->tag)) || (*task && strcmp(task, s->task))) continue;
    v[m++] = s;
  }
  qsort(v, m, sizeof *v, series_cmp);
  put(r, "{\"job\":");
  put_str(r, j->id);
  put(r, ",\"total\":%" PRIu64 ",\"series\":[", j->metric_total);
  for (size_t i = 0; i < m; i++) {
    const http_series *s = v[i];
    put(r, "%s{\"task\":", i ? "," : "");
    put_str(r, s->task);
    put(r, ",\"tag\":");
    put_str(r, s->tag);
    put(r, ",\"source\":");
    put_str(r, s->source);
    put(r, ",\"total\":%" PRIu64 ",\"points\":[", s->total);
    size_t from = s->n > (size_t)n ? s->n - (size_t)n : 0;
    /* every stride-th point, counted back from the last */
    size_t stride = (s->n - from + (size_t)max - 1) / (size_t)max;
    if (stride == 0) stride = 1;
    bool first = true;
    for (size_t k = from; k < s->n; k++) {
      if ((s->n - 1 - k) % stride) continue;
      const http_point *p = http__series_at(s, k);
      put(r, "%s[%" PRId64 ",", first ? "" : ",", p->step);
      first = false;
      put_num(r, p->value, false);
      put(r, ",");
      put_num(r, p->t, true);
      put(r, ",%d]", p->attempt);
    }
    put(r, "]}");
  }
  put(r, "]}");
  free(v);
}

/* ---- api/events -------------------------------------------------------- */
static void api_events(http_job *j, const char *query, http_resp *r) {
  char task[64] = "", ev[64] = "";
  bool ok = http__query(query, "task", task, sizeof task) >= 0 &&
            http__query(query, "event", ev, sizeof ev) >= 0;
  int n = query_int(query, "n", 100, 0, HTTP_MAX_EVENTS, &ok);
  if (!ok) {
    http__error(r, 400, "bad query: n=0..1000, task=ROLE:INDEX, event=NAME");
    return;
  }
  /* Newest last; walk back to find the n that pass the filters. */
  size_t first = j->ev_n;
  int taken = 0;
  bool *keep = calloc(j->ev_n + 1, 1);
  if (!keep) {
    r->bad = true;
    return;
  }
  for (size_t i = j->ev_n; i-- > 0 && taken < n;) {
    const char *line = http__event_at(j, i);
    if (*task || *ev) {
      json_t *o = json_loads(line, 0, NULL);
      const char *ot = json_string_value(json_object_get(o, "task"));
      const char *oe = json_string_value(json_object_get(o, "event"));
      bool pass = (!*task || (ot && !strcmp(ot, task))) && (!*ev || (oe && !strcmp(oe, ev)));
      json_decref(o);
      if (!pass) continue;
    }
    keep[i] = true;
    first = i;
    taken++;
  }
  put(r, "{\"job\":");
  put_str(r, j->id);
  put(r, ",\"total\":%" PRIu64 ",\"events\":[", j->ev_total);
  bool comma = false;
  for (size_t i = first; i < j->ev_n; i++) {
    if (!keep[i]) continue;
    put(r, "%s", comma ? "," : "");
    if (!r->bad && loom__buf_add(&r->body, http__event_at(j, i), strlen(http__event_at(j, i))) < 0)
      r->bad = true;
    comma = true;
  }
  put(r, "]}");
  free(keep);
}

/* ---- api/logs ---------------------------------------------------------- */
static void api_logs(http_job *j, const char *query, http_resp *r) {
  char task[200] = "", file[220];
  bool ok = http__query(query, "task", task, sizeof task) >= 0;
  int n = query_int(query, "n", 100, 0, HTTP_MAX_LOG_LINES, &ok);
  if (!ok) {
    http__error(r, 400, "bad query: task=ROLE:INDEX (e.g. worker:0), n=0..1000");
    return;
  }
  if (!*task || !strcmp(task, "all")) {
    snprintf(file, sizeof file, "%s", strrchr(jobdir_name(JOBDIR_ALL_LOG), '/') + 1);
  } else {
    /* role:index, where role is a name and index a number: nothing else
     * reaches the file system. The task must be one of the job's. */
    char *colon = strchr(task, ':');
    long long idx;
    if (!colon || (*colon = 0, !http__safe_name(task)) ||
        loom__parse_int(colon + 1, 0, 999999, &idx) < 0) {
      http__error(r, 400, "bad task: give ROLE:INDEX, e.g. worker:0");
      return;
    }
    *colon = ':';
    json_t *st = http__job_state(j), *t;
    size_t i;
    bool known = false;
    json_array_foreach(json_object_get(st, "tasks"), i, t) {
      const char *name = json_string_value(json_object_get(t, "task"));
      if (name && !strcmp(name, task)) known = true;
    }
    json_decref(st);
    if (!known) {
      http__error(r, 404, "no such task in this job");
      return;
    }
    *colon = 0;
    snprintf(file, sizeof file, "%s-%lld.log", task, idx);
    *colon = ':';
  }
  uint64_t size = 0;
  json_t *lines = http__log_tail(j, file, n, &size);
  json_t *o = json_pack("{s:s, s:s, s:I, s:o}", "job", j->id, "task", *task ? task : "all", "size",
                        (json_int_t)size, "lines", lines ? lines : json_array());
  put_json(r, o);
  json_decref(o);
}

/* ---- Prometheus -------------------------------------------------------- */
static void prom_label(http_resp *r, const char *name, const char *v, bool first) {
  put(r, "%s%s=\"", first ? "" : ",", name);
  for (const char *p = v; *p && !r->bad; p++) {
    if (*p == '\\')
      put(r, "\\\\");
    else if (*p == '"')
      put(r, "\\\"");
    else if (*p == '\n')
      put(r, "\\n");
    else if (loom__buf_add(&r->body, p, 1) < 0)
      r->bad = true;
  }
  put(r, "\"");
}

static void prom_value(http_resp *r, double v) {
  if (isnan(v))
    put(r, "} NaN\n");
  else if (isinf(v))
    put(r, "} %sInf\n", v > 0 ? "+" : "-");
  else
    put(r, "} %.17g\n", v);
}

static void prom_family(http_resp *r, const char *name, const char *type, const char *help) {
  put(r, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void api_prometheus(http_job *j, http_resp *r) {
  json_t *st = http__job_state(j);
  const char *js = json_string_value(json_object_get(st, "state"));
  json_t *tasks = json_object_get(st, "tasks"), *t;
  size_t i;
  r->type = "text/plain; version=0.0.4; charset=utf-8";

  prom_family(r, "loom_job_state", "gauge", "1 for the job's current state.");
  put(r, "loom_job_state{");
  prom_label(r, "job", j->id, true);
  prom_label(r, "state", js ? js : "starting", false);
  prom_value(r, 1);
  prom_family(r, "loom_job_attempt", "gauge", "The job's attempt, from 0.");
  put(r, "loom_job_attempt{");
  prom_label(r, "job", j->id, true);
  prom_value(r, (double)json_integer_value(json_object_get(st, "attempt")));

  static const struct {
    const char *name, *type, *key, *help;
  } per_task[] = {
      {"loom_task_state", "gauge", NULL, "1 for each task's current state."},
      {"loom_task_attempt", "gauge", "attempt", "The task's attempt, from 0."},
      {"loom_task_restarts_total", "counter", "restarts", "Restarts of the task."},
      {"loom_task_exit_code", "gauge", "exit_code", "The task's last exit code."},
  };
  for (size_t f = 0; f < LOOM__ARRAY_LEN(per_task); f++) {
    prom_family(r, per_task[f].name, per_task[f].type, per_task[f].help);
    json_array_foreach(tasks, i, t) {
      const char *name = json_string_value(json_object_get(t, "task"));
      const char *role = json_string_value(json_object_get(t, "role"));
      json_t *v = per_task[f].key ? json_object_get(t, per_task[f].key) : NULL;
      if (!name || (per_task[f].key && !json_is_number(v))) continue;
      put(r, "%s{", per_task[f].name);
      prom_label(r, "job", j->id, true);
      prom_label(r, "task", name, false);
      prom_label(r, "role", role ? role : "", false);
      if (!per_task[f].key) {
        const char *s = json_string_value(json_object_get(t, "state"));
        prom_label(r, "state", s ? s : "unknown", false);
      }
      prom_value(r, per_task[f].key ? json_number_value(v) : 1);
    }
  }

  static const struct {
    const char *name, *help;
    bool step;
  } per_series[] = {
      {"loom_metric",
       "The latest value of each metric (loom_metric(), agents' cpu_percent and "
       "memory_bytes), by task and tag.",
       false},
      {"loom_metric_step", "The step of that latest value.", true},
  };
  for (size_t f = 0; f < LOOM__ARRAY_LEN(per_series); f++) {
    prom_family(r, per_series[f].name, "gauge", per_series[f].help);
    for (i = 0; i < j->nseries; i++) {
      const http_series *s = &j->series[i];
      if (!s->n) continue;
      const http_point *p = http__series_at(s, s->n - 1);
      put(r, "%s{", per_series[f].name);
      prom_label(r, "job", j->id, true);
      prom_label(r, "task", s->task, false);
      prom_label(r, "tag", s->tag, false);
      prom_label(r, "source", s->source, false);
      prom_value(r, per_series[f].step ? (double)p->step : p->value);
    }
  }
  prom_family(r, "loom_events_total", "counter", "Lines read from the job's events.jsonl.");
  put(r, "loom_events_total{");
  prom_label(r, "job", j->id, true);
  prom_value(r, (double)j->lines_total);
  json_decref(st);
}

bool http__api(http_job *j, const char *path, const char *query, http_resp *r) {
  r->status = 200;
  r->type = "application/json";
  if (!strcmp(path, "api/job")) {
    http__job_refresh(j);
    api_job(j, r);
  } else if (!strcmp(path, "api/tasks")) {
    http__job_refresh(j);
    api_tasks(j, r);
  } else if (!strcmp(path, "api/metrics")) {
    http__job_refresh(j);
    api_metrics(j, query, r);
  } else if (!strcmp(path, "api/events")) {
    http__job_refresh(j);
    api_events(j, query, r);
  } else if (!strcmp(path, "api/logs")) {
    api_logs(j, query, r);
  } else if (!strcmp(path, "metrics")) {
    http__job_refresh(j);
    api_prometheus(j, r);
  } else {
    return false;
  }
  return true;
}

/* ---- `loom ui`: the list of jobs --------------------------------------- */
void http__api_jobs(const char *jobs_root, http_resp *r) {
  r->status = 200;
  r->type = "application/json";
  jobdir_entry *all = NULL;
  size_t n = 0;
  if (jobdir_list(jobs_root, &all, &n) < 0) {
    http__error(r, 500, "out of memory listing the jobs");
    return;
  }
  json_t *arr = json_array();
  for (size_t i = 0; i < n && i < HTTP_MAX_LISTED; i++) {
    char dir[4096 + 200];
    snprintf(dir, sizeof dir, "%s/%s", jobs_root, all[i].id);
    http_job tmp;
    memset(&tmp, 0, sizeof tmp);
    loom__strlcpy(tmp.dir, dir, sizeof tmp.dir);
    json_t *st = http__job_state(&tmp);
    json_t *o = json_pack("{s:s}", "id", all[i].id);
    static const char *keys[] = {"name",     "state",       "attempt", "started",
                                 "finished", "exit_status", "backend"};
    for (size_t k = 0; k < LOOM__ARRAY_LEN(keys); k++) {
      json_t *v = json_object_get(st, keys[k]);
      if (v) json_object_set(o, keys[k], v);
    }
    json_t *counts = json_object(), *t;
    size_t ti;
    json_array_foreach(json_object_get(st, "tasks"), ti, t) {
      const char *s = json_string_value(json_object_get(t, "state"));
      if (s)
        json_object_set_new(counts, s,
                            json_integer(json_integer_value(json_object_get(counts, s)) + 1));
    }
    json_object_set_new(o, "ntasks",
                        json_integer((json_int_t)json_array_size(json_object_get(st, "tasks"))));
    json_object_set_new(o, "counts", counts);
    json_array_append_new(arr, o);
    json_decref(st);
  }
  free(all);
  json_t *out =
      json_pack("{s:I, s:o, s:f}", "total", (json_int_t)n, "jobs", arr, "now", loom__wall());
  put_json(r, out);
  json_decref(out);
}
