/* creds.c: the reader of Hadoop's credentials files (see creds.h): both
 * of the formats Hadoop's Credentials writes, the WRITABLE layout with
 * Hadoop's VInts and a delimited CredentialsProto, every length checked
 * against what is left. */
#include "hadoop/creds.h"

#include "Security.pb-c.h"
#include "core/bytes.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hadoop's WritableUtils VInt/VLong: one byte for -112..127, else a
 * length byte and up to 8 big-endian bytes (negated for negatives). 0
 * with *v, or -1 when it runs past the end. */
static int read_vlong(const uint8_t *b, size_t len, size_t *at, int64_t *v) {
  if (*at >= len) return -1;
  int8_t first = (int8_t)b[(*at)++];
  if (first >= -112) {
    *v = first;
    return 0;
  }
  int n = first < -120 ? -120 - first : -112 - first; /* the bytes that follow */
  if (n < 1 || n > 8 || len - *at < (size_t)n) return -1;
  uint64_t u = 0;
  for (int i = 0; i < n; i++) u = (u << 8) | b[(*at)++];
  *v = first < -120 ? (int64_t)~u : (int64_t)u;
  return 0;
}

/* A VInt length then that many bytes: *p points into b. */
static int read_bytes(const uint8_t *b, size_t len, size_t *at, const uint8_t **p, size_t *n) {
  int64_t l;
  if (read_vlong(b, len, at, &l) < 0 || l < 0 || (uint64_t)l > len - *at) return -1;
  *p = b + *at;
  *n = (size_t)l;
  *at += (size_t)l;
  return 0;
}

static int cred_take(hyarn_cred_token *out, const uint8_t *id, size_t idl, const uint8_t *pw,
                     size_t pwl, const uint8_t *kind, size_t kl, const uint8_t *svc, size_t sl) {
  memset(out, 0, sizeof *out);
  out->identifier = malloc(idl ? idl : 1);
  out->password = malloc(pwl ? pwl : 1);
  if (!out->identifier || !out->password) {
    hyarn_cred_token_free(out);
    return LOOM_ENOMEM;
  }
  /* an empty field may come as NULL (protobuf-c's unpacking) */
  if (idl) memcpy(out->identifier, id, idl);
  if (pwl) memcpy(out->password, pw, pwl);
  out->identifier_len = idl;
  out->password_len = pwl;
  snprintf(out->kind, sizeof out->kind, "%.*s", (int)(kl < 127 ? kl : 127), (const char *)kind);
  snprintf(out->service, sizeof out->service, "%.*s", (int)(sl < 255 ? sl : 255),
           (const char *)svc);
  return 0;
}

/* The opening of a credentials file, for both readers. PROTOBUF: *c is the
 * unpacked CredentialsProto (the caller frees it). WRITABLE: *c is NULL,
 * *count the number of tokens and *at where the first one starts. */
static int creds_open(const uint8_t *buf, size_t len, Hadoop__Common__CredentialsProto **c,
                      size_t *at, int64_t *count, char *err, size_t errlen) {
  *c = NULL;
  *at = 5;
  *count = 0;
  if (len < 5 || memcmp(buf, "HDTS", 4) != 0) {
    snprintf(err, errlen, "not a Hadoop credentials file (it does not start with HDTS)");
    return LOOM_EPROTO;
  }
  if (buf[4] == 1) { /* PROTOBUF: a delimited CredentialsProto */
    uint32_t ml;
    size_t vn = loom__varint_get32(buf + *at, len - *at, &ml);
    if (!vn || ml > len - *at - vn) {
      snprintf(err, errlen, "the credentials' length is past the file's end");
      return LOOM_EPROTO;
    }
    *c = hadoop__common__credentials_proto__unpack(NULL, ml, buf + *at + vn);
    if (!*c) {
      snprintf(err, errlen, "the credentials are not a CredentialsProto");
      return LOOM_EPROTO;
    }
    return 0;
  }
  if (buf[4] != 0) {
    snprintf(err, errlen, "credentials format %d is not known (0 WRITABLE, 1 PROTOBUF)", buf[4]);
    return LOOM_EPROTO;
  }
  if (read_vlong(buf, len, at, count) < 0 || *count < 0 || *count > 1 << 20) {
    snprintf(err, errlen, "the credentials' token count is malformed");
    return LOOM_EPROTO;
  }
  return 0;
}

/* Token i (from 0) of a WRITABLE file at *at: its alias, identifier,
 * password, kind and service in f[0..4]. */
static int read_token(const uint8_t *buf, size_t len, size_t *at, int64_t i, const uint8_t *f[5],
                      size_t fl[5], char *err, size_t errlen) {
  for (int k = 0; k < 5; k++)
    if (read_bytes(buf, len, at, &f[k], &fl[k]) < 0) {
      snprintf(err, errlen, "token %lld of the credentials runs past the file's end",
               (long long)i + 1);
      return LOOM_EPROTO;
    }
  return 0;
}

