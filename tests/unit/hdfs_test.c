/* hdfs_test.c: the parts of the HDFS client (src/hadoop/hdfs.c) that need
 * no cluster: URLs (hdfs://host:port/path, the default port, hdfs:///path
 * from HADOOP_CONF_DIR's fs.defaultFS, and the errors), the DataNode
 * packet framing checks, the chunk checksums against published CRC32C and
 * CRC32 vectors, and the acknowledgement checks. The client against a real
 * HDFS: tests/system/test_hdfs.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/bytes.h"
#include "datatransfer.pb-c.h"
#include "hadoop/hdfs.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_urls(void **state) {
  (void)state;
  hdfs_url u;
  char err[512];
  assert_int_equal(hdfs_parse_url("hdfs://nn.example:9000/data/a b", &u, err, sizeof err), 0);
  assert_string_equal(u.host, "nn.example");
  assert_int_equal(u.port, 9000);
  assert_string_equal(u.path, "/data/a b");
  assert_int_equal(hdfs_parse_url("hdfs://nn/x", &u, err, sizeof err), 0);
  assert_int_equal(u.port, HDFS_DEFAULT_PORT);
  assert_string_equal(u.path, "/x");
  static const struct {
    const char *url, *err;
  } bad[] = {
      {"hdfs://nn:0/x", "port '0' is not a number from 1 to 65535"},
      {"hdfs://nn:70000/x", "port '70000'"},
      {"hdfs://nn:/x", "port after nn: is missing"},
      {"hdfs://nn:9000", "no path after the NameNode"},
      {"hdfs://:9000/x", "no NameNode host"},
      {"hdfs:/x", "not an HDFS URL"},
      {"s3://b/x", "not an HDFS URL"},
      {"hdfs://nn/a\nb", "a control character in the path"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    assert_int_equal(hdfs_parse_url(bad[i].url, &u, err, sizeof err), LOOM_EINVAL);
    if (!strstr(err, bad[i].err)) fail_msg("%s: got '%s', want '%s'", bad[i].url, err, bad[i].err);
  }
}

static void test_default_fs(void **state) {
  (void)state;
  char dir[] = "/tmp/loom-hdfs-test-XXXXXX", path[64];
  assert_non_null(mkdtemp(dir));
  hdfs_url u;
  char err[1024];
  unsetenv("HADOOP_HOME");
  unsetenv("HADOOP_CONF_DIR");
  assert_int_equal(hdfs_parse_url("hdfs:///x", &u, err, sizeof err), LOOM_ENOENT);
  assert_non_null(strstr(err, "HADOOP_CONF_DIR is not set"));
  setenv("HADOOP_CONF_DIR", dir, 1);
  assert_int_equal(hdfs_parse_url("hdfs:///x", &u, err, sizeof err), LOOM_ENOENT);
  assert_non_null(strstr(err, "core-site.xml"));
  snprintf(path, sizeof path, "%s/core-site.xml", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("<configuration><property><name>fs.defaultFS</name><value>file:///</value></property>"
        "</configuration>",
        f);
  fclose(f);
  assert_int_equal(hdfs_parse_url("hdfs:///x", &u, err, sizeof err), LOOM_ENOENT);
  assert_non_null(strstr(err, "'file:///', not an hdfs:// URL"));
  f = fopen(path, "w");
  fputs("<configuration><property><name>nn</name><value>127.0.0.1:8021</value></property>"
        "<property><name>fs.defaultFS</name><value>hdfs://${nn}</value></property>"
        "</configuration>",
        f);
  fclose(f);
  assert_int_equal(hdfs_parse_url("hdfs:///user/me/a", &u, err, sizeof err), 0);
  assert_string_equal(u.host, "127.0.0.1");
  assert_int_equal(u.port, 8021);
  assert_string_equal(u.path, "/user/me/a");
  unlink(path);
  rmdir(dir);
  unsetenv("HADOOP_CONF_DIR");
}

/* A packet as a DataNode sends it: prefix, header, checksums, data. */
static size_t packet(uint8_t *out, int64_t off, int64_t seq, bool last, const uint8_t *data,
                     uint32_t n, int type) {
  Hadoop__Hdfs__PacketHeaderProto h = HADOOP__HDFS__PACKET_HEADER_PROTO__INIT;
  h.offsetinblock = off;
  h.seqno = seq;
  h.lastpacketinblock = last;
  h.datalen = (int32_t)n;
  size_t hl = protobuf_c_message_get_packed_size(&h.base);
  uint32_t chunks = (n + 511) / 512, csize = type ? 4 : 0;
  loom__put_be32(out, 4 + chunks * csize + n);
  loom__put_be16(out + 4, (uint16_t)hl);
  protobuf_c_message_pack(&h.base, out + 6);
  uint8_t *sums = out + 6 + hl; /* the framing only: zeros for checksums */
  memset(sums, 0, chunks * csize);
  memcpy(sums + chunks * csize, data, n);
  return 6 + hl + chunks * csize + n;
}

