/* http_page_test.c: the dashboard's pages and their Content-Security-Policy
 * agree: each page has exactly one inline script and one stylesheet, and
 * the policy's script-src lists the SHA-256 of each script's bytes (a
 * script the policy does not name is blocked by the browser, and the page
 * stays empty). Both pages carry the one shared stylesheet. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "http/http_int.h"

/* The bytes between open and close, which must each occur exactly once. */
static void only_block(const char *page, const char *open, const char *close, const char **body,
                       size_t *len) {
  const char *a = strstr(page, open);
  assert_non_null(a);
  assert_null(strstr(a + 1, open));
  a += strlen(open);
  const char *b = strstr(a, close);
  assert_non_null(b);
  assert_null(strstr(b + 1, close));
  *body = a;
  *len = (size_t)(b - a);
}

/* "'sha256-<base64>'", as CSP level 2 spells a hash source. */
static void hash_source(const char *s, size_t n, char *out, size_t outlen) {
  unsigned char md[EVP_MAX_MD_SIZE], b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  unsigned int mdlen = 0;
  assert_true(EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL));
  assert_int_equal(mdlen, 32);
  EVP_EncodeBlock(b64, md, (int)mdlen);
  snprintf(out, outlen, "'sha256-%s'", (const char *)b64);
}

/* The value of directive name in the policy, without the name. */
static void directive(const char *csp, const char *name, char *out, size_t outlen) {
  char key[64];
  snprintf(key, sizeof key, "%s ", name);
  const char *p = strstr(csp, key);
  assert_non_null(p);
  p += strlen(key);
  size_t n = strcspn(p, ";");
  assert_true(n < outlen);
  memcpy(out, p, n);
  out[n] = 0;
}

static const struct {
  const char *name;
  const char *page;
} pages[] = {
    {"job", http__job_page},
    {"index", http__index_page},
};

static void test_policy_names_each_script(void **state) {
  char src[512];
  directive(http__csp(), "script-src", src, sizeof src);
  assert_null(strstr(src, "unsafe"));
  size_t named = 0;
  for (size_t i = 0; i < LOOM__ARRAY_LEN(pages); i++) {
    const char *body;
    size_t len;
    char want[128];
    only_block(pages[i].page, "<script>", "</script>", &body, &len);
    assert_true(len > 0);
    hash_source(body, len, want, sizeof want);
    if (!strstr(src, want)) fail_msg("%s page: script-src '%s' lacks %s", pages[i].name, src, want);
    named++;
  }
  /* and nothing else: one hash source per page */
  size_t sources = 0;
  for (const char *p = src; (p = strstr(p, "'sha256-")); p++) sources++;
  assert_int_equal(sources, named);
}

static void test_pages_share_one_stylesheet(void **state) {
  const char *first = NULL;
  size_t first_len = 0;
  for (size_t i = 0; i < LOOM__ARRAY_LEN(pages); i++) {
    const char *body;
    size_t len;
    only_block(pages[i].page, "<style>", "</style>", &body, &len);
    assert_true(len > 0);
    if (!first) {
      first = body;
      first_len = len;
    } else {
      assert_int_equal(len, first_len);
      assert_memory_equal(body, first, len);
    }
  }
  char style[128];
  directive(http__csp(), "style-src", style, sizeof style);
  assert_string_equal(style, "'unsafe-inline'");
}

static void test_pages_are_whole_documents(void **state) {
  for (size_t i = 0; i < LOOM__ARRAY_LEN(pages); i++) {
    const char *p = pages[i].page;
    assert_int_equal(strncmp(p, "<!doctype html>\n", 16), 0);
    assert_non_null(strstr(p, "</head>\n<body>\n"));
    assert_non_null(strstr(p, "</body>\n</html>\n"));
    /* inline handlers and javascript: URLs would need 'unsafe-inline' */
    assert_null(strstr(p, " onclick="));
    assert_null(strstr(p, " onload="));
    assert_null(strstr(p, "javascript:"));
  }
  assert_ptr_equal(http__csp(), http__csp());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_policy_names_each_script),
      cmocka_unit_test(test_pages_share_one_stylesheet),
      cmocka_unit_test(test_pages_are_whole_documents),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
