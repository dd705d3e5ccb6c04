/* test_model_families_hostile.c — files of the families added through the architecture interface that are
 * well-formed GGUF but not loadable models of their family: each must fail with a status and a message naming the
 * key or tensor and the file (never a crash, never a model that runs on garbage). The files are `tokroute synth`'s
 * small shapes rewritten (support/hostile.h).
 *
 *   smollm3: the RMS epsilon missing (llama.cpp requires it), a rotated size other than the head's (llama.cpp
 *   asserts n_rot == head size), a layer's tensor missing.
 *   lfm2: the convolution's size (shortconv.l_cache) missing or out of range, the per-layer KV head counts of the
 *   wrong length or not dividing the heads, a convolution kernel of the wrong shape, a convolution layer's or an
 *   attention layer's tensor missing, the final norm (token_embd_norm) missing.
 *   gemma4: the sliding-layer keys (key_length_swa, sliding_window_pattern, embedding_length_per_layer_input)
 *   missing, the pattern of the wrong length, V's sliding head size unlike K's, KV sharing that leaves one layer with
 *   a cache or pairs a layer with one of the other kind, per-layer KV heads that differ, per-layer FFN widths unlike
 *   the tensors, the per-layer inputs' and RoPE factors' tensors missing, a KV layer's K missing; and what the engine
 *   does not run, by name: a mixture-of-experts router (26B-A4B), a fused attn_qkv. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "support/fixtures.h"
#include "support/hostile.h"
#include "tokroute.h"

static char smollm3[256], lfm2[256], gemma4[256];

static void synth(const char *shape, char *path) {
    snprintf(path, 256, "%s", temp_path(".gguf"));
    tr_synth_params sp = tr_synth_default_params();
    sp.shape = shape;
    sp.type = TR_TYPE_F32;
    if (tr_synth_write(&sp, path) != TR_OK) fail_msg("synth %s: %s", shape, tr_last_error());
}

static int setup(void **state) {
    (void)state;
    synth("smollm3-tiny", smollm3);
    synth("lfm2-tiny", lfm2);
    synth("gemma4-tiny", gemma4);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    remove(smollm3);
    remove(lfm2);
    remove(gemma4);
    return 0;
}

static tr_status smollm3_rope_16(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_u32(w, "smollm3.rope.dimension_count", 16);
}

static void smollm3_hostile(void **state) {
    (void)state;
    tr_status st;
    tr_model *m = hostile_load(smollm3, &st); /* the base file loads */
    assert_non_null(m);
    tr_model_free(m);
    hostile_expect_fail(smollm3, &(hostile_change){.drop_key = "smollm3.attention.layer_norm_rms_epsilon"},
                        TR_ERR_FORMAT, "missing metadata smollm3.attention.layer_norm_rms_epsilon");
    hostile_expect_fail(smollm3, &(hostile_change){.extra = smollm3_rope_16}, TR_ERR_FORMAT,
                        "rope.dimension_count 16 differs from the head size 32");
    hostile_expect_fail(smollm3, &(hostile_change){.drop_tensor = "blk.3.attn_k.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'blk.3.attn_k.weight'");
    hostile_expect_fail(smollm3, &(hostile_change){.drop_tensor = "blk.7.ffn_down.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'blk.7.ffn_down.weight'");
}

static tr_status lfm2_l_cache_1(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_u32(w, "lfm2.shortconv.l_cache", 1);
}
static tr_status lfm2_kv_short(tr_gguf_writer *w, void *u) {
    (void)u;
    const int32_t kv[4] = {0, 0, 2, 0};
    return tr_gguf_writer_set_arr_i32(w, "lfm2.attention.head_count_kv", kv, 4);
}
static tr_status lfm2_kv_3(tr_gguf_writer *w, void *u) {
    (void)u;
    const int32_t kv[6] = {0, 0, 3, 0, 0, 2};
    return tr_gguf_writer_set_arr_i32(w, "lfm2.attention.head_count_kv", kv, 6);
}
static tr_status lfm2_kv_mixed(tr_gguf_writer *w, void *u) {
    (void)u;
    const int32_t kv[6] = {0, 0, 2, 0, 0, 4};
    return tr_gguf_writer_set_arr_i32(w, "lfm2.attention.head_count_kv", kv, 6);
}
static tr_status lfm2_kernel_4(tr_gguf_writer *w, void *u) {
    (void)u; /* the kernels have 3 taps */
    return tr_gguf_writer_set_u32(w, "lfm2.shortconv.l_cache", 4);
}

static void lfm2_hostile(void **state) {
    (void)state;
    tr_status st;
    tr_model *m = hostile_load(lfm2, &st);
    assert_non_null(m);
    tr_model_free(m);
    hostile_expect_fail(lfm2, &(hostile_change){.drop_key = "lfm2.shortconv.l_cache"}, TR_ERR_FORMAT,
                        "missing metadata lfm2.shortconv.l_cache");
    hostile_expect_fail(lfm2, &(hostile_change){.extra = lfm2_l_cache_1}, TR_ERR_FORMAT,
                        "lfm2.shortconv.l_cache = 1");
    hostile_expect_fail(lfm2, &(hostile_change){.drop_key = "lfm2.attention.layer_norm_rms_epsilon"}, TR_ERR_FORMAT,
                        "missing metadata lfm2.attention.layer_norm_rms_epsilon");
    hostile_expect_fail(lfm2, &(hostile_change){.extra = lfm2_kv_short}, TR_ERR_FORMAT,
                        "lfm2.attention.head_count_kv has 4 entries for 6 layers");
    hostile_expect_fail(lfm2, &(hostile_change){.extra = lfm2_kv_3}, TR_ERR_UNSUPPORTED,
                        "lfm2.attention.head_count_kv[2] = 3");
    hostile_expect_fail(lfm2, &(hostile_change){.extra = lfm2_kv_mixed}, TR_ERR_UNSUPPORTED,
                        "lfm2.attention.head_count_kv[5] = 4");
    hostile_expect_fail(lfm2, &(hostile_change){.extra = lfm2_kernel_4}, TR_ERR_FORMAT,
                        "tensor 'blk.0.shortconv.conv.weight' has shape [3, 128] (2-D), expected [4, 128]");
    hostile_expect_fail(lfm2, &(hostile_change){.drop_tensor = "blk.1.shortconv.in_proj.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'blk.1.shortconv.in_proj.weight'");
    hostile_expect_fail(lfm2, &(hostile_change){.drop_tensor = "blk.2.attn_k_norm.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'blk.2.attn_k_norm.weight'");
    hostile_expect_fail(lfm2, &(hostile_change){.drop_tensor = "token_embd_norm.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'token_embd_norm.weight'");
}

static tr_status gemma4_pattern_short(tr_gguf_writer *w, void *u) {
    (void)u;
    const int32_t swa[4] = {1, 0, 1, 0};
    return tr_gguf_writer_set_arr_i32(w, "gemma4.attention.sliding_window_pattern", swa, 4);
}
static tr_status gemma4_pattern_crossed(tr_gguf_writer *w, void *u) {
    (void)u; /* layer 5 (global) would read layer 3's cache, a sliding layer's */
    const int32_t swa[6] = {1, 0, 1, 1, 1, 0};
    return tr_gguf_writer_set_arr_i32(w, "gemma4.attention.sliding_window_pattern", swa, 6);
}
static tr_status gemma4_value_32(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_u32(w, "gemma4.attention.value_length_swa", 32);
}
static tr_status gemma4_shared_5(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_u32(w, "gemma4.attention.shared_kv_layers", 5);
}
static tr_status gemma4_kv_mixed(tr_gguf_writer *w, void *u) {
    (void)u;
    const int32_t kv[6] = {2, 2, 2, 2, 2, 1};
    return tr_gguf_writer_set_arr_i32(w, "gemma4.attention.head_count_kv", kv, 6);
}
static tr_status gemma4_ff_flat(tr_gguf_writer *w, void *u) {
    (void)u; /* the shared layers' FFN is double-wide in the file */
    const int32_t ff[6] = {512, 512, 512, 512, 512, 512};
    return tr_gguf_writer_set_arr_i32(w, "gemma4.feed_forward_length", ff, 6);
}

/* A 2-D F32 tensor of zeros, added to the file. */
static tr_status add_zeros(tr_gguf_writer *w, const char *name, int64_t cols, int64_t rows) {
    float *zeros = calloc((size_t)(cols * rows), sizeof *zeros);
    const int64_t ne[2] = {cols, rows};
    tr_status st = zeros ? tr_gguf_writer_add_tensor(w, name, TR_TYPE_F32, 2, ne, zeros, NULL) : TR_ERR_NOMEM;
    free(zeros);
    return st;
}
static tr_status gemma4_moe(tr_gguf_writer *w, void *u) {
    (void)u; /* a router: the 26B-A4B's expert layers */
    return add_zeros(w, "blk.1.ffn_gate_inp.weight", 256, 4);
}
static tr_status gemma4_fused_qkv(tr_gguf_writer *w, void *u) {
    (void)u;
    return add_zeros(w, "blk.0.attn_qkv.weight", 256, 4 * 64 + 2 * 2 * 64);
}

static void gemma4_hostile(void **state) {
    (void)state;
    tr_status st;
    tr_model *m = hostile_load(gemma4, &st);
    assert_non_null(m);
    tr_model_free(m);
    hostile_expect_fail(gemma4, &(hostile_change){.drop_key = "gemma4.attention.key_length_swa"}, TR_ERR_FORMAT,
                        "missing metadata gemma4.attention.key_length_swa");
    hostile_expect_fail(gemma4, &(hostile_change){.drop_key = "gemma4.attention.layer_norm_rms_epsilon"},
                        TR_ERR_FORMAT, "missing metadata gemma4.attention.layer_norm_rms_epsilon");
    hostile_expect_fail(gemma4, &(hostile_change){.drop_key = "gemma4.embedding_length_per_layer_input"},
                        TR_ERR_FORMAT, "missing metadata gemma4.embedding_length_per_layer_input");
    hostile_expect_fail(gemma4, &(hostile_change){.drop_key = "gemma4.attention.sliding_window_pattern"},
                        TR_ERR_FORMAT, "gemma4.attention.sliding_window_pattern must be an array of one flag per layer");
    hostile_expect_fail(gemma4, &(hostile_change){.extra = gemma4_pattern_short}, TR_ERR_FORMAT,
                        "gemma4.attention.sliding_window_pattern has 4 entries for 6 layers");
    hostile_expect_fail(gemma4, &(hostile_change){.extra = gemma4_pattern_crossed}, TR_ERR_FORMAT,
                        "layer 5 (global) would share layer 3's KV cache, which is sliding");
    hostile_expect_fail(gemma4, &(hostile_change){.extra = gemma4_value_32}, TR_ERR_FORMAT,
                        "gemma4.attention.value_length_swa 32 differs from key_length_swa 64");
    hostile_expect_fail(gemma4, &(hostile_change){.extra = gemma4_shared_5}, TR_ERR_FORMAT,
                        "gemma4.attention.shared_kv_layers = 5 leaves 1 layers with a KV cache");
    hostile_expect_fail(gemma4, &(hostile_change){.extra = gemma4_kv_mixed}, TR_ERR_UNSUPPORTED,
                        "gemma4.attention.head_count_kv[5] = 1");
    hostile_expect_fail(gemma4, &(hostile_change){.extra = gemma4_ff_flat}, TR_ERR_FORMAT,
                        "tensor 'blk.4.ffn_gate.weight' has shape [256, 1024] (2-D), expected [256, 512]");
    hostile_expect_fail(gemma4, &(hostile_change){.drop_tensor = "per_layer_token_embd.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'per_layer_token_embd.weight'");
    hostile_expect_fail(gemma4, &(hostile_change){.drop_tensor = "rope_freqs.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'rope_freqs.weight'");
    hostile_expect_fail(gemma4, &(hostile_change){.drop_tensor = "blk.3.attn_k.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'blk.3.attn_k.weight'");
    hostile_expect_fail(gemma4, &(hostile_change){.drop_tensor = "blk.5.proj.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'blk.5.proj.weight'");
    hostile_expect_fail(gemma4, &(hostile_change){.extra = gemma4_moe}, TR_ERR_UNSUPPORTED,
                        "tensor 'blk.1.ffn_gate_inp.weight': mixture-of-experts layers are not supported");
    hostile_expect_fail(gemma4, &(hostile_change){.extra = gemma4_fused_qkv}, TR_ERR_UNSUPPORTED,
                        "tensor 'blk.0.attn_qkv.weight' (fused Q/K/V) is not supported");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smollm3_hostile),
        cmocka_unit_test(lfm2_hostile),
        cmocka_unit_test(gemma4_hostile),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
