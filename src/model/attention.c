/* attention.c — causal grouped-query attention over the KV cache, written as two matrix products per KV head so
 * the tiled SIMD kernels do the work:
 *   scores[m][pos] = Q_g[m] · K_g[pos]      (K_g: the cache's [n_ctx][head_dim] rows of KV head g)
 *   out[m][d]      = P[m] · Vt_g[d]          (Vt_g: the cache's transposed [head_dim][n_ctx] rows, as llama.cpp)
 * where m runs over (token, query head of the group). Causality is a per-row length: row m of a token at position
 * p keeps scores 0..p and zeros the rest before the second product.
 *
 * Decode (a few tokens) shares the KV heads out among the threads in one hand-off; prefill splits each head's
 * products across the threads instead.
 *
 * With an F16 cache we round the query and the attention weights to F16 precision before their products, as
 * llama.cpp does (it converts the other operand of an F16 product to F16); sums stay in float.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/fp16.h"
#include "model/model_internal.h"

/* Tokens per block: bounds the scores buffer to ATT_TOKENS × group × n_ctx floats. */
#define ATT_TOKENS 32

size_t kv_head_offset_k(const kv_cache *kv, int32_t g, int32_t pos, int32_t hd) {
    return ((size_t)g * kv->n_ctx + (size_t)pos) * (size_t)hd * kv->elt;
}

size_t kv_head_offset_v(const kv_cache *kv, int32_t g, int32_t d, int32_t pos, int32_t hd) {
    return (((size_t)g * hd + (size_t)d) * kv->n_ctx + (size_t)pos) * kv->elt;
}

static float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

typedef struct softmax_job {
    float *scores;          /* [rows][n_pos] */
    int32_t rows, n_pos, group, pos0;
    float scale;
    bool f16;
} softmax_job;

static void softmax_task(void *arg, int ith, int nth) {
    const softmax_job *j = arg;
    for (int32_t r = ith; r < j->rows; r += nth) {
        float *s = j->scores + (size_t)r * j->n_pos;
        const int32_t valid = j->pos0 + r / j->group + 1; /* causal: positions 0..p of this row's token */
        for (int32_t i = 0; i < valid; i++) s[i] *= j->scale;
        softmax_inplace(s, valid);
        if (j->f16)
            for (int32_t i = 0; i < valid; i++) s[i] = round_f16(s[i]);
        memset(s + valid, 0, (size_t)(j->n_pos - valid) * sizeof *s);
    }
}

/* Where one block's queries, scores and outputs go. */
typedef struct att_bufs {
    float *q, *scores, *o;
} att_bufs;

/* Attention of tokens [t0, t0+nt) of the chunk for KV head g. tp: the pool the products and softmax split over, or
 * NULL to run them on the calling thread. */
static tr_status attend_block(tr_context *ctx, thread_pool *tp, att_bufs buf, int layer, int32_t g, const float *q,
                              int32_t t0, int32_t nt, float *out) {
    const tr_model *m = ctx->model;
    const kv_cache *kv = &ctx->kv;
    const int32_t hd = m->info.head_dim, group = m->info.n_head / m->info.n_head_kv;
    const int32_t rows = nt * group, n_pos = ctx->n_past + t0 + nt;
    const tr_type kv_type = kv->f32 ? TR_TYPE_F32 : TR_TYPE_F16;
    matmul_scratch none = {0}; /* float products quantize nothing: the scratch stays empty */

    for (int32_t t = 0; t < nt; t++)
        for (int32_t j = 0; j < group; j++) {
            const float *src = q + (size_t)(t0 + t) * m->q_dim + (size_t)(g * group + j) * hd;
            float *dst = buf.q + ((size_t)t * group + j) * hd;
            for (int32_t d = 0; d < hd; d++) dst[d] = kv->f32 ? src[d] : round_f16(src[d]);
        }
    const weight_matrix K = {kv_type, ctx->kv.k[layer] + kv_head_offset_k(kv, g, 0, hd), n_pos, hd, 0, WEIGHT_PLAIN};
    tr_status st = matmul(tp, &K, buf.q, rows, buf.scores, n_pos, &none);
    if (st != TR_OK) return st;

    softmax_job sj = {buf.scores, rows, n_pos, group, ctx->n_past + t0, 1.0f / sqrtf((float)hd), !kv->f32};
    if (tp) run_parallel(ctx, softmax_task, &sj, (int64_t)rows * n_pos * 8);
    else softmax_task(&sj, 0, 1);

    const weight_matrix Vt = {kv_type, ctx->kv.v[layer] + kv_head_offset_v(kv, g, 0, 0, hd), hd, n_pos,
                              (size_t)kv->n_ctx * kv->elt, WEIGHT_PLAIN};
    if ((st = matmul(tp, &Vt, buf.scores, rows, buf.o, hd, &none)) != TR_OK) return st;
    for (int32_t t = 0; t < nt; t++)
        for (int32_t j = 0; j < group; j++)
            memcpy(out + (size_t)(t0 + t) * m->q_dim + (size_t)(g * group + j) * hd,
                   buf.o + ((size_t)t * group + j) * hd, (size_t)hd * sizeof(float));
    return TR_OK;
}

