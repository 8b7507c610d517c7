/* spec.c: the job spec from YAML to a validated spec_job.
 *
 * yaml.c loads the text (and the --set overrides) into a tree that keeps
 * each node's line and column; here we walk the tree against the tables of
 * known keys below, check each value's type and range, and fill in the
 * defaults. Every error says where (file:line:column), what is wrong and
 * what to do. */
#include "spec/spec_int.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(ctx *c, const node *at, const char *fmt, ...) LOOM__PRINTF(3, 4);
static int fail(ctx *c, const node *at, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (at)
    snprintf(c->err, c->errlen, "%s:%d:%d: %s", at->file, at->line, at->col, msg);
  else
    snprintf(c->err, c->errlen, "%s: %s", c->file, msg);
  return LOOM_ESPEC;
}

static node *map_get(const node *m, const char *key) {
  if (!m || m->type != N_MAP) return NULL;
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->items[2 * i]->value, key) == 0) return m->items[2 * i + 1];
  return NULL;
}

/* ---- typed access ------------------------------------------------------ */
static const char *type_name(const node *n) {
  return n->type == N_MAP ? "a map" : n->type == N_SEQ ? "a list" : "a value";
}

static int want_str(ctx *c, const node *n, const char *what, char **out) {
  if (n->type != N_SCALAR) return fail(c, n, "%s must be a string, not %s", what, type_name(n));
  free(*out);
  *out = strdup(n->value);
  return *out ? 0 : LOOM_ENOMEM;
}

static int want_int(ctx *c, const node *n, const char *what, long long min, long long max,
                    int *out) {
  long long v;
  if (n->type != N_SCALAR || !n->plain)
    return fail(c, n, "%s must be a whole number, not %s", what,
                n->type == N_SCALAR ? "a quoted string" : type_name(n));
  int rc = loom__parse_int(n->value, LLONG_MIN, LLONG_MAX, &v);
  if (rc < 0) return fail(c, n, "%s must be a whole number, got '%s'", what, n->value);
  if (v < min || v > max) {
    if (max == INT_MAX) return fail(c, n, "%s must be at least %lld, got %lld", what, min, v);
    return fail(c, n, "%s must be between %lld and %lld, got %lld", what, min, max, v);
  }
  *out = (int)v;
  return 0;
}

static int want_bool(ctx *c, const node *n, const char *what, bool *out) {
  if (n->type == N_SCALAR && n->plain) {
    const char *v = n->value;
    if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "True")) return *out = true, 0;
    if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "False")) return *out = false, 0;
  }
  return fail(c, n, "%s must be true or false, got %s", what,
              n->type == N_SCALAR ? n->value : type_name(n));
}

static int want_size(ctx *c, const node *n, const char *what, uint64_t *out) {
  if (n->type != N_SCALAR)
    return fail(c, n, "%s must be a size like 512MiB or 2GiB, not %s", what, type_name(n));
  int rc = loom__parse_size(n->value, out);
  if (rc < 0)
    return fail(c, n, "%s: '%s' is not a size: write a number with KiB, MiB or GiB (e.g. 2GiB)",
                what, n->value);
  return 0;
}

static bool name_ok(const char *s, size_t max) {
  size_t n = strlen(s);
  if (n == 0 || n > max) return false;
  if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9'))) return false;
  for (size_t i = 1; i < n; i++) {
    char ch = s[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
      return false;
  }
  return true;
}

/* Unknown key: say which, where, and the nearest known one. */
static int unknown_key(ctx *c, const node *k, const char *where, const char *const *known) {
  const char *best = NULL;
  int bestd = 1000;
  for (int i = 0; known[i]; i++) {
    int d = loom__levenshtein(k->value, known[i]);
    if (d < bestd) {
      bestd = d;
      best = known[i];
    }
  }
  int lim = (int)strlen(k->value) / 2 + 1;
  if (best && bestd <= (lim < 3 ? lim : 3))
    return fail(c, k, "unknown key '%s' in %s: did you mean '%s'?", k->value, where, best);
  char list[512] = "";
  for (int i = 0; known[i]; i++) {
    strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, known[i], sizeof list - strlen(list) - 1);
  }
  return fail(c, k, "unknown key '%s' in %s; known keys: %s", k->value, where, list);
}

