/* summary.c: the TensorBoard event file writer (include/loom/summary.h).
 *
 * What TensorBoard reads, and so what this writes:
 *   file    records, each: u64 length | u32 masked crc32c(length bytes) |
 *           data | u32 masked crc32c(data), little-endian (TFRecord)
 *   record  an Event protocol buffer (src/summary/proto/event.proto, from
 *           TensorFlow's): the first holds file_version "brain.Event:2",
 *           each later one a Summary of one Value: a scalar
 *           (simple_value), a HistogramProto, or a text (a DT_STRING
 *           tensor with the text plugin's metadata). pb.c builds them with
 *           the generated protobuf-c messages.
 *
 * Records collect in a buffer that the caller's thread writes out before it
 * would pass SUMMARY_FLUSH_BYTES, and a background thread every
 * SUMMARY_FLUSH_MS.
 *
 * A writer opened with a handle also sends its scalars to the coordinator
 * as metrics (loom_metric), so that the dashboard charts them: at most one
 * per tag every LOOM_SUMMARY_METRIC_MS, as a training loop may write a
 * scalar every few microseconds. A value that comes sooner is kept as the
 * tag's pending one, replaced by any later one, and sent once the interval
 * has passed: by the next scalar of that tag, the background thread, a
 * flush, or at the latest on close, so the last value of every tag always
 * arrives. Sends happen with mu held (the lock order is the writer's mu,
 * then the handle's), so a tag's values arrive in the order written. */
#include "core/core.h"
#include "core/bytes.h"
#include "lib/lib.h"
#include "core/crc32c.h"
#include "fs/fs.h"
#include "fs/tmpdir.h"
#include "summary/pb.h"
#include "loom/summary.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SUMMARY_FLUSH_BYTES (64u << 10)
#define SUMMARY_FLUSH_MS 2000
/* The largest record (a text at its cap), and what the buffer may hold:
 * less than SUMMARY_FLUSH_BYTES, or one record. */
#define SUMMARY_MAX_RECORD (LOOM_SUMMARY_MAX_TEXT + (64u << 10))
#define SUMMARY_MAX_PENDING (SUMMARY_FLUSH_BYTES + SUMMARY_MAX_RECORD + 64)
/* Tags a writer forwards to the coordinator; scalars of further tags stay
 * in the file only. */
#define SUMMARY_FWD_MAX_TAGS 256

/* One tag's forwarding: when its last value went, and the newest value
 * not sent yet. */
typedef struct {
  char tag[LOOM_METRIC_MAX_TAG + 1];
  uint64_t sent_ms;
  bool pending;
  int64_t step;
  double value;
} sum_fwd;

struct loom_summary {
  loom_t *l; /* not owned; may be NULL */
  int fd;
  char path[PATH_MAX];
  /* an hdfs:// directory: the file is written in a local directory of the
   * writer's own (path) and copied whole to remote_path (atomically: a
   * temporary name renamed over it) every LOOM_SUMMARY_UPLOAD_MS and at
   * close */
  char *remote_path;
  char local_dir[PATH_MAX]; /* "" when none */
  int local_lock;           /* its lock (fs/tmpdir.h), -1 when none */
  uint64_t written;         /* bytes in the local file */
  uint64_t uploaded;        /* of them, on HDFS */
  uint64_t upload_ms;       /* when last uploaded */
  pthread_mutex_t up_mu;    /* one upload at a time */
  pthread_mutex_t mu;       /* guards everything below */
  pthread_cond_t cv;        /* wakes the flusher: closing */
  pthread_t flusher;
  bool flusher_started, closing;
  loom__buf pending; /* framed records not yet written */
  int bg_err;        /* an error the flusher met, for the next call */
  char errmsg[512];
  /* forwarding scalars as metrics: only with l, and every_ms >= 0 */
  long long fwd_every_ms;
  sum_fwd *fwd; /* SUMMARY_FWD_MAX_TAGS of them, allocated on first use */
  size_t nfwd;
};

/* Sets the writer's (and the handle's) detail text; returns code. Called
 * with mu held, or before the writer is shared. */
