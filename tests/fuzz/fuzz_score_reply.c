/* fuzz_score_reply.c — libFuzzer target: arbitrary bytes as a scoring reply the remote backends read
 * (src/transport/score_reply.c). Byte 0 picks the reader and the request: bit 0 llama.cpp's /completion (else
 * vLLM's /v1/completions), bits 1-3 top_k - 1, bit 4 whether the position after the sequence is asked for, bit 5
 * the first position (1 or 2), bits 6-7 llama.cpp's position. The rest is the reply body, for the sequence
 * 1 2 3 4 5. Neither reader may read or write out of bounds (the positions around the ones asked for are guarded),
 * and what they accept must hold: at most top_k ids per position, ids >= 0, finite log-probabilities (-inf allowed
 * below the best), the actual token's log-probability set inside the sequence and NAN after it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "transport/score_reply.h"

#define N 5

static void check_position(const tr_llm_position *o, int32_t top_k, int32_t pos) {
    if (o->n_top < 0 || o->n_top > top_k) abort();
    for (int32_t i = 0; i < o->n_top; i++) {
        if (o->top_ids[i] < 0) abort();
        if (isnan(o->top_logprobs[i]) || o->top_logprobs[i] == INFINITY) abort();
        if (i > 0 && o->top_logprobs[i] > o->top_logprobs[i - 1]) abort();
    }
    if (pos < N && (isnan(o->logprob) || o->logprob == INFINITY)) abort();
    if (pos == N && !isnan(o->logprob)) abort();
}

static bool untouched(const tr_llm_position *o) { return o->n_top == -7 && isnan(o->logprob); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int32_t tokens[N] = {1, 2, 3, 4, 5};
    const int32_t top_k = ((data[0] >> 1) & 7) + 1, first = 1 + ((data[0] >> 5) & 1);
    const int32_t end = data[0] & 16 ? N + 1 : N;
    /* out[1 .. end - first] are the positions; out[0] and the one after them are guards. */
    tr_llm_position out[N + 3];
    for (int i = 0; i < N + 3; i++) out[i] = (tr_llm_position){.logprob = NAN, .n_top = i == 0 ? -7 : 0};
    out[end - first + 1] = out[0];
    tr_llm_score_call call = {.tokens = tokens, .n_tokens = N, .first = first, .end = end, .top_k = top_k,
                              .out = out + 1};
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    bool ended = false;
    if (data[0] & 1) {
        const int32_t pos = first + (data[0] >> 6) % (end - first);
        int64_t n_evaluated = 0;
        tr_llm_position *o = &out[1 + pos - first];
        if (score_reply_llamacpp(body, len, &call, pos, o, &n_evaluated) == TR_OK) {
            check_position(o, top_k, pos);
            if (n_evaluated < 0) abort();
        }
    } else if (score_reply_vllm(body, len, &call, &ended) == TR_OK) {
        /* ended: the position after the sequence is left for another request */
        for (int32_t p = first; p < end - (ended ? 1 : 0); p++) check_position(&out[1 + p - first], top_k, p);
        if (ended && end != N + 1) abort();
        if (call.n_evaluated < 0) abort();
    }
    if (!untouched(&out[0]) || !untouched(&out[end - first + 1])) abort();
    tr_clear_error();
    return 0;
}