static int check_keys(ctx *c, const node *m, const char *where, const char *const *known) {
  for (int i = 0; i < m->n; i++) {
    const node *k = m->items[2 * i];
    bool ok = false;
    for (int j = 0; known[j] && !ok; j++) ok = strcmp(k->value, known[j]) == 0;
    if (!ok) return unknown_key(c, k, where, known);
  }
  return 0;
}

/* What loom sets for each task (README, "What a task sees"): a spec may
 * not set these in env. */
static const char *const TASK_OWN_ENV[] = {
    "TF_CONFIG",  "RANK",        "WORLD_SIZE",      "LOCAL_RANK",      "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",     "LOOM_CLUSTER",    "LOOM_ROLE",
    "LOOM_INDEX", "LOOM_RANK",   "LOOM_WORLD_SIZE", "LOOM_LOCAL_RANK", "LOOM_PORT",
    "LOOM_TASK",  "LOOM_COORD",  "LOOM_SECRET",     "LOOM_ATTEMPT",    NULL};

static int want_env(ctx *c, const node *n, const char *what, spec_kv **out, int *count) {
  if (n->type != N_MAP)
    return fail(c, n, "%s must be a map of NAME: value, not %s", what, type_name(n));
  *out = calloc((size_t)n->n + 1, sizeof **out);
  if (!*out) return LOOM_ENOMEM;
  for (int i = 0; i < n->n; i++) {
    const node *k = n->items[2 * i], *v = n->items[2 * i + 1];
    const char *s = k->value;
    bool ok = *s && !(*s >= '0' && *s <= '9');
    for (; *s && ok; s++)
      ok = (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
           *s == '_';
    if (!ok)
      return fail(c, k, "'%s' is not a valid environment variable name (letters, digits, _)",
                  k->value);
    if (v->type != N_SCALAR)
      return fail(c, v, "the value of %s must be a string, not %s", k->value, type_name(v));
    for (const char *const *o = TASK_OWN_ENV; *o; o++)
      if (!strcmp(k->value, *o))
        return fail(c, k,
                    "%s.%s: loom sets %s for each task from the cluster it placed (the "
                    "addresses it reserved, the task's own type, index and rank); a value "
                    "here would point the task elsewhere. Remove it (LOOM_CLUSTER has every "
                    "role's addresses for a command that builds its own)",
                    what, k->value, k->value);
    (*out)[i].key = strdup(k->value);
    (*out)[i].value = strdup(v->value);
    if (!(*out)[i].key || !(*out)[i].value) return LOOM_ENOMEM;
    (*count)++;
  }
  return 0;
}

static const char *const JOB_KEYS[] = {"name",    "backend",      "queue",    "retries",
                                       "restart", "max_restarts", "retry_on", "heartbeat_timeout",
                                       "env",     "files",        "archives", "roles",
                                       "feed",    "python",       NULL};
static const char *const ROLE_KEYS[] = {"instances", "command", "vcores",  "memory",
                                        "gpus",      "label",   "procs",   "env",
                                        "service",   "elastic", "restart", NULL};
static const char *const ELASTIC_KEYS[] = {"min", "max", NULL};
static const char *const FEED_KEYS[] = {"input",  "format", "epochs",  "shuffle", "seed",
                                        "output", "follow", "consume", NULL};

static int parse_role(ctx *c, const node *k, const node *v, spec_role *r) {
  int rc;
  r->name = strdup(k->value);
  if (!r->name) return LOOM_ENOMEM;
  if (!name_ok(k->value, 32))
    return fail(c, k,
                "role name '%s' is not valid: use 1-32 of a-z, 0-9, _ and -, "
                "starting with a letter or digit",
                k->value);
  r->instances = 1;
  r->procs = 1;
  r->service = !strcmp(r->name, "ps") || !strcmp(r->name, "tensorboard");
  if (v->type != N_MAP)
    return fail(c, v,
                "role '%s' must be a map with at least a command, e.g. "
                "{instances: 2, command: ./train}",
                r->name);
  char where[64];
  snprintf(where, sizeof where, "role '%s'", r->name);
  if ((rc = check_keys(c, v, where, ROLE_KEYS)) < 0) return rc;
  const node *n;
  char what[96];
#define WHAT(key) (snprintf(what, sizeof what, "roles.%s.%s", r->name, key), what)
  if ((n = map_get(v, "instances")) &&
      (rc = want_int(c, n, WHAT("instances"), 1, 100000, &r->instances)) < 0)
    return rc;
  if ((n = map_get(v, "procs")) && (rc = want_int(c, n, WHAT("procs"), 1, 1024, &r->procs)) < 0)
    return rc;
  if ((n = map_get(v, "vcores")) &&
      (rc = want_int(c, n, WHAT("vcores"), 1, 100000, &r->vcores)) < 0)
    return rc;
  if ((n = map_get(v, "gpus")) && (rc = want_int(c, n, WHAT("gpus"), 0, 1024, &r->gpus)) < 0)
    return rc;
  if ((n = map_get(v, "memory")) && (rc = want_size(c, n, WHAT("memory"), &r->memory)) < 0)
    return rc;
  if (n && r->memory < (1u << 20))
    return fail(c, n,
                "roles.%s.memory is %llu bytes; at least 1MiB (did you forget the unit, "
                "e.g. 2GiB?)",
                r->name, (unsigned long long)r->memory);
  if ((n = map_get(v, "label")) && (rc = want_str(c, n, WHAT("label"), &r->label)) < 0) return rc;
  if ((n = map_get(v, "service")) && (rc = want_bool(c, n, WHAT("service"), &r->service)) < 0)
    return rc;
  if ((n = map_get(v, "restart"))) {
    if ((rc = want_str(c, n, WHAT("restart"), &r->restart)) < 0) return rc;
    if (strcmp(r->restart, "job") && strcmp(r->restart, "task"))
      return fail(c, n, "roles.%s.restart must be job or task, got '%s'", r->name, r->restart);
  }
  if ((n = map_get(v, "env")) && (rc = want_env(c, n, WHAT("env"), &r->env, &r->nenv)) < 0)
    return rc;
  if ((n = map_get(v, "elastic"))) {
    if (n->type != N_MAP)
      return fail(c, n, "roles.%s.elastic must be a map like {min: 2, max: 4}", r->name);
    if ((rc = check_keys(c, n, "elastic", ELASTIC_KEYS)) < 0) return rc;
    const node *mn = map_get(n, "min"), *mx = map_get(n, "max");
    if (!mn || !mx) return fail(c, n, "roles.%s.elastic needs both min and max", r->name);
    if ((rc = want_int(c, mn, WHAT("elastic.min"), 1, 100000, &r->elastic_min)) < 0) return rc;
    if ((rc = want_int(c, mx, WHAT("elastic.max"), 1, 100000, &r->elastic_max)) < 0) return rc;
    if (r->elastic_min > r->instances || r->instances > r->elastic_max)
      return fail(c, n, "roles.%s: elastic needs min <= instances <= max, got %d <= %d <= %d",
                  r->name, r->elastic_min, r->instances, r->elastic_max);
  }
#undef WHAT
  n = map_get(v, "command");
  if (!n)
    return fail(c, v,
                "role '%s' has no command: add e.g. `command: ./train --epochs 5` "
                "(a string run by /bin/sh -c, or a list exec'd directly)",
                r->name);
  if (n->type == N_SCALAR) {
    if (!*n->value) return fail(c, n, "roles.%s.command is empty", r->name);
    r->shell = strdup(n->value);
    if (!r->shell) return LOOM_ENOMEM;
  } else if (n->type == N_SEQ) {
    if (n->n == 0) return fail(c, n, "roles.%s.command is an empty list", r->name);
    r->argv = calloc((size_t)n->n + 1, sizeof *r->argv);
    if (!r->argv) return LOOM_ENOMEM;
    for (int i = 0; i < n->n; i++) {
      if (n->items[i]->type != N_SCALAR)
        return fail(c, n->items[i], "each word of roles.%s.command must be a string", r->name);
      if (!(r->argv[i] = strdup(n->items[i]->value))) return LOOM_ENOMEM;
    }
    if (!*r->argv[0])
      return fail(c, n->items[0], "roles.%s.command starts with an empty word", r->name);
  } else {
    return fail(c, n, "roles.%s.command must be a string or a list of strings, not a map", r->name);
  }
  return 0;
}

/* A path of the spec as the job uses it: an hdfs:// URL as written, a
 * local path made absolute from the spec's directory. Another URL scheme
 * is refused (LOOM_ESPEC, located). */
static int spec_path(ctx *c, const node *v, const char *what, char **out) {
  *out = NULL;
  const char *s = v->value, *colon = strstr(s, "://");
  bool scheme = colon && colon > s;
  for (const char *p = s; scheme && p < colon; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '+' || *p == '-' || *p == '.'))
      scheme = false;
  if (scheme && strncmp(s, "hdfs://", 7))
    return fail(c, v, "%s '%s': only local paths and hdfs:// URLs are supported", what, s);
  *out = scheme || s[0] == '/' ? strdup(s) : loom__asprintf("%s/%s", c->basedir, s);
  return *out ? 0 : LOOM_ENOMEM;
}

