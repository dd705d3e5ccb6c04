/* score_reply.c — reading scoring replies (see score_reply.h).
 *
 * vLLM (read from vllm-project/vllm, 2025-26):
 *   - vllm/entrypoints/openai/completion/protocol.py: CompletionResponseChoice.prompt_logprobs is
 *     list[dict[int, Logprob] | None], serialized with the token id as a decimal string key and
 *     {"logprob", "rank", "decoded_token"} values; prompt_token_ids / token_ids with return_token_ids.
 *   - vllm/logprobs.py: create_prompt_logprobs puts None first (the first prompt token has no context);
 *     append_logprobs_for_next_position inserts the actual token first (rank = its rank in the whole vocabulary),
 *     then the top K with ranks 1..K, so a position holds K keys (the actual token among the top K) or K + 1, and
 *     the JSON key order is not the rank order.
 *   - vllm/v1/sample/ops/logprobs.py: batched_count_greater_than, rank = how many ids have a log-probability >= it.
 *   - vllm/entrypoints/generate/base/serving.py: clamp_prompt_logprobs turns -inf into -9999.0.
 *   - vllm/entrypoints/openai/completion/serving.py: _create_completion_logprobs, choices[0].logprobs.top_logprobs[i]
 *     is {token: logprob} with "token_id:N" keys under return_tokens_as_token_ids, the sampled token plus the top K.
 * So each position's entries are sorted here (log-probability, then rank, then id) and the K best kept; the actual
 * token's log-probability is read from its own key.
 *
 * llama.cpp (tools/server/README.md and server-task.cpp, probs_vector_to_json): completion_probabilities[0] is
 * {"id", "logprob", "top_logprobs": [{"id", "logprob", ...}]} with post_sampling_probs false; a probability of 0 is
 * sent as the lowest float (its JSON library cannot write -inf). */
#include "transport/score_reply.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "transport/remote.h"

/* One listed token at a position. */
typedef struct entry {
    int32_t id;
    double logprob;
    int64_t rank; /* INT64_MAX when not given */
} entry;

/* A token id written as decimal digits (after an optional prefix), nothing else; false otherwise. */
static bool parse_id_text(const char *s, const char *prefix, int32_t *id) {
    if (!s) return false;
    const size_t pl = prefix ? strlen(prefix) : 0;
    if (pl && strncmp(s, prefix, pl) != 0) return false;
    s += pl;
    int64_t v = 0;
    size_t n = 0;
    for (; s[n]; n++) {
        if (s[n] < '0' || s[n] > '9' || n >= 10) return false;
        v = v * 10 + (s[n] - '0');
    }
    if (n == 0 || v > INT32_MAX) return false;
    *id = (int32_t)v;
    return true;
}

/* A JSON number that is a finite log-probability: at most 0 (1e-3 of rounding allowed; a larger value, which could
 * also overflow the float it is stored in, is no log-probability); a value below -1e30 (llama.cpp's lowest float, an
 * overflowed -inf) reads as -inf, which the scoring check accepts below the best entry. */
static bool read_logprob(const cJSON *v, double *out) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble > 1e-3) return false;
    *out = v->valuedouble < -1e30 ? -INFINITY : v->valuedouble;
    return true;
}

static int compare_entries(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->logprob != y->logprob) return x->logprob > y->logprob ? -1 : 1;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Sorts the n entries read at pos into o: the top_k best, and the actual token's log-probability (actual < 0: the
 * position after the sequence, none). */
static tr_status fill_position(entry *e, int32_t n, int32_t pos, int32_t actual, int32_t top_k, const char *what,
                               tr_llm_position *o) {
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < i; j++)
            if (e[i].id == e[j].id) return tr_fail(TR_ERR_FORMAT, "%s: position %d lists token %d twice", what, pos, e[i].id);
    qsort(e, (size_t)n, sizeof *e, compare_entries);
    o->n_top = n < top_k ? n : top_k;
    for (int32_t i = 0; i < o->n_top; i++) {
        o->top_ids[i] = e[i].id;
        o->top_logprobs[i] = (float)e[i].logprob;
    }
    if (actual < 0) return TR_OK;
    for (int32_t i = 0; i < n; i++)
        if (e[i].id == actual) {
            o->logprob = (float)e[i].logprob;
            return TR_OK;
        }
    return tr_fail(TR_ERR_FORMAT, "%s: position %d has no log-probability for its token %d", what, pos, actual);
}

/* One position of vLLM's reply: an object keyed by token ids. token_id_keys: keys "token_id:N" and plain numbers as
 * values (the generated position's top_logprobs); else decimal keys and {"logprob", "rank"} objects. */
