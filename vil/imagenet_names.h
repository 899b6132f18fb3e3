/* imagenet_names.h: ImageNet-1k's class names in class-index order (sorted wnids), built into
 * the library from data/imagenet_classes.tsv (the Makefile generates the table), so that the
 * published ImageNet checkpoints classify with readable names without a names file. */
#ifndef VIL_IMAGENET_NAMES_H
#define VIL_IMAGENET_NAMES_H

extern const char *const vil_imagenet_class_names[1000];

#endif
