/* test_route.c — the routed decode loop on the real tiny pair (student as SLM, stories260K as LLM), greedy:
 * tau = 0 equals the SLM alone, llm mode equals the LLM alone, an intermediate tau equals a slow reference that
 * re-runs both models from scratch at every step (so both KV caches stay consistent across switches), each token
 * is evaluated once by the SLM and at most once by the LLM, plus stop strings, callbacks and bad arguments. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/demo_pair.h"
#include "support/fixtures.h"
#include "tokroute.h"

#define N_GEN 48


static tr_context *new_ctx(const tr_model *m) { return demo_context(m, 2); }

static tr_llm_backend *new_backend(const tr_model *llm) {
    const tr_sampler_params sp = tr_sampler_default_params();
    return demo_backend(llm, 2, &sp);
}


/* Greedy decoding with one model, token by token. */
static void greedy_alone(const tr_model *m, const int32_t *prompt, int32_t n_prompt, int32_t n, int32_t *out) {
    tr_context *ctx = new_ctx(m);
    assert_int_equal(tr_context_eval(ctx, prompt, n_prompt, TR_EVAL_LOGITS_LAST), TR_OK);
    const int32_t V = tr_model_get_info(m)->n_vocab;
    for (int32_t i = 0; i < n; i++) {
        out[i] = tr_argmax(tr_context_logits(ctx, -1), V);
        assert_int_equal(tr_context_eval(ctx, &out[i], 1, TR_EVAL_LOGITS_LAST), TR_OK);
    }
    tr_context_free(ctx);
}

static tr_route_params greedy_params(tr_route_mode mode, float tau) {
    tr_route_params rp = tr_route_default_params();
    rp.mode = mode;
    rp.tau = tau;
    rp.n_predict = N_GEN;
    rp.stop_at_eog = false;
    rp.sampling.temperature = 0.0f;
    return rp;
}

typedef struct recorded {
    int32_t n;
    tr_token_source source[N_GEN];
    float score[N_GEN];
    char text[4096];
    size_t text_len;
    int32_t stop_after; /* return false after this many tokens (0 = never) */
} recorded;

static bool record(void *user, const tr_route_token *t) {
    recorded *r = user;
    if (t->index >= 0) {
        assert_int_equal(t->index, r->n);
        r->source[r->n] = t->source;
        r->score[r->n] = t->score;
        r->n++;
    }
    assert_true(r->text_len + t->text_len < sizeof r->text);
    memcpy(r->text + r->text_len, t->text, t->text_len);
    r->text_len += t->text_len;
    r->text[r->text_len] = '\0';
    return r->stop_after == 0 || r->n < r->stop_after;
}

static void tau_zero_equals_slm_alone(void **state) {
    demo_pair *p = *state;
    int32_t prompt[64], out[N_GEN], ref[N_GEN];
    int32_t n_prompt = demo_prompt_tokens(p->slm, "Once upon a time", prompt, 64);
    greedy_alone(p->slm, prompt, n_prompt, N_GEN, ref);
    tr_context *ctx = new_ctx(p->slm);
    tr_llm_backend *llm = new_backend(p->llm);
    tr_router *router;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
    tr_route_params rp = greedy_params(TR_MODE_JOINT, 0.0f);
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, out, N_GEN, &st), TR_OK);
    assert_int_equal(st.n_tokens, N_GEN);
    assert_int_equal(st.n_routed, 0);
    assert_memory_equal(out, ref, sizeof ref);
    assert_int_equal(tr_llm_backend_stats(llm).calls, 0);
    tr_router_free(router);
    tr_llm_backend_free(llm);
    tr_context_free(ctx);
}

static void llm_mode_equals_llm_alone(void **state) {
    demo_pair *p = *state;
    int32_t prompt[64], out[N_GEN], ref[N_GEN];
    int32_t n_prompt = demo_prompt_tokens(p->slm, "Tom and his dog went to the park.", prompt, 64);
    greedy_alone(p->llm, prompt, n_prompt, N_GEN, ref);
    tr_context *ctx = new_ctx(p->slm);
    tr_llm_backend *llm = new_backend(p->llm);
    tr_route_params rp = greedy_params(TR_MODE_LLM, 0.5f);
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, NULL, llm, prompt, n_prompt, &rp, out, N_GEN, &st), TR_OK);
    assert_memory_equal(out, ref, sizeof ref);
    assert_int_equal(st.n_routed, N_GEN);
    assert_int_equal(st.slm_evaluated, 0);        /* the SLM is not run in llm mode */
    assert_int_equal(st.llm_evaluated, n_prompt + N_GEN - 1); /* each token once */
    tr_llm_backend_free(llm);
    tr_context_free(ctx);
}

