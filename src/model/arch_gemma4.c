/* arch_gemma4.c — the gemma4 family (Gemma 4's dense text models: E2B, E4B, 31B), as llama.cpp of 2026-09 builds it
 * (src/models/gemma4.cpp):
 *   embeddings × sqrt(n_embd); per layer RMSNorm → Q (per-head RMSNorm, NEOX RoPE) and, on a layer with a KV
 *   cache, K (per-head RMSNorm, RoPE) and V (per-head RMSNorm without weight; K's projection when attn_v is
 *   absent) → attention with scale 1 → output → post-attention RMSNorm → residual → RMSNorm → GeGLU FFN →
 *   post-FFN RMSNorm → residual → per-layer input (below) → × layer_output_scale; output norm; tied output; final
 *   logit softcapping.
 *
 *  - Sliding and global layers (attention.sliding_window_pattern, one flag per layer) differ in head size
 *    (key_length_swa vs key_length), RoPE dimensions (rope.dimension_count_swa vs rope.dimension_count), base
 *    (rope.freq_base_swa at scale 1 vs rope.freq_base) and frequency factors (rope_freqs, global layers only:
 *    "proportional" RoPE, 1e30 on the pairs that do not rotate). The model is laid out with the global head size
 *    (its buffers the largest); the sliding layers get their own geometry (layer_weights.geometry), which the KV
 *    cache and attention honour. A sliding query at p sees p - window + 1 .. p.
 *  - The last attention.shared_kv_layers layers keep no KV cache: they attend over the cache of the last layer of
 *    their kind that has one (llama.cpp's layer reuse: n_kv - 2 for sliding, n_kv - 1 for global).
 *  - Per-layer inputs (embedding_length_per_layer_input = P > 0): per token, per_layer_token_embd's row × sqrt(P)
 *    plus RMSNorm(per_layer_model_proj · embedding / sqrt(n_embd)), times 1/sqrt(2), one P-vector per layer; layer
 *    il adds proj · (gelu(inp_gate · x) ⊙ its vector), RMSNorm'd by post_norm, to x.
 *  - feed_forward_length may be one width per layer (double-wide MLP on the KV-shared layers).
 * MoE layers (26B-A4B: ffn_gate_inp) and fused attn_qkv are refused by name.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/arch.h"

typedef struct gemma4_layer {
    weight_matrix inp_gate;   /* [P][n_embd] */
    weight_matrix proj;       /* [n_embd][P] */
    const float *post_norm;   /* [n_embd] */
    const float *out_scale;   /* [1] or NULL */
    int32_t kv_source;        /* the layer whose KV cache it attends over (itself unless shared) */
    bool swa;
} gemma4_layer;

typedef struct gemma4_model {
    int32_t n_pl;             /* P: embedding_length_per_layer_input (0: no per-layer inputs) */
    tr_model swa;             /* the sliding layers' geometry: their head size, RoPE dimensions and base */
    bool *no_kv;              /* [n_layer] the KV-shared layers */
    gemma4_layer *L;          /* [n_layer] */
    weight_matrix pl_tok_embd;    /* [n_vocab][n_layer P] */
    weight_matrix pl_model_proj;  /* [n_layer P][n_embd] */
    const float *pl_proj_norm;    /* [P] */
    float *ones;              /* [head_dim]: V's RMSNorm has no weight */
} gemma4_model;

typedef struct gemma4_buffers {
    int32_t cap;
    float *ple;               /* [n_layer][cap][P] per-layer inputs */
    float *proj;              /* [cap][n_layer P] */
    float *gate;              /* [cap][P] */
} gemma4_buffers;

static const gemma4_model *F(const tr_model *m) { return m->family; }

/* ---------------------------------------------------------------- hyperparameters */

static bool key_of(const tr_model *m, const char *suffix, char *key, size_t cap) {
    snprintf(key, cap, "%s.%s", m->arch_name, suffix);
    return tr_gguf_find_kv(m->gguf, key) >= 0;
}

/* A required (or, with `fallback` >= 0, optional) integer key in lo..hi. */
static tr_status read_int(const tr_model *m, const char *suffix, int64_t fallback, int64_t lo, int64_t hi,
                          int32_t *out) {
    char key[128];
    int64_t v = fallback;
    const bool present = key_of(m, suffix, key, sizeof key);
    if (!present && fallback < 0) return tr_fail(TR_ERR_FORMAT, "missing metadata %s", key);
    if (present && !tr_gguf_get_int(m->gguf, key, &v))
        return tr_fail(TR_ERR_FORMAT, "metadata %s is not an integer", key);
    if (v < lo || v > hi)
        return tr_fail(TR_ERR_FORMAT, "metadata %s = %" PRId64 " is outside %" PRId64 "..%" PRId64, key, v, lo, hi);
    *out = (int32_t)v;
    return TR_OK;
}

