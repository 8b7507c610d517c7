/* views.c: what the CLI shows of a job from its directory: `loom status`
 * (one job's tasks, or every recent job), `loom logs`, `loom events`, and
 * `loom kill`, which asks the job's coordinator to stop it. */
#include "cli/cli.h"

#include "backend/backend.h"
#include "cli/jobs.h"
#include "core/exitcode.h"
#include "jobdir/jobdir.h"
#include "wire/wire.h"
#include "wire/wire_tls.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
 * runs there (its job directory brought up to date: jobs_refresh); false
 * for others (or when the job has none). */
static bool backend_state(const char *dir, backend_job *bj) { return jobs_refresh(dir, bj); }

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

int cli_status(int argc, char **argv) {
  const char *job = NULL;
  bool json = false, with_secret = false, with_spec = false;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = true;
    else if (!strcmp(argv[i], "--secret"))
      with_secret = true;
    else if (!strcmp(argv[i], "--spec"))
      with_spec = true;
    else if (argv[i][0] == '-')
      return cli_bad_usage("status", "unknown option %s", argv[i]);
    else
      job = argv[i];
  }
  if (with_secret && (!json || !job))
    return cli_bad_usage("status", "--secret goes with --json and a JOB");
  if (with_spec && (!json || !job))
    return cli_bad_usage("status", "--spec goes with --json and a JOB");
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
      const char *was = st ? json_string_value(json_object_get(st, "state")) : NULL;
      if (!was || (strcmp(was, "succeeded") && strcmp(was, "failed") && strcmp(was, "killed"))) {
        /* not ended yet here: where the coordinator is elsewhere, what
         * it published since */
        json_decref(st);
        jobs_refresh(dir, NULL);
        st = jobs_state(dir);
      }
      if (!st) {
        backend_job bj;
        char what[200];
        snprintf(what, sizeof what, "unknown (no %s)", jobdir_name(JOBDIR_STATE));
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
  backend_job bj;
  bool in_manager = backend_state(dir, &bj);
  json_t *st = jobs_state(dir);
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
    if (with_secret) {
      /* what an agent started by hand needs beside the state's
       * coordinator.addr (loom.spark starts its agents so): the secret,
       * which only the job's owner can read */
      char p[PATH_MAX + 32], *secret = NULL;
      jobdir_path(dir, JOBDIR_SECRET, p, sizeof p);
      if (loom__read_file(p, 256, &secret, NULL) < 0) {
        fprintf(stderr, "loom status: cannot read %s\n", p);
        json_decref(st);
        return LOOM_EXIT_INFRA;
      }
      secret[strcspn(secret, "\r\n")] = 0;
      json_object_set_new(st, "secret", json_string(secret));
      free(secret);
    }
    if (with_spec) {
      /* the spec as the job runs it: defaults filled in, --set applied */
      json_t *spec = jobdir_read_json(dir, JOBDIR_SPEC, 1 << 24);
      if (!spec) {
        fprintf(stderr, "loom status: cannot read %s/%s\n", dir, jobdir_name(JOBDIR_SPEC));
        json_decref(st);
        return LOOM_EXIT_INFRA;
      }
      json_object_set_new(st, "spec", spec);
    }
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
  /* A coordinator that runs in its cluster manager (a managed YARN
   * application master) writes the job's end before the manager has it:
   * until the manager says the job ended, its processes may still run,
   * and the job is "finishing", not yet what it will end as. */
  const char *state = job_state_str(dir, st);
  bool ended = !strcmp(state, "succeeded") || !strcmp(state, "failed") || !strcmp(state, "killed");
  if (in_manager && ended && (bj.state == BACKEND_JOB_PENDING || bj.state == BACKEND_JOB_RUNNING))
    state = "finishing";
  printf("job      %s\nstate    %s\nattempt  %lld (retries %lld)\nelapsed  %s\ndir      %s\n",
         json_string_value(json_object_get(st, "job")), state,
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
/* How long `loom events --follow` waits for the event log of a job whose
 * coordinator has not started yet (submitted, or pending in its cluster
 * manager, but not seen as live) */
#define FOLLOW_START_MS 10000

/* A log copied in from where a coordinator elsewhere published it is a new
 * file each time, holding the old one's lines first: *f, open on path, is
 * replaced by the new file at the offset where the old one ended. True if
 * it was replaced. */
static bool reopen_if_replaced(FILE **f, const char *path) {
  struct stat now, had;
  if (!*f || stat(path, &now) < 0 || fstat(fileno(*f), &had) < 0 || now.st_ino == had.st_ino)
    return false;
  long off = ftell(*f);
  FILE *g = fopen(path, "r");
  if (g && off >= 0 && fseek(g, off, SEEK_SET) == 0) {
    fclose(*f);
    *f = g;
    return true;
  }
  if (g) fclose(g);
  return false;
}

static bool job_live(const char *dir) {
  json_t *st = jobs_state(dir);
  if (!st) return jobs_coord_alive(dir); /* pending in its cluster manager, say */
  const char *s = st ? job_state_str(dir, st) : "unknown";
  bool live = !strcmp(s, "running") || !strcmp(s, "starting") || !strcmp(s, "stopping");
  json_decref(st);
  return live;
}

int cli_logs(int argc, char **argv) {
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
      return cli_bad_usage("logs", "unknown option %s", argv[i]);
    else
      job = argv[i];
  }
  if (!job) return cli_bad_usage("logs", "missing JOB");
  if (!strncmp(job, "application_", 12)) {
    if (follow)
      return cli_bad_usage("logs", "--follow: an application's aggregated logs are final");
    return cli_aggr_logs(job, task);
  }
  char dir[PATH_MAX], err[512], path[PATH_MAX + 200], app[128];
  if (jobs_find(job, dir, sizeof dir, err, sizeof err) < 0) {
    fprintf(stderr, "loom logs: %s\n", err);
    return LOOM_EXIT_USAGE;
  }
  if (task) {
    const char *c = strchr(task, ':');
    long long idx;
    if (!c || c == task || loom__parse_int(c + 1, 0, 1 << 30, &idx) < 0)
      return cli_bad_usage("logs", "--task wants role:index, e.g. worker:1 (got '%s')", task);
    char file[200];
    snprintf(file, sizeof file, "%.*s-%lld", (int)(c - task), task, idx);
    char *tp = jobdir_task_apath(dir, JOBDIR_LOGS, file);
    loom__strlcpy(path, tp ? tp : "", sizeof path);
    free(tp);
  } else {
    jobdir_path(dir, JOBDIR_ALL_LOG, path, sizeof path);
  }
  jobs_refresh(dir, NULL); /* what a coordinator elsewhere published */
  FILE *f = fopen(path, "r");
  /* a YARN job whose directory lacks its logs: the aggregated ones */
  if (!f && !follow && cli_job_app(dir, app, sizeof app)) return cli_aggr_logs(app, task);
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
    bool live = job_live(dir); /* which copies in what was published */
    if (f) clearerr(f);
    if (reopen_if_replaced(&f, path)) continue;
    if (!live && loom__now_ms() - idle_since > 300) break;
    usleep(100000);
  }
  if (f) fclose(f);
  return 0;
}

