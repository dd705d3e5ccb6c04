/* forward.c — one batched forward pass of the llama / qwen2 / qwen3 decoder over a chunk of tokens:
 * embeddings → per layer (RMSNorm → Q/K/V (+bias) → [qwen3: per-head Q/K RMSNorm] → RoPE → KV cache → attention →
 * output projection → residual → RMSNorm → SwiGLU FFN → residual) → output norm (the router's hidden state) →
 * logits for the rows asked for. Every token of the chunk goes through each matrix product together, so weights
 * are read once per chunk, not once per token. gemma3 adds its steps where they fall (arch_gemma3.c): embedding
 * and query scales, a second RoPE table for sliding-window layers, post-attention and post-FFN norms, GeGLU, logit
 * softcapping.
 */
#include <string.h>

#include "common/error.h"
#include "model/model_internal.h"
#include "model/qwen35.h"

typedef struct silu_job {
    float *gate;
    const float *up;
    int64_t n;
} silu_job;

static void silu_task(void *arg, int ith, int nth) {
    const silu_job *job = arg;
    const int64_t per = (job->n + nth - 1) / nth, lo = ith * per, hi = lo + per < job->n ? lo + per : job->n;
    if (lo < hi) silu_mul(job->gate + lo, job->up + lo, hi - lo);
}

void silu_mul_parallel(tr_context *ctx, float *gate, const float *up, int64_t n) {
    silu_job job = {gate, up, n};
    run_parallel(ctx, silu_task, &job, n * 16); /* an expf is worth ~16 multiply-adds */
}

void add_bias_rows(float *rows, const float *bias, int32_t n, int32_t width) {
    if (!bias) return;
    for (int32_t t = 0; t < n; t++) add_vec(rows + (int64_t)t * width, bias, width);
}

static void head_norm(float *rows, const float *w, int32_t n, int32_t n_heads, int32_t hd, float eps) {
    if (!w) return;
    for (int64_t i = 0; i < (int64_t)n * n_heads; i++) rms_norm(rows + i * hd, rows + i * hd, w, hd, eps);
}

