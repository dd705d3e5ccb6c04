/* test_kernels_attn_scores.c — the attention's QK product against an F16 cache (kernels/attn_scores.h): which head
 * shapes get the kernel, its scores against a float64 reference over the decoded K rows (head sizes 64, 128, 256;
 * position counts on and off the 16-position blocks), and the property the engine relies on: a score's bits do not
 * depend on how many rows or positions are computed with it, nor on the threads (decode, prefill and batched passes
 * call it with different shapes and must agree). And the matrix products' tiles with 1-3 tokens left over: the
 * same bits as one token at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_scores.h"
#include "kernels/fp16.h"
#include "kernels/kernels.h"

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static void test_which_shapes(void **unused) {
    (void)unused;
    const char *const initial = kernels_isa();
    if (kernels_isa_available("avx512")) {
        assert_int_equal(kernels_force_isa("avx512"), TR_OK);
        assert_ptr_equal(attn_scores_for(64, 7), attn_scores_f16_avx512); /* qwen2.5-0.5b */
        assert_ptr_equal(attn_scores_for(64, 8), attn_scores_f16_avx512);
        assert_ptr_equal(attn_scores_for(128, 14), attn_scores_f16_avx512);
    }
    assert_null(attn_scores_for(64, 4));   /* llama 3.2 1B: too few rows per decoded token */
    assert_null(attn_scores_for(128, 6));  /* qwen2.5-1.5b */
    assert_null(attn_scores_for(256, 4));  /* gemma3-1b */
    assert_null(attn_scores_for(8, 8));    /* stories260K: not a multiple of 16 */
    assert_null(attn_scores_for(512, 64)); /* above ATTN_SCORES_HD_MAX */
    if (kernels_isa_available("avx2")) {
        assert_int_equal(kernels_force_isa("avx2"), TR_OK);
        assert_null(attn_scores_for(64, 7));
    }
    assert_int_equal(kernels_force_isa(initial), TR_OK);
}

typedef struct {
    uint16_t *K;
    float *q;
} inputs;

static inputs make_inputs(int32_t n_pos, int32_t hd, int32_t rows, uint32_t seed) {
    inputs in = {malloc(sizeof(uint16_t) * (size_t)n_pos * (size_t)hd), malloc(sizeof(float) * (size_t)rows * hd)};
    for (int64_t i = 0; i < (int64_t)n_pos * hd; i++) in.K[i] = fp32_to_fp16(2.0f * frand(&seed));
    for (int64_t i = 0; i < (int64_t)rows * hd; i++) in.q[i] = frand(&seed);
    return in;
}

static void test_against_float64(void **unused) {
    (void)unused;
    if (!kernels_isa_available("avx512")) { /* the kernel runs nowhere else: the engine uses the matrix product */
        assert_null(attn_scores_for(64, 7));
        return;
    }
    const int32_t hds[] = {64, 128, 256}, positions[] = {1, 15, 16, 17, 70}, row_counts[] = {1, 7, 8, 63};
    for (size_t h = 0; h < 3; h++)
        for (size_t p = 0; p < 5; p++)
            for (size_t r = 0; r < 4; r++) {
                const int32_t hd = hds[h], n_pos = positions[p], rows = row_counts[r], ldy = n_pos + 3;
                inputs in = make_inputs(n_pos, hd, rows, (uint32_t)(hd * 131 + n_pos * 7 + rows));
                float *scores = malloc(sizeof(float) * (size_t)rows * (size_t)ldy);
                for (int64_t i = 0; i < (int64_t)rows * ldy; i++) scores[i] = -7.0f; /* the gaps stay untouched */
                attn_scores_f16_avx512(in.K, (size_t)hd * 2, n_pos, hd, in.q, rows, scores, ldy);
                for (int32_t i = 0; i < rows; i++) {
                    for (int32_t j = 0; j < n_pos; j++) {
                        double sum = 0, mag = 0;
                        for (int32_t d = 0; d < hd; d++) {
                            const double t = (double)in.q[i * hd + d] * fp16_to_fp32(in.K[j * hd + d]);
                            sum += t;
                            mag += fabs(t);
                        }
                        assert_true(fabs(scores[i * ldy + j] - sum) <= 1e-6 * mag + 1e-30);
                    }
                    for (int32_t j = n_pos; j < ldy; j++) assert_true(scores[i * ldy + j] == -7.0f);
                }
                free(scores);
                free(in.K);
                free(in.q);
            }
}

