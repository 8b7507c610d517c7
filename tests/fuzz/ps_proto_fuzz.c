/* ps_proto_fuzz.c: libFuzzer harness for the parameter server's protocol
 * as a shard decodes it (src/ps/server.c, proto.c, state.c, rows.c,
 * ckpt.c): the first byte picks the shard (1..4 shards, 0..3 default
 * workers), the rest is what an authenticated client sends, requests as
 * on the wire (48-byte header, payload), served in order as the poll loop
 * serves them (loom__ps_server_feed) until the connection is closed or
 * waits. The directory of a SAVE, COMMIT or RESTORE is replaced by one of
 * the harness's own, emptied before each input, so that checkpoints are
 * written and read back but nothing lands elsewhere. Memory and message
 * caps are set low (LOOM_PS_MAX_MEMORY 8 MiB, LOOM_PS_MAX_MSG at its
 * minimum). Aborts when a reply does not echo its request's op and id or
 * an error reply is not a message. Built by LOOM_FUZZ=ON with clang;
 * driver.c runs it over the committed corpus in every build. */
#include "ps/ps.h"
#include "ps/server.h"
#include "core/bytes.h"

#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char ckdir[64]; /* the checkpoint directory, made once */

static void quiet(int level, const char *subsys, const char *msg, void *arg) {
  (void)level, (void)subsys, (void)msg, (void)arg; /* formatted, not printed */
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag;
  if (ftw->level > 0) remove(p);
  return 0;
}

/* The checkpoint directory and what the shards left in it, when the
 * fuzzer exits (it is in /dev/shm: memory). */
static void remove_ckdir(void) {
  nftw(ckdir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
  rmdir(ckdir);
}

static void setup(void) {
  setenv("LOOM_PS_MAX_MEMORY", "8388608", 1);
  setenv("LOOM_PS_MAX_MSG", "4259840", 1); /* 4 MiB + 64 KiB, the least */
  setenv("LOOM_PS_SPLIT_BYTES", "64", 1);  /* dense variables split over shards */
  setenv("LOOM_PS_THREADS", "2", 1);       /* large sparse requests split, whatever the host */
  setenv("LOOM_LOG", "debug", 1);
  loom__log_set_sink(quiet, NULL);
  struct stat sb;
  snprintf(ckdir, sizeof ckdir, "%s/loom-ps-fuzz-XXXXXX",
           stat("/dev/shm", &sb) == 0 ? "/dev/shm" : "/tmp");
  if (!mkdtemp(ckdir)) abort();
  atexit(remove_ckdir);
}

/* Reads what the shard replied so far into *in (grown). */
static void drain(int fd, unsigned char **in, size_t *len, size_t *cap) {
  for (;;) {
    if (*cap - *len < 4096) {
      *cap = *cap ? 2 * *cap : 65536;
      if (!(*in = realloc(*in, *cap))) abort();
    }
    ssize_t n = recv(fd, *in + *len, *cap - *len, MSG_DONTWAIT);
    if (n <= 0) return;
    *len += (size_t)n;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool ready;
  if (!ready) setup(), ready = true;
  if (size < 1) return 0;
  int nshards = 1 + (data[0] & 3), shard = (data[0] >> 2 & 3) % nshards;
  int world = data[0] >> 4 & 3;
  data++, size--;
  nftw(ckdir, rm_one, 8, FTW_DEPTH | FTW_PHYS);

  int sv[2];
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) abort();
  ps_server_cfg cfg = {.listen_fd = lfd,
                       .stop_fd = -1,
                       .abort_fd = -1,
                       .shard = shard,
                       .nshards = nshards,
                       .world = world,
                       .secret = "fuzz"};
  ps_server *s;
  if (loom__ps_server_new(&cfg, &s) < 0) abort();

  /* Requests in order; each header's op, id and the order are remembered
   * to check the replies against. */
  enum { MAX_REQ = 1024 };
  uint64_t ids[MAX_REQ];
  uint16_t ops[MAX_REQ];
  size_t nreq = 0;
  bool track = true;
  /* kept from input to input: a large block costs ASan an mmap each time */
  static unsigned char *msg, *rep;
  static size_t msgcap, repcap;
  size_t replen = 0;
  bool open = true;
  for (size_t off = 0; off < size && open;) {
    size_t left = size - off;
    if (left < PS_HDR) { /* a header cut short: the shard waits for the rest */
      open = loom__ps_server_feed(s, sv[0], data + off, left);
      break;
    }
    ps_hdr h;
    ps_hdr_get(data + off, &h);
    size_t plen = h.len < left - PS_HDR ? h.len : left - PS_HDR;
    const uint8_t *payload = data + off + PS_HDR;
    off += PS_HDR + plen;
    bool dir = h.op == PS_OP_SAVE || h.op == PS_OP_COMMIT || h.op == PS_OP_RESTORE;
    if (dir && plen > 0 && payload[0] == '/') {
      payload = (const uint8_t *)ckdir;
      plen = strlen(ckdir);
      h.len = (uint32_t)plen;
    }
    if (PS_HDR + plen > msgcap && !(msg = realloc(msg, msgcap = PS_HDR + plen))) abort();
    ps_hdr_put(msg, &h);
    if (plen) memcpy(msg + PS_HDR, payload, plen);
    if (nreq == MAX_REQ) track = false;
    if (track) ids[nreq] = h.id, ops[nreq] = h.op, nreq++;
    open = loom__ps_server_feed(s, sv[0], msg, PS_HDR + plen);
    drain(sv[1], &rep, &replen, &repcap);
  }
  loom__ps_server_free(s);
  drain(sv[1], &rep, &replen, &repcap);
  close(sv[1]);

  /* Each reply echoes the op and id of a request, in order (a refused one
   * may be skipped: the shard closes on it); an error's payload is a
   * message. */
  size_t r = 0;
  for (size_t off = 0; track && off + PS_HDR <= replen;) {
    ps_hdr h;
    ps_hdr_get(rep + off, &h);
    while (r < nreq && (ops[r] != h.op || ids[r] != h.id)) r++;
    if (r == nreq) abort();
    r++;
    if (h.rc > 0 || (h.rc < 0 && (h.len == 0 || h.len >= PS_MAX_ERRMSG))) abort();
    if (off + PS_HDR + h.len > replen) break; /* cut short: the socket was full */
    off += PS_HDR + h.len;
  }
  return 0;
}
