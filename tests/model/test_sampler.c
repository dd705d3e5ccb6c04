/* test_sampler.c — the sampler: greedy is argmax with the lowest id on ties; a seed reproduces a run and another
 * seed changes it; top_k = 1 and a tiny top_p reduce to greedy; sampled frequencies follow the softmax at the
 * temperature, restricted and renormalized by top-k and top-p; invalid parameters are refused; and the sampler,
 * which selects only the candidates it needs, draws exactly what the full-sort reference (support/sampler_ref.h)
 * draws, seed for seed, at vocabularies up to Qwen2.5's, wherever top-k or top-p cuts (with no cut it draws in id
 * order: the same distribution, checked by the frequencies). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/sampler_ref.h"
#include "tokroute.h"

static tr_sampler *make(float temperature, int32_t top_k, float top_p, uint64_t seed) {
    tr_sampler_params p = tr_sampler_default_params();
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.seed = seed;
    tr_sampler *s = NULL;
    assert_int_equal(tr_sampler_create(&p, &s), TR_OK);
    assert_non_null(s);
    return s;
}

static void defaults(void **state) {
    (void)state;
    tr_sampler_params p = tr_sampler_default_params();
    assert_true(p.temperature == 0.0f);
    assert_int_equal(p.top_k, 40);
    assert_true(p.top_p == 0.95f);
    assert_int_equal(p.seed, 0x5eed);
}

static void greedy_is_argmax_lowest_id_on_ties(void **state) {
    (void)state;
    const float ties[] = {1.0f, 5.0f, 5.0f, 3.0f, 5.0f};
    const float negative[] = {-7.0f, -3.0f, -INFINITY, -3.5f};
    const float flat[] = {0.25f, 0.25f, 0.25f};
    const float last[] = {-1.0f, 0.0f, 1.0f, 2.0f};
    assert_int_equal(tr_argmax(ties, 5), 1);
    assert_int_equal(tr_argmax(negative, 4), 1);
    assert_int_equal(tr_argmax(flat, 3), 0);
    assert_int_equal(tr_argmax(last, 4), 3);
    assert_int_equal(tr_argmax(last, 1), 0);
    tr_sampler *s = make(0.0f, 40, 0.95f, 1);
    for (int rep = 0; rep < 3; rep++) { /* greedy has no state: the same answer every time */
        assert_int_equal(tr_sampler_sample(s, ties, 5), 1);
        assert_int_equal(tr_sampler_sample(s, negative, 4), 1);
        assert_int_equal(tr_sampler_sample(s, flat, 3), 0);
        assert_int_equal(tr_sampler_sample(s, last, 4), 3);
    }
    tr_sampler_free(s);
    /* Default parameters are greedy. */
    tr_sampler *d = NULL;
    assert_int_equal(tr_sampler_create(NULL, &d), TR_OK);
    assert_int_equal(tr_sampler_sample(d, ties, 5), 1);
    tr_sampler_free(d);
}

/* A vocabulary-sized row of logits with a soft spread (so sampling has real choices). */
static void spread_logits(float *l, int32_t n) {
    uint32_t x = 7;
    for (int32_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        l[i] = (float)(x >> 8) / 16777216.0f * 4.0f;
    }
}

static void seeds_reproduce_and_differ(void **state) {
    (void)state;
    enum { V = 64, N = 300 };
    float logits[V];
    spread_logits(logits, V);
    int32_t a[N], b[N], c[N];
    tr_sampler *s1 = make(1.0f, 0, 1.0f, 42), *s2 = make(1.0f, 0, 1.0f, 42), *s3 = make(1.0f, 0, 1.0f, 43);
    for (int i = 0; i < N; i++) {
        a[i] = tr_sampler_sample(s1, logits, V);
        b[i] = tr_sampler_sample(s2, logits, V);
        c[i] = tr_sampler_sample(s3, logits, V);
        assert_true(a[i] >= 0 && a[i] < V && c[i] >= 0 && c[i] < V);
    }
    assert_memory_equal(a, b, sizeof a);
    int differ = 0, distinct = 0;
    bool seen[V] = {false};
    for (int i = 0; i < N; i++) {
        differ += a[i] != c[i];
        if (!seen[a[i]]) seen[a[i]] = true, distinct++;
    }
    assert_true(differ > N / 2); /* another seed: a different run, not a shifted copy */
    assert_true(distinct > 20);  /* and sampling really samples */
    tr_sampler_free(s1);
    tr_sampler_free(s2);
    tr_sampler_free(s3);
    /* Seed 0 is valid and not degenerate (a zero xorshift state would stick). */
    tr_sampler *z = make(1.0f, 0, 1.0f, 0), *z2 = make(1.0f, 0, 1.0f, 0);
    distinct = 0;
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < N; i++) {
        int32_t id = tr_sampler_sample(z, logits, V);
        assert_int_equal(id, tr_sampler_sample(z2, logits, V));
        if (!seen[id]) seen[id] = true, distinct++;
    }
    assert_true(distinct > 20);
    tr_sampler_free(z);
    tr_sampler_free(z2);
}

