/* test_train_context.c — routers that read previous positions (tr_train_params.context, issue 32): on a toy where
 * only the previous position's hidden state tells whether the SLM is right, a router with context 1 learns it and
 * one without cannot; and a router scoring a sequence position by position (tr_router_score_at, its per-sequence
 * state reset at each example, a position scored again after a rollback) gives exactly the scores training's
 * input rows give (tr_train_data_scores), the first position reading zeros for the position before it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/fixtures.h"
#include "train/train_fixture.h"
#include "tokroute.h"

#define N_EMBD 4

static double hash01(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
    z = (z ^ (z >> 31)) * 0xD6E8FEB86659FD93ull;
    z ^= z >> 29;
    return (double)(z >> 11) / 9007199254740992.0;
}

static void toy_hidden(int32_t ex, int32_t pos, float *hidden) {
    for (int k = 0; k < N_EMBD; k++) hidden[k] = (float)(2 * hash01((uint64_t)ex * 11 + (uint64_t)k, (uint64_t)pos) - 1);
}

/* The SLM is right at position p iff hidden[0] of position p - 1 is above 0.1 (always at the first); the LLM
 * always is. This position's own values are noise for the label. */
static void toy_lagged(void *user, int32_t ex, int32_t pos, collect_record *r, float *topk, float *hidden) {
    (void)user;
    (void)topk;
    toy_hidden(ex, pos, hidden);
    float before[N_EMBD];
    toy_hidden(ex, pos - 1, before);
    r->truth = 7;
    r->slm_top1 = pos == 1 || before[0] > 0.1f ? 7 : 3;
    r->llm_top1 = 7;
    r->slm_p_top1 = r->llm_p_top1 = r->slm_p_truth = r->llm_p_truth = 0.5f;
}

static const toy_spec toy = {.n_embd = N_EMBD, .n_vocab = 16, .topk = 2, .n_examples = 60, .per_example = 40};

/* Writes the lagged toy into dir and opens it. */
static tr_train_data *open_lagged_toy(const char *dir) {
    assert_int_equal(toy_write(dir, &toy, toy_lagged, NULL), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    return d;
}

static tr_train_params params(int32_t context) {
    tr_train_params p = tr_train_default_params();
    p.features = 0; /* the hidden state alone: scoring needs no logits */
    p.labels = TR_LABEL_DROP;
    p.hidden[0] = 16;
    p.hidden[1] = 8;
    p.n_threads = 1;
    p.learning_rate = 3e-3f;
    p.epochs = 40;
    p.patience = 8;
    p.context = context;
    return p;
}

static void test_previous_position_is_learned(void **state) {
    (void)state;
    char *dir = strdup(temp_path(""));
    tr_train_data *d = open_lagged_toy(dir);
    const char *out = temp_path(".gguf");
    tr_train_result with, without;
    tr_train_params p = params(1);
    assert_int_equal(tr_train_router(d, &p, out, &with), TR_OK);
    p = params(0);
    assert_int_equal(tr_train_router(d, &p, out, &without), TR_OK);
    fprintf(stderr, "val accuracy: context 1 %.3f, none %.3f\n", with.best_val_accuracy, without.best_val_accuracy);
    assert_true(with.best_val_accuracy > 0.9);
    assert_true(without.best_val_accuracy < 0.8);
    p = params(TR_ROUTER_CONTEXT_MAX + 1);
    assert_int_equal(tr_train_router(d, &p, out, NULL), TR_ERR_ARG);
    unlink(out);
    tr_train_data_free(d);
    toy_remove(dir);
    free(dir);
}

static void test_sequence_scores_equal_training_rows(void **state) {
    (void)state;
    char *dir = strdup(temp_path(""));
    tr_train_data *d = open_lagged_toy(dir);
    const char *out = temp_path(".gguf");
    tr_train_params p = params(2);
    p.epochs = 3;
    assert_int_equal(tr_train_router(d, &p, out, NULL), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(out, NULL, &r), TR_OK);
    assert_int_equal(tr_router_context(r), 2);
    const int64_t n = (int64_t)toy.n_examples * toy.per_example;
    float *trained = malloc((size_t)n * sizeof *trained);
    assert_int_equal(tr_train_data_scores(d, r, trained), TR_OK);
    float h[N_EMBD], junk[N_EMBD] = {9, -9, 9, -9};
    int32_t differs_from_none = 0;
    for (int32_t ex = 0; ex < toy.n_examples; ex++) {
        tr_router_reset(r); /* the previous example's positions must not leak into this one */
        for (int32_t pos = 1; pos <= toy.per_example; pos++) {
            float s, again;
            if (pos % 7 == 0) { /* speculation: a wrong token at pos scored, rolled back, then the right one */
                assert_int_equal(tr_router_score_at(r, pos, junk, N_EMBD, NULL, 0, &s), TR_OK);
                assert_int_equal(tr_router_score_at(r, pos + 1, junk, N_EMBD, NULL, 0, &s), TR_OK);
            }
            toy_hidden(ex, pos, h);
            assert_int_equal(tr_router_score_at(r, pos, h, N_EMBD, NULL, 0, &s), TR_OK);
            const float want = trained[(int64_t)ex * toy.per_example + pos - 1];
            if (s != want) fail_msg("example %d position %d: scored %.9g, training's row %.9g", ex, pos, s, want);
            /* Scoring the same position again gives the same: what it kept of itself is not read. */
            assert_int_equal(tr_router_score_at(r, pos, h, N_EMBD, NULL, 0, &again), TR_OK);
            assert_true(again == s);
        }
        /* Without the previous positions (a fresh sequence at a later position) the score changes. */
        tr_router_reset(r);
        float alone;
        toy_hidden(ex, 5, h);
        assert_int_equal(tr_router_score_at(r, 5, h, N_EMBD, NULL, 0, &alone), TR_OK);
        differs_from_none += alone != trained[(int64_t)ex * toy.per_example + 4];
    }
    assert_true(differs_from_none > toy.n_examples / 2);
    free(trained);
    tr_router_free(r);
    unlink(out);
    tr_train_data_free(d);
    toy_remove(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_previous_position_is_learned),
        cmocka_unit_test(test_sequence_scores_equal_training_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
