/* conf.c: a reader of Hadoop configuration XML, small and bounded. It is
 * not a general XML parser: it knows what Hadoop's files hold (a
 * <configuration> of <property> elements, comments, processing
 * instructions, a DOCTYPE, CDATA, the five named entities and character
 * references) and refuses the rest with the file and line, XInclude
 * among it. */
#include "hadoop/conf.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Hadoop's Configuration.MAX_SUBST: deeper ${...} is a loop. */
#define HCONF_MAX_SUBST 20
#define HCONF_MAX_DEPTH 32

typedef struct {
  const char *p, *end;
  const char *file;
  int line;
  char *err;
  size_t errlen;
} xml;

static int xml_fail(xml *x, const char *fmt, ...) LOOM__PRINTF(2, 3);
static int xml_fail(xml *x, const char *fmt, ...) {
  size_t off = (size_t)snprintf(x->err, x->errlen, "%s:%d: ", x->file, x->line);
  if (off < x->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err + off, x->errlen - off, fmt, ap);
    va_end(ap);
  }
  return LOOM_EPROTO;
}

static void xml_advance(xml *x, size_t n) {
  for (size_t i = 0; i < n && x->p < x->end; i++) x->line += *x->p++ == '\n';
}

static bool xml_starts(const xml *x, const char *s) {
  size_t n = strlen(s);
  return (size_t)(x->end - x->p) >= n && !memcmp(x->p, s, n);
}

/* Skips past the next occurrence of close; what says what was open. */
static int xml_skip_past(xml *x, const char *close, const char *what) {
  int line = x->line;
  size_t n = strlen(close);
  while (x->p < x->end && !xml_starts(x, close)) xml_advance(x, 1);
  if (x->p >= x->end) {
    x->line = line;
    return xml_fail(x, "%s is not closed (no %s before the end of the file)", what, close);
  }
  xml_advance(x, n);
  return 0;
}

static bool xml_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
static bool xml_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.' || c == ':' || (unsigned char)c >= 0x80;
}
static void xml_skip_space(xml *x) {
  while (x->p < x->end && xml_space(*x->p)) xml_advance(x, 1);
}

/* An element or attribute name into out (at most outlen - 1 bytes). */
static int xml_name(xml *x, char *out, size_t outlen) {
  size_t n = 0;
  while (x->p < x->end && xml_name_char(*x->p)) {
    if (n + 1 >= outlen) return xml_fail(x, "a name longer than %zu bytes", outlen - 1);
    out[n++] = *x->p;
    xml_advance(x, 1);
  }
  out[n] = 0;
  if (!n) {
    if (x->p >= x->end) return xml_fail(x, "the file ends inside a tag");
    return xml_fail(x, "'%c' where a name was expected", *x->p);
  }
  return 0;
}

static int utf8_put(loom__buf *b, unsigned long cp) {
  unsigned char u[4];
  size_t n;
  if (cp < 0x80) {
    u[0] = (unsigned char)cp;
    n = 1;
  } else if (cp < 0x800) {
    u[0] = (unsigned char)(0xc0 | cp >> 6);
    u[1] = (unsigned char)(0x80 | (cp & 0x3f));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (unsigned char)(0xe0 | cp >> 12);
    u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    u[2] = (unsigned char)(0x80 | (cp & 0x3f));
    n = 3;
  } else {
    u[0] = (unsigned char)(0xf0 | cp >> 18);
    u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    u[3] = (unsigned char)(0x80 | (cp & 0x3f));
    n = 4;
  }
  return loom__buf_add(b, u, n);
}

/* Text from x->p up to stop (a '<', or the attribute's quote), entities
 * decoded, appended to b when b is not NULL. */
