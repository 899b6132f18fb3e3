/* shards.h: WebDataset-style tar shards as a dataset. A sample is the tar members sharing a key
 * (KEY.jpg or another image vil decodes, and KEY.cls holding the class index as text or KEY.json
 * holding {"label": N} / {"cls": N}); each shard is indexed once at open (libarchive reads the
 * headers) and a sample's image is then read by pread at its offset, so the loader reads shards
 * as it reads folders: any sample, in any order, from any thread. */
#ifndef VIL_SHARDS_H
#define VIL_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest member vil indexes: far above any image a model trains on (a 64-megapixel JPEG
 * at quality 100 is ~40 MB), so a header that claims more is refused before anything is read. */
#define VIL_SHARD_MAX_MEMBER (256LL << 20)
/* The most shards one dataset may name (a pattern's ranges are checked before they are
 * expanded; the expansion holds the pattern once and the names it gives). */
#define VIL_SHARD_MAX_FILES (1 << 20)
/* The largest .cls / .json label member. */
#define VIL_SHARD_MAX_LABEL_BYTES (64 << 10)

typedef struct VilShardSet VilShardSet; /* the shard files of a dataset (paths, descriptors) */

/* Where a sample's image lies. */
typedef struct {
    int shard;       /* index in the set */
    int64_t off;     /* its data's offset in the shard */
    int64_t size;    /* bytes */
} VilShardMember;

/* Called once per sample, in shard order then tar order: the image member's name, the label
 * and where the image lies. */
typedef void (*VilShardSampleFn)(void *ctx, const char *member, int label, const VilShardMember *m);

/* 1 when `path` (with `split`) names shards: a folder whose `split` subfolder (or, with split
 * NULL, itself) holds .tar files and no subfolders; or a path ending in .tar (.tar.gz, .tgz)
 * that may hold a brace range {0000..0146} or glob characters. */
int vil_shards_detect(const char *path, const char *split);

/* Find and index the shards `path` names for `split`:
 *   - a folder: path/split/ *.tar (with split NULL: path/ *.tar), in name order;
 *   - a pattern: the files it names, in its order ({A..B} ranges expanded, A and B's width kept
 *     when they have the same number of digits; * ? [] globbed); for split "val" or "test" a
 *     pattern whose text holds "train" names the split's shards by replacing "train" with the
 *     split (in the file name, and a folder named train) and each range by any digits of its
 *     width (the val range usually differs): 'in/train/in-train-{0000..0146}.tar' gives
 *     'in/val/in-val-[0-9][0-9][0-9][0-9].tar'. A pattern without "train" is used as given.
 * A file classes.txt (one class id per line, line k = class k: what tools/folder_to_shards
 * writes) in the shards' folder or the one above gives the class count and ids; without it the
 * count is the largest label + 1 and the ids are the indices. Tars concatenated into one file
 * are read whole (zero blocks between members skipped, as GNU tar -i does). Every problem is an
 * error naming the shard: a compressed shard, a truncated or corrupt tar, bytes other than zeros
 * after the last member, a member over VIL_SHARD_MAX_MEMBER, an absolute or ".." name, a link or
 * special member, a sample without an image or a label, a sample with two images, two .cls or
 * two .json members, a .json that is not exactly one JSON object, a .cls and a .json label that
 * disagree (with both, the .cls gives the label), a label that is no integer or out of range, a
 * key used twice; a range bound over 2^64 - 1, a pattern naming more than VIL_SHARD_MAX_FILES
 * shards. fn is called per sample;
 * *num_classes and *class_ids (NULL without classes.txt; num_classes malloc'd strings) are set.
 * Returns the set, or NULL (vil_error). */
VilShardSet *vil_shards_open(const char *path, const char *split, VilShardSampleFn fn, void *ctx,
                             int *num_classes, char ***class_ids);
/* Another holder of the set (a subset of the dataset); each holder calls vil_shard_set_free. */
VilShardSet *vil_shard_set_ref(VilShardSet *s);
void vil_shard_set_free(VilShardSet *s);
int vil_shard_set_count(const VilShardSet *s);
const char *vil_shard_set_path(const VilShardSet *s, int shard);
/* The folder or pattern the set came from, for messages. */
const char *vil_shard_set_source(const VilShardSet *s);

/* A member's bytes into *data (grown with realloc to *cap, one byte more: a NUL after it);
 * *size = its bytes. Thread-safe. 0, or -1 (vil_error with the reason, not the path: the
 * caller names shard and member). */
int vil_shard_read(const VilShardSet *s, const VilShardMember *m, unsigned char **data,
                   size_t *cap, size_t *size);

#ifdef __cplusplus
}
#endif
#endif
