/* slurm.c: the Slurm backend. One spec is one Slurm job: `loom run` writes
 * a batch script with one heterogeneous component per role (instances ->
 * --ntasks, vcores -> --cpus-per-task, memory -> --mem-per-cpu, gpus ->
 * --gres=gpu:N, label -> --constraint, queue -> --partition) whose only
 * command is `loom coordinator JOBDIR`. The coordinator thus runs inside
 * the allocation (a detached job survives its client) and starts each
 * task's agent with `srun --het-group=G -n1 --exact ... loom agent`, one
 * srun (one job step) per task so that a task can be stopped and
 * restarted alone. srun's own output (its errors, and whatever the agent
 * prints before it reaches the coordinator) is read through a pipe,
 * copied to the coordinator's stderr (coordinator.log) prefixed with the
 * task, and its last lines are handed to the coordinator with the exit,
 * which launches the task again when the step launch failed before the
 * agent registered (launch_retryable). */
#include "backend/backend.h"
#include "jobdir/jobdir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The last lines of an srun's output kept for the coordinator's messages
 * (bytes), and the longest line copied whole to coordinator.log. */
#define SRUN_TAIL 1024
#define SRUN_LINE 2048
/* After srun exited, how long to wait for the rest of its output before
 * reporting the exit anyway. */
#define SRUN_EOF_WAIT_MS 2000
/* Staging (cp, tar, sbcast) and unstaging (srun rm) commands: bounds. */
#define STAGE_TIMEOUT_MS (600 * 1000)
#define UNSTAGE_TIMEOUT_MS (60 * 1000)

/* One srun: its process, the pipe its stdout and stderr write to, and a
 * timer bounding the wait for that pipe's end after the process exited.
 * Freed when all three handles are closed. */
typedef struct {
  uv_process_t proc;
  uv_pipe_t out;
  uv_timer_t eof_timer;
  backend *b;
  int task_id;
  char task[80];
  int handles;      /* handles not yet closed */
  bool running;     /* the process has not exited */
  bool reading;     /* the pipe is open */
  bool reported;    /* on_exit was called */
  int64_t status;
  int sig;
  size_t line_len;
  char line[SRUN_LINE];
  char tail[SRUN_TAIL]; /* the last complete lines, each ending in '\n' */
  char rbuf[4096];
} srun_proc;

typedef struct {
  char stage_dir[256];
  int ngroups;
  int ntasks;
  srun_proc **procs;        /* task id -> its srun, until its exit is reported */
  int *group;               /* task id -> het group (-1: not a het job) */
  const spec_role **role;   /* task id -> its role */
} slurm_priv;

static int slurm_check(const spec_job *s, char *err, size_t errlen) {
  if (access("/usr/bin/sbatch", X_OK) != 0 && system("command -v sbatch >/dev/null 2>&1") != 0) {
    snprintf(err, errlen, "sbatch is not installed: install slurm-client, or use --backend local");
    return LOOM_EBACKEND;
  }
  return 0;
}

static int slurm_probe(char *msg, size_t len) {
  FILE *p = popen("sinfo -h -o '%P %a %D %t' 2>&1", "r");
  if (!p) {
    snprintf(msg, len, "slurm: cannot run sinfo");
    return -1;
  }
  char line[256] = "";
  size_t off = 0;
  while (fgets(line, sizeof line, p) && off + 2 < len) {
    line[strcspn(line, "\n")] = 0;
    off += (size_t)snprintf(msg + off, len - off, "%s%s", off ? "; " : "slurm: partitions ", line);
  }
  int rc = pclose(p);
  return rc == 0 && off ? 0 : -1;
}

/* Per-task options: what one task of role r asks for, in the batch script. */
static void role_opts(const spec_role *r, char *buf, size_t len) {
  size_t off = 0;
  int vc = r->vcores > 0 ? r->vcores : 1;
  off += (size_t)snprintf(buf + off, len - off, " --cpus-per-task=%d", vc);
  if (r->memory)
    off += (size_t)snprintf(buf + off, len - off, " --mem-per-cpu=%lluM",
                            (unsigned long long)((r->memory + (uint64_t)vc * 1048576 - 1) /
                                                 ((uint64_t)vc * 1048576)));
  if (r->gpus) off += (size_t)snprintf(buf + off, len - off, " --gres=gpu:%d", r->gpus);
  if (r->label) off += (size_t)snprintf(buf + off, len - off, " --constraint=%s", r->label);
}

