/* train_kernels.h — the trainer's F32 kernels (train_kernels.c portable, train_kernels_avx512.c, _avx2.c): the matrix
 * product and the Adam step, the two loops an epoch spends its time in.
 *
 * The product reads its left operand through two strides, so the same kernel computes X·Wᵀ (forward), δ·W
 * (backward) and δᵀ·X (weight gradient) on row-major arrays without transposing them, with the bias, the ReLU or
 * the ReLU's mask fused into the store. Each output is its start value (0, or C when accumulating) plus the
 * products in increasing k, and each Adam update reads only its own parameter's state and gradients: the same bits
 * whatever thread computes them. */
#ifndef TR_TRAIN_KERNELS_H
#define TR_TRAIN_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct train_gemm_args {
    int32_t m, n, k;
    const float *a;          /* A(i, p) = a[i * a_row + p * a_col] */
    int64_t a_row, a_col;
    const float *b;          /* B(p, j) = b[p * ldb + j] */
    int64_t ldb;
    float *c;                /* C(i, j) = c[i * ldc + j] */
    int64_t ldc;
    bool accumulate;         /* C += A·B (else C = A·B) */
    const float *bias;       /* [n] added to every row, or NULL */
    bool relu;               /* max(0, ·) after the bias */
    const float *mask;       /* C(i, j) = 0 where mask[i * ldc + j] <= 0 (the ReLU's derivative), or NULL */
} train_gemm_args;

/* C = A·B (or C += A·B) with the epilogue, by the fastest kernel the CPU and TOKROUTE_KERNELS allow. */
void train_gemm(const train_gemm_args *g);
/* The portable kernel (the reference the SIMD kernel is tested against). */
void train_gemm_portable(const train_gemm_args *g);

/* Adam with bias correction on n parameters; the gradient is the sum of n_grads arrays (grads[c * grad_stride + k],
 * added in c order) plus decay * theta (L2). The step: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g², theta -=
 * lr_c1 m / (sqrt(v) inv_sqrt_c2 + eps), with lr_c1 = lr / (1 - b1^t) and inv_sqrt_c2 = 1 / sqrt(1 - b2^t). */
typedef struct train_adam_args {
    float *theta, *m, *v;
    const float *grads;
    int32_t n_grads;
    size_t grad_stride, n;
    float decay, b1, b2, lr_c1, inv_sqrt_c2, eps;
} train_adam_args;

void train_adam(const train_adam_args *a);
void train_adam_portable(const train_adam_args *a);

#if defined(__x86_64__)
/* The SIMD products' loop over one panel of columns starting at j0: TILE_ROWS-row tiles of the given vector count,
 * then the 1-3 rows left. Each SIMD file defines TILE_ROWS (4) and tile(g, rows, vecs, i, j0, mask) with constant
 * rows and vecs at each call, so every tile's loops unroll. */
#define TRAIN_GEMM_PANEL(vecs)                                                                                        \
    do {                                                                                                              \
        int32_t i = 0;                                                                                                \
        for (; i + TILE_ROWS <= g->m; i += TILE_ROWS) tile(g, TILE_ROWS, vecs, i, j0, mask);                          \
        switch (g->m - i) {                                                                                           \
        case 3: tile(g, 3, vecs, i, j0, mask); break;                                                                 \
        case 2: tile(g, 2, vecs, i, j0, mask); break;                                                                 \
        case 1: tile(g, 1, vecs, i, j0, mask); break;                                                                 \
        default: break;                                                                                               \
        }                                                                                                             \
    } while (0)

void train_gemm_avx512(const train_gemm_args *g);
void train_adam_avx512(const train_adam_args *a);
void train_gemm_avx2(const train_gemm_args *g);
void train_adam_avx2(const train_adam_args *a);
#endif

#endif /* TR_TRAIN_KERNELS_H */
