/* train_kernels.c — the trainer's portable kernels and the choice between them, AVX2 and AVX-512 (train_kernels.h). The
 * product goes row by row: the row of C starts at 0 (or its value) and gets A(i, p) · B(p, ·) added for p = 0, 1,
 * ... — the inner loop runs along contiguous rows of B and C. */
#include "train/train_kernels.h"

#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

void train_gemm_portable(const train_gemm_args *g) {
    for (int32_t i = 0; i < g->m; i++) {
        float *c = g->c + (int64_t)i * g->ldc;
        if (!g->accumulate) memset(c, 0, (size_t)g->n * sizeof *c);
        for (int32_t p = 0; p < g->k; p++) {
            const float a = g->a[(int64_t)i * g->a_row + (int64_t)p * g->a_col];
            const float *b = g->b + (int64_t)p * g->ldb;
            for (int32_t j = 0; j < g->n; j++) c[j] += a * b[j];
        }
        if (g->bias)
            for (int32_t j = 0; j < g->n; j++) c[j] += g->bias[j];
        if (g->relu)
            for (int32_t j = 0; j < g->n; j++) c[j] = c[j] > 0 ? c[j] : 0;
        if (g->mask) {
            const float *mask = g->mask + (int64_t)i * g->ldc;
            for (int32_t j = 0; j < g->n; j++)
                if (!(mask[j] > 0)) c[j] = 0;
        }
    }
}

void train_adam_portable(const train_adam_args *a) {
    for (size_t k = 0; k < a->n; k++) {
        float g = a->grads[k];
        for (int32_t c = 1; c < a->n_grads; c++) g += a->grads[(size_t)c * a->grad_stride + k];
        g += a->decay * a->theta[k];
        a->m[k] = a->b1 * a->m[k] + (1 - a->b1) * g;
        a->v[k] = a->b2 * a->v[k] + (1 - a->b2) * g * g;
        a->theta[k] -= a->lr_c1 * a->m[k] / (sqrtf(a->v[k]) * a->inv_sqrt_c2 + a->eps);
    }
}

/* kernels_isa() is the set matmul uses (TOKROUTE_KERNELS can force a smaller one). */
typedef enum { SET_PORTABLE, SET_AVX2, SET_AVX512 } kernel_set;

static kernel_set current_set(void) {
#if defined(__x86_64__)
    const char *isa = kernels_isa();
    if (strcmp(isa, "avx512") == 0) return SET_AVX512;
    if (strcmp(isa, "avx2") == 0) return SET_AVX2;
#endif
    return SET_PORTABLE;
}

void train_gemm(const train_gemm_args *g) {
    if (g->m <= 0 || g->n <= 0) return;
    switch (current_set()) {
#if defined(__x86_64__)
    case SET_AVX512: train_gemm_avx512(g); break;
    case SET_AVX2: train_gemm_avx2(g); break;
#endif
    default: train_gemm_portable(g); break;
    }
}

void train_adam(const train_adam_args *a) {
    if (a->n == 0) return;
    switch (current_set()) {
#if defined(__x86_64__)
    case SET_AVX512: train_adam_avx512(a); break;
    case SET_AVX2: train_adam_avx2(a); break;
#endif
    default: train_adam_portable(a); break;
    }
}