static int parse_feed(ctx *c, const node *n, json_t **out) {
  int rc;
  if (n->type != N_MAP) return fail(c, n, "feed must be a map (input, format, ...)");
  if ((rc = check_keys(c, n, "feed", FEED_KEYS)) < 0) return rc;
  json_t *f = json_object();
  *out = f;
  const node *v = map_get(n, "input");
  if (!v) return fail(c, n, "feed has no input: add e.g. `input: [data/train-*.csv]`");
  json_t *in = json_array();
  json_object_set_new(f, "input", in);
  if (v->type == N_SCALAR || (v->type == N_SEQ && v->n > 0)) {
    for (int i = 0; i < (v->type == N_SCALAR ? 1 : v->n); i++) {
      const node *g = v->type == N_SCALAR ? v : v->items[i];
      if (g->type != N_SCALAR || !*g->value) return fail(c, g, "feed.input entries must be globs");
      /* relative globs start at the spec's directory */
      char *abs;
      if ((rc = spec_path(c, g, "feed.input", &abs)) < 0) return rc;
      json_array_append_new(in, json_string(abs));
      free(abs);
    }
  } else {
    return fail(c, v, "feed.input must be a glob or a non-empty list of globs");
  }
  const char *fmt = "lines";
  if ((v = map_get(n, "format"))) {
    if (v->type != N_SCALAR) return fail(c, v, "feed.format must be a string");
    fmt = v->value;
    long long b;
    bool ok = !strcmp(fmt, "lines") || !strcmp(fmt, "tfrecord") || !strcmp(fmt, "idx") ||
              (!strncmp(fmt, "fixed:", 6) && loom__parse_int(fmt + 6, 1, 1 << 30, &b) == 0);
    if (!ok)
      return fail(c, v, "feed.format '%s' is not known: use lines, tfrecord, idx or fixed:<bytes>",
                  fmt);
  }
  json_object_set_new(f, "format", json_string(fmt));
  int epochs = 1, seed = 0;
  bool shuffle = false;
  if ((v = map_get(n, "epochs")) && (rc = want_int(c, v, "feed.epochs", 1, 1000000, &epochs)) < 0)
    return rc;
  if ((v = map_get(n, "seed")) && (rc = want_int(c, v, "feed.seed", 0, INT_MAX, &seed)) < 0)
    return rc;
  if ((v = map_get(n, "shuffle")) && (rc = want_bool(c, v, "feed.shuffle", &shuffle)) < 0)
    return rc;
  json_object_set_new(f, "epochs", json_integer(epochs));
  json_object_set_new(f, "seed", json_integer(seed));
  json_object_set_new(f, "shuffle", json_boolean(shuffle));
  if ((v = map_get(n, "output"))) {
    if (v->type != N_SCALAR || !*v->value)
      return fail(c, v, "feed.output must be a directory path");
    char *abs;
    if ((rc = spec_path(c, v, "feed.output", &abs)) < 0) return rc;
    json_object_set_new(f, "output", json_string(abs));
    free(abs);
  }
  if ((v = map_get(n, "follow"))) {
    if (v->type != N_SCALAR || !*v->value)
      return fail(c, v, "feed.follow must be the path of the file whose appearance ends the input");
    char *abs;
    if ((rc = spec_path(c, v, "feed.follow", &abs)) < 0) return rc;
    json_object_set_new(f, "follow", json_string(abs));
    free(abs);
  }
  bool consume = false;
  if ((v = map_get(n, "consume")) && (rc = want_bool(c, v, "feed.consume", &consume)) < 0)
    return rc;
  if (consume) json_object_set_new(f, "consume", json_true());
  return 0;
}

