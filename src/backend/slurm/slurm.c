/* slurm.c: the Slurm backend. One spec is one Slurm job. `loom run` first
 * checks the spec against the partition's nodes (sinfo) and picks how to ask
 * for it (the placement plan, plan.c: components, or a refusal with what the
 * spec needs against what the partition has). It writes a batch script
 * (instances -> --ntasks, vcores -> --cpus-per-task, memory ->
 * --mem-per-cpu, gpus -> --gpus-per-task, label -> --constraint, queue ->
 * --partition) whose only command is `loom coordinator JOBDIR`, with
 * LOOM_SLURM_GROUPS naming each role's component. The coordinator thus runs
 * inside the allocation (a detached job survives its client) and starts each
 * task's agent (srun.c) with `srun [--het-group=G] -n1 --exact ... loom
 * agent`, one srun (one job step) per task so that a task can be stopped and
 * restarted alone; the step asks for the task's own CPUs, memory and GPUs,
 * and the task keeps the cpuset and GPUs Slurm gave its step. srun's own
 * output (its errors, and whatever the agent prints before it reaches the
 * coordinator) is read through a pipe, copied to the coordinator's stderr
 * (coordinator.log) prefixed with the task, and its last lines are handed to
 * the coordinator with the exit, which launches the task again when the step
 * launch failed before the agent registered (launch_retryable). While the
 * job is pending, job_state tells Slurm's state and reason. */
#include "backend/backend.h"
#include "backend/slurm/plan.h"
#include "backend/slurm/slurm_int.h"
#include "jobdir/jobdir.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
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

/* Staging (cp, tar, sbcast) and unstaging (srun rm) commands: bounds. */
#define STAGE_TIMEOUT_MS (600 * 1000)
#define UNSTAGE_TIMEOUT_MS (60 * 1000)
/* Slurm's client commands (sinfo, sbatch, squeue, scancel): bounds. A
 * wrong SLURM_CONF makes them retry for 60 s. */
#define SLURM_CMD_TIMEOUT_MS (30 * 1000)
/* Nodes of a partition looked at, and named in a refusal. */
#define MAX_NODES 4096
/* loom's executable as the client ships it: a copy in the job directory,
 * which the batch script's coordinator runs (the first node reaches the
 * job directory). */
#define SHIP_NAME "loom"

static int run_cmd(char *const argv[], int timeout_ms, char *err, size_t errlen);
static bool job_dir_shared(const char *dir);

/* ---- Slurm's client commands ---------------------------------------------- */

/* Runs argv (no shell) with its stdout and stderr into out (at most
 * outlen - 1 bytes kept, NUL-terminated), killing it after timeout_ms.
 * Returns its exit status (0 success), or -1 when it could not run or
 * was killed. Blocks. */
