/* test_model_kv.c — the KV cache as routing uses it: evaluate, roll back with tr_context_truncate, evaluate other
 * tokens, and get exactly what a fresh context would give; one token at a time agrees with one batch; chunking by
 * n_batch changes nothing; out-of-range ids and a full context fail with TR_ERR_RANGE and change nothing.
 *
 * Models: the trained stories260K (llama layout, F32), qwen2 in Q8_0 (biases, quantized activations) and qwen3 in
 * F32 (per-head Q/K norms). Where the same tokens are evaluated in the same chunks, results must be bit-identical:
 * nothing about a position may depend on rows that were truncated away. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/fixtures.h"
#include "tokroute.h"

static const char *const MODELS[] = {"models/stories260K.gguf", "conformance/qwen2-q8_0.gguf",
                                     "conformance/qwen3-f32.gguf"};
enum { N_MODELS = 3, N_A = 20, N_KEEP = 7, N_B = 10 };

/* A: the conformance prompt's first 20 tokens (BOS + "Once upon a time, there was ..."). B: other valid ids. */
static const int32_t A[N_A] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376,
                               298, 315, 421, 395, 317, 426, 338, 401, 396, 267};
static const int32_t B[N_B] = {385, 328, 17, 500, 3, 261, 370, 432, 511, 266};

static tr_model *load(const char *rel) {
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    tr_status st = tr_model_load(shared_path(rel), &mp, &m);
    if (st != TR_OK) fail_msg("%s: %s", rel, tr_last_error());
    return m;
}

static tr_context *new_ctx(const tr_model *m, int32_t n_ctx, int32_t n_batch, bool kv_f32) {
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_threads = 2;
    cp.kv_type = kv_f32 ? TR_KV_F32 : TR_KV_F16;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
    return ctx;
}

typedef struct outputs {
    int32_t n;
    float *logits; /* [n][V] */
    float *hidden; /* [n][E] */
} outputs;

static void outputs_free(outputs *o) {
    free(o->logits);
    free(o->hidden);
}

/* Evaluates toks in one call with every position's logits kept, and copies the outputs. */
static outputs eval_copy(tr_context *ctx, const int32_t *toks, int32_t n) {
    const tr_model_info *in = tr_model_get_info(tr_context_model(ctx));
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    assert_int_equal(tr_context_eval(ctx, toks, n, TR_EVAL_LOGITS_ALL), TR_OK);
    outputs o = {n, malloc((size_t)n * V * sizeof(float)), malloc((size_t)n * E * sizeof(float))};
    for (int32_t i = 0; i < n; i++) {
        assert_non_null(tr_context_logits(ctx, i));
        assert_non_null(tr_context_hidden(ctx, i));
        memcpy(o.logits + (size_t)i * V, tr_context_logits(ctx, i), V * sizeof(float));
        memcpy(o.hidden + (size_t)i * E, tr_context_hidden(ctx, i), E * sizeof(float));
    }
    return o;
}

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* Compares rows; exact demands bit equality, otherwise rel RMS <= tol. */
static void compare(const char *model, const char *what, const outputs *a, const outputs *b, size_t V, size_t E,
                    bool exact, double tol) {
    assert_int_equal(a->n, b->n);
    const size_t nl = (size_t)a->n * V, nh = (size_t)a->n * E;
    assert_true(all_finite(a->logits, nl) && all_finite(b->logits, nl));
    const bool same = memcmp(a->logits, b->logits, nl * sizeof(float)) == 0 &&
                      memcmp(a->hidden, b->hidden, nh * sizeof(float)) == 0;
    const double el = rel_rms(a->logits, b->logits, nl), eh = rel_rms(a->hidden, b->hidden, nh);
    fprintf(stderr, "  %-30s %-44s logits %.1e hidden %.1e%s\n", model, what, el, eh, same ? " (bit-identical)" : "");
    if (exact && !same) fail_msg("%s: %s: not bit-identical (logits %.2e, hidden %.2e)", model, what, el, eh);
    if (el > tol || eh > tol) fail_msg("%s: %s: rel RMS logits %.2e hidden %.2e > %.0e", model, what, el, eh, tol);
}

