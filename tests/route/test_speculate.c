/* test_speculate.c — the speculative loop (speculate_depth, lookahead) on the real tiny pair against the
 * synchronous loop: the same token ids, sources, text and stop point for several prompts, tau values, depths and
 * lookaheads, under randomized answer delays (the backend's jitter hook); a sampled LLM (draw seeded by position)
 * gives the same tokens too; the cost accounting adds up; an LLM that fails while the loop speculates ends as the
 * failure policy says (fallback: the same tokens and marks as the synchronous loop; error: only confirmed tokens
 * were shown). The failing backend is a real one (the embedded LLM) wrapped to fail chosen calls. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/demo_pair.h"
#include "support/fixtures.h"
#include "tokroute.h"

#define N_GEN 48


static tr_context *new_ctx(const tr_model *m) { return demo_context(m, 1); }

static tr_llm_backend *new_backend(const tr_model *llm, float temperature) {
    tr_sampler_params sp = tr_sampler_default_params();
    sp.temperature = temperature;
    sp.seed = 1234;
    return demo_backend(llm, 1, &sp);
}


/* What a run showed. */
typedef struct run_result {
    int32_t n;
    int32_t ids[N_GEN];
    tr_token_source source[N_GEN];
    bool unavailable[N_GEN];
    char text[4096];
    size_t text_len;
    tr_route_stats stats;
    tr_status status;
} run_result;

static bool record(void *user, const tr_route_token *t) {
    run_result *r = user;
    assert_int_equal(t->index, r->n);
    assert_true(r->n < N_GEN);
    r->ids[r->n] = t->id;
    r->source[r->n] = t->source;
    r->unavailable[r->n] = t->llm_unavailable;
    r->n++;
    return true;
}

static bool record_text(void *user, const char *text, size_t len, const tr_route_token *t) {
    (void)t;
    run_result *r = user;
    assert_true(r->text_len + len < sizeof r->text);
    memcpy(r->text + r->text_len, text, len);
    r->text_len += len;
    return true;
}

typedef struct run_cfg {
    float tau;
    int32_t depth, lookahead;
    int32_t draft, span, width; /* draft verification */
    bool draft_fixed;
    float llm_temperature;
    double jitter_ms;
    uint64_t jitter_seed;
    bool stop_at_eog;
    const char *stop;
} run_cfg;

static void run(const demo_pair *p, tr_llm_backend *llm, const int32_t *prompt, int32_t n_prompt, const run_cfg *c,
                run_result *out) {
    memset(out, 0, sizeof *out);
    tr_context *ctx = new_ctx(p->slm);
    tr_router *router;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
    tr_route_params rp = tr_route_default_params();
    rp.mode = TR_MODE_JOINT;
    rp.tau = c->tau;
    rp.n_predict = N_GEN;
    rp.stop_at_eog = c->stop_at_eog;
    rp.sampling.temperature = 0.0f;
    rp.speculate_depth = c->depth;
    rp.lookahead = c->lookahead;
    rp.draft_tokens = c->draft;
    rp.draft_span = c->span;
    rp.draft_width = c->width;
    rp.draft_fixed = c->draft_fixed;
    rp.on_token = record;
    rp.on_text = record_text;
    rp.user = out;
    const char *stops[1] = {c->stop};
    if (c->stop) rp.stop = stops, rp.n_stop = 1;
    tr_llm_backend_set_jitter(llm, c->jitter_ms, c->jitter_seed);
    int32_t ids[N_GEN];
    out->status = tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, ids, N_GEN, &out->stats);
    for (int32_t i = 0; i < out->n; i++) assert_int_equal(ids[i], out->ids[i]);
    tr_router_free(router);
    tr_context_free(ctx);
}

static void assert_same(const run_result *a, const run_result *b, const char *what) {
    if (a->n != b->n) fail_msg("%s: %d tokens, synchronous %d", what, b->n, a->n);
    for (int32_t i = 0; i < a->n; i++)
        if (a->ids[i] != b->ids[i] || a->source[i] != b->source[i] || a->unavailable[i] != b->unavailable[i])
            fail_msg("%s: token %d is %d (%s%s), synchronous %d (%s%s)", what, i, b->ids[i],
                     b->source[i] ? "llm" : "slm", b->unavailable[i] ? ", unavailable" : "", a->ids[i],
                     a->source[i] ? "llm" : "slm", a->unavailable[i] ? ", unavailable" : "");
    assert_int_equal(a->text_len, b->text_len);
    assert_memory_equal(a->text, b->text, a->text_len);
    assert_int_equal(a->stats.n_routed, b->stats.n_routed);
    assert_int_equal(a->stats.n_fallback, b->stats.n_fallback);
    assert_int_equal(a->stats.stopped_by_eog, b->stats.stopped_by_eog);
    assert_int_equal(a->stats.stopped_by_string, b->stats.stopped_by_string);
}

