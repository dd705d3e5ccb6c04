/* remote.c — helpers shared by the remote backends: default parameters, checked JSON access, status mapping, the
 * vocabulary-size query, per-position sampling seeds, and scoring through vLLM's /v1/completions prompt_logprobs
 * (the --openai and --server backends share it; score_reply.c reads the reply). */
#include "transport/remote.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/sample_math.h"
#include "transport/score_reply.h"

tr_remote_params tr_remote_default_params(void) {
    tr_remote_params p = {.timeout_ms = 10000, .connect_timeout_ms = 2000, .retries = 2};
    p.sampling = tr_sampler_default_params();
    p.sampling.temperature = 0.0f;
    return p;
}

bool json_int(const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) return false;
    const double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) return false;
    *out = (int64_t)d;
    return true;
}

bool json_add_ids(cJSON *obj, const char *key, const int32_t *ids, int32_t n) {
    cJSON *arr = cJSON_AddArrayToObject(obj, key);
    if (!arr) return false;
    for (int32_t i = 0; i < n; i++) {
        cJSON *x = cJSON_CreateNumber(ids[i]);
        if (!x) return false;
        cJSON_AddItemToArray(arr, x);
    }
    return true;
}

tr_status http_status_error(const char *what, const http_response *resp) {
    char msg[256];
    http_error_text(resp, msg, sizeof msg);
    tr_status st = resp->status == 401 || resp->status == 403 ? TR_ERR_ARG
                   : resp->status >= 500                      ? TR_ERR_NETWORK
                                                              : TR_ERR_FORMAT;
    return tr_fail(st, "%s: HTTP %ld: %s", what, resp->status, msg);
}

int32_t remote_query_n_vocab(http_client *c) {
    http_response resp = {0};
    int64_t n = 0;
    const tr_status health = http_request(c, "GET", "/health", NULL, http_deadline(c), NULL, NULL, &resp);
    if (health != TR_OK) return 0; /* unreachable: the message stays for the caller to show */
    if (resp.status == 401 || resp.status == 403) {
        tr_fail(TR_ERR_ARG, "GET /health: HTTP %ld (API key missing or wrong)", resp.status);
        return 0;
    }
    if (resp.status == 200) {
        cJSON *j = cJSON_ParseWithLength(resp.body, resp.len);
        bool found = j && json_int(j, "n_vocab", 1, INT32_MAX, &n);
        cJSON_Delete(j);
        if (found) return (int32_t)n;
    }
    if (http_request(c, "GET", "/v1/models", NULL, http_deadline(c), NULL, NULL, &resp) == TR_OK && resp.status == 200) {
        cJSON *j = cJSON_ParseWithLength(resp.body, resp.len);
        const cJSON *data = j ? cJSON_GetObjectItemCaseSensitive(j, "data") : NULL;
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, 0), "meta");
        if (!json_int(meta, "n_vocab", 1, INT32_MAX, &n)) n = 0;
        cJSON_Delete(j);
    }
    tr_clear_error();
    return (int32_t)n;
}

int64_t remote_position_seed(uint64_t seed, int32_t pos) { return (int64_t)(position_seed(seed, pos) & 0x7fffffffu); }

tr_status remote_check_sampling(const tr_sampler_params *s) {
    if (s->temperature != s->temperature || s->top_k < 0 || !(s->top_p > 0 && s->top_p <= 1))
        return tr_fail(TR_ERR_ARG, "sampling: temperature must be a number, top_k >= 0, top_p in (0, 1]");
    return TR_OK;
}

/* ---------------------------------------------------------------- scoring through /v1/completions */

/* The request: the whole sequence as token ids, greedy, max_tokens 1 and no echo. vLLM accepts max_tokens 0 only
 * with echo (completion/protocol.py to_sampling_params; SamplingParams rejects "max_tokens must be at least 1"),
 * and the one generated token costs no forward pass beyond the prompt's, so every request generates it;
 * prompt_logprobs K when a position inside the sequence is wanted (vLLM then skips its prefix cache for the
 * request: v1 kv_cache_manager get_computed_blocks), logprobs K when the position after it is. */
