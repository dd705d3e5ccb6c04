/* test_train_ngram.c — the trainer's n-gram table (ngram_build.c, issue 32): counts, the min_count cut, the top-2
 * followers' order and ties, position 0 read as START whatever its token, the lookup's choice of the highest order
 * and its values; and the property training relies on: each position's leave-one-example-out values equal, bit for
 * bit, what a table built from the data without that example gives (router_ngram_lookup), on random sequences
 * over a small vocabulary (many repeated contexts, many ties). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "router/router_internal.h"
#include "tokroute.h"
#include "train/train_internal.h"

static tr_ngram_table *table_of(const int32_t *const *seqs, const int32_t *lens, int32_t n, int32_t order,
                                int32_t min_count, ngram_counts **counts) {
    ngram_counts *c = NULL;
    assert_int_equal(ngram_counts_build(seqs, lens, n, order, min_count, &c), TR_OK);
    tr_ngram_table *t = NULL;
    assert_int_equal(ngram_counts_table(c, &t), TR_OK);
    assert_int_equal(ngram_table_check(t, 1000), TR_OK);
    if (counts) *counts = c;
    else ngram_counts_free(c);
    return t;
}

static void expect_entry(const tr_ngram_table *t, int32_t k, int64_t e, const int32_t *ctx, ngram_stats want) {
    const ngram_order_table *o = &t->orders[k - 1];
    assert_true(e < o->n);
    for (int32_t j = 0; j < k; j++)
        if (o->context[e * k + j] != ctx[j])
            fail_msg("order %d entry %d token %d: %d, want %d", (int)k, (int)e, (int)j, (int)o->context[e * k + j],
                     (int)ctx[j]);
    const ngram_stats *s = &o->stats[e];
    if (s->count != want.count || s->t1 != want.t1 || s->m1 != want.m1 || s->t2 != want.t2 || s->m2 != want.m2)
        fail_msg("order %d entry %d: C %d t1 %d M1 %d t2 %d M2 %d, want %d %d %d %d %d", (int)k, (int)e, s->count,
                 s->t1, s->m1, s->t2, s->m2, want.count, want.t1, want.m1, want.t2, want.m2);
}

/* s0 = BOS 1 2 1 3 1 2, s1 = BOS' 1 3 (another BOS id: position 0 is START either way). Order 1: START -> 1 twice;
 * 1 -> 2 twice and 3 twice (tie: the smaller id first); 2 -> 1 once; 3 -> 1 once. Order 2: (1, START) -> 2, 3;
 * (1, 2), (1, 3), (2, 1), (3, 1) once each. */
static void test_counts_min_count_ties_and_start(void **state) {
    (void)state;
    const int32_t s0[] = {9, 1, 2, 1, 3, 1, 2}, s1[] = {8, 1, 3};
    const int32_t *seqs[] = {s0, s1}, lens[] = {7, 3};
    tr_ngram_table *t = table_of(seqs, lens, 2, 2, 1, NULL);
    assert_int_equal(t->orders[0].n, 4);
    expect_entry(t, 1, 0, (int32_t[]){NGRAM_START}, (ngram_stats){2, 1, 2, -1, 0});
    expect_entry(t, 1, 1, (int32_t[]){1}, (ngram_stats){4, 2, 2, 3, 2});
    expect_entry(t, 1, 2, (int32_t[]){2}, (ngram_stats){1, 1, 1, -1, 0});
    expect_entry(t, 1, 3, (int32_t[]){3}, (ngram_stats){1, 1, 1, -1, 0});
    assert_int_equal(t->orders[1].n, 5); /* sorted lexicographically, nearest token first, START lowest */
    expect_entry(t, 2, 0, (int32_t[]){1, NGRAM_START}, (ngram_stats){2, 2, 1, 3, 1});
    expect_entry(t, 2, 1, (int32_t[]){1, 2}, (ngram_stats){1, 3, 1, -1, 0});
    expect_entry(t, 2, 2, (int32_t[]){1, 3}, (ngram_stats){1, 2, 1, -1, 0});
    expect_entry(t, 2, 3, (int32_t[]){2, 1}, (ngram_stats){1, 1, 1, -1, 0});
    expect_entry(t, 2, 4, (int32_t[]){3, 1}, (ngram_stats){1, 1, 1, -1, 0});
    ngram_table_free(t);
    /* min_count 2 keeps START, 1 and (1, START). */
    t = table_of(seqs, lens, 2, 2, 2, NULL);
    assert_int_equal(t->orders[0].n, 2);
    assert_int_equal(t->orders[1].n, 1);
    expect_entry(t, 1, 1, (int32_t[]){1}, (ngram_stats){4, 2, 2, 3, 2});
    expect_entry(t, 2, 0, (int32_t[]){1, NGRAM_START}, (ngram_stats){2, 2, 1, 3, 1});
    /* The lookup takes the highest order held: at p = 2 of BOS 1 the context (1, START). */
    float v[TR_ROUTER_NGRAM_VALUES];
    const int32_t q[] = {5, 1, 3, 1};
    router_ngram_lookup(t, q, 2, 3, v);
    const float want2[] = {1, (float)(1.0 / 2.0), (float)(1.0 / 2.0), 0, (float)log1p(2.0), 1};
    assert_memory_equal(v, want2, sizeof want2);
    /* At p = 4, (1, 3) is not held: order 1's context 1 (C = 4), the SLM's 2 is t1. */
    router_ngram_lookup(t, q, 4, 2, v);
    const float want1[] = {1, (float)(2.0 / 4.0), (float)(2.0 / 4.0), 1, (float)log1p(4.0), (float)(1.0 / 2.0)};
    assert_memory_equal(v, want1, sizeof want1);
    router_ngram_lookup(t, q, 4, 7, v); /* neither t1 nor t2: share 0 */
    assert_true(v[1] == 0.0f && v[3] == 0.0f && v[0] == 1.0f);
    /* Nothing held: all six 0. */
    const int32_t none[] = {5, 7};
    router_ngram_lookup(t, none, 2, 7, v);
    for (int j = 0; j < TR_ROUTER_NGRAM_VALUES; j++) assert_true(v[j] == 0.0f);
    ngram_table_free(t);
}

