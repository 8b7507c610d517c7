/* feed_dispatch_test.c: the coordinator's split dispatcher, driven through
 * its contract (coord/feed_dispatch.h) with fake connections: leases, commits by
 * rename, a stale holder's DONE refused after its lease expired, leases
 * back from dead tasks and closed connections, the epoch barrier with
 * deferred requests, reproducible shuffles, whole-job attempts,
 * malformed requests, a growing input (feed.follow) and feed.consume. The dispatcher lives in the loom command, so it is
 * compiled in here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coord/feed_dispatch.c"

static char dir[64];

typedef struct {
  void *conn;
  json_int_t id;
  int rc;
  json_t *extra;
} reply_t;
static reply_t reps[512];
static int nreps;

static void on_reply(void *conn, json_int_t id, int rc, json_t *extra, const void *blob,
                     size_t len) {
  (void)blob;
  (void)len;
  assert_true(nreps < (int)LOOM__ARRAY_LEN(reps));
  reps[nreps++] = (reply_t){conn, id, rc, extra ? extra : json_object()};
}

static void clear_replies(void) {
  for (int i = 0; i < nreps; i++) json_decref(reps[i].extra);
  nreps = 0;
}

static int setup(void **state) {
  (void)state;
  strcpy(dir, "/tmp/feeddisp-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  char p[128];
  snprintf(p, sizeof p, "%s/in", dir);
  mkdir(p, 0755);
  for (int i = 0; i < 6; i++) { /* six small files: six splits */
    snprintf(p, sizeof p, "%s/in/f%d.txt", dir, i);
    FILE *f = fopen(p, "w");
    fprintf(f, "file %d line 1\nfile %d line 2\n", i, i);
    fclose(f);
  }
  setenv("LOOM_FEED_LEASE_MS", "1000", 1);
  setenv("LOOM_LOG", "error", 1); /* the take-backs below are expected */
  return 0;
}

static int teardown(void **state) {
  (void)state;
  clear_replies();
  test_rm_rf(dir);
  return 0;
}

static int counter;

/* A dispatcher of the feed spec (taken), with the extra members. */
static feed_dispatch *create(json_t *spec, const char *extra_json) {
  char err[512] = "";
  if (extra_json) {
    json_t *x = json_loads(extra_json, 0, NULL);
    assert_non_null(x);
    json_object_update(spec, x);
    json_decref(x);
  }
  feed_dispatch *d = NULL;
  int rc = feed_dispatch_create(spec, dir, dir, on_reply, &d, err, sizeof err);
  json_decref(spec);
  if (rc) fail_msg("create: %s", err);
  return d;
}

/* A dispatcher over the six files with the given extra spec members. */
static feed_dispatch *make(const char *extra_json, bool output) {
  char glob[128], out[128];
  snprintf(glob, sizeof glob, "%s/in/*.txt", dir);
  snprintf(out, sizeof out, "%s/out%d", dir, ++counter);
  json_t *spec = json_pack("{s:[s], s:s}", "input", glob, "format", "lines");
  if (output) json_object_set_new(spec, "output", json_string(out));
  return create(spec, extra_json);
}

static json_int_t next_id;

/* A frame as the coordinator's connection takes it: decoded by
 * wire_msg_decode (a malformed one, or one of no known type, closes the
 * connection: LOOM_EPROTO here), then given to the dispatcher. */
static int dispatch_frame(feed_dispatch *d, void *conn, const char *task, const wire_frame *f) {
  wire_msg m;
  char err[200];
  if (!wire_msg_name(f->type) || wire_msg_decode(f, &m, err, sizeof err) < 0) return LOOM_EPROTO;
  int rc = feed_dispatch_msg(d, conn, task, &m);
  wire_msg_free(&m);
  return rc;
}

/* Sends a request; returns the dispatcher's return code. */
static int send_req(feed_dispatch *d, void *conn, const char *task, int type, json_t *j) {
  if (!json_object_get(j, "id")) json_object_set_new(j, "id", json_integer(++next_id));
  wire_frame f = {.type = (uint16_t)type, .json = j};
  int rc = dispatch_frame(d, conn, task, &f);
  json_decref(j);
  return rc;
}

/* The reply to the last request, or NULL if none came (deferred). */
static reply_t *reply_to_last(void) {
  for (int i = nreps - 1; i >= 0; i--)
    if (reps[i].id == next_id) return &reps[i];
  return NULL;
}

