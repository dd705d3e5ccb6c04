/* test_train_ngram.c — the trainer's n-gram table (ngram_build.c, issue 32): counts, the min_count cut, the top-2
 * followers' order and ties, position 0 read as START whatever its token, the gain mean over the followers that
 * have a gain, the lookup's choice of the highest order and its values; the property training relies on: each
 * position's leave-one-example-out values equal, bit for bit, what a table built from the data without that
 * example gives (router_ngram_lookup), on random sequences over a small vocabulary (many repeated contexts, many
 * ties, gains missing here and there); and table-only data (train-router --ngram-data): counted into the table
 * exactly as if it were training data, never left out of a training row, the same whether opened the ordinary way
 * or table-only (tr_train_data_open_table_only), which refuses what reads hidden states. */
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
#include "support/fixtures.h"
#include "tokroute.h"
#include "train/train_fixture.h"
#include "train/train_internal.h"

static tr_ngram_table *table_of(const int32_t *const *seqs, const int32_t *const *gains, const int32_t *lens,
                                int32_t n, int32_t order, int32_t min_count, ngram_counts **counts) {
    ngram_counts *c = NULL;
    assert_int_equal(ngram_counts_build(seqs, gains, lens, n, order, min_count, &c), TR_OK);
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
    if (s->count != want.count || s->t1 != want.t1 || s->m1 != want.m1 || s->t2 != want.t2 || s->m2 != want.m2 ||
        memcmp(&s->gain_mean, &want.gain_mean, sizeof(float)) != 0)
        fail_msg("order %d entry %d: C %d t1 %d M1 %d t2 %d M2 %d gain %.9g, want %d %d %d %d %d %.9g", (int)k, (int)e,
                 s->count, s->t1, s->m1, s->t2, s->m2, (double)s->gain_mean, want.count, want.t1, want.m1, want.t2,
                 want.m2, (double)want.gain_mean);
}

/* s0 = BOS 1 2 1 3 1 2, s1 = BOS' 1 3 (another BOS id: position 0 is START either way). Order 1: START -> 1 twice;
 * 1 -> 2 twice and 3 twice (tie: the smaller id first); 2 -> 1 once; 3 -> 1 once. Order 2: (1, START) -> 2, 3;
 * (1, 2), (1, 3), (2, 1), (3, 1) once each. The gains (quantized; -1: the position has no record) of s0's
 * positions 1..6 are 1.0, 0, 0.5, none, 0.25, 6554 and of s1's 1..2 none, 13107: START's mean is 1.0 (one gain of
 * two followers), token 1's (0 + 6554 + 13107) / 3, (1, 2)'s 0 (its one follower has none). */
static const int32_t gains_s0[] = {-1, 65536, 0, 32768, -1, 16384, 6554}, gains_s1[] = {-1, -1, 13107};

static ngram_stats stats(int32_t c, int32_t t1, int32_t m1, int32_t t2, int32_t m2, double gain_mean) {
    return (ngram_stats){c, t1, m1, t2, m2, (float)gain_mean};
}

