/* embedded.c — the LLM loaded in this process as a backend. It keeps one context whose cache always holds a
 * prefix of the routed sequence: each call rolls back to the longest common prefix (usually a no-op) and
 * evaluates only the new tokens in one batch, so no token is evaluated twice unless the sequence changed.
 *
 * Sampling (temperature > 0) draws at each position from a generator seeded by (seed, position), as the server
 * does, so the token at a position does not depend on how many calls came before it. Lookahead (greedy LLM only)
 * evaluates the answer and the further tokens one at a time in the same context, streamed after the answer
 * (tr_llm_call_answered, then one push per token, until the caller wants no more); the next call's common prefix
 * keeps what it still agrees with. A draft tree is walked before the lookahead (which then follows the walk's last
 * answer); the sampler is reseeded per answered position, so every answer is the one a call at that position gives. */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "common/error.h"
#include "model/sample_math.h"
#include "transport/backend.h"

#define CATCH_UP_CHUNK 256

typedef struct embedded {
    tr_context *ctx;
    tr_sampler *sampler;
    tr_sampler_params sp;
    int32_t n_vocab;
    bool logits_valid; /* the context's last logits belong to its last cached position */
} embedded;

/* The draft walk (tr_llm_draft): after each answer, the branch starting with it is evaluated in one batch and the
 * position after it answered, drawn like any other position. Stops where no branch matches or the context is full;
 * returns the last answer. */
static int32_t walk_draft(embedded *e, tr_llm_call *call, int32_t n_choice) {
    const tr_llm_draft *d = call->draft;
    int32_t answer = call->id, node = -1;
    while (call->n_verify < TR_DRAFT_BRANCHES_MAX && (node = draft_child(d, node, answer)) >= 0) {
        const int32_t n = d->start[node + 1] - d->start[node], pos = tr_context_n_past(e->ctx);
        if (pos + n > tr_context_n_ctx(e->ctx)) break;
        if (tr_context_eval(e->ctx, d->tokens + d->start[node], n, TR_EVAL_LOGITS_LAST) != TR_OK) {
            tr_clear_error(); /* a hint: the answers so far stand */
            break;
        }
        e->logits_valid = false;
        call->n_evaluated += n;
        const float *logits = tr_context_logits(e->ctx, -1);
        if (e->sp.temperature > 0) tr_sampler_reseed(e->sampler, position_seed(e->sp.seed, pos + n));
        answer = tr_sampler_sample(e->sampler, logits, n_choice);
        if (answer < 0) break;
        call->verify_ids[call->n_verify++] = answer;
    }
    return answer;
}

/* Further greedy tokens after call->id, evaluated one at a time and streamed (the answer is already out). Stops
 * early when the caller wants no more, the context is full or an evaluation fails; lookahead is a hint, so that is
 * not an error. */
static void lookahead(embedded *e, tr_llm_call *call, int32_t n_choice, int32_t after) {
    int32_t t = after;
    for (int32_t i = 0; i < call->lookahead; i++) {
        if (tr_context_n_past(e->ctx) >= tr_context_n_ctx(e->ctx)) break;
        if (tr_context_eval(e->ctx, &t, 1, TR_EVAL_LOGITS_LAST) != TR_OK) {
            tr_clear_error();
            break;
        }
        call->n_evaluated++;
        t = tr_argmax(tr_context_logits(e->ctx, -1), n_choice);
        if (!tr_llm_call_push_lookahead(call, t)) break;
    }
    /* The context's last logits no longer belong to the sequence the next call will most likely send. */
    e->logits_valid = false;
}

static tr_status embedded_next(void *impl, tr_llm_call *call) {
    embedded *e = impl;
    const int32_t *tokens = call->tokens, n = call->n_tokens;
    const int32_t *cached = tr_context_tokens(e->ctx);
    int32_t keep = 0, n_past = tr_context_n_past(e->ctx);
    while (keep < n_past && keep < n && cached[keep] == tokens[keep]) keep++;
    /* The sequence is fully cached and we still hold its last logits: nothing to evaluate. */
    const bool reuse = keep == n && n_past == n && e->logits_valid;
    if (!reuse) {
        if (keep == n) keep = n - 1; /* re-evaluate the last token to get its logits */
        tr_status st = tr_context_truncate(e->ctx, keep);
        /* In chunks, so that a long catch-up (llm mode's first call evaluates the whole prompt) can be aborted. */
        for (int32_t at = keep; st == TR_OK && at < n; at += CATCH_UP_CHUNK) {
            if (call->abort_fn && call->abort_fn(call->abort_user)) {
                st = tr_fail(TR_ERR_STATE, "aborted");
                break;
            }
            const int32_t m = n - at < CATCH_UP_CHUNK ? n - at : CATCH_UP_CHUNK;
            st = tr_context_eval(e->ctx, tokens + at, m, at + m == n ? TR_EVAL_LOGITS_LAST : TR_EVAL_LOGITS_NONE);
        }
        e->logits_valid = st == TR_OK;
        if (st != TR_OK) return st;
        call->n_evaluated = n - keep;
    }
    /* A padded vocabulary: the choice is restricted to the ids the SLM shares. */
    const int32_t n_choice = call->n_allowed > 0 && call->n_allowed < e->n_vocab ? call->n_allowed : e->n_vocab;
    const float *logits = tr_context_logits(e->ctx, -1);
    if (e->sp.temperature > 0) tr_sampler_reseed(e->sampler, position_seed(e->sp.seed, n));
    call->id = tr_sampler_sample(e->sampler, logits, n_choice);
    if (call->id >= 0) call->logprob = log_softmax_at(logits, n_choice, call->id);
    int32_t last = call->id;
    if (call->id >= 0 && call->draft) last = walk_draft(e, call, n_choice);
    tr_llm_call_answered(call);
    if (last >= 0 && call->lookahead > 0 && e->sp.temperature <= 0) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        lookahead(e, call, n_choice, last);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        call->lookahead_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    }
    return TR_OK;
}

