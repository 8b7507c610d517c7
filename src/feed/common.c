/* common.c: the small pieces every part of the feed shares: format names,
 * the record index of a chunk, and the shuffle. */
#include "feed/feed.h"

#include <stdlib.h>
#include <string.h>

int loom__feed_format_parse(const char *s, feed_format *fmt) {
  memset(fmt, 0, sizeof *fmt);
  if (!s) return LOOM_EINVAL;
  if (!strcmp(s, "lines")) {
    fmt->kind = FEED_LINES;
  } else if (!strcmp(s, "tfrecord")) {
    fmt->kind = FEED_TFRECORD;
  } else if (!strcmp(s, "idx")) {
    fmt->kind = FEED_IDX;
  } else if (!strncmp(s, "fixed:", 6)) {
    long long b;
    if (loom__parse_int(s + 6, 1, 1 << 30, &b) < 0) return LOOM_EINVAL;
    fmt->kind = FEED_FIXED;
    fmt->rec = (uint64_t)b;
  } else {
    return LOOM_EINVAL;
  }
  return 0;
}

const feed_format_ops *loom__feed_format_ops(const feed_format *fmt) {
  switch (fmt->kind) {
  case FEED_LINES:
    return &loom__feed_lines;
  case FEED_TFRECORD:
    return &loom__feed_tfrecord;
  case FEED_IDX:
    return &loom__feed_idx;
  case FEED_FIXED:
    return &loom__feed_fixed;
  }
  return NULL;
}

int loom__feed_recs_push(feed_recs *r, size_t off, size_t len) {
  if (off > UINT32_MAX || len > UINT32_MAX) return LOOM_ERANGE;
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 4096;
    feed_rec *v = realloc(r->v, cap * sizeof *v);
    if (!v) return LOOM_ENOMEM;
    r->v = v;
    r->cap = cap;
  }
  r->v[r->n].off = (uint32_t)off;
  r->v[r->n].len = (uint32_t)len;
  r->n++;
  return 0;
}

void loom__feed_recs_free(feed_recs *r) {
  free(r->v);
  memset(r, 0, sizeof *r);
}

uint64_t loom__feed_seed(uint64_t base, uint64_t a, uint64_t b) {
  uint64_t s = base;
  uint64_t x = loom__feed_mix(&s) ^ a;
  s = x;
  x = loom__feed_mix(&s) ^ b;
  s = x;
  return loom__feed_mix(&s);
}

/* An unbiased draw from [0, n) (Lemire's multiply-and-reject). */
static uint32_t bounded(uint64_t *state, uint32_t n) {
  uint64_t m = (uint64_t)(uint32_t)loom__feed_mix(state) * n;
  uint32_t low = (uint32_t)m;
  if (low < n) {
    uint32_t t = (0u - n) % n;
    while (low < t) {
      m = (uint64_t)(uint32_t)loom__feed_mix(state) * n;
      low = (uint32_t)m;
    }
  }
  return (uint32_t)(m >> 32);
}

void loom__feed_permute(uint32_t *idx, size_t n, uint64_t seed) {
  uint64_t st = seed;
  for (size_t i = n; i > 1; i--) {
    uint32_t j = bounded(&st, (uint32_t)i);
    uint32_t t = idx[i - 1];
    idx[i - 1] = idx[j];
    idx[j] = t;
  }
}

int loom__feed_cut_push(uint64_t **cuts, size_t *ncuts, uint64_t at) {
  size_t n = *ncuts;
  if ((n & (n - 1)) == 0) { /* grow at powers of two */
    uint64_t *c = realloc(*cuts, (n ? n * 2 : 8) * sizeof *c);
    if (!c) return LOOM_ENOMEM;
    *cuts = c;
  }
  (*cuts)[n] = at;
  *ncuts = n + 1;
  return 0;
}
