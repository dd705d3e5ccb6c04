/* ui_fixture.c — the web UI tests' models and embedded backend (see ui_fixture.h). */
#include "support/ui_fixture.h"

#include <curl/curl.h>

#include "support/fixtures.h"

static tr_model *slm, *llm;
double ui_rtt_ms;

int ui_fixture_setup(void **state) {
    (void)state;
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(shared_path("models/stories-student.gguf"), &mp, &slm) != TR_OK) return -1;
    if (tr_model_load(shared_path("models/stories260K.gguf"), &mp, &llm) != TR_OK) return -1;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}

int ui_fixture_teardown(void **state) {
    (void)state;
    tr_model_free(slm);
    tr_model_free(llm);
    curl_global_cleanup();
    return 0;
}

static tr_status open_embedded(void *user, tr_llm_backend **out) {
    (void)user;
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = 1;
    tr_status st = tr_llm_backend_embedded(llm, &cp, NULL, out);
    if (st == TR_OK) tr_llm_backend_set_rtt(*out, ui_rtt_ms);
    return st;
}

tr_ui_params ui_fixture_params(void) {
    tr_ui_params p = tr_ui_default_params();
    p.slm = slm;
    p.port = 0;
    p.context.n_threads = 1;
    p.open_backend = open_embedded;
    return p;
}