/* Counts decide the order of the followers; equal counts the smaller id. */
static void test_top2_by_count(void **state) {
    (void)state;
    const int32_t s0[] = {0, 4, 7, 4, 7, 4, 7, 4, 5, 4, 6, 4, 5};
    const int32_t *seqs[] = {s0}, lens[] = {13};
    tr_ngram_table *t = table_of(seqs, lens, 1, 1, 1, NULL);
    /* 4 -> 7 three times, 5 twice, 6 once */
    expect_entry(t, 1, 1, (int32_t[]){4}, (ngram_stats){6, 7, 3, 5, 2});
    ngram_table_free(t);
}

static uint32_t rng_next(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

/* For every sequence e: the leave-one-out values at each of its positions (also the one after its last token, and
 * every SLM proposal) equal the lookup in a table built from the other sequences. */
static void test_leave_one_out_equals_table_without(void **state) {
    (void)state;
    enum { N = 14, V = 4, LMAX = 40 };
    int32_t buf[N][LMAX], lens[N];
    const int32_t *seqs[N];
    uint32_t x = 7;
    for (int e = 0; e < N; e++) {
        lens[e] = 3 + (int32_t)(rng_next(&x) % (LMAX - 3));
        buf[e][0] = e % 3 ? 99 : NGRAM_START;
        for (int q = 1; q < lens[e]; q++) buf[e][q] = (int32_t)(rng_next(&x) % (q % 5 ? V : 2));
        seqs[e] = buf[e];
    }
    for (int32_t min_count = 1; min_count <= NGRAM_MIN_COUNT; min_count += NGRAM_MIN_COUNT - 1) {
        ngram_counts *all = NULL;
        tr_ngram_table *full = table_of(seqs, lens, N, NGRAM_ORDER, min_count, &all);
        int64_t checked = 0, found = 0, differs = 0, by_order[NGRAM_ORDER + 1] = {0};
        for (int e = 0; e < N; e++) {
            const int32_t *others[N];
            int32_t other_lens[N], n = 0;
            for (int f = 0; f < N; f++)
                if (f != e) others[n] = seqs[f], other_lens[n++] = lens[f];
            tr_ngram_table *without = table_of(others, other_lens, n, NGRAM_ORDER, min_count, NULL);
            for (int32_t p = 1; p <= lens[e]; p++)
                for (int32_t s = 0; s < V + 1; s++) {
                    float loo[TR_ROUTER_NGRAM_VALUES], want[TR_ROUTER_NGRAM_VALUES], seen[TR_ROUTER_NGRAM_VALUES];
                    ngram_counts_loo_values(all, e, p, s, loo);
                    router_ngram_lookup(without, seqs[e], p, s, want);
                    if (memcmp(loo, want, sizeof want) != 0)
                        fail_msg("min_count %d sequence %d position %d top-1 %d: loo (%g %g %g %g %g %g) vs table "
                                 "without it (%g %g %g %g %g %g)", (int)min_count, e, (int)p, (int)s, loo[0], loo[1],
                                 loo[2], loo[3], loo[4], loo[5], want[0], want[1], want[2], want[3], want[4], want[5]);
                    router_ngram_lookup(full, seqs[e], p, s, seen);
                    checked++;
                    found += loo[0] == 1.0f;
                    by_order[(int)lroundf(loo[5] * NGRAM_ORDER)]++;
                    differs += memcmp(loo, seen, sizeof seen) != 0;
                }
            ngram_table_free(without);
        }
        /* Not vacuous: most positions find a context, at several orders, and leaving the example out matters. */
        assert_true(found > checked / 2);
        int orders_seen = 0;
        for (int k = 1; k <= NGRAM_ORDER; k++) orders_seen += by_order[k] > 0;
        assert_true(orders_seen >= 3);
        assert_true(differs > checked / 4);
        ngram_table_free(full);
        ngram_counts_free(all);
    }
}

static void test_bad_arguments(void **state) {
    (void)state;
    const int32_t s0[] = {0, 1, -5};
    const int32_t *seqs[] = {s0}, lens[] = {3};
    ngram_counts *c = NULL;
    assert_int_equal(ngram_counts_build(seqs, lens, 1, 2, 1, &c), TR_ERR_ARG); /* a negative token */
    assert_null(c);
    assert_int_equal(ngram_counts_build(seqs, lens, 1, NGRAM_ORDER_MAX + 1, 1, &c), TR_ERR_ARG);
    assert_int_equal(ngram_counts_build(seqs, lens, 1, 2, 0, &c), TR_ERR_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_min_count_ties_and_start),
        cmocka_unit_test(test_top2_by_count),
        cmocka_unit_test(test_leave_one_out_equals_table_without),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
