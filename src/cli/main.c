/* main.c: the loom command. Only this file prints for people and decides
 * exit statuses: 0 job succeeded, 1 job failed, 2 usage or spec error,
 * 3 backend or infrastructure error, 130 interrupted. */
#include "agent/agent.h"
#include "backend/backend.h"
#include "cli/fs.h"
#include "cli/jobs.h"
#include "core/exitcode.h"
#include "coord/coord.h"
#include "http/http.h"
#include "jobdir/jobdir.h"
#include "ps/server.h"
#include "wire/wire_tls.h"
#include "wire/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

static const struct verb {
  const char *name, *args, *what, *help;
} VERBS[] = {
    {"run", "SPEC [--backend B] [--set key=value]... [--bind A] [--advertise H]",
     "run a job and stay attached; exits with the job's status",
     "Starts the job described by SPEC (YAML) and streams every task's output,\n"
     "prefixed [role:index] (colored on a terminal), with a live status line on\n"
     "a terminal. Exits 0 when the job succeeded, 1 when a task failed past its\n"
     "retries (a root-cause summary is printed), 2 for a usage or spec error (also\n"
     "resources the cluster can never give), 3 for a backend error, 130 when\n"
     "interrupted (Ctrl-C stops the whole job). On slurm the coordinator runs in\n"
     "the allocation; on yarn it runs here as the application's unmanaged\n"
     "application master.\n\n"
     "  --backend B        where the job runs (listed below); overrides the spec's backend\n"
     "  --set key=value    override a spec key, e.g. --set roles.worker.instances=4\n"
     "  --bind A           the coordinator listens on address A (default 127.0.0.1: agents\n"
     "                     on other hosts, as with the external backend, need another)\n"
     "  --advertise H      agents and tasks reach the coordinator at H (default: A; needed\n"
     "                     when A is 0.0.0.0)\n"},
    {"submit", "SPEC [--backend B] [--set key=value]... [--bind A] [--advertise H]",
     "run a job detached; prints its id",
     "Like run, but the coordinator runs in the background and loom prints the\n"
     "job id once it is up. Follow it with loom status/logs/events; stop it with\n"
     "loom kill. --bind and --advertise as for run. On yarn the coordinator runs\n"
     "in a container YARN starts (a managed application master), so the job\n"
     "outlives this client; YARN starts it again if it dies.\n"},
    {"status", "[JOB]", "a job's tasks and states, or all recent jobs",
     "Without JOB, one line per recent job. With JOB (an id, a unique prefix, or\n"
     "'last'), every task: state, attempt, exit code or signal, elapsed time.\n"
     "  --json             print the job's state file as it is\n"},
    {"logs", "JOB [--task T] [--follow]", "a task's log, or all tasks interleaved",
     "Prints the log of task T (role:index, e.g. worker:1), or every task's lines\n"
     "interleaved and prefixed. --follow keeps printing until the job ends.\n"},
    {"events", "JOB [--json]", "the job's event log",
     "Prints the event log, one event a line: time, task, attempt, event, details.\n"
     "  --json             the raw JSON lines\n"},
    {"kill", "JOB", "stop a running job",
     "Asks the job's coordinator to stop every task (SIGTERM, then SIGKILL after\n"
     "the grace period) and waits until it has.\n"},
    {"check", "[--backend B]", "is this machine ready to run jobs",
     "Checks the job directory, the backend and the loopback network.\n"},
    {"ui", "[--port P] [--bind A] [JOB...]",
     "the web dashboard for jobs, from their job directories",
     "Serves every job under $" JOBDIR_HOME_ENV "/jobs (finished or running): tasks, states,\n"
     "attempts, exit codes, logs, events and metric charts. Prints the URL with\n"
     "its access token.\n"},
    {"ps", "[--help]", "the built-in parameter server, as a ps role's command",
     "Serves this task's shard of the job's variables until the job ends. Use it\n"
     "as the command of the ps role: `ps: {instances: 2, command: loom ps}`.\n"},
    {"fs", "ls|stat|cat|get|put|mkdir|rm|mv ARGS", "files on HDFS, through loom's own client",
     "  loom fs ls URL              a directory's entries (or a file), like hdfs dfs -ls\n"
     "  loom fs stat URL            one line of JSON: type, length, permission, owner, ...\n"
     "  loom fs cat URL...          the files' bytes to standard output\n"
     "  loom fs get URL LOCAL       copy to a local file (written beside it, then renamed)\n"
     "  loom fs put [-f] LOCAL URL  copy a local file there (URL._COPYING_, then renamed;\n"
     "                              -f replaces a file that exists)\n"
     "  loom fs mkdir URL           make a directory and its parents\n"
     "  loom fs rm [-r] URL         remove a file (-r: a directory and all in it)\n"
     "  loom fs mv SRC DST          rename (DST must not exist)\n\n"
     "URLs: hdfs://host:port/path, or hdfs:///path for the NameNode of fs.defaultFS\n"
     "in $HADOOP_CONF_DIR/core-site.xml; the user is $HADOOP_USER_NAME or the login.\n"
     "get, put, rm and mv take local paths too. Reads check every checksum and go\n"
     "on from another replica when one is dead or corrupt. Exit status: 0, 1 a\n"
     "filesystem error (no such path, permission denied, exists, no good\n"
     "replica), 2 usage or a bad URL, 3 the cluster cannot be reached.\n"},
    {"agent", "", "internal: a task's agent, started by backends", ""},
    {"coordinator", "JOBDIR", "internal: a job's coordinator, started by submit", ""},
};

static void usage(FILE *f) {
  fprintf(f,
          "loom %s: run distributed training and inference jobs\n\n"
          "usage: loom VERB [ARGS]   (loom VERB --help for more)\n\n",
          loom_version());
  for (size_t i = 0; i < LOOM__ARRAY_LEN(VERBS); i++)
    fprintf(f, "  %-12s %s\n", VERBS[i].name, VERBS[i].what);
  fprintf(f, "\nJobs live in " JOBDIR_WHERE ".\n"
             "Tunables (environment variables): loom help tunables.\n"
             "Exit status: 0 succeeded, 1 job failed, 2 usage or spec error, 3 backend\n"
             "or infrastructure error, 130 interrupted.\n");
}

