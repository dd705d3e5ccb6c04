/* score.c — the arithmetic of scoring a given token sequence (/v1/completions with prompt_logprobs): one row of
 * logits becomes the log-probability and rank of the token that actually follows and the top-K alternatives.
 *
 * The numbers are those of the embedded backend's scoring (src/transport/embedded.c, embedded_score), so data
 * collected through the server equals data collected in process: log-softmax over the whole vocabulary with the
 * log-sum-exp in double, each log-probability rounded once to float, the top K by logit with ties broken by the
 * lower id. Ranks follow the same order (1 = most likely, equal logits: lower id first), so a token in the top K has
 * the rank of its place there. (vLLM counts every id whose log-probability is >= the token's, so among exactly equal
 * logits its rank can be larger; vllm/v1/sample/ops/logprobs.py, batched_count_greater_than.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/sample_math.h"
#include "server/server_internal.h"

bool score_result_alloc(const score_request *req, score_result *res) {
    memset(res, 0, sizeof *res);
    res->n_rows = req->n_tokens > 1 ? req->n_tokens - 1 : 0;
    if (res->n_rows == 0) return true;
    res->rows = calloc((size_t)res->n_rows, sizeof *res->rows);
    res->top = req->top_k > 0 ? calloc((size_t)res->n_rows * (size_t)req->top_k, sizeof *res->top) : NULL;
    if (!res->rows || (req->top_k > 0 && !res->top)) {
        score_result_free(res);
        return false;
    }
    for (int32_t i = 0; i < res->n_rows; i++) {
        res->rows[i].token = req->tokens[i + 1];
        res->rows[i].top = res->top ? res->top + (size_t)i * (size_t)req->top_k : NULL;
    }
    return true;
}

void score_result_free(score_result *res) {
    if (!res) return;
    free(res->rows);
    free(res->top);
    res->rows = NULL;
    res->top = NULL;
    res->n_rows = 0;
}

int32_t top_logits(const float *logits, int32_t n_vocab, int32_t k, top_entry *out) {
    int32_t m = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (m == k && !(logits[i] > logits[out[k - 1].id])) continue;
        int32_t j = m < k ? m++ : k - 1;
        while (j > 0 && logits[i] > logits[out[j - 1].id]) {
            out[j] = out[j - 1];
            j--;
        }
        out[j].id = i;
    }
    return m;
}

void score_row_fill(const float *logits, int32_t n_vocab, int32_t top_k, score_row *row) {
    const double lse = log_sum_exp(logits, n_vocab);
    row->n_top = top_k > 0 ? top_logits(logits, n_vocab, top_k, row->top) : 0;
    for (int32_t i = 0; i < row->n_top; i++) row->top[i].logprob = (float)((double)logits[row->top[i].id] - lse);
    const int32_t t = row->token;
    const float lt = logits[t];
    int32_t before = 0;
    for (int32_t i = 0; i < n_vocab; i++) before += logits[i] > lt || (logits[i] == lt && i < t);
    row->rank = before + 1;
    row->logprob = (float)((double)lt - lse);
}