static reply_t *lease_req(feed_dispatch *d, void *conn, const char *task, int max, int wait) {
  assert_int_equal(send_req(d, conn, task, WIRE_FEED_LEASE,
                            json_pack("{s:i, s:i}", "max", max, "wait_ms", wait)),
                   0);
  return reply_to_last();
}

static json_t *split_of(reply_t *r, size_t i) {
  return json_array_get(json_object_get(r->extra, "splits"), i);
}

static json_int_t ival(json_t *j, const char *k) {
  return json_integer_value(json_object_get(j, k));
}

static int done(feed_dispatch *d, void *conn, json_int_t lease_id, bool wrote) {
  assert_int_equal(
      send_req(d, conn, "worker:0", WIRE_FEED_DONE,
               json_pack("{s:I, s:i, s:b}", "lease", lease_id, "records", 2, "wrote", wrote)),
      0);
  return reply_to_last()->rc;
}

static void put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static json_int_t status_int(feed_dispatch *d, const char *k) {
  json_t *s = feed_dispatch_status(d);
  json_int_t v = ival(s, k);
  json_decref(s);
  return v;
}

static int A, B; /* fake connections: their addresses */

static void test_lease_and_commit(void **state) {
  (void)state;
  feed_dispatch *d = make(NULL, true);
  reply_t *r = lease_req(d, &A, "worker:0", 1, 0);
  assert_non_null(r);
  assert_int_equal(r->rc, 0);
  json_t *s = split_of(r, 0);
  assert_int_equal(ival(s, "split"), 0);
  assert_int_equal(ival(s, "epoch"), 0);
  assert_int_equal(ival(s, "off"), 0);
  assert_int_equal(ival(s, "len"), 28);
  assert_non_null(strstr(json_string_value(json_object_get(s, "path")), "/in/f0.txt"));
  const char *tmp = json_string_value(json_object_get(s, "tmp"));
  assert_non_null(strstr(tmp, "/.tmp/part-00000-e0.worker-0."));
  json_int_t lid = ival(s, "lease");
  put_file(tmp, "result\n");
  char part[160];
  snprintf(part, sizeof part, "%s/out%d/part-00000", dir, counter);
  assert_false(exists(part));
  assert_int_equal(done(d, &A, lid, true), 0);
  assert_true(exists(part)); /* committed by rename */
  assert_false(exists(tmp));
  assert_int_equal(done(d, &A, lid, true), LOOM_ESTATE); /* not twice */
  assert_int_equal(status_int(d, "done"), 1);
  assert_int_equal(status_int(d, "committed"), 1);
  assert_int_equal(status_int(d, "records"), 2);
  /* a DONE that says it wrote, without the file: refused, split read again */
  r = lease_req(d, &A, "worker:0", 1, 0);
  s = split_of(r, 0);
  assert_int_equal(ival(s, "split"), 1);
  assert_int_equal(done(d, &A, ival(s, "lease"), true), LOOM_EIO);
  assert_non_null(
      strstr(json_string_value(json_object_get(reply_to_last()->extra, "msg")), "cannot commit"));
  r = lease_req(d, &B, "worker:1", 1, 0);
  assert_int_equal(ival(split_of(r, 0), "split"), 1);
  feed_dispatch_destroy(d);
  clear_replies();
}

