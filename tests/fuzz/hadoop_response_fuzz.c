/* hadoop_response_fuzz.c: libFuzzer harness for the Hadoop IPC reply
 * decoder (src/hadoop/ipc.c): the first byte picks the response message
 * the frame is decoded as (the YARN client's), the next four are the
 * frame's length as a server sends it (hipc_frame_length), the rest its
 * bytes (hipc_decode_response). Aborts when a decoded reply breaks
 * ipc.h's contract: a status out of range, a success without its body,
 * an error with one, non-printable exception text. The committed corpus
 * holds real replies of Hadoop 3.5.0's ResourceManager (and a
 * NodeManager's refusal of SIMPLE authentication). */
#include "core/bytes.h"
#include "hadoop/ipc.h"
#include "yarn_service_protos.pb-c.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void printable(const char *s) {
  for (; *s; s++)
    if (*s < 0x20 || *s >= 0x7f) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const ProtobufCMessageDescriptor *const descs[] = {
      &hadoop__yarn__get_cluster_metrics_response_proto__descriptor,
      &hadoop__yarn__get_cluster_nodes_response_proto__descriptor,
      &hadoop__yarn__get_cluster_node_labels_response_proto__descriptor,
      &hadoop__yarn__get_all_resource_type_info_response_proto__descriptor,
      &hadoop__yarn__get_queue_info_response_proto__descriptor,
  };
  if (size < 5) return 0;
  const ProtobufCMessageDescriptor *d = descs[data[0] % (sizeof descs / sizeof descs[0])];
  char err[512];
  uint32_t len;
  if (hipc_frame_length(data + 1, &len, err, sizeof err) < 0) {
    if (!err[0]) abort();
    return 0;
  }
  if (len > size - 5) return 0; /* the client would wait for the rest */
  /* an exact-size copy, so that ASan sees any read past the frame */
  uint8_t *frame = malloc(len ? len : 1);
  if (!frame) return 0;
  memcpy(frame, data + 5, len);
  hipc_response r;
  err[0] = 0;
  int rc = hipc_decode_response(frame, len, d, &r, err, sizeof err);
  if (rc == 0) {
    if (r.status < 0 || r.status > 2 || !r.header) abort();
    if ((r.status == 0) != (r.body != NULL)) abort();
    printable(r.exception);
    printable(r.message);
    hipc_response_free(&r);
  } else if (rc != LOOM_EPROTO && rc != LOOM_ENOMEM) {
    abort();
  } else if (!err[0] || r.header || r.body) {
    abort();
  }
  uint32_t v;
  (void)loom__varint_get32(frame, len, &v);
  free(frame);
  return 0;
}
