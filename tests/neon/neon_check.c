/* neon_check.c — run under qemu-aarch64 by scripts/check-neon.sh: every weight type's matrix product on the NEON
 * path agrees with the portable scalar path and with a float64 reference, for a single token and a small batch,
 * on one and two threads. A standalone program (no cmocka for arm64): prints one line per case, exits 1 on any
 * disagreement. Built with -DCHECK_ISA='"simd128"' by emcc, the same checks run the WebAssembly SIMD128 kernels
 * under node (scripts/check-portable.sh). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kv_q8.h"

#ifndef CHECK_ISA
#define CHECK_ISA "neon"
#endif

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* Largest |a-b| / (sum |w*x| of the row), over all outputs. */
static double worst_error(const float *a, const float *b, const double *mag, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - (double)b[i]) / (mag[i] + 1e-6);
        if (e > worst) worst = e;
    }
    return worst;
}

/* 15 blocks of 32 where the block is 32 (a count that is not a multiple of 4: the tiles' leftover blocks run),
 * 2 super-blocks of 256 for the K-quants and IQ4_XS. */
static int64_t check_cols(tr_type t) {
    switch (t) {
    case TR_TYPE_Q4_K: case TR_TYPE_Q5_K: case TR_TYPE_Q6_K: case TR_TYPE_Q2_K: case TR_TYPE_Q3_K: case TR_TYPE_IQ4_XS:
        return 512;
    default: return 480;
    }
}

/* wscale scales the weights: 1e-3 makes the 32-block types' F16 scales subnormal halves (about 8e-6 < 2^-14). */
static int check_type(tr_type t, int64_t n, int threads, float wscale) {
    const int64_t rows = 37, cols = check_cols(t);
    const size_t rb = type_row_bytes(t, cols);
    uint8_t *w = malloc(rb * rows);
    float *wf = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * n * cols);
    float *ys = malloc(sizeof(float) * n * rows), *yn = malloc(sizeof(float) * n * rows);
    float *yr = malloc(sizeof(float) * n * rows);
    double *mag = malloc(sizeof(double) * n * rows);
    for (int64_t i = 0; i < rows * cols; i++) wf[i] = wscale * frand();
    for (int64_t r = 0; r < rows; r++) {
        quantize_row(t, wf + r * cols, w + r * rb, cols);
        dequantize_row(t, w + r * rb, wf + r * cols, cols);
    }
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand();
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0, m = 0;
            for (int64_t k = 0; k < cols; k++) {
                s += (double)wf[r * cols + k] * x[i * cols + k];
                m += fabs((double)wf[r * cols + k] * x[i * cols + k]);
            }
            yr[i * rows + r] = (float)s;
            mag[i * rows + r] = m;
        }
    thread_pool *tp = thread_pool_create(threads);
    matmul_scratch sc = {0};
    const weight_matrix wm = {t, w, rows, cols, 0, WEIGHT_PLAIN};
    kernels_force_isa("scalar");
    tr_status s1 = matmul(tp, &wm, x, n, ys, rows, &sc);
    kernels_force_isa(CHECK_ISA);
    tr_status s2 = matmul(tp, &wm, x, n, yn, rows, &sc);
    const double vs_scalar = worst_error(yn, ys, mag, n * rows), vs_ref = worst_error(yn, yr, mag, n * rows);
    /* The interleaved layout (repack.c), where NEON has a tile for it: the same products as the plain rows. */
    double vs_plain = 0;
    tr_status s3 = TR_OK;
    const char *layout = "plain";
    weight_matrix wx = wm;
    if (weight_repack_wanted(&wx)) {
        uint8_t *packed = malloc(rb * rows);
        float *yx = malloc(sizeof(float) * n * rows);
        s3 = weight_repack(&wx, packed);
        if (s3 == TR_OK) s3 = matmul(tp, &wx, x, n, yx, rows, &sc);
        vs_plain = worst_error(yx, yn, mag, n * rows);
        layout = "x16";
        free(packed), free(yx);
    }
    /* Quantized activations (8-bit) move results by up to ~1% of the row's magnitude against float64. */
    const bool ok = s1 == TR_OK && s2 == TR_OK && s3 == TR_OK && vs_scalar < 1e-5 && vs_ref < 2e-2 && vs_plain < 1e-5;
    printf("%-5s %-5s n=%-2d threads=%d %s vs scalar %.1e  vs float64 %.1e  %s vs plain %.1e\n", ok ? "ok" : "FAIL",
           tr_type_name(t), (int)n, threads, wscale < 1 ? "small" : "     ", vs_scalar, vs_ref, layout, vs_plain);
    matmul_scratch_free(&sc);
    thread_pool_free(tp);
    free(w), free(wf), free(x), free(ys), free(yn), free(yr), free(mag);
    return ok ? 0 : 1;
}

