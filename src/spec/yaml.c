/* yaml.c: the spec's YAML text to a tree (spec_int.h).
 *
 * libyaml's parser gives events; we build from them a small tree that keeps
 * each node's line and column (and lets --set overrides be grafted on),
 * checking depth and size as each node arrives. spec.c then walks the tree
 * against its tables of known keys. */
#include "spec/spec_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static node *node_new(ctx *c, int type, const char *file, int line, int col) {
  if (c->nodes++ >= SPEC_MAX_NODES) return NULL;
  node *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  if (c->nall == c->capall) {
    int cap = c->capall ? c->capall * 2 : 64;
    node **a = realloc(c->all, (size_t)cap * sizeof *a);
    if (!a) {
      free(n);
      return NULL;
    }
    c->all = a;
    c->capall = cap;
  }
  c->all[c->nall++] = n;
  n->type = type;
  n->file = file;
  n->line = line;
  n->col = col;
  return n;
}

void spec_ctx_free(ctx *c) {
  for (int i = 0; i < c->nall; i++) {
    free(c->all[i]->value);
    free(c->all[i]->items);
    free(c->all[i]);
  }
  free(c->all);
}

static int node_push(node *p, node *item) {
  int per = p->type == N_MAP ? 2 : 1;
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 4;
    node **a = realloc(p->items, (size_t)(per * cap) * sizeof *a);
    if (!a) return LOOM_ENOMEM;
    p->items = a;
    p->cap = cap;
  }
  if (p->type == N_MAP) {
    p->items[2 * p->n] = item; /* the caller sets the value next */
    p->items[2 * p->n + 1] = NULL;
  } else {
    p->items[p->n] = item;
  }
  p->n++;
  return 0;
}

/* ---- loading: libyaml events to a tree ---------------------------------- */

/* A set of names, each in an owner (the map a key is in; NULL for anchors),
 * so that a duplicate key or an alias is found in constant time: a spec
 * under the size cap can hold tens of thousands of keys. */
typedef struct {
  const void *owner;
  const char *name; /* NULL: a free slot */
  node *val;
} slot;

typedef struct {
  slot *s;
  size_t cap, n; /* cap: a power of two, or 0 */
} table;

static size_t table_hash(const void *owner, const char *name) {
  size_t h = 14695981039346656037u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 1099511628211u;
  return h ^ ((uintptr_t)owner * 11400714819323198485u);
}

static slot *table_find(table *t, const void *owner, const char *name) {
  if (!t->cap) return NULL;
  for (size_t i = table_hash(owner, name) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    slot *s = &t->s[i];
    if (!s->name || (s->owner == owner && strcmp(s->name, name) == 0)) return s;
  }
}

/* Adds name (not copied: it must outlive the table) unless it is there. */
static int table_add(table *t, const void *owner, const char *name, node *val) {
  if (2 * (t->n + 1) > t->cap) {
    table old = *t;
    t->cap = old.cap ? 2 * old.cap : 256;
    t->s = calloc(t->cap, sizeof *t->s);
    if (!t->s) {
      *t = old;
      return LOOM_ENOMEM;
    }
    t->n = 0;
    for (size_t i = 0; i < old.cap; i++) {
      if (!old.s[i].name) continue;
      *table_find(t, old.s[i].owner, old.s[i].name) = old.s[i];
      t->n++;
    }
    free(old.s);
  }
  slot *s = table_find(t, owner, name);
  if (!s->name) {
    *s = (slot){owner, name, val};
    t->n++;
  }
  return 0;
}

/* A list or map whose items are still arriving. */
typedef struct {
  node *n;
  node *key; /* map: the key whose value comes next, or NULL */
} frame;

typedef struct {
  ctx *c;
  const char *file;
  frame open[SPEC_MAX_DEPTH + 1]; /* nodes at depth 0..SPEC_MAX_DEPTH */
  int depth;                      /* how many are open */
  node *root;
  table keys;     /* key -> its key node, per map */
  table anchors;  /* anchor -> its node; names owned */
  bool doc_ended; /* the spec's document has ended: only the stream's end may follow */
} loader;

/* Fails at a libyaml mark (0-based) in the document being loaded. */
static int fail_mark(loader *l, yaml_mark_t m, const char *fmt, ...) LOOM__PRINTF(3, 4);
static int fail_mark(loader *l, yaml_mark_t m, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(l->c->err, l->c->errlen, "%s:%zu:%zu: %s", l->file, m.line + 1, m.column + 1, msg);
  return LOOM_ESPEC;
}

static int too_large(loader *l) {
  snprintf(l->c->err, l->c->errlen,
           "%s: the document is too large (more than %d nodes): split the job "
           "or move the data into files",
           l->file, SPEC_MAX_NODES);
  return LOOM_ESPEC;
}

static node *make(loader *l, int type, yaml_mark_t m, int *rc) {
  if (l->c->nodes >= SPEC_MAX_NODES) {
    *rc = too_large(l);
    return NULL;
  }
  node *n = node_new(l->c, type, l->file, (int)m.line + 1, (int)m.column + 1);
  if (!n) *rc = LOOM_ENOMEM;
  return n;
}

