/* wire_msg_test.c: every message round-trips through its encoder, a frame
 * and its decoder with its fields intact, and each bad field is refused
 * with a message naming the message and the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire_msg.h"

/* Encodes m, reads the frame back and decodes it into out (and f). */
static void roundtrip(const wire_msg *m, wire_frame *f, wire_msg *out) {
  unsigned char *buf;
  size_t len;
  assert_int_equal(wire_msg_encode(m, &buf, &len), 0);
  wire_reader r;
  wire_reader_init(&r, 1 << 21);
  assert_int_equal(wire_reader_push(&r, buf, len), 0);
  assert_int_equal(wire_reader_pop(&r, f), 1);
  wire_reader_free(&r);
  free(buf);
  char err[256] = "";
  int rc = wire_msg_decode(f, out, err, sizeof err);
  if (rc != 0) fail_msg("%s: %s", wire_msg_name(m->type), err);
  assert_int_equal(out->type, m->type);
}

static void test_agent_messages_roundtrip(void **state) {
  wire_frame f;
  wire_msg d;
  roundtrip(&(wire_msg){.type = WIRE_REGISTER,
                        .u.reg = {.task = "worker:0",
                                  .attempt = 2,
                                  .host = "h",
                                  .port = 4000,
                                  .has_pid = true,
                                  .pid = 9}},
            &f, &d);
  assert_string_equal(d.u.reg.task, "worker:0");
  assert_int_equal(d.u.reg.attempt, 2);
  assert_string_equal(d.u.reg.host, "h");
  assert_int_equal(d.u.reg.port, 4000);
  assert_true(d.u.reg.has_pid);
  assert_int_equal(d.u.reg.pid, 9);
  assert_null(d.u.reg.host_why); /* optional: an older agent sends none */
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_REGISTER,
                        .u.reg = {.task = "worker:1",
                                  .host = "10.77.0.2",
                                  .port = 4001,
                                  .host_why = "lan0, the interface that reaches the coordinator"}},
            &f, &d);
  assert_string_equal(d.u.reg.host_why, "lan0, the interface that reaches the coordinator");
  assert_false(d.u.reg.any_attempt); /* optional: absent is a numbered attempt */
  assert_false(d.u.reg.has_fence);
  wire_msg_free(&d);
  wire_frame_free(&f);

  /* an agent a Spark task started: attempt "any", its stage's fence */
  roundtrip(&(wire_msg){.type = WIRE_REGISTER,
                        .u.reg = {.task = "ps:0",
                                  .host = "h",
                                  .port = 4002,
                                  .any_attempt = true,
                                  .has_fence = true,
                                  .fence = 1LL << 40}},
            &f, &d);
  assert_true(d.u.reg.any_attempt);
  assert_true(d.u.reg.has_fence);
  assert_true(d.u.reg.fence == 1LL << 40);
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(
      &(wire_msg){.type = WIRE_ABORT, .u.abort = {.reason = "stale", .final = true, .stale = true}},
      &f, &d);
  assert_string_equal(d.u.abort.reason, "stale");
  assert_true(d.u.abort.final && d.u.abort.stale);
  wire_msg_free(&d);
  wire_frame_free(&f);

  json_t *argv = json_pack("[s, s]", "python", "train.py");
  json_t *env = json_pack("{s:s}", "A", "1"),
         *files = json_pack("{s:s, s:{s:s}}", "d", "/d", "t", "tar", "/t.tar");
  wire_msg as = {.type = WIRE_ASSIGN,
                 .u.assign = {.workdir = "/w",
                              .job_id = "j",
                              .job_dir = "/j",
                              .role = "worker",
                              .index = 3,
                              .argv = argv,
                              .procs = 4,
                              .env = env,
                              .files = files,
                              .cpus = "0-3",
                              .gpus = "1",
                              .memory = 1LL << 32,
                              .training = true,
                              .rank_base = 12,
                              .world_size = 16,
                              .heartbeat_timeout_ms = 30000}};
  roundtrip(&as, &f, &d);
  const wire_assign *a = &d.u.assign;
  assert_string_equal(a->workdir, "/w");
  assert_string_equal(a->role, "worker");
  assert_null(a->shell);
  assert_true(json_equal(a->argv, argv));
  assert_true(json_equal(a->env, env));
  assert_true(json_equal(a->files, files));
  assert_int_equal(a->procs, 4);
  assert_int_equal(a->memory, 1LL << 32);
  assert_true(a->training);
  assert_int_equal(a->rank_base, 12);
  assert_int_equal(a->world_size, 16);
  assert_int_equal(a->heartbeat_timeout_ms, 30000);
  wire_msg_free(&d);
  wire_frame_free(&f);

  json_t *cl = json_pack("{s:[s]}", "worker", "h:1");
  wire_msg c = {.type = WIRE_CLUSTER,
                .u.cluster = {.cluster = cl,
                              .master_addr = "h",
                              .has_master_port = true,
                              .master_port = 5,
                              .has_generation = true,
                              .generation = 7}};
  roundtrip(&c, &f, &d);
  assert_true(json_equal(d.u.cluster.cluster, cl));
  assert_null(d.u.cluster.tf_cluster);
  assert_string_equal(d.u.cluster.master_addr, "h");
  assert_true(d.u.cluster.has_master_port && d.u.cluster.has_generation);
  assert_false(d.u.cluster.has_rank_base);
  assert_int_equal(d.u.cluster.generation, 7);
  wire_msg_free(&d);
  wire_frame_free(&f);

  json_t *pids = json_pack("[i, i]", 10, 11);
  roundtrip(&(wire_msg){.type = WIRE_STARTED, .u.started.pids = pids}, &f, &d);
  assert_true(json_equal(d.u.started.pids, pids));
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_LOG,
                        .u.log = {.stream = 2, .proc = 1},
                        .blob = (const unsigned char *)"a\nb\n",
                        .blob_len = 4},
            &f, &d);
  assert_int_equal(d.u.log.stream, 2);
  assert_int_equal(d.u.log.proc, 1);
  assert_int_equal(d.blob_len, 4);
  assert_memory_equal(d.blob, "a\nb\n", 4);
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_EXIT,
                        .u.exit = {.code = -1, .signal = 9, .reason = "lost", .lost = true}},
            &f, &d);
  assert_int_equal(d.u.exit.code, -1);
  assert_int_equal(d.u.exit.signal, 9);
  assert_string_equal(d.u.exit.reason, "lost");
  assert_true(d.u.exit.lost);
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_STOP, .u.stop.grace_ms = 1500}, &f, &d);
  assert_int_equal(d.u.stop.grace_ms, 1500);
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_FAIL, .u.fail = {.reason = "no such file", .code = 127}}, &f,
            &d);
  assert_string_equal(d.u.fail.reason, "no such file");
  assert_int_equal(d.u.fail.code, 127);
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_READY}, &f, &d);
  wire_msg_free(&d);
  wire_frame_free(&f);
  roundtrip(&(wire_msg){.type = WIRE_HEARTBEAT}, &f, &d);
  wire_msg_free(&d);
  wire_frame_free(&f);
  json_decref(argv);
  json_decref(env);
  json_decref(files);
  json_decref(cl);
  json_decref(pids);
}

