/* context.c — a model's evaluation state: KV cache with explicit positions (append, truncate, clear), the thread
 * pool, activation buffers, and the logits / hidden states of the last evaluation.
 *
 * K and V are stored per layer as rows of n_head_kv × head_dim elements, one row per position, in F16 by default
 * (as llama.cpp), F32, or Q8_0 (blocks along head_dim, quantized as each position is stored; see kernels/kv_q8.h).
 * Truncation only moves n_past; the next evaluation overwrites the rows past it. An evaluation that fails leaves
 * n_past where it was.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/fp16.h"
#include "kernels/kv_q8.h"
#include "model/model_internal.h"
#include "model/arch.h"

/* Below this many multiply-adds a job runs on the calling thread: waking a sleeping worker costs tens of
 * microseconds, more than the job itself (tiny models would be dominated by dispatch). */
#define INLINE_WORK 32768

void run_parallel(tr_context *ctx, pool_task fn, void *arg, int64_t work) {
    if (work < INLINE_WORK || thread_pool_size(ctx->pool) <= 1) fn(arg, 0, 1);
    else thread_pool_run(ctx->pool, fn, arg);
}

tr_context_params tr_context_default_params(void) {
    tr_context_params p = {.n_ctx = 0, .n_threads = 0, .n_batch = 256, .kv_type = TR_KV_DEFAULT};
    return p;
}

/* ---------------------------------------------------------------- KV storage */

const char *tr_kv_type_name(tr_kv_type type) {
    switch (type) {
    case TR_KV_DEFAULT: return "default";
    case TR_KV_F16: return "f16";
    case TR_KV_F32: return "f32";
    case TR_KV_Q8_0: return "q8_0";
    }
    return NULL;
}

tr_kv_type kv_type_resolve(const tr_model *m, tr_kv_type type) { return type == TR_KV_DEFAULT ? m->kv_type : type; }

tr_status kv_cache_layout(const tr_model *m, tr_kv_type type, int32_t n_ctx, kv_cache *kv) {
    const int32_t hd = m->info.head_dim;
    kv->type = type;
    kv->n_ctx = n_ctx;
    kv->q8_block = kv->rot_k = kv->rot_v = 0;
    switch (type) {
    case TR_KV_F16:
    case TR_KV_F32:
        kv->elt = type == TR_KV_F32 ? 4 : 2;
        kv->row_bytes = (size_t)hd * kv->elt;
        break;
    case TR_KV_Q8_0:
        /* A position's row must be whole blocks, or truncating would cut one. */
        if (!(kv->q8_block = kvq8_block_for(hd)))
            return tr_fail(TR_ERR_UNSUPPORTED, "a Q8_0 KV cache needs head_dim to be a multiple of 8 (this model's "
                           "is %d); use f16", hd);
        kv->elt = 0;
        kv->row_bytes = kvq8_row_bytes(hd, kv->q8_block);
        kv->rot_k = kvq8_rot_k(hd);
        kv->rot_v = kvq8_rot_v(hd);
        break;
    default: return tr_fail(TR_ERR_ARG, "unknown KV cache type %d (f16, f32 or q8_0)", (int)type);
    }
    kv->layer_bytes = kv->row_bytes * (size_t)m->info.n_head_kv * (size_t)n_ctx;
    return TR_OK;
}

void kv_layer_view(const tr_model *m, const kv_cache *kv, int il, kv_cache *out) {
    const tr_model *g = layer_geometry(m, il);
    *out = *kv;
    if (g == m) return;
    (void)kv_cache_layout(g, kv->type, kv->n_ctx, out); /* the family checked the type on it at load */
    out->k = kv->k;
    out->v = kv->v;
}

size_t kv_layer_bytes(const tr_model *m, const kv_cache *kv, int il) {
    kv_cache view;
    kv_layer_view(m, kv, il, &view);
    return view.layer_bytes;
}

size_t kv_cache_bytes(const tr_model *m, const kv_cache *kv) {
    size_t bytes = 0;
    for (int il = 0; il < m->info.n_layer; il++)
        if (layer_has_kv(m, il)) bytes += 2 * kv_layer_bytes(m, kv, il);
    return bytes;
}