/* Refuses a node at depth past SPEC_MAX_DEPTH as soon as it starts. This is
 * why the tree is built from events: libyaml's document loader took seconds
 * (minutes for 100,000) on nested brackets before a check on its tree. */
static int check_depth(loader *l, int depth, yaml_mark_t m) {
  if (depth <= SPEC_MAX_DEPTH) return 0;
  return fail_mark(l, m,
                   "nested too deeply (at most %d levels of lists and maps): "
                   "flatten the spec there",
                   SPEC_MAX_DEPTH);
}

/* Copies an anchored tree for an alias at depth, as if written out again;
 * each copy counts against SPEC_MAX_NODES, so a "billion laughs" of aliases
 * is refused as too large after at most that many nodes. */
static int copy_tree(loader *l, const node *src, int depth, yaml_mark_t at, node **out) {
  int rc = check_depth(l, depth, at);
  if (rc < 0) return rc;
  if (l->c->nodes >= SPEC_MAX_NODES) return too_large(l);
  node *n = node_new(l->c, src->type, src->file, src->line, src->col);
  if (!n) return LOOM_ENOMEM;
  n->plain = src->plain;
  if (src->value && !(n->value = strdup(src->value))) return LOOM_ENOMEM;
  int items = src->type == N_MAP ? 2 * src->n : src->n;
  if (items) {
    n->items = malloc((size_t)items * sizeof *n->items);
    if (!n->items) return LOOM_ENOMEM;
    n->cap = n->n = src->n;
    for (int i = 0; i < items; i++)
      if ((rc = copy_tree(l, src->items[i], depth + 1, at, &n->items[i])) < 0) return rc;
  }
  *out = n;
  return 0;
}

/* Puts a new node where the document is: the root, the next item of a list,
 * or a key or value of a map. at is where it starts. */
static int place(loader *l, node *n, yaml_mark_t at) {
  if (l->depth == 0) {
    l->root = n;
    return 0;
  }
  frame *f = &l->open[l->depth - 1];
  if (f->n->type == N_SEQ) return node_push(f->n, n);
  if (f->key) {
    if (node_push(f->n, f->key) < 0) return LOOM_ENOMEM;
    f->n->items[2 * f->n->n - 1] = n;
    f->key = NULL;
    return 0;
  }
  if (n->type != N_SCALAR)
    return fail_mark(l, at, "a key must be a plain name, not a list or a map");
  slot *s = table_find(&l->keys, f->n, n->value);
  if (s && s->name)
    return fail_mark(l, at, "duplicate key '%s' (first at line %d): keep one of them", n->value,
                     s->val->line);
  f->key = n;
  return table_add(&l->keys, f->n, n->value, n);
}

static int on_anchor(loader *l, const yaml_char_t *anchor, node *n, yaml_mark_t at) {
  if (!anchor) return 0;
  slot *s = table_find(&l->anchors, NULL, (const char *)anchor);
  if (s && s->name)
    return fail_mark(l, at, "anchor &%s is defined twice (first at line %d): rename one",
                     (const char *)anchor, s->val->line);
  char *name = strdup((const char *)anchor);
  if (!name) return LOOM_ENOMEM;
  int rc = table_add(&l->anchors, NULL, name, n);
  if (rc < 0) free(name);
  return rc;
}

/* Handles one event. Sets *done at the end of the first document. */
static int on_event(loader *l, const yaml_event_t *ev, bool *done) {
  yaml_mark_t at = ev->start_mark;
  node *n = NULL;
  int rc = 0;
  switch (ev->type) {
  case YAML_SCALAR_EVENT:
    if ((rc = check_depth(l, l->depth, at)) < 0) return rc;
    if (!(n = make(l, N_SCALAR, at, &rc))) return rc;
    n->value = strndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
    if (!n->value) return LOOM_ENOMEM;
    if (strlen(n->value) != ev->data.scalar.length)
      return fail_mark(l, at, "a value contains a NUL byte");
    n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if ((rc = on_anchor(l, ev->data.scalar.anchor, n, at)) < 0) return rc;
    return place(l, n, at);
  case YAML_ALIAS_EVENT: {
    const char *name = (const char *)ev->data.alias.anchor;
    slot *s = table_find(&l->anchors, NULL, name);
    if (!s || !s->name)
      return fail_mark(l, at, "alias *%s has no anchor &%s before it: define the anchor first",
                       name, name);
    for (int i = 0; i < l->depth; i++)
      if (l->open[i].n == s->val)
        return fail_mark(l, at,
                         "alias *%s is inside the node it names: a spec cannot "
                         "contain itself",
                         name);
    if ((rc = copy_tree(l, s->val, l->depth, at, &n)) < 0) return rc;
    return place(l, n, at);
  }
  case YAML_SEQUENCE_START_EVENT:
  case YAML_MAPPING_START_EVENT: {
    bool seq = ev->type == YAML_SEQUENCE_START_EVENT;
    if ((rc = check_depth(l, l->depth, at)) < 0) return rc;
    if (!(n = make(l, seq ? N_SEQ : N_MAP, at, &rc))) return rc;
    if ((rc = place(l, n, at)) < 0) return rc;
    const yaml_char_t *anchor =
        seq ? ev->data.sequence_start.anchor : ev->data.mapping_start.anchor;
    if ((rc = on_anchor(l, anchor, n, at)) < 0) return rc;
    l->open[l->depth++] = (frame){.n = n};
    return 0;
  }
  case YAML_SEQUENCE_END_EVENT:
  case YAML_MAPPING_END_EVENT:
    l->depth--;
    return 0;
  case YAML_DOCUMENT_START_EVENT:
    if (l->doc_ended)
      return fail_mark(l, at,
                       "a second YAML document starts here: a spec is one document (remove "
                       "the '---' and what follows, or merge it into the first)");
    return 0;
  case YAML_DOCUMENT_END_EVENT:
    l->doc_ended = true; /* read on: trailing text is an error, not ignored */
    return 0;
  case YAML_STREAM_END_EVENT:
    *done = true;
    return 0;
  default:
    return 0;
  }
}

