/* arch_lfm2.c — the lfm2 family (Liquid LFM2 / LFM2.5, 350M to 2.6B), as llama.cpp of 2026-09 builds it
 * (src/models/lfm2.cpp): gated short-convolution layers mixed with grouped-query attention layers, each inside the
 * shared decoder block (decoder.c: x += mixer(RMSNorm(x)); x += SwiGLU(RMSNorm(x))).
 *
 *  - attention layers (attention.head_count_kv[il] > 0): the decoder's attention with per-head Q/K RMSNorm and NEOX
 *    RoPE, no biases; a sliding window when attention.sliding_window > 0 (llama.cpp's LFM2 SWA variant);
 *  - short-convolution layers (head_count_kv[il] == 0, no KV cache): shortconv.in_proj gives b, c and x
 *    (n_embd each); b·x goes through a causal depthwise convolution of shortconv.l_cache taps (ggml_ssm_conv over
 *    the last l_cache - 1 inputs kept per sequence), times c, then shortconv.out_proj.
 *
 * The convolution windows are the family's per-sequence state (state_floats: n_embd × (l_cache - 1) per
 * convolution layer), checkpointed and rolled back by seq_state.c like qwen35's recurrent state, so truncation,
 * speculation and the server's sessions give the tokens of a run that never went ahead. The final norm is stored as
 * token_embd_norm (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2). MoE variants are the separate lfm2moe architecture.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/arch.h"

typedef struct shortconv_weights {
    weight_matrix in_proj;   /* [3 n_embd][n_embd]: b, c, x */
    weight_matrix out_proj;  /* [n_embd][n_embd] */
    const float *conv;       /* [n_embd][l_cache] */
} shortconv_weights;

typedef struct lfm2_model {
    int32_t l_cache;         /* shortconv.l_cache: taps of the convolution */
    int32_t n_conv;          /* convolution layers */
    int32_t *conv_index;     /* [n_layer] index among the convolution layers, -1 for an attention layer */
    bool *no_kv;             /* [n_layer] the convolution layers */
    shortconv_weights *sc;   /* [n_layer] (set at the convolution layers) */
} lfm2_model;

typedef struct lfm2_buffers {
    float *bcx;              /* [cap][3 n_embd] */
    float *y;                /* [cap][n_embd] */
} lfm2_buffers;

static const lfm2_model *F(const tr_model *m) { return m->family; }

/* ---------------------------------------------------------------- loading */

/* attention.head_count_kv per layer: 0 marks a convolution layer; the attention layers' count must divide
 * head_count and be the same everywhere. A single integer (every layer attention) is read by model_load.c. */
static tr_status read_layer_kinds(tr_model *m, lfm2_model *f) {
    char key[96];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch_name);
    const int64_t kv = tr_gguf_find_kv(m->gguf, key);
    const int32_t n_layer = m->info.n_layer;
    int64_t n_kv = 0;
    const bool array = kv >= 0 && tr_gguf_kv_type(m->gguf, kv) == TR_GGUF_ARRAY;
    if (array && tr_gguf_kv_array_len(m->gguf, kv) != (uint64_t)n_layer)
        return tr_fail(TR_ERR_FORMAT, "metadata %s has %" PRIu64 " entries for %d layers", key,
                       tr_gguf_kv_array_len(m->gguf, kv), n_layer);
    for (int32_t il = 0; il < n_layer; il++) {
        int64_t v = m->info.n_head_kv;
        if (array && !tr_gguf_arr_int(m->gguf, kv, (uint64_t)il, &v))
            return tr_fail(TR_ERR_FORMAT, "metadata %s[%d] is not an integer", key, il);
        if (v < 0 || v > m->info.n_head || (v > 0 && m->info.n_head % v != 0) || (v > 0 && n_kv > 0 && v != n_kv))
            return tr_fail(TR_ERR_UNSUPPORTED, "metadata %s[%d] = %" PRId64 " (0, or one divisor of head_count %d "
                           "for every attention layer)", key, il, v, m->info.n_head);
        if (v > 0) n_kv = v;
        f->no_kv[il] = v == 0;
        f->conv_index[il] = v == 0 ? f->n_conv++ : -1;
    }
    if (n_kv == 0) n_kv = m->info.n_head; /* no attention layer: the KV sizes are unused */
    m->info.n_head_kv = (int32_t)n_kv;
    m->kv_dim = m->info.n_head_kv * m->info.head_dim;
    return TR_OK;
}

