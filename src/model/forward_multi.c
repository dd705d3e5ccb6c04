/* forward_multi.c — several sequences in one forward pass, for the server: the rows of every sequence go through
 * each matrix product together (weights read once per pass for all of them), while RoPE positions, the KV store,
 * attention and per-sequence state are per sequence ("spans", arch.h). The pass is forward.c's, with the family's
 * layers — the same body as one sequence's tr_context_eval — run through a context "view" that owns the engine's
 * pool, buffers and scratch.
 *
 * Per-sequence KV caches (kv_seq) grow by doubling (a relayout copy, amortized O(1) per token) instead of holding
 * a full context from the start: a server with many short sessions then spends memory on the positions they use.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/multi.h"
#include "model/forward.h"

#define KV_MIN_CAPACITY 64

struct multi_engine {
    tr_context view;     /* model, pool, scratch, act of the engine; kv and n_past set per sequence */
    int32_t max_rows, max_ctx;
    seq_span *spans;     /* [max_rows] the pass's sequences */
    float *last_hidden;  /* [max_rows][n_embd] normed last rows for the output product */
};

/* ---------------------------------------------------------------- per-sequence KV caches */

size_t kv_seq_bytes_for(const tr_model *m, int32_t n_ctx) {
    kv_cache kv;
    if (kv_cache_layout(m, m->kv_type, n_ctx, &kv) != TR_OK) return 0; /* the model's type was checked at load */
    kv.k = kv.v = NULL;
    return kv_cache_bytes(m, &kv) + (size_t)n_ctx * sizeof(int32_t) + seq_state_bytes(m);
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
        if (layer_has_kv(m, il) && (!(kv->k[il] = malloc(kv_layer_bytes(m, kv, il))) ||
                                    !(kv->v[il] = malloc(kv_layer_bytes(m, kv, il)))))
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
    if (st == TR_OK) st = seq_state_create(m, &s->state); /* the family's state beyond the KV cache, if any */
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
    seq_state_free(s->state);
    free(s->tokens);
    free(s);
}