static void test_expired_lease_is_refused(void **state) {
  (void)state;
  feed_dispatch *d = make(NULL, true);
  reply_t *r = lease_req(d, &A, "worker:0", 1, 0);
  json_t *s = json_incref(split_of(r, 0));
  json_int_t la = ival(s, "lease");
  const char *tmp_a = json_string_value(json_object_get(s, "tmp"));
  put_file(tmp_a, "from A\n");
  /* A renews once: still current */
  assert_int_equal(send_req(d, &A, "worker:0", WIRE_FEED_RENEW, json_pack("{s:[I]}", "leases", la)),
                   0);
  assert_int_equal(json_array_size(json_object_get(reply_to_last()->extra, "stale")), 0);
  feed_dispatch_tick(d, loom__now_ms() + 500);
  assert_int_equal(status_int(d, "leased"), 1);
  feed_dispatch_tick(d, loom__now_ms() + 2000); /* A went silent past the lease */
  assert_int_equal(status_int(d, "leased"), 0);
  assert_int_equal(status_int(d, "expired"), 1);
  assert_false(exists(tmp_a)); /* its unfinished output is gone */
  r = lease_req(d, &B, "worker:1", 1, 0);
  json_t *sb = split_of(r, 0);
  assert_int_equal(ival(sb, "split"), ival(s, "split")); /* the same split, again */
  assert_true(ival(sb, "lease") != la);
  put_file(json_string_value(json_object_get(sb, "tmp")), "from B\n");
  /* A wakes up: its renewal says stale, its DONE is refused */
  assert_int_equal(send_req(d, &A, "worker:0", WIRE_FEED_RENEW, json_pack("{s:[I]}", "leases", la)),
                   0);
  assert_int_equal(json_array_size(json_object_get(reply_to_last()->extra, "stale")), 1);
  put_file(tmp_a, "from A, late\n");
  assert_int_equal(done(d, &A, la, true), LOOM_ESTATE);
  assert_int_equal(done(d, &B, ival(sb, "lease"), true), 0);
  char part[160], *text;
  size_t len;
  snprintf(part, sizeof part, "%s/out%d/part-00000", dir, counter);
  assert_int_equal(loom__read_file(part, 1024, &text, &len), 0);
  assert_string_equal(text, "from B\n");
  free(text);
  assert_int_equal(status_int(d, "stale"), 1);
  json_decref(s);
  feed_dispatch_destroy(d);
  clear_replies();
}

static void test_dead_task_and_closed_connection(void **state) {
  (void)state;
  feed_dispatch *d = make(NULL, false);
  reply_t *r = lease_req(d, &A, "worker:0", 3, 0);
  assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 3);
  assert_null(json_object_get(split_of(r, 0), "tmp")); /* no output: no temporary file */
  feed_dispatch_task_gone(d, "worker:0");
  assert_int_equal(status_int(d, "leased"), 0);
  r = lease_req(d, &B, "worker:1", 6, 0);
  assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 6);
  /* returned splits come first */
  for (size_t i = 0; i < 3; i++) assert_true(ival(split_of(r, i), "split") < 3);
  feed_dispatch_conn_gone(d, &B);
  assert_int_equal(status_int(d, "leased"), 0);
  /* a waiting request of a closed connection is never answered */
  r = lease_req(d, &A, "worker:0", 6, 0);
  assert_null(lease_req(d, &B, "worker:1", 1, 5000));
  int before = nreps;
  feed_dispatch_conn_gone(d, &B);
  feed_dispatch_task_gone(d, "worker:0"); /* splits free again: B is gone, no reply */
  assert_int_equal(nreps, before);
  feed_dispatch_destroy(d);
  clear_replies();
}

static void test_epoch_barrier_and_end(void **state) {
  (void)state;
  feed_dispatch *d = make("{\"epochs\": 2}", false);
  reply_t *r = lease_req(d, &A, "worker:0", 6, 0);
  json_int_t ids[6];
  for (int i = 0; i < 6; i++) ids[i] = ival(split_of(r, (size_t)i), "lease");
  /* B finds nothing free and waits */
  assert_null(lease_req(d, &B, "worker:1", 2, 5000));
  json_int_t waiting = next_id;
  for (int i = 0; i < 5; i++) assert_int_equal(done(d, &A, ids[i], false), 0);
  for (int i = 0; i < nreps; i++) assert_true(reps[i].id != waiting); /* still waiting */
  assert_int_equal(done(d, &A, ids[5], false), 0);                    /* epoch 0 complete */
  reply_t *w = NULL;
  for (int i = 0; i < nreps; i++)
    if (reps[i].id == waiting) w = &reps[i];
  assert_non_null(w);
  assert_int_equal(w->rc, 0);
  assert_ptr_equal(w->conn, &B);
  assert_int_equal(json_array_size(json_object_get(w->extra, "splits")), 2);
  assert_int_equal(ival(split_of(w, 0), "epoch"), 1);
  assert_int_equal(status_int(d, "epoch"), 1);
  /* a short wait that nothing answers times out */
  r = lease_req(d, &A, "worker:0", 4, 0);
  assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 4);
  assert_null(lease_req(d, &A, "worker:0", 1, 100));
  feed_dispatch_tick(d, loom__now_ms() + 150);
  assert_int_equal(reply_to_last()->rc, LOOM_ETIMEDOUT);
  /* finish epoch 1: then the feed is over */
  assert_null(lease_req(d, &A, "worker:0", 1, 5000));
  json_int_t waiting_end = next_id;
  for (size_t i = 0; i < 2; i++)
    assert_int_equal(done(d, &B, ival(split_of(w, i), "lease"), false), 0);
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(done(d, &A, ival(split_of(r, i), "lease"), false), 0);
  bool ended = false;
  for (int i = 0; i < nreps; i++)
    if (reps[i].id == waiting_end) ended = json_is_true(json_object_get(reps[i].extra, "end"));
  assert_true(ended);
  r = lease_req(d, &B, "worker:1", 1, 0);
  assert_true(json_is_true(json_object_get(r->extra, "end")));
  json_t *st = feed_dispatch_status(d);
  assert_true(json_is_true(json_object_get(st, "finished")));
  assert_int_equal(ival(st, "committed"), 12);
  json_decref(st);
  feed_dispatch_destroy(d);
  clear_replies();
}

