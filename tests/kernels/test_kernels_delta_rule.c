/* test_kernels_delta_rule.c — the gated delta rule's step (kernels/delta_rule.h): the portable code against a double-
 * precision reference written from the definition (decay, correction along k, read by q), and every SIMD version this
 * CPU runs against the portable one, at head sizes with and without a vector tail; a state driven through many steps
 * stays equal across versions (each step's rounding is a few ulps). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/delta_rule.h"
#include "kernels/kernels.h"

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* The definition, in double, on a copy of the state. */
static void reference(double *S, int d, const float *q, const float *k, const float *v, double decay, double beta,
                      double scale, double *out) {
    for (int r = 0; r < d; r++) {
        double kd = 0;
        for (int i = 0; i < d; i++) kd += S[r * d + i] * decay * k[i];
        const double dr = (v[r] - kd) * beta;
        double o = 0;
        for (int i = 0; i < d; i++) {
            S[r * d + i] = S[r * d + i] * decay + k[i] * dr;
            o += S[r * d + i] * q[i];
        }
        out[r] = o * scale;
    }
}

typedef struct {
    const char *isa;
    delta_rule_fn fn;
    int multiple;
} version;

static void unit(float *x, int d) { /* the model L2-normalises q and k */
    double n = 0;
    for (int i = 0; i < d; i++) n += (double)x[i] * x[i];
    for (int i = 0; i < d; i++) x[i] = (float)(x[i] / sqrt(n));
}

static void run_steps(delta_rule_fn fn, int d, int steps, float *state, float *out) {
    uint32_t seed = 7;
    float *q = malloc(sizeof(float) * (size_t)d * 3), *k = q + d, *v = k + d;
    for (int t = 0; t < steps; t++) {
        for (int i = 0; i < 3 * d; i++) q[i] = frand(&seed);
        unit(q, d), unit(k, d);
        fn(state, d, q, k, v, 0.9f + 0.05f * frand(&seed), 0.5f, 1.0f / sqrtf((float)d), out + (size_t)t * d);
    }
    free(q);
}

/* |a - b| within 1e-5 of the largest magnitude in a: rounding differences pass,
 * a wrong step does not */
static void assert_close(const float *a, const float *b, int n) {
    float top = 0;
    for (int i = 0; i < n; i++) top = fabsf(a[i]) > top ? fabsf(a[i]) : top;
    for (int i = 0; i < n; i++) assert_true(fabsf(a[i] - b[i]) <= 1e-5f * top);
}

static void test_portable_matches_the_definition(void **unused) {
    (void)unused;
    const int sizes[] = {8, 13, 64, 128};
    for (size_t n = 0; n < sizeof sizes / sizeof *sizes; n++) {
        const int d = sizes[n];
        uint32_t seed = 3;
        float *S = malloc(sizeof(float) * (size_t)d * d), *q = malloc(sizeof(float) * (size_t)d * 4);
        float *k = q + d, *v = k + d, *out = v + d;
        double *R = malloc(sizeof(double) * (size_t)d * d), *ro = malloc(sizeof(double) * (size_t)d);
        for (int i = 0; i < d * d; i++) R[i] = S[i] = frand(&seed);
        for (int i = 0; i < 3 * d; i++) q[i] = frand(&seed);
        delta_rule_scalar(S, d, q, k, v, 0.8f, 0.6f, 0.25f, out);
        reference(R, d, q, k, v, 0.8f, 0.6f, 0.25f, ro);
        for (int r = 0; r < d; r++) assert_true(fabs(out[r] - ro[r]) < 1e-4 * (1 + fabs(ro[r])));
        for (int i = 0; i < d * d; i++) assert_true(fabs(S[i] - R[i]) < 1e-5 * (1 + fabs(R[i])));
        free(S), free(q), free(R), free(ro);
    }
}

static void test_simd_versions_match_the_portable_one(void **unused) {
    (void)unused;
    version vs[2];
    int nv = 0;
#if defined(__x86_64__)
    if (kernels_isa_available("avx2")) vs[nv++] = (version){"avx2", delta_rule_avx2, 8};
    if (kernels_isa_available("avx512")) vs[nv++] = (version){"avx512", delta_rule_avx512, 16};
#endif
    const int sizes[] = {8, 16, 24, 48, 64, 128};
    const int steps = 64;
    for (int iv = 0; iv < nv; iv++)
        for (size_t n = 0; n < sizeof sizes / sizeof *sizes; n++) {
            const int d = sizes[n];
            if (d % vs[iv].multiple) continue;
            float *a = calloc((size_t)d * d, sizeof(float)), *b = calloc((size_t)d * d, sizeof(float));
            float *oa = malloc(sizeof(float) * (size_t)d * steps), *ob = malloc(sizeof(float) * (size_t)d * steps);
            run_steps(delta_rule_scalar, d, steps, a, oa);
            run_steps(vs[iv].fn, d, steps, b, ob);
            assert_close(oa, ob, d * steps);
            assert_close(a, b, d * d);
            free(a), free(b), free(oa), free(ob);
        }
    /* the chosen step (delta_rule_for) is one of them: the same outputs as the
     * portable code up to rounding */
    const int d = 128;
    float *a = calloc((size_t)d * d, sizeof(float)), *b = calloc((size_t)d * d, sizeof(float));
    float *oa = malloc(sizeof(float) * (size_t)d * steps), *ob = malloc(sizeof(float) * (size_t)d * steps);
    run_steps(delta_rule_scalar, d, steps, a, oa);
    run_steps(delta_rule_for(d), d, steps, b, ob);
    assert_close(oa, ob, d * steps);
    free(a), free(b), free(oa), free(ob);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_portable_matches_the_definition),
        cmocka_unit_test(test_simd_versions_match_the_portable_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