static tr_status layer_forward(tr_context *ctx, int il, int32_t n) {
    const tr_model *m = ctx->model;
    const layer_weights *L = &m->layers[il];
    activations *A = &ctx->act;
    const int32_t dim = m->info.n_embd, hd = m->info.head_dim, half = m->rope_dim / 2;
    const float eps = m->info.norm_eps;
    tr_status st;

    for (int32_t t = 0; t < n; t++) rms_norm(A->xb + (int64_t)t * dim, A->x + (int64_t)t * dim, L->attn_norm, dim, eps);
    /* Q, K and V read the same input: one hand-off to the threads for the three products. */
    const weight_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {A->q, A->k, A->v};
    const int64_t qkv_ld[3] = {m->q_dim, m->kv_dim, m->kv_dim};
    if ((st = matmul_multi(ctx->pool, qkv, 3, A->xb, n, qkv_out, qkv_ld, &ctx->scratch)) != TR_OK) return st;
    add_bias_rows(A->q, L->bq, n, m->q_dim);
    add_bias_rows(A->k, L->bk, n, m->kv_dim);
    add_bias_rows(A->v, L->bv, n, m->kv_dim);
    head_norm(A->q, L->q_norm, n, m->info.n_head, hd, eps);
    head_norm(A->k, L->k_norm, n, m->info.n_head_kv, hd, eps);
    const int64_t rope_off = L->window ? (int64_t)A->cap * half : 0; /* gemma3: sliding-window layers' table */
    for (int32_t t = 0; t < n; t++) {
        const float *c = A->rope_cos + rope_off + (int64_t)t * half, *s = A->rope_sin + rope_off + (int64_t)t * half;
        rope_apply(m, A->q + (int64_t)t * m->q_dim, m->info.n_head, c, s);
        rope_apply(m, A->k + (int64_t)t * m->kv_dim, m->info.n_head_kv, c, s);
        if (m->q_scale != 1.0f)
            for (int32_t i = 0; i < m->q_dim; i++) A->q[(int64_t)t * m->q_dim + i] *= m->q_scale;
        kv_store(&ctx->kv, il, ctx->n_past + t, A->k + (int64_t)t * m->kv_dim, A->v + (int64_t)t * m->kv_dim,
                 m->info.n_head_kv, hd);
    }
    if ((st = attention(ctx, il, A->q, n, A->att)) != TR_OK) return st;
    if ((st = matmul(ctx->pool, &L->wo, A->att, n, A->xb, dim, &ctx->scratch)) != TR_OK) return st;
    if (L->attn_post_norm) gemma3_post_norm(m, A->xb, L->attn_post_norm, n);
    add_vec(A->x, A->xb, (int64_t)n * dim);

    for (int32_t t = 0; t < n; t++) rms_norm(A->xb + (int64_t)t * dim, A->x + (int64_t)t * dim, L->ffn_norm, dim, eps);
    const weight_matrix *gate_up[2] = {&L->w_gate, &L->w_up};
    float *gate_up_out[2] = {A->gate, A->up};
    const int64_t gate_up_ld[2] = {m->info.n_ff, m->info.n_ff};
    if ((st = matmul_multi(ctx->pool, gate_up, 2, A->xb, n, gate_up_out, gate_up_ld, &ctx->scratch)) != TR_OK)
        return st;
    if (m->gelu) {
        gemma3_geglu(ctx, A->gate, A->up, (int64_t)n * m->info.n_ff);
    } else {
        silu_mul_parallel(ctx, A->gate, A->up, (int64_t)n * m->info.n_ff);
    }
    if ((st = matmul(ctx->pool, &L->w_down, A->gate, n, A->xb, dim, &ctx->scratch)) != TR_OK) return st;
    if (L->ffn_post_norm) gemma3_post_norm(m, A->xb, L->ffn_post_norm, n);
    add_vec(A->x, A->xb, (int64_t)n * dim);
    return TR_OK;
}

tr_status forward_chunk(tr_context *ctx, const int32_t *tokens, int32_t n, float *hidden_out, int32_t logits_from,
                        float *logits_out) {
    const tr_model *m = ctx->model;
    activations *A = &ctx->act;
    const int32_t dim = m->info.n_embd;
    if (m->q35) return qwen35_forward_chunk(ctx, tokens, n, hidden_out, logits_from, logits_out);
    tr_status st;
    for (int32_t t = 0; t < n; t++)
        if ((st = weight_dequantize_row(&m->tok_embd, tokens[t], A->x + (int64_t)t * dim)) != TR_OK) return st;
    if (m->embd_scale != 1.0f)
        for (int64_t i = 0; i < (int64_t)n * dim; i++) A->x[i] *= m->embd_scale;
    rope_tables(m, ctx->n_past, n, A->rope_cos, A->rope_sin);
    if (m->rope_swa)
        gemma3_rope_tables_swa(m, ctx->n_past, n, A->rope_cos + (int64_t)A->cap * (m->rope_dim / 2),
                               A->rope_sin + (int64_t)A->cap * (m->rope_dim / 2));
    for (int il = 0; il < m->info.n_layer; il++)
        if ((st = layer_forward(ctx, il, n)) != TR_OK) return st;
    for (int32_t t = 0; t < n; t++)
        rms_norm(hidden_out + (int64_t)t * dim, A->x + (int64_t)t * dim, m->output_norm, dim, m->info.norm_eps);
    if (logits_out && logits_from < n) {
        st = matmul(ctx->pool, &m->output, hidden_out + (int64_t)logits_from * dim, n - logits_from, logits_out,
                    m->info.n_vocab, &ctx->scratch);
        if (st == TR_OK) gemma3_softcap(m, logits_out, n - logits_from);
        return st;
    }
    return TR_OK;
}