/* The order splits are leased in over two epochs. */
static void order(const char *extra, int out[12], json_int_t rseed[12]) {
  feed_dispatch *d = make(extra, false);
  for (int i = 0; i < 12; i++) {
    reply_t *r = lease_req(d, &A, "worker:0", 1, 0);
    json_t *s = split_of(r, 0);
    out[i] = (int)ival(s, "split");
    rseed[i] = ival(s, "rseed");
    assert_int_equal(ival(s, "epoch"), i / 6);
    assert_int_equal(done(d, &A, ival(s, "lease"), false), 0);
  }
  feed_dispatch_destroy(d);
  clear_replies();
}

static void test_shuffle_is_reproducible(void **state) {
  (void)state;
  int a[12], b[12], c[12], plain[12];
  json_int_t ra[12], rb[12], rc[12], rp[12];
  order("{\"shuffle\": true, \"seed\": 7, \"epochs\": 2}", a, ra);
  order("{\"shuffle\": true, \"seed\": 7, \"epochs\": 2}", b, rb);
  order("{\"shuffle\": true, \"seed\": 8, \"epochs\": 2}", c, rc);
  order("{\"epochs\": 2}", plain, rp);
  assert_memory_equal(a, b, sizeof a);
  assert_memory_equal(ra, rb, sizeof ra);
  assert_true(memcmp(a, c, sizeof a) != 0);
  assert_true(memcmp(a, a + 6, 6 * sizeof *a) != 0); /* each epoch its own order */
  for (int e = 0; e < 2; e++) {
    int seen[6] = {0};
    for (int i = 0; i < 6; i++) seen[a[e * 6 + i]]++;
    for (int i = 0; i < 6; i++) assert_int_equal(seen[i], 1);
  }
  for (int i = 0; i < 12; i++) {
    assert_int_equal(plain[i], i % 6);
    assert_int_equal(rp[i], 0); /* no record shuffle without shuffle */
    assert_true(ra[i] != 0);
  }
}

static void test_new_attempt_keeps_commits(void **state) {
  (void)state;
  feed_dispatch *d = make(NULL, true);
  reply_t *r = lease_req(d, &A, "worker:0", 2, 0);
  json_t *s0 = json_incref(split_of(r, 0)), *s1 = json_incref(split_of(r, 1));
  put_file(json_string_value(json_object_get(s0, "tmp")), "x\n");
  put_file(json_string_value(json_object_get(s1, "tmp")), "y\n");
  assert_int_equal(done(d, &A, ival(s0, "lease"), true), 0);
  r = lease_req(d, &B, "worker:1", 4, 0); /* the rest */
  assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 4);
  assert_null(lease_req(d, &B, "worker:1", 1, 5000)); /* nothing left: B waits */
  json_int_t waiting = next_id;
  feed_dispatch_new_attempt(d);
  bool aborted = false;
  for (int i = 0; i < nreps; i++)
    if (reps[i].id == waiting) aborted = reps[i].rc == LOOM_EABORTED;
  assert_true(aborted);
  assert_false(exists(json_string_value(json_object_get(s1, "tmp"))));
  assert_int_equal(status_int(d, "done"), 1);
  assert_int_equal(status_int(d, "leased"), 0);
  r = lease_req(d, &A, "worker:0", 16, 0);
  assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 5); /* not split 0 */
  for (size_t i = 0; i < 5; i++) assert_true(ival(split_of(r, i), "split") != ival(s0, "split"));
  assert_int_equal(done(d, &A, ival(s1, "lease"), true), LOOM_ESTATE); /* the old lease */
  json_decref(s0);
  json_decref(s1);
  feed_dispatch_destroy(d);
  clear_replies();
}

