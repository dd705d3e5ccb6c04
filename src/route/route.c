/* route.c — the routed decode loop. Per position: the SLM's logits and final hidden state (already computed when
 * the previous token was appended) give a proposal and a router score; when score < tau the LLM backend produces
 * the token instead. Whichever token is chosen is appended to the SLM's cache (one evaluation per token); the LLM
 * side catches up lazily, evaluating on its next call only the tokens it has not seen. So each token is evaluated
 * once by the SLM and at most once by the LLM, and nothing is re-prefilled.
 *
 * When the LLM fails (network, timeout: after the backend's retries, or at once while its circuit breaker is open),
 * joint mode by default keeps the SLM's proposal for that token and marks it llm_unavailable: generation goes on at
 * the SLM's pace instead of waiting out a timeout per token, and no token appears that no model produced.
 *
 * Timing per token: slm_ms is the SLM forward that produced the position's logits plus the router; llm_ms is the
 * backend call (transport and simulated delay included). Text goes through the UTF-8-safe streaming detokenizer
 * and the stop-string hold-back before it reaches the callback.
 *
 * With speculate_depth or lookahead set (joint mode), the loop in speculate.c runs instead; it shares the steps of
 * a token defined here (route_internal.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "model/sample_math.h"
#include "route/route_internal.h"

double route_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

const char *tr_route_mode_name(tr_route_mode m) {
    switch (m) {
    case TR_MODE_JOINT: return "joint";
    case TR_MODE_SLM: return "slm";
    case TR_MODE_LLM: return "llm";
    }
    return "?";
}

tr_status tr_route_mode_from_name(const char *name, tr_route_mode *out) {
    static const struct { const char *name; tr_route_mode mode; } names[] = {
        {"joint", TR_MODE_JOINT}, {"slm", TR_MODE_SLM}, {"small_only", TR_MODE_SLM},
        {"llm", TR_MODE_LLM},     {"llm_only", TR_MODE_LLM},
    };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].mode;
            return TR_OK;
        }
    return tr_fail(TR_ERR_ARG, "unknown mode '%s' (joint, slm, llm)", name ? name : "(null)");
}

tr_route_params tr_route_default_params(void) {
    tr_route_params p = {.mode = TR_MODE_JOINT, .tau = 0.5f, .n_predict = 128, .stop_at_eog = true,
                         .on_llm_failure = TR_LLM_FAILURE_FALLBACK};
    p.sampling = tr_sampler_default_params();
    return p;
}

void tr_route_params_hide_round_trip(tr_route_params *p, bool exact_lookahead) {
    p->speculate_depth = 8;
    p->lookahead = exact_lookahead ? 8 : 0;
    p->draft_tokens = 96;
    p->draft_width = 3;
    p->draft_span = 32;
}

/* Prefill is evaluated in chunks of this many tokens so that abort_fn is polled during a long prompt. */
#define PREFILL_CHUNK 256

bool route_aborted(route_run *r) {
    if (!r->p->abort_fn || !r->p->abort_fn(r->p->abort_user)) return false;
    r->stats->aborted = true;
    return true;
}

tr_status route_abort_status(void) { return tr_fail(TR_ERR_STATE, "generation aborted by the caller"); }

/* A router with context reads the positions before the first generated one: the prompt's last `context`
 * positions are evaluated last, in one call keeping their logits, and shown to the router (tr_router_observe), as
 * training reads an example's earlier positions. */
static tr_status observe_prompt_tail(route_run *r, int32_t tail) {
    tr_status st = TR_OK;
    for (int32_t q = tail + 1; st == TR_OK && q < r->n_prompt; q++) /* position q: hidden state of token q - 1 */
        st = tr_router_observe(r->router, q, tr_context_hidden(r->slm, q - 1 - tail), r->n_embd,
                               tr_context_logits(r->slm, q - 1 - tail), r->n_vocab);
    return st;
}

