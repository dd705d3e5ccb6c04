/* train_kernels_avx512.c — the trainer product with AVX-512 (train_kernels.h): register tiles of 4 rows of C × 64
 * columns (16 accumulators, held in registers: the tile's loops are unrolled); each step of k loads 4 vectors of B's row and broadcasts 4 values of A, so A may be
 * read along rows (X·Wᵀ, δ·W) or down columns (δᵀ·X) at the same cost. Columns past n are masked, rows past m
 * are a smaller tile. The loop runs column panels outermost: a panel of B (k × 64 floats, 30 KB for the first
 * layer) stays in L1 while the row tiles pass over it. Adam: 16 parameters a step, the same operations in the same
 * order as the portable loop (FMA contractions aside). */
#include "train/train_kernels.h"

#include <immintrin.h>

#define TILE_ROWS 4
#define TILE_VECS 4

static inline __attribute__((always_inline)) void tile(const train_gemm_args *g, const int rows, const int vecs,
                                                       int32_t i0, int32_t j0, const __mmask16 *mask) {
    __m512 acc[TILE_ROWS][TILE_VECS];
    float *c = g->c + (int64_t)i0 * g->ldc + j0;
    #pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
        #pragma GCC unroll 4
        for (int v = 0; v < vecs; v++)
            acc[r][v] = g->accumulate ? _mm512_maskz_loadu_ps(mask[v], c + (int64_t)r * g->ldc + 16 * v)
                                      : _mm512_setzero_ps();
    const float *a = g->a + (int64_t)i0 * g->a_row, *b = g->b + j0;
    for (int32_t p = 0; p < g->k; p++) {
        __m512 bv[TILE_VECS];
        #pragma GCC unroll 4
        for (int v = 0; v < vecs; v++) bv[v] = _mm512_maskz_loadu_ps(mask[v], b + 16 * v);
        #pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            const __m512 av = _mm512_set1_ps(a[(int64_t)r * g->a_row]);
            #pragma GCC unroll 4
            for (int v = 0; v < vecs; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
        }
        a += g->a_col;
        b += g->ldb;
    }
    const __m512 zero = _mm512_setzero_ps();
    #pragma GCC unroll 4
    for (int v = 0; v < vecs; v++) {
        const __m512 bias = g->bias ? _mm512_maskz_loadu_ps(mask[v], g->bias + j0 + 16 * v) : zero;
        #pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            __m512 y = g->bias ? _mm512_add_ps(acc[r][v], bias) : acc[r][v];
            if (g->relu) y = _mm512_max_ps(y, zero);
            float *out = c + (int64_t)r * g->ldc + 16 * v;
            if (g->mask) {
                const __m512 m = _mm512_maskz_loadu_ps(mask[v], g->mask + (out - g->c));
                y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, zero, _CMP_GT_OQ), y);
            }
            _mm512_mask_storeu_ps(out, mask[v], y);
        }
    }
}

void train_gemm_avx512(const train_gemm_args *g) {
    for (int32_t j0 = 0; j0 < g->n; j0 += 16 * TILE_VECS) {
        const int32_t width = g->n - j0 < 16 * TILE_VECS ? g->n - j0 : 16 * TILE_VECS;
        __mmask16 mask[TILE_VECS];
        for (int v = 0; v < TILE_VECS; v++) {
            const int32_t lanes = width - 16 * v;
            mask[v] = lanes >= 16 ? (__mmask16)0xFFFF : lanes > 0 ? (__mmask16)((1u << lanes) - 1) : 0;
        }
        switch ((width + 15) / 16) {
        case 4: TRAIN_GEMM_PANEL(4); break;
        case 3: TRAIN_GEMM_PANEL(3); break;
        case 2: TRAIN_GEMM_PANEL(2); break;
        default: TRAIN_GEMM_PANEL(1); break;
        }
    }
}

void train_adam_avx512(const train_adam_args *a) {
    const __m512 b1 = _mm512_set1_ps(a->b1), b2 = _mm512_set1_ps(a->b2), one_b1 = _mm512_set1_ps(1 - a->b1),
                 one_b2 = _mm512_set1_ps(1 - a->b2), lr_c1 = _mm512_set1_ps(a->lr_c1),
                 inv_sqrt_c2 = _mm512_set1_ps(a->inv_sqrt_c2), eps = _mm512_set1_ps(a->eps),
                 decay = _mm512_set1_ps(a->decay);
    for (size_t k = 0; k < a->n; k += 16) {
        const __mmask16 lanes = a->n - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (a->n - k)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(lanes, a->grads + k);
        for (int32_t c = 1; c < a->n_grads; c++)
            g = _mm512_add_ps(g, _mm512_maskz_loadu_ps(lanes, a->grads + (size_t)c * a->grad_stride + k));
        __m512 theta = _mm512_maskz_loadu_ps(lanes, a->theta + k);
        g = _mm512_add_ps(g, _mm512_mul_ps(decay, theta));
        const __m512 m = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(lanes, a->m + k)), _mm512_mul_ps(one_b1, g));
        const __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(lanes, a->v + k)),
                                       _mm512_mul_ps(_mm512_mul_ps(one_b2, g), g));
        const __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(v), inv_sqrt_c2), eps);
        theta = _mm512_sub_ps(theta, _mm512_div_ps(_mm512_mul_ps(lr_c1, m), denom));
        _mm512_mask_storeu_ps(a->m + k, lanes, m);
        _mm512_mask_storeu_ps(a->v + k, lanes, v);
        _mm512_mask_storeu_ps(a->theta + k, lanes, theta);
    }
}