static void test_release_gives_back(void **state) {
  (void)state;
  feed_dispatch *d = make(NULL, false);
  reply_t *r = lease_req(d, &A, "worker:0", 2, 0);
  json_int_t l0 = ival(split_of(r, 0), "lease"), l1 = ival(split_of(r, 1), "lease");
  assert_int_equal(
      send_req(d, &A, "worker:0", WIRE_FEED_RELEASE, json_pack("{s:[I, I]}", "leases", l0, l1)), 0);
  assert_int_equal(reply_to_last()->rc, 0);
  assert_int_equal(status_int(d, "leased"), 0);
  r = lease_req(d, &B, "worker:1", 1, 0);
  assert_int_equal(ival(split_of(r, 0), "split"), 0);
  /* someone else's lease cannot be released or finished */
  json_int_t lb = ival(split_of(r, 0), "lease");
  assert_int_equal(
      send_req(d, &A, "worker:0", WIRE_FEED_RELEASE, json_pack("{s:[I]}", "leases", lb)), 0);
  assert_int_equal(status_int(d, "leased"), 1);
  assert_int_equal(done(d, &A, lb, false), LOOM_ESTATE);
  feed_dispatch_destroy(d);
  clear_replies();
}

static void test_malformed_requests(void **state) {
  (void)state;
  feed_dispatch *d = make(NULL, false);
  static const struct {
    int type;
    const char *json;
  } bad[] = {
      {WIRE_FEED_LEASE, "{}"}, /* no id */
      {WIRE_FEED_LEASE, "{\"id\": \"x\"}"},
      {WIRE_FEED_LEASE, "{\"id\": 1, \"max\": 0}"},
      {WIRE_FEED_LEASE, "{\"id\": 1, \"max\": 17}"},
      {WIRE_FEED_LEASE, "{\"id\": 1, \"wait_ms\": -1}"},
      {WIRE_FEED_LEASE, "{\"id\": 1, \"wait_ms\": 600001}"},
      {WIRE_FEED_DONE, "{\"id\": 1}"},
      {WIRE_FEED_DONE, "{\"id\": 1, \"lease\": 0}"},
      {WIRE_FEED_DONE, "{\"id\": 1, \"lease\": 5, \"wrote\": 1}"},
      {WIRE_FEED_DONE, "{\"id\": 1, \"lease\": 5, \"records\": -4}"},
      {WIRE_FEED_RENEW, "{\"id\": 1, \"leases\": 3}"},
      {WIRE_FEED_RENEW, "{\"id\": 1, \"leases\": [\"a\"]}"},
      {WIRE_FEED_RELEASE, "{\"id\": 1, \"leases\": [0]}"},
      {45, "{\"id\": 1}"},
      {49, "{\"id\": 1}"},
  };
  for (size_t i = 0; i < LOOM__ARRAY_LEN(bad); i++) {
    json_t *j = json_loads(bad[i].json, 0, NULL);
    assert_non_null(j);
    wire_frame f = {.type = (uint16_t)bad[i].type, .json = j};
    int rc = dispatch_frame(d, &A, "worker:0", &f);
    if (rc != LOOM_EPROTO || nreps)
      fail_msg("case %zu (%s): rc %d, %d replies; want LOOM_EPROTO, none", i, bad[i].json, rc,
               nreps);
    json_decref(j);
  }
  json_t *big = json_array();
  for (int i = 0; i < FEED_MAX_LIST + 1; i++) json_array_append_new(big, json_integer(i + 1));
  assert_int_equal(send_req(d, &A, "worker:0", WIRE_FEED_RENEW, json_pack("{s:o}", "leases", big)),
                   LOOM_EPROTO);
  assert_int_equal(nreps, 0);
  /* well-formed but unknown: answered, not fatal */
  assert_int_equal(done(d, &A, 12345, false), LOOM_ESTATE);
  assert_int_equal(send_req(d, &A, "worker:0", WIRE_FEED_OPEN, json_object()), 0);
  reply_t *r = reply_to_last();
  assert_string_equal(json_string_value(json_object_get(r->extra, "format")), "lines");
  assert_int_equal(ival(r->extra, "splits"), 6);
  assert_int_equal(ival(r->extra, "lease_ms"), 1000);
  feed_dispatch_destroy(d);
  clear_replies();
}