int backend_slurm_script(const spec_job *s, const char *job_id, const char *job_dir,
                         const char *exe, char **out) {
  loom__buf b;
  loom__buf_init(&b, 1 << 20);
  loom__buf_printf(&b, "#!/bin/sh\n# loom job %s: one component per role\n", job_id);
  for (int i = 0; i < s->nroles; i++) {
    const spec_role *r = &s->roles[i];
    char opts[512];
    role_opts(r, opts, sizeof opts);
    if (i > 0) loom__buf_printf(&b, "#SBATCH hetjob\n");
    loom__buf_printf(&b, "#SBATCH --ntasks=%d%s\n", r->instances, opts);
    if (i == 0) {
      loom__buf_printf(&b, "#SBATCH --job-name=%s\n#SBATCH --output=%s/%s\n", job_id, job_dir,
                       jobdir_name(JOBDIR_COORD_LOG));
      loom__buf_printf(&b, "#SBATCH --requeue\n");
    }
    if (s->queue) loom__buf_printf(&b, "#SBATCH --partition=%s\n", s->queue);
  }
  loom__buf_printf(&b, "exec '%s' coordinator '%s' --backend slurm\n", exe, job_dir);
  if (!b.p) return LOOM_ENOMEM;
  *out = b.p;
  return 0;
}

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
    if (*c != '\n') detail[k++] = *c;
    else if (c[1]) k += (size_t)snprintf(detail + k, sizeof detail - k, " | ");
  }
  detail[k] = 0;
  b->on_exit(b->arg, s->task_id, s->status, s->sig, k ? detail : NULL);
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
  loom__log(LOOM_LOG_WARN, "slurm", "srun for %s exited but its output stayed open %d ms; "
            "reporting its exit without the rest", s->task, SRUN_EOF_WAIT_MS);
  srun_stop_reading(s);
  srun_maybe_report(s);
}

static void srun_exited(uv_process_t *p, int64_t status, int sig) {
  srun_proc *s = p->data;
  s->running = false;
  s->status = status;
  s->sig = sig;
  srun_close(s, (uv_handle_t *)p);
  if (s->reading)
    uv_timer_start(&s->eof_timer, srun_eof_expired, SRUN_EOF_WAIT_MS, 0);
  srun_maybe_report(s);
}

static int slurm_launch(backend *b, int task_id, char *const *argv, char *const *env,
                        char *err, size_t errlen) {
  slurm_priv *pr = b->priv;
  const char *task = NULL;
  for (int i = 0; env[i]; i++)
    if (!strncmp(env[i], "LOOM_TASK=", 10)) task = env[i] + 10;
  char hg[32] = "";
  if (pr->group[task_id] >= 0) snprintf(hg, sizeof hg, "--het-group=%d", pr->group[task_id]);
  char name[160];
  snprintf(name, sizeof name, "--job-name=%s", task ? task : "loom-agent");
  char cpus[48] = "", mem[48] = "";
  const spec_role *r = pr->role[task_id];
  int vc = r->vcores > 0 ? r->vcores : 1;
  snprintf(cpus, sizeof cpus, "--cpus-per-task=%d", vc);
  if (r->memory)
    snprintf(mem, sizeof mem, "--mem-per-cpu=%lluM",
             (unsigned long long)((r->memory + (uint64_t)vc * 1048576 - 1) / ((uint64_t)vc * 1048576)));
  char *args[16];
  int k = 0;
  args[k++] = "srun";
  if (hg[0]) args[k++] = hg;
  args[k++] = cpus;
  if (mem[0]) args[k++] = mem;
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
  uv_process_options_t o = {.exit_cb = srun_exited, .file = "srun", .args = args,
                            .env = (char **)env, .stdio_count = 3, .stdio = stdio};
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
    if (spawned) srun_close(s, (uv_handle_t *)&s->proc);
    else s->handles--;
    return LOOM_EBACKEND;
  }
  s->reading = true;
  uv_read_start((uv_stream_t *)&s->out, srun_alloc, srun_read);
  s->running = true;
  pr->procs[task_id] = s;
  return 0;
}

