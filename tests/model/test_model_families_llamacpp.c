/* test_model_families_llamacpp.c — the families added through the architecture interface (arch.h) against llama.cpp
 * itself (scripts/llamacpp.sh's build, commit de3ff81), as test_model_qwen35_llamacpp does for qwen35: each
 * family's small `tokroute synth` shape in F32 (prompt in one chunk and in chunks of 5) and quantized (chunks of 7),
 * through llamacpp_check_shape — logits and final hidden states at every prompt position (relative RMS 2e-3 for
 * F32, 5e-2 quantized), argmax, 16 greedy tokens; and the Q8_0 KV cache against llama.cpp's (kv_q8_0, below). CMake
 * runs it again on the lower instruction sets (avx2, scalar).
 *
 *   smollm3-tiny: 8 layers, 3 and 7 without RoPE (NoPE every fourth), GQA 4/2, head 32.
 *   lfm2-tiny: 6 layers, attention at 2 and 5 (Q/K norms, NEOX RoPE, GQA 4/2), short convolutions of 3 taps
 *   elsewhere (their windows carried across chunks); lfm2-small: 8 layers, 4 taps, attention at 1, 4, 6; and
 *   lfm2-small with attention.sliding_window 6 (llama.cpp's LFM2 SWA variant: every attention layer windowed),
 *   which the 24-token prompt and the greedy tokens cross.
 *   gemma4-tiny: 6 layers alternating sliding (head 64, window 10) and global (head 128, RoPE factors: a quarter of
 *   the pairs rotate), the last two attending over layers 2 and 3's caches, per-layer inputs of 64, double-wide FFN
 *   on the shared layers, GQA 4/2, softcap 30; gemma4-small: 8 layers, three of them KV-shared, window 16. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support/llamacpp_ref.h"
#include "tokroute.h"

static llamacpp_ref llama;

static int setup(void **state) {
    (void)state;
    return llamacpp_ref_setup(&llama, "families", "llama-quantize", "tests/model/llamacpp_ref.c");
}

static int teardown(void **state) {
    (void)state;
    return llamacpp_ref_teardown(&llama);
}

static void smollm3_f32(void **state) {
    (void)state;
    llamacpp_check_shape(&llama, "smollm3-tiny", TR_ARCH_SMOLLM3, TR_TYPE_F32, 2e-3, 256);
    llamacpp_check_shape(&llama, "smollm3-tiny", TR_ARCH_SMOLLM3, TR_TYPE_F32, 2e-3, 5);
}

static void smollm3_q8_0(void **state) {
    (void)state;
    llamacpp_check_shape(&llama, "smollm3-tiny", TR_ARCH_SMOLLM3, TR_TYPE_Q8_0, 5e-2, 7);
}

static void lfm2_f32(void **state) {
    (void)state;
    llamacpp_check_shape(&llama, "lfm2-tiny", TR_ARCH_LFM2, TR_TYPE_F32, 2e-3, 256);
    llamacpp_check_shape(&llama, "lfm2-tiny", TR_ARCH_LFM2, TR_TYPE_F32, 2e-3, 5);
    llamacpp_check_shape(&llama, "lfm2-small", TR_ARCH_LFM2, TR_TYPE_F32, 2e-3, 7);
}

static tr_status window_6(tr_gguf_writer *w, void *user) {
    (void)user;
    return tr_gguf_writer_set_u32(w, "lfm2.attention.sliding_window", 6);
}

static void lfm2_swa(void **state) {
    (void)state;
    llamacpp_check_variant(&llama, "lfm2-small", "swa6", window_6, TR_ARCH_LFM2, TR_TYPE_F32, 2e-3, 256);
    llamacpp_check_variant(&llama, "lfm2-small", "swa6", window_6, TR_ARCH_LFM2, TR_TYPE_F32, 2e-3, 5);
}

static void lfm2_quantized(void **state) {
    (void)state;
    llamacpp_check_shape(&llama, "lfm2-tiny", TR_ARCH_LFM2, TR_TYPE_Q8_0, 5e-2, 256);
    llamacpp_check_shape(&llama, "lfm2-small", TR_ARCH_LFM2, TR_TYPE_Q4_0, 5e-2, 7);
}

static void gemma4_f32(void **state) {
    (void)state;
    llamacpp_check_shape(&llama, "gemma4-tiny", TR_ARCH_GEMMA4, TR_TYPE_F32, 2e-3, 256);
    llamacpp_check_shape(&llama, "gemma4-tiny", TR_ARCH_GEMMA4, TR_TYPE_F32, 2e-3, 5);
    llamacpp_check_shape(&llama, "gemma4-small", TR_ARCH_GEMMA4, TR_TYPE_F32, 2e-3, 7);
}

static void gemma4_quantized(void **state) {
    (void)state;
    llamacpp_check_shape(&llama, "gemma4-tiny", TR_ARCH_GEMMA4, TR_TYPE_Q8_0, 5e-2, 7);
    llamacpp_check_shape(&llama, "gemma4-tiny", TR_ARCH_GEMMA4, TR_TYPE_Q4_0, 5e-2, 256);
}

/* tokroute's Q8_0 KV cache against llama.cpp's (`-ctk q8_0 -ctv q8_0`, flash attention, its Walsh-Hadamard
 * rotation included), F32 weights so only the caches differ; each tolerance lies between the agreement measured on
 * every instruction set and what an F16 cache (the check's own counter-test) gives against llama.cpp's q8_0 one
 * (2026-11-27, logits rel RMS, avx512 / avx2 / scalar):
 *   gemma4: two head sizes (64 and 128: rotation runs of 64 and 128), KV-shared layers reading a quantized cache,
 *   attention at scale 1 — tiny 1.0e-2 / 9.4e-3 / 7.4e-3, small 1.1e-2 / 1.3e-2 / 1.6e-2, against 1.25e-1 and
 *   8.8e-2 for an F16 cache: tolerance 3e-2. The sharp scale-1 softmax magnifies the few int8 values the two
 *   rotations (ggml's matrix product, our butterfly) round the other way; against llama.cpp without its rotation
 *   (LLAMA_ATTN_ROT_DISABLE) the distance is 1.4e-1.
 *   lfm2 and smollm3 (heads of 32: no rotation) — 5.9e-7 to 1.7e-6 and 5.4e-6 to 5.2e-4 (avx2), against 4.3e-3 and
 *   9.1e-3 for an F16 cache: tolerance 2e-3. */
