/* test_router_policy.c — the training-free policies (maxprob, margin, entropy) on hand-made logits: uniform rows,
 * near one-hot rows, a 3-token case worked out by hand, stability with huge logits, masked (-inf) tokens, rows
 * that are not distributions, and names ↔ enum. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "tokroute.h"

static float score_of(tr_policy p, const float *logits, int32_t n) {
    tr_router *r = NULL;
    assert_int_equal(tr_router_create(p, &r), TR_OK);
    assert_int_equal(tr_router_policy(r), p);
    float s = -1;
    assert_int_equal(tr_router_score(r, NULL, 0, logits, n, &s), TR_OK);
    tr_router_free(r);
    return s;
}

static void test_uniform_logits(void **state) {
    (void)state;
    const int32_t sizes[] = {2, 7, 512, 151936};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int32_t n = sizes[k];
        float *l = malloc((size_t)n * sizeof *l);
        for (int32_t i = 0; i < n; i++) l[i] = 3.25f;
        assert_float_equal(score_of(TR_POLICY_MAXPROB, l, n), 1.0f / (float)n, 1e-6f / (float)n + 1e-9f);
        assert_float_equal(score_of(TR_POLICY_MARGIN, l, n), 0.0f, 1e-7f);
        assert_float_equal(score_of(TR_POLICY_ENTROPY, l, n), 0.0f, 1e-5f);
        free(l);
    }
}

static void test_one_hot_logits_score_near_one(void **state) {
    (void)state;
    const int32_t n = 512;
    float l[512];
    for (int32_t i = 0; i < n; i++) l[i] = -5.0f;
    l[17] = 30.0f;
    assert_true(score_of(TR_POLICY_MAXPROB, l, n) > 0.999f);
    assert_true(score_of(TR_POLICY_MARGIN, l, n) > 0.999f);
    assert_true(score_of(TR_POLICY_ENTROPY, l, n) > 0.999f);
    for (tr_policy p = TR_POLICY_MAXPROB; p <= TR_POLICY_ENTROPY; p++) assert_true(score_of(p, l, n) <= 1.0f);
}

/* logits [2, 1, 0]: p = e^{l-2} / (1 + e^-1 + e^-2) = [0.665241, 0.244728, 0.090031];
 * H = -sum p ln p = 0.832396 nats, H / ln 3 = 0.757679. */
static void test_three_tokens_by_hand(void **state) {
    (void)state;
    const float l[3] = {2.0f, 1.0f, 0.0f};
    assert_float_equal(score_of(TR_POLICY_MAXPROB, l, 3), 0.6652410f, 1e-6f);
    assert_float_equal(score_of(TR_POLICY_MARGIN, l, 3), 0.4205125f, 1e-6f);
    assert_float_equal(score_of(TR_POLICY_ENTROPY, l, 3), 1.0f - 0.7576791f, 1e-6f);
    /* Order does not matter, and shifting every logit does not either. */
    const float perm[3] = {999.0f, 1001.0f, 1000.0f};
    assert_float_equal(score_of(TR_POLICY_MAXPROB, perm, 3), 0.6652410f, 1e-6f);
    assert_float_equal(score_of(TR_POLICY_MARGIN, perm, 3), 0.4205125f, 1e-6f);
    assert_float_equal(score_of(TR_POLICY_ENTROPY, perm, 3), 1.0f - 0.7576791f, 1e-6f);
}

static void test_ties_and_masked_tokens(void **state) {
    (void)state;
    /* Two equal maxima: no margin. */
    const float tie[4] = {5.0f, 1.0f, 5.0f, -2.0f};
    assert_float_equal(score_of(TR_POLICY_MARGIN, tie, 4), 0.0f, 1e-7f);
    /* -inf logits are tokens with probability 0: [0, 0, -inf, -inf] is a fair coin over 4 tokens. */
    const float masked[4] = {0.0f, 0.0f, -INFINITY, -INFINITY};
    assert_float_equal(score_of(TR_POLICY_MAXPROB, masked, 4), 0.5f, 1e-7f);
    assert_float_equal(score_of(TR_POLICY_MARGIN, masked, 4), 0.0f, 1e-7f);
    assert_float_equal(score_of(TR_POLICY_ENTROPY, masked, 4), 0.5f, 1e-6f); /* ln 2 / ln 4 */
    /* One token only: certain. */
    const float one[1] = {-3.0f};
    for (tr_policy p = TR_POLICY_MAXPROB; p <= TR_POLICY_ENTROPY; p++) assert_float_equal(score_of(p, one, 1), 1.0f, 0);
}