static void test_lib_messages_roundtrip(void **state) {
  wire_frame f;
  wire_msg d;
  roundtrip(&(wire_msg){.type = WIRE_HELLO, .u.hello = {.task = "w:1", .rank = 1, .pid = 5}}, &f,
            &d);
  assert_string_equal(d.u.hello.task, "w:1");
  assert_int_equal(d.u.hello.rank, 1);
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_KV_SET,
                        .u.kv_set = {.id = 1, .key = "k"},
                        .blob = (const unsigned char *)"v",
                        .blob_len = 1},
            &f, &d);
  assert_string_equal(d.u.kv_set.key, "k");
  assert_int_equal(d.blob_len, 1);
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_KV_GET, .u.kv_get = {.id = 2, .key = "k", .timeout_ms = -1}},
            &f, &d);
  assert_int_equal(d.u.kv_get.timeout_ms, -1);
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_KV_ADD, .u.kv_add = {.id = 3, .key = "n", .delta = -7}}, &f,
            &d);
  assert_int_equal(d.u.kv_add.delta, -7);
  wire_msg_free(&d);
  wire_frame_free(&f);

  json_t *detail = json_pack("{s:i}", "epoch", 3);
  roundtrip(&(wire_msg){.type = WIRE_EVENT, .u.event = {.id = 4, .name = "e", .detail = detail}},
            &f, &d);
  assert_true(json_equal(d.u.event.detail, detail));
  wire_msg_free(&d);
  wire_frame_free(&f);
  roundtrip(&(wire_msg){.type = WIRE_EVENT, .u.event = {.id = 4, .name = "e"}}, &f, &d);
  assert_null(d.u.event.detail);
  wire_msg_free(&d);
  wire_frame_free(&f);
  json_decref(detail);

  /* a reply carries the feed's own fields besides its typed ones */
  json_t *extra = json_pack("{s:i}", "leased", 2);
  roundtrip(&(wire_msg){.type = WIRE_REPLY,
                        .u.reply = {.id = 5,
                                    .rc = LOOM_ETIMEDOUT,
                                    .has_value = true,
                                    .value = 42,
                                    .msg = "m",
                                    .json = extra}},
            &f, &d);
  assert_int_equal(d.u.reply.id, 5);
  assert_int_equal(d.u.reply.rc, LOOM_ETIMEDOUT);
  assert_true(d.u.reply.has_value);
  assert_int_equal(d.u.reply.value, 42);
  assert_string_equal(d.u.reply.msg, "m");
  assert_int_equal(json_integer_value(json_object_get(d.u.reply.json, "leased")), 2);
  wire_msg_free(&d);
  wire_frame_free(&f);
  json_decref(extra);

  roundtrip(&(wire_msg){.type = WIRE_ABORT, .u.abort.reason = "over"}, &f, &d);
  assert_string_equal(d.u.abort.reason, "over");
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_METRIC, .u.metric = {.tag = "loss", .step = 9, .value = 0.5}},
            &f, &d);
  assert_string_equal(d.u.metric.tag, "loss");
  assert_int_equal(d.u.metric.step, 9);
  assert_true(d.u.metric.value == 0.5);
  assert_false(d.u.metric.has_id);
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_MEMBERSHIP, .u.membership.generation = 4}, &f, &d);
  assert_int_equal(d.u.membership.generation, 4);
  wire_msg_free(&d);
  wire_frame_free(&f);
}