/* One row's default and range as `loom help tunables` writes them. */
static void tun_cells(const loom__tun_info *i, char *def, size_t dlen, char *range, size_t rlen) {
  char lo[32], hi[32];
  if (i->kind == LOOM_TUN_KIND_WORD) {
    snprintf(def, dlen, "%s", *i->sdef ? i->sdef : "-");
    snprintf(range, rlen, "%s", i->choices ? i->choices : "any");
    return;
  }
  loom__tun_fmt(i->kind, i->def, def, dlen);
  loom__tun_fmt(i->kind, i->min, lo, sizeof lo);
  loom__tun_fmt(i->kind, i->max, hi, sizeof hi);
  snprintf(range, rlen, "%s..%s", lo, hi);
}

/* s as a Markdown table cell: a bar would end the cell. */
static void md_cell(const char *s) {
  for (; *s; s++) {
    if (*s == '|') putchar('\\');
    putchar(*s);
  }
}

/* `loom help tunables [--all] [--markdown]`: the table of src/core/tun.h,
 * as it is. Rows for loom's own processes (internal) only with --all;
 * --markdown writes docs/tunables.md. LOOM_EINVAL, printing nothing, for
 * another argument. */
static int help_tunables(int argc, char **argv) {
  bool all = false, md = false;
  for (int k = 0; k < argc; k++) {
    if (!strcmp(argv[k], "--all"))
      all = true;
    else if (!strcmp(argv[k], "--markdown"))
      md = true;
    else
      return LOOM_EINVAL;
  }
  static const char intro[] =
      "Tunables: environment variables read by the part that uses them (the\n"
      "coordinator, agents, libloom in the tasks). A value that is not a whole\n"
      "number, out of its range or not one of its choices is reported with a\n"
      "warning naming the variable, and the default is used.\n\n";
  static const char outro[] =
      "Not tunables: the log level, LOOM_LOG (warn; info, debug, or\n"
      "debug:coord,agent); loom's home, " JOBDIR_HOME_ENV " (~/.loom); and what the\n"
      "coordinator hands each task (LOOM_COORD, LOOM_SECRET, LOOM_TASK, ...).\n";
  if (md)
    printf("# Tunables\n\n"
           "This page is generated by `loom help tunables --markdown` from src/core/tun.h;\n"
           "edit the table there and run that command again rather than editing it.\n\n"
           "%s| Variable | Default | Range | Meaning |\n| --- | --- | --- | --- |\n",
           intro);
  else
    printf("%s%-29s %-10s %-22s %s\n", intro, "VARIABLE", "DEFAULT", "RANGE", "WHAT");
  for (int t = 0; t < LOOM_TUN__COUNT; t++) {
    const loom__tun_info *i = loom__tun_info_of((loom__tunable)t);
    char def[48], range[96];
    if (!all && loom__tun_internal((loom__tunable)t)) continue;
    tun_cells(i, def, sizeof def, range, sizeof range);
    if (!md) {
      printf("%-29s %-10s %-22s %s\n", i->env, def, range, i->doc);
      continue;
    }
    printf("| `%s` | ", i->env);
    md_cell(def);
    printf(" | ");
    md_cell(range);
    printf(" | ");
    md_cell(i->doc);
    printf(" |\n");
  }
  printf("\n%s", outro);
  if (!all)
    printf("Rows loom sets for its own processes, not for users: loom help tunables --all.\n");
  return 0;
}

static int verb_help(const char *name) {
  if (!strcmp(name, "tunables")) return help_tunables(0, NULL);
  for (size_t i = 0; i < LOOM__ARRAY_LEN(VERBS); i++)
    if (!strcmp(VERBS[i].name, name)) {
      printf("usage: loom %s %s\n\n%s\n%s", name, VERBS[i].args, VERBS[i].what, VERBS[i].help);
      if (strstr(VERBS[i].args, "--backend"))
        printf("\nbackends: %s (default %s)\n", backend_names(), backend_default()->name);
      return 0;
    }
  return 2;
}

static int bad_usage(const char *verb, const char *fmt, ...) LOOM__PRINTF(2, 3);
static int bad_usage(const char *verb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "loom %s: ", verb);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(see loom %s --help)\n", verb);
  va_end(ap);
  return LOOM_EXIT_USAGE;
}

static bool has_help(int argc, char **argv) {
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
  return false;
}

static int self_exe(char *buf, size_t len) {
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n <= 0) return -1;
  buf[n] = 0;
  return 0;
}

/* ---- a job whose coordinator runs in the cluster: follow it -------------- */
static volatile sig_atomic_t follow_interrupted;
static void on_follow_signal(int sig) { follow_interrupted = sig; }

/* While a submitted job waits, how often its state is asked for, and how
 * often an unchanged pending state is said again. */
#define FOLLOW_POLL_MS 1000
#define PENDING_REPEAT_MS 10000

static bool state_final(const char *dir, int *exit_status) {
  json_t *st = jobs_state(dir);
  const char *s = st ? json_string_value(json_object_get(st, "state")) : NULL;
  bool fin = s && (!strcmp(s, "succeeded") || !strcmp(s, "failed") || !strcmp(s, "killed"));
  if (fin && exit_status)
    *exit_status = (int)json_integer_value(json_object_get(st, "exit_status"));
  json_decref(st);
  return fin;
}

/* `loom run` of a submitted job: prints its tasks' output from the job
 * directory and, while the cluster manager holds it back, its state and
 * reason whenever they change and again every PENDING_REPEAT_MS; returns
 * the job's exit status. Ctrl-C cancels the job. */
