/* speculate.c — the routed loop that hides the round trip (speculate_depth, lookahead; joint mode).
 *
 * A routed position sends its request asynchronously (tr_llm_start) and, instead of waiting, appends the SLM's own
 * proposal and keeps decoding: up to speculate_depth further positions that the router does not route are decided
 * by the SLM as usual. A routed position inside the speculative branch, the depth limit, the end of the budget or
 * an end-of-generation token make the loop wait for the answer. Then: the LLM's token equals the proposal → the
 * branch is kept; it differs → the SLM's cache is truncated to that position, the LLM's token appended, and the
 * branch dropped. Only confirmed tokens reach route_emit, so callbacks, output and text are those of the
 * synchronous loop.
 *
 * Each request also asks for `lookahead` further greedy LLM tokens. A later routed position whose tokens since the
 * answer still equal that continuation takes its token from it without a request.
 *
 * Exactness: every position is decided from the same SLM cache contents as in the synchronous loop (the SLM
 * evaluates one token at a time either way, and a rollback restores the prefix), the SLM's draws are seeded by
 * position, and the LLM is asked at the same positions with the same prefixes, or its lookahead (greedy) stands
 * in. So with a greedy LLM (or a sampled one whose draw depends only on seed and position, without lookahead)
 * the tokens equal the synchronous loop's, whatever the timing of the answers. One difference remains outside
 * the tokens: after a failure the circuit breaker's state depends on time, so which later tokens fall back can
 * differ. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "route/route_internal.h"

typedef struct spec_state {
    route_run *r;
    int32_t *out, cap;
    int32_t end;              /* r->len never exceeds n_prompt + n_predict */
    int32_t depth, lookahead;
    bool in_flight;
    int32_t pos;              /* position of the routed token in flight */
    tr_route_token routed;    /* its record; routed.slm_id is the proposal speculated on */
    double t_sent;
    tr_route_token *spec;     /* the speculative branch: positions pos+1 .. pos+n_spec */
    int32_t n_spec;
    bool have_next;           /* a decision made while speculating, for position next_pos */
    int32_t next_pos;
    tr_route_token next;
    bool next_routed;
    int32_t la_base, la_n;    /* lookahead: the LLM's assumed tokens at positions la_base .. la_base+la_n-1 */
    int32_t la[TR_LOOKAHEAD_MAX];
} spec_state;

/* Evaluates the last appended token in the SLM when generation can still go past it. */
static tr_status slm_advance(spec_state *s) {
    route_run *r = s->r;
    if (r->len >= s->end || route_is_eog(r, r->seq[r->len - 1]) || tr_context_n_past(r->slm) >= r->len) return TR_OK;
    const double t0 = route_now_ms();
    tr_status st = tr_context_eval(r->slm, &r->seq[r->len - 1], 1, TR_EVAL_LOGITS_LAST);
    r->slm_pending_ms = route_now_ms() - t0;
    return st;
}

/* The SLM side of position r->len, reusing a decision made while speculating. */
static tr_status decide(spec_state *s, tr_route_token *tok, bool *routed) {
    if (s->have_next && s->next_pos == s->r->len) {
        s->have_next = false;
        *tok = s->next;
        *routed = s->next_routed;
        return TR_OK;
    }
    s->have_next = false;
    return route_decide(s->r, tok, routed);
}

/* The LLM's token for position q from an earlier lookahead, when the tokens since still equal its continuation. */
static bool lookahead_take(const spec_state *s, int32_t q, int32_t *id) {
    if (q < s->la_base || q - s->la_base >= s->la_n) return false;
    for (int32_t j = s->la_base; j < q; j++)
        if (s->r->seq[j] != s->la[j - s->la_base]) return false;
    *id = s->la[q - s->la_base];
    return true;
}

/* A confirmed token outside any request: append, show, evaluate. */
static tr_status confirm_now(spec_state *s, tr_route_token *tok, bool *go_on) {
    route_run *r = s->r;
    r->seq[r->len++] = tok->id;
    tr_status st = route_emit(r, tok, s->out, s->cap, go_on);
    if (st == TR_OK && *go_on) st = slm_advance(s);
    return st;
}

static tr_status send(spec_state *s, const tr_route_token *tok) {
    route_run *r = s->r;
    tr_status st = tr_llm_start(r->llm, r->seq, r->len, s->lookahead);
    if (st != TR_OK) return st;
    s->in_flight = true;
    s->pos = r->len;
    s->routed = *tok;
    s->t_sent = route_now_ms();
    s->n_spec = 0;
    r->seq[r->len++] = tok->slm_id;   /* the proposal stands in until the answer */
    return s->depth > 0 ? slm_advance(s) : TR_OK;
}

