/* pickle.h: a restricted reader for the pickles torch.save writes (protocol 2): it builds plain
 * values (None, bool, int, float, str, tuple, list, dict) and the few torch objects a checkpoint
 * holds (storages named by persistent id, tensors from _rebuild_tensor_v2, OrderedDict,
 * argparse.Namespace), and nothing else. Nothing in a file is ever imported or called: a global
 * outside that list, or an opcode outside the set torch.save emits, is an error that names it.
 * Every count, size and depth is bounded (VIL_PK_MAX_*), and no part of the reader or of the
 * tree's users recurses, so a cyclic or deeply nested pickle costs nothing. */
#ifndef VIL_PICKLE_H
#define VIL_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#define VIL_PK_MAX_BYTES (256u << 20) /* data.pkl of a ViM-Base training checkpoint: ~0.3 MB */
#define VIL_PK_MAX_OBJECTS (1 << 21)
#define VIL_PK_MAX_STACK (1 << 20)
#define VIL_PK_MAX_MARKS 256   /* nesting of containers being built */
#define VIL_PK_MAX_MEMO (1 << 21)
#define VIL_PK_MAX_DIMS 8
#define VIL_PK_MAX_GLOBAL 128  /* bytes of a module or a name in a GLOBAL */

typedef enum {
    VIL_PK_NONE,
    VIL_PK_BOOL,
    VIL_PK_INT,
    VIL_PK_FLOAT,
    VIL_PK_STR,
    VIL_PK_TUPLE,
    VIL_PK_LIST,
    VIL_PK_DICT,    /* plain dict, OrderedDict or argparse.Namespace (see cls) */
    VIL_PK_STORAGE, /* a persistent id ('storage', torch.XStorage, key, location, numel) */
    VIL_PK_TENSOR,  /* torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...) */
    VIL_PK_CLASS    /* one of the allowed globals, before it is applied */
} VilPkKind;

/* the allowed globals */
typedef enum {
    VIL_PK_CLS_PLAIN = 0, /* a dict that is just a dict */
    VIL_PK_CLS_ORDERED_DICT,
    VIL_PK_CLS_NAMESPACE,
    VIL_PK_CLS_REBUILD_TENSOR,
    VIL_PK_CLS_STORAGE /* torch.FloatStorage and its siblings; dtype says which */
} VilPkClass;

/* element types of storages (torch.XStorage); names as in safetensors */
typedef enum {
    VIL_PK_F32, VIL_PK_F16, VIL_PK_BF16, VIL_PK_F64, VIL_PK_I64, VIL_PK_I32, VIL_PK_BOOLT
} VilPkDtype;
size_t vil_pk_dtype_size(VilPkDtype d);
const char *vil_pk_dtype_name(VilPkDtype d); /* "F32", "F16", ... (the safetensors names) */

typedef struct VilPkObj VilPkObj;

typedef struct {
    const VilPkObj *storage; /* a VIL_PK_STORAGE */
    int64_t offset;          /* elements */
    int ndim;
    int64_t size[VIL_PK_MAX_DIMS], stride[VIL_PK_MAX_DIMS];
    int64_t numel;           /* product of size */
} VilPkTensor;

struct VilPkObj {
    VilPkKind kind;
    VilPkClass cls;   /* DICT: which kind of dict; CLASS: which global */
    VilPkDtype dtype; /* STORAGE, and CLASS of a storage type */
    int64_t i;        /* BOOL, INT; STORAGE: numel */
    double f;         /* FLOAT */
    char *s;          /* STR: UTF-8, NUL-terminated (len bytes before the NUL); STORAGE: key */
    size_t len;
    /* TUPLE, LIST: n items; DICT: n entries as items[2k] = key, items[2k + 1] = value */
    VilPkObj **items;
    int n, cap;
    VilPkTensor *tensor; /* TENSOR */
};

typedef struct VilPickle VilPickle;

/* Unpickle buf. Returns the tree (free with vil_pickle_free) or NULL with a vil_error message
 * that names the opcode or global and its byte offset. */
VilPickle *vil_pickle_load(const unsigned char *buf, size_t n);
const VilPkObj *vil_pickle_root(const VilPickle *p);
void vil_pickle_free(VilPickle *p);

/* A dict's value under the string key, or NULL (also when d is not a dict). */
const VilPkObj *vil_pk_get(const VilPkObj *d, const char *key);
/* "a dict", "an int", ... for messages */
const char *vil_pk_kind_name(const VilPkObj *o);

#endif
