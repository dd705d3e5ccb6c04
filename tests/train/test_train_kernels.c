/* test_train_kernels.c — the trainer's kernels (train_kernels.h) by each set this CPU can run: the product against a
 * double-precision loop in the three shapes the trainer uses (A along rows, A down columns, accumulating into C),
 * with the fused bias, ReLU and mask, on sizes that leave partial register tiles and masked columns; the Adam step
 * against its formula in double over several steps, and the SIMD steps (AVX2, AVX-512) bit for bit against the
 * portable one. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "train/train_kernels.h"

static float next_value(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

typedef void (*gemm_fn)(const train_gemm_args *g);

/* C from fn against the definition, for A stored [m][k] (by_rows) or [k][m]. */
static void check_shape(gemm_fn fn, int32_t m, int32_t n, int32_t k, bool by_rows, bool accumulate, bool bias_relu,
                        bool masked) {
    uint64_t s = (uint64_t)(m * 1000003 + n * 1009 + k);
    float *a = malloc((size_t)m * k * sizeof(float)), *b = malloc((size_t)k * n * sizeof(float));
    float *c = malloc((size_t)m * n * sizeof(float)), *c0 = malloc((size_t)m * n * sizeof(float));
    float *bias = malloc((size_t)n * sizeof(float)), *mask = malloc((size_t)m * n * sizeof(float));
    for (int64_t i = 0; i < (int64_t)m * k; i++) a[i] = next_value(&s);
    for (int64_t i = 0; i < (int64_t)k * n; i++) b[i] = next_value(&s);
    for (int64_t i = 0; i < (int64_t)m * n; i++) c0[i] = c[i] = next_value(&s), mask[i] = next_value(&s);
    for (int32_t j = 0; j < n; j++) bias[j] = next_value(&s);
    const train_gemm_args g = {.m = m, .n = n, .k = k, .a = a, .a_row = by_rows ? k : 1, .a_col = by_rows ? 1 : m,
                               .b = b, .ldb = n, .c = c, .ldc = n, .accumulate = accumulate,
                               .bias = bias_relu ? bias : NULL, .relu = bias_relu, .mask = masked ? mask : NULL};
    fn(&g);
    int zeros = 0;
    for (int32_t i = 0; i < m; i++)
        for (int32_t j = 0; j < n; j++) {
            double want = accumulate ? c0[(int64_t)i * n + j] : 0;
            for (int32_t p = 0; p < k; p++)
                want += (double)a[by_rows ? (int64_t)i * k + p : (int64_t)p * m + i] * b[(int64_t)p * n + j];
            if (bias_relu) want = fmax(want + bias[j], 0);
            if (masked && !(mask[(int64_t)i * n + j] > 0)) want = 0;
            const double got = c[(int64_t)i * n + j];
            if (fabs(got - want) > 1e-4 * (1 + sqrt((double)k)))
                print_error("%dx%dx%d at (%d, %d): %g, want %g\n", (int)m, (int)n, (int)k, (int)i, (int)j, got, want);
            assert_true(fabs(got - want) <= 1e-4 * (1 + sqrt((double)k)));
            zeros += got == 0;
        }
    if (bias_relu || masked) assert_true(zeros > 0 && zeros < m * n); /* the epilogue did something, not everything */
    free(a), free(b), free(c), free(c0), free(bias), free(mask);
}

