/* make_seeds.c: writes the seed corpora of the spec_parse, feed_format,
 * ps_proto, ckpt and wire_auth harnesses, and the wire_msg harness's seeds
 * of the data feed's messages (feed_*; its other seeds are written by
 * hand), each input made by loom's own encoders (spec_to_json, the summary
 * writer's TFRecord framing, ps_hdr_put and ps_decl_put, ps_ckpt_write and
 * ps_ckpt_commit, loom_ckpt_save, wire_auth_server_start and, in the
 * harness, wire_auth_client_answer, wire_msg_encode), so that the fuzzers
 * start from what loom really reads:
 *   build/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
 * (then commit what changed). Each harness's comment says how it reads
 * its input; the first byte or bytes select what the rest is. */
#include "ckpt/ckpt.h"
#include "core/bytes.h"
#include "loom/summary.h"
#include "ps/ps.h"
#include "spec/spec.h"
#include "wire/wire_auth.h"
#include "wire/wire_msg.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *out_dir;

static void fail(const char *why) {
  fprintf(stderr, "make_seeds: %s\n", why);
  exit(1);
}

static void put(const char *harness, const char *name, const void *a, size_t alen, const void *b,
                size_t blen) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", out_dir, harness);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/%s/%s", out_dir, harness, name);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(a, 1, alen, f) != alen || (blen && fwrite(b, 1, blen, f) != blen) ||
      fclose(f) != 0) {
    fprintf(stderr, "make_seeds: cannot write %s\n", p);
    exit(1);
  }
}

static unsigned char *slurp(const char *path, size_t *n) {
  char *s;
  if (loom__read_file(path, 1 << 24, &s, n) < 0) {
    fprintf(stderr, "make_seeds: cannot read %s\n", path);
    exit(1);
  }
  return (unsigned char *)s;
}

/* ---- spec_parse: YAML, NUL, --set overrides each ended by a NUL --------- */
static const char *const SPECS[][2] = {
    {"minimal", "name: hello\nroles:\n  worker: {command: ./train}\n"},
    {"full", "name: fashion-mlp\nbackend: local\nqueue: batch\nretries: 1\nrestart: task\n"
             "max_restarts: 3\nretry_on: [1, 137]\nheartbeat_timeout: 500ms\n"
             "env: {OMP_NUM_THREADS: \"1\"}\nfiles: {data: /tmp}\n"
             "roles:\n  chief:\n    instances: 1\n    command: [./mlp, --epochs, \"5\"]\n"
             "    vcores: 2\n    memory: 2GiB\n    gpus: 0\n    label: cpu\n    procs: 1\n"
             "    service: false\n    env: {A: b}\n"
             "  worker: {instances: 3, command: ./mlp --epochs 5, elastic: {min: 2, max: 4}}\n"
             "  ps: {instances: 1, command: loom ps}\n"
             "feed:\n  input: [data/train-*.csv]\n  format: fixed:785\n  epochs: 2\n"
             "  shuffle: true\n  seed: 1\n  output: out/\n"},
    {"anchors", "name: a\nx: &cmd {command: ./t, instances: 2}\n"},
    {"aliases", "name: a\nroles:\n  worker: &w {command: ./t, instances: 2}\n  evaluator: *w\n"},
    {"tf_rules", "name: tf\nroles:\n  chief: {instances: 2, command: ./t}\n"},
    {"bad_key", "name: x\nrole: {}\n"},
    {"flow", "{name: f, roles: {worker: {command: [a, b]}}, feed: {input: x, format: tfrecord}}"},
};

static void spec_seeds(void) {
  for (size_t i = 0; i < sizeof SPECS / sizeof SPECS[0]; i++)
    put("spec_parse", SPECS[i][0], SPECS[i][1], strlen(SPECS[i][1]), NULL, 0);
  static const char sets[] = "name: s\nroles: {worker: {command: ./t}}\n\0"
                             "roles.worker.instances=4\0feed.input=/data/*\0name=renamed\0";
  put("spec_parse", "sets", sets, sizeof sets - 1, NULL, 0);
  /* spec.yaml as `loom run` writes it into the job directory */
  spec_job *s;
  char err[1024];
  if (spec_parse("/tmp/spec.yaml", SPECS[1][1], strlen(SPECS[1][1]), NULL, 0, &s, err, sizeof err) <
      0) {
    fprintf(stderr, "make_seeds: %s\n", err);
    exit(1);
  }
  json_t *j = spec_to_json(s);
  char *txt = json_dumps(j, JSON_INDENT(2));
  put("spec_parse", "resolved_json", txt, strlen(txt), NULL, 0);
  free(txt);
  json_decref(j);
  spec_free(s);
}

