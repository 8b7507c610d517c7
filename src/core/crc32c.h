/* crc32c.h: CRC-32C (Castagnoli), the checksum of TFRecord and TensorBoard
 * record framing (src/feed/, src/summary/) and of checkpoint files
 * (src/ckpt/). Pure computation, no I/O. */
#ifndef LOOM_CORE_CRC32C_H
#define LOOM_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc, the CRC-32C of some bytes (0 for none), by the n bytes at
 * data: loom__crc32c(loom__crc32c(0, a, na), b, nb) is the CRC of a then b.
 * loom__crc32c(0, "123456789", 9) == 0xe3069283. Uses the CPU's crc32
 * instruction when it has SSE 4.2, else tables (slicing by 8). */
uint32_t loom__crc32c(uint32_t crc, const void *data, size_t n);
/* The table implementation alone, for tests that compare the two. */
uint32_t loom__crc32c_sw(uint32_t crc, const void *data, size_t n);

/* TensorFlow's masked CRC for record framing: a CRC stored next to the data
 * it covers is rotated and offset, so that a CRC of bytes that themselves
 * contain CRCs does not degenerate. */
static inline uint32_t loom__crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
static inline uint32_t loom__crc32c_unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

#endif
