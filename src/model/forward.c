/* forward.c — the forward pass every family runs, for one sequence (forward_chunk: tr_context_eval) and for several
 * in one pass (the server's multi_forward): embeddings → the family's RoPE tables → its layers over the pass's rows
 * (arch_ops.layer; one body for both) → output norm (the router's hidden state) → logits → the family's logit step.
 * Every token of a pass goes through each matrix product together, so weights are read once per pass, not once per
 * token.
 *
 * A family with per-sequence state (seq_state.c) has it planned before the layers and committed after them (reset
 * when a pass fails); a sequence whose state lags behind its n_past (a rollback restored an older checkpoint) first
 * replays the tokens it kept, in chunks the buffers hold.
 */
#include <string.h>

#include "common/error.h"
#include "model/arch.h"
#include "model/forward.h"

tr_status forward_embed(tr_context *ctx, const int32_t *tokens, int32_t row, int32_t n, int32_t pos0) {
    const tr_model *m = ctx->model;
    activations *A = &ctx->act;
    const int32_t dim = m->info.n_embd;
    for (int32_t t = 0; t < n; t++) {
        float *x = A->x + (int64_t)(row + t) * dim;
        tr_status st = weight_dequantize_row(&m->tok_embd, tokens[t], x);
        if (st != TR_OK) return st;
        if (m->embd_scale != 1.0f)
            for (int32_t i = 0; i < dim; i++) x[i] *= m->embd_scale;
    }
    m->arch->rope_rows(m, A, row, n, pos0);
    return m->arch->embed_rows ? m->arch->embed_rows(ctx, tokens, row, n) : TR_OK;
}

tr_status forward_layers(tr_context *ctx, int32_t n, const seq_span *sp, int32_t n_sp) {
    const tr_model *m = ctx->model;
    tr_status st = TR_OK;
    for (int32_t s = 0; s < n_sp; s++)
        if (sp[s].state) seq_state_plan(sp[s].state, sp[s].n);
    for (int il = 0; il < m->info.n_layer && st == TR_OK; il++) st = m->arch->layer(ctx, il, n, sp, n_sp);
    for (int32_t s = 0; s < n_sp; s++) {
        if (!sp[s].state) continue;
        if (st == TR_OK) seq_state_commit(sp[s].state, sp[s].n);
        else seq_state_reset(sp[s].state);
    }
    return st;
}

tr_status forward_replay(tr_context *ctx, kv_cache *kv, seq_state *state, const int32_t *tokens, int32_t n_past) {
    while (state && state->pos < n_past) {
        const int32_t len = n_past - state->pos < ctx->act.cap ? n_past - state->pos : ctx->act.cap;
        seq_span sp = {0, len, state->pos, kv, state};
        tr_status st = forward_embed(ctx, tokens + state->pos, 0, len, state->pos);
        if (st == TR_OK) st = forward_layers(ctx, len, &sp, 1);
        if (st != TR_OK) return st;
    }
    return TR_OK;
}

typedef struct logits_post_job {
    const tr_model *m;
    float *logits;
    int64_t count;
} logits_post_job;

/* Thread ith's share of the logits, in whole 64-value pieces (the hook is elementwise, so any split gives the same
 * bits). */
static void logits_post_part(void *arg, int ith, int nth) {
    const logits_post_job *j = arg;
    const int64_t pieces = (j->count + 63) / 64, from = pieces * ith / nth * 64, to = pieces * (ith + 1) / nth * 64;
    if (from < j->count) j->m->arch->logits_post(j->m, j->logits + from, (to < j->count ? to : j->count) - from);
}

tr_status forward_logits(tr_context *ctx, const float *hidden, int32_t n, float *logits_out) {
    const tr_model *m = ctx->model;
    tr_status st = matmul(ctx->pool, &m->output, hidden, n, logits_out, m->info.n_vocab, &ctx->scratch);
    if (st == TR_OK && m->arch->logits_post) { /* a vocabulary of tanh is ~3 ms on one core at 262K (gemma4) */
        logits_post_job j = {m, logits_out, (int64_t)n * m->info.n_vocab};
        run_parallel(ctx, logits_post_part, &j, j.count * 8);
    }
    return st;
}

tr_status forward_chunk(tr_context *ctx, const int32_t *tokens, int32_t n, float *hidden_out, int32_t logits_from,
                        float *logits_out) {
    const tr_model *m = ctx->model;
    const int32_t dim = m->info.n_embd;
    seq_span sp = {0, n, ctx->n_past, &ctx->kv, ctx->state};
    tr_status st = forward_replay(ctx, &ctx->kv, ctx->state, ctx->tokens, ctx->n_past);
    if (st == TR_OK) st = forward_embed(ctx, tokens, 0, n, ctx->n_past);
    if (st == TR_OK) st = forward_layers(ctx, n, &sp, 1);
    if (st == TR_OK) {
        for (int32_t t = 0; t < n; t++)
            rms_norm(hidden_out + (int64_t)t * dim, ctx->act.x + (int64_t)t * dim, m->output_norm, dim,
                     m->info.norm_eps);
        if (logits_out && logits_from < n)
            st = forward_logits(ctx, hidden_out + (int64_t)logits_from * dim, n - logits_from, logits_out);
    }
    if (st != TR_OK && ctx->state) seq_state_reset(ctx->state); /* the caller keeps n_past where the eval started */
    return st;
}