/* The k largest of a row (ties: the lower id first, as tr_argmax), most likely first; returns how many. */
static int32_t top_k_of(const float *logits, int32_t n, int32_t k, int32_t *ids) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m == k && !(logits[i] > logits[ids[k - 1]])) continue;
        int32_t j = m < k ? m++ : k - 1;
        while (j > 0 && logits[i] > logits[ids[j - 1]]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    return m;
}

/* Scoring: the common prefix with the cache is kept up to the first row whose logits are needed; the rest is
 * evaluated in one batch keeping every row's logits (chunked, so a long sequence can be aborted). */
static tr_status embedded_score(void *impl, tr_llm_score_call *call) {
    embedded *e = impl;
    const int32_t n = call->n_tokens; /* rows first-1 .. end-2 predict positions first .. end-1 */
    if (n > tr_context_n_ctx(e->ctx))
        return tr_fail(TR_ERR_RANGE, "%d tokens do not fit the LLM's context (%d)", n, tr_context_n_ctx(e->ctx));
    for (int32_t i = 0; i < n; i++)
        if (call->tokens[i] >= e->n_vocab)
            return tr_fail(TR_ERR_RANGE, "token id %d at index %d is outside the vocabulary (0..%d)", call->tokens[i],
                           i, e->n_vocab - 1);
    const int32_t *cached = tr_context_tokens(e->ctx);
    int32_t keep = 0;
    const int32_t n_past = tr_context_n_past(e->ctx), limit = call->first - 1;
    while (keep < n_past && keep < limit && cached[keep] == call->tokens[keep]) keep++;
    tr_status st = tr_context_truncate(e->ctx, keep);
    e->logits_valid = false;
    if (st == TR_OK && keep < limit) st = tr_context_eval(e->ctx, call->tokens + keep, limit - keep, TR_EVAL_LOGITS_NONE);
    if (st != TR_OK) return st;
    call->n_evaluated = limit - keep;
    const int32_t n_choice = call->n_allowed > 0 && call->n_allowed < e->n_vocab ? call->n_allowed : e->n_vocab;
    const int32_t rows_end = call->end - 1; /* exclusive; end <= n + 1, so rows_end <= n */
    for (int32_t at = limit; at < rows_end; at += CATCH_UP_CHUNK) {
        if (call->abort_fn && call->abort_fn(call->abort_user)) return tr_fail(TR_ERR_STATE, "aborted");
        const int32_t m = rows_end - at < CATCH_UP_CHUNK ? rows_end - at : CATCH_UP_CHUNK;
        st = tr_context_eval(e->ctx, call->tokens + at, m, TR_EVAL_LOGITS_ALL);
        if (st != TR_OK) return st;
        call->n_evaluated += m;
        for (int32_t r = 0; r < m; r++) {
            const float *l = tr_context_logits(e->ctx, r);
            tr_llm_position *o = &call->out[at + r + 1 - call->first];
            const double lse = log_sum_exp(l, n_choice);
            o->n_top = top_k_of(l, n_choice, call->top_k, o->top_ids);
            for (int32_t i = 0; i < o->n_top; i++) o->top_logprobs[i] = (float)((double)l[o->top_ids[i]] - lse);
            const int32_t pos = at + r + 1;
            if (pos < n) {
                const int32_t t = call->tokens[pos];
                o->logprob = t < n_choice ? (float)((double)l[t] - lse) : -INFINITY;
            }
        }
    }
    e->logits_valid = true; /* the last row's logits belong to the last cached position */
    return TR_OK;
}

static tr_status embedded_set_sampling(void *impl, const tr_sampler_params *sampling) {
    embedded *e = impl;
    tr_sampler *s = NULL;
    tr_status st = tr_sampler_create(sampling, &s);
    if (st != TR_OK) return st;
    tr_sampler_free(e->sampler);
    e->sampler = s;
    e->sp = *sampling;
    return TR_OK;
}

static int32_t embedded_n_vocab(void *impl) { return ((embedded *)impl)->n_vocab; }

static void embedded_free(void *impl) {
    embedded *e = impl;
    if (!e) return;
    tr_context_free(e->ctx);
    tr_sampler_free(e->sampler);
    free(e);
}

static const backend_ops embedded_ops = {.name = "embedded", .next_token = embedded_next,
                                         .n_vocab = embedded_n_vocab, .free = embedded_free,
                                         .score = embedded_score, .set_sampling = embedded_set_sampling};

tr_status tr_llm_backend_embedded(const tr_model *llm, const tr_context_params *params,
                                  const tr_sampler_params *sampling, tr_llm_backend **out) {
    if (!llm || !out) return tr_fail(TR_ERR_ARG, "tr_llm_backend_embedded: NULL argument");
    *out = NULL;
    embedded *e = calloc(1, sizeof *e);
    if (!e) return tr_fail(TR_ERR_NOMEM, "out of memory");
    e->n_vocab = tr_model_get_info(llm)->n_vocab;
    e->sp = sampling ? *sampling : tr_sampler_default_params();
    tr_status st = tr_context_create(llm, params, &e->ctx);
    if (st == TR_OK) st = tr_sampler_create(&e->sp, &e->sampler);
    if (st != TR_OK) {
        embedded_free(e);
        return st;
    }
    return backend_create(&embedded_ops, e, out);
}