static void slurm_signal(backend *b, int task_id, int sig) {
  slurm_priv *pr = b->priv;
  srun_proc *s = pr->procs[task_id];
  /* srun forwards SIGTERM to its task; a second SIGINT within a second or
   * a SIGKILL of srun ends the step */
  if (s && s->running) uv_process_kill(&s->proc, sig);
}

static const char *slurm_host(backend *b, int task_id) { return NULL; }

/* Is the job directory on a filesystem every node sees? Network and
 * cluster filesystems are; local ones are not (LOOM_SLURM_FILES=shared or
 * sbcast overrides). */
static bool job_dir_shared(const char *dir) {
  const char *mode = loom__tun_str(LOOM_TUN_SLURM_FILES);
  if (!strcmp(mode, "shared")) return true;
  if (!strcmp(mode, "sbcast")) return false;
  struct statfs sf;
  if (statfs(dir, &sf) != 0) return false;
  switch ((unsigned long)sf.f_type) {
  case 0x6969:     /* NFS */
  case 0x0BD00BD0: /* Lustre */
  case 0x47504653: /* GPFS */
  case 0xFF534D42: /* CIFS */
  case 0x19830326: /* BeeGFS */
  case 0x65735546: /* FUSE (e.g. CephFS-fuse) */
  case 0x00C36400: /* CephFS */
    return true;
  }
  return false;
}

/* Runs argv and waits for it, at most timeout_ms (then kills it). Returns 0
 * when it exited 0, else an error with err saying what failed. Blocks. */
static int run_cmd(char *const argv[], int timeout_ms, char *err, size_t errlen) {
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "cannot run %s: %s", argv[0], strerror(errno));
    return LOOM_EIO;
  }
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  int st = 0;
  struct timespec nap = {0, 20 * 1000 * 1000};
  for (int waited = 0;; waited += 20) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      snprintf(err, errlen, "%s %s: waitpid: %s", argv[0], argv[1] ? argv[1] : "", strerror(errno));
      return LOOM_EBACKEND;
    }
    if (waited >= timeout_ms) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
      snprintf(err, errlen, "%s %s did not finish within %d s; killed it", argv[0],
               argv[1] ? argv[1] : "", timeout_ms / 1000);
      return LOOM_EBACKEND;
    }
    nanosleep(&nap, NULL);
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  snprintf(err, errlen, "%s %s failed (status %d)", argv[0], argv[1] ? argv[1] : "",
           WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return LOOM_EBACKEND;
}

