/* console.c: the console: task output prefixed on stdout, the live status line, the
 * lines loom itself says, per-task stderr rings for root causes, the task
 * logs and the summary at the end. */
#include "coord/coord_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

static void status_clear(coord *co);
static void ring_push(task *t, const char *line, size_t n);
static void print_summary_to(coord *co, FILE *out);
static FILE *task_log(coord *co, task *t);

/* ---- console ------------------------------------------------------------ */
static void status_clear(coord *co) {
  if (co->o->status_line && co->status_shown) {
    fputs("\r\033[K", stderr);
    co->status_shown = false;
  }
}

void coord_status_draw(coord *co) {
  if (!co->o->status_line || co->jstate == J_DONE) return;
  int run = 0, done = 0, failed = 0, start = 0;
  for (int i = 0; i < co->ntasks; i++) {
    int st = co->tasks[i].state;
    if (st == T_RUNNING)
      run++;
    else if (st == T_SUCCEEDED || st == T_STOPPED)
      done++;
    else if (st == T_FAILED || st == T_LOST)
      failed++;
    else
      start++;
  }
  fprintf(stderr,
          "\r\033[K\033[2mloom %s · attempt %d · %s · starting %d · running %d · "
          "finished %d · failed %d · %.1fs\033[0m",
          co->o->job_id, co->attempt, JSTATE[co->jstate], start, run, done, failed,
          loom__wall() - co->t_start);
  fflush(stderr);
  co->status_shown = true;
}

void coord_say(coord *co, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (co->o->console) {
    status_clear(co);
    fputs("loom: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    coord_status_draw(co);
  } else {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    loom__log(LOOM_LOG_INFO, "coord", "%s", msg);
  }
  va_end(ap);
}

static void ring_push(task *t, const char *line, size_t n) {
  char *copy = strndup(line, n > 4096 ? 4096 : n);
  if (!copy) return;
  int slot = (t->ring_head + t->ring_n) % RING;
  if (t->ring_n == RING) {
    free(t->ring[t->ring_head]);
    t->ring_head = (t->ring_head + 1) % RING;
    slot = (t->ring_head + RING - 1) % RING;
  } else {
    t->ring_n++;
  }
  t->ring[slot] = copy;
}

void coord_ring_clear(task *t) {
  for (int i = 0; i < RING; i++) {
    free(t->ring[i]);
    t->ring[i] = NULL;
  }
  t->ring_n = t->ring_head = 0;
}

static const char *const COLORS[] = {"\033[36m", "\033[33m", "\033[32m", "\033[35m",
                                     "\033[34m", "\033[91m", "\033[96m", "\033[93m"};

void coord_on_log(coord *co, task *t, const wire_msg *m) {
  int stream = (int)m->u.log.stream;
  int proc = (int)m->u.log.proc;
  char prefix[112];
  if (t->role->procs > 1)
    snprintf(prefix, sizeof prefix, "[%s.%d]", t->name, proc);
  else
    snprintf(prefix, sizeof prefix, "[%s]", t->name);
  const char *p = (const char *)m->blob, *end = p + m->blob_len;
  FILE *log = task_log(co, t);
  if (co->o->console) status_clear(co);
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    if (log) {
      fwrite(p, 1, n, log);
      fputc('\n', log);
    }
    if (co->alllog) fprintf(co->alllog, "%s %.*s\n", prefix, (int)n, p);
    if (stream == 2) ring_push(t, p, n);
    if (co->o->console) {
      if (co->o->color)
        fprintf(stdout, "%s%s\033[0m %.*s\n", COLORS[t->id % 8], prefix, (int)n, p);
      else
        fprintf(stdout, "%s %.*s\n", prefix, (int)n, p);
    }
    p += n + 1;
  }
  if (co->o->console) {
    fflush(stdout);
    coord_status_draw(co);
  }
}

/* ---- task logs -------------------------------------------------------------
 * A job of 10,000 tasks cannot hold a log file open for each beside a
 * connection each (the descriptor limit is often 20,000 or less): at most
 * LOG_OPEN_MAX task logs are open, the least recently written closed first
 * (they are line-buffered, so closing loses nothing) and opened again in
 * append mode when their task writes. */
#define LOG_OPEN_MAX 256

