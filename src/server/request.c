/* request.c — parsing and validating a POST /v1/route/next body (docs/protocol.md). Everything from the network is
 * checked here, before it reaches the scheduler: types, ranges, session id characters, ids in the vocabulary and
 * pos + tokens + lookahead within the session context. Errors name the field at fault; a field not in the protocol
 * is refused by name.
 *
 * Memory is bounded by what a request may hold: the body is surveyed first (json_scan.c) and refused when it holds
 * more values than a request may; the token array is counted against the context and read straight from the text
 * into an array of that size, and only the rest of the body (the array left out) becomes a cJSON tree. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/json_scan.h"
#include "server/server_internal.h"

void api_error_set(api_error *err, int status, const char *code, const char *field, const char *fmt, ...) {
    err->status = status;
    snprintf(err->code, sizeof err->code, "%s", code);
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

void route_request_free(route_request *req) {
    if (!req) return;
    free(req->tokens);
    req->tokens = NULL;
    req->n_tokens = 0;
}

/* An integer field: absent → *out unchanged; present → must be a JSON number holding an integer in [lo, hi]. */
static bool int_field(const cJSON *root, const char *name, int64_t lo, int64_t hi, int64_t *out, api_error *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble != floor(f->valuedouble)) {
        api_error_set(err, 400, "bad_request", name, "'%s' must be an integer", name);
        return false;
    }
    if (f->valuedouble < (double)lo || f->valuedouble > (double)hi) {
        api_error_set(err, 400, "bad_request", name, "'%s' must be in [%lld, %lld]", name, (long long)lo,
                      (long long)hi);
        return false;
    }
    *out = (int64_t)f->valuedouble;
    return true;
}

static bool float_field(const cJSON *root, const char *name, double lo, double hi, float *out, api_error *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble < lo || f->valuedouble > hi) {
        api_error_set(err, 400, "bad_request", name, "'%s' must be a number in [%g, %g]", name, lo, hi);
        return false;
    }
    *out = (float)f->valuedouble;
    return true;
}

bool session_id_valid(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > SESSION_ID_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return false;
    }
    return true;
}

/* "draft": [{"parent": -1, "tokens": [...]}, ...] — each branch after its parent, not empty, ids in the
 * vocabulary, at most TR_DRAFT_BRANCHES_MAX branches and TR_DRAFT_TOKENS_MAX tokens in all. */
static bool parse_draft(const cJSON *root, int32_t model_n_vocab, route_request *req, api_error *err) {
    const cJSON *draft = cJSON_GetObjectItemCaseSensitive(root, "draft");
    tr_llm_draft *d = &req->draft;
    d->n_branches = 0;
    d->start[0] = 0;
    if (!draft || cJSON_IsNull(draft)) return true;
    if (!cJSON_IsArray(draft) || cJSON_GetArraySize(draft) > TR_DRAFT_BRANCHES_MAX) {
        api_error_set(err, 400, "bad_request", "draft", "'draft' must be an array of at most %d branches",
                      TR_DRAFT_BRANCHES_MAX);
        return false;
    }
    int32_t b = 0;
    for (const cJSON *br = draft->child; br; br = br->next, b++) {
        int64_t parent = -2;
        const cJSON *toks = cJSON_GetObjectItemCaseSensitive(br, "tokens");
        if (!cJSON_IsObject(br) || !int_field(br, "parent", -1, b - 1, &parent, err) || parent < -1 ||
            !cJSON_IsArray(toks) || cJSON_GetArraySize(toks) < 1 ||
            cJSON_GetArraySize(toks) > TR_DRAFT_TOKENS_MAX - d->start[b]) {
            api_error_set(err, 400, "bad_request", "draft",
                          "draft[%d] must be {\"parent\": -1 or an earlier branch, \"tokens\": [ids]} (at most %d "
                          "tokens in all)",
                          b, TR_DRAFT_TOKENS_MAX);
            return false;
        }
        d->parent[b] = (int32_t)parent;
        int32_t at = d->start[b];
        for (const cJSON *t = toks->child; t; t = t->next) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                t->valuedouble >= model_n_vocab) {
                api_error_set(err, 400, "bad_request", "draft", "draft[%d] holds a value that is not a token id in "
                              "[0, %d)", b, model_n_vocab);
                return false;
            }
            d->tokens[at++] = (int32_t)t->valuedouble;
        }
        d->start[b + 1] = at;
    }
    d->n_branches = b;
    return true;
}