static void test_packets(void **state) {
  (void)state;
  uint8_t buf[4096], data[1000];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7);
  size_t len = packet(buf, 512, 3, false, data, sizeof data, 2);
  uint32_t plen;
  uint16_t hlen;
  char err[256];
  assert_int_equal(hdfs_packet_lengths(buf, &plen, &hlen, err, sizeof err), 0);
  assert_int_equal(plen, 4 + 2 * 4 + 1000);
  assert_int_equal(6 + hlen + plen - 4, len);
  hdfs_packet p;
  assert_int_equal(hdfs_packet_decode(buf + 6, hlen, plen, 512, 4, &p, err, sizeof err), 0);
  assert_int_equal(p.offset, 512);
  assert_int_equal(p.seqno, 3);
  assert_false(p.last);
  assert_int_equal(p.datalen, 1000);
  /* the same header under a length that leaves room for one checksum only */
  assert_int_equal(hdfs_packet_decode(buf + 6, hlen, plen - 4, 512, 4, &p, err, sizeof err),
                   LOOM_EPROTO);
  assert_non_null(strstr(err, "do not hold 1000 data bytes and 2 checksums"));
  /* more data than the payload */
  assert_int_equal(hdfs_packet_decode(buf + 6, hlen, 100, 512, 4, &p, err, sizeof err),
                   LOOM_EPROTO);
  /* lengths out of bounds; a header that does not decode */
  uint8_t pre[6] = {0, 0, 0, 3, 0, 10};
  assert_int_equal(hdfs_packet_lengths(pre, &plen, &hlen, err, sizeof err), LOOM_EPROTO);
  loom__put_be32(pre, HDFS_MAX_PACKET + 1);
  assert_int_equal(hdfs_packet_lengths(pre, &plen, &hlen, err, sizeof err), LOOM_EPROTO);
  loom__put_be32(pre, 100);
  loom__put_be16(pre + 4, 0);
  assert_int_equal(hdfs_packet_lengths(pre, &plen, &hlen, err, sizeof err), LOOM_EPROTO);
  uint8_t junk[3] = {0xff, 0xff, 0xff};
  assert_int_equal(hdfs_packet_decode(junk, 3, 100, 512, 4, &p, err, sizeof err), LOOM_EPROTO);
}

static void test_checksums(void **state) {
  (void)state;
  /* "123456789": CRC32C 0xe3069283, CRC32 0xcbf43926 */
  const uint8_t *d = (const uint8_t *)"123456789";
  uint8_t sums[8];
  loom__put_be32(sums, 0xe3069283u);
  assert_int_equal(hdfs_checksums_bad(2, 512, sums, d, 9), -1);
  loom__put_be32(sums, 0xcbf43926u);
  assert_int_equal(hdfs_checksums_bad(1, 512, sums, d, 9), -1);
  assert_int_equal(hdfs_checksums_bad(2, 512, sums, d, 9), 0); /* CRC32's value as CRC32C */
  /* two chunks of 4 and 5 bytes: the second one bad */
  loom__put_be32(sums, 0x9be3e0a3); /* CRC32 of "1234" */
  loom__put_be32(sums + 4, 0);
  assert_int_equal(hdfs_checksums_bad(1, 4, sums, d, 9), 1);
  assert_int_equal(hdfs_checksums_bad(0, 4, sums, d, 9), -1); /* CHECKSUM_NULL */
}

static void test_acks(void **state) {
  (void)state;
  Hadoop__Hdfs__Status ok2[] = {HADOOP__HDFS__STATUS__SUCCESS, HADOOP__HDFS__STATUS__SUCCESS};
  Hadoop__Hdfs__PipelineAckProto a = HADOOP__HDFS__PIPELINE_ACK_PROTO__INIT;
  a.seqno = 4;
  a.n_reply = 2;
  a.reply = ok2;
  char err[256];
  assert_int_equal(hdfs_check_ack(&a, 4, 2, err, sizeof err), 0);
  assert_int_equal(hdfs_check_ack(&a, 5, 2, err, sizeof err), LOOM_EPROTO);
  assert_non_null(strstr(err, "acknowledged packet 4 where 5 was next"));
  assert_int_equal(hdfs_check_ack(&a, 4, 3, err, sizeof err), LOOM_EPROTO);
  Hadoop__Hdfs__Status bad[] = {HADOOP__HDFS__STATUS__SUCCESS,
                                HADOOP__HDFS__STATUS__ERROR_CHECKSUM};
  a.reply = bad;
  assert_int_equal(hdfs_check_ack(&a, 4, 2, err, sizeof err), LOOM_EIO);
  assert_non_null(strstr(err, "DataNode 2 of the pipeline answered ERROR_CHECKSUM"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_urls),    cmocka_unit_test(test_default_fs),
      cmocka_unit_test(test_packets), cmocka_unit_test(test_checksums),
      cmocka_unit_test(test_acks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
