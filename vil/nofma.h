/* nofma.h: VIL_NO_FMA marks a function whose float arithmetic must run as written, without fused
 * multiply-adds (which round differently): results that must equal another program's (Pillow's
 * resampling coefficients) or be the same on every instruction set (the erasing noise). Under
 * clang the pragma turns contraction off for the rest of the including file. */
#ifndef VIL_NOFMA_H
#define VIL_NOFMA_H
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define VIL_NO_FMA
#else
#define VIL_NO_FMA __attribute__((optimize("fp-contract=off")))
#endif
#endif
