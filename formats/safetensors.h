/* safetensors.h: read, validate and write safetensors files (8-byte little-endian header
 * length N, N bytes of JSON, then the byte buffer), the self-describing format vil uses for
 * checkpoints. Generic: knows dtypes, shapes and metadata, nothing about the model. */
#ifndef VIL_SAFETENSORS_H
#define VIL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VIL_ST_MAX_DIMS 8
/* The reference implementation refuses larger headers; so do we, which also bounds the
 * memory a hostile file can make the JSON parser allocate. */
#define VIL_ST_MAX_HEADER 100000000u
/* JSON structure ({ [ , : outside strings) a header may hold, counted before it is parsed: a
 * vil model of VIL_MAX_DEPTH blocks (~15,000 tensors, ~12 each) needs ~200,000; the cap keeps
 * cJSON's tree of a hostile header (1.7M empty tensors fit in 100 MB) near 100 MB. */
#define VIL_ST_MAX_JSON_TOKENS (1u << 21)

typedef enum {
    VIL_ST_BOOL,
    VIL_ST_U8,
    VIL_ST_I8,
    VIL_ST_F8_E5M2,
    VIL_ST_F8_E4M3,
    VIL_ST_I16,
    VIL_ST_U16,
    VIL_ST_F16,
    VIL_ST_BF16,
    VIL_ST_I32,
    VIL_ST_U32,
    VIL_ST_F32,
    VIL_ST_F64,
    VIL_ST_I64,
    VIL_ST_U64,
    VIL_ST_NUM_DTYPES
} VilStDtype;

size_t vil_st_dtype_size(VilStDtype dt);      /* bytes per element; 0 for an invalid value */
const char *vil_st_dtype_name(VilStDtype dt); /* "F32", ...; "?" for an invalid value */

typedef struct {
    char *name;
    VilStDtype dtype;
    int ndim; /* 0 for a scalar */
    int64_t shape[VIL_ST_MAX_DIMS];
    size_t nbytes; /* = product(shape) * dtype size */
    size_t offset; /* data_offsets[0], relative to buf (vil_st_open: to the file's data until
                    * vil_st_load, which lays the tensors read out anew) */
    /* Points into buf. buf is 64-byte aligned, so data is aligned for its dtype exactly when
     * offset is a multiple of the dtype size: always for files written by vil or by the Python
     * library. For any file, vil_st_to_f32 or memcpy are safe. */
    const void *data;
} VilStTensor;

typedef struct VilSafetensors VilSafetensors;

/* Where the data of a file opened without it lies (vil_st_open, vil_pth_open): load fills
 * st->tensors[i].data (already pointing into st->buf) for every i with want[i]; close
 * releases ctx. */
typedef struct {
    void *ctx;
    int (*load)(void *ctx, VilSafetensors *st, const unsigned char *want);
    void (*close)(void *ctx);
} VilStSource;

struct VilSafetensors {
    int n_tensors;
    VilStTensor *tensors; /* in header (JSON) order, which for vil files is the
                           * order the writer was given */
    int n_meta;
    char **meta_keys, **meta_vals; /* __metadata__, in header order */
    unsigned char *buf;            /* the byte buffer (the part after the header); owned */
    size_t buf_size;
    int *by_name; /* private: tensor indices sorted by name, for find */
    VilStSource src; /* private: the file, until vil_st_load (vil_st_open, vil_pth_open) */
};

/* Read and validate a whole file. Checks: the header length fits in the file and is at most
 * VIL_ST_MAX_HEADER; the header is UTF-8 JSON (an object) with only whitespace after it;
 * every tensor has a known dtype, at most VIL_ST_MAX_DIMS non-negative integer dims,
 * data_offsets [begin, end] with end - begin == product(shape) * dtype size; no duplicate
 * names; __metadata__ (optional) maps strings to strings; the tensors, taken by offset, cover
 * the buffer exactly (no overlap, no gap, no trailing bytes), as the reference reader
 * requires. Returns 0, or -1 with a vil_error message naming the file and the tensor. On
 * failure *st is left empty (safe to vil_st_free). */