static tr_status prefill_slm(route_run *r, const int32_t *prompt, int32_t n_prompt) {
    const int32_t *cached = tr_context_tokens(r->slm);
    int32_t keep = 0, n_past = tr_context_n_past(r->slm);
    while (keep < n_past && keep < n_prompt && cached[keep] == prompt[keep]) keep++;
    if (keep == n_prompt) keep = n_prompt - 1; /* the last prompt token must be evaluated for its logits */
    const int32_t context = r->p->mode == TR_MODE_JOINT ? tr_router_context(r->router) : 0;
    int32_t tail = n_prompt - 1 - context; /* the tail [tail, n_prompt) is evaluated last */
    if (tail < 0) tail = 0;
    if (keep > tail) keep = tail;
    const double t0 = route_now_ms();
    tr_status st = tr_context_truncate(r->slm, keep);
    for (int32_t at = keep, n = 0; st == TR_OK && at < n_prompt; at += n) {
        if (route_aborted(r)) {
            st = route_abort_status();
            break;
        }
        n = n_prompt - at < PREFILL_CHUNK ? n_prompt - at : PREFILL_CHUNK;
        if (context > 0 && at < tail && at + n > tail) n = tail - at;
        st = tr_context_eval(r->slm, prompt + at, n,
                             at + n < n_prompt ? TR_EVAL_LOGITS_NONE
                             : context > 0     ? TR_EVAL_LOGITS_ALL
                                               : TR_EVAL_LOGITS_LAST);
        if (st == TR_OK && context > 0 && at + n == n_prompt) st = observe_prompt_tail(r, at);
    }
    r->slm_pending_ms = route_now_ms() - t0;
    return st;
}

tr_status route_decide(route_run *r, tr_route_token *tok, bool *routed) {
    const tr_route_params *p = r->p;
    tok->slm_id = -1;
    tok->score = -1.0f;
    tok->tau = p->tau;
    tok->slm_ms = r->slm_pending_ms;
    tok->llm_ms = 0.0;
    *routed = p->mode == TR_MODE_LLM;
    if (p->mode != TR_MODE_LLM) {
        const float *logits = tr_context_logits(r->slm, -1), *hidden = tr_context_hidden(r->slm, -1);
        if (!logits || !hidden) return tr_fail(TR_ERR_STATE, "the SLM has no logits for the current position");
        if (p->sampling.temperature > 0) tr_sampler_reseed(r->sampler, position_seed(p->sampling.seed, r->len));
        tok->slm_id = tr_sampler_sample(r->sampler, logits, r->n_vocab);
        tok->logprob = log_softmax_at(logits, r->n_vocab, tok->slm_id);
        if (p->mode == TR_MODE_JOINT) {
            const double t0 = route_now_ms();
            /* The tokens of this branch (speculation scores positions of several): the induction feature reads them. */
            tr_status st = tr_router_tokens(r->router, r->seq, r->len);
            if (st == TR_OK)
                st = tr_router_score_at(r->router, r->len, hidden, r->n_embd, logits, r->n_vocab, &tok->score);
            const double dt = route_now_ms() - t0;
            if (st != TR_OK) return st;
            tok->slm_ms += dt;
            r->stats->router_ms += dt;
            *routed = r->budget ? budget_decide(r->budget, r->len - r->n_prompt, tok->score, &tok->tau)
                                : tok->score < p->tau;
        }
    }
    tok->source = *routed ? TR_SOURCE_LLM : TR_SOURCE_SLM;
    tok->id = tok->slm_id;
    return TR_OK;
}

tr_status route_llm_outcome(route_run *r, tr_route_token *tok, tr_status st, int32_t id, float logprob) {
    if (st == TR_OK && (id < 0 || id >= r->n_vocab))
        st = tr_fail(TR_ERR_RANGE, "the LLM returned token %d, outside the SLM's vocabulary (0..%d)", id,
                     r->n_vocab - 1);
    if (st == TR_OK) {
        tok->source = TR_SOURCE_LLM;
        tok->id = id;
        tok->logprob = logprob;
        return TR_OK;
    }
    if (st == TR_ERR_STATE && route_aborted(r)) return st;
    if ((st == TR_ERR_NETWORK || st == TR_ERR_TIMEOUT) && r->p->mode == TR_MODE_JOINT &&
        r->p->on_llm_failure == TR_LLM_FAILURE_FALLBACK) {
        /* The SLM's proposal stands; the failure is counted and marked, not hidden. */
        tok->source = TR_SOURCE_SLM;
        tok->id = tok->slm_id;
        tok->llm_unavailable = true;
        r->stats->n_fallback++;
        tr_clear_error();
        return TR_OK;
    }
    return st;
}

