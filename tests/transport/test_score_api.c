/* test_score_api.c — tr_llm_score, the scoring call every backend shares: the embedded backend against the model's
 * own logits (top-K ids and log-probabilities per position, the actual token's log-probability, the position after
 * the sequence, a cached prefix reused, the allowed range of a padded vocabulary), the wrapper's argument checks,
 * and its check of what an implementation returns (a user-written backend through tr_llm_backend_ops returning
 * missing positions, ids out of range or repeated, NaN, positive or unordered log-probabilities: each a clear error,
 * never data; a next-token answer's log-probability held to the same rule); set_sampling on a backend that cannot
 * sample. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/fixtures.h"
#include "tokroute.h"

static tr_model *llm;

static int setup(void **state) {
    (void)state;
    tr_model_params mp = tr_model_default_params();
    return tr_model_load(shared_path("models/stories260K.gguf"), &mp, &llm) == TR_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tr_model_free(llm);
    return 0;
}

/* A story's first tokens. */
static int32_t story(int32_t *ids, int32_t cap) {
    int32_t n = 0;
    tr_tokenize_params tp = tr_tokenize_default_params();
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.";
    assert_int_equal(tr_tokenize(tr_model_vocab(llm), text, strlen(text), &tp, ids, cap, &n), TR_OK);
    return n;
}

/* The reference: log-softmax of the model's own logits over the first n_allowed ids. */
static void reference(const float *l, int32_t n_allowed, int32_t id, double *lp_id, int32_t *top1, double *lp_top1) {
    double mx = -INFINITY, sum = 0;
    int32_t best = 0;
    for (int32_t i = 0; i < n_allowed; i++) {
        if (l[i] > l[best]) best = i;
        mx = l[i] > mx ? l[i] : mx;
    }
    for (int32_t i = 0; i < n_allowed; i++) sum += exp((double)l[i] - mx);
    const double lse = mx + log(sum);
    if (lp_id) *lp_id = (double)l[id] - lse;
    *top1 = best;
    *lp_top1 = (double)l[best] - lse;
}

static void test_embedded_matches_the_models_logits(void **state) {
    (void)state;
    int32_t ids[128];
    const int32_t n = story(ids, 128);
    assert_true(n > 20);
    tr_context_params cp = tr_context_default_params();
    tr_context *ctx;
    assert_int_equal(tr_context_create(llm, &cp, &ctx), TR_OK);
    assert_int_equal(tr_context_eval(ctx, ids, n, TR_EVAL_LOGITS_ALL), TR_OK);
    tr_llm_backend *b;
    assert_int_equal(tr_llm_backend_embedded(llm, &cp, NULL, &b), TR_OK);
    tr_llm_position *out = calloc((size_t)n + 1, sizeof *out);
    /* Every position, and the one after the sequence. */
    assert_int_equal(tr_llm_score(b, ids, n, 1, n + 1, 8, out), TR_OK);
    for (int32_t p = 1; p <= n; p++) {
        const tr_llm_position *o = &out[p - 1];
        double lp_id = 0, lp_top1;
        int32_t top1;
        reference(tr_context_logits(ctx, p - 1), 512, p < n ? ids[p] : 0, &lp_id, &top1, &lp_top1);
        assert_int_equal(o->n_top, 8);
        assert_int_equal(o->top_ids[0], top1);
        assert_true(fabs(o->top_logprobs[0] - lp_top1) < 1e-5);
        for (int32_t i = 1; i < 8; i++) assert_true(o->top_logprobs[i] <= o->top_logprobs[i - 1]);
        if (p < n) assert_true(fabs(o->logprob - lp_id) < 1e-5);
        else assert_true(isnan(o->logprob));
    }
    /* A later call on a sequence sharing a prefix keeps the cache and gives the same numbers for the same rows. */
    tr_llm_position again[8];
    assert_int_equal(tr_llm_score(b, ids, n, n - 7, n + 1, 8, again), TR_OK);
    for (int32_t k = 0; k < 8; k++) {
        assert_int_equal(again[k].top_ids[0], out[n - 8 + k].top_ids[0]);
        assert_true(fabs(again[k].top_logprobs[0] - out[n - 8 + k].top_logprobs[0]) < 1e-5);
    }
    const tr_llm_score_stats s = tr_llm_backend_score_stats(b);
    assert_int_equal(s.calls, 2);
    assert_int_equal(s.requests, 0); /* nothing went over a network */
    assert_int_equal(s.positions, n + 8);
    /* The allowed range: ids >= 100 are never listed and the distribution is renormalized over 0..99. Positions
     * 1..n-1 only: the entry after them is left alone. */
    tr_llm_backend_set_allowed(b, 100);
    out[n - 1].n_top = -7;
    assert_int_equal(tr_llm_score(b, ids, n, 1, n, 4, out), TR_OK);
    assert_int_equal(out[n - 1].n_top, -7);
    for (int32_t p = 1; p < n; p++) {
        double lp_top1;
        int32_t top1;
        reference(tr_context_logits(ctx, p - 1), 100, 0, NULL, &top1, &lp_top1);
        assert_int_equal(out[p - 1].top_ids[0], top1);
        assert_true(fabs(out[p - 1].top_logprobs[0] - lp_top1) < 1e-5);
        for (int32_t i = 0; i < out[p - 1].n_top; i++) assert_true(out[p - 1].top_ids[i] < 100);
    }
    free(out);
    tr_llm_backend_free(b);
    tr_context_free(ctx);
}

