/* speculate.c — the routed loop that hides the round trip (joint mode with speculate_depth, lookahead or
 * draft_tokens set).
 *
 * The sequence is seq[0..n_conf) shown, then the speculative branch seq[n_conf..len): positions the SLM has decided
 * but that wait behind a routed position whose LLM token is not known yet. At routed positions the branch holds the
 * SLM's proposal. Only the first unshown position is ever requested, with a confirmed prefix, asynchronously
 * (tr_llm_start_draft); while it is in flight the SLM keeps extending the branch (up to speculate_depth positions,
 * through later routed positions too).
 *
 * Draft verification: the request carries a draft tree (tr_llm_draft) — the branch itself, and for a fresh routed
 * position also the SLM's continuations after its next best candidates there (draft_width) and at the branch's
 * later routed positions (2) — so the LLM answers, in the same call, every routed position along whichever path it
 * agrees with. Each reply fills a table of known LLM tokens: answer[i] is the LLM's token at base + i, valid while
 * seq[base .. base + i) equals assumed[0 .. i) (the walked branches, then the greedy lookahead after the last
 * answer). A routed position whose prefix matches takes its token from the table, without a call.
 *
 * Confirming a routed position: the LLM's token equals the branch's → the branch stands; it differs → the branch is
 * dropped there, the SLM's cache truncated, the LLM's token appended. So tokens reach route_emit in order, once
 * confirmed, and callbacks, output and text are those of the synchronous loop.
 *
 * Exactness: every position is decided from the same SLM cache contents as in the synchronous loop (the SLM
 * evaluates one token at a time either way; exploring the draft or a rollback truncates back to the prefix, never
 * re-evaluates a position), the SLM's draws are seeded by position, and every LLM token used is one the backend
 * computed for exactly the prefix in question (the table's check), greedy or drawn from (seed, position). So the
 * tokens equal the synchronous loop's whatever the timing of the answers and whatever the draft holds — the draft
 * only decides how many positions one call answers. A backend that answers a drafted candidate but verifies
 * nothing (it ignores drafts, or the context is full) gets no more drafts in this run. After a failure the circuit
 * breaker's state depends on time, so which later tokens fall back can differ. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "route/route_internal.h"
#include "transport/backend.h"

#define WIDTH_MAX 8
#define DEEP_WIDTH 2 /* candidates at routed positions after the requested one, on the SLM's own path */
#define KNOWN_MAX (TR_DRAFT_TOKENS_MAX + TR_LOOKAHEAD_MAX + 2)
/* Drafting happens before the request leaves, so it adds to this round trip, and it pays only where the LLM walks
 * the drafts. Its time is capped at this fraction of the round trips observed so far (a moving average; 50 ms
 * assumed before the first answer), scaled by what drafts have been earning: the moving average of routed tokens
 * answered by draft walks per call, against DRAFT_HITS_FULL. So a pair whose models rarely agree soon sends its
 * requests at once. The token budget follows
 * from the SLM's measured time per token (8 tokens before it is known), and a deadline enforces it. */
#define DRAFT_TIME_FRACTION 0.3
#define DRAFT_HITS_FULL 0.5
#define FIRST_RTT_MS 50.0
#define FIRST_DRAFT_TOKENS 8
/* Lookahead streams after the answer, so it delays nothing directly, but it costs the LLM one pass per token (and
 * the next request may wait for the pass in progress). The loop asks for the full --lookahead K while lookahead
 * tokens earn (moving average of routed tokens they answer per call, against LOOKAHEAD_HITS_FULL), for fewer as
 * they stop earning, and never fewer than 1, which keeps measuring. */
#define LOOKAHEAD_HITS_FULL 0.5
/* Weight of the latest call in the moving averages of drafting's earnings and of agreement. They start at half the
 * full draft budget (drafting is the costly guess) and agreement 1/2, and move fast, so a short run that earns
 * nothing pays for about one round trip's worth of guessing in all. Lookahead costs the device nothing directly
 * (it streams after the answer), so its average starts at 1 hit per call and moves slower. */