/* Picks the token for the next position: the SLM's proposal or, when routed, the LLM's (a blocking call). */
static tr_status choose_token(route_run *r, tr_route_token *tok) {
    bool routed;
    tr_status st = route_decide(r, tok, &routed);
    if (st != TR_OK || !routed) return st;
    const double t0 = route_now_ms();
    int32_t id = -1;
    float lp = NAN;
    st = tr_llm_next_token_ex(r->llm, r->seq, r->len, &id, &lp);
    tok->llm_ms = route_now_ms() - t0;
    tok->wait_ms = tok->llm_ms;
    r->stats->llm_blocking++;
    r->stats->llm_wait_ms += tok->wait_ms;
    return route_llm_outcome(r, tok, st, id, lp);
}

/* Turns the token into shown text (UTF-8 completed, stop strings held back). */
static tr_status token_text(route_run *r, tr_route_token *tok, bool eog) {
    tok->text = "";
    tok->text_len = 0;
    if (!r->detok || eog) return TR_OK;
    const char *piece;
    size_t len;
    tr_status st = tr_detok_stream_push(r->detok, tok->id, &piece, &len);
    if (st != TR_OK) return st;
    if (!stop_text_push(&r->stop, piece, len)) return tr_fail(TR_ERR_NOMEM, "out of memory");
    tok->text = r->stop.out ? r->stop.out : "";
    tok->text_len = r->stop.out_len;
    return TR_OK;
}

bool route_is_eog(const route_run *r, int32_t id) {
    return r->p->stop_at_eog && r->vocab && tr_vocab_is_eog(r->vocab, id);
}

tr_status route_emit(route_run *r, tr_route_token *tok, int32_t *out, int32_t cap, bool *go_on) {
    const tr_route_params *p = r->p;
    tr_route_stats *s = r->stats;
    const int32_t i = s->n_tokens;
    tok->index = i;
    if (out && i < cap) out[i] = tok->id;
    s->n_tokens++;
    s->n_routed += tok->source == TR_SOURCE_LLM;
    r->tau_sum += tok->tau;
    s->tau_last = tok->tau;
    s->slm_ms += tok->slm_ms;
    s->llm_ms += tok->llm_ms;
    const bool eog = route_is_eog(r, tok->id);
    tr_status st = token_text(r, tok, eog);
    if (st != TR_OK) return st;
    r->t_last = route_now_ms();
    if (i == 0) r->t_first = r->t_last;
    bool more = !p->on_token || p->on_token(p->user, tok);
    if (p->on_text && tok->text_len) more = p->on_text(p->user, tok->text, tok->text_len, tok) && more;
    if (eog) s->stopped_by_eog = true;
    if (r->stop.stopped) s->stopped_by_string = true;
    *go_on = !(eog || r->stop.stopped || !more || i + 1 == p->n_predict);
    return TR_OK;
}

static tr_status run_loop(route_run *r, int32_t *out, int32_t cap) {
    const tr_route_params *p = r->p;
    tr_status st = TR_OK;
    for (int32_t i = 0; i < p->n_predict && st == TR_OK; i++) {
        if (route_aborted(r)) {
            st = route_abort_status();
            break;
        }
        tr_route_token tok = {.index = i, .logprob = NAN};
        if ((st = choose_token(r, &tok)) != TR_OK) break;
        r->seq[r->len++] = tok.id;
        bool go_on;
        if ((st = route_emit(r, &tok, out, cap, &go_on)) != TR_OK || !go_on) break;
        if (p->mode != TR_MODE_LLM) {
            const double t0 = route_now_ms();
            st = tr_context_eval(r->slm, &tok.id, 1, TR_EVAL_LOGITS_LAST);
            r->slm_pending_ms = route_now_ms() - t0;
        }
    }
    return st;
}

/* Emits text still held back (an incomplete UTF-8 character, a possible stop-string start) through on_text with
 * no token: it belongs to no single token, so on_token never sees it. */