int hyarn_creds_find(const uint8_t *buf, size_t len, const char *kind, hyarn_cred_token *out,
                     char *err, size_t errlen) {
  return hyarn_creds_find_for(buf, len, kind, NULL, out, err, errlen);
}

/* Whether a token's service (l bytes at s) is the one asked for (any when
 * want is NULL). */
static bool service_is(const char *want, const void *s, size_t l) {
  return !want || (strlen(want) == l && (!l || !memcmp(want, s, l)));
}

int hyarn_creds_find_for(const uint8_t *buf, size_t len, const char *kind, const char *service,
                         hyarn_cred_token *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  Hadoop__Common__CredentialsProto *c;
  size_t at;
  int64_t count;
  int orc = creds_open(buf, len, &c, &at, &count, err, errlen);
  if (orc < 0) return orc;
  if (c) {
    int rc = LOOM_ENOENT;
    for (size_t i = 0; i < c->n_tokens && rc == LOOM_ENOENT; i++) {
      const Hadoop__Common__TokenProto *t = c->tokens[i]->token;
      if (t && t->kind && !strcmp(t->kind, kind) &&
          service_is(service, t->service, t->service ? strlen(t->service) : 0))
        rc = cred_take(out, t->identifier.data, t->identifier.len, t->password.data,
                       t->password.len, (const uint8_t *)t->kind, strlen(t->kind),
                       (const uint8_t *)t->service, strlen(t->service));
    }
    protobuf_c_message_free_unpacked(&c->base, NULL);
    if (rc == LOOM_ENOENT)
      snprintf(err, errlen, "no %s token%s%s in the credentials", kind, service ? " for " : "",
               service ? service : "");
    return rc;
  }
  for (int64_t i = 0; i < count; i++) {
    const uint8_t *f[5]; /* alias, identifier, password, kind, service */
    size_t fl[5];
    if (read_token(buf, len, &at, i, f, fl, err, errlen) < 0) return LOOM_EPROTO;
    if (fl[3] == strlen(kind) && !memcmp(f[3], kind, fl[3]) && service_is(service, f[4], fl[4]))
      return cred_take(out, f[1], fl[1], f[2], fl[2], f[3], fl[3], f[4], fl[4]);
  }
  snprintf(err, errlen, "no %s token%s%s among the credentials' %lld", kind, service ? " for " : "",
           service ? service : "", (long long)count);
  return LOOM_ENOENT;
}

void hyarn_cred_token_free(hyarn_cred_token *t) {
  free(t->identifier);
  free(t->password);
  memset(t, 0, sizeof *t);
}

/* ---- secret keys ---------------------------------------------------------- */

/* How many bytes Hadoop's WritableUtils.writeVLong takes for v >= 0. */
static size_t vlong_size(uint64_t v) {
  if (v <= 127) return 1;
  size_t n = 0;
  for (uint64_t t = v; t; t >>= 8) n++;
  return 1 + n;
}

/* WritableUtils.writeVLong of v >= 0 at p; returns the bytes written. */
static size_t write_vlong(uint8_t *p, uint64_t v) {
  if (v <= 127) {
    p[0] = (uint8_t)v;
    return 1;
  }
  size_t n = vlong_size(v) - 1;
  p[0] = (uint8_t)(int8_t)(-112 - (int)n);
  for (size_t i = 0; i < n; i++) p[1 + i] = (uint8_t)(v >> (8 * (n - 1 - i)));
  return 1 + n;
}

int hyarn_creds_encode(const hyarn_cred_secret *secrets, int n, uint8_t **out, size_t *outlen) {
  return hyarn_creds_encode_all(NULL, 0, secrets, n, out, outlen);
}

/* A VInt length and the bytes at b + *at. */
static void put_field(uint8_t *b, size_t *at, const void *p, size_t n) {
  *at += write_vlong(b + *at, n);
  if (n) memcpy(b + *at, p, n);
  *at += n;
}

