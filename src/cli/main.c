/* main.c: the loom command: one table of verbs (name, handler, help)
 * that drives both dispatch and help, `loom help tunables`, `loom check`
 * and main(). The verbs' work is in run.c and views.c (cli.h), and in the
 * parts that `loom ps`, `loom ui`, `loom fs` and `loom agent` hand over
 * to. Only src/cli/ prints for people; the exit statuses, 0 job succeeded,
 * 1 job failed, 2 usage or spec error, 3 backend or infrastructure error,
 * 130 interrupted, are core/exitcode.h's. */
#include "cli/cli.h"

#include "agent/agent.h"
#include "backend/backend.h"
#include "cli/fs.h"
#include "core/exitcode.h"
#include "http/http.h"
#include "jobdir/jobdir.h"
#include "ps/server.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

static cli_verb_fn cmd_check, cmd_agent, cmd_ps, cmd_ui, cmd_fs;

/* Every verb, in the order `loom --help` lists them: its name, its handler
 * (main() calls it with the whole argv), and its help: the usage line's
 * arguments, what it does in a line, and the rest of `loom VERB --help`. */
static const struct verb {
  const char *name;
  cli_verb_fn *fn;
  const char *args, *what, *help;
} VERBS[] = {
    {"run", cli_run, "SPEC [--backend B] [--set key=value]... [--bind A] [--advertise H]",
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
    {"submit", cli_submit, "SPEC [--backend B] [--set key=value]... [--bind A] [--advertise H]",
     "run a job detached; prints its id",
     "Like run, but the coordinator runs in the background and loom prints the\n"
     "job id once it is up. Follow it with loom status/logs/events; stop it with\n"
     "loom kill. --bind and --advertise as for run. On yarn the coordinator runs\n"
     "in a container YARN starts (a managed application master), so the job\n"
     "outlives this client; YARN starts it again if it dies.\n"},
    {"status", cli_status, "[JOB]", "a job's tasks and states, or all recent jobs",
     "Without JOB, one line per recent job. With JOB (an id, a unique prefix, or\n"
     "'last'), every task: state, attempt, exit code or signal, elapsed time.\n"
     "  --json             print the job's state file as it is\n"
     "  --secret           with --json and JOB: add the job's secret (\"secret\"),\n"
     "                     for agents started by hand (LOOM_SECRET)\n"
     "  --spec             with --json and JOB: add the spec as the job runs it\n"
     "                     (\"spec\": defaults filled in, --set applied)\n"},
    {"logs", cli_logs, "JOB [--task T] [--follow]", "a task's log, or all tasks interleaved",
     "Prints the log of task T (role:index, e.g. worker:1), or every task's lines\n"
     "interleaved and prefixed. --follow keeps printing until the job ends.\n"
     "JOB may be a YARN application id (application_...): its tasks' lines from\n"
     "YARN's aggregated logs on HDFS, as for a YARN job whose directory lacks them.\n"},
    {"events", cli_events, "JOB [--json] [--follow]", "the job's event log",
     "Prints the event log, one event a line: time, task, attempt, event, details.\n"
     "  --json             the raw JSON lines\n"
     "  --follow           keep printing events as they come until the job ends\n"},
    {"kill", cli_kill, "JOB", "stop a running job",
     "Asks the job's coordinator to stop every task (SIGTERM, then SIGKILL after\n"
     "the grace period) and waits until it has.\n"},
    {"check", cmd_check, "[--backend B]", "is this machine ready to run jobs",
     "Checks the job directory, the backend and the loopback network.\n"},
    {"ui", cmd_ui, "[--port P] [--bind A] [JOB...]",
     "the web dashboard for jobs, from their job directories",
     "Serves every job under $" JOBDIR_HOME_ENV "/jobs (finished or running): tasks, states,\n"
     "attempts, exit codes, logs, events and metric charts. Prints the URL with\n"
     "its access token.\n"},
    {"ps", cmd_ps, "[--help]", "the built-in parameter server, as a ps role's command",
     "Serves this task's shard of the job's variables until the job ends. Use it\n"
     "as the command of the ps role: `ps: {instances: 2, command: loom ps}`.\n"},
    {"fs", cmd_fs, "[--principal P --keytab F] ls|stat|cat|get|put|mkdir|rm|mv|fetchdt ARGS",
     "files on HDFS, through loom's own client",
     "  loom fs ls URL              a directory's entries (or a file), like hdfs dfs -ls\n"
     "  loom fs stat URL            one line of JSON: type, length, permission, owner, ...\n"
     "  loom fs cat URL...          the files' bytes to standard output\n"
     "  loom fs get URL LOCAL       copy to a local file (written beside it, then renamed)\n"
     "  loom fs put [-f] LOCAL URL  copy a local file there (URL._COPYING_, then renamed;\n"
     "                              -f replaces a file that exists)\n"
     "  loom fs mkdir URL           make a directory and its parents\n"
     "  loom fs rm [-r] URL         remove a file (-r: a directory and all in it)\n"
     "  loom fs mv SRC DST          rename (DST must not exist)\n"
     "  loom fs fetchdt [--fs URL] [--renewer NAME] FILE\n"
     "                              an HDFS delegation token into the credentials file\n"
     "                              FILE (0600), as hdfs fetchdt (Kerberos)\n"
     "  loom fs fetchdt --renew FILE | --cancel FILE\n"
     "                              renew (as its renewer) or cancel FILE's token\n\n"
     "URLs: hdfs://host:port/path, or hdfs:///path for the NameNode of fs.defaultFS\n"
     "in $HADOOP_CONF_DIR/core-site.xml; the user is $HADOOP_USER_NAME or the login,\n"
     "or on a Kerberized cluster the principal of the ticket in $KRB5CCNAME (kinit),\n"
     "or with --principal P --keytab F (LOOM_KERBEROS_PRINCIPAL, _KEYTAB) P logged\n"
     "in from the keytab F, its ticket kept in memory (no kinit, no cache file);\n"
     "with $HADOOP_TOKEN_FILE_LOCATION holding an HDFS delegation token for the\n"
     "NameNode (as YARN and Spark give containers), the token (no ticket needed).\n"
     "get, put, rm and mv take local paths too. Reads check every checksum and go\n"
     "on from another replica when one is dead or corrupt. Exit status: 0, 1 a\n"
     "filesystem error (no such path, permission denied, exists, no good\n"
     "replica), 2 usage or a bad URL, 3 the cluster cannot be reached.\n"},
    {"agent", cmd_agent, "", "internal: a task's agent, started by backends", ""},
    {"coordinator", cli_coordinator, "JOBDIR", "internal: a job's coordinator, started by submit",
     ""},
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

/* s as a Markdown table cell: a bar would end the cell, a star start
 * emphasis, <role> be taken for HTML. */
static void md_cell(const char *s) {
  for (; *s; s++) {
    if (*s == '<' || *s == '>') {
      fputs(*s == '<' ? "&lt;" : "&gt;", stdout);
      continue;
    }
    if (*s == '|' || *s == '*') putchar('\\');
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

/* `loom help VERB`, `loom VERB --help`: its usage and help from VERBS;
 * LOOM_EINVAL, printing nothing, when there is no such verb. */
static int verb_help(const char *name) {
  if (!strcmp(name, "tunables")) return help_tunables(0, NULL);
  for (size_t i = 0; i < LOOM__ARRAY_LEN(VERBS); i++)
    if (!strcmp(VERBS[i].name, name)) {
      printf("usage: loom %s %s\n\n%s\n%s", name, VERBS[i].args, VERBS[i].what, VERBS[i].help);
      if (strstr(VERBS[i].args, "--backend"))
        printf("\nbackends: %s (default %s)\n", backend_names(), backend_default()->name);
      return 0;
    }
  return LOOM_EINVAL;
}

int cli_bad_usage(const char *verb, const char *fmt, ...) {
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

int cli_self_exe(char *buf, size_t len) {
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n <= 0) return -1;
  buf[n] = 0;
  return 0;
}

/* ---- check ------------------------------------------------------------- */
static int cmd_check(int argc, char **argv) {
  const char *bname = backend_default()->name;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      bname = argv[++i];
    else
      return cli_bad_usage("check", "unknown argument %s", argv[i]);
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
  bool exeok = cli_self_exe(exe, sizeof exe) == 0 && access(exe, X_OK) == 0;
  printf("%s agent executable %s\n", exeok ? "ok  " : "FAIL", exeok ? exe : "not found");
  bad += !exeok;
  return bad ? LOOM_EXIT_INFRA : 0;
}

/* The verbs whose work is elsewhere, argv[1] and on being their argv. */
static int cmd_agent(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return agent_main();
}
static int cmd_ps(int argc, char **argv) { return loom__ps_main(argc - 1, argv + 1); }
static int cmd_ui(int argc, char **argv) { return loom__ui_main(argc - 1, argv + 1); }
static int cmd_fs(int argc, char **argv) { return loom__fs_main(argc - 1, argv + 1); }

int main(int argc, char **argv) {
  loom__log_init();
  /* what an agent runs a task through (agent/exec.c), not a verb */
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
                 : cli_bad_usage("help", "tunables takes --all and --markdown only");
    if (argc >= 3)
      return verb_help(argv[2]) == 0 ? 0 : cli_bad_usage("help", "no verb %s", argv[2]);
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
  for (size_t i = 0; i < LOOM__ARRAY_LEN(VERBS); i++)
    if (!strcmp(v, VERBS[i].name)) return VERBS[i].fn(argc, argv);
  fprintf(stderr, "loom: unknown verb '%s'\n\n", v);
  usage(stderr);
  return LOOM_EXIT_USAGE;
}
