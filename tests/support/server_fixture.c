/* server_fixture.c — the server suites' start-up and tear-down (see server_fixture.h). */
#include "support/server_fixture.h"

#include "support/fixtures.h"

int server_fixture_load(tr_model **model) {
    tr_model_params mp = tr_model_default_params();
    return tr_model_load(shared_path("models/stories260K.gguf"), &mp, model) == TR_OK ? 0 : -1;
}

tr_server *server_fixture_start(const tr_model *model, tr_server_params p) {
    p.port = 0;
    p.n_threads = 1;
    tr_server *srv = NULL;
    return tr_server_start(model, &p, &srv) == TR_OK ? srv : NULL;
}

int server_fixture_serve(tr_server_params p, tr_model **model, tr_server **srv, int *port) {
    if (server_fixture_load(model) != 0 || !(*srv = server_fixture_start(*model, p))) return -1;
    *port = tr_server_port(*srv);
    return 0;
}

int server_fixture_free(tr_model *model, tr_server *srv) {
    tr_server_free(srv);
    tr_model_free(model);
    return 0;
}

sched_params server_fixture_sched_params(void) {
    return (sched_params){.n_threads = 1, .max_sessions = 32, .n_ctx = 512, .max_batch_tokens = 512,
                          .session_idle_s = 600, .kv_budget_bytes = (int64_t)1 << 30, .batch = true};
}

scheduler *server_fixture_scheduler(const tr_model *model, server_metrics *metrics, sched_params p) {
    scheduler *s = NULL;
    return scheduler_create(model, &p, metrics, &s) == TR_OK ? s : NULL;
}

int32_t server_fixture_greedy(const tr_model *model, const int32_t *tokens, int32_t n) {
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 1;
    tr_context *ctx = NULL;
    if (tr_context_create(model, &cp, &ctx) != TR_OK) return -1;
    int32_t t = -1;
    if (tr_context_eval(ctx, tokens, n, TR_EVAL_LOGITS_LAST) == TR_OK)
        t = tr_argmax(tr_context_logits(ctx, -1), tr_model_get_info(model)->n_vocab);
    tr_context_free(ctx);
    return t;
}