static const char *dir_file(const char *name, const char *file) {
  static char path[200];
  snprintf(path, sizeof path, "%s/%s/%s", dir, name, file);
  return path;
}

/* A growing dispatcher over the .txt files of dir/NAME, ended by dir/NAME/_END. */
static feed_dispatch *make_growing(const char *name, const char *fmt, const char *extra_json) {
  char glob[160], end[160];
  snprintf(glob, sizeof glob, "%s/%s", dir, name);
  mkdir(glob, 0755);
  snprintf(glob, sizeof glob, "%s/%s/*.txt", dir, name);
  snprintf(end, sizeof end, "%s/%s/_END", dir, name);
  json_t *spec = json_pack("{s:[s], s:s, s:s}", "input", glob, "format", fmt, "follow", end);
  return create(spec, extra_json);
}

/* Writes dir/name/file whole, as a spill writer does: elsewhere, then a
 * rename into place. */
static void put_whole(const char *name, const char *file, const char *text) {
  char tmp[200], path[200];
  snprintf(tmp, sizeof tmp, "%s/%s/.%s.tmp", dir, name, file);
  snprintf(path, sizeof path, "%s/%s/%s", dir, name, file);
  put_file(tmp, text);
  assert_int_equal(rename(tmp, path), 0);
}

static bool exists_in(const char *name, const char *file) {
  char path[200];
  snprintf(path, sizeof path, "%s/%s/%s", dir, name, file);
  return access(path, F_OK) == 0;
}

static reply_t *reply_with_id(json_int_t id) {
  for (int i = 0; i < nreps; i++)
    if (reps[i].id == id) return &reps[i];
  return NULL;
}

static void test_growing_input(void **state) {
  (void)state;
  feed_dispatch *d = make_growing("grow", "lines", "{\"epochs\": 2}");
  /* nothing yet: open says so, a lease finds nothing */
  assert_int_equal(send_req(d, &A, "worker:0", WIRE_FEED_OPEN, json_object()), 0);
  reply_t *o = reply_to_last();
  assert_int_equal(ival(o->extra, "splits"), 0);
  assert_true(json_is_true(json_object_get(o->extra, "growing")));
  reply_t *r = lease_req(d, &A, "worker:0", 4, 0);
  assert_int_equal(r->rc, LOOM_ETIMEDOUT);
  /* a file appears: the next tick takes it */
  put_whole("grow", "a.txt", "a1\na2\n");
  feed_dispatch_tick(d, loom__now_ms());
  r = lease_req(d, &A, "worker:0", 4, 0);
  assert_int_equal(r->rc, 0);
  assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 1);
  assert_int_equal(ival(split_of(r, 0), "split"), 0);
  json_int_t la = ival(split_of(r, 0), "lease");
  /* B waits; the next file wakes it */
  assert_null(lease_req(d, &B, "worker:1", 4, 5000));
  json_int_t waiting = next_id;
  put_whole("grow", "b.txt", "b1\n");
  feed_dispatch_tick(d, loom__now_ms());
  reply_t *w = reply_with_id(waiting);
  assert_non_null(w);
  assert_int_equal(w->rc, 0);
  assert_int_equal(ival(split_of(w, 0), "split"), 1);
  assert_non_null(strstr(json_string_value(json_object_get(split_of(w, 0), "path")), "b.txt"));
  json_int_t lb = ival(split_of(w, 0), "lease");
  /* every split known is done, but the input is not whole: still epoch 0,
   * and a short wait says why nothing comes */
  assert_int_equal(done(d, &A, la, false), 0);
  assert_int_equal(done(d, &B, lb, false), 0);
  assert_int_equal(status_int(d, "epoch"), 0);
  assert_null(lease_req(d, &A, "worker:0", 1, 50));
  feed_dispatch_tick(d, loom__now_ms() + 100);
  assert_int_equal(reply_to_last()->rc, LOOM_ETIMEDOUT);
  assert_non_null(
      strstr(json_string_value(json_object_get(reply_to_last()->extra, "msg")), "has not grown"));
  /* a file already taken, written again, is not read twice; the end file
   * and one more file come together: both are taken, then epoch 1 is the
   * whole input */
  put_whole("grow", "a.txt", "a1\na2\n");
  put_whole("grow", "c.txt", "c1\n");
  put_file(dir_file("grow", "_END"), "");
  feed_dispatch_tick(d, loom__now_ms());
  json_t *st = feed_dispatch_status(d);
  assert_int_equal(ival(st, "splits"), 3);
  assert_false(json_is_true(json_object_get(st, "growing")));
  json_decref(st);
  r = lease_req(d, &A, "worker:0", 4, 0);
  assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 1);
  assert_int_equal(ival(split_of(r, 0), "split"), 2);
  assert_int_equal(done(d, &A, ival(split_of(r, 0), "lease"), false), 0);
  assert_int_equal(status_int(d, "epoch"), 1);
  r = lease_req(d, &A, "worker:0", 4, 0);
  assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 3);
  for (size_t i = 0; i < 3; i++)
    assert_int_equal(done(d, &A, ival(split_of(r, i), "lease"), false), 0);
  r = lease_req(d, &A, "worker:0", 1, 0);
  assert_true(json_is_true(json_object_get(r->extra, "end")));
  feed_dispatch_destroy(d);
  clear_replies();
}

