/* fuzz_pth.c: libFuzzer harness for the PyTorch checkpoint reader: untrusted bytes as a
 * torch.save zip archive (libzip, then data.pkl through the restricted unpickler, then the
 * storages of the state dict), both with the model and with model_ema asked for. A success must
 * give tensors whose bytes match their shapes; a failure must say why. Built by tests/fuzz.mk. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "vil/common.h"
#include "formats/pth.h"
#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int ema = 0; ema < 2; ema++) {
        VilSafetensors st;
        VilPthInfo info;
        /* captured: the fuzzer stays quiet, and the text shows that a failure said why */
        VilErrCapture cap;
        vil_error_capture(&cap);
        int rc = vil_pth_parse(data, size, ema, &st, &info);
        vil_error_release(&cap);
        if (rc == 0) {
            for (int i = 0; i < st.n_tensors; i++) {
                const VilStTensor *t = &st.tensors[i];
                int64_t n = 1;
                for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
                if ((size_t)n * vil_st_dtype_size(t->dtype) != t->nbytes || !vil_st_find(&st, t->name))
                    abort(); /* contract broken */
                volatile unsigned char sink = t->nbytes ? ((const unsigned char *)t->data)[t->nbytes - 1] : 0;
                (void)sink;
            }
            vil_st_free(&st);
        } else if (cap.msg[0] == 0) {
            abort(); /* a failure must say why */
        }
    }
    return 0;
}
