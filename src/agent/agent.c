/* agent.c: one task's agent; see agent.h.
 *
 * Before the command starts the agent works synchronously (connect,
 * authenticate, register, prepare); from the moment it waits for the
 * cluster spec a libuv loop drives the coordinator connection, the user's
 * processes, their output pipes, signals and timers. */
#include "agent/agent_int.h"
#include "fs/fs.h"
#include "jobdir/jobdir.h"
#include "hadoop/creds.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>
#include <zlib.h>

#define MAX_PROCS 1024

void agent_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("loom agent: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- sending ---------------------------------------------------------- */
static void send_msg(agent *a, const wire_msg *m) {
  if (!a->conn_open) return;
  unsigned char *buf;
  size_t len;
  if (wire_msg_encode(m, &buf, &len) == 0)
    wire_uv_write_tls((uv_stream_t *)&a->conn, a->tls, buf, len, free, buf);
}

/* ---- ending -------------------------------------------------------------- */
static void close_walk(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void remove_cgroup(agent *a) {
  if (!a->cgroup[0]) return;
  cg_remove(a->cgroup);
  a->cgroup[0] = 0;
}

/* The task's private TMPDIR goes with the task, whatever its processes
 * left there (a SIGKILLed writer's half-uploaded files included). */
static void remove_tmpdir(agent *a) {
  if (!a->tmpdir[0]) return;
  char err[512];
  if (loom__fs_remove(a->tmpdir, true, err, sizeof err) < 0)
    agent_log("%s: cannot remove its temporary directory: %s", a->task, err);
  a->tmpdir[0] = 0;
}

/* An agent that was SIGKILLed (a lost host, a cluster manager's kill)
 * could not remove its task's TMPDIR: the next agent to make one under the
 * same directory removes those whose agent (the pid in the name) is gone. */
static void sweep_tmpdirs(const char *base) {
  char *pat = loom__asprintf("%s/loom-task-*-*-??????", base);
  glob_t gl;
  if (pat && glob(pat, GLOB_NOSORT, NULL, &gl) == 0) {
    for (size_t i = 0; i < gl.gl_pathc; i++) {
      const char *p = gl.gl_pathv[i];
      size_t len = strlen(p);
      if (len < 8 || p[len - 7] != '-') continue;
      const char *end = p + len - 7, *dash = end;
      while (dash > p && dash[-1] != '-') dash--;
      long long pid;
      char num[24];
      if (end - dash <= 0 || end - dash >= (long)sizeof num) continue;
      memcpy(num, dash, (size_t)(end - dash));
      num[end - dash] = 0;
      if (loom__parse_int(num, 1, INT32_MAX, &pid) < 0) continue;
      if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
      char err[512];
      if (loom__fs_remove(p, true, err, sizeof err) < 0)
        agent_log("cannot remove a dead agent's temporary directory: %s", err);
    }
    globfree(&gl);
  }
  free(pat);
}

/* Each start of the task's processes gets a TMPDIR of its own under the
 * agent's (or /tmp), unless the spec's env sets one: named for the task
 * and this agent's pid (see sweep_tmpdirs). */
static void make_tmpdir(agent *a) {
  remove_tmpdir(a);
  if (json_object_get(a->as.env, "TMPDIR")) return;
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  sweep_tmpdirs(base);
  char name[128];
  snprintf(name, sizeof name, "%s-%d", a->as.role, (int)a->as.index);
  for (char *p = name; *p; p++)
    if (*p == '/') *p = '_';
  int n =
      snprintf(a->tmpdir, sizeof a->tmpdir, "%s/loom-task-%s-%d-XXXXXX", base, name, (int)getpid());
  if (n < 0 || (size_t)n >= sizeof a->tmpdir || !mkdtemp(a->tmpdir)) {
    agent_log("%s: cannot make its temporary directory under %s: %s; TMPDIR left as it is", a->task,
              base, strerror(errno));
    a->tmpdir[0] = 0;
  }
}

static void linger_expired(uv_timer_t *t) {
  agent *a = t->data;
  agent_log("%s: the coordinator did not close the connection in time after the task ended",
            a->task);
  uv_walk(&a->loop, close_walk, NULL);
}

/* The last bytes for the coordinator are in the kernel, perhaps not yet
 * sent: a close(2) now, with anything unread from the coordinator (a
 * heartbeat), would reset the connection and drop them. So wait until the
 * coordinator, having read everything, closes its side (conn_read sees
 * the end), for at most the heartbeat timeout. */
static void shutdown_done(uv_shutdown_t *req, int status) {
  agent *a = req->data;
  free(req);
  if (status < 0) {
    uv_walk(&a->loop, close_walk, NULL);
    return;
  }
  a->lingering = true;
  uv_timer_stop(&a->hb);
  uv_timer_start(&a->linger, linger_expired, (uint64_t)loom__tun(LOOM_TUN_HEARTBEAT_TIMEOUT_MS), 0);
}

/* Ends the loop once what was queued for the coordinator is written and
 * the coordinator has read it. */
static void agent_done(agent *a) {
  remove_cgroup(a);
  remove_tmpdir(a);
  if (a->conn_open) {
    a->conn_open = false;
    uv_shutdown_t *req = calloc(1, sizeof *req);
    if (req) {
      req->data = a;
      if (uv_shutdown(req, (uv_stream_t *)&a->conn, shutdown_done) == 0) return;
      free(req);
    }
  }
  uv_walk(&a->loop, close_walk, NULL);
}

static void kill_all(agent *a, int sig) {
  for (int i = 0; i < a->nprocs; i++)
    if (a->procs[i].running && kill(-a->procs[i].pid, sig) < 0) kill(a->procs[i].pid, sig);
}

static void grace_expired(uv_timer_t *t) { kill_all(t->data, SIGKILL); }

/* Stops every process: SIGTERM to each process group, SIGKILL after
 * grace_ms. */
static void stop_procs(agent *a, uint64_t grace_ms) {
  if (!a->stopping) {
    a->stopping = true;
    kill_all(a, SIGTERM);
    /* the loop's clock is the time this turn began: without an update the
     * SIGKILL could come up to a turn's length before the grace is over */
    uv_update_time(&a->loop);
    uv_timer_start(&a->grace, grace_expired, grace_ms, 0);
  }
  if (a->running == 0 && a->open_pipes == 0 && a->conn_open && !a->exited_sent) {
    /* nothing ran yet */
  }
}

void agent_maybe_finish(agent *a) {
  if (a->running > 0 || a->open_pipes > 0 || a->guards > 0) return;
  uv_timer_stop(&a->grace);
  uv_timer_stop(&a->drain);
  if (!a->exited_sent) {
    a->exited_sent = true;
    wire_msg m = {.type = WIRE_EXIT, .u.exit = {.code = a->fail_code, .signal = a->fail_sig}};
    char oom[300];
    if (a->lost_reason[0]) {
      m.u.exit.lost = true;
      m.u.exit.reason = a->lost_reason;
    }
    if (a->fail_sig == SIGKILL && !a->stopping && a->cgroup[0]) {
      /* the kernel's OOM killer leaves its mark in the cgroup */
      if (cg_oom_killed(a->cgkind, a->cgroup)) {
        snprintf(
            oom, sizeof oom, "out of memory: the task reached its memory limit of %lld MiB (%s %s)",
            (long long)(a->as.memory >> 20), cg_kind_name(a->cgkind), cg_limit_file(a->cgkind));
        m.u.exit.reason = oom;
      }
    }
    send_msg(a, &m);
  }
  agent_done(a);
}

/* The coordinator is gone: nothing may outlive it. */
static void coordinator_lost(agent *a, const char *why) {
  if (!a->conn_open) return;
  agent_log("%s: %s; stopping the task", a->task, why);
  a->conn_open = false;
  a->exit_status = 3;
  if (!uv_is_closing((uv_handle_t *)&a->conn)) uv_close((uv_handle_t *)&a->conn, NULL);
  if (a->running > 0) {
    stop_procs(a, 500);
  } else {
    agent_done(a);
  }
}

static void proc_closed(uv_handle_t *h) {}

/* ---- the guards (see exec.c) ---------------------------------------------- */
static void guard_closed(uv_handle_t *h) {
  uproc *u = h->data;
  u->a->guards--;
  agent_maybe_finish(u->a);
}

void agent_close_guard(uproc *u) {
  if (!u->guarded) return;
  u->guarded = false;
  uv_close((uv_handle_t *)&u->guard, guard_closed);
}

static void guard_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  static char slab[64];
  *buf = uv_buf_init(slab, sizeof slab);
}

/* The guard never writes: the end of its socket means it is gone. */
static void guard_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  if (n < 0) agent_close_guard(s->data);
}