static int xml_text(xml *x, char stop, loom__buf *b) {
  while (x->p < x->end && *x->p != stop) {
    if (stop != '<' && *x->p == '<') return xml_fail(x, "'<' inside an attribute value");
    int rc = 0;
    if (*x->p != '&') {
      const char *s = x->p;
      while (x->p < x->end && *x->p != stop && *x->p != '&' && (stop == '<' || *x->p != '<'))
        xml_advance(x, 1);
      if (b) rc = loom__buf_add(b, s, (size_t)(x->p - s));
    } else {
      static const struct {
        const char *name;
        char c;
      } named[] = {{"lt;", '<'}, {"gt;", '>'}, {"amp;", '&'}, {"quot;", '"'}, {"apos;", '\''}};
      xml_advance(x, 1);
      bool done = false;
      for (size_t i = 0; i < LOOM__ARRAY_LEN(named) && !done; i++)
        if (xml_starts(x, named[i].name)) {
          xml_advance(x, strlen(named[i].name));
          if (b) rc = loom__buf_add(b, &named[i].c, 1);
          done = true;
        }
      if (!done) {
        if (x->p >= x->end || *x->p != '#') return xml_fail(x, "an unknown entity (&...;)");
        xml_advance(x, 1);
        bool hex = x->p < x->end && *x->p == 'x';
        if (hex) xml_advance(x, 1);
        unsigned long cp = 0;
        int digits = 0;
        while (x->p < x->end && *x->p != ';' && digits < 8) {
          char c = *x->p;
          int v = c >= '0' && c <= '9'          ? c - '0'
                  : hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : hex && c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                : -1;
          if (v < 0) return xml_fail(x, "a bad character reference (&#...;)");
          cp = cp * (hex ? 16 : 10) + (unsigned long)v;
          digits++;
          xml_advance(x, 1);
        }
        if (x->p >= x->end || *x->p != ';' || !digits || cp == 0 || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
          return xml_fail(x, "a bad character reference (&#...;)");
        xml_advance(x, 1);
        if (b) rc = utf8_put(b, cp);
      }
    }
    if (rc < 0)
      return rc == LOOM_ERANGE
                 ? (xml_fail(x, "a name or value longer than %u bytes", HCONF_MAX_TEXT),
                    LOOM_ERANGE)
                 : rc;
  }
  return 0;
}

static char *trimmed_dup(const char *s, size_t n) {
  while (n && xml_space(*s)) s++, n--;
  while (n && xml_space(s[n - 1])) n--;
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

static const char *local_name(const char *qname) {
  const char *c = strrchr(qname, ':');
  return c ? c + 1 : qname;
}

/* The property being read, between <property> and </property>. */
typedef struct {
  bool open;
  char *name, *value;
  bool final, has_value;
  int line;
} pending;

static void pending_clear(pending *p) {
  free(p->name);
  free(p->value);
  memset(p, 0, sizeof *p);
}

typedef struct {
  hconf_prop *props;
  int n, cap;
} proplist;

static int proplist_add(proplist *l, pending *p, xml *x) {
  if (l->n == HCONF_MAX_PROPS) {
    xml_fail(x, "more than %d properties", HCONF_MAX_PROPS);
    return LOOM_ERANGE;
  }
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 64;
    hconf_prop *np = realloc(l->props, (size_t)cap * sizeof *np);
    if (!np) return LOOM_ENOMEM;
    l->props = np;
    l->cap = cap;
  }
  l->props[l->n++] =
      (hconf_prop){.name = p->name, .value = p->value, .final = p->final, .line = p->line};
  p->name = p->value = NULL;
  return 0;
}

/* Sets one of the property's fields from text (name trimmed, value as is,
 * final "true"), as Hadoop's parser does. */
static int pending_set(pending *p, const char *field, const char *text, size_t n) {
  if (!strcmp(field, "name")) {
    free(p->name);
    return (p->name = trimmed_dup(text, n)) ? 0 : LOOM_ENOMEM;
  }
  if (!strcmp(field, "value")) {
    free(p->value);
    p->value = malloc(n + 1);
    if (!p->value) return LOOM_ENOMEM;
    memcpy(p->value, text, n);
    p->value[n] = 0;
    p->has_value = true;
    return 0;
  }
  if (!strcmp(field, "final")) p->final = n == 4 && !memcmp(text, "true", 4);
  return 0;
}

/* The start tag after '<': its name into name, its attributes read (and,
 * on a <property>, taken), *empty when it ends with "/>". */
static int xml_start_tag(xml *x, char *name, size_t namelen, bool *empty, pending *prop) {
  int rc = xml_name(x, name, namelen);
  if (rc < 0) return rc;
  bool is_prop = prop != NULL;
  loom__buf v;
  loom__buf_init(&v, HCONF_MAX_TEXT);
  for (;;) {
    xml_skip_space(x);
    if (x->p >= x->end) {
      rc = xml_fail(x, "the file ends inside <%s>", name);
      break;
    }
    if (*x->p == '>' || xml_starts(x, "/>")) {
      *empty = *x->p == '/';
      xml_advance(x, *empty ? 2 : 1);
      rc = 0;
      break;
    }
    char attr[128];
    if ((rc = xml_name(x, attr, sizeof attr)) < 0) break;
    xml_skip_space(x);
    if (x->p >= x->end || *x->p != '=') {
      rc = xml_fail(x, "attribute %s of <%s> has no value", attr, name);
      break;
    }
    xml_advance(x, 1);
    xml_skip_space(x);
    if (x->p >= x->end || (*x->p != '"' && *x->p != '\'')) {
      rc = xml_fail(x, "attribute %s of <%s> is not quoted", attr, name);
      break;
    }
    char q = *x->p;
    xml_advance(x, 1);
    v.len = 0;
    if ((rc = xml_text(x, q, is_prop ? &v : NULL)) < 0) break;
    if (x->p >= x->end) {
      rc = xml_fail(x, "attribute %s of <%s> is not closed", attr, name);
      break;
    }
    xml_advance(x, 1);
    if (is_prop && (rc = pending_set(prop, attr, v.p ? v.p : "", v.len)) < 0) break;
  }
  loom__buf_free(&v);
  return rc;
}

static int parse_into(proplist *out, xml *x) {
  char stack[HCONF_MAX_DEPTH][64];
  int depth = 0, rc = 0;
  bool root_seen = false;
  pending prop = {0};
  loom__buf text;
  loom__buf_init(&text, HCONF_MAX_TEXT);
  /* the text of a <name>, <value> or <final> inside a <property> */
  bool capture = false;
  while (x->p < x->end && rc == 0) {
    if (*x->p != '<') {
      rc = xml_text(x, '<', capture ? &text : NULL);
      continue;
    }
    if (xml_starts(x, "<?")) {
      rc = xml_skip_past(x, "?>", "a processing instruction <?");
    } else if (xml_starts(x, "<!--")) {
      rc = xml_skip_past(x, "-->", "a comment <!--");
    } else if (xml_starts(x, "<![CDATA[")) {
      xml_advance(x, 9);
      const char *s = x->p;
      if ((rc = xml_skip_past(x, "]]>", "a <![CDATA[ section")) == 0 && capture &&
          loom__buf_add(&text, s, (size_t)(x->p - 3 - s)) < 0)
        rc = xml_fail(x, "a name or value longer than %u bytes", HCONF_MAX_TEXT);
    } else if (xml_starts(x, "<!")) {
      if (depth) {
        rc = xml_fail(x, "a declaration <! inside an element");
        break;
      }
      /* <!DOCTYPE ...>, with an internal subset in brackets or not */
      int line = x->line, nest = 0;
      while (x->p < x->end && (*x->p != '>' || nest)) {
        nest += *x->p == '[' ? 1 : *x->p == ']' ? -1 : 0;
        xml_advance(x, 1);
      }
      if (x->p >= x->end) {
        x->line = line;
        rc = xml_fail(x, "a declaration <! is not closed");
      } else
        xml_advance(x, 1);
    } else if (xml_starts(x, "</")) {
      xml_advance(x, 2);
      char name[64];
      if ((rc = xml_name(x, name, sizeof name)) < 0) break;
      xml_skip_space(x);
      if (x->p >= x->end || *x->p != '>') {
        rc = xml_fail(x, "</%s is not closed with '>'", name);
        break;
      }
      xml_advance(x, 1);
      if (!depth || strcmp(stack[depth - 1], name)) {
        rc = depth ? xml_fail(x, "</%s> closes <%s>", name, stack[depth - 1])
                   : xml_fail(x, "</%s> closes nothing", name);
        break;
      }
      depth--;
      if (capture) {
        rc = pending_set(&prop, local_name(name), text.p ? text.p : "", text.len);
        capture = false;
      } else if (depth == 1 && !strcmp(local_name(name), "property")) {
        if (prop.name && prop.has_value) rc = proplist_add(out, &prop, x);
        pending_clear(&prop);
      }
    } else {
      xml_advance(x, 1);
      char name[64];
      bool empty = false;
      bool is_prop = depth == 1 && !strcmp(stack[0], "configuration");
      pending tmp = {.line = x->line};
      if ((rc = xml_start_tag(x, name, sizeof name, &empty, is_prop ? &tmp : NULL)) < 0) {
        pending_clear(&tmp);
        break;
      }
      const char *ln = local_name(name);
      if (!strcmp(ln, "include") && strchr(name, ':')) {
        pending_clear(&tmp);
        rc = xml_fail(x, "<%s> (XInclude) is not supported: put the properties in this file", name);
        break;
      }
      if (depth == 0) {
        if (root_seen || strcmp(name, "configuration")) {
          pending_clear(&tmp);
          rc = root_seen ? xml_fail(x, "a second top element <%s>", name)
                         : xml_fail(x, "the top element is <%s>, not <configuration>", name);
          break;
        }
        root_seen = true;
      }
      if (is_prop && !strcmp(ln, "property")) {
        pending_clear(&prop);
        prop = tmp;
        prop.open = true;
        if (empty) {
          if (prop.name && prop.has_value) rc = proplist_add(out, &prop, x);
          pending_clear(&prop);
        }
      } else {
        pending_clear(&tmp);
        if (depth == 2 && prop.open && !empty) {
          capture = true;
          text.len = 0;
        }
      }
      if (!empty) {
        if (depth == HCONF_MAX_DEPTH) {
          rc = xml_fail(x, "elements nested deeper than %d", HCONF_MAX_DEPTH);
          break;
        }
        loom__strlcpy(stack[depth++], name, sizeof stack[0]);
      }
    }
  }
  if (rc == 0 && depth)
    rc = xml_fail(x, "<%s> is not closed at the end of the file", stack[depth - 1]);
  if (rc == 0 && !root_seen) rc = xml_fail(x, "no <configuration> element");
  pending_clear(&prop);
  loom__buf_free(&text);
  return rc;
}

static hconf_prop *find(const hconf *c, const char *name) {
  for (int i = c->n - 1; i >= 0; i--)
    if (!strcmp(c->props[i].name, name)) return &c->props[i];
  return NULL;
}

int hconf_parse(hconf *c, const char *text, size_t len, const char *file, char *err,
                size_t errlen) {
  if (len > HCONF_MAX_FILE) {
    snprintf(err, errlen, "%s: larger than %u bytes", file, HCONF_MAX_FILE);
    return LOOM_ERANGE;
  }
  xml x = {.p = text, .end = text + len, .file = file, .line = 1, .err = err, .errlen = errlen};
  proplist l = {0};
  int rc = parse_into(&l, &x);
  char *fcopy = NULL;
  char **nf = NULL;
  if (rc == 0 && !(fcopy = loom__strdup(file))) rc = LOOM_ENOMEM;
  if (rc == 0 && !(nf = realloc(c->files, (size_t)(c->nfiles + 1) * sizeof *nf))) rc = LOOM_ENOMEM;
  if (rc == 0) c->files = nf;
  /* room for every new one, so that the merge below cannot fail */
  if (rc == 0 && c->n + l.n > c->cap) {
    hconf_prop *np = realloc(c->props, (size_t)(c->n + l.n) * sizeof *np);
    if (!np)
      rc = LOOM_ENOMEM;
    else {
      c->props = np;
      c->cap = c->n + l.n;
    }
  }
  if (rc < 0) {
    if (rc == LOOM_ENOMEM) snprintf(err, errlen, "%s: out of memory", file);
    for (int i = 0; i < l.n; i++) {
      free(l.props[i].name);
      free(l.props[i].value);
    }
    free(l.props);
    free(fcopy);
    return rc;
  }
  c->files[c->nfiles++] = fcopy;
  for (int i = 0; i < l.n; i++) {
    hconf_prop *np = &l.props[i], *old = find(c, np->name);
    np->file = fcopy;
    if (old && old->final) { /* Hadoop keeps a final value and warns */
      loom__log(LOOM_LOG_WARN, "hadoop", "%s:%d: %s is final in %s:%d; not overridden", file,
                np->line, np->name, old->file, old->line);
      free(np->name);
      free(np->value);
    } else if (old) {
      free(old->name);
      free(old->value);
      *old = *np;
    } else
      c->props[c->n++] = *np;
  }
  free(l.props);
  return 0;
}

int hconf_load(hconf *c, const char *path, char *err, size_t errlen) {
  char *text = NULL;
  size_t len = 0;
  int rc = loom__read_file(path, HCONF_MAX_FILE, &text, &len);
  if (rc == LOOM_ENOENT) {
    snprintf(err, errlen, "%s does not exist", path);
    return rc;
  }
  if (rc == LOOM_ERANGE) {
    snprintf(err, errlen, "%s: larger than %u bytes", path, HCONF_MAX_FILE);
    return rc;
  }
  if (rc < 0) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return LOOM_EIO;
  }
  rc = hconf_parse(c, text, len, path, err, errlen);
  free(text);
  return rc;
}

