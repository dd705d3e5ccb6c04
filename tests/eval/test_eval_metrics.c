/* test_eval_metrics.c — the token-level metrics on hand-made arrays: τ for a target share (exact cases, ties routed
 * whole, the closer boundary and the smaller on a draw, 0% and 100%, all-equal scores, an empty set), accuracy of
 * the routed choice at any τ against a brute-force count, gap closed, the oracle's budget, the random policy's
 * draws; and the SVG writer's output checked at parse level (balanced tags, quoted attributes, finite numbers,
 * escaped text) including series with NaN and out-of-range points. */
#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eval/eval_internal.h"

static eval_curve build(const float *s, const uint8_t *slm, const uint8_t *llm, int64_t n) {
    eval_curve c;
    assert_int_equal(eval_curve_build(s, slm, llm, n, &c), TR_OK);
    return c;
}

static void test_tau_exact_shares(void **state) {
    (void)state;
    /* Ten distinct scores: every count is achievable. */
    const float s[10] = {0.9f, 0.1f, 0.5f, 0.3f, 0.7f, 0.2f, 0.8f, 0.4f, 0.6f, 0.05f};
    const uint8_t z[10] = {0};
    eval_curve c = build(s, z, z, 10);
    int64_t k;
    float tau = eval_tau_for_share(&c, 0.3, &k);
    assert_int_equal(k, 3);
    assert_float_equal(tau, 0.3f, 0);            /* 0.05, 0.1, 0.2 are below 0.3 */
    assert_int_equal(eval_curve_count_below(&c, tau), 3);
    tau = eval_tau_for_share(&c, 0.0, &k);
    assert_int_equal(k, 0);
    assert_int_equal(eval_curve_count_below(&c, tau), 0);
    tau = eval_tau_for_share(&c, 1.0, &k);
    assert_int_equal(k, 10);
    assert_true(tau > 0.9f);
    assert_int_equal(eval_curve_count_below(&c, tau), 10);
    tau = eval_tau_for_share(&c, 0.34, &k); /* 3.4 → 3 */
    assert_int_equal(k, 3);
    tau = eval_tau_for_share(&c, 0.36, &k); /* 3.6 → 4 */
    assert_int_equal(k, 4);
    assert_int_equal(eval_curve_count_below(&c, tau), 4);
    tau = eval_tau_for_share(&c, -1, &k); /* clamped */
    assert_int_equal(k, 0);
    tau = eval_tau_for_share(&c, 7, &k);
    assert_int_equal(k, 10);
    eval_curve_free(&c);
    eval_curve_free(&c); /* idempotent */
}

