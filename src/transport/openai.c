/* openai.c — two backends for engines that take the whole prefix on every call and keep their own prefix cache:
 * OpenAI-compatible POST /v1/completions (vLLM, SGLang, llama.cpp's server, tokroute serve) and llama.cpp's
 * native POST /completion. Each call sends the token-id prompt and asks for one greedy token — or, to llama.cpp with
 * lookahead wanted, for 1 + K greedy tokens streamed (llamacpp_stream.c): the answer is handed on as soon as it
 * arrives and the rest as lookahead.
 *
 * The generated id is always read back as an id, never by tokenizing text (text → ids does not round-trip):
 *   - choices[0].token_ids                     tokroute serve; vLLM ≥ 0.10.2 with "return_token_ids": true
 *   - choices[0].logprobs.content[0].id        llama.cpp's server
 *   - choices[0].logprobs.tokens[0] "token_id:N"  vLLM and SGLang with "return_tokens_as_token_ids": true
 *   - tokens[0] / completion_probabilities[0].id  llama.cpp's /completion ("return_tokens": true)
 * A reply carrying none of these is an error. A padded LLM vocabulary is restricted with logit_bias (an
 * {"id": -100} map for OpenAI, [[id, false], ...] for llama.cpp) when the extra ids are few, and checked always. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "transport/llamacpp_stream.h"
#include "transport/remote.h"

/* Above this many banned ids the bias list would outweigh the prompt; the reply is still checked. */
#define MAX_BIAS_IDS 4096

typedef enum api { API_OPENAI, API_LLAMACPP } api;

typedef struct prefix_backend {
    api kind;
    http_client *http;
    char *model;
    int32_t top_logprobs;
    int32_t n_vocab;          /* reported by the server; -1 before asking */
} prefix_backend;

static int32_t prefix_n_vocab(void *impl) {
    prefix_backend *b = impl;
    if (b->n_vocab < 0) b->n_vocab = remote_query_n_vocab(b->http);
    return b->n_vocab;
}

static bool add_bias(prefix_backend *b, cJSON *req, int32_t n_allowed) {
    /* Only a size already known (tr_llm_backend_n_vocab, which generate calls at start-up): querying here would
     * spend time outside the call's deadline. */
    if (n_allowed <= 0 || b->n_vocab <= 0) return true;
    const int32_t n_vocab = b->n_vocab;
    if (n_vocab <= n_allowed || n_vocab - n_allowed > MAX_BIAS_IDS) return true;
    if (b->kind == API_OPENAI) {
        cJSON *bias = cJSON_AddObjectToObject(req, "logit_bias");
        char key[16];
        for (int32_t id = n_allowed; bias && id < n_vocab; id++) {
            snprintf(key, sizeof key, "%d", id);
            if (!cJSON_AddNumberToObject(bias, key, -100)) return false;
        }
        return bias != NULL;
    }
    cJSON *bias = cJSON_AddArrayToObject(req, "logit_bias");
    for (int32_t id = n_allowed; bias && id < n_vocab; id++) {
        cJSON *pair = cJSON_CreateArray();
        if (!pair) return false;
        cJSON_AddItemToArray(pair, cJSON_CreateNumber(id));
        cJSON_AddItemToArray(pair, cJSON_CreateFalse());
        cJSON_AddItemToArray(bias, pair);
    }
    return bias != NULL;
}

