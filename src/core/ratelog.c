/* ratelog.c: rate-limited warnings with counts (see ratelog.h). */
#include "core/ratelog.h"

#include <stdio.h>

static void ratelog_report(loom__ratelog *rl, const char *component, const char *what) {
  if (rl->suppressed)
    loom__log(LOOM_LOG_WARN, component, "%u more %s from %s in the last %d s", rl->suppressed, what,
              rl->last_from[0] ? rl->last_from : "?", LOOM__RATELOG_WINDOW_MS / 1000);
  rl->suppressed = 0;
}

static void ratelog_vwarn(loom__ratelog *rl, uint64_t now, const char *component, const char *what,
                          const char *from, const char *fmt, va_list ap) {
  /* window_start_ms holds the start + 1, so that 0 is a fresh limiter */
  if (!rl->window_start_ms || now + 1 - rl->window_start_ms >= LOOM__RATELOG_WINDOW_MS) {
    ratelog_report(rl, component, what);
    rl->window_start_ms = now + 1;
    rl->emitted = 0;
  }
  if (rl->emitted >= LOOM__RATELOG_BURST) {
    rl->suppressed++;
    snprintf(rl->last_from, sizeof rl->last_from, "%s", from ? from : "?");
    return;
  }
  rl->emitted++;
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  loom__log(LOOM_LOG_WARN, component, "%s", msg);
}

void loom__ratelog_warn(loom__ratelog *rl, const char *component, const char *what,
                        const char *from, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ratelog_vwarn(rl, loom__now_ms(), component, what, from, fmt, ap);
  va_end(ap);
}

void loom__ratelog_warn_at(loom__ratelog *rl, uint64_t now_ms, const char *component,
                           const char *what, const char *from, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ratelog_vwarn(rl, now_ms, component, what, from, fmt, ap);
  va_end(ap);
}

void loom__ratelog_flush(loom__ratelog *rl, const char *component, const char *what) {
  ratelog_report(rl, component, what);
  rl->window_start_ms = 0;
  rl->emitted = 0;
}

void loom__ratelog_tick_at(loom__ratelog *rl, uint64_t now_ms, const char *component,
                           const char *what) {
  if (rl->window_start_ms && now_ms + 1 - rl->window_start_ms >= LOOM__RATELOG_WINDOW_MS)
    loom__ratelog_flush(rl, component, what);
}

void loom__ratelog_tick(loom__ratelog *rl, const char *component, const char *what) {
  loom__ratelog_tick_at(rl, loom__now_ms(), component, what);
}
