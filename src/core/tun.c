/* tun.c: the tunables table and its one accessor; see tun.h. */
#include "core/core.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const loom__tun_info table[] = {
#define LOOM__TUN_ROW_N(name, env, def, min, max, kind, doc)                                       \
  {env, LOOM_TUN_KIND_##kind, def, min, max, NULL, NULL, doc},
#define LOOM__TUN_ROW_W(name, env, def, choices, doc)                                              \
  {env, LOOM_TUN_KIND_WORD, 0, 0, 0, def, choices, doc},
    LOOM_TUNABLES(LOOM__TUN_ROW_N, LOOM__TUN_ROW_W)
#undef LOOM__TUN_ROW_N
#undef LOOM__TUN_ROW_W
};

/* Whether a tunable's bad value was reported already: once per process. */
static int warned[LOOM_TUN__COUNT];

const loom__tun_info *loom__tun_info_of(loom__tunable t) {
  return (unsigned)t < LOOM_TUN__COUNT ? &table[t] : NULL;
}

void loom__tun_fmt(loom__tun_kind kind, long long v, char *buf, size_t len) {
  static const struct {
    long long unit;
    const char *name;
  } sizes[] = {{1LL << 40, "TiB"}, {LOOM__GIB, "GiB"}, {LOOM__MIB, "MiB"}, {LOOM__KIB, "KiB"}};
  if (kind == LOOM_TUN_KIND_BYTES && v > 0) {
    for (size_t i = 0; i < LOOM__ARRAY_LEN(sizes); i++)
      if (v % sizes[i].unit == 0) {
        snprintf(buf, len, "%lld %s", v / sizes[i].unit, sizes[i].name);
        return;
      }
  }
  snprintf(buf, len, "%lld%s", v, kind == LOOM_TUN_KIND_MS ? " ms" : "");
}

/* "4 KiB..1 GiB" or "auto|shm|tcp". */
static void range_of(const loom__tun_info *i, char *buf, size_t len) {
  if (i->kind == LOOM_TUN_KIND_WORD) {
    snprintf(buf, len, "%s", i->choices ? i->choices : "any");
    return;
  }
  char lo[32], hi[32];
  loom__tun_fmt(i->kind, i->min, lo, sizeof lo);
  loom__tun_fmt(i->kind, i->max, hi, sizeof hi);
  snprintf(buf, len, "%s..%s", lo, hi);
}

static bool is_choice(const char *choices, const char *v) {
  size_t n = strlen(v);
  for (const char *c = choices; c && *c;) {
    const char *bar = strchr(c, '|');
    size_t l = bar ? (size_t)(bar - c) : strlen(c);
    if (l == n && !strncmp(c, v, n)) return true;
    c = bar ? bar + 1 : c + l;
  }
  return false;
}

/* A duration with its unit, as the spec writes them: "500ms", "20s",
 * "2m", "1h" (a whole number, then the unit), into milliseconds. */
static int parse_duration(const char *v, long long *ms) {
  static const struct {
    const char *unit;
    long long ms;
  } U[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
  size_t n = strlen(v), d = strspn(v, "0123456789");
  if (d == 0 || d > 15) return LOOM_EINVAL;
  for (size_t k = 0; k < sizeof U / sizeof U[0]; k++) {
    if (n - d != strlen(U[k].unit) || strcmp(v + d, U[k].unit) != 0) continue;
    char num[16];
    memcpy(num, v, d);
    num[d] = 0;
    long long x;
    if (loom__parse_int(num, 0, LLONG_MAX, &x) < 0) return LOOM_EINVAL;
    *ms = x * U[k].ms;
    return 0;
  }
  return LOOM_EINVAL;
}

int loom__tun_check(loom__tunable t, const char *v, long long *out, char *why, size_t whylen) {
  const loom__tun_info *i = loom__tun_info_of(t);
  if (!i || !v) return LOOM_EINVAL;
  char range[96], def[48];
  range_of(i, range, sizeof range);
  if (i->kind == LOOM_TUN_KIND_WORD) {
    if (!i->choices || is_choice(i->choices, v)) return 0;
    if (why)
      snprintf(why, whylen, "%s=%s is not one of %s; using the default %s", i->env, v, range,
               i->sdef);
    return LOOM_EINVAL;
  }
  loom__tun_fmt(i->kind, i->def, def, sizeof def);
  long long x;
  int rc = loom__parse_int(v, LLONG_MIN, LLONG_MAX, &x);
  if (rc < 0 && i->kind == LOOM_TUN_KIND_MS) rc = parse_duration(v, &x);
  if (rc == 0 && (x < i->min || x > i->max)) rc = LOOM_ERANGE;
  if (rc == 0) {
    if (out) *out = x;
    return 0;
  }
  if (why)
    snprintf(why, whylen, "%s=%s is %s (%s); using the default %s", i->env, v,
             rc == LOOM_ERANGE ? "out of range" : "not a whole number", range, def);
  return rc == LOOM_ERANGE ? LOOM_ERANGE : LOOM_EINVAL;
}

static void warn_once(loom__tunable t, const char *why) {
  if (__atomic_exchange_n(&warned[t], 1, __ATOMIC_RELAXED) == 0)
    loom__log(LOOM_LOG_WARN, "core", "%s", why);
}

long long loom__tun(loom__tunable t) {
  const loom__tun_info *i = loom__tun_info_of(t);
  if (!i || i->kind == LOOM_TUN_KIND_WORD) return 0;
  const char *v = getenv(i->env);
  if (!v || !*v) return i->def;
  long long x;
  char why[512];
  if (loom__tun_check(t, v, &x, why, sizeof why) == 0) return x;
  warn_once(t, why);
  return i->def;
}

bool loom__tun_internal(loom__tunable t) {
  const loom__tun_info *i = loom__tun_info_of(t);
  return i && !strncmp(i->doc, "internal:", 9);
}

const char *loom__tun_raw(loom__tunable t) {
  const loom__tun_info *i = loom__tun_info_of(t);
  return i ? getenv(i->env) : NULL;
}

const char *loom__tun_env(loom__tunable t) {
  const loom__tun_info *i = loom__tun_info_of(t);
  const char *v = i ? getenv(i->env) : NULL;
  return v && *v ? v : NULL;
}

const char *loom__tun_str(loom__tunable t) {
  const loom__tun_info *i = loom__tun_info_of(t);
  if (!i || i->kind != LOOM_TUN_KIND_WORD) return "";
  const char *v = getenv(i->env);
  if (!v || !*v) return i->sdef;
  char why[512];
  if (loom__tun_check(t, v, NULL, why, sizeof why) == 0) return v;
  warn_once(t, why);
  return i->sdef;
}
