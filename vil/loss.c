/* loss.c: softmax cross-entropy against soft targets (label smoothing and mixup produce
 * them). The minimized loss is the mean over denom samples (the batch, or the global batch of
 * several micro-batches and ranks), so dlogits carries the 1/denom. */
#include <math.h>

#include "ops_cpu.h"

void softmax_xent_forward(const VilXentFwd *args) {
    float *loss = args->loss, *probs = args->probs;
    const float *logits = args->logits, *targets = args->targets;
    int B = args->B, C = args->C;
#pragma omp parallel for
    for (int b = 0; b < B; b++) {
        const float *x = logits + (size_t)b * C;
        float *p = probs + (size_t)b * C;
        float mx = x[0];
        for (int c = 1; c < C; c++) mx = x[c] > mx ? x[c] : mx;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += exp((double)(x[c] - mx));
        double lse = mx + log(sum);
        double l = 0.0;
        for (int c = 0; c < C; c++) {
            p[c] = (float)exp((double)x[c] - lse);
            l -= (double)targets[(size_t)b * C + c] * ((double)x[c] - lse);
        }
        loss[b] = (float)l;
    }
}

void softmax_xent_backward(const VilXentBwd *args) {
    float *dlogits = args->dlogits;
    const float *probs = args->probs, *targets = args->targets;
    int B = args->B, C = args->C;
    float inv = 1.0f / (float)args->denom;
#pragma omp parallel for
    for (long i = 0; i < (long)B * C; i++) dlogits[i] = (probs[i] - targets[i]) * inv;
}
