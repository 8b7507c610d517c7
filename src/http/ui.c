/* ui.c: `loom ui`, the dashboard for every job under loom's home (see
 * jobdir.h), finished or running, read from the job directories. Its token
 * lives in <home>/ui-token (created 0600 on first use), so its URL stays the
 * same from one run to the next; each job's own token (the one its `loom
 * run` printed) also opens that job's pages here. */
#include "http/http_int.h"
#include "core/exitcode.h"
#include "jobdir/jobdir.h"
#include "wire/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

static bool is_token(const char *s) {
  if (strlen(s) != HTTP_TOKEN_LEN) return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

/* Reads <home>/ui-token, or creates it (0600). */
static int ui_token(const char *home, char tok[HTTP_TOKEN_LEN + 1], char *err, size_t errlen) {
  char path[4200];
  snprintf(path, sizeof path, "%s/ui-token", home);
  for (int tries = 0; tries < 2; tries++) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st;
      char buf[HTTP_TOKEN_LEN + 8] = {0};
      ssize_t n = fstat(fd, &st) == 0 ? read(fd, buf, sizeof buf - 1) : -1;
      close(fd);
      if (n < 0) break;
      if (st.st_uid != geteuid() || (st.st_mode & 077)) {
        snprintf(err, errlen,
                 "%s is readable by others or not yours: `chmod 600 %s` (or delete it for a "
                 "new one)",
                 path, path);
        return LOOM_EAUTH;
      }
      buf[n] = 0;
      buf[strcspn(buf, "\r\n")] = 0;
      if (!is_token(buf)) {
        snprintf(err, errlen, "%s does not hold a token (32 hex digits): delete it for a new one",
                 path);
        return LOOM_EINVAL;
      }
      memcpy(tok, buf, HTTP_TOKEN_LEN + 1);
      return 0;
    }
    if (errno != ENOENT) break;
    unsigned char rnd[HTTP_TOKEN_LEN / 2];
    if (wire_random(rnd, sizeof rnd) < 0) {
      snprintf(err, errlen, "no randomness for the ui token");
      return LOOM_EIO;
    }
    loom__hex(rnd, sizeof rnd, tok);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue; /* another `loom ui` made it: read that */
    if (fd < 0) break;
    char line[HTTP_TOKEN_LEN + 2];
    snprintf(line, sizeof line, "%s\n", tok);
    bool ok = write(fd, line, strlen(line)) == (ssize_t)strlen(line);
    close(fd);
    if (ok) return 0;
    unlink(path);
    break;
  }
  snprintf(err, errlen, "cannot read or create %s: %s (set %s to a writable directory)", path,
           strerror(errno), JOBDIR_HOME_ENV);
  return LOOM_EIO;
}

typedef struct {
  uv_signal_t sigint, sigterm;
  http_server *srv;
} ui_state;

static void on_signal(uv_signal_t *h, int signum) {
  ui_state *u = h->data;
  http_stop(u->srv);
  u->srv = NULL;
  uv_close((uv_handle_t *)&u->sigint, NULL);
  uv_close((uv_handle_t *)&u->sigterm, NULL);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: loom ui [--port P] [--bind A] [JOB...]\n"
          "Serves the dashboard of every job under $" JOBDIR_HOME_ENV "/jobs (or only of the JOBs\n"
          "given: ids, unique prefixes, or `last`) until interrupted. Prints its URL,\n"
          "with the access token from $" JOBDIR_HOME_ENV "/ui-token.\n"
          "  --port P   listen on port P (default: any free port)\n"
          "  --bind A   listen on address A (default 127.0.0.1; 0.0.0.0 for all)\n");
}