static tr_status read_vllm_position(const cJSON *obj, int32_t pos, int32_t actual, int32_t top_k, bool token_id_keys,
                                    tr_llm_position *o) {
    const char *what = token_id_keys ? "choices[0].logprobs.top_logprobs[0]" : "prompt_logprobs";
    if (!cJSON_IsObject(obj))
        return tr_fail(TR_ERR_FORMAT, "%s: position %d is not an object of log-probabilities", what, pos);
    entry e[TR_SCORE_TOPK_MAX + 1];
    int32_t n = 0;
    for (const cJSON *it = obj->child; it; it = it->next) {
        if (n == top_k + 1)
            return tr_fail(TR_ERR_FORMAT, "%s: position %d lists more than %d tokens", what, pos, top_k + 1);
        entry *x = &e[n];
        if (!parse_id_text(it->string, token_id_keys ? "token_id:" : NULL, &x->id))
            return tr_fail(TR_ERR_FORMAT, "%s: position %d: key \"%.40s\" is not a token id%s", what, pos,
                           it->string ? it->string : "", token_id_keys ? " (\"token_id:N\"; the server ignored "
                                                                         "return_tokens_as_token_ids?)" : "");
        x->rank = INT64_MAX;
        const cJSON *lp = token_id_keys ? it : cJSON_GetObjectItemCaseSensitive(it, "logprob");
        if (!read_logprob(lp, &x->logprob))
            return tr_fail(TR_ERR_FORMAT, "%s: position %d: the log-probability of token %d is not a finite number <= 0",
                           what, pos, x->id);
        if (!token_id_keys && cJSON_GetObjectItemCaseSensitive(it, "rank") &&
            !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(it, "rank")) &&
            !json_int(it, "rank", 1, INT32_MAX, &x->rank))
            return tr_fail(TR_ERR_FORMAT, "%s: position %d: the rank of token %d is not a positive integer", what,
                           pos, x->id);
        n++;
    }
    return fill_position(e, n, pos, actual, top_k, what, o);
}

/* With return_token_ids the server says which prompt it scored: it must be ours (a server that added a BOS would
 * shift every position). */
static tr_status check_prompt_ids(const cJSON *ids, const tr_llm_score_call *call) {
    if (!ids || cJSON_IsNull(ids)) return TR_OK;
    if (!cJSON_IsArray(ids)) return tr_fail(TR_ERR_FORMAT, "prompt_token_ids is not an array");
    int32_t i = 0;
    for (const cJSON *x = ids->child; x; x = x->next, i++)
        if (i >= call->n_tokens || !cJSON_IsNumber(x) || x->valuedouble != (double)call->tokens[i])
            return tr_fail(TR_ERR_FORMAT, "the server scored another prompt (prompt_token_ids differ at %d)", i);
    if (i != call->n_tokens)
        return tr_fail(TR_ERR_FORMAT, "the server scored %d prompt tokens, %d were sent", i, call->n_tokens);
    return TR_OK;
}

/* finish_reason "stop" with no generated token (tokroute serve's end of sequence). */
static bool ended_without_token(const cJSON *choice) {
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(choice, "token_ids");
    return cJSON_IsString(finish) && strcmp(finish->valuestring, "stop") == 0 && cJSON_IsArray(ids) &&
           cJSON_GetArraySize(ids) == 0;
}

tr_status score_reply_vllm(const char *body, size_t len, tr_llm_score_call *call, bool *ended) {
    *ended = false;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) return tr_fail(TR_ERR_FORMAT, "/v1/completions: the reply is not JSON");
    const int32_t n = call->n_tokens, prompt_end = call->end < n ? call->end : n;
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    tr_status st = cJSON_IsObject(choice) ? check_prompt_ids(cJSON_GetObjectItemCaseSensitive(choice, "prompt_token_ids"), call)
                                          : tr_fail(TR_ERR_FORMAT, "/v1/completions: the reply has no choices[0]");
    if (st == TR_OK && call->first < prompt_end) {
        const cJSON *pl = cJSON_GetObjectItemCaseSensitive(choice, "prompt_logprobs");
        const int size = cJSON_IsArray(pl) ? cJSON_GetArraySize(pl) : -1;
        if (size < 0)
            st = tr_fail(TR_ERR_FORMAT, "/v1/completions: choices[0].prompt_logprobs is missing (a server without "
                                        "prompt log-probabilities: vLLM, or tokroute serve, is needed)");
        else if (size != n)
            st = tr_fail(TR_ERR_FORMAT, "/v1/completions: prompt_logprobs holds %d positions for a %d-token prompt",
                         size, n);
        int32_t p = 0;
        for (const cJSON *x = size == n ? pl->child : NULL; st == TR_OK && x && p < prompt_end; x = x->next, p++)
            if (p >= call->first)
                st = read_vllm_position(x, p, call->tokens[p], call->top_k, false, &call->out[p - call->first]);
    }
    if (st == TR_OK && call->end == n + 1) {
        const cJSON *lps = cJSON_GetObjectItemCaseSensitive(choice, "logprobs");
        const cJSON *top0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lps, "top_logprobs"), 0);
        if (!top0 && ended_without_token(choice)) *ended = true; /* the caller reads position n another way */
        else if (!top0) st = tr_fail(TR_ERR_FORMAT, "/v1/completions: no choices[0].logprobs.top_logprobs[0] for position %d", n);
        else st = read_vllm_position(top0, n, -1, call->top_k, true, &call->out[n - call->first]);
    }
    if (st == TR_OK) {
        int64_t prompt = 0, cached = 0;
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
        if (json_int(usage, "prompt_tokens", 0, INT32_MAX, &prompt)) {
            json_int(cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens_details"), "cached_tokens", 0, prompt,
                     &cached);
            call->n_evaluated = prompt - cached;
        }
    }
    cJSON_Delete(j);
    return st;
}