static void top_k_one_and_tiny_top_p_are_greedy(void **state) {
    (void)state;
    enum { V = 64 };
    float logits[V];
    spread_logits(logits, V);
    const int32_t best = tr_argmax(logits, V);
    float ties[V];
    for (int i = 0; i < V; i++) ties[i] = 0.0f;
    ties[9] = ties[30] = 2.0f;
    tr_sampler *k1 = make(1.5f, 1, 1.0f, 5), *p0 = make(1.0f, 0, 1e-6f, 6), *both = make(3.0f, 10, 1e-3f, 7);
    for (int i = 0; i < 500; i++) {
        assert_int_equal(tr_sampler_sample(k1, logits, V), best);
        assert_int_equal(tr_sampler_sample(p0, logits, V), best);
        assert_int_equal(tr_sampler_sample(both, logits, V), best);
        assert_int_equal(tr_sampler_sample(k1, ties, V), 9); /* lowest id among the tied maxima */
        assert_int_equal(tr_sampler_sample(p0, ties, V), 9);
    }
    tr_sampler_free(k1);
    tr_sampler_free(p0);
    tr_sampler_free(both);
}

/* Draws n samples and checks each id's frequency against expected probabilities within 5 binomial sigmas. */
static void check_frequencies(tr_sampler *s, const float *logits, int32_t V, const double *expect, int n,
                              const char *what) {
    int counts[16] = {0};
    assert_true(V <= 16);
    for (int i = 0; i < n; i++) {
        int32_t id = tr_sampler_sample(s, logits, V);
        assert_true(id >= 0 && id < V);
        counts[id]++;
    }
    for (int32_t i = 0; i < V; i++) {
        const double f = (double)counts[i] / n, p = expect[i];
        const double sigma = sqrt(p * (1 - p) / n);
        if (p == 0.0 && counts[i] != 0) fail_msg("%s: id %d has probability 0 but was drawn %d times", what, i, counts[i]);
        if (fabs(f - p) > 5 * sigma + 1e-9)
            fail_msg("%s: id %d drawn with frequency %.4f, expected %.4f (5 sigma = %.4f)", what, i, f, p, 5 * sigma);
    }
}

static void softmax_of(const float *l, int32_t V, double temperature, const bool *keep, double *out) {
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < V; i++)
        if (keep[i] && l[i] > mx) mx = l[i];
    for (int32_t i = 0; i < V; i++) {
        out[i] = keep[i] ? exp((l[i] - mx) / temperature) : 0.0;
        sum += out[i];
    }
    for (int32_t i = 0; i < V; i++) out[i] /= sum;
}

static void frequencies_follow_softmax(void **state) {
    (void)state;
    enum { V = 6, N = 20000 };
    const float logits[V] = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 3.0f};
    const bool all[V] = {true, true, true, true, true, true};
    double p[V];

    softmax_of(logits, V, 1.0, all, p);
    tr_sampler *s = make(1.0f, 0, 1.0f, 11);
    check_frequencies(s, logits, V, p, N, "temperature 1");
    tr_sampler_free(s);

    softmax_of(logits, V, 0.5, all, p);
    s = make(0.5f, 0, 1.0f, 12);
    check_frequencies(s, logits, V, p, N, "temperature 0.5");
    tr_sampler_free(s);

    softmax_of(logits, V, 2.0, all, p);
    s = make(2.0f, 0, 1.0f, 13);
    check_frequencies(s, logits, V, p, N, "temperature 2");
    tr_sampler_free(s);

    /* top_k = 2: only ids 5 and 2, renormalized. */
    const bool top2[V] = {false, false, true, false, false, true};
    softmax_of(logits, V, 1.0, top2, p);
    s = make(1.0f, 2, 1.0f, 14);
    check_frequencies(s, logits, V, p, N, "top_k 2");
    tr_sampler_free(s);

    /* top_p = 0.7: softmax is {5: .636, 2: .234, 1: .086, ...}; the smallest prefix reaching 0.7 is {5, 2}. */
    softmax_of(logits, V, 1.0, all, p);
    assert_true(p[5] < 0.7 && p[5] + p[2] >= 0.7);
    softmax_of(logits, V, 1.0, top2, p);
    s = make(1.0f, 0, 0.7f, 15);
    check_frequencies(s, logits, V, p, N, "top_p 0.7");
    tr_sampler_free(s);

    /* top_k = 3 then top_p = 0.95 over the three kept: probabilities .665/.245/.090 — 0.95 needs all three. */
    const bool top3[V] = {false, true, true, false, false, true};
    softmax_of(logits, V, 1.0, top3, p);
    assert_true(p[5] + p[2] < 0.95);
    s = make(1.0f, 3, 0.95f, 16);
    check_frequencies(s, logits, V, p, N, "top_k 3, top_p 0.95");
    tr_sampler_free(s);
}

