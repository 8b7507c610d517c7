/* ckpt_fuzz.c: libFuzzer harness for the checkpoint readers: libloom's
 * checkpoint files (src/ckpt/ckpt.c, through a memfd) and the parameter
 * server's manifests and shard files (src/ps/ckpt.c, through fmemopen).
 * The first byte picks the reader (bits 0-1: libloom's restore of every
 * tensor; a ps shard file loaded into a shard, then loaded again into the
 * state it made, as a restore into declared variables does; a ps shard
 * file verified; a ps manifest), whether the harness fixes the checksum
 * first so that the structure behind it is reached (bit 2: libloom's size
 * field and CRC-32C trailer, the ps file's SHA-256), and the shard that
 * reads (bits 4-7: 1..4 shards). The file, the rest, is read as the one
 * its header says it is. A refusal must say why; a restore must give the
 * tensors the file's table lists, with the bytes at their offsets.
 * Built by LOOM_FUZZ=ON with clang; driver.c runs it over the committed
 * corpus in every build. Most of its time under ASan is the ps's 2 MiB
 * row pages (one a sparse variable, each load), which ASan maps and
 * poisons one by one: __asan_default_options below has it clear their
 * shadow with memset, not by mapping it afresh (the same checks, about
 * 12% less time). */
#include "ckpt/ckpt.h"
#include "core/bytes.h"
#include "core/crc32c.h"
#include "ps/ps.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__asan_default_options(void);

/* ASan's own settings (ASAN_OPTIONS adds to them); unused without ASan. */
const char *__asan_default_options(void) { return "clear_shadow_mmap_threshold=1073741824"; }

#define HEADER 64 /* libloom's file: header and trailer (ckpt.c) */
#define TRAILER 8

static const size_t DTYPE_SIZE[] = {[LOOM_F32] = 4, [LOOM_F64] = 8, [LOOM_I32] = 4, [LOOM_I64] = 8};

static void quiet(int level, const char *subsys, const char *msg, void *arg) {
  (void)level, (void)subsys, (void)msg, (void)arg;
}

/* The checkpoint directory the harness opens (restores only: it stays
 * empty), removed when the fuzzer exits. */
static char fuzz_dir[] = "/tmp/loom-ckpt-fuzz-XXXXXX";

static void remove_fuzz_dir(void) { rmdir(fuzz_dir); }

static void loom_file(unsigned char *p, size_t n, bool fix) {
  static loom_ckpt_t *c;
  if (!c) {
    if (!mkdtemp(fuzz_dir) || loom_ckpt_open(NULL, fuzz_dir, 0, &c) < 0) abort();
    atexit(remove_fuzz_dir);
  }
  if (fix && n >= HEADER + TRAILER) {
    loom__put_le64(p + 24, n);
    loom__put_le32(p + n - TRAILER, loom__crc32c(0, p, n - TRAILER));
    memcpy(p + n - 4, "CEND", 4);
  }
  int64_t step = n >= 24 ? (int64_t)loom__get_le64(p + 16) : 0;
  int fd = memfd_create("ckpt", MFD_CLOEXEC);
  if (fd < 0 || (n && write(fd, p, n) != (ssize_t)n)) abort();
  loom_tensor *t;
  size_t nt;
  int rc = loom__ckpt_restore_all_fd(c, fd, step, &t, &nt);
  close(fd);
  if (rc < 0) {
    if (!loom_ckpt_errmsg(c)[0]) abort();
    return;
  }
  /* every tensor: its bytes are the file's at the offset its entry names
   * (found again here by walking the table as the format says) */
  const unsigned char *e = p + HEADER;
  for (size_t i = 0; i < nt; i++) {
    size_t nl = loom__get_le16(e);
    if (nl != strlen(t[i].name) || memcmp(e + 2, t[i].name, nl)) abort();
    e += 2 + nl;
    int nd = e[1];
    if (nd != t[i].ndim) abort();
    e += 2 + 8 * (size_t)nd;
    uint64_t off = loom__get_le64(e), bytes = loom__get_le64(e + 8);
    e += 16;
    size_t want = DTYPE_SIZE[t[i].dtype];
    for (int k = 0; k < nd; k++) want *= (size_t)t[i].shape[k];
    if (bytes != want || off + bytes > n - TRAILER) abort();
    if (bytes && memcmp(t[i].data, p + off, bytes)) abort();
  }
  loom__ckpt_tensors_free(t, nt);
}

static void ps_file(unsigned char *p, size_t n, int which, bool fix, int shard, int nshards) {
  char err[1024] = "";
  if (which == 3) {
    int shards;
    if (ps_ckpt_manifest_parse((const char *)p, n, 7, &shards) == 0 &&
        (shards < 1 || shards > 65536))
      abort();
    return;
  }
  if (fix && n >= 32) {
    unsigned int dl;
    if (EVP_Digest(p, n - 32, p + n - 32, &dl, EVP_sha256(), NULL) != 1) abort();
  }
  /* the file is the one its header says: shard, shard count, step */
  int fshard = n >= 16 ? (int)loom__get_le32(p + 12) : 0;
  int fn = n >= 20 ? (int)loom__get_le32(p + 16) : 1;
  uint64_t step = n >= 28 ? loom__get_le64(p + 20) : 0;
  FILE *f = fmemopen(p, n ? n : 1, "rb");
  if (!f) abort();
  int rc;
  if (which == 2) {
    rc = ps_ckpt_verify_stream(f, n, "fuzz", fshard, fn, step, err, sizeof err);
  } else {
    ps_state st;
    ps_state_init(&st, shard, nshards, 64, 8u << 20);
    rc = ps_ckpt_load_stream(&st, f, n, "fuzz", fshard, fn, step, err, sizeof err);
    ps_state_drop_pending(&st);
    if (rc == 0) { /* again, into the variables it declared */
      for (uint32_t i = 0; i < st.nvars; i++) st.vars[i]->loading = false;
      rewind(f);
      rc = ps_ckpt_load_stream(&st, f, n, "fuzz", fshard, fn, step, err, sizeof err);
      ps_state_drop_pending(&st);
    }
    ps_state_free(&st);
  }
  fclose(f);
  if (rc < 0 && !err[0]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool ready;
  if (!ready) loom__log_set_sink(quiet, NULL), ready = true;
  if (size < 1) return 0;
  int which = data[0] & 3, nshards = 1 + (data[0] >> 4 & 3), shard = (data[0] >> 6) % nshards;
  bool fix = data[0] & 4;
  data++, size--;
  unsigned char *p = malloc(size ? size : 1); /* a copy the fixes may change */
  if (!p) abort();
  memcpy(p, data, size);
  if (which == 0)
    loom_file(p, size, fix);
  else
    ps_file(p, size, which, fix, shard, nshards);
  free(p);
  return 0;
}
