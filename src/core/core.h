/* core.h: the small things every part of loom uses: errors, logging, time,
 * strings and growable buffers with caps, files, tunables. No I/O policy
 * lives here: callers decide what to do with what these return. */
#ifndef LOOM_CORE_H
#define LOOM_CORE_H

#include "loom.h"
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define LOOM__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define LOOM__PRINTF(f, a) __attribute__((format(printf, f, a)))

/* ---- logging: loom__log(LOOM_LOG_DEBUG, "coord", "...") --------------- */
enum { LOOM_LOG_ERROR, LOOM_LOG_WARN, LOOM_LOG_INFO, LOOM_LOG_DEBUG };
typedef void (*loom__log_sink)(int level, const char *subsys, const char *msg, void *arg);
/* Levels and subsystems come from LOOM_LOG ("debug", "info",
 * "debug:coord,agent"); default "warn". The default sink writes to stderr. */
void loom__log_init(void);
void loom__log_set_sink(loom__log_sink sink, void *arg);
bool loom__log_on(int level, const char *subsys);
void loom__log(int level, const char *subsys, const char *fmt, ...) LOOM__PRINTF(3, 4);

/* ---- time ------------------------------------------------------------ */
uint64_t loom__now_ms(void); /* monotonic */
uint64_t loom__now_ns(void); /* monotonic */
double loom__wall(void);     /* seconds since the epoch */
/* ms milliseconds from now on clock clk: the absolute deadline that
 * pthread_cond_timedwait wants (CLOCK_REALTIME, or the clock the condition
 * variable was made with). */
struct timespec loom__deadline(clockid_t clk, uint64_t ms);
/* "2026-11-22T13:36:01.123Z" into buf (at least 32 bytes). */
void loom__wall_iso(double t, char *buf, size_t len);

/* ---- strings ---------------------------------------------------------- */
char *loom__strdup(const char *s); /* NULL on NULL or no memory */
char *loom__asprintf(const char *fmt, ...) LOOM__PRINTF(1, 2);
size_t loom__strlcpy(char *dst, const char *src, size_t len);
int loom__levenshtein(const char *a, const char *b);
/* "512", "2GiB", "1.5 MiB", "10KiB", "3GB" (decimal). Returns 0 or
 * LOOM_EINVAL / LOOM_ERANGE. */
int loom__parse_size(const char *s, uint64_t *out);
/* Strict integer parse of the whole string. */
int loom__parse_int(const char *s, long long min, long long max, long long *out);
void loom__hex(const unsigned char *in, size_t n, char *out /* 2n+1 */);

/* ---- a growable buffer that never grows past its cap ------------------ */
typedef struct {
  char *p;
  size_t len, cap, max;
} loom__buf;
void loom__buf_init(loom__buf *b, size_t max);
int loom__buf_add(loom__buf *b, const void *data, size_t n);
int loom__buf_printf(loom__buf *b, const char *fmt, ...) LOOM__PRINTF(2, 3);
void loom__buf_consume(loom__buf *b, size_t n); /* drop the first n bytes */
void loom__buf_free(loom__buf *b);

/* ---- files ------------------------------------------------------------ */
int loom__mkdir_p(const char *path, int mode);
/* Writes data to path atomically: temp file, rename. With durable, also
 * fsync the file before the rename and the directory after it, so the new
 * content survives a machine crash; without, readers still never see a
 * partial file. */
int loom__write_atomic(const char *path, const void *data, size_t len, int mode, bool durable);
/* Opens path for writing (append, or truncated) readable by its owner only
 * (0600, also when it exists already): what job directories hold may name
 * their secrets. NULL with errno set on failure. */
FILE *loom__fopen_private(const char *path, bool append);
/* Reads a whole file (at most max bytes) into a malloc'ed NUL-terminated
 * buffer the caller frees. */
int loom__read_file(const char *path, size_t max, char **out, size_t *len);
/* The state letter of process pid from /proc/<pid>/stat ('R', 'S', 'T',
 * 'Z', ...), or 0 when it cannot be read (no such process). */
char loom__proc_state(int pid);
/* What /proc/<pid>/stat says of a process: its state letter, parent,
 * process group and session. */
typedef struct {
  char state;
  int ppid, pgrp, sid;
} loom__pstat;
int loom__proc_stat(int pid, loom__pstat *out); /* -1: no such process */
/* Calls fn for every process in /proc (zombies included: see st->state). */
void loom__proc_each(void (*fn)(int pid, const loom__pstat *st, void *arg), void *arg);

/* ---- tunables: one table, one accessor (tun.h) ---------------------- */
#include "core/tun.h"

#endif
