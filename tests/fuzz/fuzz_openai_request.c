/* fuzz_openai_request.c — libFuzzer target: arbitrary bytes as the body of POST /v1/completions and
 * /v1/chat/completions, read by the OpenAI layer both servers share (src/common/openai_request.c). Each input is
 * parsed as both endpoints; the parser must refuse or accept without reading out of bounds, every refusal must be a
 * complete message with a status, and what it accepts must satisfy what the servers rely on: numbers in range, ids
 * in the vocabulary, logit_bias ids each once, a seed JSON carries exactly, messages with a role and content. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/openai_request.h"

enum { NV = 512 };

static void check(const uint8_t *data, size_t size, bool chat) {
    static const char *const extra[] = {"mode", "echo", NULL};
    const oai_endpoint ep = {.chat = chat, .server = "fuzz", .extra_fields = extra, .n_vocab = NV,
                             .min_max_tokens = chat ? 1 : 0};
    oai_request r;
    oai_error e;
    memset(&e, 0, sizeof e);
    if (!oai_request_parse((const char *)data, size, &ep, &r, &e)) {
        if ((e.status != 400 && e.status != 500) || !e.message[0] || !e.code[0]) abort();
        if (strlen(e.message) >= sizeof e.message - 1) abort(); /* cut short */
        oai_request_free(&r);
        return;
    }
    if (!(r.temperature >= 0 && r.temperature <= 2) || !(r.top_p > 0 && r.top_p <= 1) || r.top_k < 0) abort();
    if (r.max_tokens < -1 || (r.max_tokens >= 0 && r.max_tokens < ep.min_max_tokens)) abort();
    if (r.seed > (UINT64_C(1) << 53)) abort();
    if (r.n_stop < 0 || r.n_stop > OAI_STOP_MAX || r.top_logprobs < 0 || r.top_logprobs > OAI_TOP_LOGPROBS_MAX) abort();
    if (r.include_usage && !r.stream) abort();
    for (int32_t i = 0; i < r.n_stop; i++)
        if (!r.stop[i] || !r.stop[i][0]) abort();
    for (int32_t i = 0; i < r.n_bias; i++) {
        if (r.bias[i].id < 0 || r.bias[i].id >= NV || !(r.bias[i].bias >= -100 && r.bias[i].bias <= 100)) abort();
        for (int32_t j = 0; j < i; j++)
            if (r.bias[j].id == r.bias[i].id) abort();
    }
    if (chat) {
        if (r.chat.n < 1) abort();
        for (size_t i = 0; i < r.chat.n; i++)
            if (!r.chat.messages[i].role || !r.chat.messages[i].content) abort();
    } else {
        if (!r.prompt_text == !r.prompt_ids) abort();
        for (int32_t i = 0; i < r.n_prompt_ids; i++)
            if (r.prompt_ids[i] < 0 || r.prompt_ids[i] >= NV) abort();
    }
    oai_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check(data, size, false);
    check(data, size, true);
    return 0;
}