static tr_status read_float(const tr_model *m, const char *suffix, double fallback, double lo, float *out) {
    char key[128];
    double v = fallback;
    if (key_of(m, suffix, key, sizeof key) && (!tr_gguf_get_float(m->gguf, key, &v) || !(v >= lo && v < 1e30)))
        return tr_fail(TR_ERR_FORMAT, "metadata %s must be a number >= %g", key, lo);
    *out = (float)v;
    return TR_OK;
}

/* One integer per layer under `suffix` (an array of n_layer entries), or NULL in *kv when the key is a single
 * integer or absent. */
static tr_status layer_array(const tr_model *m, const char *suffix, bool required, int64_t *kv_out) {
    char key[128];
    const bool present = key_of(m, suffix, key, sizeof key);
    const int64_t kv = present ? tr_gguf_find_kv(m->gguf, key) : -1;
    *kv_out = -1;
    if (!present || tr_gguf_kv_type(m->gguf, kv) != TR_GGUF_ARRAY)
        return required ? tr_fail(TR_ERR_FORMAT, "metadata %s must be an array of one flag per layer", key) : TR_OK;
    if (tr_gguf_kv_array_len(m->gguf, kv) != (uint64_t)m->info.n_layer)
        return tr_fail(TR_ERR_FORMAT, "metadata %s has %" PRIu64 " entries for %d layers", key,
                       tr_gguf_kv_array_len(m->gguf, kv), m->info.n_layer);
    for (int il = 0; il < m->info.n_layer; il++) {
        int64_t v;
        if (!tr_gguf_arr_int(m->gguf, kv, (uint64_t)il, &v))
            return tr_fail(TR_ERR_FORMAT, "metadata %s[%d] is not an integer", key, il);
    }
    *kv_out = kv;
    return TR_OK;
}

static int64_t arr_at(const tr_model *m, int64_t kv, int il) {
    int64_t v = 0;
    tr_gguf_arr_int(m->gguf, kv, (uint64_t)il, &v);
    return v;
}

