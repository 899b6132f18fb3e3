/* pth.h: PyTorch checkpoint files (torch.save's zip format, torch >= 1.6), read without running
 * anything from them: libzip for the archive, the restricted unpickler of pickle.h for data.pkl.
 * One state dict of the file (a training checkpoint's model or model_ema, or the file itself when
 * it is a state dict) comes back as a VilSafetensors, with what the checkpoint says of itself.
 * The writer (pth_write.c) makes the files `vil convert` writes: {'model': OrderedDict of
 * tensors, 'vil_metadata': dict of str}, which torch.load(..., weights_only=True) reads. */
#ifndef VIL_PTH_H
#define VIL_PTH_H

#include <stddef.h>

#include "formats/safetensors.h"

/* the largest archive entry read (a storage or data.pkl) */
#define VIL_PTH_MAX_ENTRY ((size_t)16 << 30)
/* the top-level key of vil's metadata in a .pth: a dict of str -> str, the same keys and values
 * as a vil safetensors checkpoint's __metadata__ (doc/formats.md) */
#define VIL_PTH_META_KEY "vil_metadata"

typedef struct {
    char weights[16];  /* the dict the tensors came from: "model", "model_ema", "state_dict", or
                        * "" when the file is itself a state dict */
    int has_ema;       /* the file holds a model_ema state dict */
    char keys[256];    /* the top-level keys, comma-separated (for messages and `vil info`) */
    long epoch;        /* -1: the file does not say */
    int img_size;      /* args.input_size; 0: no args */
    float crop_pct;    /* args.eval_crop_ratio (ViM's evaluation crop); 0: not said */
    char model[128];   /* args.model, "" without; cut to fit */
    char data_set[32]; /* args.data_set, "" without */
} VilPthInfo;

/* 1 when head (the first n >= 4 bytes of a file) starts a zip archive, as every torch.save file
 * since torch 1.6 does; 2 for the legacy (pre-1.6) torch.save format, which is not read. */
int vil_pth_sniff(const unsigned char *head, size_t n);

/* Read the file's state dict: with ema, model_ema (an error when there is none); without, model,
 * else state_dict, else the top-level dict when it holds tensors only. Tensors keep their dtype
 * (F32, F16, BF16, F64, I64, I32, BOOL) and come out contiguous; a "module." prefix on every
 * name (a DataParallel model's) is dropped. 0, or -1 with a vil_error message naming the file
 * and what is wrong (the opcode, global, entry or tensor); *st is then empty. */
int vil_pth_read(const char *path, int ema, VilSafetensors *st, VilPthInfo *info);
/* The same, reading only data.pkl and checking every tensor's view, storage entry (its size
 * against what the storage declares and what its compressed bytes can hold) and the total:
 * st holds the names, dtypes and shapes, no data, until vil_st_load reads the storages of the
 * tensors the caller wants (and only the spans of them those views reach). */
int vil_pth_open(const char *path, int ema, VilSafetensors *st, VilPthInfo *info);
/* The same as vil_pth_read from bytes in memory (the tests and the fuzzer); messages carry no file name. */
int vil_pth_parse(const unsigned char *buf, size_t n, int ema, VilSafetensors *st,
                  VilPthInfo *info);

/* The bytes of torch.save({'model': OrderedDict(name -> tensor), 'vil_metadata': {key: value}})
 * in torch's zip format: t[0..n) in that order (name, dtype, ndim, shape and data, contiguous
 * little-endian; offset and nbytes are not read), each over a storage of its own (entries
 * archive/data/0, 1, ...), stored and 64-byte aligned, plus archive/byteorder ("little") and
 * archive/version ("3"); the n_meta metadata pairs (none: no 'vil_metadata' entry). Names and
 * strings must be UTF-8 and unique, dtypes ones a storage type has (F32, F16, BF16, F64, I64,
 * I32, BOOL). *out is malloc'd (the caller frees). 0, VIL_EUSAGE for a misuse, or -1
 * (vil_error). */
int vil_pth_serialize(const VilStTensor *t, int n, char *const *keys, char *const *vals,
                      int n_meta, unsigned char **out, size_t *size);
/* The same written to path through vil_write_file_atomic. */
int vil_pth_write(const char *path, const VilStTensor *t, int n, char *const *keys,
                  char *const *vals, int n_meta);

#endif
