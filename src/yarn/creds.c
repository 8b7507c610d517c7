/* creds.c: the reader of Hadoop's credentials files (see creds.h): both
 * of the formats Hadoop's Credentials writes, the WRITABLE layout with
 * Hadoop's VInts and a delimited CredentialsProto, every length checked
 * against what is left. */
#include "yarn/creds.h"

#include "Security.pb-c.h"
#include "core/bytes.h"

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

int hyarn_creds_find(const uint8_t *buf, size_t len, const char *kind, hyarn_cred_token *out,
                     char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (len < 5 || memcmp(buf, "HDTS", 4) != 0) {
    snprintf(err, errlen, "not a Hadoop credentials file (it does not start with HDTS)");
    return LOOM_EPROTO;
  }
  size_t at = 5;
  if (buf[4] == 1) { /* PROTOBUF: a delimited CredentialsProto */
    uint32_t ml;
    size_t vn = loom__varint_get32(buf + at, len - at, &ml);
    if (!vn || ml > len - at - vn) {
      snprintf(err, errlen, "the credentials' length is past the file's end");
      return LOOM_EPROTO;
    }
    Hadoop__Common__CredentialsProto *c =
        hadoop__common__credentials_proto__unpack(NULL, ml, buf + at + vn);
    if (!c) {
      snprintf(err, errlen, "the credentials are not a CredentialsProto");
      return LOOM_EPROTO;
    }
    int rc = LOOM_ENOENT;
    for (size_t i = 0; i < c->n_tokens && rc == LOOM_ENOENT; i++) {
      const Hadoop__Common__TokenProto *t = c->tokens[i]->token;
      if (t && t->kind && !strcmp(t->kind, kind))
        rc = cred_take(out, t->identifier.data, t->identifier.len, t->password.data,
                       t->password.len, (const uint8_t *)t->kind, strlen(t->kind),
                       (const uint8_t *)t->service, strlen(t->service));
    }
    protobuf_c_message_free_unpacked(&c->base, NULL);
    if (rc == LOOM_ENOENT) snprintf(err, errlen, "no %s token in the credentials", kind);
    return rc;
  }
  if (buf[4] != 0) {
    snprintf(err, errlen, "credentials format %d is not known (0 WRITABLE, 1 PROTOBUF)", buf[4]);
    return LOOM_EPROTO;
  }
  int64_t count;
  if (read_vlong(buf, len, &at, &count) < 0 || count < 0 || count > 1 << 20) {
    snprintf(err, errlen, "the credentials' token count is malformed");
    return LOOM_EPROTO;
  }
  for (int64_t i = 0; i < count; i++) {
    const uint8_t *alias, *id, *pw, *k, *svc;
    size_t al, idl, pwl, kl, sl;
    if (read_bytes(buf, len, &at, &alias, &al) < 0 || read_bytes(buf, len, &at, &id, &idl) < 0 ||
        read_bytes(buf, len, &at, &pw, &pwl) < 0 || read_bytes(buf, len, &at, &k, &kl) < 0 ||
        read_bytes(buf, len, &at, &svc, &sl) < 0) {
      snprintf(err, errlen, "token %lld of the credentials runs past the file's end",
               (long long)i + 1);
      return LOOM_EPROTO;
    }
    if (kl == strlen(kind) && !memcmp(k, kind, kl))
      return cred_take(out, id, idl, pw, pwl, k, kl, svc, sl);
  }
  snprintf(err, errlen, "no %s token among the credentials' %lld", kind, (long long)count);
  return LOOM_ENOENT;
}

void hyarn_cred_token_free(hyarn_cred_token *t) {
  free(t->identifier);
  free(t->password);
  memset(t, 0, sizeof *t);
}
