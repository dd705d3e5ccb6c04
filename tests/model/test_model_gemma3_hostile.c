/* test_model_gemma3_hostile.c — gemma3 files that are well-formed GGUF but not loadable gemma3 models: a missing
 * post-attention / post-FFN / Q-K norm, a missing RMS epsilon (llama.cpp requires it for gemma3), a sliding window
 * or window pattern of the wrong type, sign or length, a bad second RoPE base or logit softcapping. Each must fail
 * with a status and a message naming the key or tensor and the file. And the variants llama.cpp accepts load and
 * behave as it defines them: sliding_window 0 (no window), a per-layer pattern array, a final logit softcapping
 * (logits = c·tanh(l/c) of the uncapped ones). The files are `tokroute synth`'s gemma3-tiny rewritten. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixtures.h"
#include "support/hostile.h"
#include "tokroute.h"

static char base[256];

static int setup(void **state) {
    (void)state;
    snprintf(base, sizeof base, "%s", temp_path(".gguf"));
    tr_synth_params sp = tr_synth_default_params();
    sp.shape = "gemma3-tiny";
    sp.type = TR_TYPE_F32;
    return tr_synth_write(&sp, base) == TR_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    remove(base);
    return 0;
}

typedef hostile_change change;

static const char *rewrite(const change *c) { return hostile_rewrite(base, c); }
static tr_model *load(const char *path, tr_status *st) { return hostile_load(path, st); }
static void expect_fail(const change *c, tr_status status, const char *needle) {
    hostile_expect_fail(base, c, status, needle);
}

static void missing_tensors(void **state) {
    (void)state;
    expect_fail(&(change){.drop_tensor = "blk.0.post_attention_norm.weight"}, TR_ERR_FORMAT,
                "missing tensor 'blk.0.post_attention_norm.weight'");
    expect_fail(&(change){.drop_tensor = "blk.5.post_ffw_norm.weight"}, TR_ERR_FORMAT,
                "missing tensor 'blk.5.post_ffw_norm.weight'");
    expect_fail(&(change){.drop_tensor = "blk.2.attn_q_norm.weight"}, TR_ERR_FORMAT,
                "missing tensor 'blk.2.attn_q_norm.weight'");
    expect_fail(&(change){.drop_tensor = "blk.6.attn_k_norm.weight"}, TR_ERR_FORMAT,
                "missing tensor 'blk.6.attn_k_norm.weight'");
}

static void missing_epsilon(void **state) {
    (void)state;
    expect_fail(&(change){.drop_key = "gemma3.attention.layer_norm_rms_epsilon"}, TR_ERR_FORMAT,
                "missing metadata gemma3.attention.layer_norm_rms_epsilon");
}

static tr_status window_str(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_str(w, "gemma3.attention.sliding_window", "512");
}
static tr_status window_negative(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_i32(w, "gemma3.attention.sliding_window", -5);
}
static tr_status window_huge(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_u64(w, "gemma3.attention.sliding_window", (uint64_t)1 << 40);
}
static tr_status pattern_short(tr_gguf_writer *w, void *u) {
    (void)u;
    const int32_t flags[3] = {1, 1, 0};
    return tr_gguf_writer_set_arr_i32(w, "gemma3.attention.sliding_window_pattern", flags, 3);
}
static tr_status pattern_negative(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_i32(w, "gemma3.attention.sliding_window_pattern", -6);
}
static tr_status pattern_floats(tr_gguf_writer *w, void *u) {
    (void)u;
    const float flags[7] = {1, 1, 1, 1, 1, 0, 1};
    return tr_gguf_writer_set_arr_f32(w, "gemma3.attention.sliding_window_pattern", flags, 7);
}
static tr_status swa_base_zero(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_f32(w, "gemma3.rope.freq_base_swa", 0.0f);
}
static tr_status softcap_negative(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_f32(w, "gemma3.final_logit_softcapping", -30.0f);
}

static void bad_window_metadata(void **state) {
    (void)state;
    expect_fail(&(change){.extra = window_str}, TR_ERR_FORMAT, "gemma3.attention.sliding_window is not an integer");
    expect_fail(&(change){.extra = window_negative}, TR_ERR_FORMAT, "gemma3.attention.sliding_window = -5 is outside");
    expect_fail(&(change){.extra = window_huge}, TR_ERR_FORMAT, "gemma3.attention.sliding_window = 1099511627776");
    expect_fail(&(change){.extra = pattern_short}, TR_ERR_FORMAT,
                "gemma3.attention.sliding_window_pattern has 3 entries for 7 layers");
    expect_fail(&(change){.extra = pattern_negative}, TR_ERR_FORMAT,
                "gemma3.attention.sliding_window_pattern must be a layer period");
    expect_fail(&(change){.extra = pattern_floats}, TR_ERR_UNSUPPORTED,
                "gemma3.attention.sliding_window_pattern: only integer per-layer flags");
    expect_fail(&(change){.extra = swa_base_zero}, TR_ERR_FORMAT, "gemma3.rope.freq_base_swa must be a positive");
    expect_fail(&(change){.extra = softcap_negative}, TR_ERR_FORMAT, "gemma3.final_logit_softcapping must be");
}

/* Logits of the 40-token sequence 300.. at its last position. */
static float *last_logits(const char *path) {
    tr_status st;
    tr_model *m = load(path, &st);
    if (!m) fail_msg("%s: %s", path, tr_last_error());
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = 300 + i;
    assert_int_equal(tr_context_eval(ctx, toks, 40, TR_EVAL_LOGITS_LAST), TR_OK);
    const int32_t V = tr_model_get_info(m)->n_vocab;
    float *out = malloc((size_t)V * sizeof *out);
    memcpy(out, tr_context_logits(ctx, -1), (size_t)V * sizeof *out);
    tr_context_free(ctx);
    tr_model_free(m);
    return out;
}