/* The data feed's requests (libloom's reader to the coordinator's
 * dispatcher); their answers are WIRE_REPLY's further fields. */
static void test_feed_messages_roundtrip(void **state) {
  wire_frame f;
  wire_msg d;
  roundtrip(&(wire_msg){.type = WIRE_FEED_OPEN, .u.feed_open.id = 7}, &f, &d);
  assert_int_equal(d.u.feed_open.id, 7);
  assert_string_equal(wire_msg_name(WIRE_FEED_OPEN), "FEED_OPEN");
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_FEED_LEASE,
                        .u.feed_lease = {.id = 8,
                                         .has_max = true,
                                         .max = FEED_MAX_BATCH_LEASES,
                                         .wait_ms = FEED_MAX_WAIT_MS}},
            &f, &d);
  assert_int_equal(d.u.feed_lease.id, 8);
  assert_true(d.u.feed_lease.has_max);
  assert_int_equal(d.u.feed_lease.max, FEED_MAX_BATCH_LEASES);
  assert_int_equal(d.u.feed_lease.wait_ms, FEED_MAX_WAIT_MS);
  wire_msg_free(&d);
  wire_frame_free(&f);
  /* max and wait_ms may be left out: one split, no waiting */
  roundtrip(&(wire_msg){.type = WIRE_FEED_LEASE, .u.feed_lease.id = 9}, &f, &d);
  assert_false(d.u.feed_lease.has_max);
  assert_int_equal(d.u.feed_lease.wait_ms, 0);
  assert_null(json_object_get(f.json, "max"));
  wire_msg_free(&d);
  wire_frame_free(&f);

  roundtrip(&(wire_msg){.type = WIRE_FEED_DONE,
                        .u.feed_done = {.id = 10,
                                        .lease = (int64_t)1 << 40,
                                        .records = 123456789012,
                                        .wrote = true}},
            &f, &d);
  assert_int_equal(d.u.feed_done.id, 10);
  assert_int_equal(d.u.feed_done.lease, (int64_t)1 << 40);
  assert_int_equal(d.u.feed_done.records, 123456789012);
  assert_true(d.u.feed_done.wrote);
  wire_msg_free(&d);
  wire_frame_free(&f);
  roundtrip(&(wire_msg){.type = WIRE_FEED_DONE, .u.feed_done = {.id = 11, .lease = 1}}, &f, &d);
  assert_int_equal(d.u.feed_done.records, 0);
  assert_false(d.u.feed_done.wrote);
  wire_msg_free(&d);
  wire_frame_free(&f);

  /* RENEW and RELEASE: lease ids past 32 bits, and an empty list */
  json_t *ids = json_pack("[I, I, I]", (json_int_t)1, (json_int_t)3, (json_int_t)1 << 40);
  json_t *none = json_array();
  const uint16_t lists[] = {WIRE_FEED_RENEW, WIRE_FEED_RELEASE};
  for (size_t i = 0; i < 2; i++) {
    wire_msg m = {.type = lists[i]};
    m.u.feed_renew = (wire_feed_leases){.id = 12, .leases = ids};
    roundtrip(&m, &f, &d);
    const wire_feed_leases *got = lists[i] == WIRE_FEED_RENEW ? &d.u.feed_renew : &d.u.feed_release;
    assert_int_equal(got->id, 12);
    assert_true(json_equal(got->leases, ids));
    wire_msg_free(&d);
    wire_frame_free(&f);
    m.u.feed_renew.leases = none;
    roundtrip(&m, &f, &d);
    assert_int_equal(json_array_size(d.u.feed_release.leases), 0);
    wire_msg_free(&d);
    wire_frame_free(&f);
  }
  json_decref(ids);
  json_decref(none);
}

/* Encoding refuses what it cannot represent. */
static void test_encode_refuses(void **state) {
  unsigned char *buf;
  size_t len;
  assert_int_equal(wire_msg_encode(&(wire_msg){.type = WIRE_ABORT}, &buf, &len), LOOM_EINVAL);
  assert_int_equal(wire_msg_encode(&(wire_msg){.type = WIRE_METRIC,
                                               .u.metric = {.tag = "t", .value = 0.0 / 0.0}},
                                   &buf, &len),
                   LOOM_EINVAL);
  assert_int_equal(wire_msg_encode(&(wire_msg){.type = WIRE_CLUSTER}, &buf, &len), LOOM_EINVAL);
  assert_int_equal(wire_msg_encode(&(wire_msg){.type = WIRE_CTL_KILL}, &buf, &len), LOOM_EINVAL);
  /* a RENEW / RELEASE without its list of leases */
  assert_int_equal(wire_msg_encode(&(wire_msg){.type = WIRE_FEED_RENEW}, &buf, &len), LOOM_EINVAL);
  assert_int_equal(wire_msg_encode(&(wire_msg){.type = WIRE_FEED_RELEASE}, &buf, &len),
                   LOOM_EINVAL);
}