#define EARNING_RATE 0.5
#define LOOKAHEAD_RATE 0.3
/* Speculating while a request travels pays only when the LLM's answer equals the SLM's proposal (the branch then
 * stands); otherwise it is discarded, and the answer may have to wait for the SLM token in progress. The loop keeps
 * decoding meanwhile only while agreement (a moving average, starting at 1/2) times the depth reaches this many
 * tokens; it keeps measuring agreement on every answer either way. */
#define SPECULATION_WORTH 0.5

typedef struct pending {   /* a decided position, not yet shown */
    tr_route_token tok;
    bool routed;
    bool spec;             /* decided behind an unresolved routed position */
    int32_t n_cand;        /* routed: the SLM's best tokens, its proposal first */
    int32_t cand[WIDTH_MAX];
} pending;

typedef struct known {     /* LLM tokens known without a call (see the top of the file) */
    int32_t base, n, n_walk; /* answer[1 .. n_walk) came from a draft walk, the rest from lookahead */
    int32_t n_streamed;      /* lookahead tokens taken so far */
    bool streaming;          /* more lookahead may still arrive (tr_llm_lookahead) */
    int32_t assumed[KNOWN_MAX], answer[KNOWN_MAX];
} known;

typedef struct spec_state {
    route_run *r;
    int32_t *out, cap;
    int32_t end;              /* r->len never exceeds n_prompt + n_predict */
    int32_t depth, lookahead, draft_tokens, draft_span, draft_width;
    bool draft_fixed;         /* the full draft_tokens on every request, no deadline */
    int32_t n_conf;
    pending *br;              /* indexed by position */
    bool in_flight;
    int32_t req_pos;
    int32_t branch_at_send;   /* r->len when the request left */
    double t_sent;
    tr_llm_draft draft;       /* the draft of the request in flight */
    int32_t draft_q0;         /* the position the draft was built for */
    int32_t draft_budget;     /* tokens this draft may hold (draft_tokens, or fewer when the SLM is slow) */
    double draft_deadline_ms; /* drafting stops here */
    double rtt_ms, slm_token_ms; /* moving averages: a call's round trip, one SLM token */
    double draft_hits;        /* moving average: routed tokens answered by draft walks per call */
    double lookahead_hits;    /* moving average: routed tokens answered by lookahead per call */
    int32_t walk_hits, stream_hits; /* ... since the last request left */
    int32_t n_sent;           /* requests sent */
    double agreement;         /* moving average: answers equal to the SLM's proposal */
    known k;
} spec_state;

/* Evaluates the last appended token in the SLM when generation can still go past it. */
static tr_status slm_advance(spec_state *s) {
    route_run *r = s->r;
    if (r->len >= s->end || route_is_eog(r, r->seq[r->len - 1]) || tr_context_n_past(r->slm) >= r->len) return TR_OK;
    const double t0 = route_now_ms();
    tr_status st = tr_context_eval(r->slm, &r->seq[r->len - 1], 1, TR_EVAL_LOGITS_LAST);
    r->slm_pending_ms = route_now_ms() - t0;
    s->slm_token_ms = s->slm_token_ms > 0 ? 0.9 * s->slm_token_ms + 0.1 * r->slm_pending_ms : r->slm_pending_ms;
    return st;
}

static bool can_decide(const spec_state *s) {
    return s->r->len < s->end && tr_context_n_past(s->r->slm) == s->r->len;
}

