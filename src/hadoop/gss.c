/* gss.c: SASL GSSAPI over MIT's GSS-API, loaded at first use (see gss.h).
 *
 * The GSS-API's C types and constants are those of RFC 2744 (the C
 * bindings, the same ABI in every MIT release): gssapi.h from libkrb5-dev
 * gives them when it is installed, and the few loom uses are declared
 * here otherwise, so that building loom needs no Kerberos package. The
 * functions are looked up with dlsym into one table. */
#include "hadoop/gss.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* HGSS_OWN_DECLS: the declarations below even where the header is (to
 * check that they compile) */
#if defined(__has_include) && !defined(HGSS_OWN_DECLS)
#if __has_include(<gssapi/gssapi.h>)
#include <gssapi/gssapi.h>
#define HGSS_HAVE_HEADER 1
#endif
#endif

#ifndef HGSS_HAVE_HEADER
/* RFC 2744's types and constants, as MIT defines them on Linux. */
typedef uint32_t OM_uint32;
typedef OM_uint32 gss_qop_t;
typedef struct gss_name_struct *gss_name_t;
typedef struct gss_ctx_id_struct *gss_ctx_id_t;
typedef struct gss_cred_id_struct *gss_cred_id_t;
typedef struct gss_channel_bindings_struct *gss_channel_bindings_t;
typedef struct gss_OID_set_desc_struct *gss_OID_set;
typedef struct gss_OID_desc_struct {
  OM_uint32 length;
  void *elements;
} gss_OID_desc, *gss_OID;
typedef struct gss_buffer_desc_struct {
  size_t length;
  void *value;
} gss_buffer_desc, *gss_buffer_t;
#define GSS_C_NO_NAME ((gss_name_t)0)
#define GSS_C_NO_CONTEXT ((gss_ctx_id_t)0)
#define GSS_C_NO_CREDENTIAL ((gss_cred_id_t)0)
#define GSS_C_NO_CHANNEL_BINDINGS ((gss_channel_bindings_t)0)
#define GSS_C_NO_OID ((gss_OID)0)
#define GSS_C_NO_BUFFER ((gss_buffer_t)0)
#define GSS_C_NO_OID_SET ((gss_OID_set)0)
#define GSS_C_INDEFINITE 0xffffffffu
#define GSS_C_INITIATE 1
#define GSS_C_EMPTY_BUFFER                                                                         \
  { 0, NULL }
#define GSS_C_MUTUAL_FLAG 2
#define GSS_C_SEQUENCE_FLAG 8
#define GSS_C_CONF_FLAG 16
#define GSS_C_INTEG_FLAG 32
#define GSS_C_GSS_CODE 1
#define GSS_C_MECH_CODE 2
#define GSS_C_QOP_DEFAULT 0
#define GSS_S_COMPLETE 0
#define GSS_S_CONTINUE_NEEDED 1
#define GSS_S_NO_CRED (7u << 16)
#define GSS_S_CREDENTIALS_EXPIRED (11u << 16)
#define GSS_ERROR(x) ((x)&0xffff0000u)
#endif

/* Host-based service (1.2.840.113554.1.2.1.4) and krb5 principal
 * (1.2.840.113554.1.2.2.1) name types. */
static gss_OID_desc nt_hostbased = {10, (void *)"\x2a\x86\x48\x86\xf7\x12\x01\x02\x01\x04"};
static gss_OID_desc nt_krb5_principal = {10, (void *)"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x01"};

/* ---- the library ------------------------------------------------------ */

/* gss_key_value_element_desc and gss_key_value_set_desc of MIT's
 * gssapi_ext.h, under names of loom's (that header is not always
 * installed). */
struct hgss_kv {
  const char *key, *value;
};
struct hgss_kvset {
  OM_uint32 count;
  struct hgss_kv *elements;
};