static const char *prompts[] = {"Once upon a time", "Tom and his dog went to the park.", "The little bird",
                                "Lily wanted to"};

static void identical_to_sync(void **state) {
    demo_pair *p = *state;
    const float taus[] = {0.3f, 0.5f, 0.7f, 0.9f};
    /* depth, lookahead, draft tokens, span, width */
    const int32_t configs[][5] = {{8, 4, 0, 0, 0},   {8, 0, 0, 0, 0},   {0, 4, 0, 0, 0},     {2, 1, 0, 0, 0},
                                  {64, 16, 0, 0, 0}, {8, 8, 96, 32, 3}, {8, 0, 16, 0, 1},    {0, 0, 64, 8, 2},
                                  {2, 1, 256, 64, 8}, {1, 0, 1, 1, 1}};
    int64_t n_runs = 0, hits = 0, kept = 0, discarded = 0, agree = 0, disagree = 0, draft_hits = 0;
    for (size_t k = 0; k < sizeof prompts / sizeof prompts[0]; k++) {
        int32_t prompt[64];
        const int32_t n_prompt = demo_prompt_tokens(p->slm, prompts[k], prompt, 64);
        for (size_t t = 0; t < sizeof taus / sizeof taus[0]; t++) {
            tr_llm_backend *llm = new_backend(p->llm, 0.0f);
            run_cfg c = {.tau = taus[t], .stop_at_eog = true};
            run_result ref, got;
            run(p, llm, prompt, n_prompt, &c, &ref);
            assert_int_equal(ref.status, TR_OK);
            for (size_t m = 0; m < sizeof configs / sizeof configs[0]; m++)
                for (int j = 0; j < 3; j++) {
                    c.depth = configs[m][0];
                    c.lookahead = configs[m][1];
                    c.draft = configs[m][2];
                    c.span = configs[m][3];
                    c.width = configs[m][4];
                    c.jitter_ms = j == 0 ? 0.0 : j == 1 ? 0.5 : 3.0; /* answers early, mid-branch, late */
                    c.draft_fixed = j == 1; /* full drafts whatever the timing; else the adaptive cap */
                    c.jitter_seed = 77 + (uint64_t)(k * 131 + t * 17 + m * 5 + (size_t)j);
                    run(p, llm, prompt, n_prompt, &c, &got);
                    char what[160];
                    snprintf(what, sizeof what, "'%s' tau %.1f depth %d lookahead %d draft %d/%d/%d jitter %.1f",
                             prompts[k], (double)c.tau, c.depth, c.lookahead, c.draft, c.span, c.width, c.jitter_ms);
                    assert_int_equal(got.status, TR_OK);
                    assert_same(&ref, &got, what);
                    const tr_route_stats *s = &got.stats;
                    /* Accounting adds up: each routed token is a call or a lookahead hit; each call resolved. */
                    assert_int_equal(s->llm_calls + s->n_lookahead_hits, s->n_routed);
                    assert_int_equal(s->n_spec_agree + s->n_spec_disagree, s->llm_calls);
                    assert_true(s->llm_blocking <= s->llm_calls);
                    if (c.lookahead == 0) assert_int_equal(s->n_lookahead_hits, s->n_draft_hits);
                    if (c.draft == 0) assert_int_equal(s->n_draft_hits + s->draft_tokens_sent, 0);
                    assert_true(s->n_draft_hits <= s->n_lookahead_hits);
                    assert_true(s->draft_tokens_verified <= s->draft_tokens_sent);
                    assert_true(s->draft_tokens_sent <= (int64_t)c.draft * s->llm_calls);
                    if (c.depth == 0 && c.draft == 0) assert_int_equal(s->n_spec_kept + s->n_spec_discarded, 0);
                    n_runs++;
                    hits += s->n_lookahead_hits;
                    draft_hits += s->n_draft_hits;
                    kept += s->n_spec_kept;
                    discarded += s->n_spec_discarded;
                    agree += s->n_spec_agree;
                    disagree += s->n_spec_disagree;
                }
            tr_llm_backend_free(llm);
        }
    }
    fprintf(stderr, "%lld runs identical to the synchronous loop: %lld hits (%lld from drafts), speculative tokens "
            "%lld kept / %lld discarded, SLM agreed with %lld of %lld answers\n", (long long)n_runs, (long long)hits,
            (long long)draft_hits, (long long)kept, (long long)discarded, (long long)agree,
            (long long)(agree + disagree));
    /* The test exercises both branches of every mechanism. */
    assert_true(hits > draft_hits && draft_hits > 0 && kept > 0 && discarded > 0 && agree > 0 && disagree > 0);
}

