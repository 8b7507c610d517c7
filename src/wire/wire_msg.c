/* wire_msg.c: the message codecs of wire_msg.h. Each message is a table of
 * its fields (wire name, kind, where in the struct, bounds); one decoder
 * and one encoder walk the tables, so a field's rules are written once and
 * both sides of a connection use the same ones. */
#include "wire/wire_msg.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

enum {
  F_STR,     /* const char *: a string of min..max bytes */
  F_INT,     /* int64_t in min..max */
  F_BOOL,    /* bool */
  F_NUM,     /* double: any JSON number */
  F_OBJ,     /* json_t *: an object */
  F_OBJ_STR, /* json_t *: an object whose values are strings */
  F_FILES,   /* json_t *: an object of paths, {"tar"|"archive"|"cwd": string} */
  F_ARR_STR, /* json_t *: an array of min..max strings */
  F_ARR_INT, /* json_t *: an array of min..max integers 0..INT32_MAX */
  F_ARR_ID,  /* json_t *: an array of min..max integers 1..LLONG_MAX (lease ids) */
};

typedef struct {
  const char *name; /* on the wire */
  int kind;
  bool opt;
  size_t off;  /* of the value in the message's struct */
  ssize_t has; /* of its bool has_ flag, or -1 */
  long long min, max;
} fld;

enum { B_NONE, B_BYTES, B_CLUSTER };

typedef struct {
  uint16_t type;
  const char *name;
  const fld *f;
  size_t n;
  int blob;
  size_t blob_max;
} msgdef;

#define U(st, mem) (offsetof(wire_msg, u) + offsetof(st, mem))
/* each followed by the bounds: min, max */
#define REQ(w, k, st, mem, ...)                                                                    \
  { w, k, false, U(st, mem), -1, __VA_ARGS__ }
#define OPT(w, k, st, mem, ...)                                                                    \
  { w, k, true, U(st, mem), -1, __VA_ARGS__ }
