/* crc32c.c: CRC32C (Castagnoli, reflected polynomial 0x82f63b78), the
 * checksum TFRecord puts on every record's length and data. The SSE4.2
 * crc32 instruction when the CPU has it (about 8 bytes a cycle-latency,
 * several GB/s), else slicing-by-8 tables built once. */
#include "feed/feed.h"

#include <pthread.h>
#include <string.h>

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_hw;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
  __builtin_cpu_init();
  crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n) {
  while (n && ((uintptr_t)p & 7)) {
    c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    w ^= c;
    c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
        crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
        crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
        crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw_run(uint32_t c,
                                                             const unsigned char *p,
                                                             size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
    p += 8;
    n -= 8;
  }
  c = (uint32_t)c64;
  while (n--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

uint32_t loom__crc32c(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (crc_hw) return ~crc_hw_run(c, data, n);
#endif
  return ~crc_sw(c, data, n);
}

uint32_t loom__crc32c_sw(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
  return ~crc_sw(~crc, data, n);
}