/* A sampled LLM draws at each position from (seed, position): the same tokens with speculation. */
static void sampled_llm_identical(void **state) {
    demo_pair *p = *state;
    int32_t sampled_draft_hits = 0;
    for (size_t k = 0; k < sizeof prompts / sizeof prompts[0]; k++) {
        int32_t prompt[64];
        const int32_t n_prompt = demo_prompt_tokens(p->slm, prompts[k], prompt, 64);
        tr_llm_backend *llm = new_backend(p->llm, 0.9f);
        run_cfg c = {.tau = 0.6f};
        run_result ref, got;
        run(p, llm, prompt, n_prompt, &c, &ref);
        c.depth = 8;
        c.lookahead = 4; /* a sampled LLM gives no lookahead */
        c.jitter_ms = 1.0;
        run(p, llm, prompt, n_prompt, &c, &got);
        assert_same(&ref, &got, "sampled LLM");
        assert_int_equal(got.stats.n_lookahead_hits, 0);
        /* Drafts are verified with the same (seed, position) draws. */
        c.draft = 96;
        c.span = 32;
        c.width = 3;
        c.draft_fixed = true; /* full drafts, so draft walks answer some routed tokens whatever the machine's speed */
        run(p, llm, prompt, n_prompt, &c, &got);
        assert_same(&ref, &got, "sampled LLM with drafts");
        assert_int_equal(got.stats.n_lookahead_hits, got.stats.n_draft_hits);
        sampled_draft_hits += got.stats.n_draft_hits;
        tr_llm_backend_free(llm);
    }
    assert_true(sampled_draft_hits > 0);
}

/* Stop strings and end-of-generation tokens inside a speculative branch stop where the synchronous loop stops. */
static void stops_inside_branches(void **state) {
    demo_pair *p = *state;
    const char *stops[] = {"the", "d", ".", "!"};
    for (size_t k = 0; k < sizeof stops / sizeof stops[0]; k++) {
        int32_t prompt[64];
        const int32_t n_prompt = demo_prompt_tokens(p->slm, prompts[k % 4], prompt, 64);
        tr_llm_backend *llm = new_backend(p->llm, 0.0f);
        run_cfg c = {.tau = 0.6f, .stop = stops[k], .stop_at_eog = true};
        run_result ref, got;
        run(p, llm, prompt, n_prompt, &c, &ref);
        c.depth = 16;
        c.lookahead = 4;
        c.jitter_ms = 2.0;
        c.draft = k % 2 ? 96 : 0;
        c.span = 32;
        c.width = 3;
        run(p, llm, prompt, n_prompt, &c, &got);
        assert_same(&ref, &got, stops[k]);
        tr_llm_backend_free(llm);
    }
}

/* The embedded LLM, failing the calls whose number is in fail_mask (bit i: call i), or every call from fail_from. */
typedef struct flaky {
    tr_llm_backend *inner;
    int64_t n_calls;
    uint64_t fail_mask;
    int64_t fail_from;
} flaky;

static tr_status flaky_next(void *impl, tr_llm_call *call) {
    flaky *f = impl;
    const int64_t i = f->n_calls++;
    if ((i < 64 && (f->fail_mask >> i) & 1) || (f->fail_from >= 0 && i >= f->fail_from))
        return TR_ERR_NETWORK; /* the wrapper prefixes the message with the backend name */
    return tr_llm_next_token_ex(f->inner, call->tokens, call->n_tokens, &call->id, &call->logprob);
}

static const tr_llm_backend_ops flaky_ops = {.name = "flaky", .next_token = flaky_next};

