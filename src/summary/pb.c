/* pb.c: TensorBoard's Event records, built from the generated protobuf-c
 * messages (see pb.h). protobuf-c writes the fields in field-number order
 * and, as proto3 does, leaves out fields at their default (a step of 0, a
 * histogram's min of 0), which every reader takes as that default; a
 * oneof member (simple_value) is written even when 0. */
#include "summary/pb.h"

#include <stdlib.h>
#include <string.h>

/* An Event of wall_time and step, with nothing else set. */
static void sum_event_init(loom__sum_event *e, double wall, int64_t step) {
  tensorflow__event__init(&e->ev);
  e->ev.wall_time = wall;
  e->ev.step = step;
}

/* e's Event with a Summary of one Value named tag, whose value is left
 * for the caller to set. */
static Tensorflow__Summary__Value *sum_event_value(loom__sum_event *e, double wall, int64_t step,
                                                   const char *tag) {
  sum_event_init(e, wall, step);
  tensorflow__summary__init(&e->summary);
  tensorflow__summary__value__init(&e->value);
  e->value.tag = (char *)tag; /* protobuf-c's strings are not const */
  e->values[0] = &e->value;
  e->summary.n_value = 1;
  e->summary.value = e->values;
  e->ev.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
  e->ev.summary = &e->summary;
  return &e->value;
}

void loom__sum_event_version(loom__sum_event *e, double wall) {
  sum_event_init(e, wall, 0);
  e->ev.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
  e->ev.file_version = (char *)"brain.Event:2";
}

void loom__sum_event_scalar(loom__sum_event *e, double wall, int64_t step, const char *tag,
                            float value) {
  Tensorflow__Summary__Value *v = sum_event_value(e, wall, step, tag);
  v->value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
  v->simple_value = value;
}

void loom__sum_event_histogram(loom__sum_event *e, double wall, int64_t step, const char *tag,
                               double min, double max, double num, double sum, double sum_sq,
                               const double *limits, const double *counts, size_t k) {
  Tensorflow__Summary__Value *v = sum_event_value(e, wall, step, tag);
  Tensorflow__HistogramProto *h = &e->histo;
  tensorflow__histogram_proto__init(h);
  h->min = min;
  h->max = max;
  h->num = num;
  h->sum = sum;
  h->sum_squares = sum_sq;
  h->n_bucket_limit = k;
  h->bucket_limit = (double *)limits;
  h->n_bucket = k;
  h->bucket = (double *)counts;
  v->value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_HISTO;
  v->histo = h;
}

void loom__sum_event_text(loom__sum_event *e, double wall, int64_t step, const char *tag,
                          const char *text, size_t len) {
  Tensorflow__Summary__Value *v = sum_event_value(e, wall, step, tag);
  tensorflow__tensor_shape_proto__init(&e->shape);
  tensorflow__tensor_proto__init(&e->tensor);
  e->tensor.dtype = TENSORFLOW__DATA_TYPE__DT_STRING;
  e->tensor.tensor_shape = &e->shape; /* present, and empty: a scalar */
  e->text.data = (uint8_t *)text;
  e->text.len = len;
  e->tensor.n_string_val = 1;
  e->tensor.string_val = &e->text;
  tensorflow__summary_metadata__plugin_data__init(&e->plugin);
  e->plugin.plugin_name = (char *)"text";
  tensorflow__summary_metadata__init(&e->meta);
  e->meta.plugin_data = &e->plugin;
  v->value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_TENSOR;
  v->tensor = &e->tensor;
  v->metadata = &e->meta;
}

int loom__sum_pack(const loom__sum_event *e, size_t max, uint8_t **out, size_t *len) {
  *out = NULL;
  *len = 0;
  size_t n = tensorflow__event__get_packed_size(&e->ev);
  if (n > max) return LOOM_ERANGE;
  uint8_t *p = malloc(n ? n : 1);
  if (!p) return LOOM_ENOMEM;
  *len = tensorflow__event__pack(&e->ev, p);
  *out = p;
  return 0;
}