/* u's first process was reaped: its guard may go (it exits on this byte,
 * and kills the task's session on the end of the socket without it). */
static void release_guard(uproc *u) {
  if (!u->guarded) return;
  uv_buf_t b = uv_buf_init("q", 1);
  if (uv_try_write((uv_stream_t *)&u->guard, &b, 1) != 1) agent_close_guard(u);
}

static void proc_exited(uv_process_t *p, int64_t status, int sig) {
  uproc *u = p->data;
  agent *a = u->a;
  u->running = false;
  a->running--;
  uv_close((uv_handle_t *)p, proc_closed);
  release_guard(u);
  if ((status != 0 || sig != 0) && !a->have_fail) {
    if (a->saw_inuse) /* it may have tried a plain bind of its port */
      agent_log("%s: the task failed while its port %d was still held for it "
                "(LOOM_PORT_HOLD=listen) and said 'Address already in use': a command that "
                "binds its port without SO_REUSEADDR or SO_REUSEPORT gets that while loom "
                "holds it; LOOM_PORT_HOLD=start lets the port go before the command starts",
                a->task, a->port);
    a->have_fail = true;
    a->fail_code = (int)status;
    a->fail_sig = sig;
    if (a->running > 0) stop_procs(a, (uint64_t)loom__tun(LOOM_TUN_STOP_GRACE_MS));
  }
  if (a->running == 0) {
    agent_release_port(a, "the task ended");
    uv_timer_start(&a->drain, agent_drain_expired, 500, 0);
  }
  agent_maybe_finish(a);
}

