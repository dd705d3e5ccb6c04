/* test_kernels_k23.c — Q2_K and Q3_K: hand-built blocks decode to the values ggml's layout defines (bit positions
 * written out here from ggml-common.h / dequantize_row_q2_K / dequantize_row_q3_K, so a misplaced bit fails), the
 * quantizers' error is ordered as the bit widths are and stays finite on degenerate rows, products with Q8_K
 * activations match the decoded rows, and the type facts (ids, block sizes, activation format) are ggml's.
 * Products on every instruction set, plain and repacked, are in test_kernels_matmul.c / test_kernels_repack.c;
 * files written by llama.cpp in tests/model/test_model_quants_llamacpp.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels.h"
#include "kernels/types.h"

static uint32_t rng_state = 4242;
static uint32_t rnd(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}
static float frand(void) { return (float)rnd() / (float)(1u << 24) * 2.0f - 1.0f; }

static void put_f16(uint8_t *p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static void test_type_facts(void **state) {
    (void)state;
    assert_int_equal(TR_TYPE_Q2_K, 10); /* ggml_type ids, as GGUF files store them */
    assert_int_equal(TR_TYPE_Q3_K, 11);
    assert_string_equal(tr_type_name(TR_TYPE_Q2_K), "q2_k");
    assert_string_equal(tr_type_name(TR_TYPE_Q3_K), "q3_k");
    tr_type t;
    assert_int_equal(tr_type_from_name("Q3_K", &t), TR_OK);
    assert_int_equal(t, TR_TYPE_Q3_K);
    assert_int_equal(tr_type_block_elems(TR_TYPE_Q2_K), 256);
    assert_int_equal(tr_type_block_bytes(TR_TYPE_Q2_K), 84);
    assert_int_equal(tr_type_block_elems(TR_TYPE_Q3_K), 256);
    assert_int_equal(tr_type_block_bytes(TR_TYPE_Q3_K), 110);
    assert_true(tr_type_supported(TR_TYPE_Q2_K) && tr_type_supported(TR_TYPE_Q3_K));
    assert_int_equal(type_vec_dot_type(TR_TYPE_Q2_K), TR_TYPE_Q8_K);
    assert_int_equal(type_vec_dot_type(TR_TYPE_Q3_K), TR_TYPE_Q8_K);
    assert_int_equal(type_row_bytes(TR_TYPE_Q3_K, 4864), 19 * 110);
    assert_true(weight_x16_type(TR_TYPE_Q2_K) && weight_x16_type(TR_TYPE_Q3_K));
}

/* Q2_K block: scales[16] at 0, qs[64] at 16, d at 80, dmin at 82. Element e = 128n + 32j + l is bits 2j..2j+1 of
 * qs[32n + l]; its sub-block is e / 16 with scale scales[e/16] & 15 and min scales[e/16] >> 4; value
 * d * scale * q - dmin * min. */
static void test_q2_k_known_values(void **state) {
    (void)state;
    enum { NB = 4 };
    uint8_t *b = calloc(NB, 84);
    float *y = malloc(sizeof(float) * 256 * NB), *want = malloc(sizeof(float) * 256 * NB);
    for (int k = 0; k < NB; k++) {
        uint8_t *blk = b + 84 * k;
        const float d = k % 2 ? 0.75f : -0.125f, dmin = k < 2 ? 0.5f : -2.0f;
        put_f16(blk + 80, d);
        put_f16(blk + 82, dmin);
        for (int s = 0; s < 16; s++) blk[s] = (uint8_t)(((s + 5 * k) & 15) | (((3 * s + k) & 15) << 4));
        for (int e = 0; e < 256; e++) {
            const int q = (int)(rnd() & 3), n = e / 128, j = (e % 128) / 32, l = e % 32;
            blk[16 + 32 * n + l] |= (uint8_t)(q << (2 * j));
            const int s = e / 16;
            want[256 * k + e] = d * (float)((s + 5 * k) & 15) * (float)q - dmin * (float)((3 * s + k) & 15);
        }
    }
    assert_int_equal(dequantize_row(TR_TYPE_Q2_K, b, y, 256 * NB), TR_OK);
    for (int i = 0; i < 256 * NB; i++)
        if (fabsf(y[i] - want[i]) > 1e-5f * (1 + fabsf(want[i]))) fail_msg("element %d: %g, want %g", i, y[i], want[i]);
    assert_int_equal(dequantize_row(TR_TYPE_Q2_K, b, y, 128), TR_ERR_ARG); /* not whole blocks */
    free(b);
    free(y);
    free(want);
}

/* Q3_K block: hmask[32] at 0, qs[64] at 32, scales[12] at 96, d at 108. Element e = 128n + 32j + l: low bits as
 * Q2_K, minus 4 unless bit 4n + j of hmask[l] is set. The 6-bit scale of sub-block s (biased by 32): low 4 bits in
 * the low nibble of scales[s] (s < 8) or the high nibble of scales[s - 8], top 2 bits at bits 2(s/4) of
 * scales[8 + s%4]. */
