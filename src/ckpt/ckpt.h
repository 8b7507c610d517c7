/* ckpt.h: what libloom's checkpoints (ckpt.c, include/loom/ckpt.h) expose
 * inside loom: the reader on an open file instead of a step's name in the
 * directory, for the fuzz harness (tests/fuzz/ckpt_fuzz.c), which feeds it
 * memory through a memfd. Not exported from the shared library. */
#ifndef LOOM_CKPT_CKPT_H
#define LOOM_CKPT_CKPT_H

#include "loom/ckpt.h"

/* Checks the checkpoint of step open on fd as loom_ckpt_verify does, then
 * restores every tensor it holds, by name as loom_ckpt_restore does, into
 * memory of its own. On success *t holds *n tensors (names and data
 * malloc'ed; the caller frees them with loom__ckpt_tensors_free); otherwise
 * what a restore would return, with the message in loom_ckpt_errmsg(c). */
int loom__ckpt_restore_all_fd(loom_ckpt_t *c, int fd, int64_t step, loom_tensor **t, size_t *n);
void loom__ckpt_tensors_free(loom_tensor *t, size_t n);

#endif