/* Parses YAML text into a tree, from libyaml's events so that every limit
 * (depth, nodes) is checked as the text is read. A spec is one document
 * (a second one, or text after the first, is an error); an empty one is an
 * empty map. Aliases are expanded in place. */
int spec_load_yaml(ctx *c, const char *file, const char *text, size_t len, node **out) {
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) return LOOM_ENOMEM;
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  loader l = {.c = c, .file = file};
  int rc = 0;
  for (bool done = false; rc == 0 && !done;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) {
      yaml_mark_t m = p.problem_mark;
      if (p.context)
        snprintf(c->err, c->errlen, "%s:%zu:%zu: YAML syntax error: %s %s: fix the syntax there",
                 file, m.line + 1, m.column + 1, p.problem ? p.problem : "?", p.context);
      else
        snprintf(c->err, c->errlen, "%s:%zu:%zu: YAML syntax error: %s: fix the syntax there", file,
                 m.line + 1, m.column + 1, p.problem ? p.problem : "?");
      rc = LOOM_ESPEC;
      break;
    }
    rc = on_event(&l, &ev, &done);
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  free(l.keys.s);
  for (size_t i = 0; i < l.anchors.cap; i++) free((char *)l.anchors.s[i].name);
  free(l.anchors.s);
  if (rc < 0) return rc;
  if (!l.root && !(l.root = node_new(c, N_MAP, file, 1, 1))) return LOOM_ENOMEM;
  *out = l.root;
  return 0;
}

/* ---- --set overrides --------------------------------------------------- */
int spec_apply_set(ctx *c, node *root, const char *set) {
  const char *eq = strchr(set, '=');
  if (!eq || eq == set) {
    snprintf(c->err, c->errlen, "--set %s: expected key=value, e.g. --set roles.worker.instances=4",
             set);
    return LOOM_ESPEC;
  }
  char *label = loom__asprintf("--set %s", set);
  char *path = strndup(set, (size_t)(eq - set));
  if (!label || !path) {
    free(label);
    free(path);
    return LOOM_ENOMEM;
  }
  /* The label lives as long as the tree: park it in a node. */
  node *holder = node_new(c, N_SCALAR, "", 0, 0);
  if (!holder) {
    free(label);
    free(path);
    return LOOM_ENOMEM;
  }
  holder->value = label;
  node *val;
  int rc = spec_load_yaml(c, label, eq + 1, strlen(eq + 1), &val);
  if (rc == 0 && val->type == N_MAP && val->n == 0 && eq[1] == 0) {
    val->type = N_SCALAR;
    val->value = strdup("");
    val->plain = false;
  }
  node *m = root;
  for (char *save = NULL, *tok = strtok_r(path, ".", &save); rc == 0 && tok;) {
    char *next = strtok_r(NULL, ".", &save);
    if (m->type != N_MAP) {
      snprintf(c->err, c->errlen, "%s: '%s' is inside a value that is not a map", label, tok);
      rc = LOOM_ESPEC;
      break;
    }
    int i;
    for (i = 0; i < m->n; i++)
      if (strcmp(m->items[2 * i]->value, tok) == 0) break;
    if (i == m->n) {
      node *k = node_new(c, N_SCALAR, label, 1, 1);
      node *v = next ? node_new(c, N_MAP, label, 1, 1) : val;
      if (!k || !v || !(k->value = strdup(tok)) || node_push(m, k) < 0) {
        rc = LOOM_ENOMEM;
        break;
      }
      m->items[2 * i + 1] = v;
    } else if (!next) {
      m->items[2 * i + 1] = val;
    }
    m = m->items[2 * i + 1];
    tok = next;
  }
  free(path);
  return rc;
}
