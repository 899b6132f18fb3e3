/* stream.h: the loader's streams of images (VilStreamSpec in loader.h; data/stream.c), which
 * vil_loader_create makes when the config asks for streams and the loader's functions hand on
 * to. Internal to data/: callers use loader.h. */
#ifndef VIL_DATA_STREAM_H
#define VIL_DATA_STREAM_H

#include "data/loader.h"

typedef struct VilStreamSource VilStreamSource;

/* NULL (reported) on a configuration streams cannot have, or without memory */
VilStreamSource *vil_stream_open(const VilDataset *ds, const VilLoaderConfig *c);
void vil_stream_free(VilStreamSource *s);
int vil_stream_start_epoch(VilStreamSource *s, int epoch);
int vil_stream_batches_per_epoch(const VilStreamSource *s);
/* the images this rank reads per epoch */
int vil_stream_epoch_length(const VilStreamSource *s);
const VilBatch *vil_stream_next_batch(VilStreamSource *s);
void vil_stream_release_batch(VilStreamSource *s, const VilBatch *b);
const char *vil_stream_error(const VilStreamSource *s);
void vil_stream_stats(const VilStreamSource *s, VilLoaderStats *out);

#endif
