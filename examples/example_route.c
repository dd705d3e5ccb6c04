/* example_route.c — the smallest routed generation through the public API: load an SLM and an LLM, pick a
 * router, stream the text. Every call's status is checked; the message says what went wrong.
 * The same text and routed count as `tokroute generate --slm SLM --llm LLM -p PROMPT -n N` (maxprob, tau 0.5, greedy).
 * usage: example_route [SLM.gguf LLM.gguf [PROMPT [N]]] (default: the demo pair in ../shared, "Once upon a time",
 * 64 tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokroute.h"

/* All text, in order: each token's (t says who produced it) and, at the end, text held back (t NULL). */
static bool print_text(void *user, const char *text, size_t len, const tr_route_token *t) {
    (void)user, (void)t;
    fwrite(text, 1, len, stdout);
    return true;                                /* false stops generation */
}

int main(int argc, char **argv) {
    const char *slm_path = argc > 2 ? argv[1] : "../shared/models/stories-student.gguf";
    const char *llm_path = argc > 2 ? argv[2] : "../shared/models/stories260K.gguf";
    tr_model_params mp = tr_model_default_params();
    tr_context_params cp = tr_context_default_params();
    tr_model *slm = NULL, *llm = NULL;
    tr_context *ctx = NULL;
    tr_llm_backend *backend = NULL;
    tr_router *router = NULL;
    int32_t prompt[256], n_prompt = 0;
    const char *text = argc > 3 ? argv[3] : "Once upon a time";
    tr_tokenize_params tp = tr_tokenize_default_params();
    tr_status st = tr_model_load(slm_path, &mp, &slm);
    if (st == TR_OK) st = tr_model_load(llm_path, &mp, &llm);
    if (st == TR_OK) st = tr_context_create(slm, &cp, &ctx);                  /* the SLM's KV cache */
    if (st == TR_OK) st = tr_llm_backend_embedded(llm, &cp, NULL, &backend); /* or tr_llm_backend_server(...) */
    if (st == TR_OK) st = tr_router_create(TR_POLICY_MAXPROB, &router);      /* or tr_router_load("r.gguf", ...) */
    if (st == TR_OK) st = tr_tokenize(tr_model_vocab(slm), text, strlen(text), &tp, prompt, 256, &n_prompt);

    tr_route_params rp = tr_route_default_params();
    rp.tau = 0.5f;
    rp.n_predict = argc > 4 ? atoi(argv[4]) : 64;
    rp.on_text = print_text;
    tr_route_stats stats;
    if (st == TR_OK) st = tr_route_generate(ctx, router, backend, prompt, n_prompt, &rp, NULL, 0, &stats);
    if (st == TR_OK) printf("\n%d tokens, %d routed\n", stats.n_tokens, stats.n_routed);
    else fprintf(stderr, "tokroute: %s\n", tr_last_error());

    tr_router_free(router);
    tr_llm_backend_free(backend);
    tr_context_free(ctx);
    tr_model_free(llm);
    tr_model_free(slm);
    return st == TR_OK ? 0 : 1;
}