/* Head sizes, RoPE, window, layer kinds and KV sharing. */
static tr_status read_hparams(tr_model *m, gemma4_model *f) {
    tr_model_info *in = &m->info;
    const int32_t n_layer = in->n_layer;
    char key[128];
    int32_t hd_swa, hd_swa_v, rope_swa, window, n_shared;
    int64_t pattern, ff, head_kv;
    tr_status st;
    if (!key_of(m, "attention.layer_norm_rms_epsilon", key, sizeof key))
        return tr_fail(TR_ERR_FORMAT, "missing metadata %s", key);
    if ((st = read_int(m, "attention.key_length_swa", -1, 8, in->head_dim, &hd_swa)) ||
        (st = read_int(m, "attention.value_length_swa", -1, 8, in->head_dim, &hd_swa_v)) ||
        (st = read_int(m, "rope.dimension_count_swa", hd_swa, 2, hd_swa, &rope_swa)) ||
        (st = read_int(m, "attention.sliding_window", -1, 0, 1 << 24, &window)) ||
        (st = read_int(m, "embedding_length_per_layer_input", -1, 0, 1 << 14, &f->n_pl)) ||
        (st = read_int(m, "attention.shared_kv_layers", 0, 0, n_layer, &n_shared)) ||
        (st = read_float(m, "final_logit_softcapping", 0.0, 0.0, &m->logit_softcap)) ||
        (st = layer_array(m, "attention.sliding_window_pattern", true, &pattern)) ||
        (st = layer_array(m, "feed_forward_length", false, &ff)) ||
        (st = layer_array(m, "attention.head_count_kv", false, &head_kv)))
        return st;
    if (hd_swa_v != hd_swa)
        return tr_fail(TR_ERR_FORMAT, "%s.attention.value_length_swa %d differs from key_length_swa %d", m->arch_name,
                       hd_swa_v, hd_swa);
    if (hd_swa % 8 || rope_swa % 2 || rope_swa > m->rope_dim)
        return tr_fail(TR_ERR_UNSUPPORTED, "sliding head size %d / RoPE dimensions %d (a multiple of 8, and RoPE "
                       "dimensions even and at most the global layers' %d, are supported)", hd_swa, rope_swa,
                       m->rope_dim);
    for (int il = 0; head_kv >= 0 && il < n_layer; il++) { /* model_load.c reads a single integer only */
        const int64_t v = arr_at(m, head_kv, il);
        if (v < 1 || in->n_head % v || v != arr_at(m, head_kv, 0))
            return tr_fail(TR_ERR_UNSUPPORTED, "%s.attention.head_count_kv[%d] = %" PRId64 " (one divisor of "
                           "head_count %d for every layer is supported)", m->arch_name, il, v, in->n_head);
        in->n_head_kv = (int32_t)v;
    }
    m->kv_dim = in->n_head_kv * in->head_dim;
    float theta_swa;
    if ((st = read_float(m, "rope.freq_base_swa", 10000.0, 1e-30, &theta_swa)) != TR_OK) return st;

    const int32_t n_kv = n_layer - n_shared;
    if (n_shared > 0 && n_kv < 2)
        return tr_fail(TR_ERR_FORMAT, "%s.attention.shared_kv_layers = %d leaves %d layers with a KV cache (2 at "
                       "least)", m->arch_name, n_shared, n_kv);
    for (int il = 0; il < n_layer; il++) {
        gemma4_layer *L = &f->L[il];
        L->swa = arr_at(m, pattern, il) != 0;
        m->layers[il].window = L->swa ? window : 0;
        m->layers[il].n_ff = ff >= 0 ? (int32_t)arr_at(m, ff, il) : 0;
        f->no_kv[il] = il >= n_kv;
        L->kv_source = il < n_kv ? il : n_kv - (L->swa ? 2 : 1);
        if (f->L[L->kv_source].swa != L->swa)
            return tr_fail(TR_ERR_FORMAT, "layer %d (%s) would share layer %d's KV cache, which is %s", il,
                           L->swa ? "sliding" : "global", L->kv_source, L->swa ? "global" : "sliding");
        m->rope_swa |= L->swa;
    }
    m->embd_scale = sqrtf((float)in->n_embd);
    m->q_scale = 1.0f;
    m->kq_scale = 1.0f; /* llama.cpp's f_attention_scale = 1 */
    m->gelu = true;
    m->no_kv = f->no_kv;
    /* The sliding layers' geometry: a copy of the model with their head size and RoPE (no factors, scale 1). */
    f->swa = *m;
    f->swa.family = NULL;
    f->swa.info.head_dim = hd_swa;
    f->swa.q_dim = in->n_head * hd_swa;
    f->swa.kv_dim = in->n_head_kv * hd_swa;
    f->swa.rope_dim = rope_swa;
    f->swa.rope_freqs = NULL;
    f->swa.rope_freq_scale = 1.0f;
    f->swa.info.rope_theta = theta_swa;
    kv_cache probe;
    return kv_cache_layout(&f->swa, m->kv_type, 1, &probe);
}

/* ---------------------------------------------------------------- tensors */

static tr_status bind_layer(tr_model *m, gemma4_model *f, int il) {
    layer_weights *L = &m->layers[il];
    gemma4_layer *G = &f->L[il];
    const tr_model *g = G->swa ? &f->swa : m;
    const int64_t dim = m->info.n_embd, hd = g->info.head_dim, q_dim = g->q_dim, kv_dim = g->kv_dim;
    const bool has_kv = !f->no_kv[il];
    char name[96];
    const tr_gguf_tensor *t;
    tr_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if ((st = find_tensor(m, NAME("attn_qkv.weight"), false, &t)) != TR_OK) return st;
    if (t) return tr_fail(TR_ERR_UNSUPPORTED, "tensor '%s' (fused Q/K/V) is not supported", name);
    if ((st = find_tensor(m, NAME("ffn_gate_inp.weight"), false, &t)) != TR_OK) return st;
    if (t) return tr_fail(TR_ERR_UNSUPPORTED, "tensor '%s': mixture-of-experts layers are not supported", name);
    if ((st = bind_vector(m, NAME("attn_norm.weight"), dim, true, &L->attn_norm)) ||
        (st = bind_matrix(m, NAME("attn_q.weight"), dim, q_dim, true, &L->wq)) ||
        (has_kv && (st = bind_matrix(m, NAME("attn_k.weight"), dim, kv_dim, true, &L->wk))) ||
        (has_kv && (st = bind_matrix(m, NAME("attn_v.weight"), dim, kv_dim, false, &L->wv))) ||
        (st = bind_matrix(m, NAME("attn_output.weight"), q_dim, dim, true, &L->wo)) ||
        (st = bind_vector(m, NAME("attn_q_norm.weight"), hd, true, &L->q_norm)) ||
        (has_kv && (st = bind_vector(m, NAME("attn_k_norm.weight"), hd, true, &L->k_norm))) ||
        (st = bind_vector(m, NAME("post_attention_norm.weight"), dim, true, &L->attn_post_norm)) ||
        (st = bind_vector(m, NAME("layer_output_scale.weight"), 1, false, &G->out_scale)) ||
        (st = bind_decoder_ffn(m, il)) ||
        (st = bind_vector(m, NAME("post_ffw_norm.weight"), dim, true, &L->ffn_post_norm)))
        return st;
    if (f->n_pl > 0 &&
        ((st = bind_matrix(m, NAME("inp_gate.weight"), dim, f->n_pl, true, &G->inp_gate)) ||
         (st = bind_matrix(m, NAME("proj.weight"), f->n_pl, dim, true, &G->proj)) ||
         (st = bind_vector(m, NAME("post_norm.weight"), dim, true, &G->post_norm))))
        return st;
#undef NAME
    L->geometry = G->swa ? &f->swa : NULL;
    return TR_OK;
}