static void large_vocabulary_after_small(void **state) {
    (void)state;
    enum { BIG = 50000 };
    float *logits = malloc(BIG * sizeof *logits);
    spread_logits(logits, BIG);
    logits[31337] = 40.0f; /* dominant: with temperature 1 essentially always chosen */
    tr_sampler *s = make(1.0f, 0, 1.0f, 3);
    float small[4] = {0.0f, 1.0f, 0.5f, 0.2f};
    for (int i = 0; i < 20; i++) {
        int32_t a = tr_sampler_sample(s, small, 4);
        assert_true(a >= 0 && a < 4);
        assert_int_equal(tr_sampler_sample(s, logits, BIG), 31337);
    }
    tr_sampler_free(s);
    free(logits);
}

static void invalid_parameters(void **state) {
    (void)state;
    struct {
        float temperature;
        int32_t top_k;
        float top_p;
    } bad[] = {
        {1.0f, -1, 0.9f}, {1.0f, 40, 0.0f}, {1.0f, 40, -0.5f}, {1.0f, 40, 1.5f},
        {1.0f, 40, NAN},  {NAN, 40, 0.9f},  {1.0f, INT32_MIN, 0.9f},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tr_sampler_params p = tr_sampler_default_params();
        p.temperature = bad[i].temperature;
        p.top_k = bad[i].top_k;
        p.top_p = bad[i].top_p;
        tr_sampler *s = NULL;
        if (tr_sampler_create(&p, &s) != TR_ERR_ARG)
            fail_msg("case %zu (temperature %g, top_k %d, top_p %g) was accepted", i, bad[i].temperature,
                     bad[i].top_k, bad[i].top_p);
        assert_null(s);
        assert_true(strlen(tr_last_error()) > 0);
    }
    tr_sampler_params p = tr_sampler_default_params();
    assert_int_equal(tr_sampler_create(&p, NULL), TR_ERR_ARG);
    /* Boundaries that are valid: top_p = 1, top_k = 0, temperature 0. */
    p.top_p = 1.0f;
    p.top_k = 0;
    p.temperature = 0.0f;
    tr_sampler *s = NULL;
    assert_int_equal(tr_sampler_create(&p, &s), TR_OK);
    tr_sampler_free(s);
    tr_sampler_free(NULL);
}

/* tokroute.h documents `temperature <= 0: greedy`, so a negative temperature is greedy, not an error. */
static void negative_temperature_is_greedy_per_header(void **state) {
    (void)state;
    tr_sampler_params p = tr_sampler_default_params();
    p.temperature = -1.0f;
    tr_sampler *s = NULL;
    tr_status st = tr_sampler_create(&p, &s);
    if (st != TR_OK) fail_msg("temperature -1 refused (%s: %s)", tr_status_name(st), tr_last_error());
    const float ties[] = {1.0f, 5.0f, 5.0f};
    assert_int_equal(tr_sampler_sample(s, ties, 3), 1);
    tr_sampler_free(s);
}

/* Logit rows of several kinds: a soft random spread, coarse values with many exact ties (the order's id
 * tie-break matters), a peaked LM-like row, and rows with -inf entries. */
static void make_row(float *l, int32_t n, int kind, uint64_t seed) {
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const double u = (double)(seed >> 11) / 9007199254740992.0;
        switch (kind) {
        case 0: l[i] = (float)(u * 8.0 - 4.0); break;
        case 1: l[i] = (float)floor(u * 6.0); break;
        case 2: l[i] = (float)(-10.0 + 3.0 * u); break;
        default: l[i] = u < 0.3 ? -INFINITY : (float)(u * 5.0); break;
        }
    }
    if (kind == 2)
        for (int32_t i = 0; i < 12 && i < n; i++) l[(int32_t)((uint64_t)i * 7919 % (uint64_t)n)] = 6.0f - (float)i * 0.4f;
}