/* The SLM side of position r->len; for a routed position also its best candidates (the proposal first). */
static tr_status decide(spec_state *s, pending *p) {
    route_run *r = s->r;
    memset(p, 0, sizeof *p);
    p->tok.logprob = NAN;
    tr_status st = route_decide(r, &p->tok, &p->routed);
    if (st != TR_OK || !p->routed) return st;
    const float *logits = tr_context_logits(r->slm, -1);
    p->cand[p->n_cand++] = p->tok.slm_id;
    if (s->draft_tokens <= 0) return TR_OK;
    const int32_t want = s->draft_width > DEEP_WIDTH ? s->draft_width : DEEP_WIDTH;
    while (p->n_cand < want && p->n_cand < r->n_vocab) { /* the next best not yet taken */
        int32_t best = -1;
        for (int32_t i = 0; i < r->n_vocab; i++) {
            bool taken = false;
            for (int32_t c = 0; c < p->n_cand && !taken; c++) taken = p->cand[c] == i;
            if (!taken && (best < 0 || logits[i] > logits[best])) best = i;
        }
        p->cand[p->n_cand++] = best;
    }
    return TR_OK;
}

/* Appends the streamed lookahead ids[0..n) beyond what the table has. */
static void known_append(spec_state *s, const int32_t *ids, int32_t n, bool complete) {
    known *k = &s->k;
    for (int32_t i = k->n_streamed; i < n && k->n < KNOWN_MAX; i++) {
        k->answer[k->n] = ids[i];
        k->assumed[k->n] = ids[i];
        k->n++;
    }
    if (n > k->n_streamed) k->n_streamed = n;
    k->streaming = !complete && k->n < KNOWN_MAX;
}

/* Appends the lookahead that has streamed in since the table was filled. */
static void known_refresh(spec_state *s) {
    if (!s->k.streaming) return;
    int32_t ids[TR_LOOKAHEAD_MAX];
    bool complete;
    const int32_t n = tr_llm_lookahead(s->r->llm, ids, &complete);
    known_append(s, ids, n, complete);
}

/* The LLM's token for position q from the table, when the sequence since its base still matches. */
static bool known_take(spec_state *s, int32_t q, int32_t *id, bool *from_walk) {
    known_refresh(s);
    const known *k = &s->k;
    if (q < k->base || q - k->base >= k->n || k->answer[q - k->base] < 0) return false;
    for (int32_t j = k->base; j < q; j++)
        if (s->r->seq[j] != k->assumed[j - k->base]) return false;
    *id = k->answer[q - k->base];
    *from_walk = q - k->base < k->n_walk;
    return true;
}

/* At a routed position q the table does not answer yet: when q is the very position the lookahead stream goes on
 * with (the sequence since the table's base equals every token it assumed so far), the stream's next token is the
 * LLM's token for q, due within about one LLM pass — sooner than a new request's round trip. Waits for it (the
 * wait counts in llm_wait_ms); true when the table now answers q. */
static bool known_wait(spec_state *s, int32_t q, int32_t *id, bool *from_walk) {
    known *k = &s->k;
    while (k->streaming && q == k->base + k->n) {
        for (int32_t j = k->base; j < q; j++)
            if (s->r->seq[j] != k->assumed[j - k->base]) return false;
        int32_t ids[TR_LOOKAHEAD_MAX];
        bool complete;
        const double t0 = route_now_ms();
        const int32_t n = tr_llm_lookahead_wait(s->r->llm, k->n_streamed, ids, &complete);
        s->r->stats->llm_wait_ms += route_now_ms() - t0;
        known_append(s, ids, n, complete);
    }
    return known_take(s, q, id, from_walk);
}

/* Drops the branch from position q on (the SLM's cache too) and puts id there. */
static tr_status replace_at(spec_state *s, int32_t q, int32_t id) {
    route_run *r = s->r;
    r->stats->n_spec_discarded += r->len - q - 1;
    r->len = q;
    tr_status st = TR_OK;
    if (tr_context_n_past(r->slm) > q) st = tr_context_truncate(r->slm, q);
    if (st != TR_OK) return st;
    r->seq[r->len++] = id;
    return slm_advance(s);
}