#define GOOD_ASSIGN_BUT(field, value)                                                              \
  "{\"workdir\":\"/w\",\"job_id\":\"j\",\"job_dir\":\"/j\",\"role\":\"r\",\"index\":0,"            \
  "\"shell\":\"x\",\"procs\":1,\"env\":{},\"files\":{},\"cpus\":\"\",\"gpus\":\"\","               \
  "\"memory\":0,\"training\":false,\"rank_base\":0,\"world_size\":1,"                              \
  "\"heartbeat_timeout_ms\":0,\"" field "\":" value "}"

static const struct {
  uint16_t type;
  const char *json, *blob;
  const char *err; /* what the message must say */
} BAD[] = {
    {WIRE_REGISTER, "{\"attempt\":0,\"host\":\"h\",\"port\":1}", NULL,
     "REGISTER: field 'task' is missing (it must be a string of 1..79 bytes)"},
    {WIRE_REGISTER, "{\"task\":\"t\",\"attempt\":\"0\",\"host\":\"h\",\"port\":1}", NULL,
     "REGISTER: field 'attempt' must be an integer 0..2147483647"},
    {WIRE_REGISTER, "{\"task\":\"t\",\"attempt\":0,\"host\":\"\",\"port\":1}", NULL,
     "REGISTER: field 'host' must be a string of 1..255 bytes"},
    {WIRE_REGISTER, "{\"task\":\"t\",\"attempt\":0,\"host\":\"h\",\"port\":65536}", NULL,
     "REGISTER: field 'port' must be an integer 1..65535"},
    {WIRE_REGISTER, "{\"task\":\"t\",\"attempt\":0,\"host\":\"h\",\"port\":1,\"pid\":-3}", NULL,
     "REGISTER: field 'pid' must be an integer 0..2147483647"},
    {WIRE_REGISTER, "{\"task\":\"t\",\"attempt\":0,\"host\":\"h\",\"port\":1,\"fence\":-1}", NULL,
     "REGISTER: field 'fence' must be an integer 0..9223372036854775807"},
    {WIRE_REGISTER, "{\"task\":\"t\",\"attempt\":0,\"host\":\"h\",\"port\":1,\"any_attempt\":1}",
     NULL, "REGISTER: field 'any_attempt' must be true or false"},
    {WIRE_REGISTER, "{\"task\":\"t\",\"attempt\":0,\"host\":\"h\",\"port\":1}", "x",
     "REGISTER: carries 1 bytes it should not"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("procs", "1025"), NULL,
     "ASSIGN: field 'procs' must be an integer 1..1024"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("procs", "0"), NULL,
     "ASSIGN: field 'procs' must be an integer 1..1024"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("env", "{\"A\":1}"), NULL,
     "ASSIGN: field 'env' must be an object of strings"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("files", "{\"d\":{\"zip\":\"x\"}}"), NULL,
     "ASSIGN: field 'files' must be an object of paths or {\"tar\"|\"archive\"|\"cwd\": path}"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("files", "{\"d\":{\"tar\":\"x\",\"cwd\":\"y\"}}"), NULL,
     "ASSIGN: field 'files' must be an object of paths or {\"tar\"|\"archive\"|\"cwd\": path}"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("files", "{\"d\":{\"archive\":7}}"), NULL,
     "ASSIGN: field 'files' must be an object of paths or {\"tar\"|\"archive\"|\"cwd\": path}"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("training", "1"), NULL,
     "ASSIGN: field 'training' must be true or false"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("argv", "[\"a\"]"), NULL,
     "ASSIGN: exactly one of fields 'shell' and 'argv' must be given"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("shell", "\"\""), NULL,
     "ASSIGN: field 'shell' must be a string of 1..1048576 bytes"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("rank_base", "-2"), NULL,
     "ASSIGN: field 'rank_base' must be an integer -1..2147483647"},
    {WIRE_ASSIGN, GOOD_ASSIGN_BUT("gpus", "[]"), NULL,
     "ASSIGN: field 'gpus' must be a string of 0..127 bytes"},
    {WIRE_CLUSTER, "{}", "[]", "CLUSTER: the blob must be a JSON object with a 'cluster' object"},
    {WIRE_CLUSTER, "{}", "{\"cluster\":{},\"tf_cluster\":1}",
     "CLUSTER: the blob's 'tf_cluster' must be an object"},
    {WIRE_CLUSTER, "{\"master_port\":-1}", "{\"cluster\":{}}",
     "CLUSTER: field 'master_port' must be an integer 0..65535"},
    {WIRE_STARTED, "{\"pids\":[1,\"2\"]}", NULL,
     "STARTED: field 'pids' must be an array of 0..1024 process ids"},
    {WIRE_LOG, "{\"s\":3,\"p\":0}", NULL, "LOG: field 's' must be an integer 1..2"},
    {WIRE_LOG, "{\"s\":1,\"p\":1024}", NULL, "LOG: field 'p' must be an integer 0..1023"},
    {WIRE_EXIT, "{\"code\":0,\"signal\":200}", NULL,
     "EXIT: field 'signal' must be an integer 0..127"},
    {WIRE_EXIT, "{\"code\":0,\"signal\":0,\"lost\":\"yes\"}", NULL,
     "EXIT: field 'lost' must be true or false"},
    {WIRE_STOP, "{\"grace_ms\":-1}", NULL, "STOP: field 'grace_ms' must be an integer"},
    {WIRE_FAIL, "{\"reason\":7,\"code\":1}", NULL, "FAIL: field 'reason' must be a string"},
    {WIRE_HELLO, "{\"task\":\"t\",\"rank\":1.5,\"pid\":1}", NULL,
     "HELLO: field 'rank' must be an integer"},
    {WIRE_KV_SET, "{\"id\":1,\"key\":\"\"}", NULL,
     "KV_SET: field 'key' must be a string of 1..255 bytes"},
    {WIRE_KV_GET, "{\"id\":-1,\"key\":\"k\",\"timeout_ms\":0}", NULL,
     "KV_GET: field 'id' must be an integer"},
    {WIRE_KV_GET, "{\"id\":1,\"key\":\"k\"}", NULL, "KV_GET: field 'timeout_ms' is missing"},
    {WIRE_KV_ADD, "{\"id\":1,\"key\":\"k\",\"delta\":1.0}", NULL,
     "KV_ADD: field 'delta' must be an integer"},
    {WIRE_EVENT, "{\"id\":1,\"name\":\"e\",\"detail\":[1]}", NULL,
     "EVENT: field 'detail' must be an object"},
    {WIRE_REPLY, "{\"id\":1,\"rc\":1}", NULL,
     "REPLY: field 'rc' must be an integer -2147483648..0"},
    {WIRE_REPLY, "{\"id\":1,\"rc\":0,\"msg\":false}", NULL, "REPLY: field 'msg' must be a string"},
    {WIRE_ABORT, "{}", NULL, "ABORT: field 'reason' is missing"},
    {WIRE_METRIC, "{\"tag\":\"t\",\"step\":1,\"value\":\"1\"}", NULL,
     "METRIC: field 'value' must be a number"},
    {WIRE_METRIC, "{\"tag\":\"\",\"step\":1,\"value\":1}", NULL,
     "METRIC: field 'tag' must be a string of 1..128 bytes"},
    {WIRE_MEMBERSHIP, "{\"generation\":null}", NULL,
     "MEMBERSHIP: field 'generation' must be an integer"},
    {WIRE_FEED_OPEN, "{}", NULL,
     "FEED_OPEN: field 'id' is missing (it must be an integer 0..9223372036854775807)"},
    {WIRE_FEED_OPEN, "{\"id\":\"x\"}", NULL, "FEED_OPEN: field 'id' must be an integer"},
    {WIRE_FEED_LEASE, "{\"id\":1,\"max\":0}", NULL,
     "FEED_LEASE: field 'max' must be an integer 1..16"},
    {WIRE_FEED_LEASE, "{\"id\":1,\"max\":17}", NULL,
     "FEED_LEASE: field 'max' must be an integer 1..16"},
    {WIRE_FEED_LEASE, "{\"id\":1,\"wait_ms\":-1}", NULL,
     "FEED_LEASE: field 'wait_ms' must be an integer 0..60000"},
    {WIRE_FEED_LEASE, "{\"id\":1,\"wait_ms\":60001}", NULL,
     "FEED_LEASE: field 'wait_ms' must be an integer 0..60000"},
    {WIRE_FEED_LEASE, "{\"id\":1}", "x", "FEED_LEASE: carries 1 bytes it should not"},
    {WIRE_FEED_DONE, "{\"id\":1}", NULL,
     "FEED_DONE: field 'lease' is missing (it must be an integer 1..9223372036854775807)"},
    {WIRE_FEED_DONE, "{\"id\":1,\"lease\":0}", NULL,
     "FEED_DONE: field 'lease' must be an integer 1..9223372036854775807"},
    {WIRE_FEED_DONE, "{\"id\":1,\"lease\":5,\"wrote\":1}", NULL,
     "FEED_DONE: field 'wrote' must be true or false"},
    {WIRE_FEED_DONE, "{\"id\":1,\"lease\":5,\"records\":-4}", NULL,
     "FEED_DONE: field 'records' must be an integer 0..9223372036854775807"},
    {WIRE_FEED_RENEW, "{\"id\":1}", NULL,
     "FEED_RENEW: field 'leases' is missing (it must be an array of 0..256 lease ids"},
    {WIRE_FEED_RENEW, "{\"id\":1,\"leases\":3}", NULL,
     "FEED_RENEW: field 'leases' must be an array of 0..256 lease ids (integers from 1)"},
    {WIRE_FEED_RENEW, "{\"id\":1,\"leases\":[\"a\"]}", NULL,
     "FEED_RENEW: field 'leases' must be an array of 0..256 lease ids"},
    {WIRE_FEED_RELEASE, "{\"id\":1,\"leases\":[0]}", NULL,
     "FEED_RELEASE: field 'leases' must be an array of 0..256 lease ids"},
    {WIRE_FEED_RELEASE, "{\"id\":1,\"leases\":[1.0]}", NULL,
     "FEED_RELEASE: field 'leases' must be an array of 0..256 lease ids"},
    {WIRE_FEED_FIRST + 5, "{\"id\":1}", NULL, "message type 45 is not one this peer decodes"},
    {WIRE_CTL_KILL, "{}", NULL, "message type 50 is not one this peer decodes"},
};

