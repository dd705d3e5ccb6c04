/* forward_multi.c — several sequences in one forward pass, for the server: the rows of every sequence go through
 * each matrix product together (weights read once per pass for all of them), while RoPE positions, the KV store
 * and attention are per sequence, each on its own cache. Attention reuses attention.c through a context "view"
 * that borrows the engine's pool, buffers and scratch and the sequence's cache and n_past.
 *
 * Per-sequence KV caches (kv_seq) grow by doubling (a relayout copy, amortized O(1) per token) instead of holding
 * a full context from the start: a server with many short sessions then spends memory on the positions they use.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/multi.h"
#include "model/qwen35.h"

#define KV_MIN_CAPACITY 64

struct multi_engine {
    tr_context view;     /* model, pool, scratch, act of the engine; kv and n_past set per sequence */
    int32_t max_rows, max_ctx;
    int32_t *row_pos;    /* [max_rows] position of each row */
    float *last_hidden;  /* [max_rows][n_embd] normed last rows for the output product */
};

/* ---------------------------------------------------------------- per-sequence KV caches */

size_t kv_seq_bytes_for(const tr_model *m, int32_t n_ctx) {
    kv_cache kv;
    if (kv_cache_layout(m, m->kv_type, n_ctx, &kv) != TR_OK) return 0; /* the model's type was checked at load */
    return 2 * (size_t)n_kv_layers(m) * kv.layer_bytes + (size_t)n_ctx * sizeof(int32_t) + deltanet_state_bytes(m);
}

size_t kv_seq_bytes(const kv_seq *s) { return s ? kv_seq_bytes_for(s->model, s->kv.n_ctx) : 0; }

static void free_layers(const tr_model *m, kv_cache *kv) {
    for (int il = 0; kv->k && il < m->info.n_layer; il++) free(kv->k[il]);
    for (int il = 0; kv->v && il < m->info.n_layer; il++) free(kv->v[il]);
    free(kv->k);
    free(kv->v);
    kv->k = kv->v = NULL;
}

static tr_status alloc_layers(const tr_model *m, int32_t n_ctx, kv_cache *kv) {
    tr_status st = kv_cache_layout(m, m->kv_type, n_ctx, kv);
    if (st != TR_OK) return st;
    kv->k = calloc((size_t)m->info.n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)m->info.n_layer, sizeof *kv->v);
    if (!kv->k || !kv->v) goto fail;
    for (int il = 0; il < m->info.n_layer; il++)
        if (layer_has_kv(m, il) && (!(kv->k[il] = malloc(kv->layer_bytes)) || !(kv->v[il] = malloc(kv->layer_bytes))))
            goto fail;
    return TR_OK;
fail:
    free_layers(m, kv);
    return tr_fail(TR_ERR_NOMEM, "out of memory for a KV cache of %d positions", n_ctx);
}

int32_t kv_seq_capacity_for(const kv_seq *s, int32_t n) {
    if (n > s->max_ctx) return 0;
    int32_t cap = s->kv.n_ctx > 0 ? s->kv.n_ctx : KV_MIN_CAPACITY;
    while (cap < n) cap = cap > s->max_ctx / 2 ? s->max_ctx : cap * 2;
    return cap < s->max_ctx ? cap : s->max_ctx;
}

tr_status kv_seq_create(const tr_model *m, int32_t initial_ctx, int32_t max_ctx, kv_seq **out) {
    if (!m || !out || max_ctx <= 0) return tr_fail(TR_ERR_ARG, "kv_seq_create: bad arguments");
    kv_seq *s = calloc(1, sizeof *s);
    if (!s) return tr_fail(TR_ERR_NOMEM, "out of memory");
    s->model = m;
    s->max_ctx = max_ctx;
    const int32_t cap = kv_seq_capacity_for(s, initial_ctx > 0 ? initial_ctx : 1);
    tr_status st = alloc_layers(m, cap > 0 ? cap : max_ctx, &s->kv);
    if (st == TR_OK && !(s->tokens = malloc((size_t)s->kv.n_ctx * sizeof *s->tokens)))
        st = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (st == TR_OK && m->q35) st = deltanet_state_create(m, &s->dn); /* qwen35: the recurrent state */
    if (st != TR_OK) {
        kv_seq_free(s);
        return st;
    }
    *out = s;
    return TR_OK;
}