static int follow_job(const backend_ops *ops, const char *dir, const backend_job *sub) {
  signal(SIGINT, on_follow_signal);
  signal(SIGTERM, on_follow_signal);
  char logp[PATH_MAX + 32], sum[PATH_MAX + 32], msg[512];
  jobdir_path(dir, JOBDIR_ALL_LOG, logp, sizeof logp);
  jobdir_path(dir, JOBDIR_SUMMARY, sum, sizeof sum);
  FILE *log = NULL;
  char buf[65536], last[sizeof((backend_job *)0)->what] = "";
  int status = LOOM_EXIT_INFRA;
  uint64_t next_poll = 0, said = 0, since = loom__now_ms();
  for (;;) {
    if (follow_interrupted) {
      fprintf(stderr, "loom: interrupted: cancelling %s\n", sub->what);
      if (ops->cancel(dir, msg, sizeof msg) < 0) fprintf(stderr, "loom: %s\n", msg);
      return LOOM_EXIT_INTR;
    }
    if (!log) log = fopen(logp, "r");
    size_t got = log ? fread(buf, 1, sizeof buf, log) : 0;
    if (got) {
      fwrite(buf, 1, got, stdout);
      fflush(stdout);
      continue;
    }
    if (log) clearerr(log);
    bool fin = state_final(dir, &status);
    if (fin && access(sum, F_OK) == 0) {
      usleep(100000); /* the last lines */
      while (log && (got = fread(buf, 1, sizeof buf, log)) > 0) fwrite(buf, 1, got, stdout);
      fflush(stdout);
      char *txt = NULL;
      if (loom__read_file(sum, 1 << 20, &txt, NULL) == 0) fputs(txt, stderr);
      free(txt);
      break;
    }
    uint64_t now = loom__now_ms();
    if (now >= next_poll) {
      next_poll = now + FOLLOW_POLL_MS;
      backend_job j;
      if (ops->job_state(dir, &j) < 0) j.state = BACKEND_JOB_UNKNOWN;
      bool pending = j.state == BACKEND_JOB_PENDING;
      if (j.native[0] && strcmp(j.what, last)) {
        fprintf(stderr, "loom: %s\n", j.what);
        loom__strlcpy(last, j.what, sizeof last);
        said = now;
      } else if (pending && now - said >= PENDING_REPEAT_MS) {
        fprintf(stderr, "loom: %s, waiting %.0fs\n", j.what, (double)(now - since) / 1000.0);
        said = now;
      }
      bool gone = j.state == BACKEND_JOB_UNKNOWN || j.state == BACKEND_JOB_ENDED;
      if (gone && !state_final(dir, &status)) {
        fprintf(stderr,
                "loom: %s: it ended before its coordinator reported an end; see "
                "%s/%s\n",
                j.what[0] ? j.what : sub->what, dir, jobdir_name(JOBDIR_COORD_LOG));
        status = LOOM_EXIT_INFRA;
        break;
      }
    }
    usleep(100000);
  }
  if (log) fclose(log);
  return status;
}

/* ---- run / submit ---------------------------------------------------------- */
/* 0 when --bind A (if given) is an address the coordinator can listen on
 * and agents can be told: 1 when A is not an IP address, 2 when it is a
 * wildcard (every interface) and no --advertise says where to reach it. */
static int check_bind(const char *bind, const char *adv) {
  if (!bind) return 0;
  unsigned char buf[sizeof(struct in6_addr)];
  bool v6 = strchr(bind, ':') != NULL;
  if (inet_pton(v6 ? AF_INET6 : AF_INET, bind, buf) != 1) return 1;
  bool any = v6 ? !memcmp(buf, &in6addr_any, sizeof in6addr_any) : !strcmp(bind, "0.0.0.0");
  return any && !adv ? 2 : 0;
}

