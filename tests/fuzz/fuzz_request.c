/* fuzz_request.c — libFuzzer target: arbitrary bytes as a POST /v1/route/next body. The parser must refuse or
 * accept without reading out of bounds, and what it accepts must satisfy the contract the scheduler relies on
 * (ids in the vocabulary, pos + tokens + lookahead within the context, ranges of every option); the sampler then
 * runs with the parsed options. Any crash, sanitizer report or broken invariant is a bug. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

enum { NV = 512, NCTX = 256 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    route_request r;
    api_error e;
    memset(&e, 0, sizeof e);
    if (!route_request_parse((const char *)data, size, NV, NCTX, &r, &e)) {
        if (e.status != 400 && e.status != 503) abort();
        if (r.tokens) abort();
        return 0;
    }
    if (r.pos < 0 || r.n_tokens < 0 || r.pos + r.n_tokens + r.lookahead > NCTX) abort();
    if (r.n_tokens == 0 && r.pos == 0) abort();
    if (r.n_vocab < 1 || r.n_vocab > NV || r.top_logprobs < 0 || r.top_logprobs > TOP_LOGPROBS_MAX) abort();
    if (r.lookahead < 0 || r.lookahead > LOOKAHEAD_MAX || strlen(r.session) < 1 || strlen(r.session) > 64) abort();
    for (int32_t i = 0; i < r.n_tokens; i++)
        if (r.tokens[i] < 0 || r.tokens[i] >= NV) abort();
    float logits[NV];
    for (int i = 0; i < NV; i++) logits[i] = (float)((i * 7919) % 101) / 10.0f;
    float lp;
    top_entry top[TOP_LOGPROBS_MAX];
    token_sampler *ts = token_sampler_create();
    if (!ts) abort();
    const int32_t t = sample_token(ts, logits, r.n_vocab, &r.samp, r.pos + r.n_tokens, &lp, top, r.top_logprobs);
    token_sampler_free(ts);
    if (t < 0 || t >= r.n_vocab) abort();
    route_request_free(&r);
    return 0;
}