static tr_status window_zero(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_u32(w, "gemma3.attention.sliding_window", 0);
}
static tr_status window_none_by_pattern(tr_gguf_writer *w, void *u) {
    (void)u; /* every layer global by a period of 1: the window key is there but no layer uses it */
    return tr_gguf_writer_set_u32(w, "gemma3.attention.sliding_window_pattern", 1);
}
static tr_status pattern_default_as_array(tr_gguf_writer *w, void *u) {
    (void)u; /* the default period 6 spelled out per layer */
    const int32_t flags[7] = {1, 1, 1, 1, 1, 0, 1};
    return tr_gguf_writer_set_arr_i32(w, "gemma3.attention.sliding_window_pattern", flags, 7);
}
static tr_status softcap_30(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_f32(w, "gemma3.final_logit_softcapping", 30.0f);
}

static void accepted_variants(void **state) {
    (void)state;
    const int32_t V = 512;
    float *ref = last_logits(base);
    const char *p = rewrite(&(change){.extra = pattern_default_as_array});
    float *arr = last_logits(p);
    remove(p);
    assert_memory_equal(arr, ref, V * sizeof(float));
    /* window 0 and period 1 both mean: no sliding window (all layers global, one RoPE base): the same logits, and
     * not the windowed ones (40 positions > 32) */
    p = rewrite(&(change){.extra = window_zero});
    float *none = last_logits(p);
    remove(p);
    p = rewrite(&(change){.extra = window_none_by_pattern});
    float *global = last_logits(p);
    remove(p);
    assert_memory_equal(none, global, V * sizeof(float));
    assert_true(rel_rms(none, ref, V) > 1e-2);
    p = rewrite(&(change){.extra = softcap_30});
    float *capped = last_logits(p);
    remove(p);
    for (int32_t i = 0; i < V; i++) assert_float_equal(capped[i], 30.0f * tanhf(ref[i] / 30.0f), 1e-5f);
    free(ref);
    free(arr);
    free(none);
    free(global);
    free(capped);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(missing_tensors),
        cmocka_unit_test(missing_epsilon),
        cmocka_unit_test(bad_window_metadata),
        cmocka_unit_test(accepted_variants),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
