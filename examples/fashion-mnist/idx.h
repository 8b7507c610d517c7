/* idx.h: reads the gzipped IDX files that MNIST and Fashion-MNIST ship in
 * (http://yann.lecun.com/exdb/mnist/, "FILE FORMATS"), checking every
 * header field against what the caller expects. */
#ifndef IDX_H
#define IDX_H

#include <stddef.h>
#include <stdint.h>

/* One image file and its label file, both kept as bytes as they are on disk:
 * 60k Fashion-MNIST images are 47 MB as uint8 and four times that as float,
 * and every training process holds its own copy. */
typedef struct {
  int n;           /* number of examples */
  int rows, cols;  /* image size, 28 x 28 */
  uint8_t *images; /* (n, rows * cols), pixel values 0..255 */
  uint8_t *labels; /* (n), class 0..num_classes-1 */
} IdxDataset;

/* Loads images_path (IDX magic 0x00000803: n x rows x cols bytes) and
 * labels_path (0x00000801: n bytes), gzipped or not. Checks the magic
 * numbers, that both files hold the same n, that the images are
 * rows x cols, that each file holds exactly the bytes its header promises
 * and that every label is below num_classes. On failure prints what is
 * wrong and in which file to stderr and returns -1, leaving *ds zeroed.
 * On success the caller owns ds's buffers (idx_free). */
int idx_load(IdxDataset *ds, const char *images_path, const char *labels_path, int rows, int cols,
             int num_classes);
void idx_free(IdxDataset *ds);

#endif