static tr_status bind_globals(tr_model *m, gemma4_model *f) {
    const int64_t dim = m->info.n_embd, n_all = (int64_t)f->n_pl * m->info.n_layer;
    bool any_global = false;
    for (int il = 0; il < m->info.n_layer; il++) any_global |= !f->L[il].swa;
    tr_status st = bind_vector(m, "rope_freqs.weight", m->info.head_dim / 2, any_global, &m->rope_freqs);
    if (st != TR_OK || f->n_pl == 0) return st;
    if ((st = bind_matrix(m, "per_layer_token_embd.weight", n_all, m->info.n_vocab, true, &f->pl_tok_embd)) ||
        (st = bind_matrix(m, "per_layer_model_proj.weight", dim, n_all, true, &f->pl_model_proj)) ||
        (st = bind_vector(m, "per_layer_proj_norm.weight", f->n_pl, true, &f->pl_proj_norm)))
        return st;
    lookup_table(m, &f->pl_tok_embd);
    return TR_OK;
}

static void unload(tr_model *m) {
    gemma4_model *f = m->family;
    if (!f) return;
    free(f->no_kv);
    free(f->L);
    free(f->ones);
    free(f);
    m->family = NULL;
    m->no_kv = NULL;
}

static tr_status load(tr_model *m) {
    gemma4_model *f = calloc(1, sizeof *f);
    if (!f) return tr_fail(TR_ERR_NOMEM, "out of memory");
    m->family = f;
    const int32_t n_layer = m->info.n_layer;
    f->no_kv = calloc((size_t)n_layer, sizeof *f->no_kv);
    f->L = calloc((size_t)n_layer, sizeof *f->L);
    f->ones = malloc((size_t)m->info.head_dim * sizeof *f->ones);
    if (!f->no_kv || !f->L || !f->ones) return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < m->info.head_dim; i++) f->ones[i] = 1.0f;
    tr_status st = read_hparams(m, f);
    if (st == TR_OK) st = bind_globals(m, f);
    for (int il = 0; il < n_layer && st == TR_OK; il++) st = bind_layer(m, f, il);
    if (st == TR_OK) f->swa.rope_neox = m->rope_neox;
    return st;
}

static size_t repack_list(tr_model *m, weight_matrix **todo) {
    gemma4_model *f = m->family;
    size_t n = 0;
    if (f->n_pl == 0) return 0;
    if (weight_repack_wanted(&f->pl_model_proj)) todo[n++] = &f->pl_model_proj;
    for (int il = 0; il < m->info.n_layer; il++) {
        if (weight_repack_wanted(&f->L[il].inp_gate)) todo[n++] = &f->L[il].inp_gate;
        if (weight_repack_wanted(&f->L[il].proj)) todo[n++] = &f->L[il].proj;
    }
    return n;
}

/* ---------------------------------------------------------------- buffers and per-layer inputs */

static void buffers_free(tr_context *ctx) {
    gemma4_buffers *B = ctx->family_buf;
    if (B) {
        free(B->ple);
        free(B->proj);
        free(B->gate);
        free(B);
    }
    ctx->family_buf = NULL;
}

static tr_status buffers_init(tr_context *ctx, int32_t cap) {
    const tr_model *m = ctx->model;
    const size_t P = (size_t)F(m)->n_pl, n_layer = (size_t)m->info.n_layer;
    if (P == 0) return TR_OK;
    gemma4_buffers *B = calloc(1, sizeof *B);
    if (!B) return tr_fail(TR_ERR_NOMEM, "out of memory");
    ctx->family_buf = B;
    B->cap = cap;
    B->ple = malloc(n_layer * (size_t)cap * P * sizeof(float));
    B->proj = malloc((size_t)cap * n_layer * P * sizeof(float));
    B->gate = malloc((size_t)cap * P * sizeof(float));
    if (!B->ple || !B->proj || !B->gate) return tr_fail(TR_ERR_NOMEM, "out of memory for per-layer inputs");
    return TR_OK;
}