/* Evaluate A, truncate to N_KEEP, evaluate B: the B outputs equal a fresh context given A[0..N_KEEP) then B. */
static void check_truncate(const char *rel, bool kv_f32) {
    tr_model *m = load(rel);
    const tr_model_info *in = tr_model_get_info(m);
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    tr_context *ctx = new_ctx(m, 64, 512, kv_f32);
    outputs first = eval_copy(ctx, A, N_A);
    assert_int_equal(tr_context_n_past(ctx), N_A);
    assert_int_equal(tr_context_truncate(ctx, N_KEEP), TR_OK);
    assert_int_equal(tr_context_n_past(ctx), N_KEEP);
    assert_memory_equal(tr_context_tokens(ctx), A, N_KEEP * sizeof(int32_t));
    /* The last eval's outputs described positions that are gone. */
    assert_null(tr_context_logits(ctx, -1));
    assert_null(tr_context_hidden(ctx, -1));
    outputs after = eval_copy(ctx, B, N_B);
    assert_int_equal(tr_context_n_past(ctx), N_KEEP + N_B);
    assert_memory_equal(tr_context_tokens(ctx) + N_KEEP, B, N_B * sizeof(int32_t));

    /* Same chunking: A[0..7) in one call, then B in one call. */
    tr_context *fresh = new_ctx(m, 64, 512, kv_f32);
    outputs prefix = eval_copy(fresh, A, N_KEEP);
    outputs ref = eval_copy(fresh, B, N_B);
    char what[96];
    snprintf(what, sizeof what, "truncate %d→%d + B vs fresh, same chunks%s", N_A, N_KEEP, kv_f32 ? " (kv f32)" : "");
    compare(rel, what, &after, &ref, V, E, true, 1e-5);
    /* The prefix of A is unchanged by being evaluated alone (causal attention). */
    outputs first_prefix = {N_KEEP, first.logits, first.hidden};
    snprintf(what, sizeof what, "A[0..%d) inside A vs alone", N_KEEP);
    compare(rel, what, &first_prefix, &prefix, V, E, false, 1e-5);

    /* One call over A[0..7)+B: the last N_B rows agree (different chunking: close, maybe not bitwise). */
    int32_t joined[N_KEEP + N_B];
    memcpy(joined, A, N_KEEP * sizeof(int32_t));
    memcpy(joined + N_KEEP, B, N_B * sizeof(int32_t));
    tr_context *one = new_ctx(m, 64, 512, kv_f32);
    outputs all = eval_copy(one, joined, N_KEEP + N_B);
    outputs tail = {N_B, all.logits + N_KEEP * V, all.hidden + N_KEEP * E};
    compare(rel, "truncate + B vs fresh, one call", &after, &tail, V, E, false, 1e-5);
    /* And B's outputs really differ from A's at the same positions (the comparison is not vacuous). */
    assert_true(rel_rms(after.logits, first.logits + N_KEEP * V, N_B * V) > 1e-2);

    outputs_free(&first);
    outputs_free(&after);
    outputs_free(&prefix);
    outputs_free(&ref);
    outputs_free(&all);
    tr_context_free(ctx);
    tr_context_free(fresh);
    tr_context_free(one);
    tr_model_free(m);
}

static void truncate_then_eval_matches_fresh(void **state) {
    (void)state;
    for (int i = 0; i < N_MODELS; i++) check_truncate(MODELS[i], false);
    check_truncate(MODELS[0], true);
}

/* Truncating repeatedly to several points, each time re-evaluating the rest of A, reproduces A's outputs. */
static void truncate_and_replay_reproduces(void **state) {
    (void)state;
    for (int mi = 0; mi < N_MODELS; mi++) {
        tr_model *m = load(MODELS[mi]);
        const tr_model_info *in = tr_model_get_info(m);
        const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
        tr_context *ctx = new_ctx(m, 32, 512, false);
        /* Reference: A[0..k) then A[k..N_A) in a fresh context, for each k; replay: the same after truncation. */
        outputs full = eval_copy(ctx, A, N_A);
        const int32_t points[] = {19, 12, 1, 0};
        for (size_t p = 0; p < sizeof points / sizeof points[0]; p++) {
            const int32_t k = points[p];
            assert_int_equal(tr_context_truncate(ctx, k), TR_OK);
            outputs replay = eval_copy(ctx, A + k, N_A - k);
            tr_context *fresh = new_ctx(m, 32, 512, false);
            if (k > 0) {
                outputs pre = eval_copy(fresh, A, k);
                outputs_free(&pre);
            }
            outputs ref = eval_copy(fresh, A + k, N_A - k);
            char what[64];
            snprintf(what, sizeof what, "replay A[%d..%d) after truncate", k, N_A);
            compare(MODELS[mi], what, &replay, &ref, V, E, true, 1e-5);
            if (k == 0) compare(MODELS[mi], "replay of all of A vs first eval", &replay, &full, V, E, true, 1e-5);
            outputs_free(&replay);
            outputs_free(&ref);
            tr_context_free(fresh);
        }
        outputs_free(&full);
        tr_context_free(ctx);
        tr_model_free(m);
    }
}