static struct {
  OM_uint32 (*import_name)(OM_uint32 *, gss_buffer_t, gss_OID, gss_name_t *);
  OM_uint32 (*acquire_cred)(OM_uint32 *, gss_name_t, OM_uint32, gss_OID_set, int, gss_cred_id_t *,
                            gss_OID_set *, OM_uint32 *);
  OM_uint32 (*release_cred)(OM_uint32 *, gss_cred_id_t *);
  OM_uint32 (*release_name)(OM_uint32 *, gss_name_t *);
  OM_uint32 (*display_name)(OM_uint32 *, gss_name_t, gss_buffer_t, gss_OID *);
  OM_uint32 (*init_sec_context)(OM_uint32 *, gss_cred_id_t, gss_ctx_id_t *, gss_name_t, gss_OID,
                                OM_uint32, OM_uint32, gss_channel_bindings_t, gss_buffer_t,
                                gss_OID *, gss_buffer_t, OM_uint32 *, OM_uint32 *);
  OM_uint32 (*inquire_context)(OM_uint32 *, gss_ctx_id_t, gss_name_t *, gss_name_t *, OM_uint32 *,
                               gss_OID *, OM_uint32 *, int *, int *);
  OM_uint32 (*delete_sec_context)(OM_uint32 *, gss_ctx_id_t *, gss_buffer_t);
  OM_uint32 (*wrap)(OM_uint32 *, gss_ctx_id_t, int, gss_qop_t, gss_buffer_t, int *, gss_buffer_t);
  OM_uint32 (*unwrap)(OM_uint32 *, gss_ctx_id_t, gss_buffer_t, gss_buffer_t, int *, gss_qop_t *);
  OM_uint32 (*wrap_size_limit)(OM_uint32 *, gss_ctx_id_t, int, gss_qop_t, OM_uint32, OM_uint32 *);
  OM_uint32 (*release_buffer)(OM_uint32 *, gss_buffer_t);
  OM_uint32 (*display_status)(OM_uint32 *, OM_uint32, int, gss_OID, OM_uint32 *, gss_buffer_t);
  /* MIT's extension (gssapi_ext.h, krb5 1.11): credentials from a keytab
   * into a cache of loom's choosing; NULL in a library without it */
  OM_uint32 (*acquire_cred_from)(OM_uint32 *, gss_name_t, OM_uint32, gss_OID_set, int,
                                 const struct hgss_kvset *, gss_cred_id_t *, gss_OID_set *,
                                 OM_uint32 *);
} G;
static char g_load_err[512];
static bool g_loaded;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#define HGSS_LIB "libgssapi_krb5.so.2"

static void load(void) {
  void *h = dlopen(HGSS_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(g_load_err, sizeof g_load_err,
             "cannot load %s, MIT Kerberos' GSS-API library (Debian: libgssapi-krb5-2): %s",
             HGSS_LIB, e ? e : "not found");
    return;
  }
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
#define S(f) {"gss_" #f, offsetof(__typeof__(G), f)}
      S(import_name),    S(acquire_cred),     S(release_cred),    S(release_name),
      S(display_name),   S(init_sec_context), S(inquire_context), S(delete_sec_context),
      S(wrap),           S(unwrap),           S(wrap_size_limit), S(release_buffer),
      S(display_status),
#undef S
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(h, syms[i].name);
    if (!f) {
      snprintf(g_load_err, sizeof g_load_err, "%s has no %s", HGSS_LIB, syms[i].name);
      dlclose(h);
      return;
    }
    memcpy((char *)&G + syms[i].off, &f, sizeof f);
  }
  void *f = dlsym(h, "gss_acquire_cred_from");
  memcpy(&G.acquire_cred_from, &f, sizeof f);
  g_loaded = true; /* h stays open for the process's life */
}

static int loaded(char *err, size_t errlen) {
  pthread_once(&g_once, load);
  if (g_loaded) return 0;
  snprintf(err, errlen, "Kerberos: %s", g_load_err);
  return LOOM_ENOTSUP;
}

/* The library's words for a major and minor status, into out. */
static void status_text(OM_uint32 major, OM_uint32 minor, char *out, size_t outlen) {
  size_t at = 0;
  out[0] = 0;
  for (int kind = GSS_C_GSS_CODE; kind <= GSS_C_MECH_CODE; kind++) {
    OM_uint32 code = kind == GSS_C_GSS_CODE ? major : minor, ctx = 0, m;
    if (kind == GSS_C_MECH_CODE && !minor) break;
    for (int i = 0; i < 4; i++) {
      gss_buffer_desc b = GSS_C_EMPTY_BUFFER;
      if (GSS_ERROR(G.display_status(&m, code, kind, GSS_C_NO_OID, &ctx, &b))) break;
      int k = snprintf(out + at, outlen - at, "%s%.*s", at ? "; " : "", (int)b.length,
                       (const char *)b.value);
      G.release_buffer(&m, &b);
      if (k > 0) at += (size_t)k < outlen - at ? (size_t)k : outlen - at - 1;
      if (!ctx) break;
    }
  }
}

