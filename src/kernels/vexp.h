/* vexp.h — the element-wise steps built on expf (SwiGLU's SiLU, softmax) over whole rows, vectorized where the CPU
 * allows and bit for bit what the scalar loops give: the AVX-512 path evaluates glibc's expf (its table of
 * 2^(i/32), its polynomial and its fused operations, in double) eight lanes at a time, and sums in the scalar
 * order. A CPU or C library where the vector path would differ (checked once against expf) keeps the scalar loops. */
#ifndef TR_KERNELS_VEXP_H
#define TR_KERNELS_VEXP_H

#include <stdint.h>

/* gate[i] = gate[i] / (1 + expf(-gate[i])) * up[i] */
void vexp_silu_mul(float *gate, const float *up, int64_t n);
/* x[i] = expf(x[i] - max) for the row's max, then x[i] *= (float)(1 / sum) with the sum taken in double in index
 * order. */
void vexp_softmax(float *x, int64_t n);
/* k rows of n, stride apart: each x[i] *= scale, then vexp_softmax of the row. */
void vexp_softmax_rows(float *x, int64_t stride, int k, int64_t n, float scale);
/* x[i] rounded to the nearest F16 value (ties to even), as float. */
void vexp_round_f16(float *x, int64_t n);
/* gate[i] = f(gate[i]) * up[i] for f read from a table by F16 bits (ties to even) inside (-10, 10), 0 at or below
 * -10, the identity at or above 10: GeGLU as ggml computes it (its F16 GELU table). */
void vexp_table_glu(const float *table, float *gate, const float *up, int64_t n);

/* The path in use: "avx512" or "scalar" (for tests). */
const char *vexp_path(void);

/* ---------------------------------------------------------------- internal: the paths (vexp.c, vexp_avx512.c) */

typedef struct vexp_consts {
    double tab[32];        /* asuint64(2^(i/32)) - (i << 47), as glibc's __exp2f_data.tab */
    double invln2n, shift; /* 32 / ln 2; 0x1.8p52 */
    double c0, c1, c2;     /* the scaled polynomial */
} vexp_consts;

void vexp_silu_mul_scalar(float *gate, const float *up, int64_t n);
void vexp_softmax_scalar(float *x, int64_t n);
void vexp_round_f16_scalar(float *x, int64_t n);
void vexp_table_glu_scalar(const float *table, float *gate, const float *up, int64_t n);
void vexp_softmax_rows_scalar(float *x, int64_t stride, int k, int64_t n, float scale);
#if defined(__x86_64__)
void vexp_silu_mul_avx512(const vexp_consts *c, float *gate, const float *up, int64_t n);
void vexp_softmax_avx512(const vexp_consts *c, float *x, int64_t n);
void vexp_round_f16_avx512(float *x, int64_t n);
void vexp_table_glu_avx512(const float *table, float *gate, const float *up, int64_t n);
void vexp_softmax_rows_avx512(const vexp_consts *c, float *x, int64_t stride, int k, int64_t n, float scale);
/* expf of x[0..n) into y, n a multiple of 16 (the check against the scalar expf). */
void vexp_expf_avx512(const vexp_consts *c, const float *x, float *y, int64_t n);
#endif

#endif /* TR_KERNELS_VEXP_H */
