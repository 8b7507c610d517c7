/* rows.c: the sparse row store: uint64 key -> a row of `stride` floats.
 *
 * Rows live in 2 MiB pages (a power of two rows each) that never move, so
 * a table of hundreds of millions of rows grows without copying its data;
 * an open-addressing index (linear probing, load <= 1/2) maps a key to its
 * row number. On a table far larger than the caches the cost is memory
 * latency, not arithmetic, so a lookup touches as few cache lines as it
 * can: an index entry holds the key itself beside its row number, so a
 * lookup reads one index line (a probe past other keys' entries stays in
 * it, mostly) and then only the row's own floats, which a row of 16
 * floats fits in one line (rows are 8-byte multiples in a 2 MiB-aligned
 * page: no key in front of them, which made a row of 16 floats straddle
 * two lines, and its pages 44% empty). The keys by row number, read only
 * to walk the rows (checkpoints, growing the index, closing a step), are
 * an array of their own. A batch of lookups keeps a block of misses in
 * flight at once; and once a table outgrows its first page its pages (and
 * a large index) are 2 MiB-aligned and advised for transparent huge
 * pages, which spares most TLB misses (on random rows of a 1M-row table:
 * 2..20% less server CPU in noisy measurements on a shared 2-core VM).
 * Small tables stay in 4 KiB pages, committed as they are touched. Every
 * byte is charged to the shard's ps_mem, so a flood of new keys ends in
 * LOOM_ERANGE, not in the OOM killer. */
#include "ps/ps.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE_BYTES (2u << 20) /* a huge page */
#define INDEX_MIN 1024
#define FIND_BLOCK 64 /* keys a batch lookup has in flight */

/* A row's slot: stride floats, padded to 8 bytes. */
static uint32_t slot_floats(const ps_rows *r) { return (r->stride + 1) & ~1u; }

void ps_rows_init(ps_rows *r, uint32_t stride) {
  memset(r, 0, sizeof *r);
  r->stride = stride ? stride : 1;
  uint32_t shift = 0;
  while (((uint64_t)2 << shift) * slot_floats(r) * sizeof(float) <= PAGE_BYTES) shift++;
  r->page_shift = shift;
}

/* A zeroed index of n entries: huge-page backed when it is that large. */
static ps_rows_ent *index_alloc(uint64_t n, uint64_t *bytes) {
  *bytes = n * sizeof(ps_rows_ent);
  if (*bytes < PAGE_BYTES) return calloc(n, sizeof(ps_rows_ent));
  *bytes = (*bytes + PAGE_BYTES - 1) & ~(uint64_t)(PAGE_BYTES - 1);
  ps_rows_ent *p = aligned_alloc(PAGE_BYTES, *bytes);
  if (p) {
    madvise(p, *bytes, MADV_HUGEPAGE);
    memset(p, 0, *bytes);
  }
  return p;
}

static uint64_t index_bytes(uint64_t n) {
  uint64_t b = n * sizeof(ps_rows_ent);
  return b < PAGE_BYTES ? b : (b + PAGE_BYTES - 1) & ~(uint64_t)(PAGE_BYTES - 1);
}

void ps_rows_free(ps_rows *r, ps_mem *m) {
  for (uint64_t i = 0; i < r->npages; i++) free(r->pages[i]);
  free(r->pages);
  free(r->keys);
  free(r->index);
  if (m) ps_mem_give(m, r->bytes);
  ps_rows_init(r, r->stride);
}

float *ps_rows_at(const ps_rows *r, uint64_t row) {
  return r->pages[row >> r->page_shift] + (row & ((1ULL << r->page_shift) - 1)) * slot_floats(r);
}

uint64_t ps_rows_key(const ps_rows *r, uint64_t row) { return r->keys[row]; }

static uint64_t hash_of(uint64_t key) { return ps_mix64(key ^ 0x5851f42d4c957f2dULL); }

/* The row of key, probing from index slot i. */
static int64_t find_from(const ps_rows *r, uint64_t key, uint64_t i) {
  for (;; i = (i + 1) & r->mask) {
    const ps_rows_ent *e = &r->index[i];
    if (e->row == 0) return -1;
    if (e->key == key) return (int64_t)(e->row - 1);
  }
}