/* The token part of rows [row, row + n)'s per-layer inputs: per_layer_token_embd's rows × sqrt(P). */
static tr_status embed_rows(tr_context *ctx, const int32_t *tokens, int32_t row, int32_t n) {
    const tr_model *m = ctx->model;
    const gemma4_model *f = F(m);
    gemma4_buffers *B = ctx->family_buf;
    if (f->n_pl == 0) return TR_OK;
    const int32_t P = f->n_pl;
    const float scale = sqrtf((float)P);
    for (int32_t t = 0; t < n; t++) {
        float *all = B->proj + (int64_t)(row + t) * m->info.n_layer * P; /* scratch until layer 0 */
        tr_status st = weight_dequantize_row(&f->pl_tok_embd, tokens[t], all);
        if (st != TR_OK) return st;
        for (int il = 0; il < m->info.n_layer; il++) {
            float *dst = B->ple + ((int64_t)il * B->cap + row + t) * P;
            for (int32_t i = 0; i < P; i++) dst[i] = all[(int64_t)il * P + i] * scale;
        }
    }
    return TR_OK;
}

/* Row t's per-layer inputs: (RMSNorm(projection / sqrt(n_embd)) + token part) / sqrt(2). */
static void ple_row(tr_context *ctx, int il, const seq_span *sp, int32_t t, void *arg) {
    (void)il, (void)sp, (void)arg;
    const tr_model *m = ctx->model;
    const gemma4_model *f = F(m);
    gemma4_buffers *B = ctx->family_buf;
    const int32_t P = f->n_pl;
    const float proj_scale = 1.0f / sqrtf((float)m->info.n_embd), input_scale = 1.0f / sqrtf(2.0f);
    for (int l = 0; l < m->info.n_layer; l++) {
        float *p = B->proj + ((int64_t)t * m->info.n_layer + l) * P, *dst = B->ple + ((int64_t)l * B->cap + t) * P;
        for (int32_t i = 0; i < P; i++) p[i] *= proj_scale;
        rms_norm(p, p, f->pl_proj_norm, P, m->info.norm_eps);
        for (int32_t i = 0; i < P; i++) dst[i] = (p[i] + dst[i]) * input_scale;
    }
}

/* ---------------------------------------------------------------- the layer */

static void attn_norm_row(tr_context *ctx, int il, const seq_span *sp, int32_t t, void *arg) {
    (void)sp, (void)arg;
    const tr_model *m = ctx->model;
    const int64_t dim = m->info.n_embd;
    rms_norm(ctx->act.xb + t * dim, ctx->act.x + t * dim, m->layers[il].attn_norm, dim, m->info.norm_eps);
}

static void heads_norm(float *rows, const float *w, int32_t n_heads, int32_t hd, float eps) {
    for (int32_t h = 0; h < n_heads; h++) rms_norm(rows + (int64_t)h * hd, rows + (int64_t)h * hd, w, hd, eps);
}

/* Row t's Q (norm, RoPE) and, on a layer with a cache, K (norm, RoPE) and V (norm) into its sequence's cache. */
static void qkv_row(tr_context *ctx, int il, const seq_span *sp, int32_t t, void *arg) {
    (void)arg;
    const tr_model *m = ctx->model, *g = layer_geometry(m, il);
    const gemma4_model *f = F(m);
    const layer_weights *L = &m->layers[il];
    activations *A = &ctx->act;
    const int32_t hd = g->info.head_dim, half = g->rope_dim / 2;
    const float eps = m->info.norm_eps;
    const int64_t rope_off = L->window ? (int64_t)A->cap * (m->rope_dim / 2) + (int64_t)t * half
                                       : (int64_t)t * (m->rope_dim / 2);
    float *q = A->q + (int64_t)t * g->q_dim;
    heads_norm(q, L->q_norm, m->info.n_head, hd, eps);
    rope_apply(g, q, m->info.n_head, A->rope_cos + rope_off, A->rope_sin + rope_off);
    if (f->no_kv[il]) return;
    float *k = A->k + (int64_t)t * g->kv_dim, *v = A->v + (int64_t)t * g->kv_dim;
    if (!L->wv.data) memcpy(v, k, (size_t)g->kv_dim * sizeof *v); /* K's projection serves as V */
    heads_norm(k, L->k_norm, m->info.n_head_kv, hd, eps);
    heads_norm(v, f->ones, m->info.n_head_kv, hd, eps);
    rope_apply(g, k, m->info.n_head_kv, A->rope_cos + rope_off, A->rope_sin + rope_off);
    kv_cache view;
    kv_layer_view(m, sp->kv, il, &view);
    kv_store(&view, il, sp->n_past + t - sp->row, k, v, m->info.n_head_kv, hd);
}

