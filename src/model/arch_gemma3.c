/* arch_gemma3.c — the gemma3 family: the shared decoder layer (decoder.c) with what gemma3 sets in it, as
 * llama.cpp of 2026-09 builds it (src/models/gemma3.cpp):
 *   embeddings × sqrt(n_embd); per layer RMSNorm → Q/K/V → per-head Q/K RMSNorm → RoPE (NEOX) → Q × the attention
 *   scale → attention (scores unscaled) → output projection → post-attention RMSNorm → residual → RMSNorm →
 *   GeGLU FFN → post-FFN RMSNorm → residual; output norm; tied output; optional final logit softcapping.
 * The norm weights are used as stored: llama.cpp's converter already adds Gemma's +1 (Gemma3RMSNorm's x·(1+w)).
 *
 * Sliding-window attention: when gemma3.attention.sliding_window is present and > 0, a layer is local when
 * il % n_pattern < n_pattern - 1 (n_pattern from attention.sliding_window_pattern, default 6: layers 5, 11, ...
 * are global), or as a per-layer integer array under that key says. A local query at position p sees p - window + 1
 * .. p; local layers use RoPE base rope.freq_base_swa (default 10000) at scale 1, global ones rope.freq_base with
 * the file's linear scaling. The KV cache keeps every position (rollback stays a matter of n_past); attention.c
 * skips what a window hides. The attention scale is 1/sqrt(head_dim), or 1/sqrt(n_embd / n_head) for the 62-layer
 * 27B (llama.cpp's rule, after gemma_pytorch's query_pre_attn_scalar).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "common/error.h"
#include "model/arch.h"

/* ---------------------------------------------------------------- hyperparameters */

static bool get_key(const tr_model *m, const char *suffix, char *key, size_t cap) {
    snprintf(key, cap, "%s.%s", m->arch_name, suffix);
    return tr_gguf_find_kv(m->gguf, key) >= 0;
}

/* The sliding window (0: none), after checking the key's type and range. */
static tr_status read_window(const tr_model *m, int32_t *window) {
    char key[128];
    *window = 0;
    if (!get_key(m, "attention.sliding_window", key, sizeof key)) return TR_OK;
    int64_t v;
    if (!tr_gguf_get_int(m->gguf, key, &v)) return tr_fail(TR_ERR_FORMAT, "metadata %s is not an integer", key);
    if (v < 0 || v > (1 << 24))
        return tr_fail(TR_ERR_FORMAT, "metadata %s = %" PRId64 " is outside 0..%d", key, v, 1 << 24);
    *window = (int32_t)v; /* 0: llama.cpp turns sliding windows off */
    return TR_OK;
}

/* Whether layer il is a sliding-window layer (window > 0), by llama.cpp's load_swa_pattern. */
static tr_status layer_is_swa(const tr_model *m, int il, bool *swa) {
    char key[128];
    if (!get_key(m, "attention.sliding_window_pattern", key, sizeof key)) {
        *swa = il % 6 < 5;
        return TR_OK;
    }
    const int64_t kv = tr_gguf_find_kv(m->gguf, key);
    int64_t v;
    if (tr_gguf_kv_type(m->gguf, kv) == TR_GGUF_ARRAY) {
        if (tr_gguf_kv_array_len(m->gguf, kv) != (uint64_t)m->info.n_layer)
            return tr_fail(TR_ERR_FORMAT, "metadata %s has %" PRIu64 " entries for %d layers", key,
                           tr_gguf_kv_array_len(m->gguf, kv), m->info.n_layer);
        if (!tr_gguf_arr_int(m->gguf, kv, (uint64_t)il, &v))
            return tr_fail(TR_ERR_UNSUPPORTED, "metadata %s: only integer per-layer flags are supported", key);
        *swa = v != 0;
        return TR_OK;
    }
    if (!tr_gguf_get_int(m->gguf, key, &v) || v < 0 || v > (1 << 20))
        return tr_fail(TR_ERR_FORMAT, "metadata %s must be a layer period (0..%d) or a per-layer array", key, 1 << 20);
    *swa = v == 0 || il % v < v - 1;
    return TR_OK;
}

