/* test_kernels_quants.c — block layouts and row conversion: hand-built blocks decode to the values the ggml layout
 * defines (expected values are computed here straight from the layout description, so a mis-decoded bit fails),
 * quantize→dequantize round trips stay within each type's error, and activation quantizers match llama.cpp's
 * arithmetic exactly. */
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

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}
static float frand(void) { return (float)rnd() / (float)(1u << 24) * 2.0f - 1.0f; }
static void fill_bytes(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
}
static void put_f16(uint8_t *p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static void decode(tr_type t, const void *src, float *dst, int64_t n) {
    assert_int_equal(dequantize_row(t, src, dst, n), TR_OK);
}

static void assert_close(const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++) {
        if (fabsf(got[i] - want[i]) > 1e-6f * (1.0f + fabsf(want[i])))
            fail_msg("element %d: got %g, want %g", i, (double)got[i], (double)want[i]);
    }
}

/* ---------------------------------------------------------------- hand-built blocks */

static void test_q4_0_known_values(void **state) {
    (void)state;
    uint8_t b[18];
    put_f16(b, 0.5f);
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32], want[32];
    for (int j = 0; j < 16; j++) {
        want[j] = (float)(j - 8) * 0.5f;            /* low nibble: element j */
        want[j + 16] = (float)(15 - j - 8) * 0.5f;  /* high nibble: element j + 16 */
    }
    decode(TR_TYPE_Q4_0, b, y, 32);
    assert_close(y, want, 32);
}

static void test_q4_1_known_values(void **state) {
    (void)state;
    uint8_t b[20];
    put_f16(b, 0.25f);
    put_f16(b + 2, -2.0f);
    fill_bytes(b + 4, 16);
    float y[32], want[32];
    for (int j = 0; j < 16; j++) {
        want[j] = (float)(b[4 + j] & 15) * 0.25f - 2.0f;
        want[j + 16] = (float)(b[4 + j] >> 4) * 0.25f - 2.0f;
    }
    decode(TR_TYPE_Q4_1, b, y, 32);
    assert_close(y, want, 32);
}

