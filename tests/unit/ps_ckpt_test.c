/* ps_ckpt_test.c: the parameter server's checkpoint files read back
 * (src/ps/ckpt.c), no sockets: a shard file whose SHA-256 holds but that
 * declares one variable twice is refused as damaged, whichever layouts the
 * two declarations have, and the state it was to load into is untouched;
 * the same file with distinct names loads. (The twice-declared variable
 * with fewer optimizer slots the second time crashed the merge: found by
 * reading the reader for its fuzz harness, tests/fuzz/ckpt_fuzz.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "testutil.h"

#include "ps/ps.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DENSE(n, o)                                                                                \
  { .kind = PS_DENSE, .ndim = 1, .count = (n), .shape = {(n)}, .opt = o }
#define SPARSE(dim, o)                                                                             \
  { .kind = PS_SPARSE, .ndim = 1, .count = (dim), .shape = {(dim)}, .opt = o }
#define SGD                                                                                        \
  { LOOM_PS_SGD, 0.1f, 0, 0, 0, 0 }
#define ADAGRAD                                                                                    \
  { LOOM_PS_ADAGRAD, 0.1f, 0, 0, 1e-10f, 0 }
#define ADAM                                                                                       \
  { LOOM_PS_ADAM, 0.01f, 0.9f, 0.999f, 1e-8f, 0 }

/* The second is declared as "x" and renamed "w" in the file. */
static const struct {
  const char *what;
  ps_decl first, second;
} TWICE[] = {
    {"dense, then with fewer optimizer slots", DENSE(100, ADAM), DENSE(100, SGD)},
    {"dense, then with more optimizer slots", DENSE(100, SGD), DENSE(100, ADAM)},
    {"dense, then with another size", DENSE(100, SGD), DENSE(7, SGD)},
    {"sparse, then with narrower rows", SPARSE(64, SGD), SPARSE(2, SGD)},
    {"dense, then sparse", DENSE(100, SGD), SPARSE(4, SGD)},
    {"the same declaration twice", DENSE(8, ADAGRAD), DENSE(8, ADAGRAD)},
};

static void declare(ps_state *st, ps_decl d, const char *name) {
  char err[256];
  uint32_t id;
  snprintf(d.name, sizeof d.name, "%s", name);
  assert_int_equal(ps_state_declare(st, &d, &id, err, sizeof err), 0);
  if (d.kind == PS_SPARSE) {
    unsigned char keys[16] = {5, 0, 0, 0, 0, 0, 0, 0, 9};
    float g[2 * 64] = {0.5f};
    assert_int_equal(ps_sparse_apply(st, st->vars[id], keys, g, 2, true), 0);
  }
}

/* Writes checkpoint 7 of first (as "w") and second (as "x", renamed to
 * "w" in the file when rename), SHA-256 made whole again, and commits it. */
static void write_ckpt(const char *dir, ps_decl first, ps_decl second, bool rename) {
  ps_state st;
  char err[256];
  ps_state_init(&st, 0, 1, 1 << 20, 64 << 20);
  declare(&st, first, "w");
  declare(&st, second, "x");
  assert_int_equal(ps_ckpt_write(&st, dir, 7, err, sizeof err), 0);
  ps_state_free(&st);
  char *path = loom__asprintf("%s/step-%012d/shard-0-of-1.bin", dir, 7), *b;
  size_t n;
  assert_int_equal(loom__read_file(path, 1 << 24, &b, &n), 0);
  if (rename) { /* the second declaration's name: u32 1, "x" */
    unsigned char *at = memmem(b, n - 32, "\x01\x00\x00\x00x", 5);
    assert_non_null(at);
    at[4] = 'w';
    unsigned int dl;
    assert_int_equal(EVP_Digest(b, n - 32, (unsigned char *)b + n - 32, &dl, EVP_sha256(), NULL),
                     1);
  }
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  fclose(f);
  free(b);
  free(path);
  assert_int_equal(ps_ckpt_commit(dir, 7, 1, 3, err, sizeof err), 0);
}

static void test_variable_twice(void **state) {
  (void)state;
  for (size_t i = 0; i < LOOM__ARRAY_LEN(TWICE); i++) {
    char *dir = test_tmpdir("ps-ckpt");
    write_ckpt(dir, TWICE[i].first, TWICE[i].second, true);
    /* loads into a shard whose own "live" variable must stay as it is */
    ps_state st;
    char err[512] = "";
    ps_state_init(&st, 0, 1, 1 << 20, 64 << 20);
    ps_decl live = DENSE(3, SGD);
    declare(&st, live, "live");
    float one = 1;
    ps_dense_apply(st.vars[0], 0, &one, 1, true);
    float before = st.vars[0]->w[0];
    assert_int_equal(ps_ckpt_verify(&st, dir, 7, err, sizeof err), 0); /* the digest holds */
    int rc = ps_ckpt_load(&st, dir, 7, err, sizeof err);
    if (rc != LOOM_EIO || !strstr(err, "holds variable 'w' twice"))
      fail_msg("%s: rc %d: %s", TWICE[i].what, rc, err);
    assert_int_equal(st.nvars, 1);
    assert_true(st.vars[0]->w[0] == before);
    ps_state_free(&st);
    test_rm_rf(dir);
    free(dir);
  }
}

static void test_distinct_names_load(void **state) {
  (void)state;
  for (size_t i = 0; i < LOOM__ARRAY_LEN(TWICE); i++) {
    char *dir = test_tmpdir("ps-ckpt");
    write_ckpt(dir, TWICE[i].first, TWICE[i].second, false);
    ps_state st;
    char err[512] = "";
    ps_state_init(&st, 0, 1, 1 << 20, 64 << 20);
    if (ps_ckpt_load(&st, dir, 7, err, sizeof err) != 0) fail_msg("%s: %s", TWICE[i].what, err);
    assert_int_equal(st.nvars, 2);
    assert_true(ps_state_find(&st, "w") >= 0 && ps_state_find(&st, "x") >= 0);
    ps_state_free(&st);
    test_rm_rf(dir);
    free(dir);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_variable_twice),
      cmocka_unit_test(test_distinct_names_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