/* The same score, bit for bit, from one row alone, one position alone, a run starting at any position, and the
 * positions shared among 2 or 3 threads. */
static void test_bits_do_not_depend_on_the_shape(void **unused) {
    (void)unused;
    if (!kernels_isa_available("avx512")) {
        assert_null(attn_scores_for(64, 7));
        return;
    }
    enum { HD = 64, N_POS = 203, ROWS = 63 };
    inputs in = make_inputs(N_POS, HD, ROWS, 5);
    float *all = malloc(sizeof(float) * ROWS * N_POS), *part = malloc(sizeof(float) * ROWS * N_POS);
    attn_scores_f16_avx512(in.K, HD * 2, N_POS, HD, in.q, ROWS, all, N_POS);
    for (int32_t i = 0; i < ROWS; i += 5) { /* a row alone */
        attn_scores_f16_avx512(in.K, HD * 2, N_POS, HD, in.q + i * HD, 1, part, N_POS);
        assert_memory_equal(part, all + i * N_POS, sizeof(float) * N_POS);
    }
    for (int32_t from = 0; from < N_POS; from += 37) { /* positions from an unaligned start */
        attn_scores_f16_avx512(in.K + from * HD, HD * 2, N_POS - from, HD, in.q, ROWS, part, N_POS);
        for (int32_t i = 0; i < ROWS; i++)
            assert_memory_equal(part + i * N_POS, all + i * N_POS + from, sizeof(float) * (size_t)(N_POS - from));
    }
    for (int nth = 2; nth <= 3; nth++) {
        thread_pool *tp = thread_pool_create(nth);
        assert_non_null(tp);
        memset(part, 0, sizeof(float) * ROWS * N_POS);
        attn_scores_run(tp, attn_scores_f16_avx512, in.K, HD * 2, N_POS, HD, in.q, ROWS, part, N_POS);
        assert_memory_equal(part, all, sizeof(float) * ROWS * N_POS);
        thread_pool_free(tp);
    }
    free(all);
    free(part);
    free(in.K);
    free(in.q);
}

/* F16 and F32 products of 5, 6 and 7 tokens (full tiles of 4, then 1, 2 or 3 left over) give each token the bits it
 * gets alone, on every instruction set here. */
static void test_tile_edges_match_one_token(void **unused) {
    (void)unused;
    const char *const initial = kernels_isa();
    const char *const isas[] = {"scalar", "avx2", "avx512", "neon"};
    enum { ROWS = 37, COLS = 64 };
    uint32_t seed = 11;
    uint16_t *w16 = malloc(sizeof(uint16_t) * ROWS * COLS);
    float *w32 = malloc(sizeof(float) * ROWS * COLS), *x = malloc(sizeof(float) * 7 * COLS);
    float *y = malloc(sizeof(float) * 7 * ROWS), *one = malloc(sizeof(float) * ROWS);
    for (int i = 0; i < ROWS * COLS; i++) w32[i] = fp16_to_fp32(w16[i] = fp32_to_fp16(frand(&seed)));
    for (int i = 0; i < 7 * COLS; i++) x[i] = frand(&seed);
    for (size_t s = 0; s < 4; s++) {
        if (!kernels_isa_available(isas[s])) continue;
        assert_int_equal(kernels_force_isa(isas[s]), TR_OK);
        for (int t = 0; t < 2; t++) {
            const weight_matrix w = {t ? TR_TYPE_F32 : TR_TYPE_F16, t ? (const void *)w32 : (const void *)w16, ROWS,
                                     COLS, 0, WEIGHT_PLAIN};
            matmul_scratch none = {0};
            for (int64_t n = 5; n <= 7; n++) {
                assert_int_equal(matmul(NULL, &w, x, n, y, ROWS, &none), TR_OK);
                for (int64_t i = 0; i < n; i++) {
                    assert_int_equal(matmul(NULL, &w, x + i * COLS, 1, one, ROWS, &none), TR_OK);
                    assert_memory_equal(one, y + i * ROWS, sizeof(float) * ROWS);
                }
            }
        }
    }
    assert_int_equal(kernels_force_isa(initial), TR_OK);
    free(w16);
    free(w32);
    free(x);
    free(y);
    free(one);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_which_shapes),
        cmocka_unit_test(test_against_float64),
        cmocka_unit_test(test_bits_do_not_depend_on_the_shape),
        cmocka_unit_test(test_tile_edges_match_one_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