void kv_seq_free(kv_seq *s) {
    if (!s) return;
    free_layers(s->model, &s->kv);
    deltanet_state_free(s->dn);
    free(s->tokens);
    free(s);
}

tr_status kv_seq_reserve(kv_seq *s, int32_t n) {
    if (n <= s->kv.n_ctx) return TR_OK;
    const int32_t cap = kv_seq_capacity_for(s, n);
    if (cap == 0) return tr_fail(TR_ERR_RANGE, "%d positions exceed the context length %d", n, s->max_ctx);
    const tr_model *m = s->model;
    const int32_t hd = m->info.head_dim, n_kv = m->info.n_head_kv;
    kv_cache nk = {0};
    tr_status st = alloc_layers(m, cap, &nk);
    if (st != TR_OK) return st;
    int32_t *tokens = realloc(s->tokens, (size_t)cap * sizeof *tokens);
    if (!tokens) {
        free_layers(m, &nk);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    s->tokens = tokens;
    for (int il = 0; il < m->info.n_layer; il++)
        for (int32_t g = 0; g < n_kv && layer_has_kv(m, il); g++) {
            memcpy(nk.k[il] + kv_head_offset_k(&nk, g, 0, hd), s->kv.k[il] + kv_head_offset_k(&s->kv, g, 0, hd),
                   (size_t)s->n_past * nk.row_bytes);
            if (nk.type == TR_KV_Q8_0) { /* V by position, like K */
                memcpy(nk.v[il] + kv_head_offset_v(&nk, g, 0, 0, hd), s->kv.v[il] + kv_head_offset_v(&s->kv, g, 0, 0, hd),
                       (size_t)s->n_past * nk.row_bytes);
                continue;
            }
            for (int32_t d = 0; d < hd; d++)
                memcpy(nk.v[il] + kv_head_offset_v(&nk, g, d, 0, hd), s->kv.v[il] + kv_head_offset_v(&s->kv, g, d, 0, hd),
                       (size_t)s->n_past * nk.elt);
        }
    free_layers(m, &s->kv);
    s->kv = nk;
    return TR_OK;
}

void kv_seq_truncate(kv_seq *s, int32_t n_past) {
    if (n_past >= 0 && n_past < s->n_past) s->n_past = n_past;
    if (s->dn && n_past >= 0) deltanet_truncate(s->dn, s->n_past); /* qwen35: a checkpoint, the rest replayed */
}

/* ---------------------------------------------------------------- engine */

static void free_acts(activations *A) {
    float *bufs[] = {A->x, A->xb, A->q, A->k, A->v, A->att, A->gate, A->up, A->rope_cos, A->rope_sin, A->att_q};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    attention_scratch_free(A);
    memset(A, 0, sizeof *A);
}

void multi_engine_free(multi_engine *e) {
    if (!e) return;
    free_acts(&e->view.act);
    qwen35_context_free(&e->view);
    matmul_scratch_free(&e->view.scratch);
    thread_pool_free(e->view.pool);
    free(e->row_pos);
    free(e->last_hidden);
    free(e);
}

int32_t multi_engine_max_rows(const multi_engine *e) { return e ? e->max_rows : 0; }

thread_pool *multi_engine_pool(multi_engine *e) { return e->view.pool; }

tr_status multi_engine_create(const tr_model *m, int32_t n_threads, int32_t max_rows, int32_t max_ctx,
                              multi_engine **out) {
    if (!m || !out || max_rows <= 0 || max_ctx <= 0 || n_threads < 0 || n_threads > 512)
        return tr_fail(TR_ERR_ARG, "multi_engine_create: bad arguments");
    multi_engine *e = calloc(1, sizeof *e);
    if (!e) return tr_fail(TR_ERR_NOMEM, "out of memory");
    e->max_rows = max_rows;
    e->max_ctx = max_ctx;
    tr_context *v = &e->view;
    v->model = m;
    v->params = tr_context_default_params();
    v->params.n_threads = n_threads > 0 ? n_threads : tr_physical_cores();
    v->params.n_batch = max_rows;
    v->params.n_ctx = max_ctx;
    activations *A = &v->act;
    const size_t cap = (size_t)max_rows;
    A->cap = max_rows;
    A->x = malloc(cap * (size_t)m->info.n_embd * sizeof(float));
    A->xb = malloc(cap * (size_t)m->info.n_embd * sizeof(float));
    A->q = malloc(cap * (size_t)m->q_dim * sizeof(float));
    A->att = malloc(cap * (size_t)m->q_dim * sizeof(float));
    A->k = malloc(cap * (size_t)m->kv_dim * sizeof(float));
    A->v = malloc(cap * (size_t)m->kv_dim * sizeof(float));
    A->gate = malloc(cap * (size_t)m->info.n_ff * sizeof(float));
    A->up = malloc(cap * (size_t)m->info.n_ff * sizeof(float));
    A->rope_cos = malloc((rope_table_floats(m, max_rows) + cap) * sizeof(float));
    A->rope_sin = malloc((rope_table_floats(m, max_rows) + cap) * sizeof(float));
    A->att_q = malloc(attention_scratch_floats(m, max_ctx) * sizeof(float));
    if (A->att_q) attention_blocks(m, max_ctx, A->att_q, &A->att_scores, &A->att_o);
    e->row_pos = malloc(cap * sizeof *e->row_pos);
    e->last_hidden = malloc(cap * (size_t)m->info.n_embd * sizeof(float));
    v->pool = thread_pool_create(v->params.n_threads);
    const bool scratch_ok = attention_scratch_alloc(A, v->params.n_threads) == TR_OK &&
                            (!m->q35 || qwen35_context_init(v, max_rows, false) == TR_OK);
    if (!A->x || !A->xb || !A->q || !A->att || !A->k || !A->v || !A->gate || !A->up || !A->rope_cos ||
        !A->rope_sin || !A->att_q || !scratch_ok || !e->row_pos || !e->last_hidden || !v->pool) {
        multi_engine_free(e);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the batch engine (%d rows)", max_rows);
    }
    *out = e;
    return TR_OK;
}

/* ---------------------------------------------------------------- the pass */

static void head_norm(float *rows, const float *w, int32_t n, int32_t n_heads, int32_t hd, float eps) {
    if (!w) return;
    for (int64_t i = 0; i < (int64_t)n * n_heads; i++) rms_norm(rows + i * hd, rows + i * hd, w, hd, eps);
}

/* The row-wise steps of a layer, shared among the threads by rows (each row's arithmetic is what one thread would
 * do, so the result is the same): the norm before attention; each row's bias, head norms, RoPE and KV store; the
 * residual add with the norm before the FFN; the last residual add. */
typedef enum { ROWS_ATTN_NORM, ROWS_QKV, ROWS_RESID_FFN_NORM, ROWS_RESID } rows_step;

typedef struct rows_job {
    multi_engine *e;
    int il;
    rows_step step;
    kv_seq *const *seqs;
    const int32_t *n_tokens;
    int32_t n_seq, n;
} rows_job;

static void qkv_row(multi_engine *e, int il, kv_seq *seq, int32_t t) {
    const tr_model *m = e->view.model;
    const layer_weights *L = &m->layers[il];
    activations *A = &e->view.act;
    const int32_t hd = m->info.head_dim, half = m->rope_dim / 2;
    const float eps = m->info.norm_eps;
    float *q = A->q + (int64_t)t * m->q_dim, *k = A->k + (int64_t)t * m->kv_dim, *v = A->v + (int64_t)t * m->kv_dim;
    if (L->bq) add_vec(q, L->bq, m->q_dim);
    if (L->bk) add_vec(k, L->bk, m->kv_dim);
    if (L->bv) add_vec(v, L->bv, m->kv_dim);
    head_norm(q, L->q_norm, 1, m->info.n_head, hd, eps);
    head_norm(k, L->k_norm, 1, m->info.n_head_kv, hd, eps);
    const int64_t rope_off = L->window ? (int64_t)A->cap * half : 0; /* gemma3: sliding-window layers' table */
    const float *c = A->rope_cos + rope_off + (int64_t)t * half, *sn = A->rope_sin + rope_off + (int64_t)t * half;
    rope_apply(m, q, m->info.n_head, c, sn);
    rope_apply(m, k, m->info.n_head_kv, c, sn);
    if (m->q_scale != 1.0f)
        for (int32_t i = 0; i < m->q_dim; i++) q[i] *= m->q_scale;
    kv_store(&seq->kv, il, e->row_pos[t], k, v, m->info.n_head_kv, hd);
}

static void rows_task(void *arg, int ith, int nth) {
    const rows_job *j = arg;
    const tr_model *m = j->e->view.model;
    const layer_weights *L = &m->layers[j->il];
    activations *A = &j->e->view.act;
    const int32_t dim = m->info.n_embd;
    const float eps = m->info.norm_eps;
    const int32_t t0 = (int32_t)((int64_t)j->n * ith / nth), t1 = (int32_t)((int64_t)j->n * (ith + 1) / nth);
    int32_t s = 0, seq_end = j->n_tokens[0]; /* the sequence of row t */
    for (int32_t t = t0; t < t1; t++) {
        while (t >= seq_end) seq_end += j->n_tokens[++s];
        float *x = A->x + (int64_t)t * dim, *xb = A->xb + (int64_t)t * dim;
        switch (j->step) {
        case ROWS_ATTN_NORM: rms_norm(xb, x, L->attn_norm, dim, eps); break;
        case ROWS_QKV: qkv_row(j->e, j->il, j->seqs[s], t); break;
        case ROWS_RESID_FFN_NORM:
            add_vec(x, xb, dim);
            rms_norm(xb, x, L->ffn_norm, dim, eps);
            break;
        case ROWS_RESID: add_vec(x, xb, dim); break;
        }
    }
}

static void run_rows(multi_engine *e, int il, rows_step step, kv_seq *const *seqs, const int32_t *n_tokens,
                     int32_t n_seq, int32_t n) {
    rows_job j = {e, il, step, seqs, n_tokens, n_seq, n};
    run_parallel(&e->view, rows_task, &j, (int64_t)n * e->view.model->info.n_embd * 4);
}

static tr_status layer_multi(multi_engine *e, int il, kv_seq *const *seqs, const int32_t *n_tokens, int32_t n_seq,
                             int32_t n) {
    tr_context *ctx = &e->view;
    const tr_model *m = ctx->model;
    const layer_weights *L = &m->layers[il];
    activations *A = &ctx->act;
    const int32_t dim = m->info.n_embd;
    tr_status st;

    run_rows(e, il, ROWS_ATTN_NORM, seqs, n_tokens, n_seq, n);
    /* Q, K and V read the same input: one hand-off to the threads for the three products. */
    const weight_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {A->q, A->k, A->v};
    const int64_t qkv_ld[3] = {m->q_dim, m->kv_dim, m->kv_dim};
    if ((st = matmul_multi(ctx->pool, qkv, 3, A->xb, n, qkv_out, qkv_ld, &ctx->scratch)) != TR_OK) return st;
    run_rows(e, il, ROWS_QKV, seqs, n_tokens, n_seq, n); /* every sequence's rows in its cache before attention */
    for (int32_t s = 0, row = 0; s < n_seq; row += n_tokens[s], s++) {
        ctx->kv = seqs[s]->kv;
        ctx->n_past = seqs[s]->n_past;
        st = attention(ctx, il, A->q + (int64_t)row * m->q_dim, n_tokens[s], A->att + (int64_t)row * m->q_dim);
        if (st != TR_OK) return st;
    }
    if ((st = matmul(ctx->pool, &L->wo, A->att, n, A->xb, dim, &ctx->scratch)) != TR_OK) return st;
    if (L->attn_post_norm) gemma3_post_norm(m, A->xb, L->attn_post_norm, n);
    run_rows(e, il, ROWS_RESID_FFN_NORM, seqs, n_tokens, n_seq, n);
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
    run_rows(e, il, ROWS_RESID, seqs, n_tokens, n_seq, n);
    return TR_OK;
}

tr_status multi_forward(multi_engine *e, kv_seq *const *seqs, const int32_t *const *tokens, const int32_t *n_tokens,
                        int32_t n_seq, float *logits_out) {
    if (!e || !seqs || !tokens || !n_tokens || n_seq <= 0 || !logits_out)
        return tr_fail(TR_ERR_ARG, "multi_forward: bad arguments");
    tr_context *ctx = &e->view;
    const tr_model *m = ctx->model;
    if (m->q35) return qwen35_multi_forward(ctx, seqs, tokens, n_tokens, n_seq, logits_out);
    activations *A = &ctx->act;
    const int32_t dim = m->info.n_embd, half = m->rope_dim / 2;
    int32_t n = 0;
    for (int32_t s = 0; s < n_seq; s++) {
        if (n_tokens[s] <= 0 || n_tokens[s] > e->max_rows - n ||
            seqs[s]->n_past + n_tokens[s] > seqs[s]->kv.n_ctx || seqs[s]->kv.n_ctx > e->max_ctx)
            return tr_fail(TR_ERR_RANGE, "multi_forward: sequence %d does not fit the pass", s);
        for (int32_t t = 0; t < n_tokens[s]; t++) {
            const int32_t id = tokens[s][t];
            if (id < 0 || id >= m->info.n_vocab) return tr_fail(TR_ERR_RANGE, "token id %d outside the vocabulary", id);
            tr_status st = weight_dequantize_row(&m->tok_embd, id, A->x + (int64_t)(n + t) * dim);
            if (st != TR_OK) return st;
            if (m->embd_scale != 1.0f)
                for (int32_t i = 0; i < dim; i++) A->x[(int64_t)(n + t) * dim + i] *= m->embd_scale;
            e->row_pos[n + t] = seqs[s]->n_past + t;
        }
        rope_tables(m, seqs[s]->n_past, n_tokens[s], A->rope_cos + (int64_t)n * half, A->rope_sin + (int64_t)n * half);
        if (m->rope_swa)
            gemma3_rope_tables_swa(m, seqs[s]->n_past, n_tokens[s], A->rope_cos + (int64_t)(A->cap + n) * half,
                                   A->rope_sin + (int64_t)(A->cap + n) * half);
        n += n_tokens[s];
    }
    tr_status st = TR_OK;
    for (int il = 0; il < m->info.n_layer && st == TR_OK; il++) st = layer_multi(e, il, seqs, n_tokens, n_seq, n);
    if (st != TR_OK) return st;
    for (int32_t s = 0, row = 0; s < n_seq; row += n_tokens[s], s++) {
        const int32_t last = row + n_tokens[s] - 1;
        rms_norm(e->last_hidden + (int64_t)s * dim, A->x + (int64_t)last * dim, m->output_norm, dim, m->info.norm_eps);
    }
    st = matmul(ctx->pool, &m->output, e->last_hidden, n_seq, logits_out, m->info.n_vocab, &ctx->scratch);
    if (st != TR_OK) return st;
    gemma3_softcap(m, logits_out, n_seq);
    for (int32_t s = 0; s < n_seq; s++) {
        memcpy(seqs[s]->tokens + seqs[s]->n_past, tokens[s], (size_t)n_tokens[s] * sizeof(int32_t));
        seqs[s]->n_past += n_tokens[s];
    }
    return TR_OK;
}