const hconf_prop *hconf_find(const hconf *c, const char *name) { return find(c, name); }

/* What ${var} stands for: the environment for env.NAME, Java's user.name
 * and user.home, else another property; NULL when nothing. */
static const char *lookup(const hconf *c, const char *var) {
  if (!strncmp(var, "env.", 4)) return getenv(var + 4);
  if (!strcmp(var, "user.name") || !strcmp(var, "user.home")) {
    struct passwd *pw = getpwuid(getuid());
    if (pw) return var[5] == 'n' ? pw->pw_name : pw->pw_dir;
  }
  const hconf_prop *p = find(c, var);
  return p ? p->value : NULL;
}

int hconf_get(const hconf *c, const char *name, const char *def, char *out, size_t outlen) {
  const hconf_prop *p = find(c, name);
  const char *v = p ? p->value : def;
  if (!v) {
    if (outlen) out[0] = 0;
    return 0;
  }
  loom__buf b;
  loom__buf_init(&b, HCONF_MAX_TEXT);
  int rc = loom__buf_add(&b, v, strlen(v) + 1);
  for (int depth = 0; rc == 0; depth++) {
    char *s = strstr(b.p, "${");
    char *e = s ? strchr(s + 2, '}') : NULL;
    if (!e) break;
    if (depth == HCONF_MAX_SUBST) {
      rc = LOOM_EPROTO; /* a loop: Hadoop throws */
      break;
    }
    *e = 0;
    const char *val = lookup(c, s + 2);
    *e = '}';
    if (!val) break; /* left as written */
    loom__buf n;
    loom__buf_init(&n, HCONF_MAX_TEXT);
    rc = loom__buf_add(&n, b.p, (size_t)(s - b.p));
    if (rc == 0) rc = loom__buf_add(&n, val, strlen(val));
    if (rc == 0) rc = loom__buf_add(&n, e + 1, strlen(e + 1) + 1);
    loom__buf_free(&b);
    b = n;
  }
  if (rc == 0) {
    char *t = trimmed_dup(b.p, strlen(b.p));
    if (!t)
      rc = LOOM_ENOMEM;
    else if (loom__strlcpy(out, t, outlen) >= outlen)
      rc = LOOM_ERANGE;
    free(t);
  }
  loom__buf_free(&b);
  return rc < 0 ? rc : p ? 1 : 0;
}