static void check_kernel(gemm_fn fn) {
    /* m, n, k: the trainer's layer shapes on 64-row chunks, then odd sizes (partial tiles, 1-lane panels). */
    static const int32_t shapes[][3] = {{64, 256, 118}, {64, 128, 256}, {64, 1, 128}, {256, 118, 64}, {128, 256, 64},
                                        {1, 128, 64}, {7, 9, 6}, {5, 81, 3}, {67, 130, 17}, {1, 1, 1}, {3, 17, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int by_rows = 0; by_rows < 2; by_rows++) {
            const int32_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            check_shape(fn, m, n, k, by_rows, false, false, false);
            check_shape(fn, m, n, k, by_rows, true, false, false);
            if (k > 0 && m * n > 8) {
                check_shape(fn, m, n, k, by_rows, false, true, false);
                check_shape(fn, m, n, k, by_rows, false, false, true);
            }
        }
}

typedef void (*adam_fn)(const train_adam_args *a);

/* Three steps of fn on n parameters with 3 gradient arrays; theta, m, v after them into out[3][n]. */
static void adam_steps(adam_fn fn, size_t n, float decay, float *out) {
    uint64_t s = 99;
    float *grads = malloc(3 * n * sizeof(float));
    float *theta = out, *m = out + n, *v = out + 2 * n;
    for (size_t k = 0; k < n; k++) theta[k] = next_value(&s), m[k] = 0, v[k] = 0;
    for (int step = 1; step <= 3; step++) {
        for (size_t k = 0; k < 3 * n; k++) grads[k] = next_value(&s) * 0.01f;
        const train_adam_args a = {.theta = theta, .m = m, .v = v, .grads = grads, .n_grads = 3, .grad_stride = n,
                                   .n = n, .decay = decay, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f,
                                   .lr_c1 = (float)(1e-3 / (1 - pow(0.9, step))),
                                   .inv_sqrt_c2 = (float)(1 / sqrt(1 - pow(0.999, step)))};
        fn(&a);
    }
    free(grads);
}

static void test_adam(void **state) {
    (void)state;
    const size_t n = 37; /* two full vectors and a partial one */
    float *got = malloc(3 * n * sizeof(float)), *simd = malloc(3 * n * sizeof(float));
    for (int with_decay = 0; with_decay < 2; with_decay++) {
        const float decay = with_decay ? 0.1f : 0.0f;
        adam_steps(train_adam_portable, n, decay, got);
        /* The definition in double: the same inputs (regenerated from the same seed). */
        uint64_t s = 99;
        double theta[37], m[37] = {0}, v[37] = {0};
        float grads[3 * 37];
        for (size_t k = 0; k < n; k++) theta[k] = next_value(&s);
        for (int step = 1; step <= 3; step++) {
            for (size_t k = 0; k < 3 * n; k++) grads[k] = next_value(&s) * 0.01f;
            for (size_t k = 0; k < n; k++) {
                const double g = (double)grads[k] + grads[n + k] + grads[2 * n + k] + decay * theta[k];
                m[k] = 0.9 * m[k] + 0.1 * g;
                v[k] = 0.999 * v[k] + 0.001 * g * g;
                theta[k] -= 1e-3 * (m[k] / (1 - pow(0.9, step))) / (sqrt(v[k] / (1 - pow(0.999, step))) + 1e-8);
            }
        }
        for (size_t k = 0; k < n; k++) {
            assert_float_equal(got[k], theta[k], 1e-6);
            assert_float_equal(got[n + k], m[k], 1e-7);
            assert_float_equal(got[2 * n + k], v[k], 1e-9);
        }
        double moved = 0; /* the steps did something */
        uint64_t s0 = 99;
        for (size_t k = 0; k < n; k++) moved += fabs(theta[k] - next_value(&s0)) / (double)n;
        assert_true(moved > 1e-3);
#if defined(__x86_64__)
        if (kernels_isa_available("avx512")) {
            adam_steps(train_adam_avx512, n, decay, simd);
            assert_memory_equal(got, simd, 3 * n * sizeof(float)); /* the same operations: the same bits */
        }
        if (kernels_isa_available("avx2")) {
            adam_steps(train_adam_avx2, n, decay, simd);
            assert_memory_equal(got, simd, 3 * n * sizeof(float));
        }
#endif
        adam_steps(train_adam, n, decay, simd);
        assert_memory_equal(got, simd, 3 * n * sizeof(float));
    }
    free(got);
    free(simd);
}

static void test_portable(void **state) {
    (void)state;
    check_kernel(train_gemm_portable);
}

static void test_dispatched(void **state) {
    (void)state;
    check_kernel(train_gemm);
}

#if defined(__x86_64__)
static void test_avx512(void **state) {
    (void)state;
    if (!kernels_isa_available("avx512")) {
        /* This CPU cannot run it: the dispatched kernel is the portable one, already checked. */
        assert_string_not_equal(kernels_isa(), "avx512");
        return;
    }
    check_kernel(train_gemm_avx512);
}

static void test_avx2(void **state) {
    (void)state;
    if (!kernels_isa_available("avx2")) {
        assert_string_equal(kernels_isa(), "scalar");
        return;
    }
    check_kernel(train_gemm_avx2);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_portable),
        cmocka_unit_test(test_dispatched),
        cmocka_unit_test(test_adam),
#if defined(__x86_64__)
        cmocka_unit_test(test_avx512),
        cmocka_unit_test(test_avx2),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