static bool archive_name(const char *p) {
  static const char *const ext[] = {".tar.gz", ".tgz", ".tar", ".zip", NULL};
  size_t n = strlen(p);
  for (int i = 0; ext[i]; i++) {
    size_t e = strlen(ext[i]);
    if (n > e && !strcmp(p + n - e, ext[i])) return true;
  }
  return false;
}

/* One source of files: or archives: (arch), or of python: (label
 * "python"), into *slot: hdfs:// as it is, a local path resolved to an
 * absolute one that exists. label names it in messages ("archives.env"). */
static int parse_source(ctx *c, const node *v, const char *label, const char *t, bool arch,
                        spec_kv *slot) {
  if (v->type != N_SCALAR || !*v->value)
    return fail(c, v, "the source of %s must be a path", label);
  char *url = NULL;
  int prc = spec_path(c, v, label, &url);
  if (prc < 0) return prc;
  if (!strncmp(url, "hdfs://", 7)) {
    /* fetched (or, on YARN, localized) when the job starts: that it
     * exists is checked then */
    if (arch && !archive_name(url)) {
      free(url);
      return fail(c, v, "%s: source '%s' must end in .tar.gz, .tgz, .tar or .zip", label, v->value);
    }
    slot->key = strdup(t);
    slot->value = url;
    return slot->key ? 0 : LOOM_ENOMEM;
  }
  free(url);
  char *src = v->value[0] == '/' ? strdup(v->value) : loom__asprintf("%s/%s", c->basedir, v->value);
  if (!src) return LOOM_ENOMEM;
  char real[PATH_MAX];
  if (!realpath(src, real)) {
    int e = errno;
    int rc = fail(c, v,
                  "%s: source '%s' (%s): %s: fix the path (relative paths "
                  "start at the spec's directory)",
                  label, v->value, src, strerror(e));
    free(src);
    return rc;
  }
  free(src);
  struct stat st;
  if (arch && (stat(real, &st) < 0 || !S_ISREG(st.st_mode) || !archive_name(real)))
    return fail(c, v,
                "%s: source '%s' must be a file ending in .tar.gz, .tgz, .tar or "
                ".zip (a directory goes under files:)",
                label, v->value);
  slot->key = strdup(t);
  slot->value = strdup(real);
  return slot->key && slot->value ? 0 : LOOM_ENOMEM;
}