static void failure_while_speculating(void **state) {
    demo_pair *p = *state;
    int32_t prompt[64];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, prompts[0], prompt, 64);
    const uint64_t masks[] = {0x0, 0x2, 0x15, 0xF0};
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        run_result ref, got;
        for (int pass = 0; pass < 2; pass++) {
            tr_llm_backend *inner = new_backend(p->llm, 0.0f);
            flaky f = {.inner = inner, .fail_mask = masks[m], .fail_from = m == 0 ? 3 : -1};
            tr_llm_backend *b = NULL;
            assert_int_equal(tr_llm_backend_create(&flaky_ops, &f, &b), TR_OK);
            tr_llm_backend_set_breaker(b, 0, 0); /* failures by call number, not by time */
            /* Lookahead off and a backend that verifies no drafts: the calls are then the synchronous loop's, so
             * the same calls fail (the draft still shapes the loop). */
            run_cfg c = {.tau = 0.7f, .depth = pass ? 8 : 0, .jitter_ms = pass ? 2.0 : 0.0, .draft = pass ? 96 : 0,
                         .span = 32, .width = 3};
            run(p, b, prompt, n_prompt, &c, pass ? &got : &ref);
            tr_llm_backend_free(b);
            tr_llm_backend_free(inner);
        }
        assert_int_equal(ref.status, TR_OK);
        assert_int_equal(got.status, TR_OK);
        assert_true(ref.stats.n_fallback > 0);
        assert_same(&ref, &got, "fallback");
    }
    /* on_llm_failure error: the run stops with the error and shows only confirmed tokens (a prefix of the run
     * without failures), never a speculative one. */
    run_result clean;
    tr_llm_backend *plain = new_backend(p->llm, 0.0f);
    run_cfg c0 = {.tau = 0.7f};
    run(p, plain, prompt, n_prompt, &c0, &clean);
    tr_llm_backend_free(plain);
    tr_llm_backend *inner = new_backend(p->llm, 0.0f);
    flaky f = {.inner = inner, .fail_from = 4};
    tr_llm_backend *b = NULL;
    assert_int_equal(tr_llm_backend_create(&flaky_ops, &f, &b), TR_OK);
    tr_context *ctx = new_ctx(p->slm);
    tr_router *router;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
    tr_route_params rp = tr_route_default_params();
    rp.tau = 0.7f;
    rp.n_predict = N_GEN;
    rp.speculate_depth = 8;
    rp.lookahead = 4;
    rp.draft_tokens = 96;
    rp.on_llm_failure = TR_LLM_FAILURE_ERROR;
    run_result got = {0};
    rp.on_token = record;
    rp.user = &got;
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, router, b, prompt, n_prompt, &rp, NULL, 0, &st), TR_ERR_NETWORK);
    assert_non_null(strstr(tr_last_error(), "flaky"));
    assert_true(got.n > 0 && got.n < clean.n);
    for (int32_t i = 0; i < got.n; i++) assert_int_equal(got.ids[i], clean.ids[i]);
    tr_router_free(router);
    tr_context_free(ctx);
    tr_llm_backend_free(b);
    tr_llm_backend_free(inner);
}

/* An LLM that never takes the SLM's view: its next token is a fixed function of the last one, so its answers
 * rarely equal the SLM's proposal and no draft ever matches. It streams its lookahead (the same function on). The
 * loop must notice: speculation while waiting and drafting before sending stop after a few calls, and the output
 * still equals the synchronous loop's. */
typedef struct contrary {
    int32_t n_calls, n_drafted[64], n_calls_with_draft;
} contrary;

static int32_t contrary_next_id(int32_t last) { return (int32_t)(((int64_t)last * 31 + 7) % 500) + 3; }

static tr_status contrary_next(void *impl, tr_llm_call *call) {
    contrary *c = impl;
    if (c->n_calls < 64) c->n_drafted[c->n_calls] = call->draft ? call->draft->start[call->draft->n_branches] : 0;
    c->n_calls++;
    call->id = contrary_next_id(call->tokens[call->n_tokens - 1]);
    tr_llm_call_answered(call);
    for (int32_t i = 0, t = call->id; i < call->lookahead; i++)
        if (!tr_llm_call_push_lookahead(call, t = contrary_next_id(t))) break;
    return TR_OK;
}

static const tr_llm_backend_ops contrary_ops = {.name = "contrary", .next_token = contrary_next};

