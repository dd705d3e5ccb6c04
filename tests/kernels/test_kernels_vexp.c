/* test_kernels_vexp.c — kernels/vexp.h's rows (SiLU·up, softmax, a token's softmax rows, F16 rounding, the table
 * GLU) equal the scalar loops bit for bit
 * whatever path this CPU takes: random rows of every length up to 70 (vector bodies and tails), values spanning
 * expf's whole range (underflow, |x| >= 88, infinities, NaN take glibc's special cases), and expf itself on a dense
 * sweep of float bit patterns. An AVX-512 machine must take the vector path (its check against expf passed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/vexp.h"

static uint32_t next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s;
}

/* Mostly moderate values, some huge, tiny, infinite or NaN. */
static float value(uint32_t *s) {
    const uint32_t r = next(s) >> 8, kind = r % 64;
    const float u = (float)(next(s) >> 8) / 16777216.0f; /* [0, 1) */
    if (kind == 0) return INFINITY;
    if (kind == 1) return -INFINITY;
    if (kind == 2) return 87.0f + 20.0f * u;
    if (kind == 3) return -87.0f - 40.0f * u;
    if (kind == 4) return 1e-30f * u;
    return (u - 0.5f) * 40.0f;
}

static void assert_same_bits(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) fail_msg("element %d of %d: %a vs %a", i, n, (double)a[i], (double)b[i]);
}

static void test_silu_mul(void **state) {
    (void)state;
    uint32_t s = 7;
    float g[70], up[70], want[70];
    for (int n = 0; n <= 70; n++)
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < n; i++) g[i] = value(&s), up[i] = value(&s) / 8;
            if (rep % 5 == 0)
                for (int i = 0; i < n; i++) g[i] = (float)i / 7 - 5; /* no special lane */
            memcpy(want, g, sizeof g);
            vexp_silu_mul_scalar(want, up, n);
            vexp_silu_mul(g, up, n);
            assert_same_bits(g, want, n);
        }
}

static void test_softmax(void **state) {
    (void)state;
    uint32_t s = 11;
    float x[70], want[70];
    for (int n = 1; n <= 70; n++)
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < n; i++) x[i] = value(&s);
            if (rep % 2 == 0) /* attention's rows: finite scores, a few very low */
                for (int i = 0; i < n; i++) x[i] = isfinite(x[i]) && fabsf(x[i]) < 80 ? x[i] : -100.0f - (float)i;
            memcpy(want, x, sizeof x);
            vexp_softmax_scalar(want, n);
            vexp_softmax(x, n);
            assert_same_bits(x, want, n);
        }
}

/* Rows of one token's heads: 1-10 rows (one and two groups of eight), stride beyond the row, scaled first. */
static void test_softmax_rows(void **state) {
    (void)state;
    uint32_t s = 17;
    enum { STRIDE = 80, ROWS = 10 };
    static float x[ROWS * STRIDE], want[ROWS * STRIDE];
    for (int k = 1; k <= ROWS; k++)
        for (int n = 1; n <= 70; n += 3) {
            for (int i = 0; i < ROWS * STRIDE; i++) {
                const float v = value(&s);
                x[i] = isfinite(v) && fabsf(v) < 80 ? v : -90.0f;
            }
            memcpy(want, x, sizeof x);
            vexp_softmax_rows_scalar(want, STRIDE, k, n, 0.125f);
            vexp_softmax_rows(x, STRIDE, k, n, 0.125f);
            assert_same_bits(x, want, ROWS * STRIDE); /* the gaps between rows untouched too */
        }
}

static void test_round_f16(void **state) {
    (void)state;
    uint32_t s = 13;
    float x[70], want[70];
    for (int n = 0; n <= 70; n++)
        for (int rep = 0; rep < 10; rep++) {
            for (int i = 0; i < n; i++) { /* softmax outputs: [0, 1], half denormals included */
                const float u = (float)(next(&s) >> 8) / 16777216.0f;
                x[i] = rep % 2 ? u : ldexpf(u, -(int)(next(&s) % 30));
            }
            memcpy(want, x, sizeof x);
            vexp_round_f16_scalar(want, n);
            vexp_round_f16(x, n);
            assert_same_bits(x, want, n);
        }
}

/* The table GLU: every entry distinct (its own index), so a wrong F16 rounding reads a wrong entry; gates of every
 * kind value() gives (infinities, beyond ±10, tiny), ±10 exactly, and halfway cases between F16 neighbours. */
static void test_table_glu(void **state) {
    (void)state;
    static float table[1 << 16];
    for (int i = 0; i < (1 << 16); i++) table[i] = (float)i;
    uint32_t s = 17;
    float gate[70], want[70], up[70];
    for (int n = 0; n <= 70; n++)
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < n; i++) {
                const uint32_t kind = next(&s) % 8;
                gate[i] = kind == 0 ? 10.0f : kind == 1 ? -10.0f : kind == 2 ? nextafterf(-10.0f, 0.0f)
                        : kind == 3 ? 1.0f + (float)(2 * (next(&s) % 1024) + 1) / 2048.0f /* F16 ties: even wins */
                                    : value(&s);
                up[i] = (float)(next(&s) >> 8) / 16777216.0f - 0.5f;
            }
            memcpy(want, gate, sizeof gate);
            vexp_table_glu_scalar(table, want, up, n);
            vexp_table_glu(table, gate, up, n);
            assert_same_bits(gate, want, n);
        }
}

/* expf through the row: softmax of {0, v} holds expf(v - max) before the scale; SiLU of -x needs expf(x). Here
 * directly: every 257th float bit pattern from -110 to 100 through a one-element-per-lane SiLU (g·1 / (1 + e)). */
static void test_expf_sweep(void **state) {
    (void)state;
    enum { CHUNK = 4096 };
    static float g[CHUNK], up[CHUNK], want[CHUNK];
    for (int i = 0; i < CHUNK; i++) up[i] = 1.0f;
    int k = 0;
    long checked = 0;
    for (uint32_t u = 0; u < 0x42C80000u; u += 257) /* 0 .. 100 and, negated, -100 .. 0 */
        for (int sign = 0; sign < 2; sign++) {
            const uint32_t b = u | (sign ? 0x80000000u : 0);
            memcpy(&g[k++], &b, sizeof b);
            if (k < CHUNK) continue;
            memcpy(want, g, sizeof g);
            vexp_silu_mul_scalar(want, up, k);
            vexp_silu_mul(g, up, k);
            assert_same_bits(g, want, k);
            checked += k;
            k = 0;
        }
    assert_true(checked > 8000000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_silu_mul),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_softmax_rows),
        cmocka_unit_test(test_round_f16),
        cmocka_unit_test(test_table_glu),
        cmocka_unit_test(test_expf_sweep),
    };
    print_message("vexp path: %s (kernels: %s)\n", vexp_path(), kernels_isa());
    /* glibc's expf has been this algorithm since 2.27: an AVX-512 machine that falls back has a broken vector path */
    if (strcmp(kernels_isa(), "avx512") == 0 && strcmp(vexp_path(), "avx512") != 0) {
        print_error("the AVX-512 expf differs from this C library's expf\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
