/* sglang.c — SGLang's native POST /generate as an LLM backend (sglang/srt/managers/io_struct.py, GenerateReqInput;
 * docs/references/sampling_params.md). Every call sends the whole sequence as input_ids; what keeps routed calls
 * incremental is SGLang's radix cache, which shares any prefix it has already computed with later requests on its
 * own — nothing to ask for. (Its session API, session_params with /open_session, keeps a tree of a conversation's
 * requests on the server; the radix cache gives the same reuse without per-backend server state to open, track and
 * close, so it is not used.) Replies are read by sglang_reply.c.
 *
 * Next token: max_new_tokens 1, greedy (temperature 0, which SGLang runs as top_k 1: argmax, the lowest id on
 * ties), return_logprob for the token's log-probability with logprob_start_len n - 1 so no prompt log-probability
 * is computed and the cached prefix stays usable; the id is read back as an id (output_ids), never re-tokenized.
 * After tr_llm_backend_set_sampling with temperature > 0 a call sends temperature, top_k, top_p and sampling_seed
 * (sampling_params.py), the seed derived from (seed, position) as embedded.c does (remote_position_seed), so a
 * position's draw does not depend on the calls before it; SGLang honours the seed when started with
 * --enable-deterministic-inference (its seeded sampler, layers/sampler.py multinomial_with_seed).
 *
 * Scoring: one request per sequence with logprob_start_len 0 (SGLang's default, -1, returns output tokens only),
 * top_logprobs_num K and temperature 0 (input log-probabilities are normalized with the request's temperature and
 * top_p: layers/logits_processor.py, compute_temp_top_p_normalized_logprobs; 0 runs as 1, so they are the model's
 * own). max_new_tokens is 1 when the position after the sequence is wanted (its top-K is output_top_logprobs[0]),
 * else 0 — a prefill-only request, which SGLang accepts (SamplingParams.verify: max_new_tokens >= 0). SGLang
 * reuses a cached prefix only up to logprob_start_len (sgl-project/sglang#902), so a scoring request computes its
 * whole sequence.
 *
 * SGLang does not report its vocabulary size (/get_model_info has the model path and kind only), so n_vocab is 0.
 * A padded LLM vocabulary is not restricted on the server: the wrapper refuses a generated id outside the allowed
 * range, and scoring asks for SPARE_TOP_IDS more alternatives and drops the ids outside it (TR_ERR_RANGE when too
 * many were). No lookahead or draft walks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "transport/remote.h"
#include "transport/sglang_reply.h"

/* Alternatives asked for beyond top_k when ids are restricted, to make up for the ones dropped. */
#define SPARE_TOP_IDS 8

typedef struct sglang {
    http_client *http;
    tr_sampler_params sp; /* greedy until tr_llm_backend_set_sampling says otherwise */
    int32_t n_vocab;      /* -1 until the server has answered /get_model_info */
} sglang;

/* A float as the decimal it was written as (0.7f goes out as 0.7, not 0.699999988). */
static double decimal(float x) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)x);
    return strtod(buf, NULL);
}

static char *print_and_free(cJSON *req, bool ok) {
    char *s = ok ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    return s;
}

static char *next_request(const sglang *s, const tr_llm_call *call) {
    cJSON *req = cJSON_CreateObject(), *sp = NULL;
    bool ok = req && json_add_ids(req, "input_ids", call->tokens, call->n_tokens) &&
              (sp = cJSON_AddObjectToObject(req, "sampling_params")) &&
              cJSON_AddNumberToObject(sp, "max_new_tokens", 1);
    if (ok && s->sp.temperature > 0) {
        /* SGLang: top_k -1 is off. The seed has 31 bits, which suits SGLang too (older versions put it in an
         * int32 tensor). */
        const int64_t seed = remote_position_seed(s->sp.seed, call->n_tokens);
        ok = cJSON_AddNumberToObject(sp, "temperature", decimal(s->sp.temperature)) &&
             cJSON_AddNumberToObject(sp, "top_k", s->sp.top_k > 0 ? s->sp.top_k : -1) &&
             cJSON_AddNumberToObject(sp, "top_p", s->sp.top_p < 1 ? decimal(s->sp.top_p) : 1) &&
             cJSON_AddNumberToObject(sp, "sampling_seed", (double)seed);
    } else if (ok) {
        ok = cJSON_AddNumberToObject(sp, "temperature", 0) != NULL;
    }
    ok = ok && cJSON_AddTrueToObject(req, "return_logprob") &&
         cJSON_AddNumberToObject(req, "logprob_start_len", call->n_tokens - 1) &&
         cJSON_AddFalseToObject(req, "stream");
    return print_and_free(req, ok);
}