static tr_status read_hparams(tr_model *m) {
    tr_model_info *in = &m->info;
    char key[128];
    double f;
    /* llama.cpp requires the epsilon for gemma3 (the generic default would silently differ) */
    if (!get_key(m, "attention.layer_norm_rms_epsilon", key, sizeof key))
        return tr_fail(TR_ERR_FORMAT, "missing metadata %s", key);
    int32_t window;
    tr_status st = read_window(m, &window);
    if (st != TR_OK) return st;
    m->rope_swa = false;
    for (int il = 0; window > 0 && il < in->n_layer; il++) {
        bool swa;
        if ((st = layer_is_swa(m, il, &swa)) != TR_OK) return st;
        m->rope_swa |= swa;
    }
    m->rope_theta_swa = 10000.0f;
    if (get_key(m, "rope.freq_base_swa", key, sizeof key)) {
        if (!tr_gguf_get_float(m->gguf, key, &f) || !(f > 0 && f < 1e30))
            return tr_fail(TR_ERR_FORMAT, "metadata %s must be a positive number", key);
        m->rope_theta_swa = (float)f;
    }
    m->logit_softcap = 0.0f;
    if (get_key(m, "final_logit_softcapping", key, sizeof key)) {
        if (!tr_gguf_get_float(m->gguf, key, &f) || !(f >= 0 && f < 1e30))
            return tr_fail(TR_ERR_FORMAT, "metadata %s must be a number >= 0", key);
        m->logit_softcap = (float)f;
    }
    m->embd_scale = sqrtf((float)in->n_embd);
    m->q_scale = in->n_layer == 62 ? 1.0f / sqrtf((float)(in->n_embd / in->n_head))
                                   : 1.0f / sqrtf((float)in->head_dim);
    m->kq_scale = 1.0f;
    m->gelu = true;
    return TR_OK;
}

static tr_status bind_layer(tr_model *m, int il) {
    int32_t window;
    bool swa = false;
    tr_status st = read_window(m, &window);
    if (st == TR_OK && window > 0) st = layer_is_swa(m, il, &swa);
    m->layers[il].window = swa ? window : 0;
    return st;
}

static tr_status load(tr_model *m) {
    tr_status st = read_hparams(m); /* llama.cpp's gemma3 graph passes no RoPE frequency factors */
    const decoder_parts parts = {.qk_norm = true, .post_norms = true};
    for (int il = 0; il < m->info.n_layer && st == TR_OK; il++)
        if ((st = bind_decoder_layer(m, il, parts)) == TR_OK) st = bind_layer(m, il);
    return st;
}

/* ---------------------------------------------------------------- forward-pass steps */

/* As rope_tables (ops.c) with the sliding-window base and scale 1 (llama.cpp's rope_freq_scale_train_swa). */
static void rope_tables_swa(const tr_model *m, int32_t pos0, int32_t n, float *cos_out, float *sin_out) {
    const int32_t half = m->rope_dim / 2;
    const float theta_scale = powf(m->rope_theta_swa, -2.0f / (float)m->rope_dim);
    for (int32_t t = 0; t < n; t++) {
        float theta = (float)(pos0 + t);
        for (int32_t i = 0; i < half; i++) {
            cos_out[(int64_t)t * half + i] = cosf(theta);
            sin_out[(int64_t)t * half + i] = sinf(theta);
            theta *= theta_scale;
        }
    }
}

/* The main table, and after the cap rows of it the sliding-window layers' (when the model has some). */
static void rope_rows(const tr_model *m, activations *A, int32_t row, int32_t n, int32_t pos0) {
    rope_rows_default(m, A, row, n, pos0);
    const int64_t off = (int64_t)(A->cap + row) * (m->rope_dim / 2);
    if (m->rope_swa) rope_tables_swa(m, pos0, n, A->rope_cos + off, A->rope_sin + off);
}

/* ---------------------------------------------------------------- synthetic shapes */

/* The HF configs (query_pre_attn_scalar = head_dim, rope_local_base_freq 10000 = llama.cpp's default for
 * freq_base_swa); the two small ones keep head_dim 256 and the 5:1 local/global rule for tests, with windows short
 * prompts cross (extra: attention.sliding_window). */
static const int32_t window_512 = 512, window_32 = 32, window_48 = 48;
static const synth_shape shapes[] = {
    {"gemma3-270m", 640, 18, 4, 1, 256, 2048, 262144, 32768, 1000000.0f, 1e-6f, true, false, true, false, 0,
     &window_512},
    {"gemma3-1b", 1152, 26, 4, 1, 256, 6912, 262144, 32768, 1000000.0f, 1e-6f, true, false, true, false, 0,
     &window_512},
    {"gemma3-tiny", 256, 7, 4, 1, 256, 512, 512, 512, 1000000.0f, 1e-6f, true, false, true, false, 0, &window_32},
    {"gemma3-small", 384, 8, 6, 2, 256, 1024, 512, 512, 1000000.0f, 1e-6f, true, false, true, false, 0, &window_48},
};

static tr_status synth_hparams(tr_gguf_writer *w, const synth_shape *s) {
    return synth_set_u32(w, "gemma3", "attention.sliding_window", (uint32_t)*(const int32_t *)s->extra, TR_OK);
}

/* Norms stored with Gemma's +1 added, as llama.cpp's converter does (FILL_NORM is around 1). */
static void synth_layer(synth_plan *pl, const synth_shape *s, int il) { synth_decoder_layer(pl, s, il, true); }

const arch_ops arch_gemma3 = {
    .name = "gemma3",
    .id = TR_ARCH_GEMMA3,
    .rope_neox = true,
    .load = load,
    .rope_rows = rope_rows,
    .layer = decoder_layer,
    .logits_post = logits_softcap,
    .shapes = shapes,
    .n_shapes = sizeof shapes / sizeof shapes[0],
    .synth_hparams = synth_hparams,
    .synth_layer = synth_layer,
};