static int sum_fail(loom_summary_t *s, int code, const char *fmt, ...) LOOM__PRINTF(3, 4);
static int sum_fail(loom_summary_t *s, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
  va_end(ap);
  if (s->l) loom__fail(s->l, code, "%s", s->errmsg);
  return code;
}

/* ---- scalars to the dashboard ------------------------------------------ */

/* Sends e's pending value. The coordinator being gone is no error of the
 * summary's (the file has the value): the result is ignored. Called with mu
 * held. */
static void fwd_send_locked(loom_summary_t *s, sum_fwd *e, uint64_t now) {
  (void)loom_metric(s->l, e->tag, e->step, e->value);
  e->sent_ms = now;
  e->pending = false;
}

/* Sends every pending value whose interval has passed (all of them when
 * all). Called with mu held. */
static void fwd_drain_locked(loom_summary_t *s, bool all) {
  uint64_t now = loom__now_ms();
  for (size_t i = 0; i < s->nfwd; i++) {
    sum_fwd *e = &s->fwd[i];
    if (e->pending && (all || now - e->sent_ms >= (uint64_t)s->fwd_every_ms))
      fwd_send_locked(s, e, now);
  }
}

/* The scalar (tag, step, value) for the dashboard: sent now if its tag's
 * interval has passed, else kept as the tag's pending value. Tags longer
 * than a metric's, and tags past the first SUMMARY_FWD_MAX_TAGS, are not
 * forwarded. Called with mu held. */
static void fwd_scalar_locked(loom_summary_t *s, const char *tag, int64_t step, double value) {
  size_t n = strlen(tag);
  if (n > LOOM_METRIC_MAX_TAG || !isfinite(value)) return;
  sum_fwd *e = NULL;
  for (size_t i = 0; i < s->nfwd && !e; i++)
    if (!memcmp(s->fwd[i].tag, tag, n + 1)) e = &s->fwd[i];
  uint64_t now = loom__now_ms();
  if (!e) {
    if (!s->fwd && !(s->fwd = calloc(SUMMARY_FWD_MAX_TAGS, sizeof *s->fwd))) return;
    if (s->nfwd == SUMMARY_FWD_MAX_TAGS) return;
    e = &s->fwd[s->nfwd++];
    memcpy(e->tag, tag, n + 1);
    e->sent_ms = now - (uint64_t)s->fwd_every_ms; /* the first value goes at once */
  }
  e->step = step;
  e->value = value;
  e->pending = true;
  if (now - e->sent_ms >= (uint64_t)s->fwd_every_ms) fwd_send_locked(s, e, now);
}

/* Writes the whole buffer out. A short write keeps what is left for the
 * next attempt. Called with mu held. */