/* ---- feed_format: format, split size, chunk; the file ------------------- */
static void feed_seeds(const char *tmp) {
  /* format byte: 0 lines, 1 tfrecord, 2 idx, 3 | (rec - 1) << 2 fixed:rec;
   * split byte: 1 << (b & 15) + (b >> 4) bytes; chunk byte: 0 whole split */
  static const char lines[] = "1,0.5,a\n2,0.25,b\r\n\n3,0.125,c with spaces\nlast without newline";
  put("feed_format", "lines", "\x00\x04\x10", 3, lines, sizeof lines - 1);
  put("feed_format", "lines_whole", "\x00\x0f\x00", 3, lines, sizeof lines - 1);
  /* a TFRecord file: TensorBoard events as loom's summary writer frames them */
  loom_summary_t *sm;
  if (loom_summary_open(NULL, tmp, &sm) < 0) exit(1);
  for (int i = 0; i < 3; i++) loom_summary_scalar(sm, "loss", i, 1.0 / (i + 1));
  loom_summary_text(sm, "note", 3, "hello");
  char path[4096];
  snprintf(path, sizeof path, "%s", loom_summary_path(sm));
  loom_summary_close(sm);
  size_t n;
  unsigned char *tf = slurp(path, &n);
  put("feed_format", "tfrecord", "\x01\x06\x20", 3, tf, n);
  put("feed_format", "tfrecord_whole", "\x01\x0f\x00", 3, tf, n);
  free(tf);
  /* idx: 5 images of 2x3 bytes, as MNIST's files are */
  unsigned char idx[4 + 12 + 30] = {0, 0, 0x08, 3};
  loom__put_be32(idx + 4, 5);
  loom__put_be32(idx + 8, 2);
  loom__put_be32(idx + 12, 3);
  for (int i = 0; i < 30; i++) idx[16 + i] = (unsigned char)i;
  put("feed_format", "idx_u8", "\x02\x03\x07", 3, idx, sizeof idx);
  unsigned char idxf[4 + 4 + 16] = {0, 0, 0x0d, 1};
  loom__put_be32(idxf + 4, 4);
  put("feed_format", "idx_f32_1d", "\x02\x02\x00", 3, idxf, sizeof idxf);
  static const char fixed[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN";
  put("feed_format", "fixed5", "\x13\x04\x09", 3, fixed, 50); /* fixed:5 */
}

/* ---- ps_proto: shard byte, then requests as a client sends them -------- */
typedef struct {
  ps_wbuf w;
  uint64_t id;
} stream;

static void req(stream *s, uint16_t op, uint16_t flags, uint32_t var, uint32_t count, int rank,
                uint64_t step, uint64_t off, const void *p, size_t n) {
  ps_hdr h = {.len = (uint32_t)n,
              .op = op,
              .flags = flags,
              .var = var,
              .count = count,
              .rank = rank,
              .id = ++s->id,
              .step = step,
              .off = off};
  unsigned char b[PS_HDR];
  ps_hdr_put(b, &h);
  ps_put_bytes(&s->w, b, PS_HDR);
  ps_put_bytes(&s->w, p, n);
}

static void declare(stream *s, uint32_t kind, uint64_t count, loom_ps_optimizer opt,
                    const char *name) {
  ps_decl d = {.kind = kind, .ndim = 1, .count = count, .shape = {count}};
  d.init = (loom_ps_init){.kind = LOOM_PS_UNIFORM, .a = -0.5f, .b = 0.5f, .seed = 7};
  d.opt = opt == LOOM_PS_ADAM ? LOOM_PS_OPT_ADAM(0.01f) : LOOM_PS_OPT_SGD(0.1f);
  snprintf(d.name, sizeof d.name, "%s", name);
  ps_wbuf w = {0};
  ps_decl_put(&w, &d);
  req(s, PS_OP_DECLARE, 0, 0, 0, 0, 0, 0, w.p, w.len);
  free(w.p);
}

static void ps_seeds(void) {
  float g[16];
  for (int i = 0; i < 16; i++) g[i] = 0.125f * (float)i;
  unsigned char sp[2 * 8 + 2 * 4 * 4];
  loom__put_le64(sp, 1), loom__put_le64(sp + 8, 99); /* keys, then 2 rows of 4 */
  memcpy(sp + 16, g, 32);
  const char *dir = "/ckpt"; /* the harness puts its own directory there */
  for (int mode = LOOM_PS_ASYNC; mode <= LOOM_PS_BOUNDED; mode++) {
    stream s = {0};
    unsigned char shard = 0x10; /* 1 shard, 1 worker */
    ps_put_bytes(&s.w, &shard, 1);
    req(&s, PS_OP_CONFIG, (uint16_t)mode, 0, mode == LOOM_PS_BOUNDED ? 2 : 0, 0, 0, 1, NULL, 0);
    declare(&s, PS_DENSE, 16, mode == LOOM_PS_SYNC ? LOOM_PS_ADAM : LOOM_PS_SGD, "dense/w");
    declare(&s, PS_SPARSE, 4, LOOM_PS_SGD, "emb");
    req(&s, PS_OP_PUSH, PS_F_FIRST, 0, 16, 0, 0, 0, g, sizeof g);
    req(&s, PS_OP_SPUSH, PS_F_FIRST, 1, 2, 0, 0, 0, sp, sizeof sp);
    req(&s, PS_OP_STEP, 0, 0, 0, 0, 0, 0, NULL, 0);
    req(&s, PS_OP_PULL, 0, 0, 16, 0, 1, 0, NULL, 0);
    req(&s, PS_OP_SPULL, 0, 1, 2, 0, 1, 0, sp, 16);
    req(&s, PS_OP_BARRIER, 0, 0, 0, 0, 0, 0, NULL, 0);
    req(&s, PS_OP_SAVE, 0, 0, 0, 0, 1, 0, dir, strlen(dir));
    req(&s, PS_OP_COMMIT, 0, 0, 1, 0, 1, 0, dir, strlen(dir));
    req(&s, PS_OP_RESTORE, PS_F_CHECK, 0, 0, 0, PS_STEP_LATEST, 0, dir, strlen(dir));
    req(&s, PS_OP_RESTORE, 0, 0, 0, 0, 1, 0, dir, strlen(dir));
    req(&s, PS_OP_INFO, 0, 0, 0, 0, 0, 0, NULL, 0);
    static const char *const NAMES[] = {"async", "sync", "bounded"};
    put("ps_proto", NAMES[mode], s.w.p, s.w.len, NULL, 0);
    free(s.w.p);
  }
  /* a dense variable split over 3 shards, read by shard 1; a reader */
  stream s = {0};
  unsigned char shard = 0x06; /* 3 shards, this one 1 */
  ps_put_bytes(&s.w, &shard, 1);
  req(&s, PS_OP_CONFIG, LOOM_PS_ASYNC, 0, 0, -1, 0, 2, NULL, 0);
  declare(&s, PS_DENSE, 64, LOOM_PS_SGD, "big");
  req(&s, PS_OP_PULL, 0, 0, 21, -1, 0, 22, NULL, 0);
  req(&s, PS_OP_STEP, 0, 0, 0, -1, 0, 0, NULL, 0);
  put("ps_proto", "split_reader", s.w.p, s.w.len, NULL, 0);
  free(s.w.p);
}

/* ---- ckpt: reader byte, then the file ----------------------------------- */
static void ckpt_seeds(const char *tmp) {
  /* libloom's checkpoint: 3 tensors */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/ckpt", tmp);
  loom_ckpt_t *c;
  if (loom_ckpt_open(NULL, dir, 0, &c) < 0) exit(1);
  float w[6] = {1, 2, 3, 4, 5, 6};
  int64_t k[3] = {-1, 0, 1 << 20};
  double sc = 0.5;
  loom_tensor t[] = {{.name = "layer1/w", .dtype = LOOM_F32, .ndim = 2, .shape = {2, 3}, .data = w},
                     {.name = "ids", .dtype = LOOM_I64, .ndim = 1, .shape = {3}, .data = k},
                     {.name = "lr", .dtype = LOOM_F64, .ndim = 0, .data = &sc},
                     {.name = "empty", .dtype = LOOM_I32, .ndim = 1, .shape = {0}}};
  if (loom_ckpt_save(c, 42, t, 4) < 0) {
    fprintf(stderr, "make_seeds: %s\n", loom_ckpt_errmsg(c));
    exit(1);
  }
  loom_ckpt_close(c);
  char p[8192];
  snprintf(p, sizeof p, "%s/ckpt-%012d.ckpt", dir, 42);
  size_t n;
  unsigned char *b = slurp(p, &n);
  put("ckpt", "loom_ckpt", "\x00", 1, b, n);
  put("ckpt", "loom_ckpt_fixed", "\x04", 1, b, n);
  free(b);
  /* a ps checkpoint: shard 0 of 1 at step 7, a dense Adam and a sparse
   * SGD variable with two rows */
  snprintf(dir, sizeof dir, "%s/ps", tmp);
  ps_state st;
  ps_state_init(&st, 0, 1, 64, 64 << 20);
  ps_decl d = {.kind = PS_DENSE, .ndim = 2, .count = 6, .shape = {2, 3}, .name = "w"};
  d.opt = LOOM_PS_OPT_ADAM(0.01f);
  d.init = (loom_ps_init){.kind = LOOM_PS_NORMAL, .b = 0.1f, .seed = 3};
  uint32_t id;
  char err[512];
  if (ps_state_declare(&st, &d, &id, err, sizeof err) < 0) fail(err);
  ps_dense_apply(st.vars[id], 0, w, 6, true);
  ps_decl e = {.kind = PS_SPARSE, .ndim = 1, .count = 2, .shape = {2}, .name = "emb"};
  e.opt = LOOM_PS_OPT_SGD(0.1f);
  if (ps_state_declare(&st, &e, &id, err, sizeof err) < 0) fail(err);
  unsigned char keys[16];
  loom__put_le64(keys, 5), loom__put_le64(keys + 8, 1234567);
  if (ps_sparse_apply(&st, st.vars[id], keys, w, 2, true) < 0) fail("ps_sparse_apply");
  if (ps_ckpt_write(&st, dir, 7, err, sizeof err) < 0 ||
      ps_ckpt_commit(dir, 7, 1, 3, err, sizeof err) < 0) {
    fprintf(stderr, "make_seeds: %s\n", err);
    exit(1);
  }
  ps_state_free(&st);
  snprintf(p, sizeof p, "%s/step-%012d/shard-0-of-1.bin", dir, 7);
  b = slurp(p, &n);
  put("ckpt", "ps_shard_load", "\x01", 1, b, n);
  put("ckpt", "ps_shard_load_2shards", "\x15", 1, b, n); /* fixed; read by 2 shards */
  put("ckpt", "ps_shard_verify", "\x02", 1, b, n);
  free(b);
  snprintf(p, sizeof p, "%s/step-%012d/MANIFEST.json", dir, 7);
  b = slurp(p, &n);
  put("ckpt", "ps_manifest", "\x03", 1, b, n);
  free(b);
}

/* ---- wire_auth: service and piece size, mode, then the bytes ------------ */
static void auth_seeds(void) {
  static const char *const NAMES[] = {"coord", "ps", "comm"};
  const wire_auth_proto *const protos[] = {&wire_auth_coord, &wire_auth_ps, &wire_auth_comm};
  unsigned char b[2 + WIRE_AUTH_MSG_MAX + 16];
  char name[64];
  for (int i = 0; i < 3; i++) {
    size_t alen = wire_auth_answer_len(protos[i]);
    /* XORed onto the real answer: all zeros is the answer itself */
    memset(b, 0, sizeof b);
    b[0] = (unsigned char)(i | 7 << 2), b[1] = 1;
    snprintf(name, sizeof name, "%s_right", NAMES[i]);
    put("wire_auth", name, b, 2 + alen + 16, NULL, 0); /* and the service's bytes after it */
    b[2 + protos[i]->answer_pre_len + 3] = 0x40;
    snprintf(name, sizeof name, "%s_bad_mac", NAMES[i]);
    put("wire_auth", name, b, 2 + alen, NULL, 0);
    /* a challenge as the server writes it, for the client's side */
    wire_auth_server s;
    size_t n;
    if (wire_auth_server_start(&s, protos[i], "x", NULL, 0, b + 2, &n) < 0) fail("no randomness");
    b[0] = (unsigned char)i, b[1] = 2;
    snprintf(name, sizeof name, "%s_challenge", NAMES[i]);
    put("wire_auth", name, b, 2 + n, NULL, 0);
  }
  static const char junk[] = "\x05\x00GET / HTTP/1.1\r\n\r\n";
  put("wire_auth", "http_instead", junk, sizeof junk - 1, NULL, 0);
}

/* ---- wire_msg: the index of the type in the harness's TYPES[], then the
 * frame's JSON (and, for a message with one, a NUL and the blob) -------- */
enum { MSG_SEL_FEED = 20 }; /* TYPES[20..24]: WIRE_FEED_OPEN..WIRE_FEED_RELEASE */

static void msg_seed(const char *name, const wire_msg *m) {
  unsigned char *frame, sel = (unsigned char)(MSG_SEL_FEED + m->type - WIRE_FEED_OPEN);
  size_t len;
  if (wire_msg_encode(m, &frame, &len) < 0) fail("cannot encode a feed message");
  put("wire_msg", name, &sel, 1, frame + WIRE_HDR, len - WIRE_HDR);
  free(frame);
}

static void msg_seeds(void) {
  msg_seed("feed_open", &(wire_msg){.type = WIRE_FEED_OPEN, .u.feed_open.id = 1});
  msg_seed("feed_lease",
           &(wire_msg){.type = WIRE_FEED_LEASE,
                       .u.feed_lease = {.id = 2, .has_max = true, .max = 4, .wait_ms = 2000}});
  msg_seed("feed_lease_bare", &(wire_msg){.type = WIRE_FEED_LEASE, .u.feed_lease.id = 3});
  msg_seed("feed_done",
           &(wire_msg){.type = WIRE_FEED_DONE,
                       .u.feed_done = {.id = 4, .lease = 7, .records = 1000, .wrote = true}});
  json_t *ids = json_pack("[i, i, I]", 1, 2, (json_int_t)1 << 40);
  wire_msg m = {.type = WIRE_FEED_RENEW, .u.feed_renew = {.id = 5, .leases = ids}};
  msg_seed("feed_renew", &m);
  m.type = WIRE_FEED_RELEASE;
  msg_seed("feed_release", &m);
  json_decref(ids);
  /* what the dispatcher refuses: each one field out of its bounds */
  static const char *const BAD[][2] = {
      {"feed_lease_bad_max", "\x15{\"id\": 1, \"max\": 17, \"wait_ms\": 0}"},
      {"feed_done_no_lease", "\x16{\"id\": 1, \"records\": 3, \"wrote\": true}"},
      {"feed_renew_bad_id", "\x17{\"id\": 1, \"leases\": [2, 0]}"},
  };
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++)
    put("wire_msg", BAD[i][0], BAD[i][1], strlen(BAD[i][1]), NULL, 0);
  /* the feed's answers, in a REPLY (TYPES[15]): good, and one field out */
  static const char *const ANS[][2] = {
      {"reply_feed_opened", "\x0f{\"id\":1,\"rc\":0,\"format\":\"lines\",\"epochs\":2,"
                            "\"epoch\":0,\"splits\":8,\"output\":true,\"lease_ms\":30000,"
                            "\"shuffle\":true,\"growing\":false}"},
      {"reply_feed_leased", "\x0f{\"id\":2,\"rc\":0,\"splits\":[{\"split\":3,\"epoch\":1,"
                            "\"lease\":9,\"path\":\"/d/a\",\"off\":0,\"len\":4096,\"rec\":0,"
                            "\"rseed\":77,\"tmp\":\"/o/.t/3\"},{\"split\":4,\"epoch\":1,"
                            "\"lease\":10,\"path\":\"hdfs://nn/b\",\"off\":4096,\"len\":1,"
                            "\"rec\":5}]}"},
      {"reply_feed_end", "\x0f{\"id\":3,\"rc\":0,\"end\":true}"},
      {"reply_feed_busy", "\x0f{\"id\":4,\"rc\":-4,\"msg\":\"no split is free yet\","
                          "\"leased\":3}"},
      {"reply_feed_renewed", "\x0f{\"id\":5,\"rc\":0,\"stale\":[4,9]}"},
      {"reply_feed_leased_bad_off", "\x0f{\"id\":6,\"rc\":0,\"splits\":[{\"split\":3,"
                                    "\"epoch\":1,\"lease\":9,\"path\":\"/d/a\",\"off\":-1,"
                                    "\"len\":4096,\"rec\":0}]}"},
  };
  for (size_t i = 0; i < sizeof ANS / sizeof ANS[0]; i++)
    put("wire_msg", ANS[i][0], ANS[i][1], strlen(ANS[i][1]), NULL, 0);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR (tests/fuzz/corpus)\n");
    return 2;
  }
  out_dir = argv[1];
  mkdir(out_dir, 0755);
  char tmp[] = "/tmp/loom-seeds-XXXXXX";
  if (!mkdtemp(tmp)) return 1;
  spec_seeds();
  feed_seeds(tmp);
  ps_seeds();
  ckpt_seeds(tmp);
  auth_seeds();
  msg_seeds();
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  return system(cmd) == 0 ? 0 : 1;
}