static void adapts_to_a_disagreeing_llm(void **state) {
    demo_pair *p = *state;
    int32_t prompt[64];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, prompts[2], prompt, 64);
    contrary sync_state = {0}, spec_state = {0};
    tr_llm_backend *sync_llm, *spec_llm;
    assert_int_equal(tr_llm_backend_create(&contrary_ops, &sync_state, &sync_llm), TR_OK);
    assert_int_equal(tr_llm_backend_create(&contrary_ops, &spec_state, &spec_llm), TR_OK);
    tr_llm_backend_set_rtt(spec_llm, 4);
    run_result a, b;
    const run_cfg sync_cfg = {.tau = 0.9f};
    const run_cfg spec_cfg = {.tau = 0.9f, .depth = 8, .draft = 96, .span = 32, .width = 3};
    run(p, sync_llm, prompt, n_prompt, &sync_cfg, &a);
    run(p, spec_llm, prompt, n_prompt, &spec_cfg, &b);
    assert_same(&a, &b, "contrary LLM");
    const int32_t calls = spec_state.n_calls < 64 ? spec_state.n_calls : 64;
    assert_true(calls >= 20); /* most positions are routed at tau 0.9, and nothing is answered ahead */
    assert_true(b.stats.n_spec_agree * 4 < b.stats.n_spec_disagree);
    /* Drafting shrinks with what drafts have earned (nothing here: 0.7^n of the first budget) until it stops. */
    int32_t first_drafted = 0;
    for (int32_t i = 0; i < calls; i++) first_drafted += i < 4 && spec_state.n_drafted[i] > 0;
    assert_true(first_drafted > 0); /* it did draft at first */
    for (int32_t i = 16; i < calls; i++) assert_int_equal(spec_state.n_drafted[i], 0);
    /* Speculation while waiting stops once agreement x depth < 1/2 (by the 7th disagreement): at most depth
     * discarded tokens per call before that, besides the first calls' drafted branches. */
    assert_true(b.stats.n_spec_discarded <= 12 * (8 + 32));
    printf("contrary LLM: %d calls, %lld speculative tokens discarded, draft tokens in the first calls: %d %d %d %d\n",
           spec_state.n_calls, (long long)b.stats.n_spec_discarded, spec_state.n_drafted[0], spec_state.n_drafted[1],
           spec_state.n_drafted[2], spec_state.n_drafted[3]);
    /* draft_fixed: every call carries a full draft however little drafts earn (the tree may only be smaller near
     * the end of the text), and the tokens are still the synchronous loop's. */
    contrary fixed_state = {0};
    tr_llm_backend *fixed_llm;
    assert_int_equal(tr_llm_backend_create(&contrary_ops, &fixed_state, &fixed_llm), TR_OK);
    tr_llm_backend_set_rtt(fixed_llm, 4);
    run_cfg fixed_cfg = spec_cfg;
    fixed_cfg.draft_fixed = true;
    run_result c;
    run(p, fixed_llm, prompt, n_prompt, &fixed_cfg, &c);
    assert_same(&a, &c, "contrary LLM, fixed drafts");
    const int32_t fixed_calls = fixed_state.n_calls < 64 ? fixed_state.n_calls : 64;
    assert_true(fixed_calls >= 20);
    for (int32_t i = 0; i < fixed_calls / 2; i++) assert_true(fixed_state.n_drafted[i] >= 32);
    tr_llm_backend_free(fixed_llm);
    tr_llm_backend_free(sync_llm);
    tr_llm_backend_free(spec_llm);
}

/* An LLM whose lookahead streams slowly (the embedded LLM underneath, 3 ms per lookahead token). With every
 * position routed, the device reaches the next routed position long before the next token arrives: waiting for
 * the stream (about one token) answers it, where a new request would cost a round trip (40 ms here) and cancel the
 * stream. */
typedef struct slow_stream {
    tr_llm_backend *inner;
    int32_t n_calls;
} slow_stream;

static tr_status slow_stream_next(void *impl, tr_llm_call *call) {
    slow_stream *w = impl;
    w->n_calls++;
    tr_status st = tr_llm_next_token_ex(w->inner, call->tokens, call->n_tokens, &call->id, &call->logprob);
    if (st != TR_OK) return st;
    tr_llm_call_answered(call);
    int32_t seq[256];
    if (call->n_tokens + 1 + call->lookahead > 256) return TR_OK;
    memcpy(seq, call->tokens, (size_t)call->n_tokens * sizeof *seq);
    int32_t n = call->n_tokens;
    seq[n++] = call->id;
    for (int32_t i = 0; i < call->lookahead; i++) {
        usleep(3000);
        if (tr_llm_next_token(w->inner, seq, n, &seq[n]) != TR_OK) return TR_OK;
        if (!tr_llm_call_push_lookahead(call, seq[n++])) break;
    }
    return TR_OK;
}