/* Shows the decided position n_conf with its final token (tok->id). */
static tr_status confirm(spec_state *s, tr_route_token *tok, bool *go_on) {
    route_run *r = s->r;
    const int32_t q = s->n_conf;
    tr_status st = tok->id == r->seq[q] ? TR_OK : replace_at(s, q, tok->id);
    if (st != TR_OK) return st;
    if (s->br[q].spec && !s->br[q].routed) r->stats->n_spec_kept++;
    s->n_conf++;
    return route_emit(r, tok, s->out, s->cap, go_on);
}

/* Shows every position that can be shown: unrouted ones, and routed ones whose LLM token is known. */
static tr_status drain(spec_state *s, bool *go_on) {
    route_run *r = s->r;
    while (*go_on && s->n_conf < r->len) {
        pending *p = &s->br[s->n_conf];
        tr_route_token tok = p->tok;
        if (p->routed) {
            int32_t id;
            bool from_walk;
            if (s->in_flight || !known_take(s, s->n_conf, &id, &from_walk)) return TR_OK;
            tok.id = id;
            tok.source = TR_SOURCE_LLM;
            tok.logprob = NAN;
            tok.lookahead_hit = true;
            r->stats->n_lookahead_hits++;
            r->stats->n_draft_hits += from_walk;
            s->walk_hits += from_walk;
            s->stream_hits += !from_walk;
        }
        tr_status st = confirm(s, &tok, go_on);
        if (st != TR_OK) return st;
    }
    return TR_OK;
}

/* ---------------------------------------------------------------- building the draft */

static int32_t draft_used(const spec_state *s) { return s->draft.start[s->draft.n_branches]; }

/* Appends a token to branch b (the last opened); false when the draft is full or drafting is out of time. */
static bool draft_push(spec_state *s, int32_t b, int32_t id) {
    tr_llm_draft *d = &s->draft;
    if (b < 0 || b != d->n_branches - 1 || draft_used(s) >= s->draft_budget) return false;
    if (!s->draft_fixed && route_now_ms() > s->draft_deadline_ms) {
        s->draft_budget = draft_used(s); /* out of time: the draft is full */
        return false;
    }
    d->tokens[d->start[b + 1]++] = id;
    return true;
}

/* A new branch under parent (root: under the requested position) starting with first; -1 when the draft is full,
 * out of time, or parent was never recorded. A branch is never left empty. */
static int32_t draft_open(spec_state *s, int32_t parent, bool root, int32_t first) {
    tr_llm_draft *d = &s->draft;
    if ((!root && parent < 0) || d->n_branches == TR_DRAFT_BRANCHES_MAX) return -1;
    d->parent[d->n_branches] = root ? -1 : parent;
    d->start[d->n_branches + 1] = d->start[d->n_branches];
    const int32_t b = d->n_branches++;
    if (draft_push(s, b, first)) return b;
    d->n_branches--;
    return -1;
}

/* Explores the candidates of the routed position pos (the SLM holds seq[0..pos)): for each, the SLM's own
 * continuation up to the next routed position (explored in turn) or the span. Alternatives first, the proposal
 * last, so the SLM's cache ends on its own path, which becomes the speculative branch (on_main). Alternatives get
 * draft room only beyond what the rest of the main path may still need. */
