/* crc32c.c: CRC-32C (polynomial 0x1EDC6F41, reflected 0x82F63B78), with
 * the SSE 4.2 crc32 instruction where the CPU has it and eight tables
 * (slicing by 8) elsewhere. Both give the same answer; the unit test checks
 * it over lengths and alignments. */
#include "core/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC_HAVE_SSE42 1
#include <nmmintrin.h>
#endif

#define CRC_POLY 0x82f63b78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_use_hw;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (CRC_POLY & (0u - (c & 1u)));
    crc_table[0][i] = c;
  }
  /* table[k][i]: the CRC of byte i followed by k zero bytes */
  for (int k = 1; k < 8; k++)
    for (int i = 0; i < 256; i++)
      crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xffu];
#ifdef CRC_HAVE_SSE42
  __builtin_cpu_init();
  crc_use_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
  while (n && ((uintptr_t)p & 7u)) {
    crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xffu];
    n--;
  }
  while (n >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    lo = __builtin_bswap32(lo);
    hi = __builtin_bswap32(hi);
#endif
    lo ^= crc;
    crc = crc_table[7][lo & 0xffu] ^ crc_table[6][(lo >> 8) & 0xffu] ^
          crc_table[5][(lo >> 16) & 0xffu] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xffu] ^
          crc_table[2][(hi >> 8) & 0xffu] ^ crc_table[1][(hi >> 16) & 0xffu] ^
          crc_table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xffu];
  return crc;
}

#ifdef CRC_HAVE_SSE42
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p,
                                                         size_t n) {
  uint64_t c = crc;
  while (n && ((uintptr_t)p & 7u)) {
    c = _mm_crc32_u8((uint32_t)c, *p++);
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
  return (uint32_t)c;
}
#endif

uint32_t loom__crc32c_sw(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
  return ~crc_sw(~crc, data, n);
}

uint32_t loom__crc32c(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
#ifdef CRC_HAVE_SSE42
  if (crc_use_hw) return ~crc_hw(~crc, data, n);
#endif
  return ~crc_sw(~crc, data, n);
}