/* ---- starting the command --------------------------------------------- */
/* Memory: a cgroup per task where this machine lets us make one (see
 * cgroup.c), else an rlimit on each process's data segment. */
static void make_cgroup(agent *a) {
  int64_t mem = a->as.memory;
  if (mem <= 0) return;
  cg_probe p;
  if (cg_probe_memory(&p) < 0 || p.kind == CG_RLIMIT) return;
  const char *job = a->as.job_id, *role = a->as.role;
  char name[160];
  snprintf(name, sizeof name, "%s-%d", role, (int)a->as.index);
  const char *cpus = a->as.cpus;
  if (cg_create(&p, job, name, (long long)mem, cpus, a->cgroup, sizeof a->cgroup) == 0)
    a->cgkind = p.kind;
}

static int start_procs(agent *a, const wire_cluster *cl, const char *cluster_s,
                       const json_t *tf_cluster) {
  const char *wd = a->as.workdir;
  const char *shell = a->as.shell;
  json_t *argvj = a->as.argv;
  size_t nargs = shell ? 3 : json_array_size(argvj);
  char **args = calloc(nargs + 6, sizeof *args);
  char self[PATH_MAX];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (!args || sl <= 0) {
    free(args);
    return LOOM_EIO;
  }
  self[sl] = 0;
  int k = 0;
  args[k++] = self;
  args[k++] = "__exec";
  args[k++] = "--guard";
  args[k++] = "3"; /* stdio[3] below */
  args[k++] = "--";
  if (shell) {
    args[k++] = "/bin/sh";
    args[k++] = "-c";
    args[k++] = (char *)shell;
  } else {
    for (size_t i = 0; i < nargs; i++)
      args[k++] = (char *)json_string_value(json_array_get(argvj, i));
  }
  args[k] = NULL;
  if (a->reserve_fd >= 0 && !strcmp(loom__tun_str(LOOM_TUN_PORT_HOLD), "start")) {
    close(a->reserve_fd); /* hand the reserved port over to the command */
    a->reserve_fd = -1;
  }
  make_cgroup(a);
  make_tmpdir(a);
  a->started_ms = loom__now_ms();
  /* the usage baseline is the start (no ticks yet): the first sample is
   * reported 3 s after it, not 3 s after the first heartbeat tick */
  a->cpu_ticks = 0;
  a->usage_t0 = (double)a->started_ms / 1000.0;
  a->last_usage = a->started_ms;
  json_t *pids = json_array();
  int rc = 0;
  for (int i = 0; i < a->nprocs; i++) {
    uproc *u = &a->procs[i];
    u->a = a;
    u->local = i;
    /* the guard's socket: [0] the agent's end, [1] the process's (fd 3) */
    int gs[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gs) < 0) {
      agent_log("%s: cannot start process %d: its guard's socket: %s", a->task, i, strerror(errno));
      rc = LOOM_EIO;
      break;
    }
    envv e;
    agent_build_env(a, &e, i, cl, cluster_s, tf_cluster);
    uv_stdio_container_t stdio[4];
    stdio[0].flags = UV_IGNORE;
    stdio[3].flags = UV_INHERIT_FD;
    stdio[3].data.fd = gs[1];
    for (int s = 0; s < 2; s++) {
      outpipe *o = &u->out[s];
      o->a = a;
      o->proc = i;
      o->stream = s + 1;
      loom__buf_init(&o->line, (size_t)loom__tun(LOOM_TUN_MAX_LOG_LINE));
      uv_pipe_init(&a->loop, &o->pipe, 0);
      o->pipe.data = o;
      o->open = true;
      a->open_pipes++;
      stdio[s + 1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
      stdio[s + 1].data.stream = (uv_stream_t *)&o->pipe;
    }
    uv_process_options_t opt = {.exit_cb = proc_exited,
                                .file = self,
                                .args = args,
                                .env = e.v,
                                .cwd = wd,
                                .flags = UV_PROCESS_DETACHED,
                                .stdio_count = 4,
                                .stdio = stdio};
    u->proc.data = u;
    int r = uv_spawn(&a->loop, &u->proc, &opt);
    agent_env_free(&e);
    close(gs[1]);
    if (r < 0) {
      agent_log("%s: cannot start process %d: %s", a->task, i, uv_strerror(r));
      uv_close((uv_handle_t *)&u->proc, proc_closed);
      for (int s = 0; s < 2; s++) agent_close_pipe(&u->out[s]);
      close(gs[0]);
      rc = LOOM_EIO;
      break;
    }
    uv_pipe_init(&a->loop, &u->guard, 0);
    u->guard.data = u;
    if (uv_pipe_open(&u->guard, gs[0]) == 0) {
      u->guarded = true;
      a->guards++;
      uv_read_start((uv_stream_t *)&u->guard, guard_alloc, guard_read);
    } else { /* the guard sees the end at once: the task is killed */
      agent_log("%s: process %d: cannot watch its guard; the task is killed", a->task, i);
      close(gs[0]);
      uv_close((uv_handle_t *)&u->guard, NULL);
    }
    u->pid = u->proc.pid;
    u->running = u->spawned = true;
    a->running++;
    json_array_append_new(pids, json_integer(u->pid));
    for (int s = 0; s < 2; s++)
      uv_read_start((uv_stream_t *)&u->out[s].pipe, agent_out_alloc, agent_out_read);
  }
  free(args);
  if (a->reserve_fd >= 0 && a->running > 0) {
    a->porthold_ms = 10;
    uv_timer_start(&a->porthold, agent_porthold_tick, a->porthold_ms, 0);
  }
  send_msg(a, &(wire_msg){.type = WIRE_STARTED, .u.started.pids = pids});
  json_decref(pids);
  return rc;
}

