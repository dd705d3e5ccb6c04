/* test_model_families_hostile.c — files of the families added through the architecture interface that are
 * well-formed GGUF but not loadable models of their family: each must fail with a status and a message naming the
 * key or tensor and the file (never a crash, never a model that runs on garbage). The files are `tokroute synth`'s
 * small shapes rewritten (support/hostile.h).
 *
 *   smollm3: the RMS epsilon missing (llama.cpp requires it), a rotated size other than the head's (llama.cpp
 *   asserts n_rot == head size), a layer's tensor missing.
 *   lfm2: the convolution's size (shortconv.l_cache) missing or out of range, the per-layer KV head counts of the
 *   wrong length or not dividing the heads, a convolution kernel of the wrong shape, a convolution layer's or an
 *   attention layer's tensor missing, the final norm (token_embd_norm) missing. */
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

static char smollm3[256], lfm2[256];

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
    return 0;
}

static int teardown(void **state) {
    (void)state;
    remove(smollm3);
    remove(lfm2);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smollm3_hostile),
        cmocka_unit_test(lfm2_hostile),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
