/* fuzz_decode.c: libFuzzer harness for everything that reads untrusted image bytes: the
 * whole-image decoders (JPEG via libjpeg-turbo, the rest via stb_image), the cropped /
 * DCT-scaled JPEG path of the training transform, and the evaluation transform from bytes.
 * Built and run by tests/fuzz.mk (`make fuzz`). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "data/transform.h"
#include "vil/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* every message captured: the fuzzer stays quiet, and a failure must add one (say why) */
    VilErrCapture cap;
    vil_error_capture(&cap);
    int said = 0;
    VilImage im;
    /* whole decode, both channel counts; a decoded image also goes through the eval
     * transform, so odd sizes (1 x N, huge aspect) reach the resampler */
    for (int c = 1; c <= 3; c += 2) {
        said = cap.count;
        if (vil_image_decode(data, size, c, &im) == 0) {
            if (im.w <= 0 || im.h <= 0 || im.c != c || !im.px) abort(); /* contract broken */
            if (c == 3) {
                float out[3 * 24 * 24];
                if (vil_transform_eval(&im, 24, 0.875f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, out) != 0) abort();
            }
            vil_image_free(&im);
        } else if (cap.count == said) {
            abort(); /* a failure must say why */
        }
    }
    /* the training path from bytes: region + DCT-scaled decoding, then the full transform,
     * with crops drawn from an rng seeded by the input so different crops get explored */
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < size && i < 64; i++) h = (h ^ data[i]) * 1099511628211ULL;
    VilRng rng;
    vil_rng_seed(&rng, h ^ size);
    VilTrainTransform t;
    vil_train_transform_default(&t, 16, 3);
    float out[3 * 16 * 16];
    for (int k = 0; k < 4; k++) {
        t.res = k % 2 == 0 ? 16 : 4; /* 4: tiny output, so large crops take the DCT-scaled path */
        t.decode = k < 2 ? VIL_DECODE_EXACT : VIL_DECODE_FAST; /* fast: merged upsampling, no margin */
        said = cap.count;
        if (vil_transform_train_file(data, size, &t, &rng, out) != 0 && cap.count == said) abort();
    }
    /* three samples from one decode per DCT scale (repeated augmentation's path) */
    static float outs3[3][3 * 16 * 16];
    float *o3[3] = {outs3[0], outs3[1], outs3[2]};
    VilRng r3[3];
    for (int i = 0; i < 3; i++) vil_rng_seed(&r3[i], (h ^ size) + (uint64_t)i);
    t.res = 4;
    t.decode = VIL_DECODE_EXACT;
    said = cap.count;
    if (vil_transform_train_file_group(data, size, &t, 3, r3, o3, NULL) != 0 && cap.count == said)
        abort();
    vil_error_release(&cap);
    return 0;
}