/* lookahead > 0 (llama.cpp only): 1 + lookahead greedy tokens, streamed, with timings in every event. */
static char *build_request(prefix_backend *b, const tr_llm_call *call, int32_t lookahead) {
    cJSON *req = cJSON_CreateObject();
    bool ok = req && json_add_ids(req, "prompt", call->tokens, call->n_tokens);
    if (ok && b->kind == API_OPENAI) {
        if (b->model) ok = cJSON_AddStringToObject(req, "model", b->model) != NULL;
        ok = ok && cJSON_AddNumberToObject(req, "max_tokens", 1) && cJSON_AddNumberToObject(req, "temperature", 0) &&
             cJSON_AddNumberToObject(req, "logprobs", b->top_logprobs > 0 ? b->top_logprobs : 1) &&
             cJSON_AddFalseToObject(req, "stream") && cJSON_AddTrueToObject(req, "return_token_ids") &&
             cJSON_AddTrueToObject(req, "return_tokens_as_token_ids");
    } else if (ok) {
        ok = cJSON_AddNumberToObject(req, "n_predict", 1 + lookahead) && cJSON_AddTrueToObject(req, "cache_prompt") &&
             cJSON_AddNumberToObject(req, "temperature", 0) &&
             cJSON_AddNumberToObject(req, "n_probs", b->top_logprobs > 0 ? b->top_logprobs : 1) &&
             cJSON_AddTrueToObject(req, "return_tokens") && cJSON_AddBoolToObject(req, "stream", lookahead > 0) &&
             (lookahead == 0 || cJSON_AddTrueToObject(req, "timings_per_token"));
    }
    ok = ok && add_bias(b, req, call->n_allowed);
    char *s = ok ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    return s;
}

/* "token_id:123" (vLLM/SGLang return_tokens_as_token_ids). */
static bool parse_token_id_string(const cJSON *v, int64_t *id) {
    if (!cJSON_IsString(v) || strncmp(v->valuestring, "token_id:", 9) != 0) return false;
    char *end;
    const long long x = strtoll(v->valuestring + 9, &end, 10);
    if (*end || end == v->valuestring + 9 || x < 0 || x > INT32_MAX) return false;
    *id = x;
    return true;
}

static bool first_id(const cJSON *arr, int64_t *id) {
    const cJSON *v = cJSON_GetArrayItem(arr, 0);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= INT32_MAX) ||
        v->valuedouble != floor(v->valuedouble))
        return false;
    *id = (int64_t)v->valuedouble;
    return true;
}

static void read_logprob(const cJSON *entry, float *logprob) {
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(entry, "logprob");
    if (cJSON_IsNumber(lp)) *logprob = (float)lp->valuedouble;
}

static tr_status parse_openai(const cJSON *j, tr_llm_call *call) {
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *lps = cJSON_GetObjectItemCaseSensitive(choice, "logprobs");
    const cJSON *content0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lps, "content"), 0);
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(lps, "tokens");
    int64_t id = -1;
    if (!first_id(cJSON_GetObjectItemCaseSensitive(choice, "token_ids"), &id) &&
        !json_int(content0, "id", 0, INT32_MAX, &id) && !parse_token_id_string(cJSON_GetArrayItem(tokens, 0), &id))
        return tr_fail(TR_ERR_FORMAT, "the reply names no generated token id (choices[0].token_ids, "
                                      "choices[0].logprobs.content[0].id or \"token_id:N\" logprob tokens)");
    call->id = (int32_t)id;
    if (content0) read_logprob(content0, &call->logprob);
    const cJSON *tlp = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lps, "token_logprobs"), 0);
    if (cJSON_IsNumber(tlp)) call->logprob = (float)tlp->valuedouble;
    /* Work done: llama.cpp reports timings.prompt_n; OpenAI-style usage counts cached prompt tokens apart. */
    int64_t n = 0, cached = 0;
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (json_int(cJSON_GetObjectItemCaseSensitive(j, "timings"), "prompt_n", 0, INT32_MAX, &n)) {
        call->n_evaluated = n;
    } else if (json_int(usage, "prompt_tokens", 0, INT32_MAX, &n)) {
        json_int(cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens_details"), "cached_tokens", 0, n, &cached);
        call->n_evaluated = n - cached;
    }
    return TR_OK;
}

static tr_status parse_llamacpp(const cJSON *j, tr_llm_call *call) {
    const cJSON *probs0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "completion_probabilities"), 0);
    int64_t id = -1;
    if (!first_id(cJSON_GetObjectItemCaseSensitive(j, "tokens"), &id) && !json_int(probs0, "id", 0, INT32_MAX, &id))
        return tr_fail(TR_ERR_FORMAT, "the reply names no generated token id (tokens, completion_probabilities)");
    call->id = (int32_t)id;
    if (probs0) read_logprob(probs0, &call->logprob);
    int64_t n = 0;
    if (json_int(cJSON_GetObjectItemCaseSensitive(j, "timings"), "prompt_n", 0, INT32_MAX, &n)) call->n_evaluated = n;
    else if (json_int(j, "tokens_evaluated", 0, INT32_MAX, &n)) call->n_evaluated = n;
    return TR_OK;
}

