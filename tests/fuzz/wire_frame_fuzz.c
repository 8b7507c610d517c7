/* wire_frame_fuzz.c: libFuzzer harness for the wire frame decoder
 * (src/wire/wire.c): arbitrary bytes pushed into a wire_reader in pieces
 * (the first byte picks the piece size, as a socket might split them) and
 * every frame popped, until one is refused, as the coordinator's
 * connections do. Aborts when a popped frame breaks wire.h's contract.
 * Built by LOOM_FUZZ=ON with clang; driver.c runs it over the committed
 * corpus in every build. */
#include "wire/wire.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  size_t piece = (size_t)data[0] % 64 + 1;
  data++, size--;
  wire_reader r;
  wire_reader_init(&r, 4096);
  int rc = 0;
  for (size_t off = 0; off < size && rc >= 0; off += piece) {
    size_t n = size - off < piece ? size - off : piece;
    if (wire_reader_push(&r, data + off, n) < 0) break;
    wire_frame f;
    while ((rc = wire_reader_pop(&r, &f)) == 1) {
      if (f.type == 0 || f.type >= WIRE_TYPE_MAX) abort();
      if (!f.json || !json_is_object(f.json)) abort();
      if (f.blob < f.raw + WIRE_HDR || f.blob_len > 4096) abort();
      if (f.blob_len) (void)f.blob[f.blob_len - 1]; /* in bounds under ASan */
      wire_frame_free(&f);
    }
  }
  wire_reader_free(&r);
  return 0;
}