static int run_capture(char *const argv[], int timeout_ms, char *out, size_t outlen) {
  out[0] = 0;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  size_t have = 0;
  uint64_t end = loom__now_ms() + (uint64_t)timeout_ms;
  bool killed = false;
  for (;;) {
    uint64_t now = loom__now_ms();
    if (now >= end) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    struct pollfd pf = {.fd = fds[0], .events = POLLIN};
    int pr = poll(&pf, 1, (int)(end - now));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    char buf[4096];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size_t take = (size_t)n < outlen - 1 - have ? (size_t)n : outlen - 1 - have;
    memcpy(out + have, buf, take);
    have += take;
    out[have] = 0;
  }
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (killed || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

/* out's lines joined by " | ", without the last newline, for messages. */
static void one_line(char *out) {
  size_t n = strlen(out);
  while (n && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = 0;
  for (char *c = out; *c; c++)
    if (*c == '\n') *c = ';';
}

/* ---- the partition's nodes ---------------------------------------------- */

/* The GPUs in sinfo's gres column ("gpu:2", "gpu:a100:4(S:0-1),shard:8"). */
static int gres_gpus(const char *g) {
  int n = 0;
  while (g && *g) {
    const char *end = strchr(g, ',');
    size_t len = end ? (size_t)(end - g) : strlen(g);
    if (len > 4 && !strncmp(g, "gpu:", 4)) {
      const char *paren = memchr(g, '(', len);
      const char *stop = paren ? paren : g + len, *colon = stop;
      while (colon > g && colon[-1] != ':') colon--;
      n += atoi(colon);
    }
    g = end ? end + 1 : NULL;
  }
  return n;
}

/* The nodes of partition part (NULL: the default partition) into nodes
 * (calloc'ed, *n of them), its name into pname. 0, LOOM_ERESOURCE (no
 * such partition) or LOOM_EBACKEND (sinfo failed), err filled. Blocks. */
static int slurm_nodes(const char *part, slurm_node **nodes, int *n, char *pname, size_t plen,
                       char *err, size_t errlen) {
  *nodes = NULL;
  *n = 0;
  char *argv[10];
  int k = 0;
  argv[k++] = "sinfo";
  argv[k++] = "-h";
  argv[k++] = "-N";
  argv[k++] = "-o";
  argv[k++] = "%N|%P|%c|%m|%f|%G";
  if (part) {
    argv[k++] = "-p";
    argv[k++] = (char *)part;
  }
  argv[k] = NULL;
  size_t cap = 1 << 20;
  char *out = malloc(cap);
  if (!out) return LOOM_ENOMEM;
  int st = run_capture(argv, SLURM_CMD_TIMEOUT_MS, out, cap);
  if (st != 0) {
    one_line(out);
    snprintf(err, errlen, "cannot ask Slurm for its nodes (sinfo %s): %s; is SLURM_CONF right?",
             st < 0 ? "did not answer" : "failed", out[0] ? out : "no output");
    free(out);
    return LOOM_EBACKEND;
  }
  slurm_node *all = calloc(MAX_NODES, sizeof *all);
  if (!all) {
    free(out);
    return LOOM_ENOMEM;
  }
  loom__strlcpy(pname, part ? part : "", plen);
  int cnt = 0;
  for (char *save = NULL, *line = strtok_r(out, "\n", &save); line && cnt < MAX_NODES;
       line = strtok_r(NULL, "\n", &save)) {
    char *f[6] = {0};
    int nf = 0;
    for (char *c = line; nf < 6; nf++) {
      f[nf] = c;
      c = strchr(c, '|');
      if (!c) {
        nf++;
        break;
      }
      *c++ = 0;
    }
    if (nf < 6) continue;
    size_t pl = strlen(f[1]);
    bool dflt = pl && f[1][pl - 1] == '*';
    if (dflt) f[1][pl - 1] = 0;
    if (!part && !dflt) continue;
    if (!part) loom__strlcpy(pname, f[1], plen);
    slurm_node *nd = &all[cnt++];
    loom__strlcpy(nd->name, f[0], sizeof nd->name);
    nd->cpus = atoi(f[2]);
    nd->mem_mb = strtoull(f[3], NULL, 10);
    loom__strlcpy(nd->features, strcmp(f[4], "(null)") ? f[4] : "", sizeof nd->features);
    nd->gpus = gres_gpus(f[5]);
  }
  free(out);
  if (cnt == 0) {
    free(all);
    if (part)
      snprintf(err, errlen,
               "Slurm has no partition '%s' (or it has no nodes): set queue "
               "to a partition that `sinfo` lists",
               part);
    else
      snprintf(err, errlen,
               "Slurm has no default partition: set queue to one that `sinfo` "
               "lists");
    return LOOM_ERESOURCE;
  }
  *nodes = all;
  *n = cnt;
  return 0;
}

/* Checks s against its partition (sinfo) and picks the plan: 0 with *p
 * made, or LOOM_ERESOURCE / LOOM_EBACKEND with err filled. Blocks. */
static int slurm_plan_for(const spec_job *s, slurm_plan *p, char *err, size_t errlen) {
  slurm_node *nodes;
  int n;
  char pname[128];
  int rc = slurm_nodes(s->queue, &nodes, &n, pname, sizeof pname, err, errlen);
  if (rc < 0) return rc;
  rc = slurm_plan_place(s, nodes, n, pname, p, err, errlen);
  free(nodes);
  return rc;
}

static bool have_cmd(const char *name) {
  const char *path = getenv("PATH");
  char p[4096];
  for (const char *d = path ? path : "/usr/bin:/bin"; d && *d;) {
    size_t l = strcspn(d, ":");
    snprintf(p, sizeof p, "%.*s/%s", (int)l, d, name);
    if (access(p, X_OK) == 0) return true;
    d += l + (d[l] == ':');
  }
  return false;
}

static int slurm_check(const spec_job *s, char *err, size_t errlen) {
  if (!have_cmd("sbatch")) {
    snprintf(err, errlen,
             "sbatch is not installed: install slurm-client, or use another "
             "backend (%s)",
             backend_names());
    return LOOM_EBACKEND;
  }
  slurm_plan p;
  int rc = slurm_plan_for(s, &p, err, errlen);
  if (rc == 0) slurm_plan_free(&p);
  return rc;
}

static int slurm_probe(char *msg, size_t len) {
  char *argv[] = {"sinfo", "-h", "-o", "%P %a %D %t", NULL};
  char out[2048];
  int st = run_capture(argv, SLURM_CMD_TIMEOUT_MS, out, sizeof out);
  size_t off = 0;
  for (char *save = NULL, *line = strtok_r(out, "\n", &save); line && off + 2 < len;
       line = strtok_r(NULL, "\n", &save))
    off += (size_t)snprintf(msg + off, len - off, "%s%s", off ? "; " : "slurm: partitions ", line);
  if (st != 0 || !off) {
    snprintf(msg, len, "slurm: sinfo %s (is SLURM_CONF right?)",
             st < 0 ? "did not answer" : "failed");
    return -1;
  }
  return 0;
}

/* Per-task options of component c, for the batch script. */
static void comp_opts(const slurm_comp *c, char *buf, size_t len) {
  size_t off = 0;
  off += (size_t)snprintf(buf + off, len - off, " --cpus-per-task=%d", c->vcores);
  if (c->mem_per_cpu_mb)
    off += (size_t)snprintf(buf + off, len - off, " --mem-per-cpu=%lluM", c->mem_per_cpu_mb);
  if (c->gpus) off += (size_t)snprintf(buf + off, len - off, " --gpus-per-task=%d", c->gpus);
  if (c->label) off += (size_t)snprintf(buf + off, len - off, " --constraint=%s", c->label);
}

/* The batch script for spec s under plan p: one component each, then the
 * coordinator, told each role's component. *out is malloc'ed. */
static int slurm_script(const spec_job *s, const slurm_plan *p, const char *job_id,
                        const char *job_dir, char **out) {
  loom__buf b;
  loom__buf_init(&b, 1 << 20);
  loom__buf_printf(&b, "#!/bin/sh\n# loom job %s: %d component%s (", job_id, p->ncomp,
                   p->ncomp > 1 ? "s" : "");
  for (int i = 0; i < s->nroles; i++)
    loom__buf_printf(&b, "%s%s -> %d", i ? ", " : "", s->roles[i].name, p->role_comp[i]);
  loom__buf_printf(&b, ")\n");
  for (int c = 0; c < p->ncomp; c++) {
    char opts[512];
    comp_opts(&p->comp[c], opts, sizeof opts);
    if (c > 0) loom__buf_printf(&b, "#SBATCH hetjob\n");
    loom__buf_printf(&b, "#SBATCH --ntasks=%d%s\n", p->comp[c].ntasks, opts);
    if (c == 0) {
      loom__buf_printf(&b, "#SBATCH --job-name=%s\n#SBATCH --output=%s/%s\n", job_id, job_dir,
                       jobdir_name(JOBDIR_COORD_LOG));
      loom__buf_printf(&b, "#SBATCH --requeue\n");
    }
    if (s->queue) loom__buf_printf(&b, "#SBATCH --partition=%s\n", s->queue);
  }
  loom__buf_printf(&b, "LOOM_SLURM_GROUPS=");
  for (int i = 0; i < s->nroles; i++) loom__buf_printf(&b, "%s%d", i ? "," : "", p->role_comp[i]);
  loom__buf_printf(&b, "\nexport LOOM_SLURM_GROUPS\n");
  loom__buf_printf(&b, "exec '%s/%s' coordinator '%s' --backend slurm\n", job_dir, SHIP_NAME,
                   job_dir);
  if (!b.p) return LOOM_ENOMEM;
  *out = b.p;
  return 0;
}

static int slurm_submit(const spec_job *s, const char *job_id, const char *job_dir, const char *exe,
                        backend_job *job, char *err, size_t errlen) {
  memset(job, 0, sizeof *job);
  slurm_plan p;
  int rc = slurm_plan_for(s, &p, err, errlen);
  if (rc < 0) return rc;
  char *script = NULL, path[4096];
  /* the binary travels with the job: nodes need not see the client's */
  snprintf(path, sizeof path, "%s/%s", job_dir, SHIP_NAME);
  char *cp[] = {"cp", (char *)exe, path, NULL};
  rc = run_cmd(cp, STAGE_TIMEOUT_MS, err, errlen);
  if (rc == 0 && chmod(path, 0755) < 0) {
    snprintf(err, errlen, "cannot make %s executable: %s", path, strerror(errno));
    rc = LOOM_EIO;
  }
  if (rc < 0) {
    slurm_plan_free(&p);
    return rc;
  }
  rc = slurm_script(s, &p, job_id, job_dir, &script);
  slurm_plan_free(&p);
  if (rc < 0) return rc;
  jobdir_path(job_dir, JOBDIR_SLURM_SH, path, sizeof path);
  rc = loom__write_atomic(path, script, strlen(script), 0700, false);
  free(script);
  if (rc < 0) {
    snprintf(err, errlen, "cannot write %s", path);
    char shipped[4096];
    snprintf(shipped, sizeof shipped, "%s/%s", job_dir, SHIP_NAME);
    unlink(shipped);
    return rc;
  }
  /* Slurm's own opinion too: what it could never run would wait forever */
  char out[4096];
  for (int pass = 0; pass < 2; pass++) {
    char *argv[] = {"sbatch", pass == 0 ? "--test-only" : "--parsable", path, NULL};
    int st = run_capture(argv, SLURM_CMD_TIMEOUT_MS, out, sizeof out);
    if (st != 0) {
      one_line(out);
      char shipped[4096];
      snprintf(shipped, sizeof shipped, "%s/%s", job_dir, SHIP_NAME);
      unlink(shipped);
      snprintf(err, errlen, "Slurm refused the job: %s (the batch script is %s)",
               out[0]   ? out
               : st < 0 ? "sbatch did not answer"
                        : "sbatch failed",
               path);
      return strstr(out, "allocation failure") || strstr(out, "invalid") ? LOOM_ERESOURCE
                                                                         : LOOM_EBACKEND;
    }
  }
  out[strcspn(out, ";\n")] = 0;
  if (!out[0] || strspn(out, "0123456789") != strlen(out)) {
    snprintf(err, errlen, "sbatch --parsable printed no job id ('%s')", out);
    return LOOM_EBACKEND;
  }
  json_t *sj = json_pack("{s:s}", "job_id", out);
  char *sjs = json_dumps(sj, JSON_COMPACT);
  json_decref(sj);
  jobdir_path(job_dir, JOBDIR_SLURM_JSON, path, sizeof path);
  rc = sjs ? jobdir_write(job_dir, JOBDIR_SLURM_JSON, sjs, strlen(sjs), false) : LOOM_ENOMEM;
  free(sjs);
  loom__strlcpy(job->id, out, sizeof job->id);
  job->state = BACKEND_JOB_PENDING;
  snprintf(job->what, sizeof job->what, "Slurm job %s", job->id);
  if (rc < 0) snprintf(err, errlen, "cannot write %s (Slurm job %s is submitted)", path, job->id);
  return rc;
}

/* The Slurm job id of a job directory (slurm.json). */
static int job_id_of(const char *job_dir, char *id, size_t len) {
  json_t *j = jobdir_read_json(job_dir, JOBDIR_SLURM_JSON, 1 << 20);
  const char *v = j ? json_string_value(json_object_get(j, "job_id")) : NULL;
  int rc = v && *v && strspn(v, "0123456789") == strlen(v) ? 0 : LOOM_ENOENT;
  if (rc == 0) loom__strlcpy(id, v, len);
  json_decref(j);
  return rc;
}

/* What Slurm's common pending reasons mean, for people. */
static const char *reason_words(const char *r) {
  static const struct {
    const char *code, *words;
  } W[] = {
      {"Resources", "waiting for nodes to free up"},
      {"Priority", "jobs of higher priority are ahead of it"},
      {"Dependency", "waiting for a job it depends on"},
      {"BeginTime", "its start time has not come"},
      {"JobHeldUser", "held by its user (scontrol release)"},
      {"JobHeldAdmin", "held by an administrator"},
      {"PartitionDown", "its partition is down"},
      {"PartitionInactive", "its partition is inactive"},
      {"ReqNodeNotAvail", "nodes it needs are not available"},
      {"QOSMaxJobsPerUserLimit", "the QOS limit on your running jobs is reached"},
      {"AssocGrpCpuLimit", "your association's CPU limit is reached"},
  };
  for (size_t i = 0; i < LOOM__ARRAY_LEN(W); i++)
    if (!strcmp(r, W[i].code)) return W[i].words;
  return NULL;
}

static int slurm_job_state(const char *job_dir, backend_job *job) {
  memset(job, 0, sizeof *job);
  if (job_id_of(job_dir, job->id, sizeof job->id) < 0) return LOOM_ENOENT;
  /* every state: a job just ended is still listed (MinJobAge) */
  char *argv[] = {"squeue", "-h", "-t", "all", "-j", job->id, "-o", "%T|%r", NULL};
  char out[4096];
  int st = run_capture(argv, SLURM_CMD_TIMEOUT_MS, out, sizeof out);
  out[strcspn(out, "\n")] = 0; /* a heterogeneous job: its first component speaks for it */
  char *bar = strchr(out, '|');
  if (st != 0 || !bar) {
    /* squeue forgets a job MinJobAge after its end; "Invalid job id" */
    job->state = BACKEND_JOB_UNKNOWN;
    snprintf(job->what, sizeof job->what, "Slurm job %s is not known to Slurm (any more)", job->id);
    return 0;
  }
  *bar = 0;
  loom__strlcpy(job->native, out, sizeof job->native);
  loom__strlcpy(job->reason, strcmp(bar + 1, "None") ? bar + 1 : "", sizeof job->reason);
  static const char *const pending[] = {"PENDING",     "REQUEUED",      "REQUEUE_HOLD",
                                        "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"};
  static const char *const running[] = {"RUNNING",  "CONFIGURING", "COMPLETING", "SUSPENDED",
                                        "RESIZING", "STAGE_OUT",   "SIGNALING",  "STOPPED"};
  job->state = BACKEND_JOB_ENDED;
  for (size_t i = 0; i < LOOM__ARRAY_LEN(pending); i++)
    if (!strcmp(out, pending[i])) job->state = BACKEND_JOB_PENDING;
  for (size_t i = 0; i < LOOM__ARRAY_LEN(running); i++)
    if (!strcmp(out, running[i])) job->state = BACKEND_JOB_RUNNING;
  /* over for Slurm (not requeued): the shipped binary goes, if the
   * coordinator could not remove it (killed by Slurm) */
  if (job->state == BACKEND_JOB_ENDED) {
    char shipped[4096];
    snprintf(shipped, sizeof shipped, "%s/%s", job_dir, SHIP_NAME);
    unlink(shipped);
  }
  const char *words = job->reason[0] ? reason_words(job->reason) : NULL;
  snprintf(job->what, sizeof job->what, "Slurm job %s is %s%s%s%s%s%s", job->id, job->native,
           job->reason[0] ? " (" : "", job->reason, words ? ": " : "", words ? words : "",
           job->reason[0] ? ")" : "");
  return 0;
}

static int slurm_cancel(const char *job_dir, char *msg, size_t msglen) {
  char id[64], out[1024];
  if (job_id_of(job_dir, id, sizeof id) < 0) {
    snprintf(msg, msglen, "no Slurm job recorded in %s/%s", job_dir,
             jobdir_name(JOBDIR_SLURM_JSON));
    return LOOM_ENOENT;
  }
  char *argv[] = {"scancel", id, NULL};
  int st = run_capture(argv, SLURM_CMD_TIMEOUT_MS, out, sizeof out);
  one_line(out);
  if (st != 0) {
    snprintf(msg, msglen, "scancel %s failed: %s", id, out[0] ? out : "no output");
    return LOOM_EBACKEND;
  }
  /* a cancelled job is not requeued: its batch script never runs again */
  char shipped[4096];
  snprintf(shipped, sizeof shipped, "%s/%s", job_dir, SHIP_NAME);
  unlink(shipped);
  snprintf(msg, msglen, "Slurm job %s", id);
  return 0;
}

/* Agents on other nodes reach the coordinator by this host's address; the
 * coordinator listens on that address only (every interface only when the
 * address is not one of this host's, which a test bind tells). */
static void slurm_coord_address(char *listen_on, size_t bindlen, char *adv, size_t advlen) {
  loom__strlcpy(listen_on, "0.0.0.0", bindlen);
  loom__strlcpy(adv, "127.0.0.1", advlen);
  struct addrinfo hints = {.ai_family = AF_INET}, *res = NULL;
  char hn[256];
  if (gethostname(hn, sizeof hn) == 0 && getaddrinfo(hn, NULL, &hints, &res) == 0 && res) {
    inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, adv, (socklen_t)advlen);
    struct sockaddr_in sa = *(struct sockaddr_in *)res->ai_addr;
    sa.sin_port = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
      loom__strlcpy(listen_on, adv, bindlen);
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
  }
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
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
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
  const char *jid = getenv("SLURM_JOB_ID"), *jdir = loom__tun_raw(LOOM_TUN_JOB_DIR_STAGE);
  if (s->nfiles + s->narchives == 0 || !jid || job_dir_shared(jdir ? jdir : ".")) return 0;
  snprintf(pr->stage_dir, sizeof pr->stage_dir, JOBDIR_NODE_FILES_DIR "%s", jid);
  if (loom__mkdir_p(pr->stage_dir, 0755) < 0) {
    snprintf(err, errlen, "cannot create %s", pr->stage_dir);
    return LOOM_EIO;
  }
  json_t *out = json_object();
  int rc = 0;
  /* files first, then archives (each a file here, unpacked by the agent) */
  for (int i = 0; i < s->nfiles + s->narchives && rc == 0; i++) {
    struct stat st;
    bool arch = i >= s->nfiles;
    const spec_kv *kv = arch ? &s->archives[i - s->nfiles] : &s->files[i];
    const char *src = kv->value;
    char flat[160], local[512];
    snprintf(flat, sizeof flat, "%d", i);
    bool dir = !arch && stat(src, &st) == 0 && S_ISDIR(st.st_mode);
    /* an archive keeps its name: how it unpacks follows its extension */
    const char *base = strrchr(src, '/');
    if (arch)
      snprintf(local, sizeof local, "%s/%s-%s", pr->stage_dir, flat, base ? base + 1 : src);
    else
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
    if (dir || arch)
      json_object_set_new(out, kv->key, json_pack("{s:s}", arch ? "archive" : "tar", local));
    else
      json_object_set_new(out, kv->key, json_string(local));
  }
  if (rc < 0) {
    json_decref(out);
    return rc;
  }
  *files = out;
  return 0;
}

/* Runs `srun ... cmd arg dir` once on every node of every component of
 * the job (mkdir, rm). 0, or the first failure with err filled. Blocks. */
static int on_every_node(const slurm_priv *pr, char *cmd, char *arg, char *dir, char *err,
                         size_t errlen) {
  int rc = 0;
  for (int g = 0; g < (pr->ngroups > 1 ? pr->ngroups : 1); g++) {
    char var[64], hg[32], nn[32], nt[32];
    snprintf(var, sizeof var,
             pr->ngroups > 1 ? "SLURM_JOB_NUM_NODES_HET_GROUP_%d" : "SLURM_JOB_NUM_NODES", g);
    const char *nodes = getenv(var);
    snprintf(hg, sizeof hg, "--het-group=%d", g);
    snprintf(nn, sizeof nn, "--nodes=%s", nodes ? nodes : "1");
    snprintf(nt, sizeof nt, "--ntasks=%s", nodes ? nodes : "1");
    /* one small task a node, whatever the job's tasks ask (the batch
     * script's environment holds their counts and sizes) */
    char *args[16];
    int k = 0;
    args[k++] = "srun";
    if (pr->ngroups > 1) args[k++] = hg;
    args[k++] = nn;
    args[k++] = nt;
    args[k++] = "--ntasks-per-node=1";
    args[k++] = "--cpus-per-task=1";
    args[k++] = "--cpu-bind=none";
    args[k++] = "--overlap";
    args[k++] = "--quiet";
    args[k++] = cmd;
    args[k++] = arg;
    args[k++] = dir;
    args[k] = NULL;
    char out[512];
    int st = run_capture(args, UNSTAGE_TIMEOUT_MS, out, sizeof out);
    if (st != 0 && rc == 0) {
      one_line(out);
      snprintf(err, errlen, "%s %s on the nodes of component %d: srun %s: %s", cmd, dir, g,
               st < 0 ? "did not finish" : "failed", out[0] ? out : "no output");
      rc = LOOM_EBACKEND;
    }
  }
  return rc;
}

static void slurm_unstage(backend *b) {
  slurm_priv *pr = b->priv;
  char err[512];
  if (pr->stage_dir[0] && on_every_node(pr, "rm", "-rf", pr->stage_dir, err, sizeof err) < 0)
    loom__log(LOOM_LOG_WARN, "slurm", "cannot remove the staged files: %s", err);
  pr->stage_dir[0] = 0;
  if (pr->exe_dir[0] && on_every_node(pr, "rm", "-rf", pr->exe_dir, err, sizeof err) < 0)
    loom__log(LOOM_LOG_WARN, "slurm", "cannot remove loom's shipped executable: %s", err);
  pr->exe_dir[0] = 0;
}

/* The binary every task's agent runs: the batch script's coordinator runs
 * the client's copy in the job directory (self); agents run it there too
 * when every node sees the job directory, else from a copy sbcast to
 * /tmp/loom-JOBID/loom on every node of the job (removed with the staged
 * files). */
static int slurm_agent_exe(backend *b, const char *self, char *exe, size_t exelen, char *err,
                           size_t errlen) {
  slurm_priv *pr = b->priv;
  const char *jid = getenv("SLURM_JOB_ID"), *jdir = loom__tun_raw(LOOM_TUN_JOB_DIR_STAGE);
  if (!jid || job_dir_shared(jdir ? jdir : ".")) {
    if (strlen(self) >= exelen) {
      snprintf(err, errlen, "the path of loom's executable is too long: %s", self);
      return LOOM_ERANGE;
    }
    loom__strlcpy(exe, self, exelen);
    return 0;
  }
  snprintf(pr->exe_dir, sizeof pr->exe_dir, JOBDIR_NODE_EXE_DIR "%s", jid);
  snprintf(exe, exelen, "%s/%s", pr->exe_dir, SHIP_NAME);
  int rc = on_every_node(pr, "mkdir", "-p", pr->exe_dir, err, errlen);
  for (int g = 0; g < (pr->ngroups > 1 ? pr->ngroups : 1) && rc == 0; g++) {
    char j[64];
    snprintf(j, sizeof j, pr->ngroups > 1 ? "%s+%d" : "%s", jid, g);
    char *bc[] = {"sbcast", "--force", "-j", j, (char *)self, exe, NULL};
    rc = run_cmd(bc, STAGE_TIMEOUT_MS, err, errlen);
  }
  return rc;
}

/* The job is over: the client's copy of the binary in the job directory
 * goes, unless Slurm stopped the coordinator (it may requeue the job,
 * whose batch script runs that copy again; `loom status` and `loom run`
 * remove it once Slurm says the job ended). */
static void slurm_finish(backend *b, int exit_status, const char *why) {
  const char *jdir = loom__tun_raw(LOOM_TUN_JOB_DIR_STAGE);
  if (!jdir || !strncmp(why, "interrupted by SIG", 18)) return;
  char shipped[4096];
  snprintf(shipped, sizeof shipped, "%s/%s", jdir, SHIP_NAME);
  if (unlink(shipped) < 0 && errno != ENOENT)
    loom__log(LOOM_LOG_WARN, "slurm", "cannot remove %s: %s", shipped, strerror(errno));
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

/* Reads which component each role is in (LOOM_SLURM_GROUPS, set by the
 * batch script: "0,0,1" for three roles) and numbers the tasks as the
 * coordinator does: role by role. Without it (a job submitted before),
 * one component per role, as the batch script then had. */
static int slurm_create(backend *b, const spec_job *s, int ntasks) {
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
  const char *groups = loom__tun_raw(LOOM_TUN_SLURM_GROUPS);
  pr->ntasks = ntasks;
  pr->ngroups = 1;
  int k = 0;
  for (int i = 0; i < s->nroles; i++) {
    int g = i;
    if (groups) {
      g = atoi(groups);
      groups = strchr(groups, ',');
      if (groups) groups++;
    }
    if (g + 1 > pr->ngroups) pr->ngroups = g + 1;
    for (int j = 0; j < s->roles[i].instances; j++, k++) {
      pr->group[k] = g;
      pr->role[k] = &s->roles[i];
    }
  }
  b->priv = pr;
  return 0;
}

/* A task's CPUs and GPUs are those Slurm gave its step on its node (the
 * step's cpuset, CUDA_VISIBLE_DEVICES): the coordinator hands out none. */
static void slurm_place(backend *b, int task_id, const spec_role *r, char *cpus, size_t cpuslen,
                        char *gpus, size_t gpuslen) {
  cpus[0] = gpus[0] = 0;
}

const backend_ops loom__backend_slurm = {
    .name = "slurm",
    .launcher = "srun",
    .tracks_processes = true,
    .launch_retryable = true,
    .requeues = true,
    .check = slurm_check,
    .probe = slurm_probe,
    .submit = slurm_submit,
    .job_state = slurm_job_state,
    .cancel = slurm_cancel,
    .coord_address = slurm_coord_address,
    .create = slurm_create,
    .place = slurm_place,
    .launch = slurm_launch,
    .signal = slurm_signal,
    .host = slurm_host,
    .stage_files = slurm_stage,
    .agent_exe = slurm_agent_exe,
    .unstage_files = slurm_unstage,
    .finish = slurm_finish,
    .destroy = slurm_destroy,
};