static tr_status flush_text(route_run *r) {
    if (!r->detok || r->stop.stopped) return TR_OK;
    const char *piece;
    size_t len;
    tr_status st = tr_detok_stream_flush(r->detok, &piece, &len);
    if (st != TR_OK) return st;
    char *tail = NULL;
    size_t tail_len = 0;
    bool ok = stop_text_push(&r->stop, piece, len);
    if (ok && r->stop.out_len) ok = (tail = strdup(r->stop.out)) != NULL, tail_len = r->stop.out_len;
    if (ok && !r->stop.stopped && (ok = stop_text_flush(&r->stop)) && r->stop.out_len) {
        char *joined = realloc(tail, tail_len + r->stop.out_len + 1);
        if ((ok = joined != NULL)) {
            memcpy(joined + tail_len, r->stop.out, r->stop.out_len + 1);
            tail = joined;
            tail_len += r->stop.out_len;
        }
    }
    if (ok && tail_len && r->p->on_text) r->p->on_text(r->p->user, tail, tail_len, NULL);
    free(tail);
    return ok ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
}

tr_status route_check_hiding(int32_t speculate_depth, int32_t lookahead, int32_t draft_tokens, int32_t draft_span,
                             int32_t draft_width) {
    if (speculate_depth < 0 || speculate_depth > 1024)
        return tr_fail(TR_ERR_ARG, "speculate_depth must be in 0..1024 (got %d)", speculate_depth);
    if (lookahead < 0 || lookahead > TR_LOOKAHEAD_MAX)
        return tr_fail(TR_ERR_ARG, "lookahead must be in 0..%d (got %d)", TR_LOOKAHEAD_MAX, lookahead);
    if (draft_tokens < 0 || draft_tokens > TR_DRAFT_TOKENS_MAX || draft_span < 0 || draft_span > TR_DRAFT_TOKENS_MAX)
        return tr_fail(TR_ERR_ARG, "draft_tokens and draft_span must be in 0..%d (got %d, %d)", TR_DRAFT_TOKENS_MAX,
                       draft_tokens, draft_span);
    if (draft_width < 0 || draft_width > 8) return tr_fail(TR_ERR_ARG, "draft_width must be in 0..8 (got %d)", draft_width);
    return TR_OK;
}

static tr_status check_args(tr_context *slm, tr_router *router, tr_llm_backend *llm, const int32_t *prompt,
                            int32_t n_prompt, const tr_route_params *p) {
    if (!slm || !prompt || n_prompt <= 0 || !p) return tr_fail(TR_ERR_ARG, "tr_route_generate: need an SLM context and a prompt");
    if (p->mode != TR_MODE_JOINT && p->mode != TR_MODE_SLM && p->mode != TR_MODE_LLM)
        return tr_fail(TR_ERR_ARG, "unknown routing mode %d", (int)p->mode);
    if (p->mode == TR_MODE_JOINT && !router) return tr_fail(TR_ERR_ARG, "joint mode needs a router");
    if (p->mode != TR_MODE_SLM && !llm) return tr_fail(TR_ERR_ARG, "%s mode needs an LLM backend", tr_route_mode_name(p->mode));
    if (p->n_predict < 0) return tr_fail(TR_ERR_ARG, "n_predict must not be negative");
    const int32_t n_vocab = tr_model_get_info(tr_context_model(slm))->n_vocab;
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= n_vocab)
            return tr_fail(TR_ERR_RANGE, "prompt token %d at index %d is outside the vocabulary (0..%d)", prompt[i], i,
                           n_vocab - 1);
    const tr_status budget = budget_check(p);
    if (budget != TR_OK) return budget;
    const tr_status hiding = route_check_hiding(p->speculate_depth, p->lookahead, p->draft_tokens, p->draft_span,
                                                p->draft_width);
    if (hiding != TR_OK) return hiding;
    if (p->on_llm_failure != TR_LLM_FAILURE_FALLBACK && p->on_llm_failure != TR_LLM_FAILURE_ERROR)
        return tr_fail(TR_ERR_ARG, "unknown on_llm_failure %d", (int)p->on_llm_failure);
    /* In 64 bits: n_predict near INT32_MAX must not wrap the sum. */
    if (p->mode != TR_MODE_LLM && (int64_t)n_prompt + p->n_predict > (int64_t)tr_context_n_ctx(slm) + 1)
        return tr_fail(TR_ERR_RANGE, "prompt (%d) + tokens to generate (%d) exceed the SLM context (%d)", n_prompt,
                       p->n_predict, tr_context_n_ctx(slm));
    return TR_OK;
}

