/* test_kernels_repack.c — the interleaved X16 layout: repacking is lossless (every row comes back byte for byte,
 * in place or into a new buffer), embedding lookups of a repacked matrix decode exactly as the plain rows, and
 * products of a repacked matrix equal the plain ones on every instruction set, for odd shapes (rows past the last
 * group of 16, one-block rows), several token counts and threads; a batched product gives each token the bits it
 * gets alone; matmul_multi equals separate products; decode's per-thread shares cover every row once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static uint32_t rng_state = 4242;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

static const tr_type X16_TYPES[] = {TR_TYPE_Q4_0, TR_TYPE_Q4_1, TR_TYPE_Q5_0, TR_TYPE_Q5_1,
                                    TR_TYPE_Q8_0, TR_TYPE_Q4_K, TR_TYPE_Q5_K, TR_TYPE_Q6_K,
                                    TR_TYPE_IQ4_NL, TR_TYPE_IQ4_XS, TR_TYPE_Q2_K, TR_TYPE_Q3_K};
static const char *const ISAS[] = {"scalar", "avx2", "avx512", "neon"};

/* rows × cols of random values quantized to t (scale varies by block so scales differ row to row). */
static uint8_t *random_matrix(tr_type t, int64_t rows, int64_t cols) {
    const size_t rb = type_row_bytes(t, cols);
    uint8_t *m = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < cols; k++) row[k] = frand() * (1.0f + (float)((r + k / 32) % 5));
        assert_int_equal(quantize_row(t, row, m + rb * (size_t)r, cols), TR_OK);
    }
    free(row);
    return m;
}

static void test_repack_round_trip(void **state) {
    (void)state;
    const int64_t rows_list[] = {16, 37, 64};
    for (size_t ti = 0; ti < sizeof X16_TYPES / sizeof X16_TYPES[0]; ti++) {
        const tr_type t = X16_TYPES[ti];
        const int64_t be = tr_type_block_elems(t);
        const int64_t cols_list[] = {be, 3 * be};
        for (size_t ri = 0; ri < 3; ri++)
            for (size_t ci = 0; ci < 2; ci++) {
                const int64_t rows = rows_list[ri], cols = cols_list[ci];
                const size_t rb = type_row_bytes(t, cols);
                uint8_t *plain = random_matrix(t, rows, cols);
                uint8_t *copy = malloc(rb * rows), *packed = malloc(rb * rows), *row = malloc(rb);
                memcpy(copy, plain, rb * rows);
                weight_matrix a = {t, plain, rows, cols, 0, WEIGHT_PLAIN}, b = {t, copy, rows, cols, 0, WEIGHT_PLAIN};
                assert_int_equal(weight_bytes(&a), rb * rows);
                assert_int_equal(weight_repack(&a, packed), TR_OK); /* into a new buffer */
                assert_int_equal(weight_repack(&b, copy), TR_OK);   /* in place */
                assert_int_equal(a.layout, WEIGHT_X16);
                assert_ptr_equal(a.data, packed);
                assert_int_equal(weight_x16_rows(&a), rows / 16 * 16);
                assert_memory_equal(packed, copy, rb * rows);
                /* a layout that only copied bytes would pass the round trip: the interleaving must move them */
                assert_memory_not_equal(packed, plain, rb * 16);
                float *want = malloc(sizeof(float) * cols), *got = malloc(sizeof(float) * cols);
                for (int64_t r = 0; r < rows; r++) {
                    if (r < weight_x16_rows(&a)) {
                        weight_x16_row(&a, r, row);
                        assert_memory_equal(row, plain + r * rb, rb);
                    }
                    assert_int_equal(dequantize_row(t, plain + r * rb, want, cols), TR_OK);
                    assert_int_equal(weight_dequantize_row(&a, r, got), TR_OK);
                    assert_memory_equal(want, got, sizeof(float) * cols);
                }
                assert_int_equal(weight_dequantize_row(&a, rows, got), TR_ERR_RANGE);
                free(want); free(got); free(plain); free(copy); free(packed); free(row);
            }
    }
}