static void test_counts_min_count_ties_and_start(void **state) {
    (void)state;
    const int32_t s0[] = {9, 1, 2, 1, 3, 1, 2}, s1[] = {8, 1, 3};
    const int32_t *seqs[] = {s0, s1}, lens[] = {7, 3}, *gains[] = {gains_s0, gains_s1};
    const double mean_1 = (0.0 + 6554.0 + 13107.0) / 3.0 / 65536.0;
    tr_ngram_table *t = table_of(seqs, gains, lens, 2, 2, 1, NULL);
    assert_int_equal(t->orders[0].n, 4);
    expect_entry(t, 1, 0, (int32_t[]){NGRAM_START}, stats(2, 1, 2, -1, 0, 1.0));
    expect_entry(t, 1, 1, (int32_t[]){1}, stats(4, 2, 2, 3, 2, mean_1));
    expect_entry(t, 1, 2, (int32_t[]){2}, stats(1, 1, 1, -1, 0, 0.5));
    expect_entry(t, 1, 3, (int32_t[]){3}, stats(1, 1, 1, -1, 0, 0.25));
    assert_int_equal(t->orders[1].n, 5); /* sorted lexicographically, nearest token first, START lowest */
    expect_entry(t, 2, 0, (int32_t[]){1, NGRAM_START}, stats(2, 2, 1, 3, 1, 13107.0 / 2.0 / 65536.0));
    expect_entry(t, 2, 1, (int32_t[]){1, 2}, stats(1, 3, 1, -1, 0, 0));
    expect_entry(t, 2, 2, (int32_t[]){1, 3}, stats(1, 2, 1, -1, 0, 6554.0 / 65536.0));
    expect_entry(t, 2, 3, (int32_t[]){2, 1}, stats(1, 1, 1, -1, 0, 0.5));
    expect_entry(t, 2, 4, (int32_t[]){3, 1}, stats(1, 1, 1, -1, 0, 0.25));
    ngram_table_free(t);
    /* Without gains every mean is 0. */
    t = table_of(seqs, NULL, lens, 2, 2, 1, NULL);
    expect_entry(t, 1, 1, (int32_t[]){1}, stats(4, 2, 2, 3, 2, 0));
    ngram_table_free(t);
    /* min_count 2 keeps START, 1 and (1, START). */
    t = table_of(seqs, gains, lens, 2, 2, 2, NULL);
    assert_int_equal(t->orders[0].n, 2);
    assert_int_equal(t->orders[1].n, 1);
    expect_entry(t, 1, 1, (int32_t[]){1}, stats(4, 2, 2, 3, 2, mean_1));
    expect_entry(t, 2, 0, (int32_t[]){1, NGRAM_START}, stats(2, 2, 1, 3, 1, 13107.0 / 2.0 / 65536.0));
    /* The lookup takes the highest order held: at p = 2 of BOS 1 the context (1, START). */
    float v[TR_ROUTER_NGRAM_VALUES];
    const int32_t q[] = {5, 1, 3, 1};
    router_ngram_lookup(t, q, 2, 3, v);
    const float want2[] = {1, (float)(1.0 / 2.0), (float)(1.0 / 2.0), 0, (float)log1p(2.0), 1,
                           (float)(13107.0 / 2.0 / 65536.0)};
    assert_memory_equal(v, want2, sizeof want2);
    /* At p = 4, (1, 3) is not held: order 1's context 1 (C = 4), the SLM's 2 is t1. */
    router_ngram_lookup(t, q, 4, 2, v);
    const float want1[] = {1, (float)(2.0 / 4.0), (float)(2.0 / 4.0), 1, (float)log1p(4.0), (float)(1.0 / 2.0),
                           (float)mean_1};
    assert_memory_equal(v, want1, sizeof want1);
    router_ngram_lookup(t, q, 4, 7, v); /* neither t1 nor t2: share 0 */
    assert_true(v[1] == 0.0f && v[3] == 0.0f && v[0] == 1.0f);
    /* Nothing held: all seven 0. */
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
    tr_ngram_table *t = table_of(seqs, NULL, lens, 1, 1, 1, NULL);
    /* 4 -> 7 three times, 5 twice, 6 once */
    expect_entry(t, 1, 1, (int32_t[]){4}, stats(6, 7, 3, 5, 2, 0));
    ngram_table_free(t);
}