static tr_status bind_conv_layer(tr_model *m, lfm2_model *f, int il) {
    const int64_t dim = m->info.n_embd;
    shortconv_weights *W = &f->sc[il];
    char name[96];
    tr_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if ((st = bind_vector(m, NAME("attn_norm.weight"), dim, true, &m->layers[il].attn_norm)) ||
        (st = bind_matrix(m, NAME("shortconv.in_proj.weight"), dim, 3 * dim, true, &W->in_proj)) ||
        (st = bind_matrix(m, NAME("shortconv.out_proj.weight"), dim, dim, true, &W->out_proj)) ||
        (st = bind_decoder_ffn(m, il)))
        return st;
    const tr_gguf_tensor *t; /* the kernel: 2-D [l_cache, n_embd], read like a vector of all its values */
    if ((st = find_tensor(m, NAME("shortconv.conv.weight"), true, &t)) != TR_OK) return st;
    if (t->n_dims != 2 || t->ne[0] != f->l_cache || t->ne[1] != dim)
        return tr_fail(TR_ERR_FORMAT, "tensor '%s' has shape [%" PRId64 ", %" PRId64 "] (%d-D), expected [%d, %" PRId64
                       "]", name, t->ne[0], t->ne[1], t->n_dims, f->l_cache, dim);
#undef NAME
    float *conv;
    if ((st = own_f32_copy(m, name, t, (int64_t)f->l_cache * dim, &conv)) != TR_OK) return st;
    W->conv = conv;
    return TR_OK;
}

static tr_status load(tr_model *m) {
    char key[96];
    int64_t v, window = 0;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m->arch_name);
    if (tr_gguf_find_kv(m->gguf, key) < 0) return tr_fail(TR_ERR_FORMAT, "missing metadata %s", key);
    snprintf(key, sizeof key, "%s.shortconv.l_cache", m->arch_name);
    if (!tr_gguf_get_int(m->gguf, key, &v)) return tr_fail(TR_ERR_FORMAT, "missing metadata %s", key);
    if (v < 2 || v > 64) return tr_fail(TR_ERR_FORMAT, "metadata %s = %" PRId64 " (2..64 supported)", key, v);
    snprintf(key, sizeof key, "%s.attention.sliding_window", m->arch_name);
    if (tr_gguf_find_kv(m->gguf, key) >= 0 &&
        (!tr_gguf_get_int(m->gguf, key, &window) || window < 0 || window > (1 << 24)))
        return tr_fail(TR_ERR_FORMAT, "metadata %s must be an integer 0..%d", key, 1 << 24);
    if (m->q_dim != m->info.n_embd)
        return tr_fail(TR_ERR_FORMAT, "head_count × head size %d differs from embedding_length %d", m->q_dim,
                       m->info.n_embd);
    lfm2_model *f = calloc(1, sizeof *f);
    if (!f) return tr_fail(TR_ERR_NOMEM, "out of memory");
    m->family = f;
    f->l_cache = (int32_t)v;
    const int32_t n_layer = m->info.n_layer;
    f->conv_index = malloc((size_t)n_layer * sizeof *f->conv_index);
    f->no_kv = calloc((size_t)n_layer, sizeof *f->no_kv);
    f->sc = calloc((size_t)n_layer, sizeof *f->sc);
    if (!f->conv_index || !f->no_kv || !f->sc) return tr_fail(TR_ERR_NOMEM, "out of memory");
    tr_status st = read_layer_kinds(m, f);
    for (int il = 0; il < n_layer && st == TR_OK; il++) {
        if (f->conv_index[il] >= 0) {
            st = bind_conv_layer(m, f, il);
        } else {
            st = bind_decoder_layer(m, il, (decoder_parts){.qk_norm = true});
            m->layers[il].window = (int32_t)window;
        }
    }
    m->no_kv = f->no_kv;
    return st;
}