static void test_repack_refuses(void **state) {
    (void)state;
    uint8_t buf[64 * 18];
    weight_matrix f16 = {TR_TYPE_F16, buf, 16, 32, 0, WEIGHT_PLAIN};
    assert_int_equal(weight_repack(&f16, buf), TR_ERR_ARG);
    weight_matrix strided = {TR_TYPE_Q4_0, buf, 16, 32, 36, WEIGHT_PLAIN};
    assert_false(weight_repack_wanted(&strided));
    weight_matrix few = {TR_TYPE_Q4_0, buf, 15, 32, 0, WEIGHT_PLAIN};
    assert_false(weight_repack_wanted(&few));
}

/* Worst |y_plain - y_x16| relative to the largest |y_plain| of the product. */
static double compare(thread_pool *tp, tr_type t, int64_t rows, int64_t cols, int64_t n, matmul_scratch *sc) {
    const size_t rb = type_row_bytes(t, cols);
    uint8_t *plain = random_matrix(t, rows, cols), *packed = malloc(rb * rows);
    float *x = malloc(sizeof(float) * n * cols), *y1 = malloc(sizeof(float) * n * rows);
    float *y2 = malloc(sizeof(float) * n * rows);
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand() * 3.0f;
    weight_matrix a = {t, plain, rows, cols, 0, WEIGHT_PLAIN}, b = a;
    assert_int_equal(weight_repack(&b, packed), TR_OK);
    assert_int_equal(matmul(tp, &a, x, n, y1, rows, sc), TR_OK);
    assert_int_equal(matmul(tp, &b, x, n, y2, rows, sc), TR_OK);
    double worst = 0, mag = 1e-9;
    for (int64_t i = 0; i < n * rows; i++) mag = fmax(mag, fabs(y1[i]));
    for (int64_t i = 0; i < n * rows; i++) worst = fmax(worst, fabs(y1[i] - y2[i]) / mag);
    free(plain); free(packed); free(x); free(y1); free(y2);
    return worst;
}

static void test_repacked_products_equal_plain(void **state) {
    (void)state;
    const int64_t rows_list[] = {16, 37, 96};
    const int64_t ns[] = {1, 3, 4, 9};
    const char *best = kernels_isa();
    matmul_scratch sc = {0};
    int isas_run = 0;
    for (size_t s = 0; s < sizeof ISAS / sizeof ISAS[0]; s++) {
        if (!kernels_isa_available(ISAS[s])) continue;
        assert_int_equal(kernels_force_isa(ISAS[s]), TR_OK);
        isas_run++;
        for (int threads = 1; threads <= 2; threads++) {
            thread_pool *tp = thread_pool_create(threads);
            for (size_t ti = 0; ti < sizeof X16_TYPES / sizeof X16_TYPES[0]; ti++) {
                const tr_type t = X16_TYPES[ti];
                const int64_t be = tr_type_block_elems(t);
                const int64_t cols_list[] = {be, 3 * be, 8 * be};
                for (size_t ri = 0; ri < 3; ri++)
                    for (size_t ci = 0; ci < 3; ci++)
                        for (size_t ni = 0; ni < 4; ni++) {
                            const double e = compare(tp, t, rows_list[ri], cols_list[ci], ns[ni], &sc);
                            /* Same integers, different float summation order: a few ulps of the largest output. */
                            if (e > 2e-6)
                                fail_msg("%s %s %lldx%lld n=%lld threads=%d: repacked differs by %g", ISAS[s],
                                         tr_type_name(t), (long long)rows_list[ri], (long long)cols_list[ci],
                                         (long long)ns[ni], threads, e);
                        }
            }
            thread_pool_free(tp);
        }
    }
    assert_true(isas_run >= 2);
    assert_int_equal(kernels_force_isa(best), TR_OK);
    matmul_scratch_free(&sc);
}

/* A batched product of a repacked matrix gives each token the bits it gets alone: the server's batched pass must
 * equal single-sequence decode. Rows of several groups and many blocks (the tiles ask for the next columns' and
 * groups' weights ahead in every pass, batched too), token counts around the tiles' 8-token micro-tiles, on every
 * instruction set. */