static void log_unlink(coord *co, task *t) {
  if (t->log_newer)
    t->log_newer->log_older = t->log_older;
  else
    co->log_newest = t->log_older;
  if (t->log_older)
    t->log_older->log_newer = t->log_newer;
  else
    co->log_oldest = t->log_newer;
  t->log_newer = t->log_older = NULL;
}

static void log_push(coord *co, task *t) {
  t->log_newer = NULL;
  t->log_older = co->log_newest;
  if (co->log_newest)
    co->log_newest->log_newer = t;
  else
    co->log_oldest = t;
  co->log_newest = t;
}

void coord_close_log(coord *co, task *t) {
  if (!t->log) return;
  log_unlink(co, t);
  fclose(t->log);
  t->log = NULL;
  co->nlogs_open--;
}

/* t's log file, open, and now the most recently used; NULL when it cannot
 * be opened. */
static FILE *task_log(coord *co, task *t) {
  if (t->log) {
    if (co->log_newest != t) {
      log_unlink(co, t);
      log_push(co, t);
    }
    return t->log;
  }
  if (co->nlogs_open >= LOG_OPEN_MAX && co->log_oldest) coord_close_log(co, co->log_oldest);
  char *p = jobdir_task_apath(co->o->job_dir, JOBDIR_LOGS, t->file);
  t->log = p ? loom__fopen_private(p, true) : NULL;
  free(p);
  if (!t->log) return NULL;
  setvbuf(t->log, NULL, _IOLBF, 0);
  log_push(co, t);
  co->nlogs_open++;
  return t->log;
}

void coord_open_logs(coord *co, task *t) {
  if (task_log(co, t)) {
    char iso[40];
    loom__wall_iso(loom__wall(), iso, sizeof iso);
    fprintf(t->log, "=== loom: %s attempt %d, %s ===\n", t->name, t->attempt, iso);
  }
}

void coord_print_summary(coord *co) {
  FILE *f = jobdir_fopen(co->o->job_dir, JOBDIR_SUMMARY, false);
  if (f) {
    print_summary_to(co, f);
    fclose(f);
  }
  if (!co->o->console) return;
  status_clear(co);
  print_summary_to(co, stderr);
}

static void print_summary_to(coord *co, FILE *out) {
  double el = loom__wall() - co->t_start;
  if (co->outcome == O_SUCCESS) {
    fprintf(out, "loom: job %s succeeded in %.1fs (%d tasks, attempt %d)\n", co->o->job_id, el,
            co->ntasks, co->attempt);
    return;
  }
  if (co->outcome == O_KILLED) {
    fprintf(out, "loom: job %s was stopped after %.1fs: %s\n", co->o->job_id, el, co->root_msg);
    return;
  }
  fprintf(out, "loom: job %s FAILED after %.1fs (attempt %d of %d)\n", co->o->job_id, el,
          co->attempt + 1, co->s->retries + 1);
  if (co->root >= 0) {
    task *t = &co->tasks[co->root];
    fprintf(out, "loom: root cause: %s (attempt %d) %s\n", t->name, t->attempt, co->root_msg);
    if (t->ring_n) {
      fprintf(out, "loom: last %d lines of %s's stderr:\n", t->ring_n, t->name);
      for (int i = 0; i < t->ring_n; i++)
        fprintf(out, "  | %s\n", t->ring[(t->ring_head + i) % RING]);
    } else {
      fprintf(out, "loom: %s wrote nothing on stderr\n", t->name);
    }
  } else {
    fprintf(out, "loom: root cause: %s\n", co->root_msg);
  }
  /* the cluster manager's own copy of each failed task's output (YARN:
   * its container's logs on the NodeManager's web UI) */
  for (int i = 0; i < co->ntasks; i++) {
    task *t = &co->tasks[i];
    if (!t->log_url[0] || (t->state != T_FAILED && t->state != T_LOST && i != co->root)) continue;
    fprintf(out, "loom: %s's container logs: %s\n", t->name, t->log_url);
    if (t->log_later[0]) fprintf(out, "loom:   once aggregated: %s\n", t->log_later);
  }
  fprintf(out, "loom: logs: %s/%s/   events: loom events %s\n", co->o->job_dir,
          jobdir_name(JOBDIR_LOGS), co->o->job_id);
}