static int cmd_run(int argc, char **argv, bool detach) {
  const char *verb = argv[1], *path = NULL, *bopt = NULL, *bind = NULL, *adv = NULL;
  const char *sets[64];
  int nsets = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      bopt = argv[++i];
    else if (!strncmp(argv[i], "--backend=", 10))
      bopt = argv[i] + 10;
    else if (!strcmp(argv[i], "--bind") && i + 1 < argc)
      bind = argv[++i];
    else if (!strncmp(argv[i], "--bind=", 7))
      bind = argv[i] + 7;
    else if (!strcmp(argv[i], "--advertise") && i + 1 < argc)
      adv = argv[++i];
    else if (!strncmp(argv[i], "--advertise=", 12))
      adv = argv[i] + 12;
    else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
      if (nsets == 64) return bad_usage(verb, "at most 64 --set");
      sets[nsets++] = argv[++i];
    } else if (!strncmp(argv[i], "--set=", 6)) {
      if (nsets == 64) return bad_usage(verb, "at most 64 --set");
      sets[nsets++] = argv[i] + 6;
    } else if (argv[i][0] == '-')
      return bad_usage(verb, "unknown option %s", argv[i]);
    else if (!path)
      path = argv[i];
    else
      return bad_usage(verb, "one spec only (got %s and %s)", path, argv[i]);
  }
  if (!path) return bad_usage(verb, "missing SPEC: loom %s job.yaml", verb);
  int bad = check_bind(bind, adv);
  if (bad)
    return bad_usage(verb,
                     bad == 1 ? "--bind %s is not an IP address"
                              : "--bind %s "
                                "listens on every interface: say which address agents reach the "
                                "coordinator at with --advertise",
                     bind);
  char err[2048];
  /* the dashboard's HTTPS settings, before anything starts */
  if (http_tls_check(err, sizeof err) < 0) {
    fprintf(stderr, "loom %s: %s\n", verb, err);
    return LOOM_EXIT_USAGE;
  }
  spec_job *s;
  int rc = spec_load(path, sets, nsets, &s, err, sizeof err);
  if (rc < 0) {
    fprintf(stderr, "loom: %s\n", err);
    return LOOM_EXIT_USAGE;
  }
  for (const char *w = s->warning; w && *w;) { /* one located warning a line */
    size_t l = strcspn(w, "\n");
    fprintf(stderr, "loom: warning: %.*s\n", (int)l, w);
    w += l + (w[l] == '\n');
  }
  const char *bname = bopt ? bopt : s->backend;
  const backend_ops *ops = backend_find(bname);
  if (!ops) {
    spec_free(s);
    return bad_usage(verb, "backend '%s' is not available here: use one of %s", bname,
                     backend_names());
  }
  /* the job directory's spec.yaml names the backend the job runs on */
  char *chosen = strdup(ops->name);
  if (!chosen) {
    spec_free(s);
    return LOOM_EXIT_INFRA;
  }
  free(s->backend);
  s->backend = chosen;
  bname = ops->name;
  if ((rc = ops->check(s, err, sizeof err)) < 0) {
    fprintf(stderr, "loom: %s: cannot run on backend %s: %s\n", path, bname, err);
    spec_free(s);
    return rc == LOOM_ERESOURCE ? LOOM_EXIT_USAGE : LOOM_EXIT_INFRA;
  }
  char note[400];
  if (ops->defaults && ops->defaults(s, note, sizeof note) > 0) fprintf(stderr, "loom: %s\n", note);
  if (ops->check_only) {
    fprintf(stderr, "loom: %s: the spec fits backend %s, but %s\n", path, bname, ops->check_only);
    spec_free(s);
    return LOOM_EXIT_USAGE;
  }
  char id[160], dir[PATH_MAX], secret[80], exe[PATH_MAX];
  if (self_exe(exe, sizeof exe) < 0 || jobs_create(s, id, dir, secret, err, sizeof err) < 0) {
    fprintf(stderr, "loom: %s\n", err);
    spec_free(s);
    return LOOM_EXIT_INFRA;
  }
  if (ops->submit && (detach || !ops->submit_detached_only)) {
    /* the coordinator runs inside the cluster */
    backend_job bj;
    rc = ops->submit(s, id, dir, exe, &bj, err, sizeof err);
    spec_free(s);
    if (rc < 0) {
      fprintf(stderr, "loom: %s: %s\n", path, err);
      return rc == LOOM_ERESOURCE ? LOOM_EXIT_USAGE : LOOM_EXIT_INFRA;
    }
    if (detach) {
      printf("%s\n", id);
      return LOOM_EXIT_OK;
    }
    fprintf(stderr, "loom: job %s is %s\n", id, bj.what);
    return follow_job(ops, dir, &bj);
  }
  if (detach) {
    uv_loop_t *loop = uv_default_loop();
    FILE *lf = jobdir_fopen(dir, JOBDIR_COORD_LOG, true);
    uv_process_t proc;
    uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
                                     {.flags = UV_INHERIT_FD, .data.fd = lf ? fileno(lf) : 2},
                                     {.flags = UV_INHERIT_FD, .data.fd = lf ? fileno(lf) : 2}};
    char *args[9] = {exe, "coordinator", dir};
    int na = 3;
    const char *extra[][2] = {{"--backend", bopt}, {"--bind", bind}, {"--advertise", adv}};
    for (int k = 0; k < 3; k++)
      if (extra[k][1]) {
        args[na++] = (char *)extra[k][0];
        args[na++] = (char *)extra[k][1];
      }
    uv_process_options_t o = {
        .file = exe, .args = args, .flags = UV_PROCESS_DETACHED, .stdio_count = 3, .stdio = stdio};
    rc = uv_spawn(loop, &proc, &o);
    if (lf) fclose(lf);
    if (rc < 0) {
      fprintf(stderr, "loom: cannot start the coordinator: %s\n", uv_strerror(rc));
      spec_free(s);
      return LOOM_EXIT_INFRA;
    }
    uv_unref((uv_handle_t *)&proc);
    char cj[PATH_MAX + 16];
    jobdir_path(dir, JOBDIR_COORD, cj, sizeof cj);
    for (int i = 0; i < 1000 && access(cj, F_OK) != 0; i++) usleep(10000);
    spec_free(s);
    if (access(cj, F_OK) != 0) {
      fprintf(stderr, "loom: the coordinator did not come up within 10s; see %s/%s\n", dir,
              jobdir_name(JOBDIR_COORD_LOG));
      return LOOM_EXIT_INFRA;
    }
    printf("%s\n", id);
    return LOOM_EXIT_OK;
  }
  coord_opts o = {.job_dir = dir,
                  .job_id = id,
                  .secret = secret,
                  .spec = s,
                  .backend = bopt,
                  .self_exe = exe,
                  .bind = bind,
                  .advertise = adv,
                  .console = true,
                  .color = isatty(1) && !getenv("NO_COLOR"),
                  .status_line = isatty(2)};
  if (isatty(2))
    fprintf(stderr, "loom: job %s (%s)\n", id, dir);
  else
    fprintf(stderr, "loom: job %s\n", id);
  rc = coord_run(&o);
  spec_free(s);
  return rc;
}

static int cmd_coordinator(int argc, char **argv) {
  if (argc < 3) return bad_usage("coordinator", "missing JOBDIR");
  const char *dir = argv[2], *bopt = NULL, *bind = NULL, *adv = NULL;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--backend"))
      bopt = argv[i + 1];
    else if (!strcmp(argv[i], "--bind"))
      bind = argv[i + 1];
    else if (!strcmp(argv[i], "--advertise"))
      adv = argv[i + 1];
    else
      return bad_usage("coordinator", "unknown option %s", argv[i]);
  }
  char p[PATH_MAX + 32], err[2048], exe[PATH_MAX];
  jobdir_path(dir, JOBDIR_SPEC, p, sizeof p);
  spec_job *s;
  if (spec_load(p, NULL, 0, &s, err, sizeof err) < 0) {
    fprintf(stderr, "loom coordinator: %s\n", err);
    return LOOM_EXIT_USAGE;
  }
  jobdir_path(dir, JOBDIR_SECRET, p, sizeof p);
  char *secret = NULL;
  if (loom__read_file(p, 256, &secret, NULL) < 0 || self_exe(exe, sizeof exe) < 0) {
    fprintf(stderr, "loom coordinator: cannot read %s\n", p);
    spec_free(s);
    return LOOM_EXIT_INFRA;
  }
  const char *slash = strrchr(dir, '/');
  coord_opts o = {.job_dir = dir,
                  .job_id = slash ? slash + 1 : dir,
                  .secret = secret,
                  .spec = s,
                  .backend = bopt,
                  .self_exe = exe};
  const backend_ops *ops = backend_find(bopt ? bopt : s->backend);
  if (ops && ops->requeues) {
    /* a job the cluster manager started again continues its attempts */
    json_t *prev = jobs_state(dir);
    if (prev) o.first_attempt = (int)json_integer_value(json_object_get(prev, "attempt")) + 1;
    json_decref(prev);
  }
  char bbuf[128], abuf[256];
  if (bind || adv) {
    /* the user's --bind / --advertise, through submit */
    o.bind = bind;
    o.advertise = adv;
  } else if (ops && ops->coord_address) {
    ops->coord_address(bbuf, sizeof bbuf, abuf, sizeof abuf);
    o.bind = bbuf;
    o.advertise = abuf;
  }
  setsid();
  int rc = coord_run(&o);
  free(secret);
  spec_free(s);
  return rc;
}

