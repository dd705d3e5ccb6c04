/* remote.h — what the three remote backends (server.c, openai.c) share: default parameters, JSON helpers that
 * bounds-check what comes off the network, and vocabulary-size discovery. */
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

#endif /* TR_REMOTE_H */