static uint32_t rng_next(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

/* For every sequence e: the leave-one-out values at each of its positions (also the one after its last token, and
 * every SLM proposal) equal the lookup in a table built from the other sequences, the gain mean included (gains
 * random in [0, 1], some positions without one). */
static void test_leave_one_out_equals_table_without(void **state) {
    (void)state;
    enum { N = 14, V = 4, LMAX = 40 };
    int32_t buf[N][LMAX], gbuf[N][LMAX], lens[N];
    const int32_t *seqs[N], *gains[N];
    uint32_t x = 7;
    for (int e = 0; e < N; e++) {
        lens[e] = 3 + (int32_t)(rng_next(&x) % (LMAX - 3));
        buf[e][0] = e % 3 ? 99 : NGRAM_START;
        gbuf[e][0] = -1;
        for (int q = 1; q < lens[e]; q++) {
            buf[e][q] = (int32_t)(rng_next(&x) % (q % 5 ? V : 2));
            const uint32_t r = rng_next(&x) % 8;
            gbuf[e][q] = r == 0 ? -1 : r < 4 ? 0 : ngram_gain_quantize((float)(rng_next(&x) % 1000) / 999.0f);
        }
        seqs[e] = buf[e];
        gains[e] = gbuf[e];
    }
    for (int32_t min_count = 1; min_count <= NGRAM_MIN_COUNT; min_count += NGRAM_MIN_COUNT - 1) {
        ngram_counts *all = NULL;
        tr_ngram_table *full = table_of(seqs, gains, lens, N, NGRAM_ORDER, min_count, &all);
        int64_t checked = 0, found = 0, differs = 0, gain_differs = 0, by_order[NGRAM_ORDER + 1] = {0};
        for (int e = 0; e < N; e++) {
            const int32_t *others[N], *other_gains[N];
            int32_t other_lens[N], n = 0;
            for (int f = 0; f < N; f++)
                if (f != e) others[n] = seqs[f], other_gains[n] = gains[f], other_lens[n++] = lens[f];
            tr_ngram_table *without = table_of(others, other_gains, other_lens, n, NGRAM_ORDER, min_count, NULL);
            for (int32_t p = 1; p <= lens[e]; p++)
                for (int32_t s = 0; s < V + 1; s++) {
                    float loo[TR_ROUTER_NGRAM_VALUES], want[TR_ROUTER_NGRAM_VALUES], seen[TR_ROUTER_NGRAM_VALUES];
                    ngram_counts_loo_values(all, e, p, s, loo);
                    router_ngram_lookup(without, seqs[e], p, s, want);
                    if (memcmp(loo, want, sizeof want) != 0)
                        fail_msg("min_count %d sequence %d position %d top-1 %d: loo (%g %g %g %g %g %g %.9g) vs "
                                 "table without it (%g %g %g %g %g %g %.9g)", (int)min_count, e, (int)p, (int)s,
                                 loo[0], loo[1], loo[2], loo[3], loo[4], loo[5], loo[6], want[0], want[1], want[2],
                                 want[3], want[4], want[5], want[6]);
                    router_ngram_lookup(full, seqs[e], p, s, seen);
                    checked++;
                    found += loo[0] == 1.0f;
                    by_order[(int)lroundf(loo[5] * NGRAM_ORDER)]++;
                    differs += memcmp(loo, seen, sizeof seen) != 0;
                    gain_differs += loo[6] != seen[6];
                }
            ngram_table_free(without);
        }
        /* Not vacuous: most positions find a context, at several orders, and leaving the example out matters. */
        assert_true(found > checked / 2);
        int orders_seen = 0;
        for (int k = 1; k <= NGRAM_ORDER; k++) orders_seen += by_order[k] > 0;
        assert_true(orders_seen >= 3);
        assert_true(differs > checked / 4);
        assert_true(gain_differs > checked / 4); /* the gain sums lose the example's own */
        ngram_table_free(full);
        ngram_counts_free(all);
    }
}

/* g quantizes to llround(g * 65536); a mean is the double quotient over 65536 rounded once to float. */
static void test_gain_quantize_and_mean(void **state) {
    (void)state;
    assert_int_equal(ngram_gain_quantize(0.0f), 0);
    assert_int_equal(ngram_gain_quantize(1.0f), 65536);
    assert_int_equal(ngram_gain_quantize(0.5f), 32768);
    assert_int_equal(ngram_gain_quantize(0.1f), 6554); /* 6553.6 */
    assert_true(ngram_gain_mean(0, 0) == 0.0f);
    assert_true(ngram_gain_mean(65536, 1) == 1.0f);
    assert_true(ngram_gain_mean(65536 + 32768, 3) == 0.5f);
    assert_true(ngram_gain_mean(6554, 1) == (float)(6554.0 / 65536.0));
}

/* Toy collect folders over a vocabulary of 6: tokens from a seeded generator, both top-1s disagreeing often, the
 * LLM's probabilities giving expected gains in [0, 1]. */
static void fill_random(void *user, int32_t ex, int32_t pos, collect_record *r, float *topk, float *hidden) {
    (void)topk, (void)hidden;
    uint32_t x = *(const uint32_t *)user + (uint32_t)ex * 7919u + (uint32_t)pos * 104729u;
    for (int i = 0; i < 3; i++) rng_next(&x);
    r->truth = (int32_t)(rng_next(&x) % (pos % 4 ? 6 : 2));
    r->slm_top1 = (int32_t)(rng_next(&x) % 3);
    r->llm_top1 = (int32_t)(rng_next(&x) % 3);
    r->llm_p_top1 = (float)(rng_next(&x) % 1000) / 999.0f;
    r->llm_p_slm_top1 = (float)(rng_next(&x) % 1000) / 999.0f;
    r->slm_p_top1 = r->slm_p_truth = r->llm_p_truth = r->slm_p_llm_top1 = 0.5f;
}

static void expect_same_table(const tr_ngram_table *a, const tr_ngram_table *b) {
    assert_int_equal(ngram_table_contexts(a), ngram_table_contexts(b));
    for (int k = 1; k <= NGRAM_ORDER; k++) {
        assert_int_equal(a->orders[k - 1].n, b->orders[k - 1].n);
        assert_memory_equal(a->orders[k - 1].context, b->orders[k - 1].context,
                            (size_t)a->orders[k - 1].n * (size_t)k * sizeof(int32_t));
        assert_memory_equal(a->orders[k - 1].stats, b->orders[k - 1].stats,
                            (size_t)a->orders[k - 1].n * sizeof(ngram_stats));
    }
}

/* Training on A with B counted into the table only (train-router --ngram-data) gives exactly the table of A and B
 * counted together, and A's rows the values they have in A + B trained together: each left out of its own example
 * only, B's counts kept. B changes both (it is no empty addition), and the values' gain mean is the records' g. */
static void test_table_only_data(void **state) {
    (void)state;
    char *dir_a = strdup(temp_path("")), *dir_b = strdup(temp_path(""));
    const toy_spec spec_a = {.n_embd = 2, .n_vocab = 6, .topk = 1, .n_examples = 12, .per_example = 30};
    const toy_spec spec_b = {.n_embd = 2, .n_vocab = 6, .topk = 1, .n_examples = 20, .per_example = 25};
    uint32_t seed_a = 11, seed_b = 23;
    assert_int_equal(toy_write(dir_a, &spec_a, fill_random, &seed_a), 0);
    assert_int_equal(toy_write(dir_b, &spec_b, fill_random, &seed_b), 0);
    tr_train_data *a = NULL, *b = NULL, *ab = NULL;
    assert_int_equal(tr_train_data_open(dir_a, &a), TR_OK);
    assert_int_equal(tr_train_data_open(dir_b, &b), TR_OK);
    assert_int_equal(tr_train_data_open(dir_a, &ab), TR_OK);
    assert_int_equal(tr_train_data_add(ab, dir_b), TR_OK);
    tr_ngram_table *t_a_b = NULL, *t_ab = NULL, *t_a = NULL;
    float *loo_a_b = NULL, *loo_ab = NULL, *loo_a = NULL;
    int64_t counted_a_b = 0, counted_ab = 0, counted_a = 0;
    assert_int_equal(ngram_train_build(a, b, &t_a_b, &loo_a_b, &counted_a_b), TR_OK);
    assert_int_equal(ngram_train_build(ab, NULL, &t_ab, &loo_ab, &counted_ab), TR_OK);
    assert_int_equal(ngram_train_build(a, NULL, &t_a, &loo_a, &counted_a), TR_OK);
    assert_int_equal(counted_a, 12 * 30);
    assert_int_equal(counted_a_b, 12 * 30 + 20 * 25);
    assert_int_equal(counted_ab, counted_a_b);
    expect_same_table(t_a_b, t_ab);
    const size_t row_bytes = TR_ROUTER_NGRAM_VALUES * sizeof(float);
    assert_memory_equal(loo_a_b, loo_ab, (size_t)a->n * row_bytes);
    assert_true(ngram_table_contexts(t_a_b) > ngram_table_contexts(t_a));
    int64_t differs = 0, gains = 0;
    for (int64_t i = 0; i < a->n; i++) {
        differs += memcmp(loo_a_b + i * TR_ROUTER_NGRAM_VALUES, loo_a + i * TR_ROUTER_NGRAM_VALUES, row_bytes) != 0;
        gains += loo_a_b[i * TR_ROUTER_NGRAM_VALUES + 6] > 0.0f;
    }
    assert_true(differs > a->n / 2);
    assert_true(gains > a->n / 2);
    /* The table's order-1 context START holds every example's first token: its mean is the mean of their g. */
    int64_t sum = 0, n = 0;
    for (const tr_train_data *d = a; d; d = d == a ? b : NULL)
        for (int64_t i = 0; i < d->n; i++)
            if (d->position[i] == 1) sum += ngram_gain_quantize(expected_gain(d, i)), n++;
    assert_int_equal(t_ab->orders[0].context[0], NGRAM_START);
    assert_true(t_ab->orders[0].stats[0].gain_mean == ngram_gain_mean(sum, n));
    assert_true(t_ab->orders[0].stats[0].gain_mean > 0.0f);
    ngram_table_free(t_a_b), ngram_table_free(t_ab), ngram_table_free(t_a);
    free(loo_a_b), free(loo_ab), free(loo_a);
    tr_train_data_free(a), tr_train_data_free(b), tr_train_data_free(ab);
    toy_remove(dir_a);
    toy_remove(dir_b);
    free(dir_a);
    free(dir_b);
}

/* The same folders opened table-only (tr_train_data_open_table_only, what train-router --ngram-data uses) keep every
 * value the table reads as the ordinary reader has it, and no hidden states or logit features: the table, the
 * training rows' values and a trained router file are bit for bit those of the ordinary data. Whatever reads
 * hidden states or logit features refuses such data, naming it. */
static void expect_refused(tr_status st) {
    assert_int_equal(st, TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "opened table-only"));
    assert_non_null(strstr(tr_last_error(), "tr_train_data_open"));
}