static void test_bad_fields(void **state) {
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
    json_error_t je;
    json_t *j = json_loads(BAD[i].json, JSON_ALLOW_NUL, &je);
    if (!j) fail_msg("case %zu: bad test JSON: %s", i, je.text);
    unsigned char *buf;
    size_t len;
    const char *blob = BAD[i].blob;
    assert_int_equal(wire_encode(BAD[i].type, j, blob, blob ? strlen(blob) : 0, &buf, &len), 0);
    json_decref(j);
    wire_reader r;
    wire_reader_init(&r, 1 << 16);
    assert_int_equal(wire_reader_push(&r, buf, len), 0);
    wire_frame f;
    if (wire_reader_pop(&r, &f) != 1) fail_msg("case %zu: the frame did not read back", i);
    wire_msg m;
    char err[256] = "";
    int rc = wire_msg_decode(&f, &m, err, sizeof err);
    if (rc != LOOM_EPROTO || strncmp(err, BAD[i].err, strlen(BAD[i].err)) != 0)
      fail_msg("case %zu: rc %d, message \"%s\", want \"%s\"", i, rc, err, BAD[i].err);
    wire_frame_free(&f);
    wire_reader_free(&r);
    free(buf);
  }
}

/* ---- the feed's answers ------------------------------------------------ */
/* Decodes the answer in REPLY frame text json with the decoder of kind
 * ('o' OPEN, 'l' LEASE, 'r' RENEW) and reply rc; the message in err. */
