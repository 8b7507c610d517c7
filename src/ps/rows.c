/* rows.c: the sparse row store: uint64 key -> a row of `stride` floats.
 *
 * Rows live in 2 MiB pages (a power of two rows each) that never move, so
 * a table of hundreds of millions of rows grows without copying its data;
 * an open-addressing index (linear probing, load <= 1/2) maps a key to its
 * row number. On a table far larger than the caches the cost is memory
 * latency, not arithmetic, so: each row slot starts with its key (a lookup
 * touches two cache lines, index and row); an index entry carries 32 bits
 * of the key's hash beside the row number, so that a probe past another
 * key's entry does not cost a miss on that key's row (at load 1/2 that
 * was half a miss per lookup); a batch of lookups keeps a block of misses
 * in flight at once; and once a table outgrows its first page its pages
 * (and a large index) are 2 MiB-aligned and advised for transparent huge
 * pages, which spares most TLB misses (on random rows of a 1M-row table:
 * 2..20% less server CPU in noisy measurements on a shared 2-core VM).
 * Small tables stay in 4 KiB pages, committed as they are touched. Every byte is charged to the shard's
 * ps_mem, so a flood of new keys ends in LOOM_ERANGE, not in the OOM
 * killer. */
#include "ps/ps.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE_BYTES (2u << 20) /* a huge page */
#define INDEX_MIN 1024
#define FIND_BLOCK 64 /* keys a batch lookup has in flight */

/* A slot: the key (as two floats' worth of bytes), then stride floats,
 * padded to 8 bytes. */
static uint32_t slot_floats(const ps_rows *r) { return 2 + ((r->stride + 1) & ~1u); }

void ps_rows_init(ps_rows *r, uint32_t stride) {
  memset(r, 0, sizeof *r);
  r->stride = stride ? stride : 1;
  uint32_t shift = 0;
  while (((uint64_t)2 << shift) * slot_floats(r) * sizeof(float) <= PAGE_BYTES) shift++;
  r->page_shift = shift;
}

/* A zeroed index of n slots: huge-page backed when it is that large. */
static uint64_t *index_alloc(uint64_t n, uint64_t *bytes) {
  *bytes = n * sizeof(uint64_t);
  if (*bytes < PAGE_BYTES) return calloc(n, sizeof(uint64_t));
  *bytes = (*bytes + PAGE_BYTES - 1) & ~(uint64_t)(PAGE_BYTES - 1);
  uint64_t *p = aligned_alloc(PAGE_BYTES, *bytes);
  if (p) {
    madvise(p, *bytes, MADV_HUGEPAGE);
    memset(p, 0, *bytes);
  }
  return p;
}

static uint64_t index_bytes(uint64_t n) {
  uint64_t b = n * sizeof(uint64_t);
  return b < PAGE_BYTES ? b : (b + PAGE_BYTES - 1) & ~(uint64_t)(PAGE_BYTES - 1);
}

void ps_rows_free(ps_rows *r, ps_mem *m) {
  for (uint64_t i = 0; i < r->npages; i++) free(r->pages[i]);
  free(r->pages);
  free(r->index);
  if (m) ps_mem_give(m, r->bytes);
  ps_rows_init(r, r->stride);
}

static float *slot_at(const ps_rows *r, uint64_t row) {
  return r->pages[row >> r->page_shift] + (row & ((1ULL << r->page_shift) - 1)) * slot_floats(r);
}

float *ps_rows_at(const ps_rows *r, uint64_t row) { return slot_at(r, row) + 2; }

uint64_t ps_rows_key(const ps_rows *r, uint64_t row) {
  uint64_t k;
  memcpy(&k, slot_at(r, row), 8);
  return k;
}

static uint64_t hash_of(uint64_t key) { return ps_mix64(key ^ 0x5851f42d4c957f2dULL); }

/* An index entry: the row + 1 in the low half, the key's tag in the high
 * half (0: an empty slot). */
static uint64_t tag_of(uint64_t h) { return h & 0xffffffff00000000ULL; }
static uint64_t entry_row(uint64_t e) { return (e & 0xffffffffu) - 1; }

/* The row of key, whose hash is h, probing from slot i. Only a slot whose
 * tag matches costs a look at the row's key (another cache miss). */
static int64_t find_from(const ps_rows *r, uint64_t key, uint64_t h, uint64_t i) {
  uint64_t tag = tag_of(h);
  for (;; i = (i + 1) & r->mask) {
    uint64_t e = r->index[i];
    if (e == 0) return -1;
    if (tag_of(e) == tag && ps_rows_key(r, entry_row(e)) == key) return (int64_t)entry_row(e);
  }
}

int64_t ps_rows_find(const ps_rows *r, uint64_t key) {
  uint64_t h = hash_of(key);
  return r->index ? find_from(r, key, h, h & r->mask) : -1;
}

