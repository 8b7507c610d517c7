/* idx.c: the IDX reader behind idx.h. zlib's gzread reads plain files as
 * they are, so the same code takes the .gz files the dataset package ships
 * and uncompressed copies. */
#include "idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define IDX_MAGIC_LABELS 0x00000801u /* unsigned byte, 1 dimension */
#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned byte, 3 dimensions */
/* Far above any real dataset; stops a corrupt header from asking for
 * gigabytes. */
#define IDX_MAX_BYTES ((size_t)1 << 31)

/* Reads exactly len bytes. Returns 0, or -1 after printing why. */
static int read_exact(gzFile f, const char *path, void *buf, size_t len, const char *what) {
  size_t done = 0;
  while (done < len) {
    unsigned chunk = (len - done) > (1u << 30) ? (1u << 30) : (unsigned)(len - done);
    int got = gzread(f, (char *)buf + done, chunk);
    if (got < 0) {
      int zerr;
      const char *msg = gzerror(f, &zerr);
      fprintf(stderr, "%s: cannot read %s: %s\n", path, what,
              zerr == Z_ERRNO ? strerror(errno) : msg);
      return -1;
    }
    if (got == 0) {
      fprintf(stderr,
              "%s: file is truncated: %s needs %zu bytes, only %zu present "
              "(re-install the dataset or check --data)\n",
              path, what, len, done);
      return -1;
    }
    done += (size_t)got;
  }
  return 0;
}

static uint32_t be32(const uint8_t b[4]) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Opens path, checks its magic and reads ndims big-endian dimensions into
 * dims. On success *out is the open file, positioned at the data. */
static int open_idx(const char *path, uint32_t magic, int ndims, uint32_t *dims, gzFile *out) {
  uint8_t hdr[4 * 4];
  errno = 0;
  gzFile f = gzopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "%s: cannot open: %s (is the dataset installed? see --data)\n", path,
            errno ? strerror(errno) : "out of memory");
    return -1;
  }
  if (read_exact(f, path, hdr, 4 + 4 * (size_t)ndims, "the IDX header") != 0) goto fail;
  if (be32(hdr) != magic) {
    fprintf(stderr, "%s: not an IDX %s file: magic number is 0x%08x, expected 0x%08x\n", path,
            ndims == 1 ? "label" : "image", be32(hdr), magic);
    goto fail;
  }
  for (int i = 0; i < ndims; i++) dims[i] = be32(hdr + 4 + 4 * i);
  *out = f;
  return 0;
fail:
  gzclose(f);
  return -1;
}

/* Checks that nothing follows the data the header described. */
static int expect_eof(gzFile f, const char *path) {
  char extra;
  int got = gzread(f, &extra, 1);
  if (got != 0) {
    fprintf(stderr, "%s: %s after the data the header describes\n", path,
            got > 0 ? "unexpected bytes" : "read error");
    return -1;
  }
  return 0;
}

int idx_load(IdxDataset *ds, const char *images_path, const char *labels_path, int rows, int cols,
             int num_classes) {
  gzFile fi = NULL, fl = NULL;
  uint32_t idims[3], ldims[1];
  memset(ds, 0, sizeof(*ds));

  if (open_idx(images_path, IDX_MAGIC_IMAGES, 3, idims, &fi) != 0) goto fail;
  if (open_idx(labels_path, IDX_MAGIC_LABELS, 1, ldims, &fl) != 0) goto fail;
  if (idims[1] != (uint32_t)rows || idims[2] != (uint32_t)cols) {
    fprintf(stderr, "%s: images are %ux%u, expected %dx%d\n", images_path, idims[1], idims[2], rows,
            cols);
    goto fail;
  }
  if (idims[0] == 0 || (size_t)idims[0] * rows * cols > IDX_MAX_BYTES) {
    fprintf(stderr, "%s: implausible image count %u in the header\n", images_path, idims[0]);
    goto fail;
  }
  if (ldims[0] != idims[0]) {
    fprintf(stderr, "%s: holds %u labels but %s holds %u images\n", labels_path, ldims[0],
            images_path, idims[0]);
    goto fail;
  }
  ds->n = (int)idims[0];
  ds->rows = rows;
  ds->cols = cols;
  ds->images = malloc((size_t)ds->n * rows * cols);
  ds->labels = malloc((size_t)ds->n);
  if (ds->images == NULL || ds->labels == NULL) {
    fprintf(stderr, "%s: out of memory for %d images\n", images_path, ds->n);
    goto fail;
  }
  if (read_exact(fi, images_path, ds->images, (size_t)ds->n * rows * cols, "the pixels") != 0 ||
      expect_eof(fi, images_path) != 0)
    goto fail;
  if (read_exact(fl, labels_path, ds->labels, (size_t)ds->n, "the labels") != 0 ||
      expect_eof(fl, labels_path) != 0)
    goto fail;
  for (int i = 0; i < ds->n; i++) {
    if (ds->labels[i] >= num_classes) {
      fprintf(stderr, "%s: label %d of example %d is not below %d\n", labels_path, ds->labels[i], i,
              num_classes);
      goto fail;
    }
  }
  gzclose(fi);
  gzclose(fl);
  return 0;
fail:
  if (fi != NULL) gzclose(fi);
  if (fl != NULL) gzclose(fl);
  idx_free(ds);
  return -1;
}

void idx_free(IdxDataset *ds) {
  free(ds->images);
  free(ds->labels);
  memset(ds, 0, sizeof(*ds));
}
