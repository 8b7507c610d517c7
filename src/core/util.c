/* util.c: logging, time, strings, capped buffers, files and tunables. */
#include "core/core.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- logging ----------------------------------------------------------- */
static int log_level = LOOM_LOG_WARN;
static char log_subsys[256];
static loom__log_sink log_sink;
static void *log_sink_arg;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_init_once(void) {
  const char *v = getenv("LOOM_LOG");
  if (!v || !*v) return;
  const char *colon = strchr(v, ':');
  size_t n = colon ? (size_t)(colon - v) : strlen(v);
  static const char *names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (strlen(names[i]) == n && strncmp(v, names[i], n) == 0) log_level = i;
  if (colon) loom__strlcpy(log_subsys, colon + 1, sizeof log_subsys);
}

void loom__log_init(void) { pthread_once(&log_once, log_init_once); }

void loom__log_set_sink(loom__log_sink sink, void *arg) {
  log_sink = sink;
  log_sink_arg = arg;
}

bool loom__log_on(int level, const char *subsys) {
  loom__log_init();
  if (level > log_level) return false;
  if (!log_subsys[0] || level <= LOOM_LOG_WARN) return true;
  size_t n = strlen(subsys);
  for (const char *p = log_subsys; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && strncmp(p, subsys, n) == 0) return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

void loom__log(int level, const char *subsys, const char *fmt, ...) {
  if (!loom__log_on(level, subsys)) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (log_sink) {
    log_sink(level, subsys, msg, log_sink_arg);
    return;
  }
  static const char *lv[] = {"error", "warn", "info", "debug"};
  fprintf(stderr, "loom[%d] %s %s: %s\n", (int)getpid(), lv[level], subsys, msg);
}

/* ---- time ------------------------------------------------------------- */
uint64_t loom__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
uint64_t loom__now_ms(void) { return loom__now_ns() / 1000000ull; }
struct timespec loom__deadline(clockid_t clk, uint64_t ms) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}
double loom__wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
void loom__wall_iso(double t, char *buf, size_t len) {
  time_t s = (time_t)t;
  struct tm tm;
  gmtime_r(&s, &tm);
  int ms = (int)((t - (double)s) * 1000.0);
  if (ms < 0) ms = 0;
  if (ms > 999) ms = 999;
  snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

/* ---- strings ---------------------------------------------------------- */
char *loom__strdup(const char *s) { return s ? strdup(s) : NULL; }

char *loom__asprintf(const char *fmt, ...) {
  va_list ap;
  char *out = NULL;
  va_start(ap, fmt);
  if (vasprintf(&out, fmt, ap) < 0) out = NULL;
  va_end(ap);
  return out;
}

size_t loom__strlcpy(char *dst, const char *src, size_t len) {
  size_t n = strlen(src);
  if (len) {
    size_t c = n < len - 1 ? n : len - 1;
    memcpy(dst, src, c);
    dst[c] = 0;
  }
  return n;
}

int loom__levenshtein(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return 1000;
  int row[65];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int prev = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int cur = row[j];
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      int v = prev + cost;
      if (row[j] + 1 < v) v = row[j] + 1;
      if (row[j - 1] + 1 < v) v = row[j - 1] + 1;
      row[j] = v;
      prev = cur;
    }
  }
  return row[lb];
}

int loom__parse_int(const char *s, long long min, long long max, long long *out) {
  if (!s || !*s) return LOOM_EINVAL;
  errno = 0;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end || end == s) return LOOM_EINVAL;
  if (errno == ERANGE || v < min || v > max) return LOOM_ERANGE;
  *out = v;
  return 0;
}

int loom__parse_size(const char *s, uint64_t *out) {
  if (!s) return LOOM_EINVAL;
  while (isspace((unsigned char)*s)) s++;
  if (!isdigit((unsigned char)*s)) return LOOM_EINVAL;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (errno || !(v >= 0 && v < 1e300)) return LOOM_EINVAL;
  while (isspace((unsigned char)*end)) end++;
  static const struct {
    const char *unit;
    double mult;
  } units[] = {{"", 1},
               {"B", 1},
               {"KiB", 1024.0},
               {"MiB", 1048576.0},
               {"GiB", 1073741824.0},
               {"TiB", 1099511627776.0},
               {"KB", 1e3},
               {"MB", 1e6},
               {"GB", 1e9},
               {"TB", 1e12},
               {"K", 1024.0},
               {"M", 1048576.0},
               {"G", 1073741824.0}};
  for (size_t i = 0; i < LOOM__ARRAY_LEN(units); i++) {
    if (strcmp(end, units[i].unit) == 0) {
      double r = v * units[i].mult;
      if (r > 9.0e18) return LOOM_ERANGE;
      if (units[i].mult == 1 && r != (double)(uint64_t)r) return LOOM_EINVAL;
      *out = (uint64_t)r;
      return 0;
    }
  }
  return LOOM_EINVAL;
}