static void test_tau_ties(void **state) {
    (void)state;
    /* Groups: 0.1 ×2, 0.5 ×5, 0.9 ×3 → achievable counts 0, 2, 7, 10. */
    const float s[10] = {0.5f, 0.1f, 0.5f, 0.9f, 0.5f, 0.1f, 0.9f, 0.5f, 0.9f, 0.5f};
    const uint8_t z[10] = {0};
    eval_curve c = build(s, z, z, 10);
    int64_t k;
    float tau = eval_tau_for_share(&c, 0.3, &k); /* 3: closer to 2 than to 7 */
    assert_int_equal(k, 2);
    assert_float_equal(tau, 0.5f, 0);
    tau = eval_tau_for_share(&c, 0.5, &k); /* 5: closer to 7 */
    assert_int_equal(k, 7);
    assert_float_equal(tau, 0.9f, 0);
    assert_int_equal(eval_curve_count_below(&c, tau), 7);
    tau = eval_tau_for_share(&c, 0.45, &k); /* 4.5: a draw between 2 and 7 → the smaller */
    assert_int_equal(k, 2);
    tau = eval_tau_for_share(&c, 0.1, &k); /* 1: a draw between 0 and 2 → 0 */
    assert_int_equal(k, 0);
    tau = eval_tau_for_share(&c, 0.9, &k); /* 9: closer to 10 */
    assert_int_equal(k, 10);
    assert_int_equal(eval_curve_count_below(&c, tau), 10);
    eval_curve_free(&c);

    /* All equal: only 0 and n are possible. */
    const float same[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    c = build(same, z, z, 4);
    eval_tau_for_share(&c, 0.4, &k);
    assert_int_equal(k, 0);
    tau = eval_tau_for_share(&c, 0.6, &k);
    assert_int_equal(k, 4);
    assert_int_equal(eval_curve_count_below(&c, tau), 4);
    eval_curve_free(&c);

    /* The largest finite score still has a τ above it. */
    const float big[2] = {1.0f, 3.4e38f};
    c = build(big, z, z, 2);
    tau = eval_tau_for_share(&c, 1.0, &k);
    assert_int_equal(k, 2);
    assert_int_equal(eval_curve_count_below(&c, tau), 2);
    eval_curve_free(&c);

    c = build(NULL, NULL, NULL, 0);
    tau = eval_tau_for_share(&c, 0.5, &k);
    assert_int_equal(k, 0);
    assert_true(isnan(eval_curve_accuracy_at(&c, tau)));
    eval_curve_free(&c);

    const float nan_score[2] = {0.5f, NAN}, inf_score[2] = {INFINITY, 0.5f};
    eval_curve bad;
    assert_int_equal(eval_curve_build(nan_score, z, z, 2, &bad), TR_ERR_RANGE);
    assert_int_equal(eval_curve_build(inf_score, z, z, 2, &bad), TR_ERR_RANGE);
    assert_int_equal(eval_curve_build(NULL, z, z, 2, &bad), TR_ERR_ARG);
}

/* Brute force: accuracy when positions with score < tau take the LLM's answer. */
static double brute_accuracy(const float *s, const uint8_t *slm, const uint8_t *llm, int n, float tau) {
    int ok = 0;
    for (int i = 0; i < n; i++) ok += s[i] < tau ? llm[i] : slm[i];
    return (double)ok / n;
}

static void test_accuracy_and_gap(void **state) {
    (void)state;
    const float s[8] = {0.2f, 0.8f, 0.1f, 0.6f, 0.4f, 0.4f, 0.9f, 0.3f};
    const uint8_t slm[8] = {0, 1, 0, 1, 0, 1, 1, 0};
    const uint8_t llm[8] = {1, 1, 1, 0, 1, 0, 1, 0};
    eval_curve c = build(s, slm, llm, 8);
    assert_int_equal(c.slm_correct, 4);
    assert_int_equal(c.llm_correct, 5);
    const float taus[] = {0.0f, 0.1f, 0.15f, 0.25f, 0.35f, 0.4f, 0.45f, 0.7f, 0.85f, 0.95f, 2.0f};
    for (size_t i = 0; i < sizeof taus / sizeof taus[0]; i++)
        assert_float_equal(eval_curve_accuracy_at(&c, taus[i]), brute_accuracy(s, slm, llm, 8, taus[i]), 1e-12);
    /* Routing the two lowest (0.1 and 0.2: SLM wrong, LLM right) gains two. */
    assert_float_equal(eval_curve_accuracy_at(&c, 0.25f), 6.0 / 8, 1e-12);
    assert_float_equal(eval_gap_closed(6.0 / 8, 0.5, 0.625), 2.0, 1e-12);
    assert_float_equal(eval_gap_closed(0.5, 0.5, 0.625), 0.0, 1e-12);
    assert_float_equal(eval_gap_closed(0.625, 0.5, 0.625), 1.0, 1e-12);
    assert_true(isnan(eval_gap_closed(0.6, 0.5, 0.5)));
    assert_true(isnan(eval_gap_closed(NAN, 0.5, 0.6)));
    eval_curve_free(&c);
}

/* The bound's ranking: the LLM's expected gain p(l) - p(s), p(s) read from its top list (0 outside it); routing
 * the k highest gains, ties in position order. */
static void test_bound(void **state) {
    (void)state;
    tr_llm_position lp = {.n_top = 3, .top_ids = {7, 3, 9}, .top_logprobs = {logf(0.6f), logf(0.3f), logf(0.05f)}};
    assert_float_equal(eval_expected_gain(&lp, 3), 0.3, 1e-6);
    assert_float_equal(eval_expected_gain(&lp, 9), 0.55, 1e-6);
    assert_float_equal(eval_expected_gain(&lp, 7), 0.0, 0);  /* both models agree */
    assert_float_equal(eval_expected_gain(&lp, 42), 0.6, 1e-6); /* outside the top list: p(s) = 0 */
    lp.n_top = 0;
    assert_float_equal(eval_expected_gain(&lp, 3), 0.0, 0);
    const float neg_gain[6] = {-0.1f, -0.5f, 0.0f, -0.5f, -0.2f, 0.0f};
    const uint8_t slm[6] = {0, 0, 1, 1, 0, 1};
    const uint8_t llm[6] = {0, 1, 1, 0, 1, 1};
    eval_curve c = build(neg_gain, slm, llm, 6);
    assert_float_equal(eval_curve_accuracy_routing(&c, 0), 3.0 / 6, 1e-12);
    assert_float_equal(eval_curve_accuracy_routing(&c, 1), 4.0 / 6, 1e-12); /* position 1 (0.5, earlier) first */
    assert_float_equal(eval_curve_accuracy_routing(&c, 2), 3.0 / 6, 1e-12); /* then 3: SLM right, LLM wrong */
    assert_float_equal(eval_curve_accuracy_routing(&c, 3), 4.0 / 6, 1e-12); /* then 4 (0.2) */
    assert_float_equal(eval_curve_accuracy_routing(&c, 99), eval_curve_accuracy_routing(&c, 6), 0);
    eval_curve_free(&c);
}

static void test_oracle(void **state) {
    (void)state;
    int64_t k;
    /* 100 positions, SLM right on 40, 21 where only the LLM is right. */
    assert_float_equal(eval_oracle_accuracy(100, 40, 21, 0.10, &k), 0.50, 1e-12);
    assert_int_equal(k, 10);
    assert_float_equal(eval_oracle_accuracy(100, 40, 21, 0.20, &k), 0.60, 1e-12);
    assert_float_equal(eval_oracle_accuracy(100, 40, 21, 0.50, &k), 0.61, 1e-12); /* runs out of gains */
    assert_int_equal(k, 21);
    assert_float_equal(eval_oracle_accuracy(100, 40, 21, 0.0, &k), 0.40, 1e-12);
    assert_int_equal(k, 0);
    assert_float_equal(eval_oracle_accuracy(100, 40, 21, 0.055, &k), 0.46, 1e-12); /* 5.5 rounds to 6 */
    assert_true(isnan(eval_oracle_accuracy(0, 0, 0, 0.1, &k)));
    assert_int_equal(k, 0);
}

static void test_random_scores(void **state) {
    (void)state;
    double sum = 0;
    int below_tenth = 0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        float r = eval_random_score(1234, i);
        assert_true(r >= 0.0f && r < 1.0f);
        assert_true(r == eval_random_score(1234, i)); /* a function of (seed, i) */
        sum += r;
        below_tenth += r < 0.1f;
    }
    assert_float_equal(sum / n, 0.5, 0.01);
    assert_float_equal((double)below_tenth / n, 0.1, 0.005);
    int differ = 0;
    for (int i = 0; i < 100; i++) differ += eval_random_score(1, i) != eval_random_score(2, i);
    assert_true(differ > 95);
}