void kv_store(const kv_cache *kv, int layer, int32_t pos, float *k, float *v, int32_t n_heads, int32_t hd) {
    uint8_t *K = kv->k[layer], *V = kv->v[layer];
    for (int32_t g = 0; g < n_heads; g++) {
        float *kg = k + (size_t)g * hd, *vg = v + (size_t)g * hd;
        if (kv->type == TR_KV_Q8_0) {
            if (kv->rot_k) kvq8_rotate(kg, hd, kv->rot_k);
            if (kv->rot_v) kvq8_rotate(vg, hd, kv->rot_v);
            kvq8_quantize_row(kg, K + kv_head_offset_k(kv, g, pos, hd), hd, kv->q8_block);
            kvq8_quantize_row(vg, V + kv_head_offset_v(kv, g, 0, pos, hd), hd, kv->q8_block);
            continue;
        }
        for (int32_t d = 0; d < hd; d++) {
            uint8_t *kd = K + kv_head_offset_k(kv, g, pos, hd) + (size_t)d * kv->elt;
            uint8_t *vd = V + kv_head_offset_v(kv, g, d, pos, hd);
            if (kv->type == TR_KV_F32) {
                memcpy(kd, &kg[d], 4);
                memcpy(vd, &vg[d], 4);
            } else {
                const uint16_t kh = fp32_to_fp16(kg[d]), vh = fp32_to_fp16(vg[d]);
                memcpy(kd, &kh, 2);
                memcpy(vd, &vh, 2);
            }
        }
    }
}

/* ---------------------------------------------------------------- the context */

static void free_activations(activations *A) {
    float *bufs[] = {A->x, A->xb, A->q, A->k, A->v, A->att, A->gate, A->up, A->rope_cos, A->rope_sin, A->att_q};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    attention_scratch_free(A);
    memset(A, 0, sizeof *A);
}

static tr_status alloc_activations(tr_context *ctx) {
    const tr_model *m = ctx->model;
    activations *A = &ctx->act;
    const size_t cap = (size_t)ctx->params.n_batch;
    A->cap = ctx->params.n_batch;
    A->x = malloc(cap * (size_t)m->info.n_embd * sizeof(float));
    A->xb = malloc(cap * (size_t)m->info.n_embd * sizeof(float));
    A->q = malloc(cap * (size_t)m->q_dim * sizeof(float));
    A->att = malloc(cap * (size_t)m->q_dim * sizeof(float));
    A->k = malloc(cap * (size_t)m->kv_dim * sizeof(float));
    A->v = malloc(cap * (size_t)m->kv_dim * sizeof(float));
    A->gate = malloc(cap * (size_t)m->info.n_ff * sizeof(float));
    A->up = malloc(cap * (size_t)m->info.n_ff * sizeof(float));
    A->rope_cos = malloc(rope_table_floats(m, A->cap) * sizeof(float));
    A->rope_sin = malloc(rope_table_floats(m, A->cap) * sizeof(float));
    /* One allocation for attention's query, score and output blocks (see attention_blocks). */
    A->att_q = malloc(attention_scratch_floats(m, ctx->kv.n_ctx) * sizeof(float));
    if (A->att_q) attention_blocks(m, ctx->kv.n_ctx, A->att_q, &A->att_scores, &A->att_o);
    if (!A->x || !A->xb || !A->q || !A->att || !A->k || !A->v || !A->gate || !A->up || !A->rope_cos ||
        !A->rope_sin || !A->att_q || attention_scratch_alloc(A, ctx->params.n_threads) != TR_OK)
        return tr_fail(TR_ERR_NOMEM, "out of memory for activations (batch %d)", A->cap);
    return TR_OK;
}

static tr_status alloc_kv(tr_context *ctx) {
    const tr_model *m = ctx->model;
    kv_cache *kv = &ctx->kv;
    tr_status st = kv_cache_layout(m, ctx->params.kv_type, ctx->params.n_ctx, kv);
    if (st != TR_OK) return st;
    kv->k = calloc((size_t)m->info.n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)m->info.n_layer, sizeof *kv->v);
    if (!kv->k || !kv->v) return tr_fail(TR_ERR_NOMEM, "out of memory for the KV cache");
    for (int il = 0; il < m->info.n_layer; il++) {
        if (!layer_has_kv(m, il)) continue; /* e.g. qwen35's recurrent layers */
        kv->k[il] = malloc(kv_layer_bytes(m, kv, il));
        kv->v[il] = malloc(kv_layer_bytes(m, kv, il));
        if (!kv->k[il] || !kv->v[il])
            return tr_fail(TR_ERR_NOMEM, "out of memory for the KV cache (%d positions)", kv->n_ctx);
    }
    return TR_OK;
}

