/* ui.c: `loom ui`, the dashboard for every job under $LOOM_HOME/jobs,
 * finished or running, read from the job directories. Its token lives in
 * $LOOM_HOME/ui-token (created 0600 on first use), so its URL stays the
 * same from one run to the next; each job's own token (the one its `loom
 * run` printed) also opens that job's pages here. */
#include "http/http_int.h"
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

static const char *ui_home(char *buf, size_t len) {
  const char *h = getenv("LOOM_HOME");
  if (h && *h) {
    loom__strlcpy(buf, h, len);
  } else {
    const char *u = getenv("HOME");
    snprintf(buf, len, "%s/.loom", u && *u ? u : "/tmp");
  }
  return buf;
}

static bool is_token(const char *s) {
  if (strlen(s) != HTTP_TOKEN_LEN) return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

/* Reads $LOOM_HOME/ui-token, or creates it (0600). */
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
  snprintf(err, errlen, "cannot read or create %s: %s (set LOOM_HOME to a writable directory)",
           path, strerror(errno));
  return LOOM_EIO;
}

/* The job ids under jobs, for resolving what the user typed. */
static int list_ids(const char *jobs, char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(jobs);
  if (!d) return 0;
  size_t cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!http__safe_name(e->d_name)) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 64;
      char **na = realloc(*out, cap * sizeof *na);
      if (!na) break;
      *out = na;
    }
    if (!((*out)[*n] = strdup(e->d_name))) break;
    (*n)++;
  }
  closedir(d);
  return 0;
}

/* The id of the newest job: the one whose id ends in the latest
 * "yyyymmdd-hhmmss-xxxx". */
static const char *newest(char **ids, size_t n) {
  const char *best = NULL;
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(ids[i]);
    if (l <= 20) continue;
    if (!best || strcmp(ids[i] + l - 20, best + strlen(best) - 20) > 0) best = ids[i];
  }
  return best;
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
  fprintf(f, "usage: loom ui [--port P] [--bind A] [JOB...]\n"
             "Serves the dashboard of every job under $LOOM_HOME/jobs (or only of the JOBs\n"
             "given: ids, unique prefixes, or `last`) until interrupted. Prints its URL,\n"
             "with the access token from $LOOM_HOME/ui-token.\n"
             "  --port P   listen on port P (default: any free port)\n"
             "  --bind A   listen on address A (default 127.0.0.1; 0.0.0.0 for all)\n");
}

int loom__ui_main(int argc, char **argv) {
  const char *bind = "127.0.0.1";
  long long port = 0;
  const char **want = calloc((size_t)argc + 1, sizeof *want);
  size_t nwant = 0;
  char **ids = NULL, **only = NULL;
  size_t nids = 0, nonly = 0;
  int status = 2;
  if (!want) return 3;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      status = 0;
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
  ui_home(home, sizeof home);
  snprintf(jobs, sizeof jobs, "%s/jobs", home);
  if (loom__mkdir_p(home, 0700) < 0) {
    fprintf(stderr, "loom ui: cannot create %s: %s (set LOOM_HOME to a writable directory)\n", home,
            strerror(errno));
    status = 3;
    goto out;
  }
  char tok[HTTP_TOKEN_LEN + 1];
  if (ui_token(home, tok, err, sizeof err) < 0) {
    fprintf(stderr, "loom ui: %s\n", err);
    status = 3;
    goto out;
  }

  if (nwant) {
    list_ids(jobs, &ids, &nids);
    if (!(only = calloc(nwant, sizeof *only))) goto out;
    for (size_t w = 0; w < nwant; w++) {
      const char *hit = NULL;
      int matches = 0;
      if (!strcmp(want[w], "last")) {
        hit = newest(ids, nids);
      } else {
        for (size_t i = 0; i < nids && !hit; i++)
          if (!strcmp(ids[i], want[w])) hit = ids[i];
        size_t l = strlen(want[w]);
        for (size_t i = 0; i < nids && !hit; i++)
          if (!strncmp(ids[i], want[w], l)) matches++;
        for (size_t i = 0; i < nids && !hit && matches == 1; i++)
          if (!strncmp(ids[i], want[w], l)) hit = ids[i];
      }
      if (!hit && matches > 1) {
        fprintf(stderr, "loom ui: '%s' matches %d jobs under %s: give more of the id\n", want[w],
                matches, jobs);
        goto out;
      }
      if (!hit) {
        fprintf(stderr, "loom ui: no job '%s' under %s: see `loom status` for the jobs there\n",
                want[w], jobs);
        goto out;
      }
      only[nonly++] = (char *)hit;
    }
  }

  uv_loop_t loop;
  if (uv_loop_init(&loop) < 0) {
    status = 3;
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
    status = 3;
  } else {
    const char *host = strcmp(bind, "0.0.0.0") && strcmp(bind, "::") ? bind : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL;
    printf("loom: dashboard http://%s%s%s:%d/?token=%s\n", v6 ? "[" : "", host, v6 ? "]" : "", got,
           tok);
    fflush(stdout);
    fprintf(stderr, "loom ui: serving %s%s; Ctrl-C to stop\n", nonly ? "the jobs given from " : "",
            jobs);
    uv_signal_init(&loop, &u.sigint);
    uv_signal_init(&loop, &u.sigterm);
    u.sigint.data = u.sigterm.data = &u;
    uv_signal_start(&u.sigint, on_signal, SIGINT);
    uv_signal_start(&u.sigterm, on_signal, SIGTERM);
    status = 0;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
out:
  for (size_t i = 0; i < nids; i++)
    free(ids[i]);
  free(ids);
  free(only);
  free(want);
  return status;
}
