/* pb.h: TensorBoard's Event records as protocol buffers, through the
 * protobuf-c messages generated at build time from src/summary/proto/ (the
 * part of TensorFlow's event.proto, summary.proto and tensor.proto that
 * loom writes).
 *
 * A loom__sum_event holds one Event and every message it may nest, so an
 * event is built without allocating: the builders fill it in, pointing at
 * the caller's tag, values and text, which must outlive the event's
 * packing. loom__sum_pack then turns it into the record's bytes. */
#ifndef LOOM_SUMMARY_PB_H
#define LOOM_SUMMARY_PB_H

#include "core/core.h"
#include "event.pb-c.h"

typedef struct {
  Tensorflow__Event ev;
  Tensorflow__Summary summary;
  Tensorflow__Summary__Value value;
  Tensorflow__Summary__Value *values[1]; /* summary's one value */
  Tensorflow__HistogramProto histo;
  Tensorflow__TensorProto tensor;
  Tensorflow__TensorShapeProto shape; /* no dims: a scalar */
  ProtobufCBinaryData text;           /* tensor's one string */
  Tensorflow__SummaryMetadata meta;
  Tensorflow__SummaryMetadata__PluginData plugin;
} loom__sum_event;

/* The first record of a file: wall_time and file_version "brain.Event:2",
 * which tells TensorBoard what follows. */
void loom__sum_event_version(loom__sum_event *e, double wall);

/* An Event at wall time wall and step whose Summary holds one Value named
 * tag: a scalar (simple_value), a histogram (histo: the summary statistics
 * and the k buckets' upper limits and counts) or a text (a scalar DT_STRING
 * tensor of len bytes, with the text plugin's metadata). */
void loom__sum_event_scalar(loom__sum_event *e, double wall, int64_t step, const char *tag,
                            float value);
void loom__sum_event_histogram(loom__sum_event *e, double wall, int64_t step, const char *tag,
                               double min, double max, double num, double sum, double sum_sq,
                               const double *limits, const double *counts, size_t k);
void loom__sum_event_text(loom__sum_event *e, double wall, int64_t step, const char *tag,
                          const char *text, size_t len);

/* Packs e's Event into *out (len bytes, malloc'd, the caller's to free):
 * 0, LOOM_ERANGE when it would be over max bytes (*out is then NULL), or
 * LOOM_ENOMEM. */
int loom__sum_pack(const loom__sum_event *e, size_t max, uint8_t **out, size_t *len);

#endif
