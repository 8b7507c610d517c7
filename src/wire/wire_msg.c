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
static const fld F_STOP[] = {
    REQ("grace_ms", F_INT, wire_stop, grace_ms, NAT64),
    OPT("ending", F_BOOL, wire_stop, ending, 0, 0),
};
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

/* Checks the n fields t of object j and stores them in base (the offsets
 * are from it). what names the message; elem, when not NULL, the element
 * of an array the object is ("splits[2]"). Returns false with a message. */
static bool fields_decode(const char *what, const char *elem, const fld *t, size_t n,
                          const json_t *j, unsigned char *base, char *err, size_t errlen) {
  char want[96], where[128];
  for (size_t i = 0; i < n; i++) {
    const fld *fd = &t[i];
    json_t *v = json_object_get(j, fd->name);
    if (elem)
      snprintf(where, sizeof where, "%s.%s", elem, fd->name);
    else
      snprintf(where, sizeof where, "field '%s'", fd->name);
    if (!v) {
      if (fd->opt) continue;
      describe(fd, want, sizeof want);
      snprintf(err, errlen, "%s: %s is missing (it must be %s)", what, where, want);
      return false;
    }
    if (!field_get(fd, v, base + fd->off)) {
      describe(fd, want, sizeof want);
      snprintf(err, errlen, "%s: %s must be %s", what, where, want);
      return false;
    }
    if (fd->has >= 0) *((bool *)(base + fd->has)) = true;
  }
  return true;
}