/* files: and archives: (what is "files" or "archives"): target -> source,
 * sources resolved to absolute paths that exist. */
static int parse_files(ctx *c, const node *n, spec_job *s, const char *what) {
  bool arch = !strcmp(what, "archives");
  if (n->type != N_MAP)
    return fail(c, n, "%s must be a map of target: source, e.g. {%s}", what,
                arch ? "pyenv: ./py311.tar.gz" : "data: ./data");
  spec_kv **out = arch ? &s->archives : &s->files;
  int *count = arch ? &s->narchives : &s->nfiles;
  *out = calloc((size_t)n->n + 2, sizeof **out); /* + python:'s archive */
  if (!*out) return LOOM_ENOMEM;
  for (int i = 0; i < n->n; i++) {
    const node *k = n->items[2 * i], *v = n->items[2 * i + 1];
    const char *t = k->value;
    if (!*t || t[0] == '/' || strstr(t, "..") || strchr(t, '\n'))
      return fail(c, k,
                  "%s target '%s' must be a relative path inside the task's "
                  "directory (no leading / and no ..)",
                  what, t);
    for (int j = 0; j < s->narchives; j++)
      if (!strcmp(s->archives[j].key, t))
        return fail(c, k, "%s.%s: %s", what, t,
                    !strcmp(t, SPEC_PYTHON_ENV)
                        ? "python: unpacks its environment there; name the target otherwise"
                        : "archives has a target of the same name");
    char where[80];
    snprintf(where, sizeof where, "%s.%s", what, t);
    int rc = parse_source(c, v, where, t, arch, &(*out)[i]);
    if (rc < 0) return rc;
    (*count)++;
  }
  return 0;
}

/* python: an environment archive (venv-pack, conda-pack; local or
 * hdfs://) unpacked at SPEC_PYTHON_ENV in each task's directory, its bin/
 * first on the task's PATH (the agent does that where the job's env has
 * LOOM_PYTHON_ENV). "auto" is the Python package's: it packs the caller's
 * virtualenv first. */
