/* decoder.c — the transformer layer most families are made of, and the row machinery every family's layers share.
 *
 * The layer (decoder_layer), one body for one sequence and for the server's batched pass: the rows of every
 * sequence go through each matrix product together (weights read once per pass), while RoPE positions, the KV
 * store and attention are per sequence ("span"), each on its own cache. Row-wise steps are shared among the threads
 * by rows: each row's arithmetic is what one thread would do, so a row's result does not depend on which sequences
 * share the pass or how the rows are split. (A context runs them on the calling thread, as the single-sequence pass
 * always did: at 2 threads the extra hand-offs cost gemma3-270m's prefill ~10% on a busy machine; the server's
 * batched engine shares them among its threads.)
 *
 *   RMSNorm → Q/K/V (+bias) → [per-head Q/K RMSNorm] → RoPE (none for a NoPE layer; the sliding-window table for a
 *   windowed one) → [× q_scale] → KV cache → attention → output projection → [post-attention RMSNorm] → residual →
 *   RMSNorm → SwiGLU or GeGLU FFN → [post-FFN RMSNorm] → residual.
 * A family whose layers mix tokens another way (lfm2's short convolutions) keeps the block around its own mixer
 * (decoder_block). And the causal depthwise convolution over a per-sequence window that qwen35 and lfm2 share.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "kernels/fp16.h"
#include "kernels/vexp.h"
#include "model/arch.h"

/* ---------------------------------------------------------------- element-wise steps over the pool */

/* A GLU of fewer values than this (one decoded token's FFN on the smaller models) runs on the calling thread: its
 * hand-off cost more than half of it. Paired runs, base vs inline below 16384 values, busy 2-core AMD, load 3-4:
 * lfm2-350m 1.04x and 1.10x, qwen2.5-0.5b 1.01x; but smollm3-3b 0.96x, gemma4-e2b 0.97x, lfm2-1.2b 0.99x (A/A
 * noise +-3%), hence the lower bound; with it lfm2-350m 1.01x, qwen2.5-0.5b 1.00x: marginal, to be confirmed quiet. */
#define GLU_INLINE_VALUES 8192

typedef struct glu_job {
    float *gate;
    const float *up;
    int64_t n;
} glu_job;

static void silu_task(void *arg, int ith, int nth) {
    const glu_job *job = arg;
    const int64_t per = (job->n + nth - 1) / nth, lo = ith * per, hi = lo + per < job->n ? lo + per : job->n;
    if (lo < hi) silu_mul(job->gate + lo, job->up + lo, hi - lo);
}

void silu_mul_parallel(tr_context *ctx, float *gate, const float *up, int64_t n) {
    glu_job job = {gate, up, n};
    run_parallel(ctx, silu_task, &job, n < GLU_INLINE_VALUES ? 0 : n * 16); /* an expf: ~16 multiply-adds */
}

/* ggml's GELU reads a table indexed by the input rounded to F16 (GGML_GELU_FP16), whose entries are the tanh
 * approximation rounded to F16; inputs beyond ±10 bypass it. Built once, 256 KiB. */
static float gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void) {
    for (uint32_t i = 0; i < (1u << 16); i++) {
        const float x = fp16_to_fp32((uint16_t)i);
        const float g = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
        gelu_table[i] = fp16_to_fp32(fp32_to_fp16(g));
    }
}

static void geglu_task(void *arg, int ith, int nth) {
    const glu_job *j = arg;
    const int64_t per = (j->n + nth - 1) / nth, lo = ith * per, hi = lo + per < j->n ? lo + per : j->n;
    if (hi > lo) vexp_table_glu(gelu_table, j->gate + lo, j->up + lo, hi - lo);
}

void gelu_mul_parallel(tr_context *ctx, float *gate, const float *up, int64_t n) {
    pthread_once(&gelu_once, gelu_table_init);
    glu_job job = {gate, up, n};
    run_parallel(ctx, geglu_task, &job, n < GLU_INLINE_VALUES ? 0 : n * 4);
}

/* ---------------------------------------------------------------- rows */

typedef struct rows_job {
    tr_context *ctx;
    int il;
    const seq_span *sp;
    int32_t n;
    row_fn fn;
    void *arg;
} rows_job;