static void test_arguments_are_checked(void **state) {
    (void)state;
    tr_context_params cp = tr_context_default_params();
    tr_llm_backend *b;
    assert_int_equal(tr_llm_backend_embedded(llm, &cp, NULL, &b), TR_OK);
    int32_t ids[4] = {1, 403, 407, 600};
    tr_llm_position out[4];
    assert_int_equal(tr_llm_score(b, ids, 3, 0, 3, 4, out), TR_ERR_ARG); /* position 0 has no prediction */
    assert_int_equal(tr_llm_score(b, ids, 3, 2, 5, 4, out), TR_ERR_ARG); /* beyond the position after */
    assert_int_equal(tr_llm_score(b, ids, 3, 2, 2, 4, out), TR_ERR_ARG); /* empty */
    assert_int_equal(tr_llm_score(b, ids, 3, 1, 3, 0, out), TR_ERR_ARG);
    assert_int_equal(tr_llm_score(b, ids, 3, 1, 3, TR_SCORE_TOPK_MAX + 1, out), TR_ERR_ARG);
    assert_int_equal(tr_llm_score(b, ids, 4, 1, 4, 4, out), TR_ERR_RANGE); /* 600 is outside the vocabulary */
    assert_non_null(strstr(tr_last_error(), "600"));
    tr_llm_backend_free(b);
}

/* A user-written backend whose score returns what `mode` says, and whose next token's log-probability is bad the
 * same way (NOT_A_NUMBER: +inf; POSITIVE: 0.5), -inf for UNORDERED, unreported (NAN) otherwise. */
typedef enum bad_mode { GOOD, MISSING, OUT_OF_RANGE, REPEATED, NOT_A_NUMBER, POSITIVE, UNORDERED, NO_ACTUAL } bad_mode;

static tr_status fake_next(void *impl, tr_llm_call *call) {
    const bad_mode mode = impl ? *(bad_mode *)impl : GOOD;
    call->id = 0;
    if (mode == NOT_A_NUMBER) call->logprob = INFINITY;
    if (mode == POSITIVE) call->logprob = 0.5f;
    if (mode == UNORDERED) call->logprob = -INFINITY; /* a probability that underflowed: fine */
    if (mode == MISSING) call->logprob = -3.0f;
    return TR_OK;
}
static int32_t fake_n_vocab(void *impl) {
    (void)impl;
    return 512;
}
static tr_status fake_score(void *impl, tr_llm_score_call *c) {
    const bad_mode mode = *(bad_mode *)impl;
    for (int32_t p = c->first; p < c->end; p++) {
        tr_llm_position *o = &c->out[p - c->first];
        if (mode == MISSING && p == c->end - 1) continue;
        o->n_top = c->top_k;
        for (int32_t i = 0; i < c->top_k; i++) {
            o->top_ids[i] = 10 + i;
            o->top_logprobs[i] = -1.0f - (float)i;
        }
        o->logprob = p < c->n_tokens ? -2.0f : NAN;
        if (mode == OUT_OF_RANGE) o->top_ids[1] = 512;
        if (mode == REPEATED) o->top_ids[1] = o->top_ids[0];
        if (mode == NOT_A_NUMBER) o->top_logprobs[0] = NAN;
        if (mode == POSITIVE) o->top_logprobs[0] = 0.5f;
        if (mode == UNORDERED) o->top_logprobs[1] = -0.5f;
        if (mode == NO_ACTUAL && p < c->n_tokens) o->logprob = NAN;
    }
    return TR_OK;
}
static const tr_llm_backend_ops fake_ops = {.name = "fake", .next_token = fake_next, .n_vocab = fake_n_vocab,
                                            .score = fake_score};