tr_status tr_route_generate(tr_context *slm, tr_router *router, tr_llm_backend *llm, const int32_t *prompt,
                            int32_t n_prompt, const tr_route_params *params, int32_t *out_tokens, int32_t cap,
                            tr_route_stats *stats) {
    tr_route_params p = params ? *params : tr_route_default_params();
    tr_route_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats); /* before any return, so a failed call never leaves stale numbers */
    tr_status st = check_args(slm, router, llm, prompt, n_prompt, &p);
    if (st != TR_OK) return st;
    const tr_model *m = tr_context_model(slm);
    route_run r = {.slm = slm, .router = router, .llm = llm, .p = &p, .vocab = tr_model_vocab(m), .stats = stats};
    r.n_vocab = tr_model_get_info(m)->n_vocab;
    r.n_embd = tr_model_get_info(m)->n_embd;
    stop_text_init(&r.stop, p.stop, p.n_stop);
    /* In llm mode n_predict is not bounded by the SLM context: the LLM's own context bounds it. */
    r.seq = malloc(((size_t)n_prompt + (size_t)p.n_predict) * sizeof *r.seq);
    if (!r.seq) return tr_fail(TR_ERR_NOMEM, "out of memory");
    memcpy(r.seq, prompt, (size_t)n_prompt * sizeof *prompt);
    r.len = n_prompt;
    r.n_prompt = n_prompt;
    stats->n_prompt = n_prompt;
    const int64_t slm_before = tr_context_n_evaluated(slm);
    const tr_llm_stats llm_before = tr_llm_backend_stats(llm);
    const bool speculative =
        p.mode == TR_MODE_JOINT && (p.speculate_depth > 0 || p.lookahead > 0 || p.draft_tokens > 0);

    if (llm) tr_llm_backend_set_abort(llm, p.abort_fn, p.abort_user);
    if (llm && r.vocab) tr_llm_backend_set_end_id(llm, tr_vocab_eos(r.vocab)); /* an LLM that ends the text */
    r.t_start = route_now_ms();
    st = tr_sampler_create(&p.sampling, &r.sampler);
    if (st == TR_OK && r.vocab) st = tr_detok_stream_create(r.vocab, false, &r.detok);
    route_budget budget;
    const bool budgeted = p.mode == TR_MODE_JOINT && (p.target_routed > 0 || p.max_routed > 0);
    if (st == TR_OK && budgeted && (st = budget_init(&budget, &p, p.tau, p.n_predict)) == TR_OK) r.budget = &budget;
    if (p.mode == TR_MODE_JOINT) tr_router_reset(router); /* a new sequence: positions count from its start */
    if (st == TR_OK && p.mode != TR_MODE_LLM) st = prefill_slm(&r, prompt, n_prompt);
    if (st == TR_OK && p.n_predict > 0)
        st = speculative ? route_run_speculative(&r, out_tokens, cap) : run_loop(&r, out_tokens, cap);
    if (st == TR_OK) st = flush_text(&r);
    const double t_end = route_now_ms();

    stats->total_ms = t_end - r.t_start;
    stats->ttft_ms = stats->n_tokens ? r.t_first - r.t_start : 0.0;
    stats->mean_tbt_ms = stats->n_tokens > 1 ? (r.t_last - r.t_first) / (stats->n_tokens - 1) : 0.0;
    stats->slm_evaluated = tr_context_n_evaluated(slm) - slm_before;
    const tr_llm_stats llm_after = tr_llm_backend_stats(llm);
    stats->llm_evaluated = llm_after.tokens_evaluated - llm_before.tokens_evaluated;
    stats->llm_calls = llm_after.calls - llm_before.calls;
    stats->llm_bytes_sent = llm_after.bytes_sent - llm_before.bytes_sent;
    stats->llm_bytes_received = llm_after.bytes_received - llm_before.bytes_received;
    stats->draft_tokens_sent = llm_after.draft_tokens_sent - llm_before.draft_tokens_sent;
    stats->draft_tokens_verified = llm_after.draft_tokens_verified - llm_before.draft_tokens_verified;
    stats->n_route_decisions = stats->n_routed + stats->n_fallback;
    stats->tau_mean = stats->n_tokens ? (float)(r.tau_sum / stats->n_tokens) : p.tau;
    if (!stats->n_tokens) stats->tau_last = p.tau;
    if (r.budget) budget_free(r.budget);
    if (llm) tr_llm_backend_set_abort(llm, NULL, NULL);
    tr_detok_stream_free(r.detok);
    tr_sampler_free(r.sampler);
    stop_text_free(&r.stop);
    free(r.seq);
    return st;
}