int loom__ui_main(int argc, char **argv) {
  const char *bind = "127.0.0.1";
  long long port = 0;
  const char **want = calloc((size_t)argc + 1, sizeof *want);
  size_t nwant = 0;
  char **only = NULL;
  size_t nonly = 0;
  int status = LOOM_EXIT_USAGE;
  if (!want) return LOOM_EXIT_INFRA;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      status = LOOM_EXIT_OK;
      goto out;
    } else if (!strcmp(a, "--port") || !strcmp(a, "--bind")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "loom ui: %s needs a value\n", a);
        goto out;
      }
      const char *v = argv[++i];
      if (a[2] == 'b') {
        bind = v;
      } else if (loom__parse_int(v, 0, 65535, &port) < 0) {
        fprintf(stderr, "loom ui: --port '%s' is not a port number (0-65535)\n", v);
        goto out;
      }
    } else if (a[0] == '-') {
      fprintf(stderr, "loom ui: unknown option '%s'\n", a);
      usage(stderr);
      goto out;
    } else {
      want[nwant++] = a;
    }
  }

  char home[4096], jobs[4200], err[8600];
  loom__strlcpy(home, jobdir_home(), sizeof home);
  loom__strlcpy(jobs, jobdir_root(), sizeof jobs);
  if (loom__mkdir_p(home, 0700) < 0) {
    fprintf(stderr, "loom ui: cannot create %s: %s (set %s to a writable directory)\n", home,
            strerror(errno), JOBDIR_HOME_ENV);
    status = LOOM_EXIT_INFRA;
    goto out;
  }
  if (http_tls_check(err, sizeof err) < 0) {
    fprintf(stderr, "loom ui: %s\n", err);
    goto out; /* LOOM_EXIT_USAGE: bad settings, as bad arguments */
  }
  char tok[HTTP_TOKEN_LEN + 1];
  if (ui_token(home, tok, err, sizeof err) < 0) {
    fprintf(stderr, "loom ui: %s\n", err);
    status = LOOM_EXIT_INFRA;
    goto out;
  }

  if (nwant) {
    if (!(only = calloc(nwant, sizeof *only))) goto out;
    for (size_t w = 0; w < nwant; w++) {
      char id[JOBDIR_ID_MAX];
      if (jobdir_resolve(jobs, want[w], id, sizeof id, err, sizeof err) < 0) {
        fprintf(stderr, "loom ui: %s\n", err);
        goto out;
      }
      if (!(only[nonly] = strdup(id))) goto out;
      nonly++;
    }
  }

  uv_loop_t loop;
  if (uv_loop_init(&loop) < 0) {
    status = LOOM_EXIT_INFRA;
    goto out;
  }
  signal(SIGPIPE, SIG_IGN);
  ui_state u = {0};
  http_opts o = {.ui = true,
                 .root = jobs,
                 .token = tok,
                 .port = (int)port,
                 .only = nonly ? (const char *const *)only : NULL,
                 .nonly = nonly};
  int got = 0;
  if (http__start(&loop, bind, &o, &u.srv, &got, err, sizeof err) < 0) {
    fprintf(stderr, "loom ui: %s\n", err);
    status = LOOM_EXIT_INFRA;
  } else {
    const char *host = strcmp(bind, "0.0.0.0") && strcmp(bind, "::") ? bind : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL;
    printf("loom: dashboard %s://%s%s%s:%d/?token=%s\n", http_scheme(u.srv), v6 ? "[" : "", host,
           v6 ? "]" : "", got, tok);
    const char *fp = http_fingerprint(u.srv);
    if (fp) printf("loom: dashboard certificate SHA-256 fingerprint %s\n", fp);
    fflush(stdout);
    fprintf(stderr, "loom ui: serving %s%s; Ctrl-C to stop\n", nonly ? "the jobs given from " : "",
            jobs);
    uv_signal_init(&loop, &u.sigint);
    uv_signal_init(&loop, &u.sigterm);
    u.sigint.data = u.sigterm.data = &u;
    uv_signal_start(&u.sigint, on_signal, SIGINT);
    uv_signal_start(&u.sigterm, on_signal, SIGTERM);
    status = LOOM_EXIT_OK;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
out:
  for (size_t i = 0; i < nonly; i++) free(only[i]);
  free(only);
  free(want);
  return status;
}
