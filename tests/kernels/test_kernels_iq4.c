/* test_kernels_iq4.c — IQ4_NL and IQ4_XS: hand-built blocks decode to the values ggml's layout defines (the table
 * and the bit positions are written out here from ggml-common.h / ggml-quants.c, so a mis-placed bit fails), the
 * quantizer's error stays below Q4_0's on the same data and its scale search beats the plain extreme-to-end scale,
 * and the type facts (ids, block sizes, activation format) are ggml's. Products on every instruction set are in
 * test_kernels_matmul.c / test_kernels_repack.c; decoding files written by llama.cpp in
 * tests/model/test_model_quants_llamacpp.c. */
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

/* ggml's kvalues_iq4nl */
static const int LEVELS[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static uint32_t rng_state = 999;
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
    assert_int_equal(TR_TYPE_IQ4_NL, 20); /* ggml_type ids, as GGUF files store them */
    assert_int_equal(TR_TYPE_IQ4_XS, 23);
    assert_string_equal(tr_type_name(TR_TYPE_IQ4_NL), "iq4_nl");
    assert_string_equal(tr_type_name(TR_TYPE_IQ4_XS), "iq4_xs");
    tr_type t;
    assert_int_equal(tr_type_from_name("IQ4_XS", &t), TR_OK);
    assert_int_equal(t, TR_TYPE_IQ4_XS);
    assert_int_equal(tr_type_block_elems(TR_TYPE_IQ4_NL), 32);
    assert_int_equal(tr_type_block_bytes(TR_TYPE_IQ4_NL), 18);
    assert_int_equal(tr_type_block_elems(TR_TYPE_IQ4_XS), 256);
    assert_int_equal(tr_type_block_bytes(TR_TYPE_IQ4_XS), 136);
    assert_true(tr_type_supported(TR_TYPE_IQ4_NL) && tr_type_supported(TR_TYPE_IQ4_XS));
    assert_int_equal(type_vec_dot_type(TR_TYPE_IQ4_NL), TR_TYPE_Q8_0);
    assert_int_equal(type_vec_dot_type(TR_TYPE_IQ4_XS), TR_TYPE_Q8_K);
    assert_int_equal(type_row_bytes(TR_TYPE_IQ4_NL, 896), 28 * 18);
    assert_int_equal(type_row_bytes(TR_TYPE_IQ4_XS, 4864), 19 * 136);
    assert_true(weight_x16_type(TR_TYPE_IQ4_NL) && weight_x16_type(TR_TYPE_IQ4_XS));
}

static void test_iq4_nl_known_values(void **state) {
    (void)state;
    uint8_t b[2 * 18];
    put_f16(b, 0.25f);
    put_f16(b + 18, -3.0f);
    for (int j = 0; j < 16; j++) {
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
        b[20 + j] = (uint8_t)(((j * 7) & 15) | (((j * 5 + 3) & 15) << 4));
    }
    float y[64], want[64];
    for (int j = 0; j < 16; j++) {
        want[j] = 0.25f * (float)LEVELS[j];                 /* low nibble: element j */
        want[j + 16] = 0.25f * (float)LEVELS[15 - j];       /* high nibble: element j + 16 */
        want[32 + j] = -3.0f * (float)LEVELS[(j * 7) & 15];
        want[48 + j] = -3.0f * (float)LEVELS[(j * 5 + 3) & 15];
    }
    assert_int_equal(dequantize_row(TR_TYPE_IQ4_NL, b, y, 64), TR_OK);
    for (int i = 0; i < 64; i++) assert_true(y[i] == want[i]);
    assert_int_equal(dequantize_row(TR_TYPE_IQ4_NL, b, y, 48), TR_ERR_ARG); /* not whole blocks */
}

/* Sub-block scales of every value 0..63 across blocks, packed as ggml does: low 4 bits in nibble s%2 of
 * scales_l[s/2], high 2 bits in bits 2s..2s+1 of the little-endian u16 scales_h. */