/* ---- the coordinator connection ------------------------------------------ */
/* The CLUSTER frame's blob as a malloc'ed string: inflated when the
 * coordinator deflated it (we said "inflate" in REGISTER), to exactly the
 * size it declared, which is capped. NULL when malformed. */
static char *cluster_blob(const wire_frame *f) {
  const char *enc = json_string_value(json_object_get(f->json, "blob_encoding"));
  if (!enc) return strndup((const char *)f->blob, f->blob_len);
  json_int_t size = json_integer_value(json_object_get(f->json, "blob_size"));
  if (strcmp(enc, "deflate") || size <= 0 || size > (json_int_t)1 << 30) return NULL;
  char *out = malloc((size_t)size + 1);
  uLongf n = (uLongf)size;
  if (!out || uncompress((Bytef *)out, &n, f->blob, f->blob_len) != Z_OK || n != (uLongf)size) {
    free(out);
    return NULL;
  }
  out[n] = 0;
  return out;
}

static void on_msg(agent *a, wire_frame *f) {
  wire_msg m;
  char err[200];
  if (f->type != WIRE_CLUSTER && f->type != WIRE_STOP && f->type != WIRE_HEARTBEAT) {
    agent_log("%s: ignoring unexpected message %d from the coordinator", a->task, f->type);
    return;
  }
  /* a cluster spec may come deflated: the decoder reads the plain blob */
  char *plain = NULL;
  int drc = 0;
  if (f->type == WIRE_CLUSTER) {
    plain = cluster_blob(f);
    if (plain) {
      f->blob = (unsigned char *)plain;
      f->blob_len = strlen(plain);
    } else {
      snprintf(err, sizeof err, "CLUSTER: the blob cannot be inflated");
      drc = LOOM_EPROTO;
    }
  }
  if (drc == 0) drc = wire_msg_decode(f, &m, err, sizeof err);
  if (plain) { /* the frame's own storage is still f->raw's */
    free(plain);
    f->blob = NULL;
    f->blob_len = 0;
  }
  if (drc < 0) {
    agent_log("%s: %s", a->task, err);
    if (f->type == WIRE_CLUSTER && !a->started) {
      a->started = true;
      coordinator_lost(a, "the coordinator sent a malformed cluster spec");
    }
    return;
  }
  switch (m.type) {
  case WIRE_CLUSTER: {
    if (a->started) break;
    a->started = true;
    const wire_cluster *c = &m.u.cluster;
    char *cls = json_dumps(c->cluster, JSON_COMPACT);
    int rc = start_procs(a, c, cls ? cls : "{}", c->tf_cluster ? c->tf_cluster : c->cluster);
    free(cls);
    if (rc < 0 && !a->have_fail) {
      a->have_fail = true;
      a->fail_code = 126;
      stop_procs(a, 0);
    }
    agent_maybe_finish(a);
    break;
  }
  case WIRE_STOP: {
    int64_t g = m.u.stop.grace_ms;
    if (m.u.stop.ending) a->job_ending = true;
    if (!a->started) {
      a->exited_sent = true;
      send_msg(a, &(wire_msg){.type = WIRE_EXIT, .u.exit = {.code = 0, .signal = SIGTERM}});
      agent_done(a);
      break;
    }
    stop_procs(a, g > 0 ? (uint64_t)g : 1000);
    agent_maybe_finish(a);
    break;
  }
  default: /* HEARTBEAT */
    break;
  }
  wire_msg_free(&m);
}

static void conn_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  static char slab[WIRE_READ_CHUNK];
  *buf = uv_buf_init(slab, sizeof slab);
}