/* One step of the speculative branch. *wait: the loop must wait for the answer instead. */
static tr_status speculate(spec_state *s, bool *wait) {
    route_run *r = s->r;
    *wait = s->n_spec >= s->depth || r->len >= s->end || tr_context_n_past(r->slm) != r->len ||
            tr_llm_ready(r->llm);
    if (*wait) return TR_OK;
    tr_route_token tok = {.logprob = NAN};
    bool routed;
    tr_status st = route_decide(r, &tok, &routed);
    if (st != TR_OK) return st;
    if (routed) { /* no nested requests: keep the decision for when the answer has come */
        s->have_next = true;
        s->next_pos = r->len;
        s->next = tok;
        s->next_routed = true;
        *wait = true;
        return TR_OK;
    }
    s->spec[s->n_spec++] = tok;
    r->seq[r->len++] = tok.id;
    return slm_advance(s);
}

/* The answer has come: confirm the routed token, keep or drop the branch, show what is confirmed. */
static tr_status resolve(spec_state *s, tr_status call_st, const tr_llm_reply *rep, double waited_ms, bool *go_on) {
    route_run *r = s->r;
    tr_route_stats *stats = r->stats;
    tr_route_token *tok = &s->routed;
    tok->llm_ms = route_now_ms() - s->t_sent;
    tok->wait_ms = waited_ms;
    s->in_flight = false;
    const int32_t proposal = tok->slm_id;
    tr_status st = route_llm_outcome(r, tok, call_st, rep->id, rep->logprob);
    if (st != TR_OK) return st; /* the branch is never shown */
    if (!tok->llm_unavailable) {
        if (tok->id == proposal) stats->n_spec_agree++;
        else stats->n_spec_disagree++;
        s->la_base = s->pos + 1;
        s->la_n = rep->n_lookahead;
        memcpy(s->la, rep->lookahead, (size_t)rep->n_lookahead * sizeof *s->la);
    }
    if (tok->id != proposal) {
        stats->n_spec_discarded += s->n_spec;
        s->n_spec = 0;
        s->have_next = false;
        r->len = s->pos;
        if (tr_context_n_past(r->slm) > s->pos && (st = tr_context_truncate(r->slm, s->pos)) != TR_OK) return st;
        return confirm_now(s, tok, go_on);
    }
    stats->n_spec_kept += s->n_spec;
    if ((st = route_emit(r, tok, s->out, s->cap, go_on)) != TR_OK || !*go_on) return st;
    if ((st = slm_advance(s)) != TR_OK) return st; /* the proposal, when it was not speculated on */
    for (int32_t i = 0; i < s->n_spec && *go_on; i++)
        if ((st = route_emit(r, &s->spec[i], s->out, s->cap, go_on)) != TR_OK) return st;
    s->n_spec = 0;
    return TR_OK;
}

/* Waits for the answer in flight and resolves it. */
static tr_status await_answer(spec_state *s, bool *go_on) {
    route_run *r = s->r;
    const bool ready = tr_llm_ready(r->llm);
    const double t0 = route_now_ms();
    tr_llm_reply rep;
    const tr_status call_st = tr_llm_finish(r->llm, &rep);
    const double waited_ms = route_now_ms() - t0;
    if (!ready) r->stats->llm_blocking++;
    r->stats->llm_wait_ms += waited_ms;
    return resolve(s, call_st, &rep, waited_ms, go_on);
}

static tr_status step(spec_state *s, bool *go_on) {
    route_run *r = s->r;
    if (s->in_flight) {
        bool wait;
        tr_status st = speculate(s, &wait);
        return st != TR_OK || !wait ? st : await_answer(s, go_on);
    }
    tr_route_token tok = {.logprob = NAN};
    bool routed;
    tr_status st = decide(s, &tok, &routed);
    if (st != TR_OK) return st;
    int32_t id;
    if (routed && lookahead_take(s, r->len, &id)) {
        tok.id = id;
        tok.source = TR_SOURCE_LLM;
        tok.logprob = NAN;
        tok.lookahead_hit = true;
        r->stats->n_lookahead_hits++;
    } else if (routed) {
        return send(s, &tok);
    }
    return confirm_now(s, &tok, go_on);
}

tr_status route_run_speculative(route_run *r, int32_t *out, int32_t cap) {
    spec_state s = {.r = r, .out = out, .cap = cap, .depth = r->p->speculate_depth, .lookahead = r->p->lookahead};
    s.end = r->n_prompt + r->p->n_predict;
    s.spec = malloc((size_t)(s.depth > 0 ? s.depth : 1) * sizeof *s.spec);
    if (!s.spec) return tr_fail(TR_ERR_NOMEM, "out of memory");
    tr_status st = TR_OK;
    bool go_on = true;
    while (st == TR_OK && go_on) {
        if (route_aborted(r)) {
            st = route_abort_status();
            break;
        }
        st = step(&s, &go_on);
    }
    if (s.in_flight) { /* stopped with a request in flight (error, abort): wait for it, keep the first error */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tr_last_error());
        tr_llm_reply rep;
        tr_llm_finish(r->llm, &rep);
        if (st != TR_OK) tr_fail(st, "%s", msg);
        else tr_clear_error();
    }
    free(s.spec);
    return st;
}