static void test_iq4_xs_known_values(void **state) {
    (void)state;
    enum { NB = 8 };
    uint8_t *b = calloc(NB, 136);
    float *y = malloc(sizeof(float) * 256 * NB), *want = malloc(sizeof(float) * 256 * NB);
    for (int k = 0; k < NB; k++) {
        uint8_t *blk = b + 136 * k;
        const float d = k % 2 ? 0.5f : -0.0625f;
        put_f16(blk, d);
        uint16_t sh = 0;
        for (int s = 0; s < 8; s++) {
            const int ls = (8 * k + s * 9) % 64; /* all 64 values over the 8 blocks */
            blk[4 + s / 2] |= (uint8_t)((ls & 15) << (4 * (s % 2)));
            sh |= (uint16_t)((ls >> 4) << (2 * s));
            for (int j = 0; j < 16; j++) {
                const int lo = (int)(rnd() & 15), hi = (int)(rnd() & 15);
                blk[8 + 16 * s + j] = (uint8_t)(lo | hi << 4);
                want[256 * k + 32 * s + j] = d * (float)(ls - 32) * (float)LEVELS[lo];
                want[256 * k + 32 * s + 16 + j] = d * (float)(ls - 32) * (float)LEVELS[hi];
            }
        }
        blk[2] = (uint8_t)sh;
        blk[3] = (uint8_t)(sh >> 8);
    }
    assert_int_equal(dequantize_row(TR_TYPE_IQ4_XS, b, y, 256 * NB), TR_OK);
    for (int i = 0; i < 256 * NB; i++)
        if (fabsf(y[i] - want[i]) > 1e-6f * (1 + fabsf(want[i]))) fail_msg("element %d: %g, want %g", i, y[i], want[i]);
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

/* The non-linear levels with a searched scale fit bell-shaped weights better than Q4_0's even steps; IQ4_XS's
 * 6-bit sub-block scales cost little over IQ4_NL's F16 ones. */
static void test_quantizer_error(void **state) {
    (void)state;
    enum { N = 8192 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N);
    for (int i = 0; i < N; i++) x[i] = (frand() + frand() + frand()) * (1.0f + (float)((i / 32) % 5)); /* bell-shaped */
    assert_int_equal(quantize_row(TR_TYPE_Q4_0, x, q, N), TR_OK);
    assert_int_equal(dequantize_row(TR_TYPE_Q4_0, q, y, N), TR_OK);
    const double e_q4_0 = rel_rms(y, x, N);
    assert_int_equal(quantize_row(TR_TYPE_IQ4_NL, x, q, N), TR_OK);
    assert_int_equal(dequantize_row(TR_TYPE_IQ4_NL, q, y, N), TR_OK);
    const double e_nl = rel_rms(y, x, N);
    assert_int_equal(quantize_row(TR_TYPE_IQ4_XS, x, q, N), TR_OK);
    assert_int_equal(dequantize_row(TR_TYPE_IQ4_XS, q, y, N), TR_OK);
    const double e_xs = rel_rms(y, x, N);
    print_message("relative RMS error: Q4_0 %.4f, IQ4_NL %.4f, IQ4_XS %.4f\n", e_q4_0, e_nl, e_xs);
    assert_true(e_nl > 0 && e_nl < e_q4_0);
    assert_true(e_xs > 0 && e_xs < 1.1 * e_nl);

    /* all-zero and tiny rows quantize to zeros, never NaN */
    memset(x, 0, N * sizeof *x);
    x[7] = 1e-30f;
    for (int t = 0; t < 2; t++) {
        const tr_type type = t ? TR_TYPE_IQ4_XS : TR_TYPE_IQ4_NL;
        assert_int_equal(quantize_row(type, x, q, N), TR_OK);
        assert_int_equal(dequantize_row(type, q, y, N), TR_OK);
        for (int i = 0; i < N; i++) assert_true(fabsf(y[i]) <= 1e-29f);
    }
    free(x);
    free(y);
    free(q);
}

/* A block whose values are exactly levels times a scale quantizes without loss: the search finds that scale. */
static void test_exact_levels_round_trip(void **state) {
    (void)state;
    float x[256], y[256];
    uint8_t q[136];
    for (int j = 0; j < 32; j++) x[j] = 0.125f * (float)LEVELS[(j * 11 + 3) & 15];
    x[5] = 0.125f * -127.0f; /* the extreme is on the table's end */
    assert_int_equal(quantize_row(TR_TYPE_IQ4_NL, x, q, 32), TR_OK);
    assert_int_equal(dequantize_row(TR_TYPE_IQ4_NL, q, y, 32), TR_OK);
    for (int j = 0; j < 32; j++) assert_true(fabsf(y[j] - x[j]) <= 1e-3f * fabsf(x[j]));
    /* IQ4_XS: sub-block scales -32..31 times d; here sub-block s uses (s - 4) * d with d = 2^-6 */
    for (int s = 0; s < 8; s++)
        for (int j = 0; j < 32; j++) x[32 * s + j] = 0.015625f * (float)(s == 4 ? -32 : s - 4) * (float)LEVELS[(j * 7 + s) & 15];
    assert_int_equal(quantize_row(TR_TYPE_IQ4_XS, x, q, 256), TR_OK);
    assert_int_equal(dequantize_row(TR_TYPE_IQ4_XS, q, y, 256), TR_OK);
    for (int j = 0; j < 256; j++) assert_true(fabsf(y[j] - x[j]) <= 1e-3f * fabsf(x[j]) + 1e-6f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_facts),
        cmocka_unit_test(test_iq4_nl_known_values),
        cmocka_unit_test(test_iq4_xs_known_values),
        cmocka_unit_test(test_quantizer_error),
        cmocka_unit_test(test_exact_levels_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
