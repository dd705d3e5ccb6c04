/* example_route.c — the smallest routed generation through the public API: load an SLM and an LLM, pick a
 * router, stream the text. usage: example_route [SLM.gguf LLM.gguf] (default: the demo pair in ../shared). */
#include <stdio.h>
#include <string.h>
#include "tokroute.h"

static bool print_token(void *user, const tr_route_token *t) {
    (void)user;
    fwrite(t->text, 1, t->text_len, stdout);   /* t->source says who produced it */
    return true;                                /* false stops generation */
}

int main(int argc, char **argv) {
    const char *slm_path = argc > 2 ? argv[1] : "../shared/models/stories-student.gguf";
    const char *llm_path = argc > 2 ? argv[2] : "../shared/models/stories260K.gguf";
    tr_model_params mp = tr_model_default_params();
    tr_model *slm = NULL, *llm = NULL;
    if (tr_model_load(slm_path, &mp, &slm) != TR_OK ||
        tr_model_load(llm_path, &mp, &llm) != TR_OK) {
        fprintf(stderr, "tokroute: %s\n", tr_last_error());
        return 1;
    }
    tr_context_params cp = tr_context_default_params();
    tr_context *ctx = NULL;
    tr_llm_backend *backend = NULL;
    tr_router *router = NULL;
    tr_context_create(slm, &cp, &ctx);
    tr_llm_backend_embedded(llm, &cp, NULL, &backend);   /* or a remote backend */
    tr_router_create(TR_POLICY_MAXPROB, &router);         /* or tr_router_load("router.gguf", ...) */

    const char *text = "Once upon a time";
    int32_t prompt[64], n_prompt = 0;
    tr_tokenize_params tp = tr_tokenize_default_params();
    tr_tokenize(tr_model_vocab(slm), text, strlen(text), &tp, prompt, 64, &n_prompt);

    tr_route_params rp = tr_route_default_params();
    rp.tau = 0.5f;
    rp.n_predict = 64;
    rp.on_token = print_token;
    tr_route_stats stats;
    if (tr_route_generate(ctx, router, backend, prompt, n_prompt, &rp, NULL, 0, &stats) != TR_OK)
        fprintf(stderr, "tokroute: %s\n", tr_last_error());
    printf("\n%d tokens, %d routed\n", stats.n_tokens, stats.n_routed);

    tr_router_free(router);
    tr_llm_backend_free(backend);
    tr_context_free(ctx);
    tr_model_free(llm);
    tr_model_free(slm);
    return 0;
}