/* ---- status ----------------------------------------------------------------- */
static const char *job_state_str(const char *dir, json_t *st) {
  const char *s = json_string_value(json_object_get(st, "state"));
  if (!s) return "unknown";
  bool live = !strcmp(s, "running") || !strcmp(s, "starting") || !strcmp(s, "stopping");
  if (live && !jobs_coord_alive(dir)) return "lost (coordinator gone)";
  return s;
}

/* `loom status`'s tboard line: the tensorboard role's URL while it runs;
 * once it is stopped (services end with the job), or with no such role,
 * how to serve the summaries the job wrote, which stay in its directory. */
static void print_tensorboard(const char *dir, json_t *st) {
  const char *url = json_string_value(json_object_get(st, "tensorboard"));
  bool serving = false;
  json_t *t;
  size_t k;
  json_array_foreach(json_object_get(st, "tasks"), k, t) {
    const char *role = json_string_value(json_object_get(t, "role"));
    const char *state = json_string_value(json_object_get(t, "state"));
    if (role && state && !strcmp(role, "tensorboard") && !strcmp(state, "running")) serving = true;
  }
  const char *js = job_state_str(dir, st);
  serving = serving && (!strcmp(js, "running") || !strcmp(js, "stopping"));
  size_t runs = 0;
  json_decref(jobdir_tensorboard_runs(dir, 0, &runs));
  if (url && serving) {
    printf("tboard   %s\n", url);
    return;
  }
  if (!url && runs == 0) return;
  char *logdir = jobdir_apath(dir, JOBDIR_TENSORBOARD);
  if (!logdir) return;
  /* the path, quoted for a shell where it needs to be */
  bool plain = strspn(logdir, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                              "_@%+=:,./-") == strlen(logdir);
  printf("tboard   ");
  if (url) printf("%s stopped with the job; ", url);
  printf("%zu run%s: tensorboard --logdir %s", runs, runs == 1 ? "" : "s", plain ? "" : "'");
  for (const char *c = logdir; *c; c++) {
    if (*c == '\'' && !plain)
      fputs("'\\''", stdout);
    else
      putchar(*c);
  }
  printf("%s\n", plain ? "" : "'");
  free(logdir);
}

/* The job as its cluster manager sees it, for a backend whose coordinator
 * runs there; false for others (or when the job has none). */
static bool backend_state(const char *dir, backend_job *bj) {
  const backend_ops *ops = backend_of_job(dir);
  return ops && ops->job_state && ops->job_state(dir, bj) == 0;
}

static const char *backend_job_word(backend_job_state st) {
  switch (st) {
  case BACKEND_JOB_PENDING:
    return "pending";
  case BACKEND_JOB_RUNNING:
    return "starting";
  case BACKEND_JOB_ENDED:
    return "ended";
  default:
    return "unknown";
  }
}

static void fmt_dur(double s, char *buf, size_t len) {
  if (s < 0) s = 0;
  if (s < 60)
    snprintf(buf, len, "%.1fs", s);
  else if (s < 3600)
    snprintf(buf, len, "%dm%02ds", (int)s / 60, (int)s % 60);
  else
    snprintf(buf, len, "%dh%02dm", (int)s / 3600, (int)s / 60 % 60);
}

