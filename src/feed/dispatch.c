/* dispatch.c: placeholder until the data feed lands: a spec with `feed:`
 * is refused with a clear message. */
#include "feed/dispatch.h"

#include <stdio.h>

int feed_dispatch_create(const json_t *feed, const char *job_dir, const char *spec_dir,
                         feed_reply_fn reply, feed_dispatch **out, char *err, size_t errlen) {
  snprintf(err, errlen, "the data feed (feed:) is not available in this build");
  *out = NULL;
  return LOOM_ENOTSUP;
}
void feed_dispatch_destroy(feed_dispatch *d) {}
int feed_dispatch_frame(feed_dispatch *d, void *conn, const char *task, const wire_frame *f) {
  return LOOM_EPROTO;
}
void feed_dispatch_task_gone(feed_dispatch *d, const char *task) {}
void feed_dispatch_conn_gone(feed_dispatch *d, void *conn) {}
void feed_dispatch_tick(feed_dispatch *d, uint64_t now_ms) {}
void feed_dispatch_new_attempt(feed_dispatch *d) {}
json_t *feed_dispatch_status(const feed_dispatch *d) { return json_object(); }