static void test_growing_ends_empty_and_bad_files(void **state) {
  (void)state;
  /* the end file with nothing before it: the feed is over at once */
  feed_dispatch *d = make_growing("empty", "lines", NULL);
  put_file(dir_file("empty", "_END"), "");
  feed_dispatch_tick(d, loom__now_ms());
  reply_t *r = lease_req(d, &A, "worker:0", 1, 0);
  assert_true(json_is_true(json_object_get(r->extra, "end")));
  feed_dispatch_destroy(d);
  clear_replies();
  /* a file that is not whole records fails every request after, naming it */
  d = make_growing("bad", "fixed:4", NULL);
  put_whole("bad", "a.txt", "12345678");
  feed_dispatch_tick(d, loom__now_ms());
  r = lease_req(d, &B, "worker:1", 4, 0);
  assert_int_equal(r->rc, 0);
  assert_null(lease_req(d, &A, "worker:0", 1, 5000)); /* waits for more */
  json_int_t waiting = next_id;
  put_whole("bad", "b.txt", "12345");
  feed_dispatch_tick(d, loom__now_ms());
  assert_int_equal(reply_with_id(waiting)->rc, LOOM_EIO); /* the waiter is told */
  r = lease_req(d, &A, "worker:0", 1, 0);
  assert_int_equal(r->rc, LOOM_EIO);
  const char *m = json_string_value(json_object_get(r->extra, "msg"));
  assert_non_null(m);
  assert_non_null(strstr(m, "b.txt"));
  feed_dispatch_destroy(d);
  clear_replies();
}

static const char *host_h(void *ctx, const char *task) {
  (void)ctx;
  (void)task;
  return "h";
}

/* The queue outgrows the splits known when it was made (a ring of qcap
 * entries): a split given back goes to the front at the ring's far end,
 * and a lease with locality (HDFS input: hosts known) still finds it
 * there, never an entry past the queue. */
static void test_growing_queue_wraps_with_locality(void **state) {
  (void)state;
  feed_dispatch *d = make_growing("wrap", "lines", NULL);
  char name[32];
  for (int i = 0; i < 60; i++) {
    snprintf(name, sizeof name, "f%03d.txt", i);
    put_whole("wrap", name, "x\n");
  }
  feed_dispatch_tick(d, loom__now_ms());
  json_int_t first = 0;
  for (int i = 0; i < 4; i++) {
    reply_t *r = lease_req(d, &A, "worker:0", 16, 0);
    assert_int_equal(r->rc, 0);
    if (i == 0) first = ival(split_of(r, 0), "lease");
  }
  for (int i = 60; i < 70; i++) {
    snprintf(name, sizeof name, "f%03d.txt", i);
    put_whole("wrap", name, "x\n");
  }
  feed_dispatch_tick(d, loom__now_ms());
  assert_true(d->qcap > 70); /* the ring grew past the splits */
  assert_int_equal(
      send_req(d, &A, "worker:0", WIRE_FEED_RELEASE, json_pack("{s:[I]}", "leases", first)), 0);
  /* locality on: one host known, no split on it */
  char **hosts = malloc(sizeof *hosts);
  hosts[0] = strdup("h");
  d->in->hosts = hosts;
  d->in->nhosts = 1;
  feed_dispatch_set_hosts(d, host_h, NULL);
  reply_t *r = lease_req(d, &B, "worker:1", 1, 0);
  assert_int_equal(r->rc, 0);
  assert_int_equal(ival(split_of(r, 0), "split"), 0); /* the one given back, first */
  r = lease_req(d, &B, "worker:1", 16, 0);
  assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 10);
  for (size_t i = 0; i < 10; i++) assert_true(ival(split_of(r, i), "split") >= 60);
  feed_dispatch_destroy(d);
  clear_replies();
}

