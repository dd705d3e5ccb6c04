/* sglang.c — SGLang's native /generate API as an LLM backend (placeholder until it is written). */
#include "common/error.h"
#include "transport/remote.h"

tr_status tr_llm_backend_sglang(const tr_remote_params *params, tr_llm_backend **out) {
    (void)params;
    if (out) *out = NULL;
    return tr_fail(TR_ERR_UNSUPPORTED, "the SGLang backend is not built yet");
}