/* The slow reference: fresh contexts at every step, the whole sequence evaluated from scratch. */
static void slow_reference(const demo_pair *p, const int32_t *prompt, int32_t n_prompt, float tau, int32_t *out,
                           tr_token_source *src) {
    int32_t seq[256];
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    int32_t len = n_prompt;
    tr_router *router;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
    const tr_model_info *si = tr_model_get_info(p->slm);
    for (int32_t i = 0; i < N_GEN; i++) {
        tr_context *s = new_ctx(p->slm);
        assert_int_equal(tr_context_eval(s, seq, len, TR_EVAL_LOGITS_LAST), TR_OK);
        float score;
        assert_int_equal(tr_router_score(router, tr_context_hidden(s, -1), si->n_embd, tr_context_logits(s, -1),
                                         si->n_vocab, &score), TR_OK);
        int32_t tok = tr_argmax(tr_context_logits(s, -1), si->n_vocab);
        src[i] = TR_SOURCE_SLM;
        if (score < tau) {
            tr_context *l = new_ctx(p->llm);
            assert_int_equal(tr_context_eval(l, seq, len, TR_EVAL_LOGITS_LAST), TR_OK);
            tok = tr_argmax(tr_context_logits(l, -1), tr_model_get_info(p->llm)->n_vocab);
            src[i] = TR_SOURCE_LLM;
            tr_context_free(l);
        }
        tr_context_free(s);
        out[i] = seq[len++] = tok;
    }
    tr_router_free(router);
}

static void intermediate_tau_equals_slow_reference(void **state) {
    demo_pair *p = *state;
    const char *prompts[] = {"Once upon a time", "Tom and his dog went to the park.", "The little bird"};
    for (size_t k = 0; k < sizeof prompts / sizeof prompts[0]; k++) {
        int32_t prompt[64], out[N_GEN], ref[N_GEN];
        tr_token_source ref_src[N_GEN];
        int32_t n_prompt = demo_prompt_tokens(p->slm, prompts[k], prompt, 64);
        const float tau = 0.45f;
        slow_reference(p, prompt, n_prompt, tau, ref, ref_src);
        tr_context *ctx = new_ctx(p->slm);
        tr_llm_backend *llm = new_backend(p->llm);
        tr_router *router;
        assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
        tr_route_params rp = greedy_params(TR_MODE_JOINT, tau);
        recorded rec = {0};
        rp.on_token = record;
        rp.user = &rec;
        tr_route_stats st;
        assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, out, N_GEN, &st), TR_OK);
        int32_t routed = 0;
        for (int32_t i = 0; i < N_GEN; i++) {
            if (out[i] != ref[i] || rec.source[i] != ref_src[i])
                fail_msg("prompt %zu, token %d: got %d from %s, reference %d from %s (score %.6f)", k, i, out[i],
                         rec.source[i] ? "llm" : "slm", ref[i], ref_src[i] ? "llm" : "slm", rec.score[i]);
            routed += ref_src[i] == TR_SOURCE_LLM;
        }
        fprintf(stderr, "prompt %zu: %d of %d tokens routed, identical to the slow reference\n", k, routed, N_GEN);
        /* A meaningful test switches between the models many times. */
        assert_true(routed >= 3 && routed <= N_GEN - 3);
        assert_int_equal(st.n_routed, routed);
        /* Counted work: every token once by the SLM (the last one is never needed), at most once by the LLM. */
        assert_int_equal(st.slm_evaluated, n_prompt + N_GEN - 1);
        assert_true(st.llm_evaluated <= n_prompt + N_GEN - 1);
        assert_int_equal(tr_llm_backend_stats(llm).calls, routed);
        tr_router_free(router);
        tr_llm_backend_free(llm);
        tr_context_free(ctx);
    }
}