static tr_status explore(spec_state *s, int32_t parent, bool root, int32_t pos, const pending *node, bool on_main) {
    route_run *r = s->r;
    const int32_t width = !on_main ? 1 : root ? s->draft_width : DEEP_WIDTH;
    const int32_t n = width < node->n_cand ? width : node->n_cand;
    const int32_t span_end = s->draft_q0 + s->draft_span;
    for (int32_t m = n - 1; m >= 0; m--) {
        const bool main = on_main && m == 0;
        const int32_t reserve = main ? 0 : span_end - pos;
        if (!main && draft_used(s) + reserve + 1 > s->draft_budget) continue;
        tr_status st = TR_OK;
        if (tr_context_n_past(r->slm) > pos && (st = tr_context_truncate(r->slm, pos)) != TR_OK) return st;
        r->len = pos;
        int32_t b = draft_open(s, parent, root, node->cand[m]);
        if (!main && b < 0) continue;
        r->seq[r->len++] = node->cand[m];
        if ((st = slm_advance(s)) != TR_OK) return st;
        while (r->len < span_end && can_decide(s)) {
            /* Alternatives stop at their budget; the main path where the draft is full (it goes on after the
             * request has left, while the answer travels). */
            if (!main && draft_used(s) + reserve >= s->draft_budget) break;
            if (main && b < 0) break;
            pending p;
            if ((st = decide(s, &p)) != TR_OK) return st;
            p.spec = true;
            int32_t id = p.tok.id;
            bool from_walk;
            const bool is_known = p.routed && known_take(s, r->len, &id, &from_walk);
            if (main) s->br[r->len] = p;
            if (p.routed && !is_known) {
                st = explore(s, b, false, r->len, &p, main);
                if (st != TR_OK) return st;
                break;
            }
            if (!draft_push(s, b, id)) b = -1;
            r->seq[r->len++] = id;
            if ((st = slm_advance(s)) != TR_OK) return st;
        }
    }
    return TR_OK;
}

/* The draft for a request at n_conf when a branch already stands: the branch as a chain, one branch per routed
 * position in it (no SLM work). */
static void draft_from_branch(spec_state *s) {
    route_run *r = s->r;
    int32_t b = -1;
    for (int32_t q = s->n_conf; q < r->len && q < s->n_conf + s->draft_span; q++) {
        const bool root = q == s->n_conf;
        if (root || s->br[q].routed) {
            if ((b = draft_open(s, b, root, r->seq[q])) < 0) break;
        } else if (!draft_push(s, b, r->seq[q])) {
            break;
        }
    }
}

/* ---------------------------------------------------------------- requests */

/* Requests the LLM's token at n_conf (a routed position; when the branch is empty it is decided here as p). */
static tr_status send(spec_state *s, const pending *p) {
    route_run *r = s->r;
    const int32_t q = s->n_conf;
    memset(&s->draft, 0, sizeof s->draft);
    s->draft_q0 = q;
    if (s->n_sent++ > 0) { /* what the previous request's reply has earned since */
        s->draft_hits = (1 - EARNING_RATE) * s->draft_hits + EARNING_RATE * s->walk_hits;
        s->lookahead_hits = (1 - LOOKAHEAD_RATE) * s->lookahead_hits + LOOKAHEAD_RATE * s->stream_hits;
        s->walk_hits = s->stream_hits = 0;
    }
    const double rtt_ms = s->rtt_ms > 0 ? s->rtt_ms : FIRST_RTT_MS;
    const double earning = s->draft_hits < DRAFT_HITS_FULL ? s->draft_hits / DRAFT_HITS_FULL : 1.0;
    const double draft_ms = DRAFT_TIME_FRACTION * rtt_ms * earning;
    const double affordable = s->slm_token_ms > 0 ? draft_ms / s->slm_token_ms : FIRST_DRAFT_TOKENS;
    s->draft_budget = affordable < s->draft_tokens && !s->draft_fixed ? (int32_t)affordable : s->draft_tokens;
    s->draft_deadline_ms = route_now_ms() + draft_ms;
    tr_status st = TR_OK;
    if (p) { /* fresh: explore the tree; its main path becomes the branch */
        s->br[q] = *p;
        if (s->draft_tokens > 0) {
            st = explore(s, -1, true, q, p, true);
        } else {
            r->seq[r->len++] = p->tok.slm_id;
            if (s->depth > 0) st = slm_advance(s);
        }
        if (st != TR_OK) return st;
    } else if (s->draft_tokens > 0) {
        draft_from_branch(s);
    }
    const bool has_draft = s->draft.n_branches > 0;
    int32_t lookahead = s->lookahead;
    if (s->lookahead_hits < LOOKAHEAD_HITS_FULL) {
        lookahead = (int32_t)ceil(s->lookahead * s->lookahead_hits / LOOKAHEAD_HITS_FULL);
        if (lookahead < 1) lookahead = s->lookahead > 0 ? 1 : 0;
    }
    if ((st = tr_llm_start_draft(r->llm, r->seq, q, has_draft ? &s->draft : NULL, lookahead)) != TR_OK) return st;
    s->in_flight = true;
    s->req_pos = q;
    s->branch_at_send = r->len;
    s->t_sent = route_now_ms();
    return TR_OK;
}

