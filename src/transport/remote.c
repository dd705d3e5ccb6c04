/* remote.c — helpers shared by the remote backends: default parameters, checked JSON access, status mapping and
 * the vocabulary-size query. */
#include "transport/remote.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

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
