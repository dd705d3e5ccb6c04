/* route_internal.h — what the synchronous loop (route.c) and the speculative one (speculate.c) share: the state of
 * one generation and the steps of a token (decide on the SLM side, turn an LLM failure into the fallback, emit a
 * confirmed token). */
#ifndef TR_ROUTE_INTERNAL_H
#define TR_ROUTE_INTERNAL_H

#include "route/budget.h"
#include "route/stop_text.h"
#include "tokroute.h"

typedef struct route_run {
    tr_context *slm;
    tr_router *router;
    tr_llm_backend *llm;
    const tr_route_params *p;
    const tr_vocab *vocab;
    int32_t n_vocab, n_embd;
    int32_t *seq;             /* prompt + generated (+ speculative tokens in the speculative loop) */
    int32_t len;
    int32_t n_prompt;
    tr_sampler *sampler;
    tr_detok_stream *detok;
    stop_text stop;
    double slm_pending_ms;    /* SLM time spent producing the current position's logits */
    double t_start, t_first, t_last;
    double tau_sum;           /* of the shown tokens' τ */
    route_budget *budget;     /* target_routed / max_routed (NULL: a fixed tau) */
    tr_route_stats *stats;
} route_run;

double route_now_ms(void);
bool route_aborted(route_run *r);
tr_status route_abort_status(void);
/* The SLM side of position r->len: proposal (tok->slm_id = tok->id), score, and whether it is routed. */
tr_status route_decide(route_run *r, tr_route_token *tok, bool *routed);
/* Applies an LLM call's outcome to a routed token: the LLM's id, or the fallback (TR_OK, token marked
 * llm_unavailable), or the error to stop with. */
tr_status route_llm_outcome(route_run *r, tr_route_token *tok, tr_status st, int32_t id, float logprob);
/* Shows a confirmed token (output array, statistics, text, callbacks). *go_on false: generation ends here. */
tr_status route_emit(route_run *r, tr_route_token *tok, int32_t *out, int32_t cap, bool *go_on);
/* Whether the token ends generation (an end-of-generation id with stop_at_eog). */
bool route_is_eog(const route_run *r, int32_t id);
/* The speculative loop (speculate.c). */
tr_status route_run_speculative(route_run *r, int32_t *out, int32_t cap);
/* TR_OK when the speculation, lookahead and drafting settings (tr_route_params' fields) are in range, else
 * TR_ERR_ARG naming the one that is not (also used by the web UI at start-up). */
tr_status route_check_hiding(int32_t speculate_depth, int32_t lookahead, int32_t draft_tokens, int32_t draft_span,
                             int32_t draft_width);

#endif