static void test_consume_removes_read_files(void **state) {
  (void)state;
  feed_dispatch *d = make_growing("spool", "lines", "{\"epochs\": 2, \"consume\": true}");
  put_whole("spool", "a.txt", "a\n");
  put_whole("spool", "b.txt", "b\n");
  put_file(dir_file("spool", "_END"), "");
  feed_dispatch_tick(d, loom__now_ms());
  for (int e = 0; e < 2; e++) {
    reply_t *r = lease_req(d, &A, "worker:0", 4, 0);
    assert_int_equal(json_array_size(json_object_get(r->extra, "splits")), 2);
    json_int_t l0 = ival(split_of(r, 0), "lease"), l1 = ival(split_of(r, 1), "lease");
    assert_int_equal(done(d, &A, l0, false), 0);
    /* kept for the next epoch; removed once read in the last */
    assert_true(exists_in("spool", "a.txt") == (e == 0));
    assert_true(exists_in("spool", "b.txt"));
    assert_int_equal(done(d, &A, l1, false), 0);
    assert_true(exists_in("spool", "b.txt") == (e == 0));
  }
  assert_int_equal(status_int(d, "consumed"), 2);
  feed_dispatch_destroy(d);
  clear_replies();
}

static void test_create_errors(void **state) {
  (void)state;
  char err[512], glob[128], out[128];
  feed_dispatch *d;
  snprintf(glob, sizeof glob, "%s/in/*.nothing", dir);
  json_t *spec = json_pack("{s:[s], s:s}", "input", glob, "format", "lines");
  assert_int_equal(feed_dispatch_create(spec, dir, dir, on_reply, &d, err, sizeof err), LOOM_ESPEC);
  assert_null(d);
  assert_non_null(strstr(err, "matches no file"));
  json_decref(spec);
  /* an output directory holding an earlier run's parts is refused */
  snprintf(glob, sizeof glob, "%s/in/*.txt", dir);
  snprintf(out, sizeof out, "%s/used", dir);
  mkdir(out, 0755);
  char part[160];
  snprintf(part, sizeof part, "%s/part-00003", out);
  put_file(part, "old\n");
  spec = json_pack("{s:[s], s:s, s:s}", "input", glob, "format", "lines", "output", out);
  assert_int_equal(feed_dispatch_create(spec, dir, dir, on_reply, &d, err, sizeof err), LOOM_ESPEC);
  assert_non_null(strstr(err, "earlier run"));
  json_decref(spec);
  spec = json_pack("{s:[s], s:s}", "input", glob, "format", "fixed:5");
  assert_int_equal(feed_dispatch_create(spec, dir, dir, on_reply, &d, err, sizeof err), LOOM_ESPEC);
  assert_non_null(strstr(err, "not a multiple"));
  json_decref(spec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lease_and_commit),
      cmocka_unit_test(test_expired_lease_is_refused),
      cmocka_unit_test(test_dead_task_and_closed_connection),
      cmocka_unit_test(test_epoch_barrier_and_end),
      cmocka_unit_test(test_shuffle_is_reproducible),
      cmocka_unit_test(test_new_attempt_keeps_commits),
      cmocka_unit_test(test_release_gives_back),
      cmocka_unit_test(test_malformed_requests),
      cmocka_unit_test(test_create_errors),
      cmocka_unit_test(test_growing_input),
      cmocka_unit_test(test_growing_ends_empty_and_bad_files),
      cmocka_unit_test(test_consume_removes_read_files),
      cmocka_unit_test(test_growing_queue_wraps_with_locality),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