static void test_q3_k_known_values(void **state) {
    (void)state;
    enum { NB = 4 };
    uint8_t *b = calloc(NB, 110);
    float *y = malloc(sizeof(float) * 256 * NB), *want = malloc(sizeof(float) * 256 * NB);
    for (int k = 0; k < NB; k++) {
        uint8_t *blk = b + 110 * k;
        const float d = k % 2 ? 0.5f : -0.0625f;
        put_f16(blk + 108, d);
        int sc[16];
        for (int s = 0; s < 16; s++) {
            sc[s] = (16 * k + s * 5) % 64; /* all 64 values over the 4 blocks */
            blk[96 + s % 8] |= (uint8_t)((sc[s] & 15) << (s < 8 ? 0 : 4));
            blk[96 + 8 + s % 4] |= (uint8_t)((sc[s] >> 4) << (2 * (s / 4)));
        }
        for (int e = 0; e < 256; e++) {
            const int lo = (int)(rnd() & 3), hb = (int)(rnd() & 1), n = e / 128, j = (e % 128) / 32, l = e % 32;
            blk[32 + 32 * n + l] |= (uint8_t)(lo << (2 * j));
            blk[l] |= (uint8_t)(hb << (4 * n + j));
            want[256 * k + e] = d * (float)(sc[e / 16] - 32) * (float)(lo - (hb ? 0 : 4));
        }
    }
    assert_int_equal(dequantize_row(TR_TYPE_Q3_K, b, y, 256 * NB), TR_OK);
    for (int i = 0; i < 256 * NB; i++)
        if (fabsf(y[i] - want[i]) > 1e-5f * (1 + fabsf(want[i]))) fail_msg("element %d: %g, want %g", i, y[i], want[i]);
    free(b);
    free(y);
    free(want);
}

static double rel_rms(const float *a, const float *b, int n) {
    double e = 0, r = 0;
    for (int i = 0; i < n; i++) {
        e += (double)(a[i] - b[i]) * (a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(e / r);
}

static double round_trip(tr_type t, const float *x, float *y, uint8_t *q, int n) {
    assert_int_equal(quantize_row(t, x, q, n), TR_OK);
    assert_int_equal(dequantize_row(t, q, y, n), TR_OK);
    return rel_rms(y, x, n);
}

/* Error grows as bits shrink (Q4_K > Q3_K > Q2_K in bits); degenerate rows stay finite and zero stays zero. */
static void test_quantizer_error(void **state) {
    (void)state;
    enum { N = 8192 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N);
    for (int i = 0; i < N; i++) x[i] = (frand() + frand() + frand()) * (1.0f + (float)((i / 16) % 5)); /* bell-shaped */
    const double e4 = round_trip(TR_TYPE_Q4_K, x, y, q, N), e3 = round_trip(TR_TYPE_Q3_K, x, y, q, N);
    const double e2 = round_trip(TR_TYPE_Q2_K, x, y, q, N);
    print_message("relative RMS error: Q4_K %.4f, Q3_K %.4f, Q2_K %.4f\n", e4, e3, e2);
    assert_true(e4 < e3 && e3 < e2);
    assert_true(e3 > 0.05 && e3 < 0.2 && e2 < 0.4);

    /* zero rows, one tiny value, one huge value, constant rows */
    for (int t = 0; t < 2; t++) {
        const tr_type type = t ? TR_TYPE_Q3_K : TR_TYPE_Q2_K;
        memset(x, 0, N * sizeof *x);
        x[7] = 1e-30f;
        round_trip(type, x, y, q, N);
        for (int i = 0; i < N; i++) assert_true(fabsf(y[i]) <= 1e-29f);
        x[300] = 60000.0f;
        for (int i = 512; i < 768; i++) x[i] = 3.5f;
        round_trip(type, x, y, q, N);
        for (int i = 0; i < N; i++) assert_true(isfinite(y[i]));
        assert_true(fabsf(y[300] - 60000.0f) < 0.05f * 60000.0f);
        for (int i = 512; i < 768; i++) assert_true(fabsf(y[i] - 3.5f) < 0.1f);
    }
    free(x);
    free(y);
    free(q);
}

/* The portable dot product with Q8_K activations equals the decoded weights times the decoded activations (the
 * SIMD tiles are held to the same reference in test_kernels_matmul.c), including scales at the F16 extremes. */
static void test_dot_matches_decoded(void **state) {
    (void)state;
    enum { N = 1024 };
    float *w = malloc(N * sizeof *w), *x = malloc(N * sizeof *x), *wd = malloc(N * sizeof *wd), *xd = malloc(N * sizeof *xd);
    uint8_t *wq = malloc(N), *xq = malloc(2 * N);
    for (int t = 0; t < 2; t++) {
        const tr_type type = t ? TR_TYPE_Q3_K : TR_TYPE_Q2_K;
        for (int i = 0; i < N; i++) {
            w[i] = frand() * (i < 256 ? 1e-3f : 1.0f);
            x[i] = frand();
        }
        assert_int_equal(quantize_row(type, w, wq, N), TR_OK);
        assert_int_equal(quantize_row(TR_TYPE_Q8_K, x, xq, N), TR_OK);
        assert_int_equal(dequantize_row(type, wq, wd, N), TR_OK);
        assert_int_equal(dequantize_row(TR_TYPE_Q8_K, xq, xd, N), TR_OK);
        double ref = 0, mag = 0;
        for (int i = 0; i < N; i++) {
            ref += (double)wd[i] * xd[i];
            mag += fabs((double)wd[i] * xd[i]);
        }
        weight_matrix m = {.type = type, .data = wq, .rows = 1, .cols = N};
        matmul_scratch sc = {0};
        float y;
        assert_int_equal(matmul(NULL, &m, x, 1, &y, 1, &sc), TR_OK);
        matmul_scratch_free(&sc);
        if (fabs(y - ref) > 1e-5 * mag) fail_msg("%s: %g vs %g", tr_type_name(type), (double)y, ref);
    }
    free(w); free(x); free(wd); free(xd); free(wq); free(xq);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_facts),         cmocka_unit_test(test_q2_k_known_values),
        cmocka_unit_test(test_q3_k_known_values),  cmocka_unit_test(test_quantizer_error),
        cmocka_unit_test(test_dot_matches_decoded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