static int answer_decode(char kind, const char *json, int rc, void *out, char *err, size_t errlen) {
  json_error_t je;
  json_t *j = json_loads(json, 0, &je);
  if (!j) fail_msg("bad test JSON %s: %s", json, je.text);
  int r = kind == 'o'   ? wire_feed_opened_decode(j, out, err, errlen)
          : kind == 'l' ? wire_feed_leased_decode(j, rc, out, err, errlen)
                        : wire_feed_renewed_decode(j, out, err, errlen);
  json_decref(j); /* out borrows from it: only rc and err are looked at */
  return r;
}

/* Each answer goes through the REPLY it rides in, as the coordinator sends
 * it, and comes out of its decoder with its fields intact. */
static void test_feed_answers_roundtrip(void **state) {
  wire_frame f;
  wire_msg d;
  char err[256] = "";
  wire_feed_opened o = {.format = "lines",
                        .epochs = 3,
                        .epoch = 2,
                        .splits = 40,
                        .output = true,
                        .lease_ms = 30000,
                        .shuffle = false,
                        .growing = true};
  json_t *oj = wire_feed_opened_encode(&o);
  assert_non_null(oj);
  /* the field names on the wire are the ones clients have always read */
  assert_string_equal(json_string_value(json_object_get(oj, "format")), "lines");
  assert_true(json_is_false(json_object_get(oj, "shuffle")));
  assert_int_equal(json_integer_value(json_object_get(oj, "lease_ms")), 30000);
  assert_int_equal(json_object_size(oj), 8);
  roundtrip(&(wire_msg){.type = WIRE_REPLY, .u.reply = {.id = 7, .rc = 0, .json = oj}}, &f, &d);
  json_decref(oj);
  wire_feed_opened o2;
  if (wire_feed_opened_decode(d.u.reply.json, &o2, err, sizeof err) < 0) fail_msg("%s", err);
  assert_string_equal(o2.format, "lines");
  assert_int_equal(o2.epochs, 3);
  assert_int_equal(o2.epoch, 2);
  assert_int_equal(o2.splits, 40);
  assert_true(o2.output);
  assert_int_equal(o2.lease_ms, 30000);
  assert_false(o2.shuffle);
  assert_true(o2.growing);
  wire_msg_free(&d);
  wire_frame_free(&f);

  wire_feed_leased l = {.nsplits = 2};
  l.splits[0] = (wire_feed_split){.split = 4,
                                  .epoch = 1,
                                  .lease = 9,
                                  .path = "/data/a.txt",
                                  .off = 0,
                                  .len = 1024,
                                  .rec = 0,
                                  .has_rseed = true,
                                  .rseed = 77};
  l.splits[1] = (wire_feed_split){.split = 5,
                                  .epoch = 1,
                                  .lease = 10,
                                  .path = "hdfs://nn:8020/b",
                                  .off = 1024,
                                  .len = 1,
                                  .rec = 12,
                                  .tmp = "/out/.tmp/5"};
  json_t *lj = wire_feed_leased_encode(&l);
  assert_non_null(lj);
  assert_null(json_object_get(lj, "end"));
  assert_null(json_object_get(json_array_get(json_object_get(lj, "splits"), 0), "tmp"));
  assert_null(json_object_get(json_array_get(json_object_get(lj, "splits"), 1), "rseed"));
  roundtrip(&(wire_msg){.type = WIRE_REPLY, .u.reply = {.id = 8, .json = lj}}, &f, &d);
  json_decref(lj);
  wire_feed_leased l2;
  if (wire_feed_leased_decode(d.u.reply.json, 0, &l2, err, sizeof err) < 0) fail_msg("%s", err);
  assert_false(l2.end);
  assert_false(l2.has_leased);
  assert_int_equal(l2.nsplits, 2);
  assert_int_equal(l2.splits[0].split, 4);
  assert_int_equal(l2.splits[0].lease, 9);
  assert_string_equal(l2.splits[0].path, "/data/a.txt");
  assert_int_equal(l2.splits[0].len, 1024);
  assert_true(l2.splits[0].has_rseed);
  assert_int_equal(l2.splits[0].rseed, 77);
  assert_null(l2.splits[0].tmp);
  assert_string_equal(l2.splits[1].path, "hdfs://nn:8020/b");
  assert_int_equal(l2.splits[1].off, 1024);
  assert_int_equal(l2.splits[1].rec, 12);
  assert_false(l2.splits[1].has_rseed);
  assert_string_equal(l2.splits[1].tmp, "/out/.tmp/5");
  wire_msg_free(&d);
  wire_frame_free(&f);

  /* the end; and nothing free yet (rc LOOM_ETIMEDOUT, beside the msg) */
  json_t *ej = wire_feed_leased_encode(&(wire_feed_leased){.end = true});
  assert_true(json_is_true(json_object_get(ej, "end")));
  assert_int_equal(json_object_size(ej), 1);
  assert_int_equal(wire_feed_leased_decode(ej, 0, &l2, err, sizeof err), 0);
  assert_true(l2.end);
  assert_int_equal(l2.nsplits, 0);
  json_decref(ej);
  json_t *bj = wire_feed_leased_encode(&(wire_feed_leased){.has_leased = true, .leased = 3});
  assert_int_equal(json_object_size(bj), 1);
  json_object_set_new(bj, "msg", json_string("no split is free yet"));
  assert_int_equal(wire_feed_leased_decode(bj, LOOM_ETIMEDOUT, &l2, err, sizeof err), 0);
  assert_true(l2.has_leased);
  assert_int_equal(l2.leased, 3);
  json_decref(bj);

  json_t *stale = json_pack("[I, I]", (json_int_t)3, (json_int_t)11);
  json_t *rj = wire_feed_renewed_encode(&(wire_feed_renewed){.stale = stale});
  json_decref(stale);
  wire_feed_renewed r2;
  assert_int_equal(wire_feed_renewed_decode(rj, &r2, err, sizeof err), 0);
  assert_int_equal(json_array_size(r2.stale), 2);
  assert_int_equal(json_integer_value(json_array_get(r2.stale, 1)), 11);
  json_decref(rj);
  /* a required value left out is no answer */
  assert_null(wire_feed_renewed_encode(&(wire_feed_renewed){0}));
  assert_null(wire_feed_opened_encode(&(wire_feed_opened){.epochs = 1}));
  (void)state;
}

