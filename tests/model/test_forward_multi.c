/* test_forward_multi.c — several sequences in one pass (multi_forward, the server's batching) give what each
 * sequence gives alone through tr_context_eval: same next token and logits within float tolerance, for sequences of
 * different lengths fed in different chunks, with one sequence rolled back, one sitting out some passes, and caches
 * growing past their first capacity (64 positions) by the relayout copy.
 *
 * Models: stories260K (llama, F32), qwen2 in Q8_0 (biases, GQA, quantized activations) and qwen3 in F32 (per-head
 * Q/K norms). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/multi.h"
#include "support/fixtures.h"
#include "tokroute.h"

static const char *const MODELS[] = {"models/stories260K.gguf", "conformance/qwen2-q8_0.gguf",
                                     "conformance/qwen3-f32.gguf"};
enum { N_SEQ = 3, N_CTX = 160 };

static const int32_t A[20] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376,
                              298, 315, 421, 395, 317, 426, 338, 401, 396, 267};
static const int32_t B[10] = {385, 328, 17, 500, 3, 261, 370, 432, 511, 266};

static tr_model *load(const char *rel) {
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    if (tr_model_load(shared_path(rel), &mp, &m) != TR_OK) fail_msg("%s: %s", rel, tr_last_error());
    return m;
}

typedef struct pair {
    tr_context *ctx;  /* the single-sequence reference */
    kv_seq *seq;
} pair;

/* One pass: seq i gets toks[i][0..n[i]) (n[i] == 0: sits out). Checks every participating sequence. */
static void pass(multi_engine *e, pair *p, const int32_t *const *toks, const int32_t *n, int32_t n_vocab) {
    kv_seq *seqs[N_SEQ];
    const int32_t *t[N_SEQ];
    int32_t nt[N_SEQ], idx[N_SEQ], k = 0;
    for (int i = 0; i < N_SEQ; i++)
        if (n[i] > 0) {
            assert_int_equal(kv_seq_reserve(p[i].seq, p[i].seq->n_past + n[i]), TR_OK);
            seqs[k] = p[i].seq;
            t[k] = toks[i];
            nt[k] = n[i];
            idx[k++] = i;
        }
    float *logits = malloc((size_t)k * n_vocab * sizeof *logits);
    assert_int_equal(multi_forward(e, seqs, t, nt, k, logits), TR_OK);
    for (int j = 0; j < k; j++) {
        const int i = idx[j];
        assert_int_equal(tr_context_eval(p[i].ctx, t[j], nt[j], TR_EVAL_LOGITS_LAST), TR_OK);
        const float *ref = tr_context_logits(p[i].ctx, -1);
        const float *got = logits + (size_t)j * n_vocab;
        assert_int_equal(p[i].seq->n_past, tr_context_n_past(p[i].ctx));
        assert_int_equal(tr_argmax(got, n_vocab), tr_argmax(ref, n_vocab));
        const double err = rel_rms(got, ref, (size_t)n_vocab);
        if (err > 1e-4) fail_msg("sequence %d at %d: logits differ (rel rms %g)", i, p[i].seq->n_past, err);
    }
    free(logits);
}

static void check_model(const char *rel) {
    tr_model *m = load(rel);
    const int32_t n_vocab = tr_model_get_info(m)->n_vocab;
    multi_engine *e = NULL;
    assert_int_equal(multi_engine_create(m, 2, 64, N_CTX, &e), TR_OK);
    pair p[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        tr_context_params cp = tr_context_default_params();
        cp.n_ctx = N_CTX;
        cp.n_threads = 1;
        assert_int_equal(tr_context_create(m, &cp, &p[i].ctx), TR_OK);
        assert_int_equal(kv_seq_create(m, 1, N_CTX, &p[i].seq), TR_OK);
        assert_int_equal(p[i].seq->kv.n_ctx, 64);
    }
    /* Pass 1: three prompts of different lengths together. */
    {
        const int32_t *t[N_SEQ] = {A, B, A};
        const int32_t n[N_SEQ] = {12, 10, 3};
        pass(e, p, t, n, n_vocab);
    }
    /* Pass 2: the rest of seq 0's prompt; seq 1 one token; seq 2 rolled back to 1 and given other tokens. */
    kv_seq_truncate(p[2].seq, 1);
    assert_int_equal(tr_context_truncate(p[2].ctx, 1), TR_OK);
    {
        const int32_t *t[N_SEQ] = {A + 12, A + 5, B};
        const int32_t n[N_SEQ] = {8, 1, 4};
        pass(e, p, t, n, n_vocab);
    }
    /* Decode: one token per pass, seq 1 sitting out every third pass; seq 0 crosses 64 and 128 positions. */
    for (int step = 0; step < 120; step++) {
        const int32_t tok0 = A[step % 20], tok1 = B[step % 10], tok2 = B[(step * 7) % 10];
        const int32_t *t[N_SEQ] = {&tok0, &tok1, &tok2};
        const int32_t n[N_SEQ] = {1, step % 3 == 2 || p[1].seq->n_past >= N_CTX - 1 ? 0 : 1, step < 60 ? 1 : 0};
        pass(e, p, t, n, n_vocab);
    }
    assert_true(p[0].seq->kv.n_ctx >= 140);
    /* A pass over the row limit or past the capacity fails and moves nothing. */
    {
        int32_t many[65] = {0};
        kv_seq *s[1] = {p[2].seq};
        const int32_t *t[1] = {many};
        const int32_t n[1] = {65};
        float *lg = malloc((size_t)n_vocab * sizeof *lg);
        const int32_t before = p[2].seq->n_past;
        assert_int_not_equal(multi_forward(e, s, t, n, 1, lg), TR_OK);
        assert_int_equal(p[2].seq->n_past, before);
        free(lg);
    }
    assert_int_equal(kv_seq_reserve(p[0].seq, N_CTX + 1), TR_ERR_RANGE);
    for (int i = 0; i < N_SEQ; i++) {
        tr_context_free(p[i].ctx);
        kv_seq_free(p[i].seq);
    }
    multi_engine_free(e);
    tr_model_free(m);
}

static void test_stories(void **state) { check_model(MODELS[0]); }
static void test_qwen2_q8(void **state) { check_model(MODELS[1]); }
static void test_qwen3(void **state) { check_model(MODELS[2]); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories),
        cmocka_unit_test(test_qwen2_q8),
        cmocka_unit_test(test_qwen3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
