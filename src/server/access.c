/* access.c — who may call tr_server and what each caller may touch. Every request presents one of the API keys
 * (tr_server_params.api_key and api_keys: `--api-key`, repeatable, and `--api-key-file`) as "Authorization: Bearer
 * KEY"; the scheme is matched in any case (RFC 6750) and the keys are compared in constant time, all of them every
 * time, so neither a key's bytes nor which key matched show in the timing. The key a request presents is its
 * owner: with several keys a client's session id lives in the scheduler as "~OWNER~id", so another key's request
 * naming the same id reaches a different (new or absent) session: it can neither see nor end it, and gets the 404
 * or 409 an unknown session gets, which confirms nothing. `--metrics-key` puts GET /metrics behind a key of its
 * own (API keys then do not open it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/http_internal.h"

struct access_ctl {
    char **keys;
    int32_t n_keys;
    char *metrics_key;
};

#define KEYS_MAX 100000 /* the owner index fits "~99999~" within SESSION_NAME_MAX */

static tr_status add_key(access_ctl *a, const char *key) {
    if (!key || !key[0]) return TR_OK;
    for (const char *p = key; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p == 0x7f)
            return tr_fail(TR_ERR_ARG, "API key %d holds a space or a control character", a->n_keys + 1);
    if (a->n_keys >= KEYS_MAX) return tr_fail(TR_ERR_ARG, "more than %d API keys", KEYS_MAX);
    char **k = realloc(a->keys, (size_t)(a->n_keys + 1) * sizeof *k);
    if (!k) return tr_fail(TR_ERR_NOMEM, "out of memory");
    a->keys = k;
    if (!(a->keys[a->n_keys] = strdup(key))) return tr_fail(TR_ERR_NOMEM, "out of memory");
    a->n_keys++;
    return TR_OK;
}

tr_status access_create(const tr_server_params *p, access_ctl **out) {
    *out = NULL;
    if (p->n_api_keys < 0 || (p->n_api_keys > 0 && !p->api_keys))
        return tr_fail(TR_ERR_ARG, "api_keys: %d keys and no list", p->n_api_keys);
    access_ctl *a = calloc(1, sizeof *a);
    if (!a) return tr_fail(TR_ERR_NOMEM, "out of memory");
    tr_status st = add_key(a, p->api_key);
    for (int32_t i = 0; st == TR_OK && i < p->n_api_keys; i++) st = add_key(a, p->api_keys[i]);
    if (st == TR_OK && p->metrics_key && p->metrics_key[0] && !(a->metrics_key = strdup(p->metrics_key)))
        st = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (st != TR_OK) {
        access_free(a);
        return st;
    }
    *out = a;
    return TR_OK;
}

void access_free(access_ctl *a) {
    if (!a) return;
    for (int32_t i = 0; i < a->n_keys; i++) free(a->keys[i]);
    free(a->keys);
    free(a->metrics_key);
    free(a);
}

int32_t access_n_keys(const access_ctl *a) { return a->n_keys; }

int32_t access_key_of(const access_ctl *a, const char *authorization) {
    if (a->n_keys == 0) return 0;
    const char *got = httpd_bearer_token(authorization);
    if (!got) return -1;
    int32_t owner = -1;
    for (int32_t i = 0; i < a->n_keys; i++) /* every key, whichever matches */
        if (httpd_key_equal(a->keys[i], got) && owner < 0) owner = i;
    return owner;
}

bool access_metrics_allowed(const access_ctl *a, const char *authorization) {
    if (!a->metrics_key) return access_key_of(a, authorization) >= 0;
    const char *got = httpd_bearer_token(authorization);
    return got && httpd_key_equal(a->metrics_key, got);
}

void access_session_name(const access_ctl *a, int32_t owner, const char *id, char *out, size_t cap) {
    if (a->n_keys > 1) snprintf(out, cap, "~%d~%s", owner, id);
    else snprintf(out, cap, "%s", id);
}

const char *access_client_id(const char *name) {
    if (name[0] != '~') return name;
    const char *end = strchr(name + 1, '~');
    return end ? end + 1 : name;
}