static void rows_task(void *arg, int ith, int nth) {
    const rows_job *j = arg;
    const int32_t t0 = (int32_t)((int64_t)j->n * ith / nth), t1 = (int32_t)((int64_t)j->n * (ith + 1) / nth);
    int32_t s = 0;
    for (int32_t t = t0; t < t1; t++) {
        while (t >= j->sp[s].row + j->sp[s].n) s++;
        j->fn(j->ctx, j->il, &j->sp[s], t, j->arg);
    }
}

void run_rows(tr_context *ctx, int il, const seq_span *sp, int32_t n_sp, int32_t n, row_fn fn, void *arg,
              int64_t work_per_row) {
    (void)n_sp;
    rows_job j = {ctx, il, sp, n, fn, arg};
    if (ctx->parallel_rows) run_parallel(ctx, rows_task, &j, (int64_t)n * work_per_row);
    else rows_task(&j, 0, 1);
}

/* ---------------------------------------------------------------- binding */

tr_status bind_decoder_ffn(tr_model *m, int il) {
    const tr_model_info *in = &m->info;
    layer_weights *L = &m->layers[il];
    const int32_t n_ff = L->n_ff ? L->n_ff : in->n_ff;
    char name[96];
    tr_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if ((st = bind_vector(m, NAME("ffn_norm.weight"), in->n_embd, true, &L->ffn_norm)) ||
        (st = bind_matrix(m, NAME("ffn_gate.weight"), in->n_embd, n_ff, true, &L->w_gate)) ||
        (st = bind_matrix(m, NAME("ffn_up.weight"), in->n_embd, n_ff, true, &L->w_up)) ||
        (st = bind_matrix(m, NAME("ffn_down.weight"), n_ff, in->n_embd, true, &L->w_down)))
        return st;
#undef NAME
    return TR_OK;
}

tr_status bind_decoder_layer(tr_model *m, int il, decoder_parts parts) {
    const tr_model_info *in = &m->info;
    layer_weights *L = &m->layers[il];
    char name[96];
    tr_status st = TR_OK;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if ((st = bind_vector(m, NAME("attn_norm.weight"), in->n_embd, true, &L->attn_norm)) ||
        (st = bind_matrix(m, NAME("attn_q.weight"), in->n_embd, m->q_dim, true, &L->wq)) ||
        (st = bind_matrix(m, NAME("attn_k.weight"), in->n_embd, m->kv_dim, true, &L->wk)) ||
        (st = bind_matrix(m, NAME("attn_v.weight"), in->n_embd, m->kv_dim, true, &L->wv)) ||
        (st = bind_matrix(m, NAME("attn_output.weight"), m->q_dim, in->n_embd, true, &L->wo)) ||
        (st = bind_vector(m, NAME("attn_q.bias"), m->q_dim, parts.qkv_bias, &L->bq)) ||
        (st = bind_vector(m, NAME("attn_k.bias"), m->kv_dim, parts.qkv_bias, &L->bk)) ||
        (st = bind_vector(m, NAME("attn_v.bias"), m->kv_dim, parts.qkv_bias, &L->bv)) ||
        (st = bind_vector(m, NAME("attn_q_norm.weight"), in->head_dim, parts.qk_norm, &L->q_norm)) ||
        (st = bind_vector(m, NAME("attn_k_norm.weight"), in->head_dim, parts.qk_norm, &L->k_norm)) ||
        (parts.post_norms &&
         (st = bind_vector(m, NAME("post_attention_norm.weight"), in->n_embd, true, &L->attn_post_norm))) ||
        (parts.post_norms && (st = bind_vector(m, NAME("post_ffw_norm.weight"), in->n_embd, true, &L->ffn_post_norm))) ||
        (st = bind_decoder_ffn(m, il)))
        return st;
#undef NAME
    if ((L->q_norm == NULL) != (L->k_norm == NULL))
        return tr_fail(TR_ERR_FORMAT, "layer %d has only one of attn_q_norm / attn_k_norm", il);
    return TR_OK;
}

void rope_rows_default(const tr_model *m, activations *A, int32_t row, int32_t n, int32_t pos0) {
    const int32_t half = m->rope_dim / 2;
    rope_tables(m, pos0, n, A->rope_cos + (int64_t)row * half, A->rope_sin + (int64_t)row * half);
}

/* ---------------------------------------------------------------- the layer */

static void head_norm(float *rows, const float *w, int32_t n_heads, int32_t hd, float eps) {
    if (!w) return;
    for (int64_t i = 0; i < n_heads; i++) rms_norm(rows + i * hd, rows + i * hd, w, hd, eps);
}