int wire_msg_decode(const wire_frame *f, wire_msg *m, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  m->type = f->type;
  const msgdef *d = msgdef_of(f->type);
  if (!d) FAIL("message type %u is not one this peer decodes", f->type);
  if (!json_is_object(f->json)) FAIL("%s: not a JSON object", d->name);
  if (!fields_decode(d->name, NULL, d->f, d->n, f->json, (unsigned char *)m, err, errlen))
    goto err_parse;
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

/* Puts the n fields t of base into object j. Returns 0, LOOM_EINVAL (a
 * required value is NULL) or LOOM_ENOMEM. */
static int fields_encode(const fld *t, size_t n, const unsigned char *base, json_t *j) {
  for (size_t i = 0; i < n; i++) {
    const fld *fd = &t[i];
    if (fd->has >= 0 && !*((const bool *)(base + fd->has))) continue;
    bool missing;
    json_t *v = field_put(fd, base + fd->off, &missing);
    if (missing) return LOOM_EINVAL;
    if (v && json_object_set_new(j, fd->name, v) < 0) return LOOM_ENOMEM;
  }
  return 0;
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
  if (rc == 0) rc = fields_encode(d->f, d->n, (const unsigned char *)m, j);
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

/* ---- the feed's answers -------------------------------------------------- */
/* offsets from the answer's own struct */
#define A(st, mem) offsetof(st, mem)
#define AREQ(w, k, st, mem, ...)                                                                   \
  { w, k, false, A(st, mem), -1, __VA_ARGS__ }
#define AOPT(w, k, st, mem, ...)                                                                   \
  { w, k, true, A(st, mem), -1, __VA_ARGS__ }
#define AHAS(w, k, st, mem, ...)                                                                   \
  { w, k, true, A(st, mem), (ssize_t)A(st, has_##mem), __VA_ARGS__ }
#define FEED_MAX_EPOCHS 1000000
#define FEED_MAX_OFF ((long long)1 << 62)

static const fld F_FEED_OPENED[] = {
    AREQ("format", F_STR, wire_feed_opened, format, NAME),
    AREQ("epochs", F_INT, wire_feed_opened, epochs, 1, FEED_MAX_EPOCHS),
    AREQ("epoch", F_INT, wire_feed_opened, epoch, 0, FEED_MAX_EPOCHS - 1),
    AREQ("splits", F_INT, wire_feed_opened, splits, 0, UINT32_MAX),
    AREQ("output", F_BOOL, wire_feed_opened, output, 0, 0),
    AREQ("lease_ms", F_INT, wire_feed_opened, lease_ms, 3, LLONG_MAX),
    AREQ("shuffle", F_BOOL, wire_feed_opened, shuffle, 0, 0),
    AREQ("growing", F_BOOL, wire_feed_opened, growing, 0, 0),
};
static const fld F_FEED_SPLIT[] = {
    AREQ("split", F_INT, wire_feed_split, split, 0, UINT32_MAX),
    AREQ("epoch", F_INT, wire_feed_split, epoch, 0, FEED_MAX_EPOCHS - 1),
    AREQ("lease", F_INT, wire_feed_split, lease, 1, LLONG_MAX),
    AREQ("path", F_STR, wire_feed_split, path, PATH),
    AREQ("off", F_INT, wire_feed_split, off, 0, FEED_MAX_OFF),
    AREQ("len", F_INT, wire_feed_split, len, 1, FEED_MAX_OFF),
    AREQ("rec", F_INT, wire_feed_split, rec, 0, (long long)1 << 40),
    AHAS("rseed", F_INT, wire_feed_split, rseed, NAT64),
    AOPT("tmp", F_STR, wire_feed_split, tmp, PATH),
};
static const fld F_FEED_LEASED[] = {
    AOPT("end", F_BOOL, wire_feed_leased, end, 0, 0),
    AHAS("leased", F_INT, wire_feed_leased, leased, NAT64),
};
static const fld F_FEED_RENEWED[] = {
    AREQ("stale", F_ARR_ID, wire_feed_renewed, stale, 0, FEED_MAX_LIST),
};

int wire_feed_opened_decode(const json_t *reply, wire_feed_opened *o, char *err, size_t errlen) {
  static const char what[] = "FEED_OPEN reply";
  memset(o, 0, sizeof *o);
  if (!json_is_object(reply)) FAIL("%s: not a JSON object", what);
  if (!fields_decode(what, NULL, N(F_FEED_OPENED), reply, (unsigned char *)o, err, errlen))
    goto err_parse;
  if (o->epoch >= o->epochs)
    FAIL("%s: field 'epoch' (%lld) must be below 'epochs' (%lld)", what, (long long)o->epoch,
         (long long)o->epochs);
  if (o->splits == 0 && !o->growing)
    FAIL("%s: field 'splits' must be at least 1 for an input that does not grow", what);
  return 0;
err_parse:
  memset(o, 0, sizeof *o);
  return LOOM_EPROTO;
}

int wire_feed_leased_decode(const json_t *reply, int rc, wire_feed_leased *o, char *err,
                            size_t errlen) {
  static const char what[] = "FEED_LEASE reply";
  memset(o, 0, sizeof *o);
  if (!json_is_object(reply)) FAIL("%s: not a JSON object", what);
  if (!fields_decode(what, NULL, N(F_FEED_LEASED), reply, (unsigned char *)o, err, errlen))
    goto err_parse;
  json_t *arr = json_object_get(reply, "splits");
  if (arr) {
    if (!json_is_array(arr) || json_array_size(arr) < 1 ||
        json_array_size(arr) > FEED_MAX_BATCH_LEASES)
      FAIL("%s: field 'splits' must be an array of 1..%d splits", what, FEED_MAX_BATCH_LEASES);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
      char elem[32];
      snprintf(elem, sizeof elem, "splits[%zu]", i);
      if (!json_is_object(e)) FAIL("%s: %s must be an object", what, elem);
      if (!fields_decode(what, elem, N(F_FEED_SPLIT), e, (unsigned char *)&o->splits[i], err,
                         errlen))
        goto err_parse;
    }
    o->nsplits = json_array_size(arr);
  }
  if (rc == 0 && o->end == (o->nsplits > 0))
    FAIL("%s: exactly one of fields 'end' (true) and 'splits' must be given", what);
  return 0;
err_parse:
  memset(o, 0, sizeof *o);
  return LOOM_EPROTO;
}

int wire_feed_renewed_decode(const json_t *reply, wire_feed_renewed *o, char *err, size_t errlen) {
  static const char what[] = "FEED_RENEW reply";
  memset(o, 0, sizeof *o);
  if (!json_is_object(reply)) FAIL("%s: not a JSON object", what);
  if (!fields_decode(what, NULL, N(F_FEED_RENEWED), reply, (unsigned char *)o, err, errlen))
    goto err_parse;
  return 0;
err_parse:
  memset(o, 0, sizeof *o);
  return LOOM_EPROTO;
}

/* The object of the n fields t of base, new; NULL on failure. */
static json_t *answer_encode(const fld *t, size_t n, const void *base) {
  json_t *j = json_object();
  if (j && fields_encode(t, n, base, j) < 0) {
    json_decref(j);
    j = NULL;
  }
  return j;
}

json_t *wire_feed_opened_encode(const wire_feed_opened *o) {
  return answer_encode(N(F_FEED_OPENED), o);
}

json_t *wire_feed_leased_encode(const wire_feed_leased *o) {
  json_t *j = answer_encode(N(F_FEED_LEASED), o);
  if (!j || o->nsplits == 0) return j;
  json_t *arr = json_array();
  if (!arr || json_object_set_new(j, "splits", arr) < 0 || o->nsplits > FEED_MAX_BATCH_LEASES)
    goto fail;
  for (size_t i = 0; i < o->nsplits; i++) {
    json_t *e = answer_encode(N(F_FEED_SPLIT), &o->splits[i]);
    if (!e || json_array_append_new(arr, e) < 0) goto fail;
  }
  return j;
fail:
  json_decref(j);
  return NULL;
}

json_t *wire_feed_renewed_encode(const wire_feed_renewed *o) {
  return answer_encode(N(F_FEED_RENEWED), o);
}