static void unload(tr_model *m) {
    lfm2_model *f = m->family;
    if (!f) return;
    free(f->conv_index);
    free(f->no_kv);
    free(f->sc);
    free(f);
    m->family = NULL;
    m->no_kv = NULL;
}

static size_t repack_list(tr_model *m, weight_matrix **todo) {
    lfm2_model *f = m->family;
    size_t n = 0;
    for (int il = 0; il < m->info.n_layer; il++) {
        if (f->conv_index[il] < 0) continue;
        if (weight_repack_wanted(&f->sc[il].in_proj)) todo[n++] = &f->sc[il].in_proj;
        if (weight_repack_wanted(&f->sc[il].out_proj)) todo[n++] = &f->sc[il].out_proj;
    }
    return n;
}

/* ---------------------------------------------------------------- state and buffers */

static size_t window_floats(const tr_model *m) { return (size_t)m->info.n_embd * (size_t)(F(m)->l_cache - 1); }

static size_t state_floats(const tr_model *m) { return (size_t)F(m)->n_conv * window_floats(m); }

static tr_status buffers_init(tr_context *ctx, int32_t cap) {
    lfm2_buffers *B = calloc(1, sizeof *B);
    if (!B) return tr_fail(TR_ERR_NOMEM, "out of memory");
    ctx->family_buf = B;
    const size_t dim = (size_t)ctx->model->info.n_embd;
    B->bcx = malloc((size_t)cap * 3 * dim * sizeof(float));
    B->y = malloc((size_t)cap * dim * sizeof(float));
    if (!B->bcx || !B->y) return tr_fail(TR_ERR_NOMEM, "out of memory for the lfm2 buffers (batch %d)", cap);
    return TR_OK;
}

static void buffers_free(tr_context *ctx) {
    lfm2_buffers *B = ctx->family_buf;
    if (B) {
        free(B->bcx);
        free(B->y);
        free(B);
    }
    ctx->family_buf = NULL;
}

/* ---------------------------------------------------------------- the layers */

/* The short-convolution mixer: A->xb (normed) in, A->xb out. */
static tr_status shortconv(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp) {
    const tr_model *m = ctx->model;
    const lfm2_model *f = F(m);
    const shortconv_weights *W = &f->sc[il];
    lfm2_buffers *B = ctx->family_buf;
    const int32_t dim = m->info.n_embd;
    const int64_t ld = 3 * (int64_t)dim;
    tr_status st = matmul(ctx->pool, &W->in_proj, ctx->act.xb, n, B->bcx, ld, &ctx->scratch);
    if (st != TR_OK) return st;
    for (int32_t t = 0; t < n; t++) { /* b·x, in b's place */
        float *b = B->bcx + t * ld;
        const float *x = b + 2 * dim;
        for (int32_t i = 0; i < dim; i++) b[i] *= x[i];
    }
    for (int32_t s = 0; s < n_sp; s++)
        causal_conv(ctx, W->conv, f->l_cache, dim, sp[s].state, (size_t)f->conv_index[il] * window_floats(m),
                    B->bcx + sp[s].row * ld, ld, sp[s].n, false);
    for (int32_t t = 0; t < n; t++) {
        const float *conv = B->bcx + t * ld, *c = conv + dim;
        float *y = B->y + (int64_t)t * dim;
        for (int32_t i = 0; i < dim; i++) y[i] = c[i] * conv[i];
    }
    return matmul(ctx->pool, &W->out_proj, B->y, n, ctx->act.xb, dim, &ctx->scratch);
}

static tr_status layer(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp) {
    return decoder_block(ctx, il, n, sp, n_sp, F(ctx->model)->conv_index[il] >= 0 ? shortconv : decoder_attention);
}

/* ---------------------------------------------------------------- synthetic shapes */

