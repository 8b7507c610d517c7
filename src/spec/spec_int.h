/* spec_int.h: what the spec's files share: the tree that the YAML text
 * is loaded into (each node with its file, line and column, so that every
 * error can say where), the parse context, and the limits.
 *
 *   yaml.c  the YAML text (and --set overrides) to a tree: libyaml's
 *           events, checked for depth, size, duplicate keys and aliases
 *           as they arrive
 *   spec.c  the tree to a validated, resolved spec_job (spec_parse,
 *           spec_load): the tables of known keys, typed access, defaults
 *   job.c   a resolved spec_job: its JSON for the coordinator, the
 *           questions the rest of loom asks it, freeing it */
#ifndef LOOM_SPEC_INT_H
#define LOOM_SPEC_INT_H

#include "spec/spec.h"

#include <limits.h>
#include <stddef.h>

#define SPEC_MAX_BYTES (1u << 20)
#define SPEC_MAX_NODES 100000
#define SPEC_MAX_DEPTH 32

enum { N_SCALAR, N_SEQ, N_MAP };

typedef struct node node;
struct node {
  int type;
  char *value; /* scalar text */
  bool plain;  /* an unquoted scalar: may be a number or a bool */
  const char *file;
  int line, col;
  node **items; /* seq: items; map: key0, val0, key1, val1, ... */
  int n;        /* number of items (seq) or of keys (map) */
  int cap;      /* room in items for this many items (seq) or keys (map) */
};

typedef struct {
  const char *file;
  char *err;
  size_t errlen;
  int nodes;
  node **all; /* every node, for freeing */
  int nall, capall;
  char basedir[PATH_MAX];
} ctx;

/* Loads text (len bytes, named file in messages) into a tree whose nodes c
 * owns. On error returns LOOM_ESPEC (with c->err filled) or LOOM_ENOMEM. */
int spec_load_yaml(ctx *c, const char *file, const char *text, size_t len, node **out);
/* Grafts one --set override ("a.b=c", c read as YAML) onto root. Returns 0,
 * LOOM_ESPEC (with c->err filled) or LOOM_ENOMEM. */
int spec_apply_set(ctx *c, node *root, const char *set);
/* Frees every node of c's tree (not c itself). */
void spec_ctx_free(ctx *c);

#endif
