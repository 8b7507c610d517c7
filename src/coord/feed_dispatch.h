/* feed_dispatch.h: the coordinator's side of the data feed: it makes splits of
 * the spec's `feed:` input, leases each to whichever task asks, takes it
 * back when the task finishes it (committing the split's output), and
 * leases it again when its task is gone or its lease expires.
 *
 * This is the contract between the coordinator (src/coord/coord.c, which
 * owns the loop and the connections) and the feed (src/feed/). The
 * coordinator calls these on its loop thread only; none of them blocks but
 * for the file-system calls of committing and taking back a split's
 * output (a rename, an unlink: on HDFS one NameNode call each,
 * milliseconds, bounded by HDFS_TIMEOUT_MS). */
#ifndef LOOM_COORD_FEED_DISPATCH_H
#define LOOM_COORD_FEED_DISPATCH_H

#include "wire/wire_msg.h"

typedef struct feed_dispatch feed_dispatch;

/* Sends a reply on the connection the frame came from. Takes ownership of
 * extra (may be NULL). Safe to call later (after a wait), as long as the
 * connection has not been reported gone. */
typedef void (*feed_reply_fn)(void *conn, json_int_t id, int rc, json_t *extra, const void *blob,
                              size_t len);

/* Makes the dispatcher for feed (the spec's validated `feed:` object, see
 * spec.c) of the job in job_dir; spec_dir resolves relative globs. On
 * error returns LOOM_ESPEC or LOOM_EIO with a message for people in err. */
int feed_dispatch_create(const json_t *feed, const char *job_dir, const char *spec_dir,
                         feed_reply_fn reply, feed_dispatch **out, char *err, size_t errlen);
void feed_dispatch_destroy(feed_dispatch *d);
/* Where each task runs, for locality: host_of(ctx, task) gives the task's
 * host (an address, as HDFS names its DataNodes) or NULL. A task asking for
 * splits gets, among the next LOCAL_WINDOW queued, one whose first block
 * has a replica on its host when there is one. */
void feed_dispatch_set_hosts(feed_dispatch *d, const char *(*host_of)(void *ctx, const char *task),
                             void *ctx);

/* One of the typed wire_feed_* requests (wire/wire_msg.h, decoded and
 * checked by the connection's wire_msg_decode) from the libloom client of
 * `task` on connection conn. Returns 0, or LOOM_EPROTO for a message that
 * is not a feed request (the coordinator then closes the connection). */
int feed_dispatch_msg(feed_dispatch *d, void *conn, const char *task, const wire_msg *m);
/* The task's process failed or the attempt ended: its leases go back. */
void feed_dispatch_task_gone(feed_dispatch *d, const char *task);
/* The connection closed: forget replies owed to it. */
void feed_dispatch_conn_gone(feed_dispatch *d, void *conn);
/* Called about every 250 ms: expire leases. */
void feed_dispatch_tick(feed_dispatch *d, uint64_t now_ms);
/* A new whole-job attempt starts: leases and uncommitted work are reset;
 * committed splits stay committed. */
void feed_dispatch_new_attempt(feed_dispatch *d);
/* Progress for state.json and status: {"epoch":..,"splits":..,"done":..}. */
json_t *feed_dispatch_status(const feed_dispatch *d);

#endif
