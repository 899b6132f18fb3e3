/* pickle_write.h: a pickle writer for what a checkpoint vil writes holds, in protocol 2 as
 * torch.save writes it: str, int, dict, OrderedDict, tuple and tensors (a persistent-id storage
 * tuple rebuilt by torch._utils._rebuild_tensor_v2). Opcodes are chosen as Python's own pickler
 * chooses them without a memo (its `fast` mode), so the bytes of plain values equal
 * pickle.Pickler(f, 2) with fast = True. No float: torch 1.13's torch.load(weights_only=True)
 * refuses BINFLOAT, so a file vil writes holds none (pickle.c, the reader, is apart). */
#ifndef VIL_PICKLE_WRITE_H
#define VIL_PICKLE_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "formats/pickle.h"

typedef struct VilPkWriter VilPkWriter;

/* A writer that has emitted PROTO 2. Every call below appends one value to the container being
 * built (or makes the root, once); a misuse (an unfinished container, a count that does not
 * match, a string that is not UTF-8 or longer than VIL_PK_MAX_BYTES, a second root) is
 * remembered and reported by vil_pkw_finish. */
VilPkWriter *vil_pkw_new(void);
void vil_pkw_free(VilPkWriter *w);

void vil_pkw_str(VilPkWriter *w, const char *s); /* UTF-8, NUL-terminated */
void vil_pkw_int(VilPkWriter *w, int64_t v);
/* A dict (ordered: collections.OrderedDict()) or tuple of n entries: the next 2n values (key,
 * value, key, ...) or n values, then the matching end. Containers nest up to VIL_PK_MAX_MARKS. */
void vil_pkw_dict_begin(VilPkWriter *w, int ordered, long n);
void vil_pkw_dict_end(VilPkWriter *w);
void vil_pkw_tuple_begin(VilPkWriter *w, long n);
void vil_pkw_tuple_end(VilPkWriter *w);
/* A contiguous tensor of shape (ndim dims) over the whole of storage key (its numel elements of
 * dtype, on 'cpu'), as torch.save writes one:
 * _rebuild_tensor_v2(('storage', torch.XStorage, key, 'cpu', numel), 0, shape, strides, False,
 * OrderedDict()). key: 1-64 characters of [A-Za-z0-9_] (the archive entry's name). */
void vil_pkw_tensor(VilPkWriter *w, VilPkDtype dtype, const char *key, int ndim,
                    const int64_t *shape);

/* STOP, and the bytes (malloc'd, the caller frees) in *out. 0, or -1 with a vil_error naming
 * the first misuse (nothing in *out). The writer stays the caller's to free. */
int vil_pkw_finish(VilPkWriter *w, unsigned char **out, size_t *n);

#endif
