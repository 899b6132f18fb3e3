/* fuzz_pickle.c: libFuzzer harness for the restricted unpickler on its own (a zip archive's CRC
 * keeps most mutations of fuzz_pth from reaching it): any bytes as data.pkl. A loaded tree is
 * walked as the checkpoint reader walks it (dict lookups, tensors and their storages); a
 * failure must say why. Built by tests/fuzz.mk. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "vil/common.h"
#include "formats/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* captured: the fuzzer stays quiet, and the text shows that a failure said why */
    VilErrCapture cap;
    vil_error_capture(&cap);
    VilPickle *pk = vil_pickle_load(data, size);
    vil_error_release(&cap);
    if (!pk) {
        if (cap.msg[0] == 0) abort();
        return 0;
    }
    const VilPkObj *root = vil_pickle_root(pk);
    if (!root) abort();
    const char *keys[] = {"model", "model_ema", "args", "epoch"};
    for (int k = 0; k < 4; k++) {
        const VilPkObj *d = vil_pk_get(root, keys[k]);
        for (int i = 0; d && d->kind == VIL_PK_DICT && i + 1 < d->n; i += 2) {
            const VilPkObj *v = d->items[i + 1];
            if (v->kind == VIL_PK_TENSOR) {
                const VilPkTensor *t = v->tensor;
                if (!t || !t->storage || t->storage->kind != VIL_PK_STORAGE || t->ndim > VIL_PK_MAX_DIMS) abort();
                /* the view lies inside its storage */
                int64_t last = t->offset;
                for (int j = 0; j < t->ndim && t->numel > 0; j++) last += (t->size[j] - 1) * t->stride[j];
                if (t->numel > 0 && last >= t->storage->i) abort();
            }
            (void)vil_pk_kind_name(v);
        }
    }
    vil_pickle_free(pk);
    return 0;
}