/* ---------------------------------------------------------------- SVG at parse level */

/* Checks that the text is one <svg> element with balanced, properly nested tags, quoted attributes, no NaN/inf
 * anywhere, numbers in coordinate attributes finite, and no raw '<' or '&' inside text. Returns the count of
 * elements of the given name. */
static int check_svg(const char *svg, const char *count_name) {
    const char *stack[64];
    int depth = 0, count = 0, roots = 0;
    assert_null(strstr(svg, "nan"));
    assert_null(strstr(svg, "inf"));
    const char *p = svg;
    if (strncmp(p, "<?xml", 5) == 0) p = strstr(p, "?>") + 2;
    while (*p) {
        if (*p != '<') {
            if (*p == '&') assert_true(strncmp(p, "&amp;", 5) == 0 || strncmp(p, "&lt;", 4) == 0 ||
                                       strncmp(p, "&gt;", 4) == 0 || strncmp(p, "&quot;", 6) == 0);
            if (*p == '>') fail_msg("stray '>' in text");
            p++;
            continue;
        }
        const char *end = strchr(p, '>');
        assert_non_null(end);
        bool closing = p[1] == '/', self = end[-1] == '/';
        const char *name = p + (closing ? 2 : 1);
        size_t nlen = 0;
        while (isalnum((unsigned char)name[nlen])) nlen++;
        assert_true(nlen > 0);
        if (closing) {
            assert_true(depth > 0);
            depth--;
            assert_true(strncmp(stack[depth], name, nlen) == 0 && !isalnum((unsigned char)stack[depth][nlen]));
        } else {
            if (depth == 0) roots++;
            if (strncmp(name, count_name, nlen) == 0 && strlen(count_name) == nlen) count++;
            /* attributes: name="value" pairs; numeric values must parse as finite numbers */
            const char *a = name + nlen;
            while (a < end - (self ? 1 : 0)) {
                while (*a == ' ' || *a == '\n') a++;
                if (a >= end - (self ? 1 : 0)) break;
                const char *eq = strchr(a, '=');
                assert_true(eq && eq < end && eq[1] == '"');
                const char *close = strchr(eq + 2, '"');
                assert_true(close && close < end);
                if (strncmp(a, "x1=", 3) == 0 || strncmp(a, "y=", 2) == 0 || strncmp(a, "x=", 2) == 0 ||
                    strncmp(a, "width=", 6) == 0) {
                    char *stop;
                    double v = strtod(eq + 2, &stop);
                    assert_true(stop == close && isfinite(v));
                }
                a = close + 1;
            }
            if (!self) {
                assert_true(depth < 64);
                stack[depth++] = name;
            }
        }
        p = end + 1;
    }
    assert_int_equal(depth, 0);
    assert_int_equal(roots, 1);
    return count;
}

