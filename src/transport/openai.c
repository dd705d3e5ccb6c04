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
 * A reply carrying none of these is an error, but for one: finish_reason "stop" with no token is the LLM ending the
 * text (tokroute serve leaves the end of sequence out of token_ids and logprobs; vLLM, SGLang and llama.cpp name it),
 * answered with the end id the caller set (tr_llm_backend_set_end_id), its log-probability unknown. A padded LLM vocabulary is restricted with logit_bias (an
 * {"id": -100} map for OpenAI, [[id, false], ...] for llama.cpp) when the extra ids are few, and checked always.
 *
 * Sampling (tr_llm_backend_set_sampling; greedy until then): temperature, top_k, top_p and a seed derived from
 * (seed, position) go with every request, so the draw at a position does not depend on the calls before it (as far
 * as the engine's own generator is deterministic for a seed); lookahead is then not asked for (it is greedy).
 *
 * Scoring (tr_llm_score): OpenAI-compatible servers in one request with vLLM's prompt_logprobs (remote.c). llama.cpp's
 * server has no prompt log-probabilities, so one /completion per position p: the prompt tokens[0..p), n_predict 1,
 * n_probs K, cache_prompt (consecutive positions share the prefix: each request evaluates one new token). Its
 * completion_probabilities give the top K of the first generated position from the raw logits (post_sampling_probs
 * false: server-context.cpp populate_token_probs / get_token_probabilities), and the sampled token's own probability
 * from the same softmax over the whole vocabulary, whether it is among the top K or not. So the request forces the
 * sampled token to be tokens[p] with a logit bias of +1e6 (the bias acts on the sampler's copy of the logits, never on
 * the probabilities reported), and the actual token's log-probability is always exact, with no n_probs large enough
 * to hold it and no second request. The one gap: llama.cpp reports nothing for a token whose text ends inside a
 * UTF-8 character (it holds such text back, probabilities included), and that position fails with TR_ERR_FORMAT. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "transport/llamacpp_stream.h"
#include "transport/remote.h"
#include "transport/score_reply.h"

/* Above this many banned ids the bias list would outweigh the prompt; the reply is still checked. */
#define MAX_BIAS_IDS 4096
/* llama.cpp scoring: at most this many slots at once, and at least this many positions per slot. */
#define SCORE_SLOTS_MAX 8
#define SCORE_CHUNK_MIN 16

typedef enum api { API_OPENAI, API_LLAMACPP } api;

typedef struct prefix_backend {
    api kind;
    http_client *http;
    char *model;
    int32_t top_logprobs;
    int32_t n_vocab;          /* reported by the server; -1 before asking */
    tr_sampler_params sampling; /* temperature <= 0: greedy */
    tr_remote_params params;  /* url, key and CA (owned copies), for the scoring connections */
    http_client *score_http[SCORE_SLOTS_MAX]; /* [0] unused: the first chunk runs on http */
    int32_t n_slots;          /* llama.cpp's slots; 0 before asking */
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

/* Greedy, or the sampling settings with the seed of the position being drawn. vLLM older than 0.8 refuses top_k 0,
 * so OpenAI-compatible requests leave it out when off; llama.cpp's default is 40, so it is always sent there. */
static bool add_sampling(const prefix_backend *b, cJSON *req, int32_t pos) {
    const tr_sampler_params *s = &b->sampling;
    if (s->temperature <= 0) return cJSON_AddNumberToObject(req, "temperature", 0) != NULL;
    return cJSON_AddNumberToObject(req, "temperature", s->temperature) &&
           (s->top_k <= 0 && b->kind == API_OPENAI ? true : cJSON_AddNumberToObject(req, "top_k", s->top_k) != NULL) &&
           cJSON_AddNumberToObject(req, "top_p", s->top_p) &&
           cJSON_AddNumberToObject(req, "seed", (double)remote_position_seed(s->seed, pos));
}

/* lookahead > 0 (llama.cpp only): 1 + lookahead greedy tokens, streamed, with timings in every event. */
static char *build_request(prefix_backend *b, const tr_llm_call *call, int32_t lookahead) {
    cJSON *req = cJSON_CreateObject();
    bool ok = req && json_add_ids(req, "prompt", call->tokens, call->n_tokens) && add_sampling(b, req, call->n_tokens);
    if (ok && b->kind == API_OPENAI) {
        if (b->model) ok = cJSON_AddStringToObject(req, "model", b->model) != NULL;
        ok = ok && cJSON_AddNumberToObject(req, "max_tokens", 1) &&
             cJSON_AddNumberToObject(req, "logprobs", b->top_logprobs > 0 ? b->top_logprobs : 1) &&
             cJSON_AddFalseToObject(req, "stream") && cJSON_AddTrueToObject(req, "return_token_ids") &&
             cJSON_AddTrueToObject(req, "return_tokens_as_token_ids");
    } else if (ok) {
        ok = cJSON_AddNumberToObject(req, "n_predict", 1 + lookahead) && cJSON_AddTrueToObject(req, "cache_prompt") &&
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

/* finish_reason "stop" with no generated token: the LLM ended the text (no stop strings are sent). */
static bool ended_without_token(const cJSON *choice) {
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(choice, "token_ids");
    return cJSON_IsString(finish) && strcmp(finish->valuestring, "stop") == 0 &&
           (!ids || cJSON_IsNull(ids) || (cJSON_IsArray(ids) && cJSON_GetArraySize(ids) == 0));
}

static tr_status parse_openai(const cJSON *j, tr_llm_call *call) {
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *lps = cJSON_GetObjectItemCaseSensitive(choice, "logprobs");
    const cJSON *content0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lps, "content"), 0);
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(lps, "tokens");
    int64_t id = -1;
    if (!first_id(cJSON_GetObjectItemCaseSensitive(choice, "token_ids"), &id) &&
        !json_int(content0, "id", 0, INT32_MAX, &id) && !parse_token_id_string(cJSON_GetArrayItem(tokens, 0), &id)) {
        if (!ended_without_token(choice))
            return tr_fail(TR_ERR_FORMAT, "the reply names no generated token id (choices[0].token_ids, "
                                          "choices[0].logprobs.content[0].id or \"token_id:N\" logprob tokens)");
        if (call->end_id < 0)
            return tr_fail(TR_ERR_FORMAT, "the LLM ended the text (finish_reason \"stop\", no token) and the "
                                          "end-of-sequence id is not known (tr_llm_backend_set_end_id)");
        id = call->end_id;
        content0 = NULL; /* no log-probability to read */
    }
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
    /* Only llama.cpp's stream says each token's id as it comes; a sampled LLM's next draws are not its greedy ones. */
    if (b->kind != API_LLAMACPP || b->sampling.temperature > 0) call->lookahead = 0;
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

/* ---------------------------------------------------------------- scoring */

static tr_status openai_score(void *impl, tr_llm_score_call *call) {
    prefix_backend *b = impl;
    return remote_score_vllm(b->http, b->model, call);
}

/* One llama.cpp request: the first generated position after tokens[0..pos), its top K, the sampled token forced to
 * tokens[pos] inside the sequence. slot >= 0 pins llama.cpp's slot (id_slot). */
static char *llamacpp_score_request(const tr_llm_score_call *call, int32_t pos, int32_t slot) {
    cJSON *req = cJSON_CreateObject();
    bool ok = req && json_add_ids(req, "prompt", call->tokens, pos) && cJSON_AddNumberToObject(req, "n_predict", 1) &&
              cJSON_AddTrueToObject(req, "cache_prompt") && cJSON_AddNumberToObject(req, "temperature", 0) &&
              cJSON_AddNumberToObject(req, "n_probs", call->top_k) && cJSON_AddTrueToObject(req, "return_tokens") &&
              cJSON_AddFalseToObject(req, "stream") && (slot < 0 || cJSON_AddNumberToObject(req, "id_slot", slot));
    if (ok && pos < call->n_tokens) {
        cJSON *bias = cJSON_AddArrayToObject(req, "logit_bias"), *pair = bias ? cJSON_CreateArray() : NULL;
        ok = pair && cJSON_AddItemToArray(bias, pair); /* from here req owns pair */
        if (!ok) cJSON_Delete(pair);
        ok = ok && cJSON_AddItemToArray(pair, cJSON_CreateNumber(call->tokens[pos])) &&
             cJSON_AddItemToArray(pair, cJSON_CreateNumber(1e6));
    }
    char *s = ok ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    return s;
}

/* Positions [from, to) of a call, in order, on one connection (and one slot when pinned). */
typedef struct score_chunk {
    http_client *http;
    tr_llm_score_call *call;
    int32_t from, to, slot;
    tr_abort_fn caller_abort; /* the caller's (only the chunk run on the caller's thread polls it) */
    void *caller_user;
    atomic_bool *stop;        /* set by the first chunk that fails: the others give up */
    tr_status st;
    char msg[512];
    int64_t n_evaluated, n_requests, bytes_sent, bytes_received;
} score_chunk;

static bool chunk_abort(void *user) {
    score_chunk *c = user;
    if (c->caller_abort && c->caller_abort(c->caller_user)) atomic_store(c->stop, true);
    return atomic_load(c->stop);
}

static tr_status score_chunk_run(score_chunk *c) {
    static const char *path = "/completion";
    tr_llm_score_call *call = c->call;
    for (int32_t p = c->from; p < c->to; p++) {
        char *body = llamacpp_score_request(call, p, c->slot);
        if (!body) return tr_fail(TR_ERR_NOMEM, "out of memory");
        http_response resp = {0};
        tr_status st = http_request(c->http, "POST", path, body, http_deadline(c->http), chunk_abort, c, &resp);
        c->bytes_sent += (int64_t)strlen(body);
        c->n_requests++;
        free(body);
        c->bytes_received += (int64_t)resp.len;
        if (st != TR_OK) return st;
        if (resp.status != 200) return http_status_error(path, &resp);
        st = score_reply_llamacpp(resp.body, resp.len, call, p, &call->out[p - call->first], &c->n_evaluated);
        if (st != TR_OK) return st;
    }
    return TR_OK;
}

static void *score_chunk_thread(void *user) {
    score_chunk *c = user;
    c->st = score_chunk_run(c);
    if (c->st != TR_OK) {
        snprintf(c->msg, sizeof c->msg, "%s", tr_last_error());
        atomic_store(c->stop, true);
    }
    return NULL;
}

/* llama.cpp's slots (GET /props total_slots), asked once; 1 when it does not say. */
static int32_t llamacpp_slots(prefix_backend *b) {
    if (b->n_slots > 0) return b->n_slots;
    http_response resp = {0};
    int64_t n = 1;
    if (http_request(b->http, "GET", "/props", NULL, http_deadline(b->http), NULL, NULL, &resp) == TR_OK &&
        resp.status == 200) {
        cJSON *j = cJSON_ParseWithLength(resp.body, resp.len);
        if (!json_int(j, "total_slots", 1, INT32_MAX, &n)) n = 1;
        if (n > SCORE_SLOTS_MAX) n = SCORE_SLOTS_MAX;
        cJSON_Delete(j);
    }
    tr_clear_error();
    return b->n_slots = (int32_t)n;
}

/* One request per position. With several llama.cpp slots the positions are split into contiguous chunks, one per
 * slot, each run on its own connection and thread (the first chunk on the caller's), so the server decodes them in
 * one batch; each chunk's first request evaluates its prefix, the rest one token each. */
static tr_status llamacpp_score(void *impl, tr_llm_score_call *call) {
    prefix_backend *b = impl;
    const int32_t n_pos = call->end - call->first;
    int32_t n_chunks = llamacpp_slots(b);
    if (n_chunks > (n_pos + SCORE_CHUNK_MIN - 1) / SCORE_CHUNK_MIN) n_chunks = (n_pos + SCORE_CHUNK_MIN - 1) / SCORE_CHUNK_MIN;
    if (n_chunks < 1) n_chunks = 1;
    for (int32_t i = 1; i < n_chunks; i++) {
        const tr_status st = b->score_http[i] ? TR_OK : http_client_create(&b->params, &b->score_http[i]);
        if (st != TR_OK) return st;
    }
    atomic_bool stop = false;
    score_chunk chunks[SCORE_SLOTS_MAX];
    pthread_t threads[SCORE_SLOTS_MAX];
    bool started[SCORE_SLOTS_MAX] = {false};
    for (int32_t i = 0; i < n_chunks; i++)
        chunks[i] = (score_chunk){.http = i == 0 ? b->http : b->score_http[i], .call = call,
                                  .from = call->first + (int32_t)((int64_t)n_pos * i / n_chunks),
                                  .to = call->first + (int32_t)((int64_t)n_pos * (i + 1) / n_chunks),
                                  .slot = n_chunks > 1 ? i : -1, .stop = &stop};
    chunks[0].caller_abort = call->abort_fn;
    chunks[0].caller_user = call->abort_user;
    for (int32_t i = 1; i < n_chunks; i++) started[i] = pthread_create(&threads[i], NULL, score_chunk_thread, &chunks[i]) == 0;
    score_chunk_thread(&chunks[0]);
    for (int32_t i = 1; i < n_chunks; i++) {
        if (started[i]) pthread_join(threads[i], NULL);
        else score_chunk_thread(&chunks[i]); /* no thread: run it here */
    }
    tr_status st = TR_OK;
    const char *msg = "";
    for (int32_t i = 0; i < n_chunks; i++) {
        const score_chunk *c = &chunks[i];
        call->n_evaluated += c->n_evaluated;
        call->n_requests += c->n_requests;
        call->bytes_sent += c->bytes_sent;
        call->bytes_received += c->bytes_received;
        /* The first real failure, not a chunk stopped because another failed. */
        if (c->st != TR_OK && (st == TR_OK || (st == TR_ERR_STATE && c->st != TR_ERR_STATE))) st = c->st, msg = c->msg;
    }
    return st == TR_OK ? TR_OK : tr_fail(st, "%s", msg);
}

static tr_status prefix_set_sampling(void *impl, const tr_sampler_params *sampling) {
    prefix_backend *b = impl;
    const tr_status st = remote_check_sampling(sampling);
    if (st == TR_OK) b->sampling = *sampling;
    return st;
}

static void prefix_free(void *impl) {
    prefix_backend *b = impl;
    if (!b) return;
    http_client_free(b->http);
    for (int i = 0; i < SCORE_SLOTS_MAX; i++) http_client_free(b->score_http[i]);
    free(b->model);
    free((char *)b->params.url);
    free((char *)b->params.api_key);
    free((char *)b->params.cacert);
    free(b);
}

static const backend_ops openai_ops = {.name = "openai", .next_token = prefix_next, .n_vocab = prefix_n_vocab,
                                       .free = prefix_free, .score = openai_score,
                                       .set_sampling = prefix_set_sampling};
static const backend_ops llamacpp_ops = {.name = "llamacpp", .next_token = prefix_next, .n_vocab = prefix_n_vocab,
                                         .free = prefix_free, .score = llamacpp_score,
                                         .set_sampling = prefix_set_sampling};

/* The server's base URL: OpenAI clients are given "http://host:8000/v1" (the API's base, to which they add
 * "/completions"), tokroute's flags the server's root; both are taken, the trailing "/v1" dropped (every path here
 * starts at the root: /v1/completions, /v1/models, /health). NULL: out of memory. */
static char *openai_base_url(const char *url) {
    char *base = strdup(url);
    if (!base) return NULL;
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/') base[--n] = '\0';
    const char *host = strstr(base, "://"); /* "/v1" after a host, not the host itself */
    if (host && n >= 3 && strcmp(base + n - 3, "/v1") == 0 && base + n - 3 > host + 3) base[n - 3] = '\0';
    return base;
}

static tr_status create(api kind, const tr_remote_params *p, tr_llm_backend **out) {
    if (!p || !out) return tr_fail(TR_ERR_ARG, "remote backend: NULL argument");
    *out = NULL;
    if (p->top_logprobs < 0 || p->top_logprobs > 20) return tr_fail(TR_ERR_ARG, "top_logprobs must be in 0..20");
    prefix_backend *b = calloc(1, sizeof *b);
    if (!b) return tr_fail(TR_ERR_NOMEM, "out of memory");
    b->kind = kind;
    b->n_vocab = -1;
    b->top_logprobs = p->top_logprobs;
    b->sampling = tr_remote_default_params().sampling; /* greedy until tr_llm_backend_set_sampling */
    b->params = *p;
    b->params.url = b->params.api_key = b->params.cacert = b->params.model = NULL;
    tr_status st = TR_OK;
    if (kind == API_OPENAI && p->url && !(b->params.url = openai_base_url(p->url)))
        st = tr_fail(TR_ERR_NOMEM, "out of memory");
    tr_remote_params conn = *p;
    if (b->params.url) conn.url = b->params.url;
    if (st == TR_OK) st = http_client_create(&conn, &b->http);
    if (st == TR_OK && p->model && !(b->model = strdup(p->model))) st = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (st == TR_OK && ((p->url && !b->params.url && !(b->params.url = strdup(p->url))) ||
                        (p->api_key && !(b->params.api_key = strdup(p->api_key))) ||
                        (p->cacert && !(b->params.cacert = strdup(p->cacert)))))
        st = tr_fail(TR_ERR_NOMEM, "out of memory");
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
