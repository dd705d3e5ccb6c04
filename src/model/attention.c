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
 * A layer with a head size of its own (gemma4) runs as its geometry model over its view of the cache (attention).
 *
 * A sliding-window layer (gemma3) reads only the positions its block's first token still sees, and each row masks
 * the ones its own window hides (zero weights, as llama.cpp's -inf mask gives); the cache itself keeps everything.
 *
 * With an F16 cache we round the query and the attention weights to F16 precision before their products, as
 * llama.cpp does (it converts the other operand of an F16 product to F16); sums stay in float.
 *
 * A Q8_0 cache keeps V by position (blocks along head_dim), so the second product becomes a weighted sum of V rows
 * (kvq8_mix), as llama.cpp's flash-attention path accumulates dequantized V rows in float. The scores are the
 * Q8_0 matrix product with the queries quantized to Q8_0 once per block of rows, as llama.cpp does, for 32-value
 * blocks; narrower blocks (tiny models) dot float queries against K decoded on the fly (kvq8_scores). Where the
 * cache stores K and V rotated (head_dim a multiple of 64, as llama.cpp), the queries get K's rotation and each
 * head's output V's, which undoes it.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/attn_scores.h"
#include "kernels/kv_q8.h"
#include "kernels/vexp.h"
#include "model/model_internal.h"

/* Tokens per block: bounds the scores buffer to ATT_TOKENS × group × n_ctx floats. */
#define ATT_TOKENS 32

size_t kv_head_offset_k(const kv_cache *kv, int32_t g, int32_t pos, int32_t hd) {
    (void)hd;
    return ((size_t)g * kv->n_ctx + (size_t)pos) * kv->row_bytes;
}

size_t kv_head_offset_v(const kv_cache *kv, int32_t g, int32_t d, int32_t pos, int32_t hd) {
    if (kv->type == TR_KV_Q8_0) return ((size_t)g * kv->n_ctx + (size_t)pos) * kv->row_bytes;
    return (((size_t)g * hd + (size_t)d) * kv->n_ctx + (size_t)pos) * kv->elt;
}

tr_status attention_scratch_alloc(activations *A, int n) {
    if (!(A->att_scratch = calloc((size_t)n, sizeof *A->att_scratch)))
        return tr_fail(TR_ERR_NOMEM, "out of memory for attention scratch");
    A->n_att_scratch = n;
    return TR_OK;
}

void attention_scratch_free(activations *A) {
    for (int i = 0; A->att_scratch && i < A->n_att_scratch; i++) matmul_scratch_free(&A->att_scratch[i]);
    free(A->att_scratch);
    A->att_scratch = NULL;
    A->n_att_scratch = 0;
}

/* The cached positions a block of tokens reads, as columns: column 0 is position `first`; the block's first token
 * is at column pos0 and the last column is n_pos - 1. A sliding-window layer starts where its first token's window
 * does; causal layers at 0. */
typedef struct att_span {
    int32_t first, pos0, n_pos, window; /* window: 0 for a layer that sees every earlier position */
} att_span;

static att_span block_span(const tr_context *ctx, int layer, int32_t t0, int32_t nt) {
    const int32_t window = ctx->model->layers[layer].window, pos = ctx->n_past + t0;
    const int32_t first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
    return (att_span){first, pos - first, pos + nt - first, window};
}

/* The first column a row that sees columns [0, valid) keeps under the window (the same in absolute positions: the
 * span starts at most `window` behind any row's token). */
static int32_t row_lo(int32_t valid, int32_t window) { return window > 0 && valid > window ? valid - window : 0; }

/* Scaled softmax of one row's scores [lo, valid); the rest are zeroed (the products read every column). */
static void softmax_row(float *s, int32_t lo, int32_t valid, int32_t n_pos, float scale, bool f16) {
    for (int32_t i = lo; i < valid; i++) s[i] *= scale;
    softmax_inplace(s + lo, valid - lo);
    if (f16) vexp_round_f16(s + lo, valid - lo);
    memset(s, 0, (size_t)lo * sizeof *s);
    memset(s + valid, 0, (size_t)(n_pos - valid) * sizeof *s);
}

typedef struct softmax_job {
    float *scores;          /* [rows][n_pos] */
    int32_t rows, n_pos, group, pos0, window;
    float scale;
    bool f16;
} softmax_job;

/* By token: its rows (the query heads of this KV head) see the same positions, so their softmaxes run together
 * (vexp_softmax_rows: each row's arithmetic as softmax_row's). */
static void softmax_task(void *arg, int ith, int nth) {
    const softmax_job *j = arg;
    for (int32_t t = ith; t < j->rows / j->group; t += nth) { /* causal: positions 0..p of this token */
        const int32_t valid = j->pos0 + t + 1, lo = row_lo(valid, j->window);
        float *first = j->scores + (size_t)t * j->group * j->n_pos;
        vexp_softmax_rows(first + lo, j->n_pos, j->group, valid - lo, j->scale);
        for (int32_t g = 0; g < j->group; g++) {
            float *s = first + (size_t)g * j->n_pos;
            if (j->f16) vexp_round_f16(s + lo, valid - lo);
            memset(s, 0, (size_t)lo * sizeof *s);
            memset(s + valid, 0, (size_t)(j->n_pos - valid) * sizeof *s);
        }
    }
}

/* Where one block's queries, scores and outputs go, and the scratch its quantized queries use. */
typedef struct att_bufs {
    float *q, *scores, *o;
    matmul_scratch *scratch;
} att_bufs;

/* The Q8_0 cache's steps after the queries are gathered: scores (unless the matrix product made them), softmax and
 * the weighted sum of V rows, for the tokens [ith/nth] of the block (their rows are whole groups, so each thread's
 * share is causal rows of its own). */
typedef struct q8_job {
    kvq8_rows K, V;
    const float *q;
    float *scores, *o;
    int32_t n_tokens, group, pos0, n_pos, window;
    float scale;
    int rot_v;
    bool have_scores;
} q8_job;

static void q8_task(void *arg, int ith, int nth) {
    const q8_job *j = arg;
    const int32_t t0 = (int32_t)((int64_t)j->n_tokens * ith / nth), t1 = (int32_t)((int64_t)j->n_tokens * (ith + 1) / nth);
    if (t0 >= t1) return;
    const size_t r0 = (size_t)t0 * j->group, hd = (size_t)j->K.hd;
    const kvq8_causal c = {(t1 - t0) * j->group, j->pos0 + t0 + 1, j->group};
    float *scores = j->scores + r0 * j->n_pos;
    if (!j->have_scores) kvq8_scores(&j->K, j->q + r0 * hd, c, scores, (size_t)j->n_pos);
    for (int32_t r = 0; r < c.rows; r++) {
        const int32_t valid = kvq8_row_valid(c, r);
        softmax_row(scores + (size_t)r * j->n_pos, row_lo(valid, j->window), valid, j->n_pos, j->scale, false);
    }
    kvq8_mix(&j->V, scores, (size_t)j->n_pos, c, j->o + r0 * hd);
    if (j->rot_v) kvq8_rotate(j->o + r0 * hd, (int64_t)c.rows * j->K.hd, j->rot_v);
}

static tr_status attend_q8(tr_context *ctx, thread_pool *tp, att_bufs buf, int layer, int32_t g, att_span sp,
                           int32_t nt) {
    const tr_model *m = ctx->model;
    const kv_cache *kv = &ctx->kv;
    const int32_t hd = m->info.head_dim, group = m->info.n_head / m->info.n_head_kv;
    const int32_t rows = nt * group, n_pos = sp.n_pos;
    q8_job job = {.K = {kv->k[layer] + kv_head_offset_k(kv, g, sp.first, hd), kv->row_bytes, hd, kv->q8_block},
                  .V = {kv->v[layer] + kv_head_offset_v(kv, g, 0, sp.first, hd), kv->row_bytes, hd, kv->q8_block},
                  .q = buf.q, .scores = buf.scores, .o = buf.o, .n_tokens = nt, .group = group,
                  .pos0 = sp.pos0, .n_pos = n_pos, .window = sp.window, .scale = m->kq_scale, .rot_v = kv->rot_v};
    if (kv->rot_k) kvq8_rotate(buf.q, (int64_t)rows * hd, kv->rot_k);
    if (kv->q8_block == 32) { /* the rows are Q8_0 blocks: llama.cpp's integer product, all positions at once */
        const weight_matrix K = {TR_TYPE_Q8_0, job.K.data, n_pos, hd, kv->row_bytes, WEIGHT_PLAIN};
        tr_status st = matmul(tp, &K, buf.q, rows, buf.scores, n_pos, buf.scratch);
        if (st != TR_OK) return st;
        job.have_scores = true;
    }
    if (tp) run_parallel(ctx, q8_task, &job, (int64_t)rows * n_pos * hd * 2);
    else q8_task(&job, 0, 1);
    return TR_OK;
}

/* F16 or F32 cache: the two float products, with the softmax between them. */
static tr_status attend_float(tr_context *ctx, thread_pool *tp, att_bufs buf, int layer, int32_t g, att_span sp,
                              int32_t nt) {
    const tr_model *m = ctx->model;
    const kv_cache *kv = &ctx->kv;
    const int32_t hd = m->info.head_dim, group = m->info.n_head / m->info.n_head_kv;
    const int32_t rows = nt * group, n_pos = sp.n_pos;
    const tr_type kv_type = kv->type == TR_KV_F32 ? TR_TYPE_F32 : TR_TYPE_F16;
    matmul_scratch none = {0}; /* float products quantize nothing: the scratch stays empty */
    const weight_matrix K = {kv_type, kv->k[layer] + kv_head_offset_k(kv, g, sp.first, hd), n_pos, hd, 0,
                             WEIGHT_PLAIN};
    const attn_scores_fn scores = kv_type == TR_TYPE_F16 ? attn_scores_for(hd, group) : NULL;
    if (scores) {
        attn_scores_run(tp, scores, (const uint16_t *)K.data, (size_t)hd * sizeof(uint16_t), n_pos, hd, buf.q, rows,
                        buf.scores, n_pos);
    } else {
        const tr_status st = matmul(tp, &K, buf.q, rows, buf.scores, n_pos, &none);
        if (st != TR_OK) return st;
    }

    softmax_job sj = {buf.scores, rows, n_pos, group, sp.pos0, sp.window, m->kq_scale, kv->type == TR_KV_F16};
    if (tp) run_parallel(ctx, softmax_task, &sj, (int64_t)rows * n_pos * 8);
    else softmax_task(&sj, 0, 1);

    const weight_matrix Vt = {kv_type, kv->v[layer] + kv_head_offset_v(kv, g, 0, sp.first, hd), hd, n_pos,
                              (size_t)kv->n_ctx * kv->elt, WEIGHT_PLAIN};
    return matmul(tp, &Vt, buf.scores, rows, buf.o, hd, &none);
}

/* Attention of tokens [t0, t0+nt) of the chunk for KV head g. tp: the pool the products and softmax split over, or
 * NULL to run them on the calling thread. */
static tr_status attend_block(tr_context *ctx, thread_pool *tp, att_bufs buf, int layer, int32_t g, const float *q,
                              int32_t t0, int32_t nt, float *out) {
    const tr_model *m = ctx->model;
    const int32_t hd = m->info.head_dim, group = m->info.n_head / m->info.n_head_kv;
    const bool f16 = ctx->kv.type == TR_KV_F16;
    for (int32_t t = 0; t < nt; t++)
        for (int32_t j = 0; j < group; j++) {
            const float *src = q + (size_t)(t0 + t) * m->q_dim + (size_t)(g * group + j) * hd;
            float *dst = buf.q + ((size_t)t * group + j) * hd;
            memcpy(dst, src, (size_t)hd * sizeof *dst);
            if (f16) vexp_round_f16(dst, hd);
        }
    const att_span sp = block_span(ctx, layer, t0, nt);
    const tr_status st = ctx->kv.type == TR_KV_Q8_0 ? attend_q8(ctx, tp, buf, layer, g, sp, nt)
                                                     : attend_float(ctx, tp, buf, layer, g, sp, nt);
    if (st != TR_OK) return st;
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
                          ctx->act.att_o + (size_t)ith * rows * hd, &ctx->act.att_scratch[ith]};
    for (;;) {
        const int g = atomic_fetch_add_explicit(&job->next_head, 1, memory_order_relaxed);
        if (g >= m->info.n_head_kv) break;
        const tr_status st = attend_block(ctx, NULL, buf, job->layer, g, job->q, job->t0, job->nt, job->out);
        if (st != TR_OK) atomic_store(&job->status, (int)st);
    }
}

static tr_status attention_run(tr_context *ctx, int layer, const float *q, int32_t n, float *out) {
    const int32_t n_kv = ctx->model->info.n_head_kv;
    const int nth = thread_pool_size(ctx->pool);
    const att_bufs whole = {ctx->act.att_q, ctx->act.att_scores, ctx->act.att_o, &ctx->scratch};
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

/* A layer with its own geometry (layer_weights.geometry: gemma4's head sizes) runs as that model, on its view of
 * the cache; the buffers are sized for the model's, which is the largest. */
tr_status attention(tr_context *ctx, int layer, const float *q, int32_t n, float *out) {
    const tr_model *m = ctx->model, *g = layer_geometry(m, layer);
    if (g == m) return attention_run(ctx, layer, q, n, out);
    const kv_cache saved = ctx->kv;
    kv_layer_view(m, &saved, layer, &ctx->kv);
    ctx->model = g;
    const tr_status st = attention_run(ctx, layer, q, n, out);
    ctx->model = m;
    ctx->kv = saved;
    return st;
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
