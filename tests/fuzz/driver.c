/* driver.c: runs a libFuzzer harness without libFuzzer. Each argument is a
 * file, or a directory whose files are each, passed to
 * LLVMFuzzerTestOneInput once: the committed corpus as a regression test
 * in every build (ctest), and a way to replay a crash the fuzzer found.
 * Fails when an input cannot be read or the corpus is empty; a harness
 * that finds a broken contract aborts. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "driver: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 1 << 20, n;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    fclose(f);
    return -1;
  }
  n = fread(buf, 1, cap, f);
  fclose(f);
  /* an exact-size copy, so ASan sees reads past the input's end */
  uint8_t *in = malloc(n ? n : 1);
  if (!in) {
    free(buf);
    return -1;
  }
  memcpy(in, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(in, n);
  free(in);
  return 1;
}

int main(int argc, char **argv) {
  int ran = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "driver: %s: no such file or directory\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (run_file(argv[i]) < 0) return 1;
      ran++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) return 1;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
      if (run_file(p) < 0) {
        closedir(d);
        return 1;
      }
      ran++;
    }
    closedir(d);
  }
  printf("driver: %d inputs ran\n", ran);
  return ran > 0 ? 0 : 1;
}