/* err for a failed GSS call: no ticket (or an expired one) in plain
 * words and "run kinit", anything else with the library's words. */
static int gss_fail(OM_uint32 major, OM_uint32 minor, const char *what, char *err, size_t errlen) {
  char why[600];
  status_text(major, minor, why, sizeof why);
  OM_uint32 routine = major & 0x00ff0000u;
  /* no cache, an empty one, or only expired tickets in it (MIT says the
   * last as a failure whose minor status reads "... expired") */
  if (routine == GSS_S_NO_CRED || routine == GSS_S_CREDENTIALS_EXPIRED ||
      (!strstr(what, "answer") && strstr(why, "xpired"))) {
    const char *cc = getenv("KRB5CCNAME");
    snprintf(err, errlen,
             "Kerberos: no valid ticket in the credentials cache (%s%s): run kinit (GSS-API: %s)",
             cc && *cc ? "KRB5CCNAME=" : "the default cache", cc && *cc ? cc : "", why);
  } else {
    snprintf(err, errlen, "Kerberos: %s: %s", what, why);
  }
  return LOOM_EAUTH;
}

/* ---- pure parts ------------------------------------------------------- */

int hgss_parse_offer(const uint8_t *p, size_t n, int *mask, uint32_t *maxbuf) {
  if (n != 4 || !p) return -1;
  if (!p[0] || (p[0] & ~7)) return -1;
  *mask = p[0];
  *maxbuf = (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
  return 0;
}

int hgss_choose_layer(int mask, int allowed) {
  static const int order[] = {HGSS_LAYER_PRIVACY, HGSS_LAYER_INTEGRITY, HGSS_LAYER_NONE};
  for (size_t i = 0; i < 3; i++)
    if (mask & allowed & order[i]) return order[i];
  return 0;
}

/* Whether s (at most max bytes) is printable ASCII with none of bad. */
static bool clean(const char *s, size_t max, const char *bad) {
  size_t n = 0;
  for (; s[n]; n++)
    if (n >= max || (unsigned char)s[n] < 0x21 || (unsigned char)s[n] > 0x7e || strchr(bad, s[n]))
      return false;
  return true;
}

int hgss_target(const char *protocol, const char *server_id, const char *conf, const char *host,
                char *out, size_t outlen, char *err, size_t errlen) {
  if (!protocol || !server_id || !*protocol || !*server_id || !clean(protocol, 64, "/@") ||
      !clean(server_id, 255, "/@")) {
    snprintf(err, errlen,
             "Kerberos: the server names no usable principal (protocol and server id must be "
             "printable, without / or @)");
    return -1;
  }
  if (!conf || !*conf) {
    if ((size_t)snprintf(out, outlen, "%s/%s", protocol, server_id) >= outlen) {
      snprintf(err, errlen, "Kerberos: the server's principal is too long");
      return -1;
    }
    return 0;
  }
  /* conf with _HOST replaced by the URL's host, lowercased */
  char want[512];
  size_t w = 0;
  for (const char *s = conf; *s; s++) {
    if (!strncmp(s, "_HOST", 5)) {
      for (const char *h = host ? host : ""; *h && w + 1 < sizeof want; h++)
        want[w++] = (char)((*h >= 'A' && *h <= 'Z') ? *h + 32 : *h);
      s += 4;
    } else if (w + 1 < sizeof want) {
      want[w++] = *s;
    }
  }
  want[w] = 0;
  const char *slash = strchr(want, '/'), *at = strchr(want, '@');
  size_t plen = slash ? (size_t)(slash - want) : 0;
  size_t ilen = slash ? (size_t)((at ? at : want + w) - slash - 1) : 0;
  if (!slash || (at && at < slash) || strlen(protocol) != plen || strncmp(protocol, want, plen) ||
      strlen(server_id) != ilen || strncmp(server_id, slash + 1, ilen)) {
    snprintf(err, errlen,
             "Kerberos: the server is %s/%s, and the configuration "
             "(dfs.namenode.kerberos.principal) expects %s",
             protocol, server_id, want);
    return -1;
  }
  if ((size_t)snprintf(out, outlen, "%s", want) >= outlen) {
    snprintf(err, errlen, "Kerberos: the configured principal is too long");
    return -1;
  }
  return 0;
}

/* ---- the context ------------------------------------------------------ */

struct hgss {
  gss_cred_id_t cred; /* the user's, from the ticket cache */
  gss_ctx_id_t ctx;
  gss_name_t target;
  int layer;
  char principal[256];
};

/* Copies a GSS buffer into a malloc'd one (NULL, 0 when empty). */
static int take(gss_buffer_desc *b, uint8_t **out, size_t *outlen) {
  OM_uint32 m;
  *out = NULL;
  *outlen = 0;
  if (b->length) {
    if (!(*out = malloc(b->length))) {
      G.release_buffer(&m, b);
      return LOOM_ENOMEM;
    }
    memcpy(*out, b->value, b->length);
    *outlen = b->length;
  }
  G.release_buffer(&m, b);
  return 0;
}

static int init_step(hgss *g, const uint8_t *in, size_t n, uint8_t **tok, size_t *toklen,
                     bool *done, char *err, size_t errlen) {
  OM_uint32 minor = 0, flags = 0;
  gss_buffer_desc ib = {n, (void *)in}, ob = GSS_C_EMPTY_BUFFER;
  OM_uint32 major = G.init_sec_context(
      &minor, g->cred, &g->ctx, g->target, GSS_C_NO_OID,
      GSS_C_MUTUAL_FLAG | GSS_C_SEQUENCE_FLAG | GSS_C_CONF_FLAG | GSS_C_INTEG_FLAG, 0,
      GSS_C_NO_CHANNEL_BINDINGS, in ? &ib : GSS_C_NO_BUFFER, NULL, &ob, &flags, NULL);
  if (GSS_ERROR(major)) {
    OM_uint32 m;
    G.release_buffer(&m, &ob);
    return gss_fail(major, minor, in ? "the server's answer to the context" : "a service ticket",
                    err, errlen);
  }
  *done = major == GSS_S_COMPLETE;
  if (*done && !(flags & GSS_C_MUTUAL_FLAG)) {
    OM_uint32 m;
    G.release_buffer(&m, &ob);
    snprintf(err, errlen, "Kerberos: the server did not authenticate itself (no mutual auth)");
    return LOOM_EAUTH;
  }
  if (*done) {
    gss_name_t src = GSS_C_NO_NAME;
    gss_buffer_desc nb = GSS_C_EMPTY_BUFFER;
    OM_uint32 m;
    if (!GSS_ERROR(G.inquire_context(&m, g->ctx, &src, NULL, NULL, NULL, NULL, NULL, NULL)) &&
        !GSS_ERROR(G.display_name(&m, src, &nb, NULL))) {
      size_t k = nb.length < sizeof g->principal - 1 ? nb.length : sizeof g->principal - 1;
      memcpy(g->principal, nb.value, k);
      g->principal[k] = 0;
      G.release_buffer(&m, &nb);
    }
    if (src) G.release_name(&m, &src);
  }
  return take(&ob, tok, toklen);
}

/* g->cred for LOOM_KERBEROS_PRINCIPAL from keytab: MIT gets a ticket
 * from the keytab into a memory cache of this process (kept for the next
 * connection, and renewed from the keytab when it ends), so nothing of it
 * is written to a file and the user's ticket cache is not touched. */
static int keytab_cred(hgss *g, const char *keytab, char *err, size_t errlen) {
  const char *principal = loom__tun_env(LOOM_TUN_KERBEROS_PRINCIPAL);
  if (!principal) {
    snprintf(err, errlen,
             "Kerberos: a keytab (LOOM_KERBEROS_KEYTAB=%s) needs the principal to log in as "
             "(--principal, LOOM_KERBEROS_PRINCIPAL)",
             keytab);
    return LOOM_EINVAL;
  }
  if (access(keytab, R_OK) < 0) {
    snprintf(err, errlen, "Kerberos: cannot read the keytab %s: %s", keytab, strerror(errno));
    return LOOM_EAUTH;
  }
  if (!G.acquire_cred_from) {
    snprintf(err, errlen,
             "Kerberos: %s has no gss_acquire_cred_from (MIT krb5 1.11 or later): log in with "
             "kinit -k -t %s %s instead",
             HGSS_LIB, keytab, principal);
    return LOOM_ENOTSUP;
  }
  OM_uint32 minor = 0, m;
  gss_name_t name = GSS_C_NO_NAME;
  gss_buffer_desc nb = {strlen(principal), (void *)principal};
  OM_uint32 major = G.import_name(&minor, &nb, &nt_krb5_principal, &name);
  if (GSS_ERROR(major)) return gss_fail(major, minor, "the principal to log in as", err, errlen);
  struct hgss_kv kv[] = {{"client_keytab", keytab}, {"ccache", "MEMORY:loom-keytab"}};
  struct hgss_kvset set = {2, kv};
  OM_uint32 life = 0;
  major = G.acquire_cred_from(&minor, name, GSS_C_INDEFINITE, GSS_C_NO_OID_SET, GSS_C_INITIATE,
                              &set, &g->cred, NULL, &life);
  G.release_name(&m, &name);
  if (GSS_ERROR(major) || life == 0) {
    char why[600];
    status_text(major, minor, why, sizeof why);
    snprintf(err, errlen, "Kerberos: cannot log in as %s with the keytab %s: %s", principal, keytab,
             why[0] ? why : "no ticket");
    return LOOM_EAUTH;
  }
  return 0;
}

int hgss_start(const char *target, bool hostbased, hgss **out, uint8_t **tok, size_t *toklen,
               char *err, size_t errlen) {
  *out = NULL;
  int rc = loaded(err, errlen);
  if (rc < 0) return rc;
  hgss *g = calloc(1, sizeof *g);
  if (!g) return LOOM_ENOMEM;
  OM_uint32 minor = 0;
  gss_buffer_desc nb = {strlen(target), (void *)target};
  OM_uint32 major =
      G.import_name(&minor, &nb, hostbased ? &nt_hostbased : &nt_krb5_principal, &g->target);
  if (GSS_ERROR(major)) {
    free(g);
    return gss_fail(major, minor, "the server principal", err, errlen);
  }
  /* the user's credentials first: a cache whose ticket has expired is
   * refused here, not left to the KDC (which takes a ticket a few minutes
   * past its end, its clock skew) */
  OM_uint32 life = 0;
  const char *keytab = loom__tun_env(LOOM_TUN_KERBEROS_KEYTAB);
  if (keytab) {
    rc = keytab_cred(g, keytab, err, errlen);
    if (rc < 0) {
      hgss_free(g);
      return rc;
    }
  } else {
    major = G.acquire_cred(&minor, GSS_C_NO_NAME, GSS_C_INDEFINITE, GSS_C_NO_OID_SET,
                           GSS_C_INITIATE, &g->cred, NULL, &life);
  }
  if (!keytab && (GSS_ERROR(major) || life == 0)) {
    if (!GSS_ERROR(major)) major = GSS_S_CREDENTIALS_EXPIRED;
    hgss_free(g);
    return gss_fail(major, minor, "the credentials", err, errlen);
  }
  bool done = false;
  rc = init_step(g, NULL, 0, tok, toklen, &done, err, errlen);
  if (rc < 0) {
    hgss_free(g);
    return rc;
  }
  *out = g;
  return 0;
}

int hgss_step(hgss *g, const uint8_t *in, size_t n, uint8_t **tok, size_t *toklen, bool *done,
              char *err, size_t errlen) {
  return init_step(g, in, n, tok, toklen, done, err, errlen);
}

const char *hgss_principal(const hgss *g) { return g->principal; }

int hgss_negotiate(hgss *g, const uint8_t *in, size_t n, int allowed, int *layer, size_t *max_send,
                   uint8_t **tok, size_t *toklen, char *err, size_t errlen) {
  uint8_t *plain = NULL;
  size_t pn = 0;
  char why[600];
  if (hgss_unwrap(g, in, n, &plain, &pn, why, sizeof why) < 0) {
    snprintf(err, errlen, "Kerberos: the server's offer of security layers: %s", why);
    return LOOM_EPROTO;
  }
  int mask = 0;
  uint32_t maxbuf = 0;
  int bad = hgss_parse_offer(plain, pn, &mask, &maxbuf);
  free(plain);
  if (bad) {
    snprintf(err, errlen, "Kerberos: the server's offer of security layers is malformed");
    return LOOM_EPROTO;
  }
  int chosen = hgss_choose_layer(mask, allowed);
  if (!chosen) {
    snprintf(err, errlen,
             "Kerberos: no common protection: the server offers mask %d (1 authentication, 2 "
             "integrity, 4 privacy), hadoop.rpc.protection allows mask %d",
             mask, allowed);
    return LOOM_EAUTH;
  }
  *layer = g->layer = chosen;
  /* the most plain bytes one message may carry so that the wrapped one
   * fits the server's buffer */
  size_t cap = maxbuf ? maxbuf : 65536;
  OM_uint32 m, lim = 0;
  if (chosen != HGSS_LAYER_NONE &&
      !GSS_ERROR(G.wrap_size_limit(&m, g->ctx, chosen == HGSS_LAYER_PRIVACY, GSS_C_QOP_DEFAULT,
                                   (OM_uint32)cap, &lim)) &&
      lim > 0)
    cap = lim;
  else if (cap > 128)
    cap -= 128;
  *max_send = cap;
  uint32_t mine = chosen == HGSS_LAYER_NONE ? 0 : HGSS_MAXBUF;
  uint8_t ans[4] = {(uint8_t)chosen, (uint8_t)(mine >> 16), (uint8_t)(mine >> 8), (uint8_t)mine};
  /* the answer is wrapped without confidentiality, as the offer was */
  int save = g->layer;
  g->layer = HGSS_LAYER_INTEGRITY;
  int rc = hgss_wrap(g, ans, sizeof ans, tok, toklen, why, sizeof why);
  g->layer = save;
  if (rc < 0) {
    snprintf(err, errlen, "Kerberos: cannot wrap the choice of layer: %s", why);
    return LOOM_EAUTH;
  }
  return 0;
}

int hgss_wrap(hgss *g, const uint8_t *in, size_t n, uint8_t **out, size_t *outlen, char *err,
              size_t errlen) {
  OM_uint32 minor = 0;
  int conf = 0;
  gss_buffer_desc ib = {n, (void *)in}, ob = GSS_C_EMPTY_BUFFER;
  OM_uint32 major =
      G.wrap(&minor, g->ctx, g->layer == HGSS_LAYER_PRIVACY, GSS_C_QOP_DEFAULT, &ib, &conf, &ob);
  if (GSS_ERROR(major) || (g->layer == HGSS_LAYER_PRIVACY && !conf)) {
    OM_uint32 m;
    G.release_buffer(&m, &ob);
    status_text(major, minor, err, errlen);
    if (!GSS_ERROR(major)) snprintf(err, errlen, "no confidentiality where privacy was chosen");
    return -1;
  }
  if (take(&ob, out, outlen) < 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  return 0;
}

int hgss_unwrap(hgss *g, const uint8_t *in, size_t n, uint8_t **out, size_t *outlen, char *err,
                size_t errlen) {
  OM_uint32 minor = 0;
  int conf = 0;
  gss_qop_t qop = 0;
  gss_buffer_desc ib = {n, (void *)in}, ob = GSS_C_EMPTY_BUFFER;
  OM_uint32 major = G.unwrap(&minor, g->ctx, &ib, &ob, &conf, &qop);
  if (GSS_ERROR(major) || (major & 0xffff) || (g->layer == HGSS_LAYER_PRIVACY && !conf)) {
    OM_uint32 m;
    G.release_buffer(&m, &ob);
    if (GSS_ERROR(major))
      status_text(major, minor, err, errlen);
    else if (major & 0xffff)
      snprintf(err, errlen, "a replayed, old or out-of-order message (GSS status 0x%x)",
               (unsigned)major);
    else
      snprintf(err, errlen, "a message without confidentiality where privacy was chosen");
    return -1;
  }
  if (take(&ob, out, outlen) < 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  return 0;
}

void hgss_free(hgss *g) {
  if (!g) return;
  OM_uint32 m;
  if (g->ctx) G.delete_sec_context(&m, &g->ctx, GSS_C_NO_BUFFER);
  if (g->target) G.release_name(&m, &g->target);
  if (g->cred) G.release_cred(&m, &g->cred);
  free(g);
}