/* Decoding one token per call gives the same logits and hidden states as one batch over the same tokens. */
static void one_at_a_time_matches_batch(void **state) {
    (void)state;
    for (int mi = 0; mi < N_MODELS; mi++) {
        tr_model *m = load(MODELS[mi]);
        const tr_model_info *in = tr_model_get_info(m);
        const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
        tr_context *batch = new_ctx(m, 32, 512, false), *single = new_ctx(m, 32, 512, false);
        outputs ref = eval_copy(batch, A, N_A);
        outputs step = {N_A, malloc(N_A * V * sizeof(float)), malloc(N_A * E * sizeof(float))};
        for (int32_t i = 0; i < N_A; i++) {
            assert_int_equal(tr_context_eval(single, &A[i], 1, TR_EVAL_LOGITS_LAST), TR_OK);
            assert_int_equal(tr_context_n_past(single), i + 1);
            memcpy(step.logits + (size_t)i * V, tr_context_logits(single, -1), V * sizeof(float));
            memcpy(step.hidden + (size_t)i * E, tr_context_hidden(single, 0), E * sizeof(float));
        }
        compare(MODELS[mi], "one token per call vs one batch", &step, &ref, V, E, false, 1e-4);
        outputs_free(&ref);
        outputs_free(&step);
        tr_context_free(batch);
        tr_context_free(single);
        tr_model_free(m);
    }
}

/* A batch longer than attention's 32-token blocks: every block's causal offsets must be right. 150 tokens in one
 * batch equal one token per call and chunks of 50 (each chunk starting mid-cache). */
static void long_batch_matches_other_paths(void **state) {
    (void)state;
    enum { N_LONG = 150 };
    int32_t ids[N_LONG];
    for (int32_t i = 0; i < N_LONG; i++) ids[i] = i == 0 ? 1 : 3 + (i * 97 + 13) % 509;
    for (int mi = 0; mi < N_MODELS; mi++) {
        tr_model *m = load(MODELS[mi]);
        const tr_model_info *in = tr_model_get_info(m);
        const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
        tr_context *batch = new_ctx(m, 256, 256, false), *single = new_ctx(m, 256, 256, false);
        tr_context *chunked = new_ctx(m, 256, 50, false);
        outputs ref = eval_copy(batch, ids, N_LONG);
        outputs got = eval_copy(chunked, ids, N_LONG);
        compare(MODELS[mi], "150 tokens in chunks of 50 vs one batch", &got, &ref, V, E, false, 1e-4);
        outputs step = {N_LONG, malloc(N_LONG * V * sizeof(float)), malloc(N_LONG * E * sizeof(float))};
        for (int32_t i = 0; i < N_LONG; i++) {
            assert_int_equal(tr_context_eval(single, &ids[i], 1, TR_EVAL_LOGITS_LAST), TR_OK);
            memcpy(step.logits + (size_t)i * V, tr_context_logits(single, -1), V * sizeof(float));
            memcpy(step.hidden + (size_t)i * E, tr_context_hidden(single, 0), E * sizeof(float));
        }
        compare(MODELS[mi], "150 tokens one per call vs one batch", &step, &ref, V, E, false, 1e-4);
        outputs_free(&ref);
        outputs_free(&got);
        outputs_free(&step);
        tr_context_free(batch);
        tr_context_free(single);
        tr_context_free(chunked);
        tr_model_free(m);
    }
}