static const tr_llm_backend_ops slow_stream_ops = {.name = "slow_stream", .next_token = slow_stream_next};

static void waits_for_the_stream(void **state) {
    demo_pair *p = *state;
    int32_t prompt[64];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, prompts[0], prompt, 64);
    slow_stream w = {.inner = new_backend(p->llm, 0.0f)};
    tr_llm_backend *sync_llm = new_backend(p->llm, 0.0f), *llm;
    assert_int_equal(tr_llm_backend_create(&slow_stream_ops, &w, &llm), TR_OK);
    tr_llm_backend_set_rtt(llm, 40);
    run_result a, b;
    const run_cfg sync_cfg = {.tau = 2.0f};
    const run_cfg spec_cfg = {.tau = 2.0f, .depth = 8, .lookahead = 8};
    run(p, sync_llm, prompt, n_prompt, &sync_cfg, &a);
    run(p, llm, prompt, n_prompt, &spec_cfg, &b);
    assert_same(&a, &b, "slow lookahead stream");
    assert_int_equal(b.stats.n_routed, N_GEN);
    /* Each call answers its position and up to 8 more from the stream. */
    printf("slow stream: %d routed, %d calls, %d answered from the stream\n", b.stats.n_routed, w.n_calls,
           b.stats.n_lookahead_hits);
    assert_true(w.n_calls * 4 <= N_GEN);
    assert_int_equal(b.stats.n_lookahead_hits + w.n_calls, N_GEN);
    tr_llm_backend_free(llm);
    tr_llm_backend_free(w.inner);
    tr_llm_backend_free(sync_llm);
}

/* The last finished request's whole lookahead stream (bounded wait). */
static int32_t wait_lookahead(tr_llm_backend *llm, int32_t *ids) {
    const int32_t n = lookahead_when_complete(llm, ids);
    assert_true(n >= 0);
    return n;
}

static void bad_arguments(void **state) {
    demo_pair *p = *state;
    int32_t prompt[64];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, prompts[0], prompt, 64);
    tr_context *ctx = new_ctx(p->slm);
    tr_llm_backend *llm = new_backend(p->llm, 0.0f);
    tr_router *router;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
    tr_route_params rp = tr_route_default_params();
    rp.lookahead = TR_LOOKAHEAD_MAX + 1;
    assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, NULL, 0, NULL), TR_ERR_ARG);
    rp.lookahead = 0;
    rp.speculate_depth = -1;
    assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, NULL, 0, NULL), TR_ERR_ARG);
    /* The asynchronous interface: one request at a time, finish without a request is a state error. */
    tr_llm_reply rep;
    assert_int_equal(tr_llm_finish(llm, &rep), TR_ERR_STATE);
    assert_int_equal(tr_llm_start(llm, prompt, n_prompt, 2), TR_OK);
    assert_int_equal(tr_llm_start(llm, prompt, n_prompt, 2), TR_ERR_STATE);
    int32_t id;
    assert_int_equal(tr_llm_next_token(llm, prompt, n_prompt, &id), TR_ERR_STATE);
    assert_int_equal(tr_llm_finish(llm, &rep), TR_OK);
    assert_true(tr_llm_ready(llm));
    /* The lookahead streams in after the answer (the embedded backend publishes the answer first). */
    int32_t la[TR_LOOKAHEAD_MAX];
    bool complete;
    int32_t n_la = wait_lookahead(llm, la);
    assert_int_equal(n_la, 2);
    assert_true(rep.n_lookahead <= n_la);
    for (int32_t i = 0; i < rep.n_lookahead; i++) assert_int_equal(rep.lookahead[i], la[i]);
    assert_int_equal(tr_llm_next_token(llm, prompt, n_prompt, &id), TR_OK);
    assert_int_equal(id, rep.id);
    /* Each lookahead token is the LLM's greedy next token after the answer and the tokens before it. */
    int32_t longer[64 + 2 + TR_LOOKAHEAD_MAX], first[2] = {la[0], la[1]};
    memcpy(longer, prompt, (size_t)n_prompt * sizeof *prompt);
    longer[n_prompt] = rep.id;
    for (int32_t i = 0; i < n_la; i++) {
        assert_int_equal(tr_llm_next_token(llm, longer, n_prompt + 1 + i, &id), TR_OK);
        assert_int_equal(id, la[i]);
        longer[n_prompt + 1 + i] = la[i];
    }
    /* A newer request cancels the rest of the stream, and tr_llm_lookahead never mixes two requests' streams. */
    assert_int_equal(tr_llm_start(llm, prompt, n_prompt, TR_LOOKAHEAD_MAX), TR_OK);
    assert_int_equal(tr_llm_finish(llm, &rep), TR_OK);
    const int32_t answer = rep.id;
    assert_int_equal(tr_llm_start(llm, longer, n_prompt + 1, TR_LOOKAHEAD_MAX), TR_OK);
    for (int tries = 0; tries < 50; tries++) { /* the old stream while the newer request is in flight */
        n_la = tr_llm_lookahead(llm, la, &complete);
        assert_int_equal(answer, longer[n_prompt]);
        for (int32_t i = 0; i < n_la && i < 2; i++) assert_int_equal(la[i], first[i]);
        usleep(100);
    }
    assert_int_equal(tr_llm_finish(llm, &rep), TR_OK);
    assert_int_equal(rep.id, first[0]); /* the LLM's token after prompt + answer */
    tr_router_free(router);
    tr_llm_backend_free(llm);
    tr_context_free(ctx);
}