#define SPLIT_BUT(field, value)                                                                    \
  "{\"split\":0,\"epoch\":0,\"lease\":1,\"path\":\"/p\",\"off\":0,\"len\":1,\"rec\":0,\"" field    \
  "\":" value "}"
#define GOOD_SPLIT SPLIT_BUT("tmp", "\"/t\"")
#define OPENED_BUT(field, value)                                                                   \
  "{\"format\":\"lines\",\"epochs\":2,\"epoch\":0,\"splits\":1,\"output\":false,"                  \
  "\"lease_ms\":1000,\"shuffle\":false,\"growing\":false,\"" field "\":" value "}"

static const struct {
  char kind; /* 'o' OPEN, 'l' LEASE, 'r' RENEW */
  int rc;
  const char *json;
  const char *err; /* NULL: it decodes; else what the message must say */
} ANSWERS[] = {
    {'o', 0, OPENED_BUT("x", "1"), NULL},
    {'o', 0, OPENED_BUT("splits", "0"),
     "FEED_OPEN reply: field 'splits' must be at least 1 for an input that does not grow"},
    {'o', 0, OPENED_BUT("growing", "true,\"splits\":0"), NULL},
    {'o', 0, OPENED_BUT("epoch", "2"),
     "FEED_OPEN reply: field 'epoch' (2) must be below 'epochs' (2)"},
    {'o', 0, OPENED_BUT("epochs", "1000001"),
     "FEED_OPEN reply: field 'epochs' must be an integer 1..1000000"},
    {'o', 0, OPENED_BUT("lease_ms", "2"),
     "FEED_OPEN reply: field 'lease_ms' must be an integer 3..9223372036854775807"},
    {'o', 0, OPENED_BUT("format", "\"\""),
     "FEED_OPEN reply: field 'format' must be a string of 1..255 bytes"},
    {'o', 0, OPENED_BUT("output", "1"), "FEED_OPEN reply: field 'output' must be true or false"},
    {'o', 0, OPENED_BUT("splits", "4294967296"),
     "FEED_OPEN reply: field 'splits' must be an integer 0..4294967295"},
    {'o', 0, "{\"msg\":\"x\"}", "FEED_OPEN reply: field 'format' is missing"},
    {'o', 0, "[]", "FEED_OPEN reply: not a JSON object"},
    {'l', 0, "{\"end\":true}", NULL},
    {'l', 0, "{\"splits\":[" GOOD_SPLIT "]}", NULL},
    {'l', 0, "{\"splits\":[" GOOD_SPLIT "," SPLIT_BUT("rseed", "5") "]}", NULL},
    {'l', LOOM_ETIMEDOUT, "{\"msg\":\"m\",\"leased\":2}", NULL},
    {'l', LOOM_ETIMEDOUT, "{\"msg\":\"m\",\"leased\":-2}",
     "FEED_LEASE reply: field 'leased' must be an integer 0..9223372036854775807"},
    {'l', 0, "{}", "FEED_LEASE reply: exactly one of fields 'end' (true) and 'splits'"},
    {'l', 0, "{\"end\":false}", "FEED_LEASE reply: exactly one of fields 'end' (true)"},
    {'l', 0, "{\"end\":true,\"splits\":[" GOOD_SPLIT "]}",
     "FEED_LEASE reply: exactly one of fields 'end' (true)"},
    {'l', 0, "{\"end\":1}", "FEED_LEASE reply: field 'end' must be true or false"},
    {'l', 0, "{\"splits\":[]}", "FEED_LEASE reply: field 'splits' must be an array of 1..16"},
    {'l', 0, "{\"splits\":{}}", "FEED_LEASE reply: field 'splits' must be an array of 1..16"},
    {'l', 0,
     "{\"splits\":[" GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT
     "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT
     "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT "," GOOD_SPLIT "]}",
     "FEED_LEASE reply: field 'splits' must be an array of 1..16"},
    {'l', 0, "{\"splits\":[" GOOD_SPLIT ",7]}", "FEED_LEASE reply: splits[1] must be an object"},
    {'l', 0, "{\"splits\":[" GOOD_SPLIT "," GOOD_SPLIT "," SPLIT_BUT("off", "-1") "]}",
     "FEED_LEASE reply: splits[2].off must be an integer 0..4611686018427387904"},
    {'l', 0, "{\"splits\":[" SPLIT_BUT("len", "0") "]}",
     "FEED_LEASE reply: splits[0].len must be an integer 1..4611686018427387904"},
    {'l', 0, "{\"splits\":[" SPLIT_BUT("path", "\"\"") "]}",
     "FEED_LEASE reply: splits[0].path must be a string of 1..4096 bytes"},
    {'l', 0, "{\"splits\":[" SPLIT_BUT("path", "7") "]}",
     "FEED_LEASE reply: splits[0].path must be a string of 1..4096 bytes"},
    {'l', 0, "{\"splits\":[" SPLIT_BUT("lease", "0") "]}",
     "FEED_LEASE reply: splits[0].lease must be an integer 1..9223372036854775807"},
    {'l', 0, "{\"splits\":[" SPLIT_BUT("rec", "1099511627777") "]}",
     "FEED_LEASE reply: splits[0].rec must be an integer 0..1099511627776"},
    {'l', 0, "{\"splits\":[" SPLIT_BUT("rseed", "1.5") "]}",
     "FEED_LEASE reply: splits[0].rseed must be an integer 0..9223372036854775807"},
    {'l', 0, "{\"splits\":[" SPLIT_BUT("tmp", "false") "]}",
     "FEED_LEASE reply: splits[0].tmp must be a string of 1..4096 bytes"},
    {'l', 0, "{\"splits\":[" SPLIT_BUT("epoch", "1000000") "]}",
     "FEED_LEASE reply: splits[0].epoch must be an integer 0..999999"},
    {'l', 0, "{\"splits\":[{\"split\":0}]}",
     "FEED_LEASE reply: splits[0].epoch is missing (it must be an integer 0..999999)"},
    {'r', 0, "{\"stale\":[]}", NULL},
    {'r', 0, "{\"stale\":[4,5]}", NULL},
    {'r', 0, "{}", "FEED_RENEW reply: field 'stale' is missing"},
    {'r', 0, "{\"stale\":[0]}",
     "FEED_RENEW reply: field 'stale' must be an array of 0..256 lease ids"},
    {'r', 0, "{\"stale\":\"3\"}",
     "FEED_RENEW reply: field 'stale' must be an array of 0..256 lease ids"},
};

