/* remote.h — what the three remote backends (server.c, openai.c) share: default parameters, JSON helpers that
 * bounds-check what comes off the network, vocabulary-size discovery, sampling settings and vLLM-style scoring. */
#ifndef TR_REMOTE_H
#define TR_REMOTE_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "transport/backend.h"
#include "transport/http.h"

/* An integer field of a JSON object in [lo, hi]; false when absent, not a number, fractional or out of range. */
bool json_int(const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out);
/* Appends ids as a JSON array of numbers under key; false on allocation failure. */
bool json_add_ids(cJSON *obj, const char *key, const int32_t *ids, int32_t n);
/* Maps a non-2xx reply to a status and message: 401/403 → TR_ERR_ARG (a wrong key does not get better by retrying
 * or falling back), 5xx → TR_ERR_NETWORK, other 4xx → TR_ERR_FORMAT. */
tr_status http_status_error(const char *what, const http_response *resp);
/* Vocabulary size from GET /health ("n_vocab", tokroute serve) or GET /v1/models (data[0].meta.n_vocab,
 * llama.cpp); 0 when neither says. When the server cannot be reached or refuses the key, the last error says so
 * (otherwise it is cleared). */
int32_t remote_query_n_vocab(http_client *c);

/* The seed a sampled request at position pos sends (model/sample_math.h's position_seed), cut to 31 bits:
 * llama.cpp reads "seed" as a 32-bit integer where -1 means random. */
int64_t remote_position_seed(uint64_t seed, int32_t pos);
/* TR_OK when sampling is usable (a temperature that is a number, top_k >= 0, top_p in (0, 1]), else TR_ERR_ARG. */
tr_status remote_check_sampling(const tr_sampler_params *s);

/* tr_llm_score through an OpenAI-compatible POST /v1/completions that answers vLLM's prompt_logprobs (vLLM, and
 * tokroute serve): one request for the whole call (see remote.c). model may be NULL. */
tr_status remote_score_vllm(http_client *http, const char *model, tr_llm_score_call *call);

#endif /* TR_REMOTE_H */
