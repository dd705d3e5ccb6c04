/* openai_request.c — the one reading of an OpenAI completions / chat completions body both HTTP servers share (see
 * openai_request.h for the rules). logit_bias's duplicate check marks ids in a bitmap of the vocabulary: linear in
 * the entries, where comparing each with those before it was quadratic in a body that may hold tens of thousands. */
#include "common/openai_request.h"

#include "common/platform.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* OpenAI's fields both endpoints take. */
static const char *const common_fields[] = {
    "model", "user", "n", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop",
    "logit_bias", "logprobs", "presence_penalty", "frequency_penalty", NULL};
static const char *const chat_fields[] = {"messages", "max_completion_tokens", "top_logprobs", NULL};
static const char *const completion_fields[] = {"prompt", NULL};
/* Fields of OpenAI's API (or vLLM's, or the other tokroute server's) that an endpoint not listing them does not
 * implement: refused as unsupported rather than unknown, so a client learns it is no typo. */
static const char *const unsupported_fields[] = {
    "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "response_format", "modalities",
    "audio", "prediction", "reasoning_effort", "service_tier", "store", "metadata", "web_search_options",
    "verbosity", "prompt_cache_key", "safety_identifier", "suffix", "best_of", "echo", "prompt_logprobs",
    "return_token_ids", "return_tokens_as_token_ids", "mode", "threshold", "policy", "target_routed", "max_routed",
    NULL};

static bool listed(const char *const *list, const char *name) {
    for (; list && *list; list++)
        if (strcmp(*list, name) == 0) return true;
    return false;
}

bool oai_has(const cJSON *root, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    return f && !cJSON_IsNull(f);
}

void oai_refuse(oai_error *e, const char *field, const char *server, const char *why) {
    oai_error_set(e, 400, "unsupported_field", field, "'%s' is not supported by %s: %s", field, server, why);
}

void oai_no_chat_template(oai_error *e, const char *server, const char *model) {
    oai_error_set(e, 400, "no_chat_template", "messages",
                  "the model (%.100s) has no chat template to render messages with: start %s with --chat-template "
                  "chatml|llama2|llama3|gemma|gemma4 (the format the model was trained on), or send the prompt as "
                  "text to /v1/completions", model, server);
}

/* What a JSON value is, for "..., not X": a number as written (integers as integers), else its kind. */
static void describe(const cJSON *f, char *out, size_t cap) {
    if (cJSON_IsNumber(f)) snprintf(out, cap, "%.17g", f->valuedouble);
    else if (cJSON_IsString(f)) snprintf(out, cap, "a string");
    else if (cJSON_IsBool(f)) snprintf(out, cap, "%s", cJSON_IsTrue(f) ? "true" : "false");
    else if (cJSON_IsArray(f)) snprintf(out, cap, "an array");
    else snprintf(out, cap, "an object");
}

bool oai_number_field(const cJSON *root, const char *name, double lo, double hi, bool integer, double *out,
                      oai_error *e) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (cJSON_IsNumber(f) && isfinite(f->valuedouble) && f->valuedouble >= lo && f->valuedouble <= hi &&
        (!integer || f->valuedouble == floor(f->valuedouble))) {
        *out = f->valuedouble;
        return true;
    }
    char got[48];
    describe(f, got, sizeof got);
    if (integer && lo == hi)
        oai_error_set(e, 400, "bad_request", name, "'%s' must be %.0f, not %s", name, lo, got);
    else if (integer && isinf(hi))
        oai_error_set(e, 400, "bad_request", name, "'%s' must be an integer of at least %.0f, not %s", name, lo, got);
    else if (integer)
        oai_error_set(e, 400, "bad_request", name, "'%s' must be an integer from %.0f to %.0f, not %s", name, lo, hi,
                      got);
    else oai_error_set(e, 400, "bad_request", name, "'%s' must be a number from %g to %g, not %s", name, lo, hi, got);
    return false;
}

bool oai_bool_field(const cJSON *root, const char *name, bool *out, oai_error *e) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsBool(f)) {
        oai_error_set(e, 400, "bad_request", name, "'%s' must be true or false", name);
        return false;
    }
    *out = cJSON_IsTrue(f);
    return true;
}

