/* limits.h: the largest things vil takes, in one place (the README's "Limits" lists them).
 * Every size a file, a config or a command line declares is checked against these before it is
 * used or allocated, so a small hostile file cannot make vil divide by zero, overflow or ask for
 * terabytes; memory that a valid model needs is checked against what the device has free. */
#ifndef VIL_LIMITS_H
#define VIL_LIMITS_H

#define VIL_MAX_IMG_SIZE 8192      /* model input side (pixels) */
#define VIL_MAX_PATCH 1024         /* patch size and stride */
#define VIL_MAX_EMBED_DIM 16384    /* D */
#define VIL_MAX_DEPTH 1024         /* blocks */
#define VIL_MAX_STATE 64           /* N, the scan's state size */
#define VIL_MAX_EXPAND 16          /* E = expand * D */
#define VIL_MAX_CONV 8             /* the depthwise conv's width */
#define VIL_MAX_CLASSES 1000000
#define VIL_MAX_TOKENS (1 << 20)   /* L = patches + 1 */
#define VIL_MAX_PARAMS (1LL << 32) /* parameter elements (16 GiB of float32) */
#define VIL_MAX_BATCH 65536
#define VIL_MAX_STREAM 65536       /* images of a stream (stream_len, stream_chunk, eval's --stream-len) */
#define VIL_MAX_CONFIG_LINE 65536  /* bytes of one cfg-file line */
#define VIL_MAX_THREADS 4096       /* CPU compute threads (--threads) */
#define VIL_MIN_CROP_PCT 1e-3      /* crop_pct, --crop-pct: resize to size / crop_pct */
/* and elsewhere: decoded images VIL_IMAGE_MAX_PIXELS (data/image.h), a safetensors header
 * VIL_ST_MAX_HEADER and its JSON's structure VIL_ST_MAX_JSON_TOKENS (formats/safetensors.h), a .pth
 * entry VIL_PTH_MAX_ENTRY (formats/pth.h), a pickle VIL_PK_MAX_* (formats/pickle.h) */

#endif
