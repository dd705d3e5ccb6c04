/* test_model_families.c — the architecture interface, for every family in the table (a synthetic model of each,
 * plus qwen2 / qwen3 conformance files where the table has no small shape): one layer body serves the
 * single-sequence pass (tr_context_eval) and the server's batched pass (multi_forward), so a sequence gives the same
 * logits, bit for bit, whether it runs alone in a context or shares passes with other sequences — prompts in
 * chunks, one token at a time, and after a rollback (truncation, which restores a family's per-sequence state from a
 * checkpoint and replays the rest). And every family's shapes load at what `tokroute synth` writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/multi.h"
#include "support/fixtures.h"
#include "tokroute.h"

enum { N_CTX = 160, N_PROMPT = 20 };

static const int32_t A[N_PROMPT] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376,
                                    298, 315, 421, 395, 317, 426, 338, 401, 396, 267};
static const int32_t B[10] = {385, 328, 17, 500, 3, 261, 370, 432, 511, 266};

static tr_model *load(const char *path) {
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    if (tr_model_load(path, &mp, &m) != TR_OK) fail_msg("%s: %s", path, tr_last_error());
    return m;
}

static const char *synth(const char *shape, tr_type type) {
    static char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    tr_synth_params sp = tr_synth_default_params();
    sp.shape = shape;
    sp.type = type;
    if (tr_synth_write(&sp, path) != TR_OK) fail_msg("synth %s: %s", shape, tr_last_error());
    return path;
}

/* One pass: the context evaluates n tokens of `own`; in the engine, the sequence gets the same tokens together with
 * `other` (n_other of them, 0: alone) on a second sequence. The last logits must be the same bits. */
static void pass(multi_engine *e, tr_context *ctx, kv_seq *seq, kv_seq *side, const int32_t *own, int32_t n,
                 const int32_t *other, int32_t n_other, int32_t n_vocab) {
    assert_int_equal(tr_context_eval(ctx, own, n, TR_EVAL_LOGITS_LAST), TR_OK);
    assert_int_equal(kv_seq_reserve(seq, seq->n_past + n), TR_OK);
    assert_int_equal(kv_seq_reserve(side, side->n_past + n_other), TR_OK);
    kv_seq *seqs[2] = {side, seq};
    const int32_t *toks[2] = {other, own};
    const int32_t nt[2] = {n_other, n};
    float *logits = malloc(2 * (size_t)n_vocab * sizeof *logits);
    const int first = n_other > 0 ? 0 : 1; /* the other sequence goes first: this one's rows start after its */
    assert_int_equal(multi_forward(e, seqs + first, toks + first, nt + first, 2 - first, logits), TR_OK);
    const float *got = logits + (size_t)(1 - first) * n_vocab, *ref = tr_context_logits(ctx, -1);
    assert_int_equal(seq->n_past, tr_context_n_past(ctx));
    if (memcmp(got, ref, (size_t)n_vocab * sizeof *got) != 0)
        fail_msg("at %d (%d tokens, %d beside): batched logits differ from the context's (rel rms %g)", seq->n_past,
                 n, n_other, rel_rms(got, ref, (size_t)n_vocab));
    free(logits);
}