/* Frames from the coordinator, in the clear; false once the link is gone. */
static bool conn_plain(void *arg, const char *data, size_t n) {
  agent *a = arg;
  if (wire_reader_push(&a->rd, data, n) < 0) {
    coordinator_lost(a, "the coordinator sent an oversized frame");
    return false;
  }
  for (;;) {
    wire_frame f;
    int rc = wire_reader_pop(&a->rd, &f);
    if (rc == 0) return true;
    if (rc < 0) {
      coordinator_lost(a, "the coordinator sent a malformed frame");
      return false;
    }
    on_msg(a, &f);
    wire_frame_free(&f);
    if (!a->conn_open) return false;
  }
}

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  agent *a = s->data;
  if (a->lingering) { /* what comes now is of no use; the end is awaited */
    if (n < 0) uv_walk(&a->loop, close_walk, NULL);
    return;
  }
  if (n < 0) {
    coordinator_lost(a, "the connection to the coordinator closed");
    return;
  }
  a->last_rx = loom__now_ms();
  if (!a->tls) {
    if (n > 0) conn_plain(a, buf->base, (size_t)n);
    return;
  }
  int rc = wire_uv_tls_read(s, a->tls, n > 0 ? buf->base : NULL, (size_t)n, conn_plain, a);
  if (rc < 0 && a->conn_open) {
    char why[240];
    snprintf(why, sizeof why, "TLS on the link to the coordinator failed: %s",
             wire_tls_mem_why(a->tls));
    coordinator_lost(a, why);
  }
}

/* 'T' (stopped) or 't' (traced) in /proc/PID/stat. */
static bool proc_stopped(int pid) {
  char st = loom__proc_state(pid);
  return st == 'T' || st == 't';
}

/* A process stopped for longer than the heartbeat timeout makes no
 * progress: the task is lost, and the policy decides what happens next. */
static void check_stopped(agent *a) {
  int64_t limit = a->as.heartbeat_timeout_ms;
  if (limit <= 0 || a->stopping) return;
  uint64_t now = loom__now_ms();
  for (int i = 0; i < a->nprocs; i++) {
    uproc *u = &a->procs[i];
    if (!u->running) continue;
    if (!proc_stopped(u->pid)) {
      u->stopped_since = 0;
      continue;
    }
    if (!u->stopped_since) u->stopped_since = now;
    if (now - u->stopped_since > (uint64_t)limit) {
      snprintf(a->lost_reason, sizeof a->lost_reason,
               "lost: process %d was stopped for %.1fs (no progress, no heartbeat)", i,
               (double)(now - u->stopped_since) / 1000.0);
      agent_log("%s: %s; killing the task", a->task, a->lost_reason);
      a->have_fail = true;
      a->fail_sig = SIGKILL;
      stop_procs(a, 0);
      kill_all(a, SIGKILL);
      return;
    }
  }
}

/* CPU time (ticks) and resident memory (bytes) of every process in the
 * task's process groups. */
static void usage_of(agent *a, uint64_t *ticks, uint64_t *rss) {
  *ticks = *rss = 0;
  DIR *d = opendir("/proc");
  if (!d) return;
  long page = sysconf(_SC_PAGESIZE);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char p[300], buf[1024];
    snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(p, "r");
    if (!f) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    if (!rp) continue;
    /* fields after ")": state ppid pgrp ... utime(14) stime(15) ... rss(24) */
    char st;
    int ppid, pgrp;
    unsigned long long ut, stt;
    long long rs;
    if (sscanf(rp + 2,
               "%c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
               "%*d %*u %*u %lld",
               &st, &ppid, &pgrp, &ut, &stt, &rs) != 6)
      continue;
    for (int i = 0; i < a->nprocs; i++)
      if (a->procs[i].spawned && pgrp == a->procs[i].pid) {
        *ticks += ut + stt;
        *rss += rs > 0 ? (uint64_t)rs * (uint64_t)page : 0;
        break;
      }
  }
  closedir(d);
}

/* Every 3 seconds: the task's CPU use (percent of one core) and memory,
 * as metrics the coordinator keeps and the dashboard charts. */
static void report_usage(agent *a) {
  uint64_t now = loom__now_ms();
  if (!a->started || a->running == 0 || now - a->last_usage < 3000) return;
  uint64_t ticks, rss;
  usage_of(a, &ticks, &rss);
  double t = (double)now / 1000.0;
  if (a->last_usage) {
    double cpu =
        100.0 * (double)(ticks - a->cpu_ticks) / (double)sysconf(_SC_CLK_TCK) / (t - a->usage_t0);
    json_int_t step = (json_int_t)((now - a->started_ms) / 1000); /* seconds since start */
    send_msg(a, &(wire_msg){.type = WIRE_METRIC,
                            .u.metric = {
                                .tag = "cpu_percent", .step = step, .value = cpu > 0 ? cpu : 0.0}});
    send_msg(a,
             &(wire_msg){.type = WIRE_METRIC,
                         .u.metric = {.tag = "memory_bytes", .step = step, .value = (double)rss}});
  }
  a->cpu_ticks = ticks;
  a->usage_t0 = t;
  a->last_usage = now;
}

static void hb_tick(uv_timer_t *t) {
  agent *a = t->data;
  if (!a->conn_open) return;
  check_stopped(a);
  report_usage(a);
  if (loom__now_ms() - a->last_rx > (uint64_t)loom__tun(LOOM_TUN_HEARTBEAT_TIMEOUT_MS)) {
    coordinator_lost(a, "no heartbeat from the coordinator");
    return;
  }
  send_msg(a, &(wire_msg){.type = WIRE_HEARTBEAT});
}

