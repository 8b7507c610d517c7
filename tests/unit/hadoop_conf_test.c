/* hadoop_conf_test.c: the Hadoop configuration reader (src/hadoop/conf.c)
 * and where it finds the ResourceManager (src/yarn/yarn.c): a table of
 * files, each with what it holds or the error (file:line) it gives; a
 * later file over an earlier one and final; ${...} expansion and its
 * loop bound; the caps; and yarn.resourcemanager.address, its hostname
 * fallback, HA, and the errors that name the directory or file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "hadoop/conf.h"
#include "yarn/yarn.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static const struct {
  const char *xml;
  const char *want; /* "name=value;..." in any order, or NULL */
  const char *err;  /* a substring of the error, or NULL */
} cases[] = {
    {"<?xml version=\"1.0\"?>\n<configuration>\n"
     "<property><name>a</name><value>1</value></property>\n"
     "<property>\n  <name> b </name>\n  <value> two </value>\n  <description>x</description>\n"
     "</property>\n</configuration>\n",
     "a=1;b= two ", NULL},
    /* comments, a DOCTYPE, a stylesheet instruction, CDATA, entities */
    {"<?xml-stylesheet type=\"text/xsl\" href=\"configuration.xsl\"?>\n"
     "<!DOCTYPE configuration [ <!ELEMENT x ANY> ]>\n<!-- a <comment> -->\n"
     "<configuration><property><name>e</name><value>&lt;&amp;&gt;&quot;&apos;&#65;&#x42;</value>"
     "</property><!-- <property><name>no</name><value>1</value></property> -->"
     "<property><name>c</name><value><![CDATA[<raw & text>]]></value></property>"
     "</configuration>",
     "e=<&>\"'AB;c=<raw & text>", NULL},
    /* attribute form, final, a property without a value (skipped) */
    {"<configuration><property name=\"x\" value=\"1\" final=\"true\"/>"
     "<property><name>novalue</name></property>"
     "<property><name>y</name><value></value><final>true</final></property></configuration>",
     "x=1;y=", NULL},
    /* a later property of the same name wins within a file */
    {"<configuration><property><name>d</name><value>1</value></property>"
     "<property><name>d</name><value>2</value></property></configuration>",
     "d=2", NULL},
    {"<configuration/>", "", NULL},
    {"", NULL, "no <configuration> element"},
    {"<conf></conf>", NULL, "t.xml:1: the top element is <conf>, not <configuration>"},
    {"<configuration>\n<property><name>a</name></configuration>", NULL,
     "t.xml:2: </configuration> closes <property>"},
    {"<configuration>\n<property>\n", NULL, "t.xml:3: <property> is not closed"},
    {"<configuration><!-- never closed </configuration>", NULL, "a comment <!-- is not closed"},
    {"<configuration><property><name>a&bogus;</name><value>1</value></property></configuration>",
     NULL, "an unknown entity"},
    {"<configuration><property><name>a</name><value>&#0;</value></property></configuration>", NULL,
     "a bad character reference"},
    {"<configuration><property><name>a</name><value>&#x110000;</value></property></configuration>",
     NULL, "a bad character reference"},
    {"<configuration xmlns:xi=\"http://www.w3.org/2001/XInclude\">\n"
     "<xi:include href=\"other.xml\"/></configuration>",
     NULL, "t.xml:2: <xi:include> (XInclude) is not supported"},
    {"<configuration><property name=x/></configuration>", NULL,
     "attribute name of <property> is not quoted"},
    {"<configuration></property></configuration>", NULL, "</property> closes <configuration>"},
    {"<configuration><a><b><c><d><e><f><g><h><i><j><k><l><m><n><o><p><q><r><s><t><u><v><w><x>"
     "<y><z><a><b><c><d><e><f><g><h></h></g></f></e></d></c></b></a></z></y></x></w></v></u></t>"
     "</s></r></q></p></o></n></m></l></k></j></i></h></g></f></e></d></c></b></a></configuration>",
     NULL, "elements nested deeper than 32"},
    {"<configuration></configuration><configuration></configuration>", NULL,
     "a second top element <configuration>"},
};

