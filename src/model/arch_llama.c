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

const arch_ops arch_llama = {
    .name = "llama", .id = TR_ARCH_LLAMA, .load = load_llama, .rope_rows = rope_rows_default, .layer = decoder_layer,
};
const arch_ops arch_qwen2 = {
    .name = "qwen2", .id = TR_ARCH_QWEN2, .rope_neox = true, .load = load_qwen2, .rope_rows = rope_rows_default,
    .layer = decoder_layer,
};
const arch_ops arch_qwen3 = {
    .name = "qwen3", .id = TR_ARCH_QWEN3, .rope_neox = true, .load = load_qwen3, .rope_rows = rope_rows_default,
    .layer = decoder_layer,
};