/* The convolution's taps and which layers attend. The real ones: LFM2-350M / LFM2-1.2B's HF configs (conv_L_cache 3,
 * attention at layers 2, 5, 8, 10, 12, 14 of 16, 8 KV heads, vocabulary 65536, rope_theta 1e6, norm_eps 1e-5,
 * block_ff_dim after llama.cpp's auto-adjust 4608 / 8192); two small ones for tests (an SLM and an LLM sharing a
 * vocabulary). */
typedef struct synth_sizes {
    int32_t l_cache;
    uint32_t attention;      /* bit il: layer il attends */
} synth_sizes;

static const synth_sizes real = {3, 1u << 2 | 1u << 5 | 1u << 8 | 1u << 10 | 1u << 12 | 1u << 14};
static const synth_sizes tiny = {3, 1u << 2 | 1u << 5}, small = {4, 1u << 1 | 1u << 4 | 1u << 6};
static const synth_shape shapes[] = {
    {"lfm2-350m", 1024, 16, 16, 8, 64, 4608, 65536, 128000, 1000000.0f, 1e-5f, true, false, true, false, 0, &real},
    {"lfm2-1.2b", 2048, 16, 32, 8, 64, 8192, 65536, 128000, 1000000.0f, 1e-5f, true, false, true, false, 0, &real},
    {"lfm2-tiny", 128, 6, 4, 2, 32, 256, 512, 512, 1000000.0f, 1e-5f, true, false, true, false, 0, &tiny},
    {"lfm2-small", 192, 8, 6, 2, 32, 384, 512, 512, 1000000.0f, 1e-5f, true, false, true, false, 0, &small},
};

static tr_status synth_hparams(tr_gguf_writer *w, const synth_shape *s) {
    const synth_sizes *z = s->extra;
    int32_t kv[32];
    for (int il = 0; il < s->n_layer && il < 32; il++) kv[il] = z->attention >> il & 1 ? s->n_head_kv : 0;
    tr_status st = synth_set_u32(w, "lfm2", "shortconv.l_cache", (uint32_t)z->l_cache, TR_OK);
    return st == TR_OK ? tr_gguf_writer_set_arr_i32(w, "lfm2.attention.head_count_kv", kv, (uint64_t)s->n_layer) : st;
}

static void synth_layer(synth_plan *pl, const synth_shape *s, int il) {
    const synth_sizes *z = s->extra;
    if (z->attention >> il & 1) {
        synth_decoder_layer(pl, s, il, false);
        return;
    }
    char name[96];
    synth_vector(pl, il, "attn_norm.weight", s->n_embd, FILL_NORM);
    synth_weight(pl, il, "shortconv.in_proj", s->n_embd, 3 * (int64_t)s->n_embd);
    snprintf(name, sizeof name, "blk.%d.shortconv.conv.weight", il);
    synth_add(pl, name, TR_TYPE_F32, z->l_cache, s->n_embd, FILL_WEIGHT);
    synth_weight(pl, il, "shortconv.out_proj", s->n_embd, s->n_embd);
    synth_vector(pl, il, "ffn_norm.weight", s->n_embd, FILL_NORM);
    synth_weight(pl, il, "ffn_gate", s->n_embd, s->n_ff);
    synth_weight(pl, il, "ffn_up", s->n_embd, s->n_ff);
    synth_weight(pl, il, "ffn_down", s->n_ff, s->n_embd);
}

const arch_ops arch_lfm2 = {
    .name = "lfm2",
    .id = TR_ARCH_LFM2,
    .rope_neox = true,
    .output_norm = "token_embd_norm.weight",
    .load = load,
    .unload = unload,
    .repack_list = repack_list,
    .state_floats = state_floats,
    .buffers_init = buffers_init,
    .buffers_free = buffers_free,
    .rope_rows = rope_rows_default,
    .layer = layer,
    .shapes = shapes,
    .n_shapes = sizeof shapes / sizeof shapes[0],
    .synth_hparams = synth_hparams,
    .synth_layer = synth_layer,
};
