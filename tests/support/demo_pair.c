/* demo_pair.c — the tiny demo pair and its contexts, backends and prompts for the routing, transport and eval
 * suites (demo_pair.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/demo_pair.h"
#include "support/fixtures.h"

bool demo_pair_load(demo_pair *p) {
    tr_model_params mp = tr_model_default_params();
    p->slm = p->llm = NULL;
    if (tr_model_load(shared_path("models/stories-student.gguf"), &mp, &p->slm) != TR_OK ||
        tr_model_load(shared_path("models/stories260K.gguf"), &mp, &p->llm) != TR_OK) {
        fprintf(stderr, "%s\n", tr_last_error());
        demo_pair_unload(p);
        return false;
    }
    return true;
}

void demo_pair_unload(demo_pair *p) {
    tr_model_free(p->slm);
    tr_model_free(p->llm);
    p->slm = p->llm = NULL;
}

int demo_pair_setup(void **state) {
    demo_pair *p = calloc(1, sizeof *p);
    if (!p || !demo_pair_load(p)) {
        free(p);
        return -1;
    }
    *state = p;
    return 0;
}

int demo_pair_teardown(void **state) {
    demo_pair *p = *state;
    demo_pair_unload(p);
    free(p);
    return 0;
}

static tr_context_params demo_context_params(int32_t n_threads) {
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = n_threads;
    return cp;
}

tr_context *demo_context(const tr_model *m, int32_t n_threads) {
    const tr_context_params cp = demo_context_params(n_threads);
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
    return ctx;
}

tr_llm_backend *demo_backend(const tr_model *llm, int32_t n_threads, const tr_sampler_params *sp) {
    const tr_context_params cp = demo_context_params(n_threads);
    tr_llm_backend *b = NULL;
    assert_int_equal(tr_llm_backend_embedded(llm, &cp, sp, &b), TR_OK);
    return b;
}

int32_t demo_prompt_tokens(const tr_model *m, const char *text, int32_t *ids, int32_t cap) {
    tr_tokenize_params tp = tr_tokenize_default_params();
    int32_t n = 0;
    assert_int_equal(tr_tokenize(tr_model_vocab(m), text, strlen(text), &tp, ids, cap, &n), TR_OK);
    return n;
}