static char *score_request(const char *model, const tr_llm_score_call *call) {
    cJSON *req = cJSON_CreateObject();
    bool ok = req && json_add_ids(req, "prompt", call->tokens, call->n_tokens) &&
              cJSON_AddNumberToObject(req, "max_tokens", 1) && cJSON_AddNumberToObject(req, "temperature", 0) &&
              cJSON_AddFalseToObject(req, "stream") && cJSON_AddTrueToObject(req, "return_token_ids") &&
              cJSON_AddTrueToObject(req, "return_tokens_as_token_ids");
    if (ok && model) ok = cJSON_AddStringToObject(req, "model", model) != NULL;
    if (ok && call->first < call->n_tokens) ok = cJSON_AddNumberToObject(req, "prompt_logprobs", call->top_k) != NULL;
    if (ok && call->end == call->n_tokens + 1) ok = cJSON_AddNumberToObject(req, "logprobs", call->top_k) != NULL;
    char *s = ok ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    return s;
}

/* One scoring request and its reply; *ended: see score_reply_vllm. */
static tr_status post_score(http_client *http, const char *model, tr_llm_score_call *call, bool *ended) {
    static const char *path = "/v1/completions";
    char *body = score_request(model, call);
    if (!body) return tr_fail(TR_ERR_NOMEM, "out of memory");
    http_response resp = {0};
    tr_status st = http_request(http, "POST", path, body, http_deadline(http), call->abort_fn, call->abort_user, &resp);
    call->bytes_sent += (int64_t)strlen(body);
    call->n_requests++;
    free(body);
    call->bytes_received += (int64_t)resp.len;
    if (st != TR_OK) return st;
    if (resp.status != 200) {
        st = http_status_error(path, &resp);
        /* vLLM refuses more log-probabilities than its --max-logprobs (default 20). */
        if (resp.status == 400 && call->top_k > 20)
            tr_fail_prefix(st, "%d log-probabilities per position asked (vLLM allows 20 unless started with "
                               "--max-logprobs %d or more)", call->top_k, call->top_k);
        return st;
    }
    return score_reply_vllm(resp.body, resp.len, call, ended);
}

/* The LLM ended the text at the position after the sequence, and the server (tokroute serve) left the end of
 * sequence out of the generated token's log-probabilities: that position is read instead as a prompt position of
 * the sequence extended by one token (any: only the distribution it is drawn from is read), from prompt_logprobs. */
static tr_status score_after_end(http_client *http, const char *model, tr_llm_score_call *call) {
    const int32_t n = call->n_tokens;
    int32_t *extended = malloc(((size_t)n + 1) * sizeof *extended);
    if (!extended) return tr_fail(TR_ERR_NOMEM, "out of memory");
    memcpy(extended, call->tokens, (size_t)n * sizeof *extended);
    extended[n] = call->tokens[n - 1];
    tr_llm_score_call after = *call;
    after.tokens = extended;
    after.n_tokens = n + 1;
    after.first = n;
    after.end = n + 1;
    after.out = &call->out[n - call->first];
    after.n_evaluated = after.n_requests = after.bytes_sent = after.bytes_received = 0;
    bool ended = false;
    const tr_status st = post_score(http, model, &after, &ended);
    free(extended);
    after.out->logprob = NAN; /* the extra token is not the caller's */
    call->n_evaluated += after.n_evaluated;
    call->n_requests += after.n_requests;
    call->bytes_sent += after.bytes_sent;
    call->bytes_received += after.bytes_received;
    return st;
}

tr_status remote_score_vllm(http_client *http, const char *model, tr_llm_score_call *call) {
    bool ended = false;
    const tr_status st = post_score(http, model, call, &ended);
    return st == TR_OK && ended ? score_after_end(http, model, call) : st;
}
