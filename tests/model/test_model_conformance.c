/* test_model_conformance.c — the engine against llama.cpp's outputs (../shared/conformance): logits and final
 * hidden states at every prompt position with the prompt evaluated as one batch, argmax where the reference's
 * top two differ clearly, and, for the trained stories models, all 32 greedy tokens decoded one at a time. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/fixtures.h"
#include "tokroute.h"

typedef struct conformance_case {
    const char *name;
    double tol; /* relative RMS error allowed on logits and hidden states */
    bool check_greedy;
} conformance_case;

static const float *load_f32(const char *name, const char *ext, size_t expect_floats) {
    char rel[256];
    snprintf(rel, sizeof rel, "conformance/golden/%s.%s.f32", name, ext);
    size_t size = 0;
    float *p = (float *)read_file(shared_path(rel), &size);
    assert_non_null(p);
    assert_int_equal(size, expect_floats * sizeof(float));
    return p;
}

static void check_model(const conformance_case *c) {
    char rel[256];
    snprintf(rel, sizeof rel, "conformance/golden/%s.json", c->name);
    char *json = read_file(shared_path(rel), NULL);
    assert_non_null(json);
    int32_t *prompt, *greedy;
    const int32_t n = json_int_array(json, "prompt_tokens", &prompt);
    const int32_t n_greedy = json_int_array(json, "greedy_tokens", &greedy);
    assert_true(n > 0 && n_greedy == 32);

    const char *dir = strncmp(c->name, "stories", 7) == 0 ? "models" : "conformance";
    snprintf(rel, sizeof rel, "%s/%s.gguf", dir, c->name);
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *model = NULL;
    tr_status st = tr_model_load(shared_path(rel), &mp, &model);
    if (st != TR_OK) fprintf(stderr, "%s: %s\n", c->name, tr_last_error());
    assert_int_equal(st, TR_OK);
    const tr_model_info *in = tr_model_get_info(model);
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    const float *ref_logits = load_f32(c->name, "logits", (size_t)n * V);
    const float *ref_hidden = load_f32(c->name, "hidden", (size_t)n * E);

    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(model, &cp, &ctx), TR_OK);
    assert_int_equal(tr_context_eval(ctx, prompt, n, TR_EVAL_LOGITS_ALL), TR_OK);

    float *logits = malloc((size_t)n * V * sizeof *logits), *hidden = malloc((size_t)n * E * sizeof *hidden);
    int argmax_checked = 0;
    for (int32_t i = 0; i < n; i++) {
        memcpy(logits + i * V, tr_context_logits(ctx, i), V * sizeof *logits);
        memcpy(hidden + i * E, tr_context_hidden(ctx, i), E * sizeof *hidden);
        const float *ref = ref_logits + i * V;
        int32_t top = tr_argmax(ref, (int32_t)V);
        float second = -INFINITY;
        for (size_t j = 0; j < V; j++)
            if ((int32_t)j != top && ref[j] > second) second = ref[j];
        if (ref[top] - second > 0.01f * fabsf(ref[top])) {
            argmax_checked++;
            if (tr_argmax(logits + i * V, (int32_t)V) != top)
                fail_msg("%s: argmax differs at position %d", c->name, i);
        }
    }
    const double e_logits = rel_rms(logits, ref_logits, (size_t)n * V);
    const double e_hidden = rel_rms(hidden, ref_hidden, (size_t)n * E);
    fprintf(stderr, "%-22s logits rel RMS %.2e, hidden %.2e (tolerance %.0e), argmax checked at %d/%d positions\n",
            c->name, e_logits, e_hidden, c->tol, argmax_checked, n);
    assert_true(e_logits <= c->tol);
    assert_true(e_hidden <= c->tol);
    assert_true(argmax_checked > 0);

    /* Greedy continuation through the one-token path (the prompt's cache is reused). */
    int32_t matched = 0;
    int32_t id = tr_argmax(tr_context_logits(ctx, n - 1), (int32_t)V);
    for (int32_t i = 0; i < n_greedy; i++) {
        if (id != greedy[i]) break;
        matched++;
        if (i + 1 < n_greedy) {
            assert_int_equal(tr_context_eval(ctx, &id, 1, TR_EVAL_LOGITS_LAST), TR_OK);
            id = tr_argmax(tr_context_logits(ctx, -1), (int32_t)V);
        }
    }
    fprintf(stderr, "%-22s greedy tokens matching the reference: %d/%d\n", c->name, matched, n_greedy);
    if (c->check_greedy) assert_int_equal(matched, n_greedy);

    free(logits);
    free(hidden);
    free((void *)ref_logits);
    free((void *)ref_hidden);
    free(prompt);
    free(greedy);
    free(json);
    tr_context_free(ctx);
    tr_model_free(model);
}

#define CASE(fn, name, tol, greedy) \
    static void fn(void **state) {  \
        (void)state;                \
        conformance_case c = {name, tol, greedy}; \
        check_model(&c);            \
    }

CASE(stories260k, "stories260K", 2e-3, true)
CASE(stories_student, "stories-student", 2e-3, true)
CASE(llama_f32, "llama-f32", 2e-3, false)
CASE(llama_f16, "llama-f16", 5e-3, false)
CASE(llama_q8_0, "llama-q8_0", 5e-2, false)
CASE(llama_q4_0, "llama-q4_0", 5e-2, false)
CASE(llama_q4_k, "llama-q4_k", 5e-2, false)
CASE(llama_q5_k, "llama-q5_k", 5e-2, false)
CASE(llama_q6_k, "llama-q6_k", 5e-2, false)
CASE(llama_q4_k_m_mixed, "llama-q4_k_m-mixed", 5e-2, false)
CASE(qwen2_f32, "qwen2-f32", 2e-3, false)
CASE(qwen2_f16, "qwen2-f16", 5e-3, false)
CASE(qwen2_q8_0, "qwen2-q8_0", 5e-2, false)
CASE(qwen2_q4_0, "qwen2-q4_0", 5e-2, false)
CASE(qwen2_q4_k, "qwen2-q4_k", 5e-2, false)
CASE(qwen2_q5_k, "qwen2-q5_k", 5e-2, false)
CASE(qwen2_q6_k, "qwen2-q6_k", 5e-2, false)
CASE(qwen3_f32, "qwen3-f32", 2e-3, false)
CASE(qwen3_f16, "qwen3-f16", 5e-3, false)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stories260k),     cmocka_unit_test(stories_student), cmocka_unit_test(llama_f32),
        cmocka_unit_test(llama_f16),       cmocka_unit_test(llama_q8_0),      cmocka_unit_test(llama_q4_0),
        cmocka_unit_test(llama_q4_k),      cmocka_unit_test(llama_q5_k),      cmocka_unit_test(llama_q6_k),
        cmocka_unit_test(llama_q4_k_m_mixed), cmocka_unit_test(qwen2_f32),    cmocka_unit_test(qwen2_f16),
        cmocka_unit_test(qwen2_q8_0),      cmocka_unit_test(qwen2_q4_0),      cmocka_unit_test(qwen2_q4_k),
        cmocka_unit_test(qwen2_q5_k),      cmocka_unit_test(qwen2_q6_k),      cmocka_unit_test(qwen3_f32),
        cmocka_unit_test(qwen3_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
