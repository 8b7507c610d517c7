/* srun.c: the Slurm backend's coordinator side (see slurm.c): each task's
 * agent started with its own `srun [--het-group=G] -n1 --exact ... loom
 * agent` (one job step a task, so that a task can be stopped and
 * restarted alone), its output read through a pipe, copied to
 * coordinator.log prefixed with the task, its last lines handed to the
 * coordinator with the exit; a task signalled through its srun. */
#include "backend/slurm/slurm_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The last lines of an srun's output kept for the coordinator's messages
 * (bytes), and the longest line copied whole to coordinator.log. */
#define SRUN_TAIL 1024
#define SRUN_LINE 2048
/* After srun exited, how long to wait for the rest of its output before
 * reporting the exit anyway. */
#define SRUN_EOF_WAIT_MS 2000

/* One srun: its process, the pipe its stdout and stderr write to, and a
 * timer bounding the wait for that pipe's end after the process exited.
 * Freed when all three handles are closed. */
struct srun_proc {
  uv_process_t proc;
  uv_pipe_t out;
  uv_timer_t eof_timer;
  backend *b;
  int task_id;
  char task[80];
  int handles;   /* handles not yet closed */
  bool running;  /* the process has not exited */
  bool reading;  /* the pipe is open */
  bool reported; /* on_exit was called */
  int64_t status;
  int sig;
  size_t line_len;
  char line[SRUN_LINE];
  char tail[SRUN_TAIL]; /* the last complete lines, each ending in '\n' */
  char rbuf[4096];
};

static void srun_handle_closed(uv_handle_t *h) {
  srun_proc *s = h->data;
  if (--s->handles == 0) free(s);
}

static void srun_close(srun_proc *s, uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, srun_handle_closed);
}

/* Keeps line (without its newline) as the newest of the tail's lines,
 * dropping the oldest ones to make room. */
static void tail_push(srun_proc *s, const char *line, size_t n) {
  if (n > SRUN_TAIL / 2) n = SRUN_TAIL / 2;
  size_t have = strlen(s->tail);
  while (have && have + n + 2 > SRUN_TAIL) {
    char *nl = strchr(s->tail, '\n');
    size_t drop = nl ? (size_t)(nl - s->tail) + 1 : have;
    memmove(s->tail, s->tail + drop, have - drop + 1);
    have -= drop;
  }
  memcpy(s->tail + have, line, n);
  s->tail[have + n] = '\n';
  s->tail[have + n + 1] = 0;
}

/* A line srun wrote: into coordinator.log, where a person looks when a
 * launch went wrong, and into the tail. */
static void srun_line(srun_proc *s) {
  size_t n = s->line_len;
  s->line_len = 0;
  while (n && (s->line[n - 1] == '\r' || s->line[n - 1] == ' ')) n--;
  if (!n) return;
  fprintf(stderr, "loom: srun[%s]: %.*s\n", s->task, (int)n, s->line);
  tail_push(s, s->line, n);
}

/* Reports the exit once the process is gone and its output read (or the
 * wait for the output expired). */
static void srun_maybe_report(srun_proc *s) {
  if (s->running || s->reading || s->reported) return;
  s->reported = true;
  backend *b = s->b;
  slurm_priv *pr = b->priv;
  if (pr->procs[s->task_id] == s) pr->procs[s->task_id] = NULL;
  uv_timer_stop(&s->eof_timer);
  srun_close(s, (uv_handle_t *)&s->eof_timer);
  /* the lines on one line, for messages: "a | b" */
  char detail[SRUN_TAIL * 2];
  size_t k = 0;
  for (const char *c = s->tail; *c && k + 4 < sizeof detail; c++) {
    if (*c != '\n')
      detail[k++] = *c;
    else if (c[1])
      k += (size_t)snprintf(detail + k, sizeof detail - k, " | ");
  }
  detail[k] = 0;
  b->on_exit(b->arg, s->task_id, s->status, s->sig, k ? detail : NULL, false);
}

static void srun_stop_reading(srun_proc *s) {
  if (!s->reading) return;
  s->reading = false;
  if (s->line_len) srun_line(s);
  uv_read_stop((uv_stream_t *)&s->out);
  srun_close(s, (uv_handle_t *)&s->out);
}

static void srun_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  srun_proc *s = h->data;
  *buf = uv_buf_init(s->rbuf, sizeof s->rbuf);
}

static void srun_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  srun_proc *s = st->data;
  if (n < 0) {
    srun_stop_reading(s);
    srun_maybe_report(s);
    return;
  }
  for (ssize_t i = 0; i < n; i++) {
    char c = buf->base[i];
    if (c == '\n') {
      srun_line(s);
    } else if (s->line_len < sizeof s->line) {
      s->line[s->line_len++] = c;
    } else {
      srun_line(s); /* an overlong line goes out in pieces */
      s->line[s->line_len++] = c;
    }
  }
}