static char *score_request(const tr_llm_score_call *call) {
    const bool after = call->end > call->n_tokens; /* the position after the sequence is wanted */
    const int32_t k = call->top_k + (call->n_allowed > 0 ? SPARE_TOP_IDS : 0);
    cJSON *req = cJSON_CreateObject(), *sp = NULL;
    const bool ok = req && json_add_ids(req, "input_ids", call->tokens, call->n_tokens) &&
                    (sp = cJSON_AddObjectToObject(req, "sampling_params")) &&
                    cJSON_AddNumberToObject(sp, "max_new_tokens", after ? 1 : 0) &&
                    cJSON_AddNumberToObject(sp, "temperature", 0) && cJSON_AddTrueToObject(req, "return_logprob") &&
                    cJSON_AddNumberToObject(req, "logprob_start_len", 0) &&
                    cJSON_AddNumberToObject(req, "top_logprobs_num", k) && cJSON_AddFalseToObject(req, "stream");
    return print_and_free(req, ok);
}

/* POST /generate; TR_OK only for a 200 reply (in resp). Counts the bytes either way. */
static tr_status post_generate(sglang *s, char *body, tr_abort_fn abort_fn, void *abort_user, http_response *resp,
                               int64_t *bytes_sent, int64_t *bytes_received) {
    if (!body) return tr_fail(TR_ERR_NOMEM, "out of memory");
    tr_status st = http_request(s->http, "POST", "/generate", body, http_deadline(s->http), abort_fn, abort_user,
                                resp);
    *bytes_sent += (int64_t)strlen(body);
    *bytes_received += (int64_t)resp->len;
    free(body);
    if (st == TR_OK && resp->status != 200) st = http_status_error("/generate", resp);
    return st;
}

static tr_status sglang_next(void *impl, tr_llm_call *call) {
    sglang *s = impl;
    http_response resp = {0};
    tr_status st = post_generate(s, next_request(s, call), call->abort_fn, call->abort_user, &resp,
                                 &call->bytes_sent, &call->bytes_received);
    return st == TR_OK ? sglang_parse_next(resp.body, resp.len, call) : st;
}

static tr_status sglang_score(void *impl, tr_llm_score_call *call) {
    sglang *s = impl;
    http_response resp = {0};
    call->n_requests = 1;
    tr_status st = post_generate(s, score_request(call), call->abort_fn, call->abort_user, &resp, &call->bytes_sent,
                                 &call->bytes_received);
    return st == TR_OK ? sglang_parse_score(resp.body, resp.len, call) : st;
}

static tr_status sglang_set_sampling(void *impl, const tr_sampler_params *sampling) {
    sglang *s = impl;
    const tr_status st = remote_check_sampling(sampling);
    if (st == TR_OK) s->sp = *sampling;
    return st;
}

/* SGLang reports no vocabulary size; asking /get_model_info still tells whether the server is there and takes the
 * key (the last error says so when not). */
static int32_t sglang_n_vocab(void *impl) {
    sglang *s = impl;
    if (s->n_vocab >= 0) return s->n_vocab;
    http_response resp = {0};
    if (http_request(s->http, "GET", "/get_model_info", NULL, http_deadline(s->http), NULL, NULL, &resp) != TR_OK)
        return 0; /* unreachable: the message stays, and a later call asks again */
    if (resp.status == 401 || resp.status == 403) {
        tr_fail(TR_ERR_ARG, "GET /get_model_info: HTTP %ld (API key missing or wrong)", resp.status);
        return 0;
    }
    tr_clear_error();
    s->n_vocab = 0;
    return 0;
}

static void sglang_free(void *impl) {
    sglang *s = impl;
    if (!s) return;
    http_client_free(s->http);
    free(s);
}

static const backend_ops sglang_ops = {.name = "sglang", .next_token = sglang_next, .n_vocab = sglang_n_vocab,
                                       .free = sglang_free, .score = sglang_score,
                                       .set_sampling = sglang_set_sampling};

tr_status tr_llm_backend_sglang(const tr_remote_params *params, tr_llm_backend **out) {
    if (!params || !out) return tr_fail(TR_ERR_ARG, "tr_llm_backend_sglang: NULL argument");
    *out = NULL;
    sglang *s = calloc(1, sizeof *s);
    if (!s) return tr_fail(TR_ERR_NOMEM, "out of memory");
    s->n_vocab = -1;
    s->sp = tr_sampler_default_params();
    s->sp.temperature = 0.0f;
    const tr_status st = http_client_create(params, &s->http);
    if (st != TR_OK) {
        sglang_free(s);
        return st;
    }
    return backend_create(&sglang_ops, s, out);
}