void ps_rows_find_many(const ps_rows *r, const unsigned char *keys, size_t n, int64_t *rows) {
  if (!r->index) {
    for (size_t i = 0; i < n; i++) rows[i] = -1;
    return;
  }
  /* A block at a time, in passes whose loads do not depend on each other
   * within the pass, so that the core has a block's misses in flight at
   * once: the home slots of the block's keys; then, in the lines those
   * brought in, the first entry along each probe whose tag matches; then
   * the keys of those rows. Only a tag that lies (one key in 2^32) probes
   * on, one load after another. (Software prefetches ahead of use did no
   * better on the 2-core VM these figures come from: its memory answers
   * about one random line per 10 ns however it is asked.) */
  uint64_t h[FIND_BLOCK], cand[FIND_BLOCK];
  for (size_t a = 0; a < n; a += FIND_BLOCK) {
    size_t k = n - a < FIND_BLOCK ? n - a : FIND_BLOCK;
    for (size_t i = 0; i < k; i++) {
      uint64_t key;
      memcpy(&key, keys + 8 * (a + i), 8);
      h[i] = hash_of(key);
      cand[i] = r->index[h[i] & r->mask];
    }
    for (size_t i = 0; i < k; i++) {
      uint64_t e = cand[i], tag = tag_of(h[i]);
      for (uint64_t j = h[i] & r->mask; e && tag_of(e) != tag;) {
        j = (j + 1) & r->mask;
        e = r->index[j];
      }
      cand[i] = e;
    }
    for (size_t i = 0; i < k; i++) {
      uint64_t e = cand[i], key;
      memcpy(&key, keys + 8 * (a + i), 8);
      if (e == 0)
        rows[a + i] = -1;
      else if (ps_rows_key(r, entry_row(e)) == key)
        rows[a + i] = (int64_t)entry_row(e);
      else
        rows[a + i] = find_from(r, key, h[i], h[i] & r->mask);
    }
  }
}

static int grow_index(ps_rows *r, ps_mem *m) {
  uint64_t size = r->index ? (r->mask + 1) * 2 : INDEX_MIN;
  uint64_t bytes = index_bytes(size);
  if (ps_mem_take(m, bytes) < 0) return LOOM_ERANGE;
  uint64_t *idx = index_alloc(size, &bytes);
  if (!idx) {
    ps_mem_give(m, bytes);
    return LOOM_ENOMEM;
  }
  uint64_t mask = size - 1;
  for (uint64_t row = 0; row < r->n; row++) {
    uint64_t h = hash_of(ps_rows_key(r, row)), i = h & mask;
    while (idx[i]) i = (i + 1) & mask;
    idx[i] = tag_of(h) | (row + 1);
  }
  if (r->index) {
    ps_mem_give(m, index_bytes(r->mask + 1));
    r->bytes -= index_bytes(r->mask + 1);
  }
  free(r->index);
  r->index = idx;
  r->mask = mask;
  r->bytes += bytes;
  return 0;
}

int64_t ps_rows_add(ps_rows *r, uint64_t key, bool *added, ps_mem *m) {
  *added = false;
  int64_t row = ps_rows_find(r, key);
  if (row >= 0) return row;
  if (r->n >= UINT32_MAX - 1) return LOOM_ERANGE;
  if (!r->index || (r->n + 1) * 2 > r->mask + 1) {
    int rc = grow_index(r, m);
    if (rc < 0) return rc;
  }
  uint64_t page = r->n >> r->page_shift;
  if (page >= r->npages) {
    if (r->npages == r->pages_cap) {
      uint64_t cap = r->pages_cap ? r->pages_cap * 2 : 16;
      uint64_t more = (cap - r->pages_cap) * sizeof *r->pages;
      if (ps_mem_take(m, more) < 0) return LOOM_ERANGE;
      float **np = realloc(r->pages, cap * sizeof *np);
      if (!np) {
        ps_mem_give(m, more);
        return LOOM_ENOMEM;
      }
      r->pages = np;
      r->pages_cap = cap;
      r->bytes += more;
    }
    if (ps_mem_take(m, PAGE_BYTES) < 0) return LOOM_ERANGE;
    float *p = aligned_alloc(PAGE_BYTES, PAGE_BYTES);
    if (!p) {
      ps_mem_give(m, PAGE_BYTES);
      return LOOM_ENOMEM;
    }
    if (r->npages == 1) madvise(r->pages[0], PAGE_BYTES, MADV_HUGEPAGE); /* a big one */
    if (r->npages >= 1) madvise(p, PAGE_BYTES, MADV_HUGEPAGE);
    r->pages[r->npages++] = p;
    r->bytes += PAGE_BYTES;
  }
  row = (int64_t)r->n++;
  memcpy(slot_at(r, (uint64_t)row), &key, 8);
  uint64_t h = hash_of(key), i = h & r->mask;
  while (r->index[i]) i = (i + 1) & r->mask;
  r->index[i] = tag_of(h) | (uint64_t)(row + 1);
  *added = true;
  return row;
}

void ps_rows_clear(ps_rows *r) {
  if (r->index && r->n) memset(r->index, 0, (r->mask + 1) * sizeof *r->index);
  r->n = 0;
}