static void test_bad_replies_are_errors(void **state) {
    (void)state;
    static const struct { bad_mode mode; tr_status st; const char *says; } cases[] = {
        {GOOD, TR_OK, ""},
        {MISSING, TR_ERR_FORMAT, "missing"},
        {OUT_OF_RANGE, TR_ERR_RANGE, "outside the vocabulary"},
        {REPEATED, TR_ERR_FORMAT, "twice"},
        {NOT_A_NUMBER, TR_ERR_FORMAT, "not a number"},
        {POSITIVE, TR_ERR_FORMAT, "0.5 of token"},
        {UNORDERED, TR_ERR_FORMAT, "descending"},
        {NO_ACTUAL, TR_ERR_FORMAT, "no log-probability"},
    };
    int32_t ids[6] = {1, 2, 3, 4, 5, 6};
    tr_llm_position out[8];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        bad_mode *mode = malloc(sizeof *mode);
        *mode = cases[k].mode;
        tr_llm_backend *b;
        assert_int_equal(tr_llm_backend_create(&fake_ops, mode, &b), TR_OK);
        tr_llm_backend_set_breaker(b, 0, 0);
        assert_int_equal(tr_llm_score(b, ids, 6, 1, 7, 4, out), cases[k].st);
        if (cases[k].st != TR_OK) {
            assert_non_null(strstr(tr_last_error(), cases[k].says));
            assert_non_null(strstr(tr_last_error(), "LLM backend fake"));
        }
        /* The next-token answer's log-probability is held to the same rule (it passed as any number before). */
        const bool bad_next = cases[k].mode == NOT_A_NUMBER || cases[k].mode == POSITIVE;
        int32_t next = -1;
        float lp = 0;
        assert_int_equal(tr_llm_next_token_ex(b, ids, 6, &next, &lp), bad_next ? TR_ERR_FORMAT : TR_OK);
        if (bad_next) assert_non_null(strstr(tr_last_error(), "not a number <= 0"));
        else assert_int_equal(next, 0);
        /* A backend that cannot sample says so; greedy is always fine. */
        tr_sampler_params sp = tr_sampler_default_params();
        sp.temperature = 0.8f;
        assert_int_equal(tr_llm_backend_set_sampling(b, &sp), TR_ERR_UNSUPPORTED);
        sp.temperature = 0;
        assert_int_equal(tr_llm_backend_set_sampling(b, &sp), TR_OK);
        free(mode); /* the ops have no free: the test owns it */
        tr_llm_backend_free(b);
    }
    /* A backend without a score op. */
    static const tr_llm_backend_ops no_score = {.name = "plain", .next_token = fake_next};
    tr_llm_backend *b;
    assert_int_equal(tr_llm_backend_create(&no_score, NULL, &b), TR_OK);
    assert_int_equal(tr_llm_score(b, ids, 6, 1, 6, 4, out), TR_ERR_UNSUPPORTED);
    tr_llm_backend_free(b);
}

/* An allowed range drops a server's listed ids beyond it (a padded vocabulary) instead of failing. */
static void test_padding_ids_are_dropped(void **state) {
    (void)state;
    bad_mode *mode = malloc(sizeof *mode);
    *mode = GOOD;
    tr_llm_backend *b;
    assert_int_equal(tr_llm_backend_create(&fake_ops, mode, &b), TR_OK);
    tr_llm_backend_set_allowed(b, 12); /* the fake lists 10, 11, 12, 13 */
    int32_t ids[3] = {1, 2, 3};
    tr_llm_position out[3];
    assert_int_equal(tr_llm_score(b, ids, 3, 1, 3, 4, out), TR_OK);
    assert_int_equal(out[0].n_top, 2);
    assert_int_equal(out[0].top_ids[1], 11);
    tr_llm_backend_free(b);
    /* A server that does not report its vocabulary size is held to the allowed range: 12 and 13 cannot be told from
     * garbage ids there. */
    static const tr_llm_backend_ops no_size = {.name = "nosize", .next_token = fake_next, .score = fake_score};
    assert_int_equal(tr_llm_backend_create(&no_size, mode, &b), TR_OK);
    tr_llm_backend_set_allowed(b, 12);
    assert_int_equal(tr_llm_score(b, ids, 3, 1, 3, 4, out), TR_ERR_RANGE);
    assert_non_null(strstr(tr_last_error(), "outside the vocabulary"));
    free(mode);
    tr_llm_backend_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_matches_the_models_logits),
        cmocka_unit_test(test_arguments_are_checked),
        cmocka_unit_test(test_bad_replies_are_errors),
        cmocka_unit_test(test_padding_ids_are_dropped),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