#define HAS(w, k, st, mem, ...)                                                                    \
  { w, k, true, U(st, mem), (ssize_t)(U(st, has_##mem)), __VA_ARGS__ }
#define I32 INT32_MIN, INT32_MAX
#define NAT 0, INT32_MAX
#define I64 LLONG_MIN, LLONG_MAX
#define NAT64 0, LLONG_MAX
#define TEXT 0, 65536
#define NAME 1, 255
#define PATH 1, 4096
#define N(a) a, sizeof a / sizeof a[0]

static const fld F_REGISTER[] = {
    REQ("task", F_STR, wire_register, task, 1, 79),
    REQ("attempt", F_INT, wire_register, attempt, NAT),
    REQ("host", F_STR, wire_register, host, NAME),
    REQ("port", F_INT, wire_register, port, 1, 65535),
    HAS("pid", F_INT, wire_register, pid, NAT),
    OPT("inflate", F_BOOL, wire_register, inflate, 0, 0),
    OPT("host_why", F_STR, wire_register, host_why, 1, 512),
    OPT("any_attempt", F_BOOL, wire_register, any_attempt, 0, 0),
    HAS("fence", F_INT, wire_register, fence, NAT64),
    HAS("protocol", F_INT, wire_register, protocol, NAT),
    OPT("version", F_STR, wire_register, version, 1, 63),
};
static const fld F_ASSIGN[] = {
    REQ("workdir", F_STR, wire_assign, workdir, PATH),
    REQ("job_id", F_STR, wire_assign, job_id, NAME),
    REQ("job_dir", F_STR, wire_assign, job_dir, PATH),
    REQ("role", F_STR, wire_assign, role, NAME),
    REQ("index", F_INT, wire_assign, index, NAT),
    OPT("shell", F_STR, wire_assign, shell, 1, 1 << 20),
    OPT("argv", F_ARR_STR, wire_assign, argv, 1, 65536),
    REQ("procs", F_INT, wire_assign, procs, 1, 1024),
    REQ("env", F_OBJ_STR, wire_assign, env, 0, 0),
    REQ("files", F_FILES, wire_assign, files, 0, 0),
    REQ("cpus", F_STR, wire_assign, cpus, 0, 255),
    REQ("gpus", F_STR, wire_assign, gpus, 0, 127),
    HAS("gpu_count", F_INT, wire_assign, gpu_count, 0, 1024),
    REQ("memory", F_INT, wire_assign, memory, NAT64),
    REQ("training", F_BOOL, wire_assign, training, 0, 0),
    REQ("rank_base", F_INT, wire_assign, rank_base, -1, INT32_MAX), /* -1: not training */
    REQ("world_size", F_INT, wire_assign, world_size, NAT),
    REQ("heartbeat_timeout_ms", F_INT, wire_assign, heartbeat_timeout_ms, NAT64),
    HAS("attempt", F_INT, wire_assign, attempt, NAT),
    HAS("protocol", F_INT, wire_assign, protocol, NAT),
    OPT("version", F_STR, wire_assign, version, 1, 63),
};
static const fld F_CLUSTER[] = {
    OPT("master_addr", F_STR, wire_cluster, master_addr, NAME),
    HAS("master_port", F_INT, wire_cluster, master_port, 0, 65535),
    HAS("rank_base", F_INT, wire_cluster, rank_base, -1, INT32_MAX),
    HAS("world_size", F_INT, wire_cluster, world_size, NAT),
    HAS("generation", F_INT, wire_cluster, generation, NAT64),
};
static const fld F_STARTED[] = {REQ("pids", F_ARR_INT, wire_started, pids, 0, 1024)};
static const fld F_LOG[] = {
    REQ("s", F_INT, wire_log, stream, 1, 2),
    REQ("p", F_INT, wire_log, proc, 0, 1023),
};
static const fld F_EXIT[] = {
    REQ("code", F_INT, wire_exit, code, I32),
    REQ("signal", F_INT, wire_exit, signal, 0, 127),
    OPT("reason", F_STR, wire_exit, reason, TEXT),
    OPT("lost", F_BOOL, wire_exit, lost, 0, 0),
};
static const fld F_STOP[] = {REQ("grace_ms", F_INT, wire_stop, grace_ms, NAT64)};
static const fld F_FAIL[] = {
    REQ("reason", F_STR, wire_fail, reason, TEXT),
    REQ("code", F_INT, wire_fail, code, I32),
};
static const fld F_HELLO[] = {
    REQ("task", F_STR, wire_hello, task, 0, 255),
    REQ("rank", F_INT, wire_hello, rank, I32),
    REQ("pid", F_INT, wire_hello, pid, NAT),
};
static const fld F_KV_SET[] = {
    REQ("id", F_INT, wire_kv_set, id, NAT64),
    REQ("key", F_STR, wire_kv_set, key, 1, LOOM_KV_MAX_KEY),
};
static const fld F_KV_GET[] = {
    REQ("id", F_INT, wire_kv_get, id, NAT64),
    REQ("key", F_STR, wire_kv_get, key, 1, LOOM_KV_MAX_KEY),
    REQ("timeout_ms", F_INT, wire_kv_get, timeout_ms, I32),
};
static const fld F_KV_ADD[] = {
    REQ("id", F_INT, wire_kv_add, id, NAT64),
    REQ("key", F_STR, wire_kv_add, key, 1, LOOM_KV_MAX_KEY),
    REQ("delta", F_INT, wire_kv_add, delta, I64),
};
static const fld F_EVENT[] = {
    REQ("id", F_INT, wire_event, id, NAT64),
    REQ("name", F_STR, wire_event, name, 1, 128),
    OPT("detail", F_OBJ, wire_event, detail, 0, 0),
};
static const fld F_REPLY[] = {
    REQ("id", F_INT, wire_reply, id, NAT64),
    REQ("rc", F_INT, wire_reply, rc, INT32_MIN, 0),
    HAS("value", F_INT, wire_reply, value, I64),
    OPT("msg", F_STR, wire_reply, msg, TEXT),
};
static const fld F_ABORT[] = {REQ("reason", F_STR, wire_abort, reason, TEXT),
                              OPT("final", F_BOOL, wire_abort, final, 0, 0),
                              OPT("stale", F_BOOL, wire_abort, stale, 0, 0)};
static const fld F_METRIC[] = {
    HAS("id", F_INT, wire_metric, id, NAT64),
    REQ("tag", F_STR, wire_metric, tag, 1, 128),
    REQ("step", F_INT, wire_metric, step, I64),
    REQ("value", F_NUM, wire_metric, value, 0, 0),
};
static const fld F_MEMBERSHIP[] = {
    REQ("generation", F_INT, wire_membership, generation, NAT64),
};

static const fld F_FEED_OPEN[] = {REQ("id", F_INT, wire_feed_open, id, NAT64)};
static const fld F_FEED_LEASE[] = {
    REQ("id", F_INT, wire_feed_lease, id, NAT64),
    HAS("max", F_INT, wire_feed_lease, max, 1, FEED_MAX_BATCH_LEASES),
    OPT("wait_ms", F_INT, wire_feed_lease, wait_ms, 0, FEED_MAX_WAIT_MS),
};
static const fld F_FEED_DONE[] = {
    REQ("id", F_INT, wire_feed_done, id, NAT64),
    REQ("lease", F_INT, wire_feed_done, lease, 1, LLONG_MAX),
    OPT("records", F_INT, wire_feed_done, records, NAT64),
    OPT("wrote", F_BOOL, wire_feed_done, wrote, 0, 0),
};
static const fld F_FEED_LEASES[] = {
    REQ("id", F_INT, wire_feed_leases, id, NAT64),
    REQ("leases", F_ARR_ID, wire_feed_leases, leases, 0, FEED_MAX_LIST),
};

static const msgdef MSGS[] = {
    {WIRE_REGISTER, "REGISTER", N(F_REGISTER), B_NONE, 0},
    {WIRE_ASSIGN, "ASSIGN", N(F_ASSIGN), B_NONE, 0},
    {WIRE_READY, "READY", NULL, 0, B_NONE, 0},
    {WIRE_CLUSTER, "CLUSTER", N(F_CLUSTER), B_CLUSTER, 0},
    {WIRE_STARTED, "STARTED", N(F_STARTED), B_NONE, 0},
    {WIRE_LOG, "LOG", N(F_LOG), B_BYTES, SIZE_MAX},
    {WIRE_EXIT, "EXIT", N(F_EXIT), B_NONE, 0},
    {WIRE_STOP, "STOP", N(F_STOP), B_NONE, 0},
    {WIRE_HEARTBEAT, "HEARTBEAT", NULL, 0, B_NONE, 0},
    {WIRE_FAIL, "FAIL", N(F_FAIL), B_NONE, 0},
    {WIRE_HELLO, "HELLO", N(F_HELLO), B_NONE, 0},
    {WIRE_KV_SET, "KV_SET", N(F_KV_SET), B_BYTES, LOOM_KV_MAX_VALUE},
    {WIRE_KV_GET, "KV_GET", N(F_KV_GET), B_NONE, 0},
    {WIRE_KV_ADD, "KV_ADD", N(F_KV_ADD), B_NONE, 0},
    {WIRE_EVENT, "EVENT", N(F_EVENT), B_NONE, 0},
    {WIRE_REPLY, "REPLY", N(F_REPLY), B_BYTES, SIZE_MAX},
    {WIRE_ABORT, "ABORT", N(F_ABORT), B_NONE, 0},
    {WIRE_METRIC, "METRIC", N(F_METRIC), B_NONE, 0},
    {WIRE_MEMBERSHIP, "MEMBERSHIP", N(F_MEMBERSHIP), B_NONE, 0},
    {WIRE_FEED_OPEN, "FEED_OPEN", N(F_FEED_OPEN), B_NONE, 0},
    {WIRE_FEED_LEASE, "FEED_LEASE", N(F_FEED_LEASE), B_NONE, 0},
    {WIRE_FEED_DONE, "FEED_DONE", N(F_FEED_DONE), B_NONE, 0},
    {WIRE_FEED_RENEW, "FEED_RENEW", N(F_FEED_LEASES), B_NONE, 0},
    {WIRE_FEED_RELEASE, "FEED_RELEASE", N(F_FEED_LEASES), B_NONE, 0},
};

static const msgdef *msgdef_of(uint16_t type) {
  for (size_t i = 0; i < sizeof MSGS / sizeof MSGS[0]; i++)
    if (MSGS[i].type == type) return &MSGS[i];
  return NULL;
}

const char *wire_msg_name(uint16_t type) {
  const msgdef *d = msgdef_of(type);
  return d ? d->name : NULL;
}

/* What a field must be, for messages. */
static void describe(const fld *f, char *out, size_t len) {
  switch (f->kind) {
  case F_STR:
    snprintf(out, len, "a string of %lld..%lld bytes", f->min, f->max);
    break;
  case F_INT:
    snprintf(out, len, "an integer %lld..%lld", f->min, f->max);
    break;
  case F_BOOL:
    snprintf(out, len, "true or false");
    break;
  case F_NUM:
    snprintf(out, len, "a number");
    break;
  case F_OBJ:
    snprintf(out, len, "an object");
    break;
  case F_OBJ_STR:
    snprintf(out, len, "an object of strings");
    break;
  case F_FILES:
    snprintf(out, len, "an object of paths or {\"tar\"|\"archive\"|\"cwd\": path}");
    break;
  case F_ARR_STR:
    snprintf(out, len, "an array of %lld..%lld strings", f->min, f->max);
    break;
  case F_ARR_ID:
    snprintf(out, len, "an array of %lld..%lld lease ids (integers from 1)", f->min, f->max);
    break;
  default:
    snprintf(out, len, "an array of %lld..%lld process ids", f->min, f->max);
    break;
  }
}

/* Checks v against f and stores it at p; false when it does not fit. */
static bool field_get(const fld *f, json_t *v, unsigned char *p) {
  switch (f->kind) {
  case F_STR: {
    if (!json_is_string(v)) return false;
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if ((long long)n < f->min || (long long)n > f->max || strlen(s) != n) return false;
    memcpy(p, &s, sizeof s);
    return true;
  }
  case F_INT: {
    if (!json_is_integer(v)) return false;
    json_int_t i = json_integer_value(v);
    if (i < f->min || i > f->max) return false;
    int64_t x = (int64_t)i;
    memcpy(p, &x, sizeof x);
    return true;
  }
  case F_BOOL: {
    if (!json_is_boolean(v)) return false;
    bool b = json_is_true(v);
    memcpy(p, &b, sizeof b);
    return true;
  }
  case F_NUM: {
    if (!json_is_number(v)) return false;
    double d = json_number_value(v);
    memcpy(p, &d, sizeof d);
    return true;
  }
  case F_OBJ:
  case F_OBJ_STR:
  case F_FILES: {
    if (!json_is_object(v)) return false;
    const char *k;
    json_t *e;
    json_object_foreach(v, k, e) {
      if (f->kind == F_OBJ_STR && !json_is_string(e)) return false;
      /* a path, or one of {"tar": path} (a directory staged as a tar),
       * {"archive": path} (unpacked by the agent), {"cwd": name}
       * (localized where the agent started) */
      if (f->kind == F_FILES && !json_is_string(e)) {
        const char *kk;
        json_t *ev;
        int n = 0;
        if (!json_is_object(e) || json_object_size(e) != 1) return false;
        json_object_foreach(e, kk, ev) n +=
            json_is_string(ev) &&
            (!strcmp(kk, "tar") || !strcmp(kk, "archive") || !strcmp(kk, "cwd"));
        if (n != 1) return false;
      }
    }
    memcpy(p, &v, sizeof v);
    return true;
  }
  default: {
    if (!json_is_array(v)) return false;
    size_t n = json_array_size(v), i;
    json_t *e;
    if ((long long)n < f->min || (long long)n > f->max) return false;
    json_array_foreach(v, i, e) {
      if (f->kind == F_ARR_STR) {
        if (!json_is_string(e)) return false;
      } else if (!json_is_integer(e) || json_integer_value(e) < (f->kind == F_ARR_ID ? 1 : 0) ||
                 (f->kind == F_ARR_INT && json_integer_value(e) > INT32_MAX)) {
        return false;
      }
    }
    memcpy(p, &v, sizeof v);
    return true;
  }
  }
}

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    snprintf(err, errlen, __VA_ARGS__);                                                            \
    goto err_parse;                                                                                \
  } while (0)

int wire_msg_decode(const wire_frame *f, wire_msg *m, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  m->type = f->type;
  const msgdef *d = msgdef_of(f->type);
  char want[96];
  if (!d) FAIL("message type %u is not one this peer decodes", f->type);
  if (!json_is_object(f->json)) FAIL("%s: not a JSON object", d->name);
  for (size_t i = 0; i < d->n; i++) {
    const fld *fd = &d->f[i];
    json_t *v = json_object_get(f->json, fd->name);
    if (!v) {
      if (fd->opt) continue;
      describe(fd, want, sizeof want);
      FAIL("%s: field '%s' is missing (it must be %s)", d->name, fd->name, want);
    }
    if (!field_get(fd, v, (unsigned char *)m + fd->off)) {
      describe(fd, want, sizeof want);
      FAIL("%s: field '%s' must be %s", d->name, fd->name, want);
    }
    if (fd->has >= 0) *((bool *)((unsigned char *)m + fd->has)) = true;
  }
  switch (d->blob) {
  case B_NONE:
    if (f->blob_len) FAIL("%s: carries %zu bytes it should not", d->name, f->blob_len);
    break;
  case B_BYTES:
    if (f->blob_len > d->blob_max)
      FAIL("%s: its %zu-byte value is over the %zu-byte limit", d->name, f->blob_len, d->blob_max);
    m->blob = f->blob;
    m->blob_len = f->blob_len;
    break;
  case B_CLUSTER: {
    json_error_t je;
    m->owned = json_loadb((const char *)f->blob, f->blob_len, JSON_REJECT_DUPLICATES, &je);
    json_t *cl = json_object_get(m->owned, "cluster"),
           *tf = json_object_get(m->owned, "tf_cluster");
    if (!json_is_object(cl))
      FAIL("%s: the blob must be a JSON object with a 'cluster' object", d->name);
    if (tf && !json_is_object(tf)) FAIL("%s: the blob's 'tf_cluster' must be an object", d->name);
    m->u.cluster.cluster = cl;
    m->u.cluster.tf_cluster = tf;
    break;
  }
  }
  if (f->type == WIRE_ASSIGN && !m->u.assign.shell == !m->u.assign.argv)
    FAIL("ASSIGN: exactly one of fields 'shell' and 'argv' must be given");
  if (f->type == WIRE_REPLY) m->u.reply.json = f->json;
  return 0;
err_parse:
  wire_msg_free(m);
  m->type = f->type;
  return LOOM_EPROTO;
}

void wire_msg_free(wire_msg *m) {
  if (m->owned) json_decref(m->owned);
  memset(m, 0, sizeof *m);
}

/* The JSON value of field f of m, new; NULL when an optional field is
 * absent (*missing false) or a required one is (*missing true). */
static json_t *field_put(const fld *f, const unsigned char *p, bool *missing) {
  *missing = false;
  switch (f->kind) {
  case F_STR: {
    const char *s;
    memcpy(&s, p, sizeof s);
    if (!s) *missing = !f->opt;
    return s ? json_string(s) : NULL;
  }
  case F_INT: {
    int64_t x;
    memcpy(&x, p, sizeof x);
    return json_integer((json_int_t)x);
  }
  case F_BOOL: {
    bool b;
    memcpy(&b, p, sizeof b);
    return f->opt && !b ? NULL : json_boolean(b);
  }
  case F_NUM: {
    double d;
    memcpy(&d, p, sizeof d);
    if (!isfinite(d)) *missing = true; /* JSON has no NaN or infinity */
    return isfinite(d) ? json_real(d) : NULL;
  }
  default: {
    json_t *v;
    memcpy(&v, p, sizeof v);
    if (!v) *missing = !f->opt;
    return v ? json_incref(v) : NULL;
  }
  }
}

int wire_msg_encode(const wire_msg *m, unsigned char **out, size_t *out_len) {
  const msgdef *d = msgdef_of(m->type);
  if (!d) return LOOM_EINVAL;
  json_t *j = json_object();
  char *bs = NULL;
  const void *blob = m->blob;
  size_t blob_len = m->blob_len;
  int rc = j ? 0 : LOOM_ENOMEM;
  /* a reply to the feed's requests carries fields of their own */
  if (rc == 0 && m->type == WIRE_REPLY && m->u.reply.json &&
      json_object_update(j, m->u.reply.json) < 0)
    rc = LOOM_ENOMEM;
  for (size_t i = 0; rc == 0 && i < d->n; i++) {
    const fld *fd = &d->f[i];
    if (fd->has >= 0 && !*((const bool *)((const unsigned char *)m + fd->has))) continue;
    bool missing;
    json_t *v = field_put(fd, (const unsigned char *)m + fd->off, &missing);
    if (missing)
      rc = LOOM_EINVAL;
    else if (v && json_object_set_new(j, fd->name, v) < 0)
      rc = LOOM_ENOMEM;
  }
  if (rc == 0 && d->blob == B_CLUSTER) {
    const wire_cluster *c = &m->u.cluster;
    json_t *b = c->cluster ? json_pack("{s:O}", "cluster", c->cluster) : NULL;
    if (b && c->tf_cluster) json_object_set(b, "tf_cluster", c->tf_cluster);
    bs = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!bs) rc = c->cluster ? LOOM_ENOMEM : LOOM_EINVAL;
    blob = bs;
    blob_len = bs ? strlen(bs) : 0;
  } else if (d->blob == B_NONE) {
    blob_len = 0;
  }
  /* no fields: no JSON at all (jlen 0), as the frames always had */
  if (rc == 0)
    rc = wire_encode(m->type, json_object_size(j) ? j : NULL, blob, blob_len, out, out_len);
  json_decref(j);
  free(bs);
  return rc;
}

int wire_msg_send(int fd, const wire_msg *m) {
  unsigned char *buf;
  size_t len;
  int rc = wire_msg_encode(m, &buf, &len);
  if (rc < 0) return rc;
  rc = wire_send_raw(fd, buf, len);
  free(buf);
  return rc;
}
