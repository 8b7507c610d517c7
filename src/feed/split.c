/* split.c: the feed's input: the spec's globs expanded into files, each
 * file probed by its format (headers checked when the job starts, not when
 * a task trips over them), and the files cut into splits: a small file is
 * one split, a large one record-aligned byte ranges of about split_bytes.
 * Split i is the same for every task and every attempt of the job: files
 * sorted by path, ranges in file order.
 *
 * A growing input (feed.follow) starts with what its globs match now,
 * possibly nothing, and takes the files that appear later with
 * loom__feed_input_grow: each new file (a path not seen before; a file is
 * read whole once it is there, so writers rename finished files into
 * place) is probed and cut then, and its splits are numbered after every
 * split before them. */
#include "feed/feed.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INPUT_MAX_FILES (1u << 22)

void loom__feed_input_free(feed_input *in) {
  if (!in) return;
  for (size_t i = 0; i < in->nfiles; i++) free(in->files[i].path);
  free(in->files);
  free(in->sorted);
  free(in->splits);
  for (size_t i = 0; i < in->nhosts; i++) free(in->hosts[i]);
  free(in->hosts);
  free(in);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every name the globs match (local paths or hdfs:// URLs), sorted, each
 * once, into *paths. strict: a glob that matches nothing is an error. */
static int expand(const char *const *globs, size_t nglobs, bool strict, char ***paths,
                  size_t *npaths, char *err, size_t errlen) {
  char **out = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  for (size_t g = 0; g < nglobs && rc == 0; g++) {
    char **m = NULL;
    size_t nm = 0;
    char why[1024];
    rc = loom__fs_glob(globs[g], &m, &nm, why, sizeof why);
    if (rc < 0) {
      snprintf(err, errlen, "feed.input '%s': %s", globs[g], why);
      if (rc == LOOM_EINVAL) rc = LOOM_ESPEC;
      break;
    }
    if (nm == 0 && strict) {
      snprintf(err, errlen,
               "feed.input '%s' matches no file: check the path (relative "
               "paths start at the spec's directory)",
               globs[g]);
      rc = LOOM_ESPEC;
    }
    for (size_t i = 0; i < nm; i++) {
      if (rc == 0 && n == cap) {
        size_t nc = cap ? cap * 2 : 64;
        char **p = nc <= INPUT_MAX_FILES ? realloc(out, nc * sizeof *p) : NULL;
        if (!p) {
          snprintf(err, errlen, "feed.input matches too many files (at most %u)", INPUT_MAX_FILES);
          rc = LOOM_ENOMEM;
        } else {
          out = p;
          cap = nc;
        }
      }
      if (rc == 0)
        out[n++] = m[i];
      else
        free(m[i]);
    }
    free(m);
  }
  if (rc == 0 && n) {
    qsort(out, n, sizeof *out, cmp_str);
    size_t k = 1;
    for (size_t i = 1; i < n; i++) {
      if (strcmp(out[i], out[k - 1]))
        out[k++] = out[i];
      else
        free(out[i]);
    }
    n = k;
  }
  if (rc < 0) {
    for (size_t i = 0; i < n; i++) free(out[i]);
    free(out);
    return rc;
  }
  *paths = out;
  *npaths = n;
  return 0;
}

/* The index of host in in->hosts, added when new; FEED_NO_HOST past the
 * table's size or out of memory (locality is a preference). */
static uint16_t host_index(feed_input *in, const char *host) {
  for (size_t i = 0; i < in->nhosts; i++)
    if (!strcmp(in->hosts[i], host)) return (uint16_t)i;
  if (in->nhosts >= FEED_NO_HOST) return FEED_NO_HOST;
  char **nh = realloc(in->hosts, (in->nhosts + 1) * sizeof *nh);
  if (!nh) return FEED_NO_HOST;
  in->hosts = nh;
  if (!(nh[in->nhosts] = strdup(host))) return FEED_NO_HOST;
  return (uint16_t)in->nhosts++;
}

static int add_split(feed_input *in, uint32_t file, uint64_t off, uint64_t len) {
  if (in->nsplits == in->splitcap) {
    size_t nc = in->splitcap ? in->splitcap * 2 : 64;
    feed_split *s = realloc(in->splits, nc * sizeof *s);
    if (!s) return LOOM_ENOMEM;
    in->splits = s;
    in->splitcap = nc;
  }
  in->splits[in->nsplits++] = (feed_split){
      .file = file, .off = off, .len = len, .host = {FEED_NO_HOST, FEED_NO_HOST, FEED_NO_HOST}};
  return 0;
}

/* Whether path is one of in's first n files (in->sorted[0..n) is sorted). */
static bool known(const feed_input *in, size_t n, const char *path) {
  return n && bsearch(&path, in->sorted, n, sizeof *in->sorted, cmp_str);
}

/* Probes the file at path (owned: in keeps it, or frees it on error) and
 * appends it and its splits to in. */
static int add_file(feed_input *in, char *path, uint64_t split_bytes, char *err, size_t errlen) {
  const feed_format_ops *ops = loom__feed_format_ops(&in->fmt);
  if (in->nfiles == in->filecap) {
    size_t nc = in->filecap ? in->filecap * 2 : 64;
    feed_file *nf = nc <= INPUT_MAX_FILES ? realloc(in->files, nc * sizeof *nf) : NULL;
    char **ns = nf ? realloc(in->sorted, nc * sizeof *ns) : NULL;
    if (nf) in->files = nf;
    if (ns) in->sorted = ns;
    if (!nf || !ns) {
      free(path);
      snprintf(err, errlen, "feed.input: out of memory for %zu files (at most %u)", nc,
               INPUT_MAX_FILES);
      return LOOM_ENOMEM;
    }
    in->filecap = nc;
  }
  feed_file *ff = &in->files[in->nfiles];
  *ff = (feed_file){.path = path};
  in->sorted[in->nfiles] = path;
  in->nfiles++;
  size_t splits0 = in->nsplits;
  loom__rfile *f = NULL;
  char why[1024];
  int rc = loom__rfile_open(ff->path, &f, why, sizeof why);
  if (rc == LOOM_ESTATE) {
    snprintf(err, errlen,
             "feed input %s is not a regular file: make feed.input's globs "
             "match files only",
             ff->path);
    rc = LOOM_ESPEC;
  } else if (rc < 0) {
    snprintf(err, errlen, "feed input %s: cannot open: %s", ff->path, why);
    rc = rc == LOOM_ENOMEM || rc == LOOM_ECONN || rc == LOOM_ETIMEDOUT ? rc : LOOM_EIO;
  } else {
    ff->size = loom__rfile_size(f);
    rc = ops->probe(f, &in->fmt, ff, err, errlen);
  }
  uint64_t *cuts = NULL;
  size_t ncuts = 0;
  if (rc == 0 && ff->data_end - ff->data_off > split_bytes)
    rc = ops->cut(f, ff, split_bytes, &cuts, &ncuts, err, errlen);
  if (rc == 0 && ff->data_end > ff->data_off) {
    uint64_t at = ff->data_off;
    for (size_t c = 0; c <= ncuts && rc == 0; c++) {
      uint64_t next = c < ncuts ? cuts[c] : ff->data_end;
      if (next <= at || next > ff->data_end) {
        snprintf(err, errlen, "%s: internal error: bad cut at %llu", ff->path,
                 (unsigned long long)next);
        rc = LOOM_EIO;
        break;
      }
      rc = add_split(in, (uint32_t)(in->nfiles - 1), at, next - at);
      if (rc == 0 && loom__fs_remote(ff->path)) {
        char hosts[FEED_SPLIT_HOSTS][64];
        int nh = loom__rfile_hosts(f, at, hosts, FEED_SPLIT_HOSTS);
        for (int h = 0; h < nh; h++) in->splits[in->nsplits - 1].host[h] = host_index(in, hosts[h]);
      }
      at = next;
    }
  }
  free(cuts);
  loom__rfile_close(f);
  if (rc == 0 && in->nsplits > UINT32_MAX / 2) rc = LOOM_ERANGE;
  if (rc < 0) { /* the file is not taken: in stays as it was */
    in->nsplits = splits0;
    in->nfiles--;
    free(path);
    return rc;
  }
  in->bytes += ff->data_end - ff->data_off;
  return 0;
}

/* Adds the files of paths[0..n) (sorted, owned) that in does not have yet,
 * in order; *added counts them. */
static int add_files(feed_input *in, char **paths, size_t n, uint64_t split_bytes, size_t *added,
                     char *err, size_t errlen) {
  int rc = 0;
  size_t had = in->nfiles;
  for (size_t i = 0; i < n; i++) {
    /* paths are distinct: only the files from before are looked up (the
     * ones added in this loop sit unsorted after them) */
    if (rc < 0 || known(in, had, paths[i])) {
      free(paths[i]);
      continue;
    }
    rc = add_file(in, paths[i], split_bytes, err, errlen);
  }
  free(paths);
  *added = in->nfiles - had;
  if (*added) qsort(in->sorted, in->nfiles, sizeof *in->sorted, cmp_str);
  return rc;
}

int loom__feed_input_make(const char *const *globs, size_t nglobs, const feed_format *fmt,
                          bool growing, uint64_t split_bytes, feed_input **out, char *err,
                          size_t errlen) {
  *out = NULL;
  err[0] = 0;
  if (!loom__feed_format_ops(fmt) || !split_bytes) return LOOM_EINVAL;
  char **paths = NULL;
  size_t npaths = 0, added = 0;
  int rc = expand(globs, nglobs, !growing, &paths, &npaths, err, errlen);
  if (rc < 0) return rc;
  feed_input *in = calloc(1, sizeof *in);
  if (!in) {
    for (size_t i = 0; i < npaths; i++) free(paths[i]);
    free(paths);
    snprintf(err, errlen, "out of memory for %zu input files", npaths);
    return LOOM_ENOMEM;
  }
  in->fmt = *fmt;
  rc = add_files(in, paths, npaths, split_bytes, &added, err, errlen);
  if (rc == 0 && in->nsplits == 0 && !growing) {
    snprintf(err, errlen, "feed.input matches only empty files (%zu of them): nothing to read",
             in->nfiles);
    rc = LOOM_ESPEC;
  }
  if (rc < 0) {
    if (!err[0]) snprintf(err, errlen, "cannot make the feed's splits: %s", loom_strerror(rc));
    loom__feed_input_free(in);
    return rc;
  }
  *out = in;
  return 0;
}

int loom__feed_input_grow(feed_input *in, const char *const *globs, size_t nglobs,
                          uint64_t split_bytes, size_t *added, char *err, size_t errlen) {
  *added = 0;
  err[0] = 0;
  char **paths = NULL;
  size_t npaths = 0;
  int rc = expand(globs, nglobs, false, &paths, &npaths, err, errlen);
  if (rc < 0) return rc;
  return add_files(in, paths, npaths, split_bytes, added, err, errlen);
}