static char *chart_to_string(const svg_chart *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(svg_write_chart(f, c), TR_OK);
    fclose(f);
    return buf;
}

static void test_svg_well_formed(void **state) {
    (void)state;
    const double x[5] = {0, 0.25, NAN, 0.75, 1}, y[5] = {0.4, 0.5, 0.55, INFINITY, 0.6};
    const double x2[3] = {-5, 0.5, 9}, y2[3] = {0.45, 0.5, 0.58};
    const svg_series series[3] = {{"max<prob> & co", x, y, 5, false}, {"oracle \"best\"", x2, y2, 3, true},
                                  {"empty", NULL, NULL, 0, false}};
    svg_chart c = {"Accuracy & routing", "routed <share>", "accuracy", 0, 1, 0.4, 0.6, true, true, series, 3};
    char *svg = chart_to_string(&c);
    assert_int_equal(check_svg(svg, "polyline"), 3);
    assert_non_null(strstr(svg, "max&lt;prob&gt; &amp; co"));
    assert_non_null(strstr(svg, "oracle &quot;best&quot;"));
    assert_non_null(strstr(svg, ">routed &lt;share&gt;</text>"));
    assert_non_null(strstr(svg, ">40%</text>"));   /* y ticks as percentages */
    assert_non_null(strstr(svg, ">100%</text>"));  /* x ticks */
    assert_non_null(strstr(svg, "stroke-dasharray")); /* the dashed series */
    free(svg);

    /* Degenerate ranges fall back to [0, 1] and still produce finite numbers. */
    svg_chart d = {"t", "x", "y", 1, 1, NAN, NAN, false, false, series, 2};
    svg = chart_to_string(&d);
    check_svg(svg, "polyline");
    assert_non_null(strstr(svg, ">0.4</text>")); /* ticks every 0.2 */
    free(svg);
    assert_int_equal(svg_write_chart(stdout, NULL), TR_ERR_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tau_exact_shares),
        cmocka_unit_test(test_tau_ties),
        cmocka_unit_test(test_accuracy_and_gap),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_oracle),
        cmocka_unit_test(test_random_scores),
        cmocka_unit_test(test_svg_well_formed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
