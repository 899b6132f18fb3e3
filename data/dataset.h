/* dataset.h: the list of samples a run trains or evaluates on, and how to read one. Four
 * layouts are recognised from the --data path: ImageNet-style class folders, WebDataset-style
 * tar shards, a flat folder plus a labels file, and IDX files (MNIST / Fashion-MNIST, plain or
 * gzip). */
#ifndef VIL_DATASET_H
#define VIL_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "data/image.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    VIL_DATA_FOLDER = 1, /* ROOT/<split>/<class>/<file>: class index = sorted folder name */
    VIL_DATA_FLAT,       /* DIR/<file> + a labels file of "filename label" lines */
    VIL_DATA_IDX,        /* <prefix>-images-idx3-ubyte[.gz] + <prefix>-labels-idx1-ubyte[.gz] */
    VIL_DATA_SHARDS,     /* ROOT/<split>/ *.tar or a pattern: KEY.jpg + KEY.cls per sample (shards.h) */
} VilDataKind;

typedef struct VilDataset VilDataset;

/* The most data bytes an IDX images or labels file may hold (its header is checked against it
 * before anything is read): IDX sets are held in memory whole; MNIST's is 47 MB. */
#define VIL_IDX_MAX_BYTES (1LL << 31)

/* A growable byte buffer, reused across reads so a worker does not malloc per image. */
typedef struct {
    unsigned char *data;
    size_t size, cap;
} VilBuffer;
void vil_buffer_free(VilBuffer *b);

/* Open a dataset. `path` is one of:
 *   - an ImageNet root: split "train" reads path/train/<class>/<file>, "val" path/val/...;
 *     with split NULL, path itself holds the class folders;
 *   - tar shards: path/<split>/ *.tar (as a root holds class folders; split NULL: path/ *.tar), or
 *     a pattern 'dir/train-{0000..0146}.tar' (vil_shards_open says how "val" finds its shards);
 *     the sample's path (vil_dataset_path) is "SHARD:MEMBER";
 *   - a folder holding IDX files: split "train" (or NULL) reads train-images-idx3-ubyte[.gz],
 *     "val" or "test" reads t10k-images-idx3-ubyte[.gz]; or an idx3 file itself;
 *   - with labels_file set: a flat folder (path/<split> when that folder exists, else path)
 *     whose files the labels file names, one "filename label" per line.
 * Every problem a run would otherwise meet later (missing folder, no class folders, no images,
 * a labels file naming missing files or holding bad labels, a truncated IDX file, an IDX header
 * claiming more than VIL_IDX_MAX_BYTES or images over the --max-pixels limit, a labels or IDX
 * file that is a FIFO) is an error here, with a message saying what was expected. Returns NULL
 * (vil_error). */
VilDataset *vil_dataset_open(const char *path, const char *split, const char *labels_file);
void vil_dataset_free(VilDataset *ds);

VilDataKind vil_dataset_kind(const VilDataset *ds);
int vil_dataset_size(const VilDataset *ds);
int vil_dataset_num_classes(const VilDataset *ds);
/* Channels the samples naturally have: 1 for IDX, 3 for image files (decoded as RGB). */
int vil_dataset_channels(const VilDataset *ds);
/* The folder the samples were found in (or the IDX images file), for messages. */
const char *vil_dataset_source(const VilDataset *ds);
int vil_dataset_label(const VilDataset *ds, int i);
/* Class c's identifier (folder name / wnid, or the decimal index) and its readable name
 * (from a names file or built in; the identifier when none is known). */
const char *vil_dataset_class_id(const VilDataset *ds, int c);
const char *vil_dataset_class_name(const VilDataset *ds, int c);
/* The samples of class c, in dataset order: *members points at (*count) indices. */
void vil_dataset_class_members(const VilDataset *ds, int c, const int **members, int *count);

/* Path of sample i written into buf (for IDX: "FILE#i", for shards "SHARD:MEMBER"). Returns the
 * length it needed. */
size_t vil_dataset_path(const VilDataset *ds, int i, char *buf, size_t len);

/* Encoded bytes of a file sample into buf (resized as needed). A missing, unreadable,
 * non-regular or zero-byte file is an error: -1 with a vil_error message that gives the reason
 * but not the path (the loader captures it and names the file). IDX samples have no encoded
 * form: -1. */
int vil_dataset_read_bytes(const VilDataset *ds, int i, VilBuffer *buf);
/* IDX only: a view of sample i's pixels inside the dataset (not a copy; do not free).
 * Returns -1 for file layouts. */
int vil_dataset_raw_image(const VilDataset *ds, int i, VilImage *view);
/* Sample i decoded to `channels` (1 or 3) channels, whatever the layout. scratch is a reusable
 * byte buffer (may be NULL). Free out with vil_image_free. 0, or -1 (vil_error). */
int vil_dataset_read_image(const VilDataset *ds, int i, int channels, VilImage *out,
                           VilBuffer *scratch);

/* A new dataset of samples idx[0..n-1] of ds (copied: ds may be freed), in that order. */
VilDataset *vil_dataset_subset(const VilDataset *ds, const int *idx, int n);
/* n samples of ds spread over its classes (`--limit N` of eval, compare and states): taken round
 * robin over the classes in class order, each class's samples in dataset order, a class that
 * runs out dropping from the round; so N = k x (classes) takes the first k of each class that has
 * them, and N < classes one of each of the first N classes with samples. idx (room for n) gets
 * the min(n, size) indices in dataset order; returns their count. Deterministic. */
int vil_dataset_spread(const VilDataset *ds, int n, int *idx);
/* Hold out n samples of *train, chosen by a fixed permutation of `seed` (the same set on every
 * machine and for every training seed): *train becomes the other samples, *val the held-out
 * ones, both in dataset order; the old *train is freed. 0, or -1 (vil_error) when n is not
 * in [1, size). */
int vil_dataset_holdout(VilDataset **train, VilDataset **val, int n, uint64_t seed);

/* 1 for the split names a command line may give: train, val, test */
int vil_dataset_split_ok(const char *split);

/* ---- class names (names.c) ---- */
/* Read class names from a file and attach them. Accepted forms, one class per line, '#'
 * comments: "index<TAB>wnid<TAB>names" (ImageNet's imagenet_classes.tsv: matched to folder
 * names by wnid when the dataset's classes are folders, else by index), "index<TAB>name",
 * or a bare name per line (in class order). A file with more classes than the dataset
 * raises num_classes to match (a validation split may lack some classes). 0 or -1 (vil_error). */
int vil_dataset_load_names(VilDataset *ds, const char *path);
/* The n names of a model's classes from a names file of the same forms (by index, or by line
 * order without one): every class 0..n-1 named exactly once. *names: n malloc'd strings in a
 * malloc'd array. 0, or -1 (vil_error). */
int vil_names_read(const char *path, int n, char ***names);
/* Set class c's readable name (copied). */
void vil_dataset_set_class_name(VilDataset *ds, int c, const char *name);
/* Raise the class count (never lowers it): a split may lack the last classes of the model. */
void vil_dataset_set_num_classes(VilDataset *ds, int num_classes);
/* Fashion-MNIST's ten class names, in label order. */
extern const char *const vil_fashion_mnist_names[10];

#ifdef __cplusplus
}
#endif
#endif