static void check_want(const hconf *c, const char *want) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", want);
  int n = 0;
  for (char *save = NULL, *kv = strtok_r(buf, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
    char *eq = strchr(kv, '=');
    assert_non_null(eq);
    *eq = 0;
    const hconf_prop *p = hconf_find(c, kv);
    if (!p) fail_msg("property %s missing", kv);
    assert_string_equal(p->value, eq + 1);
    n++;
  }
  assert_int_equal(c->n, n);
}

static void test_cases(void **state) {
  (void)state;
  for (size_t i = 0; i < LOOM__ARRAY_LEN(cases); i++) {
    hconf c = {0};
    char err[512] = "";
    int rc = hconf_parse(&c, cases[i].xml, strlen(cases[i].xml), "t.xml", err, sizeof err);
    if (cases[i].err) {
      if (rc == 0) fail_msg("case %zu: parsed, wanted error '%s'", i, cases[i].err);
      if (!strstr(err, cases[i].err))
        fail_msg("case %zu: error '%s', wanted '%s'", i, err, cases[i].err);
      assert_int_equal(c.n, 0);
    } else {
      if (rc != 0) fail_msg("case %zu: %s", i, err);
      check_want(&c, cases[i].want);
    }
    hconf_free(&c);
  }
}

static void test_final_and_override(void **state) {
  (void)state;
  hconf c = {0};
  char err[256], v[64];
  const char *a = "<configuration><property><name>f</name><value>1</value><final>true</final>"
                  "</property><property><name>o</name><value>1</value></property></configuration>";
  const char *b = "<configuration><property><name>f</name><value>2</value></property>"
                  "<property><name>o</name><value>2</value></property>"
                  "<property><name>n</name><value>3</value></property></configuration>";
  assert_int_equal(hconf_parse(&c, a, strlen(a), "core-site.xml", err, sizeof err), 0);
  assert_int_equal(hconf_parse(&c, b, strlen(b), "yarn-site.xml", err, sizeof err), 0);
  assert_int_equal(hconf_get(&c, "f", NULL, v, sizeof v), 1);
  assert_string_equal(v, "1"); /* final: not overridden */
  assert_int_equal(hconf_get(&c, "o", NULL, v, sizeof v), 1);
  assert_string_equal(v, "2");
  assert_string_equal(hconf_find(&c, "o")->file, "yarn-site.xml");
  assert_string_equal(hconf_find(&c, "f")->file, "core-site.xml");
  assert_int_equal(hconf_get(&c, "missing", " dflt ", v, sizeof v), 0);
  assert_string_equal(v, "dflt");
  assert_int_equal(hconf_get(&c, "missing", NULL, v, sizeof v), 0);
  assert_string_equal(v, "");
  /* a failed parse leaves what was there */
  const char *bad = "<configuration><property><name>o</name><value>9</value></property>";
  assert_int_equal(hconf_parse(&c, bad, strlen(bad), "bad.xml", err, sizeof err), LOOM_EPROTO);
  assert_int_equal(hconf_get(&c, "o", NULL, v, sizeof v), 1);
  assert_string_equal(v, "2");
  assert_int_equal(c.n, 3);
  hconf_free(&c);
}