static int cmd_status(int argc, char **argv) {
  const char *job = NULL;
  bool json = false;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = true;
    else if (argv[i][0] == '-')
      return bad_usage("status", "unknown option %s", argv[i]);
    else
      job = argv[i];
  }
  if (!job) {
    static char dir[PATH_MAX + 200];
    jobdir_entry *all;
    size_t n;
    if (jobdir_list(NULL, &all, &n) < 0) {
      fprintf(stderr, "loom status: cannot list %s: out of memory\n", jobdir_root());
      return LOOM_EXIT_INFRA;
    }
    if (n == 0) {
      printf("no jobs under %s\n", jobdir_root());
      free(all);
      return 0;
    }
    if (n > 50) n = 50;
    printf("%-44s %-24s %-8s %-9s %s\n", "JOB", "STATE", "ATTEMPT", "ELAPSED", "TASKS");
    for (size_t i = 0; i < n; i++) {
      const char *id = all[i].id;
      jobdir_of(id, dir, sizeof dir);
      json_t *st = jobs_state(dir);
      if (!st) {
        backend_job bj;
        char what[200] = "unknown (no state.json)";
        if (backend_state(dir, &bj))
          snprintf(what, sizeof what, "%s%s%s%s", backend_job_word(bj.state),
                   bj.reason[0] ? " (" : "", bj.reason, bj.reason[0] ? ")" : "");
        printf("%-44s %-24s\n", id, what);
        continue;
      }
      int run = 0, done = 0, failed = 0, total = 0;
      json_t *t;
      size_t k;
      json_array_foreach(json_object_get(st, "tasks"), k, t) {
        const char *ts = json_string_value(json_object_get(t, "state"));
        total++;
        if (!ts) continue;
        if (!strcmp(ts, "running"))
          run++;
        else if (!strcmp(ts, "succeeded") || !strcmp(ts, "stopped"))
          done++;
        else if (!strcmp(ts, "failed") || !strcmp(ts, "lost"))
          failed++;
      }
      double start = json_real_value(json_object_get(st, "started"));
      json_t *fin = json_object_get(st, "finished");
      char el[32];
      fmt_dur((fin ? json_real_value(fin) : loom__wall()) - start, el, sizeof el);
      printf("%-44s %-24s %-8lld %-9s %d total, %d running, %d done, %d failed\n", id,
             job_state_str(dir, st), (long long)json_integer_value(json_object_get(st, "attempt")),
             el, total, run, done, failed);
      json_decref(st);
    }
    free(all);
    return 0;
  }
  char dir[PATH_MAX], err[512];
  if (jobs_find(job, dir, sizeof dir, err, sizeof err) < 0) {
    fprintf(stderr, "loom status: %s\n", err);
    return LOOM_EXIT_USAGE;
  }
  json_t *st = jobs_state(dir);
  backend_job bj;
  bool in_manager = backend_state(dir, &bj);
  if (!st && in_manager) {
    /* not started yet: what the cluster manager says, asked now */
    const char *slash = strrchr(dir, '/');
    if (json) {
      json_t *j = json_pack("{s:s, s:s, s:{s:s, s:s, s:s, s:s}}", "job", slash ? slash + 1 : dir,
                            "state", backend_job_word(bj.state), "cluster", "id", bj.id, "state",
                            bj.native, "reason", bj.reason, "what", bj.what);
      char *js = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
      printf("%s\n", js ? js : "{}");
      free(js);
      json_decref(j);
      return 0;
    }
    printf("job      %s\nstate    %s%s%s%s\ncluster  %s\ndir      %s\n", slash ? slash + 1 : dir,
           backend_job_word(bj.state), bj.reason[0] ? " (" : "", bj.reason, bj.reason[0] ? ")" : "",
           bj.what, dir);
    return 0;
  }
  if (!st) {
    fprintf(stderr, "loom status: %s has no readable %s yet\n", dir, jobdir_name(JOBDIR_STATE));
    return LOOM_EXIT_INFRA;
  }
  if (json) {
    char *s = json_dumps(st, JSON_INDENT(2));
    printf("%s\n", s ? s : "{}");
    free(s);
    json_decref(st);
    return 0;
  }
  double start = json_real_value(json_object_get(st, "started"));
  json_t *fin = json_object_get(st, "finished");
  char el[32];
  fmt_dur((fin ? json_real_value(fin) : loom__wall()) - start, el, sizeof el);
  printf("job      %s\nstate    %s\nattempt  %lld (retries %lld)\nelapsed  %s\ndir      %s\n",
         json_string_value(json_object_get(st, "job")), job_state_str(dir, st),
         (long long)json_integer_value(json_object_get(st, "attempt")),
         (long long)json_integer_value(json_object_get(st, "retries")), el, dir);
  const char *dash = json_string_value(json_object_get(st, "dashboard"));
  if (in_manager && !json) printf("cluster  %s\n", bj.what);
  if (dash) printf("web      %s\n", dash);
  const char *fp = json_string_value(json_object_get(st, "dashboard_fingerprint"));
  if (dash && fp) printf("cert     SHA-256 %s (self-signed)\n", fp);
  print_tensorboard(dir, st);
  json_t *rc = json_object_get(st, "root_cause");
  if (rc)
    printf("cause    %s%s%s\n", json_string_value(json_object_get(rc, "task")) ?: "",
           json_object_get(rc, "task") ? ": " : "",
           json_string_value(json_object_get(rc, "message")) ?: "");
  printf("\n%-20s %-10s %-7s %-22s %-8s %-9s %s\n", "TASK", "STATE", "ATTEMPT", "ADDRESS", "EXIT",
         "ELAPSED", "REASON");
  json_t *t;
  size_t k;
  json_array_foreach(json_object_get(st, "tasks"), k, t) {
    char addr[300] = "-", ex[32] = "-", tel[32] = "-";
    if (json_object_get(t, "port"))
      snprintf(addr, sizeof addr, "%s:%lld", json_string_value(json_object_get(t, "host")) ?: "?",
               (long long)json_integer_value(json_object_get(t, "port")));
    if (json_object_get(t, "signal_name"))
      snprintf(ex, sizeof ex, "SIG%s", json_string_value(json_object_get(t, "signal_name")));
    else if (json_object_get(t, "exit_code"))
      snprintf(ex, sizeof ex, "%lld",
               (long long)json_integer_value(json_object_get(t, "exit_code")));
    json_t *ts = json_object_get(t, "started"), *tf = json_object_get(t, "finished");
    if (ts)
      fmt_dur((tf ? json_real_value(tf) : loom__wall()) - json_real_value(ts), tel, sizeof tel);
    printf("%-20s %-10s %-7lld %-22s %-8s %-9s %s\n", json_string_value(json_object_get(t, "task")),
           json_string_value(json_object_get(t, "state")),
           (long long)json_integer_value(json_object_get(t, "attempt")), addr, ex, tel,
           json_string_value(json_object_get(t, "reason")) ?: "");
  }
  json_decref(st);
  return 0;
}

/* ---- logs -------------------------------------------------------------- */
static bool job_live(const char *dir) {
  json_t *st = jobs_state(dir);
  if (!st) return jobs_coord_alive(dir); /* pending in its cluster manager, say */
  const char *s = st ? job_state_str(dir, st) : "unknown";
  bool live = !strcmp(s, "running") || !strcmp(s, "starting") || !strcmp(s, "stopping");
  json_decref(st);
  return live;
}