void hconf_free(hconf *c) {
  for (int i = 0; i < c->n; i++) {
    free(c->props[i].name);
    free(c->props[i].value);
  }
  free(c->props);
  for (int i = 0; i < c->nfiles; i++) free(c->files[i]);
  free(c->files);
  memset(c, 0, sizeof *c);
}

int hconf_find_dir(const char *conf_dir, char *out, size_t outlen, const char **how, char *err,
                   size_t errlen) {
  const char *env = getenv("HADOOP_CONF_DIR"), *home = getenv("HADOOP_HOME");
  *how = "HADOOP_CONF_DIR";
  if (conf_dir) {
    *how = "the configuration directory";
    loom__strlcpy(out, conf_dir, outlen);
  } else if (env && *env) {
    loom__strlcpy(out, env, outlen);
  } else if (home && *home) {
    snprintf(out, outlen, "%s/etc/hadoop", home);
    *how = "$HADOOP_HOME/etc/hadoop";
  } else {
    snprintf(err, errlen,
             "HADOOP_CONF_DIR is not set: point it at the directory holding the cluster's "
             "core-site.xml and yarn-site.xml (scripts/yarn-cluster.sh start prints one)");
    return LOOM_ENOENT;
  }
  struct stat st;
  if (stat(out, &st) < 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s=%s is not a directory", *how, out);
    return LOOM_ENOENT;
  }
  return 0;
}

void hconf_user(char *out, size_t len) {
  const char *u = getenv("HADOOP_USER_NAME");
  struct passwd *pw = (!u || !*u) ? getpwuid(getuid()) : NULL;
  loom__strlcpy(out, u && *u ? u : pw ? pw->pw_name : "nobody", len);
}