bool oai_fresh_seed(uint64_t *seed) {
    uint64_t v = 0;
    if (!tr_platform_random(&v, sizeof v)) return false;
    *seed = v & ((UINT64_C(1) << 53) - 1);
    return true;
}

/* Refuses the first field neither OpenAI's (for this endpoint) nor the server's own. */
static bool check_fields(const cJSON *root, const oai_endpoint *ep, oai_error *e) {
    const char *const *own = ep->chat ? chat_fields : completion_fields;
    for (const cJSON *f = root->child; f; f = f->next) {
        const char *name = f->string ? f->string : "";
        if (listed(common_fields, name) || listed(own, name) || listed(ep->extra_fields, name)) continue;
        const char *what = ep->chat ? "chat completions" : "completions";
        if (listed(unsupported_fields, name)) {
            oai_error_set(e, 400, "unsupported_field", name, "'%.60s' is not supported by %s's %s", name, ep->server,
                          what);
            return false;
        }
        char list[512] = "";
        const char *const *lists[] = {own, common_fields, ep->extra_fields};
        for (int l = 0; l < 3; l++)
            for (const char *const *k = lists[l]; k && *k; k++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", *k);
        oai_error_set(e, 400, "unknown_field", name, "unknown field '%.60s' (%s on %s take %s)", name, what,
                      ep->server, list);
        return false;
    }
    return true;
}

/* prompt: text, an array of token ids, or a one-element array of either (a batch of one). */
static bool parse_prompt(const cJSON *root, const oai_endpoint *ep, oai_request *r, oai_error *e) {
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(prompt) && prompt->child && (cJSON_IsString(prompt->child) || cJSON_IsArray(prompt->child))) {
        if (cJSON_GetArraySize(prompt) > 1) {
            oai_error_set(e, 400, "bad_request", "prompt",
                          "a batch of %d prompts: batches are not supported, send one prompt per request",
                          cJSON_GetArraySize(prompt));
            return false;
        }
        prompt = prompt->child;
    }
    if (cJSON_IsString(prompt)) {
        r->prompt_text = prompt->valuestring;
        return true;
    }
    if (!cJSON_IsArray(prompt)) {
        oai_error_set(e, 400, "bad_request", "prompt", "'prompt' must be a string or an array of token ids");
        return false;
    }
    const int n = cJSON_GetArraySize(prompt);
    if (n == 0) {
        oai_error_set(e, 400, "bad_request", "prompt", "the prompt is empty");
        return false;
    }
    if (!(r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids))) {
        oai_error_set(e, 500, "server_error", "prompt", "out of memory for %d prompt tokens", n);
        return false;
    }
    int i = 0;
    for (const cJSON *t = prompt->child; t; t = t->next, i++) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= ep->n_vocab) {
            oai_error_set(e, 400, "bad_request", "prompt", "prompt[%d] is not a token id from 0 to %d", i,
                          ep->n_vocab - 1);
            return false;
        }
        r->prompt_ids[i] = (int32_t)t->valuedouble;
    }
    r->n_prompt_ids = n;
    return true;
}

