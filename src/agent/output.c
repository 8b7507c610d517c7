/* output.c: the agent's side of the tasks' output: each process's stdout
 * and stderr pipes, read line by line into LOG messages to the
 * coordinator, with back-pressure; see agent_int.h. */
#include "agent/agent_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- output ----------------------------------------------------------
 * Each line a task prints reaches the coordinator, in order, and none is
 * dropped. When the connection to the coordinator has more than
 * OUT_HIGH bytes queued, the agent stops reading its tasks' pipes (the
 * tasks then block in write(2)) until the queue is under OUT_LOW again:
 * back-pressure instead of loss. A line longer than LOOM_MAX_LOG_LINE is
 * cut there and marked; the rest of it, up to its newline, is dropped. */
#define OUT_HIGH (4u << 20)
#define OUT_LOW (1u << 20)

static void out_pause(agent *a, bool pause) {
  if (a->out_paused == pause) return;
  a->out_paused = pause;
  for (int i = 0; i < a->nprocs; i++)
    for (int k = 0; k < 2; k++) {
      outpipe *o = &a->procs[i].out[k];
      if (!o->open) continue;
      if (pause)
        uv_read_stop((uv_stream_t *)&o->pipe);
      else
        uv_read_start((uv_stream_t *)&o->pipe, agent_out_alloc, agent_out_read);
    }
}

typedef struct {
  agent *a;
  unsigned char *buf;
} logw;

static void log_written(void *owner) {
  logw *w = owner;
  agent *a = w->a;
  free(w->buf);
  free(w);
  if (a->out_paused &&
      (!a->conn_open || uv_stream_get_write_queue_size((uv_stream_t *)&a->conn) < OUT_LOW))
    out_pause(a, false);
}

/* In a YARN container (its NodeManager sets LOG_DIRS) the agent's stdout
 * and stderr are the container's log files (yarn_launch's redirection):
 * each line of the task goes there too, the task's stdout to stdout and
 * its stderr to stderr, so that `yarn logs -applicationId` and the
 * ResourceManager UI's log links show the task's output where Hadoop users
 * look for it. Elsewhere the output goes to the coordinator only. */
static bool tee_on(void) {
  static int on = -1;
  if (on < 0) {
    const char *d = getenv("LOG_DIRS");
    on = d && *d;
  }
  return on;
}

/* Writes all of p to fd; gives up on an error (the log file gone or full:
 * the coordinator still has the line). */
static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

static void tee_write(int fd, const void *p, size_t n, const char *mark) {
  write_all(fd, p, n);
  if (mark) {
    write_all(fd, mark, strlen(mark));
    write_all(fd, "\n", 1);
  }
}

static void send_log(outpipe *o, const void *p, size_t n, const char *mark) {
  agent *a = o->a;
  if (tee_on()) tee_write(o->stream == 2 ? STDERR_FILENO : STDOUT_FILENO, p, n, mark);
  /* a bind refused while we hold the port: said if the task then fails */
  if (a->reserve_fd >= 0 && !a->saw_inuse && memmem(p, n, "ddress already in use", 21))
    a->saw_inuse = true;
  if (!a->conn_open) return;
  loom__buf b;
  loom__buf_init(&b, n + 256);
  loom__buf_add(&b, p, n);
  if (mark) loom__buf_printf(&b, "%s\n", mark);
  logw *w = malloc(sizeof *w);
  size_t len;
  wire_msg m = {.type = WIRE_LOG,
                .u.log = {.stream = o->stream, .proc = o->proc},
                .blob = (const unsigned char *)b.p,
                .blob_len = b.len};
  if (!w || wire_msg_encode(&m, &w->buf, &len) < 0) {
    agent_log("%s: out of memory sending %zu bytes of output", a->task, n);
    free(w);
  } else {
    w->a = a;
    wire_uv_write_tls((uv_stream_t *)&a->conn, a->tls, w->buf, len, log_written, w);
    if (uv_stream_get_write_queue_size((uv_stream_t *)&a->conn) > OUT_HIGH) out_pause(a, true);
  }
  loom__buf_free(&b);
}

/* Sends the whole lines held; at the end (all), what is left as well. */
static void flush_lines(outpipe *o, bool all) {
  size_t cut = 0;
  for (size_t i = o->line.len; i > 0; i--)
    if (o->line.p[i - 1] == '\n') {
      cut = i;
      break;
    }
  if (cut) {
    send_log(o, o->line.p, cut, NULL);
    loom__buf_consume(&o->line, cut);
  }
  size_t maxl = o->line.max;
  if (o->line.len >= maxl) { /* one line, as long as allowed, and no end yet */
    char mark[96];
    snprintf(mark, sizeof mark, " [loom: line cut at %zu bytes (LOOM_MAX_LOG_LINE)]", maxl);
    send_log(o, o->line.p, o->line.len, mark);
    loom__buf_consume(&o->line, o->line.len);
    o->cutting = true;
  } else if (all && o->line.len) {
    send_log(o, o->line.p, o->line.len, NULL);
    loom__buf_consume(&o->line, o->line.len);
  }
}

static void pipe_closed(uv_handle_t *h) {
  outpipe *o = h->data;
  loom__buf_free(&o->line);
  o->a->open_pipes--;
  agent_maybe_finish(o->a);
}

void agent_close_pipe(outpipe *o) {
  if (!o->open) return;
  o->open = false;
  flush_lines(o, true);
  uv_close((uv_handle_t *)&o->pipe, pipe_closed);
}

void agent_out_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  static char slab[65536];
  *buf = uv_buf_init(slab, sizeof slab);
}

void agent_out_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  outpipe *o = s->data;
  if (n < 0) {
    agent_close_pipe(o);
    return;
  }
  const char *p = buf->base, *end = buf->base + n;
  while (p < end) {
    if (o->cutting) { /* drop the rest of a line already cut */
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      if (!nl) break;
      p = nl + 1;
      o->cutting = false;
      continue;
    }
    size_t room = o->line.max - o->line.len, take = (size_t)(end - p);
    if (take > room) take = room;
    loom__buf_add(&o->line, p, take);
    p += take;
    flush_lines(o, false);
  }
}

/* Pipes held open by a command's own children must not keep the task
 * alive after its processes ended. */
void agent_drain_expired(uv_timer_t *t) {
  agent *a = t->data;
  if (a->out_paused && a->conn_open) { /* output still held back: wait for it */
    uv_timer_start(&a->drain, agent_drain_expired, 100, 0);
    return;
  }
  for (int i = 0; i < a->nprocs; i++) {
    for (int k = 0; k < 2; k++) agent_close_pipe(&a->procs[i].out[k]);
    agent_close_guard(&a->procs[i]); /* one that did not go when told */
  }
}