/* The draft walk answers every position along the branches it enters exactly as a separate call would, stops where
 * no branch matches, and a malformed draft is refused. */
static void draft_walk_equals_calls(void **state) {
    demo_pair *p = *state;
    int32_t seq[96];
    int32_t n = demo_prompt_tokens(p->slm, prompts[1], seq, 64);
    tr_llm_backend *llm = new_backend(p->llm, 0.0f);
    /* The LLM's own greedy continuation, 12 tokens. */
    int32_t greedy[12];
    for (int32_t i = 0; i < 12; i++) {
        assert_int_equal(tr_llm_next_token(llm, seq, n + i, &greedy[i]), TR_OK);
        seq[n + i] = greedy[i];
    }
    /* Root: a wrong candidate (a leaf), then the right one [g0 g1 g2]; under it a wrong branch and [g3 g4 x] with x
     * not greedy, under which [g5'] can never be entered. */
    tr_llm_draft d = {0};
    const int32_t wrong = (greedy[0] + 1) % 512, x = (greedy[5] + 7) % 512;
    const int32_t branches[][4] = {{-1, 1, wrong, 0}, {-1, 3, 0, 0}, {1, 1, wrong, 0}, {1, 3, 3, 0}, {3, 1, 5, 0}};
    for (int32_t b = 0; b < 5; b++) {
        d.parent[b] = branches[b][0];
        d.start[b + 1] = d.start[b] + branches[b][1];
        for (int32_t i = 0; i < branches[b][1]; i++) {
            const int32_t g = branches[b][0] == -1 && branches[b][2] == 0 ? i : branches[b][2] + i;
            d.tokens[d.start[b] + i] = branches[b][2] == wrong && i == 0 ? wrong : greedy[g];
        }
    }
    d.tokens[d.start[3] + 2] = x; /* branch 3 = [g3 g4 x] */
    d.n_branches = 5;
    tr_llm_reply rep;
    assert_int_equal(tr_llm_start_draft(llm, seq, n, &d, 2), TR_OK);
    assert_int_equal(tr_llm_finish(llm, &rep), TR_OK);
    assert_int_equal(rep.id, greedy[0]);
    int32_t la[TR_LOOKAHEAD_MAX];
    assert_int_equal(wait_lookahead(llm, la), 2);
    /* Entered: branch 1 (answer at n+3 = g3), branch 3 (answer at n+6 after x: a call with that prefix). */
    assert_int_equal(rep.n_verify, 2);
    assert_int_equal(rep.verify[0], greedy[3]);
    int32_t alt[96];
    memcpy(alt, seq, (size_t)(n + 5) * sizeof *alt);
    alt[n + 5] = x;
    int32_t want;
    assert_int_equal(tr_llm_next_token(llm, alt, n + 6, &want), TR_OK);
    assert_int_equal(rep.verify[1], want);
    /* The lookahead follows the last answer. */
    alt[n + 6] = want;
    assert_int_equal(tr_llm_next_token(llm, alt, n + 7, &want), TR_OK);
    assert_int_equal(la[0], want);
    const tr_llm_stats st = tr_llm_backend_stats(llm);
    assert_int_equal(st.draft_tokens_sent, 1 + 3 + 1 + 3 + 1);
    assert_int_equal(st.draft_tokens_verified, 3 + 3);
    /* Malformed: a parent that is not earlier, an empty branch. */
    d.parent[2] = 2;
    assert_int_equal(tr_llm_start_draft(llm, seq, n, &d, 0), TR_ERR_ARG);
    d.parent[2] = 1;
    d.start[2] = d.start[1];
    assert_int_equal(tr_llm_start_draft(llm, seq, n, &d, 0), TR_ERR_ARG);
    assert_true(tr_llm_ready(llm)); /* nothing was started */
    tr_llm_backend_free(llm);
}