int vil_st_read(const char *path, VilSafetensors *st);
/* The same checks, reading only the 8-byte length (against the file's size and
 * VIL_ST_MAX_HEADER), then the header: names, dtypes, shapes, metadata, and offsets checked
 * against the file's size. No tensor data is read: every data is NULL and buf empty until
 * vil_st_load, so a caller checks the shapes against what it expects first. */
int vil_st_open(const char *path, VilSafetensors *st);
/* Read the data of the tensors with want[i] (want NULL: all) of a file opened by vil_st_open or
 * vil_pth_open into one new buffer (each tensor 64-byte aligned); the others keep data NULL.
 * Once per open; a no-op (0) for a st that holds its data already. 0, or -1 with a vil_error
 * message naming the tensor. */
int vil_st_load(VilSafetensors *st, const unsigned char *want);
/* vil_st_load of every tensor, a failure said as "'path': reason" and *st freed (the second half
 * of vil_st_read and vil_pth_read). */
int vil_st_load_all(VilSafetensors *st, const char *path);
/* The same checks on bytes in memory. Copies what it keeps (the caller's buf stays the
 * caller's), so buf may be freed right after. Messages carry no file name. */
int vil_st_parse(const unsigned char *buf, size_t n, VilSafetensors *st);
/* Fill *st from tensors assembled in memory (a .pth file's state dict): buf (from
 * vil_malloc_aligned, buf_size bytes) becomes st's, even on failure; names are copied. Each
 * tensor's offset and nbytes (its shape's bytes) must lie in buf; a repeated name is an error.
 * The callers' shapes are already bounded, so numel cannot overflow here. buf NULL: descriptors
 * only (vil_pth_open), data NULL. 0 or -1 (vil_error). */
int vil_st_from_memory(VilSafetensors *st, unsigned char *buf, size_t buf_size,
                       const VilStTensor *t, int n);
const VilStTensor *vil_st_find(const VilSafetensors *st, const char *name); /* NULL if absent */
const char *vil_st_meta(const VilSafetensors *st, const char *key);         /* NULL if absent */
/* Reading a file's metadata: a copy of the pair (key, val) appended (meta_keys / meta_vals have
 * room); 0, or -1 (out of memory, reported). And *twice: a key that appears twice (one of the
 * stored strings), or NULL; 0, or -1 (out of memory, reported). */
int vil_st_meta_add(VilSafetensors *st, const char *key, const char *val);
int vil_st_meta_repeated(const VilSafetensors *st, const char **twice);
void vil_st_free(VilSafetensors *st);

int64_t vil_st_numel(const VilStTensor *t);
/* Convert a tensor's elements to float32 into dst (numel floats). F32, F16, BF16 and F64 are
 * supported; other dtypes return -1 with a vil_error message. Works at any alignment. */
int vil_st_to_f32(const VilStTensor *t, float *dst);

/* Writer: collect tensors (data pointers are borrowed until save) and metadata, then save
 * atomically (temporary file, fsync, rename). The header lists tensors in the order they were
 * added, padded with spaces to a multiple of 8 bytes as the Python library does. The data of
 * tensors whose dtypes have the same size is laid out in the order added; larger dtypes go
 * first (a stable sort on size), which keeps every tensor aligned for its dtype: torch's
 * loader refuses misaligned data. The Python writer instead sorts by dtype then name;
 * readers accept any order. Metadata keeps the order given; a repeated key replaces the
 * value. Misuse (a repeated tensor name, ndim out of range, a NULL name or data) is
 * reported by save. */
typedef struct VilStWriter VilStWriter;
VilStWriter *vil_st_writer_new(void);
void vil_st_writer_add(VilStWriter *w, const char *name, VilStDtype dtype, int ndim,
                       const int64_t *shape, const void *data);
void vil_st_writer_meta(VilStWriter *w, const char *key, const char *value);
/* Serialize to a malloc'd buffer (free with free()): what save writes. 0 or -1 (vil_error). */
int vil_st_writer_serialize(VilStWriter *w, unsigned char **out, size_t *out_size);
int vil_st_writer_save(VilStWriter *w, const char *path); /* 0, or -1 with a vil_error message */
void vil_st_writer_free(VilStWriter *w);

#ifdef __cplusplus
}
#endif
#endif