bool route_request_parse(const char *body, size_t len, int32_t model_n_vocab, int32_t n_ctx, route_request *req,
                         api_error *err) {
    memset(req, 0, sizeof *req);
    req->n_vocab = model_n_vocab;
    req->samp.top_p = 1.0f;
    /* cJSON decodes \u0000 into a NUL that would silently cut a string short ("a\u0000b" would name session
     * "a"); no field of this request may hold one. */
    if (memmem(body, len, "\\u0000", 6)) {
        api_error_set(err, 400, "bad_request", "", "strings must not contain \\u0000");
        return false;
    }
    json_survey sv;
    json_survey_text(body, len, "tokens", &sv);
    if (!sv.is_object) {
        api_error_set(err, 400, "bad_request", "", "the body is not a JSON object");
        return false;
    }
    if (sv.n_values - sv.want_values > request_values_max(n_ctx)) {
        api_error_set(err, 400, "bad_request", sv.biggest, "'%s' holds %lld JSON values: more than a request may",
                      sv.biggest, (long long)sv.biggest_values);
        return false;
    }
    int32_t n = 0;
    if (sv.want_at && json_count_elements(sv.want_at, sv.want_len, &n) == JSON_IDS_OK && n > n_ctx) {
        api_error_set(err, 400, "bad_request", "tokens", "%d tokens exceed the session context of %d", n, n_ctx);
        return false;
    }
    /* The rest of the body as a tree: the token array left out ("[]" in its place). */
    char *rest = NULL;
    size_t rest_len = len;
    if (sv.want_at) {
        const size_t head = (size_t)(sv.want_at - body), tail = len - head - sv.want_len;
        if (!(rest = malloc(head + 2 + tail))) {
            api_error_set(err, 503, "busy", "", "out of memory");
            return false;
        }
        memcpy(rest, body, head);
        memcpy(rest + head, "[]", 2);
        memcpy(rest + head + 2, sv.want_at + sv.want_len, tail);
        rest_len = head + 2 + tail;
    }
    cJSON *root = cJSON_ParseWithLength(rest ? rest : body, rest_len);
    free(rest);
    bool ok = false;
    int64_t v;
    if (!root || !cJSON_IsObject(root)) {
        api_error_set(err, 400, "bad_request", "", "the body is not a JSON object");
        goto done;
    }
    /* As the OpenAI endpoints: a field not in the protocol is refused by name, never ignored (a misspelt
     * "lookahed" would otherwise run without lookahead). */
    static const char *const fields[] = {"session", "pos", "tokens", "top_logprobs", "n_vocab", "lookahead", "draft",
                                         "temperature", "top_k", "top_p", "seed", "stream", NULL};
    const char *unknown = oai_unknown_field(root, fields);
    if (unknown) {
        api_error_set(err, 400, "unknown_field", unknown,
                      "unknown field '%.60s' (/v1/route/next takes session, pos, tokens, top_logprobs, n_vocab, "
                      "lookahead, draft, temperature, top_k, top_p, seed and stream)", unknown);
        goto done;
    }
    const cJSON *sess = cJSON_GetObjectItemCaseSensitive(root, "session");
    if (!cJSON_IsString(sess) || !session_id_valid(sess->valuestring)) {
        api_error_set(err, 400, "bad_request", "session", "'session' must be a string of 1-64 of [A-Za-z0-9_.-]");
        goto done;
    }
    snprintf(req->session, sizeof req->session, "%s", sess->valuestring);
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(root, "pos");
    if (!pos) {
        api_error_set(err, 400, "bad_request", "pos", "'pos' is required");
        goto done;
    }
    v = 0;
    if (!int_field(root, "pos", 0, n_ctx, &v, err)) goto done;
    req->pos = (int32_t)v;
    if (!sv.want_at || json_count_elements(sv.want_at, sv.want_len, &n) == JSON_IDS_NOT_ARRAY) {
        api_error_set(err, 400, "bad_request", "tokens", "'tokens' must be an array of token ids");
        goto done;
    }
    if (n > n_ctx - req->pos) {
        api_error_set(err, 400, "bad_request", "tokens", "pos %d + %d tokens exceed the session context of %d",
                      req->pos, n, n_ctx);
        goto done;
    }
    if (n > 0 && !(req->tokens = malloc((size_t)n * sizeof *req->tokens))) {
        api_error_set(err, 503, "busy", "", "out of memory");
        goto done;
    }
    int32_t at = 0;
    if (json_read_ids(sv.want_at, sv.want_len, model_n_vocab, n, req->tokens, &at) != JSON_IDS_OK) {
        api_error_set(err, 400, "bad_request", "tokens", "tokens[%d] is not a token id in [0, %d)", at, model_n_vocab);
        goto done;
    }
    req->n_tokens = n;
    if (n == 0 && req->pos == 0) {
        api_error_set(err, 400, "bad_request", "tokens", "'tokens' may be empty only when pos > 0");
        goto done;
    }
    v = 0;
    if (!int_field(root, "top_logprobs", 0, TOP_LOGPROBS_MAX, &v, err)) goto done;
    req->top_logprobs = (int32_t)v;
    v = model_n_vocab;
    if (!int_field(root, "n_vocab", 1, model_n_vocab, &v, err)) goto done;
    req->n_vocab = (int32_t)v;
    v = 0;
    if (!int_field(root, "lookahead", 0, LOOKAHEAD_MAX, &v, err)) goto done;
    req->lookahead = (int32_t)v;
    if ((int64_t)req->pos + n + 1 + req->lookahead > (int64_t)n_ctx + 1) {
        api_error_set(err, 400, "bad_request", "lookahead", "pos + tokens + lookahead exceed the session context of %d",
                      n_ctx);
        goto done;
    }
    if (!parse_draft(root, model_n_vocab, req, err)) goto done;
    if (!float_field(root, "temperature", 0, 100, &req->samp.temperature, err)) goto done;
    v = 0;
    if (!int_field(root, "top_k", 0, model_n_vocab, &v, err)) goto done;
    req->samp.top_k = (int32_t)v;
    if (!float_field(root, "top_p", 0, 1, &req->samp.top_p, err)) goto done;
    if (req->samp.top_p <= 0) req->samp.top_p = 1.0f;
    v = 0;
    if (!int_field(root, "seed", 0, (int64_t)1 << 53, &v, err)) goto done;
    req->samp.seed = (uint64_t)v;
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (stream && !cJSON_IsBool(stream)) {
        api_error_set(err, 400, "bad_request", "stream", "'stream' must be true or false");
        goto done;
    }
    req->stream = cJSON_IsTrue(stream);
    ok = true;
done:
    cJSON_Delete(root);
    if (!ok) route_request_free(req);
    return ok;
}