static void test_batched_rows_equal_one_token(void **state) {
    (void)state;
    const tr_type types[] = {TR_TYPE_Q4_0, TR_TYPE_Q4_1, TR_TYPE_Q5_0, TR_TYPE_Q5_1, TR_TYPE_Q8_0};
    const int64_t rows = 80, cols = 1280, ns[] = {8, 9, 16, 23};
    const char *best = kernels_isa();
    thread_pool *tp = thread_pool_create(2);
    matmul_scratch sc = {0};
    for (size_t s = 0; s < sizeof ISAS / sizeof ISAS[0]; s++) {
        if (!kernels_isa_available(ISAS[s])) continue;
        assert_int_equal(kernels_force_isa(ISAS[s]), TR_OK);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            uint8_t *data = random_matrix(types[ti], rows, cols);
            weight_matrix w = {types[ti], data, rows, cols, 0, WEIGHT_PLAIN};
            assert_int_equal(weight_repack(&w, data), TR_OK);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int64_t n = ns[ni];
                float *x = malloc(sizeof(float) * n * cols), *all = malloc(sizeof(float) * n * rows);
                float one[80];
                for (int64_t i = 0; i < n * cols; i++) x[i] = frand() * 2.0f;
                assert_int_equal(matmul(tp, &w, x, n, all, rows, &sc), TR_OK);
                for (int64_t i = 0; i < n; i++) {
                    assert_int_equal(matmul(tp, &w, x + i * cols, 1, one, rows, &sc), TR_OK);
                    if (memcmp(one, all + i * rows, sizeof one) != 0)
                        fail_msg("%s %s n=%lld: token %lld of the batch differs from the token alone", ISAS[s],
                                 tr_type_name(types[ti]), (long long)n, (long long)i);
                }
                free(x);
                free(all);
            }
            free(data);
        }
    }
    assert_int_equal(kernels_force_isa(best), TR_OK);
    matmul_scratch_free(&sc);
    thread_pool_free(tp);
}

/* Q, K, V of different types and row counts through one matmul_multi equal three matmul calls exactly. */
static void test_matmul_multi_equals_separate(void **state) {
    (void)state;
    const tr_type types[3] = {TR_TYPE_Q4_K, TR_TYPE_Q6_K, TR_TYPE_Q8_0};
    const int64_t rows[3] = {64, 37, 16}, cols = 512;
    const int64_t ns[] = {1, 5};
    thread_pool *tp = thread_pool_create(2);
    matmul_scratch sc = {0};
    uint8_t *data[3];
    weight_matrix w[3];
    for (int m = 0; m < 3; m++) {
        data[m] = random_matrix(types[m], rows[m], cols);
        w[m] = (weight_matrix){types[m], data[m], rows[m], cols, 0, WEIGHT_PLAIN};
        if (m == 0) assert_int_equal(weight_repack(&w[m], data[m]), TR_OK);
    }
    for (size_t ni = 0; ni < 2; ni++) {
        const int64_t n = ns[ni];
        float *x = malloc(sizeof(float) * n * cols), *sep[3], *mul[3];
        for (int64_t i = 0; i < n * cols; i++) x[i] = frand();
        int64_t ldy[3];
        const weight_matrix *wp[3];
        for (int m = 0; m < 3; m++) {
            ldy[m] = rows[m] + 1;
            sep[m] = calloc(n * ldy[m], sizeof(float));
            mul[m] = calloc(n * ldy[m], sizeof(float));
            wp[m] = &w[m];
            assert_int_equal(matmul(tp, &w[m], x, n, sep[m], ldy[m], &sc), TR_OK);
        }
        assert_int_equal(matmul_multi(tp, wp, 3, x, n, mul, ldy, &sc), TR_OK);
        for (int m = 0; m < 3; m++) {
            assert_memory_equal(sep[m], mul[m], sizeof(float) * n * ldy[m]);
            free(sep[m]);
            free(mul[m]);
        }
        free(x);
    }
    /* matrices of different row lengths cannot share an input */
    weight_matrix other = {TR_TYPE_Q8_0, data[2], 16, 256, 0, WEIGHT_PLAIN};
    const weight_matrix *bad[2] = {&w[0], &other};
    float y[16 * 64];
    float *ys[2] = {y, y};
    const int64_t ldys[2] = {64, 16};
    float xx[512] = {0};
    assert_int_equal(matmul_multi(tp, bad, 2, xx, 1, ys, ldys, &sc), TR_ERR_ARG);
    for (int m = 0; m < 3; m++) free(data[m]);
    matmul_scratch_free(&sc);
    thread_pool_free(tp);
}