/* The same against a real tokroute server in this process (the session protocol's draft, verify and lookahead),
 * with randomized answer delays: the tokens equal the synchronous loop's, greedy and sampled. */
static void server_backend_identical(void **state) {
    demo_pair *p = *state;
    tr_server_params sp = tr_server_default_params();
    sp.port = 0;
    sp.n_threads = 1;
    sp.n_ctx = 256;
    tr_server *srv = NULL;
    assert_int_equal(tr_server_start(p->llm, &sp, &srv), TR_OK);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", tr_server_port(srv));
    /* depth, lookahead, draft tokens, span, width */
    const int32_t configs[][5] = {{8, 8, 96, 32, 3}, {2, 0, 256, 64, 8}, {0, 4, 16, 0, 1}};
    int64_t draft_hits = 0;
    for (int sampled = 0; sampled < 2; sampled++)
        for (size_t k = 0; k < 3; k++) {
            int32_t prompt[64];
            const int32_t n_prompt = demo_prompt_tokens(p->slm, prompts[k], prompt, 64);
            tr_remote_params rp = tr_remote_default_params();
            rp.url = url;
            rp.sampling.temperature = sampled ? 0.9f : 0.0f;
            rp.sampling.seed = 99 + k;
            tr_llm_backend *llm = NULL;
            assert_int_equal(tr_llm_backend_server(&rp, &llm), TR_OK);
            for (size_t t = 0; t < 2; t++) {
                run_cfg c = {.tau = t ? 0.9f : 0.5f, .stop_at_eog = true};
                run_result ref, got;
                run(p, llm, prompt, n_prompt, &c, &ref);
                assert_int_equal(ref.status, TR_OK);
                for (size_t m = 0; m < sizeof configs / sizeof configs[0]; m++) {
                    c.depth = configs[m][0];
                    c.lookahead = configs[m][1];
                    c.draft = configs[m][2];
                    c.span = configs[m][3];
                    c.width = configs[m][4];
                    c.jitter_ms = m == 0 ? 0.0 : m == 1 ? 1.0 : 4.0;
                    c.jitter_seed = 5 + k * 7 + t + m;
                    c.draft_fixed = m == 1;
                    run(p, llm, prompt, n_prompt, &c, &got);
                    char what[128];
                    snprintf(what, sizeof what, "server%s '%s' tau %.1f config %zu", sampled ? " sampled" : "",
                             prompts[k], (double)c.tau, m);
                    assert_int_equal(got.status, TR_OK);
                    assert_same(&ref, &got, what);
                    assert_int_equal(got.stats.llm_calls + got.stats.n_lookahead_hits, got.stats.n_routed);
                    if (sampled) assert_int_equal(got.stats.n_lookahead_hits, got.stats.n_draft_hits);
                    assert_true(got.stats.llm_bytes_sent > 0 || got.stats.n_routed == 0);
                    draft_hits += got.stats.n_draft_hits;
                }
            }
            tr_llm_backend_free(llm);
        }
    fprintf(stderr, "server: %lld routed tokens answered by draft walks\n", (long long)draft_hits);
    assert_true(draft_hits > 0);
    tr_server_free(srv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(identical_to_sync),
        cmocka_unit_test(sampled_llm_identical),
        cmocka_unit_test(stops_inside_branches),
        cmocka_unit_test(failure_while_speculating),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(draft_walk_equals_calls),
        cmocka_unit_test(server_backend_identical),
        cmocka_unit_test(adapts_to_a_disagreeing_llm),
        cmocka_unit_test(waits_for_the_stream),
    };
    return cmocka_run_group_tests(tests, demo_pair_setup, demo_pair_teardown);
}