static tr_status attend(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp) {
    const tr_model *m = ctx->model, *g = layer_geometry(m, il);
    const layer_weights *L = &m->layers[il];
    activations *A = &ctx->act;
    tr_status st;
    if (F(m)->no_kv[il]) {
        st = matmul(ctx->pool, &L->wq, A->xb, n, A->q, g->q_dim, &ctx->scratch);
    } else {
        const weight_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {A->q, A->k, A->v};
        const int64_t qkv_ld[3] = {g->q_dim, g->kv_dim, g->kv_dim};
        st = matmul_multi(ctx->pool, qkv, L->wv.data ? 3 : 2, A->xb, n, qkv_out, qkv_ld, &ctx->scratch);
    }
    if (st != TR_OK) return st;
    run_rows(ctx, il, sp, n_sp, n, qkv_row, NULL, (int64_t)g->q_dim * 4);
    const int source = F(m)->L[il].kv_source;
    const kv_cache saved_kv = ctx->kv;
    const int32_t saved_past = ctx->n_past;
    for (int32_t s = 0; s < n_sp && st == TR_OK; s++) {
        ctx->kv = *sp[s].kv;
        ctx->n_past = sp[s].n_past;
        st = attention(ctx, source, A->q + (int64_t)sp[s].row * g->q_dim, sp[s].n, A->att + (int64_t)sp[s].row * g->q_dim);
    }
    ctx->kv = saved_kv;
    ctx->n_past = saved_past;
    if (st != TR_OK) return st;
    return matmul(ctx->pool, &L->wo, A->att, n, A->xb, m->info.n_embd, &ctx->scratch);
}

/* A residual step of row t: xb through its post-norm, x += xb; after attention, xb = the FFN's RMSNorm of x; after the
 * layer's last step, x × layer_output_scale. */
typedef struct resid_arg {
    int which; /* 0: after attention, 1: after the FFN, 2: after the per-layer input */
} resid_arg;

static void resid_row(tr_context *ctx, int il, const seq_span *sp, int32_t t, void *arg) {
    (void)sp;
    const tr_model *m = ctx->model;
    const layer_weights *L = &m->layers[il];
    const gemma4_layer *G = &F(m)->L[il];
    const int which = ((const resid_arg *)arg)->which;
    const int64_t dim = m->info.n_embd;
    const float eps = m->info.norm_eps;
    float *x = ctx->act.x + t * dim, *xb = ctx->act.xb + t * dim;
    const float *post = which == 0 ? L->attn_post_norm : which == 1 ? L->ffn_post_norm : G->post_norm;
    rms_norm(xb, xb, post, dim, eps);
    add_vec(x, xb, dim);
    if (which == 0) rms_norm(xb, x, L->ffn_norm, dim, eps);
    const bool last = which == 2 || (which == 1 && F(m)->n_pl == 0);
    if (last && G->out_scale)
        for (int64_t i = 0; i < dim; i++) x[i] *= G->out_scale[0];
}

static tr_status layer(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp) {
    const tr_model *m = ctx->model;
    const gemma4_model *f = F(m);
    gemma4_buffers *B = ctx->family_buf;
    const int64_t row_work = (int64_t)m->info.n_embd * 4;
    tr_status st;
    if (il == 0 && f->n_pl > 0) { /* the per-layer inputs of the pass, from its embeddings */
        if ((st = matmul(ctx->pool, &f->pl_model_proj, ctx->act.x, n, B->proj, (int64_t)m->info.n_layer * f->n_pl,
                         &ctx->scratch)) != TR_OK)
            return st;
        run_rows(ctx, il, sp, n_sp, n, ple_row, NULL, (int64_t)m->info.n_layer * f->n_pl * 4);
    }
    run_rows(ctx, il, sp, n_sp, n, attn_norm_row, NULL, row_work);
    if ((st = attend(ctx, il, n, sp, n_sp)) != TR_OK) return st;
    resid_arg after_attn = {0}, after_ffn = {1}, after_ple = {2};
    run_rows(ctx, il, sp, n_sp, n, resid_row, &after_attn, row_work);
    if ((st = decoder_ffn(ctx, il, n)) != TR_OK) return st;
    run_rows(ctx, il, sp, n_sp, n, resid_row, &after_ffn, row_work);
    if (f->n_pl == 0) return TR_OK;
    const gemma4_layer *G = &f->L[il];
    if ((st = matmul(ctx->pool, &G->inp_gate, ctx->act.x, n, B->gate, f->n_pl, &ctx->scratch)) != TR_OK) return st;
    gelu_mul_parallel(ctx, B->gate, B->ple + (int64_t)il * B->cap * f->n_pl, (int64_t)n * f->n_pl);
    if ((st = matmul(ctx->pool, &G->proj, B->gate, n, ctx->act.xb, m->info.n_embd, &ctx->scratch)) != TR_OK)
        return st;
    run_rows(ctx, il, sp, n_sp, n, resid_row, &after_ple, row_work);
    return TR_OK;
}

