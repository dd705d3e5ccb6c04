/* train_kernels_avx2.c — the trainer's kernels with AVX2 and FMA (train_kernels.h), for CPUs without AVX-512: the
 * product in register tiles of 4 rows of C × 16 columns (8 accumulators of the 16 ymm registers), the same loop
 * order as train_kernels_avx512.c; columns past n by masked loads and stores. Adam 8 parameters a step, the same
 * operations in the same order as the portable loop. */
#include "train/train_kernels.h"

#include <immintrin.h>

#define TILE_ROWS 4
#define TILE_VECS 2

static __m256i lane_mask(int32_t lanes) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __attribute__((always_inline)) void tile(const train_gemm_args *g, const int rows, const int vecs,
                                                       int32_t i0, int32_t j0, const __m256i *mask) {
    __m256 acc[TILE_ROWS][TILE_VECS];
    float *c = g->c + (int64_t)i0 * g->ldc + j0;
    #pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
        #pragma GCC unroll 4
        for (int v = 0; v < vecs; v++)
            acc[r][v] = g->accumulate ? _mm256_maskload_ps(c + (int64_t)r * g->ldc + 8 * v, mask[v]) : _mm256_setzero_ps();
    const float *a = g->a + (int64_t)i0 * g->a_row, *b = g->b + j0;
    for (int32_t p = 0; p < g->k; p++) {
        __m256 bv[TILE_VECS];
        #pragma GCC unroll 4
        for (int v = 0; v < vecs; v++) bv[v] = _mm256_maskload_ps(b + 8 * v, mask[v]);
        #pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            const __m256 av = _mm256_broadcast_ss(a + (int64_t)r * g->a_row);
            #pragma GCC unroll 4
            for (int v = 0; v < vecs; v++) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
        }
        a += g->a_col;
        b += g->ldb;
    }
    const __m256 zero = _mm256_setzero_ps();
    #pragma GCC unroll 4
    for (int v = 0; v < vecs; v++) {
        const __m256 bias = g->bias ? _mm256_maskload_ps(g->bias + j0 + 8 * v, mask[v]) : zero;
        #pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            __m256 y = g->bias ? _mm256_add_ps(acc[r][v], bias) : acc[r][v];
            if (g->relu) y = _mm256_max_ps(y, zero);
            float *out = c + (int64_t)r * g->ldc + 8 * v;
            if (g->mask) {
                const __m256 m = _mm256_maskload_ps(g->mask + (out - g->c), mask[v]);
                y = _mm256_and_ps(y, _mm256_cmp_ps(m, zero, _CMP_GT_OQ));
            }
            _mm256_maskstore_ps(out, mask[v], y);
        }
    }
}

void train_gemm_avx2(const train_gemm_args *g) {
    for (int32_t j0 = 0; j0 < g->n; j0 += 8 * TILE_VECS) {
        const int32_t width = g->n - j0 < 8 * TILE_VECS ? g->n - j0 : 8 * TILE_VECS;
        __m256i mask[TILE_VECS];
        for (int v = 0; v < TILE_VECS; v++) mask[v] = lane_mask(width - 8 * v);
        if (width > 8) TRAIN_GEMM_PANEL(2);
        else TRAIN_GEMM_PANEL(1);
    }
}

void train_adam_avx2(const train_adam_args *a) {
    const __m256 b1 = _mm256_set1_ps(a->b1), b2 = _mm256_set1_ps(a->b2), one_b1 = _mm256_set1_ps(1 - a->b1),
                 one_b2 = _mm256_set1_ps(1 - a->b2), lr_c1 = _mm256_set1_ps(a->lr_c1),
                 inv_sqrt_c2 = _mm256_set1_ps(a->inv_sqrt_c2), eps = _mm256_set1_ps(a->eps),
                 decay = _mm256_set1_ps(a->decay);
    for (size_t k = 0; k < a->n; k += 8) {
        const __m256i lanes = lane_mask(a->n - k >= 8 ? 8 : (int32_t)(a->n - k));
        __m256 g = _mm256_maskload_ps(a->grads + k, lanes);
        for (int32_t c = 1; c < a->n_grads; c++)
            g = _mm256_add_ps(g, _mm256_maskload_ps(a->grads + (size_t)c * a->grad_stride + k, lanes));
        __m256 theta = _mm256_maskload_ps(a->theta + k, lanes);
        g = _mm256_add_ps(g, _mm256_mul_ps(decay, theta));
        const __m256 m = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_maskload_ps(a->m + k, lanes)), _mm256_mul_ps(one_b1, g));
        const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_maskload_ps(a->v + k, lanes)),
                                       _mm256_mul_ps(_mm256_mul_ps(one_b2, g), g));
        const __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), inv_sqrt_c2), eps);
        theta = _mm256_sub_ps(theta, _mm256_div_ps(_mm256_mul_ps(lr_c1, m), denom));
        _mm256_maskstore_ps(a->m + k, lanes, m);
        _mm256_maskstore_ps(a->v + k, lanes, v);
        _mm256_maskstore_ps(a->theta + k, lanes, theta);
    }
}