static void check_model(const char *path, const char *arch) {
    tr_model *m = load(path);
    const tr_model_info *in = tr_model_get_info(m);
    assert_string_equal(in->arch_name, arch);
    const int32_t n_vocab = in->n_vocab;
    multi_engine *e = NULL;
    assert_int_equal(multi_engine_create(m, 2, 64, N_CTX, &e), TR_OK);
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_threads = 2;
    cp.n_batch = 64;
    tr_context *ctx = NULL;
    kv_seq *seq = NULL, *side = NULL;
    assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
    assert_int_equal(kv_seq_create(m, 1, N_CTX, &seq), TR_OK);
    assert_int_equal(kv_seq_create(m, 1, N_CTX, &side), TR_OK);

    pass(e, ctx, seq, side, A, 7, NULL, 0, n_vocab);          /* alone */
    pass(e, ctx, seq, side, A + 7, 9, B, 10, n_vocab);        /* beside a prompt */
    for (int i = 0; i < 4; i++) pass(e, ctx, seq, side, A + 16 + i, 1, B + i, 1, n_vocab); /* decoding */
    /* Rollback into the prompt, then other tokens: state restored and replayed the same way on both. */
    assert_int_equal(tr_context_truncate(ctx, 11), TR_OK);
    kv_seq_truncate(seq, 11);
    pass(e, ctx, seq, side, B, 3, A, 5, n_vocab);
    for (int i = 0; i < 3; i++) pass(e, ctx, seq, side, B + 3 + i, 1, NULL, 0, n_vocab);
    /* Rollback by one token (a rejected draft), twice. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(tr_context_truncate(ctx, tr_context_n_past(ctx) - 1), TR_OK);
        kv_seq_truncate(seq, seq->n_past - 1);
        pass(e, ctx, seq, side, A + i, 1, B + i, 2, n_vocab);
    }
    kv_seq_free(seq);
    kv_seq_free(side);
    tr_context_free(ctx);
    multi_engine_free(e);
    tr_model_free(m);
}

static void test_llama(void **state) {
    (void)state;
    const char *path = synth("tiny", TR_TYPE_Q8_0);
    check_model(path, "llama");
    remove(path);
}
static void test_qwen2(void **state) {
    (void)state;
    check_model(shared_path("conformance/qwen2-q8_0.gguf"), "qwen2");
}
static void test_qwen3(void **state) {
    (void)state;
    check_model(shared_path("conformance/qwen3-f32.gguf"), "qwen3");
}
static void test_qwen35(void **state) {
    (void)state;
    const char *path = synth("qwen3.5-tiny", TR_TYPE_Q8_0);
    check_model(path, "qwen35");
    remove(path);
}
static void test_gemma3(void **state) {
    (void)state;
    const char *path = synth("gemma3-tiny", TR_TYPE_Q8_0);
    check_model(path, "gemma3");
    remove(path);
}

static void test_smollm3(void **state) {
    (void)state;
    const char *path = synth("smollm3-tiny", TR_TYPE_Q8_0);
    check_model(path, "smollm3");
    remove(path);
}

static void test_lfm2(void **state) {
    (void)state;
    const char *path = synth("lfm2-tiny", TR_TYPE_Q8_0);
    check_model(path, "lfm2");
    remove(path);
}

static void test_gemma4(void **state) {
    (void)state;
    const char *path = synth("gemma4-tiny", TR_TYPE_Q8_0);
    check_model(path, "gemma4");
    remove(path);
}

/* gemma4's layers of two head sizes in the KV cache: each layer's own layout in contexts and in the server's
 * per-session caches, which grow past their first 64 positions (a relayout copy per layer) — F16 and Q8_0 (whose
 * block size and rotation follow the head size) — still bit-identical to the context, and the cache's size is the
 * sum of its layers' (4 of 6 layers keep one: 2 KV heads of 64 and 128 values alternating). */
static void test_gemma4_kv(void **state) {
    (void)state;
    const char *path = synth("gemma4-tiny", TR_TYPE_Q8_0);
    int32_t long_prompt[120];
    for (int i = 0; i < 120; i++) long_prompt[i] = 3 + (i * 37) % 500;
    const tr_kv_type types[2] = {TR_KV_F16, TR_KV_Q8_0};
    const size_t bytes_per_position[2] = {2 * 2 * (64 + 128 + 64 + 128) * 2, 2 * 2 * (2 + 4 + 2 + 4) * 34};
    for (int k = 0; k < 2; k++) {
        tr_model_params mp = tr_model_default_params();
        mp.load_vocab = false;
        mp.kv_type = types[k];
        tr_model *m = NULL;
        if (tr_model_load(path, &mp, &m) != TR_OK) fail_msg("%s: %s", path, tr_last_error());
        const int32_t n_vocab = tr_model_get_info(m)->n_vocab;
        multi_engine *e = NULL;
        assert_int_equal(multi_engine_create(m, 2, 64, N_CTX, &e), TR_OK);
        tr_context_params cp = tr_context_default_params();
        cp.n_ctx = N_CTX;
        cp.n_threads = 2;
        cp.n_batch = 64;
        tr_context *ctx = NULL;
        kv_seq *seq = NULL, *side = NULL;
        assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
        assert_int_equal(tr_context_kv_bytes(ctx), bytes_per_position[k] * N_CTX);
        assert_int_equal(kv_seq_create(m, 1, N_CTX, &seq), TR_OK);
        assert_int_equal(kv_seq_create(m, 1, N_CTX, &side), TR_OK);
        pass(e, ctx, seq, side, long_prompt, 40, B, 10, n_vocab);
        pass(e, ctx, seq, side, long_prompt + 40, 40, A, 20, n_vocab); /* both caches grow to 128 positions */
        assert_int_equal(seq->kv.n_ctx, 128);
        for (int i = 0; i < 3; i++) pass(e, ctx, seq, side, long_prompt + 80 + i, 1, B + i, 1, n_vocab);
        assert_int_equal(tr_context_truncate(ctx, 30), TR_OK);
        kv_seq_truncate(seq, 30);
        pass(e, ctx, seq, side, long_prompt + 90, 30, NULL, 0, n_vocab);
        kv_seq_free(seq);
        kv_seq_free(side);
        tr_context_free(ctx);
        multi_engine_free(e);
        tr_model_free(m);
    }
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),  cmocka_unit_test(test_qwen2),  cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_qwen35), cmocka_unit_test(test_gemma3), cmocka_unit_test(test_smollm3),
        cmocka_unit_test(test_lfm2),   cmocka_unit_test(test_gemma4), cmocka_unit_test(test_gemma4_kv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