static void argmax_matches_reference(void **state) {
    (void)state;
    const int32_t sizes[] = {1, 2, 7, 8, 9, 15, 16, 17, 100, 4099, 151936};
    float *l = malloc(151936 * sizeof *l);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int kind = 0; kind < 4; kind++)
            for (uint64_t seed = 1; seed <= 4; seed++) {
                const int32_t n = sizes[k];
                make_row(l, n, kind, seed * 31 + (uint64_t)k);
                assert_int_equal(tr_argmax(l, n), ref_argmax(l, n));
                l[n - 1] = 1e9f; /* the maximum in the tail, then tied at the front */
                assert_int_equal(tr_argmax(l, n), n - 1);
                l[0] = 1e9f;
                assert_int_equal(tr_argmax(l, n), 0);
            }
    for (int32_t i = 0; i < 100; i++) l[i] = -INFINITY;
    assert_int_equal(tr_argmax(l, 100), 0);
    l[57] = -1e30f;
    assert_int_equal(tr_argmax(l, 100), 57);
    free(l);
}

/* The sampler against the full-sort reference: same seed, same draws. With top-k the arithmetic is the same
 * operation for operation, so every draw must match; without it only the normalizing sum is taken in another
 * order (last-bit differences), and over these rows every draw matches too. */
static void draws_match_full_sort_reference(void **state) {
    (void)state;
    const struct {
        int32_t n_vocab, draws;
    } sizes[] = {{7, 300}, {64, 300}, {1000, 50}, {50000, 8}, {151936, 4}};
    const float temps[] = {0.3f, 0.8f, 1.0f, 1.7f};
    const struct {
        int32_t top_k;
        float top_p;
    } cuts[] = {{0, 1.0f}, {0, 0.95f}, {0, 0.5f}, {40, 0.95f}, {40, 1.0f}, {1, 1.0f}, {5, 0.3f}, {300, 0.9f},
                {-1 /* = n_vocab */, 0.95f}, {-2 /* = n_vocab + 3 */, 1.0f}};
    float *l = malloc(151936 * sizeof *l);
    ref_candidate *scratch = malloc(151936 * sizeof *scratch);
    int64_t n_draws = 0;
    for (size_t v = 0; v < sizeof sizes / sizeof sizes[0]; v++) {
        const int32_t n = sizes[v].n_vocab;
        for (int kind = 0; kind < 4; kind++) {
            make_row(l, n, kind, 1000 + (uint64_t)v * 10 + (uint64_t)kind);
            for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++)
                for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
                    /* big rows (the reference sorts them whole per draw): tied and peaked rows, T = 0.8, no cut,
                     * top-p alone, top-k + top-p */
                    if (n > 1000 && (kind == 0 || kind == 3 || t != 1 || c > 3 || c == 2)) continue;
                    tr_sampler_params p = tr_sampler_default_params();
                    p.temperature = temps[t];
                    p.top_k = cuts[c].top_k == -1 ? n : cuts[c].top_k == -2 ? n + 3 : cuts[c].top_k;
                    p.top_p = cuts[c].top_p;
                    /* no cut: drawn in id order, the same distribution (frequencies_follow_softmax), other draws */
                    if ((p.top_k == 0 || p.top_k >= n) && p.top_p >= 1.0f) continue;
                    p.seed = 77 + c * 13 + t;
                    tr_sampler *s = NULL;
                    assert_int_equal(tr_sampler_create(&p, &s), TR_OK);
                    ref_sampler r;
                    ref_sampler_init(&r, &p, scratch);
                    for (int32_t d = 0; d < sizes[v].draws; d++) {
                        const int32_t want = ref_sampler_sample(&r, l, n), got = tr_sampler_sample(s, l, n);
                        if (got != want)
                            fail_msg("n_vocab %d row kind %d temperature %g top_k %d top_p %g draw %d: got %d, the "
                                     "reference drew %d", n, kind, p.temperature, p.top_k, p.top_p, d, got, want);
                        n_draws++;
                    }
                    tr_sampler_free(s);
                }
        }
    }
    assert_true(n_draws > 30000);
    free(l);
    free(scratch);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),
        cmocka_unit_test(greedy_is_argmax_lowest_id_on_ties),
        cmocka_unit_test(seeds_reproduce_and_differ),
        cmocka_unit_test(top_k_one_and_tiny_top_p_are_greedy),
        cmocka_unit_test(frequencies_follow_softmax),
        cmocka_unit_test(large_vocabulary_after_small),
        cmocka_unit_test(invalid_parameters),
        cmocka_unit_test(negative_temperature_is_greedy_per_header),
        cmocka_unit_test(argmax_matches_reference),
        cmocka_unit_test(draws_match_full_sort_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