/* Few tokens (decode): the KV heads are shared out among the threads, each running its heads' two products and
 * softmax alone in its own slice of the block buffers, one hand-off per layer instead of ~3 per head. */
typedef struct heads_job {
    tr_context *ctx;
    int layer;
    const float *q;
    int32_t t0, nt;
    float *out;
    atomic_int next_head;
    atomic_int status;
} heads_job;

static void heads_task(void *arg, int ith, int nth) {
    (void)nth;
    heads_job *job = arg;
    tr_context *ctx = job->ctx;
    const tr_model *m = ctx->model;
    const size_t rows = (size_t)job->nt * (size_t)(m->info.n_head / m->info.n_head_kv), hd = (size_t)m->info.head_dim;
    const att_bufs buf = {ctx->act.att_q + (size_t)ith * rows * hd,
                          ctx->act.att_scores + (size_t)ith * rows * (size_t)ctx->kv.n_ctx,
                          ctx->act.att_o + (size_t)ith * rows * hd};
    for (;;) {
        const int g = atomic_fetch_add_explicit(&job->next_head, 1, memory_order_relaxed);
        if (g >= m->info.n_head_kv) break;
        const tr_status st = attend_block(ctx, NULL, buf, job->layer, g, job->q, job->t0, job->nt, job->out);
        if (st != TR_OK) atomic_store(&job->status, (int)st);
    }
}

tr_status attention(tr_context *ctx, int layer, const float *q, int32_t n, float *out) {
    const int32_t n_kv = ctx->model->info.n_head_kv;
    const int nth = thread_pool_size(ctx->pool);
    const att_bufs whole = {ctx->act.att_q, ctx->act.att_scores, ctx->act.att_o};
    for (int32_t t0 = 0; t0 < n; t0 += ATT_TOKENS) {
        const int32_t nt = n - t0 < ATT_TOKENS ? n - t0 : ATT_TOKENS;
        if (nth > 1 && n_kv > 1 && (int64_t)nt * nth <= ATT_TOKENS) {
            heads_job job = {.ctx = ctx, .layer = layer, .q = q, .t0 = t0, .nt = nt, .out = out};
            atomic_init(&job.next_head, 0);
            atomic_init(&job.status, TR_OK);
            thread_pool_run(ctx->pool, heads_task, &job);
            if (atomic_load(&job.status) != TR_OK) return (tr_status)atomic_load(&job.status);
            continue;
        }
        for (int32_t g = 0; g < n_kv; g++) {
            tr_status st = attend_block(ctx, ctx->pool, whole, layer, g, q, t0, nt, out);
            if (st != TR_OK) return st;
        }
    }
    return TR_OK;
}

/* Block rows: ATT_TOKENS tokens × the query heads of one KV head. Layout: queries [rows][head_dim], then scores
 * [rows][n_ctx], then outputs [rows][head_dim]. */
static size_t block_rows(const tr_model *m) { return ATT_TOKENS * (size_t)(m->info.n_head / m->info.n_head_kv); }

size_t attention_scratch_floats(const tr_model *m, int32_t n_ctx) {
    return block_rows(m) * ((size_t)n_ctx + 2 * (size_t)m->info.head_dim);
}

void attention_blocks(const tr_model *m, int32_t n_ctx, float *base, float **scores, float **out) {
    *scores = base + block_rows(m) * (size_t)m->info.head_dim;
    *out = *scores + block_rows(m) * (size_t)n_ctx;
}