/* The global table (rope_freqs' factors), and after cap rows of it the sliding layers' (their base and
 * dimensions, scale 1). */
static void rope_rows(const tr_model *m, activations *A, int32_t row, int32_t n, int32_t pos0) {
    rope_rows_default(m, A, row, n, pos0);
    const tr_model *swa = &F(m)->swa;
    const int64_t off = (int64_t)A->cap * (m->rope_dim / 2) + (int64_t)row * (swa->rope_dim / 2);
    if (m->rope_swa) rope_tables(swa, pos0, n, A->rope_cos + off, A->rope_sin + off);
}

/* ---------------------------------------------------------------- synthetic shapes */

/* E2B by google/gemma-4-E2B-it's config.json text_config (as public config-parser test fixtures quote it, checked
 * 2026-11-27: hidden_size 1536, num_hidden_layers 35, num_attention_heads 8, num_key_value_heads 1, head_dim 256,
 * global_head_dim 512, num_global_key_value_heads null, attention_k_eq_v false, layer_types every fifth
 * full_attention, sliding_window 512, hidden_size_per_layer_input 256, vocab_size(_per_layer_input) 262144,
 * num_kv_shared_layers 20, use_double_wide_mlp true, intermediate_size 6144, max_position_embeddings 131072,
 * rms_norm_eps 1e-6, final_logit_softcapping 30, tie_word_embeddings true, rope_parameters full_attention
 * proportional theta 1e6 partial_rotary_factor 0.25, sliding_attention default theta 1e4) written as llama.cpp
 * de3ff81's converter writes it (conversion/gemma.py, Gemma4Model.set_gguf_parameters: rope.dimension_count 512
 * with rope_freqs' 1e30 factors on the unrotated pairs, rope.dimension_count_swa 256, sliding_window_pattern a
 * bool array, feed_forward_length per layer, 12288 on the 20 shared ones; its models/ggml-vocab-gemma-4.gguf has
 * 262,144 tokens, so token_embd keeps every row); a tiny one for
 * tests with both kinds of KV sharing and a window the 24-token reference prompt crosses, and a small one (its
 * LLM in routing tests: the same 512-token vocabulary). */
typedef struct gemma4_sizes {
    int32_t head_dim_swa, n_pl, n_shared, window;
    const char *kinds;       /* per layer, 's' sliding, 'g' global; NULL: every fifth layer global */
    bool double_wide;
} gemma4_sizes;

static const gemma4_sizes e2b = {256, 256, 20, 512, NULL, true}, tiny = {64, 64, 2, 10, "sgsgsg", true},
                          small = {64, 64, 3, 16, "ssgsgssg", true};
static const synth_shape shapes[] = {
    {"gemma4-e2b", 1536, 35, 8, 1, 512, 6144, 262144, 131072, 1000000.0f, 1e-6f, true, false, true, false, 0, &e2b},
    {"gemma4-tiny", 256, 6, 4, 2, 128, 512, 512, 512, 1000000.0f, 1e-6f, true, false, true, false, 0, &tiny},
    {"gemma4-small", 384, 8, 6, 2, 128, 768, 512, 512, 1000000.0f, 1e-6f, true, false, true, false, 0, &small},
};

static bool synth_is_swa(const synth_shape *s, int il) {
    const gemma4_sizes *z = s->extra;
    return z->kinds ? z->kinds[il] == 's' : il % 5 != 4;
}

static int32_t synth_n_ff(const synth_shape *s, int il) {
    const gemma4_sizes *z = s->extra;
    return z->double_wide && il >= s->n_layer - z->n_shared ? 2 * s->n_ff : s->n_ff;
}