static int parse_python(ctx *c, const node *n, spec_job *s) {
  if (n->type == N_SCALAR && !strcmp(n->value, "auto"))
    return fail(c, n,
                "python: auto packs the caller's virtualenv, which the Python package does "
                "for a function (loom.run(fn, python=\"auto\")); in a spec give an archive of "
                "the environment (.tar.gz, .tgz, .tar or .zip from venv-pack or conda-pack), "
                "local or hdfs://");
  spec_kv *a = realloc(s->archives, ((size_t)s->narchives + 2) * sizeof *a);
  if (!a) return LOOM_ENOMEM;
  s->archives = a;
  memset(&a[s->narchives], 0, 2 * sizeof *a);
  for (int j = 0; j < s->narchives; j++)
    if (!strcmp(a[j].key, SPEC_PYTHON_ENV))
      return fail(c, n, "python: its environment goes to %s, which archives names already",
                  SPEC_PYTHON_ENV);
  int rc = parse_source(c, n, "python", SPEC_PYTHON_ENV, true, &a[s->narchives]);
  if (rc < 0) return rc;
  s->narchives++;
  for (int j = 0; j < s->nenv; j++)
    if (!strcmp(s->env[j].key, "LOOM_PYTHON_ENV")) return 0; /* a spec written back */
  spec_kv *e = realloc(s->env, ((size_t)s->nenv + 2) * sizeof *e);
  if (!e) return LOOM_ENOMEM;
  s->env = e;
  memset(&e[s->nenv], 0, 2 * sizeof *e);
  e[s->nenv].key = strdup("LOOM_PYTHON_ENV");
  e[s->nenv].value = strdup(SPEC_PYTHON_ENV);
  if (!e[s->nenv].key || !e[s->nenv].value) return LOOM_ENOMEM;
  s->nenv++;
  return 0;
}

/* Adds a located warning to s->warning (one per line). */
static int warn(ctx *c, spec_job *s, const node *at, const char *fmt, ...) LOOM__PRINTF(4, 5);
static int warn(ctx *c, spec_job *s, const node *at, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char *w = loom__asprintf("%s%s%s:%d:%d: %s", s->warning ? s->warning : "", s->warning ? "\n" : "",
                           at ? at->file : c->file, at ? at->line : 0, at ? at->col : 0, msg);
  if (!w) return LOOM_ENOMEM;
  free(s->warning);
  s->warning = w;
  return 0;
}

/* TensorFlow's rules for the cluster in TF_CONFIG (tf.distribute's
 * cluster-spec check: "There must be at most one 'chief' job", the same
 * for 'evaluator'), applied at submit rather than as a stack trace in a
 * running task. An evaluator with no chief is allowed (worker 0 writes the
 * checkpoints under MultiWorkerMirroredStrategy) but is said. */
static int tf_rules(ctx *c, const node *roles, spec_job *s) {
  static const char *const one[] = {"chief", "evaluator"};
  for (size_t i = 0; i < sizeof one / sizeof *one; i++) {
    const spec_role *r = spec_role_find(s, one[i]);
    if (!r || r->instances <= 1) continue;
    const node *rn = map_get(roles, one[i]), *in = rn ? map_get(rn, "instances") : NULL;
    return fail(c, in ? in : rn,
                "roles.%s.instances: %d, but TensorFlow allows at most one %s in a cluster "
                "(\"There must be at most one '%s' job\"); run more as another role",
                one[i], r->instances, one[i], one[i]);
  }
  const spec_role *ev = spec_role_find(s, "evaluator");
  if (ev && !spec_role_find(s, "chief")) {
    const node *rn = map_get(roles, "evaluator");
    int rc = warn(c, s, rn,
                  "roles.evaluator: the job has an evaluator but no chief: TensorFlow's "
                  "evaluator evaluates the checkpoints the chief writes (Estimator refuses such "
                  "a cluster; under MultiWorkerMirroredStrategy worker 0 writes them)");
    if (rc < 0) return rc;
  }
  for (int i = 0; i < s->nroles; i++) {
    const spec_role *r = &s->roles[i];
    if (!r->shell || !strstr(r->shell, "TF_CONFIG=")) continue;
    const node *rn = map_get(roles, r->name), *cn = rn ? map_get(rn, "command") : NULL;
    int rc = warn(c, s, cn ? cn : rn,
                  "roles.%s.command sets TF_CONFIG itself: that replaces the one loom made "
                  "from the ports it reserved for the job (LOOM_CLUSTER has them)",
                  r->name);
    if (rc < 0) return rc;
  }
  return 0;
}