static void test_feed_answers(void **state) {
  for (size_t i = 0; i < sizeof ANSWERS / sizeof ANSWERS[0]; i++) {
    union {
      wire_feed_opened o;
      wire_feed_leased l;
      wire_feed_renewed r;
    } out;
    char err[256] = "";
    int rc = answer_decode(ANSWERS[i].kind, ANSWERS[i].json, ANSWERS[i].rc, &out, err, sizeof err);
    if (!ANSWERS[i].err) {
      if (rc != 0) fail_msg("case %zu: rc %d, message \"%s\", want it decoded", i, rc, err);
    } else if (rc != LOOM_EPROTO || strncmp(err, ANSWERS[i].err, strlen(ANSWERS[i].err)) != 0) {
      fail_msg("case %zu: rc %d, message \"%s\", want \"%s\"", i, rc, err, ANSWERS[i].err);
    }
  }
  (void)state;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_agent_messages_roundtrip),
      cmocka_unit_test(test_lib_messages_roundtrip),
      cmocka_unit_test(test_feed_messages_roundtrip),
      cmocka_unit_test(test_encode_refuses),
      cmocka_unit_test(test_bad_fields),
      cmocka_unit_test(test_feed_answers_roundtrip),
      cmocka_unit_test(test_feed_answers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