static void test_expansion(void **state) {
  (void)state;
  setenv("LOOM_HCONF_TEST", "fromenv", 1);
  hconf c = {0};
  char err[256], v[128];
  const char *x = "<configuration>"
                  "<property><name>host</name><value>rm.example</value></property>"
                  "<property><name>addr</name><value> ${host}:8032 </value></property>"
                  "<property><name>two</name><value>${addr}/${host}</value></property>"
                  "<property><name>env</name><value>${env.LOOM_HCONF_TEST}</value></property>"
                  "<property><name>unknown</name><value>${nosuch}:1</value></property>"
                  "<property><name>loop</name><value>x${loop}</value></property>"
                  "</configuration>";
  assert_int_equal(hconf_parse(&c, x, strlen(x), "t.xml", err, sizeof err), 0);
  assert_int_equal(hconf_get(&c, "addr", NULL, v, sizeof v), 1);
  assert_string_equal(v, "rm.example:8032");
  assert_int_equal(hconf_get(&c, "two", NULL, v, sizeof v), 1);
  assert_string_equal(v, "rm.example:8032 /rm.example");
  assert_int_equal(hconf_get(&c, "env", NULL, v, sizeof v), 1);
  assert_string_equal(v, "fromenv");
  assert_int_equal(hconf_get(&c, "unknown", NULL, v, sizeof v), 1);
  assert_string_equal(v, "${nosuch}:1");
  assert_int_equal(hconf_get(&c, "loop", NULL, v, sizeof v), LOOM_EPROTO);
  assert_int_equal(hconf_get(&c, "addr", NULL, v, 4), LOOM_ERANGE);
  assert_int_equal(hconf_get(&c, "nothere", "${host}:1", v, sizeof v), 0);
  assert_string_equal(v, "rm.example:1");
  hconf_free(&c);
}

static void test_bounds(void **state) {
  (void)state;
  char err[256];
  /* a value of HCONF_MAX_TEXT bytes passes, one more does not */
  for (int extra = 0; extra < 2; extra++) {
    size_t n = HCONF_MAX_TEXT + (size_t)extra;
    char *x = malloc(n + 200);
    assert_non_null(x);
    int off = sprintf(x, "<configuration><property><name>big</name><value>");
    memset(x + off, 'v', n);
    strcpy(x + off + n, "</value></property></configuration>");
    hconf c = {0};
    int rc = hconf_parse(&c, x, strlen(x), "t.xml", err, sizeof err);
    if (extra) {
      assert_int_equal(rc, LOOM_ERANGE);
      assert_non_null(strstr(err, "longer than"));
    } else {
      assert_int_equal(rc, 0);
      assert_int_equal(strlen(hconf_find(&c, "big")->value), n);
    }
    hconf_free(&c);
    free(x);
  }
  /* too many properties */
  loom__buf b;
  loom__buf_init(&b, 8u << 20);
  loom__buf_printf(&b, "<configuration>");
  for (int i = 0; i <= HCONF_MAX_PROPS; i++)
    loom__buf_printf(&b, "<property name=\"p%d\" value=\"1\"/>", i);
  loom__buf_printf(&b, "</configuration>");
  hconf c = {0};
  assert_int_equal(hconf_parse(&c, b.p, b.len, "t.xml", err, sizeof err), LOOM_ERANGE);
  assert_non_null(strstr(err, "more than 20000 properties"));
  hconf_free(&c);
  /* a file over the cap is refused before parsing */
  assert_int_equal(hconf_parse(&c, b.p, HCONF_MAX_FILE + 1, "t.xml", err, sizeof err), LOOM_ERANGE);
  loom__buf_free(&b);
}

static char *site(const char *dir, const char *name, const char *props) {
  char *x = loom__asprintf("<configuration>%s</configuration>\n", props);
  char *p = test_put_file(dir, name, x, strlen(x));
  free(x);
  return p;
}