int hyarn_creds_encode_all(const hyarn_cred_token *tokens, int ntok,
                           const hyarn_cred_secret *secrets, int n, uint8_t **out, size_t *outlen) {
  *out = NULL;
  *outlen = 0;
  if (n < 0 || n > HYARN_CREDS_MAX_SECRETS || (n && !secrets)) return LOOM_EINVAL;
  if (ntok < 0 || ntok > HYARN_CREDS_MAX_SECRETS || (ntok && !tokens)) return LOOM_EINVAL;
  size_t total = 5 + vlong_size((uint64_t)ntok) + vlong_size((uint64_t)n);
  for (int i = 0; i < ntok; i++) {
    const hyarn_cred_token *t = &tokens[i];
    size_t il = t->identifier_len, pl = t->password_len, kl = strlen(t->kind),
           sl = strlen(t->service);
    if (il > HYARN_CREDS_MAX_FIELD || pl > HYARN_CREDS_MAX_FIELD || (il && !t->identifier) ||
        (pl && !t->password))
      return LOOM_EINVAL;
    /* the alias is the service, as Hadoop's clients name a token */
    total +=
        2 * (vlong_size(sl) + sl) + vlong_size(il) + il + vlong_size(pl) + pl + vlong_size(kl) + kl;
  }
  for (int i = 0; i < n; i++) {
    if (!secrets[i].alias || (secrets[i].len && !secrets[i].value)) return LOOM_EINVAL;
    size_t al = strlen(secrets[i].alias), vl = secrets[i].len;
    if (al > HYARN_CREDS_MAX_FIELD || vl > HYARN_CREDS_MAX_FIELD) return LOOM_EINVAL;
    /* at most 64 * (2 MiB + 18): no overflow */
    total += vlong_size(al) + al + vlong_size(vl) + vl;
  }
  uint8_t *b = malloc(total);
  if (!b) return LOOM_ENOMEM;
  size_t at = 0;
  memcpy(b, "HDTS", 4);
  b[4] = 0; /* WRITABLE */
  at = 5;
  at += write_vlong(b + at, (uint64_t)ntok);
  for (int i = 0; i < ntok; i++) {
    const hyarn_cred_token *t = &tokens[i];
    put_field(b, &at, t->service, strlen(t->service)); /* the alias */
    put_field(b, &at, t->identifier, t->identifier_len);
    put_field(b, &at, t->password, t->password_len);
    put_field(b, &at, t->kind, strlen(t->kind));
    put_field(b, &at, t->service, strlen(t->service));
  }
  at += write_vlong(b + at, (uint64_t)n);
  for (int i = 0; i < n; i++) {
    size_t al = strlen(secrets[i].alias), vl = secrets[i].len;
    at += write_vlong(b + at, al);
    memcpy(b + at, secrets[i].alias, al);
    at += al;
    at += write_vlong(b + at, vl);
    if (vl) memcpy(b + at, secrets[i].value, vl);
    at += vl;
  }
  *out = b;
  *outlen = at;
  return 0;
}

static int secret_take(const uint8_t *v, size_t vl, uint8_t **value, size_t *vlen) {
  uint8_t *c = malloc(vl + 1);
  if (!c) return LOOM_ENOMEM;
  if (vl) memcpy(c, v, vl);
  c[vl] = 0;
  *value = c;
  *vlen = vl;
  return 0;
}

int hyarn_creds_find_secret(const uint8_t *buf, size_t len, const char *alias, uint8_t **value,
                            size_t *vlen, char *err, size_t errlen) {
  *value = NULL;
  *vlen = 0;
  Hadoop__Common__CredentialsProto *c;
  size_t at, want = strlen(alias);
  int64_t count;
  int orc = creds_open(buf, len, &c, &at, &count, err, errlen);
  if (orc < 0) return orc;
  if (c) {
    int rc = LOOM_ENOENT;
    for (size_t i = 0; i < c->n_secrets && rc == LOOM_ENOENT; i++) {
      const Hadoop__Common__CredentialsKVProto *kv = c->secrets[i];
      if (kv->alias && !strcmp(kv->alias, alias))
        rc = secret_take(kv->has_secret ? kv->secret.data : NULL,
                         kv->has_secret ? kv->secret.len : 0, value, vlen);
    }
    protobuf_c_message_free_unpacked(&c->base, NULL);
    if (rc == LOOM_ENOENT) snprintf(err, errlen, "no secret key %s in the credentials", alias);
    return rc;
  }
  for (int64_t i = 0; i < count; i++) {
    const uint8_t *f[5];
    size_t fl[5];
    if (read_token(buf, len, &at, i, f, fl, err, errlen) < 0) return LOOM_EPROTO;
  }
  if (read_vlong(buf, len, &at, &count) < 0 || count < 0 || count > 1 << 20) {
    snprintf(err, errlen, "the credentials' secret key count is malformed");
    return LOOM_EPROTO;
  }
  for (int64_t i = 0; i < count; i++) {
    const uint8_t *a, *v;
    size_t al, vl;
    if (read_bytes(buf, len, &at, &a, &al) < 0 || read_bytes(buf, len, &at, &v, &vl) < 0) {
      snprintf(err, errlen, "secret key %lld of the credentials runs past the file's end",
               (long long)i + 1);
      return LOOM_EPROTO;
    }
    if (al == want && !memcmp(a, alias, al)) return secret_take(v, vl, value, vlen);
  }
  snprintf(err, errlen, "no secret key %s among the credentials' %lld", alias, (long long)count);
  return LOOM_ENOENT;
}