static int parse_job(ctx *c, const node *root, spec_job *s) {
  int rc;
  if (root->type != N_MAP)
    return fail(c, root, "a job spec is a map with at least name and roles, not %s",
                type_name(root));
  if ((rc = check_keys(c, root, "the job", JOB_KEYS)) < 0) return rc;
  const node *n = map_get(root, "name");
  if (!n) return fail(c, root, "the spec has no name: add e.g. `name: fashion-mlp` at the top");
  if ((rc = want_str(c, n, "name", &s->name)) < 0) return rc;
  if (!name_ok(s->name, 63))
    return fail(c, n,
                "name '%s' is not valid: use 1-63 of a-z, 0-9, _ and -, starting "
                "with a letter or digit",
                s->name);
  s->backend = strdup(spec_backend_default());
  s->restart = strdup("job");
  if (!s->backend || !s->restart) return LOOM_ENOMEM;
  if ((n = map_get(root, "backend"))) {
    if ((rc = want_str(c, n, "backend", &s->backend)) < 0) return rc;
    if (!spec_backend_known(s->backend))
      return fail(c, n, "backend '%s' is not known: use one of %s", s->backend,
                  spec_backend_names());
  }
  if ((n = map_get(root, "queue")) && (rc = want_str(c, n, "queue", &s->queue)) < 0) return rc;
  if ((n = map_get(root, "retries")) && (rc = want_int(c, n, "retries", 0, 1000, &s->retries)) < 0)
    return rc;
  s->retries_set = n != NULL;
  if ((n = map_get(root, "max_restarts")) &&
      (rc = want_int(c, n, "max_restarts", 0, 100000, &s->max_restarts)) < 0)
    return rc;
  s->max_restarts_set = n != NULL;
  if ((n = map_get(root, "restart"))) {
    if ((rc = want_str(c, n, "restart", &s->restart)) < 0) return rc;
    if (strcmp(s->restart, "job") && strcmp(s->restart, "task"))
      return fail(c, n, "restart must be job or task, got '%s'", s->restart);
  }
  if ((n = map_get(root, "retry_on"))) {
    if (n->type == N_SCALAR) {
      s->retry_on = calloc(1, sizeof *s->retry_on);
      if (!s->retry_on) return LOOM_ENOMEM;
      if ((rc = want_int(c, n, "retry_on", 1, 255, &s->retry_on[0])) < 0) return rc;
      s->nretry_on = 1;
    } else if (n->type == N_SEQ && n->n > 0) {
      s->retry_on = calloc((size_t)n->n, sizeof *s->retry_on);
      if (!s->retry_on) return LOOM_ENOMEM;
      for (int i = 0; i < n->n; i++, s->nretry_on++)
        if ((rc = want_int(c, n->items[i], "each retry_on code", 1, 255, &s->retry_on[i])) < 0)
          return rc;
    } else {
      return fail(c, n, "retry_on must be an exit code or a list of them, e.g. [75, 143]");
    }
  }
  if ((n = map_get(root, "heartbeat_timeout"))) {
    uint64_t ms = 0;
    long long secs;
    const char *v = n->type == N_SCALAR ? n->value : "";
    size_t l = strlen(v);
    bool ok = false;
    /* the number before the unit: one too long for tmp is refused, not cut */
    char tmp[32];
    size_t unit = l > 2 && !strcmp(v + l - 2, "ms") ? 2 : l > 1 && v[l - 1] == 's' ? 1 : 0;
    if (unit && l - unit < sizeof tmp) {
      memcpy(tmp, v, l - unit);
      tmp[l - unit] = 0;
      if (unit == 2)
        ok = loom__parse_int(tmp, 100, 86400000, &secs) == 0 && (ms = (uint64_t)secs, true);
      else
        ok = loom__parse_int(tmp, 1, 86400, &secs) == 0 && (ms = (uint64_t)secs * 1000, true);
    } else if (!unit) {
      ok = n->plain && loom__parse_int(v, 1, 86400, &secs) == 0 &&
           (ms = (uint64_t)secs * 1000, true);
    }
    if (!ok)
      return fail(c, n,
                  "heartbeat_timeout must be a duration like 30 (seconds), 30s or 500ms, "
                  "got '%s'",
                  v);
    s->heartbeat_timeout_ms = (int)ms;
  }
  if ((n = map_get(root, "env")) && (rc = want_env(c, n, "env", &s->env, &s->nenv)) < 0) return rc;
  if ((n = map_get(root, "archives")) && (rc = parse_files(c, n, s, "archives")) < 0) return rc;
  if ((n = map_get(root, "python")) && (rc = parse_python(c, n, s)) < 0) return rc;
  if ((n = map_get(root, "files")) && (rc = parse_files(c, n, s, "files")) < 0) return rc;
  if ((n = map_get(root, "feed")) && (rc = parse_feed(c, n, &s->feed)) < 0) return rc;
  n = map_get(root, "roles");
  if (!n)
    return fail(c, root,
                "the spec has no roles: add e.g. `roles: {worker: {instances: 2, "
                "command: ./train}}`");
  if (n->type != N_MAP || n->n == 0)
    return fail(c, n,
                "roles must be a map with at least one role, e.g. {worker: {command: ./train}}");
  s->roles = calloc((size_t)n->n, sizeof *s->roles);
  if (!s->roles) return LOOM_ENOMEM;
  for (int i = 0; i < n->n; i++) {
    rc = parse_role(c, n->items[2 * i], n->items[2 * i + 1], &s->roles[i]);
    s->nroles++;
    if (rc < 0) return rc;
  }
  if ((rc = tf_rules(c, n, s)) < 0) return rc;
  long long total = 0;
  for (int i = 0; i < s->nroles; i++) total += (long long)s->roles[i].instances;
  if (total > 100000) return fail(c, n, "the job has %lld tasks; at most 100000", total);
  bool finishing = false;
  for (int i = 0; i < s->nroles; i++) finishing |= !s->roles[i].service;
  if (!finishing)
    return fail(c, n,
                "every role is a service (ps, tensorboard, or service: true): the job "
                "would never finish; add a role that does the work");
  return 0;
}

