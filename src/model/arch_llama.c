/* arch_llama.c — the llama family: llama (Llama 2/3, SmolLM2, TinyLlama ...), qwen2 and qwen3, all the shared
 * decoder layer (decoder.c) as llama.cpp builds them. They differ only in: Q/K/V biases (qwen2 requires them; they
 * are optional elsewhere), per-head Q/K RMSNorm (qwen3), RoPE style (llama rotates adjacent pairs because its
 * converter permutes Q/K rows; qwen rotates the two halves of a head) and head size (qwen3 takes it from
 * attention.key_length, read with the common hyperparameters). RoPE frequency factors (Llama 3.1+) are optional.
 */
#include "model/arch.h"

static tr_status load(tr_model *m, decoder_parts parts) {
    tr_status st = bind_vector(m, "rope_freqs.weight", m->rope_dim / 2, false, &m->rope_freqs);
    for (int il = 0; il < m->info.n_layer && st == TR_OK; il++) st = bind_decoder_layer(m, il, parts);
    return st;
}

static tr_status load_llama(tr_model *m) { return load(m, (decoder_parts){0}); }
static tr_status load_qwen2(tr_model *m) { return load(m, (decoder_parts){.qkv_bias = true}); }
static tr_status load_qwen3(tr_model *m) { return load(m, (decoder_parts){.qk_norm = true}); }

/* name, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx, rope_theta, norm_eps, tied, biases,
 * qk_norm, rope_freqs, rope_dim (0: head_dim), extra */
static const synth_shape llama_shapes[] = {
    {"smollm2-135m", 576, 30, 9, 3, 64, 1536, 49152, 8192, 100000.0f, 1e-5f, true, false, false, false, 0, NULL},
    {"llama-3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f, 1e-5f, true, false, false, true, 0, NULL},
    {"tiny", 64, 2, 4, 2, 16, 128, 512, 512, 10000.0f, 1e-5f, false, false, false, false, 0, NULL},
};
static const synth_shape qwen2_shapes[] = {
    {"qwen2.5-0.5b", 896, 24, 14, 2, 64, 4864, 151936, 32768, 1000000.0f, 1e-6f, true, true, false, false, 0, NULL},
    {"qwen2.5-1.5b", 1536, 28, 12, 2, 128, 8960, 151936, 32768, 1000000.0f, 1e-6f, true, true, false, false, 0, NULL},
};
static const synth_shape qwen3_shapes[] = {
    {"qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1000000.0f, 1e-6f, true, false, true, false, 0, NULL},
};

const arch_ops arch_llama = {
    .name = "llama", .id = TR_ARCH_LLAMA, .load = load_llama, .rope_rows = rope_rows_default, .layer = decoder_layer,
    .shapes = llama_shapes, .n_shapes = sizeof llama_shapes / sizeof llama_shapes[0],
};
const arch_ops arch_qwen2 = {
    .name = "qwen2", .id = TR_ARCH_QWEN2, .rope_neox = true, .load = load_qwen2, .rope_rows = rope_rows_default,
    .layer = decoder_layer, .shapes = qwen2_shapes, .n_shapes = sizeof qwen2_shapes / sizeof qwen2_shapes[0],
};
const arch_ops arch_qwen3 = {
    .name = "qwen3", .id = TR_ARCH_QWEN3, .rope_neox = true, .load = load_qwen3, .rope_rows = rope_rows_default,
    .layer = decoder_layer, .shapes = qwen3_shapes, .n_shapes = sizeof qwen3_shapes / sizeof qwen3_shapes[0],
};