tr_status tr_context_create(const tr_model *model, const tr_context_params *params, tr_context **out) {
    if (!model || !out) return tr_fail(TR_ERR_ARG, "tr_context_create: NULL argument");
    *out = NULL;
    tr_context_params p = params ? *params : tr_context_default_params();
    if (p.n_ctx < 0 || p.n_threads < 0 || p.n_batch < 0 || p.n_threads > 512)
        return tr_fail(TR_ERR_ARG, "context parameters must not be negative (n_ctx %d, threads %d, batch %d)",
                       p.n_ctx, p.n_threads, p.n_batch);
    if (p.n_ctx == 0) p.n_ctx = model->info.n_ctx_train < 4096 ? model->info.n_ctx_train : 4096;
    if (p.n_threads == 0) p.n_threads = tr_physical_cores();
    if (p.n_batch == 0) p.n_batch = 256;
    if (p.n_batch > p.n_ctx) p.n_batch = p.n_ctx;
    p.kv_type = kv_type_resolve(model, p.kv_type);
    kv_cache probe;
    tr_status st = kv_cache_layout(model, p.kv_type, p.n_ctx, &probe); /* refuse a bad type before allocating */
    if (st != TR_OK) return st;
    tr_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return tr_fail(TR_ERR_NOMEM, "out of memory");
    ctx->model = model;
    ctx->params = p;
    if (!(ctx->pool = thread_pool_create(p.n_threads))) st = TR_ERR_NOMEM;
    if (st == TR_OK) st = alloc_kv(ctx);
    if (st == TR_OK) st = alloc_activations(ctx);
    if (st == TR_OK && model->arch->buffers_init) st = model->arch->buffers_init(ctx, ctx->act.cap);
    if (st == TR_OK) st = seq_state_create(model, &ctx->state); /* the family's state beyond the KV cache */
    if (st == TR_OK && !(ctx->tokens = malloc((size_t)p.n_ctx * sizeof *ctx->tokens)))
        st = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (st != TR_OK) {
        tr_context_free(ctx);
        return st;
    }
    *out = ctx;
    return TR_OK;
}

void tr_context_free(tr_context *ctx) {
    if (!ctx) return;
    if (ctx->kv.k)
        for (int il = 0; il < ctx->model->info.n_layer; il++) free(ctx->kv.k[il]);
    if (ctx->kv.v)
        for (int il = 0; il < ctx->model->info.n_layer; il++) free(ctx->kv.v[il]);
    free(ctx->kv.k);
    free(ctx->kv.v);
    free_activations(&ctx->act);
    if (ctx->model->arch->buffers_free) ctx->model->arch->buffers_free(ctx);
    seq_state_free(ctx->state);
    matmul_scratch_free(&ctx->scratch);
    thread_pool_free(ctx->pool);
    free(ctx->tokens);
    free(ctx->hidden);
    free(ctx->logits);
    free(ctx);
}

static tr_status reserve(float **buf, size_t *cap, size_t n) {
    if (n <= *cap) return TR_OK;
    float *p = realloc(*buf, n * sizeof *p);
    if (!p) return tr_fail(TR_ERR_NOMEM, "out of memory for %zu output floats", n);
    *buf = p;
    *cap = n;
    return TR_OK;
}