static void attn_norm_row(tr_context *ctx, int il, const seq_span *sp, int32_t t, void *arg) {
    (void)sp, (void)arg;
    const tr_model *m = ctx->model;
    const int32_t dim = m->info.n_embd;
    rms_norm(ctx->act.xb + (int64_t)t * dim, ctx->act.x + (int64_t)t * dim, m->layers[il].attn_norm, dim,
             m->info.norm_eps);
}

/* Row t's bias, head norms, RoPE and query scale, then its K and V into its sequence's cache. */
static void qkv_row(tr_context *ctx, int il, const seq_span *sp, int32_t t, void *arg) {
    (void)arg;
    const tr_model *m = ctx->model;
    const layer_weights *L = &m->layers[il];
    activations *A = &ctx->act;
    const int32_t hd = m->info.head_dim, half = m->rope_dim / 2;
    const float eps = m->info.norm_eps;
    float *q = A->q + (int64_t)t * m->q_dim, *k = A->k + (int64_t)t * m->kv_dim, *v = A->v + (int64_t)t * m->kv_dim;
    if (L->bq) add_vec(q, L->bq, m->q_dim);
    if (L->bk) add_vec(k, L->bk, m->kv_dim);
    if (L->bv) add_vec(v, L->bv, m->kv_dim);
    head_norm(q, L->q_norm, m->info.n_head, hd, eps);
    head_norm(k, L->k_norm, m->info.n_head_kv, hd, eps);
    if (!L->no_rope) {
        const int64_t rope_off = L->window && m->rope_swa ? (int64_t)A->cap * half : 0; /* sliding-window table */
        const float *c = A->rope_cos + rope_off + (int64_t)t * half, *sn = A->rope_sin + rope_off + (int64_t)t * half;
        rope_apply(m, q, m->info.n_head, c, sn);
        rope_apply(m, k, m->info.n_head_kv, c, sn);
    }
    if (m->q_scale != 1.0f)
        for (int32_t i = 0; i < m->q_dim; i++) q[i] *= m->q_scale;
    kv_store(sp->kv, il, sp->n_past + t - sp->row, k, v, m->info.n_head_kv, hd);
}

/* After the attention output: [its post-norm], the residual add, the FFN's pre-norm. */
static void resid_ffn_norm_row(tr_context *ctx, int il, const seq_span *sp, int32_t t, void *arg) {
    (void)sp, (void)arg;
    const tr_model *m = ctx->model;
    const layer_weights *L = &m->layers[il];
    const int32_t dim = m->info.n_embd;
    const float eps = m->info.norm_eps;
    float *x = ctx->act.x + (int64_t)t * dim, *xb = ctx->act.xb + (int64_t)t * dim;
    if (L->attn_post_norm) rms_norm(xb, xb, L->attn_post_norm, dim, eps);
    add_vec(x, xb, dim);
    rms_norm(xb, x, L->ffn_norm, dim, eps);
}

static void resid_row(tr_context *ctx, int il, const seq_span *sp, int32_t t, void *arg) {
    (void)sp, (void)arg;
    const tr_model *m = ctx->model;
    const layer_weights *L = &m->layers[il];
    const int32_t dim = m->info.n_embd;
    float *x = ctx->act.x + (int64_t)t * dim, *xb = ctx->act.xb + (int64_t)t * dim;
    if (L->ffn_post_norm) rms_norm(xb, xb, L->ffn_post_norm, dim, m->info.norm_eps);
    add_vec(x, xb, dim);
}

tr_status decoder_ffn(tr_context *ctx, int il, int32_t n) {
    const tr_model *m = ctx->model;
    const layer_weights *L = &m->layers[il];
    activations *A = &ctx->act;
    const weight_matrix *gate_up[2] = {&L->w_gate, &L->w_up};
    float *gate_up_out[2] = {A->gate, A->up};
    const int32_t n_ff = L->n_ff ? L->n_ff : m->info.n_ff;
    const int64_t gate_up_ld[2] = {n_ff, n_ff};
    tr_status st = matmul_multi(ctx->pool, gate_up, 2, A->xb, n, gate_up_out, gate_up_ld, &ctx->scratch);
    if (st != TR_OK) return st;
    if (m->gelu) gelu_mul_parallel(ctx, A->gate, A->up, (int64_t)n * n_ff);
    else silu_mul_parallel(ctx, A->gate, A->up, (int64_t)n * n_ff);
    return matmul(ctx->pool, &L->w_down, A->gate, n, A->xb, m->info.n_embd, &ctx->scratch);
}