static void slm_cache_is_extended_not_refilled(void **state) {
    demo_pair *p = *state;
    int32_t prompt[128], out[N_GEN];
    int32_t n_prompt = demo_prompt_tokens(p->slm, "Once upon a time", prompt, 64);
    tr_context *ctx = new_ctx(p->slm);
    tr_route_params rp = greedy_params(TR_MODE_SLM, 0.5f);
    rp.n_predict = 8;
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, out, N_GEN, &st), TR_OK);
    assert_int_equal(st.slm_evaluated, n_prompt + 8 - 1);
    /* Continue the conversation: prompt + generated + more tokens. Only the new tokens are evaluated. */
    memcpy(prompt + n_prompt, out, 8 * sizeof *out);
    int32_t n2 = n_prompt + 8;
    n2 += demo_prompt_tokens(p->slm, " The end.", prompt + n2, 32) - 1; /* without its BOS */
    memmove(prompt + n_prompt + 8, prompt + n_prompt + 9, (size_t)(n2 - n_prompt - 8) * sizeof *prompt);
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n2, &rp, out, N_GEN, &st), TR_OK);
    assert_int_equal(st.slm_evaluated, (n2 - (n_prompt + 7)) + 8 - 1);
    tr_context_free(ctx);
}

static void stop_strings_and_callbacks(void **state) {
    demo_pair *p = *state;
    int32_t prompt[64], out[N_GEN];
    int32_t n_prompt = demo_prompt_tokens(p->slm, "Once upon a time", prompt, 64);
    tr_context *ctx = new_ctx(p->slm);
    /* Without a stop string the student writes ", there was a little girl named Lily." */
    tr_route_params rp = greedy_params(TR_MODE_SLM, 0.5f);
    recorded full = {0};
    rp.on_token = record;
    rp.user = &full;
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, out, N_GEN, &st), TR_OK);
    assert_non_null(strstr(full.text, "little girl named Lily"));
    const char *stops[] = {"girl"};
    recorded cut = {0};
    rp.user = &cut;
    rp.stop = stops;
    rp.n_stop = 1;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, out, N_GEN, &st), TR_OK);
    assert_true(st.stopped_by_string);
    assert_null(strstr(cut.text, "girl"));
    assert_int_equal(strncmp(cut.text, full.text, cut.text_len), 0);
    assert_string_equal(cut.text, ", there was a little ");
    /* A callback returning false stops after that token. */
    recorded three = {.stop_after = 3};
    rp.user = &three;
    rp.n_stop = 0;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, out, N_GEN, &st), TR_OK);
    assert_int_equal(st.n_tokens, 3);
    tr_context_free(ctx);
}

static void bad_arguments(void **state) {
    demo_pair *p = *state;
    int32_t prompt[2] = {1, 403}, bad[2] = {1, 100000};
    tr_context *ctx = new_ctx(p->slm);
    tr_route_params rp = greedy_params(TR_MODE_JOINT, 0.5f);
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, 2, &rp, NULL, 0, NULL), TR_ERR_ARG);
    rp.mode = TR_MODE_LLM;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, 2, &rp, NULL, 0, NULL), TR_ERR_ARG);
    rp.mode = TR_MODE_SLM;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, bad, 2, &rp, NULL, 0, NULL), TR_ERR_RANGE);
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, 0, &rp, NULL, 0, NULL), TR_ERR_ARG);
    rp.n_predict = 1000; /* more than the 256-token context */
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, 2, &rp, NULL, 0, NULL), TR_ERR_RANGE);
    assert_non_null(strstr(tr_last_error(), "context"));
    tr_route_mode m;
    assert_int_equal(tr_route_mode_from_name("llm_only", &m), TR_OK);
    assert_int_equal(m, TR_MODE_LLM);
    assert_int_equal(tr_route_mode_from_name("both", &m), TR_ERR_ARG);
    tr_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tau_zero_equals_slm_alone),
        cmocka_unit_test(llm_mode_equals_llm_alone),
        cmocka_unit_test(intermediate_tau_equals_slow_reference),
        cmocka_unit_test(slm_cache_is_extended_not_refilled),
        cmocka_unit_test(stop_strings_and_callbacks),
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, demo_pair_setup, demo_pair_teardown);
}