int64_t ps_rows_find(const ps_rows *r, uint64_t key) {
  return r->index ? find_from(r, key, hash_of(key) & r->mask) : -1;
}

void ps_rows_find_many(const ps_rows *r, const unsigned char *keys, size_t n, int64_t *rows) {
  if (!r->index) {
    for (size_t i = 0; i < n; i++) rows[i] = -1;
    return;
  }
  /* A block at a time, in two passes: the first only loads the home
   * entries of the block's keys, loads that do not depend on each other,
   * so that the core has the block's misses in flight at once; the second
   * probes in the lines those brought in. (Software prefetches ahead of
   * use did no better on the 2-core VM these figures come from: its memory
   * answers about one random line per 10 ns however it is asked.) */
  uint64_t slot[FIND_BLOCK], first[FIND_BLOCK];
  for (size_t a = 0; a < n; a += FIND_BLOCK) {
    size_t k = n - a < FIND_BLOCK ? n - a : FIND_BLOCK;
    for (size_t i = 0; i < k; i++) {
      uint64_t key;
      memcpy(&key, keys + 8 * (a + i), 8);
      slot[i] = hash_of(key) & r->mask;
      first[i] = r->index[slot[i]].key;
    }
    for (size_t i = 0; i < k; i++) {
      uint64_t key;
      memcpy(&key, keys + 8 * (a + i), 8);
      const ps_rows_ent *e = &r->index[slot[i]];
      if (first[i] == key && e->row)
        rows[a + i] = (int64_t)(e->row - 1);
      else
        rows[a + i] = find_from(r, key, slot[i]);
    }
  }
}

static int grow_index(ps_rows *r, ps_mem *m) {
  uint64_t size = r->index ? (r->mask + 1) * 2 : INDEX_MIN;
  uint64_t bytes = index_bytes(size);
  if (ps_mem_take(m, bytes) < 0) return LOOM_ERANGE;
  ps_rows_ent *idx = index_alloc(size, &bytes);
  if (!idx) {
    ps_mem_give(m, bytes);
    return LOOM_ENOMEM;
  }
  uint64_t mask = size - 1;
  for (uint64_t row = 0; row < r->n; row++) {
    uint64_t i = hash_of(r->keys[row]) & mask;
    while (idx[i].row) i = (i + 1) & mask;
    idx[i] = (ps_rows_ent){r->keys[row], row + 1};
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

/* Doubles an array of *cap elements of size bytes (first: the first
 * capacity), the growth charged to the memory budget and r->bytes; the
 * array moves. */
static int grow_charged(ps_rows *r, ps_mem *m, void **arr, uint64_t *cap, size_t size,
                        uint64_t first) {
  uint64_t ncap = *cap ? *cap * 2 : first, more = (ncap - *cap) * size;
  if (ps_mem_take(m, more) < 0) return LOOM_ERANGE;
  void *p = realloc(*arr, ncap * size);
  if (!p) {
    ps_mem_give(m, more);
    return LOOM_ENOMEM;
  }
  *arr = p;
  *cap = ncap;
  r->bytes += more;
  return 0;
}

/* Room for one more key in the keys array (it moves when it grows). */
static int keys_room(ps_rows *r, ps_mem *m) {
  if (r->n < r->keys_cap) return 0;
  void *k = r->keys;
  int rc = grow_charged(r, m, &k, &r->keys_cap, sizeof *r->keys, 256);
  r->keys = k;
  return rc;
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
  int rc = keys_room(r, m);
  if (rc < 0) return rc;
  uint64_t page = r->n >> r->page_shift;
  if (page >= r->npages) {
    if (r->npages == r->pages_cap) {
      void *pg = r->pages;
      rc = grow_charged(r, m, &pg, &r->pages_cap, sizeof *r->pages, 16);
      r->pages = pg;
      if (rc < 0) return rc;
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
  r->keys[row] = key;
  uint64_t i = hash_of(key) & r->mask;
  while (r->index[i].row) i = (i + 1) & r->mask;
  r->index[i] = (ps_rows_ent){key, (uint64_t)row + 1};
  *added = true;
  return row;
}

void ps_rows_clear(ps_rows *r) {
  if (r->index && r->n) memset(r->index, 0, (r->mask + 1) * sizeof *r->index);
  r->n = 0;
}
