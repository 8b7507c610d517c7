/* kvprobe.c: a task that exercises libloom's base through a real job:
 * identity, KV set / get-with-wait / add, events, and a get that times
 * out. Prints one line "KVOK ..." on success; exits non-zero with the
 * reason otherwise. */
#include <loom.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "kvprobe: %s:%d: ", __FILE__, __LINE__);                                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

int main(void) {
  loom_t *l;
  int rc = loom_init(&l);
  CHECK(rc == 0, "loom_init: %s", loom_strerror(rc));
  int r = loom_rank(l), n = loom_world_size(l);
  CHECK(r >= 0 && r < n, "rank %d world %d", r, n);
  CHECK(!strcmp(loom_role(l), getenv("LOOM_ROLE")), "role %s", loom_role(l));
  char key[64], val[64];
  snprintf(key, sizeof key, "probe/%d", r);
  snprintf(val, sizeof val, "value-of-%d", r * 7);
  rc = loom_kv_set(l, key, val, strlen(val));
  CHECK(rc == 0, "kv_set: %s %s", loom_strerror(rc), loom_errmsg(l));
  long sum = 0;
  for (int p = 0; p < n; p++) {
    void *v;
    size_t len;
    snprintf(key, sizeof key, "probe/%d", p);
    rc = loom_kv_get(l, key, 20000, &v, &len);
    CHECK(rc == 0, "kv_get %s: %s %s", key, loom_strerror(rc), loom_errmsg(l));
    int x;
    CHECK(sscanf(v, "value-of-%d", &x) == 1 && x == p * 7, "bad value '%s' for %s", (char *)v, key);
    CHECK(len == strlen(v), "length %zu", len);
    sum += x;
    free(v);
  }
  int64_t after;
  rc = loom_kv_add(l, "probe/count", 1, &after);
  CHECK(rc == 0 && after >= 1 && after <= n, "kv_add: %s -> %lld", loom_strerror(rc),
        (long long)after);
  void *v;
  size_t len;
  rc = loom_kv_get(l, "probe/never-set", 200, &v, &len);
  CHECK(rc == LOOM_ETIMEDOUT, "get of a missing key returned %s", loom_err_name(rc));
  char detail[64];
  snprintf(detail, sizeof detail, "{\"rank\": %d, \"sum\": %ld}", r, sum);
  rc = loom_event(l, "probe_done", detail);
  CHECK(rc == 0, "loom_event: %s", loom_strerror(rc));
  rc = loom_event(l, "bad", "{not json");
  CHECK(rc == LOOM_EINVAL, "bad event detail accepted");
  if (getenv("KVPROBE_BIG")) { /* the largest value allowed, and a large event */
    size_t big = LOOM_KV_MAX_VALUE;
    unsigned char *b = malloc(big);
    CHECK(b != NULL, "out of memory");
    for (size_t i = 0; i < big; i++) b[i] = (unsigned char)(i * 2654435761u >> 13);
    if (r == 0) {
      rc = loom_kv_set(l, "probe/big", b, big);
      CHECK(rc == 0, "kv_set of %zu bytes: %s %s", big, loom_strerror(rc), loom_errmsg(l));
      rc = loom_kv_set(l, "probe/too-big", b, big + 1);
      CHECK(rc == LOOM_EINVAL || rc == LOOM_ERANGE, "kv_set past the limit returned %s",
            loom_err_name(rc));
    }
    void *got;
    size_t glen;
    rc = loom_kv_get(l, "probe/big", 20000, &got, &glen);
    CHECK(rc == 0, "kv_get of the big value: %s %s", loom_strerror(rc), loom_errmsg(l));
    CHECK(glen == big && !memcmp(got, b, big), "big value differs (%zu bytes)", glen);
    free(got);
    /* an event whose detail is 512 KiB of text */
    size_t elen = 512 << 10;
    char *ev = malloc(elen + 64);
    CHECK(ev != NULL, "out of memory");
    int k = snprintf(ev, 64, "{\"rank\": %d, \"blob\": \"", r);
    memset(ev + k, 'a' + r % 26, elen);
    strcpy(ev + k + elen, "\"}");
    rc = loom_event(l, "probe_big", ev);
    CHECK(rc == 0, "loom_event of %zu bytes: %s %s", elen, loom_strerror(rc), loom_errmsg(l));
    free(ev);
    free(b);
    printf("KVBIG rank=%d bytes=%zu\n", r, big);
  }
  printf("KVOK rank=%d world=%d sum=%ld\n", r, n, sum);
  loom_finish(l);
  return 0;
}