int spec_parse(const char *name, const char *text, size_t len, const char *const *sets, int nsets,
               spec_job **out, char *err, size_t errlen) {
  ctx c = {.file = name, .err = err, .errlen = errlen};
  err[0] = 0;
  *out = NULL;
  if (len > SPEC_MAX_BYTES) {
    snprintf(err, errlen, "%s: the spec is %zu bytes; at most %u", name, len, SPEC_MAX_BYTES);
    return LOOM_ESPEC;
  }
  char tmp[PATH_MAX];
  loom__strlcpy(tmp, name, sizeof tmp);
  char *dir = dirname(tmp);
  if (!realpath(dir, c.basedir)) loom__strlcpy(c.basedir, dir, sizeof c.basedir);
  spec_job *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ENOMEM;
  node *root = NULL;
  int rc = spec_load_yaml(&c, name, text, len, &root);
  for (int i = 0; rc == 0 && i < nsets; i++) rc = spec_apply_set(&c, root, sets[i]);
  if (rc == 0) rc = parse_job(&c, root, s);
  if (rc == 0) {
    char real[PATH_MAX];
    s->path = strdup(realpath(name, real) ? real : name);
    if (!s->path) rc = LOOM_ENOMEM;
  }
  spec_ctx_free(&c);
  if (rc < 0) {
    if (rc == LOOM_ENOMEM) snprintf(err, errlen, "%s: out of memory", name);
    spec_free(s);
    return rc;
  }
  *out = s;
  return 0;
}

int spec_load(const char *path, const char *const *sets, int nsets, spec_job **out, char *err,
              size_t errlen) {
  char *text;
  size_t len;
  int rc = loom__read_file(path, SPEC_MAX_BYTES + 1, &text, &len);
  if (rc < 0) {
    snprintf(err, errlen, "%s: cannot read the spec: %s", path,
             rc == LOOM_ENOENT   ? "no such file"
             : rc == LOOM_ERANGE ? "larger than 1 MiB"
                                 : strerror(errno));
    *out = NULL;
    return rc == LOOM_ERANGE ? LOOM_ESPEC : LOOM_EIO;
  }
  rc = spec_parse(path, text, len, sets, nsets, out, err, errlen);
  free(text);
  return rc;
}