/* The Q8_0 KV cache's attention kernels (kernels/kv_q8.h): NEON scores and V mixes equal the scalar ones to float
 * rounding, causal rows included (21 rows in groups of 7 over 70 positions). */
static int check_kv_q8(int64_t hd) {
    enum { N_POS = 70, ROWS = 21 };
    const kvq8_causal c = {ROWS, N_POS - 2, 7};
    const size_t rb = kvq8_row_bytes(hd, 32);
    uint8_t *K = malloc(rb * N_POS), *V = malloc(rb * N_POS);
    float *row = malloc(sizeof(float) * hd), *q = malloc(sizeof(float) * ROWS * hd), *P = malloc(sizeof(float) * ROWS * N_POS);
    float *s[2], *o[2];
    for (int k = 0; k < 2; k++) s[k] = calloc(ROWS * N_POS, sizeof(float)), o[k] = malloc(sizeof(float) * ROWS * hd);
    for (int p = 0; p < N_POS; p++) {
        for (int64_t d = 0; d < hd; d++) row[d] = frand();
        kvq8_quantize_row(row, K + p * rb, hd, 32);
        for (int64_t d = 0; d < hd; d++) row[d] = frand();
        kvq8_quantize_row(row, V + p * rb, hd, 32);
    }
    for (int64_t i = 0; i < ROWS * hd; i++) q[i] = frand();
    for (int r = 0; r < ROWS; r++) /* zero past each row's positions, as kvq8_mix asks */
        for (int p = 0; p < N_POS; p++) P[r * N_POS + p] = p < kvq8_row_valid(c, r) ? (frand() + 1.0f) / N_POS : 0;
    const kvq8_rows Kr = {K, rb, hd, 32}, Vr = {V, rb, hd, 32};
    const char *isas[2] = {"scalar", CHECK_ISA};
    for (int k = 0; k < 2; k++) {
        kernels_force_isa(isas[k]);
        kvq8_scores(&Kr, q, c, s[k], N_POS);
        kvq8_mix(&Vr, P, N_POS, c, o[k]);
    }
    double mag_s[ROWS * N_POS], *mag_o = malloc(sizeof(double) * ROWS * hd);
    for (int64_t i = 0; i < ROWS * N_POS; i++) mag_s[i] = fabs(s[0][i]) + 1.0;
    for (int64_t i = 0; i < ROWS * hd; i++) mag_o[i] = fabs(o[0][i]) + 1.0;
    const double ws = worst_error(s[1], s[0], mag_s, ROWS * N_POS), wo = worst_error(o[1], o[0], mag_o, ROWS * hd);
    const double worst = ws > wo ? ws : wo;
    free(mag_o);
    const bool ok = worst < 1e-5;
    printf("%-5s kv q8_0 head_dim %d: scores and mix vs scalar %.1e\n", ok ? "ok" : "FAIL", (int)hd, worst);
    free(K), free(V), free(row), free(q), free(P);
    for (int k = 0; k < 2; k++) free(s[k]), free(o[k]);
    return ok ? 0 : 1;
}

int main(void) {
    if (!kernels_isa_available(CHECK_ISA)) {
        printf("FAIL: the %s path is not available in this build\n", CHECK_ISA);
        return 1;
    }
    const tr_type types[] = {TR_TYPE_F32, TR_TYPE_F16,  TR_TYPE_BF16, TR_TYPE_Q8_0, TR_TYPE_Q4_0, TR_TYPE_Q4_1,
                             TR_TYPE_Q5_0, TR_TYPE_Q5_1, TR_TYPE_Q4_K, TR_TYPE_Q5_K, TR_TYPE_Q6_K, TR_TYPE_Q2_K,
                             TR_TYPE_Q3_K, TR_TYPE_IQ4_NL, TR_TYPE_IQ4_XS};
    int failures = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (int b = 0; b < 3; b++) /* activation rows: 1, 3, and 6 = a group of 4 and one of 2 */
            for (int threads = 1; threads <= 2; threads++) failures += check_type(types[i], (int64_t[]){1, 3, 6}[b], threads, 1);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) /* subnormal F16 scales, decode and a batch */
        for (int b = 0; b < 2; b++) failures += check_type(types[i], (int64_t[]){1, 6}[b], 1, 1e-3f);
    failures += check_kv_q8(64) + check_kv_q8(128);
#if defined(__aarch64__)
    /* the types NEON interleaves must really have taken the X16 path above */
    const tr_type x16[] = {TR_TYPE_Q4_0, TR_TYPE_Q8_0, TR_TYPE_Q4_K, TR_TYPE_IQ4_NL, TR_TYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof x16 / sizeof x16[0]; i++)
        if (!kernels_have_x16(x16[i])) {
            printf("FAIL: no NEON X16 tile for %s\n", tr_type_name(x16[i]));
            failures++;
        }
#endif
    printf("%s check: %d failure(s), kernels isa %s\n", CHECK_ISA, failures, kernels_isa());
    return failures ? 1 : 0;
}