/* logit_bias: {"token id": bias from -100 to 100, ...} (OpenAI's), ids in the vocabulary, each once. */
static bool parse_logit_bias(const cJSON *root, const oai_endpoint *ep, oai_request *r, oai_error *e) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (!f || cJSON_IsNull(f)) return true;
    const int n = cJSON_GetArraySize(f);
    if (!cJSON_IsObject(f) || n > ep->n_vocab) {
        oai_error_set(e, 400, "bad_request", "logit_bias",
                      "'logit_bias' must be an object {\"token id\": bias from -100 to 100} (at most one entry per id)");
        return false;
    }
    if (n == 0) return true;
    unsigned char *seen = calloc(((size_t)ep->n_vocab + 7) / 8, 1);
    if (!seen || !(r->bias = malloc((size_t)n * sizeof *r->bias))) {
        free(seen);
        oai_error_set(e, 500, "server_error", "logit_bias", "out of memory");
        return false;
    }
    bool ok = false;
    for (const cJSON *b = f->child; b; b = b->next) {
        char *end = NULL;
        const long id = b->string && b->string[0] >= '0' && b->string[0] <= '9' ? strtol(b->string, &end, 10) : -1;
        if (id < 0 || *end || id >= ep->n_vocab) {
            oai_error_set(e, 400, "bad_request", "logit_bias", "logit_bias: '%.40s' is not a token id from 0 to %d",
                          b->string ? b->string : "", ep->n_vocab - 1);
            goto done;
        }
        if (!cJSON_IsNumber(b) || !isfinite(b->valuedouble) || b->valuedouble < -100 || b->valuedouble > 100) {
            oai_error_set(e, 400, "bad_request", "logit_bias", "logit_bias[\"%ld\"] must be a number from -100 to 100",
                          id);
            goto done;
        }
        if (seen[id / 8] & (1u << (id % 8))) {
            oai_error_set(e, 400, "bad_request", "logit_bias", "logit_bias names token %ld twice", id);
            goto done;
        }
        seen[id / 8] |= (unsigned char)(1u << (id % 8));
        r->bias[r->n_bias++] = (oai_logit_bias){(int32_t)id, (float)b->valuedouble};
    }
    ok = true;
done:
    free(seen);
    return ok;
}

/* max_tokens and (chat) max_completion_tokens: one limit under either name. */
static bool parse_max_tokens(const cJSON *root, const oai_endpoint *ep, oai_request *r, oai_error *e) {
    double a = -1, b = -1;
    if (!oai_number_field(root, "max_tokens", ep->min_max_tokens, INFINITY, true, &a, e) ||
        (ep->chat && !oai_number_field(root, "max_completion_tokens", ep->min_max_tokens, INFINITY, true, &b, e)))
        return false;
    if (a >= 0 && b >= 0 && a != b) {
        oai_error_set(e, 400, "bad_request", "max_completion_tokens",
                      "'max_tokens' (%.0f) and 'max_completion_tokens' (%.0f) differ: give one", a, b);
        return false;
    }
    r->max_tokens_field = b >= 0 ? "max_completion_tokens" : "max_tokens";
    const double v = b >= 0 ? b : a;
    r->max_tokens = v < 0 ? -1 : v > (double)INT32_MAX ? INT32_MAX : (int64_t)v;
    return true;
}

static bool parse_sampling(const cJSON *root, oai_request *r, oai_error *e) {
    double temperature = 1, top_p = 1, top_k = 0, seed = -1, n = 1;
    if (!oai_number_field(root, "temperature", 0, 2, false, &temperature, e) ||
        !oai_number_field(root, "top_p", 0, 1, false, &top_p, e) ||
        !oai_number_field(root, "top_k", -1, INT32_MAX, true, &top_k, e) ||
        !oai_number_field(root, "seed", 0, OAI_SEED_MAX, true, &seed, e) ||
        !oai_number_field(root, "n", 1, INFINITY, true, &n, e))
        return false;
    if (n != 1) {
        oai_error_set(e, 400, "bad_request", "n", "'n' must be 1: one choice per request (send %.0f requests)", n);
        return false;
    }
    /* OpenAI's penalties at 0 are what both servers do; anything else is refused by name. */
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (int k = 0; k < 2; k++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, penalties[k]);
        if (f && !cJSON_IsNull(f) && !(cJSON_IsNumber(f) && f->valuedouble == 0)) {
            oai_error_set(e, 400, "unsupported_field", penalties[k], "'%s' is not supported (only 0, no penalty)",
                          penalties[k]);
            return false;
        }
    }
    r->temperature = (float)temperature;
    r->top_p = top_p > 0 ? (float)top_p : 1.0f;
    r->top_k = top_k > 0 ? (int32_t)top_k : 0;
    r->seed_given = seed >= 0;
    if (r->seed_given) r->seed = (uint64_t)seed;
    else if (!oai_fresh_seed(&r->seed)) {
        oai_error_set(e, 500, "server_error", "seed", "no random bytes for a seed");
        return false;
    }
    return true;
}