tr_status kv_seq_reserve(kv_seq *s, int32_t n) {
    if (n <= s->kv.n_ctx) return TR_OK;
    const int32_t cap = kv_seq_capacity_for(s, n);
    if (cap == 0) return tr_fail(TR_ERR_RANGE, "%d positions exceed the context length %d", n, s->max_ctx);
    const tr_model *m = s->model;
    kv_cache nk = {0};
    tr_status st = alloc_layers(m, cap, &nk);
    if (st != TR_OK) return st;
    int32_t *tokens = realloc(s->tokens, (size_t)cap * sizeof *tokens);
    if (!tokens) {
        free_layers(m, &nk);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    s->tokens = tokens;
    for (int il = 0; il < m->info.n_layer; il++) {
        if (!layer_has_kv(m, il)) continue;
        const int32_t hd = layer_geometry(m, il)->info.head_dim, n_kv = layer_geometry(m, il)->info.n_head_kv;
        kv_cache to, from; /* the layer's own layout (its head size may not be the model's) */
        kv_layer_view(m, &nk, il, &to);
        kv_layer_view(m, &s->kv, il, &from);
        for (int32_t g = 0; g < n_kv; g++) {
            memcpy(to.k[il] + kv_head_offset_k(&to, g, 0, hd), from.k[il] + kv_head_offset_k(&from, g, 0, hd),
                   (size_t)s->n_past * to.row_bytes);
            if (to.type == TR_KV_Q8_0) { /* V by position, like K */
                memcpy(to.v[il] + kv_head_offset_v(&to, g, 0, 0, hd), from.v[il] + kv_head_offset_v(&from, g, 0, 0, hd),
                       (size_t)s->n_past * to.row_bytes);
                continue;
            }
            for (int32_t d = 0; d < hd; d++)
                memcpy(to.v[il] + kv_head_offset_v(&to, g, d, 0, hd), from.v[il] + kv_head_offset_v(&from, g, d, 0, hd),
                       (size_t)s->n_past * to.elt);
        }
    }
    free_layers(m, &s->kv);
    s->kv = nk;
    return TR_OK;
}

void kv_seq_truncate(kv_seq *s, int32_t n_past) {
    if (n_past >= 0 && n_past < s->n_past) s->n_past = n_past;
    if (s->state && n_past >= 0) seq_state_truncate(s->state, s->n_past); /* a checkpoint, the rest replayed */
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
    if (e->view.model->arch->buffers_free) e->view.model->arch->buffers_free(&e->view);
    matmul_scratch_free(&e->view.scratch);
    thread_pool_free(e->view.pool);
    free(e->spans);
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
    v->parallel_rows = true;
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
    e->spans = malloc(cap * sizeof *e->spans);
    e->last_hidden = malloc(cap * (size_t)m->info.n_embd * sizeof(float));
    v->pool = thread_pool_create(v->params.n_threads);
    const bool scratch_ok = attention_scratch_alloc(A, v->params.n_threads) == TR_OK &&
                            (!m->arch->buffers_init || m->arch->buffers_init(v, max_rows) == TR_OK);
    if (!A->x || !A->xb || !A->q || !A->att || !A->k || !A->v || !A->gate || !A->up || !A->rope_cos ||
        !A->rope_sin || !A->att_q || !scratch_ok || !e->spans || !e->last_hidden || !v->pool) {
        multi_engine_free(e);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the batch engine (%d rows)", max_rows);
    }
    *out = e;
    return TR_OK;
}

/* ---------------------------------------------------------------- the pass */

tr_status multi_forward(multi_engine *e, kv_seq *const *seqs, const int32_t *const *tokens, const int32_t *n_tokens,
                        int32_t n_seq, float *logits_out) {
    if (!e || !seqs || !tokens || !n_tokens || n_seq <= 0 || !logits_out)
        return tr_fail(TR_ERR_ARG, "multi_forward: bad arguments");
    tr_context *ctx = &e->view;
    const tr_model *m = ctx->model;
    const int32_t dim = m->info.n_embd;
    int32_t n = 0;
    for (int32_t s = 0; s < n_seq; s++) {
        if (n_tokens[s] <= 0 || n_tokens[s] > e->max_rows - n ||
            seqs[s]->n_past + n_tokens[s] > seqs[s]->kv.n_ctx || seqs[s]->kv.n_ctx > e->max_ctx)
            return tr_fail(TR_ERR_RANGE, "multi_forward: sequence %d does not fit the pass", s);
        for (int32_t t = 0; t < n_tokens[s]; t++)
            if (tokens[s][t] < 0 || tokens[s][t] >= m->info.n_vocab)
                return tr_fail(TR_ERR_RANGE, "token id %d outside the vocabulary", tokens[s][t]);
        n += n_tokens[s];
    }
    tr_status st = TR_OK;
    for (int32_t s = 0; s < n_seq && st == TR_OK; s++) /* states a rollback left behind catch up first */
        st = forward_replay(ctx, &seqs[s]->kv, seqs[s]->state, seqs[s]->tokens, seqs[s]->n_past);
    seq_span *sp = e->spans;
    n = 0;
    for (int32_t s = 0; s < n_seq && st == TR_OK; s++) {
        sp[s] = (seq_span){n, n_tokens[s], seqs[s]->n_past, &seqs[s]->kv, seqs[s]->state};
        st = forward_embed(ctx, tokens[s], n, n_tokens[s], seqs[s]->n_past);
        n += n_tokens[s];
    }
    if (st == TR_OK) st = forward_layers(ctx, n, sp, n_seq);
    for (int32_t s = 0; s < n_seq && st == TR_OK; s++)
        rms_norm(e->last_hidden + (int64_t)s * dim, ctx->act.x + (int64_t)(sp[s].row + sp[s].n - 1) * dim,
                 m->output_norm, dim, m->info.norm_eps);
    if (st == TR_OK) st = forward_logits(ctx, e->last_hidden, n_seq, logits_out);
    if (st != TR_OK) { /* no n_past moves: states restart and replay */
        for (int32_t s = 0; s < n_seq; s++)
            if (seqs[s]->state) seq_state_reset(seqs[s]->state);
        return st;
    }
    for (int32_t s = 0; s < n_seq; s++) {
        memcpy(seqs[s]->tokens + seqs[s]->n_past, tokens[s], (size_t)n_tokens[s] * sizeof(int32_t));
        seqs[s]->n_past += n_tokens[s];
    }
    return TR_OK;
}