static int cmd_logs(int argc, char **argv) {
  const char *job = NULL, *task = NULL;
  bool follow = false;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--task") && i + 1 < argc)
      task = argv[++i];
    else if (!strncmp(argv[i], "--task=", 7))
      task = argv[i] + 7;
    else if (!strcmp(argv[i], "--follow") || !strcmp(argv[i], "-f"))
      follow = true;
    else if (argv[i][0] == '-')
      return bad_usage("logs", "unknown option %s", argv[i]);
    else
      job = argv[i];
  }
  if (!job) return bad_usage("logs", "missing JOB");
  char dir[PATH_MAX], err[512], path[PATH_MAX + 200];
  if (jobs_find(job, dir, sizeof dir, err, sizeof err) < 0) {
    fprintf(stderr, "loom logs: %s\n", err);
    return LOOM_EXIT_USAGE;
  }
  if (task) {
    const char *c = strchr(task, ':');
    long long idx;
    if (!c || c == task || loom__parse_int(c + 1, 0, 1 << 30, &idx) < 0)
      return bad_usage("logs", "--task wants role:index, e.g. worker:1 (got '%s')", task);
    char file[200];
    snprintf(file, sizeof file, "%.*s-%lld", (int)(c - task), task, idx);
    char *tp = jobdir_task_apath(dir, JOBDIR_LOGS, file);
    loom__strlcpy(path, tp ? tp : "", sizeof path);
    free(tp);
  } else {
    jobdir_path(dir, JOBDIR_ALL_LOG, path, sizeof path);
  }
  FILE *f = fopen(path, "r");
  if (!f && !follow) {
    fprintf(stderr, "loom logs: no log at %s%s\n", path,
            task ? " (is the task name right? see "
                   "loom status)"
                 : "");
    return LOOM_EXIT_USAGE;
  }
  char buf[65536];
  uint64_t idle_since = loom__now_ms();
  for (;;) {
    if (!f) f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (n > 0) {
      fwrite(buf, 1, n, stdout);
      idle_since = loom__now_ms();
      continue;
    }
    fflush(stdout);
    if (!follow) break;
    if (!job_live(dir) && loom__now_ms() - idle_since > 300) break;
    if (f) clearerr(f);
    usleep(100000);
  }
  if (f) fclose(f);
  return 0;
}

/* ---- events ------------------------------------------------------------- */
static int cmd_events(int argc, char **argv) {
  const char *job = NULL;
  bool raw = false;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      raw = true;
    else if (argv[i][0] == '-')
      return bad_usage("events", "unknown option %s", argv[i]);
    else
      job = argv[i];
  }
  if (!job) return bad_usage("events", "missing JOB");
  char dir[PATH_MAX], err[512], path[PATH_MAX + 32];
  if (jobs_find(job, dir, sizeof dir, err, sizeof err) < 0) {
    fprintf(stderr, "loom events: %s\n", err);
    return LOOM_EXIT_USAGE;
  }
  jobdir_path(dir, JOBDIR_EVENTS, path, sizeof path);
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "loom events: no event log at %s\n", path);
    return LOOM_EXIT_INFRA;
  }
  char line[65536];
  while (fgets(line, sizeof line, f)) {
    if (raw) {
      fputs(line, stdout);
      continue;
    }
    json_error_t e;
    json_t *j = json_loads(line, 0, &e);
    if (!j) continue;
    char iso[40];
    loom__wall_iso(json_real_value(json_object_get(j, "t")), iso, sizeof iso);
    const char *task = json_string_value(json_object_get(j, "task"));
    printf("%s  %-16s a%-3lld %-20s", iso + 11, task ? task : "-",
           (long long)json_integer_value(json_object_get(j, "attempt")),
           json_string_value(json_object_get(j, "event")) ?: "?");
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v) {
      if (!strcmp(k, "t") || !strcmp(k, "task") || !strcmp(k, "attempt") || !strcmp(k, "event") ||
          !strcmp(k, "job"))
        continue;
      char *vs = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
      printf(" %s=%s", k, vs ? vs : "?");
      free(vs);
    }
    printf("\n");
    json_decref(j);
  }
  fclose(f);
  return 0;
}

/* ---- kill ------------------------------------------------------------------ */
static int cmd_kill(int argc, char **argv) {
  if (argc < 3 || argv[2][0] == '-') return bad_usage("kill", "missing JOB");
  char dir[PATH_MAX], err[512];
  if (jobs_find(argv[2], dir, sizeof dir, err, sizeof err) < 0) {
    fprintf(stderr, "loom kill: %s\n", err);
    return LOOM_EXIT_USAGE;
  }
  if (!job_live(dir)) {
    printf("loom kill: the job is not running (see loom status %s)\n", argv[2]);
    return 0;
  }
  char msg[512];
  const backend_ops *ops = backend_of_job(dir);
  json_t *have_state = jobs_state(dir);
  bool pending = !have_state && ops && ops->cancel;
  json_decref(have_state);
  if (pending) {
    /* still pending in its cluster manager: nothing of ours runs yet */
    if (ops->cancel(dir, msg, sizeof msg) < 0) {
      fprintf(stderr, "loom kill: %s\n", msg);
      return LOOM_EXIT_INFRA;
    }
    printf("killed %s (%s, cancelled while pending)\n", strrchr(dir, '/') + 1, msg);
    return 0;
  }
  json_t *cj = jobdir_read_json(dir, JOBDIR_COORD, 1 << 20);
  char *secret = NULL;
  int rc = cj && jobdir_read(dir, JOBDIR_SECRET, 256, &secret, NULL) == 0 ? 0 : LOOM_EIO;
  int fd = -1;
  wire_reader r;
  wire_reader_init(&r, 1 << 20);
  if (rc == 0) rc = wire_dial(json_string_value(json_object_get(cj, "addr")), 3000, &fd);
  char why[200] = "";
  if (rc == 0) rc = wire_client_auth(fd, &r, secret, 3000, why, sizeof why);
  if (rc == 0) {
    json_t *req = json_pack("{s:i}", "id", 1);
    rc = wire_send(fd, WIRE_CTL_KILL, req, NULL, 0);
    json_decref(req);
    wire_frame f;
    if (rc == 0 && (rc = wire_recv(fd, &r, &f, 5000)) == 0) wire_frame_free(&f);
  }
  if (rc < 0 && ops && ops->cancel) {
    fprintf(stderr,
            "loom kill: coordinator unreachable (%s); cancelling the job in its "
            "cluster manager\n",
            why[0] ? why : loom_strerror(rc));
    rc = ops->cancel(dir, msg, sizeof msg);
    fprintf(stderr, "loom kill: %s%s\n", rc == 0 ? "cancelled " : "", msg);
  } else if (rc < 0) {
    int pid = (int)json_integer_value(json_object_get(cj, "pid"));
    if (pid > 0 && jobs_coord_alive(dir)) {
      fprintf(stderr, "loom kill: coordinator unreachable (%s); sending it SIGTERM\n",
              why[0] ? why : loom_strerror(rc));
      kill(pid, SIGTERM);
      rc = 0;
    }
  }
  if (fd >= 0) wire_io_close(fd);
  wire_reader_free(&r);
  free(secret);
  json_decref(cj);
  if (rc < 0) {
    fprintf(stderr, "loom kill: cannot reach the job's coordinator: %s\n", loom_strerror(rc));
    return LOOM_EXIT_INFRA;
  }
  for (int i = 0; i < 300 && job_live(dir); i++) usleep(50000);
  if (job_live(dir)) {
    fprintf(stderr, "loom kill: the job is still stopping after 15s\n");
    return LOOM_EXIT_INFRA;
  }
  printf("killed %s\n", strrchr(dir, '/') + 1);
  return 0;
}