tr_status decoder_attention(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp) {
    const tr_model *m = ctx->model;
    const layer_weights *L = &m->layers[il];
    activations *A = &ctx->act;
    tr_status st;
    /* Q, K and V read the same input: one hand-off to the threads for the three products. */
    const weight_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {A->q, A->k, A->v};
    const int64_t qkv_ld[3] = {m->q_dim, m->kv_dim, m->kv_dim};
    if ((st = matmul_multi(ctx->pool, qkv, 3, A->xb, n, qkv_out, qkv_ld, &ctx->scratch)) != TR_OK) return st;
    run_rows(ctx, il, sp, n_sp, n, qkv_row, NULL, (int64_t)m->info.n_embd * 4); /* every sequence's rows cached */
    const kv_cache saved_kv = ctx->kv;
    const int32_t saved_past = ctx->n_past;
    for (int32_t s = 0; s < n_sp && st == TR_OK; s++) {
        ctx->kv = *sp[s].kv;
        ctx->n_past = sp[s].n_past;
        st = attention(ctx, il, A->q + (int64_t)sp[s].row * m->q_dim, sp[s].n, A->att + (int64_t)sp[s].row * m->q_dim);
    }
    ctx->kv = saved_kv;
    ctx->n_past = saved_past;
    if (st != TR_OK) return st;
    return matmul(ctx->pool, &L->wo, A->att, n, A->xb, m->info.n_embd, &ctx->scratch);
}

tr_status decoder_block(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp, mixer_fn mixer) {
    const int64_t row_work = (int64_t)ctx->model->info.n_embd * 4;
    tr_status st;
    run_rows(ctx, il, sp, n_sp, n, attn_norm_row, NULL, row_work);
    if ((st = mixer(ctx, il, n, sp, n_sp)) != TR_OK) return st;
    run_rows(ctx, il, sp, n_sp, n, resid_ffn_norm_row, NULL, row_work);
    if ((st = decoder_ffn(ctx, il, n)) != TR_OK) return st;
    run_rows(ctx, il, sp, n_sp, n, resid_row, NULL, row_work);
    return TR_OK;
}

tr_status decoder_layer(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp) {
    return decoder_block(ctx, il, n, sp, n_sp, decoder_attention);
}

void logits_softcap(const tr_model *m, float *logits, int64_t count) {
    const float c = m->logit_softcap;
    if (!(c > 0)) return;
    const float inv = 1.0f / c;
    for (int64_t i = 0; i < count; i++) logits[i] = tanhf(logits[i] * inv) * c;
}

/* ---------------------------------------------------------------- causal convolution */

typedef struct conv_job {
    const float *kernel;
    int32_t K, C;
    seq_state *state;
    size_t offset;
    float *rows;
    int64_t stride;
    int32_t n;
    bool silu;
} conv_job;

static void conv_task(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    const int32_t K = j->K, C = j->C;
    const int32_t per = (C + nth - 1) / nth, lo = ith * per, hi = lo + per < C ? lo + per : C;
    float *state = j->state->live + j->offset;
    for (int32_t c = lo; c < hi; c++) {
        float *w = state + (size_t)c * (K - 1);
        const float *k = j->kernel + (size_t)c * K;
        for (int32_t t = 0; t < j->n; t++) {
            float *ckpt = seq_state_slot(j->state, t);
            if (ckpt) memcpy(ckpt + j->offset + (size_t)c * (K - 1), w, (size_t)(K - 1) * sizeof *w);
            float *x = j->rows + (size_t)t * j->stride + c;
            float sum = 0.0f;
            for (int32_t i = 0; i < K - 1; i++) sum += w[i] * k[i];
            sum += *x * k[K - 1];
            for (int32_t i = 0; i + 1 < K - 1; i++) w[i] = w[i + 1];
            w[K - 2] = *x;
            *x = j->silu ? siluf(sum) : sum;
        }
    }
}

void causal_conv(tr_context *ctx, const float *kernel, int32_t K, int32_t C, seq_state *state, size_t offset,
                 float *rows, int64_t stride, int32_t n, bool silu) {
    conv_job j = {kernel, K, C, state, offset, rows, stride, n, silu};
    run_parallel(ctx, conv_task, &j, (int64_t)n * C * (K + 16));
}