static void kv_q8_0(void **state) {
    (void)state;
    llamacpp_check_kv(&llama, "gemma4-tiny", TR_ARCH_GEMMA4, TR_TYPE_F32, TR_KV_Q8_0, 3e-2, 256);
    llamacpp_check_kv(&llama, "gemma4-tiny", TR_ARCH_GEMMA4, TR_TYPE_F32, TR_KV_Q8_0, 3e-2, 5);
    llamacpp_check_kv(&llama, "gemma4-small", TR_ARCH_GEMMA4, TR_TYPE_F32, TR_KV_Q8_0, 3e-2, 7);
    llamacpp_check_kv(&llama, "lfm2-tiny", TR_ARCH_LFM2, TR_TYPE_F32, TR_KV_Q8_0, 2e-3, 256);
    llamacpp_check_kv(&llama, "smollm3-tiny", TR_ARCH_SMOLLM3, TR_TYPE_F32, TR_KV_Q8_0, 2e-3, 256);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smollm3_f32),
        cmocka_unit_test(smollm3_q8_0),
        cmocka_unit_test(lfm2_f32),
        cmocka_unit_test(lfm2_quantized),
        cmocka_unit_test(lfm2_swa),
        cmocka_unit_test(gemma4_f32),
        cmocka_unit_test(gemma4_quantized),
        cmocka_unit_test(kv_q8_0),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