/* ---- check ------------------------------------------------------------- */
static int cmd_check(int argc, char **argv) {
  const char *bname = backend_default()->name;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      bname = argv[++i];
    else
      return bad_usage("check", "unknown argument %s", argv[i]);
  }
  int bad = 0;
  char p[PATH_MAX + 64], msg[8192];
  loom__strlcpy(p, jobdir_root(), sizeof p);
  bool dirok = loom__mkdir_p(p, 0700) == 0 && access(p, W_OK) == 0;
  printf("%s job directory %s%s\n", dirok ? "ok  " : "FAIL", p, dirok ? "" : " is not writable");
  bad += !dirok;
  const backend_ops *ops = backend_find(bname);
  if (!ops) {
    printf("FAIL backend '%s' is not available (%s)\n", bname, backend_names());
    bad++;
  } else {
    int rc = ops->probe(msg, sizeof msg);
    printf("%s backend %s\n", rc == 0 ? "ok  " : "FAIL", msg);
    bad += rc != 0;
  }
  uv_loop_t *loop = uv_default_loop();
  uv_tcp_t t;
  struct sockaddr_in sa;
  uv_ip4_addr("127.0.0.1", 0, &sa);
  uv_tcp_init(loop, &t);
  int rc = uv_tcp_bind(&t, (struct sockaddr *)&sa, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&t, 1, NULL);
  printf("%s loopback TCP %s\n", rc == 0 ? "ok  " : "FAIL", rc == 0 ? "listens" : uv_strerror(rc));
  bad += rc != 0;
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  if (ops && ops->same_host) {
    /* what the agents will do: never a failure, the rlimit is the fallback */
    cg_probe cg;
    cg_probe_memory(&cg);
    if (cg.kind == CG_RLIMIT)
      printf("ok   memory limits: rlimit (RLIMIT_DATA; no cgroup: %s)\n", cg.why);
    else
      printf("ok   memory limits: %s (%s under %s)\n", cg_kind_name(cg.kind),
             cg_limit_file(cg.kind), cg.base);
  }
  char exe[PATH_MAX];
  bool exeok = self_exe(exe, sizeof exe) == 0 && access(exe, X_OK) == 0;
  printf("%s agent executable %s\n", exeok ? "ok  " : "FAIL", exeok ? exe : "not found");
  bad += !exeok;
  return bad ? LOOM_EXIT_INFRA : 0;
}

int main(int argc, char **argv) {
  loom__log_init();
  if (argc >= 2 && !strcmp(argv[1], "__exec")) return agent_exec_main(argc - 1, argv + 1);
  if (argc < 2) {
    usage(stderr);
    return LOOM_EXIT_USAGE;
  }
  const char *v = argv[1];
  if (!strcmp(v, "--help") || !strcmp(v, "-h") || !strcmp(v, "help")) {
    if (argc >= 3 && !strcmp(argv[2], "tunables"))
      return help_tunables(argc - 3, argv + 3) == 0
                 ? 0
                 : bad_usage("help", "tunables takes --all and --markdown only");
    if (argc >= 3) return verb_help(argv[2]) == 0 ? 0 : bad_usage("help", "no verb %s", argv[2]);
    usage(stdout);
    return 0;
  }
  if (!strcmp(v, "--version")) {
    printf("loom %s\n", loom_version());
    return 0;
  }
  if (has_help(argc, argv)) {
    if (verb_help(v) == 0) return 0;
  }
  if (!strcmp(v, "run")) return cmd_run(argc, argv, false);
  if (!strcmp(v, "submit")) return cmd_run(argc, argv, true);
  if (!strcmp(v, "status")) return cmd_status(argc, argv);
  if (!strcmp(v, "logs")) return cmd_logs(argc, argv);
  if (!strcmp(v, "events")) return cmd_events(argc, argv);
  if (!strcmp(v, "kill")) return cmd_kill(argc, argv);
  if (!strcmp(v, "check")) return cmd_check(argc, argv);
  if (!strcmp(v, "agent")) return agent_main();
  if (!strcmp(v, "ps")) return loom__ps_main(argc - 1, argv + 1);
  if (!strcmp(v, "ui")) return loom__ui_main(argc - 1, argv + 1);
  if (!strcmp(v, "fs")) return loom__fs_main(argc - 1, argv + 1);
  if (!strcmp(v, "coordinator")) return cmd_coordinator(argc, argv);
  fprintf(stderr, "loom: unknown verb '%s'\n\n", v);
  usage(stderr);
  return LOOM_EXIT_USAGE;
}