/* n_batch smaller than the prompt: the eval is split into chunks internally; outputs of every position match. */
static void chunked_eval_matches_one_chunk(void **state) {
    (void)state;
    for (int mi = 0; mi < N_MODELS; mi++) {
        tr_model *m = load(MODELS[mi]);
        const tr_model_info *in = tr_model_get_info(m);
        const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
        tr_context *big = new_ctx(m, 32, 512, false);
        outputs ref = eval_copy(big, A, N_A);
        const int32_t batches[] = {1, 3, 7, 19};
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            tr_context *small = new_ctx(m, 32, batches[b], false);
            outputs got = eval_copy(small, A, N_A);
            assert_int_equal(tr_context_n_past(small), N_A);
            char what[64];
            snprintf(what, sizeof what, "n_batch %d vs one chunk", batches[b]);
            compare(MODELS[mi], what, &got, &ref, V, E, false, 1e-4);
            /* LOGITS_LAST with chunks keeps the last row (and only it), equal to LOGITS_ALL's last row. */
            tr_context_clear(small);
            assert_int_equal(tr_context_eval(small, A, N_A, TR_EVAL_LOGITS_LAST), TR_OK);
            assert_null(tr_context_logits(small, 0));
            assert_null(tr_context_logits(small, N_A - 2));
            assert_non_null(tr_context_logits(small, N_A - 1));
            assert_memory_equal(tr_context_logits(small, -1), got.logits + (N_A - 1) * V, V * sizeof(float));
            for (int32_t i = 0; i < N_A; i++)
                assert_memory_equal(tr_context_hidden(small, i), got.hidden + (size_t)i * E, E * sizeof(float));
            outputs_free(&got);
            tr_context_free(small);
        }
        outputs_free(&ref);
        tr_context_free(big);
        tr_model_free(m);
    }
}

/* ---------------------------------------------------------------- errors change nothing */

static void range_errors_change_nothing(void **state) {
    (void)state;
    tr_model *m = load(MODELS[0]);
    const int32_t V = tr_model_get_info(m)->n_vocab;
    tr_context *ctx = new_ctx(m, 16, 512, false);
    assert_int_equal(tr_context_n_ctx(ctx), 16);
    assert_int_equal(tr_context_eval(ctx, A, 10, TR_EVAL_LOGITS_LAST), TR_OK);
    float *saved = malloc((size_t)V * sizeof *saved);
    memcpy(saved, tr_context_logits(ctx, -1), (size_t)V * sizeof *saved);

    /* Out-of-range ids, alone or in the middle of a list. */
    const int32_t bad_lists[][3] = {{V, 5, 6}, {5, -1, 6}, {5, 6, INT32_MAX}, {INT32_MIN, 5, 6}};
    for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
        assert_int_equal(tr_context_eval(ctx, bad_lists[i], 3, TR_EVAL_LOGITS_ALL), TR_ERR_RANGE);
        assert_true(strlen(tr_last_error()) > 0);
        assert_int_equal(tr_context_n_past(ctx), 10);
        assert_int_equal(tr_context_n_evaluated(ctx), 10);
        assert_memory_equal(tr_context_tokens(ctx), A, 10 * sizeof(int32_t));
        assert_non_null(tr_context_logits(ctx, -1));
        assert_memory_equal(tr_context_logits(ctx, -1), saved, (size_t)V * sizeof *saved);
    }
    /* Past n_ctx: 10 + 7 > 16 fails; 10 + 6 fills it exactly; one more fails. */
    assert_int_equal(tr_context_eval(ctx, B, 7, TR_EVAL_LOGITS_LAST), TR_ERR_RANGE);
    assert_non_null(strstr(tr_last_error(), "context"));
    assert_int_equal(tr_context_n_past(ctx), 10);
    assert_int_equal(tr_context_n_evaluated(ctx), 10);
    assert_memory_equal(tr_context_logits(ctx, -1), saved, (size_t)V * sizeof *saved);
    assert_int_equal(tr_context_eval(ctx, B, 6, TR_EVAL_LOGITS_LAST), TR_OK);
    assert_int_equal(tr_context_n_past(ctx), 16);
    assert_int_equal(tr_context_eval(ctx, B, 1, TR_EVAL_LOGITS_LAST), TR_ERR_RANGE);
    assert_int_equal(tr_context_n_past(ctx), 16);
    assert_int_equal(tr_context_n_evaluated(ctx), 16);

    /* Truncating beyond n_past, or below 0, fails and keeps the cache. */
    assert_int_equal(tr_context_truncate(ctx, 17), TR_ERR_RANGE);
    assert_int_equal(tr_context_n_past(ctx), 16);
    assert_int_equal(tr_context_truncate(ctx, -1), TR_ERR_RANGE);
    assert_int_equal(tr_context_n_past(ctx), 16);
    assert_non_null(tr_context_logits(ctx, -1)); /* a failed truncate does not drop the outputs either */
    assert_int_equal(tr_context_truncate(ctx, 16), TR_OK); /* to n_past itself: allowed, a no-op on the cache */
    assert_int_equal(tr_context_n_past(ctx), 16);
    assert_int_equal(tr_context_truncate(ctx, 3), TR_OK);
    assert_int_equal(tr_context_truncate(ctx, 4), TR_ERR_RANGE); /* cannot grow back */

    /* Argument errors. */
    assert_int_equal(tr_context_eval(ctx, A, 0, TR_EVAL_LOGITS_LAST), TR_ERR_ARG);
    assert_int_equal(tr_context_eval(ctx, A, -3, TR_EVAL_LOGITS_LAST), TR_ERR_ARG);
    assert_int_equal(tr_context_eval(ctx, NULL, 3, TR_EVAL_LOGITS_LAST), TR_ERR_ARG);
    assert_int_equal(tr_context_eval(ctx, A, 3, (tr_eval_flags)7), TR_ERR_ARG);
    assert_int_equal(tr_context_eval(NULL, A, 3, TR_EVAL_LOGITS_LAST), TR_ERR_ARG);
    assert_int_equal(tr_context_truncate(NULL, 0), TR_ERR_ARG);
    assert_int_equal(tr_context_n_past(ctx), 3);
    tr_context_clear(NULL);

    free(saved);
    tr_context_free(ctx);
    tr_model_free(m);
}