static void test_rows_that_are_not_distributions_score_zero(void **state) {
    (void)state;
    const float with_nan[3] = {1.0f, NAN, 0.0f};
    const float with_inf[3] = {1.0f, INFINITY, 0.0f};
    const float all_masked[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (tr_policy p = TR_POLICY_MAXPROB; p <= TR_POLICY_ENTROPY; p++) {
        assert_float_equal(score_of(p, with_nan, 3), 0.0f, 0);
        assert_float_equal(score_of(p, with_inf, 3), 0.0f, 0);
        assert_float_equal(score_of(p, all_masked, 3), 0.0f, 0);
    }
}

/* Random rows of several scales and sizes: scores stay in [0, 1] and agree with a double-precision softmax. */
static void test_scores_in_range_and_match_reference(void **state) {
    (void)state;
    uint64_t seed = 12345;
    const int32_t n = 1000;
    float *l = malloc((size_t)n * sizeof *l);
    for (int trial = 0; trial < 50; trial++) {
        const double scale = trial < 10 ? 0.01 : trial < 40 ? 3.0 : 500.0;
        for (int32_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            l[i] = (float)(((double)(seed >> 11) / 9007199254740992.0 - 0.5) * scale);
        }
        double m = -INFINITY, m2 = -INFINITY, s = 0, h = 0;
        for (int32_t i = 0; i < n; i++) {
            if (l[i] > m) { m2 = m; m = l[i]; } else if (l[i] > m2) m2 = l[i];
        }
        for (int32_t i = 0; i < n; i++) s += exp(l[i] - m);
        for (int32_t i = 0; i < n; i++) {
            const double p = exp(l[i] - m) / s;
            if (p > 0) h -= p * log(p);
        }
        const double want[3] = {1 / s, (1 - exp(m2 - m)) / s, 1 - h / log(n)};
        for (tr_policy p = TR_POLICY_MAXPROB; p <= TR_POLICY_ENTROPY; p++) {
            const float got = score_of(p, l, n);
            assert_true(got >= 0.0f && got <= 1.0f);
            assert_float_equal(got, want[p - TR_POLICY_MAXPROB], 1e-5);
        }
    }
    free(l);
}

/* The AVX2 passes and the portable loops agree (odd sizes exercise the tails; -inf exercises masking). On x86-64
 * the AVX2 path must exist (a CPU without AVX2 fails here rather than passing untested); elsewhere there is no
 * AVX2 path and the test is not built. */
#if defined(__x86_64__)
static void test_simd_and_portable_paths_agree(void **state) {
    (void)state;
    if (!kernels_isa_available("avx2")) fail_msg("this x86-64 CPU lacks AVX2: the AVX2 router path cannot be checked");
    const char *const original = kernels_isa();
    const int32_t sizes[] = {1, 7, 8, 9, 127, 512, 1001, 151936};
    uint64_t seed = 777;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int32_t n = sizes[k];
        float *l = malloc((size_t)n * sizeof *l);
        for (int32_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            l[i] = (float)(((double)(seed >> 11) / 9007199254740992.0 - 0.5) * 40.0);
        }
        if (n > 8) l[n / 3] = -INFINITY;
        float got[2][3];
        for (int path = 0; path < 2; path++) {
            assert_int_equal(kernels_force_isa(path == 0 ? "scalar" : "avx2"), TR_OK);
            for (tr_policy p = TR_POLICY_MAXPROB; p <= TR_POLICY_ENTROPY; p++)
                got[path][p - TR_POLICY_MAXPROB] = score_of(p, l, n);
        }
        for (int p = 0; p < 3; p++) assert_float_equal(got[0][p], got[1][p], 2e-6);
        free(l);
    }
    assert_int_equal(kernels_force_isa(original), TR_OK);
}
#endif

static void test_names_round_trip(void **state) {
    (void)state;
    const char *names[] = {"mlp", "maxprob", "margin", "entropy"};
    for (int i = 0; i < 4; i++) {
        tr_policy p;
        assert_string_equal(tr_policy_name((tr_policy)i), names[i]);
        assert_int_equal(tr_policy_from_name(names[i], &p), TR_OK);
        assert_int_equal(p, i);
    }
    tr_policy p;
    assert_int_equal(tr_policy_from_name("MaxProb", &p), TR_OK);
    assert_int_equal(p, TR_POLICY_MAXPROB);
    assert_int_equal(tr_policy_from_name("oracle", &p), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "oracle"));
    assert_int_equal(tr_policy_from_name(NULL, &p), TR_ERR_ARG);
}

static void test_create_and_score_arguments(void **state) {
    (void)state;
    tr_router *r = NULL;
    assert_int_equal(tr_router_create(TR_POLICY_MLP, &r), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "router file"));
    assert_null(r);
    assert_int_equal(tr_router_create((tr_policy)42, &r), TR_ERR_ARG);
    assert_int_equal(tr_router_create(TR_POLICY_MARGIN, NULL), TR_ERR_ARG);

    assert_int_equal(tr_router_create(TR_POLICY_ENTROPY, &r), TR_OK);
    assert_float_equal(tr_router_default_tau(r), 0.5f, 0);
    const float l[2] = {0.0f, 1.0f};
    float s;
    assert_int_equal(tr_router_score(r, NULL, 0, NULL, 2, &s), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "logits"));
    assert_int_equal(tr_router_score(r, NULL, 0, l, 0, &s), TR_ERR_ARG);
    assert_int_equal(tr_router_score(r, NULL, 0, l, 2, NULL), TR_ERR_ARG);
    assert_int_equal(tr_router_score(NULL, NULL, 0, l, 2, &s), TR_ERR_ARG);
    tr_router_free(r);
    tr_router_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_logits),
        cmocka_unit_test(test_one_hot_logits_score_near_one),
        cmocka_unit_test(test_three_tokens_by_hand),
        cmocka_unit_test(test_ties_and_masked_tokens),
        cmocka_unit_test(test_rows_that_are_not_distributions_score_zero),
        cmocka_unit_test(test_scores_in_range_and_match_reference),
#if defined(__x86_64__)
        cmocka_unit_test(test_simd_and_portable_paths_agree),
#endif
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_create_and_score_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
