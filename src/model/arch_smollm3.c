/* arch_smollm3.c — the smollm3 family (SmolLM3), as llama.cpp of 2026-09 builds it (src/models/smollm3.cpp): the
 * llama decoder layer (adjacent-pair RoPE, as its converter permutes Q/K like llama's), except that every fourth
 * layer (il + 1) % 4 == 0 rotates neither queries nor keys (NoPE; llama.cpp's n_no_rope_layer_step, fixed at 4).
 * No RoPE frequency factors (llama.cpp passes none); the RMSNorm epsilon is required, the rotated size is the head.
 */
#include <stdio.h>

#include "common/error.h"
#include "model/arch.h"

enum { NO_ROPE_STEP = 4 };

static tr_status load(tr_model *m) {
    char key[64];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m->arch_name);
    if (tr_gguf_find_kv(m->gguf, key) < 0) return tr_fail(TR_ERR_FORMAT, "missing metadata %s", key);
    if (m->rope_dim != m->info.head_dim)
        return tr_fail(TR_ERR_FORMAT, "rope.dimension_count %d differs from the head size %d", m->rope_dim,
                       m->info.head_dim);
    tr_status st = TR_OK;
    for (int il = 0; il < m->info.n_layer && st == TR_OK; il++) {
        st = bind_decoder_layer(m, il, (decoder_parts){0});
        m->layers[il].no_rope = (il + 1) % NO_ROPE_STEP == 0;
    }
    return st;
}

/* SmolLM3-3B's HF config (hidden 2048, 36 layers, 16 heads / 4 KV heads of 128, intermediate 11008, Llama 3's
 * 128256-token vocabulary, rope_theta 5e6, rms_norm_eps 1e-6, tied embeddings); two small ones for tests, an SLM
 * and an LLM sharing a vocabulary (8 layers: two of them NoPE). */
static const synth_shape shapes[] = {
    {"smollm3-3b", 2048, 36, 16, 4, 128, 11008, 128256, 65536, 5000000.0f, 1e-6f, true, false, false, false, 0, NULL},
    {"smollm3-tiny", 128, 8, 4, 2, 32, 256, 512, 512, 5000000.0f, 1e-6f, true, false, false, false, 0, NULL},
    {"smollm3-small", 192, 8, 6, 2, 32, 384, 512, 512, 5000000.0f, 1e-6f, true, false, false, false, 0, NULL},
};

const arch_ops arch_smollm3 = {
    .name = "smollm3",
    .id = TR_ARCH_SMOLLM3,
    .load = load,
    .rope_rows = rope_rows_default,
    .layer = decoder_layer,
    .shapes = shapes,
    .n_shapes = sizeof shapes / sizeof shapes[0],
};