static void srun_eof_expired(uv_timer_t *tm) {
  srun_proc *s = tm->data;
  loom__log(LOOM_LOG_WARN, "slurm",
            "srun for %s exited but its output stayed open %d ms; "
            "reporting its exit without the rest",
            s->task, SRUN_EOF_WAIT_MS);
  srun_stop_reading(s);
  srun_maybe_report(s);
}

static void srun_exited(uv_process_t *p, int64_t status, int sig) {
  srun_proc *s = p->data;
  s->running = false;
  s->status = status;
  s->sig = sig;
  srun_close(s, (uv_handle_t *)p);
  if (s->reading) uv_timer_start(&s->eof_timer, srun_eof_expired, SRUN_EOF_WAIT_MS, 0);
  srun_maybe_report(s);
}

int slurm_launch(backend *b, int task_id, char *const *argv, char *const *env, char *err,
                 size_t errlen) {
  slurm_priv *pr = b->priv;
  const char *task = NULL;
  for (int i = 0; env[i]; i++)
    if (!strncmp(env[i], "LOOM_TASK=", 10)) task = env[i] + 10;
  char hg[32] = "";
  if (pr->ngroups > 1) snprintf(hg, sizeof hg, "--het-group=%d", pr->group[task_id]);
  char name[160];
  snprintf(name, sizeof name, "--job-name=%s", task ? task : "loom-agent");
  char cpus[48] = "", mem[48] = "", gpus[48] = "";
  const spec_role *r = pr->role[task_id];
  int vc = r->vcores > 0 ? r->vcores : 1;
  snprintf(cpus, sizeof cpus, "--cpus-per-task=%d", vc);
  if (r->memory)
    snprintf(
        mem, sizeof mem, "--mem-per-cpu=%lluM",
        (unsigned long long)((r->memory + (uint64_t)vc * 1048576 - 1) / ((uint64_t)vc * 1048576)));
  /* the step's own GPUs: Slurm sets its CUDA_VISIBLE_DEVICES */
  if (r->gpus) snprintf(gpus, sizeof gpus, "--gpus-per-task=%d", r->gpus);
  char *args[18];
  int k = 0;
  args[k++] = "srun";
  if (hg[0]) args[k++] = hg;
  args[k++] = cpus;
  if (mem[0]) args[k++] = mem;
  if (gpus[0]) args[k++] = gpus;
  args[k++] = "--ntasks=1";
  args[k++] = "--nodes=1";
  args[k++] = "--exact";
  args[k++] = "--kill-on-bad-exit=0";
  args[k++] = "--quiet";
  args[k++] = name;
  args[k++] = argv[0];
  args[k++] = argv[1];
  args[k] = NULL;
  srun_proc *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ENOMEM;
  s->b = b;
  s->task_id = task_id;
  loom__strlcpy(s->task, task ? task : "?", sizeof s->task);
  s->proc.data = s->out.data = s->eof_timer.data = s;
  /* one pipe for srun's stdout and stderr; close-on-exec, so that no
   * other srun holds it open */
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) {
    snprintf(err, errlen, "cannot make a pipe for srun: %s", strerror(errno));
    free(s);
    return LOOM_EBACKEND;
  }
  uv_pipe_init(b->loop, &s->out, 0);
  uv_timer_init(b->loop, &s->eof_timer);
  s->handles = 3; /* proc, out, eof_timer: each closed exactly once */
  uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
                                   {.flags = UV_INHERIT_FD, .data.fd = fds[1]},
                                   {.flags = UV_INHERIT_FD, .data.fd = fds[1]}};
  uv_process_options_t o = {.exit_cb = srun_exited,
                            .file = "srun",
                            .args = args,
                            .env = (char **)env,
                            .stdio_count = 3,
                            .stdio = stdio};
  bool spawned = false; /* uv_spawn ran: its handle needs closing, even on failure */
  int rc = uv_pipe_open(&s->out, fds[0]);
  if (rc == 0) {
    rc = uv_spawn(b->loop, &s->proc, &o);
    spawned = true;
  } else {
    close(fds[0]);
  }
  close(fds[1]);
  if (rc < 0) {
    snprintf(err, errlen, "cannot run srun: %s", uv_strerror(rc));
    s->reported = true;
    srun_close(s, (uv_handle_t *)&s->out);
    srun_close(s, (uv_handle_t *)&s->eof_timer);
    if (spawned)
      srun_close(s, (uv_handle_t *)&s->proc);
    else
      s->handles--;
    return LOOM_EBACKEND;
  }
  s->reading = true;
  uv_read_start((uv_stream_t *)&s->out, srun_alloc, srun_read);
  s->running = true;
  pr->procs[task_id] = s;
  return 0;
}

void slurm_signal(backend *b, int task_id, int sig) {
  slurm_priv *pr = b->priv;
  srun_proc *s = pr->procs[task_id];
  /* srun forwards SIGTERM to its task; a second SIGINT within a second or
   * a SIGKILL of srun ends the step */
  if (s && s->running) uv_process_kill(&s->proc, sig);
}