/* Fills the table from a reply to the request at q (see the top of the file). */
static void learn(spec_state *s, int32_t q, const tr_llm_reply *rep) {
    known *k = &s->k;
    const tr_llm_draft *d = &s->draft;
    int32_t answers[TR_DRAFT_BRANCHES_MAX + 1], path[TR_DRAFT_BRANCHES_MAX + 1];
    answers[0] = rep->id;
    memcpy(answers + 1, rep->verify, (size_t)rep->n_verify * sizeof *answers);
    const int32_t n_path = d->n_branches > 0 ? draft_walk(d, answers, rep->n_verify, path) : 0;
    k->base = q;
    k->n = 0;
    k->answer[k->n] = rep->id;
    for (int32_t i = 0; i < n_path; i++) {
        for (int32_t j = d->start[path[i]]; j < d->start[path[i] + 1]; j++) {
            k->assumed[k->n++] = d->tokens[j];
            k->answer[k->n] = -1;
        }
        k->answer[k->n] = rep->verify[i];
    }
    k->n_walk = k->n + 1; /* answer[0 .. n] are the call's answer and the walk's */
    k->assumed[k->n] = k->answer[k->n];
    k->n++;
    for (int32_t i = 0; i < rep->n_lookahead && k->n < KNOWN_MAX; i++) {
        k->answer[k->n] = rep->lookahead[i];
        k->assumed[k->n] = rep->lookahead[i];
        k->n++;
    }
    k->n_streamed = rep->n_lookahead;
    k->streaming = s->lookahead > 0 && k->n < KNOWN_MAX; /* the rest streams in (tr_llm_lookahead) */
}

/* Waits for the answer in flight and shows the position it was for. */
static tr_status await_answer(spec_state *s, bool *go_on) {
    route_run *r = s->r;
    const bool ready = tr_llm_ready(r->llm);
    const double t0 = route_now_ms();
    tr_llm_reply rep;
    const tr_status call_st = tr_llm_finish(r->llm, &rep);
    const double waited_ms = route_now_ms() - t0;
    if (!ready) r->stats->llm_blocking++;
    r->stats->llm_wait_ms += waited_ms;
    s->in_flight = false;
    tr_route_token tok = s->br[s->req_pos].tok;
    tok.llm_ms = route_now_ms() - s->t_sent;
    tok.wait_ms = waited_ms;
    if (call_st == TR_OK) s->rtt_ms = s->rtt_ms > 0 ? 0.8 * s->rtt_ms + 0.2 * tok.llm_ms : tok.llm_ms;
    tr_status st = route_llm_outcome(r, &tok, call_st, rep.id, rep.logprob);
    if (st != TR_OK) return st; /* the branch is never shown */
    if (!tok.llm_unavailable) {
        if (tok.id == tok.slm_id) r->stats->n_spec_agree++;
        else r->stats->n_spec_disagree++;
        s->agreement = (1 - EARNING_RATE) * s->agreement + EARNING_RATE * (tok.id == tok.slm_id);
        learn(s, s->req_pos, &rep);
        /* The answer selects a root branch yet nothing was verified: a backend that does not verify drafts
         * (--openai, --llamacpp). Stop drafting for it rather than spend SLM work on every request. */
        if (s->draft.n_branches > 0 && rep.n_verify == 0 && draft_child(&s->draft, -1, rep.id) >= 0)
            s->draft_tokens = 0;
    }
    return confirm(s, &tok, go_on);
}

