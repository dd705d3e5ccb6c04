/* fuzz_sglang_reply.c — libFuzzer target: arbitrary bytes as what an SGLang server sends back to POST /generate.
 * Byte 0 picks the request the reply answers: bit 0 a next-token call (0) or scoring (1) of the 4-token sequence
 * 1 403 407 261; bits 1-2 the scored positions ([1, 5), [1, 4), [2, 4), [4, 5)); bits 3-4 top_k (1, 2, 3, 8); bit 5
 * ids restricted to < 400. The rest is the reply body, read by sglang_parse_next or sglang_parse_score. Neither may
 * read out of bounds, and what they accept must keep the backend's invariants: a generated id >= 0; every scored
 * position with at most top_k alternatives, ids >= 0 and allowed, finite log-probabilities, and a finite
 * log-probability for each token inside the sequence. Any crash, sanitizer report or broken invariant is a bug. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/error.h"
#include "transport/sglang_reply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const int32_t tokens[4] = {1, 403, 407, 261};
    static const int32_t ranges[4][2] = {{1, 5}, {1, 4}, {2, 4}, {4, 5}};
    static const int32_t top_ks[4] = {1, 2, 3, 8};
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    if (!(data[0] & 1)) {
        tr_llm_call call = {.tokens = tokens, .n_tokens = 4, .id = -1, .logprob = NAN};
        if (sglang_parse_next(body, len, &call) == TR_OK && call.id < 0) abort();
        tr_clear_error();
        return 0;
    }
    const int32_t first = ranges[(data[0] >> 1) & 3][0], end = ranges[(data[0] >> 1) & 3][1];
    const int32_t top_k = top_ks[(data[0] >> 3) & 3], n_allowed = data[0] & 0x20 ? 400 : 0;
    tr_llm_position out[4];
    for (int32_t i = 0; i < end - first; i++) {
        out[i].logprob = NAN;
        out[i].n_top = 0;
    }
    tr_llm_score_call call = {.tokens = tokens, .n_tokens = 4, .first = first, .end = end, .top_k = top_k,
                              .n_allowed = n_allowed, .out = out};
    if (sglang_parse_score(body, len, &call) == TR_OK) {
        for (int32_t p = first; p < end; p++) {
            const tr_llm_position *o = &out[p - first];
            if (o->n_top < 0 || o->n_top > top_k) abort();
            if (p < 4 && !isfinite(o->logprob)) abort();
            for (int32_t i = 0; i < o->n_top; i++)
                if (o->top_ids[i] < 0 || (n_allowed && o->top_ids[i] >= n_allowed) || !isfinite(o->top_logprobs[i]))
                    abort();
        }
    }
    tr_clear_error();
    return 0;
}
