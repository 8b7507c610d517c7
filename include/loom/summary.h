/* loom/summary.h: TensorBoard event files written from C: scalars,
 * histograms and text, which `tensorboard --logdir $LOOM_JOB_DIR/tensorboard`
 * shows as one run per task.
 *
 * A writer owns one file, events.out.tfevents.<unix time>.<hostname>, in
 * its directory: by default $LOOM_JOB_DIR/tensorboard/<role>-<index>/ (the
 * task's run), or any directory the caller names. The file is TensorFlow's
 * record format (length, masked CRC-32C of the length, an Event protocol
 * buffer, masked CRC-32C of it), beginning with the "brain.Event:2" version
 * record, exactly as TensorBoard reads it.
 *
 * Records are buffered and written out before the buffer passes 64 KiB, every
 * 2 seconds by a background thread, on loom_summary_flush() and on
 * loom_summary_close().
 * Every call returns 0 or a negative LOOM_E* code; an error writing the file
 * is returned by the call that meets it, or (met in the background) by the
 * next call, and a value call that returns an error has not queued its
 * value. loom_summary_errmsg() says what went wrong. Calls on one writer
 * are thread-safe.
 *
 * A writer opened with a handle also sends its scalars to the job's
 * coordinator (loom_metric), so loom's dashboard charts them live, per
 * task: per tag at most one every LOOM_SUMMARY_METRIC_MS (200 ms; 0: all
 * of them, -1: none), the newest value in between sent once the interval
 * has passed, and every tag's last value by loom_summary_close() at the
 * latest. Tags longer than LOOM_METRIC_MAX_TAG, and tags past a writer's
 * 256th, stay in the file only. The file always has every value. */
#ifndef LOOM_SUMMARY_H
#define LOOM_SUMMARY_H

#include "../loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_summary loom_summary_t;

/* Tags are 1..LOOM_SUMMARY_MAX_TAG bytes ("loss", "train/accuracy": a '/'
 * groups charts in TensorBoard); text is at most LOOM_SUMMARY_MAX_TEXT
 * bytes. */
#define LOOM_SUMMARY_MAX_TAG 1024
#define LOOM_SUMMARY_MAX_TEXT (4u << 20)

/* Creates a new event file and on success sets *s to a writer the caller
 * owns and releases with loom_summary_close(). dir NULL means this task's
 * run, $LOOM_JOB_DIR/tensorboard/<role>-<index>/ (LOOM_ENOENV outside a
 * job); another dir is created if missing. l may be NULL; when given it
 * also names the task, receives the error detail (loom_errmsg) and carries
 * the scalars to the dashboard, and must outlive the writer (close the
 * writer before loom_finish). */
LOOM_EXPORT int loom_summary_open(loom_t *l, const char *dir, loom_summary_t **s);

/* A scalar: one point of the chart named tag at step. TensorBoard stores it
 * as a 32-bit float (simple_value), so value is rounded to float. */
LOOM_EXPORT int loom_summary_scalar(loom_summary_t *s, const char *tag, int64_t step, double value);
/* A histogram of n values (values may be NULL when n is 0), bucketed as
 * TensorFlow does: exponential buckets (limits +-1e-12 * 1.1^k up to 1e20,
 * 0 between) with runs of empty buckets merged. Infinite and NaN values are
 * left out (they would have no bucket). */
LOOM_EXPORT int loom_summary_histogram(loom_summary_t *s, const char *tag, int64_t step,
                                       const float *values, size_t n);
/* Text, shown by TensorBoard's Text tab (rendered as Markdown). */
LOOM_EXPORT int loom_summary_text(loom_summary_t *s, const char *tag, int64_t step,
                                  const char *text);

/* Writes every buffered record to the file (not fsync: TensorBoard reads
 * the page cache). */
LOOM_EXPORT int loom_summary_flush(loom_summary_t *s);
/* Flushes, closes the file and frees the writer, which is invalid
 * afterwards whatever the result. Returns the first error not yet
 * reported. */
LOOM_EXPORT int loom_summary_close(loom_summary_t *s);

/* The event file's path. Valid until loom_summary_close(). */
LOOM_EXPORT const char *loom_summary_path(const loom_summary_t *s);
/* Detail text of the last error on this writer ("" if none). */
LOOM_EXPORT const char *loom_summary_errmsg(const loom_summary_t *s);

#ifdef __cplusplus
}
#endif
#endif
