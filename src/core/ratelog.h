/* ratelog.h: a warning that cannot flood the log. A server that refuses
 * connections logs the first few of each 10 s window in full and counts the
 * rest; the count comes out as one line ("312 more refused connections from
 * 127.0.0.1 in the last 10 s") when the next window begins or on a flush.
 * One limiter per kind of event; the caller owns it (zero it to start) and
 * serialises calls on it. */
#ifndef LOOM_RATELOG_H
#define LOOM_RATELOG_H

#include "core/core.h"

#define LOOM__RATELOG_WINDOW_MS 10000
#define LOOM__RATELOG_BURST 5

typedef struct {
  uint64_t window_start_ms;
  unsigned emitted, suppressed;
  char last_from[64];
} loom__ratelog;

/* Logs through loom__log(LOOM_LOG_WARN, component, ...) at most 5 messages
 * per 10 s window for this limiter; past that it counts; the first call
 * after the window ends (or loom__ratelog_flush) first logs "<N> more
 * <what> from <last_from> in the last 10 s". from (NULL: "?") names the
 * peer; what is plural ("refused connections"). */
void loom__ratelog_warn(loom__ratelog *rl, const char *component, const char *what,
                        const char *from, const char *fmt, ...) LOOM__PRINTF(5, 6);
/* Logs the pending count, if any, and starts a new window. Call it at
 * shutdown; loom__ratelog_tick is for a periodic timer. */
void loom__ratelog_flush(loom__ratelog *rl, const char *component, const char *what);
/* loom__ratelog_flush once the window has ended, else nothing: lets a
 * server's timer report a flood that stopped, at most once a window. */
void loom__ratelog_tick(loom__ratelog *rl, const char *component, const char *what);

/* The same with the time given (loom__now_ms() milliseconds): for tests. */
void loom__ratelog_warn_at(loom__ratelog *rl, uint64_t now_ms, const char *component,
                           const char *what, const char *from, const char *fmt, ...)
    LOOM__PRINTF(6, 7);
void loom__ratelog_tick_at(loom__ratelog *rl, uint64_t now_ms, const char *component,
                           const char *what);

#endif