static void test_table_only_opened_lean(void **state) {
    (void)state;
    char *dir_a = strdup(temp_path("")), *dir_b = strdup(temp_path("")), *dir_c = strdup(temp_path(""));
    const toy_spec spec_a = {.n_embd = 3, .n_vocab = 6, .topk = 2, .n_examples = 14, .per_example = 30};
    const toy_spec spec_b = {.n_embd = 3, .n_vocab = 6, .topk = 2, .n_examples = 20, .per_example = 25};
    const toy_spec spec_c = {.n_embd = 3, .n_vocab = 6, .topk = 2, .n_examples = 9, .per_example = 17};
    uint32_t seed_a = 5, seed_b = 29, seed_c = 41;
    assert_int_equal(toy_write(dir_a, &spec_a, fill_random, &seed_a), 0);
    assert_int_equal(toy_write(dir_b, &spec_b, fill_random, &seed_b), 0);
    assert_int_equal(toy_write(dir_c, &spec_c, fill_random, &seed_c), 0);
    tr_train_data *a = NULL, *full = NULL, *lean = NULL;
    assert_int_equal(tr_train_data_open(dir_a, &a), TR_OK);
    assert_int_equal(tr_train_data_open(dir_b, &full), TR_OK);
    assert_int_equal(tr_train_data_add(full, dir_c), TR_OK);
    assert_int_equal(tr_train_data_open_table_only(dir_b, &lean), TR_OK);
    assert_int_equal(tr_train_data_add(lean, dir_c), TR_OK); /* added folders are read table-only too */
    assert_true(lean->table_only && !full->table_only);
    assert_null(lean->hidden);
    assert_null(lean->feats);
    /* What the table reads, as the ordinary reader has it. */
    assert_int_equal(lean->n, 20 * 25 + 9 * 17);
    assert_int_equal(lean->n, full->n);
    assert_int_equal(lean->n_groups, full->n_groups);
    assert_int_equal(lean->n_tokens, full->n_tokens);
    assert_int_equal(lean->n_embd, full->n_embd);
    assert_int_equal(lean->n_vocab, full->n_vocab);
    const size_t n = (size_t)full->n, ints = n * sizeof(int32_t);
    assert_memory_equal(lean->group, full->group, ints);
    assert_memory_equal(lean->example, full->example, ints);
    assert_memory_equal(lean->position, full->position, ints);
    assert_memory_equal(lean->truth, full->truth, ints);
    assert_memory_equal(lean->slm_top1, full->slm_top1, ints);
    assert_memory_equal(lean->llm_top1, full->llm_top1, ints);
    assert_memory_equal(lean->probs, full->probs, n * COLLECT_N_PROBS * sizeof(float));
    assert_memory_equal(lean->tokens, full->tokens, (size_t)full->n_tokens * sizeof(int32_t));
    assert_memory_equal(lean->group_tokens, full->group_tokens, (size_t)full->n_groups * sizeof(int64_t));
    assert_memory_equal(lean->group_n_tokens, full->group_n_tokens, (size_t)full->n_groups * sizeof(int32_t));
    /* The table and every training row's values. */
    tr_ngram_table *t_full = NULL, *t_lean = NULL;
    float *loo_full = NULL, *loo_lean = NULL;
    int64_t counted_full = 0, counted_lean = 0;
    assert_int_equal(ngram_train_build(a, full, &t_full, &loo_full, &counted_full), TR_OK);
    assert_int_equal(ngram_train_build(a, lean, &t_lean, &loo_lean, &counted_lean), TR_OK);
    assert_int_equal(counted_lean, counted_full);
    assert_int_equal(counted_lean, 14 * 30 + 20 * 25 + 9 * 17);
    expect_same_table(t_lean, t_full);
    assert_memory_equal(loo_lean, loo_full, (size_t)a->n * TR_ROUTER_NGRAM_VALUES * sizeof(float));
    /* A router trained with either is the same file. */
    tr_train_params p = tr_train_default_params();
    p.features &= ~(unsigned)TR_FEATURE_TOKEN_EMBEDDING; /* toy data: no SLM */
    p.topk = 2;
    p.hidden[0] = 8;
    p.hidden[1] = 0;
    p.epochs = 2;
    p.n_threads = 1;
    char *out_full = strdup(temp_path(".gguf")), *out_lean = strdup(temp_path(".gguf"));
    p.ngram_data = full;
    assert_int_equal(tr_train_router(a, &p, out_full, NULL), TR_OK);
    p.ngram_data = lean;
    assert_int_equal(tr_train_router(a, &p, out_lean, NULL), TR_OK);
    size_t n_file_full = 0, n_file_lean = 0;
    char *file_full = read_file(out_full, &n_file_full), *file_lean = read_file(out_lean, &n_file_lean);
    assert_non_null(file_full);
    assert_non_null(file_lean);
    assert_int_equal(n_file_lean, n_file_full);
    assert_memory_equal(file_lean, file_full, n_file_full);
    free(file_full), free(file_lean);
    /* What reads hidden states or logit features refuses it: as training or calibration data, positions, rows,
     * scores (tr_calibrate and tr_train_gap through them); labels and the bound read neither and agree. */
    p.ngram_data = NULL;
    expect_refused(tr_train_router(lean, &p, out_lean, NULL));
    p.calibration = lean;
    p.target_routed = 0.2;
    expect_refused(tr_train_router(a, &p, out_lean, NULL));
    tr_train_position pos;
    expect_refused(tr_train_data_position(lean, 0, &pos));
    assert_int_equal(tr_train_data_position(full, 0, &pos), TR_OK);
    float row[64];
    expect_refused(tr_train_data_inputs(lean, TR_FEATURE_MAXPROB, 0, NULL, 0, 1, row));
    assert_int_equal(tr_train_data_inputs(full, TR_FEATURE_MAXPROB, 0, NULL, 0, 1, row), TR_OK);
    expect_refused(train_input_row(lean, 0, TR_FEATURE_MAXPROB, 0, 0, NULL, NULL, row));
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(out_full, NULL, &r), TR_OK);
    float *scores = malloc(n * sizeof(float));
    expect_refused(tr_train_data_scores(lean, r, scores));
    float tau = 0;
    expect_refused(tr_calibrate(r, lean, 0.2, &tau, NULL));
    const double target = 0.2;
    tr_gap_point point, point_full;
    expect_refused(tr_train_gap(lean, r, &target, 1, &point, NULL));
    assert_int_equal(tr_train_gap_bound(lean, &target, 1, &point), TR_OK);
    assert_int_equal(tr_train_gap_bound(full, &target, 1, &point_full), TR_OK);
    assert_true(point.accuracy == point_full.accuracy && point.routed == point_full.routed);
    float *labels_lean = malloc(n * sizeof(float)), *labels_full = malloc(n * sizeof(float));
    assert_int_equal(tr_train_data_labels(lean, TR_LABEL_EXPECTED, labels_lean), TR_OK);
    assert_int_equal(tr_train_data_labels(full, TR_LABEL_EXPECTED, labels_full), TR_OK);
    assert_memory_equal(labels_lean, labels_full, n * sizeof(float));
    const tr_train_data_info info_lean = tr_train_data_get_info(lean), info_full = tr_train_data_get_info(full);
    assert_int_equal(info_lean.n_positions, info_full.n_positions);
    assert_int_equal(info_lean.llm_correct, info_full.llm_correct);
    assert_int_equal(tr_train_data_open_table_only(NULL, &lean), TR_ERR_ARG);
    free(labels_lean), free(labels_full), free(scores);
    tr_router_free(r);
    ngram_table_free(t_full), ngram_table_free(t_lean);
    free(loo_full), free(loo_lean);
    tr_train_data_free(a), tr_train_data_free(full), tr_train_data_free(lean);
    unlink(out_full), unlink(out_lean);
    free(out_full), free(out_lean);
    toy_remove(dir_a), toy_remove(dir_b), toy_remove(dir_c);
    free(dir_a), free(dir_b), free(dir_c);
}