static void test_find_rm(void **state) {
  (void)state;
  char *d = test_tmpdir("loom-hconf");
  char err[1024];
  hyarn_rms r;
  /* no yarn-site.xml */
  assert_int_equal(hyarn_find_rm(d, &r, err, sizeof err), LOOM_EBACKEND);
  assert_non_null(strstr(err, "has no yarn-site.xml"));
  assert_non_null(strstr(err, d));
  /* the address */
  free(site(d, "yarn-site.xml",
            "<property><name>yarn.resourcemanager.address</name><value>rm1:18032</value>"
            "</property>"));
  assert_int_equal(hyarn_find_rm(d, &r, err, sizeof err), 0);
  assert_int_equal(r.n, 1);
  assert_string_equal(r.rm[0].host, "rm1");
  assert_int_equal(r.rm[0].port, 18032);
  assert_string_equal(r.rm[0].how, "yarn.resourcemanager.address");
  /* the hostname, through core-site's ${...} */
  free(site(d, "core-site.xml", "<property><name>rm.name</name><value>rm2</value></property>"));
  free(site(d, "yarn-site.xml",
            "<property><name>yarn.resourcemanager.hostname</name><value>${rm.name}</value>"
            "</property>"));
  assert_int_equal(hyarn_find_rm(d, &r, err, sizeof err), 0);
  assert_string_equal(r.rm[0].host, "rm2");
  assert_int_equal(r.rm[0].port, 8032);
  /* HA: one address a ResourceManager */
  free(site(d, "yarn-site.xml",
            "<property><name>yarn.resourcemanager.ha.enabled</name><value>true</value></property>"
            "<property><name>yarn.resourcemanager.ha.rm-ids</name><value>a, b</value></property>"
            "<property><name>yarn.resourcemanager.address.a</name><value>ha1:1</value></property>"
            "<property><name>yarn.resourcemanager.hostname.b</name><value>ha2</value></property>"));
  assert_int_equal(hyarn_find_rm(d, &r, err, sizeof err), 0);
  assert_int_equal(r.n, 2);
  assert_string_equal(r.rm[0].id, "a");
  assert_string_equal(r.rm[0].host, "ha1");
  assert_int_equal(r.rm[0].port, 1);
  assert_string_equal(r.rm[1].host, "ha2");
  assert_int_equal(r.rm[1].port, 8032);
  /* a bad address names the file and the property */
  free(site(d, "yarn-site.xml",
            "<property><name>yarn.resourcemanager.address</name><value>rm:notaport</value>"
            "</property>"));
  assert_int_equal(hyarn_find_rm(d, &r, err, sizeof err), LOOM_EBACKEND);
  assert_non_null(
      strstr(err, "yarn-site.xml: yarn.resourcemanager.address is 'rm:notaport', not host:port"));
  /* a malformed file: file and line */
  free(site(d, "yarn-site.xml", "\n<property>"));
  assert_int_equal(hyarn_find_rm(d, &r, err, sizeof err), LOOM_EBACKEND);
  assert_non_null(strstr(err, "yarn-site.xml:2: </configuration> closes <property>"));
  /* HADOOP_CONF_DIR unset, and not a directory */
  const char *saved = getenv("HADOOP_CONF_DIR");
  char *keep = saved ? strdup(saved) : NULL;
  unsetenv("HADOOP_CONF_DIR");
  unsetenv("HADOOP_HOME");
  assert_int_equal(hyarn_find_rm(NULL, &r, err, sizeof err), LOOM_EBACKEND);
  assert_non_null(strstr(err, "HADOOP_CONF_DIR is not set"));
  setenv("HADOOP_CONF_DIR", "/nonexistent/conf", 1);
  assert_int_equal(hyarn_find_rm(NULL, &r, err, sizeof err), LOOM_EBACKEND);
  assert_string_equal(err, "HADOOP_CONF_DIR=/nonexistent/conf is not a directory");
  if (keep)
    setenv("HADOOP_CONF_DIR", keep, 1);
  else
    unsetenv("HADOOP_CONF_DIR");
  free(keep);
  test_rm_rf(d);
  free(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases),     cmocka_unit_test(test_final_and_override),
      cmocka_unit_test(test_expansion), cmocka_unit_test(test_bounds),
      cmocka_unit_test(test_find_rm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