void loom__hex(const unsigned char *in, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[in[i] >> 4];
    out[2 * i + 1] = d[in[i] & 15];
  }
  out[2 * n] = 0;
}

/* ---- buffers ---------------------------------------------------------- */
void loom__buf_init(loom__buf *b, size_t max) {
  b->p = NULL;
  b->len = b->cap = 0;
  b->max = max;
}

int loom__buf_add(loom__buf *b, const void *data, size_t n) {
  if (n > b->max || b->len > b->max - n) return LOOM_ERANGE;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return LOOM_ENOMEM;
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = 0;
  return 0;
}

int loom__buf_printf(loom__buf *b, const char *fmt, ...) {
  char tmp[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return LOOM_EINVAL;
  if ((size_t)n < sizeof tmp) return loom__buf_add(b, tmp, (size_t)n);
  char *big = malloc((size_t)n + 1);
  if (!big) return LOOM_ENOMEM;
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  int rc = loom__buf_add(b, big, (size_t)n);
  free(big);
  return rc;
}

void loom__buf_consume(loom__buf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
  } else {
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
  }
  if (b->p) b->p[b->len] = 0;
}

void loom__buf_free(loom__buf *b) {
  free(b->p);
  loom__buf_init(b, b->max);
}

/* ---- files ------------------------------------------------------------ */
int loom__mkdir_p(const char *path, int mode) {
  char tmp[PATH_MAX];
  if (loom__strlcpy(tmp, path, sizeof tmp) >= sizeof tmp) return LOOM_ERANGE;
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, (mode_t)mode) < 0 && errno != EEXIST) return LOOM_EIO;
    *p = '/';
  }
  if (mkdir(tmp, (mode_t)mode) < 0 && errno != EEXIST) return LOOM_EIO;
  return 0;
}

int loom__write_atomic(const char *path, const void *data, size_t len, int mode, bool durable) {
  char tmp[PATH_MAX];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp)
    return LOOM_ERANGE;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return LOOM_EIO;
  const char *p = data;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      close(fd);
      unlink(tmp);
      return LOOM_EIO;
    }
    p += w;
    left -= (size_t)w;
  }
  if ((durable && fsync(fd) < 0) || close(fd) < 0) {
    unlink(tmp);
    return LOOM_EIO;
  }
  if (rename(tmp, path) < 0) {
    unlink(tmp);
    return LOOM_EIO;
  }
  if (!durable) return 0;
  char dir[PATH_MAX];
  loom__strlcpy(dir, path, sizeof dir);
  int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

int loom__proc_stat(int pid, loom__pstat *out) {
  char path[64], buf[512];
  if (pid <= 0) return -1;
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t r = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (r <= 0) return -1;
  buf[r] = 0;
  /* "pid (comm) S ppid pgrp session ...": comm may hold spaces and ")" */
  const char *e = strrchr(buf, ')');
  if (!e || sscanf(e + 1, " %c %d %d %d", &out->state, &out->ppid, &out->pgrp, &out->sid) != 4)
    return -1;
  return 0;
}

char loom__proc_state(int pid) {
  loom__pstat st;
  return loom__proc_stat(pid, &st) == 0 ? st.state : 0;
}

void loom__proc_each(void (*fn)(int pid, const loom__pstat *st, void *arg), void *arg) {
  DIR *d = opendir("/proc");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    long long pid;
    loom__pstat st;
    if (loom__parse_int(e->d_name, 1, INT32_MAX, &pid) == 0 && loom__proc_stat((int)pid, &st) == 0)
      fn((int)pid, &st, arg);
  }
  closedir(d);
}

FILE *loom__fopen_private(const char *path, bool append) {
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0600);
  if (fd < 0) return NULL;
  FILE *f = fchmod(fd, 0600) == 0 ? fdopen(fd, append ? "a" : "w") : NULL;
  if (!f) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return f;
}

int loom__read_file(const char *path, size_t max, char **out, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? LOOM_ENOENT : LOOM_EIO;
  loom__buf b;
  loom__buf_init(&b, max);
  char chunk[65536];
  int rc = 0;
  for (;;) {
    ssize_t r = read(fd, chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = LOOM_EIO;
      break;
    }
    if (r == 0) break;
    if ((rc = loom__buf_add(&b, chunk, (size_t)r)) < 0) break;
  }
  close(fd);
  if (rc < 0) {
    loom__buf_free(&b);
    return rc;
  }
  if (!b.p && (rc = loom__buf_add(&b, "", 0)) < 0) return rc;
  *out = b.p;
  if (len) *len = b.len;
  return 0;
}