static tr_status synth_hparams(tr_gguf_writer *w, const synth_shape *s) {
    const gemma4_sizes *z = s->extra;
    bool swa[64];
    int32_t ff[64];
    for (int il = 0; il < s->n_layer && il < 64; il++) swa[il] = synth_is_swa(s, il), ff[il] = synth_n_ff(s, il);
    tr_status st = synth_set_u32(w, "gemma4", "attention.key_length_swa", (uint32_t)z->head_dim_swa, TR_OK);
    st = synth_set_u32(w, "gemma4", "attention.value_length_swa", (uint32_t)z->head_dim_swa, st);
    st = synth_set_u32(w, "gemma4", "rope.dimension_count_swa", (uint32_t)z->head_dim_swa, st);
    st = synth_set_f32(w, "gemma4", "rope.freq_base_swa", 10000.0f, st);
    st = synth_set_u32(w, "gemma4", "embedding_length_per_layer_input", (uint32_t)z->n_pl, st);
    st = synth_set_u32(w, "gemma4", "attention.shared_kv_layers", (uint32_t)z->n_shared, st);
    st = synth_set_u32(w, "gemma4", "attention.sliding_window", (uint32_t)z->window, st);
    st = synth_set_f32(w, "gemma4", "final_logit_softcapping", 30.0f, st);
    if (st == TR_OK)
        st = tr_gguf_writer_set_arr_bool(w, "gemma4.attention.sliding_window_pattern", swa, (uint64_t)s->n_layer);
    if (st == TR_OK && z->double_wide)
        st = tr_gguf_writer_set_arr_i32(w, "gemma4.feed_forward_length", ff, (uint64_t)s->n_layer);
    return st;
}

static void synth_layer(synth_plan *pl, const synth_shape *s, int il) {
    const gemma4_sizes *z = s->extra;
    const bool swa = synth_is_swa(s, il), has_kv = il < s->n_layer - z->n_shared;
    const int64_t hd = swa ? z->head_dim_swa : s->head_dim, dim = s->n_embd, n_ff = synth_n_ff(s, il);
    if (il == 0) {
        const int64_t n_all = (int64_t)z->n_pl * s->n_layer;
        synth_add(pl, "rope_freqs.weight", TR_TYPE_F32, s->head_dim / 2, 0, FILL_ROPE_QUARTER);
        synth_global_weight(pl, "per_layer_token_embd", n_all, s->n_vocab);
        synth_global_weight(pl, "per_layer_model_proj", dim, n_all);
        synth_add(pl, "per_layer_proj_norm.weight", TR_TYPE_F32, z->n_pl, 0, FILL_NORM);
    }
    synth_vector(pl, il, "attn_norm.weight", dim, FILL_NORM);
    synth_weight(pl, il, "attn_q", dim, s->n_head * hd);
    if (has_kv) {
        synth_weight(pl, il, "attn_k", dim, s->n_head_kv * hd);
        synth_weight(pl, il, "attn_v", dim, s->n_head_kv * hd);
        synth_vector(pl, il, "attn_k_norm.weight", hd, FILL_NORM);
    }
    synth_weight(pl, il, "attn_output", s->n_head * hd, dim);
    synth_vector(pl, il, "attn_q_norm.weight", hd, FILL_NORM);
    synth_vector(pl, il, "post_attention_norm.weight", dim, FILL_NORM);
    synth_vector(pl, il, "ffn_norm.weight", dim, FILL_NORM);
    synth_weight(pl, il, "ffn_gate", dim, n_ff);
    synth_weight(pl, il, "ffn_up", dim, n_ff);
    synth_weight(pl, il, "ffn_down", n_ff, dim);
    synth_vector(pl, il, "post_ffw_norm.weight", dim, FILL_NORM);
    synth_vector(pl, il, "layer_output_scale.weight", 1, FILL_NORM);
    synth_weight(pl, il, "inp_gate", dim, z->n_pl);
    synth_weight(pl, il, "proj", z->n_pl, dim);
    synth_vector(pl, il, "post_norm.weight", dim, FILL_NORM);
}

const arch_ops arch_gemma4 = {
    .name = "gemma4",
    .id = TR_ARCH_GEMMA4,
    .rope_neox = true,
    .load = load,
    .unload = unload,
    .repack_list = repack_list,
    .buffers_init = buffers_init,
    .buffers_free = buffers_free,
    .embed_rows = embed_rows,
    .rope_rows = rope_rows,
    .layer = layer,
    .logits_post = logits_softcap,
    .shapes = shapes,
    .n_shapes = sizeof shapes / sizeof shapes[0],
    .synth_hparams = synth_hparams,
    .synth_layer = synth_layer,
};