static tr_status step(spec_state *s, bool *go_on) {
    route_run *r = s->r;
    tr_status st = drain(s, go_on);
    if (st != TR_OK || !*go_on) return st;
    if (s->n_conf < r->len) { /* waiting on the routed position n_conf */
        if (!s->in_flight) {
            int32_t id;
            bool from_walk;
            return known_wait(s, s->n_conf, &id, &from_walk) ? TR_OK : send(s, NULL); /* drain shows it next */
        }
        /* The branch drafted before sending may be longer; speculation while waiting adds at most depth beyond it. */
        const int32_t limit = s->depth > s->draft_span ? s->depth : s->draft_span;
        if (tr_llm_ready(r->llm) || r->len - s->n_conf >= limit || r->len - s->branch_at_send >= s->depth ||
            !can_decide(s) || s->agreement * s->depth < SPECULATION_WORTH)
            return await_answer(s, go_on);
        pending *p = &s->br[r->len]; /* keep decoding on the SLM's proposals meanwhile */
        if ((st = decide(s, p)) != TR_OK) return st;
        p->spec = true;
        int32_t id = p->tok.id;
        bool from_walk;
        if (p->routed) known_take(s, r->len, &id, &from_walk);
        r->seq[r->len++] = id;
        return slm_advance(s);
    }
    if ((st = slm_advance(s)) != TR_OK) return st; /* a confirmed proposal that was not speculated on */
    pending p;
    if ((st = decide(s, &p)) != TR_OK) return st;
    int32_t id = p.tok.id;
    bool from_walk;
    if (p.routed && !known_take(s, r->len, &id, &from_walk) && !known_wait(s, r->len, &id, &from_walk))
        return send(s, &p);
    s->br[r->len] = p;
    r->seq[r->len++] = id;
    return slm_advance(s); /* drain shows it next */
}

tr_status route_run_speculative(route_run *r, int32_t *out, int32_t cap) {
    const tr_route_params *p = r->p;
    spec_state *s = calloc(1, sizeof *s);
    if (!s) return tr_fail(TR_ERR_NOMEM, "out of memory");
    *s = (spec_state){.r = r, .out = out, .cap = cap, .depth = p->speculate_depth, .lookahead = p->lookahead,
                      .draft_tokens = p->draft_tokens, .n_conf = r->len, .draft_hits = DRAFT_HITS_FULL / 2, .lookahead_hits = 1, .agreement = 0.5};
    s->draft_span = p->draft_span > 0 ? p->draft_span : p->draft_tokens;
    s->draft_width = p->draft_width > 0 ? p->draft_width : 1;
    s->draft_fixed = p->draft_fixed;
    s->end = r->n_prompt + p->n_predict;
    s->br = malloc(((size_t)s->end + 1) * sizeof *s->br);
    if (!s->br) {
        free(s);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    tr_status st = TR_OK;
    bool go_on = true;
    while (st == TR_OK && go_on) {
        if (route_aborted(r)) {
            st = route_abort_status();
            break;
        }
        st = step(s, &go_on);
    }
    if (s->in_flight) { /* stopped with a request in flight (error, abort, end): wait for it, keep the first error */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tr_last_error());
        tr_llm_reply rep;
        tr_llm_finish(r->llm, &rep);
        if (st != TR_OK) tr_fail(st, "%s", msg);
        else tr_clear_error();
    }
    backend_settle(r->llm); /* the last reply's lookahead stops streaming; the statistics are final */
    free(s->br);
    free(s);
    return st;
}