/* ---- events ------------------------------------------------------------- */
/* One event line as `loom events` prints it: raw, or time, task, attempt,
 * event and the other fields. */
static void print_event(const char *line, bool raw) {
  if (raw) {
    fputs(line, stdout);
    return;
  }
  json_error_t e;
  json_t *j = json_loads(line, 0, &e);
  if (!j) return;
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

int cli_events(int argc, char **argv) {
  const char *job = NULL;
  bool raw = false, follow = false;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      raw = true;
    else if (!strcmp(argv[i], "--follow") || !strcmp(argv[i], "-f"))
      follow = true;
    else if (argv[i][0] == '-')
      return cli_bad_usage("events", "unknown option %s", argv[i]);
    else
      job = argv[i];
  }
  if (!job) return cli_bad_usage("events", "missing JOB");
  char dir[PATH_MAX], err[512], path[PATH_MAX + 32];
  if (jobs_find(job, dir, sizeof dir, err, sizeof err) < 0) {
    fprintf(stderr, "loom events: %s\n", err);
    return LOOM_EXIT_USAGE;
  }
  jobs_refresh(dir, NULL); /* what a coordinator elsewhere published */
  jobdir_path(dir, JOBDIR_EVENTS, path, sizeof path);
  FILE *f = fopen(path, "r");
  if (!f && !follow) {
    fprintf(stderr, "loom events: no event log at %s\n", path);
    return LOOM_EXIT_INFRA;
  }
  /* --follow: on until the job has ended and its log has been quiet for
   * 300 ms, as logs --follow; only whole lines (the coordinator may be
   * writing one), and a log copied in anew from where a coordinator
   * elsewhere published it is read on from where the old one ended */
  char line[65536];
  uint64_t started = loom__now_ms(), idle_since = started;
  for (;;) {
    if (!f) f = fopen(path, "r");
    long at = f ? ftell(f) : -1;
    if (f && fgets(line, sizeof line, f)) {
      size_t n = strlen(line);
      if (!follow || line[n - 1] == '\n' || n == sizeof line - 1) {
        print_event(line, raw);
        idle_since = loom__now_ms();
        continue;
      }
      if (at >= 0) fseek(f, at, SEEK_SET); /* the rest of it next time */
    }
    fflush(stdout);
    if (!follow) break;
    bool live = job_live(dir);
    if (f) clearerr(f);
    if (reopen_if_replaced(&f, path)) continue;
    /* a job just submitted may not have a coordinator, nor its log, yet */
    if (!f && !live && loom__now_ms() - started > FOLLOW_START_MS) {
      fprintf(stderr, "loom events: no event log at %s (the job ended without one)\n", path);
      return LOOM_EXIT_INFRA;
    }
    if (f && !live && loom__now_ms() - idle_since > 300) break;
    usleep(100000);
  }
  if (f) fclose(f);
  return 0;
}

/* ---- kill ------------------------------------------------------------------ */
int cli_kill(int argc, char **argv) {
  if (argc < 3 || argv[2][0] == '-') return cli_bad_usage("kill", "missing JOB");
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