/* stream and stream_options: include_usage only, and only with "stream": true (OpenAI's rule). */
static bool parse_stream(const cJSON *root, oai_request *r, oai_error *e) {
    if (!oai_bool_field(root, "stream", &r->stream, e)) return false;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (!so || cJSON_IsNull(so)) return true;
    if (!r->stream) {
        oai_error_set(e, 400, "bad_request", "stream_options", "'stream_options' is only allowed with \"stream\": true");
        return false;
    }
    static const char *const so_fields[] = {"include_usage", NULL};
    const char *unknown = cJSON_IsObject(so) ? oai_unknown_field(so, so_fields) : NULL;
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
    if (!cJSON_IsObject(so) || unknown || (iu && !cJSON_IsBool(iu) && !cJSON_IsNull(iu))) {
        oai_error_set(e, 400, unknown ? "unknown_field" : "bad_request", "stream_options",
                      "'stream_options' must be an object {\"include_usage\": true or false}%s%.60s%s",
                      unknown ? " (unknown field '" : "", unknown ? unknown : "", unknown ? "')" : "");
        return false;
    }
    r->include_usage = cJSON_IsTrue(iu);
    return true;
}

/* chat: logprobs true/false and top_logprobs 0..20 (which needs logprobs); completions: logprobs 0..20. */
static bool parse_logprobs(const cJSON *root, const oai_endpoint *ep, oai_request *r, oai_error *e) {
    double top = 0;
    if (!ep->chat) {
        if (!oai_number_field(root, "logprobs", 0, OAI_TOP_LOGPROBS_MAX, true, &top, e)) return false;
        r->logprobs = oai_has(root, "logprobs");
        r->top_logprobs = (int32_t)top;
        return true;
    }
    if (!oai_bool_field(root, "logprobs", &r->logprobs, e) ||
        !oai_number_field(root, "top_logprobs", 0, OAI_TOP_LOGPROBS_MAX, true, &top, e))
        return false;
    if (oai_has(root, "top_logprobs") && !r->logprobs) {
        oai_error_set(e, 400, "bad_request", "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
        return false;
    }
    r->top_logprobs = (int32_t)top;
    return true;
}

bool oai_request_parse(const char *body, size_t len, const oai_endpoint *ep, oai_request *r, oai_error *e) {
    memset(r, 0, sizeof *r);
    r->max_tokens = -1;
    r->max_tokens_field = "max_tokens";
    /* cJSON would decode \u0000 into a NUL that silently cuts a string short. */
    if (memmem(body, len, "\\u0000", 6)) {
        const char *where = ep->chat ? "messages" : "prompt";
        oai_error_set(e, 400, "bad_request", where, "strings in '%s' must not contain \\u0000", where);
        return false;
    }
    r->root = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(r->root)) {
        oai_error_set(e, 400, "bad_request", NULL, "the body is not a JSON object");
        return false;
    }
    const cJSON *root = r->root;
    if (!check_fields(root, ep, e)) return false;
    static const char *const string_fields[] = {"model", "user"};
    for (int k = 0; k < 2; k++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, string_fields[k]);
        if (f && !cJSON_IsString(f) && !cJSON_IsNull(f)) {
            oai_error_set(e, 400, "bad_request", string_fields[k], "'%s' must be a string", string_fields[k]);
            return false;
        }
    }
    if (!parse_sampling(root, r, e) || !parse_max_tokens(root, ep, r, e) || !parse_stream(root, r, e) ||
        !parse_logprobs(root, ep, r, e) || !parse_logit_bias(root, ep, r, e) ||
        !oai_stop_parse(cJSON_GetObjectItemCaseSensitive(root, "stop"), OAI_STOP_MAX, r->stop, &r->n_stop, e))
        return false;
    if (ep->chat) return oai_chat_parse(cJSON_GetObjectItemCaseSensitive(root, "messages"), &r->chat, e);
    return parse_prompt(root, ep, r, e);
}

void oai_request_free(oai_request *r) {
    cJSON_Delete(r->root);
    free(r->prompt_ids);
    oai_chat_free(&r->chat);
    oai_stop_free(r->stop, r->n_stop);
    free(r->bias);
    memset(r, 0, sizeof *r);
}
