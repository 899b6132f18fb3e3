/* patch_embed.c: the patch embedding (Conv2d with kernel P, stride S, as im2col + a matrix
 * product) and the token assembly: the class token inserted at the middle position t and the
 * position embedding added. Parameter gradients accumulate; activation gradients overwrite. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ops_cpu.h"

/* col (B*M, C*P*P): each row is one patch, in the conv weight's (c, i, j) order */
static void im2col(float *col, const float *img, int B, int C, int H, int W, int P, int S) {
    int GH = (H - P) / S + 1, GW = (W - P) / S + 1, K = C * P * P;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int gy = 0; gy < GH; gy++)
            for (int gx = 0; gx < GW; gx++) {
                float *row = col + ((size_t)b * GH * GW + (size_t)gy * GW + gx) * K;
                for (int c = 0; c < C; c++)
                    for (int i = 0; i < P; i++)
                        memcpy(row + (c * P + i) * P,
                               img + (((size_t)b * C + c) * H + gy * S + i) * W + gx * S,
                               (size_t)P * sizeof(float));
            }
}

void patch_embed_forward(const VilPatchEmbedFwd *args) {
    const float *img = args->img;
    int B = args->B, C = args->C, H = args->H, W = args->W, P = args->P, S = args->S, D = args->D;
    int M = ((H - P) / S + 1) * ((W - P) / S + 1), K = C * P * P;
    float *col = vil_malloc((size_t)B * M * K * sizeof(float));
    im2col(col, img, B, C, H, W, P, S);
    linear_forward(&(VilLinearFwd){.out = args->out, .in = col, .w = args->w, .b = args->b, .N = B * M,
                                   .C = K, .OC = D, .ld_in = K, .ld_out = D});
    free(col);
}

void patch_embed_backward(const VilPatchEmbedBwd *args) {
    float *dimg = args->dimg;
    int B = args->B, C = args->C, H = args->H, W = args->W, P = args->P, S = args->S, D = args->D;
    int GH = (H - P) / S + 1, GW = (W - P) / S + 1, M = GH * GW, K = C * P * P;
    float *col = vil_malloc((size_t)B * M * K * sizeof(float));
    im2col(col, args->img, B, C, H, W, P, S);
    VilLinearBwd lb = {.dw = args->dw, .db = args->db, .dout = args->dout, .in = col, .w = args->w,
                       .N = B * M, .C = K, .OC = D, .ld_in = K, .ld_out = D};
    linear_backward(&lb);
    if (dimg) {
        /* the input gradient (saliency, gradient checks): dcol = dout @ w, then col2im. Patches
         * overlap when S < P, so each (sample, channel) plane is summed by one thread. */
        lb.dinp = col, lb.dw = lb.db = NULL, lb.in = NULL;
        linear_backward(&lb);
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++) {
                float *plane = dimg + ((size_t)b * C + c) * H * W;
                memset(plane, 0, (size_t)H * W * sizeof(float));
                for (int gy = 0; gy < GH; gy++)
                    for (int gx = 0; gx < GW; gx++) {
                        const float *row = col + ((size_t)b * M + (size_t)gy * GW + gx) * K;
                        for (int i = 0; i < P; i++)
                            for (int j = 0; j < P; j++)
                                plane[(size_t)(gy * S + i) * W + gx * S + j] += row[(c * P + i) * P + j];
                    }
            }
    }
    free(col);
}

void tokens_forward(const VilTokensFwd *args) {
    float *x = args->x;
    const float *patches = args->patches, *cls = args->cls, *pos = args->pos;
    int B = args->B, M = args->M, D = args->D, t = args->t, L = M + 1;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int l = 0; l < L; l++) {
            const float *src = l < t    ? patches + ((size_t)b * M + l) * D
                               : l == t ? cls
                                        : patches + ((size_t)b * M + l - 1) * D;
            float *dst = x + ((size_t)b * L + l) * D;
            if (!pos) {
                memcpy(dst, src, (size_t)D * sizeof(float));
                continue;
            }
            const float *pe = pos + (size_t)l * D;
            for (int d = 0; d < D; d++) dst[d] = src[d] + pe[d];
        }
}

void tokens_backward(const VilTokensBwd *args) {
    float *dpatches = args->dpatches, *dcls = args->dcls, *dpos = args->dpos;
    const float *dx = args->dx;
    int B = args->B, M = args->M, D = args->D, t = args->t, L = M + 1;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int l = 0; l < L; l++) {
            if (l == t) continue;
            float *dst = dpatches + ((size_t)b * M + (l < t ? l : l - 1)) * D;
            memcpy(dst, dx + ((size_t)b * L + l) * D, (size_t)D * sizeof(float));
        }
    /* sums over the batch: parallel over the columns, so no two threads share an output; without
     * dpos only the class token's row */
#pragma omp parallel for
    for (int d = 0; d < D; d++) {
        for (int l = dpos ? 0 : t; l < (dpos ? L : t + 1); l++) {
            float acc = 0.0f;
            for (int b = 0; b < B; b++) acc += dx[((size_t)b * L + l) * D + d];
            if (dpos) dpos[(size_t)l * D + d] += acc;
            if (l == t) dcls[d] += acc;
        }
    }
}