tr_status tr_context_eval(tr_context *ctx, const int32_t *tokens, int32_t n, tr_eval_flags flags) {
    if (!ctx || !tokens || n <= 0) return tr_fail(TR_ERR_ARG, "tr_context_eval: no tokens");
    if (flags != TR_EVAL_LOGITS_LAST && flags != TR_EVAL_LOGITS_ALL && flags != TR_EVAL_LOGITS_NONE)
        return tr_fail(TR_ERR_ARG, "tr_context_eval: unknown flags %d", (int)flags);
    const tr_model *m = ctx->model;
    const int32_t n_vocab = m->info.n_vocab, dim = m->info.n_embd;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return tr_fail(TR_ERR_RANGE, "token id %d at index %d is outside the vocabulary (0..%d)", tokens[i], i,
                           n_vocab - 1);
    if (n > ctx->kv.n_ctx - ctx->n_past)
        return tr_fail(TR_ERR_RANGE, "context full: %d tokens cached + %d new > context length %d", ctx->n_past, n,
                       ctx->kv.n_ctx);
    const size_t n_logit_rows = flags == TR_EVAL_LOGITS_ALL ? (size_t)n : flags == TR_EVAL_LOGITS_LAST ? 1 : 0;
    tr_status st = reserve(&ctx->hidden, &ctx->hidden_cap, (size_t)n * dim);
    if (st == TR_OK) st = reserve(&ctx->logits, &ctx->logits_cap, n_logit_rows * (size_t)n_vocab);
    if (st != TR_OK) return st;

    const int32_t start = ctx->n_past;
    ctx->n_last = 0;
    ctx->n_logits = 0;
    for (int32_t s = 0; s < n && st == TR_OK; s += ctx->act.cap) {
        const int32_t len = n - s < ctx->act.cap ? n - s : ctx->act.cap;
        const bool last_chunk = s + len == n;
        float *logits_out = NULL;
        int32_t logits_from = len;
        if (flags == TR_EVAL_LOGITS_ALL) {
            logits_out = ctx->logits + (size_t)s * n_vocab;
            logits_from = 0;
        } else if (flags == TR_EVAL_LOGITS_LAST && last_chunk) {
            logits_out = ctx->logits;
            logits_from = len - 1;
        }
        st = forward_chunk(ctx, tokens + s, len, ctx->hidden + (size_t)s * dim, logits_from, logits_out);
        if (st == TR_OK) {
            memcpy(ctx->tokens + ctx->n_past, tokens + s, (size_t)len * sizeof *tokens);
            ctx->n_past += len;
            ctx->n_evaluated += len;
        }
    }
    if (st != TR_OK) {
        ctx->n_past = start;
        return st;
    }
    ctx->n_last = n;
    ctx->n_logits = (int32_t)n_logit_rows;
    ctx->logits_first = flags == TR_EVAL_LOGITS_ALL ? 0 : n - 1;
    return TR_OK;
}

const float *tr_context_logits(const tr_context *ctx, int32_t i) {
    if (!ctx || ctx->n_last == 0) return NULL;
    if (i == -1) i = ctx->n_last - 1;
    if (i < ctx->logits_first || i >= ctx->logits_first + ctx->n_logits) return NULL;
    return ctx->logits + (size_t)(i - ctx->logits_first) * ctx->model->info.n_vocab;
}

const float *tr_context_hidden(const tr_context *ctx, int32_t i) {
    if (!ctx || ctx->n_last == 0) return NULL;
    if (i == -1) i = ctx->n_last - 1;
    if (i < 0 || i >= ctx->n_last) return NULL;
    return ctx->hidden + (size_t)i * ctx->model->info.n_embd;
}

tr_status tr_context_truncate(tr_context *ctx, int32_t n_past) {
    if (!ctx) return tr_fail(TR_ERR_ARG, "tr_context_truncate: NULL context");
    if (n_past < 0 || n_past > ctx->n_past)
        return tr_fail(TR_ERR_RANGE, "cannot truncate to %d: the cache holds %d tokens", n_past, ctx->n_past);
    ctx->n_past = n_past;
    if (ctx->state) seq_state_truncate(ctx->state, n_past); /* back to a checkpoint, the rest replayed */
    ctx->n_last = 0; /* outputs of the last eval no longer describe the cache */
    ctx->n_logits = 0;
    return TR_OK;
}

void tr_context_clear(tr_context *ctx) {
    if (ctx) tr_context_truncate(ctx, 0);
}

const tr_model *tr_context_model(const tr_context *ctx) { return ctx ? ctx->model : NULL; }
int32_t tr_context_n_past(const tr_context *ctx) { return ctx ? ctx->n_past : 0; }
int32_t tr_context_n_ctx(const tr_context *ctx) { return ctx ? ctx->kv.n_ctx : 0; }
const int32_t *tr_context_tokens(const tr_context *ctx) { return ctx ? ctx->tokens : NULL; }
int64_t tr_context_n_evaluated(const tr_context *ctx) { return ctx ? ctx->n_evaluated : 0; }
int32_t tr_context_n_threads(const tr_context *ctx) { return ctx ? ctx->params.n_threads : 0; }
tr_kv_type tr_context_kv_type(const tr_context *ctx) { return ctx ? ctx->kv.type : TR_KV_DEFAULT; }
size_t tr_context_kv_bytes(const tr_context *ctx) {
    return ctx ? kv_cache_bytes(ctx->model, &ctx->kv) : 0;
}

const char *tr_kernels_isa(void) { return kernels_isa(); }