static void test_bad_arguments(void **state) {
    (void)state;
    const int32_t s0[] = {0, 1, -5};
    const int32_t *seqs[] = {s0}, lens[] = {3};
    ngram_counts *c = NULL;
    assert_int_equal(ngram_counts_build(seqs, NULL, lens, 1, 2, 1, &c), TR_ERR_ARG); /* a negative token */
    assert_null(c);
    const int32_t s1[] = {0, 1, 2}, g_high[] = {-1, 0, 65537}, g_low[] = {-1, -2, 0};
    const int32_t *ok_seqs[] = {s1}, *high[] = {g_high}, *low[] = {g_low};
    assert_int_equal(ngram_counts_build(ok_seqs, high, lens, 1, 2, 1, &c), TR_ERR_ARG); /* a gain above 1 */
    assert_non_null(strstr(tr_last_error(), "gain 65537"));
    assert_int_equal(ngram_counts_build(ok_seqs, low, lens, 1, 2, 1, &c), TR_ERR_ARG);
    assert_null(c);
    assert_int_equal(ngram_counts_build(seqs, NULL, lens, 1, NGRAM_ORDER_MAX + 1, 1, &c), TR_ERR_ARG);
    assert_int_equal(ngram_counts_build(seqs, NULL, lens, 1, 2, 0, &c), TR_ERR_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_min_count_ties_and_start),
        cmocka_unit_test(test_top2_by_count),
        cmocka_unit_test(test_leave_one_out_equals_table_without),
        cmocka_unit_test(test_gain_quantize_and_mean),
        cmocka_unit_test(test_table_only_data),
        cmocka_unit_test(test_table_only_opened_lean),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