static int sum_flush_locked(loom_summary_t *s) {
  while (s->pending.len > 0) {
    ssize_t w = write(s->fd, s->pending.p, s->pending.len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return sum_fail(s, LOOM_EIO, "cannot write TensorBoard events to %s: %s", s->path,
                      w < 0 ? strerror(errno) : "no progress");
    loom__buf_consume(&s->pending, (size_t)w);
    s->written += (uint64_t)w;
  }
  return 0;
}

/* Copies the local file, as far as it is written, to HDFS when it grew
 * (force: also when not due yet). Called without mu. */
static int sum_upload(loom_summary_t *s, bool force) {
  if (!s->remote_path) return 0;
  pthread_mutex_lock(&s->up_mu);
  pthread_mutex_lock(&s->mu);
  uint64_t len = s->written, now = loom__now_ms();
  bool due = len > s->uploaded &&
             (force || now - s->upload_ms >= (uint64_t)loom__tun(LOOM_TUN_SUMMARY_UPLOAD_MS));
  pthread_mutex_unlock(&s->mu);
  int rc = 0;
  if (due) {
    char why[1024];
    rc = loom__fs_put_n(s->path, len, s->remote_path, true, why, sizeof why);
    pthread_mutex_lock(&s->mu);
    if (rc < 0)
      rc = sum_fail(s, rc, "cannot copy TensorBoard events to %s: %s", s->remote_path, why);
    else
      s->uploaded = len;
    s->upload_ms = now;
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&s->up_mu);
  return rc;
}

static void *sum_flusher(void *arg) {
  loom_summary_t *s = arg;
  pthread_mutex_lock(&s->mu);
  while (!s->closing) {
    struct timespec ts = loom__deadline(CLOCK_MONOTONIC, SUMMARY_FLUSH_MS);
    int rc = 0;
    while (!s->closing && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    if (s->closing) break;
    int frc = sum_flush_locked(s);
    if (frc < 0 && !s->bg_err) s->bg_err = frc;
    fwd_drain_locked(s, false);
    if (s->remote_path) {
      pthread_mutex_unlock(&s->mu);
      int urc = sum_upload(s, false);
      pthread_mutex_lock(&s->mu);
      if (urc < 0 && !s->bg_err) s->bg_err = urc;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* The error the flusher met since the last call, once. Called with mu
 * held. */
static int sum_take_bg_err(loom_summary_t *s) {
  int rc = s->bg_err;
  s->bg_err = 0;
  return rc;
}

/* Packs e's Event, frames it as one record and queues it, first writing
 * out what is queued if the record would take the buffer past
 * SUMMARY_FLUSH_BYTES. On an error nothing was queued. Called with mu
 * held. */
static int sum_append_locked(loom_summary_t *s, const loom__sum_event *e) {
  uint8_t *data;
  size_t len;
  int rc = loom__sum_pack(e, SUMMARY_MAX_RECORD, &data, &len);
  if (rc == LOOM_ERANGE)
    return sum_fail(s, LOOM_ERANGE, "summary record over %u bytes", (unsigned)SUMMARY_MAX_RECORD);
  if (rc < 0) return sum_fail(s, rc, "cannot encode summary record");
  if ((rc = sum_take_bg_err(s)) < 0) goto out;
  uint8_t head[12], tail[4];
  loom__put_le64(head, (uint64_t)len);
  uint32_t c = loom__crc32c_mask(loom__crc32c(0, head, 8));
  loom__put_le32(head + 8, c);
  c = loom__crc32c_mask(loom__crc32c(0, data, len));
  loom__put_le32(tail, c);
  size_t need = sizeof head + len + sizeof tail;
  if (s->pending.len > 0 && s->pending.len + need > SUMMARY_FLUSH_BYTES &&
      (rc = sum_flush_locked(s)) < 0)
    goto out;
  size_t mark = s->pending.len;
  if ((rc = loom__buf_add(&s->pending, head, sizeof head)) < 0 ||
      (rc = loom__buf_add(&s->pending, data, len)) < 0 ||
      (rc = loom__buf_add(&s->pending, tail, sizeof tail)) < 0) {
    s->pending.len = mark; /* never leave half a record queued */
    rc = sum_fail(s, rc, "cannot queue a summary record: %s", loom_strerror(rc));
  }
out:
  free(data);
  return rc;
}

/* Queues e (an Event of one Summary.Value). A scalar's tag and value
 * (fwd_tag not NULL) also go to the dashboard once it is queued. */
static int sum_write_value(loom_summary_t *s, int64_t step, const loom__sum_event *e,
                           const char *fwd_tag, double fwd_value) {
  pthread_mutex_lock(&s->mu);
  int rc = sum_append_locked(s, e);
  if (rc == 0 && fwd_tag && s->fwd_every_ms >= 0) fwd_scalar_locked(s, fwd_tag, step, fwd_value);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static int sum_check_tag(loom_summary_t *s, const char *tag) {
  size_t n = tag ? strlen(tag) : 0;
  if (n == 0 || n > LOOM_SUMMARY_MAX_TAG) {
    pthread_mutex_lock(&s->mu);
    int rc = sum_fail(s, LOOM_EINVAL, "summary tag must be 1..%d bytes, got %zu",
                      LOOM_SUMMARY_MAX_TAG, n);
    pthread_mutex_unlock(&s->mu);
    return rc;
  }
  return 0;
}

/* ---- opening --------------------------------------------------------- */

/* The task's run directory, $LOOM_JOB_DIR/tensorboard/<role>-<index>, into
 * out. */
static int sum_default_dir(loom_t *l, char *out, size_t len) {
  const char *job_dir = getenv("LOOM_JOB_DIR"), *base = loom__tun_str(LOOM_TUN_SUMMARY_DIR);
  const char *role = l ? loom_role(l) : getenv("LOOM_ROLE");
  long long index = l ? loom_index(l) : -1;
  const char *ienv = getenv("LOOM_INDEX");
  if (!l && (!ienv || loom__parse_int(ienv, 0, INT_MAX, &index) < 0)) index = -1;
  if (!role || !*role || index < 0) return LOOM_ENOENV;
  if (base && *base) { /* the spec's choice, e.g. hdfs:///user/me/runs/job */
    if ((size_t)snprintf(out, len, "%s/%s-%lld", base, role, index) >= len) return LOOM_ERANGE;
    return 0;
  }
  if (!job_dir || !*job_dir) return LOOM_ENOENV;
  if ((size_t)snprintf(out, len, "%s/tensorboard/%s-%lld", job_dir, role, index) >= len)
    return LOOM_ERANGE;
  return 0;
}

/* Creates the event file in dir: events.out.tfevents.<time>.<host>, or,
 * when another writer took that name this second, the same with .<pid> and
 * then .<pid>.<n>. */
static int sum_create_file(loom_summary_t *s, const char *dir) {
  char host[256];
  if (gethostname(host, sizeof host) < 0 || !host[0]) loom__strlcpy(host, "localhost", sizeof host);
  host[sizeof host - 1] = 0;
  for (char *p = host; *p; p++)
    if (*p == '/') *p = '_';
  long long now = (long long)time(NULL);
  for (int attempt = 0; attempt < 100; attempt++) {
    int n;
    if (attempt == 0)
      n = snprintf(s->path, sizeof s->path, "%s/events.out.tfevents.%lld.%s", dir, now, host);
    else if (attempt == 1)
      n = snprintf(s->path, sizeof s->path, "%s/events.out.tfevents.%lld.%s.%d", dir, now, host,
                   (int)getpid());
    else
      n = snprintf(s->path, sizeof s->path, "%s/events.out.tfevents.%lld.%s.%d.%d", dir, now, host,
                   (int)getpid(), attempt);
    if (n < 0 || (size_t)n >= sizeof s->path)
      return sum_fail(s, LOOM_ERANGE, "summary directory path too long: %s", dir);
    s->fd = open(s->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (s->fd >= 0) return 0;
    if (errno != EEXIST)
      return sum_fail(s, LOOM_EIO, "cannot create TensorBoard event file %s: %s", s->path,
                      strerror(errno));
  }
  return sum_fail(s, LOOM_EIO, "cannot find a free event file name in %s", dir);
}

static void sum_free(loom_summary_t *s) {
  if (s->fd >= 0) close(s->fd);
  loom__tmpdir_remove(s->local_dir, s->local_lock);
  free(s->remote_path);
  pthread_mutex_destroy(&s->up_mu);
  loom__buf_free(&s->pending);
  free(s->fwd);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

int loom_summary_open(loom_t *l, const char *dir, loom_summary_t **out) {
  if (!out) return LOOM_EINVAL;
  *out = NULL;
  char def[PATH_MAX];
  if (!dir) {
    int rc = sum_default_dir(l, def, sizeof def);
    if (rc == LOOM_ENOENV)
      return loom__fail(l, rc,
                        "no summary directory given and not inside a loom "
                        "job (LOOM_JOB_DIR, LOOM_ROLE, LOOM_INDEX unset)");
    if (rc < 0) return loom__fail(l, rc, "summary directory path too long");
    dir = def;
  }
  if (!*dir) return loom__fail(l, LOOM_EINVAL, "summary directory is empty");

  loom_summary_t *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ENOMEM;
  s->l = l;
  s->fd = -1;
  s->local_lock = -1;
  s->fwd_every_ms = l ? loom__tun(LOOM_TUN_SUMMARY_METRIC_MS) : -1;
  loom__buf_init(&s->pending, SUMMARY_MAX_PENDING);
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->up_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cv, &ca);
  pthread_condattr_destroy(&ca);

  int rc = 0;
  const char *local = dir;
  if (loom__fs_remote(dir)) {
    char why[1024];
    /* from here sum_free removes local_dir */
    if ((rc = loom__tmpdir_make("summary", s->local_dir, sizeof s->local_dir, &s->local_lock, why,
                                sizeof why)) < 0) {
      rc = sum_fail(s, rc, "cannot make a local directory for the events of %s: %s", dir, why);
      goto fail;
    }
    if ((rc = loom__fs_mkdirs(dir, why, sizeof why)) < 0) {
      rc = sum_fail(s, rc, "cannot create summary directory %s: %s", dir, why);
      goto fail;
    }
    local = s->local_dir;
  } else if ((rc = loom__mkdir_p(dir, 0755)) < 0) {
    rc = sum_fail(s, rc, "cannot create summary directory %s: %s", dir, strerror(errno));
    goto fail;
  }
  if ((rc = sum_create_file(s, local)) < 0) goto fail;
  if (local != dir) {
    const char *b = strrchr(s->path, '/');
    if (!(s->remote_path = loom__asprintf("%s/%s", dir, b ? b + 1 : s->path))) {
      rc = LOOM_ENOMEM;
      goto fail;
    }
  }

  /* The first record says which format follows; TensorBoard wants it. */
  loom__sum_event ev;
  loom__sum_event_version(&ev, loom__wall());
  rc = sum_append_locked(s, &ev);
  if (rc == 0) rc = sum_flush_locked(s);
  if (rc == 0) rc = sum_upload(s, true); /* it is there from the start */
  if (rc < 0) goto fail;

  if (pthread_create(&s->flusher, NULL, sum_flusher, s) != 0) {
    rc = sum_fail(s, LOOM_EIO, "cannot start the summary flush thread");
    goto fail;
  }
  s->flusher_started = true;
  *out = s;
  return 0;
fail:
  if (s->fd >= 0) unlink(s->path);
  if (!l) loom__log(LOOM_LOG_ERROR, "summary", "%s", s->errmsg);
  sum_free(s);
  return rc;
}

/* ---- values ----------------------------------------------------------- */

int loom_summary_scalar(loom_summary_t *s, const char *tag, int64_t step, double value) {
  if (!s) return LOOM_EINVAL;
  int rc = sum_check_tag(s, tag);
  if (rc < 0) return rc;
  loom__sum_event ev;
  loom__sum_event_scalar(&ev, loom__wall(), step, tag, (float)value);
  /* the dashboard gets the value TensorBoard shows: the float */
  return sum_write_value(s, step, &ev, tag, (double)(float)value);
}

/* TensorFlow's default histogram bucket limits (tensorflow/core/lib/
 * histogram/histogram.cc): -DBL_MAX, -1e20.., ..-1e-12, 0, 1e-12..,
 * ..1e20, DBL_MAX, where consecutive limits differ by a factor of 1.1. */
#define HIST_MAX_LIMITS 1600
static double hist_limits[HIST_MAX_LIMITS];
static size_t hist_nlimits;
static pthread_once_t hist_once = PTHREAD_ONCE_INIT;

static void hist_init(void) {
  double pos[HIST_MAX_LIMITS / 2];
  size_t n = 0;
  for (double v = 1e-12; v < 1e20; v *= 1.1) pos[n++] = v;
  pos[n++] = DBL_MAX;
  size_t k = 0;
  for (size_t i = n; i-- > 0;) hist_limits[k++] = -pos[i];
  hist_limits[k++] = 0.0;
  for (size_t i = 0; i < n; i++) hist_limits[k++] = pos[i];
  hist_nlimits = k;
}

/* The bucket of v: the first whose limit is above v, as std::upper_bound in
 * TensorFlow's Histogram::Add. v is finite, so below the last limit. */
static size_t hist_bucket(double v) {
  size_t lo = 0, hi = hist_nlimits;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (hist_limits[mid] > v)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

int loom_summary_histogram(loom_summary_t *s, const char *tag, int64_t step, const float *values,
                           size_t n) {
  if (!s) return LOOM_EINVAL;
  int rc = sum_check_tag(s, tag);
  if (rc < 0) return rc;
  if (n > 0 && !values) {
    pthread_mutex_lock(&s->mu);
    rc = sum_fail(s, LOOM_EINVAL, "histogram '%s': %zu values at NULL", tag, n);
    pthread_mutex_unlock(&s->mu);
    return rc;
  }
  pthread_once(&hist_once, hist_init);
  double *counts = calloc(hist_nlimits, sizeof *counts);
  double *out_limits = malloc(hist_nlimits * sizeof *out_limits);
  double *out_counts = malloc(hist_nlimits * sizeof *out_counts);
  if (!counts || !out_limits || !out_counts) {
    rc = LOOM_ENOMEM;
    goto out;
  }
  double num = 0, sum = 0, sum_sq = 0, lo = 0, hi = 0;
  for (size_t i = 0; i < n; i++) {
    double v = (double)values[i];
    if (!isfinite(v)) continue;
    if (num == 0 || v < lo) lo = v;
    if (num == 0 || v > hi) hi = v;
    num += 1;
    sum += v;
    sum_sq += v * v;
    counts[hist_bucket(v)] += 1;
  }
  /* Emit each non-empty bucket; a run of empty ones becomes one empty
   * bucket ending at the run's last limit (TensorFlow's EncodeToProto). */
  size_t k = 0;
  for (size_t i = 0; i < hist_nlimits;) {
    double end = hist_limits[i], count = counts[i];
    i++;
    if (count <= 0) {
      while (i < hist_nlimits && counts[i] <= 0) end = hist_limits[i++];
    }
    out_limits[k] = end;
    out_counts[k] = count;
    k++;
  }

  loom__sum_event ev;
  loom__sum_event_histogram(&ev, loom__wall(), step, tag, lo, hi, num, sum, sum_sq, out_limits,
                            out_counts, k);
  rc = sum_write_value(s, step, &ev, NULL, 0);
out:
  free(counts);
  free(out_limits);
  free(out_counts);
  return rc;
}

int loom_summary_text(loom_summary_t *s, const char *tag, int64_t step, const char *text) {
  if (!s) return LOOM_EINVAL;
  int rc = sum_check_tag(s, tag);
  if (rc < 0) return rc;
  size_t len = text ? strlen(text) : 0;
  if (!text || len > LOOM_SUMMARY_MAX_TEXT) {
    pthread_mutex_lock(&s->mu);
    rc = sum_fail(s, text ? LOOM_ERANGE : LOOM_EINVAL,
                  "text summary '%s' must be at most %u bytes, got %zu", tag, LOOM_SUMMARY_MAX_TEXT,
                  len);
    pthread_mutex_unlock(&s->mu);
    return rc;
  }
  loom__sum_event ev;
  loom__sum_event_text(&ev, loom__wall(), step, tag, text, len);
  return sum_write_value(s, step, &ev, NULL, 0);
}

/* ---- flushing and closing --------------------------------------------- */

int loom_summary_flush(loom_summary_t *s) {
  if (!s) return LOOM_EINVAL;
  pthread_mutex_lock(&s->mu);
  int rc = sum_take_bg_err(s);
  int frc = sum_flush_locked(s);
  fwd_drain_locked(s, false);
  pthread_mutex_unlock(&s->mu);
  return rc < 0 ? rc : frc;
}

int loom_summary_close(loom_summary_t *s) {
  if (!s) return LOOM_EINVAL;
  pthread_mutex_lock(&s->mu);
  s->closing = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (s->flusher_started) pthread_join(s->flusher, NULL);
  pthread_mutex_lock(&s->mu);
  fwd_drain_locked(s, true); /* every tag's last value, whatever its interval */
  pthread_mutex_unlock(&s->mu);
  int rc = sum_take_bg_err(s);
  int frc = sum_flush_locked(s);
  if (rc == 0) rc = frc;
  if (close(s->fd) < 0 && rc == 0)
    rc = sum_fail(s, LOOM_EIO, "cannot close %s: %s", s->path, strerror(errno));
  s->fd = -1;
  int urc = sum_upload(s, true);
  if (rc == 0) rc = urc;
  if (rc < 0 && !s->l) loom__log(LOOM_LOG_ERROR, "summary", "%s", s->errmsg);
  sum_free(s);
  return rc;
}

const char *loom_summary_path(const loom_summary_t *s) {
  return !s ? "" : s->remote_path ? s->remote_path : s->path;
}

const char *loom_summary_errmsg(const loom_summary_t *s) { return s ? s->errmsg : ""; }