static int slurm_stage(backend *b, const spec_job *s, json_t **files, char *err, size_t errlen) {
  slurm_priv *pr = b->priv;
  *files = NULL;
  const char *jid = getenv("SLURM_JOB_ID"), *jdir = getenv("LOOM_JOB_DIR_STAGE");
  if (s->nfiles == 0 || !jid || job_dir_shared(jdir ? jdir : ".")) return 0;
  snprintf(pr->stage_dir, sizeof pr->stage_dir, "/tmp/loom-files-%s", jid);
  if (loom__mkdir_p(pr->stage_dir, 0755) < 0) {
    snprintf(err, errlen, "cannot create %s", pr->stage_dir);
    return LOOM_EIO;
  }
  json_t *out = json_object();
  int rc = 0;
  for (int i = 0; i < s->nfiles && rc == 0; i++) {
    struct stat st;
    const char *src = s->files[i].value;
    char flat[160], local[512];
    snprintf(flat, sizeof flat, "%d", i);
    bool dir = stat(src, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(local, sizeof local, "%s/%s%s", pr->stage_dir, flat, dir ? ".tar" : "");
    if (dir) {
      char *tar[] = {"tar", "-C", (char *)src, "-cf", local, ".", NULL};
      rc = run_cmd(tar, STAGE_TIMEOUT_MS, err, errlen);
    } else {
      char *cp[] = {"cp", "-p", (char *)src, local, NULL};
      rc = run_cmd(cp, STAGE_TIMEOUT_MS, err, errlen);
    }
    /* one broadcast per het component: each is its own set of nodes */
    for (int g = 0; g < (pr->ngroups > 1 ? pr->ngroups : 1) && rc == 0; g++) {
      char j[64];
      snprintf(j, sizeof j, pr->ngroups > 1 ? "%s+%d" : "%s", jid, g);
      char *bc[] = {"sbcast", "-f", "-j", j, local, local, NULL};
      rc = run_cmd(bc, STAGE_TIMEOUT_MS, err, errlen);
    }
    if (dir) json_object_set_new(out, s->files[i].key, json_pack("{s:s}", "tar", local));
    else json_object_set_new(out, s->files[i].key, json_string(local));
  }
  if (rc < 0) {
    json_decref(out);
    return rc;
  }
  *files = out;
  return 0;
}

static void slurm_unstage(backend *b) {
  slurm_priv *pr = b->priv;
  if (!pr->stage_dir[0]) return;
  for (int g = 0; g < (pr->ngroups > 1 ? pr->ngroups : 1); g++) {
    char var[64], hg[32], nn[32], err[256];
    snprintf(var, sizeof var, pr->ngroups > 1 ? "SLURM_JOB_NUM_NODES_HET_GROUP_%d" : "SLURM_JOB_NUM_NODES", g);
    const char *nodes = getenv(var);
    snprintf(hg, sizeof hg, "--het-group=%d", g);
    snprintf(nn, sizeof nn, "--nodes=%s", nodes ? nodes : "1");
    char *args[12];
    int k = 0;
    args[k++] = "srun";
    if (pr->ngroups > 1) args[k++] = hg;
    args[k++] = nn;
    args[k++] = "--ntasks-per-node=1";
    args[k++] = "--overlap";
    args[k++] = "--quiet";
    args[k++] = "rm";
    args[k++] = "-rf";
    args[k++] = pr->stage_dir;
    args[k] = NULL;
    if (run_cmd(args, UNSTAGE_TIMEOUT_MS, err, sizeof err) < 0)
      loom__log(LOOM_LOG_WARN, "slurm", "cannot remove %s from the nodes of component %d: %s",
                pr->stage_dir, g, err);
  }
  pr->stage_dir[0] = 0;
}

static void slurm_destroy(backend *b) {
  slurm_priv *pr = b->priv;
  /* an srun whose exit was never reported (the loop ended first): its
   * handles were closed without our callbacks by the coordinator's
   * teardown */
  for (int i = 0; i < pr->ntasks; i++) free(pr->procs[i]);
  free(pr->group);
  free(pr->role);
  free(pr->procs);
  free(pr);
  free(b);
}

const backend_ops loom__backend_slurm = {
    .name = "slurm",
    .launcher = "srun",
    .tracks_processes = true,
    .launch_retryable = true,
    .check = slurm_check,
    .probe = slurm_probe,
    .launch = slurm_launch,
    .signal = slurm_signal,
    .host = slurm_host,
    .stage_files = slurm_stage,
    .unstage_files = slurm_unstage,
    .destroy = slurm_destroy,
};

/* The coordinator tells the backend which het group each task is in. */
int backend_slurm_setup(backend *b, const spec_job *s, int ntasks) {
  slurm_priv *pr = calloc(1, sizeof *pr);
  if (!pr) return LOOM_ENOMEM;
  pr->procs = calloc((size_t)ntasks + 1, sizeof *pr->procs);
  pr->group = calloc((size_t)ntasks + 1, sizeof *pr->group);
  pr->role = calloc((size_t)ntasks + 1, sizeof *pr->role);
  if (!pr->procs || !pr->group || !pr->role) {
    free(pr->procs);
    free(pr->group);
    free(pr->role);
    free(pr);
    return LOOM_ENOMEM;
  }
  pr->ngroups = s->nroles;
  pr->ntasks = ntasks;
  int k = 0;
  for (int i = 0; i < s->nroles; i++)
    for (int j = 0; j < s->roles[i].instances; j++, k++) {
      pr->group[k] = s->nroles > 1 ? i : -1;
      pr->role[k] = &s->roles[i];
    }
  free(b->priv);
  b->priv = pr;
  return 0;
}