tr_status score_reply_llamacpp(const char *body, size_t len, const tr_llm_score_call *call, int32_t pos,
                               tr_llm_position *out, int64_t *n_evaluated) {
    static const char *what = "/completion";
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) return tr_fail(TR_ERR_FORMAT, "%s: the reply is not JSON", what);
    const int32_t actual = pos < call->n_tokens ? call->tokens[pos] : -1;
    const cJSON *probs = cJSON_GetObjectItemCaseSensitive(j, "completion_probabilities");
    const cJSON *p0 = cJSON_GetArrayItem(probs, 0);
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(p0, "top_logprobs");
    int64_t id = -1;
    tr_status st = TR_OK;
    if (cJSON_IsArray(probs) && !p0)
        /* llama.cpp holds a token back while its text ends inside a UTF-8 character, probabilities included. */
        st = tr_fail(TR_ERR_FORMAT, "%s: no probabilities for position %d (llama.cpp gives none for a token that "
                                    "ends inside a UTF-8 character)", what, pos);
    else if (!cJSON_IsObject(p0) || !cJSON_IsArray(top))
        st = tr_fail(TR_ERR_FORMAT, "%s: position %d: no completion_probabilities[0].top_logprobs", what, pos);
    else if (!json_int(p0, "id", 0, INT32_MAX, &id))
        st = tr_fail(TR_ERR_FORMAT, "%s: position %d: completion_probabilities[0] has no valid id", what, pos);
    else if (actual >= 0 && id != actual)
        st = tr_fail(TR_ERR_FORMAT, "%s: position %d: the server sampled %lld, not the token %d its logit bias forced",
                     what, pos, (long long)id, actual);
    entry e[TR_SCORE_TOPK_MAX + 1];
    int32_t n = 0;
    for (const cJSON *it = st == TR_OK ? top->child : NULL; it && st == TR_OK; it = it->next, n++) {
        int64_t tid;
        if (n == call->top_k)
            st = tr_fail(TR_ERR_FORMAT, "%s: position %d lists more than %d tokens", what, pos, call->top_k);
        else if (!json_int(it, "id", 0, INT32_MAX, &tid))
            st = tr_fail(TR_ERR_FORMAT, "%s: position %d: a listed token has no valid id", what, pos);
        else if (!read_logprob(cJSON_GetObjectItemCaseSensitive(it, "logprob"), &e[n].logprob))
            st = tr_fail(TR_ERR_FORMAT, "%s: position %d: the log-probability of token %lld is not a finite number <= 0",
                         what, pos, (long long)tid);
        else
            e[n].id = (int32_t)tid, e[n].rank = n + 1;
    }
    if (st == TR_OK) {
        /* The sampled (forced) token's own log-probability comes with it, whether listed or not. */
        double lp = 0;
        if (actual >= 0 && !read_logprob(cJSON_GetObjectItemCaseSensitive(p0, "logprob"), &lp))
            st = tr_fail(TR_ERR_FORMAT, "%s: position %d: the log-probability of token %d is not a finite number <= 0",
                         what, pos, actual);
        if (st == TR_OK) st = fill_position(e, n, pos, -1, call->top_k, what, out);
        if (st == TR_OK && actual >= 0) out->logprob = (float)lp;
    }
    int64_t pn = 0;
    if (st == TR_OK && json_int(cJSON_GetObjectItemCaseSensitive(j, "timings"), "prompt_n", 0, INT32_MAX, &pn))
        *n_evaluated += pn;
    cJSON_Delete(j);
    return st;
}
