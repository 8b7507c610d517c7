/* run.c: `loom run` and `loom submit` (load and check the spec, make the
 * job directory, then run the coordinator here, start it detached, or
 * hand the job to a backend whose coordinator runs in the cluster and
 * follow it), and `loom coordinator`, a submitted job's coordinator. */
#include "cli/cli.h"

#include "backend/backend.h"
#include "cli/jobs.h"
#include "coord/coord.h"
#include "core/exitcode.h"
#include "http/http.h"
#include "jobdir/jobdir.h"

#include <arpa/inet.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

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
      if (nsets == 64) return cli_bad_usage(verb, "at most 64 --set");
      sets[nsets++] = argv[++i];
    } else if (!strncmp(argv[i], "--set=", 6)) {
      if (nsets == 64) return cli_bad_usage(verb, "at most 64 --set");
      sets[nsets++] = argv[i] + 6;
    } else if (argv[i][0] == '-')
      return cli_bad_usage(verb, "unknown option %s", argv[i]);
    else if (!path)
      path = argv[i];
    else
      return cli_bad_usage(verb, "one spec only (got %s and %s)", path, argv[i]);
  }
  if (!path) return cli_bad_usage(verb, "missing SPEC: loom %s job.yaml", verb);
  int bad = check_bind(bind, adv);
  if (bad)
    return cli_bad_usage(verb,
                         bad == 1
                             ? "--bind %s is not an IP address"
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
    return cli_bad_usage(verb, "backend '%s' is not available here: use one of %s", bname,
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
  if (cli_self_exe(exe, sizeof exe) < 0 || jobs_create(s, id, dir, secret, err, sizeof err) < 0) {
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

int cli_run(int argc, char **argv) { return cmd_run(argc, argv, false); }
int cli_submit(int argc, char **argv) { return cmd_run(argc, argv, true); }

int cli_coordinator(int argc, char **argv) {
  if (argc < 3) return cli_bad_usage("coordinator", "missing JOBDIR");
  const char *dir = argv[2], *bopt = NULL, *bind = NULL, *adv = NULL;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--backend"))
      bopt = argv[i + 1];
    else if (!strcmp(argv[i], "--bind"))
      bind = argv[i + 1];
    else if (!strcmp(argv[i], "--advertise"))
      adv = argv[i + 1];
    else
      return cli_bad_usage("coordinator", "unknown option %s", argv[i]);
  }
  char p[PATH_MAX + 32], err[2048], exe[PATH_MAX];
  /* a job directory of its own (a managed YARN application master's, in
   * its container) may hold only the spec and the secret yet */
  if (jobdir_make(dir, err, sizeof err) < 0) {
    fprintf(stderr, "loom coordinator: %s\n", err);
    return LOOM_EXIT_INFRA;
  }
  /* tasks get the directory as an absolute path (LOOM_JOB_DIR): a managed
   * YARN application master is given one relative to its container */
  char adir[PATH_MAX];
  if (dir[0] != '/' && realpath(dir, adir)) dir = adir;
  jobdir_path(dir, JOBDIR_SPEC, p, sizeof p);
  spec_job *s;
  if (spec_load(p, NULL, 0, &s, err, sizeof err) < 0) {
    fprintf(stderr, "loom coordinator: %s\n", err);
    return LOOM_EXIT_USAGE;
  }
  jobdir_path(dir, JOBDIR_SECRET, p, sizeof p);
  char *secret = NULL;
  if (loom__read_file(p, 256, &secret, NULL) < 0 || cli_self_exe(exe, sizeof exe) < 0) {
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
    /* a job the cluster manager started again continues its attempts:
     * where its directory is new (a managed YARN application master's
     * next container), the backend first brings back what the previous
     * attempt published */
    json_t *prev = jobs_state(dir);
    if (!prev) {
      jobs_refresh(dir, NULL);
      prev = jobs_state(dir);
    }
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