static tr_status prefix_next(void *impl, tr_llm_call *call) {
    prefix_backend *b = impl;
    const char *path = b->kind == API_OPENAI ? "/v1/completions" : "/completion";
    if (b->kind != API_LLAMACPP) call->lookahead = 0; /* only llama.cpp's stream says each token's id as it comes */
    const double deadline = http_deadline(b->http);
    for (;;) {
        char *body = build_request(b, call, call->lookahead);
        if (!body) return tr_fail(TR_ERR_NOMEM, "out of memory");
        llamacpp_stream ls = {.call = call};
        /* A left stream is cut: llama.cpp stops generating when its client hangs up (it would otherwise finish the
         * lookahead before serving the next request on a single slot). */
        const http_lines lines = {.on_line = llamacpp_stream_line, .wanted = llamacpp_stream_wanted, .user = &ls,
                                  .cut_when_left = true};
        http_response resp = {0};
        tr_status st = http_request_lines(b->http, "POST", path, body, deadline, call->abort_fn, call->abort_user,
                                          call->lookahead > 0 ? &lines : NULL, &resp);
        free(body);
        if (ls.answered) { /* the call has succeeded, whatever came after the answer */
            if (!ls.done) call->n_evaluated += ls.n_lookahead; /* surely evaluated: the answer, la[0..n-1) */
            tr_clear_error();
            return TR_OK;
        }
        if (st != TR_OK) return st;
        if (resp.status == 200 && resp.streamed) { /* a stream without the answer: ask for it alone */
            call->lookahead = 0;
            continue;
        }
        if (resp.status != 200) return http_status_error(path, &resp);
        cJSON *j = cJSON_ParseWithLength(resp.body, resp.len);
        if (!j) return tr_fail(TR_ERR_FORMAT, "%s: the reply is not JSON", path);
        st = b->kind == API_OPENAI ? parse_openai(j, call) : parse_llamacpp(j, call);
        cJSON_Delete(j);
        return st;
    }
}

static void prefix_free(void *impl) {
    prefix_backend *b = impl;
    if (!b) return;
    http_client_free(b->http);
    free(b->model);
    free(b);
}

static const backend_ops openai_ops = {.name = "openai", .next_token = prefix_next,
                                       .n_vocab = prefix_n_vocab, .free = prefix_free};
static const backend_ops llamacpp_ops = {.name = "llamacpp", .next_token = prefix_next,
                                         .n_vocab = prefix_n_vocab, .free = prefix_free};

static tr_status create(api kind, const tr_remote_params *p, tr_llm_backend **out) {
    if (!p || !out) return tr_fail(TR_ERR_ARG, "remote backend: NULL argument");
    *out = NULL;
    if (p->top_logprobs < 0 || p->top_logprobs > 20) return tr_fail(TR_ERR_ARG, "top_logprobs must be in 0..20");
    prefix_backend *b = calloc(1, sizeof *b);
    if (!b) return tr_fail(TR_ERR_NOMEM, "out of memory");
    b->kind = kind;
    b->n_vocab = -1;
    b->top_logprobs = p->top_logprobs;
    tr_status st = http_client_create(p, &b->http);
    if (st == TR_OK && p->model && !(b->model = strdup(p->model))) st = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (st != TR_OK) {
        prefix_free(b);
        return st;
    }
    return backend_create(kind == API_OPENAI ? &openai_ops : &llamacpp_ops, b, out);
}

tr_status tr_llm_backend_openai(const tr_remote_params *params, tr_llm_backend **out) {
    return create(API_OPENAI, params, out);
}

tr_status tr_llm_backend_llamacpp(const tr_remote_params *params, tr_llm_backend **out) {
    return create(API_LLAMACPP, params, out);
}