static void on_signal(uv_signal_t *h, int sig) {
  agent *a = h->data;
  agent_log("%s: got SIG%s; stopping the task", a->task, sigabbrev_np(sig));
  a->exit_status = 128 + sig;
  /* the node's copies now, not when the agent ends: Slurm kills what is
   * left of the step KillWait after its signal, and the agent may still
   * be waiting for its task then */
  agent_nodecopy_release(a->nodecopy_fd, a->nodecopy_id, true);
  a->nodecopy_fd = -1;
  /* the coordinator stops tasks with STOP, never a signal: a cluster
   * manager that starts agents itself (Spark) signals one when it kills
   * the task's place (its executor lost, its stage aborted), so the task is
   * lost, not failed */
  if (a->any && !a->lost_reason[0])
    snprintf(a->lost_reason, sizeof a->lost_reason,
             "its agent got SIG%s: the cluster manager stopped the task's place (Spark: the "
             "executor was lost or the stage aborted)",
             sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
  if (a->running > 0)
    stop_procs(a, (uint64_t)loom__tun(LOOM_TUN_STOP_GRACE_MS));
  else
    agent_done(a);
}

/* ---- before the loop: reserve, register, prepare ---------------------------- */

/* The job's secret into out: LOOM_SECRET, or where that is not set (YARN,
 * which keeps it out of the container's environment: the NodeManager
 * writes the environment into launch_container.sh, which log aggregation
 * uploads) the secret key HYARN_CREDS_JOB_SECRET of the container's
 * credentials file, $HADOOP_TOKEN_FILE_LOCATION. One read from the file
 * becomes LOOM_SECRET, so the task's processes (libloom, loom ps) find it
 * as on every backend. 0, or -1 having said why on stderr. */
static int agent_secret(char *out, size_t outlen) {
  const char *env = getenv("LOOM_SECRET");
  if (env) {
    if (strlen(env) >= outlen) {
      fprintf(stderr, "loom agent: LOOM_SECRET is longer than %zu bytes\n", outlen - 1);
      return -1;
    }
    loom__strlcpy(out, env, outlen);
    return 0;
  }
  const char *file = getenv("HADOOP_TOKEN_FILE_LOCATION");
  if (!file || !*file) {
    fprintf(stderr, "loom agent: the job's secret is neither in LOOM_SECRET nor in a container "
                    "credentials file (HADOOP_TOKEN_FILE_LOCATION is not set); the agent is "
                    "started by a backend, not by hand\n");
    return -1;
  }
  char *buf = NULL, err[300] = "";
  size_t len = 0, vlen = 0;
  uint8_t *v = NULL;
  errno = 0;
  int rc = loom__read_file(file, 16u << 20, &buf, &len);
  if (rc < 0) {
    fprintf(stderr,
            "loom agent: LOOM_SECRET is not set and the container's credentials file %s "
            "(HADOOP_TOKEN_FILE_LOCATION) cannot be read: %s\n",
            file, errno ? strerror(errno) : loom_strerror(rc));
    return -1;
  }
  rc = hyarn_creds_find_secret((const uint8_t *)buf, len, HYARN_CREDS_JOB_SECRET, &v, &vlen, err,
                               sizeof err);
  free(buf);
  if (rc == 0 && (vlen == 0 || vlen >= outlen || memchr(v, 0, vlen))) {
    snprintf(err, sizeof err, "its %s is empty, longer than %zu bytes or not text",
             HYARN_CREDS_JOB_SECRET, outlen - 1);
    rc = LOOM_EPROTO;
  }
  if (rc == 0) memcpy(out, v, vlen + 1);
  free(v);
  if (rc < 0) {
    fprintf(stderr,
            "loom agent: LOOM_SECRET is not set and the container's credentials file %s "
            "(HADOOP_TOKEN_FILE_LOCATION) does not hold the job's secret: %s\n",
            file, err[0] ? err : loom_strerror(rc));
    return -1;
  }
  if (setenv("LOOM_SECRET", out, 1) < 0) {
    fprintf(stderr, "loom agent: cannot set LOOM_SECRET: %s\n", strerror(errno));
    return -1;
  }
  return 0;
}

int agent_main(void) {
  const char *coord = getenv("LOOM_COORD");
  const char *task = getenv("LOOM_TASK"), *att = getenv("LOOM_ATTEMPT");
  if (!coord || !task) {
    fprintf(stderr, "loom agent: LOOM_COORD and LOOM_TASK must be set; the agent is started "
                    "by a backend, not by hand\n");
    return 2;
  }
  char secret[160];
  if (agent_secret(secret, sizeof secret) < 0) return 2;
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  signal(SIGPIPE, SIG_IGN);
  agent *a = calloc(1, sizeof *a);
  if (!a) return 3;
  a->reserve_fd = -1;
  loom__strlcpy(a->task, task, sizeof a->task);
  loom__strlcpy(a->secret, secret, sizeof a->secret);
  if (!getcwd(a->start_cwd, sizeof a->start_cwd))
    loom__strlcpy(a->start_cwd, "/", sizeof a->start_cwd);
  long long an = 0, fence = -1;
  /* "any": the cluster manager started this agent (Spark), which takes the
   * attempt its task waits for; LOOM_FENCE names the launch it belongs to */
  bool any = att && !strcmp(att, "any");
  if (att && !any && loom__parse_int(att, 0, 1 << 30, &an) < 0) {
    fprintf(stderr, "loom agent: LOOM_ATTEMPT=%s: not a number 0..%d or \"any\"\n", att, 1 << 30);
    return 2;
  }
  const char *fs = loom__tun_raw(LOOM_TUN_FENCE);
  if (fs && *fs && loom__parse_int(fs, 0, LLONG_MAX, &fence) < 0) {
    fprintf(stderr, "loom agent: LOOM_FENCE=%s: not a number 0..%lld\n", fs, LLONG_MAX);
    return 2;
  }
  a->attempt = (int)an;
  a->any = any;
  wire_reader_init(&a->rd, (size_t)loom__tun(LOOM_TUN_MAX_FRAME));

  const char *stall = loom__tun_str(LOOM_TUN_FAULT_STALL_TASK);
  if (*stall && !strcmp(stall, task)) pause(); /* fault injection for tests */

  a->nodecopy_fd = agent_nodecopy_hold(a->nodecopy_id, sizeof a->nodecopy_id);
  int status = 3, fd = -1;
  char why[600], iface_err[300] = "";
  why[0] = 0;
  /* an agent started again by the same Spark task (LOOM_RESPAWN=1): the
   * coordinator listened before, so a refused connection means it is gone
   * (the job is over), not that it is still starting: one try */
  int dial_ms = (int)loom__tun(LOOM_TUN_CONNECT_TIMEOUT_MS);
  const char *respawn = loom__tun_raw(LOOM_TUN_RESPAWN);
  if (respawn && !strcmp(respawn, "1")) dial_ms = 0;
  int rc = wire_dial(coord, dial_ms, &fd);
  if (rc == 0)
    rc = wire_client_auth(fd, &a->rd, secret, (int)loom__tun(LOOM_TUN_AUTH_TIMEOUT_MS), why,
                          sizeof why);
  if (rc < 0) {
    agent_log("%s: cannot join the coordinator at %s: %s", task, coord,
              why[0] ? why : loom_strerror(rc));
    goto out;
  }
  bool iface_bad = agent_choose_host(a, fd, why, sizeof why, iface_err, sizeof iface_err) < 0;
  if (iface_bad)
    agent_log("%s: %s", task, iface_err);
  else
    loom__log(LOOM_LOG_INFO, "agent", "%s: advertising %s (%s)", task, a->host, why);
  if ((rc = agent_reserve_port(a)) < 0) {
    agent_log("%s: cannot reserve a port: %s", task, strerror(errno));
    goto out;
  }
  wire_msg reg = {.type = WIRE_REGISTER,
                  .u.reg = {.task = task,
                            .attempt = a->attempt,
                            .host = a->host,
                            .port = a->port,
                            .has_pid = true,
                            .pid = getpid(),
                            .inflate = true,
                            .host_why = why,
                            .any_attempt = any,
                            .has_fence = fence >= 0,
                            .fence = fence,
                            .has_protocol = true,
                            .protocol = WIRE_PROTOCOL,
                            .version = LOOM__VERSION}};
  rc = wire_msg_send(fd, &reg);
  wire_frame f;
  if (rc == 0) rc = wire_recv(fd, &a->rd, &f, 30000);
  /* attempt "any" while its task waits for no agent: the coordinator keeps
   * it (parked), with heartbeats, until the task's next launch or the end */
  int park_ms = 3 * (int)loom__tun(LOOM_TUN_HEARTBEAT_MS);
  while (rc == 0 && any && f.type == WIRE_HEARTBEAT) {
    wire_frame_free(&f);
    rc = wire_recv(fd, &a->rd, &f, park_ms > 30000 ? park_ms : 30000);
  }
  if (rc == 0 && f.type == WIRE_ABORT) {
    /* refused with a reason (attempt "any"): 4, its task may want an agent
     * later; 5, its launch is stale (Spark must launch the stage again); 6,
     * the job is ending */
    wire_msg am;
    char err[200];
    if (wire_msg_decode(&f, &am, err, sizeof err) == 0) {
      agent_log("%s: the coordinator refused the registration: %s", task, am.u.abort.reason);
      status = am.u.abort.stale ? 5 : am.u.abort.final ? 6 : 4;
      wire_msg_free(&am);
    } else {
      agent_log("%s: the coordinator refused the registration: %s", task, err);
    }
    wire_frame_free(&f);
    goto out;
  }
  if (rc < 0 || f.type != WIRE_ASSIGN) {
    if (rc == 0) wire_frame_free(&f);
    if (any && rc < 0)
      agent_log("%s: the coordinator is gone (it ended, or its job did): %s", task,
                loom_strerror(rc));
    else if (any)
      agent_log("%s: the coordinator refused the registration (attempt any)", task);
    else
      agent_log("%s: the coordinator refused the registration (attempt %d)", task, a->attempt);
    goto out;
  }
  char err[1024] = "";
  int code = 0;
  if (iface_bad) {
    loom__strlcpy(err, iface_err, sizeof err);
    code = 2;
  }
  wire_msg am;
  if (wire_msg_decode(&f, &am, err, sizeof err) < 0) {
    wire_frame_free(&f);
    agent_log("%s: %s", task, err);
    wire_msg_send(fd, &(wire_msg){.type = WIRE_FAIL, .u.fail = {.reason = err, .code = 1}});
    status = 0;
    goto out;
  }
  /* as borrows from the frame's JSON: keep that */
  a->assign = json_incref(f.json);
  a->as = am.u.assign;
  if (am.u.assign.has_attempt) a->attempt = (int)am.u.assign.attempt;
  wire_msg_free(&am);
  wire_frame_free(&f);
  if (!code && (!a->as.has_protocol || a->as.protocol != WIRE_PROTOCOL)) {
    char theirs[32] = "none";
    if (a->as.has_protocol) snprintf(theirs, sizeof theirs, "%lld", (long long)a->as.protocol);
    snprintf(err, sizeof err,
             "this agent is loom %s (protocol %d) and the coordinator loom %s (protocol %s): "
             "run the same loom on both sides",
             LOOM__VERSION, WIRE_PROTOCOL, a->as.version ? a->as.version : "(an earlier one)",
             theirs);
    code = 1;
  }
  int64_t procs = a->as.procs;
  a->nprocs = procs < 1 || procs > MAX_PROCS ? 1 : (int)procs;
  a->procs = calloc((size_t)a->nprocs, sizeof *a->procs);
  const char *wd = a->as.workdir;
  if (!code && (!a->procs || loom__mkdir_p(wd, 0755) < 0)) {
    snprintf(err, sizeof err, "cannot create the working directory %s: %s", wd, strerror(errno));
    code = 1;
  }
  if (!code && agent_place_files(a, wd, err, sizeof err) < 0) code = 1;
  if (!code) code = agent_check_command(a, wd, err, sizeof err);
  if (code) {
    wire_msg_send(fd, &(wire_msg){.type = WIRE_FAIL, .u.fail = {.reason = err, .code = code}});
    status = 0;
    goto out;
  }
  if (wire_msg_send(fd, &(wire_msg){.type = WIRE_READY}) < 0) {
    agent_log("%s: lost the coordinator while starting", task);
    goto out;
  }

  uv_loop_init(&a->loop);
  uv_tcp_init(&a->loop, &a->conn);
  a->conn.data = a;
  int terr = 0;
  a->tls = wire_io_take(fd, &terr); /* TLS goes on in memory, under libuv */
  if (terr < 0 || uv_tcp_open(&a->conn, fd) < 0) goto out_loop;
  fd = -1; /* the loop owns it now */
  a->conn_open = true;
  a->last_rx = loom__now_ms();
  uv_timer_init(&a->loop, &a->hb);
  uv_timer_init(&a->loop, &a->grace);
  uv_timer_init(&a->loop, &a->drain);
  uv_timer_init(&a->loop, &a->linger);
  uv_timer_init(&a->loop, &a->porthold);
  a->hb.data = a->grace.data = a->drain.data = a->linger.data = a->porthold.data = a;
  uint64_t hb = (uint64_t)loom__tun(LOOM_TUN_HEARTBEAT_MS);
  uv_timer_start(&a->hb, hb_tick, hb, hb);
  int sigs[3] = {SIGTERM, SIGINT, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(&a->loop, &a->sigs[i]);
    a->sigs[i].data = a;
    uv_signal_start(&a->sigs[i], on_signal, sigs[i]);
  }
  uv_read_start((uv_stream_t *)&a->conn, conn_alloc, conn_read);
  if (a->tls) conn_read((uv_stream_t *)&a->conn, 0, NULL); /* what TLS read ahead */
  uv_run(&a->loop, UV_RUN_DEFAULT);
  status = a->exit_status;
out_loop:
  uv_walk(&a->loop, close_walk, NULL);
  uv_run(&a->loop, UV_RUN_DEFAULT);
  uv_loop_close(&a->loop);
out:
  remove_cgroup(a);
  remove_tmpdir(a);
  agent_nodecopy_release(a->nodecopy_fd, a->nodecopy_id, a->job_ending);
  if (fd >= 0) wire_io_close(fd);
  wire_tls_mem_free(a->tls);
  if (a->reserve_fd >= 0) close(a->reserve_fd);
  json_decref(a->assign);
  wire_reader_free(&a->rd);
  /* pipes the loop closed at the end (close_walk) kept their line buffers */
  for (int i = 0; a->procs && i < a->nprocs; i++)
    for (int k = 0; k < 2; k++) loom__buf_free(&a->procs[i].out[k].line);
  free(a->procs);
  free(a);
  return status;
}