/* Q5_0/Q5_1: qh is a little-endian u32; bit j is the fifth bit of element j, bit j+16 that of element j+16. */
static void test_q5_known_values(void **state) {
    (void)state;
    uint8_t b0[22], b1[24];
    put_f16(b0, 0.125f);
    b0[2] = 0x55; b0[3] = 0x55; b0[4] = 0xAA; b0[5] = 0xAA; /* qh = 0xAAAA5555 */
    for (int j = 0; j < 16; j++) b0[6 + j] = (uint8_t)(j | (j << 4));
    float y[32], want[32];
    for (int j = 0; j < 16; j++) {
        want[j] = (float)((j | ((j % 2 == 0) << 4)) - 16) * 0.125f;
        want[j + 16] = (float)((j | ((j % 2 == 1) << 4)) - 16) * 0.125f;
    }
    decode(TR_TYPE_Q5_0, b0, y, 32);
    assert_close(y, want, 32);

    put_f16(b1, 0.5f);
    put_f16(b1 + 2, 1.0f);
    fill_bytes(b1 + 4, 20);
    const uint32_t qh = b1[4] | (uint32_t)b1[5] << 8 | (uint32_t)b1[6] << 16 | (uint32_t)b1[7] << 24;
    for (int j = 0; j < 16; j++) {
        want[j] = (float)((b1[8 + j] & 15) | (((qh >> j) & 1) << 4)) * 0.5f + 1.0f;
        want[j + 16] = (float)((b1[8 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) * 0.5f + 1.0f;
    }
    decode(TR_TYPE_Q5_1, b1, y, 32);
    assert_close(y, want, 32);
}

static void test_q8_known_values(void **state) {
    (void)state;
    uint8_t b0[34], b1[36], bk[292];
    put_f16(b0, 0.5f);
    for (int j = 0; j < 32; j++) b0[2 + j] = (uint8_t)(int8_t)(j * 8 - 128);
    float y[256], want[256];
    for (int j = 0; j < 32; j++) want[j] = (float)(j * 8 - 128) * 0.5f;
    decode(TR_TYPE_Q8_0, b0, y, 32);
    assert_close(y, want, 32);

    put_f16(b1, 2.0f);
    put_f16(b1 + 2, 99.0f); /* s does not take part in decoding */
    for (int j = 0; j < 32; j++) b1[4 + j] = (uint8_t)(int8_t)(3 * j - 50);
    for (int j = 0; j < 32; j++) want[j] = (float)(3 * j - 50) * 2.0f;
    decode(TR_TYPE_Q8_1, b1, y, 32);
    assert_close(y, want, 32);

    const float d = 0.01f;
    memcpy(bk, &d, 4);
    fill_bytes(bk + 4, 288);
    for (int j = 0; j < 256; j++) want[j] = (float)(int8_t)bk[4 + j] * d;
    decode(TR_TYPE_Q8_K, bk, y, 256);
    assert_close(y, want, 256);
}

/* ggml's get_scale_min_k4, restated from the layout. */
static void scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void test_q4_k_and_q5_k_layout(void **state) {
    (void)state;
    uint8_t b4[144], b5[176];
    float y[256], want[256];
    for (int trial = 0; trial < 20; trial++) {
        fill_bytes(b4, sizeof b4);
        put_f16(b4, 0.01f);
        put_f16(b4 + 2, 0.02f);
        const uint8_t *sc12 = b4 + 4, *qs = b4 + 16;
        /* Chunk c of 64 elements: sub-block 2c from the low nibbles of qs[32c..32c+31], 2c+1 from the high. */
        for (int e = 0; e < 256; e++) {
            const int c = e / 64, l = e % 32, hi = (e % 64) >= 32, sub = e / 32;
            int sc, m;
            scale_min(sub, sc12, &sc, &m);
            const int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
            want[e] = fp16_to_fp32(fp32_to_fp16(0.01f)) * (float)sc * (float)q -
                      fp16_to_fp32(fp32_to_fp16(0.02f)) * (float)m;
        }
        decode(TR_TYPE_Q4_K, b4, y, 256);
        for (int e = 0; e < 256; e++) assert_true(fabsf(y[e] - want[e]) <= 1e-5f * (1 + fabsf(want[e])));

        fill_bytes(b5, sizeof b5);
        put_f16(b5, 0.03f);
        put_f16(b5 + 2, 0.005f);
        const uint8_t *sc5 = b5 + 4, *qh = b5 + 16, *qs5 = b5 + 48;
        for (int e = 0; e < 256; e++) {
            const int c = e / 64, l = e % 32, hi = (e % 64) >= 32, sub = e / 32;
            int sc, m;
            scale_min(sub, sc5, &sc, &m);
            const int low = hi ? qs5[32 * c + l] >> 4 : qs5[32 * c + l] & 15;
            const int bit = (qh[l] >> (2 * c + hi)) & 1; /* qh[l] bit 2c: first half of chunk c, 2c+1: second */
            want[e] = fp16_to_fp32(fp32_to_fp16(0.03f)) * (float)sc * (float)(low + 16 * bit) -
                      fp16_to_fp32(fp32_to_fp16(0.005f)) * (float)m;
        }
        decode(TR_TYPE_Q5_K, b5, y, 256);
        for (int e = 0; e < 256; e++) assert_true(fabsf(y[e] - want[e]) <= 1e-5f * (1 + fabsf(want[e])));
    }
}

static void test_q6_k_layout(void **state) {
    (void)state;
    uint8_t b[210];
    float y[256], want[256];
    for (int trial = 0; trial < 20; trial++) {
        fill_bytes(b, sizeof b);
        put_f16(b + 208, 0.001f);
        const float d = fp16_to_fp32(fp32_to_fp16(0.001f));
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        /* ggml's loop: per 128-element half n, for l < 32, four values from ql[l], ql[l+32] and qh[l]. */
        for (int n = 0; n < 2; n++) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[64 * n + l] & 0xF) | (((qh[32 * n + l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[64 * n + l + 32] & 0xF) | (((qh[32 * n + l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[64 * n + l] >> 4) | (((qh[32 * n + l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[64 * n + l + 32] >> 4) | (((qh[32 * n + l] >> 6) & 3) << 4)) - 32;
                want[128 * n + l] = d * sc[8 * n + is] * q1;
                want[128 * n + l + 32] = d * sc[8 * n + is + 2] * q2;
                want[128 * n + l + 64] = d * sc[8 * n + is + 4] * q3;
                want[128 * n + l + 96] = d * sc[8 * n + is + 6] * q4;
            }
        }
        decode(TR_TYPE_Q6_K, b, y, 256);
        for (int e = 0; e < 256; e++) assert_true(fabsf(y[e] - want[e]) <= 1e-5f * (1 + fabsf(want[e])));
    }
}

static void test_float_types(void **state) {
    (void)state;
    const uint16_t h[4] = {0x3C00, 0xC000, 0x3555, 0x0001}; /* 1, -2, 0.333..., smallest subnormal */
    const uint16_t bf[3] = {0x3F80, 0xC040, 0x4049};        /* 1, -3, 3.140625 */
    float y[4];
    decode(TR_TYPE_F16, h, y, 4);
    assert_true(y[0] == 1.0f && y[1] == -2.0f && fabsf(y[2] - 0.33325195f) < 1e-7f && y[3] == 0x1p-24f);
    decode(TR_TYPE_BF16, bf, y, 3);
    assert_true(y[0] == 1.0f && y[1] == -3.0f && y[2] == 3.140625f);
}

/* ---------------------------------------------------------------- round trips */

static void test_round_trip_error(void **state) {
    (void)state;
    static const struct { tr_type t; double max_rel_rms; } cases[] = {
        {TR_TYPE_F32, 0.0},    {TR_TYPE_F16, 5e-4},   {TR_TYPE_BF16, 4e-3},  {TR_TYPE_Q8_0, 8e-3},
        {TR_TYPE_Q8_1, 8e-3},  {TR_TYPE_Q8_K, 8e-3},  {TR_TYPE_Q4_0, 0.12},  {TR_TYPE_Q4_1, 0.10},
        {TR_TYPE_Q5_0, 0.06},  {TR_TYPE_Q5_1, 0.05},  {TR_TYPE_Q4_K, 0.12},  {TR_TYPE_Q5_K, 0.06},
        {TR_TYPE_Q6_K, 0.03},  {TR_TYPE_IQ4_NL, 0.12}, {TR_TYPE_IQ4_XS, 0.12}, {TR_TYPE_Q3_K, 0.2},
        {TR_TYPE_Q2_K, 0.35},
    };
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N * 4);
    for (int i = 0; i < N; i++) x[i] = frand() + 0.3f * frand() * (float)(i % 7); /* uneven block ranges */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        assert_int_equal(quantize_row(cases[c].t, x, q, N), TR_OK);
        decode(cases[c].t, q, y, N);
        double err = 0, ref = 0;
        for (int i = 0; i < N; i++) {
            err += (double)(y[i] - x[i]) * (y[i] - x[i]);
            ref += (double)x[i] * x[i];
        }
        const double rel = sqrt(err / ref);
        if (rel > cases[c].max_rel_rms)
            fail_msg("%s: relative RMS error %g above %g", tr_type_name(cases[c].t), rel, cases[c].max_rel_rms);
        /* a quantizer that does nothing useful would pass the bound with zeros only if x were zero */
        if (cases[c].t != TR_TYPE_F32) assert_true(rel > 0.0);
    }
    /* All-zero rows quantize to zeros (no division by a zero scale). */
    memset(x, 0, N * sizeof *x);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        assert_int_equal(quantize_row(cases[c].t, x, q, N), TR_OK);
        decode(cases[c].t, q, y, N);
        for (int i = 0; i < N; i++) assert_true(y[i] == 0.0f);
    }
    free(x);
    free(y);
    free(q);
}

/* ---------------------------------------------------------------- activation quantizers */

static void test_q8_0_and_q8_1_match_llama_cpp(void **state) {
    (void)state;
    float x[128];
    uint8_t q0[4 * 34], q1[4 * 36];
    for (int i = 0; i < 128; i++) x[i] = frand() * (1.0f + (float)(i / 32));
    x[5] = -7.5f; /* the block's extreme is negative */
    assert_int_equal(quantize_row(TR_TYPE_Q8_0, x, q0, 128), TR_OK);
    assert_int_equal(quantize_row(TR_TYPE_Q8_1, x, q1, 128), TR_OK);
    for (int b = 0; b < 4; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const uint16_t d = fp32_to_fp16(amax / 127.0f);
        assert_int_equal(q0[34 * b] | q0[34 * b + 1] << 8, d);
        assert_int_equal(q1[36 * b] | q1[36 * b + 1] << 8, d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            const int want = (int)rintf(x[32 * b + j] * (127.0f / amax));
            assert_int_equal((int8_t)q0[34 * b + 2 + j], want);
            assert_int_equal((int8_t)q1[36 * b + 4 + j], want);
            sum += want;
        }
        assert_int_equal(q1[36 * b + 2] | q1[36 * b + 3] << 8, fp32_to_fp16((amax / 127.0f) * (float)sum));
        if (b == 0) assert_int_equal((int8_t)q0[2 + 5], -127);
    }
}

static void test_q8_k_matches_ggml_reference(void **state) {
    (void)state;
    float x[512];
    uint8_t q[2 * 292];
    for (int i = 0; i < 512; i++) x[i] = frand() * 3.0f;
    x[300] = 9.0f; /* positive extreme in block 1: iscale = -127/9 so it maps to -127 */
    assert_int_equal(quantize_row(TR_TYPE_Q8_K, x, q, 512), TR_OK);
    for (int b = 0; b < 2; b++) {
        float amax = 0, max = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(x[256 * b + j]) > amax) {
                amax = fabsf(x[256 * b + j]);
                max = x[256 * b + j];
            }
        const float iscale = -127.0f / max;
        float d;
        memcpy(&d, q + 292 * b, 4);
        assert_true(d == 1.0f / iscale);
        const int8_t *qs = (const int8_t *)(q + 292 * b + 4);
        for (int j = 0; j < 256; j++) {
            int want = (int)rintf(iscale * x[256 * b + j]);
            if (want > 127) want = 127;
            assert_int_equal(qs[j], want);
        }
        for (int g = 0; g < 16; g++) {
            int16_t bs;
            memcpy(&bs, q + 292 * b + 260 + 2 * g, 2);
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += qs[16 * g + l];
            assert_int_equal(bs, sum);
        }
    }
    assert_int_equal((int8_t)q[292 + 4 + 300 - 256], -127);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_0_known_values),
        cmocka_unit_test(test_q4_1_known_values),
        cmocka_unit_test(test_q5_known_values),
        cmocka_unit_test(test_q8_known_values),
        cmocka_unit_test(test_q4_k_and_q5_k_layout),
        cmocka_unit_test(test_q6_k_layout),
        cmocka_unit_test(test_float_types),
        cmocka_unit_test(test_round_trip_error),
        cmocka_unit_test(test_q8_0_and_q8_1_match_llama_cpp),
        cmocka_unit_test(test_q8_k_matches_ggml_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