/* Decode splits the rows of all parts into one contiguous share per thread, claimed piece by piece and stolen in
 * halves by threads that run out: with 2-5 threads (more than the cores, so threads get preempted and steal) every
 * row of every part is written exactly once and equals the one-thread product bit for bit. Parts of several
 * interleaved types with a plain tail (rows past the last group of 16) and a plain one; rows long enough that a
 * share takes many claims. */
static void test_decode_shares_cover_every_row_once(void **state) {
    (void)state;
    enum { N_PARTS = 4 };
    const tr_type types[N_PARTS] = {TR_TYPE_IQ4_NL, TR_TYPE_Q4_0, TR_TYPE_Q8_0, TR_TYPE_IQ4_NL};
    const int64_t rows[N_PARTS] = {1000, 37, 250, 16}, cols = 896;
    const bool repack[N_PARTS] = {true, true, false, true};
    uint8_t *data[N_PARTS];
    weight_matrix w[N_PARTS];
    const weight_matrix *wp[N_PARTS];
    float *want[N_PARTS], *got[N_PARTS];
    int64_t ldy[N_PARTS];
    float *x = malloc(sizeof(float) * 3 * cols);
    for (int64_t i = 0; i < 3 * cols; i++) x[i] = frand();
    matmul_scratch sc = {0};
    for (int m = 0; m < N_PARTS; m++) {
        data[m] = random_matrix(types[m], rows[m], cols);
        w[m] = (weight_matrix){types[m], data[m], rows[m], cols, 0, WEIGHT_PLAIN};
        if (repack[m]) assert_int_equal(weight_repack(&w[m], data[m]), TR_OK);
        wp[m] = &w[m];
        ldy[m] = rows[m] + 2;
        want[m] = malloc(sizeof(float) * 3 * ldy[m]);
        got[m] = malloc(sizeof(float) * 3 * ldy[m]);
    }
    for (int64_t n = 1; n <= 3; n += 2) {
        for (int m = 0; m < N_PARTS; m++)
            for (int64_t i = 0; i < n * ldy[m]; i++) want[m][i] = NAN;
        assert_int_equal(matmul_multi(NULL, wp, N_PARTS, x, n, want, ldy, &sc), TR_OK);
        for (int nth = 2; nth <= 5; nth++) {
            thread_pool *tp = thread_pool_create(nth);
            for (int rep = 0; rep < 20; rep++) {
                for (int m = 0; m < N_PARTS; m++)
                    for (int64_t i = 0; i < n * ldy[m]; i++) got[m][i] = NAN;
                assert_int_equal(matmul_multi(tp, wp, N_PARTS, x, n, got, ldy, &sc), TR_OK);
                for (int m = 0; m < N_PARTS; m++)
                    for (int64_t i = 0; i < n; i++) {
                        for (int64_t r = 0; r < rows[m]; r++)
                            if (memcmp(&got[m][i * ldy[m] + r], &want[m][i * ldy[m] + r], sizeof(float)) != 0)
                                fail_msg("threads=%d n=%lld part %d row %lld: %g, one thread %g", nth, (long long)n, m,
                                         (long long)r, (double)got[m][i * ldy[m] + r], (double)want[m][i * ldy[m] + r]);
                        if (i + 1 < n) /* the padding between token rows stays untouched */
                            for (int64_t r = rows[m]; r < ldy[m]; r++) assert_true(isnan(got[m][i * ldy[m] + r]));
                    }
            }
            thread_pool_free(tp);
        }
    }
    for (int m = 0; m < N_PARTS; m++) {
        free(data[m]);
        free(want[m]);
        free(got[m]);
    }
    free(x);
    matmul_scratch_free(&sc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repack_round_trip),
        cmocka_unit_test(test_repack_refuses),
        cmocka_unit_test(test_repacked_products_equal_plain),
        cmocka_unit_test(test_batched_rows_equal_one_token),
        cmocka_unit_test(test_matmul_multi_equals_separate),
        cmocka_unit_test(test_decode_shares_cover_every_row_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