static void clear_and_counters(void **state) {
    (void)state;
    tr_model *m = load(MODELS[0]);
    const tr_model_info *in = tr_model_get_info(m);
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    tr_context *ctx = new_ctx(m, 64, 512, false);
    assert_int_equal(tr_context_n_past(ctx), 0);
    assert_int_equal(tr_context_n_evaluated(ctx), 0);
    assert_null(tr_context_logits(ctx, -1)); /* nothing evaluated yet */
    outputs first = eval_copy(ctx, A, N_A);
    assert_int_equal(tr_context_n_evaluated(ctx), N_A);
    assert_int_equal(tr_context_truncate(ctx, N_KEEP), TR_OK);
    assert_int_equal(tr_context_n_evaluated(ctx), N_A); /* truncation un-evaluates nothing */
    assert_int_equal(tr_context_eval(ctx, B, N_B, TR_EVAL_LOGITS_NONE), TR_OK);
    assert_int_equal(tr_context_n_evaluated(ctx), N_A + N_B);
    /* LOGITS_NONE: no logits, hidden states of every position. */
    assert_null(tr_context_logits(ctx, -1));
    assert_null(tr_context_logits(ctx, 0));
    assert_non_null(tr_context_hidden(ctx, N_B - 1));
    assert_null(tr_context_hidden(ctx, N_B));
    tr_context_clear(ctx);
    assert_int_equal(tr_context_n_past(ctx), 0);
    assert_null(tr_context_hidden(ctx, -1));
    assert_int_equal(tr_context_n_evaluated(ctx), N_A + N_B);
    /* After clear, A evaluates exactly as in a new context. */
    outputs again = eval_copy(ctx, A, N_A);
    compare(MODELS[0], "A after clear vs A first", &again, &first, V, E, true, 1e-6);
    assert_int_equal(tr_context_n_evaluated(ctx), 2 * N_A + N_B);
    /* Chunked evals count every token once. */
    tr_context *chunked = new_ctx(m, 64, 4, false);
    assert_int_equal(tr_context_eval(chunked, A, N_A, TR_EVAL_LOGITS_LAST), TR_OK);
    assert_int_equal(tr_context_n_evaluated(chunked), N_A);
    assert_int_equal(tr_context_n_past(chunked), N_A);
    outputs_free(&first);
    outputs_free(&again);
    tr_context_free(chunked);
    tr_context_free(ctx);
    tr_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(truncate_then_eval_matches_fresh),
        cmocka_unit_test(truncate_and_replay_reproduces),
        cmocka_unit_test(one_at_a_time_matches_batch),
        cmocka_unit_test(chunked_eval_matches_one_chunk),
        cmocka_unit_test(long_batch_matches_other_paths),
        cmocka_unit_test(range_errors_change_nothing),
        cmocka_unit_test(clear_and_counters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
